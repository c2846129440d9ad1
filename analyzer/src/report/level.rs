//! The two levels a report can count at, and which frame of a stack is the user's.
//!
//! * **Segments**: what the hooks saw the process ask CUDA, HIP or the driver for
//!   (`cudaMalloc`, VMM mappings): what PyTorch calls *reserved*.
//! * **Tensors**: the blocks a framework's caching allocator handed out inside those
//!   segments (`MemKind::Tensor`, from `c10::reportMemoryUsageToProfiler`): what PyTorch
//!   calls *allocated*.
//!
//! A report counts tensors when the trace has them, unless `--level segments` asks for
//! the segments; a trace without tensors is always counted in segments.
//!
//! The **site** of an allocation is the first frame, innermost first, outside the
//! framework and the interpreter: PyTorch's and TensorFlow's libraries and Python files,
//! the CUDA libraries, CPython itself and libffi/ctypes. That is the line the user wrote;
//! the whole stack stays in the report.

use std::path::Path;

use gpumemprof_format::MemKind;

use crate::symbolize::Frame;
use crate::torch_frames;

pub use crate::replay::{has_tensors, MemoryLevel};

/// Library file names (before the first `.so` or version) of the framework, the CUDA
/// libraries, the interpreter and the foreign-function layers.
const NOT_THE_USERS: &[&str] = &[
    "libc10",
    "libtorch",
    "libtensorflow",
    "libjax",
    "libxla",
    "libcudart",
    "libcuda",
    "libamdhip64",
    "libpython",
    "libffi",
    "_ctypes",
    "python",
];

/// A frame of the framework, CUDA or the interpreter (not the user's).
pub fn is_framework(f: &Frame) -> bool {
    if f.python {
        let file = f.file.as_deref().unwrap_or("");
        // Installed packages read from their own folder (`torch/optim/adam.py`).
        return ["torch/", "tensorflow/"]
            .iter()
            .any(|p| file.starts_with(p) || file.contains(&format!("/{p}")))
            || file.starts_with("<frozen ");
    }
    let Some(module) = f.module.as_deref() else {
        return false;
    };
    let name = Path::new(module)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(module);
    NOT_THE_USERS.iter().any(|p| name.starts_with(p))
}

/// A frame that can be the user's line: outside the framework and the interpreter, and
/// not a process's or thread's start-up frame (`_start`, a thread's entry in libc or
/// libstdc++: the same under every stack, shown with `--native`).
fn is_users(f: &Frame) -> bool {
    !is_framework(f)
        && (f.python || !torch_frames::start_up(f.module.as_deref(), f.function.as_deref()))
}

/// `frames` from the site on, for a one-line chain that starts at the user's line; all of
/// them when none is the user's.
pub fn starting_at_site(frames: &[Frame]) -> &[Frame] {
    match frames.iter().position(is_users) {
        Some(i) => &frames[i..],
        None => frames,
    }
}

/// The op that made a tensor (`aten::relu`: the innermost frame of role `op`), when it lies
/// above the user's line: in a one-line chain it tells apart two sites of one line (a
/// layer's output and its activation's).
pub fn op_above_site(frames: &[Frame]) -> Option<&Frame> {
    let site = frames.iter().position(is_users).unwrap_or(frames.len());
    frames[..site].iter().find(|f| f.role == Some("op"))
}

/// The site: the first frame that can be the user's line (innermost first); when every
/// frame is the framework's, the frame that names a library's workspace, else the
/// autograd node, else the step of autograd's engine (`torch_frames`); `None` when there
/// is none of these. With `--native` the frames carry no role, and PyTorch's frames are
/// told by their functions' names the same way.
pub fn site(frames: &[Frame]) -> Option<&Frame> {
    frames.iter().find(|f| is_users(f)).or_else(|| {
        // No line of the user's (autograd's backward threads run none): what PyTorch says
        // the memory is, a library's workspace, else the autograd node that made it.
        let role = |f: &Frame| {
            f.role.or_else(|| {
                (!f.python)
                    .then(|| torch_frames::named_role(f.module.as_deref(), f.function.as_deref()))
                    .flatten()
            })
        };
        ["workspace", "autograd_node", "autograd_step"]
            .iter()
            .find_map(|r| frames.iter().find(|f| role(f) == Some(r)))
    })
}

