//! Replay: THE one streaming pass over a trace's records. Every report is computed from
//! what this pass keeps; nothing re-reads the file and no event is stored.
//!
//! Memory grows with live allocations, distinct stacks, loaded modules and (device, kind)
//! rows — never with the trace's length (failures are capped at `MAX_KEPT_FAILURES`).
//!
//! Peak attribution (after heaptrack's peak tracker): each (device, kind) row keeps its
//! live bytes per stack incrementally, and copies that map only at a local maximum that
//! is also a new high-water mark:
//!
//! ```text
//!  live bytes
//!      │          ▲ new max: flag set     (another max: flag stays set)
//!      │        ┌─┘ ┌───────┐ ◄── first decrease after the flag: snapshot the
//!      │    ┌───┘   │       └──┐   per-stack map *before* applying this free,
//!      │ ┌──┘       │          └───┐ then clear the flag
//!      └─┴──────────┴──────────────┴──► time   (flag still set at the end: snapshot)
//! ```
//!
//! Allocations only ever raise live bytes, so the state at the first decrease after a new
//! maximum is exactly the state at that maximum. The copy costs O(live stacks) once per
//! new high-water mark, not per event.

use std::collections::hash_map::{Entry, HashMap};
use std::io::Read;

use crate::fasthash::FastMap;
use crate::ranges::{Ranges, RangesResult};

use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, PyCode, ReadError, Record, Sample, TraceReader,
    FREE_RANGE,
};

/// Failed allocations kept with their details for reports; later ones are only counted.
/// A program that retries a failing allocation in a loop must not grow our memory.
pub const MAX_KEPT_FAILURES: usize = 1000;

/// An allocation that is live (allocated, not yet freed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAlloc {
    pub address: u64,
    pub time_ns: u64,
    pub size: u64,
    pub stack: u64,
    pub device: i32,
    pub kind: MemKind,
}

/// A failed allocation call, kept for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedAlloc {
    pub time_ns: u64,
    pub api: u16,
    pub size: u64,
    pub device: i32,
    pub kind: MemKind,
    pub result: u32,
    pub stack: u64,
}

/// Bytes and allocation count attributed to one stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Site {
    pub stack: u64,
    pub bytes: u64,
    pub count: u64,
}

/// Counters of one (device, kind) row, or of all rows together (`Replayed::totals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub allocations: u64,
    /// Successful frees that matched a live allocation.
    pub frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub live_bytes: u64,
    pub live_allocations: u64,
    pub peak_bytes: u64,
    /// First time `peak_bytes` was reached (ns since the trace's start).
    pub peak_time_ns: u64,
    pub failed_allocations: u64,
}

impl Counters {
    /// Adds a live allocation; true when it made a new high-water mark.
    fn add(&mut self, size: u64, time_ns: u64) -> bool {
        self.allocations += 1;
        self.bytes_allocated = self.bytes_allocated.saturating_add(size);
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_allocations += 1;
        // Strictly greater: the peak time is the first time the peak was reached.
        if self.live_bytes > self.peak_bytes {
            self.peak_bytes = self.live_bytes;
            self.peak_time_ns = time_ns;
            true
        } else {
            false
        }
    }

    fn remove(&mut self, size: u64) {
        self.frees += 1;
        self.bytes_freed = self.bytes_freed.saturating_add(size);
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_allocations = self.live_allocations.saturating_sub(1);
    }
}

/// One (device, kind) row of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub device: i32,
    pub kind: MemKind,
    pub counters: Counters,
    /// Live bytes per stack at this row's peak (unsorted; empty if it never allocated).
    pub peak_sites: Vec<Site>,
}

/// An interned stack: return addresses, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackInfo {
    pub frames: Vec<u64>,
    /// Time of the first event that used it (selects among modules loaded at one range).
    pub first_use_ns: Option<u64>,
}

/// The capture pipeline's state as the trace tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pipeline {
    pub events: u64,
    pub queue_waits: u64,
    pub dropped: u64,
    /// An End record was seen: the process closed the trace cleanly.
    pub complete: bool,
    /// Time of the latest record (ns since the trace's start).
    pub duration_ns: u64,
    /// Records of kinds this analyzer does not know (written by a newer shim).
    pub unknown_records: u64,
}

