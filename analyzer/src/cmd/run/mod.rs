//! `gpumemprof run [OPTIONS] -- CMD [ARGS...]`: runs a command under the shim, the way
//! `memray run` does for Python. It finds `libgpumemprof.so` beside this executable,
//! puts it first in `LD_PRELOAD` (the user's own preloads stay after it), sets the shim's
//! variables and the framework modes (`env.rs` plans every change), runs the command,
//! forwards the signals a launcher receives, and ends with the child's exit status and
//! the list of traces the whole process tree wrote.
//!
//! ```text
//!  gpumemprof run ──spawn──► CMD (LD_PRELOAD=shim, GPUMEMPROF_TRACE_LIST=list)
//!     │ SIGINT/TERM/HUP/QUIT blocked,    ├─ fork/exec'd children inherit both
//!     │ taken with sigwaitinfo:          └─ each shim appends its trace's path to list
//!     │ kill(child, sig), unless it came from the terminal (the child, in the same
//!     │ foreground process group, already has it)
//!     └─ SIGCHLD: waitpid ─► read list ─► "N traces written" ─► exit like the child
//! ```

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args as ClapArgs;

use gpumemprof_format::template;

use crate::error::Error;
use crate::term;

mod env;
mod next;
pub use env::{merge_backend, plan, Modes, Plan};

/// What the shim writes when neither `-o` nor `GPUMEMPROF_OUTPUT` says otherwise (the
/// shim's `Config::default().output`).
pub const DEFAULT_TEMPLATE: &str = "gpumemprof.%p.trace";
/// The shim's file name, beside this executable or in `<prefix>/lib`.
const SHIM: &str = "libgpumemprof.so";
/// Signals a launcher receives on behalf of the program and passes on.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// `env`'s and `timeout`'s statuses for a command that could not be started.
const NOT_FOUND: u8 = 127;
const NOT_EXECUTABLE: u8 = 126;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Trace path template, passed as GPUMEMPROF_OUTPUT: %p pid, %h host, %r rank, %t
    /// start time, %% a percent sign [default: GPUMEMPROF_OUTPUT, else gpumemprof.%p.trace].
    #[arg(short = 'o', long = "output", value_name = "TEMPLATE")]
    pub output: Option<String>,
    /// Replace an existing trace at the output path (a template without %p or %t names
    /// one file, checked before the command starts).
    #[arg(short = 'f', long)]
    pub force: bool,
    #[command(flatten)]
    pub modes: Modes,
    /// The command to run and its arguments (after `--` if they start with `-`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// Runs the launcher; returns the child's exit status (128 + N if signal N killed it),
/// 1 for the launcher's own failures, 126/127 if the command cannot be started.
pub fn main(args: &Args) -> ExitCode {
    match launch(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            term::report_failure(&e);
            ExitCode::from(e.exit().code())
        }
    }
}

fn launch(args: &Args) -> Result<u8, Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Failed(format!("cannot find this executable's path: {e}")))?;
    let shim = find_shim(&exe).ok_or_else(|| {
        let dir = exe.parent().unwrap_or(Path::new("."));
        Error::Failed(format!(
            "{SHIM} not found beside {exe} (looked in {dir}, {dir}/deps, {dir}/../lib and the gpumemprof Python package under {dir}/../lib/python3.*/site-packages): install it there, or run the program with LD_PRELOAD=/path/to/{SHIM}",
            exe = exe.display(),
            dir = dir.display()
        ))
    })?;
    let get = |name: &str| std::env::var_os(name);
    let template = args
        .output
        .clone()
        .or_else(|| get("GPUMEMPROF_OUTPUT").map(|v| v.to_string_lossy().into_owned()))
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string());
    check_folder(&template)?;
    if !varies(&template) {
        refuse_or_remove(&expand(&template, 0), args.force)?;
    }
    let plan = plan(&args.modes, args.output.as_deref(), &shim, get);
    for w in &plan.warnings {
        term::warn(w);
    }
    let list = TraceList::open(get("GPUMEMPROF_TRACE_LIST"));
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    for (name, value) in &plan.set {
        cmd.env(name, value);
    }
    if let Some(l) = &list {
        cmd.env("GPUMEMPROF_TRACE_LIST", &l.path);
    }
    let program = args.command[0].to_string_lossy().into_owned();
    let signals = Signals::block();
    signals.restore_in_child(&mut cmd);
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            term::report_failure(&Error::Failed(format!("cannot run {program}: {e}")));
            return Ok(match e.kind() {
                io::ErrorKind::NotFound => NOT_FOUND,
                _ => NOT_EXECUTABLE,
            });
        }
    };
    let pid = child.id();
    let expected = absolute(&expand(&template, pid));
    if !term::quiet() {
        eprintln!("gpumemprof: writing {}", quote(&display(&expected)));
    }
    let status = signals.wait_forwarding(pid as libc::pid_t)?;
    let traces = match &list {
        Some(l) => l.traces(),
        None if Path::new(&expected).exists() => vec![expected.clone()],
        None => Vec::new(),
    };
    if !term::quiet() {
        let flight_recorder = get("GPUMEMPROF_MODE").is_some_and(|m| m == "oom");
        report_end(&program, status, &traces, &expected, flight_recorder);
    }
    Ok(exit_code(status))
}

