//! The fast unwinder: the stack's return addresses from unwind rules cached per code
//! address, and a per-thread memo of the last stacks, so that a loop's allocations
//! compare their stack with the last one instead of unwinding it again.
//!
//! ```text
//!  rip, rsp, rbp read at the capture point (inline asm)
//!   └► state (sp, rbp, ra) ── same as a remembered state, and every stack word read
//!      │                      after it unchanged? ─► copy the remembered frames, done
//!      │                      (memo.rs: usually at the first state, ~1 ns a word)
//!      ├► (first state, no memo) the first-state cache (first.rs), then: a walk of this
//!      │    start that read these words? ─► its stack id, no frames (inputs.rs)
//!      └► rule = rules::get(ra - 1)                lock-free, one cache line
//!           miss ─► cfi::Slow::rule_for            once per address, under a try-lock
//!         CFA = rsp|rbp + off (or *(rbp + off)); ra = *(CFA - 8); rbp = *(CFA|rbp + off)
//!         every read within [first rsp, this thread's stack top), every CFA above the
//!         last; the next state
//! ```
//!
//! Whatever it cannot do exactly as libgcc would, it does not do: a rule it has no
//! encoding for (a signal frame, a CFA in a register other than rsp/rbp, an address
//! outside every object or without unwind info), a read that would leave the stack, a
//! stack pointer outside the thread's own stack, or a contended slow-path lock makes
//! `capture` return `None`, and the caller takes the whole stack from the slow (libgcc)
//! unwinder instead. A truncated or different stack is never returned;
//! `GPUMEMPROF_UNWIND=check` compares the two on every event.
//!
//! The rule cache is keyed by address and epoch; the epoch moves when the loader's
//! unload counter does (`note_loader_generation`, fed by the writer's module scan), so
//! rules of an unloaded object are not applied to another one mapped at its addresses
//! later. A load alone keeps the epoch: it maps new addresses and changes no rule already
//! cached (see `note_loader_generation`). What is left open: an object unloaded and a
//! different one mapped at exactly the same return addresses within one writer round
//! (`GPUMEMPROF_FLUSH_MS`).

mod captured;
pub mod cfi;
mod first;
mod inputs;
mod memo;
mod pool;
pub mod rules;

pub use captured::Captured;
use parking_lot::Mutex;
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The rule cache's current epoch (never 0 in its low 16 bits).
static EPOCH: AtomicU64 = AtomicU64::new(1);
/// The loader's unload counter (`dlpi_subs`) last seen.
static LOADER_SUBS: AtomicU64 = AtomicU64::new(0);
/// Whether `_dl_find_object` exists (set at initialisation).
static READY: AtomicBool = AtomicBool::new(false);
/// Stacks the fast path handed to the slow unwinder (diagnostics: `GPUMEMPROF_UNWIND=check`).
pub static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// The slow path's state; `None` until the first miss (it allocates gimli's storage
/// once). Only ever `try_lock`ed on the hot path: a thread never waits for it.
static SLOW: Mutex<Option<cfi::Slow>> = Mutex::new(None);

/// Frames walked per capture at most, shim frames included (the stack pointer also
/// rises strictly at every step, so this only bounds a pathological stack).
const MAX_STEPS: usize = 1024;

/// What the fast path keeps per thread (const-initialised, no Drop: about 14 KiB).
struct Thread {
    /// This thread's stack: [bottom, top); top 0: unknown yet, 1: unknowable.
    bottom: Cell<u64>,
    top: Cell<u64>,
    memos: Memos,
    /// The first-state cache (`first.rs`): null until the thread's `first::AFTER`th
    /// capture, then its own (given back at thread exit).
    first: Cell<*mut first::Cache>,
    /// The walks by their inputs (`inputs.rs`): null until taken with the first-state
    /// cache, then its own (given back at thread exit).
    inputs: Cell<*mut inputs::Inputs>,
    captures: Cell<u32>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            bottom: Cell::new(0),
            top: Cell::new(0),
            memos: Memos {
                slots: [const { memo::Memo::new() }; memo::SLOTS],
                clock: Cell::new(0),
            },
            first: Cell::new(std::ptr::null_mut()),
            inputs: Cell::new(std::ptr::null_mut()),
            captures: Cell::new(0),
        }
    };
}

