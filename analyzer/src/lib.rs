//! gpumemprof-analyzer: reads a trace written by the gpumemprof shim and reports on it.
//! Layers, from the bottom: `units`, `fasthash`, `error`, `term`; `replay` (the one
//! streaming pass over the records) and `observe` (what watches it); `input` (open and
//! load a trace); `symbolize`, `timeline`, `snapshot`, `live` (a trace being written),
//! `nvml`; the engines: `report` (every report), `export` (other tools' formats), `views`
//! (flamegraph, chart, HTML); `cmd` (each command's flags and run) and `cli` on top.
//! docs/ARCHITECTURE.md draws the flow.

pub mod bench;
pub mod browse;
pub mod cli;
pub mod cmd;
pub mod cxx_names;
pub mod decoding;
pub mod error;
pub mod export;
pub mod fasthash;
pub mod fit;
pub mod glue;
pub mod input;
pub mod kinds;
pub mod live;
pub mod nvml;
pub mod observe;
pub mod owner;
pub mod process;
pub mod replay;
pub mod report;
pub mod snapshot;
pub mod source_paths;
pub mod symbolize;
pub mod term;
pub mod timeline;
pub mod torch_conf;
pub mod torch_frames;
pub mod torch_version;
pub mod units;
pub mod views;
pub mod whatif;
pub mod window;
