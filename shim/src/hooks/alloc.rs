//! The malloc/free-shaped hooks shared by the CUDA runtime, the driver and HIP: what
//! each function's arguments mean and what gets recorded. The wrappers themselves are
//! generated in `hooks/mod.rs`; `cuMemAlloc_v2(CUdeviceptr*, size_t)` and
//! `cudaMalloc(void**, size_t)` have one ABI and share one handler.
//!
//! Rules shared by all: the real function runs first with the caller's exact
//! arguments; out-parameters are only read after success; a successful call that
//! yields NULL (size 0) records nothing, and so does freeing NULL (both are no-ops in
//! CUDA); failed allocations are recorded with their error code; frees are recorded
//! whatever their result, stamped before the real call.
//!
//! Safety, for every handler below: `real` must be the real function of that name
//! and the arguments those the program passed to it (the generated export guarantees
//! both); out-parameters are read only after the real call succeeded, and only if
//! non-NULL.
#![allow(clippy::missing_safety_doc)]

use super::device;
use super::record::{hooked, hooked_free, record, Rec};
use super::Api;
use crate::capture::thread::ThreadState;
use crate::sys::event::{EventKind, OUT_OF_MEMORY};
use gpumemprof_format::{MemKind, FREE_STREAM_ORDERED};
use std::ffi::c_void;
use std::os::raw::{c_int, c_uint};

/// Memory kinds as const generic arguments of the shared handlers.
pub const DEVICE: u8 = 0;
pub const MANAGED: u8 = 1;
pub const PINNED_HOST: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CudaPitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CudaExtent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

type Stream = *mut c_void;

/// Reads an out-pointer the real function filled (NULL-safe).
unsafe fn out_ptr(p: *mut *mut c_void) -> u64 {
    if p.is_null() {
        0
    } else {
        *p as u64
    }
}

/// Where an allocation landed: address (0 on failure), bytes, stream and pool handles.
pub(super) struct Placed {
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
}

impl Placed {
    pub fn plain(addr: u64, size: u64) -> Placed {
        Placed {
            addr,
            size,
            stream: 0,
            pool: 0,
        }
    }
}

pub(super) fn on_alloc(me: &ThreadState, api: Api, mem: MemKind, rc: c_int, placed: Placed) {
    let Placed {
        addr,
        size,
        stream,
        pool,
    } = placed;
    let t = crate::sys::clock::now();
    if rc == 0 {
        if addr == 0 {
            return;
        }
        let mut r = Rec::new(EventKind::Alloc, api, t);
        r.mem = mem;
        let family = api.family();
        r.device = if pool == 0 {
            device::of_allocation(family)
        } else {
            device::of_pointer(family, addr)
        };
        r.address = addr;
        r.size = size;
        r.stream = stream;
        r.pool = pool;
        record(me, r);
    } else {
        on_failure(
            me,
            api,
            mem,
            rc,
            t,
            size,
            stream,
            pool,
            device::current(api.family()),
        );
    }
}

/// Records a failed allocation; for out of memory (2 in CUDA and HIP) with the
/// device's free and total memory read now, on the failing thread.
#[allow(clippy::too_many_arguments)]
pub(super) fn on_failure(
    me: &ThreadState,
    api: Api,
    mem: MemKind,
    rc: c_int,
    t: u64,
    size: u64,
    stream: u64,
    pool: u64,
    dev: i32,
) {
    let mut r = Rec::new(EventKind::AllocFailed, api, t);
    r.mem = mem;
    r.device = dev;
    r.size = size;
    r.stream = stream;
    r.pool = pool;
    r.result = rc as u32;
    // A framework's refused tensor (`framework.rs`) is asked of the runtime, as PyTorch
    // asks it for its own message, on the device it made current.
    if rc == OUT_OF_MEMORY as c_int && matches!(mem, MemKind::Device | MemKind::Tensor) {
        if let Some((free, total)) = device::mem_info(api.family()) {
            r.address = free;
            r.aux = total;
        }
    }
    record(me, r);
    if rc == OUT_OF_MEMORY as c_int {
        // The evidence goes to disk before the program can react (or die).
        crate::session::after_oom();
    }
}

pub(super) fn on_free(
    me: &ThreadState,
    api: Api,
    rc: c_int,
    t0: u64,
    addr: u64,
    stream: Stream,
    flags: u8,
) {
    if addr == 0 {
        return;
    }
    let mut r = Rec::new(EventKind::Free, api, t0);
    r.address = addr;
    r.stream = stream as u64;
    r.result = rc as u32;
    r.flags = flags;
    record(me, r);
}

type MallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type MallocAsyncFn = unsafe extern "C" fn(*mut *mut c_void, usize, Stream) -> c_int;
type FreeAsyncFn = unsafe extern "C" fn(*mut c_void, Stream) -> c_int;
type MallocPoolFn = unsafe extern "C" fn(*mut *mut c_void, usize, *mut c_void, Stream) -> c_int;
type MallocFlagsFn = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type MallocPitchFn = unsafe extern "C" fn(*mut *mut c_void, *mut usize, usize, usize) -> c_int;
type Malloc3dFn = unsafe extern "C" fn(*mut CudaPitchedPtr, CudaExtent) -> c_int;

/// `cudaMalloc` (KIND = device) and `cudaMallocHost` (KIND = pinned host).
pub unsafe fn malloc<const KIND: u8>(
    api: Api,
    real: MallocFn,
    p: *mut *mut c_void,
    size: usize,
) -> c_int {
    hooked(
        || real(p, size),
        |rc, me| {
            on_alloc(
                me,
                api,
                MemKind::from_u8(KIND),
                rc,
                Placed::plain(out_ptr(p), size as u64),
            )
        },
    )
}

/// `cudaFree` and `cudaFreeHost`.
pub unsafe fn free(api: Api, real: FreeFn, ptr: *mut c_void) -> c_int {
    hooked_free(
        || real(ptr),
        |rc, t0, me| on_free(me, api, rc, t0, ptr as u64, std::ptr::null_mut(), 0),
    )
}

pub unsafe fn malloc_async(
    api: Api,
    real: MallocAsyncFn,
    p: *mut *mut c_void,
    size: usize,
    stream: Stream,
) -> c_int {
    hooked(
        || real(p, size, stream),
        |rc, me| {
            on_alloc(
                me,
                api,
                MemKind::Device,
                rc,
                Placed {
                    addr: out_ptr(p),
                    size: size as u64,
                    stream: stream as u64,
                    pool: 0,
                },
            )
        },
    )
}

pub unsafe fn free_async(api: Api, real: FreeAsyncFn, ptr: *mut c_void, stream: Stream) -> c_int {
    hooked_free(
        || real(ptr, stream),
        |rc, t0, me| on_free(me, api, rc, t0, ptr as u64, stream, FREE_STREAM_ORDERED),
    )
}

pub unsafe fn malloc_from_pool(
    api: Api,
    real: MallocPoolFn,
    p: *mut *mut c_void,
    size: usize,
    pool: *mut c_void,
    stream: Stream,
) -> c_int {
    hooked(
        || real(p, size, pool, stream),
        |rc, me| {
            on_alloc(
                me,
                api,
                MemKind::Device,
                rc,
                Placed {
                    addr: out_ptr(p),
                    size: size as u64,
                    stream: stream as u64,
                    pool: pool as u64,
                },
            )
        },
    )
}

/// `cudaMallocManaged` (KIND = managed) and `cudaHostAlloc` (KIND = pinned host).
pub unsafe fn malloc_flags<const KIND: u8>(
    api: Api,
    real: MallocFlagsFn,
    p: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> c_int {
    hooked(
        || real(p, size, flags),
        |rc, me| {
            on_alloc(
                me,
                api,
                MemKind::from_u8(KIND),
                rc,
                Placed::plain(out_ptr(p), size as u64),
            )
        },
    )
}

pub unsafe fn malloc_pitch(
    api: Api,
    real: MallocPitchFn,
    p: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> c_int {
    hooked(
        || real(p, pitch, width, height),
        |rc, me| {
            // The memory reserved is pitch x height; on failure, what was asked for.
            let size = if rc == 0 && !pitch.is_null() {
                (*pitch as u64).saturating_mul(height as u64)
            } else {
                (width as u64).saturating_mul(height as u64)
            };
            on_alloc(
                me,
                api,
                MemKind::Device,
                rc,
                Placed::plain(out_ptr(p), size),
            )
        },
    )
}

pub unsafe fn malloc_3d(
    api: Api,
    real: Malloc3dFn,
    pp: *mut CudaPitchedPtr,
    extent: CudaExtent,
) -> c_int {
    hooked(
        || real(pp, extent),
        |rc, me| {
            let (addr, size) = if rc == 0 && !pp.is_null() {
                let v = *pp;
                let bytes = (v.pitch as u64)
                    .saturating_mul(extent.height as u64)
                    .saturating_mul(extent.depth as u64);
                (v.ptr as u64, bytes)
            } else {
                let asked = (extent.width as u64)
                    .saturating_mul(extent.height as u64)
                    .saturating_mul(extent.depth as u64);
                (0, asked)
            };
            on_alloc(me, api, MemKind::Device, rc, Placed::plain(addr, size))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_constants_are_the_trace_numbers() {
        assert_eq!(MemKind::from_u8(DEVICE), MemKind::Device);
        assert_eq!(MemKind::from_u8(MANAGED), MemKind::Managed);
        assert_eq!(MemKind::from_u8(PINNED_HOST), MemKind::PinnedHost);
    }
}
