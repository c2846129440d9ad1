//! A micro-benchmark of the two unwinders at call depth 20 (not a test: it prints, never
//! asserts): `cargo test --release -p gpumemprof-shim --lib unwind::bench -- --ignored --nocapture`.

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
    let (f, nf) = best_ns(20, 20_000, fast);
    let (w, nw) = best_ns(20, 20_000, walked);
    let (s, ns) = best_ns(5, 2_000, crate::capture::stack::capture_slow);
    println!(
        "unwind, depth 20: fast {f:.1} ns/stack ({nf} frames), fast without its memo \
         {w:.1} ns/stack ({nw} frames), libgcc {s:.1} ns/stack ({ns} frames)"
    );
}
