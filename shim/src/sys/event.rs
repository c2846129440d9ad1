//! The event a hooked call hands to the writer thread: one cache line (64 bytes), no
//! pointers, its stack already interned to an id (see `capture/intern.rs`). The thread id is
//! not in it: each thread's ring knows its thread (`ring.rs`).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    Alloc,
    Free,
    AllocFailed,
    /// An NVTX range or mark (`hooks/nvtx.rs`): `mem` holds the `NvtxOp`, `address` the domain's
    /// name id, `size` the message's name id, `aux` the start/end range id.
    Nvtx,
    /// A framework allocator's tensor (`hooks/framework.rs`, `hooks/tensorflow.rs`):
    /// `result` holds the framework (`gpumemprof_format::FRAMEWORK_*`), `size` the bytes,
    /// `aux` `TENSOR_FREE` for a free, `stream` and `pool` the allocator's allocated and
    /// reserved bytes after the change.
    Tensor,
}

/// `Event::aux` of a tensor that was freed.
pub const TENSOR_FREE: u64 = 1;

/// 64 bytes, aligned to 8 only: a ring's slot is a cache line (`ring::Slot`), but an event
/// built on a hook's stack must not make the hook's frame realign the stack pointer to 64
/// bytes. A realigned frame puts the captures of call paths that differ in depth by less
/// than 64 bytes at one stack pointer, where the unwinder's caches keyed by it (the
/// first-state cache, the walks' inputs) tell them apart only by the saved rbp: on
/// `varied_sites` half the captures hashed two shapes' words (BENCHMARKS.md,
/// twenty-fifth).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Event {
    /// A `clock::now()` stamp (TSC ticks or monotonic ns); the writer converts it.
    pub time_ns: u64,
    /// For `AllocFailed`: the device's free bytes at the failure (0 if unknown).
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    /// Kind-specific: for `AllocFailed`, the device's total bytes (0 if unknown); for
    /// `Free`, the free flags (`gpumemprof_format::FREE_*`; a range free has its bytes in
    /// `size`); for `Nvtx`, the range id.
    pub aux: u64,
    /// Interned stack id; 0 = no stack.
    pub stack: u32,
    pub device: i32,
    pub result: u32,
    pub api: u16,
    pub kind: EventKind,
    /// `MemKind::to_u8()` of the memory (alloc, failed alloc and free).
    pub mem: u8,
}

/// The result of an allocation that ran out of memory, in every API the hooks know.
pub use gpumemprof_format::OUT_OF_MEMORY;

impl Event {
    /// An event of `kind` with every other field zero (device -1: unknown).
    #[inline(always)]
    pub const fn new(kind: EventKind) -> Event {
        Event {
            time_ns: 0,
            address: 0,
            size: 0,
            stream: 0,
            pool: 0,
            aux: 0,
            stack: 0,
            device: -1,
            result: 0,
            api: 0,
            kind,
            mem: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_event_is_one_cache_line_aligned_to_a_word() {
        // Six u64 fields plus 16 bytes of small ones: one 64-byte line; aligned to 8, so
        // that a hook's frame holding one is not realigned (the ring's slot aligns it).
        assert_eq!(std::mem::size_of::<super::Event>(), 64);
        assert_eq!(std::mem::align_of::<super::Event>(), 8);
    }
}
