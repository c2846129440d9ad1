//! `export --format torch-snapshot`: the trace as PyTorch's memory snapshot, the pickle
//! `torch.cuda.memory._dump_snapshot` writes, so pytorch.org/memory_viz, `ptmem` and
//! `torch.cuda._memory_viz` open it with the live and peak numbers of our own reports.
//!
//! ```text
//!  pass 1   replay ──► live at the end, devices with entries, streams and VMM mappings
//!  write    {"device_traces": [ [entry ...]  ◄── pass 2: device 0's entries, streamed
//!                               [entry ...]  ◄── pass 3: device 1's ...
//!                               ... one list per ordinal up to the highest ],
//!           "segments": [segment per allocation live at the end, one active block each]}
//! ```
//!
//! With a framework allocator's tensors in the trace (PyTorch's caching allocator), the
//! tensors are the blocks: `alloc` and `free_requested`/`free_completed` entries, and each
//! segment live at the end lists the tensors inside it (with `inactive` blocks for the
//! gaps); the allocations are its segments (`segment_alloc`/`segment_free` only). Without
//! them, the hooks see what the framework's allocator asked CUDA for, so each allocation is
//! a segment holding one block of its size: `segment_alloc` then `alloc` when it became live;
//! `free_requested`, `free_completed`, `segment_free` when a free released it (the pair for
//! every free, at the free's time: the trace counts memory released at the call, also for
//! stream-ordered frees). A VMM mapping (`cuMemMap`, `hipMemMap`) is memory: the same
//! entries with `segment_map`/`segment_unmap`, and `is_expandable` on its segment; address
//! reservations and physical handles are not memory and have no entries. An allocation
//! call that failed with out-of-memory is an `oom` entry whose `device_free` is the free
//! memory the shim read after the failure (0 when it could not). Only GPU memory is in a
//! snapshot: pinned host memory and memory of an unknown device are left out.
//!
//! Entries are streamed: the file is written while the trace is read, one pass per device
//! with entries (`device_traces` lists each device's entries together). Memory holds the
//! live allocations, as the replay does, and the memo: each distinct stack's frame list and
//! frame is written once and referenced after that (`pickle.rs`), so the file grows with
//! the events but not with repeated stacks. Integers are exact in the browser viewer below
//! 2^53: addresses (47 bits in user space), sizes and `time_us` (microseconds since the
//! Unix epoch, about 2^51) are.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use gpumemprof_format::{MemKind, ReadError, Record, TraceReader};

use super::window::Window;
use crate::error::Error;
use crate::fasthash::FastMap;
use crate::observe::{cut, record_time, replay_observed_until, Cut, Observer};
use crate::replay::{LiveAlloc, LiveChange, Loaded, Replay};
use crate::symbolize::Symbolizer;

mod entries;
pub use entries::torch_frame;
use entries::{DeviceEntries, SnapshotWriter};

/// Devices above this ordinal are left out: `device_traces` has one list per ordinal up
/// to the highest, and a corrupt ordinal must not make a huge file.
pub const MAX_DEVICE: i32 = 1023;

pub(super) use gpumemprof_format::OUT_OF_MEMORY;

/// Whether memory of `kind` on `device` is in the snapshot as segments: memory on a known
/// GPU.
pub fn exported(kind: MemKind, device: i32) -> bool {
    kind.is_memory() && kind != MemKind::PinnedHost && (0..=MAX_DEVICE).contains(&device)
}

/// Whether it is a framework allocator's tensor on a known GPU: a block inside a segment.
pub fn tensor(kind: MemKind, device: i32) -> bool {
    kind == MemKind::Tensor && (0..=MAX_DEVICE).contains(&device)
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub entries: u64,
    pub segments: u64,
    /// Devices that have entries.
    pub devices: usize,
    /// Allocations left out: pinned host memory, and memory of an unknown device.
    pub left_out_pinned: u64,
    pub left_out_unknown_device: u64,
    /// Entries of the time window left out for `--last` (the first ones of each device).
    pub skipped: u64,
}

impl Written {
    pub fn describe(&self) -> String {
        format!(
            "PyTorch memory snapshot, {} trace entries on {} device{}, {} segment{} live at \
             the end; open it in pytorch.org/memory_viz",
            self.entries,
            self.devices,
            if self.devices == 1 { "" } else { "s" },
            self.segments,
            if self.segments == 1 { "" } else { "s" }
        )
    }
}