/// A kind in text: `tensors`, or `device memory`.
pub fn kind_words(kind: &str) -> String {
    if kind == MemKind::Tensor.name() {
        "tensors".to_string()
    } else {
        format!("{kind} memory")
    }
}

/// What one allocation of a kind is called in text: a tensor, or an allocation.
pub fn count_words(kind: &str) -> (&'static str, &'static str) {
    if kind == MemKind::Tensor.name() {
        ("tensor", "tensors")
    } else {
        ("allocation", "allocations")
    }
}

/// ` from FUNCTION at FILE:LINE` for a site's heading, when the site is not the first
/// frame listed under it anyway (framework frames come first); else empty.
pub fn from_site(site: Option<&Frame>, frames: &[Frame]) -> String {
    match site {
        Some(f) if frames.first() != Some(f) => format!(" from {}", f.describe()),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(module: &str, function: &str) -> Frame {
        Frame {
            address: "0x1".into(),
            module: Some(module.into()),
            function: Some(function.into()),
            file: None,
            line: None,
            inlined: false,
            python: false,
            offset: None,
            role: None,
        }
    }

    fn py(file: &str, function: &str) -> Frame {
        Frame {
            module: None,
            file: Some(file.into()),
            python: true,
            ..native("", function)
        }
    }

    #[test]
    fn the_site_skips_the_framework_the_interpreter_and_ctypes() {
        let frames = vec![
            native("/site-packages/torch/lib/libc10_cuda.so", "alloc_block"),
            native("/site-packages/torch/lib/libtorch_cuda.so", "empty_cuda"),
            py("/site-packages/torch/nn/modules/linear.py", "forward"),
            native("/usr/lib/libpython3.11.so.1.0", "_PyEval_EvalFrameDefault"),
            native("/usr/lib/x86_64-linux-gnu/libffi.so.8", "ffi_call"),
            py("/home/me/train.py", "step"),
            py("/home/me/train.py", "main"),
        ];
        assert_eq!(
            site(&frames).and_then(|f| f.function.as_deref()),
            Some("step")
        );
        // A C++ program linked to libc10: its own function.
        let frames = vec![
            native("/w/torch/lib/libc10_cuda.so", "malloc"),
            native("/w/harness", "keep_activations"),
        ];
        assert_eq!(
            site(&frames).and_then(|f| f.function.as_deref()),
            Some("keep_activations")
        );
        // The interpreter's executable (python3.11) is not the user's either.
        assert!(is_framework(&native("/usr/bin/python3.11", "main")));
        assert_eq!(site(&frames[..1]), None);
    }

    #[test]
    fn a_backward_threads_site_is_never_its_entry_point_also_with_every_frame_shown() {
        // As `--native` lists a tensor of autograd's backward thread: no roles, the
        // thread's entry in libstdc++ and libc the only frames outside PyTorch's.
        let cpu = "/site-packages/torch/lib/libtorch_cpu.so";
        let entry = [
            native(cpu, "torch::autograd::Engine::evaluate_function"),
            native(cpu, "torch::autograd::Engine::thread_main"),
            native("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "0xd44a3"),
            native("/usr/lib/x86_64-linux-gnu/libc.so.6", "start_thread"),
        ];
        let node = native(cpu, "torch::autograd::generated::AddmmBackward0::apply");
        let step = native(cpu, "torch::autograd::InputMetadata::reduce_grad");
        let function = |frames: &[Frame]| site(frames).and_then(|f| f.function.clone());
        let mut frames = vec![native(cpu, "at::_ops::mm::call"), node.clone()];
        frames.extend(entry.iter().cloned());
        assert_eq!(function(&frames).as_deref(), node.function.as_deref());
        let mut frames = vec![native(cpu, "at::_ops::sum_dim_IntList::call"), step.clone()];
        frames.extend(entry.iter().cloned());
        assert_eq!(function(&frames).as_deref(), step.function.as_deref());
        // Nothing PyTorch names: no site, not the thread's entry point.
        assert_eq!(site(&entry), None);
        assert_eq!(starting_at_site(&entry).len(), entry.len());
    }
}
