//! Process lifecycle: lazy initialisation on the first recorded event, the exit
//! handler that completes the trace, and fork.
//!
//! ```text
//!  UNINIT ──first event──► INITIALIZING ──ok──► ACTIVE ──atexit: final flush──► SHUTDOWN
//!                                    └──no file / disabled──► DISABLED (pass-through)
//!  fork() in any state: the child becomes DISABLED (it has no writer thread).
//! ```
//!
//! The constructor only registers the exit and fork handlers: it must stay cheap and
//! safe because it runs in every process that inherits LD_PRELOAD, most of which never
//! touch a GPU. The trace file and the writer thread appear with the first allocation.

use crate::clock;
use crate::config::{env, Config, StackMode};
use crate::output;
use crate::pipeline::{Pipeline, WriterCore};
use crate::stack;
use gpumemprof_format::TraceWriter;
use once_cell::sync::OnceCell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const DISABLED: u8 = 3;
const SHUTDOWN: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static PIPELINE: OnceCell<Pipeline> = OnceCell::new();
/// Frames to capture per event (0 = stacks off); read on the hot path.
static STACK_DEPTH: AtomicUsize = AtomicUsize::new(0);
static QUIET: AtomicBool = AtomicBool::new(false);
static TRACE_PATH: OnceCell<std::ffi::CString> = OnceCell::new();
/// The exit handler waits this long for the writer's final flush.
const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The pipeline if events should be recorded now, initialising on first use.
#[inline]
pub fn pipeline() -> Option<&'static Pipeline> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE | SHUTDOWN => PIPELINE.get(),
        UNINIT | INITIALIZING => init_slow(),
        _ => None,
    }
}

#[inline]
pub fn stack_depth() -> usize {
    STACK_DEPTH.load(Ordering::Relaxed)
}

/// The trace file's path once recording started.
pub fn trace_path() -> Option<&'static std::ffi::CStr> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE | SHUTDOWN => TRACE_PATH.get().map(|c| c.as_c_str()),
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
                ACTIVE | SHUTDOWN => return PIPELINE.get(),
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
    let start_ns = clock::now_ns();
    let ph = output::Placeholders::current(env);
    let wanted = output::expand(&cfg.output, &ph);
    let (file, path) = match output::create_exclusive(&wanted) {
        Ok(x) => x,
        Err(e) => {
            warn(&format!(
                "cannot create the trace file {wanted}: {e}; the program runs without profiling"
            ));
            return None;
        }
    };
    let header = output::header(&cfg, &ph, &path, start_ns, crate::hooks::apis_json(), env);
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
    let _ = TRACE_PATH.set(std::ffi::CString::new(path.clone()).unwrap_or_default());
    // The shim's own address range, so stack capture can skip the shim's frames.
    if let Some((lo, hi)) = crate::modules::range_of(&modules, stack::shim_anchor()) {
        stack::set_shim_range(lo, hi);
    }
    let p = PIPELINE.get_or_init(|| {
        Pipeline::new(
            core,
            cfg.queue_capacity,
            cfg.flush_ms,
            cfg.nvml_ms,
            start_ns,
        )
    });
    let spawned = std::thread::Builder::new()
        .name("gpumemprof-writer".into())
        .spawn(move || {
            if let Some(p) = PIPELINE.get() {
                p.run_writer();
            }
        });
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
    if !cfg.quiet {
        eprintln!(
            "gpumemprof: recording GPU allocations of pid {} to {path}",
            ph.pid
        );
    }
    Some(p)
}

/// atexit: drain the queue and write the End record. Later events (other atexit
/// handlers freeing memory) are still written, by the threads that make them.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if STATE.load(Ordering::Acquire) != ACTIVE {
            return;
        }
        let Some(p) = PIPELINE.get() else { return };
        let _g = crate::guard::Guard::enter();
        match p.shutdown(EXIT_FLUSH_TIMEOUT) {
            Some((events, path)) => {
                if !QUIET.load(Ordering::Relaxed) {
                    eprintln!(
                        "gpumemprof: wrote {events} events to {path}; see what leaked with: gpumemprof leaks {path}"
                    );
                }
            }
            None => warn("the writer did not finish its final flush in time; the trace may lack its last events"),
        }
    });
}

/// In the child of fork(): there is no writer thread, and locks may be held by
/// threads that no longer exist. The child passes everything through.
extern "C" fn at_fork_child() {
    STATE.store(DISABLED, Ordering::Release);
    crate::guard::reset_tid_after_fork();
}

extern "C" fn constructor() {
    // Find the real dlsym/dlvsym now, while nothing else runs: the overrides then
    // never take their slow path.
    let _ = std::panic::catch_unwind(crate::hooks::dlsym::prime);
    // SAFETY: registering plain extern "C" functions without captured state.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(at_fork_child));
    }
}

/// Runs when the library is loaded (LD_PRELOAD or dlopen), before the program's main.
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;
