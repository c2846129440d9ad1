//! Decoding one record payload (already bounded by its length prefix) into a `Record`.
//! Input is untrusted: every failure is a message for `ReadError::Corrupt`, never a panic,
//! and nothing is allocated before its size is checked against the payload or a `MAX_*`.

use crate::packed::Running;
use crate::record::{
    Alloc, AllocFailed, Ending, EndingRecord, Free, MemKind, Module, Nvtx, NvtxOp, PyCode, Record,
    Sample, Stats, StopReason, StoppedRecord, Tensor, MAX_NVTX_STRING, MAX_PY_STRING,
};
use crate::varint::{leading, quick, unzigzag, Cursor, DecodeError};
use crate::{kind, MAX_STACK_FRAMES};

type Res<T> = Result<T, String>;

fn kind_name(k: u8) -> &'static str {
    match k {
        kind::ALLOC => "alloc",
        kind::FREE => "free",
        kind::ALLOC_FAILED => "alloc-failed",
        kind::STACK => "stack",
        kind::MODULE => "module",
        kind::STATS => "stats",
        kind::END => "end",
        kind::SAMPLE => "sample",
        kind::PY_CODE => "python code",
        kind::NVTX => "nvtx",
        kind::NVTX_STRING => "nvtx string",
        kind::PACKED_ALLOC => "packed alloc",
        kind::PACKED_FREE => "packed free",
        kind::ENDING => "ending",
        kind::STOPPED => "stopped",
        kind::TENSOR => "tensor",
        _ => "unknown",
    }
}

/// Field reader that names the record and field in its errors.
struct Fields<'a> {
    c: Cursor<'a>,
    kind: u8,
}

// Every field read is inlined into `decode` (a handful of instructions on the usual
// one- or two-byte varint); building an error message is cold and kept out of line.
impl<'a> Fields<'a> {
    #[cold]
    #[inline(never)]
    fn err(&self, field: &str, e: DecodeError) -> String {
        format!("{} record, field {field}: {e}", kind_name(self.kind))
    }
    #[cold]
    #[inline(never)]
    fn out_of_range(&self, field: &str, v: i128) -> String {
        format!(
            "{} record, field {field}: value {v} out of range",
            kind_name(self.kind)
        )
    }
    #[inline(always)]
    fn u64(&mut self, field: &str) -> Res<u64> {
        match self.c.u64() {
            Ok(v) => Ok(v),
            Err(e) => Err(self.err(field, e)),
        }
    }
    #[inline(always)]
    fn byte(&mut self, field: &str) -> Res<u8> {
        match self.c.u8() {
            Ok(v) => Ok(v),
            Err(e) => Err(self.err(field, e)),
        }
    }
    /// A field of a packed record: read when `bit` is in `mask`, else `running`.
    #[inline(always)]
    fn or<T: TryFrom<u64>>(&mut self, mask: u8, bit: u8, running: T, field: &str) -> Res<T> {
        if mask & bit == 0 {
            Ok(running)
        } else {
            self.uint(field)
        }
    }
    #[inline(always)]
    fn i64(&mut self, field: &str) -> Res<i64> {
        match self.c.i64() {
            Ok(v) => Ok(v),
            Err(e) => Err(self.err(field, e)),
        }
    }
    /// An unsigned field that must fit `T` (u32 tid, u16 api, ...).
    #[inline(always)]
    fn uint<T: TryFrom<u64>>(&mut self, field: &str) -> Res<T> {
        let v = self.u64(field)?;
        match T::try_from(v) {
            Ok(t) => Ok(t),
            Err(_) => Err(self.out_of_range(field, v.into())),
        }
    }
    #[inline(always)]
    fn device(&mut self) -> Res<i32> {
        let v = self.i64("device")?;
        match i32::try_from(v) {
            Ok(d) => Ok(d),
            Err(_) => Err(self.out_of_range("device", v.into())),
        }
    }
    #[inline(always)]
    fn mem_kind(&mut self) -> Res<MemKind> {
        self.uint::<u8>("kind").map(MemKind::from_u8)
    }
    /// A field appended after the first version: absent in older traces.
    #[inline(always)]
    fn at_end(&self) -> bool {
        self.c.remaining() == 0
    }
    /// Length-prefixed bytes; the length is checked against the payload before slicing.
    fn blob(&mut self, field: &str) -> Res<&'a [u8]> {
        let n = self.u64(field)?;
        let left = self.c.remaining();
        match usize::try_from(n) {
            Ok(n) if n <= left => self.c.bytes(n).map_err(|e| self.err(field, e)),
            _ => Err(format!(
                "{} record: {field} length {n} runs past the {left} payload bytes left",
                kind_name(self.kind)
            )),
        }
    }
}

