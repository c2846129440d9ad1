//! NVTX strings (range and mark messages, domain names, registered strings): read from the
//! program's pointers, bounded (`ascii`, `wide`), and interned, so an NVTX event carries a
//! name id, not the text (a ring slot is 64 bytes).
//!
//! ```text
//!  bytes ─► 64-bit hash ─► this thread's direct-mapped cache (64 slots, no lock)
//!                              hit: the id               (a training loop repeats its names)
//!                              miss: global table (mutex) ─► id; a new name is also queued in
//!                                    `fresh`, and the writer writes its definition before any
//!                                    event that uses it (as `intern.rs` does for stacks)
//! ```
//!
//! Bounded: a name is at most `MAX_NAME` bytes (the caller cuts it), and the table holds at
//! most `MAX_NAMES` distinct names; past that every new name gets the id of one overflow
//! string that says so (a program that puts a step counter in its messages must not grow
//! the shim without bound). Ids start at 1 and are never reused, so an id doubles as an
//! NVTX handle (domain, registered string) that is never NULL.

use crate::capture::intern::FxMap;
use crate::capture::words_hash;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use std::cell::Cell;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicU64, Ordering};

/// Longest name kept, in bytes (longer messages are cut at a character boundary).
pub const MAX_NAME: usize = 256;
/// Distinct names kept: at most about 20 MiB of table.
pub const MAX_NAMES: u64 = 1 << 16;
/// The text of the id every name past `MAX_NAMES` gets.
pub const OVERFLOW_NAME: &str = "(more than 65536 distinct NVTX names)";

/// Per-thread cache slots (a power of two): 1 KiB of TLS per thread.
const SLOTS: usize = 64;

thread_local! {
    /// (hash, id) pairs; hash 0 marks an empty slot. Const-initialised, no Drop.
    static CACHE: [Cell<(u64, u64)>; SLOTS] = const { [const { Cell::new((0, 0)) }; SLOTS] };
}

struct Table {
    ids: FxMap<Box<[u8]>, u64>,
    /// Defined but not yet written by the writer.
    fresh: Vec<(u64, String)>,
    /// The overflow name's id, once the table is full.
    overflow: u64,
}

static TABLE: Lazy<Mutex<Table>> = Lazy::new(|| {
    Mutex::new(Table {
        ids: FxMap::default(),
        fresh: Vec::new(),
        overflow: 0,
    })
});

/// The next id to hand out; read without the lock to check a handle (`is_id`).
static NEXT: AtomicU64 = AtomicU64::new(1);

/// 64-bit hash of a name, length included, never 0 (0 marks an empty cache slot).
#[inline]
fn hash(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = words_hash::mix(h, w);
    }
    for &b in chunks.remainder() {
        h = words_hash::mix(h, u64::from(b));
    }
    words_hash::finish(h)
}

/// The id of this name (at most `MAX_NAME` bytes), defining it on first sight.
#[inline]
pub fn intern(bytes: &[u8]) -> u64 {
    let h = hash(bytes);
    let slot = (h as usize) & (SLOTS - 1);
    if let Ok(Some(id)) = CACHE.try_with(|c| {
        let (k, id) = c[slot].get();
        (k == h).then_some(id)
    }) {
        return id;
    }
    let id = intern_slow(bytes);
    let _ = CACHE.try_with(|c| c[slot].set((h, id)));
    id
}

#[cold]
fn intern_slow(bytes: &[u8]) -> u64 {
    TABLE.lock().id_of(bytes, &NEXT, MAX_NAMES)
}

impl Table {
    /// The id of `bytes`, taking a new one from `next` for a new name while fewer than
    /// `limit` names are kept, else the overflow name's.
    fn id_of(&mut self, bytes: &[u8], next: &AtomicU64, limit: u64) -> u64 {
        if let Some(&id) = self.ids.get(bytes) {
            return id;
        }
        if self.ids.len() as u64 >= limit {
            if self.overflow == 0 {
                self.overflow = next.fetch_add(1, Ordering::Relaxed);
                self.fresh.push((self.overflow, OVERFLOW_NAME.to_string()));
            }
            return self.overflow;
        }
        let id = next.fetch_add(1, Ordering::Relaxed);
        self.ids.insert(bytes.into(), id);
        // Messages are bytes to NVTX; the trace keeps text (invalid UTF-8 shows as U+FFFD).
        self.fresh
            .push((id, String::from_utf8_lossy(bytes).into_owned()));
        id
    }
}

