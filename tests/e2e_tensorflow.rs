//! End to end on TensorFlow's own BFC allocator (`tsl::BFCAllocator` of the pinned
//! tensorflow wheel, see `support::tensorflow`) over device memory from the simulated CUDA
//! runtime: the shim's definitions of `AllocateRaw`/`DeallocateRaw` are the ones the
//! allocator's vtable reaches, so its tensors are seen at the harness's lines, with the
//! allocator's own numbers (`GetStats`, printed by the harness); its regions are the
//! `cudaMalloc` segments. A host allocator (pinned memory) made and destroyed first, at the
//! very address the device allocator is then made at, has no tensors: its memory type is
//! asked on every call, never remembered per address.

#[path = "../analyzer/tests/checks/schema.rs"]
mod schema;

use std::collections::BTreeMap;
use std::process::Command;

use gpumemprof_tests::profiled::{preload, report, scratch, succeeded};
use gpumemprof_tests::tensorflow::harness;
use gpumemprof_tests::{source_line_of, SIM_ENV};
use serde_json::json;

const MIB: u64 = 1 << 20;
const SOURCE: &str = "tests/tensorflow/bfc_allocator.cpp";

#[test]
fn tensorflows_bfc_allocator_is_seen_as_tensors_at_the_users_line() {
    let dir = scratch("tensorflow_bfc");
    let trace = dir.join("harness.trace");
    let run = |traced: bool| {
        let mut cmd = Command::new(harness());
        for var in SIM_ENV {
            cmd.env_remove(var);
        }
        if traced {
            preload(&mut cmd, &trace);
        }
        let out = succeeded(&mut cmd, "the harness");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = run(false);
    assert_eq!(run(true), plain, "the same output with the shim");
    let f: BTreeMap<&str, u64> = plain
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k, v.parse().expect("a number")))
        .collect();
    // The allocator's own numbers: 4 kept tensors in 4 MiB chunks, one 1 MiB at a time.
    assert_eq!(
        (f["in_use"], f["peak"], f["allocs"]),
        (16 * MIB, 17 * MIB, 14)
    );

    let s = report("summary", &trace, &[]);
    schema::assert_valid("summary", &s);
    assert_eq!(
        (
            &s["allocators"][0]["framework"],
            &s["allocators"][0]["tensor_allocations"],
            &s["allocators"][0]["allocated_peak_bytes"],
            &s["allocators"][0]["allocated_bytes"],
        ),
        (
            &json!("tensorflow"),
            &json!(f["allocs"]),
            &json!(f["peak"]),
            &json!(f["in_use"])
        )
    );
    let l = report("leaks", &trace, &[]);
    schema::assert_valid("leaks", &l);
    assert_eq!(l["level"], "tensors");
    assert_eq!(
        (&l["total_bytes"], &l["total_count"]),
        (&json!(f["in_use"]), &json!(4))
    );
    let keep = u64::from(source_line_of(SOURCE, "GPUMEMPROF-TF-KEEP"));
    assert_eq!(l["groups"][0]["site"]["function"], "keep_activations");
    assert_eq!(l["groups"][0]["site"]["line"], json!(keep));
    let p = report("peak", &trace, &[]);
    assert_eq!(p["peaks"][0]["peak_bytes"], json!(f["peak"]));
    // The regions: the allocator's cudaMalloc calls, the segments.
    let seg = report("leaks", &trace, &["--level", "segments"]);
    assert_eq!(seg["groups"][0]["kind"], "device");
    // The Parquet rows name TensorFlow's entry point: the device allocator's 14 tensors,
    // none of the host allocator's 3 blocks.
    let allocations = gpumemprof_tests::duck::export_tables(&trace, &dir.join("tables"));
    let rows = gpumemprof_tests::duck::query(&format!(
        "SELECT api, count(*) FROM '{}' WHERE kind = 'tensor' GROUP BY api",
        allocations.display()
    ));
    assert_eq!(
        rows,
        vec![vec![json!("tsl::BFCAllocator::AllocateRaw"), json!(14)]]
    );
}