/// `libgpumemprof.so` beside `exe` (a cargo build folder: the newer of it and `deps/`'s,
/// as tests/support.rs `newest_shim` picks), else in the install layout `<prefix>/bin`
/// -> `<prefix>/lib`, else in the Python package beside it (`pip install gpumemprof`:
/// `<prefix>/bin` -> `<prefix>/lib/python3.X/site-packages/gpumemprof/libgpumemprof*.so`).
pub fn find_shim(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    let beside = [dir.join(SHIM), dir.join("deps").join(SHIM)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, p)| p);
    beside.or_else(|| {
        let lib = dir.parent()?.join("lib");
        let installed = lib.join(SHIM);
        if installed.is_file() {
            return Some(installed);
        }
        python_package_shim(&lib)
    })
}

/// The shim of the `gpumemprof` Python package under `lib` (`python3.X/site-packages/
/// gpumemprof/`, the newest Python first), named as setuptools-rust names it
/// (`libgpumemprof.abi3.so`).
fn python_package_shim(lib: &Path) -> Option<PathBuf> {
    let mut pythons: Vec<PathBuf> = (std::fs::read_dir(lib).ok()?)
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            (p.file_name().and_then(|n| n.to_str())).is_some_and(|n| n.starts_with("python3"))
        })
        .collect();
    pythons.sort_by_key(|p| std::cmp::Reverse(python_minor(p)));
    pythons.into_iter().find_map(|py| {
        let package = py.join("site-packages").join("gpumemprof");
        let mut shims: Vec<PathBuf> = (std::fs::read_dir(&package).ok()?)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                (p.file_name().and_then(|n| n.to_str()))
                    .is_some_and(|n| n.starts_with("libgpumemprof") && n.ends_with(".so"))
            })
            .collect();
        shims.sort();
        shims.into_iter().next()
    })
}

/// `python3.12` -> 12 (0 when it does not parse).
fn python_minor(dir: &Path) -> u32 {
    (dir.file_name().and_then(|n| n.to_str()))
        .and_then(|n| n.strip_prefix("python3."))
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Whether the template names a different file per process (`%p`, or `%t`, which the
/// launcher cannot know before the shim starts).
pub fn varies(template: &str) -> bool {
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('p') | Some('t') => return true,
                _ => {}
            }
        }
    }
    false
}

/// The shim's expansion (`gpumemprof_format::template`) for a process `pid` started now:
/// `%t` is the launcher's clock, the shim's is its first allocation's, so a `%t` path
/// printed at start may differ by the seconds between (the list at the end is exact).
pub fn expand(template: &str, pid: u32) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ph = template::Placeholders::new(pid, now, |k| std::env::var(k).ok());
    template::expand(template, &ph)
}

/// The traces' folder must exist (the shim creates files, not folders): said before the
/// command starts rather than by each process's warning that it runs unprofiled. A folder
/// named with `%p` or `%t` cannot be checked in advance.
fn check_folder(template: &str) -> Result<(), Error> {
    let Some((folder, _)) = template.rsplit_once('/') else {
        return Ok(());
    };
    if folder.is_empty() || varies(folder) {
        return Ok(());
    }
    let folder = expand(folder, 0);
    if Path::new(&folder).is_dir() {
        return Ok(());
    }
    Err(Error::Failed(format!(
        "{folder}: no such folder for the traces; create it, or choose another path with -o"
    )))
}

/// An existing trace at a fixed output path: refused without `-f`, removed with it (the
/// shim never overwrites: it would write `PATH.1` instead).
fn refuse_or_remove(path: &str, force: bool) -> Result<(), Error> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if !force {
        return Err(Error::Failed(format!(
            "{path}: already exists; pass -f to overwrite it, or choose another path with -o"
        )));
    }
    std::fs::remove_file(path).map_err(|source| Error::File {
        what: format!("removing {path} (-f)"),
        source,
    })
}

