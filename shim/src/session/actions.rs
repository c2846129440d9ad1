//! The program's own signal actions while the shim's handler holds a signal, and the
//! `sigaction`/`signal` exports that keep them.
//!
//! Once the shim's handler holds a signal (`signals::install`), a program that installs its
//! own handler later, or resets the signal to `SIG_DFL` and raises it again (a crash
//! handler's last step), would otherwise replace the shim's handler, and the process would
//! die with its trace unfinished. So while the shim holds a signal, `sigaction` and
//! `signal` keep the kernel's action (the shim's handler) and record the program's instead:
//! the handler completes the trace or flushes, then runs what the program set, and a query
//! returns what the program set, exactly as without the shim. Two cases go to the kernel
//! as asked, and the shim lets go of the signal: `SIG_IGN` (an ignored signal must stay
//! ignored across `exec`), and a handler for a signal held only while its action was the
//! default (SIGPIPE, SIGALRM, SIGPROF, ...: programs handle these often, and a flush on
//! each would cost them).
//!
//! Async-signal-safe throughout (`sigaction` may be called from a handler): no allocation,
//! no lock a signal could interrupt (a writer blocks every signal while it holds the
//! per-process spin lock), two slots per signal so a reader in a handler never sees a
//! half-written action. libc's own functions are read from libc's symbol table, never
//! looked up by name (that would find these exports again).

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, Ordering};

pub const MAX_SIGNAL: usize = 65;

type SigactionFn =
    unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// How the shim holds a signal.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Hold {
    /// Not held: `sigaction` goes straight to the kernel.
    No = 0,
    /// Held whatever the program sets (but `SIG_IGN`).
    Always = 1,
    /// Held while the program's action is the default.
    WhileDefault = 2,
}

struct Table {
    slots: UnsafeCell<[[MaybeUninit<libc::sigaction>; 2]; MAX_SIGNAL]>,
    current: [AtomicU8; MAX_SIGNAL],
    hold: [AtomicU8; MAX_SIGNAL],
}

// SAFETY: a slot is written only under `LOCK` and only while it is not `current`;
// readers read the `current` one.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    slots: UnsafeCell::new([[MaybeUninit::uninit(); 2]; MAX_SIGNAL]),
    current: [const { AtomicU8::new(0) }; MAX_SIGNAL],
    hold: [const { AtomicU8::new(0) }; MAX_SIGNAL],
};
static LOCK: AtomicBool = AtomicBool::new(false);
/// The process whose actions the table keeps: a child (`fork`, or `vfork`, which shares
/// this memory: Python's subprocess resets every handler in its vfork child) calls the
/// kernel directly, and never changes the parent's table.
static OWNER: AtomicI32 = AtomicI32::new(0);
static REAL_SIGACTION: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_SIGNAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

fn index(sig: c_int) -> Option<usize> {
    (sig > 0 && (sig as usize) < MAX_SIGNAL).then_some(sig as usize)
}

fn libc_function(slot: &AtomicPtr<c_void>, name: &std::ffi::CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    let p = crate::sys::dl::libc_symbol(name);
    slot.store(p, Ordering::Release);
    p
}

/// libc's `sigaction` (found at start-up by `prime`, so a handler never searches).
pub fn real_sigaction() -> Option<SigactionFn> {
    let p = libc_function(&REAL_SIGACTION, c"sigaction");
    // SAFETY: libc's sigaction has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, SigactionFn>(p) })
}

fn real_signal() -> Option<SignalFn> {
    let p = libc_function(&REAL_SIGNAL, c"signal");
    // SAFETY: libc's signal has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, SignalFn>(p) })
}

/// Finds libc's functions now (from the constructor).
pub fn prime() {
    let _ = real_sigaction();
    let _ = real_signal();
}

/// The calling process keeps the table (before the first `set`).
pub fn claim() {
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Release);
}

