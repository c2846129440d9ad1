//! `export --format chrome`: the Chrome trace-event format (JSON), which Perfetto's UI and
//! chrome://tracing open. Each live series is a counter track (`ph: "C"`): all memory, each
//! (device, kind), and NVML's measurement per device; each out-of-memory failure is a global
//! instant event (`ph: "i"`); NVTX ranges and marks are events on their thread's track.
//!
//! Counters come from the timeline's buckets: each bucket contributes its highest value at
//! the time it was reached, then its last value, so peaks are exact and the file stays
//! small however long the trace.
//!
//! NVTX events are written while the trace is read (`NvtxEvents`, an observer of the one
//! pass), never collected: memory holds the open ranges and the strings only.
//!
//! ```text
//!  push ─► opens on (tid, domain)      pop ─► closes it: one "X" (ts = push, dur = pop − push)
//!  start ─► "b" (id = range id)        end ─► "e" of the same id (no such range open: skipped)
//!  mark ─► "i" (s: "t")                trace ends ─► what is open closes at its last time
//! ```

use std::collections::HashMap;
use std::io::{self, Write};

use gpumemprof_format::{Nvtx, NvtxOp, Record};
use serde_json::{json, Value};

use crate::fasthash::FastMap;
use crate::observe::{record_time, Observer};
use crate::replay::ranges::{MAX_OPEN, UNNAMED};
use crate::replay::LiveChange;
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

/// The whole export without NVTX events (those come from `NvtxEvents` during the pass).
pub fn chrome(t: &Timeline, trace: &TraceInfo, apis: &HashMap<u16, String>) -> Value {
    json!({
        "traceEvents": events(t, trace, apis),
        "displayTimeUnit": "ms",
        "otherData": other_data(t, trace),
    })
}

/// The start of the file `write_end` completes; `NvtxEvents` writes between the two.
pub const PREFIX: &[u8] = b"{\"traceEvents\":[\n";

/// Writes the events of `chrome` and the end of the file opened by `PREFIX`.
pub fn write_end(
    out: &mut dyn Write,
    t: &Timeline,
    trace: &TraceInfo,
    apis: &HashMap<u16, String>,
) -> io::Result<()> {
    let events = events(t, trace, apis);
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, e)?;
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(&mut *out, &other_data(t, trace))?;
    out.write_all(b"}\n")
}

fn other_data(t: &Timeline, trace: &TraceInfo) -> Value {
    json!({
        "generator": concat!("gpumemprof ", env!("CARGO_PKG_VERSION")),
        "trace": trace.path,
        "bucket_ns": t.width_ns,
        "out_of_memory_failures": t.oom_count,
    })
}

/// The process name, the counters and the out-of-memory failures (never empty).
fn events(t: &Timeline, trace: &TraceInfo, apis: &HashMap<u16, String>) -> Vec<Value> {
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
    events
}

/// NVTX events written so far, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvtxWritten {
    /// Pushed ranges (`X`).
    pub ranges: u64,
    /// Start/end ranges (`b` + `e` pairs).
    pub async_ranges: u64,
    pub marks: u64,
}

/// A pushed range still open on its thread.
#[derive(Debug, Clone, Copy)]
struct Pushed {
    start_ns: u64,
    domain: u64,
    name: u64,
}

/// A started range still open (its `b` is written), by range id.
#[derive(Debug, Clone, Copy)]
struct Started {
    tid: u32,
    domain: u64,
    name: u64,
}

#[derive(Debug, Default)]
struct Thread {
    open: Vec<Pushed>,
    /// Pushes not opened because of `MAX_OPEN`: the thread's next pops close these first,
    /// as `replay/ranges.rs` does.
    skipped: u64,
}

/// Writes each NVTX record as trace events to `out` during the pass, each event followed
/// by `,` and a newline (the file goes on with `write_end`). Pairs push/pop per thread and
/// domain and start/end by range id exactly as `replay/ranges.rs` does; holds only the open ranges
/// (at most `MAX_OPEN`) and the strings. A write error stops the writing and is returned by
/// `finish`.
pub struct NvtxEvents<W: Write> {
    out: W,
    pid: u64,
    strings: FastMap<u64, String>,
    threads: FastMap<u32, Thread>,
    started: FastMap<u64, Started>,
    open_total: usize,
    /// The latest time of any record: where ranges still open at the end close.
    end_ns: u64,
    written: NvtxWritten,
    error: Option<io::Error>,
}

