//! The `telemetry` export: the trace as JSON lines in the TelemetryEvent v2 schema of the
//! older Python gpumemprof (`docs/schemas/telemetry-event.schema.json`), so its loaders and
//! dashboards read our traces. One event per line, in trace order:
//!
//! * `allocation` / `deallocation`: device memory (kind `device`) became live / was
//!   released; `allocator_change_bytes` is +size / -size;
//! * `allocation_failed`: an allocation call of device memory returned an error;
//! * `sample`: an NVML sample of the device.
//!
//! `allocator_allocated_bytes` and `allocator_reserved_bytes` are the device memory live in
//! the hooks' view after the event (the hooks see what the framework's allocator reserved
//! from CUDA, so both are that number); `allocator_active_bytes` and
//! `allocator_inactive_bytes` are null (not visible below the framework). The device's
//! used/total/free bytes come from the latest NVML sample of the device, else the total
//! from the latest failed allocation and the tracked bytes as used; null when unknown.
//! Distributed identity (`job_id`, `rank`, `local_rank`, `world_size`) comes from the
//! header's environment allow-list as the older tool resolves it.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use gpumemprof_format::{MemKind, Record, Sample};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::window::Window;
use crate::error::Error;
use crate::observe::Observer;
use crate::replay::LiveChange;
use gpumemprof_format::header::str_field;

/// The older tool's schema version for these events.
pub const TELEMETRY_SCHEMA_VERSION: u32 = 2;
/// Who produced the events (the older tool names its trackers the same way).
pub const COLLECTOR: &str = "gpumemprof.shim";

/// One TelemetryEvent v2.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetryEvent {
    pub schema_version: u32,
    /// Wall-clock time, ns since the Unix epoch (the trace's start time plus the event's
    /// offset).
    pub timestamp_ns: u64,
    pub event_type: &'static str,
    pub collector: &'static str,
    /// 0: events, not periodic samples.
    pub sampling_interval_ms: u64,
    pub pid: i64,
    pub host: String,
    pub device_id: i64,
    pub allocator_allocated_bytes: u64,
    pub allocator_reserved_bytes: u64,
    pub allocator_active_bytes: Option<u64>,
    pub allocator_inactive_bytes: Option<u64>,
    pub allocator_change_bytes: i64,
    pub device_used_bytes: u64,
    pub device_free_bytes: Option<u64>,
    pub device_total_bytes: Option<u64>,
    pub context: Option<String>,
    pub metadata: Map<String, Value>,
    pub job_id: Option<String>,
    pub rank: u64,
    pub local_rank: u64,
    pub world_size: u64,
}

/// The distributed identity of the traced process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub job_id: Option<String>,
    pub rank: u64,
    pub local_rank: u64,
    pub world_size: u64,
}

/// As the older tool: `RANK`/`LOCAL_RANK`/`WORLD_SIZE` when `RANK` and `WORLD_SIZE` are
/// both set (`LOCAL_RANK` defaults to `RANK`), `job_id` from `SLURM_JOB_ID`; otherwise (or
/// if the values are inconsistent) rank 0 of 1.
pub fn identity(env: &Map<String, Value>) -> Identity {
    let get = |k: &str| {
        env.get(k)
            .and_then(|v| v.as_str())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let single = Identity {
        job_id: get("SLURM_JOB_ID").map(str::to_owned),
        rank: 0,
        local_rank: 0,
        world_size: 1,
    };
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    let (Some(rank), Some(world_size)) = (num("RANK"), num("WORLD_SIZE")) else {
        return single;
    };
    let local_rank = num("LOCAL_RANK").unwrap_or(rank);
    if world_size == 0 || rank >= world_size || local_rank >= world_size {
        return single;
    }
    Identity {
        rank,
        local_rank,
        world_size,
        ..single
    }
}

/// Builds events during the replay pass and writes each as one line.
pub struct TelemetryWriter<'a> {
    out: &'a mut dyn Write,
    /// The first write error; nothing more is written after it.
    error: Option<io::Error>,
    pub lines: u64,
    start_unix_ns: u64,
    pid: i64,
    host: String,
    identity: Identity,
    apis: BTreeMap<u64, String>,
    /// Device memory live per device.
    live: BTreeMap<i32, u64>,
    nvml: BTreeMap<i32, Sample>,
    failure_total: BTreeMap<i32, u64>,
    /// The API and thread of the record being applied (for its changes).
    current: Option<(u16, u32)>,
    /// Which events are written (`--from`, `--to`), and how many of those still to skip
    /// (the first ones, for `--last`).
    window: Window,
    skip: u64,
    /// A counting pass: events in the window are counted (`lines`), not written; the
    /// first `SIZE_SAMPLE` are serialized to measure their size (`sampled_bytes`).
    counting: bool,
    pub sampled_bytes: u64,
}

