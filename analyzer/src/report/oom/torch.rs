//! The `oom` report's `pytorch` object: an out-of-memory failure in PyTorch's terms, when
//! the trace has the caching allocator's tensors on the failing device. "Allocated" is
//! the tensors live then, "reserved" the device memory live then (the allocator's
//! segments, and any other allocation of the process on that device). For the block
//! PyTorch's allocator refused (a failure of kind `tensor`, from
//! `c10::reportOutOfMemoryToProfiler`), allocated and reserved are the allocator's own
//! totals it reported with it, and `message` is its `OutOfMemoryError`'s message as the
//! trace's torch composes it (`torch_version`; 2.15's wording when its package is not on
//! this machine), with the same numbers and rounding (c10's `format_size`): the segment
//! it tried to allocate (`get_allocation_size` of the block), the device's total and free
//! memory, this process's memory in use from the NVML sample taken at the failure (when
//! NVML was sampled), allocated and reserved-but-unallocated, and the closing advice, which
//! depends on whether expandable segments were on. A failed CUDA call gets no message:
//! PyTorch printed none for it (it retries, and may recover).

use std::collections::HashMap;

use gpumemprof_format::{AllocFailed, MemKind};

use super::model::{NvmlAtFailure, TensorSite, TorchAtFailure};
use super::scan::Moment;
use crate::report::level::site;
use crate::symbolize::Symbolizer;
use crate::torch_conf::AllocConf;
use crate::torch_version::TorchVersion;

/// What torch adds after "... reserved by PyTorch but unallocated.": the fragmentation
/// advice, and, from 2.15 with expandable segments on, the advice on address space instead
/// (`closing_advice`).
const ADVICE: &str = " If reserved but unallocated memory is large try setting \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation \
    for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html\
    #optimizing-memory-usage-with-pytorch-cuda-alloc-conf)";
const ADVICE_EXPANDABLE: &str = " expandable_segments is enabled. If instead the process is \
    running out of virtual address space (VSZ), expandable segments may be over-reserving VA \
    (each segment reserves ~9/8 of device memory, times the number of streams); reduce it via \
    PYTORCH_CUDA_ALLOC_CONF expandable_segments_reserve / expandable_segments_reserve_by_class.";

/// `None` unless tensors of that device were recorded before the failure. `conf`: the
/// allocator's configuration; `nvml`: the NVML sample of the failing device.
pub fn at_failure(
    call: &AllocFailed,
    moment: &Moment,
    sym: &mut Symbolizer,
    (top, frames): (usize, usize),
    conf: &AllocConf,
    nvml: Option<&NvmlAtFailure>,
) -> Option<TorchAtFailure> {
    let r = &moment.replayed;
    // A refused tensor is PyTorch's own report (with its own totals); a failed CUDA call
    // is PyTorch's when its tensors were seen on that device.
    let refused = call.kind == MemKind::Tensor;
    if !refused
        && !r.allocators.iter().any(|f| {
            f.device == call.device
                && f.allocations > 0
                && f.framework == gpumemprof_format::FRAMEWORK_PYTORCH
        })
    {
        return None;
    }
    let (mut allocated, mut tensors, mut reserved) = (0u64, 0u64, 0u64);
    let mut by_stack: HashMap<u64, (u64, u64)> = HashMap::new();
    for a in r.live.iter().filter(|a| a.device == call.device) {
        match a.kind {
            MemKind::Tensor => {
                allocated = allocated.saturating_add(a.size);
                tensors += 1;
                let s = by_stack.entry(a.stack).or_default();
                s.0 = s.0.saturating_add(a.size);
                s.1 += 1;
            }
            MemKind::Device => reserved = reserved.saturating_add(a.size),
            _ => {}
        }
    }
    if refused {
        // The allocator's figures as it raised the error: the very numbers of its message.
        (allocated, reserved) = (call.stream, call.pool);
    }
    let mut sites: Vec<(u64, (u64, u64))> = by_stack.into_iter().collect();
    sites.sort_by(|(sa, a), (sb, b)| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(sa.cmp(sb)));
    if top > 0 {
        sites.truncate(top);
    }
    let known = call.mem_total > 0;
    let cached = reserved.saturating_sub(allocated);
    let version = refused
        .then(|| crate::torch_version::of_modules(&r.modules))
        .flatten();
    let message = refused.then(|| {
        let mut m = format!(
            "Tried to allocate {}.",
            format_size(conf.allocation_size(call.size))
        );
        if known {
            m.push_str(&format!(
                " GPU {} has a total capacity of {} of which {} is free.",
                call.device,
                format_size(call.mem_total),
                format_size(call.mem_free)
            ));
        }
        m.push(' ');
        if let Some(n) = nvml.filter(|n| n.at_failure) {
            m.push_str(&format!(
                "Including non-PyTorch memory, this process has {} memory in use. ",
                format_size(n.process_used_bytes)
            ));
        }
        m.push_str(&format!(
            "Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch \
             but unallocated.",
            format_size(allocated),
            format_size(cached)
        ));
        m.push_str(closing_advice(conf, version.as_ref()));
        m
    });
    Some(TorchAtFailure {
        device: call.device,
        // The segment: what it asked CUDA for, or, refused, what its message names.
        tried_to_allocate_bytes: if refused {
            conf.allocation_size(call.size)
        } else {
            call.size
        },
        allocated_bytes: allocated,
        tensors,
        reserved_bytes: reserved,
        cached_bytes: cached,
        device_total_bytes: known.then_some(call.mem_total),
        device_free_bytes: known.then_some(call.mem_free),
        message,
        torch_version: version.map(|v| v.text),
        sites: sites
            .into_iter()
            .map(|(stack, (bytes, count))| TensorSite {
                stack_id: stack,
                bytes,
                count,
                site: site(&sym.stack(stack, 0)).cloned(),
                frames: sym.stack(stack, frames),
            })
            .collect(),
    })
}

