//! Writing traces: the preamble, the per-block record encoder, block compression and a
//! small `TraceWriter` tying them together. This runs inside the profiled process, so
//! nothing here panics and steady-state encoding does not allocate per record.

use std::cell::RefCell;
use std::io::{self, Write};

use zstd::bulk::Compressor;
use zstd::zstd_safe::{self, CParameter};

use crate::packed::Running;
use crate::record::{
    Alloc, AllocFailed, Ending, EndingRecord, Free, Module, Nvtx, PyCode, Record, Sample, Stats,
    StoppedRecord, Tensor, MAX_NVTX_STRING, MAX_PY_STRING,
};
use crate::varint::{put_u64, zigzag};
use crate::{
    kind, FORMAT_VERSION, MAGIC, MAX_BLOCK_COMPRESSED, MAX_BLOCK_RAW, MAX_HEADER_LEN,
    MAX_STACK_FRAMES,
};

/// Module paths and build-ids are cut to this many bytes: keeps any one record far below
/// `MAX_BLOCK_RAW`, so every block the encoder produces stays readable.
const MAX_MODULE_FIELD: usize = 64 << 10;

/// Accumulates the raw (uncompressed) records of one block.
#[derive(Default)]
pub struct BlockEncoder {
    buf: Vec<u8>,
    /// Reused payload buffer: each record is encoded here, then appended with its length.
    scratch: Vec<u8>,
    /// Time of the previous event in this block (base of the next delta).
    last_time: u64,
    /// The block's running values for packed records (`packed.rs`).
    run: Running,
    records: u64,
}

/// Writes `v` as a varint at `p`; returns the byte after it.
///
/// # Safety
/// `p` must have 10 writable bytes.
#[inline(always)]
unsafe fn put_raw(mut p: *mut u8, mut v: u64) -> *mut u8 {
    while v >= 0x80 {
        *p = (v as u8) | 0x80;
        p = p.add(1);
        v >>= 7;
    }
    *p = v as u8;
    p.add(1)
}

