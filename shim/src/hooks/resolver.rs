//! The driver's entry-point resolver: `cuGetProcAddress` and `cuGetProcAddress_v2`
//! (behind `cudaGetDriverEntryPoint[ByVersion]`, static cudart, PyTorch's expandable
//! segments).
//!
//! The real resolver runs first with the caller's exact arguments (symbol, version,
//! flags, status), so version (`_v2` ABIs) and per-thread-stream (`_ptsz`) choices stay
//! the driver's. Only then, if the pointer it returned is identical to one of the real
//! driver functions the shim hooks (looked up once, by name, in the library the
//! resolver belongs to), the wrapper bound to that function replaces it. Asked for
//! `cuGetProcAddress` itself, the driver returns its resolver, which is hooked too: the
//! caller gets ours. The return code and `status` stay as the driver set them; when
//! the driver lacks a function it returns its error and NULL, and nothing is
//! substituted.

use super::device::library_of;
use super::{Family, HOOKS};
use crate::sys::dl;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

type ResolveV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type ResolveV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

/// # Safety
/// As for every generated wrapper: `real` is the real resolver, the arguments the
/// caller's.
pub unsafe fn resolve_v1(
    _api: super::Api,
    real: ResolveV1,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> c_int {
    let rc = real(symbol, pfn, version, flags);
    if rc == 0 && !pfn.is_null() {
        *pfn = substitute(real as *mut c_void, *pfn);
    }
    rc
}

/// # Safety
/// As for `resolve_v1`.
pub unsafe fn resolve_v2(
    _api: super::Api,
    real: ResolveV2,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let rc = real(symbol, pfn, version, flags, status);
    if rc == 0 && !pfn.is_null() {
        *pfn = substitute(real as *mut c_void, *pfn);
    }
    rc
}

/// The driver's real functions are bound once, from the resolver's own library.
static BOUND_DRIVER: AtomicBool = AtomicBool::new(false);

/// What the resolver returned before, and what it stood for: a runtime may resolve a
/// function on every call it makes (most of them not hooked), and scanning the hook table
/// each time cost 41 to 54 ns an allocation pair. Direct-mapped by the pointer's bits;
/// each entry is one word, the pointer (user addresses fit in 48 bits) with, above it, 1 +
/// the hook's index in `HOOKS`, or 0 for a function that is not hooked. A collision only
/// costs the scan again.
const SEEN_SLOTS: usize = 1024;
static SEEN: [AtomicU64; SEEN_SLOTS] = [const { AtomicU64::new(0) }; SEEN_SLOTS];
const POINTER_BITS: u32 = 48;

fn seen_slot(p: u64) -> &'static AtomicU64 {
    // Functions are at least 16 bytes apart: the low bits say little.
    let h = (p >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - 10);
    &SEEN[h as usize % SEEN_SLOTS]
}

/// The wrapper for `p` if it is a bound real driver function; else `p` (always while
/// another copy of the shim records).
fn substitute(real_resolver: *mut c_void, p: *mut c_void) -> *mut c_void {
    if p.is_null() || crate::session::standing_down() {
        return p;
    }
    if !BOUND_DRIVER.load(Ordering::Acquire) {
        bind_driver(real_resolver);
    }
    let key = p as u64;
    let cacheable = key >> POINTER_BITS == 0;
    if cacheable {
        let v = seen_slot(key).load(Ordering::Relaxed);
        if v != 0 && v & ((1 << POINTER_BITS) - 1) == key {
            return match (v >> POINTER_BITS) as usize {
                0 => p,
                i => (HOOKS[i - 1].bound_fn)(),
            };
        }
    }
    let found = HOOKS
        .iter()
        .enumerate()
        .filter(|(_, h)| h.api.family() == Family::Driver)
        .find(|(_, h)| h.slots.bound() == Some(p));
    if cacheable {
        let index = found.map_or(0, |(i, _)| i as u64 + 1);
        seen_slot(key).store(index << POINTER_BITS | key, Ordering::Relaxed);
    }
    found.map_or(p, |(_, h)| (h.bound_fn)())
}

#[cold]
fn bind_driver(real_resolver: *mut c_void) {
    let lib = library_of(real_resolver);
    if lib.is_null() {
        return;
    }
    for h in HOOKS.iter().filter(|h| h.api.family() == Family::Driver) {
        let real = dl::lookup(lib, h.slots.name);
        if !real.is_null() {
            h.slots.bind(real);
        }
    }
    BOUND_DRIVER.store(true, Ordering::Release);
}
