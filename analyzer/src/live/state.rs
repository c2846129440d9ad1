//! What the live views show, kept by an observer of the growing trace: live bytes now and
//! at their peak per (device, kind), live bytes per call site, each device's memory size,
//! a framework allocator's own figures (allocated and reserved), and threshold alerts.
//! Sites are counted in tensors once the trace has a framework's tensors, as the reports
//! count them; the thresholds always read the device memory (what fills the GPU).

use std::collections::{BTreeMap, HashMap};

use gpumemprof_format::{MemKind, Module, PyCode, Record, Sample};
use serde::Serialize;

use crate::observe::{record_time, Observer};
use crate::replay::{CaptureStats, LiveChange, StackInfo};
use crate::symbolize::{Frame, Symbolizer};

use super::MAX_ALERTS;

/// Alert levels as thresholds in percent of the device's memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Thresholds {
    pub warning_percent: f64,
    pub critical_percent: f64,
}

impl Thresholds {
    /// 0 below warning, 1 warning, 2 critical.
    fn level(&self, percent: f64) -> u8 {
        if percent >= self.critical_percent {
            2
        } else if percent >= self.warning_percent {
            1
        } else {
            0
        }
    }
}

const LEVELS: [&str; 3] = ["ok", "warning", "critical"];

/// How far (percentage points) usage must fall below a threshold before its alert can be
/// raised again.
pub const REARM_MARGIN_PERCENT: f64 = 5.0;

/// Device memory usage crossed a threshold upwards.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Alert {
    pub time_ns: u64,
    pub device: i32,
    /// "warning" or "critical".
    pub level: &'static str,
    /// Device memory live in the hooks' view at that moment.
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub percent: f64,
    /// Why: `threshold` (usage crossed a level) or `out_of_memory` (an allocation failed
    /// for lack of memory: always critical).
    pub cause: &'static str,
    /// For `out_of_memory`, the bytes asked for; else 0.
    pub requested_bytes: u64,
}

/// Live bytes of one (device, kind) row now and at their peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowNow {
    pub live: u64,
    pub count: u64,
    pub peak: u64,
    pub peak_time_ns: u64,
}

/// Live bytes of one call site now.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiteNow {
    pub bytes: u64,
    pub count: u64,
}

/// What `monitor` and `track` show, kept up to date as records are read.
#[derive(Debug)]
pub struct LiveState {
    pub thresholds: Thresholds,
    /// `--device-memory`: the size of every device, overriding the trace.
    pub flag_total: Option<u64>,
    /// Memory kinds and a framework's tensors (the thresholds read the `device` rows).
    pub rows: BTreeMap<(i32, MemKind), RowNow>,
    pub sites: HashMap<(u64, MemKind), SiteNow>,
    /// The last NVML sample per device.
    pub nvml: BTreeMap<i32, Sample>,
    /// Device memory size from the last failed allocation that read it, per device.
    pub failure_total: BTreeMap<i32, u64>,
    pub pipeline: CaptureStats,
    pub stacks: HashMap<u64, StackInfo>,
    pub modules: Vec<Module>,
    pub python: HashMap<u64, PyCode>,
    /// The alert level each device is at.
    levels: BTreeMap<i32, u8>,
    /// Devices with a framework's tensor records.
    tensor_devices: std::collections::BTreeSet<i32>,
    /// Per device, the allocator's figures after its last tensor record and its
    /// allocated peak.
    allocator: BTreeMap<i32, AllocatorNow>,
    pub alerts: Vec<Alert>,
    pub alerts_total: u64,
}

impl LiveState {
    pub fn new(thresholds: Thresholds, flag_total: Option<u64>) -> LiveState {
        LiveState {
            thresholds,
            flag_total,
            rows: BTreeMap::new(),
            sites: HashMap::new(),
            nvml: BTreeMap::new(),
            failure_total: BTreeMap::new(),
            pipeline: CaptureStats::default(),
            stacks: HashMap::new(),
            modules: Vec::new(),
            python: HashMap::new(),
            levels: BTreeMap::new(),
            tensor_devices: Default::default(),
            allocator: BTreeMap::new(),
            alerts: Vec::new(),
            alerts_total: 0,
        }
    }

