//! What `browse` keeps of a trace so that any moment is shown at once, however long the
//! trace: live memory per (device, kind, stack) as deltas on a time grid, built during the
//! one replay pass (an `Observer`), never from stored events.
//!
//! The grid is the timeline's (`timeline.rs`): at most `MAX_BUCKETS` equal buckets from time
//! 0, the width doubling and neighbours merging when an event lands past the last. Each
//! bucket keeps its changes in two parts, split where the *primary* series (tensors once the
//! trace has one, else device memory) was highest in the bucket:
//!
//! ```text
//!  live │        max ▼
//!       │      ┌──────┐
//!       │  ┌───┘      └──┐
//!       └──┴─ to_max ────┴ rest ──►  state at the max = state at the bucket's start + to_max
//! ```
//!
//! so the state at the moment a chart column draws (its highest point) is exact, and the
//! peak bucket's is the peak's. Two merged buckets keep the higher max's split. Every
//! `CHECKPOINT` buckets the whole state is kept (`finish`), so a moment costs one checkpoint
//! and at most `CHECKPOINT` buckets of deltas. The end and each out-of-memory error keep
//! their exact state. Memory: deltas are at most one per (bucket, stack) touched.

use gpumemprof_format::{MemKind, Record};

use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::attempts::is_error;
use crate::replay::LiveChange;
use crate::snapshot::StackBytes;

use super::deltas::{add, sorted, Delta, Sums};
use super::steps::{Step, StepFinder};

/// Buckets at most: a wide terminal has a few hundred columns, so zooming in 16 times
/// still has a bucket per column; more would cost memory (a delta per stack per bucket).
pub const MAX_BUCKETS: usize = 4096;
/// Width of a bucket before any doubling: 1 µs.
const FIRST_WIDTH_NS: u64 = 1_000;
/// Buckets between two kept whole states.
const CHECKPOINT: usize = 64;
/// Slots of `StoryBuilder::recent`.
const RECENT: usize = 4096;
/// Out-of-memory errors whose state is kept.
pub const MAX_OOMS: usize = 64;

/// A (device, kind, stack) the trace made live memory of; `Story::keys` by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub device: i32,
    pub kind: MemKind,
    pub stack: u64,
}

/// What one key's allocations were over the whole trace (for a node's details).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLife {
    pub allocations: u64,
    pub bytes: u64,
    pub min_size: u64,
    pub max_size: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// One time bucket.
#[derive(Debug, Clone, Default)]
pub struct Bucket {
    /// The highest tensor and device-memory bytes in it (the chart's columns).
    pub tensors_max: u64,
    pub memory_max: u64,
    /// The primary series' highest value, and when it was first reached.
    pub primary_max: u64,
    pub max_ns: u64,
    /// Allocations made live and released in it (to align two traces by event).
    pub changes: u64,
    to_max: Vec<Delta>,
    rest: Vec<Delta>,
}

/// An out-of-memory error and what was live when it was returned.
#[derive(Debug, Clone)]
pub struct Oom {
    pub time_ns: u64,
    pub device: i32,
    pub size: u64,
    pub stack: u64,
    state: Vec<(u32, u64, u64)>,
}

/// The finished story of a trace.
#[derive(Debug, Clone, Default)]
pub struct Story {
    pub width_ns: u64,
    pub buckets: Vec<Bucket>,
    pub keys: Vec<Key>,
    pub lives: Vec<KeyLife>,
    /// The trace has tensor records: the primary series is tensors.
    pub tensors: bool,
    pub end_ns: u64,
    pub ooms: Vec<Oom>,
    /// Every out-of-memory error, kept or not.
    pub oom_count: u64,
    /// The device's memory, summed over devices, where the trace tells it.
    pub capacity: Option<u64>,
    /// The training steps its NVTX ranges mark (`steps`).
    pub steps: Vec<Step>,
    checkpoints: Vec<Vec<(u32, u64, u64)>>,
    end: Vec<(u32, u64, u64)>,
    /// Changes before each bucket.
    before: Vec<u64>,
}

/// Builds a `Story` during the replay pass.
#[derive(Debug)]
pub struct StoryBuilder {
    story: Story,
    index: FastMap<Key, u32>,
    /// A direct-mapped cache in front of `index` (a hash map lookup per change was an
    /// eighth of reading a trace).
    recent: Vec<Option<(Key, u32)>>,
    /// Live bytes and allocations per key now.
    current: Vec<(u64, u64)>,
    tensors_now: u64,
    memory_now: u64,
    /// The open bucket (the last of `story.buckets`): its changes since its max, by key.
    to_max: Sums,
    rest: Sums,
    tensor_devices: Vec<i32>,
    capacity: Vec<(i32, u64)>,
    steps: StepFinder,
}

