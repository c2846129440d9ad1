//! The heuristics' observer: follows each (device, kind)'s live bytes through the replay
//! as cycles (lows and crests), tags allocations with their cycle, and turns what it saw
//! into findings, at one level: tensors where a framework's allocator reported them (what
//! PyTorch calls allocated), else the memory allocated from CUDA, HIP or the driver.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use gpumemprof_format::{MemKind, Record};

use super::model::*;
use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::{LiveAlloc, LiveChange, Replayed};
use crate::report::level::MemoryLevel;
use crate::report::teardown::Teardown;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;
use crate::units;

/// The state of one memory (device, kind) row as the events go by.
#[derive(Debug, Default)]
struct RowTrack {
    live: u64,
    /// The last change was a release.
    falling: bool,
    lows: u64,
    first_low: u64,
    last_low: u64,
    /// Lows at or above the low before them.
    non_decreasing: u64,
    /// When live bytes last rose (the time a crest was reached).
    rose_ns: u64,
    crests: u64,
    crest_sum: u128,
    max_crest: u64,
    max_crest_time: u64,
    sizes: HashSet<u64>,
}

impl RowTrack {
    pub(super) fn crest(&mut self) {
        self.crests += 1;
        self.crest_sum += u128::from(self.live);
        if self.live > self.max_crest {
            self.max_crest = self.live;
            self.max_crest_time = self.rose_ns;
        }
    }
}

/// A release after the trace's last allocation so far.
#[derive(Debug, Clone, Copy)]
struct LateRelease {
    alloc: LiveAlloc,
    cycle: u64,
}

/// A failed allocation although the device reported that much memory free.
#[derive(Debug, Clone, Copy, Default)]
struct FreeButFailed {
    count: u64,
    size: u64,
    mem_free: u64,
    mem_total: u64,
    stack: u64,
}

/// Collects what the heuristics need during the replay pass.
#[derive(Debug, Default)]
pub struct Analysis {
    rows: BTreeMap<(i32, MemKind), RowTrack>,
    /// The cycle of every live memory allocation, by (kind, address, time).
    cycles: FastMap<(MemKind, u64, u64), u64>,
    /// Releases since the last allocation (the shutdown phase, once the trace ends).
    late: Vec<LateRelease>,
    free_but_failed: BTreeMap<(i32, MemKind), FreeButFailed>,
}

/// Rows followed through the pass: memory and tensors (which level the findings read is
/// known only at its end).
fn followed(kind: MemKind) -> bool {
    kind.is_memory() || kind == MemKind::Tensor
}

impl Observer for Analysis {
    fn record(&mut self, record: &Record) {
        match record {
            Record::Alloc(a) if a.address != 0 && followed(a.kind) => {
                let row = self.rows.entry((a.device, a.kind)).or_default();
                if row.sizes.len() < MAX_SIZES_COUNTED {
                    row.sizes.insert(a.size);
                }
            }
            Record::AllocFailed(f) if f.mem_total > 0 && f.mem_free >= f.size => {
                let e = self.free_but_failed.entry((f.device, f.kind)).or_default();
                e.count += 1;
                // The largest such request is the one shown.
                if e.count == 1 || f.size > e.size {
                    e.size = f.size;
                    e.mem_free = f.mem_free;
                    e.mem_total = f.mem_total;
                    e.stack = f.stack;
                }
            }
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        for change in changes {
            match *change {
                LiveChange::Added(a) if followed(a.kind) => {
                    let row = self.rows.entry((a.device, a.kind)).or_default();
                    if row.falling {
                        if row.lows == 0 {
                            row.first_low = row.live;
                        } else if row.live >= row.last_low {
                            row.non_decreasing += 1;
                        }
                        row.last_low = row.live;
                        row.lows += 1;
                        row.falling = false;
                    }
                    row.live = row.live.saturating_add(a.size);
                    row.rose_ns = time_ns;
                    self.cycles.insert((a.kind, a.address, a.time_ns), row.lows);
                    self.late.clear();
                }
                LiveChange::Released(a) if followed(a.kind) => {
                    let row = self.rows.entry((a.device, a.kind)).or_default();
                    if !row.falling {
                        row.crest();
                        row.falling = true;
                    }
                    row.live = row.live.saturating_sub(a.size);
                    let cycle = self
                        .cycles
                        .remove(&(a.kind, a.address, a.time_ns))
                        .unwrap_or(0);
                    self.late.push(LateRelease { alloc: a, cycle });
                }
                _ => {}
            }
        }
    }
}

impl Analysis {
    pub fn new() -> Analysis {
        Analysis::default()
    }

