//! gpumemprof-analyzer: reads a trace written by the gpumemprof shim and reports on it
//! (`summary`, `peak`, `leaks`). `replay` is the one streaming pass over the records;
//! each report is a module under `report`; `cli` wires them into the `gpumemprof` command.

pub mod cli;
pub mod error;
pub mod replay;
pub mod report;
pub mod symbolize;
pub mod units;
