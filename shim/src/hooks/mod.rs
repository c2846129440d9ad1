//! The hook table and the recording helpers every hook shares.
//!
//! Every hooked function is listed once, in `hook_table!` below. That one list
//! generates: the exported `extern "C"` override, a second wrapper handed out by the
//! `dlsym` override and the driver's resolver (bound to the real function those
//! returned), the `Api` id written into the trace, the header's `apis` table, the names
//! `dlsym` substitutes, and the README's coverage table (checked by a test). The
//! per-function semantics (what an argument means, which memory kind) live in the
//! handler modules: `alloc.rs` (malloc/free shapes shared by runtime, driver and HIP),
//! `vmm.rs` (virtual memory management, host registration, the driver's pitch call),
//! `resolver.rs` (the driver's `cuGetProcAddress`).
//!
//! Each wrapper: find the real function (or return the API's own "not available"
//! error, never a call through NULL); if this thread is already inside the shim (a
//! runtime call that reaches a hooked driver function), call it and return, so one
//! allocation is recorded once, at the layer the program called; otherwise call it,
//! then record what happened. Out-parameters and return codes are the real function's,
//! untouched. Recording never panics into C (`catch_unwind`).
//!
//! Two doors lead to the wrappers besides the exports (see `dlsym.rs`, `resolver.rs`):
//! `dlsym(handle, name)` for an exact hooked name returns `bound::<name>` after binding
//! the handle's function to `Slots::bound`; the driver's resolver returns it when the
//! pointer it resolved is that bound real function.

pub mod alloc;
pub mod device;
pub mod dlsym;
pub mod resolver;
pub mod vmm;

use crate::clock;
use crate::config::MAX_STACK_DEPTH;
use crate::event::{Event, EventKind};
use crate::guard::Guard;
use crate::intern;
use crate::lifecycle;
use crate::stack;
use gpumemprof_format::MemKind;
use std::ffi::{c_char, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Which library a hooked function belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Family {
    Runtime = 0,
    Driver = 1,
    Hip = 2,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Runtime => "runtime",
            Family::Driver => "driver",
            Family::Hip => "hip",
        }
    }
    pub fn library(self) -> &'static str {
        match self {
            Family::Runtime => "libcudart.so",
            Family::Driver => "libcuda.so.1",
            Family::Hip => "libamdhip64.so",
        }
    }
}

pub struct HookInfo {
    pub api: Api,
    pub name: &'static str,
    pub family: Family,
    /// What the function does, for the coverage table.
    pub role: &'static str,
    pub slots: &'static Slots,
    /// The exported override, and the wrapper of the bound real function.
    pub export_fn: fn() -> *mut c_void,
    pub bound_fn: fn() -> *mut c_void,
}

/// Where a hooked function's real implementation is found.
pub struct Slots {
    name: &'static CStr,
    family: Family,
    /// For the export: `dlsym(RTLD_NEXT, name)` on first use (the shim links no CUDA
    /// library, and CUDA may be loaded after the shim).
    next: AtomicPtr<c_void>,
    /// For the `dlsym`/resolver door: the first real function a handle or the resolver
    /// returned under this name.
    bound: AtomicPtr<c_void>,
}

