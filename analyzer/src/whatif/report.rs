//! The `whatif` report: reads a trace twice (the replay, for the device's size, what
//! others held and the stacks; then the what-if pass) and gives, per device and over all,
//! what the job's own policy and each scenario would have done. Fields in docs/REPORTS.md.

use std::path::Path;

use gpumemprof_format::{MemKind, Record, OUT_OF_MEMORY};
use serde::Serialize;

use super::allocator::Device;
use super::replay::{DeviceResult, Divergence, Fidelity, Oom, Outcome, Scenario, WhatIf};
use crate::error::Error;
use crate::observe::Observer;
use crate::replay::{LiveChange, Loaded};
use crate::report::level;
use crate::report::TraceInfo;
use crate::symbolize::{Frame, Symbolizer};
use crate::torch_conf::AllocConf;

pub const SCHEMA_VERSION: u32 = 1;

/// Where a request could not be placed.
#[derive(Debug, Clone, Serialize)]
pub struct OomInfo {
    pub device: i32,
    pub time_ns: u64,
    /// The block asked for (PyTorch's rounded size).
    pub size_bytes: u64,
    /// What the allocator tried to get from the device ("Tried to allocate" in PyTorch's
    /// message).
    pub tried_to_allocate_bytes: u64,
    /// The user's line that asked (null when the stack has none).
    pub site: Option<Frame>,
    /// The job ran out of memory at this very request too.
    pub as_recorded: bool,
}

/// What one policy did over the run.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub fits: bool,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Reserved minus allocated when reserved first reached its peak.
    pub fragmentation_at_peak_bytes: u64,
    pub first_oom: Option<OomInfo>,
    /// Segments freed or pages unmapped (each synchronizes the device).
    pub device_frees: u64,
    /// Segments allocated or pages mapped.
    pub device_allocs: u64,
    /// Allocations that emptied the cache and tried again (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Tensor events replayed (fewer than the trace's when it stopped at an
    /// out-of-memory error the job did not have).
    pub tensor_events: u64,
}

/// Where the replayed job's policy first disagreed with the job.
#[derive(Debug, Clone, Serialize)]
pub struct DivergenceInfo {
    pub device: i32,
    /// Its tensor event, 0-based on its device.
    pub event_index: u64,
    pub time_ns: u64,
    pub recorded_reserved_bytes: u64,
    pub modelled_reserved_bytes: u64,
    pub recorded_allocated_bytes: u64,
    pub modelled_allocated_bytes: u64,
    pub site: Option<Frame>,
}

/// How well the job's own policy, replayed, reproduced the job.
#[derive(Debug, Clone, Serialize)]
pub struct FidelityInfo {
    /// Every event agreed, reserved and allocated, and every out-of-memory error recurred.
    pub matched: bool,
    pub tensor_events: u64,
    pub reserved_matched: u64,
    pub allocated_matched: u64,
    pub out_of_memory_errors: u64,
    pub out_of_memory_matched: u64,
    /// Releases of the cache outside an allocation (`torch.cuda.empty_cache()`) inferred.
    pub empty_cache_calls: u64,
    pub first_divergence: Option<DivergenceInfo>,
}

/// One device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub device: i32,
    /// The device's memory replayed under (null: unknown, never full).
    pub device_memory_bytes: Option<u64>,
    /// Memory held by others than PyTorch's allocator, taken as constant.
    pub other_memory_bytes: u64,
    pub whatif: Figures,
    pub job: Figures,
    pub recorded_peak_allocated_bytes: u64,
    pub recorded_peak_reserved_bytes: u64,
    pub fidelity: FidelityInfo,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct WhatIfReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// The job's configuration as it ran: the keys that differ from PyTorch's defaults,
    /// in PyTorch's syntax (empty: the defaults).
    pub job_configuration: String,
    /// The configuration replayed (the job's with `--set` applied), likewise.
    pub configuration: String,
    pub scale: f64,
    /// `--device-memory` (null: the job's device).
    pub device_memory_bytes: Option<u64>,
    /// Over all devices: every one fits; the highest peaks; the earliest out-of-memory.
    #[serde(flatten)]
    pub whatif: Figures,
    pub job: Figures,
    pub fidelity: FidelityInfo,
    pub devices: Vec<DeviceReport>,
    /// What the model leaves out for this trace.
    pub notes: Vec<String>,
}

