//! `gpumemprof diagnose OUT_DIR TRACE`: one folder to attach to a bug report or keep with a
//! CI run: a copy of the trace, every report as JSON (summary, peak, leaks, analyze, info),
//! `environment.json` (this machine, its NVIDIA driver, and what the trace's header says
//! about the traced process: its environment allow-list, never the whole environment), and
//! `manifest.json` listing each file with its size and SHA-256.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::common;
use super::info::{self, ApiCounter, HeaderFacts, ANALYZER_VERSION};
use crate::error::Error;
use crate::nvml::{self, NvmlInfo};
use crate::report::analyze::{self, Analysis};
use crate::report::level::MemoryLevel;
use crate::report::teardown::Teardown;
use crate::report::{leaks, peak, summary, TraceInfo, SCHEMA_VERSION};
use crate::symbolize::Symbolizer;
use crate::term;
use crate::units;

/// The bundle's files besides the trace copy, in the order they are written.
pub const REPORT_FILES: [&str; 6] = [
    "summary.json",
    "peak.json",
    "leaks.json",
    "analyze.json",
    "info.json",
    "environment.json",
];
pub const MANIFEST: &str = "manifest.json";

#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub analyzer_version: &'static str,
    /// When the bundle was made, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// The trace as given on the command line.
    pub source_trace: String,
    pub trace: TraceInfo,
    /// Every file of the bundle except this manifest.
    pub files: Vec<FileEntry>,
    /// The bundle's folder (for the text output; the manifest lies in it).
    #[serde(skip)]
    pub dir: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    /// File name inside the bundle.
    pub name: String,
    /// "trace", "summary", "peak", "leaks", "analyze", "info" or "environment".
    pub content: String,
    pub bytes: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub schema_version: u32,
    pub analyzer_version: &'static str,
    /// The machine the bundle was made on (not necessarily the traced one).
    pub analysis_host: HostFacts,
    /// NVML on this machine.
    pub nvml: NvmlInfo,
    /// What the trace's header says about the traced process and its machine.
    pub traced_process: HeaderFacts,
    pub traced_argv: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostFacts {
    pub hostname: String,
    /// `uname`: system name, release and machine ("Linux", "6.1.0-18-amd64", "x86_64").
    pub os: String,
    pub kernel: String,
    pub machine: String,
    pub cpus: u64,
    /// `MemTotal` of /proc/meminfo; null if unreadable.
    pub memory_total_bytes: Option<u64>,
}

fn uname_field(field: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub fn host_facts() -> HostFacts {
    // SAFETY: a zeroed utsname is a valid out-buffer.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer.
    let ok = unsafe { libc::uname(&mut u) } == 0;
    let field = |f: &[libc::c_char]| if ok { uname_field(f) } else { "unknown".into() };
    let memory_total_bytes = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| {
            let kib = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
            kib.trim().parse::<u64>().ok().map(|k| k * 1024)
        })
    });
    HostFacts {
        hostname: gpumemprof_format::template::hostname(),
        os: field(&u.sysname),
        kernel: field(&u.release),
        machine: field(&u.machine),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        memory_total_bytes,
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks that `dir` may receive the bundle, and creates it.
fn prepare(dir: &Path, force: bool) -> Result<(), Error> {
    if dir.exists() {
        if !dir.is_dir() {
            return Err(Error::Failed(format!(
                "{}: exists and is not a directory: name a new directory for the bundle",
                dir.display()
            )));
        }
        let mut entries = std::fs::read_dir(dir).map_err(|source| Error::File {
            what: format!("reading {}", dir.display()),
            source,
        })?;
        if entries.next().is_some() && !force {
            return Err(Error::Failed(format!(
                "{}: the directory is not empty: pass -f to write the bundle into it (files of \
                 the same names are replaced), or name a new directory",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::File {
        what: format!("creating {}", dir.display()),
        source,
    })
}

struct Bundle {
    dir: PathBuf,
    force: bool,
    files: Vec<FileEntry>,
}

impl Bundle {
    fn write_json<T: Serialize>(
        &mut self,
        name: &str,
        content: &str,
        value: &T,
    ) -> Result<(), Error> {
        let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Output(e.into()))?;
        bytes.push(b'\n');
        let path = self.dir.join(name);
        let mut f = term::create_output(&path, self.force)?;
        f.write_all(&bytes).map_err(|source| Error::File {
            what: format!("writing {}", path.display()),
            source,
        })?;
        self.files.push(FileEntry {
            name: name.into(),
            content: content.into(),
            bytes: bytes.len() as u64,
            sha256: hex(&Sha256::digest(&bytes)),
        });
        Ok(())
    }

    /// Copies the trace, hashing it on the way.
    fn copy_trace(&mut self, trace: &Path, name: &str) -> Result<(), Error> {
        let mut from = File::open(trace).map_err(|source| Error::Open {
            path: trace.to_owned(),
            source,
        })?;
        let path = self.dir.join(name);
        let mut to = term::create_output(&path, self.force)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut bytes = 0u64;
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Error::File {
                        what: format!("reading {}", trace.display()),
                        source,
                    })
                }
            };
            if term::interrupted() {
                return Err(Error::Interrupted);
            }
            hasher.update(&buf[..n]);
            to.write_all(&buf[..n]).map_err(|source| Error::File {
                what: format!("writing {}", path.display()),
                source,
            })?;
            bytes += n as u64;
        }
        self.files.push(FileEntry {
            name: name.into(),
            content: "trace".into(),
            bytes,
            sha256: hex(&hasher.finalize()),
        });
        Ok(())
    }
}

