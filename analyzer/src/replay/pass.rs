//! The pass itself: `Replay` applies each record to the live state, counts, keeps the
//! peak snapshots and the NVTX attribution, and `finish` turns it into `Replayed`.

use std::collections::hash_map::{Entry, HashMap};

use super::fates::{Fates, FatesResult};
use super::model::*;
use super::nvml::NvmlView;
use super::ranges::{Ranges, RangesResult};
use super::tally::{Held, RowState, Slot};
use crate::fasthash::FastMap;
use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, PyCode, Record, Sample, Tensor, FREE_RANGE, SPACES,
};

/// (device, framework) pairs whose allocator figures are kept; a real job has a few.
const MAX_ALLOCATORS: usize = 256;

/// Everything the reports need, once the stream has been consumed.
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// Sorted by device, then kind.
    pub rows: Vec<Row>,
    /// All memory rows together (not reservations or VMM handles, see
    /// `MemKind::is_memory`); `peak_bytes` is the peak of the combined live bytes.
    pub totals: Counters,
    /// Successful frees of addresses that were not live.
    pub unknown_frees: u64,
    /// Free calls that returned an error.
    pub failed_frees: u64,
    /// The first `MAX_KEPT_FAILURES` failed allocations, in trace order.
    pub failures: Vec<FailedAlloc>,
    /// Out-of-memory errors: failed allocations with out-of-memory, a framework allocator's
    /// refusal and the failed CUDA calls it made before it counted once (`attempts`).
    pub out_of_memory_errors: u64,
    /// Allocations live at the end of the trace, in no particular order (reservations and
    /// VMM handles included: filter on `kind.is_memory()`).
    pub live: Vec<LiveAlloc>,
    /// With `Replay::keeping_exit`: the allocations released after the last one made, in
    /// order, with their frees' stacks (the interpreter's teardown is among them); else empty.
    pub exit_tail: Vec<Released>,
    /// NVML samples per device, sorted by device; empty when the trace has none.
    pub nvml: Vec<NvmlDevice>,
    pub stacks: HashMap<u64, StackInfo>,
    /// In trace order.
    pub modules: Vec<Module>,
    /// Python code objects by id, for the Python frames in `stacks`.
    pub python: HashMap<u64, PyCode>,
    pub pipeline: CaptureStats,
    /// Memory by NVTX range (`ranges.rs`); `None` when the trace has no NVTX record.
    pub ranges: Option<RangesResult>,
    /// Allocations live when `totals` reached its peak.
    pub peak_allocations: u64,
    /// A framework allocator's own figures per device, sorted by device; empty when the
    /// trace has no tensor records.
    pub allocators: Vec<AllocatorFigures>,
    /// The time of the latest record read before the last damaged block (`None`: no block
    /// was damaged): an allocation made before it may have had its free in a damaged
    /// block, and then reads as live when it was not.
    pub damaged_after_ns: Option<u64>,
    /// What became of the tensors live at each device's tensor peak (`fates`, for `kinds`);
    /// empty when the trace has no tensor records.
    pub fates: FatesResult,
}

/// The streaming state. Feed it records with `record`, then call `finish`.
#[derive(Debug, Default)]
pub struct Replay {
    /// Per address space (`MemKind::space`): memory, reservations, VMM handles, tensors.
    live: [FastMap<u64, Slot>; SPACES],
    /// A handful of rows at most: a linear scan beats hashing the key on every event.
    rows: Vec<((i32, MemKind), RowState)>,
    totals: Counters,
    unknown_frees: u64,
    failed_frees: u64,
    failures: Vec<FailedAlloc>,
    /// Out-of-memory failures, and those that were a refusal's attempts.
    out_of_memory: u64,
    refusal_attempts: u64,
    attempts: super::attempts::Attempts,
    /// The fast hasher while replaying; `Replayed` gets a std map.
    stacks: FastMap<u64, StackInfo>,
    /// Stacks defined but not used yet: the only ones an event can set `first_use_ns` of.
    /// Almost always empty (the shim defines a stack just before its first use), so most
    /// events skip looking their stack up in `stacks`.
    unused_stacks: FastMap<u64, ()>,
    modules: Vec<Module>,
    /// Python code objects by id (what Python frames in stacks name).
    python: HashMap<u64, PyCode>,
    pipeline: CaptureStats,
    nvml: NvmlView,
    /// Set only inside `record_changes`: where `alloc` and `release` report changes.
    journal: Option<Vec<LiveChange>>,
    /// With `keeping_exit`: the releases since the last allocation, and the stack and time
    /// of the free being applied.
    exit_tail: Option<Box<(Vec<Released>, u64, u64)>>,
    /// Allocations live at `totals`' peak (what `Ranges` starts from).
    peak_allocations: u64,
    /// NVTX range attribution, from the trace's first NVTX record on (boxed: a trace
    /// without NVTX pays one pointer).
    ranges: Option<Box<Ranges>>,
    allocators: Vec<AllocatorFigures>,
    fates: Fates,
    /// API ids that map VMM handles (`cuMemMap`, `hipMemMap`), from the header.
    map_apis: Vec<u16>,
    /// Per device, bytes of `Device` memory live as mappings of VMM handles.
    mapped: Vec<(i32, u64)>,
    /// A VMM handle was created (a row of them exists).
    vmm_seen: bool,
    damaged_after_ns: Option<u64>,
}

