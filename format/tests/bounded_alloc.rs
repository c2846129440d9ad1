//! Hostile sizes in a trace (4 GiB block length, huge header length, huge frame content
//! size, huge counts) must be rejected before anything is allocated for them. A counting
//! global allocator records the largest single allocation while the reader runs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Cursor;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use gpumemprof_format::*;

struct Counting;
static ARMED: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        }
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new, Ordering::Relaxed);
        }
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Largest allocation made while reading `bytes` to the end, and the first error.
fn largest_alloc(bytes: &[u8]) -> (usize, String) {
    LARGEST.store(0, Ordering::Relaxed);
    ARMED.store(true, Ordering::Relaxed);
    let mut first_err = None;
    match TraceReader::open(Cursor::new(bytes)) {
        Ok(mut r) => {
            for _ in 0..100 {
                match r.next_record() {
                    Ok(None) => break,
                    Ok(Some(_)) => {}
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        Err(e) => first_err = Some(e),
    }
    ARMED.store(false, Ordering::Relaxed);
    let largest = LARGEST.load(Ordering::Relaxed);
    (
        largest,
        first_err.map(|e| e.to_string()).unwrap_or_default(),
    )
}

/// Asserts a small peak allocation and an error mentioning `why` ("" = no error).
fn check(bytes: &[u8], why: &str) {
    let (largest, err) = largest_alloc(bytes);
    assert!(largest < 256 << 10, "allocated {largest} bytes ({err})");
    assert!(
        err.contains(why) && (why.is_empty() == err.is_empty()),
        "{err:?} lacks {why:?}"
    );
}

fn preamble() -> Vec<u8> {
    let mut v = Vec::new();
    write_preamble(&mut v, b"{}").unwrap();
    v
}

// One test only: the allocator is process-wide, so nothing may run beside it.
#[test]
fn hostile_sizes_do_not_allocate() {
    // Block announcing 4 GiB.
    let four_gib = [&preamble()[..], &u32::MAX.to_le_bytes(), &[0u8; 32]].concat();
    check(&four_gib, "block length 4294967295 exceeds");
    // Block length at the limit, but the file ends early: memory follows the bytes read.
    let cut = [
        &preamble()[..],
        &(MAX_BLOCK_COMPRESSED as u32).to_le_bytes(),
        &[0u8; 1000],
    ]
    .concat();
    check(&cut, "");
    // Header length 4 GiB.
    let mut hdr = preamble();
    hdr[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    check(&hdr, "header length 4294967295 exceeds");
    // Header length at the limit, file cut short.
    hdr[12..16].copy_from_slice(&(MAX_HEADER_LEN as u32).to_le_bytes());
    check(&hdr, "cut short");
    // zstd frame header announcing 1 TiB of content (single segment, 8-byte size).
    let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    frame.extend_from_slice(&(1u64 << 40).to_le_bytes());
    frame.extend_from_slice(&[1, 0, 0]); // a last raw block of size 0
    let tib = [&preamble()[..], &(frame.len() as u32).to_le_bytes(), &frame].concat();
    check(&tib, "announces 1099511627776 decompressed bytes");
    // A stack record claiming u64::MAX frames inside a valid block.
    let mut raw = vec![kind::STACK, 11, 1];
    raw.extend_from_slice(&[0xff; 9]);
    raw.push(0x01);
    raw[1] = (raw.len() - 2) as u8;
    let mut blk = Vec::new();
    compress_block(&raw, 1, &mut blk).unwrap();
    let stack = [&preamble()[..], &blk].concat();
    check(&stack, "18446744073709551615 frames");
    // Sanity: the counter does see allocations.
    assert!(largest_alloc(&preamble()).0 > 0);
}
