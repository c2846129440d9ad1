//! The two passes of `gpumemprof oom`.
//!
//! Which failure to explain is known only once the whole trace is read (the first failure
//! that no retry made good may come after many that were), and the state to explain it with
//! is the state at that failure. So the command streams the trace twice, storing no event:
//!
//! ```text
//!  pass 1 (whole trace)   every out-of-memory failure, and whether a later allocation of
//!                         its size succeeded (transient) or none did (final)
//!                         ─► pick one: the first final failure, else the last failure
//!  pass 2 (up to it)      replay until that failure's record; from the first event at or
//!                         after `failure - window`, add up per stack what the replay allocated
//!                         and released ─► live memory at the failure, and what grew
//! ```
//!
//! Memory stays bounded: pass 1 keeps at most `MAX_KEPT_FAILURES` failures (and one
//! pending-retry entry or two per unresolved failure); pass 2 is an ordinary replay that
//! stops early, plus a byte count per stack that changed inside the window.

use std::collections::hash_map::{Entry, HashMap};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use gpumemprof_format::{Alloc, AllocFailed, MemKind, ReadError, Record, Sample, TraceReader};

use crate::fasthash::FastMap;
use crate::observe::{self, Observer};
use crate::replay::attempts::Attempts;
use crate::replay::{LiveAlloc, LiveChange, Loaded, Replay, Replayed, MAX_KEPT_FAILURES};
use gpumemprof_format::OUT_OF_MEMORY;

/// One out-of-memory failure (an allocation call that returned error 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Its position among the trace's out-of-memory failures, 0 for the first in the file
    /// (counted whether kept or not): pass 2 stops at the failure with this position.
    pub ordinal: u64,
    pub call: AllocFailed,
    /// The later successful allocation that made this failure transient; `None`: final.
    pub retry: Option<Alloc>,
    /// For a framework's refusal: the failed CUDA calls it made just before it on its
    /// thread (`replay::attempts`), which are part of it and not failures of their own.
    pub attempts: Option<Attempted>,
    /// The NVML sample of its device taken at the failure (the shim samples while the
    /// failing thread waits for its flush: before that thread's next event), if any.
    pub nvml: Option<NvmlSeen>,
}

/// An NVML sample and the most device memory the hooks tracked on its device while NVML
/// answered (`replay::window_end`): other threads may allocate between the failure and the
/// answer, and that memory is not "untracked".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlSeen {
    pub sample: Sample,
    pub tracked: u64,
}

/// A refusal's failed CUDA calls: how many, and the last one's API and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempted {
    pub count: u64,
    pub api: u16,
    pub size: u64,
}

impl Failure {
    pub fn is_final(&self) -> bool {
        self.retry.is_none()
    }
}

/// What pass 1 found.
#[derive(Debug)]
pub struct Scan {
    /// The header and how reading ended. Its `replayed` holds only the pipeline counters
    /// (for the `trace` object): the rest of the full replay is dropped, pass 2 rebuilds
    /// the state that matters.
    pub loaded: Loaded,
    /// The kept failures, in trace order (see `Classifier` for which are kept).
    pub failures: Vec<Failure>,
    /// Out-of-memory errors in the trace, kept or not: a framework's refusal and the
    /// failed CUDA calls it made just before it count once.
    pub out_of_memory: u64,
    /// Failed allocation calls with any other error (bad arguments, ...).
    pub other_failed: u64,
}

impl Scan {
    /// The kept failure to report: `index` if given (an error message if out of range),
    /// else the first final failure, else the last failure; `None` if there is none.
    pub fn select(&self, index: Option<usize>) -> Result<Option<usize>, String> {
        match index {
            Some(i) if i < self.failures.len() => Ok(Some(i)),
            Some(i) if self.failures.is_empty() => Err(format!(
                "--index {i}: the trace has no out-of-memory failure"
            )),
            Some(i) => Err(format!(
                "--index {i}: the trace has {} kept (0 to {})",
                crate::units::plural(
                    self.failures.len() as u64,
                    "out-of-memory failure",
                    "out-of-memory failures"
                ),
                self.failures.len() - 1
            )),
            None => Ok(self
                .first_final_retried()
                .or(self.failures.len().checked_sub(1))),
        }
    }

