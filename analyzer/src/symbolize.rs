//! Symbolization: turns a stack's return addresses into frames (function, file, line,
//! inlined frames expanded) with the `addr2line` crate, reading the module files at the
//! paths the trace recorded. Runs off the hot path: only for stacks a report shows, with
//! one loader per file and one result per (address, module) cached.
//!
//! A file is only trusted when its GNU build-id matches the one recorded (if any was):
//! a rebuilt library at the same path would give confidently wrong lines. Untrusted or
//! missing files still give `module+0xoffset`.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;

use addr2line::Loader;
use gpumemprof_format::{as_python_frame, Module, PyCode};
use serde::Serialize;

use crate::replay::StackInfo;
use crate::source_paths;

/// One reported frame. Inlined calls expand into several frames for the same address,
/// innermost first; only the last of them (the function the code is in) has
/// `inlined: false`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// The return address as recorded, `0x…` (a string: JSON numbers above 2^53 are
    /// not exact in every reader).
    pub address: String,
    /// Path of the module containing the address.
    pub module: Option<String>,
    /// Demangled function name.
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub inlined: bool,
    /// A Python frame (`function` is the code object's qualified name, `file` and `line`
    /// where Python is executing); `address` is then the frame's word in the trace.
    pub python: bool,
    /// Return address minus the module's load bias, for `module+0xoffset` in text.
    #[serde(skip)]
    pub offset: Option<u64>,
    /// A framework frame shown under a name of its own (`torch_frames`): `op`
    /// (`aten::addmm`), `autograd_node` (`AddmmBackward0`), `workspace` (`cuBLAS
    /// workspace`) or `autograd_step` (`gradient matched to its input`); absent for
    /// every other frame and with `--native`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
}

impl Frame {
    fn bare(address: u64, module: Option<&Module>) -> Frame {
        Frame {
            address: format!("{address:#x}"),
            module: module.map(|m| m.path.clone()),
            function: None,
            file: None,
            line: None,
            inlined: false,
            offset: module.map(|m| address.wrapping_sub(m.bias)),
            python: false,
            role: None,
        }
    }

    /// A Python frame: the function and file of its code object (`?` if the trace never
    /// defined it), no module.
    fn python(word: u64, code: Option<&PyCode>, line: u32) -> Frame {
        Frame {
            address: format!("{word:#x}"),
            module: None,
            function: Some(code.map_or_else(|| "?".to_string(), |c| c.name.clone())),
            file: Some(code.map_or_else(|| "?".to_string(), |c| c.filename.clone())),
            line: Some(line),
            inlined: false,
            offset: None,
            python: true,
            role: None,
        }
    }

    /// `function at file:line`, else `function (module+0xoffset)`, else `module+0xoffset`,
    /// else the bare address; a framework frame with a role only its name (`aten::addmm`),
    /// an autograd node or engine step with the phase it runs in (`AddmmBackward0
    /// (backward)`).
    pub fn describe(&self) -> String {
        match (self.role, &self.function) {
            (Some("autograd_node" | "autograd_step"), Some(name)) => {
                return format!("{name} (backward)")
            }
            (Some(_), Some(name)) => return name.clone(),
            _ => {}
        }
        let place = match (&self.module, self.offset) {
            (Some(m), Some(off)) => {
                let name = Path::new(m).file_name().map_or(m.as_str(), |n| {
                    // Non-UTF-8 names cannot occur (the path is a String); be total anyway.
                    n.to_str().unwrap_or(m.as_str())
                });
                format!("{name}+{off:#x}")
            }
            _ => self.address.clone(),
        };
        let mut s = match (&self.function, &self.file) {
            (Some(f), Some(file)) => match self.line {
                Some(line) => format!("{f} at {file}:{line}"),
                None => format!("{f} at {file}"),
            },
            (Some(f), None) => format!("{f} ({place})"),
            (None, Some(file)) => match self.line {
                Some(line) => format!("{place} at {file}:{line}"),
                None => format!("{place} at {file}"),
            },
            (None, None) => place,
        };
        if self.inlined {
            s.push_str(" [inlined]");
        }
        s
    }
}