impl Thread {
    /// The first-state cache as it is (null: none yet, or given back).
    fn first_cache_now(&self) -> *mut first::Cache {
        match self.first.get() {
            c if c == first::GONE => std::ptr::null_mut(),
            c => c,
        }
    }

    /// The first-state cache, taken at the `first::AFTER`th capture (null before, or
    /// when there was no memory for it).
    #[inline(always)]
    fn first_cache(&self) -> *mut first::Cache {
        let c = self.first.get();
        if c == first::GONE {
            return std::ptr::null_mut();
        }
        if !c.is_null() {
            return c;
        }
        let n = self.captures.get();
        if n < first::AFTER {
            self.captures.set(n + 1);
            return c;
        }
        let c = first::take();
        self.first.set(c);
        if self.inputs.get().is_null() {
            self.inputs.set(inputs::take());
        }
        c
    }

    /// The walks by their inputs as they are (null: none yet, or given back).
    fn inputs_now(&self) -> *mut inputs::Inputs {
        match self.inputs.get() {
            i if i == inputs::GONE => std::ptr::null_mut(),
            i => i,
        }
    }
}

/// The calling thread is exiting: its first-state cache and its walks by their inputs go
/// back to their pools.
pub fn thread_exit() {
    let _ = THREAD.try_with(|t| {
        first::give_back(t.first.replace(first::GONE));
        inputs::give_back(t.inputs.replace(inputs::GONE));
    });
}

/// Enables the fast path if glibc has `_dl_find_object` (2.35 and later). Called at
/// initialisation, from any thread, before the first capture that should be fast.
pub fn init() -> bool {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function; called once.
        unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) };
    });
    let ok = cfi::init();
    READY.store(ok, Ordering::Release);
    ok
}

/// In a fork child: a lock that another thread of the parent held stays held forever;
/// take a fresh slow-path state instead (the old one is leaked, never dropped).
extern "C" fn child_after_fork() {
    if SLOW.is_locked() {
        // SAFETY: the child's only thread; the holder no longer exists.
        unsafe {
            std::ptr::write(SLOW.data_ptr(), None);
            SLOW.force_unlock();
        }
    }
}

/// The loader's counters as just read by `modules::generation`: when an object was
/// unloaded since they were last seen, every cached rule is retired (its addresses may be
/// reused by another object), and with them every memo, first-state entry and shape, which
/// carry the epoch.
///
/// A load alone retires nothing: an object already loaded keeps its addresses and its
/// rules until it is unloaded, and the walk looks up only return addresses of live frames,
/// which lie in mapped code. The one rule a load can make stale is `Unsupported` cached for
/// an address outside every object, later mapped by the new one (a garbage return address
/// the walk met); that rule sends the walk to the slow unwinder, which is exact. Moving the
/// epoch on loads cost every cache its contents whenever a library was loaded: the shim's
/// own NVML sampler loads `libnvidia-ml` after the first events, and on `varied_sites
/// 100000` 17,000 to 28,673 call paths (four runs) walked a second time (BENCHMARKS.md,
/// twenty-fifth).
pub fn note_loader_generation((_adds, subs): (u64, u64)) {
    if LOADER_SUBS.swap(subs, Ordering::AcqRel) == subs {
        return;
    }
    let e = rules::next_epoch(EPOCH.load(Ordering::Relaxed));
    if e & 0xFFFF == 1 {
        // The 16-bit epoch of the keys wrapped: old keys could match again.
        let _g = SLOW.lock();
        rules::clear();
    }
    EPOCH.store(e, Ordering::Release);
}

