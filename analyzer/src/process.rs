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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_missing_one_does_not() {
        assert!(process_running(std::process::id()));
        assert!(!process_running(u32::MAX - 1));
    }

    #[test]
    fn a_trace_this_process_has_open_is_being_written_and_another_is_not() {
        let dir = std::env::temp_dir().join(format!("gpumemprof-process-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (open, closed) = (dir.join("open.trace"), dir.join("closed.trace"));
        let _held = std::fs::File::create(&open).unwrap();
        std::fs::write(&closed, b"").unwrap();
        let me = std::process::id();
        assert!(still_writing(me, None, &open));
        assert!(!still_writing(me, None, &closed));
        assert!(!still_writing(me, Some("another-host.invalid"), &open));
        assert!(!still_writing(u32::MAX - 1, None, &open));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