/// The profiled process's working directory, from a trace header (`cwd`).
pub fn cwd_of(header: &serde_json::Value) -> Option<String> {
    header
        .get("cwd")
        .and_then(|c| c.as_str())
        .map(str::to_owned)
}

/// A module file on disk, opened at most once.
struct ModuleFile {
    /// The file's GNU build-id; `None` if it has none or cannot be read.
    build_id: Option<Vec<u8>>,
    /// Opened on first trusted use; `None` inside when the file is missing or unreadable.
    loader: OnceCell<Option<Loader>>,
    /// Function symbols with their sizes, read on first need (see `SizedSymbols`).
    symbols: OnceCell<SizedSymbols>,
}

/// The file's function symbols (`.symtab` and `.dynsym`) with their extents, sorted.
///
/// Used when DWARF has no function for an address. The nearest preceding symbol is
/// not good enough: a stripped library (Debian's libc keeps only `.dynsym`) would name
/// `__libc_init_first` for code in the local `__libc_start_call_main`. A name is given
/// only when the address lies inside the symbol's [start, start + size).
///
/// The names stay in the mapped file: PyTorch's libraries have hundreds of thousands of
/// function symbols, and copying each name cost more than the lookups that need a few.
#[derive(Default)]
struct SizedSymbols {
    names: Names,
    /// (start, end, where the name starts in `names`, its length), sorted.
    symbols: Vec<(u64, u64, usize, usize)>,
}

/// Where the names are: the mapped file (or bytes of their own, in tests).
#[derive(Default)]
enum Names {
    #[default]
    None,
    Map(memmap2::Mmap),
    #[cfg(test)]
    Bytes(Vec<u8>),
}

impl Names {
    fn bytes(&self) -> &[u8] {
        match self {
            Names::None => &[],
            Names::Map(m) => m,
            #[cfg(test)]
            Names::Bytes(b) => b,
        }
    }
}

impl SizedSymbols {
    fn read(path: &str) -> SizedSymbols {
        use object::{Object, ObjectSymbol, SymbolKind};
        let Ok(file) = File::open(path) else {
            return SizedSymbols::default();
        };
        // SAFETY: the library is mapped read-only and only read while `map` lives; a file
        // truncated meanwhile could fault, as for any reader of a changing library (the
        // build-id check has already trusted it).
        let Ok(map) = (unsafe { memmap2::Mmap::map(&file) }) else {
            return SizedSymbols::default();
        };
        let Ok(parsed) = object::File::parse(&*map) else {
            return SizedSymbols::default();
        };
        let base = map.as_ptr() as usize;
        let mut symbols: Vec<(u64, u64, usize, usize)> = parsed
            .symbols()
            .chain(parsed.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| {
                let name = s.name_bytes().ok()?;
                Some((
                    s.address(),
                    s.address().saturating_add(s.size()),
                    (name.as_ptr() as usize).checked_sub(base)?,
                    name.len(),
                ))
            })
            .collect();
        let name = |&(_, _, at, len): &(u64, u64, usize, usize)| &map[at..at + len];
        symbols.sort_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| name(a).cmp(name(b)))
        });
        symbols.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        SizedSymbols {
            names: Names::Map(map),
            symbols,
        }
    }

    /// The name of the function symbol containing `svma`, if one does.
    fn containing(&self, svma: u64) -> Option<&str> {
        let map = self.names.bytes();
        let i = self.symbols.partition_point(|(start, ..)| *start <= svma);
        // Symbols may nest (aliases of different sizes): look back over those starting
        // at or before the address for one that still covers it.
        self.symbols[..i]
            .iter()
            .rev()
            .take(8)
            .find(|(_, end, ..)| svma < *end)
            .and_then(|&(_, _, at, len)| std::str::from_utf8(map.get(at..at + len)?).ok())
    }
}

pub struct Symbolizer<'a> {
    modules: &'a [Module],
    stacks: &'a HashMap<u64, StackInfo>,
    python: &'a HashMap<u64, PyCode>,
    files: HashMap<String, ModuleFile>,
    cache: HashMap<(u64, usize), Vec<Frame>>,
    distrusted: HashSet<String>,
    warnings: Vec<String>,
    /// The profiled process's working directory (the header's `cwd`), for `source_paths`.
    cwd: Option<String>,
}

