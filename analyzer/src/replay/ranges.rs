//! NVTX ranges in the replay: which range each allocation was made in, and the bytes each
//! range holds live over the run, at the peak and at the end (`summary`, `peak` and `leaks`
//! with `--by range`).
//!
//! ```text
//!  Nvtx records ─► per-thread list of open ranges, innermost last
//!                    push: opens on its thread; pop: closes the thread's innermost pushed
//!                          range of the same domain (ranges nest per thread and domain)
//!                    start: opens on the thread that started it; end (by any thread)
//!                          closes it wherever it sits in that thread's list
//!  Alloc (memory kinds) ─► the allocating thread's innermost open range = its group
//!                          (none open: group 0, "<no range>")
//!                          ─► side map (space, address, time) → group, only for group ≠ 0
//!  Free ─► the side map says whose bytes went (absent: group 0)
//! ```
//!
//! Start/end ranges are process-wide in NVTX and do not nest; they are attributed to the
//! thread that started them, for as long as they are open, as the innermost range there
//! while no later range opens inside them: a range started on the data loader thread does
//! not claim the training thread's allocations.
//!
//! Memory: nothing exists until the trace's first NVTX record (a trace without NVTX costs
//! one `Option` test per allocation). Then one side-map entry per live allocation made
//! inside a range (allocations outside ranges cost nothing), the strings, one counter row
//! per (domain, name), and the open ranges (at most `MAX_OPEN` in all).
//!
//! The peak is the peak of all memory (`totals`): the per-range bytes are copied lazily at
//! the first free after a new high-water mark, as the pass (`pass.rs`) does for stacks.

use std::collections::HashMap;

use gpumemprof_format::{Nvtx, NvtxOp};

use super::model::{Counters, LiveAlloc};
use crate::fasthash::FastMap;

/// Ranges kept open at once, all threads together; a push or start past it opens nothing
/// (a pop then first closes what was not opened). A real program has a handful per thread.
pub const MAX_OPEN: usize = 1 << 16;

/// The label of group 0: allocations made with no range open on their thread.
pub const NO_RANGE: &str = "<no range>";
/// The label of a range without a message.
pub const UNNAMED: &str = "<unnamed>";

/// Counters of one group (a (domain, name) pair, or `<no range>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub live_bytes: u64,
    pub live_allocations: u64,
    /// Bytes and allocations live at the peak of all memory.
    pub peak_bytes: u64,
    pub peak_allocations: u64,
    /// The most bytes of this group live at once, whenever that was (what a budget for the
    /// range checks: `summary --max-range-peak`).
    pub own_peak_bytes: u64,
    /// Earliest and latest allocation time among those live at the end (0 if none).
    pub first_live_ns: u64,
    pub last_live_ns: u64,
}

/// NVTX event counts of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct NvtxCounts {
    pub pushes: u64,
    pub pops: u64,
    pub starts: u64,
    pub ends: u64,
    pub marks: u64,
    /// Pops with no pushed range of their domain open on their thread, and ends of a range
    /// that is not open: closing nothing, they change nothing.
    pub unmatched: u64,
}

/// One group of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The range's message (`<no range>` for group 0, `<unnamed>` without a message).
    pub name: String,
    /// The domain's name; `None` for NVTX's default domain (and group 0).
    pub domain: Option<String>,
    pub counts: GroupCounts,
}

/// What the reports get: every group that allocated, `<no range>` first.
#[derive(Debug, Clone, Default)]
pub struct RangesResult {
    pub groups: Vec<Group>,
    pub nvtx: NvtxCounts,
}

/// An open range on a thread's list.
#[derive(Debug, Clone, Copy)]
struct Open {
    group: u32,
    domain: u64,
    /// The start/end range id; 0 for a pushed range.
    range: u64,
}

/// Where a live allocation's attribution is kept: its address space, address and time
/// (two live allocations can share an address around reordered events, never all three).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    address: u64,
    time_ns: u64,
    space: u8,
}

impl Key {
    fn of(a: &LiveAlloc) -> Key {
        Key {
            address: a.address,
            time_ns: a.time_ns,
            space: a.kind.space() as u8,
        }
    }
}

#[derive(Debug, Default)]
struct ThreadRanges {
    open: Vec<Open>,
    /// Pushes not opened because of `MAX_OPEN`; the thread's next pops close these first.
    skipped: u64,
}

/// The range state during the replay (see the module comment).
#[derive(Debug, Default)]
pub struct Ranges {
    strings: FastMap<u64, String>,
    /// (domain id, name id) → group index (from 1).
    group_of: FastMap<(u64, u64), u32>,
    /// Indexed by group; 0 is `<no range>` (its key is never in `group_of`).
    groups: Vec<((u64, u64), GroupCounts)>,
    threads: FastMap<u32, ThreadRanges>,
    /// Open start/end range id → the thread whose list holds it.
    started: FastMap<u64, u32>,
    open_total: usize,
    attributed: FastMap<Key, u32>,
    /// A new high-water mark of all memory and no free since.
    peak_pending: bool,
    nvtx: NvtxCounts,
}