impl Default for StoryBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StoryBuilder {
    pub fn new() -> Self {
        let story = Story {
            width_ns: FIRST_WIDTH_NS,
            buckets: vec![Bucket::default()],
            ..Story::default()
        };
        StoryBuilder {
            story,
            index: FastMap::default(),
            recent: vec![None; RECENT],
            current: Vec::new(),
            tensors_now: 0,
            memory_now: 0,
            to_max: Sums::default(),
            rest: Sums::default(),
            tensor_devices: Vec::new(),
            capacity: Vec::new(),
            steps: StepFinder::default(),
        }
    }

    fn primary(&self) -> u64 {
        if self.story.tensors {
            self.tensors_now
        } else {
            self.memory_now
        }
    }

    /// Makes the bucket of `time_ns` the open one (a late event stays in the open bucket).
    fn reach(&mut self, time_ns: u64) {
        while time_ns / self.story.width_ns >= MAX_BUCKETS as u64 {
            self.close();
            let old = std::mem::take(&mut self.story.buckets);
            let mut it = old.into_iter();
            while let Some(a) = it.next() {
                self.story.buckets.push(match it.next() {
                    Some(b) => merge(a, b),
                    None => a,
                });
            }
            self.story.width_ns *= 2;
            // The merged last bucket is open again: its changes go on in its `rest`.
            let last = self.story.buckets.last_mut().expect("never empty");
            for (k, b, c) in std::mem::take(&mut last.to_max) {
                self.to_max.add(k, b, c.into());
            }
            for (k, b, c) in std::mem::take(&mut last.rest) {
                self.rest.add(k, b, c.into());
            }
        }
        let index = (time_ns / self.story.width_ns) as usize;
        if index < self.story.buckets.len() {
            return;
        }
        self.close();
        let (t, m, p) = (self.tensors_now, self.memory_now, self.primary());
        while self.story.buckets.len() <= index {
            let start = self.story.buckets.len() as u64 * self.story.width_ns;
            self.story.buckets.push(Bucket {
                tensors_max: t,
                memory_max: m,
                primary_max: p,
                max_ns: start,
                ..Bucket::default()
            });
        }
    }

    /// Moves the open bucket's maps into its sorted vectors.
    fn close(&mut self) {
        let last = self.story.buckets.last_mut().expect("never empty");
        last.to_max = sorted(self.to_max.drain(), std::mem::take(&mut last.to_max));
        last.rest = sorted(self.rest.drain(), std::mem::take(&mut last.rest));
    }

