//! `export --format chrome`: the Chrome trace-event format (JSON), which Perfetto's UI and
//! chrome://tracing open. Each live series is a counter track (`ph: "C"`): all memory, each
//! (device, kind), and NVML's measurement per device; each out-of-memory failure is a global
//! instant event (`ph: "i"`), as NVTX marks will be (ranges: complete events, `ph: "X"`).
//!
//! Counters come from the timeline's buckets: each bucket contributes its highest value at
//! the time it was reached, then its last value, so peaks are exact and the file stays
//! small however long the trace.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::report::TraceInfo;
use crate::timeline::{SeriesKey, Timeline};
use crate::units;

/// Trace-event timestamps are microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The counter track's name for a series.
pub fn counter_name(key: SeriesKey) -> String {
    match key {
        SeriesKey::Total => "all GPU memory (live bytes)".to_string(),
        SeriesKey::Live(d, k) => {
            format!("GPU {} {} memory (live bytes)", units::device(d), k.name())
        }
        SeriesKey::Nvml(d) => format!("GPU {} used by the process (NVML bytes)", units::device(d)),
    }
}

pub fn chrome(t: &Timeline, trace: &TraceInfo, apis: &HashMap<u16, String>) -> Value {
    let pid = trace.pid.unwrap_or(0);
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
        "args": {"name": format!("{} (pid {pid})", trace.argv.join(" "))}
    })];
    for s in &t.series {
        let name = counter_name(s.key);
        let mut counter = |ns: u64, bytes: u64| {
            events.push(json!({
                "name": name, "cat": "memory", "ph": "C", "ts": us(ns), "pid": pid, "tid": 0,
                "args": {"bytes": bytes}
            }));
        };
        if !matches!(s.key, SeriesKey::Nvml(_)) {
            // Live memory starts at nothing.
            counter(0, 0);
        }
        for b in s.buckets.iter().flatten() {
            counter(b.max_time_ns, b.max);
            if b.last_time_ns > b.max_time_ns {
                counter(b.last_time_ns, b.last);
            }
        }
    }
    for o in &t.ooms {
        let api = apis
            .get(&o.api)
            .cloned()
            .unwrap_or_else(|| format!("api {}", o.api));
        let mut args = json!({
            "device": o.device, "kind": o.kind.name(), "api": api,
            "requested_bytes": o.size, "stack_id": o.stack,
        });
        if o.mem_total > 0 {
            args["free_bytes"] = json!(o.mem_free);
            args["total_bytes"] = json!(o.mem_total);
        }
        events.push(json!({
            "name": format!("out of memory: {api} {} on GPU {}", units::bytes(o.size), units::device(o.device)),
            "cat": "oom", "ph": "i", "s": "g", "ts": us(o.time_ns), "pid": pid, "tid": 0,
            "args": args
        }));
    }
    for m in &t.marks {
        events.push(json!({
            "name": m.name, "cat": "nvtx", "ph": "i", "s": "g", "ts": us(m.time_ns),
            "pid": pid, "tid": 0
        }));
    }
    for r in &t.ranges {
        events.push(json!({
            "name": r.name, "cat": "nvtx", "ph": "X", "ts": us(r.start_ns),
            "dur": us(r.end_ns.saturating_sub(r.start_ns)), "pid": pid, "tid": 0
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": concat!("gpumemprof ", env!("CARGO_PKG_VERSION")),
            "trace": trace.path,
            "bucket_ns": t.width_ns,
            "out_of_memory_failures": t.oom_count,
        }
    })
}
