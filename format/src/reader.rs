//! Reading traces: a streaming record reader over complete blocks, after the preamble
//! (`header.rs`). Input is untrusted (a crashed process, a damaged or foreign file): nothing
//! panics, every size is checked against a `MAX_*` bound before it is allocated for, and
//! a file cut anywhere yields exactly the records of its complete blocks, and a damaged
//! block is skipped with what it cost counted (`salvage.rs`).

mod decode;
mod salvage;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use zstd::bulk::Decompressor;
use zstd::zstd_safe;

pub use crate::error::ReadError;
use crate::header::{read_full, read_preamble, Preamble};
use crate::packed::Running;
use crate::record::Record;
use crate::varint::Cursor;
use crate::{kind, MAGIC, MAX_BLOCK_COMPRESSED, MAX_BLOCK_RAW};
pub use salvage::Damage;
use salvage::Source;

/// Bytes kept readable past a block's end, so that the last fields of its last record
/// can also be read 8 bytes at a time (`varint::leading`); never part of a record.
const PEEK_PAD: usize = 16;

/// Streams the records of a trace, one complete block at a time.
pub struct TraceReader<R: Read> {
    src: Source<R>,
    header: serde_json::Value,
    version: u32,
    /// File offset of the next unread byte.
    pos: u64,
    bytes_read: u64,
    blocks_read: u64,
    truncated: bool,
    /// The file offset where another trace's preamble starts (two traces concatenated):
    /// reading stopped there.
    second_trace: Option<u64>,
    /// No more blocks: EOF reached or the block stream cannot be resynchronised.
    done: bool,
    dctx: Decompressor<'static>,
    comp: Vec<u8>,
    /// Decompressed records of the current block (`raw[..raw_end]`, then at least
    /// `PEEK_PAD` bytes of padding or of an earlier block) and the read position in them.
    /// The buffer only grows: refilling it does not zero it again.
    raw: Vec<u8>,
    raw_end: usize,
    raw_pos: usize,
    /// Running event time of the current block (delta base).
    last_time: u64,
    /// Running values of the current block's packed records.
    run: Running,
    /// File offset of the current block, for error messages.
    block_start: u64,
    /// Event records returned so far (see `Damage::events`).
    events: u64,
    damage: Damage,
}

impl<R: Read> TraceReader<R> {
    /// Reads and validates the preamble and header JSON.
    pub fn open(mut r: R) -> Result<Self, ReadError> {
        let Preamble {
            version,
            header,
            bytes,
        } = read_preamble(&mut r)?;
        let pos = bytes.len() as u64;
        Ok(TraceReader {
            src: Source::new(r),
            header,
            version,
            pos,
            bytes_read: pos,
            blocks_read: 0,
            truncated: false,
            second_trace: None,
            done: false,
            dctx: Decompressor::new()?,
            comp: Vec::new(),
            raw: Vec::new(),
            raw_end: 0,
            raw_pos: 0,
            last_time: 0,
            run: Running::default(),
            block_start: pos,
            events: 0,
            damage: Damage::default(),
        })
    }

