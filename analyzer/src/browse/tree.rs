//! The call tree of what is live at one moment: one root per (device, kind), then the
//! frames outermost first, bytes and allocations rolled up; which nodes are open, the rows
//! they make on screen, and the search's matches.
//!
//! A node is known by its path (the hash of its labels from the root), so what is open and
//! what is selected stay as they were when the moment changes and the tree is rebuilt.

use std::collections::HashSet;

use crate::fasthash::FastMap;
use crate::snapshot::StackBytes;

use super::names::Names;
use super::story::Key;

/// A node's share of its root at or above which it opens by itself.
const OPEN_SHARE: f64 = 0.2;

/// A trace's side: 0, or 1 for the second of `browse A B`.
pub type Side = usize;

#[derive(Debug, Clone)]
pub struct Node {
    pub label: u32,
    /// Live bytes and allocations through it, per side.
    pub bytes: [u64; 2],
    pub count: [u64; 2],
    pub depth: usize,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Its path's hash.
    pub id: u64,
    /// Its root's bytes, per side (for shares).
    pub root_bytes: [u64; 2],
    /// The keys whose stacks pass through it, with their side.
    pub keys: Vec<(Side, Key)>,
}

/// A tree of one moment (of two traces' moments, side by side).
#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
    pub roots: Vec<usize>,
    /// The trace has tensors: their roots open by themselves, the segments' do not.
    pub tensors: bool,
}

fn step(parent: u64, label: u32) -> u64 {
    // FNV-1a over the parent's hash and the label.
    let mut h = parent ^ 0xcbf2_9ce4_8422_2325;
    for b in label.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Tree {
    /// The tree of each side's sites (one side, or two), children largest first (both
    /// sides together).
    pub fn build(sides: &[Vec<StackBytes>], names: &mut Names, tensors: bool) -> Tree {
        let mut t = Tree {
            tensors,
            ..Tree::default()
        };
        let mut child: FastMap<(Option<usize>, u32), usize> = FastMap::default();
        // Tensors before segments, then by device.
        let mut order: Vec<(Side, &StackBytes)> = (sides.iter().enumerate())
            .flat_map(|(side, sites)| sites.iter().map(move |s| (side, s)))
            .collect();
        order.sort_by_key(|(side, s)| {
            (
                s.kind != gpumemprof_format::MemKind::Tensor,
                s.device,
                *side,
            )
        });
        for (side, s) in order {
            let root = names.root(s.device, s.kind);
            let shown = names.shown(side, s.stack);
            let key = Key {
                device: s.device,
                kind: s.kind,
                stack: s.stack,
            };
            let mut parent: Option<usize> = None;
            for (depth, &label) in std::iter::once(&root).chain(&shown.path).enumerate() {
                let at = match child.get(&(parent, label)) {
                    Some(&n) => n,
                    None => {
                        let id = step(parent.map_or(0, |p| t.nodes[p].id), label);
                        let n = t.nodes.len();
                        t.nodes.push(Node {
                            label,
                            bytes: [0; 2],
                            count: [0; 2],
                            depth,
                            parent,
                            children: Vec::new(),
                            id,
                            root_bytes: [0; 2],
                            keys: Vec::new(),
                        });
                        match parent {
                            Some(p) => t.nodes[p].children.push(n),
                            None => t.roots.push(n),
                        }
                        child.insert((parent, label), n);
                        n
                    }
                };
                let node = &mut t.nodes[at];
                node.bytes[side] = node.bytes[side].saturating_add(s.bytes);
                node.count[side] += s.count;
                // Each site is one key of its side: no key comes twice.
                node.keys.push((side, key));
                parent = Some(at);
            }
        }
        let bytes: Vec<u64> = t
            .nodes
            .iter()
            .map(|n| n.bytes[0].saturating_add(n.bytes[1]))
            .collect();
        for n in &mut t.nodes {
            n.children
                .sort_by(|a, b| bytes[*b].cmp(&bytes[*a]).then(a.cmp(b)));
        }
        for r in t.roots.clone() {
            let rb = t.nodes[r].bytes;
            let mut stack = vec![r];
            while let Some(n) = stack.pop() {
                t.nodes[n].root_bytes = rb;
                stack.extend(t.nodes[n].children.iter().copied());
            }
        }
        t
    }

    /// `n`'s share of its root on `side`.
    pub fn share_of(&self, n: usize, side: Side) -> f64 {
        let node = &self.nodes[n];
        if node.root_bytes[side] == 0 {
            0.0
        } else {
            node.bytes[side] as f64 / node.root_bytes[side] as f64
        }
    }

    /// `n`'s share of its root (the first trace's).
    pub fn share(&self, n: usize) -> f64 {
        self.share_of(n, 0)
    }

    /// The labels from the root to `n`.
    pub fn path(&self, n: usize) -> Vec<u32> {
        let mut out = vec![self.nodes[n].label];
        let mut at = self.nodes[n].parent;
        while let Some(p) = at {
            out.push(self.nodes[p].label);
            at = self.nodes[p].parent;
        }
        out.reverse();
        out
    }

    /// The root above `n` (or `n`).
    pub fn root_of(&self, mut n: usize) -> usize {
        while let Some(p) = self.nodes[n].parent {
            n = p;
        }
        n
    }

    pub fn by_id(&self, id: u64) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }
}

