//! Exports: the trace in other tools' formats, each streamed from the replay pass:
//! `chrome` (trace-event JSON for Perfetto and chrome://tracing), `csv` (the timeline),
//! `telemetry` (the older Python gpumemprof's TelemetryEvent v2 JSON lines),
//! `torch_snapshot` (PyTorch's memory snapshot, written by `pickle`), `parquet` (tables
//! for engines such as DuckDB and Spark, from many traces at once). The folded stacks
//! for speedscope are the flamegraph's (`views::flamegraph::folded`).

pub mod chrome;
pub mod csv;
pub mod parquet;
pub mod pickle;
pub mod telemetry;
pub mod torch_snapshot;
pub mod window;