    /// The device's memory size and where it came from: `--device-memory`, else the last
    /// NVML sample, else the last failed allocation that read it.
    pub fn device_total(&self, device: i32) -> Option<(u64, &'static str)> {
        if let Some(t) = self.flag_total {
            return Some((t, "flag"));
        }
        if let Some(s) = self.nvml.get(&device).filter(|s| s.device_total > 0) {
            return Some((s.device_total, "nvml"));
        }
        self.failure_total
            .get(&device)
            .map(|&t| (t, "failed_allocation"))
    }

    /// Device memory (kind `device`) live on `device` now.
    pub fn device_used(&self, device: i32) -> u64 {
        self.rows
            .get(&(device, MemKind::Device))
            .map_or(0, |r| r.live)
    }

    fn check(&mut self, device: i32, time_ns: u64) {
        let Some((total, _)) = self.device_total(device) else {
            return;
        };
        let used = self.device_used(device);
        let percent = percent(used, total);
        let level = self.thresholds.level(percent);
        // Hysteresis: a level alerted stays armed-off until usage drops
        // `REARM_MARGIN_PERCENT` points below its threshold, so usage hovering at a
        // threshold (an allocate/free loop) raises one alert, not one per iteration.
        let stored = self.levels.get(&device).copied().unwrap_or(0);
        let rearmed = stored.min(self.thresholds.level(percent + REARM_MARGIN_PERCENT));
        self.levels.insert(device, level.max(rearmed));
        if level > rearmed {
            self.alerts_total += 1;
            if self.alerts.len() < MAX_ALERTS {
                self.alerts.push(Alert {
                    time_ns,
                    device,
                    level: LEVELS[usize::from(level)],
                    used_bytes: used,
                    total_bytes: total,
                    percent,
                    cause: "threshold",
                    requested_bytes: 0,
                });
            }
        }
    }

    /// An allocation failed for lack of memory: a critical alert, whatever the thresholds.
    /// A framework allocator's failed CUDA calls are not errors of the program's until it
    /// refuses the block (`replay/attempts.rs`): on a device with tensors only the refusal
    /// is alerted.
    fn out_of_memory(&mut self, f: &gpumemprof_format::AllocFailed) {
        if !crate::replay::attempts::is_error(f, self.tensor_devices.contains(&f.device)) {
            return;
        }
        let used = self.device_used(f.device);
        let total = self.device_total(f.device).map_or(0, |(t, _)| t);
        self.alerts_total += 1;
        if self.alerts.len() < MAX_ALERTS {
            self.alerts.push(Alert {
                time_ns: f.time_ns,
                device: f.device,
                level: "critical",
                used_bytes: used,
                total_bytes: total,
                percent: percent(used, total),
                cause: "out_of_memory",
                requested_bytes: f.size,
            });
        }
    }

    /// Every device seen (allocating device memory or sampled by NVML), ascending.
    pub fn devices(&self) -> Vec<i32> {
        let mut d: Vec<i32> = self
            .rows
            .keys()
            .filter(|(_, k)| *k == MemKind::Device)
            .map(|(d, _)| *d)
            .chain(self.nvml.keys().copied())
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }

    pub fn device_reports(&self) -> Vec<DeviceNow> {
        self.devices()
            .into_iter()
            .map(|device| {
                let row = self
                    .rows
                    .get(&(device, MemKind::Device))
                    .copied()
                    .unwrap_or_default();
                let total = self.device_total(device);
                let pct = |v: u64| total.map(|(t, _)| percent(v, t));
                let level = match pct(row.live) {
                    Some(p) => LEVELS[usize::from(self.thresholds.level(p))],
                    None => "unknown",
                };
                DeviceNow {
                    device,
                    current_bytes: row.live,
                    current_allocations: row.count,
                    peak_bytes: row.peak,
                    peak_time_ns: row.peak_time_ns,
                    total_bytes: total.map(|(t, _)| t),
                    total_source: total.map(|(_, s)| s),
                    current_percent: pct(row.live),
                    peak_percent: pct(row.peak),
                    level,
                    nvml_process_used_bytes: self.nvml.get(&device).map(|s| s.process_used),
                    allocator: self.allocator.get(&device).copied(),
                }
            })
            .collect()
    }

