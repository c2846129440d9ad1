//! The unwinder's tests: frames equal to libgcc's, on this thread and others.

use super::*;

/// `capture` until it walks: a rule miss declines (`None`) while another thread holds the
/// slow path's lock (`miss` only try-locks it), and other tests unwind at the same time,
/// computing rules (milliseconds for a large object). Once the rules are in, the walk
/// succeeds. Panics after 10 s.
pub(super) fn retried<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(r) = f() {
            return r;
        }
        RETRIED.with(|r| r.set(true));
        assert!(std::time::Instant::now() < deadline, "fast path");
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

thread_local! {
    /// `retried` tried again on this thread: the optimiser peels its loop, so the call
    /// that succeeded came from another copy of it, another return address: another call
    /// path than a first try's, with a memo of its own (`on_a_fresh_thread`).
    static RETRIED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `depth` real frames, then both unwinders from the same function.
#[inline(never)]
fn nested(depth: u32, fast: &mut Vec<u64>, slow: &mut Vec<u64>) -> u32 {
    if depth > 0 {
        let r = nested(depth - 1, fast, slow);
        return std::hint::black_box(r + 1);
    }
    let mut a = [MaybeUninit::<u64>::uninit(); 128];
    let n = retried(|| capture(&mut a, 0, 0));
    fast.extend(a[..n].iter().map(|f| unsafe { f.assume_init() }));
    let mut b = [MaybeUninit::<u64>::uninit(); 128];
    let m = crate::capture::stack::capture_slow(&mut b);
    slow.extend(b[..m].iter().map(|f| unsafe { f.assume_init() }));
    0
}

/// The two stacks from their first common frame: the frames inside each unwinder
/// differ, everything from the caller of `nested`'s innermost call outwards must not.
fn common_tail<'a>(fast: &'a [u64], slow: &'a [u64]) -> (&'a [u64], &'a [u64]) {
    let i = fast
        .iter()
        .position(|a| slow.contains(a))
        .expect("a common frame");
    let j = slow.iter().position(|a| *a == fast[i]).unwrap();
    (&fast[i..], &slow[j..])
}

#[test]
fn fast_frames_equal_libgcc_frames_on_this_thread_and_another() {
    assert!(init());
    for _ in 0..3 {
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        nested(20, &mut fast, &mut slow);
        let (f, s) = common_tail(&fast, &slow);
        assert!(f.len() > 20, "{fast:x?}\n{slow:x?}");
        assert_eq!(f, s);
        // At most this function's own frame and `capture` before the common part.
        assert!(fast.len() - f.len() <= 2, "{fast:x?}\n{slow:x?}");
    }
    std::thread::spawn(|| {
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        nested(30, &mut fast, &mut slow);
        let (f, s) = common_tail(&fast, &slow);
        assert!(f.len() > 30);
        assert_eq!(f, s);
    })
    .join()
    .unwrap();
}

#[inline(never)]
fn other_site(depth: u32, fast: &mut Vec<u64>, slow: &mut Vec<u64>) -> u32 {
    let mut pad = [0u8; 48];
    std::hint::black_box(&mut pad);
    std::hint::black_box(nested(depth, fast, slow)) + pad[0] as u32
}

#[test]
fn the_memo_never_changes_the_frames_of_changing_stacks() {
    assert!(init());
    // Depths and call sites that change between captures, repeat, and change back:
    // the memos are met at the first state, at a later one, found out of date.
    for i in 0..200u32 {
        let depth = [3, 3, 9, 3, 17, 17, 4][(i % 7) as usize] + (i / 50);
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        if i % 3 == 0 {
            other_site(depth, &mut fast, &mut slow);
        } else {
            nested(depth, &mut fast, &mut slow);
        }
        let (f, s) = common_tail(&fast, &slow);
        assert_eq!(f, s, "capture {i}");
        assert!(
            fast.len() - f.len() <= 2,
            "capture {i}: {fast:x?}\n{slow:x?}"
        );
    }
}

