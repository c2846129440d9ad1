//! The what-if pass: one streaming pass over a trace that feeds each device's PyTorch
//! tensor stream to several allocator models at once. Run 0 is the job's own policy on
//! the job's device, checked event by event against the `reserved` and `allocated` the
//! job's allocator reported (fidelity); the others are the scenarios asked for.
//!
//! The trace gives each tensor's block size (the rounded request, or the whole block when
//! it was not split), not the request itself: the models are asked for that size, which
//! places every block where the job's allocator placed it (best fit finds the same
//! block). Where the job called `torch.cuda.empty_cache()` is not recorded either: after
//! the allocator gave memory back outside an allocation, run 0 tries the next event with
//! and without a release first, keeps the one that agrees with the job, and the other
//! runs follow its choice.

use gpumemprof_format::{MemKind, Record, FRAMEWORK_PYTORCH, FREE_RANGE, OUT_OF_MEMORY};

use super::allocator::{Allocator, Counters, Device, Id};
use crate::fasthash::FastMap;
use crate::torch_conf::AllocConf;

/// One configuration to replay.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub conf: AllocConf,
    /// Every tensor's size times this (`--scale`).
    pub scale: f64,
    /// The device's memory (`None`: the job's device).
    pub device_memory: Option<u64>,
}

/// The first request a run could not place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oom {
    pub time_ns: u64,
    /// The block asked for (rounded).
    pub size: u64,
    /// What the allocator tried to get from the device (its message's "Tried to allocate").
    pub tried: u64,
    pub stack: u64,
    /// The job ran out of memory at this very request too.
    pub as_recorded: bool,
    /// Allocated bytes (live tensors) when it was refused.
    pub allocated: u64,
}

/// Where run 0 first disagreed with the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence {
    pub event: u64,
    pub time_ns: u64,
    pub stack: u64,
    pub recorded_reserved: u64,
    pub modelled_reserved: u64,
    pub recorded_allocated: u64,
    pub modelled_allocated: u64,
}

/// How well run 0 reproduced the job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fidelity {
    /// Tensor events run 0 replayed (allocations and frees).
    pub events: u64,
    pub reserved_matched: u64,
    pub allocated_matched: u64,
    pub first_divergence: Option<Divergence>,
    /// The job's out-of-memory errors, and how many run 0 hit at the same request.
    pub recorded_ooms: u64,
    pub ooms_matched: u64,
    /// Releases of cached memory outside an allocation (`empty_cache`) run 0 inferred.
    pub empty_cache_calls: u64,
}

impl Fidelity {
    /// Every event's reserved and allocated, and every out-of-memory error, reproduced.
    pub fn matched(&self) -> bool {
        self.reserved_matched == self.events
            && self.allocated_matched == self.events
            && self.ooms_matched == self.recorded_ooms
    }
}

/// One run's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub counters: Counters,
    pub first_oom: Option<Oom>,
    /// Tensor events it replayed before it stopped (at an out-of-memory error the job did
    /// not have).
    pub events: u64,
}

#[derive(Clone)]
struct Run {
    alloc: Allocator,
    scale: f64,
    blocks: FastMap<u64, Id>,
    first_oom: Option<Oom>,
    stopped: bool,
    events: u64,
}

impl Run {
    fn size(&self, bytes: u64) -> u64 {
        if self.scale == 1.0 {
            bytes
        } else {
            (bytes as f64 * self.scale).ceil() as u64
        }
    }

    /// Applies one tensor event; false when it could not be placed.
    fn apply(&mut self, t: &gpumemprof_format::Tensor) -> bool {
        if t.delta >= 0 {
            let size = self.size(t.delta.unsigned_abs());
            match self.alloc.malloc(size, Some(t.address)) {
                Some(id) => {
                    self.blocks.insert(t.address, id);
                    true
                }
                None => false,
            }
        } else {
            if let Some(id) = self.blocks.remove(&t.address) {
                self.alloc.free(id);
            }
            true
        }
    }