impl BlockEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Zigzag delta from the previous event time; wrapping so any u64 sequence round-trips.
    fn delta(&mut self, time: u64) -> u64 {
        let d = time.wrapping_sub(self.last_time) as i64;
        self.last_time = time;
        zigzag(d)
    }

    /// Appends `kind | len | scratch` and counts the record.
    fn commit(&mut self, kind: u8) {
        self.buf.push(kind);
        put_u64(&mut self.buf, self.scratch.len() as u64);
        self.buf.extend_from_slice(&self.scratch);
        self.records += 1;
    }

    /// Appends `kind | len | fields as varints` for a record of at most 12 integer fields
    /// (at most 120 payload bytes, so `len` is one byte), written straight into the
    /// block: the events' hot path, without the scratch copy.
    #[inline(always)]
    fn small_record<const N: usize>(&mut self, kind: u8, fields: [u64; N]) {
        const { assert!(N <= 12) };
        self.buf.reserve(2 + 10 * N);
        let at = self.buf.len();
        // SAFETY: `reserve` made room for the kind, the length byte and N varints of at
        // most 10 bytes each; exactly the bytes written are then marked initialised.
        unsafe {
            let base = self.buf.as_mut_ptr().add(at);
            *base = kind;
            let payload = base.add(2);
            let mut p = payload;
            for v in fields {
                p = put_raw(p, v);
            }
            let n = p.offset_from(payload) as usize;
            *base.add(1) = n as u8;
            self.buf.set_len(at + 2 + n);
        }
        self.records += 1;
    }

    /// Starts a packed record (`packed.rs`) of `kind`: makes room for it, writes the kind
    /// and returns the record's first byte. The payload starts 3 bytes on, after the
    /// length and the mask; `packed_end` completes the record.
    #[inline(always)]
    fn packed_start(&mut self, kind: u8) -> *mut u8 {
        // Mask plus at most 10 fields: 1 + 10 * 10 payload bytes, so a one-byte length.
        self.buf.reserve(3 + 10 * 10);
        // SAFETY: `reserve` made room for these bytes past the length.
        unsafe {
            let base = self.buf.as_mut_ptr().add(self.buf.len());
            *base = kind;
            base
        }
    }

    /// Completes the packed record started at `base` whose fields end at `end`.
    ///
    /// # Safety
    /// `base` comes from `packed_start` with no other change to the block since, and
    /// `[base + 3, end)` holds at most 100 bytes written since.
    #[inline(always)]
    unsafe fn packed_end(&mut self, base: *mut u8, mask: u8, end: *mut u8) {
        *base.add(2) = mask;
        let n = end.offset_from(base.add(2)) as usize;
        *base.add(1) = n as u8;
        let len = self.buf.len();
        self.buf.set_len(len + 2 + n);
        self.records += 1;
    }

    /// A successful allocation, as a packed record (kind 12).
    pub fn alloc(&mut self, a: &Alloc) {
        use crate::packed::alloc_bit as bit;
        let dt = self.delta(a.time_ns);
        let address = zigzag(a.address.wrapping_sub(self.run.address) as i64);
        let kind = a.kind.to_u8();
        let run = self.run;
        let base = self.packed_start(kind::PACKED_ALLOC);
        let mut mask = 0;
        // SAFETY: at most 10 varints of at most 10 bytes each after `base + 3`.
        unsafe {
            let mut p = put_raw(base.add(3), dt);
            if a.tid != run.tid {
                mask |= bit::TID;
                p = put_raw(p, a.tid.into());
            }
            if a.api != run.alloc_api {
                mask |= bit::API;
                p = put_raw(p, a.api.into());
            }
            if kind != run.kind {
                mask |= bit::KIND;
                p = put_raw(p, kind.into());
            }
            if a.device != run.device {
                mask |= bit::DEVICE;
                p = put_raw(p, zigzag(a.device.into()));
            }
            if a.stream != run.stream {
                mask |= bit::STREAM;
                p = put_raw(p, a.stream);
            }
            if a.pool != run.pool {
                mask |= bit::POOL;
                p = put_raw(p, a.pool);
            }
            p = put_raw(p, address);
            p = put_raw(p, a.size);
            p = put_raw(p, a.stack);
            self.packed_end(base, mask, p);
        }
        self.run = Running {
            tid: a.tid,
            alloc_api: a.api,
            kind,
            device: a.device,
            stream: a.stream,
            pool: a.pool,
            address: a.address,
            ..run
        };
    }

    /// A call to a free function, as a packed record (kind 13).
    pub fn free(&mut self, f: &Free) {
        use crate::packed::free_bit as bit;
        let dt = self.delta(f.time_ns);
        let address = zigzag(f.address.wrapping_sub(self.run.address) as i64);
        let kind = f.kind.to_u8();
        let run = self.run;
        let base = self.packed_start(kind::PACKED_FREE);
        let mut mask = 0;
        // SAFETY: at most 10 varints of at most 10 bytes each after `base + 3`.
        unsafe {
            let mut p = put_raw(base.add(3), dt);
            if f.tid != run.tid {
                mask |= bit::TID;
                p = put_raw(p, f.tid.into());
            }
            if f.api != run.free_api {
                mask |= bit::API;
                p = put_raw(p, f.api.into());
            }
            if f.stream != run.stream {
                mask |= bit::STREAM;
                p = put_raw(p, f.stream);
            }
            p = put_raw(p, address);
            p = put_raw(p, f.stack);
            if f.result != 0 {
                mask |= bit::RESULT;
                p = put_raw(p, f.result.into());
            }
            if f.flags != 0 {
                mask |= bit::FLAGS;
                p = put_raw(p, f.flags.into());
            }
            if kind != 0 {
                mask |= bit::KIND;
                p = put_raw(p, kind.into());
            }
            if f.size != 0 {
                mask |= bit::SIZE;
                p = put_raw(p, f.size);
            }
            self.packed_end(base, mask, p);
        }
        self.run = Running {
            tid: f.tid,
            free_api: f.api,
            stream: f.stream,
            address: f.address,
            ..run
        };
    }

    pub fn alloc_failed(&mut self, a: &AllocFailed) {
        let dt = self.delta(a.time_ns);
        self.small_record(
            kind::ALLOC_FAILED,
            [
                dt,
                a.tid.into(),
                a.api.into(),
                a.kind.to_u8().into(),
                zigzag(a.device.into()),
                a.size,
                a.stream,
                a.pool,
                a.stack,
                a.result.into(),
                a.mem_free,
                a.mem_total,
            ],
        );
    }

    /// An interned stack, innermost frame first. Frames past `MAX_STACK_FRAMES` are
    /// dropped (readers reject longer stacks).
    pub fn stack(&mut self, id: u64, frames: &[u64]) {
        let frames = &frames[..frames.len().min(MAX_STACK_FRAMES)];
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, id);
        put_u64(s, frames.len() as u64);
        let mut prev = 0u64;
        for (i, &f) in frames.iter().enumerate() {
            if i == 0 {
                put_u64(s, f);
            } else {
                put_u64(s, zigzag(f.wrapping_sub(prev) as i64));
            }
            prev = f;
        }
        self.commit(kind::STACK);
    }

    /// A loaded module. Path and build-id longer than 64 KiB are cut (never happens for
    /// real loaders; keeps the block readable).
    pub fn module(&mut self, m: &Module) {
        let path = m.path.as_bytes();
        let path = &path[..path.len().min(MAX_MODULE_FIELD)];
        let bid = &m.build_id[..m.build_id.len().min(MAX_MODULE_FIELD)];
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, m.time_ns);
        put_u64(s, m.bias);
        put_u64(s, m.start);
        put_u64(s, m.end);
        put_u64(s, path.len() as u64);
        s.extend_from_slice(path);
        put_u64(s, bid.len() as u64);
        s.extend_from_slice(bid);
        self.commit(kind::MODULE);
    }

    fn counters(&mut self, k: u8, st: &Stats) {
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, st.time_ns);
        put_u64(s, st.events);
        put_u64(s, st.queue_waits);
        put_u64(s, st.dropped);
        self.commit(k);
    }

    /// An NVML sample.
    pub fn sample(&mut self, m: &Sample) {
        self.small_record(
            kind::SAMPLE,
            [
                m.time_ns,
                zigzag(m.device.into()),
                m.process_used,
                m.device_used,
                m.device_total,
                m.query_ns,
            ],
        );
    }

    /// A Python code object; strings longer than `MAX_PY_STRING` bytes are cut at a
    /// character boundary.
    pub fn py_code(&mut self, c: &PyCode) {
        fn cut(s: &str) -> &[u8] {
            let mut end = s.len().min(MAX_PY_STRING);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            &s.as_bytes()[..end]
        }
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, c.id);
        put_u64(s, c.first_line.into());
        for text in [cut(&c.filename), cut(&c.name)] {
            put_u64(s, text.len() as u64);
            s.extend_from_slice(text);
        }
        self.commit(kind::PY_CODE);
    }

    /// An NVTX event. Its time is a delta from the block's running event time that does
    /// not advance it, so a reader that skips this kind decodes later events unchanged.
    pub fn nvtx(&mut self, n: &Nvtx) {
        let dt = zigzag(n.time_ns.wrapping_sub(self.last_time) as i64);
        self.small_record(
            kind::NVTX,
            [
                dt,
                n.tid.into(),
                n.op.to_u8().into(),
                n.domain,
                n.name,
                n.range,
            ],
        );
    }

    /// An NVTX string; bytes past `MAX_NVTX_STRING` are cut at a character boundary.
    pub fn nvtx_string(&mut self, id: u64, text: &str) {
        let mut end = text.len().min(MAX_NVTX_STRING);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, id);
        put_u64(s, end as u64);
        s.extend_from_slice(&text.as_bytes()[..end]);
        self.commit(kind::NVTX_STRING);
    }

    /// A framework tensor; its time, as NVTX's, leaves the running event time unchanged.
    pub fn tensor(&mut self, t: &Tensor) {
        let dt = zigzag(t.time_ns.wrapping_sub(self.last_time) as i64);
        self.small_record(
            kind::TENSOR,
            [
                dt,
                t.tid.into(),
                t.framework.into(),
                zigzag(t.device.into()),
                t.address,
                zigzag(t.delta),
                t.allocated,
                t.reserved,
                t.stack,
            ],
        );
    }

    /// Periodic pipeline counters.
    pub fn stats(&mut self, s: &Stats) {
        self.counters(kind::STATS, s);
    }

    /// How the process ended (written just before `end`).
    pub fn ending(&mut self, e: &EndingRecord) {
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, e.time_ns);
        match e.ending {
            Ending::Exit(status) => {
                put_u64(s, 1);
                put_u64(s, zigzag(i64::from(status)));
            }
            Ending::Signal(sig) => {
                put_u64(s, 2);
                put_u64(s, u64::from(sig));
            }
        }
        self.commit(kind::ENDING);
    }

    /// Recording stopped (written before a last `end`).
    pub fn stopped(&mut self, r: &StoppedRecord) {
        self.scratch.clear();
        let s = &mut self.scratch;
        put_u64(s, r.time_ns);
        put_u64(s, u64::from(r.reason.to_u8()));
        put_u64(s, u64::from(r.errno));
        self.commit(kind::STOPPED);
    }

    /// The final record of a cleanly closed trace.
    pub fn end(&mut self, s: &Stats) {
        self.counters(kind::END, s);
    }

    /// Encodes any record; `Record::Unknown` carries no payload and is ignored.
    pub fn record(&mut self, r: &Record) {
        match r {
            Record::Alloc(a) => self.alloc(a),
            Record::Free(f) => self.free(f),
            Record::AllocFailed(a) => self.alloc_failed(a),
            Record::Stack { id, frames } => self.stack(*id, frames),
            Record::Module(m) => self.module(m),
            Record::Stats(s) => self.stats(s),
            Record::Sample(m) => self.sample(m),
            Record::PyCode(c) => self.py_code(c),
            Record::Nvtx(n) => self.nvtx(n),
            Record::NvtxString { id, text } => self.nvtx_string(*id, text),
            Record::End(s) => self.end(s),
            Record::Ending(e) => self.ending(e),
            Record::Stopped(r) => self.stopped(r),
            Record::Tensor(t) => self.tensor(t),
            Record::Unknown { .. } => {}
        }
    }

    /// Raw bytes buffered in the current block.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Records in the current block.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The current block's raw bytes (what `compress_block` takes).
    pub fn raw(&self) -> &[u8] {
        &self.buf
    }

    /// Starts a new block: drops the bytes (keeping capacity) and resets the time base.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.last_time = 0;
        self.run = Running::default();
        self.records = 0;
    }
}