    fn change(&mut self, time_ns: u64, a: &crate::replay::LiveAlloc, added: bool) {
        let counted = a.kind == MemKind::Tensor || a.kind.is_memory();
        if !counted {
            return;
        }
        self.reach(time_ns);
        if a.kind == MemKind::Tensor && !self.story.tensors {
            self.first_tensor();
        }
        let key = Key {
            device: a.device,
            kind: a.kind,
            stack: a.stack,
        };
        let slot = (key.stack.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize
            ^ (key.device as usize & 0xff)
            ^ (key.kind.to_u8() as usize) << 8;
        let slot = slot % RECENT;
        let next = self.story.keys.len() as u32;
        let k = match self.recent[slot] {
            Some((cached, k)) if cached == key => k,
            _ => {
                let k = *self.index.entry(key).or_insert(next);
                self.recent[slot] = Some((key, k));
                k
            }
        };
        if k == next {
            self.story.keys.push(key);
            self.current.push((0, 0));
            self.story.lives.push(KeyLife {
                allocations: 0,
                bytes: 0,
                min_size: u64::MAX,
                max_size: 0,
                first_ns: time_ns,
                last_ns: time_ns,
            });
        }
        let now = &mut self.current[k as usize];
        let total = if a.kind == MemKind::Tensor {
            &mut self.tensors_now
        } else {
            &mut self.memory_now
        };
        let size = a.size as i64;
        if added {
            now.0 = now.0.saturating_add(a.size);
            now.1 += 1;
            *total = total.saturating_add(a.size);
            self.rest.add(k, size, 1);
            let life = &mut self.story.lives[k as usize];
            life.allocations += 1;
            life.bytes = life.bytes.saturating_add(a.size);
            life.min_size = life.min_size.min(a.size);
            life.max_size = life.max_size.max(a.size);
            life.last_ns = time_ns;
        } else {
            now.0 = now.0.saturating_sub(a.size);
            now.1 = now.1.saturating_sub(1);
            *total = total.saturating_sub(a.size);
            self.rest.add(k, -size, -1);
        }
        let (t, m, p) = (self.tensors_now, self.memory_now, self.primary());
        let last = self.story.buckets.last_mut().expect("never empty");
        last.changes += 1;
        last.tensors_max = last.tensors_max.max(t);
        last.memory_max = last.memory_max.max(m);
        if p > last.primary_max {
            last.primary_max = p;
            last.max_ns = time_ns;
            self.to_max.absorb(&mut self.rest);
        }
        self.story.end_ns = self.story.end_ns.max(time_ns);
    }

    /// From the first tensor on, the moments are the tensors' highs; before it there were
    /// none, so each earlier bucket's moment is its start (all its changes after it).
    fn first_tensor(&mut self) {
        self.story.tensors = true;
        let width = self.story.width_ns;
        let open = self.story.buckets.len() - 1;
        for (i, b) in self.story.buckets.iter_mut().enumerate() {
            b.rest = add(&b.to_max, &b.rest);
            b.to_max.clear();
            b.primary_max = 0;
            b.max_ns = i as u64 * width;
            if i == open {
                self.rest.absorb(&mut self.to_max);
            }
        }
    }

    fn state_now(&self) -> Vec<(u32, u64, u64)> {
        (self.current.iter().enumerate())
            .filter(|(_, (b, c))| *b > 0 || *c > 0)
            .map(|(k, &(b, c))| (k as u32, b, c))
            .collect()
    }

    /// The highest the primary series (tensors, else device memory) has been so far.
    pub fn peak(&self) -> u64 {
        (self.story.buckets.iter())
            .map(|b| b.primary_max)
            .max()
            .unwrap_or(0)
    }

    /// The story, with its checkpoints.
    pub fn finish(mut self) -> Story {
        self.close();
        let end = self.state_now();
        let mut story = self.story;
        story.end = end;
        story.steps = self.steps.finish(story.end_ns);
        let mut state: Vec<(i64, i64)> = vec![(0, 0); story.keys.len()];
        let mut changes = 0;
        for (i, b) in story.buckets.iter().enumerate() {
            story.before.push(changes);
            changes += b.changes;
            if i % CHECKPOINT == 0 {
                story.checkpoints.push(sparse(&state));
            }
            for &(k, bytes, count) in b.to_max.iter().chain(&b.rest) {
                let s = &mut state[k as usize];
                s.0 += bytes;
                s.1 += i64::from(count);
            }
        }
        if !self.capacity.is_empty() {
            story.capacity = Some(self.capacity.iter().map(|(_, c)| c).sum());
        }
        story
    }
}

fn sparse(state: &[(i64, i64)]) -> Vec<(u32, u64, u64)> {
    (state.iter().enumerate())
        .filter(|(_, (b, c))| *b > 0 || *c > 0)
        .map(|(k, &(b, c))| (k as u32, b.max(0) as u64, c.max(0) as u64))
        .collect()
}

/// The bucket covering `a` and the later `b`: its max is the higher one (the earlier on a
/// tie, the first time it was reached).
fn merge(a: Bucket, b: Bucket) -> Bucket {
    let whole_a = add(&a.to_max, &a.rest);
    let (primary_max, max_ns, to_max, rest) = if b.primary_max > a.primary_max {
        (b.primary_max, b.max_ns, add(&whole_a, &b.to_max), b.rest)
    } else {
        let rest = add(&a.rest, &add(&b.to_max, &b.rest));
        (a.primary_max, a.max_ns, a.to_max, rest)
    };
    Bucket {
        tensors_max: a.tensors_max.max(b.tensors_max),
        memory_max: a.memory_max.max(b.memory_max),
        primary_max,
        max_ns,
        changes: a.changes + b.changes,
        to_max,
        rest,
    }
}

impl Observer for StoryBuilder {
    fn record(&mut self, record: &Record) {
        // The grid reaches the trace's last record (an OOM, a sample, the end).
        if let Some(t) = crate::observe::record_time(record) {
            self.reach(t);
            self.story.end_ns = self.story.end_ns.max(t);
        }
        match record {
            Record::Tensor(t) if !self.tensor_devices.contains(&t.device) => {
                self.tensor_devices.push(t.device);
            }
            Record::AllocFailed(f) => {
                if f.mem_total > 0 {
                    set_capacity(&mut self.capacity, f.device, f.mem_total);
                }
                if !is_error(f, self.tensor_devices.contains(&f.device)) {
                    return;
                }
                self.story.oom_count += 1;
                if self.story.ooms.len() < MAX_OOMS {
                    let state = self.state_now();
                    self.story.ooms.push(Oom {
                        time_ns: f.time_ns,
                        device: f.device,
                        size: f.size,
                        stack: f.stack,
                        state,
                    });
                }
            }
            Record::Sample(s) if s.device_total > 0 => {
                set_capacity(&mut self.capacity, s.device, s.device_total);
            }
            Record::Nvtx(n) => self.steps.record(n),
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        for change in changes {
            match change {
                LiveChange::Added(a) => self.change(time_ns, a, true),
                LiveChange::Released(a) => self.change(time_ns, a, false),
            }
        }
    }
}

fn set_capacity(capacity: &mut Vec<(i32, u64)>, device: i32, total: u64) {
    match capacity.iter_mut().find(|(d, _)| *d == device) {
        Some(c) => c.1 = total,
        None => capacity.push((device, total)),
    }
}

impl Story {
    /// The bucket holding `time_ns`.
    pub fn bucket_of(&self, time_ns: u64) -> usize {
        ((time_ns / self.width_ns.max(1)) as usize).min(self.buckets.len().saturating_sub(1))
    }

