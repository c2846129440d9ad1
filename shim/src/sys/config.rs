//! Configuration: every environment variable the shim reads is parsed here, once, at
//! initialisation (never on the hot path), and documented from the `VARS` table below,
//! which the README's environment table is checked against (see `tests` at the bottom).

/// How much of the call stack to record with each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackMode {
    Off,
    Native,
    /// Native plus the thread's Python frames (CPython 3.9 to 3.13), merged in place of
    /// the interpreter's evaluation frames (`python/`).
    Full,
}

impl StackMode {
    pub fn name(self) -> &'static str {
        match self {
            StackMode::Off => "off",
            StackMode::Native => "native",
            StackMode::Full => "full",
        }
    }
}

/// Which unwinder captures native stacks (see `capture/stack.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindMode {
    /// Cached CFI rules; stacks it cannot unwind exactly go to `Slow`.
    Fast,
    /// libgcc's DWARF unwinder for every stack.
    Slow,
    /// Both on every event, compared; differences reported on stderr.
    Check,
}

impl UnwindMode {
    pub fn name(self) -> &'static str {
        match self {
            UnwindMode::Fast => "fast",
            UnwindMode::Slow => "slow",
            UnwindMode::Check => "check",
        }
    }
}

/// What the shim writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every event, as it happens.
    Full,
    /// Flight recorder: nothing until the first out-of-memory failure, then the live
    /// allocations and the last `oom_ring` events, then everything as in `Full`.
    Oom,
}

/// What a `fork` child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkMode {
    /// The child records into its own trace (the output template with the child's pid),
    /// created when the child first allocates.
    Trace,
    /// The child records nothing.
    Off,
}

/// Frames kept per stack at most: the capture buffer (MAX_STACK_DEPTH * 8 bytes) lives on
/// the allocating thread's stack.
pub const MAX_STACK_DEPTH: usize = 128;

/// Framework modes recorded at most (the launcher passes one per framework).
const MAX_FRAMEWORK_MODES: usize = 16;

#[derive(Debug, Clone)]
pub struct Config {
    pub disabled: bool,
    pub output: String,
    pub stacks: StackMode,
    pub stack_depth: usize,
    /// `GPUMEMPROF_FREE_STACKS`: whether a free records its stack.
    pub free_stacks: bool,
    pub flush_ms: u64,
    pub queue_capacity: usize,
    pub quiet: bool,
    /// NVML sampling interval in ms; 0 = off.
    pub nvml_ms: u64,
    pub mode: Mode,
    pub oom_ring: usize,
    pub fork: ForkMode,
    pub signals: bool,
    pub clock: crate::sys::clock::Source,
    pub unwind: UnwindMode,
    /// `GPUMEMPROF_TRACE_LIST`: a file to append the trace's path to once it exists.
    pub trace_list: Option<String>,
    /// `GPUMEMPROF_FRAMEWORK_MODES`: the launcher's framework modes (`torch=tensors`).
    pub framework_modes: Vec<String>,
    /// `GPUMEMPROF_TEST_PANIC_AT`: where the shim panics, as a bug would.
    pub test_panic: crate::sys::faults::TestPanic,
    /// `GPUMEMPROF_TEST_STALL_WRITER_MS`: how long the writer waits before it completes the
    /// trace it was asked to, as on a stalled disk.
    pub test_stall_writer_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            disabled: false,
            output: "gpumemprof.%p.trace".to_string(),
            stacks: StackMode::Full,
            stack_depth: 64,
            free_stacks: true,
            flush_ms: 100,
            queue_capacity: 16384,
            quiet: false,
            nvml_ms: 500,
            mode: Mode::Full,
            oom_ring: 65536,
            fork: ForkMode::Trace,
            signals: true,
            clock: crate::sys::clock::Source::Auto,
            unwind: UnwindMode::Fast,
            trace_list: None,
            framework_modes: Vec::new(),
            test_panic: crate::sys::faults::TestPanic::Never,
            test_stall_writer_ms: 0,
        }
    }
}