    /// The first final failure, or, when the same thread asked again for the same size
    /// and failed again (an allocator's release-and-retry, as PyTorch's before it raises
    /// `OutOfMemoryError`), the last of those attempts: the one the error describes. A
    /// framework's refused tensor that follows on the same thread and device (PyTorch
    /// reports it after its last failed `cudaMalloc`) is the error itself: it is the one.
    fn first_final_retried(&self) -> Option<usize> {
        let mut i = self.failures.iter().position(Failure::is_final)?;
        let same = |a: &AllocFailed, b: &AllocFailed| {
            (a.tid, a.device, a.size, a.kind) == (b.tid, b.device, b.size, b.kind)
                || (b.kind == MemKind::Tensor
                    && a.kind != MemKind::Tensor
                    && (a.tid, a.device) == (b.tid, b.device))
        };
        while let Some(next) = self.failures.get(i + 1) {
            if !(next.is_final() && same(&self.failures[i].call, &next.call)) {
                break;
            }
            i += 1;
        }
        Some(i)
    }

    pub fn transient(&self) -> u64 {
        self.failures.iter().filter(|f| !f.is_final()).count() as u64
    }
}

/// Pass 1: the ordinary replay of the whole trace, with a `Classifier` watching.
pub fn scan<R: Read + Send>(reader: TraceReader<R>) -> Result<Scan, ReadError> {
    let mut classifier = Classifier::default();
    let loaded = observe::replay_observed(reader, &mut [&mut classifier])?;
    let out_of_memory = classifier.next_ordinal - classifier.absorbed;
    let other_failed = loaded
        .replayed
        .totals
        .failed_allocations
        .saturating_sub(classifier.next_ordinal);
    let Loaded {
        header,
        replayed,
        truncated,
        blocks,
        damage,
        second_trace_at,
    } = loaded;
    Ok(Scan {
        loaded: Loaded {
            header,
            replayed: Replayed {
                pipeline: replayed.pipeline,
                ..Replayed::default()
            },
            truncated,
            blocks,
            damage,
            second_trace_at,
        },
        failures: classifier.kept.into_values().collect(),
        out_of_memory,
        other_failed,
    })
}

/// How soon after a failure an NVML sample must come to be the failure's: the shim takes one
/// while the failing thread waits for its flush (well under a millisecond on an idle writer).
pub const NVML_AT_FAILURE_NS: u64 = 100_000_000;

/// An unresolved failure waiting for a successful allocation of at least `size`.
#[derive(Debug, Clone, Copy)]
struct Pending {
    ordinal: u64,
    size: u64,
}

/// Unresolved failures of one key, sorted by size, largest first: an allocation of `n`
/// bytes resolves a suffix of the list.
type PendingList = Vec<Pending>;

/// The memory a retry has to be of: device allocations and VMM handles are one class (a
/// failed `cuMemCreate` is recorded as a `device` failure, its successful retry as a
/// `vmm_handle`); every other kind is its own. Pinned host memory belongs to no device.
fn class_and_device(kind: MemKind, device: i32) -> (u16, i32) {
    match kind {
        MemKind::Device | MemKind::VmmHandle => (0, device),
        MemKind::PinnedHost => (1 + u16::from(kind.to_u8()), -1),
        other => (1 + u16::from(other.to_u8()), device),
    }
}

