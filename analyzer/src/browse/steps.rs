//! A trace's training steps, as its NVTX ranges mark them, for `browse`: which step a moment
//! is in (`step 3/10`), and the same point of the same step in a second trace, so that two
//! runs of different speeds are compared step for step (`a`: by step).
//!
//! The steps are the outermost ranges pushed (`nvtxRangePush*`/`nvtxRangePop`: PyTorch's
//! `torch.cuda.nvtx.range_push`, `nvtx.annotate`) on the thread that pushed the trace's
//! first range, whatever their names and domains: a loop that marks each step, with its
//! phases nested inside, has one per step. Start/end ranges are not steps.
//!
//! ```text
//!  A:  ──[ step 1 ]──[   step 2   ]───(after step 2)───
//!                        ▲ 40% through step 2
//!  B:  ─────[  step 1  ]─────[      step 2      ]──────
//!                                  ▲ 40% through B's step 2
//! ```

use gpumemprof_format::{Nvtx, NvtxOp};

/// Steps kept at most (16 bytes each). A trace with more outermost ranges than this marks
/// something else with them (each op, as `torch.autograd.profiler.emit_nvtx` does): it has
/// no steps.
pub const MAX_STEPS: usize = 1 << 20;

/// One step: its range's push and pop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Finds the steps in the trace's NVTX records, in order.
#[derive(Debug, Default)]
pub struct StepFinder {
    steps: Vec<Step>,
    /// The thread of the first push, and how deep its pushed ranges are open now.
    thread: Option<u32>,
    depth: u32,
    /// More than `MAX_STEPS`: none are steps.
    too_many: bool,
}

impl StepFinder {
    pub fn record(&mut self, n: &Nvtx) {
        if !matches!(n.op, NvtxOp::Push | NvtxOp::Pop) {
            return;
        }
        let thread = *self.thread.get_or_insert(n.tid);
        if n.tid != thread {
            return;
        }
        match n.op {
            NvtxOp::Push => {
                if self.depth == 0 && !self.too_many {
                    if self.steps.len() == MAX_STEPS {
                        self.too_many = true;
                        self.steps = Vec::new();
                    } else {
                        self.steps.push(Step {
                            start_ns: n.time_ns,
                            end_ns: n.time_ns,
                        });
                    }
                }
                self.depth = self.depth.saturating_add(1);
            }
            _ if self.depth > 0 => {
                self.depth -= 1;
                if let (0, Some(last)) = (self.depth, self.steps.last_mut()) {
                    last.end_ns = n.time_ns.max(last.start_ns);
                }
            }
            // A pop with nothing open closes nothing.
            _ => {}
        }
    }

    /// The steps; one still open at the end of the trace (`end_ns`) ends there.
    pub fn finish(mut self, end_ns: u64) -> Vec<Step> {
        if let (true, Some(last)) = (self.depth > 0, self.steps.last_mut()) {
            last.end_ns = end_ns.max(last.start_ns);
        }
        self.steps
    }
}

/// Where a time lies among the steps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// This long before the first step started.
    Before(u64),
    /// In step `k` (0-based), this far through it (0 to 1).
    In(usize, f64),
    /// After step `k` ended: this far through the gap to the next step (0 to 1), or, after
    /// the last, this long after it.
    After(usize, f64),
    Past(u64),
}

fn place(steps: &[Step], t: u64) -> Option<Place> {
    let first = steps.first()?;
    if t < first.start_ns {
        return Some(Place::Before(first.start_ns - t));
    }
    let k = steps.partition_point(|s| s.start_ns <= t) - 1;
    let s = steps[k];
    if t <= s.end_ns {
        return Some(Place::In(
            k,
            fraction(t - s.start_ns, s.end_ns - s.start_ns),
        ));
    }
    Some(match steps.get(k + 1) {
        Some(next) => Place::After(k, fraction(t - s.end_ns, next.start_ns - s.end_ns)),
        None => Place::Past(t - s.end_ns),
    })
}

