//! The rows of `allocations.parquet`, made during the replay pass: an allocation's row is
//! written when the replay releases it (with its free time), or at the end of the trace
//! if nothing did (free time null); a failed allocation's row as it passes. So memory holds
//! only what is live, as for `summary`, and rows come in the order of their frees.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use gpumemprof_format::{
    AllocFailed, MemKind, Record, FRAMEWORK_TENSORFLOW, TENSOR_OUT_OF_MEMORY_API,
};
use parquet::data_type::ByteArray;

use super::table::{kept, Table};
use crate::error::Error;
use crate::fasthash::FastMap;
use crate::observe::Observer;
use crate::replay::{LiveAlloc, LiveChange, Replay};

/// The columns, in the order `AllocationRows::write` fills them (docs/REPORTS.md).
pub const SCHEMA: &str = "message allocation {
    optional int64 rank;
    required int64 pid;
    optional binary host (STRING);
    required int32 device;
    required binary kind (STRING);
    required binary api (STRING);
    optional int64 address;
    required int64 bytes;
    required int64 alloc_ns;
    optional int64 free_ns;
    optional int64 stack_id;
    required int64 thread;
    optional binary range (STRING);
    optional binary range_domain (STRING);
    required boolean failed;
    optional int32 result;
    required int64 alloc_seq;
    optional int64 free_seq;
    required binary path (STRING);
}";

/// The `api` of a tensor row: the framework allocator's entry point, which the header's
/// `apis` table (the hooked CUDA and HIP functions) does not list.
const TENSOR_API_PYTORCH: u16 = u16::MAX;
const TENSOR_API_TENSORFLOW: u16 = u16::MAX - 1;
/// A refused framework tensor (`TENSOR_OUT_OF_MEMORY_API`).
const TENSOR_API_OUT_OF_MEMORY: u16 = u16::MAX - 2;

/// What a trace's rows share.
pub struct Process {
    pub rank: Option<i64>,
    pub pid: i64,
    pub host: Option<ByteArray>,
    pub path: ByteArray,
}

/// What the row needs beyond the replay's `LiveAlloc`, kept while it is live.
#[derive(Clone, Copy)]
struct Made {
    api: u16,
    tid: u32,
    group: u32,
    seq: u64,
}

/// Where a live allocation waits: its address space, address and time, as the replay's
/// ranges key it (two live allocations never share all three but in a damaged trace;
/// those wait in `crowd`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    space: u8,
    address: u64,
    time_ns: u64,
}

impl Key {
    fn of(a: &LiveAlloc) -> Key {
        Key {
            space: a.kind.space() as u8,
            address: a.address,
            time_ns: a.time_ns,
        }
    }
}

/// The observer writing `allocations.parquet` rows for one trace.
pub struct AllocationRows<'t> {
    table: &'t mut Table,
    process: Process,
    live: FastMap<Key, (LiveAlloc, Made)>,
    crowd: Vec<(LiveAlloc, Made)>,
    /// The record being applied: its number from 1, and for an allocation its API and
    /// thread.
    seq: u64,
    current: Option<(u16, u32)>,
    /// A failed allocation, written once the record is applied (no address, no free).
    failed: Option<AllocFailed>,
    apis: HashMap<u16, ByteArray>,
    kinds: FastMap<u8, ByteArray>,
    /// Range labels by group (filled on first use).
    ranges: Vec<Option<(ByteArray, Option<ByteArray>)>>,
    /// The first write error; the pass goes on and the export fails after it.
    error: Option<Error>,
}

impl<'t> AllocationRows<'t> {
    /// `apis`: the header's API names by number.
    pub fn new(table: &'t mut Table, process: Process, apis: &HashMap<u16, String>) -> Self {
        let mut apis: HashMap<u16, ByteArray> = (apis.iter()).map(|(&n, a)| (n, kept(a))).collect();
        for (n, name) in [
            (TENSOR_API_PYTORCH, "c10::reportMemoryUsageToProfiler"),
            (TENSOR_API_TENSORFLOW, "tsl::BFCAllocator::AllocateRaw"),
            (TENSOR_API_OUT_OF_MEMORY, TENSOR_OUT_OF_MEMORY_API),
        ] {
            apis.insert(n, kept(name));
        }
        AllocationRows {
            table,
            process,
            live: FastMap::default(),
            crowd: Vec::new(),
            seq: 0,
            current: None,
            failed: None,
            apis,
            kinds: FastMap::default(),
            ranges: Vec::new(),
            error: None,
        }
    }

    fn api(&mut self, api: u16) -> ByteArray {
        (self.apis.entry(api))
            .or_insert_with(|| kept(&format!("api {api}")))
            .clone()
    }

    fn kind(&mut self, kind: MemKind) -> ByteArray {
        self.kinds
            .entry(kind.to_u8())
            .or_insert_with(|| kept(kind.name()))
            .clone()
    }

    /// Names `group` on first sight (the range's strings are known when it is entered).
    fn see_range(&mut self, group: u32, replay: &Replay) {
        let i = group as usize;
        if group == 0 || self.ranges.get(i).is_some_and(Option::is_some) {
            return;
        }
        if self.ranges.len() <= i {
            self.ranges.resize(i + 1, None);
        }
        let (name, domain) = replay.range_label(group).unwrap_or_default();
        self.ranges[i] = Some((kept(&name), domain.as_deref().map(kept)));
    }