impl<W: Write> NvtxEvents<W> {
    /// `pid`: the trace's process id (its header's), shared by every event.
    pub fn new(out: W, pid: u64) -> Self {
        NvtxEvents {
            out,
            pid,
            strings: FastMap::default(),
            threads: FastMap::default(),
            started: FastMap::default(),
            open_total: 0,
            end_ns: 0,
            written: NvtxWritten::default(),
            error: None,
        }
    }

    /// Closes what is still open at the trace's last time (pushed ranges by thread,
    /// innermost first; then started ranges by id) and gives back the writer.
    pub fn finish(mut self) -> io::Result<(W, NvtxWritten)> {
        let end = self.end_ns;
        let mut tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let open = self
                .threads
                .remove(&tid)
                .map(|t| t.open)
                .unwrap_or_default();
            for p in open.into_iter().rev() {
                self.complete(tid, p, end);
            }
        }
        let mut ids: Vec<u64> = self.started.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.end(id, None, end);
        }
        match self.error {
            Some(e) => Err(e),
            None => Ok((self.out, self.written)),
        }
    }

    fn name(&self, id: u64) -> String {
        match self.strings.get(&id) {
            _ if id == 0 => UNNAMED.to_string(),
            Some(t) if t.is_empty() => UNNAMED.to_string(),
            Some(t) => t.clone(),
            None => format!("<string {id}>"),
        }
    }

    /// `{"domain": NAME}`, or no args for NVTX's default domain.
    fn args(&self, event: &mut Value, domain: u64) {
        if domain != 0 {
            let name = match self.strings.get(&domain) {
                Some(t) => t.clone(),
                None => format!("<string {domain}>"),
            };
            event["args"] = json!({ "domain": name });
        }
    }

    fn emit(&mut self, event: Value) {
        if self.error.is_some() {
            return;
        }
        let written = serde_json::to_writer(&mut self.out, &event)
            .map_err(io::Error::from)
            .and_then(|()| self.out.write_all(b",\n"));
        if let Err(e) = written {
            self.error = Some(e);
        }
    }

    /// The complete event of a pushed range closed at `end_ns`.
    fn complete(&mut self, tid: u32, p: Pushed, end_ns: u64) {
        let mut e = json!({
            "name": self.name(p.name), "cat": "nvtx", "ph": "X", "ts": us(p.start_ns),
            "dur": us(end_ns.saturating_sub(p.start_ns)), "pid": self.pid, "tid": tid,
        });
        self.args(&mut e, p.domain);
        self.emit(e);
        self.written.ranges += 1;
    }

    /// Ends the started range `id` at `time_ns` on `tid` (`None`: its starting thread's);
    /// false if it is not open.
    fn end(&mut self, id: u64, tid: Option<u32>, time_ns: u64) -> bool {
        let Some(s) = self.started.remove(&id) else {
            return false;
        };
        self.open_total -= 1;
        let mut e = json!({
            "name": self.name(s.name), "cat": "nvtx", "ph": "e", "id": async_id(id),
            "ts": us(time_ns), "pid": self.pid, "tid": tid.unwrap_or(s.tid),
        });
        self.args(&mut e, s.domain);
        self.emit(e);
        self.written.async_ranges += 1;
        true
    }

    fn event(&mut self, n: &Nvtx) {
        match n.op {
            NvtxOp::Push => {
                let t = self.threads.entry(n.tid).or_default();
                if self.open_total >= MAX_OPEN {
                    t.skipped += 1;
                    return;
                }
                t.open.push(Pushed {
                    start_ns: n.time_ns,
                    domain: n.domain,
                    name: n.name,
                });
                self.open_total += 1;
            }
            NvtxOp::Pop => {
                let Some(t) = self.threads.get_mut(&n.tid) else {
                    return; // unmatched: skipped
                };
                let closed = if t.skipped > 0 {
                    t.skipped -= 1;
                    None
                } else {
                    // Closing nothing (no pushed range of the domain open): skipped.
                    let i = t.open.iter().rposition(|p| p.domain == n.domain);
                    i.map(|i| t.open.remove(i))
                };
                if t.open.is_empty() && t.skipped == 0 {
                    self.threads.remove(&n.tid);
                }
                if let Some(p) = closed {
                    self.open_total -= 1;
                    self.complete(n.tid, p, n.time_ns);
                }
            }
            NvtxOp::Start => {
                // A reused id (a damaged trace) first closes the range it named.
                self.end(n.range, Some(n.tid), n.time_ns);
                if self.open_total >= MAX_OPEN {
                    return; // its end is then unmatched, and skipped
                }
                self.started.insert(
                    n.range,
                    Started {
                        tid: n.tid,
                        domain: n.domain,
                        name: n.name,
                    },
                );
                self.open_total += 1;
                let mut e = json!({
                    "name": self.name(n.name), "cat": "nvtx", "ph": "b",
                    "id": async_id(n.range), "ts": us(n.time_ns), "pid": self.pid, "tid": n.tid,
                });
                self.args(&mut e, n.domain);
                self.emit(e);
            }
            NvtxOp::End => {
                self.end(n.range, Some(n.tid), n.time_ns);
            }
            NvtxOp::Mark => {
                let mut e = json!({
                    "name": self.name(n.name), "cat": "nvtx", "ph": "i", "s": "t",
                    "ts": us(n.time_ns), "pid": self.pid, "tid": n.tid,
                });
                self.args(&mut e, n.domain);
                self.emit(e);
                self.written.marks += 1;
            }
            NvtxOp::Other(_) => {}
        }
    }
}