/// Whether `v` is an id this table handed out (a domain or registered-string handle the
/// program passes back): anything else is read as "no name", never followed.
#[inline]
pub fn is_id(v: u64) -> bool {
    v != 0 && v < NEXT.load(Ordering::Relaxed)
}

/// Moves every name defined since the last call into `out` (the writer writes them).
pub fn take_fresh(out: &mut Vec<(u64, String)>) {
    let mut t = TABLE.lock();
    if !t.fresh.is_empty() {
        out.append(&mut t.fresh);
    }
}

/// Before `fork`: hold the table's lock so the child never inherits it mid-change.
pub fn lock_for_fork() {
    std::mem::forget(TABLE.lock());
}

/// After `fork`, in the parent.
///
/// # Safety
/// Only after `lock_for_fork` on this thread.
pub unsafe fn unlock_after_fork() {
    TABLE.force_unlock();
}

/// After `fork`, in the child: every name known so far is queued again, so the child's
/// own trace defines the ids its threads' caches hand out.
///
/// # Safety
/// Only after `lock_for_fork` on this thread (the child's only thread).
pub unsafe fn child_after_fork() {
    // SAFETY: the lock is held (taken before fork), so this thread has the table.
    let t = &mut *TABLE.data_ptr();
    let mut all: Vec<(u64, String)> = t
        .ids
        .iter()
        .map(|(k, &id)| (id, String::from_utf8_lossy(k).into_owned()))
        .collect();
    if t.overflow != 0 {
        all.push((t.overflow, OVERFLOW_NAME.to_string()));
    }
    all.sort_by_key(|(id, _)| *id);
    t.fresh = all;
    TABLE.force_unlock();
}

// Reading the strings NVTX passes.

/// A NUL-terminated byte string, at most `MAX_NAME` bytes of it, cut at a UTF-8 character
/// boundary when longer. NULL reads as empty.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub unsafe fn ascii(p: *const c_char, buf: &mut [u8; MAX_NAME]) -> &[u8] {
    if p.is_null() {
        return &[];
    }
    let p = p as *const u8;
    let mut n = 0;
    while n < MAX_NAME {
        let b = *p.add(n);
        if b == 0 {
            return &buf[..n];
        }
        buf[n] = b;
        n += 1;
    }
    // Cut: the string goes on at p[MAX_NAME] (this byte exists: p[MAX_NAME - 1] was not
    // the NUL). A continuation byte there means the last character straddles the cut.
    if *p.add(MAX_NAME) & 0xC0 == 0x80 {
        while n > 0 && buf[n - 1] & 0xC0 == 0x80 {
            n -= 1;
        }
        n = n.saturating_sub(1); // the straddling character's lead byte
    }
    &buf[..n]
}