/// The file every shim of the process tree appends its trace's path to: the user's
/// `GPUMEMPROF_TRACE_LIST` (only what is appended during the run is read), or a private
/// file in the temporary folder, removed at the end.
struct TraceList {
    path: PathBuf,
    start: u64,
    ours: bool,
}

impl TraceList {
    fn open(user: Option<OsString>) -> Option<TraceList> {
        if let Some(p) = user.filter(|p| !p.is_empty()) {
            let path = PathBuf::from(p);
            let start = std::fs::metadata(&path).map_or(0, |m| m.len());
            return Some(TraceList {
                path,
                start,
                ours: false,
            });
        }
        use std::os::unix::fs::OpenOptionsExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "gpumemprof-run.{}.{nanos}.list",
            std::process::id()
        ));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(_) => Some(TraceList {
                path,
                start: 0,
                ours: true,
            }),
            Err(e) => {
                term::warn(&format!(
                    "cannot create {} ({e}): only the first process's trace will be listed",
                    path.display()
                ));
                None
            }
        }
    }

    /// The traces listed during the run, in the order they were created, each once.
    fn traces(&self) -> Vec<String> {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let start = (self.start as usize).min(bytes.len());
        let text = String::from_utf8_lossy(&bytes[start..]);
        let mut traces: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            if !traces.iter().any(|t| t == line) {
                traces.push(line.to_string());
            }
        }
        traces
    }
}

impl Drop for TraceList {
    fn drop(&mut self) {
        if self.ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The forwarded signals and SIGCHLD, blocked in this (the only) thread so none is lost
/// between spawning and waiting, and taken one at a time with `sigwaitinfo`.
struct Signals {
    set: libc::sigset_t,
    /// The mask and SIGCHLD disposition the launcher started with: the program gets
    /// them back, as it would have without the launcher.
    old_mask: libc::sigset_t,
    chld_ignored: bool,
}

impl Signals {
    fn block() -> Signals {
        // SAFETY: sigset_t and sigaction are plain data, initialised by sigemptyset and
        // sigaction; the mask and the SIGCHLD disposition are this process's own.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
                libc::sigaddset(&mut set, sig);
            }
            // An inherited SIG_IGN for SIGCHLD would reap the child before waitpid does.
            let chld_ignored = libc::signal(libc::SIGCHLD, libc::SIG_DFL) == libc::SIG_IGN;
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            Signals {
                set,
                old_mask,
                chld_ignored,
            }
        }
    }

    /// Gives the program the launcher's original mask and SIGCHLD disposition, between
    /// fork and exec (std's spawn keeps the parent's mask, which now blocks the forwarded
    /// signals).
    fn restore_in_child(&self, cmd: &mut Command) {
        let (mask, chld_ignored) = (self.old_mask, self.chld_ignored);
        // SAFETY: the closure only calls async-signal-safe functions on copied data.
        unsafe {
            cmd.pre_exec(move || {
                if chld_ignored {
                    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                }
                libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
                Ok(())
            });
        }
    }

    /// Waits for the child to end, passing each forwarded signal on; returns its status.
    fn wait_forwarding(&self, pid: libc::pid_t) -> Result<libc::c_int, Error> {
        loop {
            let mut status = 0;
            // SAFETY: status is a valid out-pointer.
            match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
                p if p == pid => return Ok(status),
                0 => {}
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(Error::Failed(format!("waiting for the program: {e}")));
                    }
                }
            }
            // SAFETY: a zeroed siginfo_t is a valid out-buffer; the set is initialised.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let sig = unsafe { libc::sigwaitinfo(&self.set, &mut info) };
            if sig <= 0 || sig == libc::SIGCHLD {
                continue; // EINTR, or the child changed state: waitpid above tells
            }
            // From the terminal (Ctrl-C, Ctrl-\, hangup): the kernel sent it to the whole
            // foreground process group, the program included; a second copy would look
            // like a second Ctrl-C (which many programs take as "quit now").
            if info.si_code == libc::SI_KERNEL {
                continue;
            }
            // SAFETY: kill has no memory preconditions; the child is not reaped yet, so
            // its pid cannot have been reused.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// The launcher's exit status: the child's, or 128 + N when signal N ended it.
fn exit_code(status: libc::c_int) -> u8 {
    if libc::WIFSIGNALED(status) {
        (128 + libc::WTERMSIG(status)) as u8
    } else {
        libc::WEXITSTATUS(status) as u8
    }
}

/// `path` made absolute against the working directory (the shim lists absolute paths).
fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    std::env::current_dir().map_or_else(
        |_| path.to_string(),
        |cwd| cwd.join(path).to_string_lossy().into_owned(),
    )
}