/// One documented environment variable.
pub struct Var {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

/// The single list of environment variables the shim reads.
pub const VARS: &[Var] = &[
    Var {
        name: "GPUMEMPROF_OUTPUT",
        default: "gpumemprof.%p.trace",
        doc: "Trace path. `%p` pid, `%h` host name, `%r` rank (from `RANK`, `LOCAL_RANK` or `SLURM_PROCID`, else 0), `%t` start time (UTC, `YYYYmmdd-HHMMSS`), `%%` a percent sign. Relative paths are relative to the working directory. An existing file is never overwritten: `.1`, `.2`, ... is appended instead.",
    },
    Var {
        name: "GPUMEMPROF_STACKS",
        default: "full",
        doc: "`off` (no stacks, cheapest), `native` (return addresses, symbolized by the analyzer), `full` (native plus Python frames: file, function and line of the allocating thread's Python code, CPython 3.9 to 3.13, in place of the interpreter's own frames; at most 128 Python frames, on top of `GPUMEMPROF_STACK_DEPTH` native ones).",
    },
    Var {
        name: "GPUMEMPROF_STACK_DEPTH",
        default: "64",
        doc: "Frames recorded per stack, 1 to 128.",
    },
    Var {
        name: "GPUMEMPROF_FREE_STACKS",
        default: "1",
        doc: "`1`: a free (of device memory or of a tensor) records its stack, as an allocation does. `0`: frees record none (stack id 0), as PyTorch's `_record_memory_history(context='alloc')`: allocations keep theirs, so `leaks`, `peak`, `oom` and the flame graphs are the same, but a free's own stack is not shown (the torch snapshot's free entries have no frames); where allocations and frees come from many call paths, stacks cost from a sixth to nearly a half less in the rounds measured (BENCHMARKS.md, seventeenth).",
    },
    Var {
        name: "GPUMEMPROF_FLUSH_MS",
        default: "100",
        doc: "Longest time, in milliseconds (1 to 60000), an event waits before it is compressed and written to the file (blocks are written every half interval, the other half is the margin for writing them; measured in BENCHMARKS.md, \"lost window\"), so a SIGKILL loses at most this much of the events before it, while the writer thread gets a core.",
    },
    Var {
        name: "GPUMEMPROF_QUEUE_CAPACITY",
        default: "16384",
        doc: "Events each recording thread's buffer holds (64 to 1048576, rounded up to a power of two; 64 bytes per event, allocated at the thread's first event and reused by a later thread once it exits, at once even when the writer has not collected its events yet: the buffers are bounded by the threads alive at once). A full buffer makes its thread wait for the writer; waits are counted in the trace.",
    },
    Var {
        name: "GPUMEMPROF_NVML_MS",
        default: "500",
        doc: "Interval, in milliseconds (0 = off, else 10 to 60000), at which the writer thread asks NVML (`libnvidia-ml.so.1`, loaded only if present) how much device memory this process uses, and again right after the live device memory rose 16 MiB or more above its highest level at any earlier sample (at most every 10 ms; where it had fallen 16 MiB below that high again by the sample, up to five more times, 20 to 320 ms apart), so a rise between two samples is seen while memory allocated and freed at one level (PyTorch without its cache) is not asked about again, and right after an allocation fails with out-of-memory (while the failing thread waits for its flush: PyTorch's message's process memory); reports set it against what the hooks saw (the CUDA context, library workspaces). Without NVML nothing is recorded and nothing is printed.",
    },
    Var {
        name: "GPUMEMPROF_MODE",
        default: "full",
        doc: "`full` records every event as it happens. `oom` is a flight recorder: nothing is written until an allocation fails with out-of-memory; then the trace gets the allocations (and framework tensors) live at that moment plus the last `GPUMEMPROF_OOM_RING` events, and recording goes on as in `full` until exit. A run that never runs out of memory leaves no file.",
    },
    Var {
        name: "GPUMEMPROF_OOM_RING",
        default: "65536",
        doc: "Events the flight recorder keeps before an out-of-memory (16 to 16777216). Memory: about 100 bytes per event in the ring plus about 100 bytes per live allocation plus the distinct stacks.",
    },
    Var {
        name: "GPUMEMPROF_FORK",
        default: "trace",
        doc: "What a `fork` child (without `exec`) records: `trace`, its own trace (the output template with the child's pid, created when the child first allocates), or `off`, nothing. Exec'd children inherit `LD_PRELOAD` and always write their own trace.",
    },
    Var {
        name: "GPUMEMPROF_SIGNALS",
        default: "1",
        doc: "`1`: on a signal that ends the process (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, a stack overflow, SIGBUS, SIGFPE, SIGILL, SIGSYS, and SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGTRAP, SIGXCPU, SIGXFSZ, SIGSTKFLT while their action is the default) the trace is completed, with the signal recorded as the process's ending (or flushed, when the program handles an asynchronous signal itself), before the program's own handler or the default action runs; threads that record get an alternate signal stack; `sigaction`/`signal` keep the program's handlers (\"How a process ends\"). `0` installs no handlers, no stacks, and `sigaction` goes straight to libc.",
    },
    Var {
        name: "GPUMEMPROF_CLOCK",
        default: "auto",
        doc: "How events are stamped: `auto` uses the CPU's time-stamp counter where it is a reliable clock (x86_64, invariant TSC, the kernel's clocksource is `tsc`) and `clock_gettime` otherwise; `monotonic` always uses `clock_gettime`; `tsc` is `auto` by another name. Traces always hold `CLOCK_MONOTONIC` nanoseconds.",
    },
    Var {
        name: "GPUMEMPROF_UNWIND",
        default: "fast",
        doc: "How native stacks are unwound: `fast` applies unwind rules cached per return address (read once from each object's `.eh_frame`) and hands any stack it cannot unwind exactly to libgcc's unwinder; `slow` uses libgcc's unwinder for every stack (microseconds per event); `check` runs both on every event, records the slow one's frames and prints differences and a count at exit on stderr (`gpumemprof: unwind check: N stacks compared, N differed, N left to the slow unwinder, N met in the first-state cache, N given by their inputs`; a stack id the fast path reuses, from a memo, the first-state cache or a walk's inputs, is checked by the frames it was interned with; for tests and bug reports). All three record the same frames.",
    },
    Var {
        name: "GPUMEMPROF_QUIET",
        default: "0",
        doc: "`1` silences the lines on stderr that name the trace file (at the start, and when it is written at exit or at a fatal signal). Warnings are still printed.",
    },
    Var {
        name: "GPUMEMPROF_DISABLE",
        default: "0",
        doc: "`1` turns the shim into a pure pass-through: nothing is recorded and no file is created.",
    },
    Var {
        name: "GPUMEMPROF_TRACE_LIST",
        default: "unset",
        doc: "A file to which each process appends the absolute path of its trace, as one line written with one `write(2)` (`O_APPEND`), when it creates the trace. `gpumemprof run` sets it to list every trace of a process tree. The file is never opened through a symbolic link (`O_NOFOLLOW`: a link another user planted must not choose what a process appends to). If the file cannot be written, a warning is printed and the program goes on.",
    },
    Var {
        name: "GPUMEMPROF_FRAMEWORK_MODES",
        default: "unset",
        doc: "The framework modes `gpumemprof run` was given, comma-separated (`torch=tensors,tf=async`). The trace header's `framework` object records them with the framework allocator variables present at start (`PYTORCH_CUDA_ALLOC_CONF`, `PYTORCH_ALLOC_CONF`, `PYTORCH_NO_CUDA_MEMORY_CACHING`, `XLA_PYTHON_CLIENT_*`, `TF_FORCE_GPU_ALLOW_GROWTH`, `TF_GPU_ALLOCATOR`), so reports say whether they see tensors or an allocator's segments.",
    },
    Var {
        name: "GPUMEMPROF_TEST_PANIC_AT",
        default: "0",
        doc: "For tests of the shim's own failure path: a number N makes the N-th recorded event's bookkeeping panic, `writer` the writer thread as it drains its first events, as a bug in the shim would (0, the default: never). What any such bug does then: one warning line (`internal error at FILE:LINE: ...`), the program's calls return what the real functions returned, every later call passes straight through, and the trace is completed at exit with `stopped` reason `internal_error` at that moment (after a bug of the writer, the exit handler writes the events the writer left).",
    },
    Var {
        name: "GPUMEMPROF_TEST_STALL_WRITER_MS",
        default: "0",
        doc: "For tests of the shim's endings: the writer waits this many milliseconds (at most 600000) before it completes the trace it was asked to complete, as a write to a stalled disk would. A signal that ends the process waits at most 3 s for the writer; when the trace is not complete by then, the shim says so in one line (`gpumemprof: the process is ended by NAME (signal N) before the trace was complete: PATH may lack its last events`) and the signal goes on.",
    },
];

/// The one reader of the process environment (values decoded lossily). Called at
/// initialisation only, never on the hot path.
pub fn env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

fn flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

fn ranged(name: &str, v: &str, lo: u64, hi: u64, warnings: &mut Vec<String>) -> Option<u64> {
    match v.trim().parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Some(n),
        _ => {
            warnings.push(format!(
                "{name}={v:?} is not a number from {lo} to {hi}; using the default"
            ));
            None
        }
    }
}

