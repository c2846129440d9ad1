//! Frameworks' own allocator entry points: tensors, not the segments their caching
//! allocators keep. PyTorch's caching allocator reports every block it hands out
//! (`alloc_size > 0`) and takes back (`< 0`) to `c10::reportMemoryUsageToProfiler`, defined
//! and exported by `libc10.so` and called through the PLT from `libc10_cuda.so` (and
//! `libtorch_cpu.so`, for CPU tensors), with the allocator's own totals after the change.
//! Our definition of the same name, preloaded, comes first; it records the tensor and
//! calls `libc10.so`'s (`RTLD_NEXT`), so `torch.profiler`'s memory profiling still works.
//!
//! ```text
//!  libc10_cuda.so: alloc_found_block ─► reportMemoryUsageToProfiler(ptr, +size, alloc, resv, dev)
//!                                        └► here: CPU? forward.  CUDA: Event{Tensor} ─► queue
//!                                                                └► libc10.so's own (RTLD_NEXT)
//! ```
//!
//! The allocator holds its own lock (and often the GIL) while it calls: nothing here takes
//! a lock, allocates, or calls Python or CUDA, but for the first call's lookup of the real
//! function (the dynamic loader's lock, once per process). The stack is captured as for any event
//! (frame pointers or the unwind cache; Python frames read from the thread's state). The
//! real function is looked up on the first call (the shim is loaded before `libc10.so`), with
//! `RTLD_NEXT` or, where Python loaded PyTorch with `RTLD_LOCAL` and `RTLD_NEXT` cannot see
//! it, in the loaded libraries' own symbol tables.
//!
//! ABI (torch 2.15.0, read from its `libc10.so`): `void(void* ptr, int64_t alloc_size,
//! size_t total_allocated, size_t total_reserved, c10::Device device)`. `c10::Device` is
//! two `int8_t`s, type (0 CPU, 1 CUDA) then index, passed in one register's low 16 bits.
//! Releases before 2.1 passed the totals as `int64_t` (mangled `...EPvlllNS_6DeviceE`):
//! the same registers, so one body serves both names.
//!
//! When the allocator gives up (after freeing its cache and retrying), it calls
//! `c10::reportOutOfMemoryToProfiler(int64_t alloc_size, size_t total_allocated, size_t
//! total_reserved, c10::Device)` just before it throws `OutOfMemoryError`, also with
//! expandable segments, where no CUDA call fails. That one is recorded as a failed
//! allocation of kind `tensor` (the block size asked, the allocator's totals in `stream`
//! and `pool`, the device's free and total memory read as PyTorch reads them for its
//! message) and forwarded the same way.

use super::alloc::on_failure;
use super::record::{hooked, record, Rec};
use crate::capture::figures;
use crate::sys::clock;
use crate::sys::dl;
use crate::sys::event::{EventKind, OUT_OF_MEMORY, TENSOR_FREE};
use crate::sys::hooklist::Api;
use gpumemprof_format::{MemKind, FRAMEWORK_PYTORCH};
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::AtomicPtr;

/// Both names' signature, with the totals as the register bits they are.
type ReportFn = unsafe extern "C" fn(*mut c_void, i64, u64, u64, u16);

/// `c10::DeviceType::CUDA`.
const CUDA: u8 = 1;

const NAME: &CStr = c"_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";
const NAME_OLD: &CStr = c"_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE";

static NEXT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static NEXT_OLD: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The next definition of `name` after the shim (`libc10.so`'s, also when Python loaded it
/// with `RTLD_LOCAL`), found once; `None` if there is none (then the call is only recorded).
#[inline]
fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> Option<ReportFn> {
    let p = dl::next_cached(slot, name)?;
    // SAFETY: the symbol of that name has this signature (see the module comment).
    Some(unsafe { std::mem::transmute::<*mut c_void, ReportFn>(p) })
}

#[inline(always)]
fn report(
    slot: &AtomicPtr<c_void>,
    name: &CStr,
    ptr: *mut c_void,
    alloc_size: i64,
    allocated: u64,
    reserved: u64,
    device: u16,
) {
    let forward = || {
        if let Some(f) = next(slot, name) {
            // SAFETY: the caller's arguments, passed on unchanged.
            unsafe { f(ptr, alloc_size, allocated, reserved, device) }
        }
    };
    // CPU tensors (libtorch_cpu.so) and anything but CUDA: straight through.
    if device as u8 != CUDA || alloc_size == 0 {
        return forward();
    }
    hooked(forward, |(), me| {
        // The allocator reports under its own lock, which the next thread to take the
        // block takes after: a release is stamped as before one (`now_before_release`).
        let t = if alloc_size < 0 {
            clock::now_before_release()
        } else {
            clock::now()
        };
        let mut r = Rec::new(EventKind::Tensor, Api::_None, t);
        r.mem = MemKind::Tensor;
        r.result = u32::from(FRAMEWORK_PYTORCH);
        r.device = i32::from((device >> 8) as u8 as i8);
        r.address = ptr as u64;
        r.size = alloc_size.unsigned_abs();
        r.aux = if alloc_size < 0 { TENSOR_FREE } else { 0 };
        r.stream = allocated;
        r.pool = reserved;
        figures::tensor(r.device, allocated, reserved);
        record(me, r);
    });
}

/// `c10::reportMemoryUsageToProfiler(void*, int64_t, size_t, size_t, c10::Device)`.
#[export_name = "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE"]
pub extern "C" fn report_memory_usage(
    ptr: *mut c_void,
    alloc_size: i64,
    allocated: u64,
    reserved: u64,
    device: u16,
) {
    report(&NEXT, NAME, ptr, alloc_size, allocated, reserved, device);
}

/// The same, as releases before 2.1 named it (totals as `int64_t`).
#[export_name = "_ZN3c1027reportMemoryUsageToProfilerEPvlllNS_6DeviceE"]
pub extern "C" fn report_memory_usage_old(
    ptr: *mut c_void,
    alloc_size: i64,
    allocated: i64,
    reserved: i64,
    device: u16,
) {
    // The same bits: forwarded unchanged.
    let (a, r) = (allocated as u64, reserved as u64);
    report(&NEXT_OLD, NAME_OLD, ptr, alloc_size, a, r, device);
}

const OOM_NAME: &CStr = c"_ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE";
static NEXT_OOM: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// `c10::reportOutOfMemoryToProfiler(int64_t, size_t, size_t, c10::Device)`: the allocator
/// refused a block of `alloc_size` bytes with `allocated` in tensors and `reserved` in
/// segments; `OutOfMemoryError` follows.
#[export_name = "_ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE"]
pub extern "C" fn report_out_of_memory(
    alloc_size: i64,
    allocated: u64,
    reserved: u64,
    device: u16,
) {
    type OomFn = unsafe extern "C" fn(i64, u64, u64, u16);
    let forward = || {
        if let Some(p) = dl::next_cached(&NEXT_OOM, OOM_NAME) {
            // SAFETY: the symbol of that name has this signature; the caller's arguments.
            unsafe {
                std::mem::transmute::<*mut c_void, OomFn>(p)(
                    alloc_size, allocated, reserved, device,
                )
            }
        }
    };
    if device as u8 != CUDA {
        return forward();
    }
    let t = clock::now();
    hooked(forward, |(), me| {
        let index = i32::from((device >> 8) as u8 as i8);
        let size = alloc_size.max(0) as u64;
        let rc = OUT_OF_MEMORY as c_int;
        on_failure(
            me,
            Api::_None,
            MemKind::Tensor,
            rc,
            t,
            size,
            allocated,
            reserved,
            index,
        );
    });
}