/// What NVML said about one device over the run, next to what the hooks tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlDevice {
    /// NVML device index (taken to be the CUDA ordinal: true unless
    /// `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER` reorder devices).
    pub device: i32,
    pub samples: u64,
    /// The sample where NVML saw this process use the most memory on the device (of
    /// several at that value, the one where the hooks tracked the most).
    pub peak: Sample,
    /// Device bytes the hooks tracked as live on that device at `peak`'s time.
    pub tracked_at_peak: u64,
    /// The last sample, and the tracked bytes at its time.
    pub last: Sample,
    pub tracked_at_last: u64,
}

impl NvmlDevice {
    /// Memory the hooks did not see at NVML's peak (context, library workspaces).
    pub fn untracked_at_peak(&self) -> u64 {
        self.peak.process_used.saturating_sub(self.tracked_at_peak)
    }
    pub fn untracked_at_last(&self) -> u64 {
        self.last.process_used.saturating_sub(self.tracked_at_last)
    }
}

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
    /// Allocations live at the end of the trace, in no particular order (reservations and
    /// VMM handles included: filter on `kind.is_memory()`).
    pub live: Vec<LiveAlloc>,
    /// NVML samples per device, sorted by device; empty when the trace has none.
    pub nvml: Vec<NvmlDevice>,
    pub stacks: HashMap<u64, StackInfo>,
    /// In trace order.
    pub modules: Vec<Module>,
    /// Python code objects by id, for the Python frames in `stacks`.
    pub python: HashMap<u64, PyCode>,
    pub pipeline: Pipeline,
    /// Memory by NVTX range (`ranges.rs`); `None` when the trace has no NVTX record.
    pub ranges: Option<RangesResult>,
    /// Allocations live when `totals` reached its peak.
    pub peak_allocations: u64,
}

/// A change to live memory made by one record, as `Replay::record_changes` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveChange {
    /// An allocation became live.
    Added(LiveAlloc),
    /// A live allocation was released.
    Released(LiveAlloc),
}

/// Live allocations at one address: almost always one. Several only around address
/// reuse whose events arrived out of order from different threads.
#[derive(Debug)]
enum Slot {
    One(Held),
    Many(Vec<LiveAlloc>),
}

/// A live allocation as its address's slot keeps it: `LiveAlloc` less the address, which
/// is the key. A slot is 32 bytes (the variant tag fits in `kind`'s spare values), a map
/// entry 40: the analyzer's memory is mostly these (see README, "Limits").
#[derive(Debug, Clone, Copy)]
struct Held {
    time_ns: u64,
    size: u64,
    stack: u64,
    device: i32,
    kind: MemKind,
}

impl Held {
    fn of(a: &LiveAlloc) -> Held {
        Held {
            time_ns: a.time_ns,
            size: a.size,
            stack: a.stack,
            device: a.device,
            kind: a.kind,
        }
    }

    fn at(self, address: u64) -> LiveAlloc {
        LiveAlloc {
            address,
            time_ns: self.time_ns,
            size: self.size,
            stack: self.stack,
            device: self.device,
            kind: self.kind,
        }
    }
}

/// Stack ids below this are counted in a vector indexed by id: the shim numbers stacks
/// from 1 up, so the usual ids are small and dense, and indexing is cheaper than hashing
/// (BENCHMARKS.md, "fourth session"). Larger ids go to a map. The bound keeps a hostile
/// trace's vector at 1 MiB per row.
const DENSE_STACK_IDS: u64 = 1 << 16;

/// Live bytes and allocations per stack (a `Site` less its stack). A stack is live when
/// its count is not zero; the live ones among the dense ids are also listed, so that a
/// peak snapshot visits only them, never every id up to the largest.
#[derive(Debug, Default)]
struct StackTally {
    dense: Vec<DenseTally>,
    /// The dense ids whose count is not zero, in no particular order.
    live: Vec<u32>,
    sparse: FastMap<u64, (u64, u64)>,
}