/// Writes the file preamble: magic, version, header length and the header JSON.
pub fn write_preamble<W: Write>(w: &mut W, header_json: &[u8]) -> io::Result<()> {
    if header_json.len() > MAX_HEADER_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "trace header is {} bytes, more than the {MAX_HEADER_LEN}-byte limit",
                header_json.len()
            ),
        ));
    }
    let mut pre = Vec::with_capacity(16 + header_json.len());
    pre.extend_from_slice(&MAGIC);
    pre.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    pre.extend_from_slice(&(header_json.len() as u32).to_le_bytes());
    pre.extend_from_slice(header_json);
    w.write_all(&pre) // one buffer: a single write(2) on an unbuffered file
}

thread_local! {
    /// One compression context per writing thread, reused across blocks (creating one
    /// allocates several hundred KiB).
    static CCTX: RefCell<Option<Compressor<'static>>> = const { RefCell::new(None) };
}

fn new_compressor(level: i32) -> io::Result<Compressor<'static>> {
    let mut c = Compressor::new(level)?;
    c.set_parameter(CParameter::ContentSizeFlag(true))?;
    c.set_parameter(CParameter::ChecksumFlag(true))?;
    Ok(c)
}

fn compress_with(
    c: &mut Compressor<'static>,
    raw: &[u8],
    level: i32,
    out: &mut Vec<u8>,
) -> io::Result<usize> {
    c.set_parameter(CParameter::CompressionLevel(level))?;
    let mut cur = io::Cursor::new(out);
    cur.set_position(4); // compress after the 4-byte length slot, without zero-filling
    c.compress_to_buffer(raw, &mut cur)
}

