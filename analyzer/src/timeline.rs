//! Live memory over time: per (device, memory kind), all memory together, and what NVML
//! measured, in a bounded number of equal-width time buckets; plus the moments drawn on top
//! (out-of-memory failures, and NVTX marks and ranges once the trace carries them).
//!
//! Built during the replay pass (`observe::Observer`), never from stored events. Every
//! series shares one grid of at most `MAX_BUCKETS` buckets starting at time 0; when an event
//! lands past the last bucket, the width doubles and neighbouring buckets merge:
//!
//! ```text
//!  width w:   [b0][b1][b2][b3] ... [b2047] | event at t ≥ 2048·w
//!  width 2w:  [b0+b1 ][b2+b3 ] ... [b2046+b2047][ empty ... ]
//! ```
//!
//! A bucket keeps the lowest, highest and last value seen in it (a value carried in from the
//! previous bucket counts as seen at the bucket's start), and merging keeps the min of the
//! mins and the max of the maxes: the peak is never averaged away, so the highest bucket of
//! the `total` series is exactly `summary`'s peak.

use gpumemprof_format::{MemKind, Record, OUT_OF_MEMORY};

use crate::observe::Observer;
use crate::replay::{LiveChange, MAX_KEPT_FAILURES};

/// Buckets per series at most: about one per pixel of a wide chart, and a CSV of a few
/// thousand lines per series, however long the trace.
pub const MAX_BUCKETS: usize = 2048;

/// Width of a bucket before any doubling: 1 µs (a trace shorter than 2 ms keeps this).
const FIRST_WIDTH_NS: u64 = 1_000;

/// One bucket of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub min: u64,
    pub max: u64,
    /// When `max` was first reached (ns since the trace started).
    pub max_time_ns: u64,
    /// The value at the bucket's end, and when it was set.
    pub last: u64,
    pub last_time_ns: u64,
}

impl Bucket {
    fn at(value: u64, time_ns: u64) -> Bucket {
        Bucket {
            min: value,
            max: value,
            max_time_ns: time_ns,
            last: value,
            last_time_ns: time_ns,
        }
    }

    fn see(&mut self, value: u64, time_ns: u64) {
        self.min = self.min.min(value);
        // Strictly greater: the time is the first time the maximum was reached.
        if value > self.max {
            self.max = value;
            self.max_time_ns = time_ns;
        }
        self.last = value;
        self.last_time_ns = time_ns;
    }

    /// The bucket covering both `self` and the later `next`.
    fn merge(self, next: Bucket) -> Bucket {
        Bucket {
            min: self.min.min(next.min),
            max: self.max.max(next.max),
            max_time_ns: if next.max > self.max {
                next.max_time_ns
            } else {
                self.max_time_ns
            },
            last: next.last,
            last_time_ns: next.last_time_ns,
        }
    }
}

/// What a series measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SeriesKey {
    /// Live bytes of every memory kind on every device (`summary`'s totals).
    Total,
    /// Live bytes of one (device, kind) row.
    Live(i32, MemKind),
    /// Bytes NVML said this process used on a device (samples, not a step function).
    Nvml(i32),
}

impl SeriesKey {
    /// `(device, kind)` columns of the CSV: `all,all`, `0,device`, `0,nvml_process_used`.
    pub fn columns(self) -> (String, &'static str) {
        match self {
            SeriesKey::Total => ("all".into(), "all"),
            SeriesKey::Live(d, k) => (d.to_string(), k.name()),
            SeriesKey::Nvml(d) => (d.to_string(), "nvml_process_used"),
        }
    }
}

/// One series on the shared grid: `buckets[i]` covers `[i·w, (i+1)·w)`; `None` where
/// nothing happened (a live series then holds its previous value, an NVML one has no
/// sample).
#[derive(Debug, Clone)]
pub struct Series {
    pub key: SeriesKey,
    pub buckets: Vec<Option<Bucket>>,
    /// The current value (live series) or the last sample (NVML).
    current: u64,
    /// The value carried into the first bucket: what the series held when a window
    /// opened (0 without one).
    initial: u64,
}