impl Ranges {
    /// Starts tracking at the trace's first NVTX record, with what the replay has seen so
    /// far: everything live then, and the peak so far, belong to `<no range>`.
    /// `peak_allocations` is the number of allocations live at `totals`' peak.
    pub fn new(totals: &Counters, peak_allocations: u64) -> Ranges {
        let mut counts = GroupCounts {
            allocations: totals.allocations,
            frees: totals.frees,
            bytes_allocated: totals.bytes_allocated,
            bytes_freed: totals.bytes_freed,
            live_bytes: totals.live_bytes,
            live_allocations: totals.live_allocations,
            ..GroupCounts::default()
        };
        let at_peak = totals.live_bytes == totals.peak_bytes && totals.peak_bytes > 0;
        if !at_peak {
            counts.peak_bytes = totals.peak_bytes;
            counts.peak_allocations = peak_allocations;
        }
        Ranges {
            groups: vec![((0, 0), counts)],
            // Still at the peak: the copy happens at the first free, as for a new one.
            peak_pending: at_peak,
            ..Ranges::default()
        }
    }

    /// An NVTX string definition.
    pub fn string(&mut self, id: u64, text: String) {
        self.strings.insert(id, text);
    }

    /// An NVTX event.
    pub fn event(&mut self, n: &Nvtx) {
        match n.op {
            NvtxOp::Push => {
                self.nvtx.pushes += 1;
                self.open(n.tid, n.domain, n.name, 0);
            }
            NvtxOp::Start => {
                self.nvtx.starts += 1;
                // A reused id (a damaged trace) first closes the range it named.
                self.close_started(n.range);
                if self.open(n.tid, n.domain, n.name, n.range) {
                    self.started.insert(n.range, n.tid);
                }
            }
            NvtxOp::Pop => {
                self.nvtx.pops += 1;
                if !self.pop(n.tid, n.domain) {
                    self.nvtx.unmatched += 1;
                }
            }
            NvtxOp::End => {
                self.nvtx.ends += 1;
                if !self.close_started(n.range) {
                    self.nvtx.unmatched += 1;
                }
            }
            NvtxOp::Mark => self.nvtx.marks += 1,
            NvtxOp::Other(_) => {}
        }
    }

    fn group(&mut self, domain: u64, name: u64) -> u32 {
        let next = self.groups.len() as u32;
        let g = *self.group_of.entry((domain, name)).or_insert(next);
        if g == next {
            self.groups.push(((domain, name), GroupCounts::default()));
        }
        g
    }

    /// Opens a range on `tid`'s list; false if `MAX_OPEN` ranges are open already.
    fn open(&mut self, tid: u32, domain: u64, name: u64, range: u64) -> bool {
        if self.open_total >= MAX_OPEN {
            if range == 0 {
                self.threads.entry(tid).or_default().skipped += 1;
            }
            return false;
        }
        let group = self.group(domain, name);
        self.threads.entry(tid).or_default().open.push(Open {
            group,
            domain,
            range,
        });
        self.open_total += 1;
        true
    }

    /// Closes `tid`'s innermost pushed range of `domain`; false if none is open.
    fn pop(&mut self, tid: u32, domain: u64) -> bool {
        let Some(t) = self.threads.get_mut(&tid) else {
            return false;
        };
        if t.skipped > 0 {
            t.skipped -= 1;
            return true;
        }
        let Some(i) = t
            .open
            .iter()
            .rposition(|o| o.range == 0 && o.domain == domain)
        else {
            return false;
        };
        t.open.remove(i);
        self.open_total -= 1;
        if t.open.is_empty() && t.skipped == 0 {
            self.threads.remove(&tid);
        }
        true
    }

    /// Closes the start/end range `range`; false if it is not open.
    fn close_started(&mut self, range: u64) -> bool {
        let Some(tid) = self.started.remove(&range) else {
            return false;
        };
        if let Some(t) = self.threads.get_mut(&tid) {
            if let Some(i) = t.open.iter().rposition(|o| o.range == range) {
                t.open.remove(i);
                self.open_total -= 1;
            }
            if t.open.is_empty() && t.skipped == 0 {
                self.threads.remove(&tid);
            }
        }
        true
    }

    /// A memory allocation made live by thread `tid`; `new_peak` if it made a new
    /// high-water mark of all memory.
    pub fn alloc(&mut self, tid: u32, a: &LiveAlloc, new_peak: bool) {
        let group = self.innermost(tid);
        if group != 0 {
            self.attributed.insert(Key::of(a), group);
        }
        let c = &mut self.groups[group as usize].1;
        c.allocations += 1;
        c.bytes_allocated = c.bytes_allocated.saturating_add(a.size);
        c.live_bytes = c.live_bytes.saturating_add(a.size);
        c.live_allocations += 1;
        c.own_peak_bytes = c.own_peak_bytes.max(c.live_bytes);
        if new_peak {
            self.peak_pending = true;
        }
    }

