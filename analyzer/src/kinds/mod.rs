//! Kinds of memory, as PyTorch's memory profiler names them: parameters, optimizer state,
//! gradients, activations, temporaries, workspaces, and "other" when unsure. Inferred with
//! no change to the program, from where each tensor was made (`classify::origin`) and how
//! its life went (`replay::fates`):
//!
//! | made by                                   | its life                         | kind            |
//! |-------------------------------------------|----------------------------------|-----------------|
//! | a library's workspace function            | any                              | workspaces      |
//! | module construction, `.to()`, `.cuda()`   | any                              | parameters      |
//! | the backward pass (autograd's threads)    | freed by the backward pass       | temporaries     |
//! | the backward pass                         | outlived it (`zero_grad`, end)   | gradients       |
//! | an optimizer of `torch.optim`             | freed before a backward pass ran | temporaries     |
//! | an optimizer                              | outlived a backward pass, or end | optimizer state |
//! | anything else (the forward pass, inputs)  | a backward pass ran, or freed it | activations     |
//! | anything else                             | freed before any backward ran    | temporaries     |
//! | anything else, or no stack                | live at the end, no backward ran | other           |
//!
//! A thread is autograd's when one of its first stacks runs the backward pass (CUDA work
//! of the backward pass runs on autograd's device threads, never the caller's).
//!
//! A free made by the interpreter's teardown (`glue::tears_down` in its stack) does not end
//! a life: the program held the tensor until its code finished, as one live at the end.

pub mod classify;
pub mod timeline;

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::replay::fates::{FatesResult, Lifetime};
use crate::replay::Replayed;
use crate::symbolize::Symbolizer;
use classify::Origin;
use gpumemprof_format::FRAMEWORK_PYTORCH;

/// A kind of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Parameters,
    OptimizerState,
    Gradients,
    Activations,
    Temporaries,
    Workspaces,
    Other,
}

// The timeline keeps a value per kind without knowing them.
const _: () = assert!(Kind::ALL.len() == crate::timeline::KINDS);

impl Kind {
    /// Every kind, in the order reports list them.
    pub const ALL: [Kind; 7] = [
        Kind::Parameters,
        Kind::OptimizerState,
        Kind::Gradients,
        Kind::Activations,
        Kind::Temporaries,
        Kind::Workspaces,
        Kind::Other,
    ];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Parameters => "parameters",
            Kind::OptimizerState => "optimizer state",
            Kind::Gradients => "gradients",
            Kind::Activations => "activations",
            Kind::Temporaries => "temporaries",
            Kind::Workspaces => "workspaces",
            Kind::Other => "other",
        }
    }
}

/// Bytes and tensors of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KindBytes {
    pub kind: &'static str,
    pub bytes: u64,
    pub tensors: u64,
}

/// Tensors of one device at its tensor peak, by kind (every kind, in `Kind::ALL`'s order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceKinds {
    pub device: i32,
    pub kinds: Vec<KindBytes>,
}

/// Decides kinds: the stacks' origins and the autograd threads, worked out once.
pub struct Decider<'f> {
    fates: &'f FatesResult,
    origins: HashMap<u64, Origin>,
    autograd_threads: HashSet<u32>,
    /// `autograd_runs[i]`: runs of autograd threads among the first `i` runs.
    autograd_runs: Vec<u32>,
    /// Free stacks made by the interpreter's teardown: a tensor they freed was held until
    /// the program's code finished, as one live at the end (`report::teardown`).
    teardown_frees: HashSet<u64>,
}

impl<'f> Decider<'f> {
    /// The decider of the tensors `fates` kept (live at a peak or at the end, freed at
    /// exit): their stacks' origins worked out.
    pub fn new(fates: &'f FatesResult, sym: &mut Symbolizer) -> Self {
        Decider::knowing(fates, sym, std::iter::empty())
    }

    /// `new`, also knowing the origins of `stacks` (and whether they are the teardown's):
    /// every stack a pass over all tensors meets (`kinds::timeline`), where a stack not
    /// worked out would read as made "elsewhere".
    pub fn knowing(
        fates: &'f FatesResult,
        sym: &mut Symbolizer,
        stacks: impl Iterator<Item = u64>,
    ) -> Self {
        let mut origins = HashMap::new();
        let mut origin_of = |stack: u64, sym: &mut Symbolizer| {
            *origins
                .entry(stack)
                .or_insert_with(|| classify::origin(&sym.all_frames(stack)))
        };
        let autograd_threads: HashSet<u32> = (fates.thread_stacks.iter())
            .filter(|(_, stacks)| {
                stacks
                    .iter()
                    .any(|&s| origin_of(s, sym) == Origin::Backward)
            })
            .map(|(tid, _)| *tid)
            .collect();
        let lives = (fates.at_peak.iter().flat_map(|(_, l)| l))
            .chain(&fates.at_end)
            .chain(&fates.freed_at_exit);
        // The stacks whose frees may be the teardown's: those of the kept tensors' frees,
        // and every stack asked about.
        let mut frees = HashSet::new();
        for life in lives {
            origin_of(life.stack, sym);
            if let Some(freed) = life.freed {
                frees.insert(freed.stack);
            }
        }
        frees.extend(stacks);
        for &stack in &frees {
            origin_of(stack, sym);
        }
        let teardown_frees = (frees.into_iter())
            .filter(|&s| (sym.functions(s).iter()).any(|f| crate::glue::tears_down(f)))
            .collect();
        let mut decider = Decider::from_parts(fates, origins, autograd_threads);
        decider.teardown_frees = teardown_frees;
        decider
    }

