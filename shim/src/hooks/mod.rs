//! The hooks: the exported overrides the program's calls bind to, expanded from the one
//! hook list (`sys/hooklist.rs`), with the slots of the real functions and the wrappers
//! the `dlsym` and resolver doors hand out.
//!
//! The per-function semantics (what an argument means, which memory kind) live in the
//! handler modules: `alloc.rs` (malloc/free shapes shared by runtime, driver and HIP),
//! `vmm.rs` (virtual memory management, host registration, the driver's pitch call),
//! `resolver.rs` (the driver's `cuGetProcAddress`); what every handler shares (the guard,
//! errno, `catch_unwind`, the event) is in `record.rs`. Besides them: `dlsym.rs` (the
//! `dlsym`/`dlvsym` overrides), `nvtx.rs` (the NVTX injection callbacks), `framework.rs`
//! (PyTorch's allocator's tensors, through `c10::reportMemoryUsageToProfiler`),
//! `tensorflow.rs` (TensorFlow's BFC allocator's `AllocateRaw`/`DeallocateRaw`), `api.rs` (the
//! public C API of include/gpumemprof.h). This is the top layer: nothing below imports it.
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
mod api;
pub mod device;
pub mod dlsym;
mod framework;
mod nvtx;
pub mod record;
pub mod resolver;
mod tensorflow;
pub mod vmm;

use crate::sys::dl;
use crate::sys::hooklist::hook_list;
pub use crate::sys::hooklist::{Api, Family};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// A hooked function with the places of its real implementation and its two wrappers.
pub struct HookInfo {
    pub api: Api,
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
        // Where RTLD_NEXT does not look, the library may still be loaded: a library opened
        // with RTLD_LOCAL (ctypes, a Python extension) links it, and its call bound to our
        // export because preloaded objects come first in every lookup.
        let p = dl::next_definition(self.name);
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

macro_rules! hook_wrappers {
    ($(
        $family:ident fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) -> $ret:ty
            , missing = $missing:expr, handler = $handler:path, role = $role:literal;
    )*) => {
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

        /// Every hooked function, in table order (`HOOKS[id - 1]`).
        pub static HOOKS: &[HookInfo] = &[
            $(HookInfo {
                api: Api::$name,
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

hook_list!(hook_wrappers);

/// The `dlsym` door: `p` is what the real `dlsym(handle, name)` returned. For an exact
/// hooked name, binds `p` as the real function and returns the wrapper; the wrappers
/// themselves, functions of other libraries under the same name (a second binding), and
/// everything while another copy of the shim records (`session::one_copy`) are returned
/// untouched.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
pub unsafe fn substitute(name: *const c_char, p: *mut c_void) -> *mut c_void {
    // Another copy of the shim records: hand out what the lookup found.
    if p.is_null() || name.is_null() || crate::session::standing_down() {
        return p;
    }
    // Every hooked name starts with "cu" or "hip": one byte rejects nearly all lookups.
    let first = *name as u8;
    if first != b'c' && first != b'h' {
        return p;
    }
    let wanted = CStr::from_ptr(name).to_bytes();
    let Some(h) = HOOKS.iter().find(|h| h.slots.name.to_bytes() == wanted) else {
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
    }

    #[test]
    fn the_wrappers_follow_the_hook_list() {
        for (i, h) in HOOKS.iter().enumerate() {
            assert_eq!(h.api.id() as usize, i + 1, "{}", h.api.name());
            assert_eq!(h.slots.name.to_bytes(), h.api.name().as_bytes());
        }
        assert_eq!(HOOKS.len(), crate::sys::hooklist::APIS.len());
    }
}
