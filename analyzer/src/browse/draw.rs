//! `browse`'s screen: the title, the timeline (`chart`), the moment, the list of the view
//! (tree, top sites, leaks), the footer of keys or the search being typed, and the help and
//! details overlays. Any size draws without panicking; below `MIN_WIDTH`x`MIN_HEIGHT` the
//! screen says so.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::app::{App, Overlay, View};
use super::chart::{self, GUTTER};
use super::details;
use super::moment::Moment;
use crate::units;

pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 12;

/// Below this width a row's numbers are bytes and share only (no count), for the labels.
const NARROW: usize = 64;

/// The keys in the footer.
const HINTS: &str = "? help  q quit  ←→ moment  +- zoom  p peak  o OOM  e end  / search  Tab view";

pub fn draw(frame: &mut Frame, app: &mut App) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "terminal too small: browse needs {MIN_WIDTH}x{MIN_HEIGHT} (this is {}x{}); q quits",
            area.width, area.height
        );
        frame.render_widget(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let chart_height: usize = match area.height {
        h if h >= 30 => 8,
        h if h >= 20 => 5,
        _ => 3,
    };
    // Two traces: a chart each, the first one's rows split.
    let (a_rows, b_rows) = match app.other {
        Some(_) => (
            (chart_height / 2).max(1),
            (chart_height - chart_height / 2).max(1) - 1,
        ),
        None => (chart_height, 0),
    };
    let charts = a_rows + 1 + if app.other.is_some() { b_rows + 1 } else { 0 };
    let moment = moment(app, area.width as usize);
    let moment_rows = moment.len() as u16;
    let list_top = 1 + charts as u16 + moment_rows + 1;
    let list_rows = area.height.saturating_sub(list_top + 1) as usize;
    app.layout(area.width as usize - GUTTER, list_rows);

    let at = |y: u16, h: u16| Rect::new(area.x, area.y + y, area.width, h);
    frame.render_widget(Paragraph::new(title(app)), at(0, 1));
    let mut lines = chart::lines(&app.chart(), a_rows);
    if let Some(o) = &app.other {
        let b = chart::Chart::whole(&o.story, app.columns, o.moment.bucket(&o.story), "B");
        lines.extend(chart::lines(&b, b_rows));
    }
    frame.render_widget(Paragraph::new(lines), at(1, charts as u16));
    frame.render_widget(Paragraph::new(moment), at(1 + charts as u16, moment_rows));
    frame.render_widget(
        Paragraph::new(tabs(app, area.width as usize)),
        at(list_top - 1, 1),
    );
    let list_area = at(list_top, list_rows as u16);
    frame.render_widget(Paragraph::new(list(app, area.width as usize)), list_area);
    frame.render_widget(Paragraph::new(footer(app)), at(area.height - 1, 1));

    match &app.overlay {
        Overlay::Help => overlay(frame, list_area, " keys ", help()),
        Overlay::Details => {
            let lines = details::lines(app);
            overlay(frame, list_area, " details (any key closes) ", lines);
        }
        _ => {}
    }
}

fn overlay(frame: &mut Frame, area: Rect, title: &str, lines: Vec<Line<'static>>) {
    frame.render_widget(Clear, area);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title.to_string());
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn title(app: &App) -> Line<'static> {
    let s = &app.story;
    let what = match &app.other {
        Some(o) => format!("A: {} · B: {}", app.program, o.program),
        None => {
            let span_ns = app.per_column as u64 * app.columns as u64 * s.width_ns;
            let from = app.first as u64 * s.width_ns;
            let to = (from + span_ns).min(s.end_ns.max(from));
            format!(
                "{} to {} · {}",
                units::secs(from),
                units::secs(to),
                app.program
            )
        }
    };
    Line::from(vec![
        Span::styled(
            " gpumemprof browse ",
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("· {what}")),
    ])
}

