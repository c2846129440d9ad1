//! `browse`'s state and what each key does to it, with no terminal: the moment shown (a
//! time-bucket, the end or an out-of-memory error), the timeline's zoom, the tree at the
//! moment and what is open and selected in it, the search, the view and the overlays. The
//! tests drive it with keys and read its screens (`draw`).

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::moment::{Align, Moment, Other};
use super::names::Names;
use super::sites::{self, LeakRow, SiteRow};
use super::steps;
use super::story::Story;
use super::tree::{self, Openness, Row, Tree};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Tree,
    Sites,
    Leaks,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    None,
    Help,
    Details,
    /// Typing a search.
    Search(String),
}

/// What the user set up, kept when the traces are read again (`r`, or following a trace
/// being written): what is open, the view, the search, the focus, the selection, and the
/// moment (the peak stays the peak, the end the end, another moment its time).
pub struct Kept {
    open: Openness,
    view: View,
    query: String,
    focus: Option<u64>,
    selected_id: Option<u64>,
    align: Align,
    to_capacity: bool,
    moment: KeptMoment,
}

enum KeptMoment {
    Peak,
    End,
    Oom(usize),
    At(u64),
}

/// What the key asked the loop to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
    /// Read the trace again (`r`: a trace still being written).
    Reload,
}

pub struct App<'a> {
    pub story: Story,
    pub names: Names<'a>,
    /// `train.py 4 (pid 42)`.
    pub program: String,
    pub leaks: Vec<LeakRow>,
    /// What reading said (a truncated trace, a reload).
    pub message: Option<String>,
    pub moment: Moment,
    /// The chart's first bucket and buckets per column (a power of two).
    pub first: usize,
    pub per_column: usize,
    /// The chart's columns and the list's rows, as last drawn.
    pub columns: usize,
    pub list_rows: usize,
    /// Scale the chart to the device's memory.
    pub to_capacity: bool,
    pub view: View,
    pub overlay: Overlay,
    pub tree: Tree,
    pub open: Openness,
    pub focus: Option<u64>,
    pub query: String,
    pub matches: Option<Vec<bool>>,
    pub sites: Vec<SiteRow>,
    /// The selected row and the first row shown, per view.
    pub selected: [usize; 3],
    pub scroll: [usize; 3],
    /// The selected tree node's id, kept across moments.
    selected_id: Option<u64>,
    /// The second trace, side by side (`browse A B`), and how its moment follows.
    pub other: Option<Other>,
    pub align: Align,
    /// A trace is still being written (or was cut short): `browse` follows it.
    pub incomplete: bool,
}

impl<'a> App<'a> {
    pub fn new(story: Story, names: Names<'a>, program: String, leaks: Vec<LeakRow>) -> Self {
        let mut app = App {
            story,
            names,
            program,
            leaks,
            message: None,
            moment: Moment::End,
            first: 0,
            per_column: 1,
            columns: 70,
            list_rows: 10,
            to_capacity: false,
            view: View::Tree,
            overlay: Overlay::None,
            tree: Tree::default(),
            open: Openness::default(),
            focus: None,
            query: String::new(),
            matches: None,
            sites: Vec::new(),
            selected: [0; 3],
            scroll: [0; 3],
            selected_id: None,
            other: None,
            align: Align::Time,
            incomplete: false,
        };
        app.fit_zoom();
        let peak = app.story.peak_bucket();
        app.go(Moment::Bucket(peak));
        app
    }

    /// Shows `story` beside the first trace (its names are `names`' side 1; the leaks
    /// given to `new` already have both sides).
    pub fn compare(&mut self, story: Story, program: String) {
        let moment = Moment::Bucket(story.peak_bucket());
        self.other = Some(Other {
            story,
            program,
            moment,
        });
        self.go_both(self.moment, Some(moment));
    }

