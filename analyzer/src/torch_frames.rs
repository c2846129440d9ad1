//! A stack as a PyTorch user reads it: the frames of PyTorch's own libraries are its
//! allocator, its dispatcher and its bindings, which say nothing to the user, except three
//! kinds that do, shown under a name of their own:
//!
//! * the **op** that made the tensor: the dispatcher's entry `at::_ops::addmm::call` reads
//!   `aten::addmm` (an overload keeps the name of its entry, `aten::add_Tensor`: where the
//!   op's name ends and the overload's begins is not in the binary); `aten::empty*` and
//!   `aten::new_empty*` only when no other op made it;
//! * the **autograd node** that ran it on a backward thread:
//!   `torch::autograd::generated::AddmmBackward0::apply` reads `AddmmBackward0`;
//! * a library's **workspace**: `at::cuda::getCurrentCUDABlasHandleWithWorkspace` reads
//!   `cuBLAS workspace` (and cuBLASLt's, cuDNN's, cuSOLVER's likewise);
//! * a **step of autograd's engine** that allocates outside any node: a node's gradient
//!   matched to the input it is for (`validate_outputs`: summed to its shape, as a broadcast
//!   bias's gradient is, or converted to its dtype or device) or the gradients of one input
//!   added up (`InputBuffer::add`, a tensor used twice).
//!
//! The Python frames of PyTorch's call machinery (`Module._call_impl`, the optimizer's
//! step wrappers, how `.cuda()` reaches each parameter) are hidden the same way, and so are the process's start-up frames below
//! everything (`_start`, libc's `__libc_start_main`, a thread's entry in libc or libstdc++):
//! they are the same in every stack. `--native` shows every frame as it is.

use std::path::Path;

/// What one frame of PyTorch's is in a stack shown to its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// Not PyTorch's, or kept as it is.
    Keep,
    /// Left out of the default view.
    Hide,
    /// Shown under this name, in this role (`op`, `autograd_node`, `workspace`,
    /// `autograd_step`).
    Named(&'static str, String),
}

/// Library file names (their start) that are PyTorch's own.
const TORCH_LIBRARIES: &[&str] = &["libc10", "libtorch", "libcaffe2"];

/// Libraries whose outermost frames start the process or a thread.
const START_UP_LIBRARIES: &[&str] = &["libc.so", "libc-", "libstdc++", "libpthread", "ld-linux"];

/// Functions that start the process or a thread.
const START_UP_FUNCTIONS: &[&str] = &["_start", "__libc_start_main", "__libc_start_call_main"];

/// A library's workspace, recognised by the function that allocates it.
const WORKSPACES: &[(&str, &str)] = &[
    ("at::cuda::getCurrentCUDABlasLtHandle", "cuBLASLt workspace"),
    ("at::cuda::getCUDABlasLtWorkspace", "cuBLASLt workspace"),
    ("at::cuda::getCurrentCUDABlasHandle", "cuBLAS workspace"),
    ("at::cuda::allocateCUDABlasWorkspace", "cuBLAS workspace"),
    (
        "at::cuda::getCurrentCUDASolverDnHandle",
        "cuSOLVER workspace",
    ),
    ("at::native::getCudnnHandle", "cuDNN workspace"),
    ("at::native::cudnn_convolution", "cuDNN workspace"),
    (
        "at::native::(anonymous namespace)::Workspace",
        "cuDNN workspace",
    ),
];

/// The steps of autograd's engine that allocate outside any node: (function, after the
/// `torch::autograd::` namespace, its name's start; what it makes). The engine runs them
/// after a node returns (`Engine::evaluate_function`), so no node is on the stack.
const AUTOGRAD_STEPS: &[(&str, &str)] = &[
    // `validate_outputs` makes a node's gradient match the input it is for: summed to its
    // shape (`reduce_grad`: a broadcast bias's gradient, over the batch), converted to its
    // dtype, layout or device. One name for all: the op under it says which.
    ("validate_outputs", "gradient matched to its input"),
    (
        "InputMetadata::reduce_grad",
        "gradient matched to its input",
    ),
    (
        "InputMetadata::maybe_reduce",
        "gradient matched to its input",
    ),
    // Several gradients for one input (a tensor used twice) are added up.
    ("InputBuffer::add", "gradients of one input accumulated"),
    (
        "InputBuffer::accumulate",
        "gradients of one input accumulated",
    ),
];

