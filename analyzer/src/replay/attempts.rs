//! One out-of-memory is one out-of-memory. Before PyTorch's caching allocator gives up on a
//! block, it asks CUDA for a new segment, frees its cache and asks again: two failed
//! `cudaMalloc` calls (or `cuMemCreate` under expandable segments), then its own refusal
//! (`c10::reportOutOfMemoryToProfiler`, a failure of kind `tensor`), then the
//! `OutOfMemoryError` the program sees. The failed CUDA calls are the refusal's attempts,
//! part of that one error: they failed on the same thread since its last tensor event.
//!
//! `Attempts` keeps, per thread, the out-of-memory failures of CUDA calls since that
//! thread's last tensor event; a refusal takes them as its own, a tensor handed out drops
//! them (the allocator recovered: they stay failures of their own, made good by a retry).

use gpumemprof_format::{AllocFailed, MemKind, OUT_OF_MEMORY};

use crate::fasthash::FastMap;

/// Whether a failed allocation is an out-of-memory error of the program's on its own, for
/// the views that cannot wait for the thread's next event (`track`'s alerts, `run`'s next
/// command): a framework allocator's refusal, or a failed CUDA call on a device where no
/// framework allocator hands out tensors (`tensor_device` false); there a failed CUDA call
/// is the allocator's attempt, its error only once it refuses the block.
pub fn is_error(f: &AllocFailed, tensor_device: bool) -> bool {
    f.result == OUT_OF_MEMORY && (f.kind == MemKind::Tensor || !tensor_device)
}

/// Out-of-memory failures of CUDA calls, per thread, not yet followed by a tensor event.
#[derive(Debug, Default)]
pub struct Attempts {
    by_thread: FastMap<u32, Vec<u64>>,
    /// Failures held in `by_thread`: when 0, a tensor event costs one comparison.
    open: usize,
}

impl Attempts {
    /// Failure `id` (the caller's numbering) of a CUDA call on thread `tid`.
    pub fn failed(&mut self, tid: u32, id: u64) {
        self.by_thread.entry(tid).or_default().push(id);
        self.open += 1;
    }

    /// A tensor handed out or taken back on `tid`: its pending failures were not a refusal's.
    #[inline]
    pub fn tensor(&mut self, tid: u32) {
        if self.open > 0 {
            if let Some(ids) = self.by_thread.remove(&tid) {
                self.open -= ids.len();
            }
        }
    }

    /// A refusal on `tid`: the failures that were its attempts, oldest first.
    pub fn refused(&mut self, tid: u32) -> Vec<u64> {
        let ids = self.by_thread.remove(&tid).unwrap_or_default();
        self.open -= ids.len();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::Attempts;

    #[test]
    fn a_refusal_takes_its_threads_failures_since_its_last_tensor() {
        let mut a = Attempts::default();
        a.failed(7, 0);
        a.tensor(7); // recovered: failure 0 is its own
        a.failed(7, 1);
        a.failed(8, 2);
        a.failed(7, 3);
        assert_eq!(a.refused(7), vec![1, 3]);
        assert_eq!(a.refused(7), Vec::<u64>::new());
        assert_eq!(a.refused(8), vec![2]);
        assert_eq!(a.open, 0);
    }
}
