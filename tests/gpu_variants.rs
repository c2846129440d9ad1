//! `tests/gpu/variants.py`, the real-GPU tool that times torch_train.py without the shim, with
//! it, and with it under extra settings, in turn (tests/gpu/README.md), run here on the torch
//! package and the simulated GPU: the rounds, the variants' order and settings, and its refusals.

use std::process::{Command, Output};

use gpumemprof_tests::profiled::scratch;
use gpumemprof_tests::torch_package::package;
use gpumemprof_tests::{analyzer_path, repo_root, shim_path};
use serde_json::Value;

/// `python3 tests/gpu/variants.py args...` on the torch package, 5 timed steps a run, its
/// JSON written into `out`.
fn variants(out: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd: Command = package().command("python3");
    cmd.arg(repo_root().join("tests/gpu/variants.py"))
        .args(args)
        .current_dir(repo_root())
        .env("GPUMEMPROF_SHIM", shim_path())
        .env("GPUMEMPROF_ANALYZER", analyzer_path())
        .env("GPUMEMPROF_GPU_SUITE_STEPS", "5")
        .env("OUT", out);
    cmd.output().expect("run python3")
}

#[test]
fn each_variant_runs_once_a_round_under_its_own_settings() {
    let dir = scratch("gpu_variants_rounds");
    let out = variants(&dir, &["nocache", "2", "nvml_off=GPUMEMPROF_NVML_MS=0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.join("variants.json")).unwrap()).unwrap();
    assert_eq!(doc["mode"], "nocache");
    assert_eq!(doc["rounds"], 2);
    let rows = doc["variants"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["plain", "shim", "nvml_off"]);
    for row in rows {
        assert_eq!(row["runs_ms"].as_array().unwrap().len(), 2, "{row}");
    }
    // The plain runs write no trace; the shim asks NVML (the package's stand-in) at least at
    // its start; GPUMEMPROF_NVML_MS=0 turns the sampler off, so its traces hold none.
    assert_eq!(rows[0]["nvml_samples"], serde_json::json!([]));
    for samples in rows[1]["nvml_samples"].as_array().unwrap() {
        assert!(samples.as_u64().unwrap() >= 1, "{rows:?}");
    }
    assert_eq!(rows[2]["nvml_samples"], serde_json::json!([0, 0]));
    // Round 1 starts one variant later: shim, nvml_off, plain.
    let round1: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("round 1 "))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(round1, ["shim", "nvml_off", "plain"]);
}

#[test]
fn an_unknown_mode_no_rounds_or_a_malformed_variant_is_refused_before_any_run() {
    let dir = scratch("gpu_variants_refused");
    // Exit 1 and the one line it printed.
    let refused = |args: &[&str]| {
        let out = variants(&dir, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    assert_eq!(
        refused(&["cached", "1"]),
        "variants.py: unknown mode 'cached' (one of default, expandable, async, nocache)"
    );
    assert_eq!(
        refused(&["nocache", "0"]),
        "variants.py: ROUNDS must be a whole number from 1, not '0'"
    );
    assert_eq!(
        refused(&["nocache", "1", "nvml_off=GPUMEMPROF_NVML_MS"]),
        "variants.py: 'nvml_off=GPUMEMPROF_NVML_MS' is not NAME=VAR=VALUE[,VAR=VALUE...]"
    );
    assert!(!dir.join("variants.json").exists());
}
