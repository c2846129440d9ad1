//! The kinds table of `kinds` on named lives: a training step's threads and stacks, made up.

use super::*;
use crate::replay::fates::Freed;

/// The main thread and autograd's device thread.
const MAIN: u32 = 1;
const AUTOGRAD: u32 = 2;
/// Stacks: the forward pass, the optimizer, a module's construction, a workspace, the
/// backward pass, `zero_grad` (a free).
const FORWARD: u64 = 10;
const OPTIMIZER: u64 = 11;
const MODULE: u64 = 12;
const WORKSPACE: u64 = 13;
const BACKWARD: u64 = 14;
const ZERO_GRAD: u64 = 15;

/// One step after another: runs alternate main (even) and autograd (odd), `steps` of each.
fn fates(steps: usize) -> FatesResult {
    let runs: Vec<u32> = (0..2 * steps)
        .map(|i| if i % 2 == 0 { MAIN } else { AUTOGRAD })
        .collect();
    FatesResult {
        runs_made: runs.len() as u64,
        runs,
        ..FatesResult::default()
    }
}

fn decide(fates: &FatesResult, life: Lifetime) -> Kind {
    let origins = HashMap::from([
        (FORWARD, Origin::Elsewhere),
        (OPTIMIZER, Origin::Optimizer),
        (MODULE, Origin::Module),
        (WORKSPACE, Origin::Workspace),
        (BACKWARD, Origin::Backward),
        (ZERO_GRAD, Origin::Optimizer),
    ]);
    Decider::from_parts(fates, origins, HashSet::from([AUTOGRAD])).kind(&life)
}

fn made(stack: u64, tid: u32, run: u32) -> Lifetime {
    Lifetime {
        address: 0x1000,
        time_ns: 0,
        size: 512,
        device: 0,
        stack,
        tid,
        run,
        freed: None,
    }
}

fn freed(life: Lifetime, stack: u64, tid: u32, run: u32) -> Lifetime {
    Lifetime {
        freed: Some(Freed { stack, tid, run }),
        ..life
    }
}

#[test]
fn the_backward_pass_makes_gradients_when_they_outlive_it_and_temporaries_otherwise() {
    let f = fates(3);
    // Made in step 0's backward (run 1), freed by zero_grad in step 1 (run 2).
    let grad = made(BACKWARD, AUTOGRAD, 1);
    assert_eq!(decide(&f, freed(grad, ZERO_GRAD, MAIN, 2)), Kind::Gradients);
    // Still live at the end (zero_grad(set_to_none=False), or the last step's).
    assert_eq!(decide(&f, grad), Kind::Gradients);
    // An intermediate gradient: the backward pass frees it.
    assert_eq!(
        decide(&f, freed(grad, BACKWARD, AUTOGRAD, 1)),
        Kind::Temporaries
    );
    // backward()'s ones, made on the main thread by Tensor.backward, freed by the pass.
    let ones = made(BACKWARD, MAIN, 0);
    assert_eq!(
        decide(&f, freed(ones, BACKWARD, AUTOGRAD, 1)),
        Kind::Temporaries
    );
}

#[test]
fn the_forward_pass_makes_activations_when_a_backward_ran_in_their_life() {
    let f = fates(3);
    let out = made(FORWARD, MAIN, 2);
    // Saved for the backward pass and released by it.
    assert_eq!(
        decide(&f, freed(out, BACKWARD, AUTOGRAD, 3)),
        Kind::Activations
    );
    // The batch: freed on the main thread after the backward pass (run 3) ran.
    assert_eq!(decide(&f, freed(out, FORWARD, MAIN, 4)), Kind::Activations);
    // Kept for logging until the end, a backward pass ran since.
    assert_eq!(decide(&f, out), Kind::Activations);
    // Freed before any backward pass: a temporary.
    assert_eq!(decide(&f, freed(out, FORWARD, MAIN, 2)), Kind::Temporaries);
    // Made after the last backward pass (the job ends in run 4) and never freed: unsure.
    let mut f = f;
    f.runs.pop();
    f.runs_made -= 1;
    assert_eq!(decide(&f, made(FORWARD, MAIN, 4)), Kind::Other);
}

#[test]
fn the_optimizer_makes_state_that_outlives_a_step_and_temporaries_within_it() {
    let f = fates(3);
    let state = made(OPTIMIZER, MAIN, 2);
    assert_eq!(decide(&f, state), Kind::OptimizerState);
    assert_eq!(
        decide(&f, freed(state, FORWARD, MAIN, 4)),
        Kind::OptimizerState
    );
    assert_eq!(
        decide(&f, freed(state, OPTIMIZER, MAIN, 2)),
        Kind::Temporaries
    );
    // Made in the last step, live at the end: state, no backward pass ran since.
    assert_eq!(decide(&f, made(OPTIMIZER, MAIN, 4)), Kind::OptimizerState);
}

#[test]
fn parameters_workspaces_and_tensors_without_a_stack() {
    let f = fates(2);
    assert_eq!(decide(&f, made(MODULE, MAIN, 0)), Kind::Parameters);
    // A workspace made by the backward pass is a workspace, not a gradient.
    assert_eq!(decide(&f, made(WORKSPACE, AUTOGRAD, 1)), Kind::Workspaces);
    assert_eq!(decide(&f, made(0, MAIN, 0)), Kind::Other);
    // On the autograd thread, an unknown stack is the backward pass's.
    assert_eq!(decide(&f, made(99, AUTOGRAD, 1)), Kind::Gradients);
}

