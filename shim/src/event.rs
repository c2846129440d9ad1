//! The event a hooked call hands to the writer thread. It carries its stack inline
//! (return addresses, innermost first) so the hot path needs no allocation and no
//! shared table; the writer interns stacks.

use crate::config::MAX_STACK_DEPTH;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EventKind {
    Alloc,
    Free,
    AllocFailed,
}

#[derive(Clone, Copy)]
pub struct Event {
    pub kind: EventKind,
    /// `MemKind::to_u8()` of the memory (alloc and failed alloc).
    pub mem: u8,
    /// Free flags (`gpumemprof_format::FREE_*`).
    pub flags: u8,
    pub api: u16,
    pub depth: u16,
    pub device: i32,
    pub tid: u32,
    pub result: u32,
    pub time_ns: u64,
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    pub frames: [u64; MAX_STACK_DEPTH],
}

impl Event {
    #[inline]
    pub fn new(kind: EventKind, api: u16, time_ns: u64) -> Event {
        Event {
            kind,
            mem: 0,
            flags: 0,
            api,
            depth: 0,
            device: -1,
            tid: 0,
            result: 0,
            time_ns,
            address: 0,
            size: 0,
            stream: 0,
            pool: 0,
            frames: [0; MAX_STACK_DEPTH],
        }
    }

    pub fn stack(&self) -> &[u64] {
        &self.frames[..self.depth as usize]
    }
}