/// Compresses one block's raw records into `out` as `[u32 LE compressed_len][zstd frame]`
/// (content size and checksum on), ready to go out with a single write.
pub fn compress_block(raw: &[u8], level: i32, out: &mut Vec<u8>) -> io::Result<()> {
    out.clear();
    if raw.len() > MAX_BLOCK_RAW {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "block of {} raw bytes exceeds the {MAX_BLOCK_RAW}-byte limit",
                raw.len()
            ),
        ));
    }
    out.reserve(4 + zstd_safe::compress_bound(raw.len()));
    out.extend_from_slice(&[0; 4]);
    let n = CCTX
        .try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut slot) => {
                if slot.is_none() {
                    *slot = Some(new_compressor(level)?);
                }
                match slot.as_mut() {
                    Some(c) => compress_with(c, raw, level, out),
                    None => Err(io::Error::other("no compressor")),
                }
            }
            // Re-entered (cannot happen today): use a private context rather than panic.
            Err(_) => compress_with(&mut new_compressor(level)?, raw, level, out),
        })
        // Thread-local already destroyed (thread exiting): use a private context.
        .unwrap_or_else(|_| compress_with(&mut new_compressor(level)?, raw, level, out))?;
    if n > MAX_BLOCK_COMPRESSED || out.len() != 4 + n {
        out.clear();
        return Err(io::Error::other(format!(
            "compressed block of {n} bytes is unusable"
        )));
    }
    out[..4].copy_from_slice(&(n as u32).to_le_bytes());
    Ok(())
}

