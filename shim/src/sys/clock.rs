//! The trace clock.
//!
//! Hooks stamp events with `now()`: the CPU's time-stamp counter where it is a reliable
//! clock (x86_64 with an invariant TSC that the kernel itself uses as its clocksource;
//! about 10 ns instead of ~46 ns for `clock_gettime` on the development VM), else
//! `CLOCK_MONOTONIC` nanoseconds. The writer converts stamps to monotonic nanoseconds
//! (`Converter`): it takes an anchor pair (TSC, monotonic ns) each time it emits events
//! and interpolates between anchors, so the conversion is exact at every anchor,
//! monotonic, and its error is bounded by the drift of the TSC rate over one writer round
//! (a few milliseconds). Traces always hold monotonic nanoseconds since the start.
//!
//! `GPUMEMPROF_CLOCK=monotonic` forces `clock_gettime`; `tsc` asks for the TSC (used only
//! if the checks pass).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Which source stamps events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Auto,
    Tsc,
    Monotonic,
}

/// Chooses the stamp source once, at initialisation; returns whether the TSC is used.
pub fn init(source: Source) -> bool {
    let tsc = source != Source::Monotonic && tsc_usable();
    USE_TSC.store(tsc, Ordering::Relaxed);
    tsc
}

pub fn uses_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

/// An event stamp: TSC ticks or monotonic ns (see `Converter`), taken after what it
/// stamps (an allocation, after its call returned).
#[inline(always)]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        rdtsc_after()
    } else {
        now_ns()
    }
}

