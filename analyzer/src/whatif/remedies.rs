//! What would have avoided a PyTorch out-of-memory error: the standard remedies
//! (expandable segments; `max_split_size_mb` at a few sizes; garbage collection under a
//! memory fraction) replayed on the recorded stream, for `oom`. When none would, whether
//! the live tensors and the request alone exceed what the device had for PyTorch.

use std::path::Path;

use serde::Serialize;

use super::replay::Scenario;
use super::report::replay_trace;
use crate::error::Error;
use crate::torch_conf::AllocConf;
use crate::units;

/// `max_split_size_mb` values tried.
const MAX_SPLIT_MB: [u64; 3] = [128, 256, 512];
/// Garbage collection acts only under a memory fraction: the two as users set them.
const GARBAGE_COLLECTION: &str =
    "garbage_collection_threshold:0.8,per_process_memory_fraction:0.99";

/// One remedy, replayed.
#[derive(Debug, Clone, Serialize)]
pub struct Remedy {
    /// The settings added to the job's, in PyTorch's syntax.
    pub set: String,
    /// It gets past the job's first out-of-memory error.
    pub avoids: bool,
    /// And nothing else runs out of memory up to the trace's end.
    pub fits: bool,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Segments freed or pages unmapped: device synchronizations, its cost.
    pub device_frees: u64,
    /// When it ran out of memory itself (null: never).
    pub oom_time_ns: Option<u64>,
}

/// The remedies for the job's first out-of-memory error.
#[derive(Debug, Clone, Serialize)]
pub struct Remedies {
    /// The job's configuration (`""`: PyTorch's defaults).
    pub job_configuration: String,
    /// The job's policy, replayed, reproduced it (else the figures are estimates).
    pub fidelity_matched: bool,
    /// The job's first out-of-memory error: when, the block refused, and the tensors live.
    pub oom_time_ns: u64,
    pub request_bytes: u64,
    pub live_tensor_bytes: u64,
    /// What the device had for PyTorch: its memory less what others held (null: unknown).
    pub available_bytes: Option<u64>,
    /// How much the live tensors and the request exceed it (null: they do not).
    pub exceeds_by_bytes: Option<u64>,
    pub tried: Vec<Remedy>,
    /// One sentence.
    pub verdict: String,
}

/// The remedies worth trying under `own`: what it does not set already.
fn candidates(own: &AllocConf) -> Vec<String> {
    let mut out = Vec::new();
    if !own.expandable_segments {
        out.push("expandable_segments:True".to_string());
    }
    for mb in MAX_SPLIT_MB {
        let bytes = mb << 20;
        if own.max_split_size != bytes && bytes >= own.large_segment_size {
            out.push(format!("max_split_size_mb:{mb}"));
        }
    }
    if own.garbage_collection_threshold == 0.0 {
        out.push(GARBAGE_COLLECTION.into());
    }
    out
}

/// The remedies for `path`'s first PyTorch out-of-memory error; `None` when the job had
/// none (or its trace has no PyTorch tensors).
pub fn propose(path: &Path) -> Result<Option<Remedies>, Error> {
    let mut tried_sets = Vec::new();
    let (_, own, devices, results) = replay_trace(path, |own| {
        tried_sets = candidates(&own);
        (tried_sets.iter())
            .map(|set| {
                let mut conf = own;
                conf.apply(set).map_err(Error::Failed)?;
                Ok(Scenario {
                    conf,
                    scale: 1.0,
                    device_memory: None,
                })
            })
            .collect::<Result<Vec<_>, Error>>()
    })?;
    // The device whose job's policy met the job's first refusal.
    let Some((device, oom)) = (results.iter())
        .filter_map(|d| {
            d.outcomes[0]
                .first_oom
                .filter(|o| o.as_recorded)
                .map(|o| (d, o))
        })
        .min_by_key(|(_, o)| o.time_ns)
    else {
        return Ok(None);
    };
    let tried: Vec<Remedy> = (tried_sets.iter().zip(&device.outcomes[1..]))
        .map(|(set, o)| {
            let c = &o.counters;
            Remedy {
                set: set.clone(),
                avoids: o.first_oom.is_none_or(|x| x.time_ns > oom.time_ns),
                fits: o.first_oom.is_none(),
                peak_allocated_bytes: c.peak_allocated,
                peak_reserved_bytes: c.peak_reserved,
                device_frees: c.device_frees,
                oom_time_ns: o.first_oom.map(|x| x.time_ns),
            }
        })
        .collect();
    let seen = devices
        .iter()
        .find(|(d, _)| *d == device.device)
        .map(|x| x.1);
    let available = seen.and_then(|s| s.capacity.map(|c| c.saturating_sub(s.other)));
    let needed = oom.allocated + oom.size;
    let exceeds_by = available.filter(|&a| needed > a).map(|a| needed - a);
    let verdict = verdict(&tried, needed, available, exceeds_by, oom.size);
    Ok(Some(Remedies {
        job_configuration: own.to_text(),
        fidelity_matched: device.fidelity.matched(),
        oom_time_ns: oom.time_ns,
        request_bytes: oom.size,
        live_tensor_bytes: oom.allocated,
        available_bytes: available,
        exceeds_by_bytes: exceeds_by,
        tried,
        verdict,
    }))
}