/// PyTorch's Python call machinery: (file suffix, qualified function name).
const PYTHON_MACHINERY: &[(&str, &str)] = &[
    ("torch/nn/modules/module.py", "Module._call_impl"),
    ("torch/nn/modules/module.py", "Module._wrapped_call_impl"),
    // How `.cuda()` and `.to()` reach each parameter.
    ("torch/nn/modules/module.py", "Module._apply"),
    (
        "torch/nn/modules/module.py",
        "Module.cuda.<locals>.<lambda>",
    ),
    ("torch/nn/modules/module.py", "Module.to.<locals>.convert"),
    (
        "torch/optim/optimizer.py",
        "_use_grad_for_differentiable.<locals>._use_grad",
    ),
    (
        "torch/optim/optimizer.py",
        "Optimizer.profile_hook_step.<locals>.wrapper",
    ),
    (
        "torch/utils/_contextlib.py",
        "context_decorator.<locals>.decorate_context",
    ),
    (
        "torch/utils/_contextlib.py",
        "_wrap_generator.<locals>.generator_context",
    ),
];

/// A native frame in `module` (its path) named `function` (as reports show it).
pub fn native(module: Option<&str>, function: Option<&str>) -> Shown {
    let file = module
        .and_then(|m| Path::new(m).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if !TORCH_LIBRARIES.iter().any(|l| file.starts_with(l)) {
        return Shown::Keep;
    }
    let Some(function) = function else {
        return Shown::Hide;
    };
    if let Some(op) = op_name(function) {
        return Shown::Named("op", op);
    }
    if let Some(node) = autograd_node(function) {
        return Shown::Named("autograd_node", node.to_string());
    }
    if let Some(what) = workspace(function) {
        return Shown::Named("workspace", what.to_string());
    }
    if let Some(step) = autograd_step(function) {
        return Shown::Named("autograd_step", step.to_string());
    }
    Shown::Hide
}

/// The named PyTorch frame (`native`'s) of a frame shown with `--native`, whose `role` is
/// unset: for its site.
pub fn named_role(module: Option<&str>, function: Option<&str>) -> Option<&'static str> {
    match native(module, function) {
        Shown::Named(role, _) => Some(role),
        _ => None,
    }
}

/// A Python frame of `file` (as shown) in `function`: hidden when it is PyTorch's call
/// machinery.
pub fn python(file: &str, function: &str) -> Shown {
    let machinery = PYTHON_MACHINERY
        .iter()
        .any(|(f, q)| function == *q && file.ends_with(f));
    if machinery {
        Shown::Hide
    } else {
        Shown::Keep
    }
}

/// Whether a device allocation was made by PyTorch's caching allocator, from its stack's
/// native modules (innermost first, `Symbolizer::native_modules`): the library that asked
/// (`owner::asking_library`) is one of PyTorch's. `None` when no frame says.
pub fn by_torch_allocator<'a>(modules: impl IntoIterator<Item = Option<&'a str>>) -> Option<bool> {
    crate::owner::asking_library(modules).map(is_torch_library)
}

/// Whether a library's file name is one of PyTorch's (`libc10_cuda.so`, `libtorch_cuda.so`).
pub fn is_torch_library(name: &str) -> bool {
    TORCH_LIBRARIES.iter().any(|t| name.starts_with(t))
}