    /// What to keep when the traces are read again.
    pub fn kept(&self) -> Kept {
        let moment = match self.moment {
            Moment::Bucket(b) if b == self.story.peak_bucket() => KeptMoment::Peak,
            Moment::End => KeptMoment::End,
            Moment::Oom(n) => KeptMoment::Oom(n),
            m => KeptMoment::At(m.time(&self.story)),
        };
        Kept {
            open: self.open.clone(),
            view: self.view,
            query: self.query.clone(),
            focus: self.focus,
            selected_id: self.selected_id,
            align: self.align,
            to_capacity: self.to_capacity,
            moment,
        }
    }

    /// Sets up what `kept` kept, on the traces read again.
    pub fn restore(&mut self, kept: Kept) {
        self.open = kept.open;
        self.view = kept.view;
        self.query = kept.query;
        self.focus = kept.focus;
        self.selected_id = kept.selected_id;
        self.align = kept.align;
        self.to_capacity = kept.to_capacity && self.story.capacity.is_some();
        let moment = match kept.moment {
            KeptMoment::Peak => Moment::Bucket(self.story.peak_bucket()),
            KeptMoment::End => Moment::End,
            KeptMoment::Oom(n) if n < self.story.ooms.len() => Moment::Oom(n),
            KeptMoment::Oom(_) => Moment::End,
            KeptMoment::At(t) => Moment::Bucket(self.story.bucket_of(t)),
        };
        self.go(moment);
    }

    /// Sets the chart's width and the list's height (from `draw`): the zoom that shows the
    /// whole trace when the width changes.
    pub fn layout(&mut self, columns: usize, list_rows: usize) {
        let columns = columns.max(1);
        if columns != self.columns {
            self.columns = columns;
            self.fit_zoom();
        }
        self.list_rows = list_rows.max(1);
        self.keep_visible();
    }

    fn buckets(&self) -> usize {
        self.story.buckets.len().max(1)
    }

    /// Zoomed out to the whole trace.
    fn fit_zoom(&mut self) {
        self.per_column = super::chart::per_column_to_fit(self.buckets(), self.columns);
        self.first = 0;
        self.pan_to_cursor();
    }

    /// The bucket the cursor is on.
    pub fn cursor(&self) -> usize {
        self.moment.bucket(&self.story)
    }

    /// The cursor's column on the chart (it may be off the chart while panning).
    pub fn cursor_column(&self) -> Option<usize> {
        let c = self.cursor();
        (c >= self.first)
            .then(|| (c - self.first) / self.per_column)
            .filter(|&col| col < self.columns)
    }

