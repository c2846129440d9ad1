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
use std::sync::atomic::{AtomicBool, Ordering};

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

/// The wrapper for `p` if it is a bound real driver function; else `p` (always while
/// another copy of the shim records).
fn substitute(real_resolver: *mut c_void, p: *mut c_void) -> *mut c_void {
    if p.is_null() || crate::session::standing_down() {
        return p;
    }
    if !BOUND_DRIVER.load(Ordering::Acquire) {
        bind_driver(real_resolver);
    }
    HOOKS
        .iter()
        .filter(|h| h.api.family() == Family::Driver)
        .find(|h| h.slots.bound() == Some(p))
        .map_or(p, |h| (h.bound_fn)())
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