/// The name the trace copy gets: its own, unless it is one of the bundle's names.
fn trace_name(trace: &Path) -> String {
    let name = trace
        .file_name()
        .map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned());
    if name == MANIFEST || REPORT_FILES.contains(&name.as_str()) {
        format!("trace-{name}")
    } else {
        name
    }
}

/// Makes the bundle; returns its manifest. `frames`: frames per site in the reports.
pub fn run(dir: &Path, trace: &Path, force: bool, frames: usize) -> Result<Manifest, Error> {
    prepare(dir, force)?;
    let mut analysis = Analysis::new();
    let mut counter = ApiCounter::new();
    let loaded = crate::input::load_keeping_exit(trace, &mut [&mut analysis, &mut counter])?;
    let r = &loaded.replayed;
    let info_of = || TraceInfo::new(trace, &loaded);
    let mut sym = Symbolizer::of(&loaded);
    let teardown = Teardown::find(&r.exit_tail, &mut sym);
    let mut bundle = Bundle {
        dir: dir.to_owned(),
        force,
        files: Vec::new(),
    };
    bundle.copy_trace(trace, &trace_name(trace))?;
    bundle.write_json("summary.json", "summary", &summary::build(info_of(), r))?;
    // Every site: a bundle is for reading later, without the trace's machine.
    bundle.write_json(
        "peak.json",
        "peak",
        &peak::build(info_of(), r, &mut sym, 0, frames, MemoryLevel::of(r, None)),
    )?;
    bundle.write_json(
        "leaks.json",
        "leaks",
        &leaks::build(
            info_of(),
            r,
            &mut sym,
            0,
            frames,
            MemoryLevel::of(r, None),
            teardown.as_ref(),
        ),
    )?;
    let oom = super::oom::explain(trace, r, frames)?;
    if let Some(oom) = &oom {
        bundle.write_json("oom.json", "oom", &super::oom::with_remedies(trace, oom))?;
    }
    let analyzed = analyze::build(
        info_of(),
        r,
        analysis,
        &mut sym,
        frames,
        oom.as_ref(),
        MemoryLevel::of(r, None),
        teardown.as_ref(),
    );
    bundle.write_json("analyze.json", "analyze", &analyzed)?;
    bundle.write_json(
        "info.json",
        "info",
        &info::trace(info_of(), &loaded, counter),
    )?;
    for w in sym.take_warnings() {
        term::warn(&w);
    }
    let environment = Environment {
        schema_version: SCHEMA_VERSION,
        analyzer_version: ANALYZER_VERSION,
        analysis_host: host_facts(),
        nvml: nvml::query(),
        traced_process: info::header_facts(&loaded.header),
        traced_argv: info_of().argv,
    };
    bundle.write_json("environment.json", "environment", &environment)?;
    let manifest = Manifest {
        schema_version: SCHEMA_VERSION,
        analyzer_version: ANALYZER_VERSION,
        created_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        source_trace: trace.display().to_string(),
        trace: info_of(),
        files: bundle.files.clone(),
        dir: dir.display().to_string(),
    };
    let mut bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Output(e.into()))?;
    bytes.push(b'\n');
    let path = dir.join(MANIFEST);
    term::create_output(&path, force)?
        .write_all(&bytes)
        .map_err(|source| Error::File {
            what: format!("writing {}", path.display()),
            source,
        })?;
    Ok(manifest)
}

pub fn write_text(m: &Manifest, out: &mut dyn Write) -> io::Result<()> {
    let total: u64 = m.files.iter().map(|f| f.bytes).sum();
    writeln!(
        out,
        "wrote {} files ({}) and {MANIFEST} to {}:",
        m.files.len(),
        units::bytes(total),
        m.dir
    )?;
    for f in &m.files {
        writeln!(
            out,
            "  {:<24} {:>10}  {}",
            f.name,
            units::bytes(f.bytes),
            f.content
        )?;
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bundle's folder (created; it must be empty unless -f).
    pub out_dir: PathBuf,
    /// The trace file written by the shim.
    pub trace: PathBuf,
    /// Write into a folder that is not empty (files of the same names are replaced).
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Stack frames per site in the reports (0: all).
    #[arg(long, value_name = "N", default_value_t = crate::report::DEFAULT_FRAMES)]
    pub frames: usize,
    /// Print the manifest as JSON instead of the list of files.
    #[arg(long)]
    pub json: bool,
}

pub fn run_args(args: &Args) -> Result<(), Error> {
    let manifest = run(&args.out_dir, &args.trace, args.force, args.frames)?;
    common::emit(args.json, &manifest, write_text)
}
