//! Source paths as reports show them: the way a user types them, not the way the process
//! happened to spell them. `/abs/dir/../src/train.py` reads `/abs/src/train.py`; a file
//! under the profiled process's working directory (the trace header's `cwd`) reads relative
//! to it (`src/train.py`); a file of an installed package reads from the package's own
//! folder (`.../site-packages/torch/optim/adam.py` reads `torch/optim/adam.py`, as Python's
//! own tracebacks let users find it). Applied once, where frames are made (`symbolize`), so
//! text, JSON, HTML, flamegraphs and exports agree.

use std::path::{Component, Path, PathBuf};

/// Folders whose children are installed packages (the part after the last one is shown).
const PACKAGE_ROOTS: &[&str] = &["site-packages", "dist-packages"];

/// `path` as reports show it, for a process that ran in `cwd` (see the module comment).
pub fn shown(path: &str, cwd: Option<&str>) -> String {
    if !path.starts_with('/') {
        return path.to_string();
    }
    let normal = lexical(Path::new(path));
    let parts: Vec<Component> = normal.components().collect();
    if let Some(root) = parts
        .iter()
        .rposition(|c| matches!(c, Component::Normal(n) if PACKAGE_ROOTS.iter().any(|r| n == r)))
    {
        if root + 1 < parts.len() {
            return parts[root + 1..]
                .iter()
                .collect::<PathBuf>()
                .display()
                .to_string();
        }
    }
    if let Some(cwd) = cwd.filter(|c| c.starts_with('/')) {
        if let Ok(rest) = normal.strip_prefix(lexical(Path::new(cwd))) {
            if !rest.as_os_str().is_empty() {
                return rest.display().to_string();
            }
        }
    }
    normal.display().to_string()
}

/// `path` with `.` and `..` resolved by name (no file system access: the files may be on
/// another machine); `..` at the root stays at the root.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                // At the root `pop` fails and the root stays.
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn paths_read_as_users_type_them() {
        let cwd = Some("/home/ada/proj");
        // Relative to the working directory, `..` resolved first.
        assert_eq!(shown("/home/ada/proj/train.py", cwd), "train.py");
        assert_eq!(
            shown("/home/ada/proj/tools/../src/train.py", cwd),
            "src/train.py"
        );
        assert_eq!(shown("/home/ada/proj/./src/train.py", cwd), "src/train.py");
        // An installed package from its own folder, wherever the environment is.
        assert_eq!(
            shown(
                "/opt/venv/lib/python3.11/site-packages/torch/optim/adam.py",
                cwd
            ),
            "torch/optim/adam.py"
        );
        assert_eq!(
            shown(
                "/home/ada/proj/.venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                cwd
            ),
            "torch/nn/modules/linear.py"
        );
        assert_eq!(
            shown(
                "/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py",
                cwd
            ),
            "numpy/core/fromnumeric.py"
        );
        // Elsewhere: absolute, normalised; the working directory itself and the root kept.
        assert_eq!(
            shown("/usr/lib/python3.11/threading.py", cwd),
            "/usr/lib/python3.11/threading.py"
        );
        assert_eq!(shown("/home/ada/other/../x.c", cwd), "/home/ada/x.c");
        assert_eq!(
            shown("/home/ada/projects/x.c", cwd),
            "/home/ada/projects/x.c"
        );
        assert_eq!(shown("/home/ada/proj", cwd), "/home/ada/proj");
        assert_eq!(shown("/../x.c", None), "/x.c");
        // Unknown working directory, relative or special names: as they are.
        assert_eq!(
            shown("/home/ada/proj/train.py", None),
            "/home/ada/proj/train.py"
        );
        assert_eq!(
            shown("<frozen importlib._bootstrap>", cwd),
            "<frozen importlib._bootstrap>"
        );
        assert_eq!(shown("train.py", cwd), "train.py");
        assert_eq!(shown("/x/site-packages", cwd), "/x/site-packages");
    }
}