/// What the first pass learns of each device: failures' free and total memory.
#[derive(Default)]
struct Probe {
    /// Per device: the largest total seen at a failure, and, at the allocator's own
    /// refusal, the memory in use that was not its reserved.
    devices: Vec<(i32, u64, Option<u64>)>,
}

impl Observer for Probe {
    fn record(&mut self, record: &Record) {
        let Record::AllocFailed(f) = record else {
            return;
        };
        if f.result != OUT_OF_MEMORY || f.mem_total == 0 {
            return;
        }
        let i = match self.devices.iter().position(|d| d.0 == f.device) {
            Some(i) => i,
            None => {
                self.devices.push((f.device, 0, None));
                self.devices.len() - 1
            }
        };
        let d = &mut self.devices[i];
        d.1 = d.1.max(f.mem_total);
        if f.kind == MemKind::Tensor && d.2.is_none() {
            // PyTorch's refusal carries its reserved bytes (`pool`).
            let used = f.mem_total.saturating_sub(f.mem_free);
            d.2 = Some(used.saturating_sub(f.pool));
        }
    }
    fn changes(&mut self, _: u64, _: &[LiveChange]) {}
}

/// Each device's size and what others held on it: at PyTorch's refusal if the job had
/// one, else at NVML's peak (the process's untracked memory and other processes').
fn devices_of(loaded: &Loaded, probe: &Probe) -> Vec<(i32, Device)> {
    let mut out: Vec<(i32, Device)> = Vec::new();
    for n in &loaded.replayed.nvml {
        let others = n.peak.device_used.saturating_sub(n.peak.process_used);
        let device = Device {
            capacity: (n.peak.device_total > 0).then_some(n.peak.device_total),
            other: n.untracked_at_peak() + others,
        };
        out.push((n.device, device));
    }
    for &(d, total, other) in &probe.devices {
        match out.iter_mut().find(|(x, _)| *x == d) {
            Some((_, dev)) => {
                dev.capacity = Some(dev.capacity.unwrap_or(0).max(total));
                if let Some(o) = other {
                    dev.other = o;
                }
            }
            None => out.push((
                d,
                Device {
                    capacity: Some(total),
                    other: other.unwrap_or(0),
                },
            )),
        }
    }
    out
}

/// What `whatif` was asked.
pub struct Request {
    /// `--set` values, in PyTorch's syntax, applied in order over the job's own.
    pub set: Vec<String>,
    pub scale: f64,
    pub device_memory: Option<u64>,
}

/// What `replay_trace` gives: the first read's `Loaded`, the job's configuration, each
/// device as the trace knows it, and each device's runs.
pub type Replays = (Loaded, AllocConf, Vec<(i32, Device)>, Vec<DeviceResult>);

/// Reads the trace and replays it under the job's policy and the scenarios `make` gives
/// for the job's configuration.
pub fn replay_trace(
    path: &Path,
    make: impl FnOnce(AllocConf) -> Result<Vec<Scenario>, Error>,
) -> Result<Replays, Error> {
    let mut probe = Probe::default();
    let loaded = crate::input::load_observed(path, &mut [&mut probe])?;
    if !(loaded.replayed.allocators.iter())
        .any(|a| a.framework == gpumemprof_format::FRAMEWORK_PYTORCH)
    {
        return Err(Error::Failed(format!(
            "{}: no PyTorch tensors in this trace (whatif replays PyTorch's caching allocator; \
             the shim records its tensors when the job imports torch)",
            path.display()
        )));
    }
    let own = AllocConf::of_header(&loaded.header);
    let devices = devices_of(&loaded, &probe);
    let mut pass = WhatIf::new(own, make(own)?, devices.clone());
    let mut reader = crate::input::open(path)?;
    while let Some(record) =
        (reader.next_salvaged()).map_err(|e| crate::input::read_error(path, e))?
    {
        pass.record(&record);
    }
    Ok((loaded, own, devices, pass.finish()))
}

