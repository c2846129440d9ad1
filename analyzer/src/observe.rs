//! The replay pass, watched: the same single streaming pass as `replay::replay`, which
//! also shows each record and the live-memory changes it made to observers (the timeline,
//! a snapshot of live memory at a moment). Observers see the changes `Replay` itself
//! decided, so no view matches frees to allocations a second way.

use std::io::Read;

use gpumemprof_format::{ReadError, Record, TraceReader};

use crate::decoding::{Flow, Item};
use crate::replay::{LiveChange, Loaded, Replay};

/// A view built during the pass.
pub trait Observer {
    /// Each record, before the replay applies it (live memory is still as it was).
    fn record(&mut self, record: &Record);
    /// What the record just applied did to live memory, at its time (`time_ns`); not
    /// called for records that changed nothing.
    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]);
    /// After every record is applied, with its changes (maybe none) and the replay's state
    /// then (which NVTX range each thread is in). By default, `changes` when there are
    /// some: only a view that asks the replay more overrides it.
    fn applied(&mut self, time_ns: u64, changes: &[LiveChange], _replay: &Replay) {
        if !changes.is_empty() {
            self.changes(time_ns, changes);
        }
    }
}

/// The time a record carries, if any (stack definitions and unknown records have none).
pub fn record_time(record: &Record) -> Option<u64> {
    match record {
        Record::Alloc(a) => Some(a.time_ns),
        Record::Free(f) => Some(f.time_ns),
        Record::AllocFailed(f) => Some(f.time_ns),
        Record::Module(m) => Some(m.time_ns),
        Record::Stats(s) | Record::End(s) => Some(s.time_ns),
        Record::Sample(s) => Some(s.time_ns),
        Record::Nvtx(n) => Some(n.time_ns),
        Record::Ending(e) => Some(e.time_ns),
        Record::Stopped(r) => Some(r.time_ns),
        Record::Tensor(t) => Some(t.time_ns),
        Record::Stack { .. }
        | Record::PyCode(_)
        | Record::NvtxString { .. }
        | Record::Unknown { .. } => None,
    }
}

/// `replay::replay`, showing every record and change to `observers`, in order.
pub fn replay_observed<R: Read + Send>(
    reader: TraceReader<R>,
    observers: &mut [&mut dyn Observer],
) -> Result<Loaded, ReadError> {
    replay_observed_until(reader, observers, None)
}

/// How long after `until` a record stamped before it can still come: the shim's writer
/// orders events within a short window, and an event whose thread is preempted between its
/// stamp and its push can reach the file after later ones.
pub const LATE_RECORDS_NS: u64 = 1_000_000_000;

/// What a pass up to `until` does with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Apply,
    /// Stamped after `until`: left out, but a record stamped before it may still follow.
    Skip,
    /// Stamped more than `LATE_RECORDS_NS` after `until`: the pass is over.
    Stop,
}

/// Whether a pass up to `until` applies `record` (see `Cut`); records without a time
/// (stack and code definitions) are always applied.
pub fn cut(record: &Record, until: Option<u64>) -> Cut {
    match (until, record_time(record)) {
        (Some(u), Some(t)) if t > u.saturating_add(LATE_RECORDS_NS) => Cut::Stop,
        (Some(u), Some(t)) if t > u => Cut::Skip,
        _ => Cut::Apply,
    }
}

/// `replay_observed` up to `until` (ns): the records stamped after it are left out, as if
/// the trace ended there (what was live then is "live at the end"); see `cut`.
pub fn replay_observed_until<R: Read + Send>(
    reader: TraceReader<R>,
    observers: &mut [&mut dyn Observer],
    until: Option<u64>,
) -> Result<Loaded, ReadError> {
    replay_observed_with(reader, observers, until, Replay::new())
}

