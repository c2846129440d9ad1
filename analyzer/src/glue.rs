//! Python first: which native frames of a stack with Python frames are the interpreter's
//! or a binding layer's glue, hidden by default so that the user's Python lines come first
//! (memray's default); `--native` shows every frame.
//!
//! A stack with Python frames is shown as its Python frames, innermost first, under the
//! native frames above the innermost Python frame that are not glue (the library code the
//! Python line called: PyTorch's allocator, a C extension). Native frames between and
//! below Python frames are the interpreter running them and are left out.
//!
//! Glue is recognised by module (the interpreter's executable or `libpython`, libffi,
//! ctypes' extension module) and, where the module is unknown or the interpreter is linked
//! into another executable, by function name (CPython's `Py`/`_Py` API and its static
//! helpers seen in stacks, libffi's `ffi_call`, pybind11's dispatcher).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static NATIVE: AtomicBool = AtomicBool::new(false);

/// `--native`: show every native frame of stacks with Python frames.
pub fn set_native(native: bool) {
    NATIVE.store(native, Ordering::Relaxed);
}

/// Whether stacks with Python frames are shown Python first (the default).
pub fn python_first() -> bool {
    !NATIVE.load(Ordering::Relaxed)
}

/// CPython's functions that tear the interpreter down (3.9 to 3.13): what a free made
/// under one of them freed is memory the program held until its code finished.
pub const TEARDOWN_FUNCTIONS: &[&str] = &[
    "Py_FinalizeEx",
    "Py_Finalize",
    "_Py_Finalize",
    "Py_EndInterpreter",
    "finalize_modules",
    "_PyImport_Cleanup",
];

/// Whether `function` is one of CPython's teardown functions (`TEARDOWN_FUNCTIONS`).
pub fn tears_down(function: &str) -> bool {
    TEARDOWN_FUNCTIONS.contains(&function)
}

/// Module file names (their start) of the interpreter and of ctypes' call machinery.
const GLUE_MODULES: &[&str] = &["libpython", "python", "libffi", "_ctypes."];

/// Function names (their start) of the interpreter's and the binding layers' frames.
const GLUE_FUNCTIONS: &[&str] = &[
    "_Py",
    "pymain_",
    "cfunction_",
    "method_vectorcall",
    "slot_tp_",
    "ffi_call",
    "_ctypes_",
    "_call_function_pointer",
    "pybind11::cpp_function::dispatcher",
    "pybind11::cpp_function::initialize",
];

/// Whether a native frame, in `module` (its path) and `function` (demangled), is
/// interpreter or binding glue (see the module comment).
pub fn is_glue(module: Option<&str>, function: Option<&str>) -> bool {
    let module = module
        .and_then(|m| Path::new(m).file_name())
        .and_then(|n| n.to_str());
    if module.is_some_and(|m| GLUE_MODULES.iter().any(|g| m.starts_with(g))) {
        return true;
    }
    let Some(function) = function else {
        return false;
    };
    GLUE_FUNCTIONS.iter().any(|g| function.starts_with(g)) || is_python_api(function)
}

/// CPython's public API names: `Py` then an upper-case letter, a word and `_`
/// (`PyEval_EvalCode`, `PyObject_Call`, `PyCFuncPtr_call`).
fn is_python_api(function: &str) -> bool {
    let Some(rest) = function.strip_prefix("Py") else {
        return false;
    };
    rest.starts_with(|c: char| c.is_ascii_uppercase())
        && rest
            .split_once('_')
            .is_some_and(|(word, _)| word.chars().all(|c| c.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native<'a>(
        module: Option<&'a str>,
        function: Option<&'a str>,
    ) -> (Option<&'a str>, Option<&'a str>) {
        (module, function)
    }

    #[test]
    fn interpreter_and_ctypes_frames_are_glue_library_frames_are_not() {
        let glue = [
            native(Some("/usr/lib/x86_64-linux-gnu/libffi.so.8"), None),
            native(Some("/usr/bin/python3.11"), Some("main")),
            native(Some("/opt/py/lib/libpython3.11.so.1.0"), Some("run_mod")),
            native(
                Some("/opt/py/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"),
                Some("PyCFuncPtr_call"),
            ),
            native(Some("/app/embedded"), Some("_PyEval_EvalFrameDefault")),
            native(Some("/app/embedded"), Some("PyEval_EvalCode")),
            native(Some("/app/embedded"), Some("PyObject_Vectorcall")),
            native(None, Some("pymain_run_python")),
            native(
                Some("/site-packages/torch/lib/libtorch_python.so"),
                Some("pybind11::cpp_function::dispatcher"),
            ),
        ];
        for f in &glue {
            assert!(is_glue(f.0, f.1), "{f:?}");
        }
        let kept = [
            native(
                Some("/site-packages/torch/lib/libc10_cuda.so"),
                Some("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
            ),
            native(
                Some("/site-packages/torch/lib/libtorch_python.so"),
                Some("THPVariable_add"),
            ),
            native(Some("/app/libmodel.so"), Some("PyTorchStyleHelper")),
            native(Some("/app/libmodel.so"), Some("device_alloc")),
            native(Some("/app/libmodel.so"), None),
        ];
        for f in &kept {
            assert!(!is_glue(f.0, f.1), "{f:?}");
        }
    }
}