#[test]
fn a_garbage_register_state_is_refused_not_followed() {
    assert!(init());
    let mut out = [MaybeUninit::<u64>::uninit(); 64];
    let here = a_garbage_register_state_is_refused_not_followed as *const () as u64;
    let top = THREAD.with(|t| t.stack_top()).unwrap();
    let sp = top - 4096;
    let memos = Memos {
        slots: [const { memo::Memo::new() }; memo::SLOTS],
        clock: Cell::new(0),
    };
    let walk_from = |out: &mut [MaybeUninit<u64>], ip, sp| {
        let from = first::Start {
            ip,
            sp,
            bp: 0,
            epoch: EPOCH.load(Ordering::Acquire),
            skip: (0, 0),
        };
        walk(
            out,
            Regs { ip, sp, bp: 0 },
            top,
            &memos,
            &mut Met::default(),
            from,
            None,
            None,
            None,
            None,
        )
    };
    // An address in no object, a stack pointer above the top, and one whose caller's
    // return address would lie above the top.
    assert_eq!(walk_from(&mut out, 0x10, sp), None);
    assert_eq!(walk_from(&mut out, here, top + 64), None);
    assert_eq!(walk_from(&mut out, here, top), None);
    assert_eq!(walk_from(&mut [], here, sp), Some(0));
}

#[test]
fn the_per_thread_state_stays_small() {
    // Static TLS of every thread of the profiled process (the module comment's figure).
    let size = std::mem::size_of::<Thread>();
    assert!(size <= 14 * 1024, "{size} bytes");
}

/// Held by the tests that move the rule epoch and by those whose memos must outlive a
/// few captures (a new epoch makes every memo stale).
static EPOCH_STEADY: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

#[test]
fn an_unload_retires_every_cached_rule() {
    let _moving = EPOCH_STEADY.lock();
    let e = EPOCH.load(Ordering::Relaxed);
    note_loader_generation((1, 1));
    note_loader_generation((1, 2));
    assert_ne!(EPOCH.load(Ordering::Relaxed), e);
    let e = EPOCH.load(Ordering::Relaxed);
    note_loader_generation((1, 2));
    assert_eq!(EPOCH.load(Ordering::Relaxed), e);
}

#[test]
fn a_load_alone_keeps_every_cached_rule() {
    let _moving = EPOCH_STEADY.lock();
    // The process's own unload count, so that a module scan on another test's thread
    // (which notes it too) moves nothing here.
    let (adds, subs) = crate::capture::modules::generation();
    let e = EPOCH.load(Ordering::Relaxed);
    // Two libraries loaded, none unloaded: the epoch stays, and with it the memos.
    note_loader_generation((adds + 1, subs));
    note_loader_generation((adds + 2, subs));
    assert_eq!(EPOCH.load(Ordering::Relaxed), e);
    // Then one unloaded.
    note_loader_generation((adds + 2, subs + 1));
    assert_ne!(EPOCH.load(Ordering::Relaxed), e);
    // The real count again (one more epoch), for the tests after this one.
    note_loader_generation((adds, subs));
}

/// One capture through `capture_memo`; whether it met a memo at its first state.
#[inline(never)]
fn capture_hit() -> bool {
    let mut out = [MaybeUninit::<u64>::uninit(); 64];
    let r = retried(|| capture_memo(&mut out, 0, 0));
    std::hint::black_box(r.1.is_some())
}

#[inline(never)]
fn path_a() -> bool {
    std::hint::black_box(capture_hit())
}

#[inline(never)]
fn path_b() -> bool {
    let mut pad = [0u8; 32];
    std::hint::black_box(&mut pad);
    std::hint::black_box(capture_hit()) && pad[0] == 0
}

#[inline(never)]
fn path_c() -> bool {
    let mut pad = [0u8; 96];
    std::hint::black_box(&mut pad);
    std::hint::black_box(capture_hit()) && pad[0] == 0
}

/// The three paths from one caller (as an allocation, its free and an earlier call are
/// made from one loop).
#[inline(never)]
fn from_one_caller(which: u32) -> bool {
    let r = match which {
        0 => path_a(),
        1 => path_b(),
        _ => path_c(),
    };
    std::hint::black_box(r)
}

