//! The trace of a running process (`--pid`): its open files, or the names its
//! environment says the shim gives it.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use gpumemprof_format::template::{self, hostname, Placeholders};
use gpumemprof_format::MAGIC;

use crate::error::Error;

/// The trace file of running process `pid`, looked for in this order:
/// 1. a file the process has open (`/proc/PID/fd`) that starts with the trace magic;
/// 2. its `GPUMEMPROF_OUTPUT` (`/proc/PID/environ`), with `%p`, `%h`, `%r` and `%%`
///    expanded, relative to its working directory (`/proc/PID/cwd`);
/// 3. `gpumemprof.PID.trace` in its working directory;
/// 4. the trace of one of its children, found the same way (a launcher such as
///    `gpumemprof run` or a shell script runs the profiled program as its child), down to
///    grandchildren, the lowest pid first.
///
/// 1 and 2 need the right to read the process's /proc files (same user, or root).
pub fn find_trace(pid: u32) -> Result<PathBuf, Error> {
    let own = own_trace(pid);
    if own.is_ok() {
        return own;
    }
    let mut generation = children(pid);
    for _ in 0..2 {
        for &child in &generation {
            if let Ok(found) = own_trace(child) {
                return Ok(found);
            }
        }
        generation = generation.iter().flat_map(|&c| children(c)).collect();
    }
    own
}

/// The child processes of `pid`, ascending (from `/proc/PID/task/*/children`).
fn children(pid: u32) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Steps 1 to 3 of `find_trace`: the trace of `pid` itself.
fn own_trace(pid: u32) -> Result<PathBuf, Error> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if !proc_dir.is_dir() {
        return Err(Error::Failed(format!(
            "no process {pid}: is it still running? (give its trace file instead of --pid)"
        )));
    }
    if let Ok(entries) = std::fs::read_dir(proc_dir.join("fd")) {
        let mut fds: Vec<(u64, PathBuf)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let n: u64 = e.file_name().to_str()?.parse().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((n, target))
            })
            .collect();
        fds.sort();
        for (_, target) in fds {
            if target.is_file() && starts_with_magic(&target) {
                return Ok(target);
            }
        }
    }
    let cwd = std::fs::read_link(proc_dir.join("cwd")).ok();
    let env = std::fs::read(proc_dir.join("environ")).unwrap_or_default();
    let var = |name: &str| {
        env.split(|&b| b == 0).find_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            let (k, v) = kv.split_once('=')?;
            (k == name && !v.is_empty()).then(|| v.to_owned())
        })
    };
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if let Some(template) = var("GPUMEMPROF_OUTPUT") {
        let rank = template::RANK_VARS
            .iter()
            .find_map(|k| var(k).filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "0".into());
        if template.contains("%t") {
            tried.push(format!(
                "GPUMEMPROF_OUTPUT={template} (names with %t cannot be guessed)"
            ));
        } else {
            candidates.push(expand(&template, pid, &rank));
        }
    }
    candidates.push(format!("gpumemprof.{pid}.trace"));
    for c in candidates {
        let path = match (&cwd, Path::new(&c).is_absolute()) {
            (Some(dir), false) => dir.join(&c),
            _ => PathBuf::from(&c),
        };
        if path.is_file() {
            return Ok(path);
        }
        tried.push(path.display().to_string());
    }
    Err(Error::Failed(format!(
        "process {pid} has no gpumemprof trace (looked at its open files and at {}): is it \
         running with LD_PRELOAD=libgpumemprof.so, and has it allocated GPU memory yet (the \
         trace is created at the first allocation)? Give the trace file instead of --pid if \
         you know it",
        tried.join(", ")
    )))
}

fn starts_with_magic(path: &Path) -> bool {
    let mut head = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == MAGIC
}

/// The shim's placeholders that can be known from outside (`%t`, the start time, cannot:
/// it is kept as written).
fn expand(template: &str, pid: u32, rank: &str) -> String {
    let ph = Placeholders {
        pid,
        host: hostname(),
        rank: rank.to_string(),
        time: "%t".to_string(),
    };
    template::expand(template, &ph)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_known_from_outside_are_expanded() {
        assert_eq!(
            expand("/t/run-%p-r%r-%%.trace", 42, "3"),
            "/t/run-42-r3-%.trace"
        );
        assert_eq!(expand("x%q", 1, "0"), "x%q");
    }
}
