//! End to end, NVML's view beside the hooks': the writer thread's samples of what the process
//! uses on each device (`GPUMEMPROF_NVML_MS`), on the simulated NVML (`tests/sim/nvml_sim.c`),
//! which reports the simulated context and the memory the runtime handed out.

use gpumemprof_tests::profiled::*;
use gpumemprof_tests::sim_dir;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The environment of the simulated NVML with a 64 MiB context, and `more`.
fn nvml_env(more: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("SIMCUDA_CONTEXT_BYTES", (64 * MIB).to_string()),
        ("LD_LIBRARY_PATH", sim_dir().display().to_string()),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

fn run_nvml(dir: &str, program: &str, args: &[&str], env: &[(&'static str, String)]) -> Run {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let run = run_profiled(&scratch(dir), program, args, &env);
    run.assert_ok();
    run
}

/// NVML: samples of what the process uses, and the memory the hooks did not see
/// (the simulated context's 64 MiB).
#[test]
fn nvml_samples_show_the_memory_the_hooks_did_not_see() {
    let run = run_nvml(
        "nvml_samples",
        "nvml_gap",
        &[],
        &nvml_env(&[("GPUMEMPROF_NVML_MS", "20")]),
    );
    let s = report("summary", &run.trace, &[]);
    let nvml = s["nvml"].as_array().unwrap();
    assert_eq!(nvml.len(), 1, "{s:#}");
    let d = &nvml[0];
    assert_eq!(d["device"], 0);
    assert!(d["samples"].as_u64().unwrap() >= 5, "{d}");
    assert_eq!(d["peak_used_bytes"], 164 * MIB);
    assert_eq!(d["tracked_at_peak_bytes"], 100 * MIB);
    assert_eq!(d["untracked_at_peak_bytes"], 64 * MIB);
    assert_eq!(d["device_total_bytes"], 16 * GIB);

    // Without NVML on the library path: no samples, and nothing printed about it.
    let dir = scratch("nvml_absent");
    let run = run_profiled(&dir, "nvml_gap", &[], &[("GPUMEMPROF_NVML_MS", "20")]);
    run.assert_ok();
    assert_eq!(shim_lines(&run.stderr()).len(), 2, "{}", run.stderr());
    let s = report("summary", &run.trace, &[]);
    assert_eq!(s["nvml"], serde_json::json!([]));
}

/// Samples a minute apart: only the first regular one falls in this run, before the
/// program allocated anything. The shim samples again right after the live device memory
/// rose 16 MiB above what it was at the last sample (here by 100 MiB at once), so NVML's
/// view of the job's memory is there: 2 samples, the second at the peak.
#[test]
fn a_rise_of_live_memory_between_two_samples_is_sampled_at_once() {
    let run = run_nvml(
        "nvml_rise",
        "nvml_gap",
        &[],
        &nvml_env(&[("GPUMEMPROF_NVML_MS", "60000")]),
    );
    let s = report("summary", &run.trace, &[]);
    let d = &s["nvml"][0];
    assert_eq!(d["samples"], 2, "{d}");
    assert_eq!(d["peak_used_bytes"], 164 * MIB, "{d}");
    assert_eq!(d["tracked_at_peak_bytes"], 100 * MIB, "{d}");
}

/// Memory that churns at one level, as PyTorch's does without its cache
/// (PYTORCH_NO_CUDA_MEMORY_CACHING=1: a cudaMalloc and a cudaFree per tensor, the same bytes
/// every step): 100 rounds of 48 MiB, 4.7 GiB allocated in 0.2 s, but the level rose once.
/// NVML is asked for that one rise, not after every 16 MiB allocated: on an H200 that rule
/// asked it every 11.7 ms of such a job (187 samples in 2.2 s), each query a call into the
/// kernel driver as the job's cudaMalloc and cudaFree are, and the job ran 10% slower with
/// the shim. 2 samples: the first regular one and the rise to 48 MiB.
#[test]
fn memory_that_churns_at_one_level_is_sampled_for_its_rise_only() {
    let run = run_nvml(
        "nvml_churn",
        "nvml_churn",
        &["100", "48", "2000"],
        &nvml_env(&[("GPUMEMPROF_NVML_MS", "60000")]),
    );
    let s = report("summary", &run.trace, &[]);
    let d = &s["nvml"][0];
    assert_eq!(d["samples"], 2, "{d}");
    assert_eq!(d["peak_used_bytes"], 112 * MIB, "{d}");
    assert_eq!(d["tracked_at_peak_bytes"], 48 * MIB, "{d}");
    let device = s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "device")
        .unwrap();
    assert_eq!(device["allocations"], 100, "{device}");
    assert_eq!(device["frees"], 100, "{device}");
}

/// Each sample carries how long NVML took to answer (`query_ns`): NVML's figure is of a
/// moment in that window, and the analyzer sets it against the most the hooks tracked in
/// it. The simulated NVML here takes 2 ms a query, as a real one takes about one.
#[test]
fn each_sample_says_how_long_nvml_took_to_answer() {
    let run = run_nvml(
        "nvml_query_time",
        "nvml_gap",
        &[],
        &nvml_env(&[("GPUMEMPROF_NVML_MS", "50"), ("SIMNVML_QUERY_US", "2000")]),
    );
    let (_, records) = decode(&run.trace);
    let took: Vec<u64> = (records.iter())
        .filter_map(|r| match r {
            gpumemprof_format::Record::Sample(m) => Some(m.query_ns),
            _ => None,
        })
        .collect();
    assert!(took.len() >= 3, "{took:?}");
    assert!(
        took.iter()
            .all(|&ns| (2_000_000..1_000_000_000).contains(&ns)),
        "{took:?}"
    );
    let s = report("summary", &run.trace, &[]);
    let d = &s["nvml"][0];
    assert_eq!(
        (&d["peak_used_bytes"], &d["untracked_at_peak_bytes"]),
        (&(164 * MIB).into(), &(64 * MIB).into()),
        "{d}"
    );
}
