//! An event as it waits in the writer's reorder buffer (already interned, without
//! frames) and in the flight recorder's ring: the format's record types, one 64-byte line.

use gpumemprof_format::{Alloc, AllocFailed, Free, Nvtx, Sample, Tensor};

/// Events as they wait in the reorder buffer: already interned, without frames.
#[derive(Clone, Debug)]
pub(crate) enum Pending {
    Alloc(Alloc),
    Free(Free),
    /// Boxed: failures are rare, and without their 72 bytes every event moved through the
    /// reorder buffer (and sorted there) is one 64-byte line.
    Failed(Box<AllocFailed>),
    Sample(Sample),
    Nvtx(Nvtx),
    Tensor(PendingTensor),
}

/// A tensor event as it waits: the format's `Tensor` without its padding and with the
/// shim's 32-bit stack id, 56 bytes, so that it needs no box (a box per tensor event was
/// an allocation and a free in the writer for every tensor a training step made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingTensor {
    pub time_ns: u64,
    pub address: u64,
    /// Bytes: positive for an allocation, negative for a free.
    pub delta: i64,
    pub allocated: u64,
    pub reserved: u64,
    pub tid: u32,
    pub stack: u32,
    pub device: i32,
    pub framework: u8,
}

impl PendingTensor {
    /// The record it is written as.
    pub fn tensor(&self) -> Tensor {
        Tensor {
            time_ns: self.time_ns,
            tid: self.tid,
            framework: self.framework,
            device: self.device,
            address: self.address,
            delta: self.delta,
            allocated: self.allocated,
            reserved: self.reserved,
            stack: u64::from(self.stack),
        }
    }
}

impl Pending {
    /// The same event with its time replaced (a stamp converted to trace ns).
    pub fn retimed(self, t: u64) -> Pending {
        match self {
            Pending::Alloc(mut a) => {
                a.time_ns = t;
                Pending::Alloc(a)
            }
            Pending::Free(mut f) => {
                f.time_ns = t;
                Pending::Free(f)
            }
            Pending::Failed(mut f) => {
                f.time_ns = t;
                Pending::Failed(f)
            }
            Pending::Sample(mut m) => {
                m.time_ns = t;
                Pending::Sample(m)
            }
            Pending::Nvtx(mut n) => {
                n.time_ns = t;
                Pending::Nvtx(n)
            }
            Pending::Tensor(mut x) => {
                x.time_ns = t;
                Pending::Tensor(x)
            }
        }
    }

    pub fn time(&self) -> u64 {
        match self {
            Pending::Alloc(a) => a.time_ns,
            Pending::Free(f) => f.time_ns,
            Pending::Failed(f) => f.time_ns,
            Pending::Sample(s) => s.time_ns,
            Pending::Nvtx(n) => n.time_ns,
            Pending::Tensor(x) => x.time_ns,
        }
    }
}

/// Events for the writer's tests (the flight recorder's, `live_high`'s).
#[cfg(test)]
pub(crate) mod made {
    use super::Pending;
    use gpumemprof_format::{Alloc, Free, MemKind};

    /// A device allocation at `t` (thread 1, device 0, no stack).
    pub fn alloc(t: u64, address: u64, size: u64) -> Pending {
        alloc_of(MemKind::Device, t, address, size)
    }

    /// An allocation of `kind` memory, as `alloc`.
    pub fn alloc_of(kind: MemKind, t: u64, address: u64, size: u64) -> Pending {
        Pending::Alloc(Alloc {
            time_ns: t,
            tid: 1,
            api: 1,
            kind,
            device: 0,
            address,
            size,
            stream: 0,
            pool: 0,
            stack: 0,
        })
    }

    /// A free of device memory at `t` that succeeded (`flags`: `FREE_RANGE` with `size`).
    pub fn free(t: u64, address: u64, flags: u8, size: u64) -> Pending {
        free_with(0, t, address, flags, size)
    }

    /// A free that failed with `result`.
    pub fn failed_free(result: u32, t: u64, address: u64) -> Pending {
        free_with(result, t, address, 0, 0)
    }

    fn free_with(result: u32, t: u64, address: u64, flags: u8, size: u64) -> Pending {
        Pending::Free(Free {
            time_ns: t,
            tid: 1,
            api: 2,
            address,
            stream: 0,
            stack: 0,
            result,
            flags,
            kind: MemKind::Device,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the reorder buffer moves and sorts per event, and the flight recorder keeps.
    #[test]
    fn a_pending_event_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Pending>(), 64);
        assert_eq!(std::mem::size_of::<AllocFailed>(), 72);
    }
}
