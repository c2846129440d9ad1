//! How many out-of-memory errors the exit line names. PyTorch's caching allocator fails
//! twice in CUDA (a new segment, then again after freeing its cache) before it refuses the
//! block (`c10::reportOutOfMemoryToProfiler`, a failure of kind `tensor`): the program saw
//! one error, not three. So a refusal takes the out-of-memory failures of CUDA calls its
//! thread made since its last tensor event as its own attempts; a tensor handed out instead
//! leaves them counted (the allocator recovered, and `gpumemprof oom` explains them). The
//! analyzer counts the same way (`replay/attempts.rs`).

use gpumemprof_format::{AllocFailed, MemKind, OUT_OF_MEMORY};

#[derive(Debug, Default)]
pub(super) struct OomCount {
    /// Errors so far.
    pub(super) errors: u64,
    /// Per thread, out-of-memory failures of CUDA calls since its last tensor event (a
    /// handful of threads at most: only those that just failed).
    pending: Vec<(u32, u64)>,
}

impl OomCount {
    pub(super) fn failed(&mut self, f: &AllocFailed) {
        if f.result != OUT_OF_MEMORY {
            return;
        }
        if f.kind == MemKind::Tensor {
            let attempts = self.take(f.tid);
            self.errors = self.errors.saturating_sub(attempts) + 1;
            return;
        }
        self.errors += 1;
        match self.pending.iter_mut().find(|(tid, _)| *tid == f.tid) {
            Some((_, n)) => *n += 1,
            None => self.pending.push((f.tid, 1)),
        }
    }

    #[inline]
    /// A tensor event of thread `tid`.
    pub(super) fn tensor(&mut self, tid: u32) {
        if !self.pending.is_empty() {
            self.take(tid);
        }
    }

    fn take(&mut self, tid: u32) -> u64 {
        match self.pending.iter().position(|(t, _)| *t == tid) {
            Some(i) => self.pending.swap_remove(i).1,
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(tid: u32, kind: MemKind) -> AllocFailed {
        AllocFailed {
            time_ns: 0,
            tid,
            api: 1,
            kind,
            device: 0,
            size: 1 << 20,
            stream: 0,
            pool: 0,
            stack: 0,
            result: OUT_OF_MEMORY,
            mem_free: 0,
            mem_total: 0,
        }
    }

    #[test]
    fn a_refusal_and_its_failed_cuda_calls_are_one_error() {
        let mut c = OomCount::default();
        // PyTorch on thread 1: two failed cudaMalloc calls, then its refusal.
        c.failed(&failed(1, MemKind::Device));
        c.failed(&failed(1, MemKind::Device));
        c.failed(&failed(1, MemKind::Tensor));
        assert_eq!(c.errors, 1);
        // A C thread's failure stays one; a recovered retry on thread 1 stays counted.
        c.failed(&failed(2, MemKind::Device));
        c.failed(&failed(1, MemKind::Device));
        c.tensor(1);
        assert_eq!(c.errors, 3);
        // A refusal without CUDA failures before it (expandable segments, a set fraction).
        c.failed(&failed(1, MemKind::Tensor));
        assert_eq!(c.errors, 4);
    }
}