impl<'a> Symbolizer<'a> {
    /// The symbolizer of a loaded trace: its modules, stacks and Python code, and its
    /// process's working directory.
    pub fn of(loaded: &'a crate::replay::Loaded) -> Self {
        let r = &loaded.replayed;
        Symbolizer::new(&r.modules, &r.stacks, &r.python).in_dir(cwd_of(&loaded.header))
    }

    /// Source paths under `cwd` are shown relative to it (`source_paths`).
    pub fn in_dir(mut self, cwd: Option<String>) -> Self {
        self.cwd = cwd;
        self
    }

    /// `python`: the trace's Python code objects, which Python frames in `stacks` name
    /// (`Replayed::python`).
    pub fn new(
        modules: &'a [Module],
        stacks: &'a HashMap<u64, StackInfo>,
        python: &'a HashMap<u64, PyCode>,
    ) -> Self {
        Symbolizer {
            modules,
            stacks,
            python,
            files: HashMap::new(),
            cache: HashMap::new(),
            distrusted: HashSet::new(),
            warnings: Vec::new(),
            cwd: None,
        }
    }

    /// Warnings for the user (one per distrusted file), to print on stderr.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The frames of stack `id`, innermost first: at most `max` native frames (0: all)
    /// and every Python frame (what the user wrote is never cut off by the frames of the
    /// libraries it calls). Unless `--native`, a stack is shown as its user reads it: with
    /// Python frames, Python first (see `glue`): the native frames above the innermost
    /// Python frame that are not interpreter or binding glue, then the Python frames; and
    /// PyTorch's own frames as `torch_frames` says (ops, autograd nodes and workspaces by
    /// name, the rest hidden), without the start-up frames below everything. Unknown ids
    /// (0 = no stack captured) give no frames.
    pub fn stack(&mut self, id: u64, max: usize) -> Vec<Frame> {
        let stacks = self.stacks;
        let Some(info) = stacks.get(&id) else {
            return Vec::new();
        };
        let limit = if max == 0 { usize::MAX } else { max };
        let as_read = crate::glue::python_first();
        let python_first = as_read && info.frames.iter().any(|&a| as_python_frame(a).is_some());
        let mut out = Vec::new();
        let mut seen_python = false;
        for &address in &info.frames {
            if as_python_frame(address).is_some() {
                out.extend(self.address(address, info.first_use_ns));
                seen_python = true;
                continue;
            }
            // Under the innermost Python frame, the native frames run the interpreter.
            if python_first && seen_python {
                continue;
            }
            for f in self.address(address, info.first_use_ns) {
                if !(python_first
                    && crate::glue::is_glue(f.module.as_deref(), f.function.as_deref()))
                {
                    out.push(f);
                }
            }
        }
        if as_read {
            out = readable(out);
        }
        let mut native = 0usize;
        out.retain(|f| {
            if f.python {
                return true;
            }
            native += 1;
            native <= limit
        });
        out
    }

    /// The function names of stack `id`'s native frames, innermost first, inlined calls
    /// included, none left out (for what a stack ran through, not for showing it).
    pub fn functions(&mut self, id: u64) -> Vec<String> {
        let stacks = self.stacks;
        let Some(info) = stacks.get(&id) else {
            return Vec::new();
        };
        info.frames
            .iter()
            .filter(|&&a| as_python_frame(a).is_none())
            .flat_map(|&a| self.address(a, info.first_use_ns))
            .filter_map(|f| f.function)
            .collect()
    }

    /// Every frame of stack `id`, Python and native, innermost first, none hidden and
    /// none renamed (what a stack ran through, for `kinds`).
    pub fn all_frames(&mut self, id: u64) -> Vec<Frame> {
        let stacks = self.stacks;
        let Some(info) = stacks.get(&id) else {
            return Vec::new();
        };
        (info.frames.iter())
            .flat_map(|&a| self.address(a, info.first_use_ns))
            .collect()
    }