#[test]
fn lives_past_the_kept_runs_are_other() {
    let mut f = fates(1);
    // More runs were made than kept: what happened after the last kept one is unknown.
    f.runs_made = f.runs.len() as u64 + 5;
    assert_eq!(decide(&f, made(FORWARD, MAIN, 0)), Kind::Other);
    let at = f.runs.len() as u32;
    assert_eq!(
        decide(&f, freed(made(FORWARD, MAIN, 0), FORWARD, MAIN, at + 2)),
        Kind::Other
    );
    // Freed in the run it was made in: nothing ran between, whatever was lost later.
    assert_eq!(
        decide(&f, freed(made(FORWARD, MAIN, 0), FORWARD, MAIN, 0)),
        Kind::Temporaries
    );
}

#[test]
fn tally_lists_every_kind_in_order() {
    let f = fates(2);
    let origins = HashMap::from([(MODULE, Origin::Module)]);
    let d = Decider::from_parts(&f, origins, HashSet::from([AUTOGRAD]));
    let lives = [
        made(MODULE, MAIN, 0),
        made(MODULE, MAIN, 0),
        made(0, MAIN, 0),
    ];
    let t = d.tally(&lives);
    let names: Vec<&str> = t.iter().map(|k| k.kind).collect();
    assert_eq!(
        names,
        [
            "parameters",
            "optimizer state",
            "gradients",
            "activations",
            "temporaries",
            "workspaces",
            "other"
        ]
    );
    assert_eq!((t[0].bytes, t[0].tensors), (1024, 2));
    assert_eq!((t[6].bytes, t[6].tensors), (512, 1));
}

#[test]
fn a_tensor_the_interpreters_teardown_frees_was_held_to_the_end() {
    // An inference job (no backward pass): a tensor a module-level name held, freed only
    // by `Py_FinalizeEx`, is "other" as one live at the end, not a temporary.
    const TEARDOWN: u64 = 16;
    let f = FatesResult {
        runs: vec![MAIN],
        runs_made: 1,
        ..FatesResult::default()
    };
    let origins = HashMap::from([(FORWARD, Origin::Elsewhere), (TEARDOWN, Origin::Elsewhere)]);
    let mut d = Decider::from_parts(&f, origins, HashSet::new());
    d.teardown_frees.insert(TEARDOWN);
    let kept = made(FORWARD, MAIN, 0);
    assert_eq!(d.kind(&freed(kept, TEARDOWN, MAIN, 0)), Kind::Other);
    // Freed by the program itself: a temporary.
    assert_eq!(d.kind(&freed(kept, FORWARD, MAIN, 0)), Kind::Temporaries);
    // In a training job, made after step 0's backward pass and freed by the teardown in
    // the same run: held across step 1's backward pass to the end, an activation (freed
    // there by the program itself, it would be a temporary).
    let f = fates(2);
    let mut d = Decider::from_parts(
        &f,
        HashMap::from([(FORWARD, Origin::Elsewhere), (TEARDOWN, Origin::Elsewhere)]),
        HashSet::from([AUTOGRAD]),
    );
    d.teardown_frees.insert(TEARDOWN);
    let late = made(FORWARD, MAIN, 2);
    assert_eq!(d.kind(&freed(late, TEARDOWN, MAIN, 2)), Kind::Activations);
    assert_eq!(d.kind(&freed(late, FORWARD, MAIN, 2)), Kind::Temporaries);
}

#[test]
fn a_pass_over_every_tensor_knows_the_origin_of_stacks_the_replay_did_not_keep() {
    use crate::replay::StackInfo;
    use gpumemprof_format::{python_frame, PyCode};
    // Stack 1 moves a module to the GPU (`Module._apply`), stack 2 is the user's own line;
    // no tensor of either was live at a peak or at the end, so `new` never looked at them.
    let code = |id: u64, filename: &str, name: &str| {
        (
            id,
            PyCode {
                id,
                first_line: 1,
                filename: filename.into(),
                name: name.into(),
            },
        )
    };
    let python = HashMap::from([
        code(1, "torch/nn/modules/module.py", "Module._apply"),
        code(2, "train.py", "step"),
    ]);
    let stack = |id: u64, code: u64| {
        (
            id,
            StackInfo {
                frames: vec![python_frame(code, 10)],
                first_use_ns: None,
            },
        )
    };
    let stacks = HashMap::from([stack(1, 1), stack(2, 2)]);
    let mut sym = Symbolizer::new(&[], &stacks, &python);
    let f = fates(1);
    // A copy of a module's weights, made and freed before any backward pass (a teacher
    // model loaded, used and dropped): parameters, not a temporary.
    let weights = freed(made(1, MAIN, 0), 2, MAIN, 0);
    assert_eq!(Decider::new(&f, &mut sym).kind(&weights), Kind::Temporaries);
    let knowing = Decider::knowing(&f, &mut sym, stacks.keys().copied());
    assert_eq!(knowing.kind(&weights), Kind::Parameters);
    assert_eq!(
        knowing.kind(&freed(made(2, MAIN, 0), 2, MAIN, 0)),
        Kind::Temporaries
    );
}