    /// The header JSON (always an object).
    pub fn header(&self) -> &serde_json::Value {
        &self.header
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// True once end-of-file was hit inside a block (the writer was killed mid-write).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Where another trace starts in the same file (its magic where a block was due):
    /// the reader stops there, so two concatenated traces never read as one process.
    pub fn second_trace_at(&self) -> Option<u64> {
        self.second_trace
    }

    /// File offset of the end of the last block read and decompressed successfully, or
    /// skipped as damaged with the next block found (the preamble's end before any).
    /// Counted when a block is loaded, before its records are returned.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Blocks read and decompressed successfully so far.
    pub fn blocks_read(&self) -> u64 {
        self.blocks_read
    }

    /// What damaged blocks cost so far (final once `next_record` returned `Ok(None)`).
    pub fn damage(&self) -> &Damage {
        &self.damage
    }

    /// `next_record`, stepping over damaged blocks (each a `Corrupt` error, counted in
    /// `damage`): only an I/O error stops it. What a report reads.
    pub fn next_salvaged(&mut self) -> Result<Option<Record>, ReadError> {
        loop {
            match self.next_record() {
                Err(ReadError::Corrupt { .. }) => continue,
                other => return other,
            }
        }
    }

    /// The next record, or `Ok(None)` at end of file (clean or inside a block; see
    /// `truncated`). After a `Corrupt` error in a record, the rest of that block is
    /// skipped and reading resumes at the next block; after a corrupt block length or an
    /// I/O error, reading stops (further calls return `Ok(None)`).
    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        loop {
            if self.raw_pos < self.raw_end {
                // Allocs and frees (nearly every record) are built right in the returned
                // value: one built elsewhere and copied here stalled on store forwarding.
                let start = self.raw_pos;
                let rest = self.raw.get(start..self.raw_end).unwrap_or_default();
                // The kind, then a one-byte payload length (an event's is under 128).
                if let [k, n, ..] = *rest {
                    let (at, len) = (start + 2, usize::from(n));
                    let data = self.raw.get(at..).unwrap_or_default();
                    if n < 0x80 && len <= rest.len() - 2 {
                        if k == kind::PACKED_ALLOC {
                            let (t, run) = (&mut self.last_time, &mut self.run);
                            if let Some(a) = decode::packed_alloc_fast(data, len, t, run) {
                                self.raw_pos = at + len;
                                self.events += 1;
                                return Ok(Some(Record::Alloc(a)));
                            }
                        } else if k == kind::PACKED_FREE {
                            let (t, run) = (&mut self.last_time, &mut self.run);
                            if let Some(f) = decode::packed_free_fast(data, len, t, run) {
                                self.raw_pos = at + len;
                                self.events += 1;
                                return Ok(Some(Record::Free(f)));
                            }
                        } else if k == kind::ALLOC {
                            if let Some(a) = decode::alloc(data, len, &mut self.last_time) {
                                self.raw_pos = at + len;
                                self.events += 1;
                                return Ok(Some(Record::Alloc(a)));
                            }
                        } else if k == kind::FREE {
                            if let Some(f) = decode::free(data, len, &mut self.last_time) {
                                self.raw_pos = at + len;
                                self.events += 1;
                                return Ok(Some(Record::Free(f)));
                            }
                        }
                    }
                }
                return self.decode_one().map(Some);
            }
            if self.done {
                self.damage.finish();
                return Ok(None);
            }
            self.read_block()?;
        }
    }

    fn corrupt(&self, what: String) -> ReadError {
        ReadError::Corrupt {
            offset: self.block_start,
            what,
        }
    }

    /// Any record, one field at a time (`decode::decode`): the rare kinds, and allocs and
    /// frees that the fast path declined (malformed, or of an older layout). Counts events
    /// and, at a counters record, what damage since the last one cost.
    #[inline(never)]
    fn decode_one(&mut self) -> Result<Record, ReadError> {
        let start = self.raw_pos;
        let rest = self.raw.get(start..).unwrap_or_default();
        let mut c = Cursor::within(rest, self.raw_end - start);
        let res = match (c.u8(), c.u64()) {
            (Ok(k), Ok(len)) if len <= c.remaining() as u64 => {
                let at = c.pos();
                self.raw_pos = start + at + len as usize;
                // The payload and, to be looked at only, the rest of the block.
                let (last_time, run) = (&mut self.last_time, &mut self.run);
                decode::decode(k, &rest[at..], len as usize, last_time, run)
            }
            (Ok(k), Ok(len)) => Err(format!(
                "record of kind {k}: payload length {len} runs past the end of the block"
            )),
            (_, Err(e)) | (Err(e), _) => Err(format!("record header: {e}")),
        };
        match res {
            Ok(record) => {
                match &record {
                    Record::Alloc(_)
                    | Record::Free(_)
                    | Record::AllocFailed(_)
                    | Record::Sample(_)
                    | Record::Nvtx(_)
                    | Record::Tensor(_) => self.events += 1,
                    Record::Stats(s) | Record::End(s) => self.damage.counted(s.events, self.events),
                    _ => {}
                }
                Ok(record)
            }
            Err(what) => {
                self.raw_pos = self.raw_end; // the rest of this block cannot be trusted
                let what = format!("record at byte {start} of the decompressed block: {what}");
                let bytes = self.pos - self.block_start;
                self.damage.note(self.block_start, bytes, &what);
                Err(self.corrupt(what))
            }
        }
    }