impl Series {
    fn new(key: SeriesKey) -> Series {
        Series {
            key,
            buckets: Vec::new(),
            current: 0,
            initial: 0,
        }
    }

    /// A value before the window opens: carried into it, not drawn.
    fn before(&mut self, value: u64) {
        self.current = value;
        self.initial = value;
    }

    /// Records `value` at `time_ns`, in bucket `index`.
    fn set(&mut self, index: usize, time_ns: u64, bucket_start_ns: u64, value: u64) {
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, None);
        }
        let slot = &mut self.buckets[index];
        match slot {
            Some(b) => b.see(value, time_ns),
            None => {
                // A live series held `current` since the bucket's start.
                let mut b = match self.key {
                    SeriesKey::Nvml(_) => Bucket::at(value, time_ns),
                    _ => Bucket::at(self.current, bucket_start_ns),
                };
                b.see(value, time_ns);
                *slot = Some(b);
            }
        }
        self.current = value;
    }

    fn halve(&mut self) {
        let merged: Vec<Option<Bucket>> = self
            .buckets
            .chunks(2)
            .map(|pair| match pair {
                [Some(a), Some(b)] => Some(a.merge(*b)),
                // An empty half held the neighbour's value (live) or had no sample (NVML):
                // the other half says it all.
                [a, b] => a.or(*b),
                [a] => *a,
                _ => None,
            })
            .collect();
        self.buckets = merged;
    }

    /// The highest value of the series.
    pub fn max(&self) -> u64 {
        self.buckets
            .iter()
            .flatten()
            .map(|b| b.max)
            .max()
            .unwrap_or(0)
    }

    /// Buckets with every gap of a live series filled with the value carried through it
    /// (NVML gaps stay `None`), up to `len` buckets of `width_ns` from `origin_ns`.
    pub fn filled(&self, origin_ns: u64, width_ns: u64, len: usize) -> Vec<Option<Bucket>> {
        let mut out = Vec::with_capacity(len);
        let mut carry = self.initial;
        for i in 0..len {
            let b = self.buckets.get(i).copied().flatten();
            match (b, self.key) {
                (Some(b), _) => {
                    carry = b.last;
                    out.push(Some(b));
                }
                (None, SeriesKey::Nvml(_)) => out.push(None),
                (None, _) => out.push(Some(Bucket::at(
                    carry,
                    origin_ns.saturating_add((i as u64).saturating_mul(width_ns)),
                ))),
            }
        }
        out
    }
}

/// An allocation that failed for lack of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomEvent {
    pub time_ns: u64,
    pub device: i32,
    pub kind: MemKind,
    /// Bytes requested.
    pub size: u64,
    pub api: u16,
    pub stack: u64,
    /// The device's free and total memory right after the failure (total 0: unknown).
    pub mem_free: u64,
    pub mem_total: u64,
}

/// A named moment (an NVTX mark). No trace carries these yet; charts draw them when present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub time_ns: u64,
    pub name: String,
}

/// A named interval (an NVTX range). No trace carries these yet; charts shade them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub start_ns: u64,
    pub end_ns: u64,
    pub name: String,
}

/// Kinds of memory a `KindSeries` counts (`kinds::Kind::ALL`).
pub const KINDS: usize = 7;

/// A device's tensors by kind of memory at the moment each bucket of its tensor series
/// reached its highest value (`None`: that moment was not found); made by
/// `kinds::timeline`, in `kinds::Kind::ALL`'s order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindSeries {
    pub device: i32,
    pub buckets: Vec<Option<[u64; KINDS]>>,
}