/// `replay_observed_until` with a replay set up by the caller (`Replay::keeping_exit`).
pub fn replay_observed_with<R: Read + Send>(
    mut reader: TraceReader<R>,
    observers: &mut [&mut dyn Observer],
    until: Option<u64>,
    replay: Replay,
) -> Result<Loaded, ReadError> {
    let mut replay = replay.of_header(reader.header());
    let mut changes = Vec::new();
    crate::decoding::each_batch(&mut reader, |batch| {
        for item in batch.iter_mut() {
            let record = match item.take() {
                Item::Record(record) => record,
                // A damaged block was skipped just before the next record.
                Item::Damaged => {
                    replay.damaged();
                    continue;
                }
                Item::Taken => continue,
            };
            match cut(&record, until) {
                Cut::Apply => {}
                Cut::Skip => continue,
                Cut::Stop => return Flow::Stop,
            }
            for o in observers.iter_mut() {
                o.record(&record);
            }
            let time = record_time(&record).unwrap_or(0);
            changes.clear();
            replay.record_changes(record, &mut changes);
            for o in observers.iter_mut() {
                o.applied(time, &changes, &replay);
            }
        }
        Flow::More
    })?;
    Loaded::read(&reader, replay.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumemprof_format::{Alloc, Free, MemKind, FREE_RANGE};

    fn alloc(t: u64, address: u64, size: u64) -> Record {
        Record::Alloc(Alloc {
            time_ns: t,
            tid: 1,
            api: 0,
            kind: MemKind::Device,
            device: 0,
            address,
            size,
            stream: 0,
            pool: 0,
            stack: 0,
        })
    }

    /// Up to a time: a record stamped before it that the writer wrote after a later one
    /// still counts; the pass ends a second past the time.
    #[test]
    fn a_pass_up_to_a_time_keeps_late_records_stamped_before_it() {
        let until = Some(100);
        assert_eq!(cut(&alloc(100, 0x1000, 512), until), Cut::Apply);
        assert_eq!(cut(&alloc(101, 0x2000, 512), until), Cut::Skip);
        assert_eq!(cut(&alloc(99, 0x3000, 512), until), Cut::Apply);
        assert_eq!(
            cut(&alloc(100 + LATE_RECORDS_NS + 1, 0x4000, 512), until),
            Cut::Stop
        );
        assert_eq!(
            cut(
                &Record::Stack {
                    id: 1,
                    frames: vec![]
                },
                until
            ),
            Cut::Apply
        );
        assert_eq!(cut(&alloc(u64::MAX, 0x5000, 512), None), Cut::Apply);
    }

    /// The changes are the replay's own decisions: one unmap over two adjacent mappings
    /// releases both, a free of an unknown address releases nothing.
    #[test]
    fn changes_follow_the_replay_including_range_frees() {
        let mut replay = Replay::new();
        let mut changes = Vec::new();
        let mut seen = Vec::new();
        let unmap = Record::Free(Free {
            time_ns: 3,
            tid: 1,
            api: 1,
            address: 0x1000,
            stream: 0,
            stack: 0,
            result: 0,
            flags: FREE_RANGE,
            kind: MemKind::Device,
            size: 0x2000,
        });
        let unknown = Record::Free(Free {
            address: 0xdead,
            flags: 0,
            size: 0,
            ..match unmap {
                Record::Free(f) => f,
                _ => unreachable!(),
            }
        });
        for r in [
            alloc(1, 0x1000, 0x1000),
            alloc(2, 0x2000, 0x1000),
            unmap,
            unknown,
        ] {
            changes.clear();
            replay.record_changes(r, &mut changes);
            seen.push(
                changes
                    .iter()
                    .map(|c| match c {
                        LiveChange::Added(a) => (true, a.address),
                        LiveChange::Released(a) => (false, a.address),
                    })
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            seen,
            vec![
                vec![(true, 0x1000)],
                vec![(true, 0x2000)],
                vec![(false, 0x1000), (false, 0x2000)],
                vec![]
            ]
        );
        assert_eq!(replay.finish().totals.live_bytes, 0);
    }
}