/// `f` on a thread of its own (fresh memos), the rule epoch held still meanwhile (a new
/// epoch makes every memo stale). Other tests load libraries, which moves the epoch
/// (`modules::generation`, from tests of the writer and the module scan that do not know
/// this lock): a run during which it moved is run again, on a fresh thread. So is a run
/// whose captures `retried` had to try again (the rules' lock held by another test's
/// walk): the one that succeeded came from another call site than the rounds after it.
pub(super) fn on_a_fresh_thread<T: Send + 'static>(f: impl Fn() -> T + Send + Sync + 'static) -> T {
    assert!(init());
    let _steady = EPOCH_STEADY.lock();
    let f = std::sync::Arc::new(f);
    for _ in 0..20 {
        let before = EPOCH.load(Ordering::Acquire);
        let run = f.clone();
        let (r, retried) = std::thread::spawn(move || (run(), RETRIED.with(|r| r.get())))
            .join()
            .unwrap();
        if EPOCH.load(Ordering::Acquire) == before && !retried {
            return r;
        }
    }
    panic!("the rule epoch moved, or a capture was tried again, during 20 runs in a row");
}

#[test]
fn two_paths_that_share_a_caller_keep_a_memo_each() {
    // A third path first takes a slot; then the two take turns. Each joins the third
    // one's memo at their common caller once, and must then be met at its first state
    // every time: a joined walk replaces the memo least recently met at its first state,
    // not the other path's.
    let hits = on_a_fresh_thread(|| {
        // A count the compiler cannot see: a loop of a known count is unrolled in a
        // release build, and each unrolled call is a call path of its own.
        let rounds = std::hint::black_box(21);
        let order = (0..rounds).map(|i| if i == 0 { 2 } else { i % 2 });
        // One call site for all: the walks meet at its frame.
        order.map(from_one_caller).collect::<Vec<bool>>()
    });
    assert_eq!(hits[5..], [true; 16], "{hits:?}");
}

/// One of two call paths whose captures start at one stack pointer (the same frame, as an
/// allocation's and a free's hooks are): copies that differ in a constant only.
#[inline(never)]
fn twin<const K: u64>() -> bool {
    let r = capture_hit();
    std::hint::black_box(K);
    std::hint::black_box(r)
}

#[inline(never)]
fn from_twins(which: u32) -> bool {
    let r = if which == 0 { twin::<1>() } else { twin::<2>() };
    std::hint::black_box(r)
}