    fn oom(&mut self, time_ns: u64, size: u64, stack: u64, as_recorded: bool) {
        let size = self.alloc.conf.round_size(self.size(size));
        if self.first_oom.is_none() {
            self.first_oom = Some(Oom {
                time_ns,
                size,
                tried: self.alloc.conf.allocation_size(size),
                stack,
                as_recorded,
                allocated: self.alloc.allocated,
            });
        }
    }
}

/// One device's runs.
struct DeviceRuns {
    device: i32,
    runs: Vec<Run>,
    fidelity: Fidelity,
    /// The allocator gave memory back since the last tensor event.
    released: bool,
    events: u64,
    recorded_peak_allocated: u64,
    recorded_peak_reserved: u64,
}

/// The result for one device.
#[derive(Debug, Clone)]
pub struct DeviceResult {
    pub device: i32,
    pub fidelity: Fidelity,
    /// Run 0 (the job's policy) first, then one per scenario.
    pub outcomes: Vec<Outcome>,
    pub recorded_peak_allocated: u64,
    pub recorded_peak_reserved: u64,
}

/// The pass.
pub struct WhatIf {
    own: AllocConf,
    scenarios: Vec<Scenario>,
    /// Each device's memory and the memory others held (`probe`).
    devices_seen: Vec<(i32, Device)>,
    devices: Vec<DeviceRuns>,
    /// Device memory live by address, and its device: to tell whose memory a free gave
    /// back.
    device_memory: FastMap<u64, i32>,
}

impl WhatIf {
    pub fn new(
        own: AllocConf,
        scenarios: Vec<Scenario>,
        devices_seen: Vec<(i32, Device)>,
    ) -> WhatIf {
        WhatIf {
            own,
            scenarios,
            devices_seen,
            devices: Vec::new(),
            device_memory: FastMap::default(),
        }
    }

    fn device(&mut self, device: i32) -> &mut DeviceRuns {
        if let Some(i) = self.devices.iter().position(|d| d.device == device) {
            return &mut self.devices[i];
        }
        let seen = (self.devices_seen.iter())
            .find(|(d, _)| *d == device)
            .map_or(
                Device {
                    capacity: None,
                    other: 0,
                },
                |(_, s)| *s,
            );
        let run = |conf: AllocConf, scale: f64, capacity: Option<u64>| Run {
            alloc: Allocator::new(conf, Device { capacity, ..seen }),
            scale,
            blocks: FastMap::default(),
            first_oom: None,
            stopped: false,
            events: 0,
        };
        let mut runs = vec![run(self.own, 1.0, seen.capacity)];
        for s in &self.scenarios {
            runs.push(run(s.conf, s.scale, s.device_memory.or(seen.capacity)));
        }
        self.devices.push(DeviceRuns {
            device,
            runs,
            fidelity: Fidelity::default(),
            released: false,
            events: 0,
            recorded_peak_allocated: 0,
            recorded_peak_reserved: 0,
        });
        self.devices.last_mut().expect("just pushed")
    }

    /// One record of the trace.
    pub fn record(&mut self, record: &Record) {
        match record {
            Record::Tensor(t) if t.framework == FRAMEWORK_PYTORCH => {
                self.device(t.device).tensor(t)
            }
            Record::Alloc(a) if a.kind == MemKind::Device => {
                self.device_memory.insert(a.address, a.device);
            }
            Record::Free(f) if f.kind.space() == 0 && f.result == 0 => {
                let device = if f.flags & FREE_RANGE != 0 {
                    let end = f.address.saturating_add(f.size);
                    let gone: Vec<u64> = (self.device_memory.keys())
                        .copied()
                        .filter(|a| (f.address..end).contains(a))
                        .collect();
                    gone.iter()
                        .filter_map(|a| self.device_memory.remove(a))
                        .last()
                } else {
                    self.device_memory.remove(&f.address)
                };
                if let Some(d) = device {
                    if let Some(runs) = self.devices.iter_mut().find(|r| r.device == d) {
                        runs.released = true;
                    }
                }
            }
            Record::AllocFailed(f)
                if f.kind == MemKind::Tensor && f.api == 0 && f.result == OUT_OF_MEMORY =>
            {
                self.device(f.device).refused(f.time_ns, f.size, f.stack)
            }
            _ => {}
        }
    }

