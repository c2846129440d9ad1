//! `browse`'s flat views: the top sites at the moment (stacks grouped by their site, the
//! user's line where there is one) and the leaks at the end (still live, or held until the
//! program's own code finished and freed by the interpreter's teardown, as `leaks` says).
//! Each row has a figure per side: one trace, or two side by side (grouped by the site's
//! name, the same in both).

use gpumemprof_format::MemKind;

use crate::fasthash::FastMap;
use crate::replay::LiveAlloc;
use crate::snapshot::StackBytes;

use super::names::Names;
use super::tree::Side;

/// One site's memory at the moment.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteRow {
    pub label: u32,
    pub device: i32,
    pub kind: MemKind,
    pub bytes: [u64; 2],
    pub count: [u64; 2],
    /// Of its (device, kind)'s live bytes on the first side.
    pub share: f64,
    /// Its stacks, with their side, largest first.
    pub stacks: Vec<(Side, u64)>,
}

/// Sites live on each side, largest first (tensors first when the trace has them).
pub fn top(sides: &[Vec<StackBytes>], names: &mut Names, tensors: bool) -> Vec<SiteRow> {
    let mut totals: FastMap<(i32, u8), u64> = FastMap::default();
    let mut by: FastMap<(i32, u8, u32), usize> = FastMap::default();
    let mut rows: Vec<SiteRow> = Vec::new();
    for (side, live) in sides.iter().enumerate() {
        for s in live {
            if side == 0 {
                *totals.entry((s.device, s.kind.to_u8())).or_default() += s.bytes;
            }
            let label = names.shown(side, s.stack).site;
            let i = *by
                .entry((s.device, s.kind.to_u8(), label))
                .or_insert_with(|| {
                    rows.push(SiteRow {
                        label,
                        device: s.device,
                        kind: s.kind,
                        bytes: [0; 2],
                        count: [0; 2],
                        share: 0.0,
                        stacks: Vec::new(),
                    });
                    rows.len() - 1
                });
            let r = &mut rows[i];
            r.bytes[side] += s.bytes;
            r.count[side] += s.count;
            r.stacks.push((side, s.stack));
        }
    }
    for r in &mut rows {
        let total = totals
            .get(&(r.device, r.kind.to_u8()))
            .copied()
            .unwrap_or(0);
        r.share = if total == 0 {
            0.0
        } else {
            r.bytes[0] as f64 / total as f64
        };
    }
    let first = |k: MemKind| (k == MemKind::Tensor) != tensors;
    let size = |r: &SiteRow| r.bytes[0].max(r.bytes[1]);
    rows.sort_by(|a, b| {
        (first(a.kind), size(b), a.device, names.label(a.label)).cmp(&(
            first(b.kind),
            size(a),
            b.device,
            names.label(b.label),
        ))
    });
    rows
}

/// One group of leaked memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakRow {
    pub label: u32,
    pub device: i32,
    pub kind: MemKind,
    /// Its stacks, with their side.
    pub stacks: Vec<(Side, u64)>,
    pub bytes: [u64; 2],
    pub count: [u64; 2],
    /// Freed by the interpreter's teardown (the program held it until its code finished).
    pub at_exit: bool,
}

/// What one trace leaked: `live` at the end and what the teardown freed (`at_exit`).
pub struct Leaked<'l> {
    pub live: &'l [LiveAlloc],
    pub at_exit: &'l [LiveAlloc],
}

/// The leaks of each side, of the level the story counts (tensors, or device memory),
/// grouped by site, largest first.
pub fn leaks(sides: &[Leaked], names: &mut Names, tensors: bool) -> Vec<LeakRow> {
    let counted = |k: MemKind| {
        if tensors {
            k == MemKind::Tensor
        } else {
            k.is_memory()
        }
    };
    let mut by: FastMap<(i32, u8, u32, bool), usize> = FastMap::default();
    let mut seen: FastMap<(usize, Side, u64), ()> = FastMap::default();
    let mut rows: Vec<LeakRow> = Vec::new();
    for (side, leaked) in sides.iter().enumerate() {
        let all = (leaked.live.iter().map(|a| (a, false)))
            .chain(leaked.at_exit.iter().map(|a| (a, true)));
        for (a, exit) in all.filter(|(a, _)| counted(a.kind)) {
            let label = names.shown(side, a.stack).site;
            let i = *by
                .entry((a.device, a.kind.to_u8(), label, exit))
                .or_insert_with(|| {
                    rows.push(LeakRow {
                        label,
                        device: a.device,
                        kind: a.kind,
                        stacks: Vec::new(),
                        bytes: [0; 2],
                        count: [0; 2],
                        at_exit: exit,
                    });
                    rows.len() - 1
                });
            let r = &mut rows[i];
            r.bytes[side] += a.size;
            r.count[side] += 1;
            if seen.insert((i, side, a.stack), ()).is_none() {
                r.stacks.push((side, a.stack));
            }
        }
    }
    let size = |r: &LeakRow| r.bytes[0].max(r.bytes[1]);
    rows.sort_by(|a, b| {
        (size(b), names.label(a.label), a.at_exit).cmp(&(size(a), names.label(b.label), b.at_exit))
    });
    rows
}
