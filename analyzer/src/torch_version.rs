//! Which torch a trace ran: read from the installed package beside the PyTorch library the
//! trace loaded (`<torch>/lib/libc10*.so` → `<torch>/version.py`), as symbols are read from
//! the modules' files. PyTorch's messages vary by version (the out-of-memory error's closing
//! advice), so what we say PyTorch said follows it. Unknown when the package is not on
//! this machine.

use std::path::Path;

use gpumemprof_format::Module;

/// A torch version: (major, minor), and the whole string (`2.11.0+cu130`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchVersion {
    pub major: u32,
    pub minor: u32,
    pub text: String,
}

/// The version of the torch package whose `lib/libc10*` the trace loaded, from its
/// `version.py`; `None` when no such module, or its package is not readable here.
pub fn of_modules(modules: &[Module]) -> Option<TorchVersion> {
    modules.iter().find_map(|m| {
        let lib = Path::new(&m.path);
        let name = lib.file_name()?.to_str()?;
        if !name.starts_with("libc10") {
            return None;
        }
        let package = lib.parent().filter(|d| d.ends_with("lib"))?.parent()?;
        // A version.py is small: read at most a few KiB of it.
        let text = read_head(&package.join("version.py"), 8192)?;
        parse(&text)
    })
}

/// The first `max` bytes of a regular file (a trace names the path: never open a pipe or a
/// device, which could block or never end).
fn read_head(path: &Path, max: u64) -> Option<String> {
    use std::io::Read;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut s = String::new();
    (std::fs::File::open(path).ok()?.take(max))
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// `__version__ = '2.11.0+cu130'` (either quote) in a torch `version.py`.
pub fn parse(version_py: &str) -> Option<TorchVersion> {
    let line = version_py
        .lines()
        .find(|l| l.trim_start().starts_with("__version__"))?;
    let value = line.split_once('=')?.1.trim();
    let text = value.trim_matches(|c| c == '\'' || c == '"').to_owned();
    let mut numbers = text.split(['.', '+']).map(|p| p.parse::<u32>());
    let (major, minor) = (numbers.next()?.ok()?, numbers.next()?.ok()?);
    Some(TorchVersion { major, minor, text })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_of_a_torch_package_is_read_with_either_quote() {
        let v =
            parse("from typing import Optional\n__version__ = '2.11.0+cu130'\ngit_version = 'x'\n");
        assert_eq!(
            v,
            Some(TorchVersion {
                major: 2,
                minor: 11,
                text: "2.11.0+cu130".to_owned()
            })
        );
        assert_eq!(parse("__version__ = \"2.15.0\"").map(|v| v.minor), Some(15));
        assert_eq!(parse("version = '2.1'"), None);
        assert_eq!(parse("__version__ = 'nightly'"), None);
    }

    #[test]
    fn the_package_is_found_beside_the_libc10_the_trace_loaded() {
        let dir =
            std::env::temp_dir().join(format!("gpumemprof-torch-version-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("torch/lib")).unwrap();
        std::fs::write(
            dir.join("torch/version.py"),
            "__version__ = '2.11.0+cu130'\n",
        )
        .unwrap();
        let module = |path: &Path| Module {
            time_ns: 0,
            bias: 0,
            start: 0,
            end: 1,
            path: path.to_str().unwrap().to_owned(),
            build_id: Vec::new(),
        };
        let c10 = module(&dir.join("torch/lib/libc10_cuda.so"));
        let other = module(&dir.join("torch/lib/libtorch_cuda.so"));
        assert_eq!(of_modules(&[other.clone(), c10]).map(|v| v.minor), Some(11));
        assert_eq!(of_modules(&[other]), None);
        assert_eq!(
            of_modules(&[module(Path::new("/nowhere/torch/lib/libc10.so"))]),
            None
        );
        // A version.py that is a pipe (a trace names the path) is not read: it would block.
        std::fs::remove_file(dir.join("torch/version.py")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.join("torch/version.py"))
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let c10 = module(&dir.join("torch/lib/libc10_cuda.so"));
        assert_eq!(of_modules(&[c10]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