/// What the user opened and closed, by node id; the rest follows `OPEN_SHARE` (the tensor
/// roots open; segment roots of a job with tensors closed), or nothing after "close all".
#[derive(Debug, Clone, Default)]
pub struct Openness {
    pub opened: HashSet<u64>,
    pub closed: HashSet<u64>,
    pub all_closed: bool,
}

impl Openness {
    pub fn is_open(&self, tree: &Tree, n: usize) -> bool {
        let id = tree.nodes[n].id;
        if self.opened.contains(&id) {
            return true;
        }
        if self.closed.contains(&id) || self.all_closed {
            return false;
        }
        let node = &tree.nodes[n];
        if node.parent.is_none() {
            // A job with tensors opens them; its segments stay closed.
            let kind = node.keys.first().map(|k| k.1.kind);
            return (kind == Some(gpumemprof_format::MemKind::Tensor)) == tree.tensors;
        }
        tree.share_of(n, 0).max(tree.share_of(n, 1)) >= OPEN_SHARE
    }

    pub fn toggle(&mut self, tree: &Tree, n: usize) {
        let id = tree.nodes[n].id;
        if self.is_open(tree, n) {
            self.opened.remove(&id);
            self.closed.insert(id);
        } else {
            self.closed.remove(&id);
            self.opened.insert(id);
        }
    }

    pub fn open(&mut self, tree: &Tree, n: usize) {
        let id = tree.nodes[n].id;
        self.closed.remove(&id);
        self.opened.insert(id);
    }

    pub fn close_all(&mut self) {
        self.opened.clear();
        self.closed.clear();
        self.all_closed = true;
    }
}

/// One row on screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub node: usize,
    pub open: bool,
    pub leaf: bool,
    pub matched: bool,
}

/// The rows of the open nodes, from `top` (a node to focus on, else every root). With a
/// search, only nodes on a path to a match (or under one) show, each path open.
pub fn rows(
    tree: &Tree,
    open: &Openness,
    top: Option<usize>,
    matches: Option<&[bool]>,
) -> Vec<Row> {
    // Nodes with a match at or below them.
    let hit: Option<Vec<bool>> = matches.map(|m| {
        let mut below = m.to_vec();
        for n in (0..tree.nodes.len()).rev() {
            if below[n] {
                if let Some(p) = tree.nodes[n].parent {
                    below[p] = true;
                }
            }
        }
        below
    });
    let mut out = Vec::new();
    let starts: Vec<usize> = match top {
        Some(t) => vec![t],
        None => tree.roots.clone(),
    };
    let mut stack: Vec<(usize, bool)> = starts.into_iter().rev().map(|n| (n, false)).collect();
    while let Some((n, under_match)) = stack.pop() {
        let node = &tree.nodes[n];
        let matched = matches.is_some_and(|m| m[n]);
        let show = match &hit {
            Some(h) => h[n] || under_match,
            None => true,
        };
        if !show {
            continue;
        }
        let is_open = match &hit {
            Some(h) => (h[n] && !matched) || open.is_open(tree, n),
            None => open.is_open(tree, n),
        };
        out.push(Row {
            node: n,
            open: is_open && !node.children.is_empty(),
            leaf: node.children.is_empty(),
            matched,
        });
        if is_open {
            for &c in node.children.iter().rev() {
                stack.push((c, under_match || matched));
            }
        }
    }
    out
}

/// Which nodes' labels hold `query` (case-insensitive).
pub fn search(tree: &Tree, names: &Names, query: &str) -> Vec<bool> {
    let q = query.to_lowercase();
    tree.nodes
        .iter()
        .map(|n| !q.is_empty() && names.label(n.label).to_lowercase().contains(&q))
        .collect()
}
