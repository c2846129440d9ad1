//! `gpumemprof export --format parquet TRACE|DIR... -o OUT_DIR`: traces as three Parquet
//! tables for an engine (DuckDB, Spark, Polars, Trino), one row per allocation, per frame
//! of each stack, and per trace (docs/REPORTS.md, "Parquet export", has the columns and
//! SQL recipes).
//!
//! ```text
//!  each trace, one after another (memory: one trace's live allocations and stacks)
//!    replay pass ─► AllocationRows ─► allocations.parquet   (a row per allocation)
//!    its stacks  ─► Symbolizer     ─► frames.parquet        (a row per frame)
//!    its header and capture        ─► processes.parquet     (a row per trace)
//! ```
//!
//! Times are ns since the process's start (its `start_unix_ns` is in `processes`); stack
//! ids are the trace's own, so frames join allocations on (path, stack_id), or (pid,
//! stack_id) where pids are unique.

mod allocations;
mod columns;
mod encoder;
mod table;

use std::path::{Path, PathBuf};

use self::allocations::{AllocationRows, Process};
use self::table::{kept, Table};
use crate::error::Error;
use crate::input::{rank_of, read_error, warn_all, warn_losses};
use crate::observe::replay_observed;
use crate::report::{EndingInfo, TraceInfo};
use crate::symbolize::Symbolizer;
use gpumemprof_format::header::api_names;

pub use self::table::ROW_GROUP_BYTES;

/// `gpumemprof.schema_version` in each file's metadata: raised only for a change old
/// queries would misread (columns are added, never renamed).
pub const SCHEMA_VERSION: u32 = 1;

/// The three files, in the output directory.
pub const FILES: [&str; 3] = ["allocations.parquet", "frames.parquet", "processes.parquet"];

const FRAMES: &str = "message frame {
    required int64 pid;
    required int64 stack_id;
    required int32 depth;
    optional binary function (STRING);
    optional binary file (STRING);
    optional int32 line;
    optional binary module (STRING);
    required boolean is_python;
    required boolean inlined;
    required binary path (STRING);
}";

const PROCESSES: &str = "message process {
    required binary path (STRING);
    required int64 pid;
    optional int64 ppid;
    optional int64 rank;
    optional binary host (STRING);
    required group argv (LIST) {
        repeated group list {
            required binary element (STRING);
        }
    }
    optional binary exe (STRING);
    optional int64 start_unix_ns;
    required int64 duration_ns;
    optional binary ending (STRING);
    optional int32 exit_status;
    optional int32 signal;
    required boolean complete;
    required boolean truncated;
    required int64 events;
    required int64 dropped;
    required int64 queue_waits;
    required int64 allocation_rows;
    required int64 stacks;
}";

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    pub traces: u64,
    pub allocations: u64,
    pub frames: u64,
    pub row_groups: u64,
}

impl Written {
    pub fn describe(&self) -> String {
        let s = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{}, {} and {} in {}",
            s(self.traces, "trace", "traces"),
            s(self.allocations, "allocation row", "allocation rows"),
            s(self.frames, "frame row", "frame rows"),
            s(self.row_groups, "row group", "row groups"),
        )
    }
}