/// Events a counting pass serializes to estimate the export's size.
const SIZE_SAMPLE: u64 = 1000;

impl<'a> TelemetryWriter<'a> {
    pub fn new(header: &Value, out: &'a mut dyn Write) -> TelemetryWriter<'a> {
        let empty = Map::new();
        let env = header
            .get("env")
            .and_then(|e| e.as_object())
            .unwrap_or(&empty);
        TelemetryWriter {
            out,
            error: None,
            lines: 0,
            start_unix_ns: header
                .get("start_time_unix_ns")
                .and_then(|v| v.as_u64())
                .unwrap_or(0),
            pid: header.get("pid").and_then(|v| v.as_i64()).unwrap_or(-1),
            host: str_field(header, "host")
                .filter(|h| !h.is_empty())
                .unwrap_or("unknown")
                .to_owned(),
            identity: identity(env),
            apis: gpumemprof_format::header::apis(header)
                .into_iter()
                .map(|a| (u64::from(a.id), a.name))
                .collect(),
            live: BTreeMap::new(),
            nvml: BTreeMap::new(),
            failure_total: BTreeMap::new(),
            current: None,
            window: Window::default(),
            skip: 0,
            counting: false,
            sampled_bytes: 0,
        }
    }

    /// Writes only the events in `window`'s times, skipping the first `skip` of those.
    pub fn windowed(mut self, window: Window, skip: u64) -> TelemetryWriter<'a> {
        self.window = window;
        self.skip = skip;
        self
    }

    /// Counts the events in the window instead of writing them (see `counting`).
    pub fn counting(mut self) -> TelemetryWriter<'a> {
        self.counting = true;
        self
    }

    /// The first write error, if writing failed.
    pub fn into_error(self) -> Option<io::Error> {
        self.error
    }

    fn api(&self, id: u16) -> String {
        self.apis
            .get(&u64::from(id))
            .cloned()
            .unwrap_or_else(|| format!("api {id}"))
    }

    /// Whether an event at `time_ns` is to be written (or, counting, measured); counts or
    /// skips it otherwise. Asked before the event is built: building is most of the cost.
    fn admit(&mut self, time_ns: u64) -> bool {
        if self.error.is_some() || !self.window.contains(time_ns) {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        if self.counting && self.lines >= SIZE_SAMPLE {
            self.lines += 1;
            return false;
        }
        true
    }

    /// Writes (or measures) one admitted event.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        time_ns: u64,
        event_type: &'static str,
        device: i32,
        change: i64,
        context: String,
        mut metadata: Map<String, Value>,
    ) {
        let allocated = self.live.get(&device).copied().unwrap_or(0);
        let (used, total) = match self.nvml.get(&device) {
            Some(s) if s.device_total > 0 => (s.device_used, Some(s.device_total)),
            _ => (allocated, self.failure_total.get(&device).copied()),
        };
        // The schema does not allow used > total.
        let used = total.map_or(used, |t| used.min(t));
        metadata.insert("source".into(), json!("gpumemprof-trace"));
        metadata.insert("trace_time_ns".into(), json!(time_ns));
        let event = TelemetryEvent {
            schema_version: TELEMETRY_SCHEMA_VERSION,
            timestamp_ns: self.start_unix_ns.saturating_add(time_ns),
            event_type,
            collector: COLLECTOR,
            sampling_interval_ms: 0,
            pid: self.pid,
            host: self.host.clone(),
            device_id: i64::from(device),
            allocator_allocated_bytes: allocated,
            allocator_reserved_bytes: allocated,
            allocator_active_bytes: None,
            allocator_inactive_bytes: None,
            allocator_change_bytes: change,
            device_used_bytes: used,
            device_free_bytes: total.map(|t| t - used),
            device_total_bytes: total,
            context: Some(context),
            metadata,
            job_id: self.identity.job_id.clone(),
            rank: self.identity.rank,
            local_rank: self.identity.local_rank,
            world_size: self.identity.world_size,
        };
        if self.counting {
            let line = serde_json::to_vec(&event).map_or(0, |l| l.len() as u64 + 1);
            self.sampled_bytes += line;
            self.lines += 1;
            return;
        }
        let written = serde_json::to_writer(&mut *self.out, &event)
            .map_err(io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"));
        match written {
            Ok(()) => self.lines += 1,
            Err(e) => self.error = Some(e),
        }
    }
}