    pub fn finish(self) -> Vec<DeviceResult> {
        let mut out: Vec<DeviceResult> = (self.devices.into_iter())
            .map(|d| DeviceResult {
                device: d.device,
                fidelity: d.fidelity,
                outcomes: (d.runs.iter())
                    .map(|r| Outcome {
                        counters: r.alloc.counters,
                        first_oom: r.first_oom,
                        events: r.events,
                    })
                    .collect(),
                recorded_peak_allocated: d.recorded_peak_allocated,
                recorded_peak_reserved: d.recorded_peak_reserved,
            })
            .collect();
        out.sort_by_key(|d| d.device);
        out
    }
}

impl DeviceRuns {
    fn tensor(&mut self, t: &gpumemprof_format::Tensor) {
        let event = self.events;
        self.events += 1;
        self.recorded_peak_allocated = self.recorded_peak_allocated.max(t.allocated);
        self.recorded_peak_reserved = self.recorded_peak_reserved.max(t.reserved);
        let released = std::mem::take(&mut self.released);
        let (own, others) = self.runs.split_first_mut().expect("run 0");
        let mut empty_cache = false;
        if !own.stopped {
            let placed = if released {
                // Did the job empty its cache just before? Whichever agrees with it.
                let mut without = own.clone();
                let placed_without = without.apply(t);
                if placed_without && without.alloc.reserved == t.reserved {
                    *own = without;
                    true
                } else {
                    let mut with = own.clone();
                    with.alloc.release_cached_blocks();
                    if with.apply(t) && with.alloc.reserved == t.reserved {
                        empty_cache = true;
                        self.fidelity.empty_cache_calls += 1;
                        *own = with;
                        true
                    } else {
                        *own = without;
                        placed_without
                    }
                }
            } else {
                own.apply(t)
            };
            own.events += 1;
            if !placed {
                own.oom(t.time_ns, t.delta.unsigned_abs(), t.stack, false);
                own.stopped = true;
            }
            let f = &mut self.fidelity;
            f.events += 1;
            let (reserved, allocated) = (own.alloc.reserved, own.alloc.allocated);
            f.reserved_matched += u64::from(reserved == t.reserved);
            f.allocated_matched += u64::from(allocated == t.allocated);
            if f.first_divergence.is_none() && (reserved != t.reserved || allocated != t.allocated)
            {
                f.first_divergence = Some(Divergence {
                    event,
                    time_ns: t.time_ns,
                    stack: t.stack,
                    recorded_reserved: t.reserved,
                    modelled_reserved: reserved,
                    recorded_allocated: t.allocated,
                    modelled_allocated: allocated,
                });
            }
        }
        for run in others.iter_mut().filter(|r| !r.stopped) {
            if empty_cache {
                run.alloc.release_cached_blocks();
            }
            run.events += 1;
            if !run.apply(t) {
                run.oom(t.time_ns, t.delta.unsigned_abs(), t.stack, false);
                run.stopped = true;
            }
        }
    }

    /// The job's allocator refused a block (`size`, rounded): each run asks for it too.
    fn refused(&mut self, time_ns: u64, size: u64, stack: u64) {
        self.released = false;
        self.fidelity.recorded_ooms += 1;
        for (i, run) in self.runs.iter_mut().enumerate().filter(|(_, r)| !r.stopped) {
            let asked = run.size(size);
            if run.alloc.malloc(asked, None).is_none() {
                run.oom(time_ns, size, stack, true);
                if i == 0 {
                    self.fidelity.ooms_matched += 1;
                }
            } else if i == 0 {
                // The model placed what the job could not: it no longer follows the job.
                run.stopped = true;
            }
        }
    }
}