    /// The group of `tid`'s innermost open range, which an allocation by `tid` now is
    /// attributed to; 0 (`<no range>`) when none is open.
    pub fn innermost(&self, tid: u32) -> u32 {
        self.threads
            .get(&tid)
            .and_then(|t| t.open.last())
            .map_or(0, |o| o.group)
    }

    /// A group's range name and domain (`None`: NVTX's default domain), as the result
    /// names them; an unknown group is `<no range>`.
    pub fn label(&self, group: u32) -> (String, Option<String>) {
        let Some(&((domain, name), _)) = self.groups.get(group as usize).filter(|_| group > 0)
        else {
            return (NO_RANGE.to_string(), None);
        };
        let text = |id: u64| self.strings.get(&id).cloned();
        let name = match name {
            0 => UNNAMED.to_string(),
            id => match text(id) {
                Some(t) if t.is_empty() => UNNAMED.to_string(),
                Some(t) => t,
                None => format!("<string {id}>"),
            },
        };
        let domain = match domain {
            0 => None,
            id => Some(text(id).unwrap_or_else(|| format!("<string {id}>"))),
        };
        (name, domain)
    }

    /// A live memory allocation released (before the replay's totals change).
    pub fn release(&mut self, a: &LiveAlloc) {
        if self.peak_pending {
            self.snapshot_peak();
        }
        let group = self.attributed.remove(&Key::of(a)).unwrap_or(0);
        let c = &mut self.groups[group as usize].1;
        c.frees += 1;
        c.bytes_freed = c.bytes_freed.saturating_add(a.size);
        c.live_bytes = c.live_bytes.saturating_sub(a.size);
        c.live_allocations = c.live_allocations.saturating_sub(1);
    }

    fn snapshot_peak(&mut self) {
        for (_, c) in &mut self.groups {
            c.peak_bytes = c.live_bytes;
            c.peak_allocations = c.live_allocations;
        }
        self.peak_pending = false;
    }

    /// The result, given the allocations live at the end (for their times per group).
    pub fn finish(mut self, live: &[LiveAlloc]) -> RangesResult {
        if self.peak_pending {
            self.snapshot_peak();
        }
        let mut times: HashMap<u32, (u64, u64)> = HashMap::new();
        for a in live.iter().filter(|a| a.kind.is_memory()) {
            let g = self.attributed.get(&Key::of(a)).copied().unwrap_or(0);
            let t = times.entry(g).or_insert((a.time_ns, a.time_ns));
            t.0 = t.0.min(a.time_ns);
            t.1 = t.1.max(a.time_ns);
        }
        let mut groups = Vec::with_capacity(self.groups.len());
        for (i, &(_, mut counts)) in self.groups.iter().enumerate() {
            if i > 0 && counts.allocations == 0 {
                continue; // a range that allocated nothing groups nothing
            }
            if let Some(&(first, last)) = times.get(&(i as u32)) {
                counts.first_live_ns = first;
                counts.last_live_ns = last;
            }
            let (name, domain) = self.label(i as u32);
            groups.push(Group {
                name,
                domain,
                counts,
            });
        }
        merge_same_names(&mut groups);
        RangesResult {
            groups,
            nvtx: self.nvtx,
        }
    }
}

/// Groups with the same (domain, name) text are one range (a string defined twice under
/// two ids, as a forked child's trace may): their counts are added.
fn merge_same_names(groups: &mut Vec<Group>) {
    let mut seen: HashMap<(Option<String>, String), usize> = HashMap::new();
    let mut out: Vec<Group> = Vec::with_capacity(groups.len());
    for g in groups.drain(..) {
        match seen.get(&(g.domain.clone(), g.name.clone())) {
            Some(&i) => {
                let c = &mut out[i].counts;
                let d = g.counts;
                c.allocations += d.allocations;
                c.frees += d.frees;
                c.bytes_allocated = c.bytes_allocated.saturating_add(d.bytes_allocated);
                c.bytes_freed = c.bytes_freed.saturating_add(d.bytes_freed);
                c.live_bytes = c.live_bytes.saturating_add(d.live_bytes);
                c.live_allocations += d.live_allocations;
                c.peak_bytes = c.peak_bytes.saturating_add(d.peak_bytes);
                c.peak_allocations += d.peak_allocations;
                // Two ids of one range were live at unknown moments: at most both at once.
                c.own_peak_bytes = c.own_peak_bytes.saturating_add(d.own_peak_bytes);
                if d.live_allocations > 0 {
                    c.first_live_ns = if c.live_allocations == d.live_allocations {
                        d.first_live_ns
                    } else {
                        c.first_live_ns.min(d.first_live_ns)
                    };
                    c.last_live_ns = c.last_live_ns.max(d.last_live_ns);
                }
            }
            None => {
                seen.insert((g.domain.clone(), g.name.clone()), out.len());
                out.push(g);
            }
        }
    }
    *groups = out;
}