    /// Loads the next block into `raw`; on EOF sets `done` (and `truncated` if mid-block).
    /// A block that cannot be read is counted in `damage` and reading goes on at the next
    /// one (found by its frame header when its length cannot be trusted).
    fn read_block(&mut self) -> Result<(), ReadError> {
        self.raw_end = 0;
        self.raw_pos = 0;
        self.block_start = self.pos;
        let mut len4 = [0u8; 4];
        let n = read_full(&mut self.src, &mut len4).inspect_err(|_| self.done = true)?;
        if n < 4 {
            self.done = true;
            self.truncated = n > 0;
            return Ok(());
        }
        if len4 == MAGIC[..4] {
            // Maybe another trace's preamble: then this trace ends here.
            let mut rest = [0u8; 4];
            let m = read_full(&mut self.src, &mut rest).inspect_err(|_| self.done = true)?;
            if m == 4 && rest == MAGIC[4..] {
                self.done = true;
                self.second_trace = Some(self.pos);
                return Ok(());
            }
            self.comp.clear();
            self.comp.extend_from_slice(&rest[..m]);
            let what = "a block length that is the start of the trace magic".to_string();
            return Err(self.skip_damaged(len4, what));
        }
        let len = u32::from_le_bytes(len4) as usize;
        self.comp.clear();
        if len > MAX_BLOCK_COMPRESSED {
            let what = format!("block length {len} exceeds the {MAX_BLOCK_COMPRESSED}-byte limit");
            return Err(self.skip_damaged(len4, what));
        }
        // `comp` grows with what is actually read, not with `len`.
        let got = self
            .src
            .by_ref()
            .take(len as u64)
            .read_to_end(&mut self.comp);
        got.inspect_err(|_| self.done = true)?;
        if self.comp.len() < len {
            // The file ends inside the block: cut short, unless its length was wrong and
            // another block starts inside what was read (then it is damage, read past).
            let seen = [&len4[..], &self.comp[..]].concat();
            if salvage::block_start_in(&seen).is_some() {
                let what = format!("block length {len} runs past the end of the file");
                return Err(self.skip_damaged(len4, what));
            }
            self.done = true;
            self.truncated = true;
            return Ok(());
        }
        if let Err(what) = self.decompress() {
            return Err(self.skip_damaged(len4, what));
        }
        self.pos += 4 + len as u64;
        self.last_time = 0;
        self.run = Running::default();
        self.blocks_read += 1;
        self.bytes_read = self.pos;
        Ok(())
    }

    /// A block whose frame is damaged (`len4` then `comp` read of it): finds the next
    /// block, counts the bytes up to it as lost, and gives the error to return.
    fn skip_damaged(&mut self, len4: [u8; 4], what: String) -> ReadError {
        let seen = [&len4[..], &self.comp[..]].concat();
        let err = self.corrupt(what.clone());
        let skipped = match self.src.resync(&seen) {
            Ok((n, found)) => {
                // No block after it: everything to the end of the file is lost.
                self.done = !found;
                n
            }
            Err(e) => {
                self.done = true;
                return ReadError::Io(e);
            }
        };
        self.damage.note(self.block_start, skipped, &what);
        self.pos += skipped;
        if !self.done {
            self.bytes_read = self.pos;
        }
        err
    }

    /// Decompresses `comp` (exactly one zstd frame with a bounded content size) into `raw`.
    fn decompress(&mut self) -> Result<(), String> {
        let size = match zstd_safe::get_frame_content_size(&self.comp) {
            Ok(Some(n)) if n <= MAX_BLOCK_RAW as u64 => n as usize,
            Ok(Some(n)) => {
                return Err(format!(
                    "block announces {n} decompressed bytes, over the {MAX_BLOCK_RAW}-byte limit"
                ))
            }
            Ok(None) => {
                return Err("block's zstd frame does not record its decompressed size".into())
            }
            Err(_) => return Err("block is not a zstd frame".into()),
        };
        match zstd_safe::find_frame_compressed_size(&self.comp) {
            Ok(m) if m == self.comp.len() => {}
            Ok(m) => {
                return Err(format!(
                    "{} stray bytes after the block's zstd frame",
                    self.comp.len() - m
                ))
            }
            Err(code) => {
                return Err(format!(
                    "bad zstd frame: {}",
                    zstd_safe::get_error_name(code)
                ))
            }
        }
        // Bounded above; zstd overwrites every byte of `raw[..size]` (checked below).
        if self.raw.len() < size + PEEK_PAD {
            self.raw.resize(size + PEEK_PAD, 0);
        }
        match self
            .dctx
            .decompress_to_buffer(&self.comp, &mut self.raw[..size])
        {
            Ok(n) if n == size => {
                self.raw_end = size;
                Ok(())
            }
            Ok(n) => Err(format!(
                "block decompressed to {n} bytes, its frame announced {size}"
            )),
            Err(e) => Err(format!("block does not decompress: {e}")),
        }
    }
}

/// Opens a trace file (buffered) and reads its preamble.
pub fn open_path(path: &Path) -> Result<TraceReader<BufReader<File>>, ReadError> {
    TraceReader::open(BufReader::with_capacity(1 << 16, File::open(path)?))
}
