//! The hook table and the recording helpers every hook shares.
//!
//! Every hooked function is listed once, in `hook_table!` below. That one list
//! generates: the exported `extern "C"` override, its lazily resolved "real" function,
//! the `Api` id written into the trace, the header's `apis` table, and the README's
//! coverage table (checked by a test). The per-function semantics (what an argument
//! means, which memory kind) live in the family modules, e.g. `runtime.rs`.
//!
//! Each override: resolve the real function (or return the API's own "not available"
//! error); if this thread is already inside the shim, call it and return; otherwise
//! call it, then record what happened. Out-parameters and return codes are the real
//! function's, untouched. Recording never panics into C (`catch_unwind`).

pub mod runtime;

use crate::clock;
use crate::config::MAX_STACK_DEPTH;
use crate::event::{Event, EventKind};
use crate::guard::Guard;
use crate::intern;
use crate::lifecycle;
use crate::stack;
use gpumemprof_format::MemKind;
use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Which library a hooked function belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Runtime,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Runtime => "runtime",
        }
    }
    pub fn library(self) -> &'static str {
        match self {
            Family::Runtime => "libcudart.so",
        }
    }
}

pub struct HookInfo {
    pub api: Api,
    pub name: &'static str,
    pub family: Family,
    /// What the function does, for the coverage table.
    pub role: &'static str,
}

/// A real function, found with `dlsym(RTLD_NEXT, name)` on first use (the shim links
/// no CUDA library, and CUDA may be loaded after the shim).
pub struct RealFn {
    ptr: AtomicPtr<c_void>,
    name: &'static CStr,
}

impl RealFn {
    pub const fn new(name: &'static CStr) -> RealFn {
        RealFn {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            name,
        }
    }

    #[inline]
    pub fn get(&self) -> Option<*mut c_void> {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> Option<*mut c_void> {
        // SAFETY: dlsym with a valid NUL-terminated name.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() {
            return None;
        }
        self.ptr.store(p, Ordering::Release);
        Some(p)
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

        /// Every hooked function, in table order.
        pub static HOOKS: &[HookInfo] = &[
            $(HookInfo { api: Api::$name, name: stringify!($name), family: Family::$family, role: $role },)*
        ];

        /// The exported overrides.
        #[allow(non_snake_case, clippy::missing_safety_doc)]
        pub mod exports {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[no_mangle]
                pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    static REAL: RealFn = RealFn::new(
                        match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                            Ok(c) => c,
                            Err(_) => panic!("hook name"),
                        },
                    );
                    match REAL.get() {
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
    };
}

use runtime::{CudaExtent, CudaPitchedPtr, CUDART_MISSING};
use std::os::raw::{c_int, c_uint};
type Stream = *mut c_void;

hook_table! {
    Runtime fn cudaMalloc(p: *mut *mut c_void, size: usize) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc::<{ runtime::DEVICE }>, role = "device allocation";
    Runtime fn cudaFree(ptr: *mut c_void) -> c_int,
        missing = CUDART_MISSING, handler = runtime::free, role = "free (device, managed)";
    Runtime fn cudaMallocAsync(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_async, role = "stream-ordered device allocation";
    Runtime fn cudaMallocAsync_ptsz(p: *mut *mut c_void, size: usize, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_async, role = "stream-ordered device allocation (per-thread default stream)";
    Runtime fn cudaFreeAsync(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = runtime::free_async, role = "stream-ordered free";
    Runtime fn cudaFreeAsync_ptsz(ptr: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = runtime::free_async, role = "stream-ordered free (per-thread default stream)";
    Runtime fn cudaMallocFromPoolAsync(p: *mut *mut c_void, size: usize, pool: *mut c_void, stream: Stream) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_from_pool, role = "device allocation from a memory pool";
    Runtime fn cudaMallocManaged(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_flags::<{ runtime::MANAGED }>, role = "managed (unified) allocation";
    Runtime fn cudaMallocPitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_pitch, role = "pitched 2D device allocation (pitch x height bytes)";
    Runtime fn cudaMalloc3D(pp: *mut CudaPitchedPtr, extent: CudaExtent) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_3d, role = "pitched 3D device allocation (pitch x height x depth bytes)";
    Runtime fn cudaMallocHost(p: *mut *mut c_void, size: usize) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc::<{ runtime::PINNED_HOST }>, role = "pinned host allocation";
    Runtime fn cudaHostAlloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> c_int,
        missing = CUDART_MISSING, handler = runtime::malloc_flags::<{ runtime::PINNED_HOST }>, role = "pinned host allocation";
    Runtime fn cudaFreeHost(ptr: *mut c_void) -> c_int,
        missing = CUDART_MISSING, handler = runtime::free, role = "free (pinned host)";
}

impl Api {
    pub fn id(self) -> u16 {
        self as u16
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
    let t0 = clock::now_ns();
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

/// Captures and interns the stack, and hands the event to the writer.
#[inline(never)]
pub fn record(r: Rec) {
    let Some(p) = lifecycle::pipeline() else {
        return;
    };
    let depth = lifecycle::stack_depth();
    let stack = if depth > 0 {
        let mut frames = [MaybeUninit::<u64>::uninit(); MAX_STACK_DEPTH];
        let n = stack::capture(&mut frames[..depth]);
        // SAFETY: `capture` initialised the first `n` entries.
        let frames = unsafe { std::slice::from_raw_parts(frames.as_ptr() as *const u64, n) };
        intern::intern(frames)
    } else {
        0
    };
    p.push(Event {
        kind: r.kind,
        mem: r.mem.to_u8(),
        flags: r.flags,
        api: r.api.id(),
        device: r.device,
        tid: crate::guard::tid(),
        result: r.result,
        time_ns: r.time_ns,
        address: r.address,
        size: r.size,
        stream: r.stream,
        pool: r.pool,
        stack,
        aux: r.aux,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
