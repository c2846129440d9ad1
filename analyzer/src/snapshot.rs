//! Live memory by call stack at one moment, for the flamegraph, the folded export and the
//! HTML report: at the peak of the selected memory (default), at the end of the trace, at
//! the Nth out-of-memory failure, or at a given time. Built during the replay pass.
//!
//! Only memory kinds count (`MemKind::is_memory`), optionally on one device. The peak is
//! the highest live bytes of that selection together (all devices: `summary`'s combined
//! peak), found and copied as `replay` does for each row: the per-stack map is copied at the
//! first release after a new high-water mark, which is the state at that mark.

use crate::fasthash::FastMap;

use gpumemprof_format::{MemKind, Record};

use crate::observe::{record_time, Observer};
use crate::replay::{LiveChange, MemoryLevel};
use crate::timeline::OomEvent;
use crate::units;
use gpumemprof_format::OUT_OF_MEMORY;

/// Which moment to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The first time live memory was highest.
    Peak,
    /// When the trace ended (what leaked, if the process exited cleanly).
    End,
    /// Just before the Nth (1-based) out-of-memory failure was returned.
    Oom(u64),
    /// At this time, ns since the trace started (the end, if the trace is shorter).
    At(u64),
}

/// Live bytes of one stack on one (device, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackBytes {
    pub device: i32,
    pub kind: MemKind,
    /// The trace's stack id (0: no stack captured).
    pub stack: u64,
    pub bytes: u64,
    pub count: u64,
}

/// Live memory by stack at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub moment: Moment,
    /// Only this device, if one was asked for.
    pub device: Option<i32>,
    /// When the state was taken, ns.
    pub time_ns: u64,
    pub total_bytes: u64,
    /// Largest first.
    pub sites: Vec<StackBytes>,
    /// The failure shown, for `Moment::Oom`.
    pub oom: Option<OomEvent>,
    /// What was counted: a framework allocator's tensors, or the segments.
    pub level: MemoryLevel,
}

impl Snapshot {
    /// "at the peak: 114.0 MiB at 1.234 s", for titles ("Live GPU memory at ...").
    pub fn describe(&self) -> String {
        let on = match self.device {
            Some(d) => format!(" on device {}", units::device(d)),
            None => String::new(),
        };
        let at = units::secs(self.time_ns);
        let total = match self.level {
            MemoryLevel::Tensors => format!("{} of tensors", units::bytes(self.total_bytes)),
            MemoryLevel::Segments => units::bytes(self.total_bytes),
        };
        match self.moment {
            Moment::Peak => format!("at the peak{on}: {total} at {at}"),
            Moment::End => format!("at the end{on}: {total} at {at}"),
            Moment::At(_) => format!("at {at}{on}: {total}"),
            Moment::Oom(n) => {
                let what = self.oom.map_or_else(String::new, |o| {
                    format!(
                        " (asked for {} on device {})",
                        units::bytes(o.size),
                        units::device(o.device)
                    )
                });
                format!("at out-of-memory failure #{n}{what}{on}: {total} at {at}")
            }
        }
    }
}

/// Builds one `Snapshot` while the replay pass runs.
#[derive(Debug)]
pub struct SnapshotBuilder {
    moment: Moment,
    device: Option<i32>,
    live: FastMap<(i32, MemKind, u64), (u64, u64)>,
    total: u64,
    peak: u64,
    peak_time_ns: u64,
    /// A new high-water mark was reached and no release has followed yet.
    peak_pending: bool,
    taken: Option<(u64, u64, Vec<StackBytes>)>,
    ooms_seen: u64,
    oom: Option<OomEvent>,
    end_ns: u64,
    /// The level counted now, and the one asked for (`None`: segments until the trace's
    /// first tensor record, tensors from then on).
    level: MemoryLevel,
    asked: Option<MemoryLevel>,
}

impl SnapshotBuilder {
    pub fn new(moment: Moment, device: Option<i32>) -> Self {
        SnapshotBuilder {
            moment,
            device,
            live: FastMap::default(),
            total: 0,
            peak: 0,
            peak_time_ns: 0,
            peak_pending: false,
            taken: None,
            ooms_seen: 0,
            oom: None,
            end_ns: 0,
            level: MemoryLevel::Segments,
            asked: None,
        }
    }

    /// Counts `level` only (`None`: tensors once the trace shows some, else segments).
    pub fn with_level(mut self, asked: Option<MemoryLevel>) -> Self {
        self.asked = asked;
        self.level = asked.unwrap_or(MemoryLevel::Segments);
        self
    }

