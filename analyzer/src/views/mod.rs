//! Views: renderings of a trace for people and other tools, each built from what the
//! observed replay pass keeps (`timeline::Timeline`, `snapshot::Snapshot`) and the reports.
//! `flamegraph` (folded stacks, inferno SVG), `chart` (the timeline as SVG/PNG), `html`
//! (the one-file report), and the exports `chrome` (trace-event JSON) and `csv`.

pub mod chart;
pub mod chrome;
pub mod csv;
pub mod flamegraph;
pub mod html;

use std::collections::HashMap;

/// API id -> name, from the trace header's `apis` table.
pub fn api_names(header: &serde_json::Value) -> HashMap<u16, String> {
    header
        .get("apis")
        .and_then(|a| a.as_array())
        .map(|apis| {
            apis.iter()
                .filter_map(|a| {
                    let id = u16::try_from(a.get("id")?.as_u64()?).ok()?;
                    Some((id, a.get("name")?.as_str()?.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}
