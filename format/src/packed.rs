//! The packed event records of format version 2 (kinds 12 and 13): an alloc or a free
//! that writes only the fields that differ from the block's running values.
//!
//! In a training loop nearly every event repeats the previous event's thread, API,
//! memory kind, device, stream and pool, and a free's address is near the last event's.
//! Version 1 wrote every field of every event (22 raw bytes per event on the benchmark's
//! training loop); the packed records write a mask byte saying which fields follow, and
//! the address as a delta (13 bytes). Fewer raw bytes cost less to compress in the
//! profiled process and less to decompress and decode in the analyzer (BENCHMARKS.md,
//! "fourth session").
//!
//! The running values start at zero in every block, so a block still decodes on its own.
//! Both the encoder and the reader keep one `Running` per block and update it the same
//! way: a field present in a record becomes the running value; the address is updated
//! by every packed alloc and free.
//!
//! ```text
//! 12 packed alloc: mask, dt, [tid], [api], [kind], [device(zz)], [stream], [pool],
//!                  address delta(zz), size, stack
//! 13 packed free:  mask, dt, [tid], [api], [stream], address delta(zz), stack,
//!                  [result], [flags], [kind], [size]
//! ```
//!
//! A bracketed field is present when its mask bit is set; otherwise it is the running
//! value (alloc's api and free's api run separately; a free's result, flags, kind and
//! size are 0 when absent). Mask bits not named here are reserved: writers leave them
//! clear, readers ignore them. Fields may be appended after the last one, as in every
//! record.

/// Packed alloc mask bits.
pub mod alloc_bit {
    pub const TID: u8 = 1;
    pub const API: u8 = 2;
    pub const KIND: u8 = 4;
    pub const DEVICE: u8 = 8;
    pub const STREAM: u8 = 16;
    pub const POOL: u8 = 32;
}

/// Packed free mask bits.
pub mod free_bit {
    pub const TID: u8 = 1;
    pub const API: u8 = 2;
    pub const STREAM: u8 = 4;
    pub const RESULT: u8 = 8;
    pub const FLAGS: u8 = 16;
    pub const KIND: u8 = 32;
    pub const SIZE: u8 = 64;
}

/// A block's running values, as the last packed record left them (all zero at the start
/// of a block).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Running {
    pub tid: u32,
    pub alloc_api: u16,
    pub free_api: u16,
    pub kind: u8,
    pub device: i32,
    pub stream: u64,
    pub pool: u64,
    pub address: u64,
}
