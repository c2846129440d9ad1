//! `gpumemprof whatif TRACE`: would the job have fitted under another allocator
//! configuration, on another device, or with larger tensors (the engine is `whatif`; this
//! is its command line and its text).

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common;
use crate::error::Error;
use crate::units;
use crate::whatif::report::{self, Figures, WhatIfReport};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file written by the shim (of a job that imported torch).
    pub trace: PathBuf,
    /// A setting of PYTORCH_CUDA_ALLOC_CONF, in PyTorch's syntax
    /// (expandable_segments:True, max_split_size_mb:256, garbage_collection_threshold:0.8,
    /// roundup_power2_divisions:4, per_process_memory_fraction:0.9, ...), over the job's
    /// own; repeat it, or give a comma list.
    #[arg(long = "set", value_name = "KEY:VALUE", value_parser = set_arg)]
    pub set: Vec<String>,
    /// The device's memory (e.g. 80GiB; default: the job's device, as the trace knows it).
    #[arg(long, value_name = "SIZE", value_parser = common::size_arg)]
    pub device_memory: Option<u64>,
    /// Every tensor K times larger (a batch K times larger, to first order).
    #[arg(long, value_name = "K", default_value_t = 1.0, value_parser = scale_arg)]
    pub scale: f64,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A `--set` value PyTorch would refuse is a usage error (its reason in words).
fn set_arg(text: &str) -> Result<String, String> {
    crate::torch_conf::AllocConf::default().apply(text)?;
    Ok(text.to_string())
}

fn scale_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(k) if k > 0.0 && k.is_finite() && k <= 1e6 => Ok(k),
        _ => Err(format!("{text:?}: give a factor above 0, e.g. 2 or 0.5")),
    }
}

pub fn run(args: &Args) -> Result<(), Error> {
    let request = report::Request {
        set: args.set.clone(),
        scale: args.scale,
        device_memory: args.device_memory,
    };
    let report = report::analyze(&args.trace, &request)?;
    common::emit(args.json, &report, write_text)
}

/// Whether the report asks anything beyond replaying the job as it ran.
fn asks_something(r: &WhatIfReport) -> bool {
    r.configuration != r.job_configuration || r.scale != 1.0 || r.device_memory_bytes.is_some()
}