/// Finds the transient failures in one pass.
///
/// A failure is **transient** when a later successful allocation of the same memory (same
/// device and kind class, see `class_and_device`) and of at least the failed size was made
/// by the same thread, or from the same call stack (stack id not 0): the program got the
/// memory after all, as PyTorch does after freeing its cache and retrying. Otherwise it is
/// **final**.
///
/// Kept: up to `MAX_KEPT_FAILURES`. When full, the oldest transient failure is forgotten to
/// make room (the failures at the end of a run are the ones that ended it); when every kept
/// failure is unresolved, a new one is only counted.
#[derive(Debug, Default)]
pub struct Classifier {
    next_ordinal: u64,
    kept: BTreeMap<u64, Failure>,
    transient: BTreeSet<u64>,
    /// Keyed by (class, device, thread id).
    by_thread: FastMap<(u16, i32, u32), PendingList>,
    /// Keyed by (class, device, stack id).
    by_stack: FastMap<(u16, i32, u64), PendingList>,
    /// Kept failures not yet resolved: when 0, allocations cost nothing here.
    unresolved: usize,
    /// CUDA failures per thread that a refusal may take as its attempts.
    attempts: Attempts,
    /// Failures taken as a refusal's attempts (not errors of their own).
    absorbed: u64,
    /// Kept failures waiting for their NVML sample: (ordinal, thread, device, time).
    awaiting_sample: Vec<(u64, u32, i32, u64)>,
    /// Kept failures whose sample's window is open: (ordinal, device, end of the window).
    open_windows: Vec<(u64, i32, u64)>,
}

impl Observer for Classifier {
    fn record(&mut self, record: &Record) {
        if !self.awaiting_sample.is_empty() {
            self.sample_or_event(record);
        }
        match record {
            Record::AllocFailed(f) if f.result == OUT_OF_MEMORY => self.failed(f),
            // A zero-byte request that "succeeded" with a null pointer got no memory.
            Record::Alloc(a) if self.unresolved > 0 && a.address != 0 => self.succeeded(a),
            // A framework's tensor handed out: the retry of a refused one.
            Record::Tensor(t) => {
                self.attempts.tensor(t.tid);
                if self.unresolved > 0 && t.delta > 0 {
                    self.succeeded(&t.as_alloc())
                }
            }
            _ => {}
        }
    }

    fn changes(&mut self, _time_ns: u64, _changes: &[LiveChange]) {}

    fn applied(&mut self, time_ns: u64, _changes: &[LiveChange], replay: &Replay) {
        if !self.open_windows.is_empty() {
            self.track_windows(time_ns, replay);
        }
    }
}

impl Classifier {
    /// An NVML sample of a device a kept failure awaits is that failure's; any other event
    /// of the failing thread ends its wait (the sample, if any, came later).
    fn sample_or_event(&mut self, record: &Record) {
        let tid = match record {
            Record::Sample(m) => {
                let (kept, windows) = (&mut self.kept, &mut self.open_windows);
                self.awaiting_sample.retain(|&(ordinal, _, device, time)| {
                    if m.time_ns > time.saturating_add(NVML_AT_FAILURE_NS) {
                        return false; // too late to be the failure's
                    }
                    if device != m.device {
                        return true;
                    }
                    if let Some(f) = kept.get_mut(&ordinal) {
                        f.nvml = Some(NvmlSeen {
                            sample: *m,
                            tracked: 0,
                        });
                        windows.push((ordinal, device, crate::replay::window_end(m)));
                    }
                    false
                });
                return;
            }
            Record::Alloc(a) => a.tid,
            Record::Free(f) => f.tid,
            Record::AllocFailed(f) => f.tid,
            Record::Tensor(t) => t.tid,
            _ => return,
        };
        self.awaiting_sample.retain(|&(_, t, _, _)| t != tid);
    }

    /// A record at `time_ns` was applied: each open window ends after it, or takes what the
    /// hooks track on its device now if that is more (the sample's own record opens it with
    /// what they tracked at its stamp).
    fn track_windows(&mut self, time_ns: u64, replay: &Replay) {
        let kept = &mut self.kept;
        self.open_windows.retain(|&(ordinal, device, until)| {
            if time_ns > until {
                return false;
            }
            match kept.get_mut(&ordinal).and_then(|f| f.nvml.as_mut()) {
                Some(seen) => {
                    seen.tracked = seen.tracked.max(replay.tracked_on(device));
                    true
                }
                None => false, // the failure was forgotten or absorbed
            }
        });
    }

