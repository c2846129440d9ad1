//! Reading past damage: what was lost to damaged blocks (`Damage`), and finding the next
//! block after one whose bytes cannot be trusted (`Source::resync`).
//!
//! Blocks are independent zstd frames, each after its 4-byte length. A damaged block whose
//! length is intact is simply stepped over; one whose length is damaged leaves no way to
//! know where the next block starts, so the bytes after it are searched for a frame header
//! (zstd's magic number after a length within the limit) and reading goes on there. A
//! length within the limit that runs past the end of the file is damage too, not the end of
//! a cut file, when another block starts inside what it claims. A
//! false match (the magic inside compressed bytes) fails to decompress in turn and the
//! search goes on past it.

use std::io::Read;

use crate::header::read_full;
use crate::MAX_BLOCK_COMPRESSED;

/// The first four bytes of every zstd frame (little-endian 0xFD2FB528).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Bytes read at a time while searching for the next block.
const SCAN_CHUNK: usize = 64 << 10;

/// What damaged blocks cost: the reader skips them and goes on with the next block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Damage {
    /// Damaged blocks skipped (a block that does not decompress, or whose records do not
    /// decode; a run of unreadable bytes between two blocks counts as one).
    pub blocks: u64,
    /// Bytes of the file in them.
    pub bytes: u64,
    /// Events (allocations, frees, failures, samples, NVTX and tensor records) they held,
    /// as the counters record after them tells; `events_known` is false when a damaged
    /// block had no counters record after it (it was among the last ones), and `events`
    /// then counts only the damage before.
    pub events: u64,
    pub events_known: bool,
    /// File offset of the first damaged block, and why it could not be read.
    pub first: Option<(u64, String)>,
    /// Damage since the last counters record, whose events are not yet counted.
    pub(super) uncounted: bool,
}

impl Damage {
    /// Notes one damaged block of `bytes` at `offset`.
    pub(super) fn note(&mut self, offset: u64, bytes: u64, why: &str) {
        if self.blocks == 0 {
            self.events_known = true;
            self.first = Some((offset, why.to_string()));
        }
        self.blocks += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        self.uncounted = true;
    }

    /// A counters record says `written` events were encoded up to here, of which `read`
    /// were read: the difference was in the damaged blocks since the last counters.
    pub(super) fn counted(&mut self, written: u64, read: u64) {
        if self.uncounted {
            self.uncounted = false;
            self.events = written.saturating_sub(read);
        }
    }

    /// Adds what another read of the same file (a later part of it) lost.
    pub fn add(&mut self, other: &Damage) {
        if other.blocks == 0 {
            return;
        }
        if self.blocks == 0 {
            self.first = other.first.clone();
            self.events_known = true;
        }
        self.blocks += other.blocks;
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.events = self.events.saturating_add(other.events);
        self.events_known &= other.events_known;
    }

    /// At the end of the file: damage after the last counters record is not counted.
    pub(super) fn finish(&mut self) {
        if self.uncounted {
            self.events_known = false;
        }
    }
}

