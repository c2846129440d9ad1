//! The session's start, on the first recorded event: read the configuration, open the
//! trace (or arm the flight recorder), start the writer thread, install the signal
//! handlers. Any failure is one warning and the program runs without profiling.

use super::{signals, FORK_OFF, FREE_STACK_DEPTH, OWNER_PID, PIPELINE, STACK_DEPTH};
use crate::capture::{modules, python, stack};
use crate::sys::config::{env, Config, ForkMode, Mode, StackMode};
use crate::sys::diag::{say, set_quiet, warn};
use crate::sys::hooklist::apis_json;
use crate::sys::{clock, sigmask};
use crate::writer::output::{self, OpenError};
use crate::writer::{Pipeline, WriterCore};
use std::sync::atomic::Ordering;

pub(super) fn start() -> Option<&'static Pipeline> {
    let (cfg, warnings) = Config::from_env();
    for w in &warnings {
        warn(w);
    }
    if cfg.disabled {
        return None;
    }
    set_quiet(cfg.quiet);
    super::halt::install();
    crate::sys::faults::arm(cfg.test_panic);
    crate::sys::faults::arm_writer_stall(cfg.test_stall_writer_ms);
    FORK_OFF.store(cfg.fork == ForkMode::Off, Ordering::Relaxed);
    // Before the header (which records the choice) and before any event is stamped.
    clock::init(cfg.clock);
    let start_ns = clock::now_ns();
    let ph = output::placeholders(env);
    let wanted = output::expand(&cfg.output, &ph);
    // The header's `path` is set when the file is created (at once, or at the flight
    // recorder's dump).
    let header = output::header(&cfg, &ph, "", start_ns, apis_json(), env);
    let (core, modules, path) = if cfg.mode == Mode::Oom {
        // The flight recorder creates the file only when an allocation runs out of memory.
        let (core, modules) = WriterCore::recorder(cfg.oom_ring, header, wanted, start_ns);
        (core, modules, None)
    } else {
        let (writer, path) = match output::open_trace(&wanted, header) {
            Ok(x) => x,
            Err(OpenError::Create(e)) => {
                warn(&format!(
                    "cannot create the trace file {wanted}: {e}; the program runs without profiling"
                ));
                return None;
            }
            Err(OpenError::Header(path, e)) => {
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
    if let Some((lo, hi)) = modules::range_of(&modules, stack::shim_anchor()) {
        stack::set_shim_range(lo, hi);
    }
    stack::set_mode(cfg.unwind);
    python::init(cfg.stacks == StackMode::Full);
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
    // The writer takes no signal sent to the process (`sigmask`): they stay the program's.
    let spawned = sigmask::spawn_blocking_async_signals(|| {
        std::thread::Builder::new()
            .name("gpumemprof-writer".into())
            .spawn(move || {
                // A bug of the writer: the hook said so and stopped recording; nobody waits
                // for the writer any more.
                let run = std::panic::AssertUnwindSafe(|| p.run_writer());
                if std::panic::catch_unwind(run).is_err() {
                    p.abandon_writer();
                }
            })
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
    let free_depth = if cfg.free_stacks { depth } else { 0 };
    FREE_STACK_DEPTH.store(free_depth, Ordering::Relaxed);
    OWNER_PID.store(ph.pid as i32, Ordering::Relaxed);
    if cfg.signals {
        signals::install();
    }
    if let Some(path) = &path {
        say(&format!(
            "recording GPU allocations of pid {} to {path}",
            ph.pid
        ));
    }
    Some(p)
}
