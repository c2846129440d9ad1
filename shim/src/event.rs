//! The event a hooked call hands to the writer thread: fixed size (80 bytes), no
//! pointers, its stack already interned to an id (see `intern.rs`).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    Alloc,
    Free,
    AllocFailed,
    /// An NVTX range or mark (`nvtx.rs`): `mem` holds the `NvtxOp`, `address` the domain's
    /// name id, `size` the message's name id, `aux` the start/end range id.
    Nvtx,
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: EventKind,
    /// `MemKind::to_u8()` of the memory (alloc and failed alloc).
    pub mem: u8,
    /// Free flags (`gpumemprof_format::FREE_*`).
    pub flags: u8,
    pub api: u16,
    pub device: i32,
    pub tid: u32,
    pub result: u32,
    /// A `clock::now()` stamp (TSC ticks or monotonic ns); the writer converts it.
    pub time_ns: u64,
    /// For `AllocFailed`: the device's free bytes at the failure (0 if unknown).
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    /// Interned stack id; 0 = no stack.
    pub stack: u64,
    /// Kind-specific: for `AllocFailed`, the device's total bytes (0 if unknown); for a
    /// range free, the range's bytes are in `size`.
    pub aux: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_event_is_80_bytes() {
        // Seven u64 fields plus 17 bytes of small ones, padded: keep it that small.
        assert_eq!(std::mem::size_of::<super::Event>(), 80);
    }
}