/// Whether an outermost native frame starts the process or a thread.
pub fn start_up(module: Option<&str>, function: Option<&str>) -> bool {
    if function.is_some_and(|f| START_UP_FUNCTIONS.contains(&f)) {
        return true;
    }
    let file = module
        .and_then(|m| Path::new(m).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    START_UP_LIBRARIES.iter().any(|l| file.starts_with(l))
}

/// `aten::addmm` for the dispatcher's `at::_ops::addmm::call` (its `redispatch` and
/// boxed entries are hidden: the same op again).
pub fn op_name(function: &str) -> Option<String> {
    let op = function
        .strip_prefix("at::_ops::")?
        .strip_suffix("::call")?;
    if op.is_empty() || op.contains("::") {
        return None;
    }
    Some(format!("aten::{op}"))
}

/// `AddmmBackward0` for `torch::autograd::generated::AddmmBackward0::apply`, and likewise
/// the hand-written nodes (`torch::autograd::AccumulateGrad::apply`).
pub fn autograd_node(function: &str) -> Option<&str> {
    let rest = function
        .strip_prefix("torch::autograd::generated::")
        .or_else(|| function.strip_prefix("torch::autograd::"))?;
    let node = rest.strip_suffix("::apply")?;
    (!node.is_empty() && !node.contains("::")).then_some(node)
}

/// What a step of autograd's engine outside any node makes (`AUTOGRAD_STEPS`), for its
/// function; a template function's name may start with its return type
/// (`void torch::autograd::validate_outputs_impl<…>`).
pub fn autograd_step(function: &str) -> Option<&'static str> {
    const NS: &str = "torch::autograd::";
    let at = function.find(NS)?;
    let before = &function[..at];
    if !(before.is_empty() || before.ends_with(' ') && !before.trim_end().contains([' ', ':', '<']))
    {
        return None;
    }
    let rest = &function[at + NS.len()..];
    (AUTOGRAD_STEPS.iter())
        .find(|(f, _)| rest.starts_with(f))
        .map(|(_, what)| *what)
}

/// The workspace a function of PyTorch's allocates (`cuBLAS workspace`), if it does.
pub fn workspace(function: &str) -> Option<&'static str> {
    (WORKSPACES.iter())
        .find(|(f, _)| function.starts_with(f))
        .map(|(_, what)| *what)
}

/// Whether a function of PyTorch's runs the backward pass: autograd's engine or a node.
pub fn backward(function: &str) -> bool {
    function.starts_with("torch::autograd::Engine::")
        || function.starts_with("torch::autograd::python::PythonEngine::")
        || autograd_node(function).is_some()
}