/// The current stack's return addresses, innermost first, frames inside `[skip_lo,
/// skip_hi)` (the shim) skipped as the slow path skips them; `None`: take the slow path
/// (the tests' form of `capture_memo`).
#[cfg(test)]
pub fn capture(out: &mut [MaybeUninit<u64>], skip_lo: u64, skip_hi: u64) -> Option<usize> {
    capture_memo(out, skip_lo, skip_hi).map(|(n, _)| n)
}

/// Whether a memo slot `capture_memo` returned is an entry of the first-state cache.
pub fn is_first_state_entry(slot: usize) -> bool {
    slot >= memo::SLOTS
}

/// `capture`, and the memo slot the walk met at its first state, if it did: then the
/// frames are that memo's first frames, the same as the last time it was met so with
/// this many frames (until it is stored anew), and `capture_noted` may know their id.
#[cfg(test)]
#[inline(always)]
pub fn capture_memo(
    out: &mut [MaybeUninit<u64>],
    skip_lo: u64,
    skip_hi: u64,
) -> Option<(usize, Option<usize>)> {
    capture_noted(out, skip_lo, skip_hi, None, None).map(|c| (c.n(), c.hit()))
}

/// `capture_memo`; with `with`, also the id noted for the memo (or first-state cache
/// entry) met at the first state with `with` merged (`set_memo_stack_id`), found in the same
/// look at the thread's state, and then its frames are not copied (a loop's allocations
/// need only the id). `capture_memo` calls it: the walk inlined into both was left in
/// one shared, outlined `try_with`, a third slower on the real step (BENCHMARKS.md, tenth).
/// `found` is told the frames of a walk that found them, before it is stored (`Found`).
#[inline(never)]
pub fn capture_noted(
    out: &mut [MaybeUninit<u64>],
    skip_lo: u64,
    skip_hi: u64,
    with: Option<u64>,
    found: Option<&mut Found>,
) -> Option<Captured> {
    if !READY.load(Ordering::Relaxed) {
        return None;
    }
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags)
        );
    }
    let r = THREAD
        .try_with(|t| {
            let top = t.stack_top()?;
            // Not on this thread's own stack (an alternate signal stack, a coroutine's):
            // its bounds are unknown, so nothing is read.
            if sp < t.bottom.get() || sp >= top {
                return None;
            }
            let start = Regs { ip, sp, bp };
            let epoch = EPOCH.load(Ordering::Acquire);
            let from = first::Start {
                ip,
                sp,
                bp,
                epoch,
                skip: (skip_lo, skip_hi),
            };
            // SAFETY: this thread's own cache (from `first::take`), used by nobody else and
            // within one capture at a time (the shim's guard keeps captures from nesting).
            let mut cache = unsafe { t.first_cache().as_mut() };
            if cache.as_deref_mut().is_some_and(|c| !c.active()) {
                cache = None;
            }
            // SAFETY: this thread's own block, as the cache above.
            let inputs = unsafe { t.inputs_now().as_mut() };
            let mut met = Met::default();
            let n = walk(
                out, start, top, &t.memos, &mut met, from, cache, inputs, with, found,
            )?;
            // A first-state cache entry met gives its noted id itself (`met.id`).
            let id = match (met.hit, with) {
                _ if met.id.is_some() => met.id,
                (Some(slot), Some(w)) if slot < memo::SLOTS => t.memos.slots[slot].stack_id(n, w),
                _ => None,
            };
            Some(Captured::new(n, met.hit, id).pending(met.pending))
        })
        .ok()
        .flatten();
    if r.is_none() {
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Told the frames of a walk as soon as they are all known, before the walk is stored
/// in the memos (a copy of its states and words): the caller starts what it will read next,
/// the stack id's slot (`intern::prefetch`), which on a program of many call paths is a
/// miss in memory, and it arrives while the walk is stored (BENCHMARKS.md, twelfth).
/// Not told when a memo or the first-state cache gave every frame (nothing is stored).
pub struct Found {
    /// Told the frames; what it gives back is kept in `got`.
    tell: fn(&[u64]) -> u64,
    /// What `tell` gave back (0 until it is told; a walk that tells it returns those
    /// frames): `intern::prefetch`'s hash, which `intern::intern_hashed` then does not
    /// make again (BENCHMARKS.md, twenty-sixth). A struct passed by one pointer, not a
    /// closure: its two words pushed one more argument of `capture_noted` onto the stack.
    pub got: u64,
}

impl Found {
    pub fn new(tell: fn(&[u64]) -> u64) -> Found {
        Found { tell, got: 0 }
    }

    /// Tells `found`, if there is one, the walk's frames `out[..n]`. Not inlined: the
    /// walk's loop stays as it was without it.
    #[inline(never)]
    fn announce(found: Option<&mut Found>, out: &[MaybeUninit<u64>], n: usize) {
        if let Some(f) = found {
            // SAFETY: the walk initialised `out[..n]`.
            f.got = (f.tell)(unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u64, n) });
        }
    }
}

