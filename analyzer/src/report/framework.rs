//! What a trace's allocations are: a framework's tensors, or the segments its caching
//! allocator carves tensors from. Derived from the trace header's `framework` object (the
//! modes `gpumemprof run` was given and the framework allocator variables present when
//! the process started); a trace from a shim without that object falls back to the same
//! variables in the header's `env` allow-list, so this works with or without the launcher.
//!
//! ```text
//!  PyTorch  backend:cudaMallocAsync        -> tensors   (one cudaMallocAsync per tensor)
//!           PYTORCH_NO_CUDA_MEMORY_CACHING -> uncached  (one cudaMalloc per tensor, slow)
//!           otherwise                      -> segments  (the caching allocator's blocks)
//!  TF       TF_GPU_ALLOCATOR=cuda_malloc_async -> tensors; TF_FORCE_GPU_ALLOW_GROWTH=true
//!           -> segments (BFC regions, grown); otherwise preallocated (one huge block)
//!  JAX      XLA_PYTHON_CLIENT_ALLOCATOR=platform -> tensors; XLA_PYTHON_CLIENT_PREALLOCATE
//!           =false -> segments; otherwise preallocated
//! ```
//!
//! A framework is listed only when one of its variables is set or a mode for it was
//! given: the trace does not say which framework the program used.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::Value;

/// The variables the levels are derived from, per framework (together, the shim's
/// `output::FRAMEWORK_ENV`).
pub const PYTORCH_VARIABLES: &[&str] = &[
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
];
pub const JAX_VARIABLES: &[&str] = &[
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
];
pub const TF_VARIABLES: &[&str] = &["TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR"];

/// The `framework` object of `summary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Framework {
    /// The framework modes `gpumemprof run` was given (`torch=tensors`).
    pub modes: Vec<String>,
    /// One per framework whose allocator variables were set or that a mode named.
    pub levels: Vec<Level>,
    /// A framework's library (PyTorch, TensorFlow, XLA) was loaded in the process: only
    /// then does "no framework allocator variable set" say anything (`with_libraries`).
    #[serde(skip)]
    pub libraries: bool,
}

/// What one framework's allocations in the trace are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    /// `pytorch`, `tensorflow` or `jax`.
    pub framework: &'static str,
    /// `tensors`, `uncached`, `segments` or `preallocated`.
    pub level: &'static str,
    /// Each tensor (buffer) is its own allocation in the trace.
    pub per_tensor: bool,
    /// The variable that decided it (`NAME=value`), or `default`.
    pub setting: String,
    /// What the trace's allocations are at this level, and what it costs.
    pub meaning: String,
}