fn fraction(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn at(start: u64, length: u64, f: f64) -> u64 {
    start + (length as f64 * f).round() as u64
}

/// The time in `theirs` at the same point of the same step as `t` in `ours`; `None` when
/// either has no steps, or `theirs` has not that step (or, after it, not the next).
pub fn align(ours: &[Step], theirs: &[Step], t: u64) -> Option<u64> {
    Some(match place(ours, t)? {
        Place::Before(d) => theirs.first()?.start_ns.saturating_sub(d),
        Place::In(k, f) => {
            let s = theirs.get(k)?;
            at(s.start_ns, s.end_ns - s.start_ns, f)
        }
        Place::After(k, f) => {
            let (s, next) = (theirs.get(k)?, theirs.get(k + 1)?);
            at(s.end_ns, next.start_ns - s.end_ns, f)
        }
        Place::Past(d) if theirs.len() == ours.len() => theirs.last()?.end_ns + d,
        Place::Past(_) => return None,
    })
}

/// The stretch holding `t` that `words` names: its step, the gap between two steps, the
/// time before the first or after the last (both ends inclusive); `None` without steps.
pub fn stretch(steps: &[Step], t: u64) -> Option<(u64, u64)> {
    Some(match place(steps, t)? {
        Place::Before(_) => (0, steps[0].start_ns.saturating_sub(1)),
        Place::In(k, _) => (steps[k].start_ns, steps[k].end_ns),
        Place::After(k, _) => (steps[k].end_ns + 1, steps[k + 1].start_ns.saturating_sub(1)),
        Place::Past(_) => (steps[steps.len() - 1].end_ns + 1, u64::MAX),
    })
}

/// `step 3/10`, `after step 3/10`, `before step 1/10`; empty without steps.
pub fn words(steps: &[Step], t: u64) -> String {
    let n = steps.len();
    match place(steps, t) {
        None => String::new(),
        Some(Place::Before(_)) => format!("before step 1/{n}"),
        Some(Place::In(k, _)) => format!("step {}/{n}", k + 1),
        Some(Place::After(k, _)) => format!("after step {}/{n}", k + 1),
        Some(Place::Past(_)) => format!("after step {n}/{n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvtx(time_ns: u64, tid: u32, op: NvtxOp) -> Nvtx {
        Nvtx {
            time_ns,
            tid,
            op,
            domain: 0,
            name: 0,
            range: 0,
        }
    }

    fn steps(list: &[(u64, u64)]) -> Vec<Step> {
        (list.iter())
            .map(|&(start_ns, end_ns)| Step { start_ns, end_ns })
            .collect()
    }

    #[test]
    fn the_outermost_pushes_of_the_first_thread_are_the_steps() {
        let mut f = StepFinder::default();
        for n in [
            // Thread 7 pushes first: its outermost ranges are the steps.
            nvtx(100, 7, NvtxOp::Push),
            nvtx(150, 7, NvtxOp::Push), // a phase inside the step
            nvtx(160, 8, NvtxOp::Push), // another thread's range: not a step
            nvtx(170, 7, NvtxOp::Mark),
            nvtx(180, 7, NvtxOp::Start),
            nvtx(200, 7, NvtxOp::Pop),
            nvtx(300, 7, NvtxOp::Pop),  // step 1 ends
            nvtx(310, 7, NvtxOp::Pop),  // closes nothing
            nvtx(400, 7, NvtxOp::Push), // step 2, open at the end
        ] {
            f.record(&n);
        }
        assert_eq!(f.finish(900), steps(&[(100, 300), (400, 900)]));
        assert_eq!(StepFinder::default().finish(900), Vec::new());
    }

    #[test]
    fn more_outermost_ranges_than_steps_can_be_are_no_steps() {
        let mut f = StepFinder::default();
        for i in 0..MAX_STEPS as u64 {
            f.record(&nvtx(2 * i, 1, NvtxOp::Push));
            f.record(&nvtx(2 * i + 1, 1, NvtxOp::Pop));
        }
        assert_eq!(f.steps.len(), MAX_STEPS);
        f.record(&nvtx(1 << 40, 1, NvtxOp::Push));
        f.record(&nvtx(1 << 41, 1, NvtxOp::Pop));
        assert_eq!(f.finish(1 << 42), Vec::new());
    }

    #[test]
    fn a_moment_maps_to_the_same_point_of_the_same_step() {
        // A: steps of 100 ns, 100 ns apart; B: twice as slow, starting later.
        let a = steps(&[(100, 200), (300, 400)]);
        let b = steps(&[(1000, 1200), (1400, 1600)]);
        assert_eq!(align(&a, &b, 40), Some(940)); // 60 ns before step 1
        assert_eq!(align(&a, &b, 100), Some(1000));
        assert_eq!(align(&a, &b, 150), Some(1100)); // half through step 1
        assert_eq!(align(&a, &b, 225), Some(1250)); // a quarter through the gap
        assert_eq!(align(&a, &b, 340), Some(1480)); // 40% through step 2
        assert_eq!(align(&a, &b, 450), Some(1650)); // 50 ns after the last
        assert_eq!(align(&a, &b, 5), Some(905));
        // B has not A's step: no place to follow.
        let short = steps(&[(1000, 1200)]);
        assert_eq!(align(&a, &short, 340), None);
        assert_eq!(align(&a, &short, 225), None);
        assert_eq!(align(&a, &short, 450), None);
        assert_eq!(align(&a, &[], 150), None);
        assert_eq!(align(&[], &b, 150), None);
        // A zero-length step: its start.
        assert_eq!(align(&steps(&[(10, 10)]), &b, 10), Some(1000));
    }

    #[test]
    fn a_stretch_is_the_step_or_the_gap_words_name() {
        let a = steps(&[(100, 200), (300, 400)]);
        assert_eq!(stretch(&a, 50), Some((0, 99)));
        assert_eq!(stretch(&a, 100), Some((100, 200)));
        assert_eq!(stretch(&a, 200), Some((100, 200)));
        assert_eq!(stretch(&a, 250), Some((201, 299)));
        assert_eq!(stretch(&a, 300), Some((300, 400)));
        assert_eq!(stretch(&a, 401), Some((401, u64::MAX)));
        assert_eq!(stretch(&[], 401), None);
    }

    #[test]
    fn words_say_which_step() {
        let a = steps(&[(100, 200), (300, 400)]);
        assert_eq!(words(&a, 50), "before step 1/2");
        assert_eq!(words(&a, 100), "step 1/2");
        assert_eq!(words(&a, 200), "step 1/2");
        assert_eq!(words(&a, 250), "after step 1/2");
        assert_eq!(words(&a, 300), "step 2/2");
        assert_eq!(words(&a, 401), "after step 2/2");
        assert_eq!(words(&[], 401), "");
    }
}