/// What a walk met besides its frames.
#[derive(Default)]
struct Met {
    /// The memo slot met at the walk's first state (the whole output copied from it), or
    /// `memo::SLOTS` + the first-state cache entry it came from.
    hit: Option<usize>,
    /// The stack id noted for the frames, with what the caller merges: a walk of the same
    /// inputs was noted with it (`inputs.rs`), or the first-state cache entry met (`hit`)
    /// was. No frames are copied.
    id: Option<u32>,
    /// The walk was kept by its inputs and waits for its id (`note_walked_id`).
    pending: bool,
}

/// Notes that the frames of the last `capture_noted`, which `waits_for_id`, were interned
/// (with what was asked for merged in) as `id`: a later capture that reads the same stack
/// words from the same start gets it without a walk.
pub fn note_walked_id(id: u32) {
    let _ = THREAD.try_with(|t| {
        // SAFETY: this thread's own block (see `Thread::first_cache`).
        if let Some(i) = unsafe { t.inputs_now().as_mut() } {
            i.note(id);
        }
    });
}

/// Where a walk starts: an instruction pointer and the stack and frame pointers there.
#[derive(Clone, Copy)]
struct Regs {
    ip: u64,
    sp: u64,
    bp: u64,
}

/// Notes that the frames `capture_memo` returned with memo `slot`, with `with` merged
/// into them (it names what the caller merged: 0 for nothing), were interned as `id`; a
/// later `capture_noted` that meets the memo at its first state, asking for `with`, gets
/// the id. Slots from `memo::SLOTS` on are entries of the first-state cache.
pub fn set_memo_stack_id(slot: usize, frames: usize, id: u32, with: u64) {
    let _ = THREAD.try_with(|t| match slot.checked_sub(memo::SLOTS) {
        None => {
            if let Some(m) = t.memos.slots.get(slot) {
                m.set_stack_id(frames, id, with);
            }
        }
        Some(i) => {
            // SAFETY: this thread's own cache (see `Thread::first_cache`).
            if let Some(c) = unsafe { t.first_cache_now().as_mut() } {
                c.set_stack_id(i, frames, id, with);
            }
        }
    });
}