/// An async event's id: hexadecimal text, as the format's documentation writes ids (a
/// JSON number past 2^53 would lose digits in a JavaScript viewer).
fn async_id(range: u64) -> String {
    format!("{range:#x}")
}

impl<W: Write> Observer for NvtxEvents<W> {
    fn record(&mut self, record: &Record) {
        match record {
            Record::Nvtx(n) => self.event(n),
            Record::NvtxString { id, text } => {
                self.strings.insert(*id, text.clone());
            }
            _ => {}
        }
        if let Some(t) = record_time(record) {
            self.end_ns = self.end_ns.max(t);
        }
    }

    fn changes(&mut self, _time_ns: u64, _changes: &[LiveChange]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::TimelineBuilder;
    use proptest::prelude::*;

    fn nvtx(time_ns: u64, tid: u32, op: NvtxOp, domain: u64, name: u64, range: u64) -> Record {
        Record::Nvtx(Nvtx {
            time_ns,
            tid,
            op,
            domain,
            name,
            range,
        })
    }

    fn string(id: u64, text: &str) -> Record {
        Record::NvtxString {
            id,
            text: text.into(),
        }
    }

    fn info() -> TraceInfo {
        TraceInfo {
            path: "t.gmt".into(),
            pid: Some(42),
            argv: vec!["train".into()],
            complete: true,
            ..TraceInfo::default()
        }
    }

    /// The whole file, as `export` writes it, from `records`.
    fn export(records: &[Record]) -> (Value, NvtxWritten) {
        let mut out = PREFIX.to_vec();
        let mut events = NvtxEvents::new(&mut out, 42);
        let mut timeline = TimelineBuilder::new();
        for r in records {
            events.record(r);
            timeline.record(r);
        }
        let (out, written) = events.finish().expect("written to memory");
        write_end(out, &timeline.finish(), &info(), &HashMap::new()).expect("written");
        let doc = serde_json::from_slice(out).expect("the file is JSON");
        (doc, written)
    }

    fn nvtx_events(doc: &Value) -> Vec<String> {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "nvtx")
            .map(|e| {
                assert_eq!(e["pid"], 42);
                let mut s = format!(
                    "{} {} tid {} ts {}",
                    e["ph"].as_str().unwrap(),
                    e["name"].as_str().unwrap(),
                    e["tid"],
                    e["ts"]
                );
                for key in ["dur", "id", "s"] {
                    if !e[key].is_null() {
                        s += &format!(" {key} {}", e[key]);
                    }
                }
                if !e["args"].is_null() {
                    s += &format!(" args {}", e["args"]);
                }
                s
            })
            .collect()
    }