/// `now`, for a stamp taken *before* a call that hands memory over to other threads (a
/// free, before its call): no fence is needed there (see `rdtsc_before`).
#[inline(always)]
pub fn now_before_release() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        rdtsc_before()
    } else {
        now_ns()
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc_after() -> u64 {
    // SAFETY: lfence and rdtsc have no memory effects. The fence keeps the read after the
    // instructions before it (an allocation is stamped after its call returned, and after
    // the load in it that saw another thread's free). Without it, a stamp taken after
    // seeing another thread's hand-off read lower than the stamp that thread took before
    // it, in up to 11% of hand-offs and by up to 197 ticks (tests/bench/clock_skew.c): an
    // address freed on one thread and allocated on another could replay as allocated
    // before it was freed. On both stamps of a pair it cost 22 ns (BENCHMARKS.md, fourth);
    // only an allocation's keeps it.
    unsafe {
        std::arch::x86_64::_mm_lfence();
        std::arch::x86_64::_rdtsc()
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc_before() -> u64 {
    // SAFETY: rdtsc has no memory effects. Unfenced, it may read the counter early, which
    // is harmless before a release, or late, but never after it retires; instructions
    // retire in order, and the store that releases the memory (the runtime's unlock, in
    // the call that follows) becomes visible to other threads only after it retires. So
    // this stamp is never later than the release, and the fenced stamp of another thread's
    // allocation that saw it is never earlier (clock_skew.c mode 2: 0 inversions in 39 M
    // hand-offs where bare stamps on both sides gave thousands). A later stamp of this
    // thread is kept from reading lower by the writer (`Ring::drain` keeps a thread's
    // stamps in program order).
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc_after() -> u64 {
    now_ns()
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc_before() -> u64 {
    now_ns()
}

/// The TSC is used only where it is a clock: invariant (CPUID 0x80000007 EDX bit 8) and
/// trusted by the kernel as its own clocksource (so it is synchronised across cores).
fn tsc_usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let max_ext = std::arch::x86_64::__cpuid(0x8000_0000).eax;
        if max_ext < 0x8000_0007 {
            return false;
        }
        let invariant = std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0;
        if !invariant {
            return false;
        }
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .map(|s| s.trim() == "tsc")
            .unwrap_or(false)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Monotonic nanoseconds since an arbitrary origin.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock nanoseconds since the Unix epoch (for the header only).
pub fn unix_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Anchors kept (besides the first, kept for the long-baseline rate).
const MAX_ANCHORS: usize = 64;

/// Turns stamps into monotonic nanoseconds (writer side).
pub struct Converter {
    tsc: bool,
    first: (u64, u64),
    /// (ticks, ns) pairs in increasing order.
    anchors: VecDeque<(u64, u64)>,
    /// The segment between two anchors that the last stamp fell in: stamps are converted
    /// in time order, so the next one is nearly always there. Two anchors never change,
    /// so a segment stays right after the anchors move on.
    seg: std::cell::Cell<Segment>,
}

/// `lo.0 <= stamp < hi_tick` converts to `lo.1 + (stamp - lo.0) * mult / 2^32`: the
/// straight line between two anchors in integers (a conversion of `u64` to `f64` and
/// back, and a division, per event were a fifth of the writer's time), rounded down, so
/// exact at `lo`, below `hi`'s ns before `hi`, and monotonic.
#[derive(Clone, Copy)]
struct Segment {
    lo: (u64, u64),
    hi_tick: u64,
    mult: u64,
}

impl Segment {
    /// None yet: no stamp is in it.
    const NONE: Segment = Segment {
        lo: (1, 0),
        hi_tick: 0,
        mult: 0,
    };

    fn between(lo: (u64, u64), hi: (u64, u64)) -> Segment {
        let ticks = u128::from(hi.0 - lo.0).max(1);
        let mult = (u128::from(hi.1.saturating_sub(lo.1)) << 32) / ticks;
        Segment {
            lo,
            hi_tick: hi.0,
            mult: u64::try_from(mult).unwrap_or(u64::MAX),
        }
    }

    #[inline(always)]
    fn convert(&self, stamp: u64) -> Option<u64> {
        if stamp < self.lo.0 || stamp >= self.hi_tick {
            return None;
        }
        let d = u128::from(stamp - self.lo.0) * u128::from(self.mult);
        Some(self.lo.1.saturating_add((d >> 32) as u64))
    }
}

impl Converter {
    pub fn new() -> Converter {
        let tsc = uses_tsc();
        let a = if tsc { pair() } else { (0, 0) };
        Converter {
            tsc,
            first: a,
            anchors: VecDeque::from([a]),
            seg: std::cell::Cell::new(Segment::NONE),
        }
    }

    /// Takes an anchor now (call before converting the events drained so far).
    pub fn anchor(&mut self) {
        if !self.tsc {
            return;
        }
        let a = pair();
        if let Some(&(t, n)) = self.anchors.back() {
            if a.0 <= t || a.1 <= n {
                return;
            }
        }
        if self.anchors.len() >= MAX_ANCHORS {
            self.anchors.pop_front();
        }
        self.anchors.push_back(a);
    }

    /// Monotonic ns of a stamp.
    #[inline]
    pub fn to_ns(&self, stamp: u64) -> u64 {
        if !self.tsc {
            return stamp;
        }
        // Nearly every stamp lies in the last stamp's segment: no search.
        if let Some(ns) = self.seg.get().convert(stamp) {
            return ns;
        }
        let n = self.anchors.len();
        if n < 2 {
            // One anchor: extrapolate at the first-to-now rate (or 1 ns/tick).
            return extrapolate(self.anchors[0], self.long_rate(), stamp);
        }
        if stamp < self.anchors[0].0 {
            let (lo, hi) = (self.anchors[0], self.anchors[1]);
            let rate = (hi.1 - lo.1) as f64 / (hi.0 - lo.0) as f64;
            return extrapolate(lo, rate, stamp);
        }
        if stamp >= self.anchors[n - 1].0 {
            return extrapolate(self.anchors[n - 1], self.long_rate(), stamp);
        }
        let i = self.anchors.partition_point(|a| a.0 <= stamp);
        let seg = Segment::between(self.anchors[i - 1], self.anchors[i]);
        self.seg.set(seg);
        seg.convert(stamp).expect("the stamp lies in its segment")
    }

    /// The largest stamp whose time is at most `ns` (the inverse of `to_ns`, for
    /// comparing many stamps against one time without converting each).
    pub fn stamp_at_or_before(&self, ns: u64) -> u64 {
        if !self.tsc {
            return ns;
        }
        // to_ns is monotonic: bisect the stamp domain around the anchors.
        let (mut lo, mut hi) = (0u64, u64::MAX);
        if let (Some(&first), Some(&last)) = (self.anchors.front(), self.anchors.back()) {
            if ns >= last.1 {
                lo = last.0;
            } else if ns >= first.1 {
                let i = self.anchors.partition_point(|a| a.1 <= ns);
                lo = self.anchors[i - 1].0;
                hi = self.anchors[i].0;
            } else {
                hi = first.0;
            }
        }
        // Invariant: to_ns(lo) <= ns (or lo = 0), to_ns(hi) > ns (or hi = MAX).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.to_ns(mid) <= ns {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// ns per tick over the longest baseline known.
    fn long_rate(&self) -> f64 {
        match self.anchors.back() {
            Some(&(t, n)) if t > self.first.0 && n > self.first.1 => {
                (n - self.first.1) as f64 / (t - self.first.0) as f64
            }
            _ => 1.0,
        }
    }
}

impl Default for Converter {
    fn default() -> Self {
        Self::new()
    }
}

fn extrapolate(a: (u64, u64), rate: f64, stamp: u64) -> u64 {
    let d = stamp as f64 - a.0 as f64;
    let ns = a.1 as f64 + d * rate;
    if ns <= 0.0 {
        0
    } else {
        ns as u64
    }
}

/// A (ticks, ns) pair read together: the ns read between two tick reads.
fn pair() -> (u64, u64) {
    let t1 = rdtsc_after();
    let n = now_ns();
    let t2 = rdtsc_after();
    (t1 / 2 + t2 / 2, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A converter with these anchors, the first also the long baseline's start.
    fn with_anchors(tsc: bool, anchors: &[(u64, u64)]) -> Converter {
        Converter {
            tsc,
            first: anchors[0],
            anchors: anchors.iter().copied().collect(),
            seg: std::cell::Cell::new(Segment::NONE),
        }
    }

    #[test]
    fn interpolation_is_exact_at_anchors_and_monotonic_between() {
        let c = with_anchors(true, &[(1000, 5000), (3000, 6000), (7000, 10000)]);
        assert_eq!(c.to_ns(1000), 5000);
        assert_eq!(c.to_ns(3000), 6000);
        assert_eq!(c.to_ns(7000), 10000);
        assert_eq!(c.to_ns(2000), 5500);
        assert_eq!(c.to_ns(5000), 8000);
        // Past the last anchor: the long-baseline rate, (10000-5000)/(7000-1000).
        assert_eq!(c.to_ns(13000), 15000);
        let mut last = 0;
        for s in (0..20000).step_by(37) {
            let ns = c.to_ns(s);
            assert!(ns >= last, "{s}");
            last = ns;
        }
    }

    #[test]
    fn a_fractional_rate_rounds_down_and_stays_below_the_next_anchor() {
        let c = with_anchors(true, &[(1000, 5000), (4000, 6000), (4003, 6001)]);
        // 1000 ns over 3000 ticks: a third of a ns a tick.
        assert_eq!(c.to_ns(2000), 5333);
        assert_eq!(c.to_ns(3999), 5999);
        assert_eq!(c.to_ns(4000), 6000);
        assert_eq!(c.to_ns(4002), 6000);
        // Back in the first segment after the second was met: the same values.
        assert_eq!(c.to_ns(2000), 5333);
        assert_eq!(c.to_ns(1000), 5000);
    }

    #[test]
    fn the_inverse_finds_the_last_stamp_at_or_before_a_time() {
        let c = with_anchors(true, &[(1000, 5000), (3000, 6000), (7000, 10000)]);
        for ns in [
            4000u64, 4600, 5000, 5500, 5999, 6000, 8000, 10000, 15000, 123_456,
        ] {
            let s = c.stamp_at_or_before(ns);
            if c.to_ns(0) > ns {
                assert_eq!(s, 0, "no stamp is that early");
                continue;
            }
            assert!(c.to_ns(s) <= ns, "{ns}");
            assert!(c.to_ns(s + 1) > ns, "{ns}");
        }
    }

    #[test]
    fn monotonic_stamps_pass_through() {
        let c = with_anchors(false, &[(0, 0)]);
        assert_eq!(c.to_ns(123_456), 123_456);
    }

    #[test]
    fn tsc_anchors_convert_a_live_stamp_close_to_the_monotonic_clock() {
        if !tsc_usable() {
            return; // no reliable TSC on this machine: nothing to check
        }
        USE_TSC.store(true, Ordering::Relaxed);
        let mut c = Converter::new();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let stamp = now();
        let mono = now_ns();
        c.anchor();
        let ns = c.to_ns(stamp);
        assert!(ns.abs_diff(mono) < 100_000, "{ns} vs {mono}");
    }
}
