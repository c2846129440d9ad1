//! `gpumemprof leaks`: allocations still live when the trace ended, and those only the
//! interpreter's teardown freed after the program's own code finished (`teardown`), grouped
//! by the stack that allocated them and their memory kind, largest first.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};

use gpumemprof_format::MemKind;
use serde::Serialize;

use super::level::{site, MemoryLevel};
use super::teardown::Teardown;
use super::{write_frames, TraceInfo, SCHEMA_VERSION};
use crate::kinds::{Kind, KindBytes};
use crate::replay::Replayed;
use crate::symbolize::{Frame, Symbolizer};
use crate::units;

#[derive(Debug, Clone, Serialize)]
pub struct LeaksReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// What is counted: `tensors` (a framework allocator's, when the trace has them) or
    /// `segments` (what was allocated from CUDA).
    pub level: MemoryLevel,
    /// Bytes leaked, all groups (not only those shown): live at the end, or freed only by
    /// the interpreter's teardown after the program's code finished.
    pub total_bytes: u64,
    /// Allocations leaked, all groups.
    pub total_count: u64,
    /// Of the totals, PyTorch's tensors that are a library's workspace (cuBLAS's, cuDNN's):
    /// the framework keeps one per handle and stream for the process's life, so they are
    /// not the program's leak; their groups come after the program's.
    pub workspaces_bytes: u64,
    pub workspaces_count: u64,
    /// The interpreter's teardown, when the trace shows one (null otherwise): the program's
    /// code had finished when it began.
    pub teardown: Option<TeardownInfo>,
    /// Largest first, at most `--top`.
    pub groups: Vec<LeakGroup>,
    /// With `--by range` only: the same memory by NVTX range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_range: Option<super::by_range::LeaksByRange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeakGroup {
    /// The interned stack id (0: no stack captured).
    pub stack_id: u64,
    pub kind: &'static str,
    /// Device ordinals the group's allocations are on, ascending.
    pub devices: Vec<i32>,
    pub bytes: u64,
    pub count: u64,
    /// Of them, what the interpreter's teardown freed at exit.
    pub freed_at_exit_bytes: u64,
    pub freed_at_exit_count: u64,
    /// Of them, those allocated before a damaged block of the trace: their frees may have
    /// been in it, so they may not be leaks (0 for a sound trace).
    pub before_damage_count: u64,
    /// PyTorch's tensors only: the group by kind of memory (`kinds`; those it holds, in
    /// `Kind::ALL`'s order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<KindBytes>>,
    /// Earliest and latest allocation time in the group, ns since the trace started.
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// The first frame outside the framework and the interpreter: the user's line
    /// (null when every frame is theirs).
    pub site: Option<Frame>,
    pub frames: Vec<Frame>,
}

/// The interpreter's teardown in a leaks report.
#[derive(Debug, Clone, Serialize)]
pub struct TeardownInfo {
    /// When its first free was made (ns since the trace started).
    pub start_ns: u64,
    /// The teardown function its frees ran in (`Py_FinalizeEx`).
    pub function: String,
    /// What it freed of the leaked memory (at the report's level).
    pub freed_bytes: u64,
    pub freed_count: u64,
}

#[derive(Default)]
struct Group {
    devices: BTreeSet<i32>,
    bytes: u64,
    count: u64,
    freed_bytes: u64,
    freed_count: u64,
    before_damage: u64,
    /// Bytes and tensors per kind of memory (`Kind::ALL`'s order).
    kinds: [(u64, u64); crate::timeline::KINDS],
    first: u64,
    last: u64,
}

