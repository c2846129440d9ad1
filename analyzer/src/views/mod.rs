//! Views: renderings of a trace for people and other tools, each built from what the
//! observed replay pass keeps (`timeline::Timeline`, `snapshot::Snapshot`) and the reports.
//! `flamegraph` (folded stacks, inferno SVG), `chart` (the timeline as SVG/PNG), `html`
//! (the one-file report), `kinds_table` (its kinds of memory). The exports to other tools
//! are under `export`.

pub mod chart;
pub mod flamegraph;
pub mod html;
pub mod inline_svg;
pub mod kinds_table;
pub mod libraries_table;