/// A NUL-terminated `wchar_t` string (UTF-32 on Linux) as UTF-8, whole characters up to
/// `MAX_NAME` bytes; a value that is not a character reads as U+FFFD. NULL reads as empty.
///
/// # Safety
/// `p` is NULL or a NUL-terminated `wchar_t` string.
pub unsafe fn wide(p: *const u32, buf: &mut [u8; MAX_NAME]) -> &[u8] {
    if p.is_null() {
        return &[];
    }
    let mut n = 0;
    // Every character takes at least one byte: MAX_NAME characters at most.
    for i in 0..MAX_NAME {
        let w = *p.add(i);
        if w == 0 {
            break;
        }
        let c = char::from_u32(w).unwrap_or(char::REPLACEMENT_CHARACTER);
        if n + c.len_utf8() > MAX_NAME {
            break;
        }
        n += c.encode_utf8(&mut buf[n..]).len();
    }
    &buf[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_names_are_cut_at_a_character_boundary() {
        let mut buf = [0u8; MAX_NAME];
        // SAFETY: NUL-terminated strings.
        unsafe {
            assert_eq!(ascii(c"forward".as_ptr(), &mut buf), b"forward");
            assert_eq!(ascii(std::ptr::null(), &mut buf), b"");
            let long = format!("{}\0", "a".repeat(1000));
            assert_eq!(ascii(long.as_ptr().cast(), &mut buf).len(), MAX_NAME);
            // 255 ASCII bytes, then a 2-byte character across the cut at 256.
            let straddle = format!("{}é and more\0", "a".repeat(MAX_NAME - 1));
            assert_eq!(
                ascii(straddle.as_ptr().cast(), &mut buf),
                "a".repeat(MAX_NAME - 1).as_bytes()
            );
            // 254 ASCII bytes and a 2-byte character end exactly at the cut: kept whole.
            let exact = format!("{}é more\0", "a".repeat(MAX_NAME - 2));
            let got = ascii(exact.as_ptr().cast(), &mut buf);
            assert_eq!(got.len(), MAX_NAME);
            assert!(std::str::from_utf8(got).unwrap().ends_with('é'));
        }
    }

    #[test]
    fn wide_names_become_utf8_with_whole_characters() {
        let mut buf = [0u8; MAX_NAME];
        let w: Vec<u32> = "optimizer_step ü€😀"
            .chars()
            .map(|c| c as u32)
            .chain([0])
            .collect();
        // SAFETY: NUL-terminated.
        unsafe {
            assert_eq!(wide(w.as_ptr(), &mut buf), "optimizer_step ü€😀".as_bytes());
            let bad = [0x61u32, 0xD800, 0x11_0000, 0];
            assert_eq!(wide(bad.as_ptr(), &mut buf), "a\u{fffd}\u{fffd}".as_bytes());
            let long: Vec<u32> = std::iter::repeat_n('€' as u32, 200).chain([0]).collect();
            let got = wide(long.as_ptr(), &mut buf);
            assert_eq!(got.len(), 85 * 3, "whole 3-byte characters up to 256 bytes");
            assert_eq!(wide(std::ptr::null(), &mut buf), b"");
        }
    }

    #[test]
    fn same_name_same_id_across_threads_and_each_defined_once() {
        let a = intern(b"forward");
        let b = intern(b"optimizer_step");
        assert_ne!(a, b);
        assert_eq!(intern(b"forward"), a);
        assert_eq!(std::thread::spawn(|| intern(b"forward")).join().unwrap(), a);
        assert!(is_id(a) && is_id(b));
        assert!(!is_id(0) && !is_id(u64::MAX));
        let mut fresh = Vec::new();
        take_fresh(&mut fresh);
        let defs: Vec<_> = fresh
            .iter()
            .filter(|(id, _)| *id == a || *id == b)
            .collect();
        assert_eq!(
            defs,
            vec![
                &(a, "forward".to_string()),
                &(b, "optimizer_step".to_string())
            ]
        );
        // An empty name is a name too (a domain created with ""): a handle, never NULL.
        assert_ne!(intern(b""), 0);
    }

    #[test]
    fn past_the_limit_every_new_name_shares_the_overflow_id() {
        let mut t = Table {
            ids: FxMap::default(),
            fresh: Vec::new(),
            overflow: 0,
        };
        let next = AtomicU64::new(1);
        let ids: Vec<u64> = [&b"a"[..], b"b", b"c", b"d", b"a", b"e"]
            .iter()
            .map(|n| t.id_of(n, &next, 3))
            .collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 1, 4]);
        let texts: Vec<&str> = t.fresh.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(texts, vec!["a", "b", "c", OVERFLOW_NAME]);
    }

    #[test]
    fn hash_depends_on_every_byte_and_the_length() {
        assert_ne!(hash(b"forward"), hash(b"forwarD"));
        assert_ne!(hash(b"a"), hash(b"a\0"));
        assert_ne!(hash(b""), 0);
        let long = [7u8; MAX_NAME];
        let mut other = long;
        other[MAX_NAME - 1] = 8;
        assert_ne!(hash(&long), hash(&other));
    }
}
