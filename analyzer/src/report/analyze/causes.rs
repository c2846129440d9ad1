//! One finding per cause. A site that keeps memory every cycle shows three ways: the
//! device's low points rise (`monotonic_growth`), the site's memory live at the end was
//! made in many cycles (`site_still_growing`), and it is still allocated at exit
//! (`insufficient_cleanup`). The site is the cause, named with its line; so the growth of a
//! row whose growing sites hold at least the rise is told inside the largest site's finding
//! (its sentence and evidence), and the memory at exit is counted without the growing
//! sites' (`heuristics`: the finding stays only for what other sites left).

use super::model::{growth_sentence, row_place, Finding};

/// Folds each `monotonic_growth` finding its row's `site_still_growing` findings explain
/// into the largest of them.
pub fn fold_growth(findings: Vec<Finding>) -> Vec<Finding> {
    let row = |f: &Finding| (f.device, f.kind);
    let sites_on = |findings: &[Finding], at| -> u64 {
        (findings.iter())
            .filter(|f| f.heuristic == "site_still_growing" && row(f) == at)
            .fold(0u64, |n, f| n.saturating_add(f.bytes))
    };
    let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut folded: Vec<Finding> = Vec::new();
    for f in &findings {
        let explained = f.heuristic == "monotonic_growth"
            && f.device.is_some()
            && sites_on(&findings, row(f)) >= f.bytes;
        if explained {
            folded.push(f.clone());
        } else {
            out.push(f.clone());
        }
    }
    for growth in folded {
        // The largest site on the row (findings of a heuristic come largest first).
        let Some(site) = out
            .iter_mut()
            .find(|f| f.heuristic == "site_still_growing" && row(f) == row(&growth))
        else {
            continue;
        };
        let number = |key| growth.evidence.get(key).copied().unwrap_or(0);
        let sentence = growth_sentence(
            number("first_low_bytes"),
            number("last_low_bytes"),
            number("lows"),
            number("growth_per_cycle_bytes"),
        );
        let place = match (growth.device, growth.kind) {
            (Some(d), Some(k)) => row_place(d, k),
            _ => "its device".to_string(),
        };
        site.message = format!("{}; on {place}, {sentence}", site.message);
        for key in [
            "lows",
            "first_low_bytes",
            "last_low_bytes",
            "growth_per_cycle_bytes",
        ] {
            if let Some(v) = growth.evidence.get(key) {
                site.evidence.insert(key, *v);
            }
        }
        site.evidence.insert("growth_bytes", growth.bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(heuristic: &'static str, bytes: u64, message: &str) -> Finding {
        Finding {
            heuristic,
            severity: "warning",
            device: Some(0),
            kind: Some("device"),
            bytes,
            count: 0,
            stack_id: None,
            frames: Vec::new(),
            message: message.to_string(),
            evidence: [
                ("lows", 4),
                ("first_low_bytes", 1 << 20),
                ("last_low_bytes", 4 << 20),
                ("growth_per_cycle_bytes", 1 << 20),
            ]
            .into_iter()
            .collect(),
        }
    }

    const GROWTH: &str = "device 0 device memory grows: its low points rose from 1.0 MiB \
                          (1048576 B) to 4.0 MiB (4194304 B) over 4 cycles (1.0 MiB (1048576 B) per cycle)";

    #[test]
    fn a_growth_its_sites_hold_is_told_by_the_largest_site() {
        let out = fold_growth(vec![
            finding("monotonic_growth", 3 << 20, GROWTH),
            finding("site_still_growing", 2 << 20, "A"),
            finding("site_still_growing", 1 << 20, "B"),
        ]);
        let heuristics: Vec<&str> = out.iter().map(|f| f.heuristic).collect();
        assert_eq!(heuristics, ["site_still_growing", "site_still_growing"]);
        assert_eq!(
            out[0].message,
            "A; on device 0 device memory, its low points rose from 1.0 MiB (1048576 B) to \
             4.0 MiB (4194304 B) over 4 cycles (1.0 MiB (1048576 B) per cycle)"
        );
        assert_eq!(out[0].evidence.get("growth_bytes"), Some(&(3 << 20)));
        assert_eq!(out[1].message, "B");
    }

    #[test]
    fn a_growth_larger_than_its_sites_stays_a_finding_of_its_own() {
        let out = fold_growth(vec![
            finding("monotonic_growth", 3 << 20, GROWTH),
            finding("site_still_growing", 2 << 20, "A"),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].heuristic, "monotonic_growth");
        assert_eq!(out[1].message, "A");
    }
}