/// The `whatif` report of `path`.
pub fn analyze(path: &Path, request: &Request) -> Result<WhatIfReport, Error> {
    let (loaded, own, devices, results) = replay_with_set(path, request)?;
    let mut sym = Symbolizer::of(&loaded).in_dir(crate::symbolize::cwd_of(&loaded.header));
    let mut site = |stack: u64| -> Option<Frame> {
        let frames = sym.all_frames(stack);
        level::site(&frames).cloned()
    };
    let per_device: Vec<DeviceReport> = (results.iter())
        .map(|r| {
            let seen = devices.iter().find(|(d, _)| *d == r.device).map(|x| x.1);
            DeviceReport {
                device: r.device,
                device_memory_bytes: request.device_memory.or(seen.and_then(|s| s.capacity)),
                other_memory_bytes: seen.map_or(0, |s| s.other),
                whatif: figures(r.device, &r.outcomes[1], &mut site),
                job: figures(r.device, &r.outcomes[0], &mut site),
                recorded_peak_allocated_bytes: r.recorded_peak_allocated,
                recorded_peak_reserved_bytes: r.recorded_peak_reserved,
                fidelity: fidelity(r.device, &r.fidelity, &mut site),
            }
        })
        .collect();
    crate::input::warn_all(sym.take_warnings());
    let mut notes = vec![
        "one stream: the trace does not record tensors' streams, so blocks freed on one \
         stream are taken as reusable on every other (optimistic where a job uses several \
         streams or record_stream)"
            .to_string(),
    ];
    let conf = scenario_conf(own, request)?;
    if conf.backend_async || own.backend_async {
        notes.push(
            "backend:cudaMallocAsync is CUDA's own pool, not this policy: the replay models \
             the native allocator"
                .into(),
        );
    }
    if request.scale != 1.0 {
        notes.push(format!(
            "--scale {}: every tensor is {} times larger, parameters and workspaces too",
            request.scale, request.scale
        ));
    }
    if conf.roundup_power2_divisions != own.roundup_power2_divisions {
        notes.push(
            "roundup_power2_divisions rounds the recorded block sizes, which may be up to \
             1 MiB larger than what was asked: an approximation"
                .into(),
        );
    }
    if conf.garbage_collection_threshold > 0.0 && conf.per_process_memory_fraction >= 1.0 {
        notes.push(
            "garbage_collection_threshold does nothing without per_process_memory_fraction \
             (PyTorch acts on it only under a memory cap)"
                .into(),
        );
    }
    if per_device.iter().any(|d| d.device_memory_bytes.is_none()) {
        notes.push(
            "the device's size is not in the trace (no out-of-memory error, no NVML \
             samples): give it with --device-memory, else nothing is ever out of memory"
                .into(),
        );
    }
    Ok(WhatIfReport {
        schema_version: SCHEMA_VERSION,
        trace: TraceInfo::new(path, &loaded),
        job_configuration: own.to_text(),
        configuration: conf.to_text(),
        scale: request.scale,
        device_memory_bytes: request.device_memory,
        whatif: over_all(per_device.iter().map(|d| &d.whatif)),
        job: over_all(per_device.iter().map(|d| &d.job)),
        fidelity: fidelity_over_all(per_device.iter().map(|d| &d.fidelity)),
        devices: per_device,
        notes,
    })
}

fn scenario_conf(own: AllocConf, request: &Request) -> Result<AllocConf, Error> {
    let mut conf = own;
    for s in &request.set {
        conf.apply(s)
            .map_err(|e| Error::Failed(format!("--set {s}: {e}")))?;
    }
    Ok(conf)
}

fn replay_with_set(path: &Path, request: &Request) -> Result<Replays, Error> {
    replay_trace(path, |own| {
        Ok(vec![Scenario {
            conf: scenario_conf(own, request)?,
            scale: request.scale,
            device_memory: request.device_memory,
        }])
    })
}

