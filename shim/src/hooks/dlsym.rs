//! The `dlsym` and `dlvsym` the program meets: a few instructions of assembly that jump
//! to the real function for `RTLD_NEXT` and `RTLD_DEFAULT` (so the caller stays the
//! program), and for real handles the real lookup followed by `substitute` (the hook
//! table's wrapper for an exact hooked name). Why it is assembly: `sys/dl.rs`.

use crate::sys::dl::{
    gpumemprof_resolve_real_dlsym, gpumemprof_resolve_real_dlvsym, real_dlsym, real_dlvsym,
    GPUMEMPROF_REAL_DLSYM, GPUMEMPROF_REAL_DLVSYM,
};
use std::ffi::{c_char, c_void};

/// `dlsym` on a real handle: tail-called by the assembly entry point.
unsafe extern "C" fn gpumemprof_dlsym_handle(
    handle: *mut c_void,
    name: *const c_char,
) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    let p = real(handle, name);
    super::substitute(name, p)
}

unsafe extern "C" fn gpumemprof_dlvsym_handle(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    let Some(real) = real_dlvsym() else {
        return std::ptr::null_mut();
    };
    let p = real(handle, name, version);
    super::substitute(name, p)
}

// The exported entry points. RTLD_NEXT is (void*)-1 and RTLD_DEFAULT is 0: for those,
// jump to the real function with the caller's return address untouched; otherwise jump
// to the Rust handler above. If the real function is not known yet, find it first
// (keeping the argument registers; three pushes keep the stack 16-byte aligned at the
// call) and then jump; if it cannot be found, return NULL.

/// The `dlsym` override (see the module documentation).
///
/// # Safety
/// The C contract of `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(_handle: *mut c_void, _name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "lea rax, [rdi + 1]",
        "cmp rax, 1",
        "jbe 2f",
        "jmp {handle}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {resolve}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "ret",
        handle = sym gpumemprof_dlsym_handle,
        real = sym GPUMEMPROF_REAL_DLSYM,
        resolve = sym gpumemprof_resolve_real_dlsym,
    )
}

/// The `dlvsym` override (see the module documentation).
///
/// # Safety
/// The C contract of `dlvsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlvsym(
    _handle: *mut c_void,
    _name: *const c_char,
    _version: *const c_char,
) -> *mut c_void {
    std::arch::naked_asm!(
        "lea rax, [rdi + 1]",
        "cmp rax, 1",
        "jbe 2f",
        "jmp {handle}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {resolve}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "ret",
        handle = sym gpumemprof_dlvsym_handle,
        real = sym GPUMEMPROF_REAL_DLVSYM,
        resolve = sym gpumemprof_resolve_real_dlvsym,
    )
}
