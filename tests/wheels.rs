//! Pinned wheels from PyPI for the tests that run code we did not write (the torch package,
//! PyTorch's and TensorFlow's own allocators): downloaded once into `target/<profile>/<name>/`
//! with pip, either installed whole (`installed`) or with only the files the tests need kept
//! (`extracted`, the wheels themselves deleted). A machine that cannot download them fails the
//! test with pip's message: it never passes without running.

use std::path::PathBuf;
use std::process::Command;

use crate::target_dir;

/// The wheels `pins` (CPython 3.11, manylinux x86_64), their files whose paths equal or
/// start with one of `keep` extracted into the returned folder; a later call with the same
/// pins finds them there. Concurrent test processes wait on a lock file.
pub fn extracted(name: &str, pins: &[&str], keep: &[&str]) -> PathBuf {
    let want = format!("{}\n{}", pins.join("\n"), keep.join("\n"));
    let (root, _lock) = locked(name);
    let out = root.join("extracted");
    let marker = root.join(".extracted");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
        return out;
    }
    let download = root.join("wheels");
    let _ = std::fs::remove_dir_all(&out);
    pip("download", pins, "-d", &download);
    let extract = "import sys, zipfile\n\
                   out, keep = sys.argv[1], sys.argv[2].split('\\n')\n\
                   for w in sys.argv[3:]:\n\
                   \x20   z = zipfile.ZipFile(w)\n\
                   \x20   for n in z.namelist():\n\
                   \x20       if any(n == k or (k.endswith('/') and n.startswith(k)) for k in keep):\n\
                   \x20           z.extract(n, out)\n";
    let wheels: Vec<PathBuf> = std::fs::read_dir(&download)
        .expect("list the downloaded wheels")
        .map(|e| e.expect("a wheel").path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    let done = Command::new("python3")
        .arg("-c")
        .arg(extract)
        .arg(&out)
        .arg(keep.join("\n"))
        .args(&wheels)
        .output()
        .expect("run python3 to extract the wheels");
    assert!(
        done.status.success(),
        "extracting {wheels:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let _ = std::fs::remove_dir_all(&download);
    std::fs::write(&marker, want).expect("write the wheels marker");
    out
}

/// The wheels `pins` (CPython 3.11, manylinux x86_64, no dependencies beyond the pins)
/// installed whole into the returned folder, `target/<profile>/<name>/site-packages` (put it
/// on `PYTHONPATH`; named as a virtual environment names it, so paths in reports read as a
/// user's do); a later call with the same pins finds them there.
pub fn installed(name: &str, pins: &[&str]) -> PathBuf {
    let want = pins.join("\n");
    let (root, _lock) = locked(name);
    let site = root.join("site-packages");
    let marker = root.join(".installed");
    if site.is_dir() && std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
        return site;
    }
    let _ = std::fs::remove_dir_all(&site);
    pip("install", pins, "--target", &site);
    std::fs::write(&marker, want).expect("write the wheels marker");
    site
}

/// `target/<profile>/<name>/`, created, and its lock, held until the returned file is
/// dropped (concurrent test processes wait for each other's downloads).
fn locked(name: &str) -> (PathBuf, std::fs::File) {
    let root = target_dir().join(name);
    std::fs::create_dir_all(&root).expect("create the wheels folder");
    let lock = std::fs::File::create(root.join(".lock")).expect("create the wheels lock file");
    lock.lock().expect("lock the wheels folder");
    (root, lock)
}

/// `pip <verb> --no-deps <pins> <flag> <dir>` for CPython 3.11 on manylinux x86_64 wheels;
/// panics with pip's output when it fails.
fn pip(verb: &str, pins: &[&str], flag: &str, dir: &std::path::Path) {
    let got = Command::new("python3")
        .args(["-m", "pip", verb, "--quiet", "--no-deps"])
        .args(["--disable-pip-version-check", "--no-input"])
        .args(["--only-binary=:all:", "--python-version", "3.11"])
        .args(["--platform", "manylinux_2_28_x86_64"])
        .args(["--platform", "manylinux_2_27_x86_64"])
        .args(["--platform", "manylinux_2_17_x86_64"])
        .arg(flag)
        .arg(dir)
        .args(pins)
        .output()
        .expect("run python3 -m pip");
    assert!(
        got.status.success(),
        "pip could not {verb} {pins:?} into {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&got.stderr)
    );
}

/// Runs a build step of a harness; panics with its stderr, naming `what`, if it fails.
pub fn built(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {:?}: {e}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh folder for this test process's build of harness `name`:
/// `target/<profile>/<name>/build.<pid>` (each process builds its own, so test processes
/// running at once never share one). The folders of processes that have ended are removed.
pub fn build_dir(name: &str) -> PathBuf {
    let parent = target_dir().join(name);
    let me = std::process::id();
    for entry in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix("build."))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = parent.join(format!("build.{me}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}