/// Whether an op only allocates (`aten::empty`, `aten::empty_strided`, `aten::new_empty`,
/// ...): shown only when no other op made the tensor.
pub fn allocation_op(name: &str) -> bool {
    let op = name.strip_prefix("aten::").unwrap_or(name);
    op.starts_with("empty") || op.starts_with("new_empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: Option<&str> = Some("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so");
    const C10: Option<&str> = Some("/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so");

    /// The stacks of a real job on an H100 (torch 2.11, CUDA 13): PyTorch's segments
    /// under `libc10_cuda`, cuBLAS's own 64 MiB workspace under `libcublas` called from
    /// `libtorch_cuda`.
    #[test]
    fn a_segment_is_the_torch_allocators_when_its_innermost_caller_is_pytorchs() {
        let lib = |name: &'static str| Some(name);
        let cudart = lib("/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13");
        let shim = lib("/opt/gpumemprof/libgpumemprof.so");
        let c10 = lib("/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so");
        let torch_cuda = lib("/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so");
        let cublas = lib("/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13");
        let driver = lib("/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        assert_eq!(by_torch_allocator([c10, torch_cuda]), Some(true));
        assert_eq!(by_torch_allocator([shim, cudart, None, c10]), Some(true));
        assert_eq!(by_torch_allocator([driver, c10]), Some(true));
        assert_eq!(
            by_torch_allocator([cudart, cublas, cublas, torch_cuda, c10]),
            Some(false)
        );
        assert_eq!(by_torch_allocator([lib("/w/train"), c10]), Some(false));
        assert_eq!(by_torch_allocator([shim, cudart, None]), None);
        assert_eq!(by_torch_allocator([]), None);
    }

    #[test]
    fn pytorch_frames_are_ops_nodes_workspaces_or_hidden() {
        let named = |role: &'static str, s: &str| Shown::Named(role, s.to_string());
        assert_eq!(
            native(CPU, Some("at::_ops::addmm::call")),
            named("op", "aten::addmm")
        );
        assert_eq!(
            native(CPU, Some("at::_ops::add_Tensor::call")),
            named("op", "aten::add_Tensor")
        );
        assert_eq!(
            native(CPU, Some("at::_ops::empty_strided::call")),
            named("op", "aten::empty_strided")
        );
        assert_eq!(
            native(CPU, Some("at::_ops::addmm::redispatch")),
            Shown::Hide
        );
        assert_eq!(
            native(
                CPU,
                Some("torch::autograd::generated::AddmmBackward0::apply")
            ),
            named("autograd_node", "AddmmBackward0")
        );
        assert_eq!(
            native(CPU, Some("torch::autograd::AccumulateGrad::apply")),
            named("autograd_node", "AccumulateGrad")
        );
        assert_eq!(
            native(CPU, Some("at::cuda::getCurrentCUDABlasHandleWithWorkspace")),
            named("workspace", "cuBLAS workspace")
        );
        assert_eq!(
            native(
                C10,
                Some("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")
            ),
            Shown::Hide
        );
        assert_eq!(
            native(
                CPU,
                Some("c10::impl::wrap_kernel_functor_unboxed_<…>::call")
            ),
            Shown::Hide
        );
        assert_eq!(
            native(CPU, Some("torch::autograd::InputMetadata::reduce_grad")),
            named("autograd_step", "gradient matched to its input")
        );
        assert_eq!(
            native(
                CPU,
                Some("void torch::autograd::validate_outputs_impl<torch::autograd::Edge>")
            ),
            named("autograd_step", "gradient matched to its input")
        );
        assert_eq!(
            native(CPU, Some("torch::autograd::InputBuffer::add")),
            named("autograd_step", "gradients of one input accumulated")
        );
        // The engine's loop itself is not a step that allocates; nor a function of
        // another namespace that calls into autograd's.
        assert_eq!(
            native(CPU, Some("torch::autograd::Engine::evaluate_function")),
            Shown::Hide
        );
        assert_eq!(
            native(CPU, Some("at::foo<torch::autograd::validate_outputs>")),
            Shown::Hide
        );
        assert_eq!(native(CPU, None), Shown::Hide);
        // Not PyTorch's: kept whatever the name.
        assert_eq!(
            native(Some("/app/libmodel.so"), Some("at::_ops::addmm::call")),
            Shown::Keep
        );
        assert_eq!(native(None, Some("keep_activations")), Shown::Keep);
    }

    #[test]
    fn pytorchs_python_call_machinery_is_hidden_the_users_modules_are_not() {
        assert_eq!(
            python("torch/nn/modules/module.py", "Module._call_impl"),
            Shown::Hide
        );
        assert_eq!(
            python(
                "torch/optim/optimizer.py",
                "Optimizer.profile_hook_step.<locals>.wrapper"
            ),
            Shown::Hide
        );
        assert_eq!(
            python("torch/nn/modules/linear.py", "Linear.forward"),
            Shown::Keep
        );
        assert_eq!(
            python("torch/optim/adam.py", "Adam._init_group"),
            Shown::Keep
        );
        assert_eq!(python("train.py", "Module._call_impl"), Shown::Keep);
    }

    #[test]
    fn start_up_frames_are_libcs_and_the_entry_points() {
        assert!(start_up(Some("/usr/lib/x86_64-linux-gnu/libc.so.6"), None));
        assert!(start_up(
            Some("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
            None
        ));
        assert!(start_up(Some("/usr/bin/python3.11"), Some("_start")));
        assert!(!start_up(Some("/usr/bin/python3.11"), Some("main")));
        assert!(!start_up(Some("/app/train"), Some("train_step")));
        assert!(allocation_op("aten::empty_strided"));
        assert!(allocation_op("aten::new_empty"));
        assert!(!allocation_op("aten::addmm"));
    }
}