/// Everything a timeline view draws.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Where bucket 0 starts (ns since the trace started): 0, or the start of a window.
    pub origin_ns: u64,
    /// Bucket width, ns.
    pub width_ns: u64,
    /// Buckets in use (the longest series).
    pub len: usize,
    /// `Total` first, then live series by (device, kind), then NVML by device.
    pub series: Vec<Series>,
    /// The first `MAX_KEPT_FAILURES` out-of-memory failures, in trace order.
    pub ooms: Vec<OomEvent>,
    /// Out-of-memory failures in all (also those not kept).
    pub oom_count: u64,
    /// Each NVML device's total memory, as last sampled.
    pub device_totals: Vec<(i32, u64)>,
    pub marks: Vec<Mark>,
    pub ranges: Vec<Range>,
    /// Time of the last record seen.
    pub end_ns: u64,
    /// PyTorch's tensors by kind of memory, per device (`kinds::timeline::add`; empty until
    /// then).
    pub kinds: Vec<KindSeries>,
}

impl Timeline {
    pub fn series(&self, key: SeriesKey) -> Option<&Series> {
        self.series.iter().find(|s| s.key == key)
    }

    /// Devices with a live or NVML series, ascending.
    pub fn devices(&self) -> Vec<i32> {
        let mut d: Vec<i32> = self
            .series
            .iter()
            .filter_map(|s| match s.key {
                SeriesKey::Live(d, _) | SeriesKey::Nvml(d) => Some(d),
                SeriesKey::Total => None,
            })
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Start of bucket `i`, ns since the trace started.
    pub fn start_ns(&self, i: usize) -> u64 {
        self.origin_ns
            .saturating_add((i as u64).saturating_mul(self.width_ns))
    }

    /// `s`'s buckets with every gap of a live series filled (`Series::filled`).
    pub fn filled(&self, s: &Series) -> Vec<Option<Bucket>> {
        s.filled(self.origin_ns, self.width_ns, self.len)
    }
}

/// Builds a `Timeline` while the replay pass runs.
#[derive(Debug)]
pub struct TimelineBuilder {
    /// The window: from `origin_ns` (what came before is carried in, not drawn) up to
    /// `until_ns` (what comes after is left out).
    origin_ns: u64,
    until_ns: Option<u64>,
    width_ns: u64,
    series: Vec<Series>,
    /// Latest event time so far: a record that arrives a little out of order (from another
    /// thread) is drawn at this time, so each series stays in trace order.
    now_ns: u64,
    end_ns: u64,
    ooms: Vec<OomEvent>,
    oom_count: u64,
    device_totals: Vec<(i32, u64)>,
}

impl Default for TimelineBuilder {
    fn default() -> Self {
        TimelineBuilder {
            origin_ns: 0,
            until_ns: None,
            width_ns: FIRST_WIDTH_NS,
            series: vec![Series::new(SeriesKey::Total)],
            now_ns: 0,
            end_ns: 0,
            ooms: Vec::new(),
            oom_count: 0,
            device_totals: Vec::new(),
        }
    }
}

impl TimelineBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A timeline of the window from `from_ns` to `to_ns` (ns since the trace started):
    /// its grid starts at `from_ns`, what was live then is carried in, and nothing after
    /// `to_ns` is drawn.
    pub fn window(from_ns: Option<u64>, to_ns: Option<u64>) -> Self {
        TimelineBuilder {
            origin_ns: from_ns.unwrap_or(0),
            until_ns: to_ns,
            ..Self::default()
        }
    }

    /// Whether `time_ns` is past the window's end.
    fn after(&self, time_ns: u64) -> bool {
        self.until_ns.is_some_and(|to| time_ns > to)
    }

    /// The bucket of `time_ns` (at or after the origin), widening the grid until it fits.
    fn index(&mut self, time_ns: u64) -> usize {
        let time_ns = time_ns.saturating_sub(self.origin_ns);
        while time_ns / self.width_ns >= MAX_BUCKETS as u64 {
            for s in &mut self.series {
                s.halve();
            }
            self.width_ns = self.width_ns.saturating_mul(2);
        }
        (time_ns / self.width_ns) as usize
    }

