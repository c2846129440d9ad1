//! What became of the tensors live at a peak: the facts that tell a tensor's kind of memory
//! (`kinds`) apart, gathered during the one pass. A tensor's kind depends on its whole
//! life (a block made by the backward pass is a gradient if it outlives the pass, a
//! temporary if the pass freed it), so the tensors live at each device's tensor peak are
//! copied, and their frees, when they come, are written beside them.
//!
//! Which threads run the backward pass is only known once stacks are symbolized, after the
//! pass; so the pass numbers **runs**, stretches of consecutive tensor events by one
//! thread, and keeps each run's thread: whether a backward ran during a tensor's life is
//! then "did a run of an autograd thread fall between its allocation and its free".
//! A training step has a handful of runs, so this list is short; it stops growing at
//! `MAX_RUNS` (later lifetimes then span an unknown stretch, and `kinds` says "other").

use crate::fasthash::FastMap;
use gpumemprof_format::Tensor;

/// Runs kept at most (16 MiB).
pub const MAX_RUNS: usize = 1 << 22;
/// Threads whose first stacks are kept, and stacks kept per thread.
const MAX_THREADS: usize = 1024;
const STACKS_PER_THREAD: usize = 4;

/// One tensor's life, as far as the trace has told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    pub address: u64,
    /// When it was made (ns since the trace started).
    pub time_ns: u64,
    pub size: u64,
    pub device: i32,
    pub stack: u64,
    pub tid: u32,
    /// The run its allocation was in.
    pub run: u32,
    /// Its free, if the trace has one.
    pub freed: Option<Freed>,
}

/// The free that ended a lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed {
    pub stack: u64,
    pub tid: u32,
    pub run: u32,
}

/// What the pass hands to `kinds`.
#[derive(Debug, Clone, Default)]
pub struct FatesResult {
    /// The thread of each run, in order (at most `MAX_RUNS`).
    pub runs: Vec<u32>,
    /// Runs made in all, kept or not.
    pub runs_made: u64,
    /// Each thread's first few distinct tensor stacks (allocations and frees): enough to
    /// tell an autograd thread.
    pub thread_stacks: Vec<(u32, Vec<u64>)>,
    /// Per device, the tensors live at its tensor peak, with their frees.
    pub at_peak: Vec<(i32, Vec<Lifetime>)>,
    /// Tensors live at the end of the trace.
    pub at_end: Vec<Lifetime>,
    /// Tensors freed after the last tensor was made, in order (the interpreter's teardown
    /// is among them: `leaks` counts what it freed as leaked).
    pub freed_at_exit: Vec<Lifetime>,
}

/// Numbers the runs of a stream of tensor events: a new run whenever the thread changes.
/// Both passes that need runs (`Fates`, `kinds::timeline`) count them with this, so their
/// run indices agree.
#[derive(Debug, Default, Clone, Copy)]
pub struct Runs {
    last_tid: Option<u32>,
    /// Runs begun so far.
    pub made: u64,
}

impl Runs {
    /// The run a tensor event of `tid` belongs to, and whether it begins it. Past
    /// `MAX_RUNS` every run reads as `MAX_RUNS`: unknown to `kinds`.
    pub fn next(&mut self, tid: u32) -> (u32, bool) {
        let new_run = self.last_tid != Some(tid);
        if new_run {
            self.last_tid = Some(tid);
            self.made += 1;
        }
        ((self.made - 1).min(MAX_RUNS as u64) as u32, new_run)
    }
}

/// A device's tensors at its latest peak, and where each stands (by address) while its
/// free is awaited.
#[derive(Debug, Default)]
struct PeakCopy {
    lives: Vec<Lifetime>,
    awaiting: FastMap<u64, usize>,
}