    /// The trace's first tensor: from now on tensors are counted, from nothing (no tensor
    /// was live before). A moment already taken at the segment level (a time or a failure
    /// before the first tensor) stays as it was.
    fn first_tensor(&mut self) {
        if self.asked.is_some() || self.level == MemoryLevel::Tensors {
            return;
        }
        if self.taken.is_some() && self.moment != Moment::Peak {
            return;
        }
        self.level = MemoryLevel::Tensors;
        self.live.clear();
        self.total = 0;
        self.peak = 0;
        self.peak_time_ns = 0;
        self.peak_pending = false;
        self.taken = None;
    }

    fn selected(&self, device: i32, kind: MemKind) -> bool {
        self.level.counts(kind) && (self.device.is_none() || self.device == Some(device))
    }

    fn take(&mut self, time_ns: u64) {
        let sites = self
            .live
            .iter()
            .map(|(&(device, kind, stack), &(bytes, count))| StackBytes {
                device,
                kind,
                stack,
                bytes,
                count,
            })
            .collect();
        self.taken = Some((time_ns, self.total, sites));
    }

    /// The snapshot, or why the trace has none (no such out-of-memory failure).
    pub fn finish(mut self) -> Result<Snapshot, String> {
        match self.moment {
            Moment::Peak if self.peak_pending => self.take(self.peak_time_ns),
            Moment::End => self.take(self.end_ns),
            Moment::At(t) if self.taken.is_none() => self.take(t.min(self.end_ns)),
            Moment::Oom(n) if self.taken.is_none() => {
                let on = match self.device {
                    Some(d) => format!(" on device {}", units::device(d)),
                    None => String::new(),
                };
                return Err(match self.ooms_seen {
                    0 => format!(
                        "the trace has no out-of-memory failure{on} (no allocation failed \
                         with error 2): leave out --oom, or use --at SECONDS or --leaks"
                    ),
                    k => format!(
                        "the trace has {}{on}: pick one with --oom N, N from 1 to {k} \
                         (asked for {n})",
                        units::plural(k, "out-of-memory failure", "out-of-memory failures")
                    ),
                });
            }
            _ => {}
        }
        let (time_ns, total_bytes, mut sites) = self.taken.unwrap_or_default();
        // Largest first; ties in a fixed order so output is reproducible.
        sites.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.count.cmp(&a.count))
                .then((a.device, a.kind, a.stack).cmp(&(b.device, b.kind, b.stack)))
        });
        sites.retain(|s| s.bytes > 0);
        Ok(Snapshot {
            moment: self.moment,
            device: self.device,
            time_ns,
            total_bytes,
            sites,
            oom: self.oom,
            level: self.level,
        })
    }
}