fn verdict(
    tried: &[Remedy],
    needed: u64,
    available: Option<u64>,
    exceeds_by: Option<u64>,
    request: u64,
) -> String {
    let avoiding: Vec<String> = (tried.iter())
        .filter(|r| r.avoids)
        .map(|r| {
            let later = if r.fits {
                ""
            } else {
                ", but runs out of memory later"
            };
            format!(
                "{} (reserved peak {}, {} device synchronizations{later})",
                r.set,
                units::bytes(r.peak_reserved_bytes),
                r.device_frees
            )
        })
        .collect();
    if !avoiding.is_empty() {
        return format!(
            "Would have avoided this out-of-memory error: {}. The trace ends at the error, so \
             what the job did after it is not replayed.",
            avoiding.join("; ")
        );
    }
    let names: Vec<&str> = tried.iter().map(|r| r.set.as_str()).collect();
    let none = if names.is_empty() {
        "No standard remedy is left to try".to_string()
    } else {
        format!("None of {} would have avoided it", names.join(", "))
    };
    // Two sizes that round alike (1.0 GiB needed, 1.0 GiB there) are told exactly.
    let pair = |x: u64, y: u64| {
        if units::bytes(x) == units::bytes(y) {
            (units::bytes_exact(x), units::bytes_exact(y))
        } else {
            (units::bytes(x), units::bytes(y))
        }
    };
    let (needed_words, available_words) = pair(needed, available.unwrap_or(0));
    match (exceeds_by, available) {
        (Some(by), Some(_)) => format!(
            "{none}: the live tensors and the {} request need {}, {} more than the {} the \
             device had for PyTorch; no allocator setting makes that fit: the tensors must \
             shrink (a smaller batch, lower precision, activation checkpointing).",
            units::bytes(request),
            needed_words,
            units::bytes(by),
            available_words
        ),
        (None, Some(_)) => format!(
            "{none}, although the live tensors and the {} request ({}) would fit in the {} \
             the device had for PyTorch: how the blocks lie keeps it out.",
            units::bytes(request),
            needed_words,
            available_words
        ),
        _ => format!("{none}."),
    }
}

#[cfg(test)]
mod tests {
    use super::verdict;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sizes_that_round_alike_are_told_exactly() {
        // 992 MiB of live tensors and a 32 MiB request on a 1 GiB device of which PyTorch
        // had 1 GiB less 32 KiB: "need 1.0 GiB ... the 1.0 GiB" would say nothing.
        let available = 1024 * MIB - (32 << 10);
        let needed = 1024 * MIB;
        let v = verdict(
            &[],
            needed,
            Some(available),
            Some(needed - available),
            32 * MIB,
        );
        assert_eq!(
            v,
            "No standard remedy is left to try: the live tensors and the 32.0 MiB request \
             need 1.0 GiB (1073741824 B), 32.0 KiB more than the 1.0 GiB (1073709056 B) the \
             device had for PyTorch; no allocator setting makes that fit: the tensors must \
             shrink (a smaller batch, lower precision, activation checkpointing)."
        );
        // Sizes that read apart stay short.
        let v = verdict(&[], 1024 * MIB, Some(960 * MIB), Some(64 * MIB), 256 * MIB);
        assert!(
            v.contains("need 1.0 GiB, 64.0 MiB more than the 960.0 MiB the device"),
            "{v}"
        );
    }
}
