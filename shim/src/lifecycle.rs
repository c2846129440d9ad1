//! Process lifecycle: lazy initialisation on the first recorded event, and every way a
//! process ends or splits: exit, `_exit`, fatal signals, out-of-memory, fork.
//!
//! ```text
//!  UNINIT ──first event──► INITIALIZING ──ok──► ACTIVE ──exit/_exit/fatal signal: final flush──► SHUTDOWN
//!                                    └──no file / disabled──► DISABLED (pass-through)
//!  fork() child: ACTIVE ──GPUMEMPROF_FORK=trace──► UNINIT (its own trace on its first event)
//!                       └──GPUMEMPROF_FORK=off───► DISABLED
//! ```
//!
//! The constructor only registers the exit and fork handlers: it must stay cheap and
//! safe because it runs in every process that inherits LD_PRELOAD, most of which never
//! touch a GPU. The trace file, the writer thread and the signal handlers appear with
//! the first allocation.
//!
//! Ends: `exit` and return from `main` run the atexit handler; `_exit`/`_Exit` are
//! hooked to complete the trace first; SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT (`abort`, an uncaught
//! C++ exception), SIGSEGV and SIGBUS complete it in a handler and then run the
//! previous handler or the default action. SIGKILL cannot be caught: the trace then
//! holds every event older than the flush interval (blocks are written whole), and an
//! out-of-memory failure is flushed at once, so the evidence of an OOM is on disk
//! before anything can kill the process.

use crate::clock;
use crate::config::{env, Config, ForkMode, Mode, StackMode};
use crate::output;
use crate::pipeline::{Pipeline, WriterCore};
use crate::stack;
use gpumemprof_format::TraceWriter;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const DISABLED: u8 = 3;
const SHUTDOWN: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// The current pipeline (leaked: it lives until the process ends; a fork child that
/// records gets a new one and abandons its copy of the parent's).
static PIPELINE: AtomicPtr<Pipeline> = AtomicPtr::new(std::ptr::null_mut());
/// Frames to capture per event (0 = stacks off); read on the hot path.
static STACK_DEPTH: AtomicUsize = AtomicUsize::new(0);
static QUIET: AtomicBool = AtomicBool::new(false);
/// `ForkMode` of the running configuration (0 trace, 1 off).
static FORK_OFF: AtomicBool = AtomicBool::new(false);
/// The pid that started the pipeline: a vfork child shares our memory and must not
/// finish the parent's trace from its `_exit`.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// The exit handler waits this long for the writer's final flush.
const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// A failing allocation waits this long for its event to reach the file.
const OOM_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// A signal handler waits this long for the writer before the signal goes on.
const SIGNAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

fn current() -> Option<&'static Pipeline> {
    let p = PIPELINE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box<Pipeline>, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The pipeline if events should be recorded now, initialising on first use.
#[inline]
pub fn pipeline() -> Option<&'static Pipeline> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE | SHUTDOWN => current(),
        UNINIT | INITIALIZING => init_slow(),
        _ => None,
    }
}

#[inline]
pub fn stack_depth() -> usize {
    STACK_DEPTH.load(Ordering::Relaxed)
}

/// The trace file's path once a file exists.
pub fn trace_path() -> Option<&'static std::ffi::CStr> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE | SHUTDOWN => current().and_then(|p| p.path()),
        _ => None,
    }
}

pub fn mark_shutdown() {
    STATE.store(SHUTDOWN, Ordering::Release);
}

/// One line on stderr, prefixed so users know who speaks.
pub fn warn(msg: &str) {
    eprintln!("gpumemprof: warning: {msg}");
}

/// After an out-of-memory failure was recorded: wait until it (and every event before
/// it) is in the file, so a crash right after loses nothing.
pub fn after_oom() {
    if let Some(p) = pipeline() {
        p.flush_now(OOM_FLUSH_TIMEOUT);
    }
}