impl Observer for TelemetryWriter<'_> {
    fn record(&mut self, record: &Record) {
        self.current = None;
        match record {
            Record::Alloc(a) => self.current = Some((a.api, a.tid)),
            Record::Free(f) => self.current = Some((f.api, f.tid)),
            Record::AllocFailed(f) if f.kind == MemKind::Device => {
                if f.mem_total > 0 {
                    self.failure_total.insert(f.device, f.mem_total);
                }
                if !self.admit(f.time_ns) {
                    return;
                }
                let api = self.api(f.api);
                let mut m = Map::new();
                m.insert("kind".into(), json!(f.kind.name()));
                m.insert("api".into(), json!(api));
                m.insert("size_bytes".into(), json!(f.size));
                m.insert("result".into(), json!(f.result));
                m.insert("stack_id".into(), json!(f.stack));
                m.insert("tid".into(), json!(f.tid));
                if f.mem_total > 0 {
                    m.insert("mem_free_bytes".into(), json!(f.mem_free));
                    m.insert("mem_total_bytes".into(), json!(f.mem_total));
                }
                let context = format!("{api} of {} bytes failed (error {})", f.size, f.result);
                self.emit(f.time_ns, "allocation_failed", f.device, 0, context, m);
            }
            Record::Sample(s) => {
                self.nvml.insert(s.device, *s);
                if !self.admit(s.time_ns) {
                    return;
                }
                let mut m = Map::new();
                m.insert("process_used_bytes".into(), json!(s.process_used));
                self.emit(s.time_ns, "sample", s.device, 0, "NVML sample".into(), m);
            }
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        let (api, tid) = self.current.unwrap_or((u16::MAX, 0));
        let api = self.api(api);
        for change in changes {
            let (a, added) = match *change {
                LiveChange::Added(a) => (a, true),
                LiveChange::Released(a) => (a, false),
            };
            if a.kind != MemKind::Device {
                continue;
            }
            let live = self.live.entry(a.device).or_default();
            let size = i64::try_from(a.size).unwrap_or(i64::MAX);
            let (event_type, change) = if added {
                *live = live.saturating_add(a.size);
                ("allocation", size)
            } else {
                *live = live.saturating_sub(a.size);
                ("deallocation", -size)
            };
            if !self.admit(time_ns) {
                continue;
            }
            let mut m = Map::new();
            m.insert("kind".into(), json!(a.kind.name()));
            m.insert("api".into(), json!(api));
            m.insert("address".into(), json!(format!("{:#x}", a.address)));
            m.insert("size_bytes".into(), json!(a.size));
            m.insert("stack_id".into(), json!(a.stack));
            m.insert("tid".into(), json!(tid));
            let context = format!("{api} {} bytes", a.size);
            self.emit(time_ns, event_type, a.device, change, context, m);
        }
    }
}

/// Writes the telemetry of the trace at `path` to `out`, the events in `window` only;
/// returns the number of events. A first pass counts them (for `--last`) and estimates the
/// size, said before a large output is written.
pub fn write_telemetry(path: &Path, out: &mut dyn Write, window: Window) -> Result<u64, Error> {
    let reader = crate::input::open(path)?;
    let header = reader.header().clone();
    let mut sink = io::sink();
    let mut counter = TelemetryWriter::new(&header, &mut sink)
        .windowed(window, 0)
        .counting();
    let loaded = crate::observe::replay_observed(reader, &mut [&mut counter])
        .map_err(|e| crate::input::read_error(path, e))?;
    crate::input::warn_losses(path, &loaded);
    let total = counter.lines;
    let skip = window.skipped(total);
    let sampled = total.clamp(1, SIZE_SAMPLE);
    let estimate = counter.sampled_bytes / sampled * (total - skip);
    if let Some(notice) = super::window::size_notice(estimate, total - skip, "events") {
        crate::term::say(&notice);
    }
    let reader = crate::input::open(path)?;
    let mut writer = TelemetryWriter::new(&header, out).windowed(window, skip);
    crate::observe::replay_observed(reader, &mut [&mut writer])
        .map_err(|e| crate::input::read_error(path, e))?;
    let lines = writer.lines;
    match writer.into_error() {
        Some(e) => Err(Error::Output(e)),
        None => Ok(lines),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs.iter().map(|(k, v)| ((*k).into(), json!(v))).collect()
    }

    #[test]
    fn identity_follows_the_older_tool() {
        assert_eq!(
            identity(&env(&[])),
            Identity {
                job_id: None,
                rank: 0,
                local_rank: 0,
                world_size: 1
            }
        );
        let i = identity(&env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("SLURM_JOB_ID", "991"),
        ]));
        assert_eq!((i.rank, i.local_rank, i.world_size), (3, 3, 8));
        assert_eq!(i.job_id.as_deref(), Some("991"));
        let i = identity(&env(&[
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
        ]));
        assert_eq!((i.rank, i.local_rank), (3, 1));
        // Inconsistent or partial: a single process.
        assert_eq!(
            identity(&env(&[("RANK", "9"), ("WORLD_SIZE", "8")])).world_size,
            1
        );
        assert_eq!(identity(&env(&[("RANK", "2")])).rank, 0);
    }
}