/// A line of the table: its name and how a policy's figures give its value.
type Row = (&'static str, fn(&Figures) -> String);

fn fits(f: &Figures) -> String {
    match &f.first_oom {
        None => "yes".into(),
        Some(o) if o.as_recorded => "no: out of memory, as the job was".into(),
        Some(_) => "no: out of memory".into(),
    }
}

fn oom_cell(f: &Figures) -> String {
    match &f.first_oom {
        None => "-".into(),
        Some(o) => format!(
            "{} at {}",
            units::bytes(o.size_bytes),
            units::secs(o.time_ns)
        ),
    }
}

/// Who asked for the block that did not fit, under the table.
fn oom_site(who: &str, f: &Figures, out: &mut dyn Write) -> io::Result<()> {
    if let Some(o) = &f.first_oom {
        let site = (o.site.as_ref())
            .map_or("(no line of the program's in its stack)".into(), |s| {
                s.describe()
            });
        writeln!(
            out,
            "  {who} ran out of memory asking for {} (tried to allocate {}) from {site}",
            units::bytes(o.size_bytes),
            units::bytes(o.tried_to_allocate_bytes)
        )?;
    }
    Ok(())
}

pub fn write_text(r: &WhatIfReport, out: &mut dyn Write) -> io::Result<()> {
    let job_conf = if r.job_configuration.is_empty() {
        "PyTorch's default allocator configuration".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={}", r.job_configuration)
    };
    let asked = asks_something(r);
    let mut what = Vec::new();
    if r.configuration != r.job_configuration {
        let conf = if r.configuration.is_empty() {
            "PyTorch's defaults"
        } else {
            &r.configuration
        };
        what.push(format!("with {conf}"));
    }
    if r.scale != 1.0 {
        what.push(format!("tensors {} times larger", r.scale));
    }
    if let Some(m) = r.device_memory_bytes {
        what.push(format!("on a device of {}", units::bytes(m)));
    }
    if asked {
        writeln!(
            out,
            "What if: {} (the job ran with {job_conf})",
            what.join(", ")
        )?;
    } else {
        writeln!(out, "The job replayed under its own policy ({job_conf})")?;
    }
    for d in &r.devices {
        let size = d
            .device_memory_bytes
            .map_or("size unknown".to_string(), units::bytes);
        writeln!(
            out,
            "\ndevice {}: {size}, of which {} held by others than PyTorch's allocator",
            units::device(d.device),
            units::bytes(d.other_memory_bytes)
        )?;
        let rows: [Row; 7] = [
            ("fits", fits),
            ("peak allocated", |f| units::bytes(f.peak_allocated_bytes)),
            ("peak reserved", |f| units::bytes(f.peak_reserved_bytes)),
            ("reserved but unallocated", |f| {
                units::bytes(f.fragmentation_at_peak_bytes)
            }),
            ("segments freed (syncs)", |f| f.device_frees.to_string()),
            ("allocation retries", |f| f.alloc_retries.to_string()),
            ("first out-of-memory", oom_cell),
        ];
        let job: Vec<String> = rows.iter().map(|(_, v)| v(&d.job)).collect();
        let width = (job.iter().map(|s| s.chars().count()))
            .chain(["the job's policy".len()])
            .max()
            .unwrap_or(0)
            + 3;
        if asked {
            writeln!(out, "  {:<26}{:<width$}what if", "", "the job's policy")?;
        }
        for ((name, value), job) in rows.iter().zip(&job) {
            if asked {
                writeln!(out, "  {name:<26}{job:<width$}{}", value(&d.whatif))?;
            } else {
                writeln!(out, "  {name:<26}{job}")?;
            }
        }
        oom_site("the job's policy", &d.job, out)?;
        if asked {
            oom_site("the what-if", &d.whatif, out)?;
        }
        writeln!(
            out,
            "  (the job: {} allocated and {} reserved at their peaks; reserved but \
             unallocated is taken when reserved peaked)",
            units::bytes(d.recorded_peak_allocated_bytes),
            units::bytes(d.recorded_peak_reserved_bytes)
        )?;
    }
    let f = &r.fidelity;
    writeln!(out)?;
    if f.matched {
        let mut line = format!(
            "Fidelity: replaying the job's own policy reproduced reserved and allocated at \
             all {} tensor events",
            f.tensor_events
        );
        if f.out_of_memory_errors > 0 {
            line.push_str(&format!(
                ", and the job's {} at the same request",
                units::plural(
                    f.out_of_memory_errors,
                    "out-of-memory error",
                    "out-of-memory errors"
                )
            ));
        }
        writeln!(out, "{line}.")?;
    } else {
        writeln!(
            out,
            "Fidelity: NOT MATCHED. Replaying the job's own policy reproduced reserved at {} \
             and allocated at {} of {} tensor events, and {} of {} out-of-memory errors: \
             read the what-if figures as estimates.",
            f.reserved_matched,
            f.allocated_matched,
            f.tensor_events,
            f.out_of_memory_matched,
            f.out_of_memory_errors
        )?;
        if let Some(d) = &f.first_divergence {
            writeln!(
                out,
                "  first divergence: event {} at {}{}: reserved {} in the job, {} replayed; \
                 allocated {} in the job, {} replayed",
                d.event_index,
                units::secs(d.time_ns),
                d.site
                    .as_ref()
                    .map_or(String::new(), |s| format!(" from {}", s.describe())),
                units::bytes(d.recorded_reserved_bytes),
                units::bytes(d.modelled_reserved_bytes),
                units::bytes(d.recorded_allocated_bytes),
                units::bytes(d.modelled_allocated_bytes)
            )?;
        }
    }
    if f.empty_cache_calls > 0 {
        writeln!(
            out,
            "  ({} inferred where the allocator gave memory back between allocations)",
            units::plural(f.empty_cache_calls, "empty_cache call", "empty_cache calls")
        )?;
    }
    for n in &r.notes {
        writeln!(out, "Note: {n}.")?;
    }
    Ok(())
}