fn owner() -> bool {
    // SAFETY: getpid has no preconditions.
    OWNER_PID.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

#[cold]
fn init_slow() -> Option<&'static Pipeline> {
    if STATE
        .compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread is initialising: wait for it (it holds none of our locks).
        loop {
            match STATE.load(Ordering::Acquire) {
                INITIALIZING => std::thread::yield_now(),
                ACTIVE | SHUTDOWN => return current(),
                _ => return None,
            }
        }
    }
    match start() {
        Some(p) => {
            STATE.store(ACTIVE, Ordering::Release);
            Some(p)
        }
        None => {
            STATE.store(DISABLED, Ordering::Release);
            None
        }
    }
}

fn start() -> Option<&'static Pipeline> {
    let (cfg, warnings) = Config::from_env();
    for w in &warnings {
        warn(w);
    }
    if cfg.disabled {
        return None;
    }
    QUIET.store(cfg.quiet, Ordering::Relaxed);
    FORK_OFF.store(cfg.fork == ForkMode::Off, Ordering::Relaxed);
    // Before the header (which records the choice) and before any event is stamped.
    clock::init(cfg.clock);
    let start_ns = clock::now_ns();
    let ph = output::placeholders(env);
    let wanted = output::expand(&cfg.output, &ph);
    let apis = crate::hooks::apis_json();
    let (core, modules, path) = if cfg.mode == Mode::Oom {
        // The flight recorder creates the file only when an allocation runs out of memory.
        let header = output::header(&cfg, &ph, "", start_ns, apis, env);
        let (core, modules) =
            WriterCore::recorder(cfg.oom_ring, header, wanted, cfg.quiet, start_ns);
        (core, modules, None)
    } else {
        let (file, path) = match output::create_exclusive(&wanted) {
            Ok(x) => x,
            Err(e) => {
                warn(&format!(
                    "cannot create the trace file {wanted}: {e}; the program runs without profiling"
                ));
                return None;
            }
        };
        let header = output::header(&cfg, &ph, &path, start_ns, apis, env);
        let writer = match TraceWriter::new(file, &header, crate::pipeline::ZSTD_LEVEL) {
            Ok(w) => w,
            Err(e) => {
                warn(&format!(
                    "cannot write the trace header to {path}: {e}; the program runs without profiling"
                ));
                return None;
            }
        };
        let (core, modules) = WriterCore::new(writer, path.clone(), start_ns);
        (core, modules, Some(path))
    };
    // The shim's own address range, so stack capture can skip the shim's frames.
    if let Some((lo, hi)) = crate::modules::range_of(&modules, stack::shim_anchor()) {
        stack::set_shim_range(lo, hi);
    }
    stack::set_mode(cfg.unwind);
    crate::python::init(cfg.stacks == StackMode::Full);
    let p: &'static Pipeline = Box::leak(Box::new(Pipeline::new(
        core,
        cfg.queue_capacity,
        cfg.flush_ms,
        cfg.nvml_ms,
        start_ns,
    )));
    p.set_trace_list(cfg.trace_list.as_deref());
    if let Some(path) = &path {
        p.set_path(path);
    }
    PIPELINE.store(p as *const Pipeline as *mut Pipeline, Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name("gpumemprof-writer".into())
        .spawn(move || p.run_writer());
    match spawned {
        Ok(h) => p.set_writer(h.thread().clone()),
        Err(e) => {
            warn(&format!(
                "cannot start the writer thread: {e}; the program runs without profiling"
            ));
            return None;
        }
    }
    let depth = match cfg.stacks {
        StackMode::Off => 0,
        StackMode::Native | StackMode::Full => cfg.stack_depth,
    };
    STACK_DEPTH.store(depth, Ordering::Relaxed);
    OWNER_PID.store(ph.pid as i32, Ordering::Relaxed);
    if cfg.signals {
        signals::install();
    }
    if !cfg.quiet {
        if let Some(path) = &path {
            eprintln!(
                "gpumemprof: recording GPU allocations of pid {} to {path}",
                ph.pid
            );
        }
    }
    Some(p)
}