    /// What the sites count: tensors once the trace has a framework's, else the memory.
    pub fn level(&self) -> crate::replay::MemoryLevel {
        if self.tensor_devices.is_empty() {
            crate::replay::MemoryLevel::Segments
        } else {
            crate::replay::MemoryLevel::Tensors
        }
    }

    /// The `n` sites holding the most live bytes now (0: all) at `level()`, with `frames`
    /// frames; source paths under `cwd` (the traced process's working directory) relative
    /// to it; `site_of` names each site from its whole stack (the reports' rule, which
    /// lives above this layer).
    pub fn top_sites(
        &self,
        n: usize,
        frames: usize,
        cwd: Option<String>,
        site_of: impl Fn(&[Frame]) -> Option<Frame>,
    ) -> Vec<SiteReport> {
        let level = self.level();
        let mut sites: Vec<_> = (self.sites.iter())
            .filter(|((_, kind), s)| s.count > 0 && level.counts(*kind))
            .collect();
        sites.sort_by(|(ka, a), (kb, b)| b.bytes.cmp(&a.bytes).then(ka.cmp(kb)));
        if n > 0 {
            sites.truncate(n);
        }
        let mut sym = Symbolizer::new(&self.modules, &self.stacks, &self.python).in_dir(cwd);
        sites
            .into_iter()
            .map(|(&(stack, kind), s)| SiteReport {
                stack_id: stack,
                kind: kind.name(),
                bytes: s.bytes,
                count: s.count,
                site: site_of(&sym.stack(stack, 0)),
                frames: sym.stack(stack, frames),
            })
            .collect()
    }
}

fn percent(used: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let p = used as f64 * 100.0 / total as f64;
    (p * 100.0).round() / 100.0
}

impl Observer for LiveState {
    fn record(&mut self, record: &Record) {
        if let Some(t) = record_time(record) {
            self.pipeline.duration_ns = self.pipeline.duration_ns.max(t);
        }
        match record {
            Record::Sample(s) => {
                self.nvml.insert(s.device, *s);
                self.check(s.device, s.time_ns);
            }
            Record::AllocFailed(f) => {
                if f.mem_total > 0 {
                    self.failure_total.insert(f.device, f.mem_total);
                    self.check(f.device, f.time_ns);
                }
                self.out_of_memory(f);
            }
            Record::Tensor(t) => {
                self.tensor_devices.insert(t.device);
                let peak = self
                    .allocator
                    .get(&t.device)
                    .map_or(0, |a| a.allocated_peak_bytes);
                self.allocator.insert(
                    t.device,
                    AllocatorNow {
                        framework: crate::replay::framework_name(t.framework),
                        allocated_bytes: t.allocated,
                        allocated_peak_bytes: peak.max(t.allocated),
                        reserved_bytes: t.reserved,
                    },
                );
            }
            Record::Stack { id, frames } => {
                let first_use_ns = self.stacks.get(id).and_then(|s| s.first_use_ns);
                self.stacks.insert(
                    *id,
                    StackInfo {
                        frames: frames.clone(),
                        first_use_ns,
                    },
                );
            }
            Record::Module(m) => self.modules.push(m.clone()),
            Record::PyCode(c) => {
                self.python.insert(c.id, c.clone());
            }
            Record::Stats(s) | Record::End(s) => {
                self.pipeline.events = s.events;
                self.pipeline.queue_waits = s.queue_waits;
                self.pipeline.dropped = s.dropped;
                if matches!(record, Record::End(_)) {
                    self.pipeline.complete = true;
                }
            }
            Record::Ending(e) => self.pipeline.ending = Some(e.ending),
            Record::Unknown { .. } => self.pipeline.unknown_records += 1,
            _ => {}
        }
    }