    fn failed(&mut self, f: &AllocFailed) {
        let ordinal = self.next_ordinal;
        self.next_ordinal += 1;
        let attempts = if f.kind == MemKind::Tensor {
            let ordinals = self.attempts.refused(f.tid);
            self.absorb(ordinals)
        } else {
            self.attempts.failed(f.tid, ordinal);
            None
        };
        if self.kept.len() >= MAX_KEPT_FAILURES {
            match self.transient.pop_first() {
                Some(oldest) => {
                    self.kept.remove(&oldest);
                }
                None => return,
            }
        }
        self.kept.insert(
            ordinal,
            Failure {
                ordinal,
                call: *f,
                retry: None,
                attempts,
                nvml: None,
            },
        );
        self.awaiting_sample
            .push((ordinal, f.tid, f.device, f.time_ns));
        self.unresolved += 1;
        let (class, device) = class_and_device(f.kind, f.device);
        let pending = Pending {
            ordinal,
            size: f.size,
        };
        insert(
            self.by_thread.entry((class, device, f.tid)).or_default(),
            pending,
        );
        if f.stack != 0 {
            insert(
                self.by_stack.entry((class, device, f.stack)).or_default(),
                pending,
            );
        }
    }

    /// Takes the failures `ordinals` out of the list (a refusal's attempts): they are
    /// part of the refusal, which reports them.
    fn absorb(&mut self, ordinals: Vec<u64>) -> Option<Attempted> {
        let last = *ordinals.last()?;
        self.absorbed += ordinals.len() as u64;
        let mut attempted = Attempted {
            count: ordinals.len() as u64,
            api: 0,
            size: 0,
        };
        for ordinal in ordinals {
            let Some(f) = self.kept.remove(&ordinal) else {
                continue;
            };
            if ordinal == last {
                (attempted.api, attempted.size) = (f.call.api, f.call.size);
            }
            self.awaiting_sample.retain(|&(o, _, _, _)| o != ordinal);
            if !self.transient.remove(&ordinal) {
                self.unresolved = self.unresolved.saturating_sub(1);
            }
            let (class, device) = class_and_device(f.call.kind, f.call.device);
            remove(
                &mut self.by_thread,
                (class, device, f.call.tid),
                ordinal,
                f.call.size,
            );
            if f.call.stack != 0 {
                remove(
                    &mut self.by_stack,
                    (class, device, f.call.stack),
                    ordinal,
                    f.call.size,
                );
            }
        }
        Some(attempted)
    }

    fn succeeded(&mut self, a: &Alloc) {
        let (class, device) = class_and_device(a.kind, a.device);
        let mut resolved = Vec::new(); // allocates only when something resolves
        take_resolved(
            &mut self.by_thread,
            (class, device, a.tid),
            a.size,
            &mut resolved,
        );
        if a.stack != 0 {
            take_resolved(
                &mut self.by_stack,
                (class, device, a.stack),
                a.size,
                &mut resolved,
            );
        }
        for ordinal in resolved {
            let Some(f) = self.kept.get_mut(&ordinal) else {
                continue;
            };
            if f.retry.is_some() {
                continue; // resolved through its other key by this same allocation
            }
            f.retry = Some(*a);
            let call = f.call;
            self.transient.insert(ordinal);
            self.unresolved = self.unresolved.saturating_sub(1);
            // Its entry under the other key is stale now: drop it, so the pending lists
            // never hold more than two entries per unresolved failure.
            let (class, device) = class_and_device(call.kind, call.device);
            remove(
                &mut self.by_thread,
                (class, device, call.tid),
                ordinal,
                call.size,
            );
            if call.stack != 0 {
                remove(
                    &mut self.by_stack,
                    (class, device, call.stack),
                    ordinal,
                    call.size,
                );
            }
        }
    }
}

/// Inserts keeping the list sorted largest first (after the equal sizes already there).
fn insert(list: &mut PendingList, p: Pending) {
    let at = list.partition_point(|q| q.size >= p.size);
    list.insert(at, p);
}

/// Moves the failures of `key` that an allocation of `size` bytes satisfies to `out`.
fn take_resolved<K: std::hash::Hash + Eq>(
    map: &mut FastMap<K, PendingList>,
    key: K,
    size: u64,
    out: &mut Vec<u64>,
) {
    if let Entry::Occupied(mut e) = map.entry(key) {
        let list = e.get_mut();
        while let Some(p) = list.last().filter(|p| p.size <= size) {
            out.push(p.ordinal);
            list.pop();
        }
        if list.is_empty() {
            e.remove();
        }
    }
}

