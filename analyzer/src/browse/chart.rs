//! `browse`'s timeline: live memory per column of the chart as bars of eighth blocks, the
//! tensors' highest (or device memory's, for a job without tensors) in colour and reserved
//! memory behind them in shade, then an axis line marking the cursor (`▲`) and the columns
//! with an out-of-memory error (`x`). Text only, so the tests read it as the user does.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::story::Story;
use crate::units;

/// Width of the scale at the left.
pub const GUTTER: usize = 10;

const EIGHTHS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One chart: a story's buckets from `first`, `per_column` a column.
pub struct Chart<'s> {
    pub story: &'s Story,
    pub first: usize,
    pub per_column: usize,
    pub columns: usize,
    /// The cursor's column, if on the chart.
    pub cursor: Option<usize>,
    /// Scale to the device's memory (where the trace tells it).
    pub to_capacity: bool,
    /// At the left of the baseline: `0`, or the trace's letter when two are shown.
    pub name: &'s str,
}

/// The fewest buckets a column (a power of two) that show `buckets` on `columns` columns.
pub fn per_column_to_fit(buckets: usize, columns: usize) -> usize {
    let mut per_column = 1;
    while per_column * columns.max(1) < buckets {
        per_column *= 2;
    }
    per_column
}

impl Chart<'_> {
    /// The whole of `story` on `columns` columns, the cursor on `bucket`.
    pub fn whole<'s>(story: &'s Story, columns: usize, bucket: usize, name: &'s str) -> Chart<'s> {
        let columns = columns.max(1);
        let per_column = per_column_to_fit(story.buckets.len(), columns);
        Chart {
            story,
            first: 0,
            per_column,
            columns,
            cursor: Some(bucket / per_column),
            to_capacity: false,
            name,
        }
    }

    /// The buckets of column `col`.
    pub fn column(&self, col: usize) -> std::ops::Range<usize> {
        let n = self.story.buckets.len();
        let start = (self.first + col * self.per_column).min(n);
        start..(start + self.per_column).min(n)
    }
}

/// The highest primary and secondary (reserved) bytes of each column shown, and whether
/// an out-of-memory error falls in it.
fn columns(chart: &Chart) -> Vec<(u64, u64, bool)> {
    let s = chart.story;
    (0..chart.columns)
        .map(|col| {
            let range = chart.column(col);
            let (mut p, mut q, mut oom) = (0u64, 0u64, false);
            for b in &s.buckets[range.clone()] {
                let (primary, secondary) = if s.tensors {
                    (b.tensors_max, b.memory_max)
                } else {
                    (b.memory_max, 0)
                };
                p = p.max(primary);
                q = q.max(secondary);
            }
            if !range.is_empty() {
                let (from, to) = (
                    range.start as u64 * s.width_ns,
                    range.end as u64 * s.width_ns,
                );
                oom = s.ooms.iter().any(|o| o.time_ns >= from && o.time_ns < to)
                    || (range.end == s.buckets.len() && s.ooms.iter().any(|o| o.time_ns >= to));
            }
            (p, q, oom)
        })
        .collect()
}

/// `height` rows of bars and one axis row.
pub fn lines(chart: &Chart, height: usize) -> Vec<Line<'static>> {
    let height = height.max(1);
    let cols = columns(chart);
    let mut scale = cols.iter().map(|c| c.0.max(c.1)).max().unwrap_or(0);
    if chart.to_capacity {
        scale = chart.story.capacity.unwrap_or(scale);
    }
    let scale = scale.max(1);
    let cursor = chart.cursor;
    let eighths = |v: u64| -> u64 {
        ((v as u128 * height as u128 * 8).div_ceil(scale as u128)).min(height as u128 * 8) as u64
    };
    let mut out = Vec::with_capacity(height + 1);
    for row in 0..height {
        let from_bottom = (height - 1 - row) as u64;
        let label = match row {
            0 => units::bytes(scale),
            r if r == height - 1 => chart.name.to_string(),
            _ => String::new(),
        };
        // `1023.9 MiB` fills the gutter: then no space before the bars.
        let mut gutter = format!("{label:>w$} ", w = GUTTER - 1);
        if gutter.chars().count() > GUTTER {
            gutter = label.chars().take(GUTTER).collect();
        }
        let mut spans = vec![Span::styled(gutter, Style::default().fg(Color::DarkGray))];
        for (c, &(p, q, _)) in cols.iter().enumerate() {
            let cell = |v: u64| eighths(v).saturating_sub(from_bottom * 8).min(8);
            let (pc, qc) = (cell(p), cell(q));
            let (ch, mut style) = if pc > 0 {
                (EIGHTHS[pc as usize - 1], Style::default().fg(Color::Cyan))
            } else if qc >= 4 {
                ('░', Style::default().fg(Color::DarkGray))
            } else {
                (' ', Style::default())
            };
            if Some(c) == cursor {
                style = style.bg(Color::DarkGray).fg(Color::Yellow);
            }
            spans.push(Span::styled(ch.to_string(), style));
        }
        out.push(Line::from(spans));
    }
    let mut axis = vec![Span::raw(" ".repeat(GUTTER))];
    for (c, &(_, _, oom)) in cols.iter().enumerate() {
        let (ch, style) = if Some(c) == cursor {
            (
                '▲',
                Style::default()
                    .fg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
            )
        } else if oom {
            (
                'x',
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            )
        } else {
            ('─', Style::default().fg(Color::DarkGray))
        };
        axis.push(Span::styled(ch.to_string(), style));
    }
    out.push(Line::from(axis));
    out
}