/// The trace's bytes after the header, with bytes put back by a resynchronisation read
/// again first.
pub(super) struct Source<R: Read> {
    pub(super) r: R,
    back: Vec<u8>,
    at: usize,
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at < self.back.len() {
            let n = buf.len().min(self.back.len() - self.at);
            buf[..n].copy_from_slice(&self.back[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.r.read(buf)
    }
}

impl<R: Read> Source<R> {
    pub(super) fn new(r: R) -> Source<R> {
        Source {
            r,
            back: Vec::new(),
            at: 0,
        }
    }

    /// After a damaged block whose bytes so far are `seen` (its length field first),
    /// finds the next block: the first offset past `seen[0]` holding a length within the
    /// limit followed by zstd's magic. Everything from there is put back to be read next.
    /// Returns how many bytes (from the start of `seen`) lie before it and `true`, or
    /// every byte up to the end of the file, skipped, and `false`.
    pub(super) fn resync(&mut self, seen: &[u8]) -> std::io::Result<(u64, bool)> {
        let mut window: Vec<u8> = seen.to_vec();
        // Bytes of `window` before window[0] that were already searched and dropped.
        let mut dropped: u64 = 0;
        let mut from = 1usize;
        loop {
            if let Some(start) = find_block_start(&window, from) {
                let rest = window.split_off(start);
                self.put_back(rest);
                return Ok((dropped + start as u64, true));
            }
            // Keep the last 7 bytes: a length and magic may straddle the next chunk.
            let keep = window.len().min(7);
            let cut = window.len() - keep;
            window.drain(..cut);
            dropped += cut as u64;
            from = if dropped == 0 { from } else { 0 };
            let old = window.len();
            window.resize(old + SCAN_CHUNK, 0);
            let n = read_full(self, &mut window[old..])?;
            window.truncate(old + n);
            if n == 0 {
                return Ok((dropped + window.len() as u64, false));
            }
        }
    }

    /// `bytes` are read again before anything else.
    fn put_back(&mut self, mut bytes: Vec<u8>) {
        bytes.extend_from_slice(&self.back[self.at..]);
        self.back = bytes;
        self.at = 0;
    }
}

/// Where, past its first byte, `seen` (a block's length field and the bytes after it) holds
/// the start of another block.
pub(super) fn block_start_in(seen: &[u8]) -> Option<usize> {
    find_block_start(seen, 1)
}

/// The first `i >= from` where `window[i..]` starts with a length no larger than the limit
/// (and no smaller than a frame header) followed by zstd's magic.
/// Another trace's magic counts as a start too: the reader stops there (`read_block`).
fn find_block_start(window: &[u8], from: usize) -> Option<usize> {
    let last = window.len().checked_sub(8)?;
    (from..=last).find(|&i| {
        let len = u32::from_le_bytes([window[i], window[i + 1], window[i + 2], window[i + 3]]);
        window[i..i + 8] == crate::MAGIC
            || (window[i + 4..i + 8] == ZSTD_MAGIC
                && (9..=MAX_BLOCK_COMPRESSED as u32).contains(&len))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn block(len: u32) -> Vec<u8> {
        let mut b = len.to_le_bytes().to_vec();
        b.extend_from_slice(&ZSTD_MAGIC);
        b.resize(4 + len as usize, 0xAA);
        b
    }

    #[test]
    fn the_next_block_is_found_past_garbage_and_read_again() {
        let garbage = vec![0x55u8; 100_000]; // longer than one scan chunk
        let next = block(20);
        let rest = [&garbage[40..], &next[..]].concat();
        let mut s = Source::new(Cursor::new(rest));
        let skipped = s.resync(&garbage[..40]).unwrap();
        assert_eq!(skipped, (100_000, true));
        let mut again = Vec::new();
        s.read_to_end(&mut again).unwrap();
        assert_eq!(again, next);
    }

    #[test]
    fn the_damaged_blocks_own_header_is_not_taken_for_the_next() {
        let damaged = block(30);
        let next = block(12);
        let mut s = Source::new(Cursor::new(next.clone()));
        assert_eq!(s.resync(&damaged).unwrap(), (34, true));
        let mut again = Vec::new();
        s.read_to_end(&mut again).unwrap();
        assert_eq!(again, next);
    }

    #[test]
    fn a_length_over_the_limit_is_not_a_block_and_no_block_means_none() {
        let mut fake = ((MAX_BLOCK_COMPRESSED + 1) as u32).to_le_bytes().to_vec();
        fake.extend_from_slice(&ZSTD_MAGIC);
        fake.extend_from_slice(&[0; 10]);
        let mut s = Source::new(Cursor::new(fake));
        assert_eq!(s.resync(&[0, 0, 0, 0]).unwrap(), (22, false));
    }
}