/// Removes failure `ordinal` (of `size` bytes) from the list of `key`, if it is there.
fn remove<K: std::hash::Hash + Eq>(
    map: &mut FastMap<K, PendingList>,
    key: K,
    ordinal: u64,
    size: u64,
) {
    if let Entry::Occupied(mut e) = map.entry(key) {
        let list = e.get_mut();
        let from = list.partition_point(|q| q.size > size);
        if let Some(i) = list[from..]
            .iter()
            .take_while(|q| q.size == size)
            .position(|q| q.ordinal == ordinal)
        {
            list.remove(from + i);
        }
        if list.is_empty() {
            e.remove();
        }
    }
}

/// True when live allocation `a` holds the memory that failed request `f` competed for:
/// for device, managed or VMM requests, the `device` and `managed` memory of its device
/// (managed memory is charged to the device it lives on); for pinned host requests, all
/// pinned host memory; otherwise the same kind on the same device. Never reservations or
/// VMM handles (their mappings are counted instead).
pub fn competes(f: &AllocFailed, a: &LiveAlloc) -> bool {
    if f.kind == MemKind::Tensor {
        // A refused tensor: the tensors that hold the allocator's memory (its segments
        // are what it reserved around them).
        return a.kind == MemKind::Tensor && a.device == f.device;
    }
    if !a.kind.is_memory() {
        return false;
    }
    match f.kind {
        MemKind::Device | MemKind::Managed | MemKind::VmmHandle => {
            a.device == f.device && matches!(a.kind, MemKind::Device | MemKind::Managed)
        }
        MemKind::PinnedHost => a.kind == MemKind::PinnedHost,
        other => a.device == f.device && a.kind == other,
    }
}

/// The state at one failure, from pass 2.
#[derive(Debug)]
pub struct Moment {
    /// The replay of every record before the failure's: live allocations, stacks,
    /// modules and NVML samples as they were when it failed.
    pub replayed: Replayed,
    /// `failure time - window` (0 at the earliest).
    pub start_ns: u64,
    /// Per stack, bytes allocated minus bytes released (of memory that `competes`) by the
    /// events from the first one at or after `start_ns` up to the failure, in trace order
    /// (a window reaching back to the trace's start counts every event).
    pub growth: HashMap<u64, i128>,
}

