//! `gpumemprof leaks`: allocations still live when the trace ended, grouped by the stack
//! that allocated them and their memory kind, largest first.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};

use gpumemprof_format::MemKind;
use serde::Serialize;

use super::level::{site, MemoryLevel};
use super::{write_frames, TraceInfo, SCHEMA_VERSION};
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
    /// Bytes live at the end, all groups (not only those shown).
    pub total_bytes: u64,
    /// Allocations live at the end, all groups.
    pub total_count: u64,
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
    /// Earliest and latest allocation time in the group, ns since the trace started.
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// The first frame outside the framework and the interpreter: the user's line
    /// (null when every frame is theirs).
    pub site: Option<Frame>,
    pub frames: Vec<Frame>,
}

struct Group {
    devices: BTreeSet<i32>,
    bytes: u64,
    count: u64,
    first: u64,
    last: u64,
}

/// `top`: groups shown (0: all); `frames`: frames per group (0: all).
pub fn build(
    trace: TraceInfo,
    r: &Replayed,
    sym: &mut Symbolizer,
    top: usize,
    frames: usize,
    level: MemoryLevel,
) -> LeaksReport {
    let mut groups: HashMap<(u64, MemKind), Group> = HashMap::new();
    let (mut total_bytes, mut total_count) = (0u64, 0u64);
    // Reservations and VMM handles are not memory in use; their mappings are. Tensors lie
    // inside the segments: one level or the other.
    for a in r.live.iter().filter(|a| level.counts(a.kind)) {
        total_bytes = total_bytes.saturating_add(a.size);
        total_count += 1;
        let g = groups.entry((a.stack, a.kind)).or_insert(Group {
            devices: BTreeSet::new(),
            bytes: 0,
            count: 0,
            first: a.time_ns,
            last: a.time_ns,
        });
        g.devices.insert(a.device);
        g.bytes = g.bytes.saturating_add(a.size);
        g.count += 1;
        g.first = g.first.min(a.time_ns);
        g.last = g.last.max(a.time_ns);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    // Largest first; ties in a fixed order so reports are reproducible.
    groups.sort_by(|(ka, a), (kb, b)| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then(ka.cmp(kb))
    });
    if top > 0 {
        groups.truncate(top);
    }
    LeaksReport {
        schema_version: SCHEMA_VERSION,
        trace,
        level,
        total_bytes,
        total_count,
        groups: groups
            .into_iter()
            .map(|((stack, kind), g)| LeakGroup {
                stack_id: stack,
                kind: kind.name(),
                devices: g.devices.into_iter().collect(),
                bytes: g.bytes,
                count: g.count,
                first_time_ns: g.first,
                last_time_ns: g.last,
                site: site(&sym.stack(stack, 0)).cloned(),
                frames: sym.stack(stack, frames),
            })
            .collect(),
        by_range: None,
    }
}

pub fn write_text(report: &LeaksReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    let when = report.trace.live_when();
    if let Some(sig) = report.trace.died_of() {
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
    let (one, many) = match report.level {
        MemoryLevel::Tensors => ("tensor", "tensors"),
        MemoryLevel::Segments => ("allocation", "allocations"),
    };
    writeln!(
        out,
        "{} in {} live {when}",
        units::bytes_exact(report.total_bytes),
        units::plural(report.total_count, one, many)
    )?;
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
        let when = format!("allocated {}", units::span(g.first_time_ns, g.last_time_ns));
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
