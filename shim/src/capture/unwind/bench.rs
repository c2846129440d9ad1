//! Micro-benchmarks of the unwinders (not tests: they print, never assert): the two
//! unwinders at call depth 20 (the fast one also as a loop's capture with its id noted), and the first-state cache met by call paths in turn
//! (`cargo test --release -p gpumemprof-shim --lib unwind::bench -- --ignored --nocapture`).

use super::*;
use std::time::Instant;

#[inline(never)]
fn at_depth(depth: u32, f: &mut dyn FnMut()) -> u32 {
    if depth > 0 {
        let r = at_depth(depth - 1, f);
        return std::hint::black_box(r + 1);
    }
    f();
    0
}

/// Best (lowest) nanoseconds per capture over `rounds` batches of `per` captures:
/// the machine's other load only ever adds time.
fn best_ns(rounds: u32, per: u32, capture: fn(&mut [MaybeUninit<u64>]) -> usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut frames = 0;
    for _ in 0..rounds {
        at_depth(20, &mut || {
            let mut out = [MaybeUninit::<u64>::uninit(); 64];
            let t = Instant::now();
            for _ in 0..per {
                frames = capture(std::hint::black_box(&mut out));
            }
            best = best.min(t.elapsed().as_nanos() as f64 / per as f64);
        });
    }
    (best, frames)
}

#[test]
#[ignore]
fn bench() {
    assert!(init());
    let fast = |o: &mut [MaybeUninit<u64>]| capture(o, 0, 0).unwrap_or(0);
    let walked = |o: &mut [MaybeUninit<u64>]| {
        THREAD.with(|t| t.memos.slots.iter().for_each(|m| m.forget()));
        capture(o, 0, 0).unwrap_or(0)
    };
    // A loop's capture once its id is noted: the id, no frame copied (`capture_noted`).
    let noted = |o: &mut [MaybeUninit<u64>]| match capture_noted(o, 0, 0, Some(0), None) {
        Some(c) => {
            if let (Some(h), None) = (c.hit(), c.noted()) {
                set_memo_stack_id(h, c.n(), 1, 0);
            }
            c.n()
        }
        None => 0,
    };
    let (f, nf) = best_ns(20, 20_000, fast);
    let (d, nd) = best_ns(20, 20_000, noted);
    let (w, nw) = best_ns(20, 20_000, walked);
    let (s, ns) = best_ns(5, 2_000, crate::capture::stack::capture_slow);
    println!(
        "unwind, depth 20: fast {f:.1} ns/stack ({nf} frames), with its id noted {d:.1} \
         ns/stack ({nd} frames), fast without its memo {w:.1} ns/stack ({nw} frames), \
         libgcc {s:.1} ns/stack ({ns} frames)"
    );
}

/// One frame of a path: `left` or `right` by the low bit of `bits`, `depth` deep.
#[inline(never)]
fn left(depth: u32, bits: u32, f: &mut dyn FnMut()) -> u32 {
    std::hint::black_box(step(depth, bits, f) + 1)
}

#[inline(never)]
fn right(depth: u32, bits: u32, f: &mut dyn FnMut()) -> u32 {
    std::hint::black_box(step(depth, bits, f) + 2)
}

fn step(depth: u32, bits: u32, f: &mut dyn FnMut()) -> u32 {
    if depth == 0 {
        f();
        return 0;
    }
    if bits & 1 == 0 {
        left(depth - 1, bits >> 1, f)
    } else {
        right(depth - 1, bits >> 1, f)
    }
}

/// TSC ticks, ordered after what came before.
fn ticks() -> u64 {
    // SAFETY: no memory effects.
    unsafe {
        std::arch::x86_64::_mm_lfence();
        std::arch::x86_64::_rdtsc()
    }
}

/// The first-state cache met by `paths` call paths of depth 24 in turn (all at one stack
/// pointer, so in one set), each capture timed alone; with `evict`, 4 MiB are read between
/// two captures, as a training step's own work pushes the entry out of the first cache
/// levels. Median ticks per capture, and how many were met in the cache.
fn cache_ticks(paths: u32, rounds: u32, evict: bool) -> (u64, usize, usize) {
    let junk = vec![1u8; 4 << 20];
    let mut times = Vec::new();
    let mut met = 0;
    let mut frames = 0;
    for r in 0..rounds {
        for p in 0..paths {
            if evict {
                let sum: u64 = junk.iter().step_by(64).map(|&b| u64::from(b)).sum();
                std::hint::black_box(sum);
            }
            step(24, p, &mut || {
                let mut out = [MaybeUninit::<u64>::uninit(); 64];
                let t = ticks();
                let got = capture_memo(std::hint::black_box(&mut out), 0, 0);
                let dt = ticks() - t;
                if let Some((n, slot)) = got {
                    frames = n;
                    met += usize::from(slot.is_some_and(is_first_state_entry));
                }
                // The cache is taken after `first::AFTER` captures: time the rest.
                if r >= 4 {
                    times.push(dt);
                }
            });
        }
    }
    times.sort_unstable();
    (times[times.len() / 2], met, frames)
}

#[test]
#[ignore]
fn bench_first_state_cache() {
    assert!(init());
    for (paths, evict) in [(12, false), (12, true), (1, true)] {
        let rounds = if evict { 400 } else { 4000 };
        let (t, met, frames) = cache_ticks(paths, rounds, evict);
        let what = if paths == 1 {
            "one call path".to_string()
        } else {
            format!("{paths} call paths in turn")
        };
        let cold = if evict {
            ", 4 MiB read between captures"
        } else {
            ""
        };
        println!(
            "first-state cache, {what}, depth 24 ({frames} frames){cold}: median {t} ticks \
             a capture; {met} of {} met in the cache",
            paths * rounds
        );
    }
}