#[test]
fn captures_that_take_turns_at_one_stack_pointer_each_meet_their_memo_first() {
    // An allocation and its free in a loop: their captures start at one stack pointer and
    // differ above it. Each meets its own memo at its first state, and the other's is
    // not compared first (it would be found stale: a miss counted on it every capture).
    let seen = on_a_fresh_thread(|| {
        let rounds = std::hint::black_box(40);
        (0..rounds)
            .map(|i| {
                let hit = from_twins(i % 2);
                let misses =
                    THREAD.with(|t| [t.memos.slots[0].misses(), t.memos.slots[1].misses()]);
                (hit, misses)
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(seen[8..], [(true, [0, 0]); 32], "{seen:?}");
}

/// One `capture_noted` from one call site, into a buffer filled with a marker first.
#[inline(never)]
fn noted_from_here(with: Option<u64>) -> (Captured, [u64; 64]) {
    let mut out = [MaybeUninit::new(0xDEAD_u64); 64];
    let c = retried(|| capture_noted(&mut out, 0, 0, with, None));
    // SAFETY: every entry was initialised with the marker, then maybe overwritten.
    let frames = out.map(|f| unsafe { f.assume_init() });
    std::hint::black_box((c, frames))
}

thread_local! {
    /// The frames `told` was last told, and how many times it was.
    static TOLD: std::cell::RefCell<(Vec<u64>, u32)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// Notes the frames it is told, and gives back their number plus 1000.
fn told(frames: &[u64]) -> u64 {
    TOLD.with(|t| {
        let mut t = t.borrow_mut();
        t.0 = frames.to_vec();
        t.1 += 1;
    });
    frames.len() as u64 + 1000
}

/// One `capture_noted` from one call site, telling `told`: its frames, whether it was
/// told them, and what `Found::got` holds after it.
#[inline(never)]
fn told_from_here() -> (Vec<u64>, bool, u64) {
    let before = TOLD.with(|t| t.borrow().1);
    let mut out = [MaybeUninit::new(0u64); 64];
    let mut found = Found::new(told);
    let c = retried(|| capture_noted(&mut out, 0, 0, None, Some(&mut found)));
    let frames: Vec<u64> = out[..c.n()]
        .iter()
        .map(|f| unsafe { f.assume_init() })
        .collect();
    let after = TOLD.with(|t| t.borrow().1);
    std::hint::black_box((frames, after > before, found.got))
}

#[test]
fn found_is_told_the_frames_of_a_walk_that_is_stored_and_only_then_and_keeps_its_answer() {
    let (walks, told_frames) = on_a_fresh_thread(|| {
        let rounds = std::hint::black_box(3);
        // One call site for every round (`collect` takes its first item from a call of
        // its own: another stack).
        let mut walks: Vec<(Vec<u64>, bool, u64)> = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            walks.push(told_from_here());
        }
        (walks, TOLD.with(|t| t.borrow().0.clone()))
    });
    // The first capture walks and is stored: told exactly its frames. The next two meet
    // its memo at their first state: nothing is stored, nothing told.
    assert!(walks[0].0.len() > 3, "{walks:?}");
    assert_eq!(
        walks.iter().map(|w| w.1).collect::<Vec<_>>(),
        [true, false, false]
    );
    assert_eq!(told_frames, walks[0].0);
    assert_eq!(walks[1].0, walks[0].0);
    // What it gave back is kept for the caller, and a capture that told nothing leaves 0.
    let got = walks.iter().map(|w| w.2).collect::<Vec<_>>();
    assert_eq!(got, [walks[0].0.len() as u64 + 1000, 0, 0]);
}

#[test]
fn a_loops_capture_with_a_noted_id_gives_the_id_and_copies_no_frame() {
    // One call site, seven rounds: an id is noted with nothing merged after the second,
    // none asked for in the fifth, and then an id noted with something merged (a Python
    // fingerprint, 5), asked for with 0 and with 5.
    let seen = on_a_fresh_thread(|| {
        let rounds = std::hint::black_box(7);
        let mut seen = Vec::new();
        for i in 0..rounds {
            let with = [Some(0), Some(0), Some(0), Some(0), None, Some(0), Some(5)][i];
            let (c, frames) = noted_from_here(with);
            let copied = frames[..c.n()].iter().all(|&f| f != 0xDEAD) && c.n() > 3;
            seen.push((c.hit().is_some(), c.noted(), copied));
            match (i, c.hit()) {
                // The hook interns the frames the second capture met, and notes the id.
                (1, Some(h)) => set_memo_stack_id(h, c.n(), 77, 0),
                (4, Some(h)) => set_memo_stack_id(h, c.n(), 78, 5),
                _ => {}
            }
        }
        seen
    });
    // The first walks itself; the second meets its memo (no id yet: frames copied); then
    // the id, with the buffer left as it was; not asked for, the frames; asked for with
    // 0 once the id is noted with 5, the frames; with 5, that id.
    assert_eq!(
        seen,
        [
            (false, None, true),
            (true, None, true),
            (true, Some(77), false),
            (true, Some(77), false),
            (true, None, true),
            (true, None, true),
            (true, Some(78), false),
        ]
    );
}

#[test]
fn a_capture_packs_its_frames_slot_and_id_into_one_word() {
    let c = Captured::new(
        crate::sys::config::MAX_STACK_DEPTH,
        Some(memo::SLOTS + 255),
        Some(u32::MAX),
    );
    assert_eq!(
        (c.n(), c.hit(), c.noted()),
        (128, Some(257), Some(u32::MAX))
    );
    assert!(!c.waits_for_id());
    let c = Captured::new(0, None, None);
    assert_eq!((c.n(), c.hit(), c.noted()), (0, None, None));
    // A walk kept by its inputs: the flag beside the frames, which stay as they were.
    let c = Captured::new(crate::sys::config::MAX_STACK_DEPTH, None, None).pending(true);
    assert!(c.waits_for_id());
    assert_eq!((c.n(), c.hit(), c.noted()), (128, None, None));
    assert!(!Captured::new(3, Some(1), None)
        .pending(false)
        .waits_for_id());
    assert_eq!(std::mem::size_of::<Option<Captured>>(), 16);
}