/// Writes the snapshot of `trace` to `output` (refusing an existing file without `force`):
/// the entries in `window` (`--to`: the snapshot is taken then, its segments what was live
/// then). A trace that cannot be read writes nothing; a failure while writing removes the
/// file.
pub fn export(trace: &Path, output: &Path, force: bool, window: Window) -> Result<Written, Error> {
    let surveyed = survey(crate::input::open(trace)?, window)
        .map_err(|e| crate::input::read_error(trace, e))?;
    crate::input::warn_losses(trace, &surveyed.loaded);
    let file = crate::term::create_output(output, force)?;
    let written = write(
        trace,
        &surveyed,
        &|| crate::input::open(trace),
        BufWriter::new(file),
    );
    let written = written.map_err(|e| {
        let _ = std::fs::remove_file(output);
        match e {
            Error::Output(source) => Error::File {
                what: format!("writing {}", output.display()),
                source,
            },
            e => e,
        }
    })?;
    if written.skipped > 0 {
        crate::term::warn(&format!(
            "{}: left out the first {} of {} trace entries (--last {} per device, PyTorch's \
             max_entries, keeps memory_viz usable; --last 0 writes them all)",
            output.display(),
            written.skipped,
            written.skipped + written.entries,
            window.last.unwrap_or(0)
        ));
    }
    let plural = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mut left = Vec::new();
    if written.left_out_pinned > 0 {
        left.push(plural(written.left_out_pinned, "pinned host allocation"));
    }
    if written.left_out_unknown_device > 0 {
        let n = written.left_out_unknown_device;
        left.push(plural(n, "allocation") + " on an unknown device");
    }
    if !left.is_empty() {
        crate::term::warn(&format!(
            "a PyTorch snapshot holds GPU memory only; left out of {}: {}",
            output.display(),
            left.join(" and ")
        ));
    }
    Ok(written)
}

/// Pass 1's result: the replay, and what the snapshot needs beyond it.
pub struct Surveyed {
    pub loaded: Loaded,
    survey: Survey,
    window: Window,
}

/// Pass 1: replays the trace (up to `window.to_ns`).
pub fn survey<R: Read + Send>(
    reader: TraceReader<R>,
    window: Window,
) -> Result<Surveyed, ReadError> {
    let mut survey = Survey::new(reader.header());
    let loaded = replay_observed_until(reader, &mut [&mut survey], window.to_ns)?;
    Ok(Surveyed {
        loaded,
        survey,
        window,
    })
}

/// Bytes per trace entry in a snapshot, measured (615 MB for 15.0M entries of a loop of
/// allocations and frees of one stack): for the size said before a large one is written.
const BYTES_PER_ENTRY: u64 = 41;

/// Writes the snapshot to `out`: `open` opens the trace again for each device's pass
/// (`trace` names it in errors). Symbolizes from `surveyed.loaded`'s modules.
pub fn write<R: Read + Send, W: Write>(
    trace: &Path,
    surveyed: &Surveyed,
    open: &dyn Fn() -> Result<TraceReader<R>, Error>,
    out: W,
) -> Result<Written, Error> {
    let (loaded, survey) = (&surveyed.loaded, &surveyed.survey);
    let header = &loaded.header;
    let r = &loaded.replayed;
    let mut sym = Symbolizer::of(loaded);
    let start_ns = header
        .get("start_time_unix_ns")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let mut w = SnapshotWriter::new(out, &mut sym, start_ns).map_err(Error::Output)?;
    let window = surveyed.window;
    // A counting pass per device first: how many of its first entries `--last` skips,
    // and how large the file will be (said before a large one is written).
    let mut skip: BTreeMap<i32, u64> = BTreeMap::new();
    let mut kept = 0u64;
    for &device in &survey.devices {
        let mut counter =
            DeviceEntries::new(&mut w, device, header, survey.tensors).windowed(window, u64::MAX);
        replay_first(open()?, survey.records, window.to_ns, &mut counter)
            .map_err(|e| crate::input::read_error(trace, e))?;
        let skipped = window.skipped(counter.counted);
        skip.insert(device, skipped);
        kept += counter.counted - skipped;
    }
    if let Some(notice) = super::window::size_notice(kept * BYTES_PER_ENTRY, kept, "entries") {
        crate::term::say(&notice);
    }
    // Device traces first: the segments (what is live at the end) need no trace pass.
    w.begin().map_err(Error::Output)?;
    let highest = survey.devices.last().copied().unwrap_or(0);
    for device in 0..=highest {
        w.p.empty_list().map_err(Error::Output)?;
        if survey.devices.contains(&device) {
            let reader = open()?;
            let skipped = skip.get(&device).copied().unwrap_or(0);
            let mut entries = DeviceEntries::new(&mut w, device, header, survey.tensors)
                .windowed(window, skipped);
            replay_first(reader, survey.records, window.to_ns, &mut entries)
                .map_err(|e| crate::input::read_error(trace, e))?;
            let (mut batch, error) = (entries.batch, entries.error);
            if let Some(e) = error {
                return Err(Error::Output(e));
            }
            w.p.end_items(&mut batch).map_err(Error::Output)?;
        }
        w.p.append().map_err(Error::Output)?;
    }
    let mut live: Vec<&LiveAlloc> = r
        .live
        .iter()
        .filter(|a| exported(a.kind, a.device))
        .collect();
    live.sort_by_key(|a| (a.device, a.address, a.time_ns));
    let mut tensors: Vec<&LiveAlloc> = r.live.iter().filter(|a| tensor(a.kind, a.device)).collect();
    tensors.sort_by_key(|a| (a.device, a.address, a.time_ns));
    let segments = (w.segments(
        &live,
        survey.tensors.then_some(&tensors[..]),
        &survey.extras,
    ))
    .map_err(Error::Output)?;
    let entries = w.finish().map_err(Error::Output)?;
    crate::input::warn_all(sym.take_warnings());

    let left_out = |pinned: bool| {
        r.rows
            .iter()
            .filter(|row| row.kind.is_memory() && !exported(row.kind, row.device))
            .filter(|row| (row.kind == MemKind::PinnedHost) == pinned)
            .map(|row| row.counters.allocations)
            .sum()
    };
    Ok(Written {
        entries,
        segments,
        devices: survey.devices.len(),
        left_out_pinned: left_out(true),
        left_out_unknown_device: left_out(false),
        skipped: skip.values().sum(),
    })
}