    fn set(&mut self, key: SeriesKey, time_ns: u64, value: u64) {
        if self.after(time_ns) {
            return;
        }
        let position = match self.series.iter().position(|s| s.key == key) {
            Some(p) => p,
            None => {
                self.series.push(Series::new(key));
                self.series.len() - 1
            }
        };
        if time_ns < self.origin_ns {
            // Before the window: carried in (an NVML sample says nothing about later).
            if !matches!(key, SeriesKey::Nvml(_)) {
                self.series[position].before(value);
            }
            return;
        }
        let index = self.index(time_ns);
        let start = self.origin_ns + index as u64 * self.width_ns;
        self.series[position].set(index, time_ns, start, value);
    }

    fn current(&self, key: SeriesKey) -> u64 {
        self.series
            .iter()
            .find(|s| s.key == key)
            .map_or(0, |s| s.current)
    }

    /// Applies one allocation made live (`added`) or released at `time_ns`.
    fn change(&mut self, time_ns: u64, device: i32, kind: MemKind, size: u64, added: bool) {
        // Tensors are a series of their own (PyTorch's allocated, under its reserved
        // segments), never in the total: they lie inside the segments.
        let counted = kind.is_memory();
        if !counted && kind != MemKind::Tensor {
            return;
        }
        // Saturating, in trace order, exactly as `replay` counts: the maxima then agree.
        let step = |v: u64| {
            if added {
                v.saturating_add(size)
            } else {
                v.saturating_sub(size)
            }
        };
        let row = SeriesKey::Live(device, kind);
        let row_value = step(self.current(row));
        self.set(row, time_ns, row_value);
        if counted {
            let total_value = step(self.current(SeriesKey::Total));
            self.set(SeriesKey::Total, time_ns, total_value);
        }
    }

    pub fn finish(mut self) -> Timeline {
        // Total first, then live rows, then NVML, each by device and kind.
        self.series.sort_by_key(|s| match s.key {
            SeriesKey::Total => (0, 0, 0),
            SeriesKey::Live(d, k) => (1, d, k.to_u8() as i32),
            SeriesKey::Nvml(d) => (2, d, 0),
        });
        let len = self
            .series
            .iter()
            .map(|s| s.buckets.len())
            .max()
            .unwrap_or(0);
        self.device_totals.sort_unstable();
        let end_ns = self.until_ns.map_or(self.end_ns, |to| self.end_ns.min(to));
        Timeline {
            origin_ns: self.origin_ns,
            width_ns: self.width_ns,
            len,
            series: self.series,
            ooms: self.ooms,
            oom_count: self.oom_count,
            device_totals: self.device_totals,
            marks: Vec::new(),
            ranges: Vec::new(),
            end_ns: end_ns.max(self.origin_ns),
            kinds: Vec::new(),
        }
    }
}

