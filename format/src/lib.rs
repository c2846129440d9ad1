//! gpumemprof-format: the on-disk trace format shared by the shim (which writes it) and
//! the analyzer (which reads it). Record types, the block encoder/writer, the streaming
//! reader, the preamble and the header's typed views (`header`), and the trace path template (`template`: the shim names traces with it, the
//! launcher predicts the names). No hooks and no CLI live here.
//!
//! ```text
//!  file   := preamble block*
//!  preamble := MAGIC "GPUMEMPF" (8 bytes) | version u32 LE | header_len u32 LE | header JSON
//!  block  := compressed_len u32 LE | one zstd frame (content size + checksum) of records
//!  record := kind u8 | payload_len LEB128 | payload
//! ```
//!
//! * Blocks are independent: each is one zstd frame written with a single `write(2)`, so
//!   a process killed at any moment leaves every earlier block readable. A reader that
//!   hits end-of-file inside a block stops there and reports `truncated()`.
//! * Records carry their length, so a reader skips kinds it does not know, and decoders
//!   ignore payload bytes past the fields they know (fields are only ever appended).
//! * Integers are LEB128 varints; signed ones are zigzag-encoded. Event times
//!   (alloc/free/failed) are zigzag deltas from the previous event time in the same
//!   block (the first is relative to 0), so every block decodes on its own.
//! * Every size read from the file is checked against a fixed bound before anything is
//!   allocated for it (`MAX_*` below): untrusted input can never cause a huge allocation.
//!
//! Payloads (all varints unless noted):
//!  1 Alloc:       dt, tid, api, kind, device(zz), address, size, stream, pool, stack
//!  2 Free:        dt, tid, api, address, stream, stack, result, flags, kind, size
//!  3 AllocFailed: dt, tid, api, kind, device(zz), size, stream, pool, stack, result,
//!                 mem_free, mem_total
//!  4 Stack:       id, n, frame0, then n-1 zigzag deltas from the previous frame
//!  5 Module:      time, bias, start, end, path_len, path bytes, build_id_len, build_id bytes
//!  6 Stats:       time, events, queue_waits, dropped
//!  7 End:         time, events, queue_waits, dropped
//!  8 Sample:      time, device(zz), process_used, device_used, device_total, query_ns
//!  9 PyCode:      id, first_line, filename_len, filename bytes, name_len, name bytes
//! 10 Nvtx:        dt*, tid, op, domain, name, range
//! 11 NvtxString:  id, len, UTF-8 bytes
//! 12 PackedAlloc: mask, dt, [tid], [api], [kind], [device(zz)], [stream], [pool],
//!                 address delta(zz), size, stack
//! 14 Ending:      time, how (1 exit, 2 signal), code (exit status zz, or signal number)
//! 13 PackedFree:  mask, dt, [tid], [api], [stream], address delta(zz), stack, [result],
//!                 [flags], [kind], [size]
//! 16 Stopped:     time, reason (1 file size limit, 2 no space, 3 other write error), errno
//!
//! Version 2 writes every alloc and free as a packed record (kinds 12 and 13, specified in
//! `packed`): a bracketed field is there only when it differs from the block's running
//! value, which the mask byte says. Readers still decode kinds 1 and 2 (all of version 1's
//! events). The version changed because a version-1 reader would skip the new kinds by
//! their length and silently lose every event; it refuses the file instead.
//!
//! `dt*` of an Nvtx record is a zigzag delta from the block's running event time that
//! does not advance it: a reader that skips kind 10 still decodes every later delta.
//!
//! A stack frame word with the top bit set is a Python frame (`python_frame`): code id
//! in bits 24..63, line in bits 0..24.

mod error;
pub mod header;
pub mod packed;
mod reader;
pub mod record;
pub mod template;
mod varint;
mod writer;

pub use reader::{open_path, Damage, ReadError, TraceReader};
pub use record::*;
pub use writer::{compress_block, write_preamble, BlockEncoder, TraceWriter};

/// First bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"GPUMEMPF";
/// Format version written by this crate; readers refuse anything newer.
pub const FORMAT_VERSION: u32 = 2;

/// Record kind tags.
pub mod kind {
    pub const ALLOC: u8 = 1;
    pub const FREE: u8 = 2;
    pub const ALLOC_FAILED: u8 = 3;
    pub const STACK: u8 = 4;
    pub const MODULE: u8 = 5;
    pub const STATS: u8 = 6;
    pub const END: u8 = 7;
    pub const SAMPLE: u8 = 8;
    pub const PY_CODE: u8 = 9;
    pub const NVTX: u8 = 10;
    pub const NVTX_STRING: u8 = 11;
    pub const PACKED_ALLOC: u8 = 12;
    pub const PACKED_FREE: u8 = 13;
    pub const ENDING: u8 = 14;
    pub const TENSOR: u8 = 15;
    pub const STOPPED: u8 = 16;
}

/// The JSON header may not exceed this (real headers are a few KiB; argv is capped by the shim).
pub const MAX_HEADER_LEN: usize = 1 << 20;
/// A block's compressed size may not exceed this.
pub const MAX_BLOCK_COMPRESSED: usize = 16 << 20;
/// A block's decompressed size may not exceed this (writers flush at `BLOCK_FLUSH_BYTES`).
pub const MAX_BLOCK_RAW: usize = 16 << 20;
/// Writers flush a block once its raw size passes this.
pub const BLOCK_FLUSH_BYTES: usize = 256 << 10;
/// A stack may not have more frames than this.
pub const MAX_STACK_FRAMES: usize = 1024;