    /// A decider for these stacks' origins and autograd threads.
    fn from_parts(
        fates: &'f FatesResult,
        origins: HashMap<u64, Origin>,
        autograd_threads: HashSet<u32>,
    ) -> Self {
        let mut autograd_runs = Vec::with_capacity(fates.runs.len() + 1);
        let mut n = 0;
        autograd_runs.push(0);
        for tid in &fates.runs {
            n += u32::from(autograd_threads.contains(tid));
            autograd_runs.push(n);
        }
        Decider {
            fates,
            origins,
            autograd_threads,
            autograd_runs,
            teardown_frees: HashSet::new(),
        }
    }

    fn origin(&self, stack: u64) -> Origin {
        self.origins
            .get(&stack)
            .copied()
            .unwrap_or(Origin::Elsewhere)
    }

    /// Whether a run of an autograd thread came after run `from` and before run `to`
    /// (exclusive); `None` when the runs were not all kept.
    fn backward_between(&self, from: u32, to: usize) -> Option<bool> {
        let from = from as usize + 1;
        if to > self.fates.runs.len() || from > to {
            return (from > to).then_some(false);
        }
        Some(self.autograd_runs[to] > self.autograd_runs[from])
    }

    /// The kind of one tensor's life. A free made by the interpreter's teardown does not
    /// end it: the program held the tensor until its code finished.
    pub fn kind(&self, life: &Lifetime) -> Kind {
        if life.stack == 0 {
            return Kind::Other;
        }
        let held = Lifetime {
            freed: life
                .freed
                .filter(|f| !self.teardown_frees.contains(&f.stack)),
            ..*life
        };
        let life = &held;
        let made_by = match self.origin(life.stack) {
            Origin::Workspace => Origin::Workspace,
            _ if self.autograd_threads.contains(&life.tid) => Origin::Backward,
            origin => origin,
        };
        let freed_in_backward = life.freed.is_some_and(|f| {
            self.autograd_threads.contains(&f.tid) || self.origin(f.stack) == Origin::Backward
        });
        let end = life
            .freed
            .map_or(self.fates.runs_made as usize, |f| f.run as usize);
        let Some(spans_backward) = self.backward_between(life.run, end) else {
            return Kind::Other;
        };
        match made_by {
            // A workspace made on the backward thread is still a workspace.
            Origin::Workspace => Kind::Workspaces,
            Origin::Module => Kind::Parameters,
            Origin::Backward if freed_in_backward => Kind::Temporaries,
            Origin::Backward => Kind::Gradients,
            Origin::Optimizer if life.freed.is_some() && !spans_backward => Kind::Temporaries,
            Origin::Optimizer => Kind::OptimizerState,
            Origin::Elsewhere if spans_backward || freed_in_backward => Kind::Activations,
            Origin::Elsewhere if life.freed.is_some() => Kind::Temporaries,
            Origin::Elsewhere => Kind::Other,
        }
    }

    /// `lives` by kind, every kind listed.
    pub fn tally<'a>(&self, lives: impl IntoIterator<Item = &'a Lifetime>) -> Vec<KindBytes> {
        let mut sums = [(0u64, 0u64); Kind::ALL.len()];
        for life in lives {
            let i = self.kind(life) as usize;
            sums[i].0 = sums[i].0.saturating_add(life.size);
            sums[i].1 += 1;
        }
        (Kind::ALL.iter().zip(sums))
            .map(|(kind, (bytes, tensors))| KindBytes {
                kind: kind.name(),
                bytes,
                tensors,
            })
            .collect()
    }

    /// Each device's tensors at its tensor peak, by kind.
    pub fn at_peaks(&self) -> Vec<DeviceKinds> {
        (self.fates.at_peak.iter())
            .map(|(device, lives)| DeviceKinds {
                device: *device,
                kinds: self.tally(lives),
            })
            .collect()
    }
}

/// Whether `device`'s tensors are PyTorch's: the only ones kinds are inferred for (the
/// inference reads PyTorch's frames).
pub fn pytorch(r: &Replayed, device: i32) -> bool {
    (r.allocators.iter()).any(|a| a.device == device && a.framework == FRAMEWORK_PYTORCH)
}

/// The PyTorch devices of a trace, ascending.
pub fn pytorch_devices(r: &Replayed) -> Vec<i32> {
    (r.allocators.iter())
        .filter(|a| a.framework == FRAMEWORK_PYTORCH)
        .map(|a| a.device)
        .collect()
}

/// The kind of each PyTorch tensor `leaks` counts (live at the end, or freed only after the
/// last tensor was made, the interpreter's teardown among those), by (address, time made):
/// decided as live at the end, when the program's own code had finished. Empty when the
/// trace has no PyTorch tensors.
pub fn of_leaked(r: &Replayed, sym: &mut Symbolizer) -> HashMap<(u64, u64), Kind> {
    let lives: Vec<&Lifetime> = (r.fates.at_end.iter().chain(&r.fates.freed_at_exit))
        .filter(|l| pytorch(r, l.device))
        .collect();
    if lives.is_empty() {
        return HashMap::new();
    }
    let decider = Decider::new(&r.fates, sym);
    (lives.into_iter())
        .map(|l| {
            let live = Lifetime { freed: None, ..*l };
            ((l.address, l.time_ns), decider.kind(&live))
        })
        .collect()
}

/// Each device's PyTorch tensors at their peak by kind; empty when the trace has none
/// (other frameworks' tensors get no kinds: `pytorch`).
pub fn at_peaks(r: &Replayed, sym: &mut Symbolizer) -> Vec<DeviceKinds> {
    if !r.fates.at_peak.iter().any(|(d, _)| pytorch(r, *d)) {
        return Vec::new();
    }
    let mut kinds = Decider::new(&r.fates, sym).at_peaks();
    kinds.retain(|k| pytorch(r, k.device));
    kinds
}

#[cfg(test)]
mod tests;