/// The walk from a known register state. `start.sp..top` is the readable part of the
/// stack. States are compared with (and remembered in) `memos`, then, where no memo starts
/// as this walk does, looked up in the first-state cache `keep` (and the walk stored there);
/// the first state is compared with both before the rest of the walk is set up.
/// `hit` is set to the memo slot met at its first state by the walk's first state (the
/// whole output copied from it), or to `memo::SLOTS` + the cache entry it came from. With
/// `with`, a memo or entry met at the first state with a stack id noted for its frames
/// with `with` merged does not copy them (the caller takes the id).
/// `found` is told the frames before the walk is stored, if it is.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk(
    out: &mut [MaybeUninit<u64>],
    start: Regs,
    top: u64,
    memos: &Memos,
    met: &mut Met,
    from: first::Start,
    mut keep: Option<&mut first::Cache>,
    mut inputs: Option<&mut inputs::Inputs>,
    with: Option<u64>,
    mut found: Option<&mut Found>,
) -> Option<usize> {
    let (skip_lo, skip_hi) = from.skip;
    let Regs { ip, mut sp, mut bp } = start;
    let lo = sp;
    let last = top.checked_sub(8)?;
    // A word at `a` may be read if it lies wholly in [lo, top).
    let readable = |a: u64| a >= lo && a <= last;
    // SAFETY (for every `read`): only called on addresses `readable` accepted, which lie
    // in this thread's own stack between the current stack pointer and its top.
    let read = |a: u64| unsafe { (a as *const u64).read() };
    if out.is_empty() {
        return Some(0);
    }
    let epoch = from.epoch;
    let skip = (skip_lo, skip_hi);
    let in_shim = |a: u64| a >= skip_lo && a < skip_hi;
    let now = memos.clock.get() + 1;
    memos.clock.set(now);
    // The first state alone, before the walk's record is set up: the memos that start at
    // this stack pointer, then the first-state cache, then the walks by their inputs. On
    // a program of many call paths nearly every capture ends here (BENCHMARKS.md,
    // twenty-third and twenty-fifth).
    // Inside the shim (the first frame is this function) until the first program frame.
    let mut in_program = !in_shim(ip);
    let first_state = memo::State {
        sp,
        bp,
        ra: ip + 1,
        in_program,
    };
    // Per memo: where a change found in its words at the first state leaves it
    // (`Resume::Stale`).
    let mut stale_from = [None; memo::SLOTS];
    // The least recently used memo first: an allocation's and a free's captures start at
    // one stack pointer and differ only in the shim's frames above it, so in a loop that
    // allocates and frees they take turns, and the memo of each is the one the other did
    // not just meet (the other, compared first, would be found stale a capture in two:
    // BENCHMARKS.md, twenty-fifth). A memo of a loop of one stack beside an old one
    // misses first, goes cold after `memo::COLD` misses and is then passed over.
    const _: () = assert!(memo::SLOTS == 2, "the order below is of two memos");
    let order: [usize; memo::SLOTS] = if memos.slots[1].used() < memos.slots[0].used() {
        [1, 0]
    } else {
        [0, 1]
    };
    for j in order {
        let (m, stale_at) = (&memos.slots[j], &mut stale_from[j]);
        if m.len(epoch, skip) == 0 || m.sp(0) != sp || m.skipped_at_first(now) {
            continue;
        }
        // SAFETY: the memo is this thread's, its words read by its walks on its stack.
        let r = unsafe { m.resume(0, first_state, out, 0, now, with) };
        m.compared_at_first(matches!(r, memo::Resume::Done(_)));
        match r {
            memo::Resume::Done(total) => {
                met.hit = Some(j);
                return Some(total);
            }
            memo::Resume::Differs => {}
            memo::Resume::Stale(next) => *stale_at = Some(next),
        }
    }
    if let Some(c) = keep.as_deref_mut() {
        // SAFETY: this thread's cache; `lo..top` is its stack.
        if let Some((total, entry, id)) = unsafe { c.lookup(from, out, with) } {
            met.hit = Some(memo::SLOTS + entry);
            met.id = id;
            return Some(total);
        }
    }
    // Neither a memo nor the first-state cache (or it sits out a rest: more call paths of
    // this start than a set holds) starts here as this walk does: a walk of the same start
    // that read the same words may have its stack id noted (the caller takes it; no frame
    // is copied). Asked before the walk's record and the memos' positions are set up
    // (where it was asked at the walk's first step, `varied_sites 256` took 10% more
    // instructions). No memo could answer the first state further in: a memo's later state
    // has the return address of a frame above this function, never this function's own
    // instruction pointer.
    if let (Some(w), Some(i)) = (with, inputs.as_deref_mut()) {
        // SAFETY: this thread's block; `lo..top` is its stack.
        if let Some(id) = unsafe { i.lookup(from, out.len(), top, w) } {
            met.id = Some(id);
            return Some(0);
        }
    }
    // Per memo: states remembered, and the first one not below the current state (or
    // the first one after a change found in its words).
    let mut len = [0; memo::SLOTS];
    for (l, m) in len.iter_mut().zip(&memos.slots) {
        *l = m.len(epoch, skip);
    }
    let mut k = [0; memo::SLOTS];
    let mut stale = None;
    let mut rec = memo::Record::new();
    // The recorded word holding the current rbp while no rule has read it, and the first
    // recorded state that holds the current rbp.
    let mut bp_word: Option<usize> = None;
    let mut bp_since = 0;
    let mut n = 0;
    // The first state: the instruction pointer stands for a return address one past it.
    let mut ra = ip + 1;
    for _ in 0..MAX_STEPS {
        let s = memo::State {
            sp,
            bp,
            ra,
            in_program,
        };
        for j in 0..memo::SLOTS {
            let m = &memos.slots[j];
            while k[j] < len[j] && m.sp(k[j]) < sp {
                k[j] += 1;
            }
            if k[j] < len[j] && m.sp(k[j]) == sp {
                let at_first = rec.states() == 0 && k[j] == 0;
                if at_first {
                    // Compared above, before the walk's record was set up.
                    if let Some(next) = stale_from[j] {
                        k[j] = next;
                        stale = Some(j);
                    }
                    continue;
                }
                let id_with = with.filter(|_| rec.states() == 0);
                // SAFETY: the memo is this thread's, its words read by its walks on its stack.
                let r = unsafe { m.resume(k[j], s, out, n, now, id_with) };
                match r {
                    memo::Resume::Done(total) => {
                        if rec.states() > 0 {
                            // Met past its first state: remember the whole walk, so
                            // that the next one from here is met at once, in place of
                            // the memo least recently met at its first state (this one
                            // too: two call paths that share a caller, such as an
                            // allocation and its free, would otherwise take turns
                            // evicting each other from the other slot).
                            Found::announce(found.as_deref_mut(), out, total);
                            rec.join(s, m, k[j], bp_word, bp_since);
                            let lru = memos.least_recent_except(memo::SLOTS);
                            memos.remember(&rec, Some(lru), epoch, skip, m.full(), now);
                            if let Some(c) = keep.as_deref_mut() {
                                c.store(from, &rec, out, total);
                            }
                            if let (Some(w), Some(i)) = (with, inputs.as_deref_mut()) {
                                met.pending = i.store(from, &rec, out.len(), top, w);
                            }
                        }
                        return Some(total);
                    }
                    memo::Resume::Differs => {}
                    memo::Resume::Stale(next) => {
                        k[j] = next;
                        stale = Some(j);
                    }
                }
            }
        }
        rec.state(s);
        // The walk found every frame itself: remembered for the next one. A macro, not a
        // closure: a closure defined in the loop had its twelve captures gathered at every
        // step (25 instructions a step on a first sight of `varied_sites`).
        macro_rules! end {
            ($full:expr) => {{
                Found::announce(found.as_deref_mut(), out, n);
                if let Some(i) = bp_word {
                    rec.forget_word(i);
                }
                memos.remember(&rec, stale, epoch, skip, $full, now);
                if let Some(c) = keep.as_deref_mut() {
                    c.store(from, &rec, out, n);
                }
                if let (Some(w), Some(i)) = (with, inputs.as_deref_mut()) {
                    met.pending = i.store(from, &rec, out.len(), top, w);
                }
            }};
        }
        if in_program && n == out.len() {
            end!(true);
            return Some(n);
        }
        let lookup = ra - 1;
        if lookup > rules::MAX_ADDRESS {
            return None;
        }
        let key = rules::key(lookup, epoch);
        let w = match rules::get(lookup, key) {
            Some(w) => w,
            None => miss(lookup, key)?,
        };
        match w & rules::KIND_MASK {
            rules::KIND_STEP => {}
            rules::KIND_END => {
                end!(false);
                return Some(n);
            }
            _ => return None,
        }
        let cfa_off = rules::cfa_off(w);
        let base = rules::base(w);
        let saved = rules::rbp_saved(w);
        if base != rules::BASE_RSP || saved == rules::RBP_AT_RBP {
            // This rule reads rbp: its value (and the word it came from) matters.
            bp_word = None;
            rec.bp_read(bp_since);
            bp_since = rec.states();
        }
        let cfa = match base {
            rules::BASE_RSP => sp.wrapping_add(cfa_off),
            rules::BASE_RBP => bp.wrapping_add(cfa_off),
            _ => {
                let at = bp.wrapping_add(cfa_off);
                if !readable(at) {
                    return None;
                }
                let v = read(at);
                rec.word(at, v);
                v
            }
        };
        // The caller's frame lies above this one, and its return address on the stack.
        let ra_at = cfa.wrapping_sub(8);
        if cfa <= sp || ra_at < sp || !readable(ra_at) {
            return None;
        }
        ra = read(ra_at);
        rec.word(ra_at, ra);
        if saved != rules::RBP_SAME {
            let from = if saved == rules::RBP_AT_CFA { cfa } else { bp };
            let at = from.wrapping_add(rules::rbp_off(w));
            if !readable(at) {
                return None;
            }
            bp = read(at);
            if let Some(i) = bp_word {
                rec.forget_word(i);
            }
            bp_word = Some(rec.words());
            rec.word(at, bp);
            bp_since = rec.states();
        }
        sp = cfa;
        if ra == 0 {
            end!(false);
            return Some(n);
        }
        if !in_program && !in_shim(ra) {
            in_program = true;
        }
        if in_program {
            out[n] = MaybeUninit::new(ra);
            n += 1;
        }
    }
    None
}