pub(super) fn figures(
    device: i32,
    o: &Outcome,
    site: &mut impl FnMut(u64) -> Option<Frame>,
) -> Figures {
    let c = &o.counters;
    Figures {
        fits: o.first_oom.is_none(),
        peak_allocated_bytes: c.peak_allocated,
        peak_reserved_bytes: c.peak_reserved,
        fragmentation_at_peak_bytes: c.peak_reserved.saturating_sub(c.allocated_at_peak_reserved),
        first_oom: o.first_oom.map(|oom: Oom| OomInfo {
            device,
            time_ns: oom.time_ns,
            size_bytes: oom.size,
            tried_to_allocate_bytes: oom.tried,
            site: site(oom.stack),
            as_recorded: oom.as_recorded,
        }),
        device_frees: c.device_frees,
        device_allocs: c.device_allocs,
        alloc_retries: c.retries,
        tensor_events: o.events,
    }
}

fn fidelity(
    device: i32,
    f: &Fidelity,
    site: &mut impl FnMut(u64) -> Option<Frame>,
) -> FidelityInfo {
    FidelityInfo {
        matched: f.matched(),
        tensor_events: f.events,
        reserved_matched: f.reserved_matched,
        allocated_matched: f.allocated_matched,
        out_of_memory_errors: f.recorded_ooms,
        out_of_memory_matched: f.ooms_matched,
        empty_cache_calls: f.empty_cache_calls,
        first_divergence: f.first_divergence.map(|d: Divergence| DivergenceInfo {
            device,
            event_index: d.event,
            time_ns: d.time_ns,
            recorded_reserved_bytes: d.recorded_reserved,
            modelled_reserved_bytes: d.modelled_reserved,
            recorded_allocated_bytes: d.recorded_allocated,
            modelled_allocated_bytes: d.modelled_allocated,
            site: site(d.stack),
        }),
    }
}

fn over_all<'a>(all: impl Iterator<Item = &'a Figures>) -> Figures {
    let all: Vec<&Figures> = all.collect();
    let first_oom = (all.iter())
        .filter_map(|f| f.first_oom.as_ref())
        .min_by_key(|o| o.time_ns)
        .cloned();
    let top = (all.iter()).max_by_key(|f| f.peak_reserved_bytes);
    Figures {
        fits: all.iter().all(|f| f.fits),
        peak_allocated_bytes: all
            .iter()
            .map(|f| f.peak_allocated_bytes)
            .max()
            .unwrap_or(0),
        peak_reserved_bytes: top.map_or(0, |f| f.peak_reserved_bytes),
        fragmentation_at_peak_bytes: top.map_or(0, |f| f.fragmentation_at_peak_bytes),
        first_oom,
        device_frees: all.iter().map(|f| f.device_frees).sum(),
        device_allocs: all.iter().map(|f| f.device_allocs).sum(),
        alloc_retries: all.iter().map(|f| f.alloc_retries).sum(),
        tensor_events: all.iter().map(|f| f.tensor_events).sum(),
    }
}

fn fidelity_over_all<'a>(all: impl Iterator<Item = &'a FidelityInfo>) -> FidelityInfo {
    let all: Vec<&FidelityInfo> = all.collect();
    let sum = |f: fn(&FidelityInfo) -> u64| all.iter().map(|x| f(x)).sum::<u64>();
    FidelityInfo {
        matched: all.iter().all(|f| f.matched),
        tensor_events: sum(|f| f.tensor_events),
        reserved_matched: sum(|f| f.reserved_matched),
        allocated_matched: sum(|f| f.allocated_matched),
        out_of_memory_errors: sum(|f| f.out_of_memory_errors),
        out_of_memory_matched: sum(|f| f.out_of_memory_matched),
        empty_cache_calls: sum(|f| f.empty_cache_calls),
        first_divergence: (all.iter())
            .filter_map(|f| f.first_divergence.as_ref())
            .min_by_key(|d| d.time_ns)
            .cloned(),
    }
}