/// Bytes of the tree's roots on `side`: the primary level's, and the segments' under tensors.
fn levels(app: &App, side: usize) -> (u64, u64) {
    let tensor = |n: &super::tree::Node| {
        (n.keys.first()).is_some_and(|k| k.1.kind == gpumemprof_format::MemKind::Tensor)
    };
    let roots = || app.tree.roots.iter().map(|&r| &app.tree.nodes[r]);
    let primary = roots()
        .filter(|n| tensor(n) == app.story.tensors)
        .map(|n| n.bytes[side])
        .sum();
    let segments = roots().filter(|n| !tensor(n)).map(|n| n.bytes[side]).sum();
    (primary, segments)
}

/// "9.0 MiB of tensors (reserved 20.0 MiB)", "17.0 MiB live".
fn live_words(app: &App, side: usize) -> String {
    let (primary, segments) = levels(app, side);
    if app.story.tensors {
        format!(
            "{} of tensors (reserved {})",
            units::bytes(primary),
            units::bytes(segments)
        )
    } else {
        format!("{} live", units::bytes(primary))
    }
}

/// "▶ at the peak, 1.234 s: 96.0 MiB of tensors (reserved 120.0 MiB)"; with two traces,
/// each one's moment and figure, B's on a line of its own when both do not fit in `width`.
fn moment(app: &App, width: usize) -> Vec<Line<'static>> {
    let s = &app.story;
    let asked = match app.moment {
        Moment::Oom(n) => (s.ooms.get(n)).map_or_else(String::new, |o| {
            format!(" (asked for {})", units::bytes(o.size))
        }),
        _ => String::new(),
    };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut spans = vec![Span::styled("▶ ", Style::default().fg(Color::Yellow))];
    match &app.other {
        None => {
            let device = s
                .capacity
                .map_or_else(String::new, |c| format!(" · device {}", units::bytes(c)));
            spans.push(Span::styled(
                format!(
                    "{} {}{}{asked}",
                    app.moment_words(),
                    units::secs(app.moment_time()),
                    app.moment.step_words(s),
                ),
                bold,
            ));
            spans.push(Span::raw(format!(": {}{device}", live_words(app, 0))));
            vec![Line::from(spans)]
        }
        Some(o) => {
            let when = |m: Moment, story| {
                let t = units::secs(m.time(story));
                format!("{} {t}{}", m.words(story), m.step_words(story))
            };
            spans.push(Span::styled(format!("A {}", when(app.moment, s)), bold));
            spans.push(Span::raw(format!(": {}", live_words(app, 0))));
            let b = [
                Span::styled(format!("B {}", when(o.moment, &o.story)), bold),
                Span::raw(format!(": {}", live_words(app, 1))),
            ];
            let one = Line::from(spans.clone()).width() + 3 + Line::from(b.to_vec()).width();
            if one <= width {
                spans.push(Span::raw(" · "));
                spans.extend(b);
                vec![Line::from(spans)]
            } else {
                let mut second = vec![Span::raw("  ")];
                second.extend(b);
                vec![Line::from(spans), Line::from(second)]
            }
        }
    }
}

fn tabs(app: &App, width: usize) -> Line<'static> {
    let mut spans = Vec::new();
    let mut used = 0;
    let views = [
        (View::Tree, "Tree"),
        (View::Sites, "Top sites"),
        (View::Leaks, "Leaks at end"),
    ];
    for (view, name) in views {
        let style = if view == app.view {
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::default().fg(Color::DarkGray)
        };
        spans.push(Span::styled(format!(" {name} "), style));
        used += name.chars().count() + 2;
    }
    if !app.query.is_empty() {
        let q = format!("  /{}", app.query);
        used += q.chars().count();
        spans.push(Span::styled(q, Style::default().fg(Color::Yellow)));
    }
    let head = if app.other.is_some() {
        let mut h = format!("{:>10} {:>10}", "A", "B");
        if width >= NARROW {
            h.push_str(&format!(" {:>11}", "B - A"));
        }
        h
    } else {
        let count = if app.story.tensors {
            "tensors"
        } else {
            "allocs"
        };
        let mut h = format!("{:>10} {:>6}", "bytes", "share");
        if width >= NARROW {
            h.push_str(&format!(" {count:>8}"));
        }
        h
    };
    let pad = width.saturating_sub(used + head.chars().count());
    spans.push(Span::raw(" ".repeat(pad)));
    spans.push(Span::styled(
        head,
        Style::default().add_modifier(Modifier::BOLD),
    ));
    Line::from(spans)
}