#[derive(Debug, Default, Clone, Copy)]
struct DenseTally {
    bytes: u64,
    count: u64,
    /// Where the id stands in `live` while its count is not zero.
    at: u32,
}

impl StackTally {
    #[inline]
    fn add(&mut self, stack: u64, size: u64) {
        if stack >= DENSE_STACK_IDS {
            let (bytes, count) = self.sparse.entry(stack).or_default();
            *bytes = bytes.saturating_add(size);
            *count += 1;
            return;
        }
        let i = stack as usize;
        if i >= self.dense.len() {
            let len = (i + 1).next_power_of_two().max(256);
            let len = len.min(DENSE_STACK_IDS as usize);
            self.dense.resize(len, DenseTally::default());
        }
        let t = &mut self.dense[i];
        if t.count == 0 {
            t.at = self.live.len() as u32;
            self.live.push(stack as u32);
        }
        t.bytes = t.bytes.saturating_add(size);
        t.count += 1;
    }

    #[inline]
    fn remove(&mut self, stack: u64, size: u64) {
        if stack >= DENSE_STACK_IDS {
            if let Entry::Occupied(mut e) = self.sparse.entry(stack) {
                let (bytes, count) = e.get_mut();
                *bytes = bytes.saturating_sub(size);
                *count = count.saturating_sub(1);
                if *count == 0 {
                    e.remove();
                }
            }
            return;
        }
        let Some(t) = self.dense.get_mut(stack as usize) else {
            return;
        };
        if t.count == 0 {
            return;
        }
        t.bytes = t.bytes.saturating_sub(size);
        t.count -= 1;
        if t.count == 0 {
            let at = t.at as usize;
            self.live.swap_remove(at);
            if let Some(&moved) = self.live.get(at) {
                self.dense[moved as usize].at = at as u32;
            }
        }
    }

    /// The live stacks, in no particular order.
    fn sites(&self) -> impl Iterator<Item = Site> + '_ {
        let dense = self.live.iter().map(|&stack| {
            let t = self.dense[stack as usize];
            (u64::from(stack), t.bytes, t.count)
        });
        let sparse = self
            .sparse
            .iter()
            .map(|(&s, &(bytes, count))| (s, bytes, count));
        dense.chain(sparse).map(|(stack, bytes, count)| Site {
            stack,
            bytes,
            count,
        })
    }
}

#[derive(Debug, Default)]
struct RowState {
    counters: Counters,
    live_by_stack: StackTally,
    /// An allocation made a new high-water mark and no free has followed yet.
    peak_pending: bool,
    peak_sites: Vec<Site>,
}

impl RowState {
    fn snapshot_peak(&mut self) {
        self.peak_sites.clear();
        self.peak_sites.extend(self.live_by_stack.sites());
        self.peak_pending = false;
    }
}

/// The streaming state. Feed it records with `record`, then call `finish`.
#[derive(Debug, Default)]
pub struct Replay {
    /// Per address space (`MemKind::space`): memory, reservations, VMM handles.
    live: [FastMap<u64, Slot>; 3],
    /// A handful of rows at most: a linear scan beats hashing the key on every event.
    rows: Vec<((i32, MemKind), RowState)>,
    totals: Counters,
    unknown_frees: u64,
    failed_frees: u64,
    failures: Vec<FailedAlloc>,
    /// The fast hasher while replaying; `Replayed` gets a std map.
    stacks: FastMap<u64, StackInfo>,
    /// Stacks defined but not used yet: the only ones an event can set `first_use_ns` of.
    /// Almost always empty (the shim defines a stack just before its first use), so most
    /// events skip looking their stack up in `stacks`.
    unused_stacks: FastMap<u64, ()>,
    modules: Vec<Module>,
    /// Python code objects by id (what Python frames in stacks name).
    python: HashMap<u64, PyCode>,
    pipeline: Pipeline,
    nvml: Vec<NvmlDevice>,
    /// Set only inside `record_changes`: where `alloc` and `release` report changes.
    journal: Option<Vec<LiveChange>>,
    /// Allocations live at `totals`' peak (what `Ranges` starts from).
    peak_allocations: u64,
    /// NVTX range attribution, from the trace's first NVTX record on (boxed: a trace
    /// without NVTX pays one pointer).
    ranges: Option<Box<Ranges>>,
}

