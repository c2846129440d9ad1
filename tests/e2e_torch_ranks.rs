//! End to end on the real thing, several ranks: a data-parallel job of two ranks under
//! `torchrun` (`tests/programs/torch_ranks.py`: the unmodified torch package, the `nccl`
//! backend over the stand-in NCCL, one simulated GPU per rank) under `gpumemprof run`; the
//! job folder's reports speak tensors as one trace's do: each rank's allocated and reserved
//! peaks are PyTorch's own, and the merged leaks are the one rank's leak, at the user's line.

use std::time::Duration;

use gpumemprof_tests::profiled::{analyzer, report, scratch, trace_files};
use gpumemprof_tests::running::run_within;
use gpumemprof_tests::source_line_of;
use gpumemprof_tests::torch_job::assert_peaks_are_pytorchs;
use gpumemprof_tests::torch_package::package;
use serde_json::Value;

const STEPS: &str = "3";

#[test]
fn a_torchrun_job_reads_per_rank_in_pytorchs_terms() {
    let dir = scratch("torch_ranks");
    let mut cmd = package().command(gpumemprof_tests::analyzer_path());
    cmd.arg("run")
        .arg("-o")
        .arg(dir.join("job.r%r.trace"))
        .args([
            "--",
            "python3",
            "-m",
            "torch.distributed.run",
            "--standalone",
        ])
        .args(["--nproc-per-node", "2"])
        .arg(gpumemprof_tests::repo_root().join("tests/programs/torch_ranks.py"))
        .arg(STEPS)
        .env("SIMCUDA_DEVICES", "2")
        .env("GPUMEMPROF_NVML_MS", "0")
        .current_dir(gpumemprof_tests::repo_root());
    let ended = run_within(cmd, Duration::from_secs(300));
    assert_eq!(ended.code(), Some(0), "{}", ended.stderr);
    assert_eq!(trace_files(&dir).len(), 2);
    // What each rank's PyTorch said, by rank.
    let mut said: Vec<Value> = ended
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event"] == "done")
        .collect();
    said.sort_by_key(|l| l["rank"].as_u64());
    assert_eq!(said.len(), 2, "{}", ended.stdout);

    let summary = report("summary", &dir, &[]);
    let traces = summary["traces"].as_array().expect("traces");
    for (t, s) in traces.iter().zip(&said) {
        assert_eq!(t["rank"], s["rank"]);
        assert_eq!(t["level"], "tensors");
        assert_peaks_are_pytorchs(t, s);
    }
    // Rank 1 trains on twice the batch: the higher allocated peak.
    assert_eq!(summary["highest"]["rank"], 1);
    assert_eq!(
        summary["highest"]["peak_bytes"],
        said[1]["stats"]["allocated_bytes.all.peak"]
    );

    // The odd rank keeps each step's output (128 x 128 float32, 64 KiB) in a module-level
    // list: freed only at exit, leaked; rank 0 leaks nothing.
    let leaks = report("leaks", &dir, &[]);
    let leaked: Vec<u64> = leaks["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["leaked_bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(leaked, vec![0, 3 * 65536]);
    // The simulated torch keeps no library workspace to the end: all of it is the
    // program's own.
    let workspaces: Vec<(u64, u64)> = leaks["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = |f: &str| t[f].as_u64().unwrap();
            (n("workspaces_bytes"), n("workspaces_count"))
        })
        .collect();
    assert_eq!(workspaces, vec![(0, 0), (0, 0)]);
    assert_eq!(
        (&leaks["workspaces_bytes"], &leaks["workspaces_count"]),
        (&Value::from(0), &Value::from(0))
    );
    let sites = leaks["sites"].as_array().expect("sites");
    assert_eq!(sites.len(), 1);
    assert_eq!(
        (&sites[0]["kind"], &sites[0]["count"]),
        (&Value::from("tensor"), &Value::from(3))
    );
    assert_eq!(sites[0]["ranks"], serde_json::json!([1]));
    let user = sites[0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "main")
        .expect("the user's line");
    assert_eq!(user["file"], "tests/programs/torch_ranks.py");
    assert_eq!(
        user["line"],
        source_line_of("tests/programs/torch_ranks.py", "out = model(batch)")
    );
    // The gate checks each rank's leak.
    let gate = analyzer()
        .arg("leaks")
        .arg(&dir)
        .args(["--max-leaked", "0"])
        .output()
        .expect("run gpumemprof");
    assert_eq!(gate.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&gate.stderr).contains("rank 1"));
}