    #[test]
    fn ranges_pair_per_thread_and_domain_and_by_id_and_open_ones_close_at_the_end() {
        use NvtxOp::*;
        let records = [
            string(1, "step"),
            string(2, "inner"),
            string(3, "io"),
            string(4, "save"),
            string(5, "loader"),
            nvtx(1_000, 7, Push, 0, 1, 0),
            nvtx(2_000, 7, Push, 5, 2, 0), // domain "loader"
            nvtx(2_500, 8, Pop, 0, 0, 0),  // thread 8 has nothing open: skipped
            nvtx(3_000, 7, Pop, 0, 0, 0),  // default domain: closes "step", not "inner"
            nvtx(3_500, 7, Mark, 5, 3, 0),
            nvtx(4_000, 7, Start, 0, 4, 9),
            nvtx(4_500, 8, End, 0, 0, 10), // never started: skipped
            nvtx(5_000, 8, End, 0, 0, 9),  // ended by another thread
            nvtx(6_000, 8, Start, 0, 3, 11),
            nvtx(6_500, 8, Push, 0, 99, 0), // a name never defined
            nvtx(7_000, 7, Pop, 5, 0, 0),   // closes "inner"
        ];
        let (doc, written) = export(&records);
        assert_eq!(
            nvtx_events(&doc),
            vec![
                "X step tid 7 ts 1.0 dur 2.0",
                "i io tid 7 ts 3.5 s \"t\" args {\"domain\":\"loader\"}",
                "b save tid 7 ts 4.0 id \"0x9\"",
                "e save tid 8 ts 5.0 id \"0x9\"",
                "b io tid 8 ts 6.0 id \"0xb\"",
                "X inner tid 7 ts 2.0 dur 5.0 args {\"domain\":\"loader\"}",
                // Still open at the trace's last time (7 µs).
                "X <string 99> tid 8 ts 6.5 dur 0.5",
                "e io tid 8 ts 7.0 id \"0xb\"",
            ]
        );
        assert_eq!(
            written,
            NvtxWritten {
                ranges: 3,
                async_ranges: 2,
                marks: 1
            }
        );
        // The rest of the export is there too.
        let events = doc["traceEvents"].as_array().unwrap();
        assert!(events.iter().any(|e| e["name"] == "process_name"));
        assert_eq!(doc["otherData"]["trace"], "t.gmt");
    }

    #[test]
    fn a_reused_start_id_closes_the_range_it_named() {
        use NvtxOp::*;
        let records = [
            nvtx(1_000, 1, Start, 0, 0, 5),
            nvtx(2_000, 2, Start, 0, 0, 5),
            nvtx(3_000, 2, End, 0, 0, 5),
            nvtx(4_000, 2, End, 0, 0, 5),
        ];
        assert_eq!(
            nvtx_events(&export(&records).0),
            vec![
                "b <unnamed> tid 1 ts 1.0 id \"0x5\"",
                "e <unnamed> tid 2 ts 2.0 id \"0x5\"",
                "b <unnamed> tid 2 ts 2.0 id \"0x5\"",
                "e <unnamed> tid 2 ts 3.0 id \"0x5\"",
            ]
        );
    }

    #[test]
    fn past_max_open_ranges_nothing_opens_and_its_pops_and_ends_close_nothing() {
        use NvtxOp::*;
        let mut events = NvtxEvents::new(io::sink(), 1);
        for i in 0..MAX_OPEN as u64 + 2 {
            events.record(&nvtx(i, 1, Push, 0, 0, 0));
        }
        events.record(&nvtx(1 << 20, 2, Start, 0, 0, 3)); // not opened
        events.record(&nvtx(1 << 20, 2, End, 0, 0, 3)); // so skipped
        for i in 0..MAX_OPEN as u64 + 2 {
            events.record(&nvtx((1 << 21) + i, 1, Pop, 0, 0, 0));
        }
        assert_eq!(events.open_total, 0);
        assert!(events.threads.is_empty());
        let (_, written) = events.finish().unwrap();
        assert_eq!(
            written,
            NvtxWritten {
                ranges: MAX_OPEN as u64,
                ..NvtxWritten::default()
            }
        );
    }

    fn hostile() -> impl Strategy<Value = Record> {
        prop_oneof![
            (any::<u64>(), 0..3u32, 0..7u8, 0..3u64, 0..3u64, 0..3u64).prop_map(
                |(t, tid, op, domain, name, range)| nvtx(
                    t,
                    tid,
                    NvtxOp::from_u8(op),
                    domain,
                    name,
                    range
                )
            ),
            (0..3u64, ".{0,4}").prop_map(|(id, text)| string(id, &text)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
        /// Any records: valid JSON, every `b` ended, nothing left open.
        #[test]
        fn any_nvtx_records_give_a_valid_file_with_each_async_range_ended(
            records in proptest::collection::vec(hostile(), 0..40)
        ) {
            let (doc, written) = export(&records);
            let events = doc["traceEvents"].as_array().unwrap();
            let count = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count() as u64;
            prop_assert_eq!(count("b"), written.async_ranges);
            prop_assert_eq!(count("e"), written.async_ranges);
            prop_assert_eq!(count("X"), written.ranges);
            prop_assert!(events.iter().filter(|e| e["ph"] == "X").all(|e| e["dur"].as_f64().unwrap() >= 0.0));
        }
    }
}
