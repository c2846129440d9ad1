//! The walks by their inputs (`inputs.rs`), through `capture_noted`: many call paths from
//! one start, each given its own id again without a walk, and never another path's.

use super::tests::{on_a_fresh_thread, retried};
use super::*;
use std::collections::HashMap;

/// Levels of the call paths below: 2^6 = 64 paths, every one from the same stack pointer
/// (the two steps are one function's two copies: the same frame, other return addresses).
const LEVELS: u32 = 6;
const PATHS: u32 = 1 << LEVELS;

/// Level `level` of path `bits`: the next level through the copy its bit names.
#[inline(never)]
fn step<const RIGHT: bool>(level: u32, bits: u32, with: u64) -> (Captured, Vec<u64>) {
    let r = if level == LEVELS {
        capture_at_the_bottom(with)
    } else if bits >> level & 1 == 1 {
        step::<true>(level + 1, bits, with)
    } else {
        step::<false>(level + 1, bits, with)
    };
    std::hint::black_box(r)
}

#[inline(never)]
fn capture_at_the_bottom(with: u64) -> (Captured, Vec<u64>) {
    let mut out = [MaybeUninit::new(0u64); 64];
    let c = retried(|| capture_noted(&mut out, 0, 0, Some(with), None));
    let frames = out[..c.n()]
        .iter()
        .map(|f| unsafe { f.assume_init() })
        .collect();
    std::hint::black_box((c, frames))
}

/// Where a capture's stack id came from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum From {
    /// Its own walk: frames interned (here: numbered by `ids`).
    Walk,
    /// A memo or first-state entry met at its first state (the frames, or its noted id).
    Met,
    /// A walk of the same inputs (`inputs.rs`): the id, no frames.
    Inputs,
}

/// What one capture gave: its frames (none when an id came without them), the id, and
/// where it came from.
type Seen = (Vec<u64>, u32, From);

/// Every path once, from one call site, as the shim's hook does (`record::id_of`): an id
/// for each stack given with its frames, from `ids` (a new one per new frames), noted for
/// the memo or entry met, or for the walk's inputs when it waits for one; what each capture
/// gave pushed to `seen`. `ids` and `seen` are sized beforehand (their addresses stay put).
fn round(with: u64, ids: &mut HashMap<Vec<u64>, u32>, seen: &mut Vec<Seen>) {
    for bits in 0..std::hint::black_box(PATHS) {
        let (c, frames) = step::<false>(0, bits, with);
        let from = if c.hit().is_some() {
            From::Met
        } else if c.noted().is_some() {
            From::Inputs
        } else {
            From::Walk
        };
        if let Some(id) = c.noted() {
            seen.push((Vec::new(), id, from));
            continue;
        }
        let next = ids.len() as u32 + 1;
        let id = *ids.entry(frames.clone()).or_insert(next);
        if let Some(slot) = c.hit() {
            set_memo_stack_id(slot, c.n(), id, with);
        }
        if c.waits_for_id() {
            note_walked_id(id);
        }
        seen.push((frames, id, from));
    }
}

/// The thread's first `first::AFTER` captures, before it takes its first-state cache and
/// its inputs; then three rounds, the last with something else merged (another Python
/// fingerprint). One call site for all: the outer frames are the same in every round.
#[inline(never)]
fn every_round() -> Vec<Seen> {
    let n = std::hint::black_box((first::AFTER / PATHS) as usize + 3);
    let mut ids = HashMap::with_capacity(4 * PATHS as usize);
    let mut seen = Vec::with_capacity(n * PATHS as usize);
    for i in 0..n {
        round(if i + 1 == n { 5 } else { 0 }, &mut ids, &mut seen);
    }
    seen
}

#[test]
fn call_paths_from_one_start_are_each_met_by_their_inputs_with_their_own_id() {
    let seen = on_a_fresh_thread(every_round);
    let mut rounds = seen.rchunks(PATHS as usize);
    let (other, second, first) = (rounds.next(), rounds.next(), rounds.next());
    let (other, second, first) = (other.unwrap(), second.unwrap(), first.unwrap());
    // 64 call paths in turn from one stack pointer, more than a first-state set holds
    // (16): the first round after the thread took its cache and its inputs walks each.
    let distinct: std::collections::HashSet<_> = first.iter().map(|s| &s.0).collect();
    assert_eq!(distinct.len(), PATHS as usize);
    assert!(first
        .iter()
        .all(|s| s.2 == From::Walk && s.0.len() > LEVELS as usize));
    // Met again: the last 16 in the first-state set (asked first), every one before them
    // by its inputs; each with the id of its own frames.
    for (bits, (was, now)) in first.iter().zip(second).enumerate() {
        let from = if bits < 48 { From::Inputs } else { From::Met };
        assert_eq!((now.1, now.2), (was.1, from), "path {bits}");
    }
    // With another thing merged: none by its inputs; each walked (its walk taking the
    // place of the memo and the first-state entry least recently used, so that none of
    // the last round's is left when its path comes), with its own frames and their id.
    for (bits, (was, now)) in first.iter().zip(other).enumerate() {
        assert_eq!(
            (&now.0, now.1, now.2),
            (&was.0, was.1, From::Walk),
            "path {bits}"
        );
    }
}

/// `f` called below a frame of 600 KiB.
#[inline(never)]
fn under_a_large_frame<T>(f: impl FnOnce() -> T) -> T {
    let mut large = [0u8; 600 << 10];
    std::hint::black_box(&mut large);
    let r = f();
    std::hint::black_box(&large);
    r
}

#[test]
fn a_walk_that_reads_a_word_past_what_an_offset_holds_is_not_kept_by_its_inputs() {
    // The same rounds below a frame of 600 KiB: each walk reads a return address 600 KiB
    // above its start, past the 512 KiB a shape's u16 offsets reach, so no shape is kept.
    // Met again, every path is walked again, with its own frames and id: never given by
    // its inputs (and the walks of the first 48 take the first-state set's entries, where
    // the last 16 were met when the inputs answered the others).
    let seen = on_a_fresh_thread(|| under_a_large_frame(every_round));
    let mut rounds = seen.rchunks(PATHS as usize);
    let (_, second, first) = (rounds.next(), rounds.next(), rounds.next());
    let (second, first) = (second.unwrap(), first.unwrap());
    assert!(first.iter().all(|s| s.2 == From::Walk));
    for (bits, (was, now)) in first.iter().zip(second).enumerate() {
        let now = (&now.0, now.1, now.2);
        assert_eq!(now, (&was.0, was.1, From::Walk), "path {bits}");
    }
}
