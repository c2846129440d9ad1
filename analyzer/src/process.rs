//! What /proc says of a process: whether it still runs, and whether it still writes a
//! given trace (a process killed without closing its trace, or a pid reused, does not).

use std::path::Path;

use gpumemprof_format::template::hostname;

/// Whether process `pid` still runs (a zombie does not).
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may contain spaces.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !rest.trim_start().starts_with(['Z', 'X']),
            None => true,
        },
        Err(_) => false,
    }
}

/// Whether the trace at `trace` is still being written: by process `pid`, running on this
/// host (`host` as the trace's header says), which has the file open (or whose open files
/// this user cannot see). A pid reused by another process does not count.
pub fn still_writing(pid: u32, host: Option<&str>, trace: &Path) -> bool {
    if host.is_some_and(|h| h != hostname()) || !process_running(pid) {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return true;
    };
    let Ok(trace) = trace.canonicalize() else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == trace))
}