    /// The findings at `level`, once the pass is over. Memory the interpreter's
    /// `teardown` freed was still held when the program's own code finished: a site
    /// still growing counts it (the list that keeps a tensor a step, freed only at exit);
    /// what the process still held when it exited is what teardown left.
    pub(super) fn findings(
        mut self,
        trace: &TraceInfo,
        r: &Replayed,
        sym: &mut Symbolizer,
        frames: usize,
        level: MemoryLevel,
        teardown: Option<&Teardown>,
    ) -> Vec<Finding> {
        self.rows.retain(|&(_, kind), _| level.counts(kind));
        for row in self.rows.values_mut() {
            // Still rising when the trace ended: the end is a crest.
            if !row.falling && row.live > 0 {
                row.crest();
            }
        }
        let mut out = Vec::new();
        let mut finding = |heuristic: &'static str,
                           severity: &'static str,
                           at: Option<(i32, MemKind)>,
                           bytes: u64,
                           count: u64,
                           stack: Option<u64>,
                           message: String,
                           evidence: &[(&'static str, u64)]| Finding {
            heuristic,
            severity,
            device: at.map(|(d, _)| d),
            kind: at.map(|(_, k)| k.name()),
            bytes,
            count,
            stack_id: stack,
            frames: stack.map_or_else(Vec::new, |s| sym.stack(s, frames)),
            message,
            evidence: evidence.iter().copied().collect(),
        };

        for (&(device, kind), row) in &self.rows {
            let place = row_place(device, kind.name());
            let growth = row.last_low.saturating_sub(row.first_low);
            if row.lows >= GROWTH_MIN_LOWS
                && growth >= GROWTH_MIN_BYTES
                && u128::from(row.non_decreasing) * 100
                    >= u128::from(GROWTH_MIN_NON_DECREASING_PERCENT) * u128::from(row.lows - 1)
            {
                let per_cycle = growth / (row.lows - 1);
                out.push(finding(
                    "monotonic_growth",
                    "warning",
                    Some((device, kind)),
                    growth,
                    0,
                    None,
                    format!(
                        "{place} grows: {}",
                        growth_sentence(row.first_low, row.last_low, row.lows, per_cycle)
                    ),
                    &[
                        ("lows", row.lows),
                        ("non_decreasing_lows", row.non_decreasing),
                        ("first_low_bytes", row.first_low),
                        ("last_low_bytes", row.last_low),
                        ("growth_per_cycle_bytes", per_cycle),
                    ],
                ));
            }
            if row.crests >= SPIKE_MIN_CRESTS {
                let others = row.crest_sum - u128::from(row.max_crest);
                let typical = (others / u128::from(row.crests - 1)) as u64;
                if u128::from(row.max_crest) >= u128::from(SPIKE_RATIO) * u128::from(typical)
                    && row.max_crest - typical >= SPIKE_MIN_BYTES
                {
                    // The largest holder at the row's peak, when the spike is the peak.
                    let holder = r
                        .rows
                        .iter()
                        .find(|x| x.device == device && x.kind == kind)
                        .filter(|x| x.counters.peak_bytes == row.max_crest)
                        .and_then(|x| {
                            x.peak_sites
                                .iter()
                                .max_by(|a, b| a.bytes.cmp(&b.bytes).then(b.stack.cmp(&a.stack)))
                        })
                        .map(|s| s.stack);
                    out.push(finding(
                        "spike",
                        "warning",
                        Some((device, kind)),
                        row.max_crest - typical,
                        0,
                        holder,
                        format!(
                            "{place} spiked to {} at {}, against {} at the other {} crests on \
                             average",
                            units::bytes_exact(row.max_crest),
                            units::secs(row.max_crest_time),
                            units::bytes_exact(typical),
                            row.crests - 1
                        ),
                        &[
                            ("crests", row.crests),
                            ("spike_bytes", row.max_crest),
                            ("spike_time_ns", row.max_crest_time),
                            ("typical_crest_bytes", typical),
                        ],
                    ));
                }
            }
            let sizes = row.sizes.len() as u64;
            let allocations = r
                .rows
                .iter()
                .find(|x| x.device == device && x.kind == kind)
                .map_or(0, |x| x.counters.allocations);
            if allocations >= CHURN_MIN_ALLOCATIONS && sizes >= CHURN_MIN_SIZES {
                let more = if sizes as usize >= MAX_SIZES_COUNTED {
                    " or more"
                } else {
                    ""
                };
                out.push(finding(
                    "fragmentation_varied_sizes",
                    "info",
                    Some((device, kind)),
                    0,
                    allocations,
                    None,
                    format!("{place}: {allocations} allocations of {sizes}{more} different sizes"),
                    &[("allocations", allocations), ("distinct_sizes", sizes)],
                ));
            }
        }

        for a in &r.allocators {
            // At the moment reserved memory peaked, the tensors held at most their own peak:
            // the rest of the reserved peak was cached in segments, in no tensor.
            let cached = a.peak_reserved.saturating_sub(a.peak_allocated);
            if cached >= CACHED_MIN_BYTES
                && u128::from(cached) * 100
                    >= u128::from(CACHED_MIN_PERCENT) * u128::from(a.peak_reserved)
            {
                out.push(finding(
                    "fragmentation_cached_unallocated",
                    "info",
                    Some((a.device, MemKind::Tensor)),
                    cached,
                    0,
                    None,
                    format!(
                        "device {}: PyTorch reserved up to {} but its tensors needed at most \
                         {}: at least {} ({}%) was cached but unallocated when reserved \
                         memory peaked",
                        units::device(a.device),
                        units::bytes_exact(a.peak_reserved),
                        units::bytes_exact(a.peak_allocated),
                        units::bytes_exact(cached),
                        u128::from(cached) * 100 / u128::from(a.peak_reserved.max(1))
                    ),
                    &[
                        ("reserved_peak_bytes", a.peak_reserved),
                        ("allocated_peak_bytes", a.peak_allocated),
                        ("cached_bytes", cached),
                    ],
                ));
            }
        }

        for (&(device, kind), f) in &self.free_but_failed {
            out.push(finding(
                "fragmentation_failed_with_free_memory",
                "warning",
                Some((device, kind)),
                f.size,
                f.count,
                Some(f.stack).filter(|&s| s != 0),
                format!(
                    "device {} {} memory: {} failed although the device had more memory free: \
                     {} requested with {} of {} free",
                    units::device(device),
                    kind.name(),
                    units::plural(f.count, "allocation", "allocations"),
                    units::bytes_exact(f.size),
                    units::bytes_exact(f.mem_free),
                    units::bytes_exact(f.mem_total)
                ),
                &[
                    ("failures", f.count),
                    ("size_bytes", f.size),
                    ("mem_free_bytes", f.mem_free),
                    ("mem_total_bytes", f.mem_total),
                ],
            ));
        }

        // Sites whose memory live at the end (or freed only by the interpreter's teardown)
        // was allocated in many different cycles.
        let freed_at_exit = teardown.map_or(&[][..], |t| &t.freed[..]);
        let late_cycles: FastMap<(MemKind, u64, u64), u64> = (self.late.iter())
            .map(|l| ((l.alloc.kind, l.alloc.address, l.alloc.time_ns), l.cycle))
            .collect();
        let mut growing: BTreeMap<(u64, MemKind), Group> = BTreeMap::new();
        let held =
            (r.live.iter().map(|a| (a, false))).chain(freed_at_exit.iter().map(|a| (a, true)));
        for (a, at_exit) in held.filter(|(a, _)| level.counts(a.kind)) {
            let key = (a.kind, a.address, a.time_ns);
            let cycle = (self.cycles.get(&key).or_else(|| late_cycles.get(&key))).copied();
            let g = growing.entry((a.stack, a.kind)).or_default();
            g.add(a);
            g.at_exit += u64::from(at_exit);
            if let Some(c) = cycle {
                g.cycles.insert(c);
            }
        }
        let mut sites: Vec<_> = growing
            .into_iter()
            .filter(|(_, g)| g.cycles.len() as u64 >= GROWING_SITE_MIN_CYCLES)
            .collect();
        sites.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then(ka.cmp(kb)));
        let growing_sites: BTreeSet<(u64, MemKind)> = sites.iter().map(|(k, _)| *k).collect();
        let (one, many) = level.count_words();
        let counted = |n: u64| units::plural(n, one, many);
        for ((stack, kind), g) in sites {
            let device = g.single_device();
            let when = if g.at_exit == 0 {
                format!("was still live at the end ({})", counted(g.count))
            } else {
                format!(
                    "was still held when the program's code finished ({}, {} of them freed \
                     only by the interpreter's teardown)",
                    counted(g.count),
                    g.at_exit
                )
            };
            out.push(finding(
                "site_still_growing",
                "warning",
                device.map(|d| (d, kind)),
                g.bytes,
                g.count,
                Some(stack),
                format!(
                    "{} of {} memory from one site, allocated in {} different cycles, {when}",
                    units::bytes_exact(g.bytes),
                    kind.name(),
                    g.cycles.len(),
                ),
                &[
                    ("cycles", g.cycles.len() as u64),
                    ("first_time_ns", g.first),
                    ("last_time_ns", g.last),
                ],
            ));
        }

        // A process a signal ended had no chance to free: not a cleanup problem. The
        // growing sites' memory is theirs already (`causes`): this is what the others left.
        if trace.exited() && r.totals.live_bytes > 0 {
            // The largest (stack, kind) group, as `leaks` would list first.
            let mut groups: BTreeMap<(u64, MemKind), Group> = BTreeMap::new();
            for a in r.live.iter().filter(|a| level.counts(a.kind)) {
                if !growing_sites.contains(&(a.stack, a.kind)) {
                    groups.entry((a.stack, a.kind)).or_default().add(a);
                }
            }
            let largest = groups
                .iter()
                .max_by(|(ka, a), (kb, b)| a.bytes.cmp(&b.bytes).then(kb.cmp(ka)))
                .map(|((s, _), _)| *s);
            let bytes = (groups.values()).fold(0u64, |n, g| n.saturating_add(g.bytes));
            let count = (groups.values()).fold(0u64, |n, g| n.saturating_add(g.count));
            let besides = if growing_sites.is_empty() {
                ""
            } else {
                " besides the growing sites above"
            };
            if count > 0 {
                out.push(finding(
                    "insufficient_cleanup",
                    "warning",
                    None,
                    bytes,
                    count,
                    largest,
                    format!(
                        "{} in {} still allocated when the process exited, from {}{besides}",
                        units::bytes_exact(bytes),
                        counted(count),
                        units::plural(groups.len() as u64, "site", "sites")
                    ),
                    &[("sites", groups.len() as u64)],
                ));
            }
        }

        if trace.exited() {
            let mut held: BTreeMap<(u64, MemKind), Group> = BTreeMap::new();
            // A growing site's memory freed at exit is that site's finding already.
            let others = (self.late.iter())
                .filter(|l| !growing_sites.contains(&(l.alloc.stack, l.alloc.kind)));
            for l in others.filter(|l| level.counts(l.alloc.kind)) {
                let lows = self
                    .rows
                    .get(&(l.alloc.device, l.alloc.kind))
                    .map_or(0, |row| row.lows);
                if l.cycle == 0 && lows >= SHUTDOWN_MIN_LOWS {
                    held.entry((l.alloc.stack, l.alloc.kind))
                        .or_default()
                        .add(&l.alloc);
                }
            }
            let mut held: Vec<_> = held.into_iter().collect();
            held.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then(ka.cmp(kb)));
            for ((stack, kind), g) in held {
                out.push(finding(
                    "freed_only_at_shutdown",
                    "info",
                    g.single_device().map(|d| (d, kind)),
                    g.bytes,
                    g.count,
                    Some(stack),
                    format!(
                        "{} of {} memory in {}, allocated before the first cycle, was freed only \
                         at shutdown",
                        units::bytes_exact(g.bytes),
                        kind.name(),
                        counted(g.count)
                    ),
                    &[("first_time_ns", g.first), ("last_time_ns", g.last)],
                ));
            }
        }

        let rank = |f: &Finding| {
            (
                f.severity != "warning",
                HEURISTICS.iter().position(|h| *h == f.heuristic),
            )
        };
        // Stable: within one heuristic the order built above is kept.
        out.sort_by_key(rank);
        out
    }
}

/// Allocations grouped by (stack, kind).
#[derive(Debug, Default)]
struct Group {
    bytes: u64,
    count: u64,
    first: u64,
    last: u64,
    devices: BTreeSet<i32>,
    cycles: BTreeSet<u64>,
    /// Of them, freed only by the interpreter's teardown.
    at_exit: u64,
}

impl Group {
    pub(super) fn add(&mut self, a: &LiveAlloc) {
        if self.count == 0 {
            self.first = a.time_ns;
            self.last = a.time_ns;
        }
        self.bytes = self.bytes.saturating_add(a.size);
        self.count += 1;
        self.first = self.first.min(a.time_ns);
        self.last = self.last.max(a.time_ns);
        self.devices.insert(a.device);
    }

    pub(super) fn single_device(&self) -> Option<i32> {
        match self.devices.iter().collect::<Vec<_>>().as_slice() {
            [d] => Some(**d),
            _ => None,
        }
    }
}