/// Heat: red from half of the root, yellow from a fifth, green from a twentieth.
fn heat(share: f64) -> Style {
    match share {
        s if s >= 0.5 => Style::default().fg(Color::Red),
        s if s >= 0.2 => Style::default().fg(Color::Yellow),
        s if s >= 0.05 => Style::default().fg(Color::Green),
        _ => Style::default(),
    }
}

/// A row's figures: bytes and allocations per side, and its share of its root (first side).
struct Figures {
    bytes: [u64; 2],
    count: [u64; 2],
    share: f64,
}

/// `+1.0 MiB`, `-512 B`, `=`.
fn change(a: u64, b: u64) -> (String, Style) {
    match b.cmp(&a) {
        std::cmp::Ordering::Equal => ("=".to_string(), Style::default().fg(Color::DarkGray)),
        std::cmp::Ordering::Greater => (
            format!("+{}", units::bytes(b - a)),
            Style::default().fg(Color::Red),
        ),
        std::cmp::Ordering::Less => (
            format!("-{}", units::bytes(a - b)),
            Style::default().fg(Color::Green),
        ),
    }
}

/// One row: `label` cut to fit, then the numbers: bytes, share and count of one trace; the
/// bytes of both and their change for two (a row of one side only says so).
fn row(
    app: &App,
    mut label: String,
    f: &Figures,
    width: usize,
    selected: bool,
    mark: bool,
) -> Line<'static> {
    let narrow = width < NARROW;
    let mut numbers: Vec<Span<'static>> = Vec::new();
    if app.other.is_some() {
        match (f.bytes[0], f.bytes[1]) {
            (0, b) if b > 0 => label.push_str(" [B only]"),
            (a, 0) if a > 0 => label.push_str(" [A only]"),
            _ => {}
        }
        let text = format!(
            " {:>10} {:>10}",
            units::bytes(f.bytes[0]),
            units::bytes(f.bytes[1])
        );
        numbers.push(Span::styled(text, heat(f.share)));
        if !narrow {
            let (text, style) = change(f.bytes[0], f.bytes[1]);
            numbers.push(Span::styled(format!(" {text:>11}"), style));
        }
    } else {
        let mut text = format!(
            " {:>10} {:>5.1}%",
            units::bytes(f.bytes[0]),
            f.share * 100.0
        );
        if !narrow {
            text.push_str(&format!(" {:>8}", f.count[0]));
        }
        numbers.push(Span::styled(text, heat(f.share)));
    }
    let used: usize = numbers.iter().map(|s| s.content.chars().count()).sum();
    let room = width.saturating_sub(used);
    let mut text: String = label.chars().take(room).collect();
    let len = text.chars().count();
    text.push_str(&" ".repeat(room - len));
    let mut label_style = if mark {
        Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    if selected {
        label_style = label_style.add_modifier(Modifier::REVERSED);
        for n in &mut numbers {
            n.style = n.style.add_modifier(Modifier::REVERSED);
        }
    }
    let mut spans = vec![Span::styled(text, label_style)];
    spans.extend(numbers);
    Line::from(spans)
}

