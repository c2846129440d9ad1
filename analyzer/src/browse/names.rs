//! Frame names for `browse`, each stack resolved once: the frames as the reports show them
//! (`Symbolizer::stack`: Python first, PyTorch's internals hidden, paths as the user types
//! them), interned so that a tree node is a number, and the stack's site (`report::level`).
//! With two traces (`browse A B`) each has its source (side 0 and 1) and the labels are
//! shared, so the same frame in both is the same node.

use std::rc::Rc;

use gpumemprof_format::MemKind;

use crate::fasthash::FastMap;
use crate::report::level::site;
use crate::symbolize::Symbolizer;
use crate::units;

/// One stack as `browse` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// Label ids, outermost first, after the root (`[GPU 0 tensors]`).
    pub path: Vec<u32>,
    /// The site's label: the user's line where there is one.
    pub site: u32,
}

/// Where frame names come from: the trace's symbols, or a test's table.
pub trait Source {
    /// The frames of `stack`, innermost first, as text (`train at train.py:42`).
    fn frames(&mut self, stack: u64) -> (Vec<String>, Option<usize>);
}

/// `Source` of a real trace.
pub struct Symbols<'a>(pub Symbolizer<'a>);

impl Source for Symbols<'_> {
    fn frames(&mut self, stack: u64) -> (Vec<String>, Option<usize>) {
        let frames = self.0.stack(stack, 0);
        let at = site(&frames).and_then(|s| frames.iter().position(|f| f == s));
        (frames.iter().map(|f| f.describe()).collect(), at)
    }
}

/// A table of stacks for tests: id -> frames innermost first (the site is the first).
impl Source for FastMap<u64, Vec<String>> {
    fn frames(&mut self, stack: u64) -> (Vec<String>, Option<usize>) {
        let frames = self.get(&stack).cloned().unwrap_or_default();
        let at = (!frames.is_empty()).then_some(0);
        (frames, at)
    }
}

/// Interned labels and resolved stacks.
pub struct Names<'a> {
    sources: Vec<Box<dyn Source + 'a>>,
    ids: FastMap<Rc<str>, u32>,
    labels: Vec<Rc<str>>,
    stacks: FastMap<(usize, u64), Rc<Shown>>,
    full: FastMap<(usize, u64), Rc<Vec<String>>>,
}

/// The label of a stack with no frames, as flamegraphs name it.
pub use crate::views::flamegraph::NO_STACK;

impl<'a> Names<'a> {
    pub fn new(source: Box<dyn Source + 'a>) -> Self {
        Names {
            sources: vec![source],
            ids: FastMap::default(),
            labels: Vec::new(),
            stacks: FastMap::default(),
            full: FastMap::default(),
        }
    }

    /// The source of a second trace: its side (1).
    pub fn add(&mut self, source: Box<dyn Source + 'a>) -> usize {
        self.sources.push(source);
        self.sources.len() - 1
    }

    pub fn intern(&mut self, label: &str) -> u32 {
        if let Some(&id) = self.ids.get(label) {
            return id;
        }
        let id = self.labels.len() as u32;
        let rc: Rc<str> = Rc::from(label);
        self.labels.push(rc.clone());
        self.ids.insert(rc, id);
        id
    }

    pub fn label(&self, id: u32) -> &str {
        self.labels.get(id as usize).map_or("?", |l| l)
    }

    /// The root of a (device, kind): `GPU 0 tensors`, `GPU 0 device memory`.
    pub fn root(&mut self, device: i32, kind: MemKind) -> u32 {
        let words = crate::report::level::kind_words(kind.name());
        self.intern(&format!("GPU {} {words}", units::device(device)))
    }

    fn resolve(&mut self, side: usize, stack: u64) {
        if self.stacks.contains_key(&(side, stack)) {
            return;
        }
        let (frames, at) = match self.sources.get_mut(side) {
            Some(source) => source.frames(stack),
            None => (Vec::new(), None),
        };
        let mut path: Vec<u32> = frames.iter().rev().map(|f| self.intern(f)).collect();
        if path.is_empty() {
            path.push(self.intern(NO_STACK));
        }
        let site = match at {
            Some(i) => self.intern(&frames[i]),
            None => *path.last().expect("not empty"),
        };
        self.stacks
            .insert((side, stack), Rc::new(Shown { path, site }));
        self.full.insert((side, stack), Rc::new(frames));
    }

    /// Stack `stack` of trace `side` as shown.
    pub fn shown(&mut self, side: usize, stack: u64) -> Rc<Shown> {
        self.resolve(side, stack);
        self.stacks[&(side, stack)].clone()
    }

    /// Every shown frame of `stack` of trace `side`, innermost first.
    pub fn frames(&mut self, side: usize, stack: u64) -> Rc<Vec<String>> {
        self.resolve(side, stack);
        self.full[&(side, stack)].clone()
    }
}