impl Config {
    /// Reads the process environment. Invalid values are reported in the returned
    /// warnings and replaced by their defaults.
    pub fn from_env() -> (Config, Vec<String>) {
        Config::parse(env)
    }

    /// Parses from any lookup function (the environment, or a map in tests).
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let mut c = Config::default();
        let mut w = Vec::new();
        if let Some(v) = get("GPUMEMPROF_DISABLE") {
            match flag(&v) {
                Some(b) => c.disabled = b,
                None => w.push(format!("GPUMEMPROF_DISABLE={v:?} is not 0 or 1; ignored")),
            }
        }
        if let Some(v) = get("GPUMEMPROF_OUTPUT") {
            if v.trim().is_empty() {
                w.push("GPUMEMPROF_OUTPUT is empty; using the default".to_string());
            } else {
                c.output = v;
            }
        }
        if let Some(v) = get("GPUMEMPROF_STACKS") {
            match v.trim().to_ascii_lowercase().as_str() {
                "off" | "none" | "0" => c.stacks = StackMode::Off,
                "native" => c.stacks = StackMode::Native,
                "full" => c.stacks = StackMode::Full,
                _ => w.push(format!(
                    "GPUMEMPROF_STACKS={v:?} is not off, native or full; using full"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_STACK_DEPTH") {
            if let Some(n) = ranged(
                "GPUMEMPROF_STACK_DEPTH",
                &v,
                1,
                MAX_STACK_DEPTH as u64,
                &mut w,
            ) {
                c.stack_depth = n as usize;
            }
        }
        if let Some(v) = get("GPUMEMPROF_FREE_STACKS") {
            match flag(&v) {
                Some(b) => c.free_stacks = b,
                None => w.push(format!(
                    "GPUMEMPROF_FREE_STACKS={v:?} is not 0 or 1; ignored"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_FLUSH_MS") {
            if let Some(n) = ranged("GPUMEMPROF_FLUSH_MS", &v, 1, 60_000, &mut w) {
                c.flush_ms = n;
            }
        }
        if let Some(v) = get("GPUMEMPROF_QUEUE_CAPACITY") {
            if let Some(n) = ranged("GPUMEMPROF_QUEUE_CAPACITY", &v, 64, 1 << 20, &mut w) {
                c.queue_capacity = n as usize;
            }
        }
        if let Some(v) = get("GPUMEMPROF_NVML_MS") {
            if v.trim() == "0" {
                c.nvml_ms = 0;
            } else if let Some(n) = ranged("GPUMEMPROF_NVML_MS", &v, 10, 60_000, &mut w) {
                c.nvml_ms = n;
            }
        }
        if let Some(v) = get("GPUMEMPROF_MODE") {
            match v.trim().to_ascii_lowercase().as_str() {
                "full" => c.mode = Mode::Full,
                "oom" => c.mode = Mode::Oom,
                _ => w.push(format!(
                    "GPUMEMPROF_MODE={v:?} is not full or oom; using full"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_OOM_RING") {
            if let Some(n) = ranged("GPUMEMPROF_OOM_RING", &v, 16, 1 << 24, &mut w) {
                c.oom_ring = n as usize;
            }
        }
        if let Some(v) = get("GPUMEMPROF_FORK") {
            match v.trim().to_ascii_lowercase().as_str() {
                "trace" => c.fork = ForkMode::Trace,
                "off" => c.fork = ForkMode::Off,
                _ => w.push(format!(
                    "GPUMEMPROF_FORK={v:?} is not trace or off; using trace"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_SIGNALS") {
            match flag(&v) {
                Some(b) => c.signals = b,
                None => w.push(format!("GPUMEMPROF_SIGNALS={v:?} is not 0 or 1; ignored")),
            }
        }
        if let Some(v) = get("GPUMEMPROF_CLOCK") {
            match v.trim().to_ascii_lowercase().as_str() {
                "auto" => c.clock = crate::sys::clock::Source::Auto,
                "tsc" => c.clock = crate::sys::clock::Source::Tsc,
                "monotonic" => c.clock = crate::sys::clock::Source::Monotonic,
                _ => w.push(format!(
                    "GPUMEMPROF_CLOCK={v:?} is not auto, tsc or monotonic; using auto"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_UNWIND") {
            match v.trim().to_ascii_lowercase().as_str() {
                "fast" => c.unwind = UnwindMode::Fast,
                "slow" => c.unwind = UnwindMode::Slow,
                "check" => c.unwind = UnwindMode::Check,
                _ => w.push(format!(
                    "GPUMEMPROF_UNWIND={v:?} is not fast, slow or check; using fast"
                )),
            }
        }
        if let Some(v) = get("GPUMEMPROF_QUIET") {
            match flag(&v) {
                Some(b) => c.quiet = b,
                None => w.push(format!("GPUMEMPROF_QUIET={v:?} is not 0 or 1; ignored")),
            }
        }
        if let Some(v) = get("GPUMEMPROF_TEST_PANIC_AT") {
            use crate::sys::faults::TestPanic;
            if v.trim().eq_ignore_ascii_case("writer") {
                c.test_panic = TestPanic::Writer;
            } else if let Some(n) = ranged("GPUMEMPROF_TEST_PANIC_AT", &v, 0, u64::MAX, &mut w) {
                c.test_panic = if n == 0 {
                    TestPanic::Never
                } else {
                    TestPanic::Event(n)
                };
            }
        }
        if let Some(v) = get("GPUMEMPROF_TEST_STALL_WRITER_MS") {
            if let Some(n) = ranged("GPUMEMPROF_TEST_STALL_WRITER_MS", &v, 0, 600_000, &mut w) {
                c.test_stall_writer_ms = n;
            }
        }
        if let Some(v) = get("GPUMEMPROF_TRACE_LIST") {
            if !v.trim().is_empty() {
                c.trace_list = Some(v);
            }
        }
        if let Some(v) = get("GPUMEMPROF_FRAMEWORK_MODES") {
            // Recorded as given (the analyzer interprets them); bounded, since it goes
            // into the header of every trace.
            c.framework_modes = v
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .take(MAX_FRAMEWORK_MODES)
                .map(|m| m.chars().take(64).collect())
                .collect();
        }
        (c, w)
    }

    /// The configuration as recorded in the trace header.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "output": self.output,
            "stacks": self.stacks.name(),
            "stack_depth": self.stack_depth,
            "free_stacks": self.free_stacks,
            "flush_ms": self.flush_ms,
            "queue_capacity": self.queue_capacity,
            "nvml_ms": self.nvml_ms,
            "mode": match self.mode { Mode::Full => "full", Mode::Oom => "oom" },
            "oom_ring": self.oom_ring,
            "fork": match self.fork { ForkMode::Trace => "trace", ForkMode::Off => "off" },
            "signals": self.signals,
            "clock": match self.clock {
                crate::sys::clock::Source::Auto => "auto",
                crate::sys::clock::Source::Tsc => "tsc",
                crate::sys::clock::Source::Monotonic => "monotonic",
            },
            "unwind": self.unwind.name(),
            "stamps": if crate::sys::clock::uses_tsc() { "tsc" } else { "clock_gettime" },
        })
    }
}

/// Renders the README's environment table from `VARS`.
pub fn env_table_markdown() -> String {
    let mut s = String::from("| Variable | Default | Meaning |\n|---|---|---|\n");
    for v in VARS {
        s.push_str(&format!("| `{}` | `{}` | {} |\n", v.name, v.default, v.doc));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_when_unset() {
        let (c, w) = parse(&[]);
        assert!(w.is_empty());
        assert_eq!(c.output, "gpumemprof.%p.trace");
        assert_eq!(c.stacks, StackMode::Full);
        assert_eq!(c.stack_depth, 64);
        assert!(c.free_stacks);
        assert_eq!(c.flush_ms, 100);
        assert_eq!(c.queue_capacity, 16384);
        assert_eq!(c.nvml_ms, 500);
        assert_eq!(
            (c.mode, c.oom_ring, c.fork, c.signals),
            (Mode::Full, 65536, ForkMode::Trace, true)
        );
        assert!(!c.quiet && !c.disabled);
        assert!(c.trace_list.is_none() && c.framework_modes.is_empty());
    }

    #[test]
    fn every_variable_is_read() {
        let (c, w) = parse(&[
            ("GPUMEMPROF_OUTPUT", "/tmp/x.%p"),
            ("GPUMEMPROF_STACKS", "off"),
            ("GPUMEMPROF_STACK_DEPTH", "7"),
            ("GPUMEMPROF_FREE_STACKS", "0"),
            ("GPUMEMPROF_FLUSH_MS", "5"),
            ("GPUMEMPROF_QUEUE_CAPACITY", "64"),
            ("GPUMEMPROF_QUIET", "1"),
            ("GPUMEMPROF_DISABLE", "true"),
            ("GPUMEMPROF_NVML_MS", "0"),
            ("GPUMEMPROF_MODE", "oom"),
            ("GPUMEMPROF_OOM_RING", "16"),
            ("GPUMEMPROF_FORK", "off"),
            ("GPUMEMPROF_SIGNALS", "0"),
            ("GPUMEMPROF_CLOCK", "monotonic"),
            ("GPUMEMPROF_UNWIND", "check"),
            ("GPUMEMPROF_TRACE_LIST", "/tmp/list"),
            ("GPUMEMPROF_FRAMEWORK_MODES", "torch=tensors, tf=async,"),
            ("GPUMEMPROF_TEST_PANIC_AT", "3"),
            ("GPUMEMPROF_TEST_STALL_WRITER_MS", "5000"),
        ]);
        assert_eq!(c.test_panic, crate::sys::faults::TestPanic::Event(3));
        assert_eq!(c.test_stall_writer_ms, 5000);
        assert_eq!(c.trace_list.as_deref(), Some("/tmp/list"));
        assert_eq!(c.framework_modes, ["torch=tensors", "tf=async"]);
        assert_eq!(c.unwind, UnwindMode::Check);
        assert_eq!(c.clock, crate::sys::clock::Source::Monotonic);
        assert_eq!(c.nvml_ms, 0);
        assert_eq!(
            (c.mode, c.oom_ring, c.fork, c.signals),
            (Mode::Oom, 16, ForkMode::Off, false)
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.output, "/tmp/x.%p");
        assert_eq!(c.stacks, StackMode::Off);
        assert_eq!(c.stack_depth, 7);
        assert!(!c.free_stacks);
        assert_eq!(c.flush_ms, 5);
        assert_eq!(c.queue_capacity, 64);
        assert!(c.quiet && c.disabled);
    }

    #[test]
    fn bad_values_warn_and_keep_defaults() {
        let (c, w) = parse(&[
            ("GPUMEMPROF_STACKS", "deep"),
            ("GPUMEMPROF_STACK_DEPTH", "129"),
            ("GPUMEMPROF_FLUSH_MS", "0"),
            ("GPUMEMPROF_QUEUE_CAPACITY", "lots"),
            ("GPUMEMPROF_NVML_MS", "5"),
            ("GPUMEMPROF_MODE", "sometimes"),
            ("GPUMEMPROF_OOM_RING", "1"),
            ("GPUMEMPROF_FREE_STACKS", "sometimes"),
            ("GPUMEMPROF_TEST_STALL_WRITER_MS", "600001"),
        ]);
        assert_eq!(w.len(), 9, "{w:?}");
        assert_eq!(c.test_stall_writer_ms, 0);
        assert!(c.free_stacks);
        assert_eq!((c.mode, c.oom_ring), (Mode::Full, 65536));
        assert_eq!(c.nvml_ms, 500);
        assert_eq!(c.stacks, StackMode::Full);
        assert_eq!(c.stack_depth, 64);
        assert_eq!(c.flush_ms, 100);
        assert_eq!(c.queue_capacity, 16384);
    }

    #[test]
    fn a_test_panic_is_an_event_number_or_the_writer() {
        use crate::sys::faults::TestPanic;
        for (v, want) in [
            (" Writer", TestPanic::Writer),
            ("0", TestPanic::Never),
            ("12", TestPanic::Event(12)),
            ("soon", TestPanic::Never),
        ] {
            let (c, _) = parse(&[("GPUMEMPROF_TEST_PANIC_AT", v)]);
            assert_eq!(c.test_panic, want, "{v:?}");
        }
    }

    #[test]
    fn readme_env_table_is_generated_from_vars() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md at the repository root");
        let table = env_table_markdown();
        assert!(
            readme.contains(&table),
            "README.md's environment table is out of date; replace it with:\n{table}"
        );
    }
}