/// Event time: a zigzag delta from the previous event time of the block (wrapping).
#[inline(always)]
fn event_time(f: &mut Fields, last_time: &mut u64) -> Res<u64> {
    let d = f.i64("time delta")?;
    *last_time = last_time.wrapping_add(d as u64);
    Ok(*last_time)
}

/// The fast path of an alloc record in its current layout: all fields read at once
/// (`varint::leading`) from its payload, the first `len` bytes of `data` (the rest of
/// the block follows: see `Cursor::within`). `None`, with `last_time` untouched, for
/// anything else, malformed payloads included: `decode` then reads it field by field
/// and names the fault.
#[inline(always)]
pub fn alloc(data: &[u8], len: usize, last_time: &mut u64) -> Option<Alloc> {
    let [dt, tid, api, kind, device, address, size, stream, pool, stack] =
        leading::<10>(data, len)?;
    let a = Alloc {
        time_ns: last_time.wrapping_add(unzigzag(dt) as u64),
        tid: u32::try_from(tid).ok()?,
        api: u16::try_from(api).ok()?,
        kind: MemKind::from_u8(u8::try_from(kind).ok()?),
        device: i32::try_from(unzigzag(device)).ok()?,
        address,
        size,
        stream,
        pool,
        stack,
    };
    *last_time = a.time_ns;
    Some(a)
}

/// `alloc`'s counterpart for a free record with every field (older traces, without the
/// kind and size fields, take `decode`).
#[inline(always)]
pub fn free(data: &[u8], len: usize, last_time: &mut u64) -> Option<Free> {
    let [dt, tid, api, address, stream, stack, result, flags, kind, size] =
        leading::<10>(data, len)?;
    let f = Free {
        time_ns: last_time.wrapping_add(unzigzag(dt) as u64),
        tid: u32::try_from(tid).ok()?,
        api: u16::try_from(api).ok()?,
        address,
        stream,
        stack,
        result: u32::try_from(result).ok()?,
        flags: u8::try_from(flags).ok()?,
        kind: MemKind::from_u8(u8::try_from(kind).ok()?),
        size,
    };
    *last_time = f.time_ns;
    Some(f)
}