impl Framework {
    /// From a trace header (see the module comment).
    pub fn from_header(header: &Value) -> Framework {
        let object = header.get("framework");
        let vars = object
            .and_then(|f| f.get("env"))
            .or_else(|| header.get("env"));
        let get = |name: &str| -> Option<String> {
            let known = [PYTORCH_VARIABLES, JAX_VARIABLES, TF_VARIABLES];
            if !known.iter().any(|group| group.contains(&name)) {
                return None;
            }
            vars?.get(name)?.as_str().map(str::to_owned)
        };
        let modes: Vec<String> = object
            .and_then(|f| f.get("modes"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Framework::derive(modes, get)
    }

    /// From the modes and a lookup of the variables.
    pub fn derive(modes: Vec<String>, get: impl Fn(&str) -> Option<String>) -> Framework {
        let wanted = |prefix: &str, vars: &[&str]| {
            modes.iter().any(|m| m.starts_with(prefix)) || vars.iter().any(|v| get(v).is_some())
        };
        let mut levels = Vec::new();
        if wanted("torch=", PYTORCH_VARIABLES) {
            levels.push(pytorch(&get));
        }
        if wanted("tf=", TF_VARIABLES) {
            levels.push(tensorflow(&get));
        }
        if wanted("jax=", JAX_VARIABLES) {
            levels.push(jax(&get));
        }
        Framework {
            modes,
            levels,
            libraries: false,
        }
    }

    /// Notes whether `modules` (the trace's loaded objects) include a framework's library.
    pub fn with_libraries(mut self, modules: &[gpumemprof_format::Module]) -> Framework {
        const LIBRARIES: [&str; 7] = [
            "libc10",
            "libtorch",
            "libtensorflow",
            "_pywrap_tensorflow",
            "libxla",
            "xla_extension",
            "libjax",
        ];
        self.libraries = modules.iter().any(|m| {
            let name = m.path.rsplit('/').next().unwrap_or(&m.path);
            LIBRARIES.iter().any(|l| name.starts_with(l))
        });
        self
    }

    /// One line per framework, or one line saying nothing was set when a framework's
    /// library was loaded; then a blank line (when any line was written).
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        if self.levels.is_empty() && self.modes.is_empty() && !self.libraries {
            return Ok(());
        }
        if self.levels.is_empty() {
            writeln!(
                out,
                "allocator level: no framework allocator variable set: under PyTorch, TensorFlow or JAX these are the caching allocator's segments, not tensors (gpumemprof run --torch=tensors shows tensors)"
            )?;
        }
        for l in &self.levels {
            let name = crate::replay::framework_title(l.framework);
            writeln!(
                out,
                "allocator level: {name} {} ({}): {}",
                l.level, l.setting, l.meaning
            )?;
        }
        if !self.modes.is_empty() {
            writeln!(
                out,
                "framework modes (gpumemprof run): {}",
                self.modes.join(", ")
            )?;
        }
        writeln!(out)
    }
}

/// The `key:value` of PyTorch's allocator configuration (`a:1,b:[x:1,y:2]`), split on
/// the commas outside brackets.
pub fn alloc_conf_value(conf: &str, key: &str) -> Option<String> {
    alloc_conf_items(conf).into_iter().find_map(|item| {
        let (k, v) = item.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// The items of an allocator configuration, trimmed, empty ones dropped.
pub fn alloc_conf_items(conf: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut item = String::new();
    for c in conf.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
        .into_iter()
        .map(|i| i.trim().to_string())
        .filter(|i| !i.is_empty())
        .collect()
}

fn level(
    framework: &'static str,
    level: &'static str,
    per_tensor: bool,
    setting: String,
    meaning: &str,
) -> Level {
    Level {
        framework,
        level,
        per_tensor,
        setting,
        meaning: meaning.to_string(),
    }
}

fn pytorch(get: &impl Fn(&str) -> Option<String>) -> Level {
    // PyTorch 2.9+ reads PYTORCH_ALLOC_CONF first; older releases only the CUDA name.
    let conf = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"]
        .into_iter()
        .find_map(|name| get(name).map(|v| (name, v)));
    let backend = conf
        .as_ref()
        .and_then(|(_, v)| alloc_conf_value(v, "backend"));
    let setting = |(name, value): &(&str, String)| format!("{name}={value}");
    if let (Some(c), Some("cudaMallocAsync")) = (&conf, backend.as_deref()) {
        return level(
            "pytorch",
            "tensors",
            true,
            setting(c),
            "one cudaMallocAsync per tensor, freed with the tensor (PyTorch's own memory snapshots do not work with this backend)",
        );
    }
    // Current PyTorch reads "0" as off; releases before 2.1 took any value as on.
    if let Some(v) = get("PYTORCH_NO_CUDA_MEMORY_CACHING").filter(|v| v.trim() != "0") {
        return level(
            "pytorch",
            "uncached",
            true,
            format!("PYTORCH_NO_CUDA_MEMORY_CACHING={v}"),
            "caching off: one cudaMalloc per tensor, freed with the tensor (slow: every free synchronizes the device)",
        );
    }
    let expandable = conf
        .as_ref()
        .and_then(|(_, v)| alloc_conf_value(v, "expandable_segments"))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let meaning = if expandable {
        "the caching allocator's expandable segments: 2 MiB and 20 MiB mappings (cuMemMap), not tensors; memory a freed tensor leaves stays mapped until the allocator releases it"
    } else {
        "the caching allocator's segments (blocks of 2 MiB, 20 MiB or more), not tensors: a freed tensor stays in its cached segment, so a leak may be a segment the allocator kept"
    };
    let setting = conf.as_ref().map_or_else(|| "default".to_string(), setting);
    level("pytorch", "segments", false, setting, meaning)
}

fn tensorflow(get: &impl Fn(&str) -> Option<String>) -> Level {
    if let Some(v) = get("TF_GPU_ALLOCATOR").filter(|v| v.trim() == "cuda_malloc_async") {
        return level(
            "tensorflow",
            "tensors",
            true,
            format!("TF_GPU_ALLOCATOR={v}"),
            "one cuMemAllocFromPoolAsync per tensor, freed with the tensor",
        );
    }
    if let Some(v) =
        get("TF_FORCE_GPU_ALLOW_GROWTH").filter(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return level(
            "tensorflow",
            "segments",
            false,
            format!("TF_FORCE_GPU_ALLOW_GROWTH={v}"),
            "the BFC allocator's regions, grown as needed, not tensors",
        );
    }
    level(
        "tensorflow",
        "preallocated",
        false,
        "default".to_string(),
        "the BFC allocator takes most of the device in one allocation at start: tensors are not visible",
    )
}

fn jax(get: &impl Fn(&str) -> Option<String>) -> Level {
    if let Some(v) = get("XLA_PYTHON_CLIENT_ALLOCATOR").filter(|v| v.trim() == "platform") {
        return level(
            "jax",
            "tensors",
            true,
            format!("XLA_PYTHON_CLIENT_ALLOCATOR={v}"),
            "one allocation per buffer, freed when the buffer is (slow)",
        );
    }
    if let Some(v) = get("XLA_PYTHON_CLIENT_PREALLOCATE")
        .filter(|v| v.trim().eq_ignore_ascii_case("false") || v.trim() == "0")
    {
        return level(
            "jax",
            "segments",
            false,
            format!("XLA_PYTHON_CLIENT_PREALLOCATE={v}"),
            "the BFC allocator's regions, grown on demand, not buffers",
        );
    }
    let fraction = get("XLA_PYTHON_CLIENT_MEM_FRACTION");
    let meaning = format!(
        "XLA takes {} of the device in one allocation at start: buffers are not visible",
        fraction.as_deref().map_or("75%", str::trim)
    );
    let setting = fraction.map_or_else(
        || "default".to_string(),
        |f| format!("XLA_PYTHON_CLIENT_MEM_FRACTION={f}"),
    );
    level("jax", "preallocated", false, setting, &meaning)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(modes: &[&str], vars: &[(&str, &str)]) -> Framework {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Framework::derive(modes.iter().map(|m| m.to_string()).collect(), |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    fn levels(f: &Framework) -> Vec<(&str, &str, &str)> {
        f.levels
            .iter()
            .map(|l| (l.framework, l.level, l.setting.as_str()))
            .collect()
    }

    fn text(f: &Framework) -> String {
        let mut out = Vec::new();
        f.write_text(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_no_variable_line_only_where_a_framework_library_was_loaded() {
        let module = |path: &str| gpumemprof_format::Module {
            time_ns: 0,
            bias: 0,
            start: 0,
            end: 1,
            path: path.to_string(),
            build_id: Vec::new(),
        };
        let plain = derive(&[], &[]).with_libraries(&[module("/usr/bin/train_leak")]);
        assert_eq!(text(&plain), "");
        let torch = derive(&[], &[]).with_libraries(&[
            module("/usr/bin/python3.11"),
            module("/site-packages/torch/lib/libc10_cuda.so"),
        ]);
        assert!(text(&torch).starts_with("allocator level: no framework allocator variable set"));
    }

    #[test]
    fn nothing_set_lists_nothing() {
        assert_eq!(derive(&[], &[]), Framework::default());
    }

    #[test]
    fn pytorch_levels() {
        let f = derive(
            &["torch=tensors"],
            &[(
                "PYTORCH_CUDA_ALLOC_CONF",
                "expandable_segments:True,backend:cudaMallocAsync",
            )],
        );
        assert_eq!(
            levels(&f),
            [(
                "pytorch",
                "tensors",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,backend:cudaMallocAsync"
            )]
        );
        assert!(f.levels[0].per_tensor);
        let f = derive(&[], &[("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")]);
        assert_eq!(
            levels(&f),
            [("pytorch", "uncached", "PYTORCH_NO_CUDA_MEMORY_CACHING=1")]
        );
        let f = derive(&[], &[("PYTORCH_NO_CUDA_MEMORY_CACHING", "0")]);
        assert_eq!(levels(&f), [("pytorch", "segments", "default")]);
        let f = derive(&["torch=segments"], &[]);
        assert_eq!(levels(&f), [("pytorch", "segments", "default")]);
        assert!(!f.levels[0].per_tensor);
        let f = derive(
            &[],
            &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
        );
        assert!(f.levels[0].meaning.contains("expandable segments"));
    }

    #[test]
    fn pytorch_alloc_conf_is_read_before_the_cuda_name() {
        let f = derive(
            &[],
            &[
                ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
                ("PYTORCH_ALLOC_CONF", "backend:native"),
            ],
        );
        assert_eq!(
            levels(&f),
            [("pytorch", "segments", "PYTORCH_ALLOC_CONF=backend:native")]
        );
    }

    #[test]
    fn tensorflow_and_jax_levels() {
        let f = derive(&[], &[("TF_GPU_ALLOCATOR", "cuda_malloc_async")]);
        assert_eq!(
            levels(&f),
            [(
                "tensorflow",
                "tensors",
                "TF_GPU_ALLOCATOR=cuda_malloc_async"
            )]
        );
        let f = derive(&["tf=growth"], &[("TF_FORCE_GPU_ALLOW_GROWTH", "true")]);
        assert_eq!(
            levels(&f),
            [("tensorflow", "segments", "TF_FORCE_GPU_ALLOW_GROWTH=true")]
        );
        let f = derive(
            &["jax=platform"],
            &[("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")],
        );
        assert_eq!(
            levels(&f),
            [("jax", "tensors", "XLA_PYTHON_CLIENT_ALLOCATOR=platform")]
        );
        let f = derive(&[], &[("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5")]);
        assert_eq!(
            levels(&f),
            [("jax", "preallocated", "XLA_PYTHON_CLIENT_MEM_FRACTION=.5")]
        );
        assert!(f.levels[0]
            .meaning
            .starts_with("XLA takes .5 of the device"));
    }

    #[test]
    fn header_without_a_framework_object_falls_back_to_env() {
        let header =
            serde_json::json!({"env": {"TF_GPU_ALLOCATOR": "cuda_malloc_async", "HOME": "/x"}});
        let f = Framework::from_header(&header);
        assert_eq!(
            levels(&f),
            [(
                "tensorflow",
                "tensors",
                "TF_GPU_ALLOCATOR=cuda_malloc_async"
            )]
        );
        let header = serde_json::json!({
            "env": {"TF_GPU_ALLOCATOR": "cuda_malloc_async"},
            "framework": {"modes": ["torch=uncached"], "env": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}},
        });
        let f = Framework::from_header(&header);
        assert_eq!(f.modes, ["torch=uncached"]);
        assert_eq!(
            levels(&f),
            [("pytorch", "uncached", "PYTORCH_NO_CUDA_MEMORY_CACHING=1")]
        );
    }

    #[test]
    fn alloc_conf_items_respect_brackets() {
        let conf =
            " max_split_size_mb:128, roundup_power2_divisions:[256:1,512:2] ,backend:native,";
        assert_eq!(
            alloc_conf_items(conf),
            [
                "max_split_size_mb:128",
                "roundup_power2_divisions:[256:1,512:2]",
                "backend:native"
            ]
        );
        assert_eq!(alloc_conf_value(conf, "backend").as_deref(), Some("native"));
        assert_eq!(alloc_conf_value(conf, "expandable_segments"), None);
    }
}