impl Observer for SnapshotBuilder {
    fn record(&mut self, record: &Record) {
        if let Some(t) = record_time(record) {
            self.end_ns = self.end_ns.max(t);
        }
        if matches!(record, Record::Tensor(_)) {
            self.first_tensor();
        }
        if self.taken.is_some() && self.moment != Moment::Peak {
            return;
        }
        match (self.moment, record) {
            // The first event after the time: the state now is the state then.
            (
                Moment::At(at),
                Record::Alloc(_) | Record::Free(_) | Record::AllocFailed(_) | Record::Tensor(_),
            ) if record_time(record).is_some_and(|t| t > at) => {
                self.take(at);
            }
            (Moment::Oom(n), Record::AllocFailed(f))
                if f.result == OUT_OF_MEMORY
                    && (self.device.is_none() || self.device == Some(f.device)) =>
            {
                self.ooms_seen += 1;
                if self.ooms_seen == n {
                    self.take(f.time_ns);
                    self.oom = Some(OomEvent {
                        time_ns: f.time_ns,
                        device: f.device,
                        kind: f.kind,
                        size: f.size,
                        api: f.api,
                        stack: f.stack,
                        mem_free: f.mem_free,
                        mem_total: f.mem_total,
                    });
                }
            }
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        for change in changes {
            let (a, added) = match change {
                LiveChange::Added(a) => (a, true),
                LiveChange::Released(a) => (a, false),
            };
            if !self.selected(a.device, a.kind) {
                continue;
            }
            let key = (a.device, a.kind, a.stack);
            if added {
                let site = self.live.entry(key).or_default();
                site.0 = site.0.saturating_add(a.size);
                site.1 += 1;
                self.total = self.total.saturating_add(a.size);
                // Strictly greater: the peak's time is the first time it was reached.
                if self.total > self.peak {
                    self.peak = self.total;
                    self.peak_time_ns = time_ns;
                    self.peak_pending = self.moment == Moment::Peak;
                }
            } else {
                if self.peak_pending {
                    // Before applying the release: the state now is the state at the peak.
                    self.take(self.peak_time_ns);
                    self.peak_pending = false;
                }
                if let Some(site) = self.live.get_mut(&key) {
                    site.0 = site.0.saturating_sub(a.size);
                    site.1 = site.1.saturating_sub(1);
                    if site.1 == 0 {
                        self.live.remove(&key);
                    }
                }
                self.total = self.total.saturating_sub(a.size);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::LiveAlloc;
    use gpumemprof_format::AllocFailed;

    const D: MemKind = MemKind::Device;

    fn change(device: i32, kind: MemKind, stack: u64, size: i64) -> LiveChange {
        let a = LiveAlloc {
            address: 0,
            time_ns: 0,
            size: size.unsigned_abs(),
            stack,
            device,
            kind,
        };
        if size >= 0 {
            LiveChange::Added(a)
        } else {
            LiveChange::Released(a)
        }
    }

    fn oom(t: u64, device: i32) -> Record {
        Record::AllocFailed(AllocFailed {
            time_ns: t,
            tid: 1,
            api: 0,
            kind: D,
            device,
            size: 1 << 40,
            stream: 0,
            pool: 0,
            stack: 9,
            result: OUT_OF_MEMORY,
            mem_free: 5,
            mem_total: 10,
        })
    }

    fn alloc_record(t: u64) -> Record {
        Record::Alloc(gpumemprof_format::Alloc {
            time_ns: t,
            tid: 1,
            api: 0,
            kind: D,
            device: 0,
            address: 1,
            size: 1,
            stream: 0,
            pool: 0,
            stack: 0,
        })
    }

    /// Live steps at times 1..: stack 1 +100, stack 2 +200 (peak 300 at t=2), stack 2 -200,
    /// OOM on device 0 at t=4, stack 3 +50 on device 1, stack 3 +50 on device 1.
    fn run(moment: Moment, device: Option<i32>) -> Result<Snapshot, String> {
        let mut b = SnapshotBuilder::new(moment, device);
        let steps: Vec<(u64, Option<LiveChange>)> = vec![
            (1, Some(change(0, D, 1, 100))),
            (2, Some(change(0, D, 2, 200))),
            (3, Some(change(0, D, 2, -200))),
            (4, None),
            (5, Some(change(1, D, 3, 50))),
            (6, Some(change(1, D, 3, 50))),
            (7, Some(change(0, MemKind::VmmHandle, 4, 1 << 30))),
        ];
        for (t, c) in steps {
            match c {
                Some(c) => {
                    b.record(&alloc_record(t));
                    b.changes(t, &[c]);
                }
                None => b.record(&oom(t, 0)),
            }
        }
        b.finish()
    }

    fn sites(s: &Snapshot) -> Vec<(i32, u64, u64, u64)> {
        s.sites
            .iter()
            .map(|x| (x.device, x.stack, x.bytes, x.count))
            .collect()
    }

    #[test]
    fn peak_is_the_state_at_the_first_highest_total() {
        let s = run(Moment::Peak, None).unwrap();
        assert_eq!((s.time_ns, s.total_bytes), (2, 300));
        assert_eq!(sites(&s), vec![(0, 2, 200, 1), (0, 1, 100, 1)]);
    }

    #[test]
    fn peak_of_one_device_is_that_device_alone() {
        let s = run(Moment::Peak, Some(1)).unwrap();
        assert_eq!((s.time_ns, s.total_bytes), (6, 100));
        assert_eq!(sites(&s), vec![(1, 3, 100, 2)]);
    }

    #[test]
    fn end_at_and_oom_moments() {
        let end = run(Moment::End, None).unwrap();
        assert_eq!((end.time_ns, end.total_bytes), (7, 200));
        // Equal bytes: more allocations first.
        assert_eq!(sites(&end), vec![(1, 3, 100, 2), (0, 1, 100, 1)]);

        let at = run(Moment::At(5), None).unwrap();
        assert_eq!((at.time_ns, at.total_bytes), (5, 150));
        let past = run(Moment::At(1_000), None).unwrap();
        assert_eq!((past.time_ns, past.total_bytes), (7, 200));

        let o = run(Moment::Oom(1), None).unwrap();
        assert_eq!((o.time_ns, o.total_bytes), (4, 100));
        assert_eq!(o.oom.map(|f| (f.size, f.mem_free)), Some((1 << 40, 5)));
        assert!(run(Moment::Oom(2), None)
            .unwrap_err()
            .contains("has 1 out-of-memory failure: pick"));
        assert!(run(Moment::Oom(1), Some(1))
            .unwrap_err()
            .contains("no out-of-memory failure on device 1"));
    }
}