/// The pass's state.
#[derive(Debug, Default)]
pub(super) struct Fates {
    live: FastMap<u64, Lifetime>,
    runs: Vec<u32>,
    counter: Runs,
    thread_stacks: Vec<(u32, Vec<u64>)>,
    /// Tensors freed since the last one was made.
    tail: Vec<Lifetime>,
    /// `thread_stacks`' entry of the current run's thread.
    current: Option<usize>,
    peaks: Vec<(i32, PeakCopy)>,
}

impl Fates {
    /// The run a tensor event of `tid` belongs to, and whether it is new (kept in `runs`
    /// up to `MAX_RUNS`).
    fn run_of(&mut self, tid: u32) -> (u32, bool) {
        let (run, new_run) = self.counter.next(tid);
        if new_run && self.runs.len() < MAX_RUNS {
            self.runs.push(tid);
        }
        (run, new_run)
    }

    /// Keeps `stack` among `tid`'s first ones. The thread's entry is looked up once per
    /// run (`current`), not per event.
    fn saw_stack(&mut self, tid: u32, stack: u64, new_run: bool) {
        if new_run {
            self.current = match self.thread_stacks.iter().position(|(t, _)| *t == tid) {
                Some(i) => Some(i),
                None if self.thread_stacks.len() < MAX_THREADS => {
                    self.thread_stacks.push((tid, Vec::new()));
                    Some(self.thread_stacks.len() - 1)
                }
                None => None,
            };
        }
        let Some(i) = self.current.filter(|_| stack != 0) else {
            return;
        };
        let stacks = &mut self.thread_stacks[i].1;
        if stacks.len() < STACKS_PER_THREAD && !stacks.contains(&stack) {
            stacks.push(stack);
        }
    }

    /// A tensor record, before the replay applies it.
    pub(super) fn tensor(&mut self, t: &Tensor) {
        let (run, new_run) = self.run_of(t.tid);
        self.saw_stack(t.tid, t.stack, new_run);
        if t.delta >= 0 {
            self.tail.clear();
            self.live.insert(
                t.address,
                Lifetime {
                    address: t.address,
                    time_ns: t.time_ns,
                    size: t.delta.unsigned_abs(),
                    device: t.device,
                    stack: t.stack,
                    tid: t.tid,
                    run,
                    freed: None,
                },
            );
            return;
        }
        let Some(gone) = self.live.remove(&t.address) else {
            return;
        };
        self.tail.push(Lifetime {
            freed: Some(Freed {
                stack: t.stack,
                tid: t.tid,
                run,
            }),
            ..gone
        });
        let Some((_, copy)) = self.peaks.iter_mut().find(|(d, _)| *d == gone.device) else {
            return;
        };
        if let Some(i) = copy.awaiting.remove(&t.address) {
            copy.lives[i].freed = Some(Freed {
                stack: t.stack,
                tid: t.tid,
                run,
            });
        }
    }

    /// `device`'s tensors reached a new peak and are about to fall: copy what is live.
    pub(super) fn peak(&mut self, device: i32) {
        let index = match self.peaks.iter().position(|(d, _)| *d == device) {
            Some(i) => i,
            None => {
                self.peaks.push((device, PeakCopy::default()));
                self.peaks.len() - 1
            }
        };
        let copy = &mut self.peaks[index].1;
        copy.lives.clear();
        copy.awaiting.clear();
        for (&address, life) in self.live.iter().filter(|(_, l)| l.device == device) {
            copy.awaiting.insert(address, copy.lives.len());
            copy.lives.push(*life);
        }
    }

    pub(super) fn finish(self) -> FatesResult {
        let mut at_peak: Vec<(i32, Vec<Lifetime>)> =
            self.peaks.into_iter().map(|(d, c)| (d, c.lives)).collect();
        at_peak.sort_by_key(|(d, _)| *d);
        FatesResult {
            runs: self.runs,
            runs_made: self.counter.made,
            thread_stacks: self.thread_stacks,
            at_peak,
            at_end: self.live.into_values().collect(),
            freed_at_exit: self.tail,
        }
    }
}