impl Slots {
    pub const fn new(name: &'static CStr, family: Family) -> Slots {
        Slots {
            name,
            family,
            next: AtomicPtr::new(std::ptr::null_mut()),
            bound: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    #[inline]
    pub fn next(&self) -> Option<*mut c_void> {
        let p = self.next.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        self.resolve_next()
    }

    #[cold]
    fn resolve_next(&self) -> Option<*mut c_void> {
        let mut p = dlsym::lookup(libc::RTLD_NEXT, self.name);
        if p.is_null() {
            // The library is loaded, but not where RTLD_NEXT looks: a library opened with
            // RTLD_LOCAL (ctypes, a Python extension) links it, and its call bound to our
            // export because preloaded objects come first in every lookup.
            p = dlsym::find_local(self.name);
        }
        if p.is_null() {
            return None;
        }
        device::note_library(self.family, p);
        self.next.store(p, Ordering::Release);
        Some(p)
    }

    #[inline]
    pub fn bound(&self) -> Option<*mut c_void> {
        let p = self.bound.load(Ordering::Acquire);
        (!p.is_null()).then_some(p)
    }

    /// Binds `real` unless another function is bound already; true if `real` is (now)
    /// the bound function.
    pub fn bind(&self, real: *mut c_void) -> bool {
        match self.bound.compare_exchange(
            std::ptr::null_mut(),
            real,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                device::note_library(self.family, real);
                true
            }
            Err(current) => current == real,
        }
    }
}

macro_rules! hook_table {
    ($(
        $family:ident fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty
            , missing = $missing:expr, handler = $handler:path, role = $role:literal;
    )*) => {
        /// A hooked function's id in the trace (the header's `apis` maps it to a name).
        /// Ids follow this table's order; new entries go at the end.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u16)]
        pub enum Api { _None = 0, $($name,)* }

        /// Where each function's real implementation is kept.
        #[allow(non_upper_case_globals)]
        pub mod slots {
            use super::*;
            $(
                pub static $name: Slots = Slots::new(
                    match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                        Ok(c) => c,
                        Err(_) => panic!("hook name"),
                    },
                    Family::$family,
                );
            )*
        }

        /// Every hooked function, in table order.
        pub static HOOKS: &[HookInfo] = &[
            $(HookInfo {
                api: Api::$name,
                name: stringify!($name),
                family: Family::$family,
                role: $role,
                slots: &slots::$name,
                export_fn: || exports::$name as *const () as *mut c_void,
                bound_fn: || bound::$name as *const () as *mut c_void,
            },)*
        ];

        /// The exported overrides: what the dynamic linker binds a program's calls to.
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub mod exports {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[no_mangle]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    match slots::$name.next() {
                        Some(f) => {
                            // SAFETY: the symbol of that name has this C signature.
                            let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute(f);
                            $handler(Api::$name, f, $($arg),*)
                        }
                        None => $missing,
                    }
                }
            )*
        }

        /// The wrappers `dlsym` and the resolver hand out, calling the bound function.
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub mod bound {
            #[allow(unused_imports)]
            use super::*;
            $(
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    match slots::$name.bound() {
                        Some(f) => {
                            // SAFETY: as for the export.
                            let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute(f);
                            $handler(Api::$name, f, $($arg),*)
                        }
                        None => $missing,
                    }
                }
            )*
        }
    };
}

use alloc::{CudaExtent, CudaPitchedPtr, DEVICE, MANAGED, PINNED_HOST};
use std::os::raw::{c_int, c_uint};
type Stream = *mut c_void;
/// `CUdeviceptr`, `CUmemGenericAllocationHandle` (and HIP's handle pointer).
type U64 = u64;

/// Returned when the runtime cannot be found: `cudaErrorInsufficientDriver` (also
/// `hipErrorInsufficientDriver`), what a runtime answers when it cannot reach a driver.
pub const CUDART_MISSING: c_int = 35;
pub const HIP_MISSING: c_int = 35;
/// Returned when a driver function cannot be found: `CUDA_ERROR_NOT_FOUND`.
pub const DRIVER_MISSING: c_int = 500;