impl Observer for TimelineBuilder {
    fn record(&mut self, record: &Record) {
        match record {
            Record::Alloc(a) => self.now_ns = self.now_ns.max(a.time_ns),
            Record::Free(f) => self.now_ns = self.now_ns.max(f.time_ns),
            Record::Tensor(t) => self.now_ns = self.now_ns.max(t.time_ns),
            Record::AllocFailed(f) => {
                self.now_ns = self.now_ns.max(f.time_ns);
                let inside = f.time_ns >= self.origin_ns && !self.after(f.time_ns);
                if f.result == OUT_OF_MEMORY && inside {
                    self.oom_count += 1;
                    if self.ooms.len() < MAX_KEPT_FAILURES {
                        self.ooms.push(OomEvent {
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
            }
            Record::Sample(s) => {
                self.set(SeriesKey::Nvml(s.device), s.time_ns, s.process_used);
                match self.device_totals.iter_mut().find(|(d, _)| *d == s.device) {
                    Some(t) => t.1 = s.device_total,
                    None => self.device_totals.push((s.device, s.device_total)),
                }
            }
            _ => {}
        }
        if let Some(t) = crate::observe::record_time(record) {
            self.end_ns = self.end_ns.max(t);
        }
    }

    fn changes(&mut self, _time_ns: u64, changes: &[LiveChange]) {
        let now = self.now_ns;
        for c in changes {
            match *c {
                LiveChange::Added(a) => self.change(now, a.device, a.kind, a.size, true),
                LiveChange::Released(a) => self.change(now, a.device, a.kind, a.size, false),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::LiveAlloc;

    const D: MemKind = MemKind::Device;

    fn live(device: i32, kind: MemKind, size: u64) -> LiveAlloc {
        LiveAlloc {
            address: 1,
            time_ns: 0,
            size,
            stack: 0,
            device,
            kind,
        }
    }

    /// Feeds (time, device, kind, signed size) steps straight to the builder.
    fn build(steps: &[(u64, i32, MemKind, i64)]) -> Timeline {
        let mut b = TimelineBuilder::new();
        for &(t, device, kind, size) in steps {
            b.now_ns = b.now_ns.max(t);
            let a = live(device, kind, size.unsigned_abs());
            let change = if size >= 0 {
                LiveChange::Added(a)
            } else {
                LiveChange::Released(a)
            };
            b.changes(t, &[change]);
        }
        b.finish()
    }

    fn maxima(s: &Series) -> Vec<Option<u64>> {
        s.buckets.iter().map(|b| b.map(|b| b.max)).collect()
    }

    #[test]
    fn a_short_trace_keeps_one_microsecond_buckets_with_min_max_last() {
        let t = build(&[
            (100, 0, D, 10),
            (200, 0, D, 5),
            (300, 0, D, -10),
            (2_500, 0, D, 7),
        ]);
        assert_eq!(t.width_ns, 1_000);
        let total = t.series(SeriesKey::Total).unwrap();
        assert_eq!(
            total.buckets,
            vec![
                Some(Bucket {
                    min: 0,
                    max: 15,
                    max_time_ns: 200,
                    last: 5,
                    last_time_ns: 300,
                }),
                None,
                Some(Bucket {
                    min: 5,
                    max: 12,
                    max_time_ns: 2_500,
                    last: 12,
                    last_time_ns: 2_500,
                }),
            ]
        );
        // The gap holds the carried value.
        assert_eq!(
            total.filled(0, t.width_ns, 3)[1].map(|b| (b.min, b.max)),
            Some((5, 5))
        );
    }

    #[test]
    fn doubling_merges_neighbours_and_keeps_every_maximum_exactly() {
        // A spike of 1 byte above a plateau, 1 ns long, early on; then events far later
        // force the grid to widen many times.
        let mut steps = vec![(0, 0, D, 1000), (5, 0, D, 1), (6, 0, D, -1)];
        for i in 1..=40u64 {
            steps.push((i * 1_000_000_007, 0, D, 3));
            steps.push((i * 1_000_000_007 + 1, 0, D, -3));
        }
        let t = build(&steps);
        assert!(t.len <= MAX_BUCKETS);
        assert!(t.width_ns >= 40 * 1_000_000_007 / MAX_BUCKETS as u64);
        let total = t.series(SeriesKey::Total).unwrap();
        assert_eq!(total.max(), 1003);
        let first = total.buckets[0].unwrap();
        assert_eq!((first.min, first.max, first.max_time_ns), (0, 1001, 5));
        // Every spike bucket still shows 1003 and returns to 1000.
        let spikes: Vec<_> = total
            .buckets
            .iter()
            .flatten()
            .filter(|b| b.max == 1003)
            .collect();
        assert_eq!(spikes.len(), 40);
        assert!(spikes.iter().all(|b| b.last == 1000 && b.min == 1000));
    }

    #[test]
    fn rows_and_total_are_separate_series_and_bookkeeping_kinds_are_ignored() {
        let t = build(&[
            (10, 0, D, 100),
            (20, 1, D, 50),
            (30, 0, MemKind::AddressReservation, 1 << 30),
            (40, 0, D, -100),
            (50, 0, MemKind::Managed, 70),
        ]);
        let keys: Vec<SeriesKey> = t.series.iter().map(|s| s.key).collect();
        assert_eq!(
            keys,
            vec![
                SeriesKey::Total,
                SeriesKey::Live(0, D),
                SeriesKey::Live(0, MemKind::Managed),
                SeriesKey::Live(1, D)
            ]
        );
        assert_eq!(t.series(SeriesKey::Total).unwrap().max(), 150);
        assert_eq!(
            maxima(t.series(SeriesKey::Live(0, D)).unwrap()),
            vec![Some(100)]
        );
        assert_eq!(t.devices(), vec![0, 1]);
    }

    #[test]
    fn a_tensor_is_drawn_at_its_own_time_not_the_last_cuda_calls() {
        let mut b = TimelineBuilder::new();
        b.record(&crate::replay::tests::tensor(5_500, 1, 0x10, 512, 0));
        b.changes(5_500, &[LiveChange::Added(live(0, MemKind::Tensor, 512))]);
        let t = b.finish();
        let s = t.series(SeriesKey::Live(0, MemKind::Tensor)).unwrap();
        // 1 µs buckets: the tensor lands in bucket 5, not bucket 0.
        assert_eq!(s.buckets.len(), 6);
        assert_eq!(
            s.buckets[5].map(|b| (b.max, b.max_time_ns)),
            Some((512, 5_500))
        );
    }

    #[test]
    fn a_window_starts_its_grid_at_its_start_with_the_value_then_carried_in() {
        let mut b = TimelineBuilder::window(Some(10_000), Some(20_000));
        for (t, size, added) in [
            (1_000, 8, true),    // before: carried in
            (5_000, 2, true),    // before: carried in (10 then)
            (12_500, 4, true),   // inside: bucket 2 of the window's 1 µs grid
            (15_000, 10, false), // inside
            (25_000, 100, true), // after: left out
        ] {
            b.now_ns = t;
            let a = live(0, D, size);
            let change = if added {
                LiveChange::Added(a)
            } else {
                LiveChange::Released(a)
            };
            b.changes(t, &[change]);
        }
        let t = b.finish();
        assert_eq!(
            (t.origin_ns, t.start_ns(0), t.start_ns(2)),
            (10_000, 10_000, 12_000)
        );
        let s = t.series(SeriesKey::Live(0, D)).unwrap();
        let maxima: Vec<Option<u64>> = t.filled(s).iter().map(|b| b.map(|b| b.max)).collect();
        // 10 carried in; 14 from 12.5 µs; 4 from 15 µs; nothing from after the window.
        assert_eq!(maxima, [10, 10, 14, 14, 14, 14].map(Some));
        assert_eq!(t.filled(s)[5].map(|b| b.last), Some(4));
        assert_eq!(s.max(), 14);
    }

    #[test]
    fn merging_an_empty_half_keeps_the_other_half() {
        let a = Some(Bucket::at(5, 0));
        let mut s = Series::new(SeriesKey::Total);
        s.buckets = vec![a, None, None, a, None];
        s.halve();
        assert_eq!(s.buckets, vec![a, a, None]);
    }

    #[test]
    fn nvml_samples_are_points_without_carry() {
        let mut b = TimelineBuilder::new();
        let sample = |t, used| {
            Record::Sample(gpumemprof_format::Sample {
                time_ns: t,
                device: 0,
                process_used: used,
                device_used: used,
                device_total: 1 << 30,
                query_ns: 0,
            })
        };
        b.record(&sample(100, 500));
        b.record(&sample(3_100, 300));
        let t = b.finish();
        let s = t.series(SeriesKey::Nvml(0)).unwrap();
        assert_eq!(maxima(s), vec![Some(500), None, None, Some(300)]);
        assert_eq!(s.buckets[3].unwrap().min, 300);
        assert_eq!(t.device_totals, vec![(0, 1 << 30)]);
        assert_eq!(t.end_ns, 3_100);
    }
}
