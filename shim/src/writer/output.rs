//! The trace file: opening it (`open_trace`, for the start and the flight recorder's
//! dump alike), the path template (`%p %h %r %t %%`), safe creation (mode 0600,
//! never through a symlink, never over an existing file), the JSON header (with the
//! framework allocator settings, see `framework`), and the line each trace adds to
//! `GPUMEMPROF_TRACE_LIST` (how `gpumemprof run` learns every trace of a process tree).

use crate::sys::clock;
use crate::sys::config::Config;
use crate::sys::diag::warn;
use gpumemprof_format::TraceWriter;
use std::ffi::CString;
use std::fs::File;
use std::os::unix::io::FromRawFd;

pub use gpumemprof_format::template::{expand, Placeholders};

/// The placeholders of this process, now (`env` reads the rank variables).
pub fn placeholders(env: impl Fn(&str) -> Option<String>) -> Placeholders {
    Placeholders::new(std::process::id(), clock::unix_ns() / 1_000_000_000, env)
}

/// Creates the trace file exclusively (`O_EXCL|O_NOFOLLOW`, mode 0600). If the path
/// exists (or is a symlink), tries `path.1`, `path.2`, ... Returns the file and the
/// path actually used.
pub fn create_exclusive(path: &str) -> std::io::Result<(File, String)> {
    let mut last = None;
    for i in 0..100 {
        let candidate = if i == 0 {
            path.to_string()
        } else {
            format!("{path}.{i}")
        };
        let c = CString::new(candidate.clone())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
        // SAFETY: valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: we own the fresh descriptor.
            return Ok((unsafe { File::from_raw_fd(fd) }, candidate));
        }
        let err = std::io::Error::last_os_error();
        // EEXIST: a file or a symlink is already there; ELOOP: O_NOFOLLOW met a symlink.
        match err.raw_os_error() {
            Some(libc::EEXIST) | Some(libc::ELOOP) => last = Some(err),
            _ => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free file name")))
}

/// zstd level. Level 1 compresses packed event records smaller than level 3 does (3.24
/// against 3.49 bytes per event on the analyzer benchmark's training loop) and in half
/// the time (BENCHMARKS.md, "fourth session").
pub const ZSTD_LEVEL: i32 = 1;

/// Why `open_trace` failed: the file could not be created (nothing was), or its header
/// could not be written to the file at this path.
pub enum OpenError {
    Create(std::io::Error),
    Header(String, std::io::Error),
}

/// Creates the trace file for `wanted` (`create_exclusive`) and writes its header, whose
/// `path` becomes the path actually used. Returns the writer and that path.
pub fn open_trace(
    wanted: &str,
    mut header: serde_json::Value,
) -> Result<(TraceWriter<File>, String), OpenError> {
    let (file, path) = create_exclusive(wanted).map_err(OpenError::Create)?;
    header["path"] = serde_json::Value::String(path.clone());
    match without_sigxfsz(|| TraceWriter::new(file, &header, ZSTD_LEVEL)) {
        Ok(mut w) => {
            w.set_budget(file_size_budget());
            Ok((w, path))
        }
        Err(e) => Err(OpenError::Header(path, e)),
    }
}

/// Room kept under the file size limit for the last block, which says why the trace
/// stops there (a `Stopped` and an End record: tens of bytes).
const LAST_BLOCK_ROOM: u64 = 4096;

/// The size the trace's blocks may take the file to: the file size limit (`ulimit -f`,
/// `RLIMIT_FSIZE`) less room for the last block, so that block always fits (without it, a
/// block that failed just short of the limit left no room, and the trace ended without
/// saying why). `None` when there is no limit.
fn file_size_budget() -> Option<u64> {
    // SAFETY: getrlimit writes the struct it is given.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some((r.rlim_cur as u64).saturating_sub(LAST_BLOCK_ROOM))
}

/// Runs `write` (the shim's write to its trace) so that it can never raise SIGXFSZ in the
/// program: past a file size limit (`ulimit -f`) the kernel sends that signal to the
/// writing thread, and its default action would end the job. The signal is blocked on this
/// thread for the call, so the write fails with `EFBIG` instead, and a SIGXFSZ it left
/// pending is taken back before the mask is restored. The program's own writes still get
/// the signal as before.
pub fn without_sigxfsz<T>(write: impl FnOnce() -> T) -> T {
    // SAFETY: plain signal-set and mask calls on valid, initialised sets.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGXFSZ);
        let mut old: libc::sigset_t = std::mem::zeroed();
        let masked = libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) == 0;
        let mut before: libc::sigset_t = std::mem::zeroed();
        let was_pending =
            libc::sigpending(&mut before) == 0 && libc::sigismember(&before, libc::SIGXFSZ) == 1;
        let r = write();
        if masked {
            let mut after: libc::sigset_t = std::mem::zeroed();
            if !was_pending
                && libc::sigpending(&mut after) == 0
                && libc::sigismember(&after, libc::SIGXFSZ) == 1
            {
                let zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                libc::sigtimedwait(&block, std::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        r
    }
}

/// Environment variables recorded in the header: an allow-list, never the whole
/// environment (it may hold secrets).
pub const ENV_ALLOW: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_JOB_ID",
];

/// The framework allocator variables recorded in the header's `framework` object: the
/// ones that decide whether a framework's allocations reach the hooks per tensor or per
/// segment (the analyzer derives the level from them).
pub const FRAMEWORK_ENV: &[&str] = &[
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
];

/// The header's `framework` object: the launcher's modes (`GPUMEMPROF_FRAMEWORK_MODES`)
/// and the framework variables present at start.
pub fn framework(cfg: &Config, env: impl Fn(&str) -> Option<String>) -> serde_json::Value {
    let mut vars = serde_json::Map::new();
    for k in FRAMEWORK_ENV {
        if let Some(v) = env(k) {
            vars.insert((*k).to_string(), serde_json::Value::String(v));
        }
    }
    serde_json::json!({ "modes": cfg.framework_modes, "env": vars })
}

/// Appends `path` (made absolute) as one line to the trace list `list`
/// (`GPUMEMPROF_TRACE_LIST`), with one `write(2)` on an `O_APPEND` descriptor, so lines
/// of processes that create their traces at once never mix. Called once per trace file,
/// when it is created (never on the hot path or in a signal handler). A failure is one
/// warning; the program goes on. The list is opened as the trace is, never through a
/// symbolic link (`O_NOFOLLOW`): a link planted in a shared directory by another user must
/// not make a process, maybe run as root, append to a file of the link's choosing.
pub fn note_trace(list: &str, path: &str) {
    let mut line = if path.starts_with('/') {
        path.to_string()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(path).to_string_lossy().into_owned(),
            Err(_) => path.to_string(),
        }
    };
    line.push('\n');
    let Ok(c) = CString::new(list) else { return };
    // SAFETY: valid C string; flags and mode are plain integers.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600 as libc::c_uint,
        )
    };
    let failure = if fd < 0 {
        Some(std::io::Error::last_os_error())
    } else {
        // SAFETY: fd is ours; the buffer and its length match.
        let n = unsafe { libc::write(fd, line.as_ptr() as *const libc::c_void, line.len()) };
        let failure = match n {
            n if n < 0 => Some(std::io::Error::last_os_error()),
            n if n as usize != line.len() => Some(std::io::Error::other("short write")),
            _ => None,
        };
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(fd) };
        failure
    };
    if let Some(e) = failure {
        warn(&format!(
            "cannot add the trace {} to GPUMEMPROF_TRACE_LIST={list}: {e}",
            line.trim_end()
        ));
    }
}

