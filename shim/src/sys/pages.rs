//! Zeroed memory of the shim's own, mapped apart from the program's heap, on huge pages
//! where it is large enough and the kernel grants them on request (`madvise`): the tables
//! a capture probes at random (stack ids, walks by their inputs), where a 4 KiB page a
//! probe would also miss the TLB.

/// Mappings this large or larger are asked for huge pages (and aligned for them).
pub const HUGE: usize = 2 << 20;

/// `bytes` of zeroed memory, 2 MiB-aligned when `bytes` is `HUGE` or more; `None` without
/// memory for it. Only the pages touched take memory.
pub fn zeroed(bytes: usize) -> Option<*mut u8> {
    let huge = bytes >= HUGE;
    let map = if huge {
        bytes.checked_add(HUGE)?
    } else {
        bytes
    };
    // SAFETY: an anonymous private mapping of our own; the trims and the advice only
    // concern it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            map,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = p as usize;
        if !huge {
            return Some(p as *mut u8);
        }
        // Huge pages need a 2 MiB-aligned range: the mapping was one such larger, and
        // what lies outside the range is given back.
        let start = (base + HUGE - 1) & !(HUGE - 1);
        if start > base {
            libc::munmap(p, start - base);
        }
        let end = base + map;
        if end > start + bytes {
            libc::munmap((start + bytes) as *mut libc::c_void, end - start - bytes);
        }
        libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
        Some(start as *mut u8)
    }
}

/// Gives back memory from `zeroed`.
///
/// # Safety
/// `p` and `bytes` are those of one `zeroed` call, and nothing uses the memory after.
pub unsafe fn give_back(p: *mut u8, bytes: usize) {
    // SAFETY: the caller's.
    unsafe { libc::munmap(p as *mut libc::c_void, bytes) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_block_is_aligned_for_huge_pages_zeroed_and_writable_to_its_end() {
        for bytes in [4096, HUGE, 3 * HUGE + 4096] {
            let p = zeroed(bytes).unwrap();
            if bytes >= HUGE {
                assert_eq!(p as usize % HUGE, 0, "{bytes}");
            }
            // SAFETY: our own mapping of `bytes`.
            unsafe {
                let s = std::slice::from_raw_parts_mut(p, bytes);
                assert!(s.iter().step_by(4096).all(|&b| b == 0));
                s[bytes - 1] = 7;
                assert_eq!(s[bytes - 1], 7);
                give_back(p, bytes);
            }
        }
    }
}