/// The memos of one thread.
struct Memos {
    slots: [memo::Memo; memo::SLOTS],
    /// Counts this thread's walks (for replacing the least recently used memo).
    clock: Cell<u64>,
}

impl Memos {
    /// Remembers a walk that found every frame itself, in place of the memo found out
    /// of date, else of the least recently used one.
    fn remember(
        &self,
        rec: &memo::Record,
        stale: Option<usize>,
        epoch: u64,
        skip: (u64, u64),
        full: bool,
        now: u64,
    ) {
        let j = stale.unwrap_or_else(|| self.least_recent_except(memo::SLOTS));
        self.slots[j].store(rec, epoch, skip, full, now);
    }

    /// The least recently used memo other than `j`.
    fn least_recent_except(&self, j: usize) -> usize {
        (0..memo::SLOTS)
            .filter(|&i| i != j)
            .min_by_key(|&i| self.slots[i].used())
            .unwrap_or(0)
    }
}

#[cold]
#[inline(never)]
fn miss(addr: u64, key: u64) -> Option<u64> {
    let mut slow = SLOW.try_lock()?;
    if let Some(w) = rules::get(addr, key) {
        return Some(w);
    }
    let rule = slow.get_or_insert_with(cfi::Slow::new).rule_for(addr);
    let w = rule.pack();
    rules::insert(addr, key, w);
    Some(w)
}

impl Thread {
    /// This thread's stack top, its bounds found once per thread; `None` if they cannot
    /// be known.
    #[inline(always)]
    fn stack_top(&self) -> Option<u64> {
        let mut t = self.top.get();
        if t == 0 {
            let (bottom, top) = find_stack().unwrap_or((0, 1));
            self.bottom.set(bottom);
            self.top.set(top);
            t = top;
        }
        (t > 1).then_some(t)
    }
}

/// This thread's stack, [lowest address, highest + 1), from its pthread attributes
/// (once per thread: for the main thread glibc reads /proc/self/maps).
#[cold]
fn find_stack() -> Option<(u64, u64)> {
    // SAFETY: the attribute object is initialised by pthread_getattr_np before use and
    // destroyed after; the out-parameters are locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 || addr.is_null() {
            return None;
        }
        Some((addr as u64, (addr as u64).checked_add(size as u64)?))
    }
}

#[cfg(test)]
mod bench;
#[cfg(test)]
mod inputs_tests;
#[cfg(test)]
mod tests;
