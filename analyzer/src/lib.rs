//! gpumemprof-analyzer: reads a trace written by the gpumemprof shim and reports on it
//! (`summary`, `peak`, `leaks`). `replay` is the one streaming pass over the records;
//! each report is a module under `report`; `cli` wires them into the `gpumemprof` command.
//! The views that write a file (flamegraph, timeline, HTML report, exports) watch the same
//! pass (`observe`), keep a bounded `timeline` or a `snapshot` of live memory by stack, and
//! render through `views`; their commands live under `cmd`.

pub mod bench;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod export;
pub mod fasthash;
pub mod input;
pub mod live;
pub mod nvml;
pub mod observe;
pub mod replay;
pub mod report;
pub mod snapshot;
pub mod symbolize;
pub mod term;
pub mod timeline;
pub mod units;
pub mod views;