    /// The first trace's chart as shown.
    pub fn chart(&self) -> super::chart::Chart<'_> {
        super::chart::Chart {
            story: &self.story,
            first: self.first,
            per_column: self.per_column,
            columns: self.columns,
            cursor: self.cursor_column(),
            to_capacity: self.to_capacity,
            name: if self.other.is_some() { "A" } else { "0" },
        }
    }

    /// The buckets of column `col`.
    pub fn column(&self, col: usize) -> std::ops::Range<usize> {
        self.chart().column(col)
    }

    /// The bucket where column `col`'s primary series was highest.
    fn column_moment(&self, col: usize) -> Option<usize> {
        let range = self.column(col);
        let mut best: Option<usize> = None;
        for i in range {
            if best.is_none_or(|b| {
                self.story.buckets[i].primary_max > self.story.buckets[b].primary_max
            }) {
                best = Some(i);
            }
        }
        best
    }

    fn pan_to_cursor(&mut self) {
        let c = self.cursor();
        let span = self.per_column * self.columns;
        if c < self.first || c >= self.first + span {
            // Centre it, on a column boundary.
            let half = (span / 2) / self.per_column * self.per_column;
            self.first = c.saturating_sub(half) / self.per_column * self.per_column;
        }
    }

    /// Shows `moment`: the tree at it is rebuilt, what was open and selected kept; the
    /// second trace's moment follows (`align`).
    pub fn go(&mut self, moment: Moment) {
        self.go_both(moment, None);
    }

    /// The second trace's moment for the first's `moment`, as `align` says.
    fn aligned(&self, moment: Moment, other: &Story) -> Moment {
        match moment {
            Moment::End => Moment::End,
            Moment::Oom(n) if n < other.ooms.len() => Moment::Oom(n),
            m => match self.align {
                Align::Time => Moment::Bucket(other.bucket_of(m.time(&self.story))),
                Align::Events => {
                    let b = m.bucket(&self.story);
                    Moment::Bucket(other.bucket_of_change(self.story.changes_before(b)))
                }
                Align::Steps => {
                    let t = m.time(&self.story);
                    Moment::Bucket(match steps::align(&self.story.steps, &other.steps, t) {
                        Some(theirs) => {
                            let (from, to) =
                                steps::stretch(&other.steps, theirs).expect("aligned on its steps");
                            other.bucket_within(theirs, from, to)
                        }
                        None => other.bucket_of(t),
                    })
                }
            },
        }
    }

    /// `go`, with the second trace at `other` (its own peak, say) instead of aligned.
    fn go_both(&mut self, moment: Moment, other: Option<Moment>) {
        self.moment = moment;
        self.pan_to_cursor();
        let mut sides = vec![moment.sites(&self.story)];
        if let Some(o) = &self.other {
            let m = other.unwrap_or_else(|| self.aligned(moment, &o.story));
            sides.push(m.sites(&o.story));
            self.other.as_mut().expect("just seen").moment = m;
        }
        self.tree = Tree::build(&sides, &mut self.names, self.story.tensors);
        self.sites = sites::top(&sides, &mut self.names, self.story.tensors);
        self.refresh_search();
        self.reselect();
    }

    /// The moment's time, for the status line.
    pub fn moment_time(&self) -> u64 {
        self.moment.time(&self.story)
    }

    pub fn rows(&self) -> Vec<Row> {
        let top = self.focus.and_then(|id| self.tree.by_id(id));
        tree::rows(&self.tree, &self.open, top, self.matches.as_deref())
    }

    fn view_index(&self) -> usize {
        match self.view {
            View::Tree => 0,
            View::Sites => 1,
            View::Leaks => 2,
        }
    }

    pub fn list_len(&self) -> usize {
        match self.view {
            View::Tree => self.rows().len(),
            View::Sites => self.sites.len(),
            View::Leaks => self.leaks.len(),
        }
    }

    /// The selected tree node, if the tree is shown and has rows.
    pub fn selected_node(&self) -> Option<usize> {
        let rows = self.rows();
        rows.get(self.selected[0].min(rows.len().saturating_sub(1)))
            .map(|r| r.node)
    }

    /// After a rebuild: the selected node by its id, else its nearest shown ancestor.
    fn reselect(&mut self) {
        let rows = self.rows();
        if let Some(id) = self.selected_id {
            let mut want = self.tree.by_id(id);
            while let Some(n) = want {
                if let Some(i) = rows.iter().position(|r| r.node == n) {
                    self.selected[0] = i;
                    self.keep_visible();
                    return;
                }
                want = self.tree.nodes[n].parent;
            }
        }
        self.selected[0] = self.selected[0].min(rows.len().saturating_sub(1));
        self.remember();
        self.keep_visible();
    }

    fn remember(&mut self) {
        if self.view == View::Tree {
            self.selected_id = self.selected_node().map(|n| self.tree.nodes[n].id);
        }
    }

    fn keep_visible(&mut self) {
        let v = self.view_index();
        let len = self.list_len();
        self.selected[v] = self.selected[v].min(len.saturating_sub(1));
        let rows = self.list_rows.max(1);
        if self.selected[v] < self.scroll[v] {
            self.scroll[v] = self.selected[v];
        } else if self.selected[v] >= self.scroll[v] + rows {
            self.scroll[v] = self.selected[v] + 1 - rows;
        }
        self.scroll[v] = self.scroll[v].min(len.saturating_sub(rows));
    }

    fn select(&mut self, delta: isize) {
        let v = self.view_index();
        let len = self.list_len() as isize;
        let at = (self.selected[v] as isize + delta).clamp(0, (len - 1).max(0));
        self.selected[v] = at as usize;
        self.remember();
        self.keep_visible();
    }

    fn refresh_search(&mut self) {
        self.matches =
            (!self.query.is_empty()).then(|| tree::search(&self.tree, &self.names, &self.query));
    }

    /// Selects the next (or previous) row that matches the search.
    fn next_match(&mut self, forward: bool) {
        if self.view != View::Tree {
            return;
        }
        let rows = self.rows();
        let n = rows.len();
        if n == 0 {
            return;
        }
        let from = self.selected[0];
        for step in 1..=n {
            let i = if forward {
                (from + step) % n
            } else {
                (from + n - step % n) % n
            };
            if rows[i].matched {
                self.selected[0] = i;
                self.remember();
                self.keep_visible();
                return;
            }
        }
        self.message = Some(format!("no frame matches {:?}", self.query));
    }

    fn move_cursor(&mut self, columns: isize) {
        let col = match self.cursor_column() {
            Some(c) => c as isize,
            None => 0,
        };
        let target = col + columns;
        let last_col = ((self.buckets() - 1) / self.per_column) as isize;
        let first_col = (self.first / self.per_column) as isize;
        let abs = (first_col + target).clamp(0, last_col) as usize;
        let local = abs as isize - first_col;
        if local < 0 || local >= self.columns as isize {
            // Pan by whole columns to bring it in.
            let new_first_col = if local < 0 {
                abs
            } else {
                abs + 1 - self.columns
            };
            self.first = new_first_col * self.per_column;
        }
        let col = abs - self.first / self.per_column;
        if let Some(b) = self.column_moment(col) {
            self.go(Moment::Bucket(b));
        }
    }

    fn zoom(&mut self, into: bool) {
        let c = self.cursor();
        if into {
            if self.per_column == 1 {
                self.message = Some("zoomed in to the trace's finest buckets".to_string());
                return;
            }
            self.per_column /= 2;
        } else {
            if self.per_column * self.columns >= self.buckets() {
                self.message = Some("the whole trace is shown".to_string());
                return;
            }
            self.per_column *= 2;
        }
        // The cursor's column in the middle.
        let span = self.per_column * self.columns;
        let start = c.saturating_sub(span / 2) / self.per_column * self.per_column;
        let max_start = self
            .buckets()
            .saturating_sub(span)
            .div_ceil(self.per_column)
            * self.per_column;
        self.first = start.min(max_start);
    }

    /// Applies one key.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if let Overlay::Search(text) = &mut self.overlay {
            match key.code {
                KeyCode::Enter => {
                    self.query = std::mem::take(text);
                    self.overlay = Overlay::None;
                    self.view = View::Tree;
                    self.refresh_search();
                    self.selected[0] = 0;
                    self.next_match(true);
                    if self.rows().first().is_some_and(|r| r.matched) {
                        self.selected[0] = 0;
                    }
                    self.remember();
                    self.keep_visible();
                }
                KeyCode::Esc => self.overlay = Overlay::None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => {}
            }
            return Action::Continue;
        }
        self.message = None;
        if self.overlay != Overlay::None {
            // Any key closes help and details; q still quits.
            self.overlay = Overlay::None;
            return if key.code == KeyCode::Char('q') {
                Action::Quit
            } else {
                Action::Continue
            };
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('r') => return Action::Reload,
            KeyCode::Char('?') => self.overlay = Overlay::Help,
            KeyCode::Left | KeyCode::Char('h') => self.move_cursor(-1),
            KeyCode::Right | KeyCode::Char('l') => self.move_cursor(1),
            KeyCode::Char('H') => self.move_cursor(-10),
            KeyCode::Char('L') => self.move_cursor(10),
            KeyCode::Char('+') | KeyCode::Char('=') => self.zoom(true),
            KeyCode::Char('-') => self.zoom(false),
            KeyCode::Char('p') => {
                let theirs = (self.other.as_ref()).map(|o| Moment::Bucket(o.story.peak_bucket()));
                self.go_both(Moment::Bucket(self.story.peak_bucket()), theirs);
            }
            KeyCode::Char('a') if self.other.is_some() => {
                self.align = match self.align {
                    Align::Time => Align::Events,
                    Align::Events if !self.story.steps.is_empty() => Align::Steps,
                    Align::Events | Align::Steps => Align::Time,
                };
                self.message = Some(match self.align {
                    Align::Time => "the second trace follows by time".to_string(),
                    Align::Events => "the second trace follows by event".to_string(),
                    Align::Steps => "the second trace follows by step (NVTX ranges)".to_string(),
                });
                self.go(self.moment);
            }
            KeyCode::Char('e') | KeyCode::End => self.go(Moment::End),
            KeyCode::Char('s') | KeyCode::Home => self.go(Moment::Bucket(0)),
            KeyCode::Char('o') | KeyCode::Char('O') => self.oom(key.code == KeyCode::Char('o')),
            KeyCode::Char('C') => {
                if self.story.capacity.is_some() {
                    self.to_capacity = !self.to_capacity;
                } else {
                    self.message = Some("the trace does not tell the device's memory".into());
                }
            }
            KeyCode::Up | KeyCode::Char('k') => self.select(-1),
            KeyCode::Down | KeyCode::Char('j') => self.select(1),
            KeyCode::PageUp => self.select(-(self.list_rows as isize)),
            KeyCode::PageDown => self.select(self.list_rows as isize),
            KeyCode::Char('g') => self.select(isize::MIN / 2),
            KeyCode::Char('G') => self.select(isize::MAX / 2),
            KeyCode::Tab => {
                self.view = match self.view {
                    View::Tree => View::Sites,
                    View::Sites => View::Leaks,
                    View::Leaks => View::Tree,
                };
                self.keep_visible();
            }
            KeyCode::Char(' ') if self.view == View::Tree => {
                if let Some(n) = self.selected_node() {
                    self.open.toggle(&self.tree, n);
                    self.keep_visible();
                }
            }
            KeyCode::Enter => self.overlay = Overlay::Details,
            KeyCode::Char('f') if self.view == View::Tree => {
                if let Some(n) = self.selected_node() {
                    self.focus = Some(self.tree.nodes[n].id);
                    self.open.open(&self.tree, n);
                    self.selected[0] = 0;
                    self.scroll[0] = 0;
                    self.remember();
                }
            }
            KeyCode::Char('u') | KeyCode::Backspace if self.view == View::Tree => {
                // Up one level, or no focus at a root.
                let at = self.focus.and_then(|id| self.tree.by_id(id));
                self.focus = at
                    .and_then(|n| self.tree.nodes[n].parent)
                    .map(|p| self.tree.nodes[p].id);
                self.reselect();
            }
            KeyCode::Char('c') if self.view == View::Tree => {
                self.open.close_all();
                self.reselect();
            }
            KeyCode::Char('/') => self.overlay = Overlay::Search(String::new()),
            KeyCode::Char('n') => self.next_match(true),
            KeyCode::Char('N') => self.next_match(false),
            KeyCode::Esc => {
                self.query.clear();
                self.matches = None;
                self.reselect();
            }
            _ => {}
        }
        Action::Continue
    }

    fn oom(&mut self, forward: bool) {
        let n = self.story.ooms.len();
        if n == 0 {
            self.message = Some("the trace has no out-of-memory error".to_string());
            return;
        }
        let next = match (self.moment, forward) {
            (Moment::Oom(i), true) => (i + 1) % n,
            (Moment::Oom(i), false) => (i + n - 1) % n,
            (_, true) => 0,
            (_, false) => n - 1,
        };
        self.go(Moment::Oom(next));
    }

    /// "at the peak", "at OOM 1 of 2", "at the end", "at" (a moment of no name).
    pub fn moment_words(&self) -> String {
        self.moment.words(&self.story)
    }
}
