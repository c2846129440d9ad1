//! Where a tensor stack was made, as far as its kind of memory goes: the frames PyTorch
//! runs through when it builds a module, moves it, steps an optimizer, runs the backward
//! pass or hands a library its workspace. Read from every frame of the stack (Python and
//! native, none hidden), so `--native` does not change a kind.

use crate::symbolize::Frame;
use crate::torch_frames;

/// What made a stack, for `kinds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A library's workspace (cuBLAS, cuBLASLt, cuDNN, cuSOLVER).
    Workspace,
    /// Autograd's engine or one of its nodes, or `Tensor.backward` / `torch.autograd.backward`.
    Backward,
    /// An optimizer of `torch.optim` (its step, its state's initialisation).
    Optimizer,
    /// Building a module (`__init__`, `reset_parameters` in `torch/nn`), an `nn.Parameter`,
    /// or moving a module (`.to()`, `.cuda()`, `Module._apply`).
    Module,
    /// None of these: the user's own code and the ops it calls (the forward pass).
    Elsewhere,
}

/// Python functions of `torch/nn/modules/module.py` that move a module's tensors.
const MOVING: &[&str] = &[
    "Module._apply",
    "Module.to",
    "Module.cuda",
    "Module.to_empty",
    "Module.cuda.<locals>.<lambda>",
    "Module.to.<locals>.convert",
];

/// The origin of a stack from all its frames (`Symbolizer::all_frames`), innermost first:
/// the innermost frame that says decides, a workspace over everything.
pub fn origin(frames: &[Frame]) -> Origin {
    let native = |f: &&Frame| !f.python;
    let functions = frames
        .iter()
        .filter(native)
        .filter_map(|f| f.function.as_deref());
    if functions
        .clone()
        .any(|f| torch_frames::workspace(f).is_some())
    {
        return Origin::Workspace;
    }
    if functions.clone().any(torch_frames::backward) {
        return Origin::Backward;
    }
    for f in frames.iter().filter(|f| f.python) {
        let file = f.file.as_deref().unwrap_or("");
        let function = f.function.as_deref().unwrap_or("");
        if python_backward(file, function) {
            return Origin::Backward;
        }
        if file.contains("torch/optim/") {
            return Origin::Optimizer;
        }
        if python_module(file, function) {
            return Origin::Module;
        }
    }
    Origin::Elsewhere
}

/// Whether a stack runs the backward pass (for a free: a free in the backward pass).
pub fn in_backward(frames: &[Frame]) -> bool {
    origin(frames) == Origin::Backward
}

fn python_backward(file: &str, function: &str) -> bool {
    (file.ends_with("torch/autograd/__init__.py") && function == "backward")
        || (file.ends_with("torch/_tensor.py") && function == "Tensor.backward")
        || file.ends_with("torch/autograd/graph.py") && function == "_engine_run_backward"
}

fn python_module(file: &str, function: &str) -> bool {
    if file.ends_with("torch/nn/modules/module.py") && MOVING.contains(&function) {
        return true;
    }
    if file.ends_with("torch/nn/parameter.py") {
        return true;
    }
    file.contains("torch/nn/")
        && (function.ends_with(".__init__") || function.ends_with(".reset_parameters"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python(file: &str, function: &str) -> Frame {
        Frame {
            address: "0x1".into(),
            module: None,
            function: Some(function.into()),
            file: Some(file.into()),
            line: Some(1),
            inlined: false,
            python: true,
            offset: None,
            role: None,
        }
    }

    fn native(function: &str) -> Frame {
        Frame {
            python: false,
            file: None,
            module: Some("/site-packages/torch/lib/libtorch_cpu.so".into()),
            ..python("", function)
        }
    }

    #[test]
    fn the_innermost_frame_that_says_decides_and_a_workspace_wins() {
        let user = python("train.py", "main");
        let adam = python("torch/optim/adam.py", "Adam._init_group");
        let apply = python("torch/nn/modules/module.py", "Module._apply");
        let linear = python("torch/nn/modules/linear.py", "Linear.__init__");
        let forward = python("torch/nn/modules/linear.py", "Linear.forward");
        let blas = native("at::cuda::getCurrentCUDABlasHandleWithWorkspace");
        let node = native("torch::autograd::generated::AddmmBackward0::apply");
        let engine = native("torch::autograd::Engine::thread_main");
        let variable_type = native("torch::autograd::VariableType::(anonymous namespace)::addmm");
        let tensor_backward = python("torch/_tensor.py", "Tensor.backward");

        assert_eq!(origin(&[adam.clone(), user.clone()]), Origin::Optimizer);
        assert_eq!(origin(&[apply.clone(), user.clone()]), Origin::Module);
        assert_eq!(origin(&[linear, user.clone()]), Origin::Module);
        assert_eq!(origin(&[forward.clone(), user.clone()]), Origin::Elsewhere);
        // The forward's autograd kernels are not the backward pass.
        assert_eq!(
            origin(&[variable_type, forward, user.clone()]),
            Origin::Elsewhere
        );
        assert_eq!(origin(&[node.clone(), engine.clone()]), Origin::Backward);
        assert_eq!(origin(&[blas, node, engine]), Origin::Workspace);
        assert_eq!(origin(&[tensor_backward, user.clone()]), Origin::Backward);
        // Module construction inside an optimizer's step reads as the optimizer's.
        assert_eq!(origin(&[adam, apply, user]), Origin::Optimizer);
        assert_eq!(origin(&[]), Origin::Elsewhere);
    }
}