/// Completes the trace (drain, End record, stop the writer) and says so on stderr.
fn finish_trace() {
    if STATE.load(Ordering::Acquire) != ACTIVE || !owner() {
        return;
    }
    let Some(p) = current() else { return };
    let _g = crate::guard::Guard::enter();
    match p.shutdown(EXIT_FLUSH_TIMEOUT) {
        Some((events, path)) => {
            if !QUIET.load(Ordering::Relaxed) && !path.is_empty() {
                eprintln!(
                    "gpumemprof: wrote {events} events to {path}; see what leaked with: gpumemprof leaks {path}"
                );
            }
        }
        None => warn(
            "the writer did not finish its final flush in time; the trace may lack its last events",
        ),
    }
}

/// atexit: drain the queue and write the End record. Later events (other atexit
/// handlers freeing memory) are still written, by the threads that make them.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(finish_trace);
}

/// `_exit` skips atexit handlers: complete the trace first, then leave as asked.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    leave(status, c"_exit")
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    leave(status, c"_Exit")
}

fn leave(status: c_int, name: &std::ffi::CStr) -> ! {
    let _ = std::panic::catch_unwind(finish_trace);
    let real = crate::hooks::dlsym::lookup(libc::RTLD_NEXT, name);
    if !real.is_null() {
        // SAFETY: libc's _exit/_Exit: void(int), never returns.
        let f: extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(real) };
        f(status);
    }
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// Before fork: hold the writer's and the stack table's locks (in the order the writer
/// takes them), so the child never inherits one mid-change.
extern "C" fn at_fork_prepare() {
    if matches!(STATE.load(Ordering::Acquire), ACTIVE | SHUTDOWN) {
        if let Some(p) = current() {
            p.lock_for_fork();
        }
    }
    crate::intern::lock_for_fork();
    // After the writer's lock, as the writer takes them (it defines NVTX names under it).
    crate::nvtx::lock_for_fork();
}

extern "C" fn at_fork_parent() {
    // SAFETY: both locks were taken by at_fork_prepare on this thread.
    unsafe {
        crate::nvtx::unlock_after_fork();
        crate::intern::unlock_after_fork();
        if matches!(STATE.load(Ordering::Acquire), ACTIVE | SHUTDOWN) {
            if let Some(p) = current() {
                p.unlock_after_fork();
            }
        }
    }
}

/// In the child of fork(): there is no writer thread, and the parent's pipeline must
/// not be touched. The child either starts its own trace on its first event (a new
/// pipeline, every known stack defined again) or passes everything through.
extern "C" fn at_fork_child() {
    // SAFETY: the table's lock was taken by at_fork_prepare on this thread.
    unsafe { crate::intern::child_after_fork() };
    // SAFETY: the NVTX names' lock was taken by at_fork_prepare on this thread too.
    unsafe { crate::nvtx::child_after_fork() };
    crate::guard::reset_after_fork();
    match STATE.load(Ordering::Acquire) {
        UNINIT => {}
        ACTIVE | SHUTDOWN if !FORK_OFF.load(Ordering::Relaxed) => {
            PIPELINE.store(std::ptr::null_mut(), Ordering::Release);
            STATE.store(UNINIT, Ordering::Release);
        }
        _ => STATE.store(DISABLED, Ordering::Release),
    }
}

extern "C" fn constructor() {
    // Find the real dlsym/dlvsym now, while nothing else runs: the overrides then
    // never take their slow path.
    let _ = std::panic::catch_unwind(crate::hooks::dlsym::prime);
    // SAFETY: registering plain extern "C" functions without captured state.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(
            Some(at_fork_prepare),
            Some(at_fork_parent),
            Some(at_fork_child),
        );
    }
}