    fn changes(&mut self, time_ns: u64, changes: &[LiveChange]) {
        let mut touched: Vec<i32> = Vec::new();
        for change in changes {
            let (a, added) = match *change {
                LiveChange::Added(a) => (a, true),
                LiveChange::Released(a) => (a, false),
            };
            if !(a.kind.is_memory() || a.kind == MemKind::Tensor) {
                continue;
            }
            let row = self.rows.entry((a.device, a.kind)).or_default();
            let site = self.sites.entry((a.stack, a.kind)).or_default();
            if added {
                row.live = row.live.saturating_add(a.size);
                row.count += 1;
                if row.live > row.peak {
                    row.peak = row.live;
                    row.peak_time_ns = time_ns;
                }
                site.bytes = site.bytes.saturating_add(a.size);
                site.count += 1;
                if let Some(info) = self.stacks.get_mut(&a.stack) {
                    info.first_use_ns.get_or_insert(a.time_ns);
                }
            } else {
                row.live = row.live.saturating_sub(a.size);
                row.count = row.count.saturating_sub(1);
                site.bytes = site.bytes.saturating_sub(a.size);
                site.count = site.count.saturating_sub(1);
            }
            if a.kind == MemKind::Device && !touched.contains(&a.device) {
                touched.push(a.device);
            }
        }
        for device in touched {
            self.check(device, time_ns);
        }
    }
}

/// One device in a live report.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceNow {
    pub device: i32,
    /// Device memory (kind `device`) live in the hooks' view now.
    pub current_bytes: u64,
    pub current_allocations: u64,
    /// The most that was live, and when first.
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// The device's memory size; null when unknown.
    pub total_bytes: Option<u64>,
    /// Where the size came from: "flag" (--device-memory), "nvml" (a sample in the
    /// trace) or "failed_allocation" (read by the shim after a failure).
    pub total_source: Option<&'static str>,
    pub current_percent: Option<f64>,
    pub peak_percent: Option<f64>,
    /// "ok", "warning", "critical" (by the current percentage), or "unknown" without a
    /// size.
    pub level: &'static str,
    /// What NVML last saw this process use on the device, if the trace has samples.
    pub nvml_process_used_bytes: Option<u64>,
    /// A framework caching allocator's own figures on the device; null without them.
    pub allocator: Option<AllocatorNow>,
}

/// A framework allocator's figures now, from its last tensor record (PyTorch's
/// `memory_allocated()`, `max_memory_allocated()` and `memory_reserved()`; TensorFlow's BFC
/// allocator reports no reserved figure: 0).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AllocatorNow {
    /// `pytorch` or `tensorflow` (as `summary`'s `allocators[].framework`).
    pub framework: &'static str,
    pub allocated_bytes: u64,
    pub allocated_peak_bytes: u64,
    pub reserved_bytes: u64,
}

/// A call site holding live memory now.
#[derive(Debug, Clone, Serialize)]
pub struct SiteReport {
    pub stack_id: u64,
    pub kind: &'static str,
    pub bytes: u64,
    pub count: u64,
    /// The user's line, else what PyTorch's frames say the memory is, as `peak`'s `site`.
    pub site: Option<Frame>,
    pub frames: Vec<Frame>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device 0 of 100 bytes at these usages in turn: the levels alerted.
    fn alerts_for(usages: &[u64]) -> Vec<&'static str> {
        let mut state = LiveState::new(
            Thresholds {
                warning_percent: 80.0,
                critical_percent: 95.0,
            },
            Some(100),
        );
        for (i, &used) in usages.iter().enumerate() {
            state.rows.entry((0, MemKind::Device)).or_default().live = used;
            state.check(0, i as u64);
        }
        state.alerts.iter().map(|a| a.level).collect()
    }

    #[test]
    fn an_alert_is_raised_again_only_after_usage_fell_5_points_below_its_threshold() {
        // Hovering at the warning threshold: one warning.
        assert_eq!(alerts_for(&[81, 79, 81, 78, 82, 76, 80]), ["warning"]);
        // Below 75%: armed again.
        assert_eq!(alerts_for(&[81, 74, 81]), ["warning", "warning"]);
        // After a critical, a dip to 79% and back is no new warning...
        assert_eq!(alerts_for(&[96, 85, 79, 81]), ["critical"]);
        // ...and a dip under 90% re-arms the critical.
        assert_eq!(alerts_for(&[96, 89, 96]), ["critical", "critical"]);
        assert_eq!(alerts_for(&[96, 91, 96]), ["critical"]);
    }

    #[test]
    fn levels_and_percentages() {
        let t = Thresholds {
            warning_percent: 80.0,
            critical_percent: 95.0,
        };
        assert_eq!(t.level(79.99), 0);
        assert_eq!(t.level(80.0), 1);
        assert_eq!(t.level(95.0), 2);
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(5, 0), 0.0);
    }
}