hook_table! {
    Runtime fn cudaMalloc(p: *mut *mut c_void, size: usize) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
    Runtime fn cudaFree(ptr: *mut c_void) -> c_int,
        missing = CUDART_MISSING, handler = alloc::free, role = "free (device, managed)";
    Runtime fn cudaMallocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
    Runtime fn cudaMallocAsync_ptsz(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation (per-thread default stream)";
    Runtime fn cudaFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = alloc::free_async, role = "stream-ordered free";
    Runtime fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = alloc::free_async, role = "stream-ordered free (per-thread default stream)";
    Runtime fn cudaMallocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
    Runtime fn cudaMallocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
    Runtime fn cudaMallocPitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_pitch, role = "pitched 2D device allocation (pitch x height bytes)";
    Runtime fn cudaMalloc3D(pp: *mut CudaPitchedPtr, extent: CudaExtent) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_3d, role = "pitched 3D device allocation (pitch x height x depth bytes)";
    Runtime fn cudaMallocHost(p: *mut *mut c_void, size: usize) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc::<PINNED_HOST>, role = "pinned host allocation";
    Runtime fn cudaHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = CUDART_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
    Runtime fn cudaFreeHost(ptr: *mut c_void) -> c_int,
        missing = CUDART_MISSING, handler = alloc::free, role = "free (pinned host)";

    Driver fn cuMemAlloc_v2(p: *mut *mut c_void, size: usize) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
    Driver fn cuMemAllocPitch_v2(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, elem: c_uint) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::malloc_pitch_elem, role = "pitched 2D device allocation (pitch x height bytes)";
    Driver fn cuMemAllocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
    Driver fn cuMemAllocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
    Driver fn cuMemAllocAsync_ptsz(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation (per-thread default stream)";
    Driver fn cuMemAllocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
    Driver fn cuMemAllocFromPoolAsync_ptsz(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool (per-thread default stream)";
    Driver fn cuMemFree_v2(ptr: *mut c_void) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::free, role = "free (device, managed)";
    Driver fn cuMemFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::free_async, role = "stream-ordered free";
    Driver fn cuMemFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::free_async, role = "stream-ordered free (per-thread default stream)";
    Driver fn cuMemHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
    Driver fn cuMemAllocHost_v2(p: *mut *mut c_void, size: usize) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::malloc::<PINNED_HOST>, role = "pinned host allocation";
    Driver fn cuMemFreeHost(ptr: *mut c_void) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::free, role = "free (pinned host)";
    Driver fn cuMemHostRegister_v2(ptr: *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::host_register, role = "pinning of existing host memory (pinned host)";
    Driver fn cuMemHostUnregister(ptr: *mut c_void) -> c_int,
        missing = DRIVER_MISSING, handler = alloc::free, role = "unpinning (pinned host)";
    Driver fn cuMemCreate(handle: *mut U64, size: usize, prop: *const vmm::AllocationProp, flags: U64) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::create, role = "physical memory handle (VMM; counted when mapped)";
    Driver fn cuMemRelease(handle: U64) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::release, role = "release of a physical memory handle";
    Driver fn cuMemMap(ptr: U64, size: usize, offset: usize, handle: U64, flags: U64) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::map, role = "mapping of a handle: device memory in use";
    Driver fn cuMemUnmap(ptr: U64, size: usize) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::unmap, role = "unmapping: frees the mappings in the range";
    Driver fn cuMemAddressReserve(p: *mut U64, size: usize, align: usize, addr: U64, flags: U64) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::reserve, role = "address-space reservation (never counted as memory)";
    Driver fn cuMemAddressFree(ptr: U64, size: usize) -> c_int,
        missing = DRIVER_MISSING, handler = vmm::address_free, role = "release of an address-space reservation";
    Driver fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: U64) -> c_int,
        missing = DRIVER_MISSING, handler = resolver::resolve_v1, role = "entry-point resolver: hands out the hooked functions";
    Driver fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: U64, status: *mut c_int) -> c_int,
        missing = DRIVER_MISSING, handler = resolver::resolve_v2, role = "entry-point resolver (behind `cudaGetDriverEntryPoint`): hands out the hooked functions";

    Hip fn hipMalloc(p: *mut *mut c_void, size: usize) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc::<DEVICE>, role = "device allocation";
    Hip fn hipFree(ptr: *mut c_void) -> c_int,
        missing = HIP_MISSING, handler = alloc::free, role = "free (device, managed)";
    Hip fn hipMallocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc_async, role = "stream-ordered device allocation";
    Hip fn hipFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = HIP_MISSING, handler = alloc::free_async, role = "stream-ordered free";
    Hip fn hipMallocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc_from_pool, role = "device allocation from a memory pool";
    Hip fn hipMallocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc_flags::<MANAGED>, role = "managed (unified) allocation";
    Hip fn hipHostMalloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc_flags::<PINNED_HOST>, role = "pinned host allocation";
    Hip fn hipHostFree(ptr: *mut c_void) -> c_int,
        missing = HIP_MISSING, handler = alloc::free, role = "free (pinned host)";
    Hip fn hipExtMallocWithFlags(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = HIP_MISSING, handler = alloc::malloc_flags::<DEVICE>, role = "device allocation with flags";
    Hip fn hipMemCreate(handle: *mut U64, size: usize, prop: *const vmm::AllocationProp, flags: U64) -> c_int,
        missing = HIP_MISSING, handler = vmm::create, role = "physical memory handle (VMM; counted when mapped)";
    Hip fn hipMemRelease(handle: U64) -> c_int,
        missing = HIP_MISSING, handler = vmm::release, role = "release of a physical memory handle";
    Hip fn hipMemMap(ptr: U64, size: usize, offset: usize, handle: U64, flags: U64) -> c_int,
        missing = HIP_MISSING, handler = vmm::map, role = "mapping of a handle: device memory in use";
    Hip fn hipMemUnmap(ptr: U64, size: usize) -> c_int,
        missing = HIP_MISSING, handler = vmm::unmap, role = "unmapping: frees the mappings in the range";
    Hip fn hipMemAddressReserve(p: *mut U64, size: usize, align: usize, addr: U64, flags: U64) -> c_int,
        missing = HIP_MISSING, handler = vmm::reserve, role = "address-space reservation (never counted as memory)";
    Hip fn hipMemAddressFree(ptr: U64, size: usize) -> c_int,
        missing = HIP_MISSING, handler = vmm::address_free, role = "release of an address-space reservation";
}

impl Api {
    pub fn id(self) -> u16 {
        self as u16
    }
}

impl Api {
    /// The family of the function (runtime, driver, HIP).
    #[inline]
    pub fn family(self) -> Family {
        HOOKS
            .get((self as usize).wrapping_sub(1))
            .map_or(Family::Runtime, |h| h.family)
    }
}

/// The `dlsym` door: `p` is what the real `dlsym(handle, name)` returned. For an exact
/// hooked name, binds `p` as the real function and returns the wrapper; the wrappers
/// themselves and functions of other libraries under the same name (a second binding)
/// are returned untouched.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
pub unsafe fn substitute(name: *const c_char, p: *mut c_void) -> *mut c_void {
    if p.is_null() || name.is_null() {
        return p;
    }
    // Every hooked name starts with "cu" or "hip": one byte rejects nearly all lookups.
    let first = *name as u8;
    if first != b'c' && first != b'h' {
        return p;
    }
    let wanted = CStr::from_ptr(name).to_bytes();
    let Some(h) = HOOKS
        .iter()
        .find(|h| h.name.len() == wanted.len() && h.name.as_bytes() == wanted)
    else {
        return p;
    };
    if p == (h.export_fn)() || p == (h.bound_fn)() {
        return p;
    }
    if h.slots.bind(p) {
        (h.bound_fn)()
    } else {
        p
    }
}

/// The header's `apis` table: id, name and family of every hooked function.
pub fn apis_json() -> serde_json::Value {
    serde_json::Value::Array(
        HOOKS
            .iter()
            .map(|h| {
                serde_json::json!({"id": h.api.id(), "name": h.name, "family": h.family.name()})
            })
            .collect(),
    )
}

/// The README's coverage table, generated from `HOOKS`.
pub fn coverage_markdown() -> String {
    let mut s = String::from("| Function | Library | Recorded as |\n|---|---|---|\n");
    for h in HOOKS {
        s.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            h.name,
            h.family.library(),
            h.role
        ));
    }
    s
}

// ---------------------------------------------------------------------------------
// Recording helpers shared by every hook.

/// Runs `call` (the real function) and, unless this thread is already inside the
/// shim, `after(result)` to record it.
#[inline(always)]
pub fn hooked<R: Copy>(call: impl FnOnce() -> R, after: impl FnOnce(R)) -> R {
    let Some(guard) = Guard::enter() else {
        return call();
    };
    let r = call();
    let errno = Errno::save();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| after(r)));
    errno.restore();
    drop(guard);
    r
}