/// The process's argv from /proc/self/cmdline, capped (64 arguments of 4 KiB).
pub fn argv() -> Vec<String> {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .take(64)
        .map(|a| String::from_utf8_lossy(&a[..a.len().min(4096)]).into_owned())
        .collect()
}

/// The JSON header written after the magic bytes.
pub fn header(
    cfg: &Config,
    ph: &Placeholders,
    path: &str,
    start_monotonic_ns: u64,
    apis: serde_json::Value,
    env: impl Fn(&str) -> Option<String>,
) -> serde_json::Value {
    let mut envmap = serde_json::Map::new();
    for k in ENV_ALLOW {
        if let Some(v) = env(k) {
            envmap.insert((*k).to_string(), serde_json::Value::String(v));
        }
    }
    serde_json::json!({
        "format": "gpumemprof-trace",
        "format_version": gpumemprof_format::FORMAT_VERSION,
        "shim_version": env!("CARGO_PKG_VERSION"),
        "pid": ph.pid,
        // SAFETY: getppid has no preconditions.
        "ppid": unsafe { libc::getppid() },
        "host": ph.host,
        "rank": ph.rank,
        "argv": argv(),
        "exe": std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
        "cwd": std::env::current_dir().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
        "path": path,
        "start_time_unix_ns": clock::unix_ns(),
        "start_monotonic_ns": start_monotonic_ns,
        "clock": "CLOCK_MONOTONIC",
        "config": cfg.to_json(),
        "env": envmap,
        "framework": framework(cfg, &env),
        "apis": apis,
        "mem_kinds": ["device", "managed", "pinned_host", "address_reservation", "vmm_handle"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framework_records_the_modes_and_only_the_framework_variables() {
        let cfg = Config {
            framework_modes: vec!["torch=tensors".into()],
            ..Config::default()
        };
        let env = |k: &str| match k {
            "PYTORCH_CUDA_ALLOC_CONF" => Some("backend:cudaMallocAsync".to_string()),
            "TF_GPU_ALLOCATOR" => Some("cuda_malloc_async".to_string()),
            "HOME" => Some("/root".to_string()),
            _ => None,
        };
        assert_eq!(
            framework(&cfg, env),
            serde_json::json!({
                "modes": ["torch=tensors"],
                "env": {
                    "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
                    "TF_GPU_ALLOCATOR": "cuda_malloc_async",
                },
            })
        );
    }

    #[test]
    fn trace_list_gets_one_absolute_line_per_trace() {
        let dir = std::env::temp_dir().join(format!("gmp-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let list = dir.join("list");
        let list = list.to_str().unwrap();
        note_trace(list, "/t/a.trace");
        note_trace(list, "b.trace");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            std::fs::read_to_string(list).unwrap(),
            format!("/t/a.trace\n{}\n", cwd.join("b.trace").display())
        );
        // A list that cannot be written is a warning, never a failure.
        note_trace(dir.join("no/such/dir").to_str().unwrap(), "/t/c.trace");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn existing_files_and_symlinks_are_never_reused() {
        let dir = std::env::temp_dir().join(format!("gmp-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.trace");
        std::fs::write(&p, b"keep").unwrap();
        let target = dir.join("victim");
        std::fs::write(&target, b"victim").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("t.trace.1")).unwrap();
        let (_f, used) = create_exclusive(p.to_str().unwrap()).unwrap();
        assert_eq!(used, format!("{}.2", p.display()));
        assert_eq!(std::fs::read(&p).unwrap(), b"keep");
        assert_eq!(std::fs::read(&target).unwrap(), b"victim");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&used).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