impl Replay {
    pub fn new() -> Self {
        Self::default()
    }

    /// A replay that also keeps what was released after the last allocation
    /// (`Replayed::exit_tail`), for `leaks` (memory only, as the releases of one step at most,
    /// or of what was live).
    pub fn keeping_exit() -> Self {
        Replay {
            exit_tail: Some(Box::default()),
            ..Self::default()
        }
    }

    /// The replay of a trace with this header: it names the APIs that map VMM handles, so
    /// that the NVML comparison counts a handle's physical memory once, mapped or not.
    pub fn of_header(mut self, header: &serde_json::Value) -> Self {
        self.map_apis = (gpumemprof_format::header::apis(header).into_iter())
            .filter(|a| a.name == "cuMemMap" || a.name == "hipMemMap")
            .map(|a| a.id)
            .collect();
        self
    }

    /// The reader skipped a damaged block here: what it held (frees among it) is lost.
    pub fn damaged(&mut self) {
        self.damaged_after_ns = Some(self.pipeline.duration_ns);
    }

    /// Adds `delta` (signed) to `device`'s mapped bytes.
    fn mapped_change(&mut self, device: i32, size: u64, added: bool) {
        let i = match self.mapped.iter().position(|(d, _)| *d == device) {
            Some(i) => i,
            None => {
                self.mapped.push((device, 0));
                self.mapped.len() - 1
            }
        };
        let m = &mut self.mapped[i].1;
        *m = if added {
            m.saturating_add(size)
        } else {
            m.saturating_sub(size)
        };
    }

    /// `record`, also appending to `changes` every allocation the record made live or
    /// released, in order (one range free can release several). Views that follow live
    /// memory over time (timeline, flamegraph at a moment) use it instead of matching
    /// frees to allocations a second way.
    pub fn record_changes(&mut self, record: Record, changes: &mut Vec<LiveChange>) {
        self.journal = Some(std::mem::take(changes));
        self.record(record);
        *changes = self.journal.take().unwrap_or_default();
    }

    /// Applies one record.
    // Inlined into the reading loop, so an alloc or a free is read where the reader put
    // it: copying the record into a call's argument stalled on store forwarding.
    #[inline]
    pub fn record(&mut self, record: Record) {
        match record {
            Record::Alloc(a) => self.alloc(&a),
            Record::Free(f) => self.free(&f),
            other => self.record_other(other),
        }
    }

    /// Every record but allocs and frees.
    #[inline(never)]
    pub(super) fn record_other(&mut self, record: Record) {
        match record {
            Record::Alloc(a) => self.alloc(&a),
            Record::Free(f) => self.free(&f),
            Record::AllocFailed(f) => self.alloc_failed(&f),
            Record::Stack { id, frames } => {
                // A redefinition (should not happen) keeps the first use time.
                let first_use_ns = self.stacks.get(&id).and_then(|s| s.first_use_ns);
                if first_use_ns.is_none() && id != 0 {
                    self.unused_stacks.insert(id, ());
                }
                self.stacks.insert(
                    id,
                    StackInfo {
                        frames,
                        first_use_ns,
                    },
                );
            }
            Record::Module(m) => {
                self.saw_time(m.time_ns);
                self.modules.push(m);
            }
            Record::Stats(s) | Record::End(s) => {
                self.saw_time(s.time_ns);
                self.pipeline.events = s.events;
                self.pipeline.queue_waits = s.queue_waits;
                self.pipeline.dropped = s.dropped;
                if matches!(record, Record::End(_)) {
                    self.pipeline.complete = true;
                }
            }
            Record::Ending(e) => {
                self.saw_time(e.time_ns);
                self.pipeline.ending = Some(e.ending);
            }
            Record::Stopped(r) => {
                self.saw_time(r.time_ns);
                self.pipeline.stopped = Some((r.reason, r.time_ns));
            }
            Record::Sample(m) => self.sample(&m),
            Record::PyCode(c) => {
                self.python.insert(c.id, c);
            }
            Record::Nvtx(n) => {
                self.saw_time(n.time_ns);
                self.ranges().event(&n);
            }
            Record::NvtxString { id, text } => self.ranges().string(id, text),
            Record::Tensor(t) => self.tensor(&t),
            Record::Unknown { .. } => self.pipeline.unknown_records += 1,
        }
    }