/// Like `hooked`, for frees: the time is stamped *before* the real call, because the
/// memory may belong to another thread's allocation from the instant the call starts.
#[inline(always)]
pub fn hooked_free<R: Copy>(call: impl FnOnce() -> R, after: impl FnOnce(R, u64)) -> R {
    let Some(guard) = Guard::enter() else {
        return call();
    };
    let t0 = clock::now();
    let r = call();
    let errno = Errno::save();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| after(r, t0)));
    errno.restore();
    drop(guard);
    r
}

/// The caller's `errno` as the real function left it: the shim's bookkeeping (opening
/// the trace, a `dlsym`, a thread spawn on first use) must not change what the program
/// reads afterwards.
struct Errno(i32);

impl Errno {
    #[inline(always)]
    fn save() -> Errno {
        // SAFETY: __errno_location returns this thread's errno slot.
        Errno(unsafe { *libc::__errno_location() })
    }
    #[inline(always)]
    fn restore(self) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// What one hooked call did, before the common fields are filled in.
pub struct Rec {
    pub kind: EventKind,
    pub api: Api,
    pub mem: MemKind,
    pub device: i32,
    pub time_ns: u64,
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    pub result: u32,
    pub flags: u8,
    pub aux: u64,
}

impl Rec {
    pub fn new(kind: EventKind, api: Api, time_ns: u64) -> Rec {
        Rec {
            kind,
            api,
            mem: MemKind::Device,
            device: -1,
            time_ns,
            address: 0,
            size: 0,
            stream: 0,
            pool: 0,
            result: 0,
            flags: 0,
            aux: 0,
        }
    }
}

/// Interns `native` with the calling thread's Python frames merged in (if it runs any).
#[inline(never)]
fn intern_with_python(native: &[u64]) -> u32 {
    const MERGED: usize = MAX_STACK_DEPTH + crate::python::MAX_PY_FRAMES;
    let mut merged = [MaybeUninit::<u64>::uninit(); MERGED];
    match crate::python::merge(native, &mut merged) {
        Some(n) => {
            // SAFETY: `merge` initialised the first `n` entries.
            intern::intern(unsafe { std::slice::from_raw_parts(merged.as_ptr() as *const u64, n) })
        }
        None => intern::intern(native),
    }
}

/// Captures and interns the calling thread's stack (with its Python frames, if any).
#[inline(never)]
fn capture_stack(depth: usize) -> u32 {
    let mut frames = [MaybeUninit::<u64>::uninit(); MAX_STACK_DEPTH];
    let (n, memo) = stack::capture_memo(&mut frames[..depth]);
    // SAFETY: `capture_memo` initialised the first `n` entries.
    let frames = unsafe { std::slice::from_raw_parts(frames.as_ptr() as *const u64, n) };
    if crate::python::active() {
        return intern_with_python(frames);
    }
    // The same frames as the last time this memo was met from its start (a loop's
    // allocations): the same id, without hashing them (BENCHMARKS.md, "fourth session").
    let Some(slot) = memo else {
        return intern::intern(frames);
    };
    if let Some(id) = crate::unwind::memo_stack_id(slot, n) {
        return id;
    }
    let id = intern::intern(frames);
    crate::unwind::set_memo_stack_id(slot, n, id);
    id
}

/// Captures and interns the stack, and hands the event to the writer. Inlined into each
/// handler, so the event is built in registers and stored once, into its ring slot.
#[inline(always)]
pub fn record(r: Rec) {
    let Some(p) = lifecycle::pipeline() else {
        return;
    };
    let depth = lifecycle::stack_depth();
    let stack = if depth > 0 { capture_stack(depth) } else { 0 };
    let ev = Event {
        time_ns: r.time_ns,
        address: r.address,
        size: r.size,
        stream: r.stream,
        pool: r.pool,
        aux: if r.kind == EventKind::Free {
            r.flags as u64
        } else {
            r.aux
        },
        stack,
        device: r.device,
        result: r.result,
        api: r.api.id(),
        kind: r.kind,
        mem: r.mem.to_u8(),
    };
    crate::guard::with_thread(|me| p.push(me, &ev));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitution_is_by_exact_name_only() {
        let fake = 0x1234usize as *mut c_void;
        // SAFETY: NUL-terminated names.
        unsafe {
            assert_eq!(substitute(c"cu".as_ptr(), fake), fake);
            assert_eq!(substitute(c"cudnnCreate".as_ptr(), fake), fake);
            assert_eq!(substitute(c"hipMallocX".as_ptr(), fake), fake);
            assert_eq!(substitute(c"PyInit_foo".as_ptr(), fake), fake);
            assert_eq!(
                substitute(c"cuMemAlloc_v2".as_ptr(), std::ptr::null_mut()),
                std::ptr::null_mut()
            );
            // The exported wrapper itself (dlsym on the shim's own handle) stays as is.
            let export = exports::hipMalloc as *const () as *mut c_void;
            assert_eq!(substitute(c"hipMalloc".as_ptr(), export), export);
        }
        assert_eq!(Api::cudaMalloc.family(), Family::Runtime);
        assert_eq!(Api::cuMemMap.family(), Family::Driver);
        assert_eq!(Api::hipMemMap.family(), Family::Hip);
    }

    #[test]
    fn ids_follow_the_table_and_are_unique() {
        for (i, h) in HOOKS.iter().enumerate() {
            assert_eq!(h.api.id() as usize, i + 1, "{}", h.name);
        }
        let json = apis_json();
        assert_eq!(json[0]["name"], "cudaMalloc");
        assert_eq!(json[0]["id"], 1);
    }

    #[test]
    fn readme_coverage_table_is_generated_from_the_hook_table() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md at the repository root");
        let table = coverage_markdown();
        assert!(
            readme.contains(&table),
            "README.md's coverage table is out of date; replace it with:\n{table}"
        );
    }
}