/// Writes a whole trace: preamble on creation, then one compressed block per `flush_block`.
pub struct TraceWriter<W: Write> {
    out: W,
    enc: BlockEncoder,
    block: Vec<u8>,
    level: i32,
    /// Bytes written whole: the preamble and every block written without error. After a
    /// failed write the file may hold part of a block past this.
    written: u64,
    /// The file may not grow past this (`set_budget`).
    budget: Option<u64>,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the preamble with `header` serialized as JSON; `level` is the zstd level.
    pub fn new(mut out: W, header: &serde_json::Value, level: i32) -> io::Result<Self> {
        let json = serde_json::to_vec(header).map_err(io::Error::other)?;
        write_preamble(&mut out, &json)?;
        Ok(TraceWriter {
            out,
            enc: BlockEncoder::new(),
            block: Vec::new(),
            level,
            written: 16 + json.len() as u64,
            budget: None,
        })
    }

    /// Blocks that would take the file past `bytes` are not written: `flush_block` fails
    /// with `EFBIG`, as a write past the file size limit (`ulimit -f`) does, before any of
    /// the block reaches the file. A writer given a budget below that limit keeps room past
    /// it for a last small block that says why the trace ends there (lift the budget with
    /// `None` to write it).
    pub fn set_budget(&mut self, bytes: Option<u64>) {
        self.budget = bytes;
    }

    /// Bytes of the file that are whole: the preamble and every block written without
    /// error (a failed write may have left part of a block after them).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The underlying writer, to cut a partly written block off (`written`).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The current block; flush it (e.g. once `len() >= BLOCK_FLUSH_BYTES`) with `flush_block`.
    pub fn encoder(&mut self) -> &mut BlockEncoder {
        &mut self.enc
    }

    /// Compresses and writes the current block with one `write_all`, then starts a new
    /// one. Returns the bytes written (0 when the block was empty). On error the block is
    /// discarded anyway: a retry could duplicate a partially written block.
    pub fn flush_block(&mut self) -> io::Result<usize> {
        if self.enc.records() == 0 {
            self.enc.clear();
            return Ok(0);
        }
        /// Linux's `EFBIG`: what the kernel answers a write past the file size limit.
        const EFBIG: i32 = 27;
        let within = |len: usize| match self.budget {
            Some(b) if self.written + len as u64 > b => Err(io::Error::from_raw_os_error(EFBIG)),
            _ => Ok(()),
        };
        let res = compress_block(self.enc.raw(), self.level, &mut self.block)
            .and_then(|()| within(self.block.len()))
            .and_then(|()| self.out.write_all(&self.block));
        self.enc.clear();
        if res.is_ok() {
            self.written += self.block.len() as u64;
        }
        res.map(|()| self.block.len())
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The underlying writer. Records not yet flushed with `flush_block` are dropped.
    pub fn into_inner(self) -> W {
        self.out
    }
}