impl Replay {
    pub fn new() -> Self {
        Self::default()
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
    fn record_other(&mut self, record: Record) {
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
            Record::Sample(m) => self.sample(&m),
            Record::PyCode(c) => {
                self.python.insert(c.id, c);
            }
            Record::Nvtx(n) => {
                self.saw_time(n.time_ns);
                self.ranges().event(&n);
            }
            Record::NvtxString { id, text } => self.ranges().string(id, text),
            Record::Unknown { .. } => self.pipeline.unknown_records += 1,
        }
    }

    /// The NVTX range state, started at the first NVTX record.
    fn ranges(&mut self) -> &mut Ranges {
        let (totals, peak_allocations) = (&self.totals, self.peak_allocations);
        self.ranges
            .get_or_insert_with(|| Box::new(Ranges::new(totals, peak_allocations)))
    }

    fn saw_time(&mut self, time_ns: u64) {
        self.pipeline.duration_ns = self.pipeline.duration_ns.max(time_ns);
    }

    #[inline]
    fn used_stack(&mut self, stack: u64, time_ns: u64) {
        if stack == 0 || self.unused_stacks.is_empty() {
            return;
        }
        if self.unused_stacks.remove(&stack).is_some() {
            if let Some(info) = self.stacks.get_mut(&stack) {
                info.first_use_ns = Some(time_ns);
            }
        }
    }

