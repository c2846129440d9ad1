//! `browse`'s details of the selected row: what is live from it at the moment and its share,
//! its allocations over the whole trace (how many, their sizes, when), its kind of memory,
//! and its stack: every shown frame, innermost first (the path from the root when several
//! stacks pass through a node). With two traces, the figures of each.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::app::{App, View};
use super::story::{Key, KeyLife, Story};
use super::tree::Side;
use crate::units;

fn kind_words(key: &Key) -> String {
    format!(
        "{} on GPU {}",
        crate::report::level::kind_words(key.kind.name()),
        units::device(key.device)
    )
}

/// The keys of a row's stacks, with their side.
fn keys(device: i32, kind: gpumemprof_format::MemKind, stacks: &[(Side, u64)]) -> Vec<(Side, Key)> {
    (stacks.iter())
        .map(|&(side, stack)| {
            (
                side,
                Key {
                    device,
                    kind,
                    stack,
                },
            )
        })
        .collect()
}

/// The whole-trace figures of `keys` of one story together.
fn lives<'k>(story: &Story, keys: impl Iterator<Item = &'k Key>) -> Option<KeyLife> {
    let mut out: Option<KeyLife> = None;
    for l in keys.filter_map(|k| story.life(k)) {
        out = Some(match out {
            None => *l,
            Some(o) => KeyLife {
                allocations: o.allocations + l.allocations,
                bytes: o.bytes.saturating_add(l.bytes),
                min_size: o.min_size.min(l.min_size),
                max_size: o.max_size.max(l.max_size),
                first_ns: o.first_ns.min(l.first_ns),
                last_ns: o.last_ns.max(l.last_ns),
            },
        });
    }
    out
}

fn life_line(story: &Story, keys: &[(Side, Key)], side: Side) -> String {
    let what = if story.tensors {
        "tensors"
    } else {
        "allocations"
    };
    let life = lives(story, keys.iter().filter(|k| k.0 == side).map(|k| &k.1));
    match life {
        Some(l) if l.min_size == l.max_size => format!(
            "Over the whole trace: {} {what} of {}, the first at {}, the last at {}",
            l.allocations,
            units::bytes(l.min_size),
            units::secs(l.first_ns),
            units::secs(l.last_ns)
        ),
        Some(l) => format!(
            "Over the whole trace: {} {what}, {} to {}, the first at {}, the last at {}",
            l.allocations,
            units::bytes(l.min_size),
            units::bytes(l.max_size),
            units::secs(l.first_ns),
            units::secs(l.last_ns)
        ),
        None => "Over the whole trace: nothing".to_string(),
    }
}

/// What a row shows: its name, what is live per side, its keys, and its stack (a side's
/// stack id) or the path to it.
struct Shown {
    label: String,
    live: Vec<String>,
    keys: Vec<(Side, Key)>,
    stack: Result<(Side, u64), Vec<String>>,
}

fn in_words(bytes: u64, count: u64) -> String {
    format!(
        "{} in {}",
        units::bytes(bytes),
        units::plural(count, "allocation", "allocations")
    )
}

fn selected(app: &mut App) -> Option<Shown> {
    let sides = if app.other.is_some() { 2 } else { 1 };
    Some(match app.view {
        View::Tree => {
            let n = app.selected_node()?;
            let node = app.tree.nodes[n].clone();
            let root = app
                .names
                .label(app.tree.nodes[app.tree.root_of(n)].label)
                .to_string();
            let live = (0..sides)
                .map(|side| {
                    format!(
                        "Live {}: {} ({:.1}% of {root})",
                        moment_words(app, side),
                        in_words(node.bytes[side], node.count[side]),
                        app.tree.share_of(n, side) * 100.0,
                    )
                })
                .collect();
            let path = app
                .tree
                .path(n)
                .iter()
                .map(|&l| app.names.label(l).to_string())
                .collect();
            Shown {
                label: app.names.label(node.label).to_string(),
                live,
                stack: match node.keys.as_slice() {
                    [(side, key)] => Ok((*side, key.stack)),
                    _ => Err(path),
                },
                keys: node.keys,
            }
        }
        View::Sites => {
            let s = app.sites.get(app.selected[1])?.clone();
            let live = (0..sides)
                .map(|side| {
                    format!(
                        "Live {}: {}",
                        moment_words(app, side),
                        in_words(s.bytes[side], s.count[side])
                    )
                })
                .collect();
            Shown {
                label: app.names.label(s.label).to_string(),
                live,
                keys: keys(s.device, s.kind, &s.stacks),
                stack: Ok(s.stacks[0]),
            }
        }
        View::Leaks => {
            let l = app.leaks.get(app.selected[2])?.clone();
            let how = if l.at_exit {
                "held until the program's code finished, freed by the interpreter's teardown"
            } else {
                "still live when the trace ended"
            };
            let live = (0..sides)
                .map(|side| {
                    let who = if sides == 2 { ["A: ", "B: "][side] } else { "" };
                    format!(
                        "Leaked: {who}{}, {how}",
                        in_words(l.bytes[side], l.count[side])
                    )
                })
                .collect();
            Shown {
                label: app.names.label(l.label).to_string(),
                live,
                keys: keys(l.device, l.kind, &l.stacks),
                stack: Ok(l.stacks[0]),
            }
        }
    })
}

/// "at the peak" (one trace), "in A at the peak" (two).
fn moment_words(app: &App, side: Side) -> String {
    match (&app.other, side) {
        (None, _) => app.moment_words(),
        (Some(_), 0) => format!("in A {}", app.moment_words()),
        (Some(o), _) => format!("in B {}", o.moment.words(&o.story)),
    }
}

pub fn lines(app: &mut App) -> Vec<Line<'static>> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let Some(shown) = selected(app) else {
        return vec![Line::from(" nothing selected")];
    };
    let mut out = vec![Line::from(Span::styled(format!(" {}", shown.label), bold))];
    out.extend(shown.live.iter().map(|l| Line::from(format!(" {l}"))));
    out.push(Line::from(format!(
        " {}",
        life_line(&app.story, &shown.keys, 0)
    )));
    if let Some(o) = &app.other {
        out.push(Line::from(format!(
            " B: {}",
            life_line(&o.story, &shown.keys, 1)
        )));
    }
    let mut kinds: Vec<String> = shown.keys.iter().map(|k| kind_words(&k.1)).collect();
    kinds.dedup();
    if let Some(kind) = kinds.first() {
        let more = match shown.keys.len() {
            1 => String::new(),
            n => format!(" ({n} stacks)"),
        };
        out.push(Line::from(format!(" Kind: {kind}{more}")));
    }
    match shown.stack {
        Ok((side, stack)) => {
            out.push(Line::from(Span::styled(" Stack, innermost first:", bold)));
            let frames = app.names.frames(side, stack);
            if frames.is_empty() {
                out.push(Line::from(format!("   {}", super::names::NO_STACK)));
            }
            out.extend(frames.iter().map(|f| Line::from(format!("   {f}"))));
        }
        Err(path) => {
            out.push(Line::from(Span::styled(
                " Path from the root (several stacks pass here):",
                bold,
            )));
            out.extend(path.iter().map(|f| Line::from(format!("   {f}"))));
        }
    }
    out
}