/// Refuses, before reading anything, an output directory whose files exist (without
/// `force`) or that cannot be made.
pub fn prepare(dir: &Path, force: bool) -> Result<(), Error> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Failed(format!(
            "{}: not a directory; the Parquet export writes {} into the directory -o names",
            dir.display(),
            FILES.join(", ")
        )));
    }
    for name in FILES {
        let path = dir.join(name);
        if !force && path.exists() {
            return Err(Error::Failed(format!(
                "{}: already exists; pass -f to overwrite it, or choose another directory",
                path.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::File {
        what: format!("creating {}", dir.display()),
        source,
    })
}

/// Writes the three files for `traces` into `dir` (see `prepare`); on failure none of them
/// is left behind.
pub fn export(
    traces: &[PathBuf],
    dir: &Path,
    force: bool,
    row_group_bytes: usize,
) -> Result<Written, Error> {
    let paths = FILES.map(|f| dir.join(f));
    let written = write_all(traces, &paths, force, row_group_bytes);
    if written.is_err() {
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    }
    written
}

fn write_all(
    traces: &[PathBuf],
    [alloc_path, frame_path, process_path]: &[PathBuf; 3],
    force: bool,
    row_group_bytes: usize,
) -> Result<Written, Error> {
    let create = |path: &Path, schema: &str| {
        Table::create(path, schema, SCHEMA_VERSION, force, row_group_bytes)
    };
    let mut allocations = create(alloc_path, allocations::SCHEMA)?;
    let mut frames = create(frame_path, FRAMES)?;
    let mut processes = create(process_path, PROCESSES)?;
    for trace in traces {
        one_trace(trace, &mut allocations, &mut frames, &mut processes)?;
    }
    let (traces, g1) = processes.close()?;
    let (allocations, g2) = allocations.close()?;
    let (frames, g3) = frames.close()?;
    Ok(Written {
        traces,
        allocations,
        frames,
        row_groups: g1 + g2 + g3,
    })
}

fn one_trace(
    path: &Path,
    allocations: &mut Table,
    frames: &mut Table,
    processes: &mut Table,
) -> Result<(), Error> {
    let reader = crate::input::open(path)?;
    let header = reader.header().clone();
    let int = |key: &str| header.get(key).and_then(|v| v.as_u64()).map(|v| v as i64);
    let host = header
        .get("host")
        .and_then(|h| h.as_str())
        .map(str::to_owned);
    let path_text = path.display().to_string();
    let process = Process {
        rank: rank_of(&header).map(|r| r as i64),
        pid: int("pid").unwrap_or(0),
        host: host.as_deref().map(kept),
        path: kept(&path_text),
    };
    let rows_before = allocations.rows();
    let mut rows = AllocationRows::new(allocations, process, &api_names(&header));
    let loaded = replay_observed(reader, &mut [&mut rows]).map_err(|e| read_error(path, e))?;
    warn_losses(path, &loaded);
    rows.finish()?;
    let allocation_rows = allocations.rows() - rows_before;
    let info = TraceInfo::new(path, &loaded);
    let pid = info.pid.map_or(0, |p| p as i64);

    let r = &loaded.replayed;
    let mut ids: Vec<u64> = r.stacks.keys().copied().filter(|&id| id != 0).collect();
    ids.sort_unstable();
    let mut sym = Symbolizer::of(&loaded);
    let path_bytes = kept(&path_text);
    for &id in &ids {
        for (depth, f) in sym.stack(id, 0).iter().enumerate() {
            frames
                .row()
                .i64(Some(pid))
                .i64(Some(id as i64))
                .i32(Some(depth as i32))
                .str(f.function.as_deref())
                .str(f.file.as_deref())
                .i32(f.line.map(|l| l as i32))
                .str(f.module.as_deref())
                .bool(f.python)
                .bool(f.inlined)
                .bytes(Some(&path_bytes))
                .end()?;
        }
    }
    warn_all(sym.take_warnings());

    let (ending, status, signal) = match &info.ending {
        Some(EndingInfo::Exit { status }) => (Some("exit"), Some(*status), None),
        Some(EndingInfo::Signal { signal, .. }) => (Some("signal"), None, Some(*signal as i32)),
        None => (None, None, None),
    };
    processes
        .row()
        .bytes(Some(&path_bytes))
        .i64(Some(pid))
        .i64(int("ppid"))
        .i64(rank_of(&header).map(|r| r as i64))
        .str(host.as_deref())
        .str_list(&info.argv)
        .str(header.get("exe").and_then(|e| e.as_str()))
        .i64(int("start_time_unix_ns"))
        .i64(Some(info.duration_ns as i64))
        .str(ending)
        .i32(status)
        .i32(signal)
        .bool(info.complete)
        .bool(info.truncated)
        .i64(Some(info.events as i64))
        .i64(Some(info.dropped as i64))
        .i64(Some(info.queue_waits as i64))
        .i64(Some(allocation_rows as i64))
        .i64(Some(ids.len() as i64))
        .end()
}