fn list(app: &App, width: usize) -> Vec<Line<'static>> {
    let v = match app.view {
        View::Tree => 0,
        View::Sites => 1,
        View::Leaks => 2,
    };
    let (from, sel) = (app.scroll[v], app.selected[v]);
    let shown = from..from + app.list_rows;
    let mut out = Vec::new();
    match app.view {
        View::Tree => {
            let rows = app.rows();
            let base = rows.first().map_or(0, |r| app.tree.nodes[r.node].depth);
            for (i, r) in rows.iter().enumerate().filter(|(i, _)| shown.contains(i)) {
                let n = &app.tree.nodes[r.node];
                let marker = match (r.leaf, r.open) {
                    (true, _) => "· ",
                    (false, true) => "▾ ",
                    (false, false) => "▸ ",
                };
                let indent = " ".repeat(2 * (n.depth - base).min(12));
                let label = format!("{indent}{marker}{}", app.names.label(n.label));
                let f = Figures {
                    bytes: n.bytes,
                    count: n.count,
                    share: app.tree.share(r.node),
                };
                out.push(row(app, label, &f, width, i == sel, r.matched));
            }
            if rows.is_empty() {
                out.push(Line::from(if app.matches.is_some() {
                    "  no frame here matches the search (Esc clears it)"
                } else {
                    "  nothing live at this moment"
                }));
            }
        }
        View::Sites => {
            for (i, s) in app
                .sites
                .iter()
                .enumerate()
                .filter(|(i, _)| shown.contains(i))
            {
                let mut label = format!("  {}", app.names.label(s.label));
                if (s.kind == gpumemprof_format::MemKind::Tensor) != app.story.tensors {
                    label.push_str(&format!(
                        " [GPU {} {}]",
                        units::device(s.device),
                        s.kind.name()
                    ));
                }
                let f = Figures {
                    bytes: s.bytes,
                    count: s.count,
                    share: s.share,
                };
                out.push(row(app, label, &f, width, i == sel, false));
            }
            if app.sites.is_empty() {
                out.push(Line::from("  nothing live at this moment"));
            }
        }
        View::Leaks => {
            let total: u64 = app.leaks.iter().map(|l| l.bytes[0]).sum();
            for (i, l) in app
                .leaks
                .iter()
                .enumerate()
                .filter(|(i, _)| shown.contains(i))
            {
                let mut label = format!("  {}", app.names.label(l.label));
                if l.at_exit {
                    label.push_str(" (freed at exit)");
                }
                let share = if total == 0 {
                    0.0
                } else {
                    l.bytes[0] as f64 / total as f64
                };
                let f = Figures {
                    bytes: l.bytes,
                    count: l.count,
                    share,
                };
                out.push(row(app, label, &f, width, i == sel, false));
            }
            if app.leaks.is_empty() {
                out.push(Line::from(
                    "  nothing leaked: everything was freed before the end",
                ));
            }
        }
    }
    out
}

fn footer(app: &App) -> Line<'static> {
    match (&app.overlay, &app.message) {
        (Overlay::Search(text), _) => Line::from(vec![
            Span::styled("/", Style::default().fg(Color::Yellow)),
            Span::raw(format!("{text}█  (Enter: search, Esc: cancel)")),
        ]),
        (_, Some(m)) => Line::from(Span::styled(m.clone(), Style::default().fg(Color::Yellow))),
        _ => Line::from(Span::styled(HINTS, Style::default().fg(Color::DarkGray))),
    }
}

fn help() -> Vec<Line<'static>> {
    [
        "←/→ h/l   moment: one column earlier/later (H/L: ten)",
        "+/-       zoom the timeline in/out around the cursor",
        "p o O e s peak, next/previous OOM, end, start",
        "C         scale the timeline to the device's memory",
        "↑/↓ j/k   select (PgUp/PgDn, g/G: first/last)",
        "Space     open/close a node; c closes all",
        "f / u     focus on the node's subtree / up one level",
        "Enter     details: the whole stack, allocations, kind",
        "/ n N     search frames by name or file; next/previous",
        "Esc       clear the search     Tab  tree, top sites, leaks",
        "a         two traces: B follows A by time, event or step",
        "r         read the trace again   q  quit",
    ]
    .iter()
    .map(|s| Line::from(format!(" {s}")))
    .collect()
}