    /// The module paths of stack `id`'s native frames, innermost first (None for a frame
    /// in no known module): what a stack ran through, read without symbols, as far as the
    /// caller reads.
    pub fn native_modules(&self, id: u64) -> impl Iterator<Item = Option<&'a str>> + '_ {
        let modules = self.modules;
        let info = self.stacks.get(&id);
        (info.map_or(&[][..], |i| &i.frames[..]).iter())
            .filter(|&&a| as_python_frame(a).is_none())
            .map(move |&a| {
                let when = info.and_then(|i| i.first_use_ns);
                (self.module_for(a, when)).map(|i| modules[i].path.as_str())
            })
    }

    /// The module record covering `address`: if several (a range reused after dlclose),
    /// the latest loaded at or before `when`, else the latest.
    fn module_for(&self, address: u64, when: Option<u64>) -> Option<usize> {
        let mut latest: Option<(usize, u64)> = None;
        let mut latest_before: Option<(usize, u64)> = None;
        // `>=`: of records with equal times, the later one in the trace wins.
        let later = |best: Option<(usize, u64)>, time: u64| best.is_none_or(|(_, t)| time >= t);
        for (i, m) in self.modules.iter().enumerate() {
            if !(m.start <= address && address < m.end) {
                continue;
            }
            if later(latest, m.time_ns) {
                latest = Some((i, m.time_ns));
            }
            if when.is_some_and(|w| m.time_ns <= w) && later(latest_before, m.time_ns) {
                latest_before = Some((i, m.time_ns));
            }
        }
        latest_before.or(latest).map(|(i, _)| i)
    }

    fn address(&mut self, address: u64, when: Option<u64>) -> Vec<Frame> {
        if let Some((code, line)) = as_python_frame(address) {
            let mut frame = Frame::python(address, self.python.get(&code), line);
            frame.file = frame
                .file
                .map(|f| source_paths::shown(&f, self.cwd.as_deref()));
            return vec![frame];
        }
        let modules = self.modules;
        let Some(index) = self.module_for(address, when) else {
            return vec![Frame::bare(address, None)];
        };
        if let Some(frames) = self.cache.get(&(address, index)) {
            return frames.clone();
        }
        let module = &modules[index];
        let frames = match self.loader(module) {
            Some(loader) => {
                let mut frames = lookup(loader, address, module);
                // No DWARF function for the outermost frame: the symbol table may know.
                if let Some(outer) = frames.last_mut().filter(|f| f.function.is_none()) {
                    let symbols = self
                        .files
                        .get(&module.path)
                        .map(|f| f.symbols.get_or_init(|| SizedSymbols::read(&module.path)));
                    let probe = address.wrapping_sub(1).wrapping_sub(module.bias);
                    outer.function = symbols
                        .and_then(|s| s.containing(probe))
                        .map(|name| addr2line::demangle_auto(name.into(), None).into_owned());
                }
                frames
            }
            None => vec![Frame::bare(address, Some(module))],
        };
        let frames: Vec<Frame> = frames
            .into_iter()
            .map(|mut f| {
                f.function = f.function.map(crate::cxx_names::shown);
                f.file = f
                    .file
                    .map(|file| source_paths::shown(&file, self.cwd.as_deref()));
                f
            })
            .collect();
        self.cache.insert((address, index), frames.clone());
        frames
    }

    /// The loader for `module`'s file if it exists and its build-id matches.
    fn loader(&mut self, module: &Module) -> Option<&Loader> {
        let file = self
            .files
            .entry(module.path.clone())
            .or_insert_with(|| ModuleFile {
                build_id: read_build_id(&module.path),
                loader: OnceCell::new(),
                symbols: OnceCell::new(),
            });
        if !module.build_id.is_empty() && file.build_id.as_deref() != Some(&module.build_id[..]) {
            // Once per file, and only if the file is there at all (missing is not news).
            if self.distrusted.insert(module.path.clone()) && Path::new(&module.path).exists() {
                self.warnings.push(format!(
                    "{}: its build-id differs from the one recorded in the trace \
                     (rebuilt or replaced since?); showing module offsets only",
                    module.path
                ));
            }
            return None;
        }
        file.loader
            .get_or_init(|| Loader::new(&module.path).ok())
            .as_ref()
    }
}

