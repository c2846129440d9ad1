//! The timeline by kind of memory: for each bucket of a device's tensor series, the
//! tensors live at the moment the bucket reached its highest value, by kind, so the kinds
//! stack up to exactly the series' step. A second pass over the trace (a tensor's kind is
//! known only once its life has ended), on the grid the first pass drew.
//!
//! Moments are numbered as the second pass meets them; each tensor remembers the first
//! moment after it was made, and when it is freed (or at the end) its kind is added to
//! every moment from that one to the last met, as one range (a difference array):
//!
//! ```text
//!  moments     m0   m1   m2   m3
//!  tensor        [made ........ freed)   adds its bytes to m1..m2 under its kind
//! ```

use std::path::Path;

use gpumemprof_format::{MemKind, Record};

use super::{Decider, Kind};
use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::fates::{Freed, Lifetime, Runs};
use crate::replay::{LiveChange, Loaded};
use crate::timeline::{KindSeries, SeriesKey, Timeline};

/// One device's state in the second pass.
struct Device {
    device: i32,
    /// The first pass's highest value of each bucket.
    highest: Vec<u64>,
    value: u64,
    /// The bucket of the latest change, and whether its moment was met.
    bucket: Option<usize>,
    met: Vec<bool>,
    /// The bucket of each moment met, in order.
    moments: Vec<usize>,
    /// Per kind, a difference array over moments.
    diffs: [Vec<i128>; Kind::ALL.len()],
    /// Live tensors: their life so far and the first moment after they were made.
    live: FastMap<u64, (Lifetime, usize)>,
}

impl Device {
    fn moment(&mut self, bucket: usize) {
        if !self.met[bucket] {
            self.met[bucket] = true;
            self.moments.push(bucket);
        }
    }

    /// The moments met up to `bucket` before a change in it: the buckets passed over
    /// without a change keep the value carried into them, as does `bucket`'s start.
    fn reach(&mut self, bucket: usize) {
        let from = self.bucket.map_or(0, |b| b.saturating_add(1));
        for b in from..=bucket.min(self.highest.len().saturating_sub(1)) {
            if self.highest[b] == self.value {
                self.moment(b);
            }
        }
        self.bucket = Some(self.bucket.map_or(bucket, |b| b.max(bucket)));
    }

    fn after_change(&mut self, bucket: usize) {
        if bucket < self.highest.len() && self.highest[bucket] == self.value {
            self.moment(bucket);
        }
    }

    /// Adds `life`'s bytes under `kind` to moments `from..` up to the latest met.
    fn add(&mut self, kind: Kind, size: u64, from: usize) {
        let to = self.moments.len();
        if from >= to {
            return;
        }
        let diff = &mut self.diffs[kind as usize];
        if diff.len() < to + 1 {
            diff.resize(to + 1, 0);
        }
        diff[from] += i128::from(size);
        diff[to] -= i128::from(size);
    }

    fn finish(mut self, decider: &Decider) -> KindSeries {
        // The buckets after the last change hold the value carried into them.
        if let Some(last) = self.highest.len().checked_sub(1) {
            self.reach(last);
        }
        for (_, (life, from)) in std::mem::take(&mut self.live) {
            self.add(decider.kind(&life), life.size, from);
        }
        let mut buckets = vec![None; self.highest.len()];
        let mut sums = [0i128; Kind::ALL.len()];
        for (m, &bucket) in self.moments.iter().enumerate() {
            let mut bytes = [0u64; Kind::ALL.len()];
            for (k, diff) in self.diffs.iter().enumerate() {
                sums[k] += diff.get(m).copied().unwrap_or(0);
                bytes[k] = u64::try_from(sums[k]).unwrap_or(0);
            }
            buckets[bucket] = Some(bytes);
        }
        KindSeries {
            device: self.device,
            buckets,
        }
    }
}

/// The second pass's observer.
struct Builder<'a, 'f> {
    decider: &'a Decider<'f>,
    /// The grid: its origin (changes before it are carried in) and bucket width.
    origin_ns: u64,
    width_ns: u64,
    devices: Vec<Device>,
    /// As the timeline places changes: at the latest time seen.
    now_ns: u64,
    /// Runs, as `replay::fates` numbers them.
    runs: Runs,
    /// The tensor record being applied: its thread, stack and run.
    applying: Option<(u32, u64, u32)>,
}