    /// The range name and domain of a group `see_range` saw.
    fn range(&self, group: u32) -> (Option<ByteArray>, Option<ByteArray>) {
        match self.ranges.get(group as usize) {
            Some(Some((name, domain))) => (Some(name.clone()), domain.clone()),
            _ => (None, None),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        device: i32,
        kind: MemKind,
        api: u16,
        address: Option<u64>,
        bytes: u64,
        (alloc_ns, free_ns): (u64, Option<u64>),
        stack: u64,
        tid: u32,
        range: (Option<ByteArray>, Option<ByteArray>),
        result: Option<u32>,
        (alloc_seq, free_seq): (u64, Option<u64>),
    ) {
        if self.error.is_some() {
            return;
        }
        let kind = self.kind(kind);
        let api = self.api(api);
        let p = &self.process;
        let written = self
            .table
            .row()
            .i64(p.rank)
            .i64(Some(p.pid))
            .bytes(p.host.as_ref())
            .i32(Some(device))
            .bytes(Some(&kind))
            .bytes(Some(&api))
            .i64(address.map(|a| a as i64))
            .i64(Some(bytes as i64))
            .i64(Some(alloc_ns as i64))
            .i64(free_ns.map(|t| t as i64))
            .i64((stack != 0).then_some(stack as i64))
            .i64(Some(i64::from(tid)))
            .bytes(range.0.as_ref())
            .bytes(range.1.as_ref())
            .bool(result.is_some())
            .i32(result.map(|r| r as i32))
            .i64(Some(alloc_seq as i64))
            .i64(free_seq.map(|s| s as i64))
            .bytes(Some(&p.path))
            .end();
        if let Err(e) = written {
            self.error = Some(e);
        }
    }

    fn released(&mut self, a: &LiveAlloc, made: Made, time_ns: Option<u64>) {
        let range = self.range(made.group);
        let free_seq = time_ns.map(|_| self.seq);
        self.write(
            a.device,
            a.kind,
            made.api,
            Some(a.address),
            a.size,
            (a.time_ns, time_ns),
            a.stack,
            made.tid,
            range,
            None,
            (made.seq, free_seq),
        );
    }

    /// Writes the rows of what is still live (free time null), oldest first; returns the
    /// first write error of the pass.
    pub fn finish(mut self) -> Result<(), Error> {
        let mut left: Vec<(LiveAlloc, Made)> = self.live.drain().map(|(_, v)| v).collect();
        left.append(&mut self.crowd);
        left.sort_by_key(|(_, made)| made.seq);
        for (a, made) in left {
            self.released(&a, made, None);
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Observer for AllocationRows<'_> {
    fn record(&mut self, record: &Record) {
        self.seq += 1;
        self.current = match record {
            Record::Alloc(a) => Some((a.api, a.tid)),
            Record::Tensor(t) if t.framework == FRAMEWORK_TENSORFLOW => {
                Some((TENSOR_API_TENSORFLOW, t.tid))
            }
            Record::Tensor(t) => Some((TENSOR_API_PYTORCH, t.tid)),
            _ => None,
        };
        if let Record::AllocFailed(f) = record {
            self.failed = Some(*f);
        }
    }

    /// Not called: `applied` below takes the changes, with the replay.
    fn changes(&mut self, _time_ns: u64, _changes: &[LiveChange]) {}

    fn applied(&mut self, time_ns: u64, changes: &[LiveChange], replay: &Replay) {
        if let Some(f) = self.failed.take() {
            let group = replay.range_group(f.tid);
            self.see_range(group, replay);
            let range = self.range(group);
            let api = match (f.kind, f.api) {
                (MemKind::Tensor, 0) => TENSOR_API_OUT_OF_MEMORY,
                (_, api) => api,
            };
            self.write(
                f.device,
                f.kind,
                api,
                None,
                f.size,
                (f.time_ns, None),
                f.stack,
                f.tid,
                range,
                Some(f.result),
                (self.seq, None),
            );
        }
        for change in changes {
            match change {
                LiveChange::Added(a) => {
                    let (api, tid) = self.current.unwrap_or((0, 0));
                    let group = replay.range_group(tid);
                    self.see_range(group, replay);
                    let made = Made {
                        api,
                        tid,
                        group,
                        seq: self.seq,
                    };
                    match self.live.entry(Key::of(a)) {
                        Entry::Vacant(e) => {
                            e.insert((*a, made));
                        }
                        Entry::Occupied(_) => self.crowd.push((*a, made)),
                    }
                }
                LiveChange::Released(a) => {
                    let key = Key::of(a);
                    let found = match self.crowd.iter().position(|(c, _)| Key::of(c) == key) {
                        Some(i) => Some(self.crowd.swap_remove(i).1),
                        None => self.live.remove(&key).map(|(_, made)| made),
                    };
                    if let Some(made) = found {
                        self.released(a, made, Some(time_ns));
                    }
                }
            }
        }
    }
}