    /// A framework tensor: an allocation or free of the `Tensor` kind (its own address
    /// space and rows), and the allocator's figures on its device.
    fn tensor(&mut self, t: &Tensor) {
        self.attempts.tensor(t.tid);
        // A free that ends a peak: the fates copy what is live before it goes.
        let peak_ends = t.delta < 0
            && (self.rows.iter()).any(|((device, kind), row)| {
                (*device, *kind) == (t.device, MemKind::Tensor) && row.peak_pending
            });
        if peak_ends {
            self.fates.peak(t.device);
        }
        self.fates.tensor(t);
        let figures = match (self.allocators.iter())
            .position(|f| (f.device, f.framework) == (t.device, t.framework))
        {
            Some(i) => Some(&mut self.allocators[i]),
            // A damaged trace naming thousands of devices: no figures for the rest.
            None if self.allocators.len() >= MAX_ALLOCATORS => None,
            None => {
                self.allocators.push(AllocatorFigures {
                    device: t.device,
                    framework: t.framework,
                    ..AllocatorFigures::default()
                });
                self.allocators.last_mut()
            }
        };
        if let Some(figures) = figures {
            figures.apply(t);
        }
        if t.delta >= 0 {
            self.alloc(&t.as_alloc());
        } else {
            self.free(&Free {
                time_ns: t.time_ns,
                tid: t.tid,
                api: 0,
                address: t.address,
                stream: 0,
                stack: t.stack,
                result: 0,
                flags: 0,
                kind: MemKind::Tensor,
                size: 0,
            });
        }
    }

    /// The NVTX range an allocation by thread `tid` would now be attributed to, as a group
    /// number (0: none open; see `range_label`).
    pub fn range_group(&self, tid: u32) -> u32 {
        self.ranges.as_deref().map_or(0, |r| r.innermost(tid))
    }

    /// The range name and domain of a group from `range_group`; `None` for group 0.
    pub fn range_label(&self, group: u32) -> Option<(String, Option<String>)> {
        let ranges = self.ranges.as_deref().filter(|_| group != 0)?;
        Some(ranges.label(group))
    }

    /// The NVTX range state, started at the first NVTX record.
    pub(super) fn ranges(&mut self) -> &mut Ranges {
        let (totals, peak_allocations) = (&self.totals, self.peak_allocations);
        self.ranges
            .get_or_insert_with(|| Box::new(Ranges::new(totals, peak_allocations)))
    }

    pub(super) fn saw_time(&mut self, time_ns: u64) {
        self.pipeline.duration_ns = self.pipeline.duration_ns.max(time_ns);
    }

    #[inline]
    pub(super) fn used_stack(&mut self, stack: u64, time_ns: u64) {
        if stack == 0 || self.unused_stacks.is_empty() {
            return;
        }
        if self.unused_stacks.remove(&stack).is_some() {
            if let Some(info) = self.stacks.get_mut(&stack) {
                info.first_use_ns = Some(time_ns);
            }
        }
    }