/// `path` relative to the working directory when it is inside it (shorter to read and
/// to paste), else as it is.
fn display(path: &str) -> String {
    let Ok(cwd) = std::env::current_dir() else {
        return path.to_string();
    };
    match Path::new(path).strip_prefix(&cwd) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

/// A path as a shell word: quoted only if it needs to be.
pub fn quote(path: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./%+,:=@".contains(c);
    if !path.is_empty() && path.chars().all(plain) {
        path.to_string()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

/// The closing lines: how the program ended (if not normally), the traces, what next.
fn report_end(
    program: &str,
    status: libc::c_int,
    traces: &[String],
    expected: &str,
    flight_recorder: bool,
) {
    if libc::WIFSIGNALED(status) {
        let name = gpumemprof_format::Ending::describe_signal(libc::WTERMSIG(status) as u32);
        eprintln!("gpumemprof: {program} was ended by {name}");
    }
    match traces {
        [] if flight_recorder => eprintln!("gpumemprof: no trace written: no process of the command ran out of GPU memory (GPUMEMPROF_MODE=oom writes a trace only then)"),
        [] => eprintln!("gpumemprof: no trace written: no process of the command allocated GPU memory the shim saw"),
        [one] => eprintln!("gpumemprof: 1 trace written: {}", quote(&display(one))),
        _ => {
            eprintln!("gpumemprof: {} traces written:", traces.len());
            for t in traces {
                eprintln!("gpumemprof:   {}", quote(&display(t)));
            }
        }
    }
    // The command's own process first: the one the user started; with several, all of
    // them (`summary` of several traces gives one line per process and the highest).
    if let Some(first) = traces.iter().find(|t| *t == expected).or(traces.first()) {
        let ordered: Vec<&str> = std::iter::once(first.as_str())
            .chain(traces.iter().filter(|t| *t != first).map(String::as_str))
            .collect();
        let quoted: Vec<String> = ordered.iter().map(|t| quote(&display(t))).collect();
        eprintln!("gpumemprof: next: {}", next::command(&quoted, &ordered));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_that_name_one_file_per_process() {
        assert!(varies("gpumemprof.%p.trace"));
        assert!(varies("/t/%h-%t"));
        assert!(!varies("/t/%h-r%r.trace"));
        assert!(!varies("100%%p.trace"));
    }

    #[test]
    fn expansion_follows_the_shim() {
        assert_eq!(expand("a.%p.%%.%x.trace%", 42), "a.42.%.%x.trace%");
        assert_eq!(expand("%h", 1), template::hostname());
        assert_eq!(expand("%t", 1).len(), "20260102-030405".len());
    }

    #[test]
    fn exit_codes_pass_the_childs_on() {
        // Wait statuses as the kernel encodes them: exit code << 8, or the signal number.
        assert_eq!(exit_code(7 << 8), 7);
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(libc::SIGKILL), 137);
        assert_eq!(exit_code(libc::SIGINT), 130);
    }

    #[test]
    fn shell_words() {
        assert_eq!(quote("/t/gpumemprof.42.trace"), "/t/gpumemprof.42.trace");
        assert_eq!(quote("my trace"), "'my trace'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn shim_beside_or_installed() {
        let root = std::env::temp_dir().join(format!("gmp-run-shim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        assert_eq!(find_shim(&bin.join("gpumemprof")), None);
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::write(root.join("lib").join(SHIM), b"").unwrap();
        assert_eq!(
            find_shim(&bin.join("gpumemprof")),
            Some(root.join("lib").join(SHIM))
        );
        // pip's layout: the package's shim, in the newest Python's site-packages.
        std::fs::remove_file(root.join("lib").join(SHIM)).unwrap();
        for py in ["python3.9", "python3.11"] {
            let package = root.join("lib").join(py).join("site-packages/gpumemprof");
            std::fs::create_dir_all(&package).unwrap();
            std::fs::write(package.join("libgpumemprof.abi3.so"), b"").unwrap();
            std::fs::write(package.join("__init__.py"), b"").unwrap();
        }
        assert_eq!(
            find_shim(&bin.join("gpumemprof")),
            Some(root.join("lib/python3.11/site-packages/gpumemprof/libgpumemprof.abi3.so"))
        );
        std::fs::create_dir_all(bin.join("deps")).unwrap();
        std::fs::write(bin.join("deps").join(SHIM), b"").unwrap();
        assert_eq!(
            find_shim(&bin.join("gpumemprof")),
            Some(bin.join("deps").join(SHIM))
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