/// Runs when the library is loaded (LD_PRELOAD or dlopen), before the program's main.
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

/// Fatal-signal handlers: complete the trace, then chain.
///
/// Installed once, at the first allocation, for SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT,
/// SIGSEGV and SIGBUS, unless the signal is ignored (an ignored signal stays ignored, also across
/// `exec`). The handler runs on the alternate signal stack where the thread has one.
/// It only uses atomics, `clock_gettime`, `nanosleep` and a futex wake (the writer's
/// unpark): if the previous action is the default (the process dies), it asks the
/// writer to complete the trace; if the program handles the signal itself (Python's
/// SIGINT), it asks for a flush, since the program may go on. It waits at most 3 s, and
/// never on the writer thread itself. Then the previous handler runs, or the default
/// action is restored and the signal raised again.
mod signals {
    use super::*;

    const SIGNALS: [c_int; 7] = [
        libc::SIGTERM,
        libc::SIGINT,
        // A closed terminal or a lost ssh session; Ctrl-\. `gpumemprof run` forwards both.
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGABRT,
        libc::SIGSEGV,
        libc::SIGBUS,
    ];
    const MAX_SIGNAL: usize = 65;

    static INSTALLED: AtomicBool = AtomicBool::new(false);
    /// One handler at a time completes the trace; others only chain.
    static BUSY: AtomicBool = AtomicBool::new(false);
    struct Previous(std::cell::UnsafeCell<[MaybeUninit<libc::sigaction>; MAX_SIGNAL]>);
    // SAFETY: written once, by `install`, before the handlers that read it exist.
    unsafe impl Sync for Previous {}
    static PREVIOUS: Previous = Previous(std::cell::UnsafeCell::new(
        [MaybeUninit::uninit(); MAX_SIGNAL],
    ));

    pub fn install() {
        if INSTALLED.swap(true, Ordering::AcqRel) {
            return;
        }
        for sig in SIGNALS {
            // SAFETY: sigaction with valid pointers; PREVIOUS[sig] is written before our
            // handler is installed for sig, and never again.
            unsafe {
                let slot = &mut (*PREVIOUS.0.get())[sig as usize];
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                    || old.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                slot.write(old);
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = handler as *const () as usize;
                new.sa_flags =
                    libc::SA_SIGINFO | libc::SA_ONSTACK | (old.sa_flags & libc::SA_RESTART);
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(sig, &new, std::ptr::null_mut());
            }
        }
    }

    extern "C" fn handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        // SAFETY: errno is this thread's; restored before chaining.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: PREVIOUS[sig] was written before this handler was installed for sig.
        let previous = unsafe { (*PREVIOUS.0.get())[sig as usize].assume_init() };
        if !BUSY.swap(true, Ordering::AcqRel) {
            if STATE.load(Ordering::Acquire) == ACTIVE && owner() {
                if let Some(p) = current() {
                    if !p.on_writer_thread() {
                        if previous.sa_sigaction == libc::SIG_DFL {
                            p.shutdown_from_signal(SIGNAL_FLUSH_TIMEOUT);
                        } else {
                            p.flush_now(SIGNAL_FLUSH_TIMEOUT);
                        }
                    }
                }
            }
            BUSY.store(false, Ordering::Release);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        chain(sig, info, ctx, &previous);
    }

    fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, previous: &libc::sigaction) {
        let h = previous.sa_sigaction;
        if h == libc::SIG_IGN {
            return;
        }
        if h == libc::SIG_DFL {
            // SAFETY: restore the default action and raise again: the signal is blocked
            // while this handler runs, so it is delivered (and acts) when we return; a
            // fault re-executes its instruction and faults again either way.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut dfl.sa_mask);
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
                libc::raise(sig);
            }
            return;
        }
        // SAFETY: the program's own handler, called as the kernel would have.
        unsafe {
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(c_int) = std::mem::transmute(h);
                f(sig);
            }
        }
    }
}