/// The closing advice of PyTorch's message: with expandable segments on, torch 2.15 gives
/// the address-space advice; 2.11 (seen on an H100, 2026-11-26) the fragmentation advice
/// whatever the setting, and so do the versions between (not checked). A torch not on
/// this machine is taken as 2.15, the version the tests pin.
fn closing_advice(conf: &AllocConf, version: Option<&TorchVersion>) -> &'static str {
    let newer = version.is_none_or(|v| (v.major, v.minor) >= (2, 15));
    if conf.expandable_segments && newer {
        ADVICE_EXPANDABLE
    } else {
        ADVICE
    }
}

/// The cause of a refused block, in PyTorch's terms (docs/REPORTS.md lists the rules in
/// this order): the request alone exceeds the device (`exceeds_total`); the live tensors
/// and the request together do (`live_data`); what PyTorch reserved but had not allocated
/// and the device's free memory together would hold it, but no piece does
/// (`fragmentation`); else memory outside PyTorch's allocator took the rest (`untracked`).
pub fn cause_and_hint(
    call: &AllocFailed,
    t: &TorchAtFailure,
    conf: &AllocConf,
) -> (&'static str, String) {
    let b = crate::units::bytes;
    let (total, free, asked) = (call.mem_total, call.mem_free, t.tried_to_allocate_bytes);
    if asked > total {
        return (
            "exceeds_total",
            format!(
                "the {} asked is more than the device's {}: no freeing helps; ask for less \
                 (a smaller batch, a sharded model)",
                b(asked),
                b(total)
            ),
        );
    }
    if t.allocated_bytes.saturating_add(asked) > total {
        return (
            "live_data",
            format!(
                "the {} of live tensors and the {} asked are more than the device's {}: the \
                 tensors below must go first (a smaller batch, activation checkpointing, \
                 freeing what is kept)",
                b(t.allocated_bytes),
                b(asked),
                b(total)
            ),
        );
    }
    if t.cached_bytes.saturating_add(free) >= asked {
        let remedy = if conf.expandable_segments {
            "expandable segments are on already: fewer, more uniform tensors help"
        } else {
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets PyTorch give back the \
             unused pages of its segments"
        };
        return (
            "fragmentation",
            format!(
                "PyTorch had {} reserved but unallocated and the device {} free, together \
                 at least the {} asked, but in pieces smaller than it (cached in segments that \
                 hold live tensors): fragmentation; {remedy}",
                b(t.cached_bytes),
                b(free),
                b(asked)
            ),
        );
    }
    let outside = total.saturating_sub(free).saturating_sub(t.reserved_bytes);
    (
        "untracked",
        format!(
            "{} of the device was used outside PyTorch's allocator (the CUDA context, \
             libraries' own memory, other processes): that is what the {} asked lacked",
            b(outside),
            b(asked)
        ),
    )
}

/// c10's `format_size`: bytes up to 1024, then KiB, MiB up to 1 GiB inclusive, then GiB,
/// with two decimals.
pub fn format_size(size: u64) -> String {
    let s = size as f64;
    if size <= 1024 {
        format!("{size} bytes")
    } else if size <= 1 << 20 {
        format!("{:.2} KiB", s / 1024.0)
    } else if size <= 1 << 30 {
        format!("{:.2} MiB", s / 1048576.0)
    } else {
        format!("{:.2} GiB", s / 1073741824.0)
    }
}

#[cfg(test)]
mod tests {
    use super::format_size;

    /// As PyTorch words sizes in its out-of-memory message.
    #[test]
    fn sizes_as_c10_formats_them() {
        assert_eq!(format_size(512), "512 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(8 << 20), "8.00 MiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(64 << 30), "64.00 GiB");
    }

    use super::{closing_advice, AllocConf, TorchVersion, ADVICE, ADVICE_EXPANDABLE};

    fn version(minor: u32) -> TorchVersion {
        TorchVersion {
            major: 2,
            minor,
            text: format!("2.{minor}.0"),
        }
    }

    /// What torch 2.11 printed on an H100 with expandable segments on, and 2.15 on the
    /// simulated GPU: the closing advice is the version's.
    #[test]
    fn the_closing_advice_is_the_versions() {
        let on = AllocConf {
            expandable_segments: true,
            ..AllocConf::default()
        };
        let off = AllocConf::default();
        assert_eq!(closing_advice(&on, Some(&version(11))), ADVICE);
        assert_eq!(closing_advice(&on, Some(&version(15))), ADVICE_EXPANDABLE);
        assert_eq!(closing_advice(&on, Some(&version(16))), ADVICE_EXPANDABLE);
        assert_eq!(closing_advice(&on, None), ADVICE_EXPANDABLE);
        assert_eq!(closing_advice(&off, Some(&version(15))), ADVICE);
        assert_eq!(closing_advice(&off, None), ADVICE);
    }
}