/// `observe::replay_observed_until` for the first `records` records it applies only: a
/// later pass stops where the first one ended, so a trace still being written gives a
/// consistent snapshot.
fn replay_first<R: Read + Send>(
    mut reader: TraceReader<R>,
    records: u64,
    until: Option<u64>,
    observer: &mut dyn Observer,
) -> Result<(), ReadError> {
    let mut replay = Replay::new();
    let mut changes = Vec::new();
    let mut applied = 0u64;
    while applied < records {
        let Some(record) = reader.next_salvaged()? else {
            break;
        };
        match cut(&record, until) {
            Cut::Apply => applied += 1,
            Cut::Skip => continue,
            Cut::Stop => break,
        }
        observer.record(&record);
        let time = record_time(&record).unwrap_or(0);
        changes.clear();
        replay.record_changes(record, &mut changes);
        if !changes.is_empty() {
            observer.changes(time, &changes);
        }
    }
    Ok(())
}

/// What `LiveAlloc` does not keep about an allocation: its stream and whether it is a VMM
/// mapping. Kept while it is live, and only where it is not (0, false).
struct Extras {
    /// API ids of `cuMemMap` and `hipMemMap`.
    map_apis: Vec<u16>,
    /// The stream and mapping flag of the alloc record being applied.
    current: (u64, bool),
    live: FastMap<(u64, u64), (u64, bool)>,
}

impl Extras {
    fn new(header: &serde_json::Value) -> Extras {
        let names = gpumemprof_format::header::api_names(header);
        Extras {
            map_apis: names
                .into_iter()
                .filter(|(_, name)| name == "cuMemMap" || name == "hipMemMap")
                .map(|(id, _)| id)
                .collect(),
            current: (0, false),
            live: FastMap::default(),
        }
    }

    fn record(&mut self, record: &Record) {
        self.current = match record {
            Record::Alloc(a) => (a.stream, self.map_apis.contains(&a.api)),
            _ => (0, false),
        };
    }

    fn added(&mut self, a: &LiveAlloc) -> (u64, bool) {
        if self.current != (0, false) {
            self.live.insert((a.address, a.time_ns), self.current);
        }
        self.current
    }

    fn released(&mut self, a: &LiveAlloc) -> (u64, bool) {
        self.live
            .remove(&(a.address, a.time_ns))
            .unwrap_or_default()
    }

    fn get(&self, a: &LiveAlloc) -> (u64, bool) {
        self.live
            .get(&(a.address, a.time_ns))
            .copied()
            .unwrap_or_default()
    }
}

/// Pass 1's observer: which devices have entries, the extras of what is live at the end,
/// and how many records the pass read.
struct Survey {
    extras: Extras,
    devices: BTreeSet<i32>,
    records: u64,
    /// The trace has a framework allocator's tensors: they are the blocks and the
    /// `alloc`/`free` entries, the allocations their segments.
    tensors: bool,
}

impl Survey {
    fn new(header: &serde_json::Value) -> Survey {
        Survey {
            extras: Extras::new(header),
            devices: BTreeSet::new(),
            records: 0,
            tensors: false,
        }
    }
}

impl Observer for Survey {
    fn record(&mut self, record: &Record) {
        self.records += 1;
        self.extras.record(record);
        match record {
            Record::AllocFailed(f) if f.result == OUT_OF_MEMORY && exported(f.kind, f.device) => {
                self.devices.insert(f.device);
            }
            Record::Tensor(t) if tensor(MemKind::Tensor, t.device) => {
                self.tensors = true;
                self.devices.insert(t.device);
            }
            _ => {}
        }
    }

    fn changes(&mut self, _time_ns: u64, changes: &[LiveChange]) {
        for change in changes {
            match change {
                LiveChange::Added(a) if exported(a.kind, a.device) => {
                    self.devices.insert(a.device);
                    self.extras.added(a);
                }
                LiveChange::Released(a) if exported(a.kind, a.device) => {
                    self.extras.released(a);
                }
                _ => {}
            }
        }
    }
}
