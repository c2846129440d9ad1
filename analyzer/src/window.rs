//! A trace seen through one NVTX range (`summary|peak|leaks --range NAME`): only the
//! allocations made while the range was open, on any thread, up to its end. Its first
//! occurrence is the window: from its push to the pop that closes it on the same thread
//! and domain (or from its start to its end), to the trace's end if it never closed. What
//! was allocated before the window is left out, and so are its frees; after its end only
//! the records that say how the trace ended are read, so `leaks` lists what the range
//! allocated and left live, and `peak` the most of it live at once, with its sites: a
//! test's own memory for a pytest budget (`gpumemprof.scope` names the range).

use std::collections::HashSet;
use std::path::Path;

use gpumemprof_format::{NvtxOp, Record};
use serde::Serialize;

use crate::error::Error;
use crate::observe::record_time;
use crate::replay::{Loaded, Replay};

/// The window of a range, in the trace's nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The range's name.
    pub range: String,
    pub from_ns: u64,
    /// Null when the range never closed: to the trace's end.
    pub to_ns: Option<u64>,
}

/// The first occurrence of the range named `name` in the trace at `path`.
pub fn find(path: &Path, name: &str) -> Result<Window, Error> {
    let mut reader = crate::input::open(path)?;
    let mut ids: HashSet<u64> = HashSet::new();
    // The range found: its thread and domain with the pushes open since, or its id.
    let mut open: Option<(Window, Opened)> = None;
    while let Some(record) = reader
        .next_salvaged()
        .map_err(|e| crate::input::read_error(path, e))?
    {
        let n = match record {
            Record::NvtxString { id, text } if text == name => {
                ids.insert(id);
                continue;
            }
            Record::Nvtx(n) => n,
            _ => continue,
        };
        match &mut open {
            None => {
                if !ids.contains(&n.name) {
                    continue;
                }
                let opened = match n.op {
                    NvtxOp::Push => Opened::Pushed {
                        tid: n.tid,
                        domain: n.domain,
                        depth: 1,
                    },
                    NvtxOp::Start => Opened::Started { range: n.range },
                    _ => continue,
                };
                let window = Window {
                    range: name.to_string(),
                    from_ns: n.time_ns,
                    to_ns: None,
                };
                open = Some((window, opened));
            }
            Some((window, opened)) => {
                let closed = match opened {
                    Opened::Pushed { tid, domain, depth }
                        if n.tid == *tid && n.domain == *domain =>
                    {
                        match n.op {
                            NvtxOp::Push => *depth += 1,
                            NvtxOp::Pop => *depth -= 1,
                            _ => {}
                        }
                        *depth == 0
                    }
                    Opened::Started { range } => n.op == NvtxOp::End && n.range == *range,
                    _ => false,
                };
                if closed {
                    window.to_ns = Some(n.time_ns);
                    break;
                }
            }
        }
    }
    open.map(|(w, _)| w).ok_or_else(|| {
        Error::Failed(format!(
            "{}: no NVTX range or scope named {name:?} in the trace (see them with: gpumemprof summary {} --by range)",
            path.display(),
            path.display()
        ))
    })
}

enum Opened {
    Pushed { tid: u32, domain: u64, depth: u32 },
    Started { range: u64 },
}

/// The trace at `path` replayed through `window`.
pub fn load(path: &Path, window: &Window) -> Result<Loaded, Error> {
    let mut reader = crate::input::open(path)?;
    let mut replay = Replay::new().of_header(reader.header());
    // What was allocated before the window, by address space and address: left out, and
    // its frees with it.
    let mut before: HashSet<(usize, u64)> = HashSet::new();
    let to = window.to_ns.unwrap_or(u64::MAX);
    while let Some(record) = reader
        .next_salvaged()
        .map_err(|e| crate::input::read_error(path, e))?
    {
        let after = record_time(&record).is_some_and(|t| t > to);
        if after {
            // How the trace ended, and its counters; nothing the window holds.
            if matches!(
                record,
                Record::Stats(_) | Record::End(_) | Record::Ending(_) | Record::Stopped(_)
            ) {
                replay.record(record);
            }
            continue;
        }
        match record {
            Record::Alloc(a) if a.time_ns < window.from_ns => {
                before.insert((a.kind.space(), a.address));
            }
            Record::Free(f) if before.remove(&(f.kind.space(), f.address)) => {}
            Record::Tensor(t) if t.delta >= 0 && t.time_ns < window.from_ns => {
                before.insert((usize::MAX, t.address));
            }
            Record::Tensor(t) if t.delta < 0 && before.remove(&(usize::MAX, t.address)) => {}
            Record::AllocFailed(f) if f.time_ns < window.from_ns => {}
            other => replay.record(other),
        }
    }
    let loaded =
        Loaded::read(&reader, replay.finish()).map_err(|e| crate::input::read_error(path, e))?;
    crate::input::warn_losses(path, &loaded);
    Ok(loaded)
}