/// `frames` (innermost first) as a PyTorch user reads them (`torch_frames`): PyTorch's
/// frames under their names or left out, an allocation op only when no other op made the
/// tensor, a name repeated by consecutive frames once, and no start-up frames at the bottom.
fn readable(frames: Vec<Frame>) -> Vec<Frame> {
    use crate::torch_frames::{self as torch, Shown};
    let mut out: Vec<Frame> = Vec::with_capacity(frames.len());
    for mut f in frames.iter().cloned() {
        let shown = if f.python {
            torch::python(
                f.file.as_deref().unwrap_or(""),
                f.function.as_deref().unwrap_or(""),
            )
        } else {
            torch::native(f.module.as_deref(), f.function.as_deref())
        };
        match shown {
            Shown::Keep => {}
            Shown::Hide => continue,
            Shown::Named(role, name) => {
                f.function = Some(name);
                f.role = Some(role);
                f.file = None;
                f.line = None;
                f.inlined = false;
            }
        }
        let repeated = out
            .last()
            .is_some_and(|p| p.role.is_some() && p.role == f.role && p.function == f.function);
        if !repeated {
            out.push(f);
        }
    }
    let is_op = |f: &Frame| f.role == Some("op");
    let made_by_another = out
        .iter()
        .any(|f| is_op(f) && !torch::allocation_op(f.function.as_deref().unwrap_or("")));
    if made_by_another {
        out.retain(|f| !(is_op(f) && torch::allocation_op(f.function.as_deref().unwrap_or(""))));
    }
    while out
        .last()
        .is_some_and(|f| !f.python && torch::start_up(f.module.as_deref(), f.function.as_deref()))
    {
        out.pop();
    }
    // Nothing left (PyTorch's libraries gone, or without symbols): the frames as recorded
    // say more than none.
    if out.is_empty() {
        return frames;
    }
    out
}

/// Symbolizes one return address in a trusted file.
fn lookup(loader: &Loader, address: u64, module: &Module) -> Vec<Frame> {
    // A return address points after the call; `- 1` lands inside the call instruction,
    // so the line (and inlining) is the call's, not the next statement's.
    let probe = address.wrapping_sub(1).wrapping_sub(module.bias);
    let mut out: Vec<Frame> = Vec::new();
    if let Ok(mut frames) = loader.find_frames(probe) {
        while let Ok(Some(f)) = frames.next() {
            let mut frame = Frame::bare(address, Some(module));
            frame.inlined = true;
            frame.function = f
                .function
                .as_ref()
                .and_then(|name| name.demangle().ok())
                .map(|name| name.into_owned());
            if let Some(loc) = f.location {
                frame.file = loc.file.map(str::to_owned);
                frame.line = loc.line;
            }
            out.push(frame);
        }
    }
    match out.last_mut() {
        Some(outer) => outer.inlined = false,
        None => out.push(Frame::bare(address, Some(module))),
    }
    out
}

/// The GNU build-id of the ELF file at `path`, reading only the pages it needs.
fn read_build_id(path: &str) -> Option<Vec<u8>> {
    let file = File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let parsed = object::File::parse(&cache).ok()?;
    let id = object::Object::build_id(&parsed).ok()??;
    Some(id.to_vec())
}

#[cfg(test)]
mod tests {
    use super::SizedSymbols;

    #[test]
    fn a_symbol_names_only_addresses_inside_it() {
        let names = b"smallouteralias_inside".to_vec();
        let s = SizedSymbols {
            names: super::Names::Bytes(names),
            symbols: vec![
                (0x100, 0x110, 0, 5),
                (0x200, 0x300, 5, 5),
                (0x240, 0x250, 10, 12),
            ],
        };
        assert_eq!(s.containing(0x0ff), None);
        assert_eq!(s.containing(0x100), Some("small"));
        assert_eq!(s.containing(0x10f), Some("small"));
        // Past the end of `small` and before `outer`: no name, not the nearest one.
        assert_eq!(s.containing(0x150), None);
        assert_eq!(s.containing(0x245), Some("alias_inside"));
        // Past the nested symbol, still inside the outer one.
        assert_eq!(s.containing(0x260), Some("outer"));
        assert_eq!(s.containing(0x300), None);
    }
}