/// The fast path of a packed alloc (kind 12): its fields read with `varint::quick`,
/// `None` (with nothing updated) for anything `packed_alloc` should look at carefully.
#[inline(always)]
pub fn packed_alloc_fast(
    data: &[u8],
    len: usize,
    last_time: &mut u64,
    run: &mut Running,
) -> Option<Alloc> {
    use crate::packed::alloc_bit as bit;
    let mask = *data.first()?;
    let mut pos = 1;
    let p = &mut pos;
    let dt = quick(data, p)?;
    let mut r = *run;
    if mask & (bit::TID | bit::API | bit::KIND | bit::DEVICE | bit::STREAM | bit::POOL) != 0 {
        if mask & bit::TID != 0 {
            r.tid = u32::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::API != 0 {
            r.alloc_api = u16::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::KIND != 0 {
            r.kind = u8::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::DEVICE != 0 {
            r.device = i32::try_from(unzigzag(quick(data, p)?)).ok()?;
        }
        if mask & bit::STREAM != 0 {
            r.stream = quick(data, p)?;
        }
        if mask & bit::POOL != 0 {
            r.pool = quick(data, p)?;
        }
    }
    r.address = r.address.wrapping_add(unzigzag(quick(data, p)?) as u64);
    let size = quick(data, p)?;
    let stack = quick(data, p)?;
    if pos > len {
        return None;
    }
    let time_ns = last_time.wrapping_add(unzigzag(dt) as u64);
    *last_time = time_ns;
    *run = r;
    Some(Alloc {
        time_ns,
        tid: r.tid,
        api: r.alloc_api,
        kind: MemKind::from_u8(r.kind),
        device: r.device,
        address: r.address,
        size,
        stream: r.stream,
        pool: r.pool,
        stack,
    })
}

/// `packed_alloc_fast`'s counterpart for a packed free (kind 13).
#[inline(always)]
pub fn packed_free_fast(
    data: &[u8],
    len: usize,
    last_time: &mut u64,
    run: &mut Running,
) -> Option<Free> {
    use crate::packed::free_bit as bit;
    let mask = *data.first()?;
    let mut pos = 1;
    let p = &mut pos;
    let dt = quick(data, p)?;
    let mut r = *run;
    if mask & (bit::TID | bit::API | bit::STREAM) != 0 {
        if mask & bit::TID != 0 {
            r.tid = u32::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::API != 0 {
            r.free_api = u16::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::STREAM != 0 {
            r.stream = quick(data, p)?;
        }
    }
    r.address = r.address.wrapping_add(unzigzag(quick(data, p)?) as u64);
    let stack = quick(data, p)?;
    let (mut result, mut flags, mut kind, mut size) = (0, 0, 0, 0);
    if mask & (bit::RESULT | bit::FLAGS | bit::KIND | bit::SIZE) != 0 {
        if mask & bit::RESULT != 0 {
            result = u32::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::FLAGS != 0 {
            flags = u8::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::KIND != 0 {
            kind = u8::try_from(quick(data, p)?).ok()?;
        }
        if mask & bit::SIZE != 0 {
            size = quick(data, p)?;
        }
    }
    if pos > len {
        return None;
    }
    let time_ns = last_time.wrapping_add(unzigzag(dt) as u64);
    *last_time = time_ns;
    *run = r;
    Some(Free {
        time_ns,
        tid: r.tid,
        api: r.free_api,
        address: r.address,
        stream: r.stream,
        stack,
        result,
        flags,
        kind: MemKind::from_u8(kind),
        size,
    })
}

/// A packed alloc (kind 12, `packed.rs`) from its payload, the first `len` bytes of
/// `data`; `last_time` and `run` are the block's running values, updated only on success.
#[inline(always)]
pub fn packed_alloc(data: &[u8], len: usize, last_time: &mut u64, run: &mut Running) -> Res<Alloc> {
    use crate::packed::alloc_bit as bit;
    let f = &mut Fields {
        c: Cursor::within(data, len),
        kind: kind::PACKED_ALLOC,
    };
    let mask = f.byte("mask")?;
    let time_ns = last_time.wrapping_add(f.i64("time delta")? as u64);
    let tid = f.or(mask, bit::TID, run.tid, "tid")?;
    let api = f.or(mask, bit::API, run.alloc_api, "api")?;
    let kind = f.or(mask, bit::KIND, run.kind, "kind")?;
    let device = if mask & bit::DEVICE == 0 {
        run.device
    } else {
        f.device()?
    };
    let stream = f.or(mask, bit::STREAM, run.stream, "stream")?;
    let pool = f.or(mask, bit::POOL, run.pool, "pool")?;
    let address = run.address.wrapping_add(f.i64("address delta")? as u64);
    let a = Alloc {
        time_ns,
        tid,
        api,
        kind: MemKind::from_u8(kind),
        device,
        address,
        size: f.u64("size")?,
        stream,
        pool,
        stack: f.u64("stack")?,
    };
    *last_time = time_ns;
    *run = Running {
        tid,
        alloc_api: api,
        kind,
        device,
        stream,
        pool,
        address,
        ..*run
    };
    Ok(a)
}

/// `packed_alloc`'s counterpart for a packed free (kind 13).
#[inline(always)]
pub fn packed_free(data: &[u8], len: usize, last_time: &mut u64, run: &mut Running) -> Res<Free> {
    use crate::packed::free_bit as bit;
    let f = &mut Fields {
        c: Cursor::within(data, len),
        kind: kind::PACKED_FREE,
    };
    let mask = f.byte("mask")?;
    let time_ns = last_time.wrapping_add(f.i64("time delta")? as u64);
    let tid = f.or(mask, bit::TID, run.tid, "tid")?;
    let api = f.or(mask, bit::API, run.free_api, "api")?;
    let stream = f.or(mask, bit::STREAM, run.stream, "stream")?;
    let address = run.address.wrapping_add(f.i64("address delta")? as u64);
    let fr = Free {
        time_ns,
        tid,
        api,
        address,
        stream,
        stack: f.u64("stack")?,
        result: f.or(mask, bit::RESULT, 0, "result")?,
        flags: f.or(mask, bit::FLAGS, 0, "flags")?,
        kind: MemKind::from_u8(f.or(mask, bit::KIND, 0, "kind")?),
        size: f.or(mask, bit::SIZE, 0, "size")?,
    };
    *last_time = time_ns;
    *run = Running {
        tid,
        free_api: api,
        stream,
        address,
        ..*run
    };
    Ok(fr)
}

/// Decodes one record of kind `k` from its payload, the first `len` bytes of `data`, one
/// field at a time, each checked. `last_time` is the block's running event time.
/// Trailing payload bytes past the known fields are ignored (fields are only ever
/// appended). `run` is the block's running values for packed records.
pub fn decode(
    k: u8,
    data: &[u8],
    len: usize,
    last_time: &mut u64,
    run: &mut Running,
) -> Res<Record> {
    match k {
        kind::PACKED_ALLOC => return packed_alloc(data, len, last_time, run).map(Record::Alloc),
        kind::PACKED_FREE => return packed_free(data, len, last_time, run).map(Record::Free),
        _ => {}
    }
    let f = &mut Fields {
        c: Cursor::within(data, len),
        kind: k,
    };
    Ok(match k {
        kind::ALLOC => {
            let time_ns = event_time(f, last_time)?;
            Record::Alloc(Alloc {
                time_ns,
                tid: f.uint("tid")?,
                api: f.uint("api")?,
                kind: f.mem_kind()?,
                device: f.device()?,
                address: f.u64("address")?,
                size: f.u64("size")?,
                stream: f.u64("stream")?,
                pool: f.u64("pool")?,
                stack: f.u64("stack")?,
            })
        }
        kind::FREE => {
            let time_ns = event_time(f, last_time)?;
            Record::Free(Free {
                time_ns,
                tid: f.uint("tid")?,
                api: f.uint("api")?,
                address: f.u64("address")?,
                stream: f.u64("stream")?,
                stack: f.u64("stack")?,
                result: f.uint("result")?,
                flags: f.uint("flags")?,
                kind: if f.at_end() {
                    MemKind::Device
                } else {
                    f.mem_kind()?
                },
                size: if f.at_end() { 0 } else { f.u64("size")? },
            })
        }
        kind::ALLOC_FAILED => {
            let time_ns = event_time(f, last_time)?;
            Record::AllocFailed(AllocFailed {
                time_ns,
                tid: f.uint("tid")?,
                api: f.uint("api")?,
                kind: f.mem_kind()?,
                device: f.device()?,
                size: f.u64("size")?,
                stream: f.u64("stream")?,
                pool: f.u64("pool")?,
                stack: f.u64("stack")?,
                result: f.uint("result")?,
                mem_free: if f.at_end() { 0 } else { f.u64("mem_free")? },
                mem_total: if f.at_end() { 0 } else { f.u64("mem_total")? },
            })
        }
        kind::STACK => {
            let id = f.u64("id")?;
            let n = f.u64("frame count")?;
            if n > MAX_STACK_FRAMES as u64 {
                return Err(format!(
                    "stack record: {n} frames, more than the {MAX_STACK_FRAMES} allowed"
                ));
            }
            let mut frames = Vec::with_capacity(n as usize); // bounded just above
            let mut prev = 0u64;
            for i in 0..n {
                prev = if i == 0 {
                    f.u64("frame")?
                } else {
                    prev.wrapping_add(f.i64("frame delta")? as u64)
                };
                frames.push(prev);
            }
            Record::Stack { id, frames }
        }
        kind::MODULE => {
            let time_ns = f.u64("time")?;
            let bias = f.u64("bias")?;
            let start = f.u64("start")?;
            let end = f.u64("end")?;
            // Paths are bytes on Linux; a non-UTF-8 one is kept readable rather than rejected.
            let path = String::from_utf8_lossy(f.blob("path")?).into_owned();
            let build_id = f.blob("build-id")?.to_vec();
            Record::Module(Module {
                time_ns,
                bias,
                start,
                end,
                path,
                build_id,
            })
        }
        kind::ENDING => {
            let time_ns = f.u64("time")?;
            let how: u8 = f.uint("how")?;
            let ending = match how {
                1 => {
                    let status = f.i64("exit status")?;
                    Ending::Exit(
                        i32::try_from(status)
                            .map_err(|_| f.out_of_range("exit status", status.into()))?,
                    )
                }
                2 => Ending::Signal(f.uint("signal")?),
                _ => return Err(f.out_of_range("how", how.into())),
            };
            Record::Ending(EndingRecord { time_ns, ending })
        }
        kind::STOPPED => {
            let time_ns = f.u64("time")?;
            let reason: u8 = f.uint("reason")?;
            let reason = StopReason::from_u8(reason)
                .ok_or_else(|| f.out_of_range("reason", reason.into()))?;
            let errno = f.uint("errno")?;
            Record::Stopped(StoppedRecord {
                time_ns,
                reason,
                errno,
            })
        }
        kind::STATS | kind::END => {
            let s = Stats {
                time_ns: f.u64("time")?,
                events: f.u64("events")?,
                queue_waits: f.u64("queue_waits")?,
                dropped: f.u64("dropped")?,
            };
            if k == kind::STATS {
                Record::Stats(s)
            } else {
                Record::End(s)
            }
        }
        kind::SAMPLE => Record::Sample(Sample {
            time_ns: f.u64("time")?,
            device: f.device()?,
            process_used: f.u64("process_used")?,
            device_used: f.u64("device_used")?,
            device_total: f.u64("device_total")?,
            query_ns: if f.at_end() { 0 } else { f.u64("query_ns")? },
        }),
        kind::PY_CODE => {
            let id = f.u64("id")?;
            let first_line = f.uint("first_line")?;
            let mut text = |field: &str| -> Res<String> {
                let b = f.blob(field)?;
                if b.len() > MAX_PY_STRING {
                    return Err(format!(
                        "python code record: {field} of {} bytes, more than the {MAX_PY_STRING} allowed",
                        b.len()
                    ));
                }
                Ok(String::from_utf8_lossy(b).into_owned())
            };
            let filename = text("filename")?;
            let name = text("name")?;
            Record::PyCode(PyCode {
                id,
                first_line,
                filename,
                name,
            })
        }
        kind::NVTX => {
            // A delta from the running event time that leaves it where it is (see lib.rs).
            let d = f.i64("time delta")?;
            Record::Nvtx(Nvtx {
                time_ns: last_time.wrapping_add(d as u64),
                tid: f.uint("tid")?,
                op: NvtxOp::from_u8(f.uint("op")?),
                domain: f.u64("domain")?,
                name: f.u64("name")?,
                range: f.u64("range")?,
            })
        }
        kind::TENSOR => {
            let d = f.i64("time delta")?; // as NVTX's: the running time stays
            Record::Tensor(Tensor {
                time_ns: last_time.wrapping_add(d as u64),
                tid: f.uint("tid")?,
                framework: f.uint("framework")?,
                device: f.device()?,
                address: f.u64("address")?,
                delta: f.i64("delta")?,
                allocated: f.u64("allocated")?,
                reserved: f.u64("reserved")?,
                stack: f.u64("stack")?,
            })
        }
        kind::NVTX_STRING => {
            let id = f.u64("id")?;
            let b = f.blob("text")?;
            if b.len() > MAX_NVTX_STRING {
                return Err(format!(
                    "nvtx string record: {} bytes, more than the {MAX_NVTX_STRING} allowed",
                    b.len()
                ));
            }
            Record::NvtxString {
                id,
                text: String::from_utf8_lossy(b).into_owned(),
            }
        }
        _ => Record::Unknown { kind: k, len },
    })
}

#[cfg(test)]
mod tests;