/// How the shim holds `sig` in this process (never in a child: see `OWNER`).
fn held_here(sig: c_int) -> Hold {
    // SAFETY: getpid has no preconditions.
    if OWNER.load(Ordering::Acquire) != unsafe { libc::getpid() } {
        return Hold::No;
    }
    hold(sig)
}

/// How the shim holds `sig`.
pub fn hold(sig: c_int) -> Hold {
    match index(sig).map(|i| TABLE.hold[i].load(Ordering::Acquire)) {
        Some(1) => Hold::Always,
        Some(2) => Hold::WhileDefault,
        _ => Hold::No,
    }
}

/// The program's action for a held signal.
pub fn program_action(sig: c_int) -> Option<libc::sigaction> {
    let i = index(sig)?;
    let c = TABLE.current[i].load(Ordering::Acquire) as usize & 1;
    // SAFETY: slot `c` of a held signal was written before it became current.
    Some(unsafe { (*TABLE.slots.get())[i][c].assume_init() })
}

/// Records `act` as the program's action for `sig`, and how the shim holds it.
pub fn set(sig: c_int, act: &libc::sigaction, how: Hold) {
    let Some(i) = index(sig) else { return };
    // SAFETY: a full mask and a valid out-pointer.
    let mut saved: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut saved);
    }
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
    let next = (TABLE.current[i].load(Ordering::Relaxed) as usize + 1) & 1;
    // SAFETY: under LOCK, and `next` is not the slot readers read.
    unsafe { (*TABLE.slots.get())[i][next].write(*act) };
    TABLE.current[i].store(next as u8, Ordering::Release);
    TABLE.hold[i].store(how as u8, Ordering::Release);
    LOCK.store(false, Ordering::Release);
    // SAFETY: restores the caller's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut()) };
}

/// Lets go of `sig`: `sigaction` goes to the kernel again.
fn release(sig: c_int) {
    if let Some(i) = index(sig) {
        TABLE.hold[i].store(Hold::No as u8, Ordering::Release);
    }
}

/// Whether the shim keeps holding `sig` (held `how`) when the program sets `act`.
fn keeps(how: Hold, act: &libc::sigaction) -> bool {
    match how {
        Hold::No => false,
        _ if act.sa_sigaction == libc::SIG_IGN => false,
        Hold::Always => true,
        Hold::WhileDefault => act.sa_sigaction == libc::SIG_DFL,
    }
}

/// `sigaction(2)` as the program sees it.
///
/// # Safety
/// As libc's `sigaction`: `act` and `oldact` null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    oldact: *mut libc::sigaction,
) -> c_int {
    let Some(real) = real_sigaction() else {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    };
    let how = held_here(sig);
    if how == Hold::No {
        return real(sig, act, oldact);
    }
    let previous = program_action(sig);
    if !act.is_null() && !keeps(how, &*act) {
        // Given back to the kernel as asked; what it returns as the old action would be
        // the shim's, so the program's is returned.
        let rc = real(sig, act, std::ptr::null_mut());
        if rc != 0 {
            return rc;
        }
        release(sig);
    } else if !act.is_null() {
        set(sig, &*act, how);
    }
    if let (false, Some(previous)) = (oldact.is_null(), previous) {
        *oldact = previous;
    }
    0
}

/// `signal(3)` as the program sees it: glibc's BSD semantics (`SA_RESTART`, the signal
/// blocked in its own handler) on a held signal.
///
/// # Safety
/// As libc's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if held_here(sig) == Hold::No {
        return match real_signal() {
            Some(real) => real(sig, handler),
            None => libc::SIG_ERR,
        };
    }
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = handler;
    libc::sigemptyset(&mut act.sa_mask);
    libc::sigaddset(&mut act.sa_mask, sig);
    act.sa_flags = libc::SA_RESTART;
    let mut old: libc::sigaction = std::mem::zeroed();
    if sigaction(sig, &act, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}