/// `top`: groups shown (0: all); `frames`: frames per group (0: all); `teardown`: the
/// interpreter's teardown, whose frees count as leaks.
pub fn build(
    trace: TraceInfo,
    r: &Replayed,
    sym: &mut Symbolizer,
    top: usize,
    frames: usize,
    level: MemoryLevel,
    teardown: Option<&Teardown>,
) -> LeaksReport {
    let kinds_of = crate::kinds::of_leaked(r, sym);
    let mut groups: HashMap<(u64, MemKind), Group> = HashMap::new();
    let (mut total_bytes, mut total_count) = (0u64, 0u64);
    let (mut freed_bytes, mut freed_count) = (0u64, 0u64);
    let freed_at_exit = teardown.map_or(&[][..], |t| &t.freed[..]);
    let leaked = r
        .live
        .iter()
        .map(|a| (a, false))
        .chain(freed_at_exit.iter().map(|a| (a, true)));
    // Reservations and VMM handles are not memory in use; their mappings are. Tensors lie
    // inside the segments: one level or the other.
    for (a, freed) in leaked.filter(|(a, _)| level.counts(a.kind)) {
        total_bytes = total_bytes.saturating_add(a.size);
        total_count += 1;
        let g = groups.entry((a.stack, a.kind)).or_insert(Group {
            first: a.time_ns,
            last: a.time_ns,
            ..Group::default()
        });
        g.devices.insert(a.device);
        g.bytes = g.bytes.saturating_add(a.size);
        g.count += 1;
        if freed {
            g.freed_bytes = g.freed_bytes.saturating_add(a.size);
            g.freed_count += 1;
            freed_bytes = freed_bytes.saturating_add(a.size);
            freed_count += 1;
        }
        if r.damaged_after_ns.is_some_and(|at| a.time_ns <= at) {
            g.before_damage += 1;
        }
        if let Some(k) = kinds_of.get(&(a.address, a.time_ns)) {
            let slot = &mut g.kinds[*k as usize];
            slot.0 = slot.0.saturating_add(a.size);
            slot.1 += 1;
        }
        g.first = g.first.min(a.time_ns);
        g.last = g.last.max(a.time_ns);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    let (workspaces_bytes, workspaces_count) = order(&mut groups);
    if top > 0 {
        groups.truncate(top);
    }
    LeaksReport {
        schema_version: SCHEMA_VERSION,
        trace,
        level,
        total_bytes,
        total_count,
        workspaces_bytes,
        workspaces_count,
        teardown: teardown.map(|t| TeardownInfo {
            start_ns: t.start_ns,
            function: t.function.clone(),
            freed_bytes,
            freed_count,
        }),
        groups: groups
            .into_iter()
            .map(|((stack, kind), g)| LeakGroup {
                stack_id: stack,
                kind: kind.name(),
                devices: g.devices.into_iter().collect(),
                bytes: g.bytes,
                count: g.count,
                freed_at_exit_bytes: g.freed_bytes,
                freed_at_exit_count: g.freed_count,
                before_damage_count: g.before_damage,
                kinds: (g.kinds.iter().any(|k| k.1 > 0)).then(|| {
                    (crate::kinds::Kind::ALL.iter().zip(g.kinds))
                        .filter(|(_, (_, n))| *n > 0)
                        .map(|(kind, (bytes, tensors))| KindBytes {
                            kind: kind.name(),
                            bytes,
                            tensors,
                        })
                        .collect()
                }),
                first_time_ns: g.first,
                last_time_ns: g.last,
                site: site(&sym.stack(stack, 0)).cloned(),
                frames: sym.stack(stack, frames),
            })
            .collect(),
        by_range: None,
    }
}

/// A group made only of library workspaces (PyTorch's tensors of kind `workspaces`).
fn workspaces(g: &Group) -> bool {
    g.count > 0 && g.kinds[Kind::Workspaces as usize].1 == g.count
}

/// Orders the groups as the report lists them: the program's own first, then the
/// libraries' workspaces; largest first; ties in a fixed order so reports are
/// reproducible. Returns the workspaces' bytes and count.
fn order(groups: &mut [((u64, MemKind), Group)]) -> (u64, u64) {
    groups.sort_by(|(ka, a), (kb, b)| {
        (workspaces(a).cmp(&workspaces(b)))
            .then(b.bytes.cmp(&a.bytes))
            .then(b.count.cmp(&a.count))
            .then(ka.cmp(kb))
    });
    (groups.iter().filter(|(_, g)| workspaces(g))).fold((0u64, 0u64), |(b, n), (_, g)| {
        (b.saturating_add(g.bytes), n + g.count)
    })
}

/// The line under the total (`total`: bytes and count) that sets the libraries'
/// workspaces (`workspaces`: bytes and count) apart from the program's own leak, if any is
/// live; `one` and `many` name what is counted (tensors).
pub fn workspaces_line(
    (total_bytes, total_count): (u64, u64),
    (bytes, count): (u64, u64),
    (one, many): (&str, &str),
) -> Option<String> {
    if count == 0 {
        return None;
    }
    Some(format!(
        "of which {} in {} are library workspaces the framework keeps for the process's life, \
         listed last; the program's own: {} in {}",
        units::bytes(bytes),
        units::plural(count, one, many),
        units::bytes_exact(total_bytes.saturating_sub(bytes)),
        units::plural(total_count.saturating_sub(count), one, many)
    ))
}

pub fn write_text(report: &LeaksReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    let when = report.trace.live_when();
    if report.trace.window.is_some() {
        // What the range left live: how the process ended does not change it.
    } else if let Some(s) = &report.trace.stopped {
        writeln!(
            out,
            "Recording stopped at {} ({}): \"live\" means live then, not leaked at exit.",
            units::secs(s.time_ns),
            s.words
        )?;
    } else if let Some(sig) = report.trace.died_of() {
        writeln!(
            out,
            "The process was ended by {sig}: \"live at end\" means live when the process \
             died, not leaked at exit."
        )?;
    } else if !report.trace.complete {
        writeln!(
            out,
            "The process did not exit cleanly (the trace has no end record): \"live at end\" \
             means live when the trace stopped, not leaked at exit."
        )?;
    }
    let (one, many) = report.level.count_words();
    match &report.teardown {
        Some(t) => writeln!(
            out,
            "{} in {} live when the program's code finished ({}), {} of them in {} freed only \
             by the interpreter's teardown ({}) at exit",
            units::bytes_exact(report.total_bytes),
            units::plural(report.total_count, one, many),
            units::secs(t.start_ns),
            units::bytes(t.freed_bytes),
            units::plural(t.freed_count, one, many),
            t.function
        )?,
        None => writeln!(
            out,
            "{} in {} live {when}",
            units::bytes_exact(report.total_bytes),
            units::plural(report.total_count, one, many)
        )?,
    }
    let total = (report.total_bytes, report.total_count);
    let workspaces = (report.workspaces_bytes, report.workspaces_count);
    if let Some(line) = workspaces_line(total, workspaces, (one, many)) {
        writeln!(out, "{line}")?;
    }
    if let Some(b) = &report.by_range {
        // By range instead of by call site.
        return super::by_range::write_leaks(b, out);
    }
    let shown: u64 = report.groups.iter().map(|g| g.count).sum();
    if shown < report.total_count {
        writeln!(
            out,
            "showing the {} largest groups ({} of the allocations)",
            report.groups.len(),
            shown
        )?;
    }
    for (n, g) in report.groups.iter().enumerate() {
        let devices: Vec<String> = g.devices.iter().map(|d| units::device(*d)).collect();
        let on = if devices.len() == 1 {
            "device"
        } else {
            "devices"
        };
        let mut when = format!("allocated {}", units::span(g.first_time_ns, g.last_time_ns));
        if g.freed_at_exit_count == g.count {
            when.push_str(", freed only at exit");
        } else if g.freed_at_exit_count > 0 {
            when.push_str(&format!(
                ", {} of them freed only at exit",
                g.freed_at_exit_count
            ));
        }
        if g.before_damage_count > 0 {
            let which = if g.before_damage_count == g.count {
                "all of them".to_string()
            } else {
                format!("{} of them", g.before_damage_count)
            };
            when.push_str(&format!(
                "; {which} allocated before a damaged block of the trace, where their frees \
                 may be"
            ));
        }
        if let Some(kinds) = &g.kinds {
            let words: Vec<String> = match kinds.as_slice() {
                [only] => vec![only.kind.to_string()],
                all => (all.iter())
                    .map(|k| format!("{} {}", k.kind, units::bytes(k.bytes)))
                    .collect(),
            };
            when.push_str(&format!("; kind: {}", words.join(", ")));
        }
        let (one, many) = super::level::count_words(g.kind);
        writeln!(
            out,
            "\n#{} {} in {}{} ({}{on} {}), {when} (stack {})",
            n + 1,
            units::bytes_exact(g.bytes),
            units::plural(g.count, one, many),
            super::level::from_site(g.site.as_ref(), &g.frames),
            if one == "tensor" {
                String::new()
            } else {
                format!("{} on ", super::level::kind_words(g.kind))
            },
            devices.join(","),
            g.stack_id
        )?;
        write_frames(out, &g.frames, "    ")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group of `count` tensors of `bytes` in all, each of `kind`.
    fn group(bytes: u64, count: u64, kind: Kind) -> Group {
        let mut g = Group {
            bytes,
            count,
            ..Group::default()
        };
        g.kinds[kind as usize] = (bytes, count);
        g
    }

    /// What a real job left at exit (torch 2.11 on an H100): cuBLAS's two 32 MiB
    /// workspaces and cuBLASLt's 1 MiB one, larger than the program's leak of 4
    /// activations (128 KiB); and a group of a workspace and an activation together.
    #[test]
    fn the_programs_own_groups_come_first_and_workspaces_are_counted_apart() {
        let t = MemKind::Tensor;
        let mut mixed = group(33_554_432 + 32_768, 2, Kind::Workspaces);
        mixed.kinds[Kind::Activations as usize] = (32_768, 1);
        mixed.kinds[Kind::Workspaces as usize] = (33_554_432, 1);
        let mut groups = vec![
            ((9, t), group(33_554_432, 1, Kind::Workspaces)),
            ((30, t), group(33_554_432, 1, Kind::Workspaces)),
            ((11, t), group(1_048_576, 1, Kind::Workspaces)),
            ((4, t), group(131_072, 4, Kind::Activations)),
            ((5, t), mixed),
        ];
        assert_eq!(order(&mut groups), (67_108_864 + 1_048_576, 3));
        let stacks: Vec<u64> = groups.iter().map(|((s, _), _)| *s).collect();
        assert_eq!(stacks, [5, 4, 9, 30, 11]);
    }

    /// The same job's line under the total, as the report printed it on the H100
    /// (docs/VALIDATION.md): the three workspaces apart from the program's four tensors;
    /// no line when no workspace is live.
    #[test]
    fn the_line_under_the_total_sets_the_workspaces_apart() {
        let words = ("tensor", "tensors");
        let workspaces = (67_108_864 + 1_048_576, 3);
        let total = (workspaces.0 + 131_072, 7);
        assert_eq!(
            workspaces_line(total, workspaces, words).as_deref(),
            Some(
                "of which 65.0 MiB in 3 tensors are library workspaces the framework keeps for \
                 the process's life, listed last; the program's own: 128.0 KiB (131072 B) in 4 \
                 tensors"
            )
        );
        assert_eq!(workspaces_line((131_072, 4), (0, 0), words), None);
    }
}