impl Observer for Builder<'_, '_> {
    fn record(&mut self, record: &Record) {
        self.applying = None;
        match record {
            Record::Alloc(a) => self.now_ns = self.now_ns.max(a.time_ns),
            Record::Free(f) => self.now_ns = self.now_ns.max(f.time_ns),
            Record::AllocFailed(f) => self.now_ns = self.now_ns.max(f.time_ns),
            Record::Tensor(t) => {
                self.now_ns = self.now_ns.max(t.time_ns);
                let (run, _) = self.runs.next(t.tid);
                self.applying = Some((t.tid, t.stack, run));
            }
            _ => {}
        }
    }

    fn changes(&mut self, _time_ns: u64, changes: &[LiveChange]) {
        let Some((tid, stack, run)) = self.applying else {
            return;
        };
        // Before the window: values and lives are carried in, no moment is met.
        let bucket = (self.now_ns >= self.origin_ns)
            .then(|| ((self.now_ns - self.origin_ns) / self.width_ns.max(1)) as usize);
        for change in changes {
            let (LiveChange::Added(a) | LiveChange::Released(a)) = *change;
            if a.kind != MemKind::Tensor {
                continue;
            }
            let Some(d) = self.devices.iter_mut().find(|d| d.device == a.device) else {
                continue;
            };
            if let Some(bucket) = bucket {
                d.reach(bucket);
            }
            match *change {
                LiveChange::Added(a) => {
                    d.value = d.value.saturating_add(a.size);
                    let life = Lifetime {
                        address: a.address,
                        time_ns: a.time_ns,
                        size: a.size,
                        device: a.device,
                        stack: a.stack,
                        tid,
                        run,
                        freed: None,
                    };
                    d.live.insert(a.address, (life, d.moments.len()));
                }
                LiveChange::Released(a) => {
                    d.value = d.value.saturating_sub(a.size);
                    if let Some((mut life, from)) = d.live.remove(&a.address) {
                        life.freed = Some(Freed { stack, tid, run });
                        d.add(self.decider.kind(&life), life.size, from);
                    }
                }
            }
            if let Some(bucket) = bucket {
                d.after_change(bucket);
            }
        }
    }
}

/// Each PyTorch device's tensors by kind over `t`'s grid, read again from `path` (what the
/// first pass `loaded` gave decides the kinds); empty when the trace has no PyTorch tensors.
pub fn series(path: &Path, loaded: &Loaded, t: &Timeline, decider: &Decider) -> Vec<KindSeries> {
    if t.len == 0 {
        return Vec::new();
    }
    let devices: Vec<Device> = (super::pytorch_devices(&loaded.replayed).into_iter())
        .filter_map(|device| {
            let s = t.series(SeriesKey::Live(device, MemKind::Tensor))?;
            let highest: Vec<u64> = (t.filled(s).iter())
                .map(|b| b.map_or(0, |b| b.max))
                .collect();
            Some(Device {
                device,
                met: vec![false; highest.len()],
                highest,
                value: 0,
                bucket: None,
                moments: Vec::new(),
                diffs: Default::default(),
                live: FastMap::default(),
            })
        })
        .collect();
    if devices.is_empty() {
        return Vec::new();
    }
    let mut builder = Builder {
        decider,
        origin_ns: t.origin_ns,
        width_ns: t.width_ns,
        devices,
        now_ns: 0,
        runs: Runs::default(),
        applying: None,
    };
    let Ok(reader) = crate::input::open(path) else {
        return Vec::new();
    };
    // Losses were reported by the first pass.
    if crate::observe::replay_observed(reader, &mut [&mut builder]).is_err() {
        return Vec::new();
    }
    (builder.devices.into_iter())
        .map(|d| d.finish(decider))
        .collect()
}

/// `t` with its devices' tensors by kind (`Timeline::kinds`), when the trace has PyTorch
/// tensors: a second pass over `path`.
pub fn add(t: &mut Timeline, path: &Path, loaded: &Loaded, sym: &mut crate::symbolize::Symbolizer) {
    let r = &loaded.replayed;
    if super::pytorch_devices(r).is_empty() {
        return;
    }
    // Every stack: the pass decides the kind of every tensor, not only those the replay
    // kept.
    let decider = Decider::knowing(&r.fates, sym, r.stacks.keys().copied());
    t.kinds = series(path, loaded, t, &decider);
}