    fn row(&mut self, device: i32, kind: MemKind) -> &mut RowState {
        let key = (device, kind);
        let index = match self.rows.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.rows.push((key, RowState::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[index].1
    }

    #[inline(never)]
    fn alloc(&mut self, a: &Alloc) {
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
    }

    #[inline(never)]
    fn free(&mut self, f: &Free) {
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
    fn release(&mut self, freed: LiveAlloc) {
        if let Some(journal) = self.journal.as_mut() {
            journal.push(LiveChange::Released(freed));
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

    fn sample(&mut self, m: &Sample) {
        self.saw_time(m.time_ns);
        let tracked = self
            .rows
            .iter()
            .find(|(key, _)| *key == (m.device, MemKind::Device))
            .map_or(0, |(_, row)| row.counters.live_bytes);
        let index = match self.nvml.iter().position(|d| d.device == m.device) {
            Some(i) => i,
            None => {
                self.nvml.push(NvmlDevice {
                    device: m.device,
                    ..NvmlDevice::default()
                });
                self.nvml.len() - 1
            }
        };
        let d = &mut self.nvml[index];
        d.samples += 1;
        // Of the samples at the peak value, keep the one where the hooks tracked the
        // most: a sample NVML took between an allocation and its event's stamp sees the
        // memory before the hooks do, and would count it as untracked.
        if d.samples == 1
            || m.process_used > d.peak.process_used
            || (m.process_used == d.peak.process_used && tracked > d.tracked_at_peak)
        {
            d.peak = *m;
            d.tracked_at_peak = tracked;
        }
        d.last = *m;
        d.tracked_at_last = tracked;
    }

    /// Removes the allocation a free at `time_ns` releases: of those live at `address`,
    /// the latest allocated at or before the free, or else the oldest (a free can only
    /// arrive before its allocation through reordering, and the oldest is the likeliest).
    fn take_live(&mut self, space: usize, address: u64, time_ns: u64) -> Option<LiveAlloc> {
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

    fn alloc_failed(&mut self, f: &AllocFailed) {
        self.saw_time(f.time_ns);
        self.used_stack(f.stack, f.time_ns);
        self.row(f.device, f.kind).counters.failed_allocations += 1;
        self.totals.failed_allocations += 1;
        if self.failures.len() < MAX_KEPT_FAILURES {
            self.failures.push(FailedAlloc {
                time_ns: f.time_ns,
                api: f.api,
                size: f.size,
                device: f.device,
                kind: f.kind,
                result: f.result,
                stack: f.stack,
            });
        }
    }

    pub fn finish(self) -> Replayed {
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
            live,
            stacks: self.stacks.into_iter().collect(),
            modules: self.modules,
            python: self.python,
            pipeline: self.pipeline,
            ranges,
            peak_allocations: self.peak_allocations,
            nvml: {
                let mut nvml = self.nvml;
                nvml.sort_by_key(|d| d.device);
                nvml
            },
        }
    }
}

/// What reading a whole trace gives: the header, the replay, and how reading ended.
#[derive(Debug)]
pub struct Loaded {
    pub header: serde_json::Value,
    pub replayed: Replayed,
    /// The file ended inside a block (the process was killed mid-write).
    pub truncated: bool,
    /// Complete blocks read.
    pub blocks: u64,
}

/// Streams every record of `reader` through a `Replay`.
pub fn replay<R: Read>(mut reader: TraceReader<R>) -> Result<Loaded, ReadError> {
    let mut replay = Replay::new();
    loop {
        let next = reader.next_record();
        // Allocs and frees are applied where the reader put them: moving the record out
        // first copied it, and the copy stalled on store forwarding (BENCHMARKS.md).
        match &next {
            Ok(Some(Record::Alloc(a))) => replay.alloc(a),
            Ok(Some(Record::Free(f))) => replay.free(f),
            _ => match next? {
                Some(record) => replay.record(record),
                None => break,
            },
        }
    }
    Ok(Loaded {
        header: reader.header().clone(),
        replayed: replay.finish(),
        truncated: reader.truncated(),
        blocks: reader.blocks_read(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumemprof_format::Stats;

    fn alloc(t: u64, device: i32, kind: MemKind, address: u64, size: u64, stack: u64) -> Record {
        Record::Alloc(Alloc {
            time_ns: t,
            tid: 1,
            api: 0,
            kind,
            device,
            address,
            size,
            stream: 0,
            pool: 0,
            stack,
        })
    }

    fn free_r(t: u64, address: u64, result: u32) -> Record {
        Record::Free(Free {
            time_ns: t,
            tid: 1,
            api: 1,
            address,
            stream: 0,
            stack: 0,
            result,
            flags: 0,
            kind: MemKind::Device,
            size: 0,
        })
    }

    fn free(t: u64, address: u64) -> Record {
        free_r(t, address, 0)
    }

    fn run(records: Vec<Record>) -> Replayed {
        let mut r = Replay::new();
        for rec in records {
            r.record(rec);
        }
        r.finish()
    }

    fn sorted(mut sites: Vec<Site>) -> Vec<Site> {
        sites.sort_by_key(|s| s.stack);
        sites
    }

    const D: MemKind = MemKind::Device;

    /// The per-allocation memory the README states.
    #[test]
    fn a_live_allocation_slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
        assert_eq!(std::mem::size_of::<(u64, Slot)>(), 40);
    }

    /// The per-stack memory the README states: 24 bytes per dense stack id (plus a `u32`
    /// in the live list while the stack holds memory).
    #[test]
    fn a_dense_stack_tally_is_24_bytes() {
        assert_eq!(std::mem::size_of::<DenseTally>(), 24);
    }

    #[test]
    fn counts_allocations_frees_and_live_bytes() {
        let r = run(vec![
            alloc(10, 0, D, 0x1000, 100, 1),
            alloc(20, 0, D, 0x2000, 50, 2),
            free(30, 0x1000),
        ]);
        assert_eq!(r.rows.len(), 1);
        let c = r.rows[0].counters;
        assert_eq!((c.allocations, c.frees), (2, 1));
        assert_eq!((c.bytes_allocated, c.bytes_freed), (150, 100));
        assert_eq!((c.live_bytes, c.live_allocations), (50, 1));
        assert_eq!((c.peak_bytes, c.peak_time_ns), (150, 20));
        assert_eq!(r.totals, c);
        assert_eq!(r.live.len(), 1);
        assert_eq!(r.live[0].address, 0x2000);
        assert_eq!(r.pipeline.duration_ns, 30);
    }

    #[test]
    fn peak_snapshot_is_taken_at_the_high_water_mark_not_later() {
        // live: 100, 300 (peak, stacks 1+2), 100, 250 (lower local max, stack 3), 250.
        let r = run(vec![
            alloc(1, 0, D, 0xa, 100, 1),
            alloc(2, 0, D, 0xb, 200, 2),
            free(3, 0xb),
            alloc(4, 0, D, 0xc, 150, 3),
            alloc(5, 0, D, 0xd, 1, 0),
            free(6, 0xd),
        ]);
        let row = &r.rows[0];
        assert_eq!(
            (row.counters.peak_bytes, row.counters.peak_time_ns),
            (300, 2)
        );
        assert_eq!(
            sorted(row.peak_sites.clone()),
            vec![
                Site {
                    stack: 1,
                    bytes: 100,
                    count: 1
                },
                Site {
                    stack: 2,
                    bytes: 200,
                    count: 1
                }
            ]
        );
        assert_eq!(row.counters.live_bytes, 250);
    }

    /// Stack ids counted in the dense vector and in the map give the same sites; a stack
    /// whose allocations were all freed is not a site.
    #[test]
    fn peak_sites_count_small_and_large_stack_ids_alike() {
        let big = DENSE_STACK_IDS + 5;
        let r = run(vec![
            alloc(1, 0, D, 0xa, 100, 3),
            alloc(2, 0, D, 0xb, 10, 9),
            free(3, 0xb),
            alloc(4, 0, D, 0xc, 40, big),
            alloc(5, 0, D, 0xd, 60, big),
            alloc(6, 0, D, 0xe, 7, 3),
            free(7, 0xc),
        ]);
        let site = |stack, bytes, count| Site {
            stack,
            bytes,
            count,
        };
        let row = &r.rows[0];
        assert_eq!(
            (row.counters.peak_bytes, row.counters.peak_time_ns),
            (207, 6)
        );
        assert_eq!(
            sorted(row.peak_sites.clone()),
            vec![site(3, 107, 2), site(big, 100, 2)]
        );
    }

    /// The list of live dense ids follows adds and removes in any order, so a snapshot
    /// names exactly the stacks with live allocations.
    #[test]
    fn the_live_stack_list_follows_adds_and_removes() {
        let mut t = StackTally::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut counts = [0u64; 40];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let stack = x % 40;
            if x & (1 << 40) != 0 {
                t.add(stack, 10);
                counts[stack as usize] += 1;
            } else {
                t.remove(stack, 10);
                counts[stack as usize] = counts[stack as usize].saturating_sub(1);
            }
            let mut got: Vec<(u64, u64)> = t.sites().map(|s| (s.stack, s.count)).collect();
            got.sort_unstable();
            let want: Vec<(u64, u64)> = (0..40)
                .filter(|&s| counts[s as usize] > 0)
                .map(|s| (s, counts[s as usize]))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn peak_still_rising_at_the_end_is_snapshotted_at_finish() {
        let r = run(vec![
            alloc(1, 0, D, 0xa, 100, 7),
            alloc(2, 0, D, 0xb, 100, 7),
        ]);
        assert_eq!(
            r.rows[0].peak_sites,
            vec![Site {
                stack: 7,
                bytes: 200,
                count: 2
            }]
        );
    }

    #[test]
    fn equal_later_peak_keeps_the_first_time_and_snapshot() {
        let r = run(vec![
            alloc(1, 0, D, 0xa, 100, 1),
            free(2, 0xa),
            alloc(3, 0, D, 0xb, 100, 2),
        ]);
        let row = &r.rows[0];
        assert_eq!(
            (row.counters.peak_bytes, row.counters.peak_time_ns),
            (100, 1)
        );
        assert_eq!(
            row.peak_sites,
            vec![Site {
                stack: 1,
                bytes: 100,
                count: 1
            }]
        );
    }

    #[test]
    fn rows_are_per_device_and_kind_and_totals_peak_is_combined() {
        // Device 0 peaks at t=1, device 1 at t=3; combined live never exceeds 150.
        let r = run(vec![
            alloc(1, 1, D, 0xa, 100, 1),
            free(2, 0xa),
            alloc(3, 0, MemKind::Managed, 0xb, 90, 1),
            alloc(4, 0, D, 0xc, 60, 1),
        ]);
        let keys: Vec<_> = r.rows.iter().map(|r| (r.device, r.kind)).collect();
        assert_eq!(keys, vec![(0, D), (0, MemKind::Managed), (1, D)]);
        assert_eq!((r.totals.peak_bytes, r.totals.peak_time_ns), (150, 4));
        assert_eq!(r.totals.allocations, 3);
        assert_eq!(r.totals.live_bytes, 150);
    }

    #[test]
    fn out_of_order_reuse_frees_the_earlier_allocation() {
        // A@1 and B@3 share an address; B's alloc arrives before A's free@2.
        let r = run(vec![
            alloc(1, 0, D, 0xa, 10, 1),
            alloc(3, 0, D, 0xa, 20, 2),
            free(2, 0xa),
        ]);
        assert_eq!(r.live.len(), 1);
        assert_eq!(
            (r.live[0].time_ns, r.live[0].size, r.live[0].stack),
            (3, 20, 2)
        );
        assert_eq!(r.rows[0].counters.live_bytes, 20);
        assert_eq!(r.unknown_frees, 0);
    }

    #[test]
    fn free_before_every_allocation_at_its_address_takes_the_oldest() {
        let r = run(vec![
            alloc(5, 0, D, 0xa, 10, 1),
            alloc(7, 0, D, 0xa, 20, 2),
            alloc(6, 0, D, 0xa, 30, 3),
            free(1, 0xa),
        ]);
        let mut left: Vec<_> = r.live.iter().map(|a| a.time_ns).collect();
        left.sort();
        assert_eq!(left, vec![6, 7]);
    }

    #[test]
    fn unknown_failed_and_null_frees() {
        let r = run(vec![
            alloc(1, 0, D, 0xa, 10, 1),
            free_r(2, 0xa, 1),
            free(3, 0xdead),
            free(4, 0),
            free_r(5, 0, 3),
        ]);
        assert_eq!((r.unknown_frees, r.failed_frees), (1, 1));
        assert_eq!(r.rows[0].counters.frees, 0);
        assert_eq!(r.live.len(), 1);
    }

    #[test]
    fn failed_allocations_are_counted_and_the_first_ones_kept() {
        let mut recs = Vec::new();
        for i in 0..(MAX_KEPT_FAILURES as u64 + 5) {
            recs.push(Record::AllocFailed(AllocFailed {
                time_ns: i,
                tid: 1,
                api: 0,
                kind: D,
                device: 1,
                size: 1 << 40,
                stream: 0,
                pool: 0,
                stack: 0,
                result: 2,
                mem_free: 0,
                mem_total: 0,
            }));
        }
        let r = run(recs);
        assert_eq!(r.totals.failed_allocations, MAX_KEPT_FAILURES as u64 + 5);
        assert_eq!(
            r.rows[0].counters.failed_allocations,
            MAX_KEPT_FAILURES as u64 + 5
        );
        assert_eq!(r.failures.len(), MAX_KEPT_FAILURES);
        assert_eq!(r.failures[0].result, 2);
    }

    #[test]
    fn stacks_modules_and_pipeline() {
        let stats = Stats {
            time_ns: 50,
            events: 3,
            queue_waits: 1,
            dropped: 0,
        };
        let r = run(vec![
            Record::Stack {
                id: 4,
                frames: vec![0x10, 0x20],
            },
            alloc(9, 0, D, 0xa, 1, 4),
            alloc(12, 0, D, 0xb, 1, 4),
            Record::Stats(stats),
            Record::Unknown { kind: 99, len: 3 },
        ]);
        assert_eq!(r.stacks[&4].frames, vec![0x10, 0x20]);
        assert_eq!(r.stacks[&4].first_use_ns, Some(9));
        assert!(!r.pipeline.complete);
        assert_eq!((r.pipeline.events, r.pipeline.queue_waits), (3, 1));
        assert_eq!(r.pipeline.unknown_records, 1);
        assert_eq!(r.pipeline.duration_ns, 50);
        let r = run(vec![Record::End(Stats {
            time_ns: 60,
            ..stats
        })]);
        assert!(r.pipeline.complete);
        assert_eq!(r.pipeline.duration_ns, 60);
    }

    #[test]
    fn hostile_sizes_saturate_instead_of_panicking() {
        let r = run(vec![
            alloc(1, 0, D, 0xa, u64::MAX, 1),
            alloc(2, 0, D, 0xb, u64::MAX, 1),
            free(3, 0xa),
            free(4, 0xb),
        ]);
        assert_eq!(r.rows[0].counters.live_bytes, 0);
        assert_eq!(r.rows[0].counters.peak_bytes, u64::MAX);
    }

    fn free_kind(t: u64, kind: MemKind, address: u64, flags: u8, size: u64) -> Record {
        Record::Free(Free {
            time_ns: t,
            tid: 1,
            api: 1,
            address,
            stream: 0,
            stack: 0,
            result: 0,
            flags,
            kind,
            size,
        })
    }

    /// The expandable-segments pattern: reserve 64 MiB, create and map four 2 MiB
    /// handles end to end, unmap the last two with one call, release their handles.
    #[test]
    fn vmm_mappings_count_once_and_one_unmap_releases_adjacent_mappings() {
        const MIB: u64 = 1 << 20;
        let base = 0x7100_0000_0000u64;
        let mut recs = vec![alloc(1, 0, MemKind::AddressReservation, base, 64 * MIB, 9)];
        for i in 0..4u64 {
            recs.push(alloc(
                2 + i,
                0,
                MemKind::VmmHandle,
                0x4a00_0000 + i,
                2 * MIB,
                8,
            ));
            recs.push(alloc(2 + i, 0, D, base + i * 2 * MIB, 2 * MIB, 7));
        }
        recs.push(free_kind(10, D, base + 4 * MIB, FREE_RANGE, 4 * MIB));
        recs.push(free_kind(11, MemKind::VmmHandle, 0x4a00_0002, 0, 0));
        recs.push(free_kind(11, MemKind::VmmHandle, 0x4a00_0003, 0, 0));
        let r = run(recs);
        let row = |kind| r.rows.iter().find(|row| row.kind == kind).unwrap().counters;
        let device = row(D);
        assert_eq!((device.allocations, device.frees), (4, 2));
        assert_eq!((device.peak_bytes, device.live_bytes), (8 * MIB, 4 * MIB));
        assert_eq!(row(MemKind::VmmHandle).live_bytes, 4 * MIB);
        assert_eq!(row(MemKind::AddressReservation).live_bytes, 64 * MIB);
        // Only the mappings are memory.
        assert_eq!(
            (r.totals.peak_bytes, r.totals.live_bytes),
            (8 * MIB, 4 * MIB)
        );
        assert_eq!(r.totals.allocations, 4);
        assert_eq!(r.unknown_frees, 0);
        // The reservation shares its address with the first mapping, in its own space.
        assert_eq!(r.live.iter().filter(|a| a.address == base).count(), 2);
    }

    #[test]
    fn a_range_free_of_nothing_live_is_one_unknown_free() {
        let r = run(vec![free_kind(1, D, 0x1000, FREE_RANGE, 4096)]);
        assert_eq!(r.unknown_frees, 1);
    }

    #[test]
    fn nvml_samples_are_set_against_tracked_device_bytes() {
        let sample = |t, used| {
            Record::Sample(Sample {
                time_ns: t,
                device: 0,
                process_used: used,
                device_used: used,
                device_total: 1000,
            })
        };
        let r = run(vec![
            sample(1, 64),
            // NVML already sees the 100 bytes whose allocation is stamped at 2.
            sample(2, 164),
            alloc(2, 0, D, 0x1000, 100, 1),
            alloc(3, 0, MemKind::Managed, 0x9000, 50, 1),
            sample(4, 164),
            free(5, 0x1000),
            sample(6, 64),
        ]);
        assert_eq!(r.nvml.len(), 1);
        let d = r.nvml[0];
        assert_eq!(d.samples, 4);
        assert_eq!((d.peak.time_ns, d.peak.process_used), (4, 164));
        assert_eq!((d.tracked_at_peak, d.untracked_at_peak()), (100, 64));
        assert_eq!(
            (d.last.time_ns, d.tracked_at_last, d.untracked_at_last()),
            (6, 0, 64)
        );
    }
}
