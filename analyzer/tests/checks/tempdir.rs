//! A fresh directory per test, shared by the analyzer's integration tests (included with
//! `#[path = "checks/tempdir.rs"] mod tempdir;`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system temp dir, unique per test and process, removed
/// when the test ends (kept if it fails, to look at).
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `suite` names the test file, `name` the test.
    pub fn new(suite: &str, name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "gpumemprof-{suite}-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