/// Pass 2: replays up to `failure` (its record is not applied). `None` if the trace no
/// longer has that failure (it changed between the passes).
pub fn replay_until<R: Read + Send>(
    mut reader: TraceReader<R>,
    failure: &Failure,
    window_ns: u64,
) -> Result<Option<Moment>, ReadError> {
    let start_ns = failure.call.time_ns.saturating_sub(window_ns);
    let mut replay = Replay::new();
    let mut changes = Vec::new();
    let mut growth: HashMap<u64, i128> = HashMap::new();
    let mut ordinal = 0u64;
    let mut in_window = false;
    while let Some(record) = reader.next_salvaged()? {
        let time = match &record {
            Record::AllocFailed(f) if f.result == OUT_OF_MEMORY => {
                if ordinal == failure.ordinal {
                    return Ok(Some(Moment {
                        replayed: replay.finish(),
                        start_ns,
                        growth,
                    }));
                }
                ordinal += 1;
                Some(f.time_ns)
            }
            Record::AllocFailed(f) => Some(f.time_ns),
            Record::Alloc(a) => Some(a.time_ns),
            Record::Free(f) => Some(f.time_ns),
            _ => None,
        };
        in_window = in_window || time.is_some_and(|t| t >= start_ns);
        changes.clear();
        replay.record_changes(record, &mut changes);
        if !in_window {
            continue;
        }
        for change in &changes {
            let (a, sign) = match change {
                LiveChange::Added(a) => (a, 1),
                LiveChange::Released(a) => (a, -1),
            };
            if competes(&failure.call, a) {
                *growth.entry(a.stack).or_default() += sign * i128::from(a.size);
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(t: u64, tid: u32, stack: u64, size: u64) -> Record {
        Record::AllocFailed(AllocFailed {
            time_ns: t,
            tid,
            api: 0,
            kind: MemKind::Device,
            device: 0,
            size,
            stream: 0,
            pool: 0,
            stack,
            result: OUT_OF_MEMORY,
            mem_free: 0,
            mem_total: 0,
        })
    }

    fn alloc(t: u64, tid: u32, stack: u64, kind: MemKind, size: u64) -> Record {
        Record::Alloc(Alloc {
            time_ns: t,
            tid,
            api: 0,
            kind,
            device: 0,
            address: 0x1000 + t,
            size,
            stream: 0,
            pool: 0,
            stack,
        })
    }

    fn classify(records: &[Record]) -> Classifier {
        let mut c = Classifier::default();
        for r in records {
            c.record(r);
        }
        c
    }

    fn outcomes(c: &Classifier) -> Vec<(u64, Option<u64>)> {
        c.kept
            .values()
            .map(|f| (f.ordinal, f.retry.map(|a| a.time_ns)))
            .collect()
    }

    #[test]
    fn a_retry_by_the_same_thread_or_stack_of_at_least_the_size_resolves() {
        let c = classify(&[
            failed(1, 7, 0, 100),
            failed(2, 8, 5, 100),
            failed(3, 9, 6, 100),
            alloc(4, 7, 0, MemKind::Device, 99),      // too small
            alloc(5, 7, 0, MemKind::Managed, 100),    // other memory
            alloc(6, 7, 0, MemKind::Device, 100),     // resolves #0 (thread)
            alloc(7, 1, 5, MemKind::VmmHandle, 200),  // resolves #1 (stack; VMM = device)
            alloc(8, 1, 0, MemKind::Device, 1 << 40), // other thread, no stack: nothing
        ]);
        assert_eq!(outcomes(&c), vec![(0, Some(6)), (1, Some(7)), (2, None)]);
        assert_eq!(c.unresolved, 1);
        // Resolved failures left nothing behind in the pending lists.
        let left: usize = c
            .by_thread
            .values()
            .chain(c.by_stack.values())
            .map(Vec::len)
            .sum();
        assert_eq!(left, 2);
    }

    #[test]
    fn an_allocation_before_the_failure_does_not_resolve_it() {
        let c = classify(&[alloc(1, 7, 0, MemKind::Device, 100), failed(2, 7, 0, 100)]);
        assert_eq!(outcomes(&c), vec![(0, None)]);
    }

    #[test]
    fn when_full_the_oldest_transient_failure_makes_room() {
        let mut records = Vec::new();
        for i in 0..MAX_KEPT_FAILURES as u64 + 10 {
            records.push(failed(2 * i, 7, 0, 10));
            records.push(alloc(2 * i + 1, 7, 0, MemKind::Device, 10));
        }
        records.push(failed(1 << 40, 7, 0, 20));
        let c = classify(&records);
        assert_eq!(c.next_ordinal, MAX_KEPT_FAILURES as u64 + 11);
        assert_eq!(c.kept.len(), MAX_KEPT_FAILURES);
        let last = c.kept.values().last().unwrap();
        assert_eq!(
            (last.ordinal, last.is_final()),
            (MAX_KEPT_FAILURES as u64 + 10, true)
        );
        assert_eq!(c.kept.values().next().unwrap().ordinal, 11);
    }

    #[test]
    fn when_every_kept_failure_is_unresolved_new_ones_are_only_counted() {
        let records: Vec<Record> = (0..MAX_KEPT_FAILURES as u64 + 3)
            .map(|i| failed(i, 7, 0, 10))
            .collect();
        let c = classify(&records);
        assert_eq!(c.kept.len(), MAX_KEPT_FAILURES);
        assert_eq!(c.next_ordinal, MAX_KEPT_FAILURES as u64 + 3);
        assert_eq!(
            c.kept.values().last().unwrap().ordinal,
            MAX_KEPT_FAILURES as u64 - 1
        );
    }
}
