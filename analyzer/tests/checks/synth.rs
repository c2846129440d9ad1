//! Synthetic traces, shared by the analyzer's integration tests (included with
//! `#[path = "checks/synth.rs"] mod synth;`): a trace file written with the format crate's
//! `TraceWriter` from a test's own header and records, and the records tests build most.
//!
//! The record helpers fill in one plain case: device memory on device 0, thread [`TID`],
//! API 0 to allocate and API 1 to free (`cudaMalloc` and `cudaFree` in the tests' headers),
//! no stream or pool. A test that needs another value changes that field alone with struct
//! update syntax: `Record::Alloc(Alloc { tid: 1, ..synth::alloc_of(t, address, size, stack) })`.

// Each test file uses the part it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, Record, Sample, Stats, TraceWriter,
};
use serde_json::Value;

/// The thread of the records below.
pub const TID: u32 = 7;

/// The bytes of a trace of `header` and one block per item of `blocks`, and where each
/// block ends (to cut a trace inside a block).
pub fn trace_bytes<B: AsRef<[Record]>>(header: &Value, blocks: &[B]) -> (Vec<u8>, Vec<usize>) {
    let mut w = TraceWriter::new(Vec::new(), header, 1).expect("writer");
    let mut ends = Vec::new();
    for block in blocks {
        for r in block.as_ref() {
            w.encoder().record(r);
        }
        w.flush_block().expect("flush");
        ends.push(w.get_ref().len());
    }
    (w.into_inner(), ends)
}

/// Writes [`trace_bytes`] to `path`; returns `path` and where each block ends.
pub fn write_blocks<B: AsRef<[Record]>>(
    path: impl AsRef<Path>,
    header: &Value,
    blocks: &[B],
) -> (PathBuf, Vec<usize>) {
    let path = path.as_ref().to_path_buf();
    let (bytes, ends) = trace_bytes(header, blocks);
    std::fs::write(&path, bytes).expect("write trace");
    (path, ends)
}

/// Writes a trace of `header` and `records` in one block to `path`; returns `path`.
pub fn write_trace(path: impl AsRef<Path>, header: &Value, records: &[Record]) -> PathBuf {
    write_blocks(path, header, &[records]).0
}

/// A `cudaMalloc` of `size` bytes at `address` from stack `stack`, at `t` ns.
pub fn alloc_of(t: u64, address: u64, size: u64, stack: u64) -> Alloc {
    Alloc {
        time_ns: t,
        tid: TID,
        api: 0,
        kind: MemKind::Device,
        device: 0,
        address,
        size,
        stream: 0,
        pool: 0,
        stack,
    }
}

pub fn alloc(t: u64, address: u64, size: u64, stack: u64) -> Record {
    Record::Alloc(alloc_of(t, address, size, stack))
}

/// A successful `cudaFree` of `address`, at `t` ns, with no stack.
pub fn free_of(t: u64, address: u64) -> Free {
    Free {
        time_ns: t,
        tid: TID,
        api: 1,
        address,
        stream: 0,
        stack: 0,
        result: 0,
        flags: 0,
        kind: MemKind::Device,
        size: 0,
    }
}

pub fn free(t: u64, address: u64) -> Record {
    Record::Free(free_of(t, address))
}

/// A `cudaMalloc` of `size` bytes from stack `stack` that failed with
/// `cudaErrorMemoryAllocation` (2) at `t` ns, the device's free and total memory not read.
pub fn failed_of(t: u64, size: u64, stack: u64) -> AllocFailed {
    AllocFailed {
        time_ns: t,
        tid: TID,
        api: 0,
        kind: MemKind::Device,
        device: 0,
        size,
        stream: 0,
        pool: 0,
        stack,
        result: 2,
        mem_free: 0,
        mem_total: 0,
    }
}

/// An NVML sample of `device`: the process's and the whole device's used memory, and its
/// total.
pub fn sample(t: u64, device: i32, process_used: u64, device_used: u64, total: u64) -> Record {
    Record::Sample(Sample {
        time_ns: t,
        device,
        process_used,
        device_used,
        device_total: total,
        query_ns: 0,
    })
}

/// A library loaded at `start` (1 MiB, no bias, no build id) from `path`, at time 0: its
/// file need not exist for frames to be in it.
pub fn module(start: u64, path: &str) -> Record {
    Record::Module(Module {
        time_ns: 0,
        bias: start,
        start,
        end: start + 0x10_0000,
        path: path.to_owned(),
        build_id: Vec::new(),
    })
}

/// Stack `id` of two frames, `0x1000 + id` and `0x2000 + id`.
pub fn stack(id: u64) -> Record {
    Record::Stack {
        id,
        frames: vec![0x1000 + id, 0x2000 + id],
    }
}

/// The end of a trace that completed at `t` ns, its counters zero.
pub fn end(t: u64) -> Record {
    Record::End(Stats {
        time_ns: t,
        ..Stats::default()
    })
}

/// A PyTorch tensor record on device 0, thread 1: `delta` bytes at `address` (negative: a
/// free), with the allocator's `allocated` and `reserved` figures after it.
pub fn tensor(
    t: u64,
    address: u64,
    delta: i64,
    allocated: u64,
    reserved: u64,
    stack: u64,
) -> Record {
    Record::Tensor(gpumemprof_format::Tensor {
        time_ns: t,
        tid: 1,
        framework: gpumemprof_format::FRAMEWORK_PYTORCH,
        device: 0,
        address,
        delta,
        allocated,
        reserved,
        stack,
    })
}
