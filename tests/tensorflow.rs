//! TensorFlow's real BFC allocator on the simulated GPU: `libtensorflow_framework.so.2` and
//! the headers `tsl::BFCAllocator` needs, from the pinned tensorflow wheel (about 570 MB,
//! of which the library and about 60 MB of headers are kept, see `wheels`), and the harness
//! `tests/tensorflow/bfc_allocator.cpp` compiled against them and the simulated
//! `libcudart.so.12` (built once per test process).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::{repo_root, sim_dir};

/// The pinned wheel (the release whose `tsl::BFCAllocator` entry points the shim hooks).
pub const WHEELS: &[&str] = &["tensorflow==2.21.0"];

/// The harness program (its run paths find TensorFlow's library and the simulated runtime).
pub fn harness() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = crate::wheels::extracted(
            "tensorflow",
            WHEELS,
            &[
                "tensorflow/libtensorflow_framework.so.2",
                "tensorflow/include/Eigen/",
                "tensorflow/include/unsupported/",
                "tensorflow/include/google/",
                "tensorflow/include/absl/",
                "tensorflow/include/xla/",
                "tensorflow/include/tsl/",
                "tensorflow/include/ml_dtypes/",
            ],
        );
        let tf = root.join("tensorflow");
        assert!(
            tf.join("libtensorflow_framework.so.2").is_file(),
            "no libtensorflow_framework.so.2 in {WHEELS:?}"
        );
        let dir = crate::wheels::build_dir("tensorflow");
        let exe = dir.join("bfc_allocator");
        // The simulated runtime first: TensorFlow's library carries its own `cuda*` stubs.
        crate::wheels::built(
            Command::new("g++")
                .args(["-std=c++17", "-g", "-O1", "-fno-omit-frame-pointer"])
                .arg("-Wno-deprecated-declarations")
                .arg("-I")
                .arg(tf.join("include"))
                .arg("-I")
                .arg(repo_root().join("tests/sim/include"))
                .arg("-o")
                .arg(&exe)
                .arg(repo_root().join("tests/tensorflow/bfc_allocator.cpp"))
                .arg(format!("-L{}", sim_dir().display()))
                .arg("-lcudart")
                .arg(format!("-Wl,-rpath,{}", sim_dir().display()))
                .arg(format!("-L{}", tf.display()))
                .arg("-l:libtensorflow_framework.so.2")
                .arg(format!("-Wl,-rpath,{}", tf.display())),
            "building tests/tensorflow/bfc_allocator.cpp against libtensorflow_framework.so.2",
        );
        exe
    })
}