    /// The bucket holding `time_ns` (which lies from `from` to `to`), or, where that
    /// bucket's moment (`max_ns`) falls outside them, the nearest whose moment does not:
    /// a step that begins halfway through a bucket is shown in that step, not before it.
    /// The bucket of `time_ns` where none does.
    pub fn bucket_within(&self, time_ns: u64, from: u64, to: u64) -> usize {
        let inside = |b: usize| (from..=to).contains(&self.buckets[b].max_ns);
        let home = self.bucket_of(time_ns);
        let (first, last) = (self.bucket_of(from), self.bucket_of(to));
        for d in 0..=last.saturating_sub(first) {
            for b in [home.checked_add(d), home.checked_sub(d)]
                .into_iter()
                .flatten()
            {
                if (first..=last).contains(&b) && inside(b) {
                    return b;
                }
            }
        }
        home
    }

    /// Changes (allocations made live or released) before bucket `i`.
    pub fn changes_before(&self, i: usize) -> u64 {
        self.before.get(i).copied().unwrap_or(0)
    }

    /// The bucket holding the `n`th change (0-based; the last bucket past the end).
    pub fn bucket_of_change(&self, n: u64) -> usize {
        let after = self.before.partition_point(|&b| b <= n);
        after
            .saturating_sub(1)
            .min(self.buckets.len().saturating_sub(1))
    }

    /// The bucket whose primary series was highest (the first, on a tie): the peak.
    pub fn peak_bucket(&self) -> usize {
        let mut best = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            if b.primary_max > self.buckets[best].primary_max {
                best = i;
            }
        }
        best
    }

    /// What was live when bucket `i`'s primary series was highest, largest first.
    pub fn at_bucket(&self, i: usize) -> Vec<StackBytes> {
        let i = i.min(self.buckets.len().saturating_sub(1));
        let c = i / CHECKPOINT;
        let mut state: FastMap<u32, (i64, i64)> = FastMap::default();
        for &(k, b, n) in self.checkpoints.get(c).map_or(&[][..], |v| &v[..]) {
            state.insert(k, (b as i64, n as i64));
        }
        let from = c * CHECKPOINT;
        let deltas = (self.buckets[from..i].iter())
            .flat_map(|b| b.to_max.iter().chain(&b.rest))
            .chain(self.buckets.get(i).map_or(&[][..], |b| &b.to_max[..]));
        for &(k, b, n) in deltas {
            let s = state.entry(k).or_default();
            s.0 += b;
            s.1 += i64::from(n);
        }
        let v: Vec<(u32, u64, u64)> = (state.into_iter())
            .map(|(k, (b, n))| (k, b.max(0) as u64, n.max(0) as u64))
            .collect();
        self.sites(&v)
    }

    /// What was live at the end of the trace.
    pub fn at_end(&self) -> Vec<StackBytes> {
        self.sites(&self.end)
    }

    /// What was live when out-of-memory error `n` (0-based) was returned.
    pub fn at_oom(&self, n: usize) -> Vec<StackBytes> {
        self.ooms
            .get(n)
            .map_or_else(Vec::new, |o| self.sites(&o.state))
    }

    fn sites(&self, state: &[(u32, u64, u64)]) -> Vec<StackBytes> {
        let mut sites: Vec<StackBytes> = (state.iter())
            .filter(|(_, b, _)| *b > 0)
            .map(|&(k, bytes, count)| {
                let key = self.keys[k as usize];
                StackBytes {
                    device: key.device,
                    kind: key.kind,
                    stack: key.stack,
                    bytes,
                    count,
                }
            })
            .collect();
        sites.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then((a.device, a.kind.to_u8(), a.stack).cmp(&(b.device, b.kind.to_u8(), b.stack)))
        });
        sites
    }

    /// The key's whole-trace figures.
    pub fn life(&self, key: &Key) -> Option<&KeyLife> {
        let i = self.keys.iter().position(|k| k == key)?;
        self.lives.get(i)
    }
}
