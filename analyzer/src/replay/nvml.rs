//! NVML's samples set against what the hooks tracked: per device, the sample where NVML saw
//! the process use the most, and the last.
//!
//! NVML answers for one moment between a sample's stamp and `query_ns` later, and an
//! allocation's event is stamped when the call returned, after the driver counted it. A
//! sample taken while a buffer was allocated and freed again would show that buffer as
//! memory the hooks never saw. So a sample stays open over its window, and what it is set
//! against is the most the hooks tracked in it: what NVML saw beyond that is untracked for
//! sure.

use super::model::NvmlDevice;
use gpumemprof_format::Sample;

/// The longest window a sample is held open: a real NVML query takes about a millisecond,
/// and a damaged or hostile `query_ns` must not stretch one sample over the whole trace.
const MAX_QUERY_NS: u64 = 1_000_000_000;

/// The end of the window a sample stays open over (ns): its stamp plus its query's length,
/// at most `MAX_QUERY_NS`.
pub fn window_end(m: &Sample) -> u64 {
    m.time_ns.saturating_add(m.query_ns.min(MAX_QUERY_NS))
}

/// A sample whose window the replay has not passed yet.
#[derive(Debug)]
struct Open {
    sample: Sample,
    /// The end of its window (ns).
    until: u64,
    /// The most the hooks tracked on its device since its stamp.
    tracked: u64,
}

#[derive(Debug, Default)]
pub(super) struct NvmlView {
    devices: Vec<NvmlDevice>,
    open: Vec<Open>,
}

impl NvmlView {
    /// Whether a sample waits for the end of its window (`saw` must then be told of every
    /// allocation).
    #[inline]
    pub fn waiting(&self) -> bool {
        !self.open.is_empty()
    }

    /// A sample, with the bytes the hooks track on its device now.
    pub fn sample(&mut self, m: &Sample, tracked: u64) {
        self.close_before(m.time_ns);
        self.open.push(Open {
            sample: *m,
            until: window_end(m),
            tracked,
        });
    }

    /// The replay reached `time_ns` after an allocation: samples whose window ended before
    /// it are decided; the others take what the hooks track now (`tracked(device)`) if it is
    /// more.
    pub fn saw(&mut self, time_ns: u64, tracked: impl Fn(i32) -> u64) {
        self.close_before(time_ns);
        for o in &mut self.open {
            o.tracked = o.tracked.max(tracked(o.sample.device));
        }
    }

    /// Every sample decided, by device.
    pub fn finish(mut self) -> Vec<NvmlDevice> {
        self.close_before(u64::MAX);
        for o in std::mem::take(&mut self.open) {
            self.decide(&o);
        }
        self.devices.sort_by_key(|d| d.device);
        self.devices
    }

    fn close_before(&mut self, time_ns: u64) {
        // Samples open together are few (one per device a round): a linear pass.
        let mut i = 0;
        while i < self.open.len() {
            if self.open[i].until < time_ns {
                let o = self.open.remove(i);
                self.decide(&o);
            } else {
                i += 1;
            }
        }
    }

    fn decide(&mut self, o: &Open) {
        let (m, tracked) = (&o.sample, o.tracked);
        let index = match self.devices.iter().position(|d| d.device == m.device) {
            Some(i) => i,
            None => {
                self.devices.push(NvmlDevice {
                    device: m.device,
                    ..NvmlDevice::default()
                });
                self.devices.len() - 1
            }
        };
        let d = &mut self.devices[index];
        d.samples += 1;
        // Of the samples at the peak value, keep the one where the hooks tracked the
        // most: a sample NVML took between an allocation and its event's stamp sees the
        // memory before the hooks do, and would count it as untracked.
        if d.samples == 1
            || m.process_used > d.peak.process_used
            || (m.process_used == d.peak.process_used && tracked > d.tracked_at_peak)
        {
            d.peak = *m;
            d.tracked_at_peak = tracked;
        }
        d.last = *m;
        d.tracked_at_last = tracked;
    }
}