    pub(super) fn row(&mut self, device: i32, kind: MemKind) -> &mut RowState {
        let key = (device, kind);
        let index = match self.rows.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.vmm_seen |= kind == MemKind::VmmHandle;
                self.rows.push((key, RowState::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[index].1
    }

    #[inline(never)]
    pub(super) fn alloc(&mut self, a: &Alloc) {
        self.saw_time(a.time_ns);
        // A successful zero-byte request returns a null pointer that is never freed:
        // tracking it would report a "leak" of nothing.
        if a.address == 0 {
            return;
        }
        self.used_stack(a.stack, a.time_ns);
        let live = LiveAlloc {
            address: a.address,
            time_ns: a.time_ns,
            size: a.size,
            stack: a.stack,
            device: a.device,
            kind: a.kind,
        };
        if let Some(tail) = self.exit_tail.as_deref_mut() {
            tail.0.clear();
        }
        if let Some(journal) = self.journal.as_mut() {
            journal.push(LiveChange::Added(live));
        }
        match self.live[a.kind.space()].entry(a.address) {
            Entry::Vacant(e) => {
                e.insert(Slot::One(Held::of(&live)));
            }
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                match slot {
                    Slot::One(first) => *slot = Slot::Many(vec![first.at(a.address), live]),
                    Slot::Many(all) => all.push(live),
                }
            }
        }
        // Mappings need a handle first: a trace without VMM pays one test of a flag.
        if self.vmm_seen && a.kind == MemKind::Device && self.map_apis.contains(&a.api) {
            self.mapped_change(a.device, a.size, true);
        }
        let row = self.row(a.device, a.kind);
        if row.counters.add(a.size, a.time_ns) {
            row.peak_pending = true;
        }
        row.live_by_stack.add(a.stack, a.size);
        if a.kind.is_memory() {
            let new_peak = self.totals.add(a.size, a.time_ns);
            if new_peak {
                self.peak_allocations = self.totals.live_allocations;
            }
            if let Some(ranges) = self.ranges.as_deref_mut() {
                ranges.alloc(a.tid, &live, new_peak);
            }
        }
        if self.nvml.waiting() {
            self.nvml_saw(a.time_ns);
        }
    }

    #[inline(never)]
    pub(super) fn free(&mut self, f: &Free) {
        self.saw_time(f.time_ns);
        // cudaFree(0) is the idiom to create the context; it frees nothing.
        if f.address == 0 {
            return;
        }
        self.used_stack(f.stack, f.time_ns);
        if f.result != 0 {
            self.failed_frees += 1;
            return;
        }
        if let Some(tail) = self.exit_tail.as_deref_mut() {
            (tail.1, tail.2) = (f.stack, f.time_ns);
        }
        let space = f.kind.space();
        if f.flags & FREE_RANGE != 0 {
            // Mappings inside the range lie end to end (an unmap covers whole,
            // contiguous mappings); walk them from the start.
            let end = f.address.saturating_add(f.size);
            let mut at = f.address;
            let mut released = 0;
            while at < end {
                let Some(freed) = self.take_live(space, at, f.time_ns) else {
                    break;
                };
                at = at.saturating_add(freed.size.max(1));
                // Only an unmap frees a range: what it releases were mappings.
                if freed.kind == MemKind::Device && !self.map_apis.is_empty() {
                    self.mapped_change(freed.device, freed.size, false);
                }
                self.release(freed);
                released += 1;
            }
            if released == 0 {
                self.unknown_frees += 1;
            }
            return;
        }
        let Some(freed) = self.take_live(space, f.address, f.time_ns) else {
            self.unknown_frees += 1;
            return;
        };
        self.release(freed);
    }

    /// Applies the release of a live allocation to its row and the totals.
    pub(super) fn release(&mut self, freed: LiveAlloc) {
        if let Some(journal) = self.journal.as_mut() {
            journal.push(LiveChange::Released(freed));
        }
        if let Some(tail) = self.exit_tail.as_deref_mut() {
            let (released, free_stack, time_ns) = tail;
            released.push(Released {
                alloc: freed,
                free_stack: *free_stack,
                time_ns: *time_ns,
            });
        }
        let row = self.row(freed.device, freed.kind);
        if row.peak_pending {
            // Before applying the free: the state now is the state at the peak.
            row.snapshot_peak();
        }
        row.counters.remove(freed.size);
        row.live_by_stack.remove(freed.stack, freed.size);
        if freed.kind.is_memory() {
            if let Some(ranges) = self.ranges.as_deref_mut() {
                ranges.release(&freed);
            }
            self.totals.remove(freed.size);
        }
    }

    pub(super) fn sample(&mut self, m: &Sample) {
        self.saw_time(m.time_ns);
        let tracked = self.tracked_on(m.device);
        self.nvml.sample(m, tracked);
    }

    /// What the hooks track on `device` as NVML counts it: device memory, with each VMM
    /// handle's bytes once whether mapped or not (its mappings, in the device row, count
    /// instead).
    pub fn tracked_on(&self, device: i32) -> u64 {
        let live = |kind: MemKind| {
            (self.rows.iter())
                .find(|(key, _)| *key == (device, kind))
                .map_or(0, |(_, row)| row.counters.live_bytes)
        };
        let mapped = (self.mapped.iter())
            .find(|(d, _)| *d == device)
            .map_or(0, |(_, b)| *b);
        live(MemKind::Device)
            .saturating_sub(mapped)
            .saturating_add(live(MemKind::VmmHandle))
    }

    /// An allocation at `time_ns` was applied while an NVML sample's window is open.
    #[cold]
    #[inline(never)]
    fn nvml_saw(&mut self, time_ns: u64) {
        let mut view = std::mem::take(&mut self.nvml);
        view.saw(time_ns, |device| self.tracked_on(device));
        self.nvml = view;
    }

    /// Removes the allocation a free at `time_ns` releases: of those live at `address`,
    /// the latest allocated at or before the free, or else the oldest (a free can only
    /// arrive before its allocation through reordering, and the oldest is the likeliest).
    pub(super) fn take_live(
        &mut self,
        space: usize,
        address: u64,
        time_ns: u64,
    ) -> Option<LiveAlloc> {
        let Entry::Occupied(mut e) = self.live[space].entry(address) else {
            return None;
        };
        let all = match e.get_mut() {
            Slot::One(only) => {
                let only = only.at(address);
                e.remove();
                return Some(only);
            }
            Slot::Many(all) => all,
        };
        let before = all
            .iter()
            .enumerate()
            .filter(|(_, a)| a.time_ns <= time_ns)
            .max_by_key(|(_, a)| a.time_ns)
            .map(|(i, _)| i);
        let oldest = || {
            all.iter()
                .enumerate()
                .min_by_key(|(_, a)| a.time_ns)
                .map(|(i, _)| i)
        };
        let index = before.or_else(oldest)?;
        let taken = all.swap_remove(index);
        match all.as_slice() {
            [] => {
                e.remove();
            }
            [last] => {
                let last = Held::of(last);
                *e.get_mut() = Slot::One(last);
            }
            _ => {}
        }
        Some(taken)
    }

    pub(super) fn alloc_failed(&mut self, f: &AllocFailed) {
        self.saw_time(f.time_ns);
        self.used_stack(f.stack, f.time_ns);
        self.row(f.device, f.kind).counters.failed_allocations += 1;
        self.totals.failed_allocations += 1;
        let index = self.failures.len();
        if index < MAX_KEPT_FAILURES {
            self.failures.push(FailedAlloc {
                time_ns: f.time_ns,
                api: f.api,
                size: f.size,
                device: f.device,
                kind: f.kind,
                result: f.result,
                stack: f.stack,
                attempt: false,
            });
        }
        if f.result != gpumemprof_format::OUT_OF_MEMORY {
            return;
        }
        self.out_of_memory += 1;
        if f.kind != MemKind::Tensor {
            self.attempts.failed(f.tid, index as u64);
            return;
        }
        for i in self.attempts.refused(f.tid) {
            self.refusal_attempts += 1;
            if let Some(a) = self.failures.get_mut(i as usize) {
                a.attempt = true;
            }
        }
    }

    pub fn finish(mut self) -> Replayed {
        for ((device, kind), row) in &self.rows {
            if *kind == MemKind::Tensor && row.peak_pending {
                self.fates.peak(*device);
            }
        }
        let mut rows: Vec<Row> = self
            .rows
            .into_iter()
            .map(|((device, kind), mut state)| {
                if state.peak_pending {
                    state.snapshot_peak();
                }
                Row {
                    device,
                    kind,
                    counters: state.counters,
                    peak_sites: state.peak_sites,
                }
            })
            .collect();
        rows.sort_by_key(|r| (r.device, r.kind));
        let mut live = Vec::with_capacity(self.live.iter().map(|m| m.len()).sum());
        for (address, slot) in self.live.into_iter().flatten() {
            match slot {
                Slot::One(a) => live.push(a.at(address)),
                Slot::Many(all) => live.extend(all),
            }
        }
        let ranges = self.ranges.map(|r| r.finish(&live));
        Replayed {
            rows,
            totals: self.totals,
            unknown_frees: self.unknown_frees,
            failed_frees: self.failed_frees,
            failures: self.failures,
            exit_tail: self.exit_tail.map(|t| t.0).unwrap_or_default(),
            out_of_memory_errors: self.out_of_memory - self.refusal_attempts,
            live,
            stacks: self.stacks.into_iter().collect(),
            modules: self.modules,
            python: self.python,
            pipeline: self.pipeline,
            ranges,
            peak_allocations: self.peak_allocations,
            fates: self.fates.finish(),
            damaged_after_ns: self.damaged_after_ns,
            allocators: {
                let mut a = self.allocators;
                a.sort_by_key(|f| (f.device, f.framework));
                a
            },
            nvml: self.nvml.finish(),
        }
    }
}
