//! The environment `gpumemprof run` gives the command: every variable it sets, and why,
//! planned from the launcher's environment before anything runs (a pure function, so
//! the unit tests below pin each case down). docs/REPORTS.md (`run`) lists the same.
//!
//! | variable | set to | when |
//! |---|---|---|
//! | `LD_PRELOAD` | the shim, then the user's preloads | always (kept as is if it already loads a `libgpumemprof.so`) |
//! | `NVTX_INJECTION64_PATH` | the shim | unless the user set it (kept, one warning) |
//! | `GPUMEMPROF_OUTPUT` | `-o TEMPLATE` | with `-o` |
//! | `GPUMEMPROF_QUIET` | `1` | unless the user set it (the launcher names the traces) |
//! | `GPUMEMPROF_FRAMEWORK_MODES` | `torch=tensors,...` | with a framework mode |
//! | `GPUMEMPROF_TRACE_LIST` | a private file | always (set by `run.rs`) |
//! | framework variables | see `Modes` | with a framework mode |

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use clap::{Args, ValueEnum};

use crate::report::framework::alloc_conf_items;

/// The framework modes: what the profiled framework's allocator hands the hooks.
#[derive(Debug, Clone, Default, Args)]
pub struct Modes {
    /// PyTorch's allocator. Not needed for PyTorch 2.x: its tensors are recorded under the
    /// caching allocator it runs, at the allocator's own entry point; only for a build
    /// without that entry point (`summary` then says it sees segments). Costs in
    /// docs/REPORTS.md, `run`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub torch: Option<Torch>,
    /// JAX's allocator.
    #[arg(long, value_enum, value_name = "MODE")]
    pub jax: Option<Jax>,
    /// TensorFlow's allocator.
    #[arg(long, value_enum, value_name = "MODE")]
    pub tf: Option<Tf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Torch {
    /// No change (the default): the caching allocator as it is; its tensors are recorded
    /// where PyTorch has the entry point (2.x), its segments always.
    Segments,
    /// backend:cudaMallocAsync: one allocation per tensor; PyTorch's own memory
    /// snapshots stop working.
    Tensors,
    /// PYTORCH_NO_CUDA_MEMORY_CACHING=1: one cudaMalloc per tensor; slow.
    Uncached,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Jax {
    /// XLA_PYTHON_CLIENT_ALLOCATOR=platform: one allocation per buffer, no
    /// preallocation; slow.
    Platform,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Tf {
    /// TF_FORCE_GPU_ALLOW_GROWTH=true: the BFC allocator grows on demand instead of
    /// taking most of the device at start (still regions, not tensors).
    Growth,
    /// TF_GPU_ALLOCATOR=cuda_malloc_async: one allocation per tensor.
    Async,
}

impl Modes {
    /// `torch=tensors` and the like, as `GPUMEMPROF_FRAMEWORK_MODES` records them.
    pub fn names(&self) -> Vec<String> {
        fn name<T: ValueEnum>(prefix: &str, mode: Option<T>) -> Option<String> {
            let value = mode?.to_possible_value()?;
            Some(format!("{prefix}={}", value.get_name()))
        }
        [
            name("torch", self.torch),
            name("jax", self.jax),
            name("tf", self.tf),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// The environment changes for the command, and the warnings to print first.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Variables to set, in this order.
    pub set: Vec<(String, OsString)>,
    pub warnings: Vec<String>,
}

impl Plan {
    fn set(&mut self, name: &str, value: impl Into<OsString>) {
        self.set.push((name.to_string(), value.into()));
    }

    /// Sets a framework variable; a different value the user had is replaced, with a
    /// warning naming the flag.
    fn replace(&mut self, name: &str, value: &str, flag: &str, old: Option<OsString>) {
        if let Some(old) = old.filter(|o| o.as_bytes() != value.as_bytes()) {
            self.warnings.push(format!(
                "{flag} replaces {name}={} with {value}",
                old.to_string_lossy()
            ));
        }
        self.set(name, value);
    }
}

/// What to set (see the module comment). `get` reads the launcher's environment.
pub fn plan(
    modes: &Modes,
    output: Option<&str>,
    shim: &Path,
    get: impl Fn(&str) -> Option<OsString>,
) -> Plan {
    let mut p = Plan::default();
    let shim_os = shim.as_os_str();
    match get("LD_PRELOAD").filter(|v| !v.is_empty()) {
        None => p.set("LD_PRELOAD", shim_os),
        Some(theirs) => {
            // ld.so separates preloads with colons or spaces.
            let entries: Vec<&[u8]> = theirs
                .as_bytes()
                .split(|&b| b == b':' || b == b' ')
                .filter(|e| !e.is_empty())
                .collect();
            let profiler = entries.iter().find(|e| {
                Path::new(std::ffi::OsStr::from_bytes(e)).file_name() == Some(SHIM_NAME.as_ref())
            });
            match profiler {
                Some(e) if *e == shim_os.as_bytes() => {}
                Some(e) => p.warnings.push(format!(
                    "LD_PRELOAD already loads {}; it is used instead of {}",
                    String::from_utf8_lossy(e),
                    shim.display()
                )),
                None => {
                    let mut both = shim_os.as_bytes().to_vec();
                    both.push(b':');
                    both.extend_from_slice(theirs.as_bytes());
                    p.set("LD_PRELOAD", OsString::from_vec(both));
                }
            }
        }
    }
    match get("NVTX_INJECTION64_PATH").filter(|v| !v.is_empty()) {
        None => p.set("NVTX_INJECTION64_PATH", shim_os),
        Some(v) if v == shim_os => {}
        Some(v) => p.warnings.push(format!(
            "NVTX_INJECTION64_PATH is already set ({}): kept, so NVTX ranges will not be recorded",
            v.to_string_lossy()
        )),
    }
    if let Some(o) = output {
        p.set("GPUMEMPROF_OUTPUT", o);
    }
    if get("GPUMEMPROF_QUIET").is_none() {
        p.set("GPUMEMPROF_QUIET", "1");
    }
    let names = modes.names();
    if !names.is_empty() {
        p.set("GPUMEMPROF_FRAMEWORK_MODES", names.join(","));
    }
    match modes.torch {
        None | Some(Torch::Segments) => {}
        Some(Torch::Tensors) => torch_tensors(&mut p, &get),
        Some(Torch::Uncached) => p.replace(
            "PYTORCH_NO_CUDA_MEMORY_CACHING",
            "1",
            "--torch=uncached",
            get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        ),
    }
    if let Some(Jax::Platform) = modes.jax {
        let old = get("XLA_PYTHON_CLIENT_ALLOCATOR");
        p.replace(
            "XLA_PYTHON_CLIENT_ALLOCATOR",
            "platform",
            "--jax=platform",
            old,
        );
    }
    match modes.tf {
        None => {}
        Some(Tf::Growth) => {
            let old = get("TF_FORCE_GPU_ALLOW_GROWTH");
            p.replace("TF_FORCE_GPU_ALLOW_GROWTH", "true", "--tf=growth", old);
        }
        Some(Tf::Async) => {
            let old = get("TF_GPU_ALLOCATOR");
            p.replace("TF_GPU_ALLOCATOR", "cuda_malloc_async", "--tf=async", old);
        }
    }
    p
}

const SHIM_NAME: &str = "libgpumemprof.so";
const ASYNC_BACKEND: &str = "backend:cudaMallocAsync";

/// `--torch=tensors`: `backend:cudaMallocAsync` merged into each allocator configuration
/// the user set. When both names are set, both get it: PyTorch 2.9 and later read
/// `PYTORCH_ALLOC_CONF` (and ignore the other), older releases only
/// `PYTORCH_CUDA_ALLOC_CONF`, and the launcher cannot know which runs. Neither set:
/// `PYTORCH_CUDA_ALLOC_CONF`, which every release reads.
fn torch_tensors(p: &mut Plan, get: &impl Fn(&str) -> Option<OsString>) {
    let mut any = false;
    for name in ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"] {
        if let Some(conf) = get(name) {
            any = true;
            let (merged, warning) = merge_backend(name, &conf.to_string_lossy());
            p.warnings.extend(warning);
            p.set(name, merged);
        }
    }
    if !any {
        p.set("PYTORCH_CUDA_ALLOC_CONF", ASYNC_BACKEND);
    }
}

/// The configuration `conf` of variable `name` with `backend:cudaMallocAsync`: the
/// user's other keys kept in their order, a different `backend:` replaced (with a
/// warning), an existing `backend:cudaMallocAsync` left as written.
pub fn merge_backend(name: &str, conf: &str) -> (String, Option<String>) {
    let items = alloc_conf_items(conf);
    let is_backend = |i: &String| {
        i.split_once(':')
            .is_some_and(|(k, _)| k.trim() == "backend")
    };
    let backends: Vec<&String> = items.iter().filter(|i| is_backend(i)).collect();
    if let [only] = backends.as_slice() {
        if only
            .split_once(':')
            .is_some_and(|(_, v)| v.trim() == "cudaMallocAsync")
        {
            return (conf.to_string(), None);
        }
    }
    let warning = (!backends.is_empty()).then(|| {
        let old: Vec<&str> = backends.iter().map(|b| b.as_str()).collect();
        format!(
            "--torch=tensors replaces {} in {name} with {ASYNC_BACKEND}",
            old.join(",")
        )
    });
    let mut kept: Vec<String> = items.into_iter().filter(|i| !is_backend(i)).collect();
    kept.push(ASYNC_BACKEND.to_string());
    (kept.join(","), warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHIM: &str = "/opt/gpumemprof/lib/libgpumemprof.so";

    fn run_plan(modes: Modes, env: &[(&str, &str)]) -> Plan {
        let env: Vec<(String, OsString)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        plan(&modes, None, Path::new(SHIM), |k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    fn set(p: &Plan) -> Vec<(&str, String)> {
        p.set
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_string_lossy().into_owned()))
            .collect()
    }

    #[test]
    fn no_mode_sets_the_shim_only() {
        let p = run_plan(Modes::default(), &[]);
        assert_eq!(
            set(&p),
            [
                ("LD_PRELOAD", SHIM.to_string()),
                ("NVTX_INJECTION64_PATH", SHIM.to_string()),
                ("GPUMEMPROF_QUIET", "1".to_string()),
            ]
        );
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn the_users_preloads_stay_after_the_shim() {
        let p = run_plan(
            Modes::default(),
            &[
                ("LD_PRELOAD", "/x/libmine.so /y/b.so"),
                ("GPUMEMPROF_QUIET", "0"),
            ],
        );
        assert_eq!(
            set(&p)[0],
            ("LD_PRELOAD", format!("{SHIM}:/x/libmine.so /y/b.so"))
        );
        assert!(!p.set.iter().any(|(k, _)| k == "GPUMEMPROF_QUIET"));
        // Already preloaded: not twice.
        let p = run_plan(
            Modes::default(),
            &[("LD_PRELOAD", &format!("/x/a.so:{SHIM}"))],
        );
        assert!(!p.set.iter().any(|(k, _)| k == "LD_PRELOAD"));
        assert!(p.warnings.is_empty());
        let p = run_plan(
            Modes::default(),
            &[("LD_PRELOAD", "/other/libgpumemprof.so")],
        );
        assert!(!p.set.iter().any(|(k, _)| k == "LD_PRELOAD"));
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    #[test]
    fn a_users_nvtx_injection_is_kept_with_one_warning() {
        let p = run_plan(
            Modes::default(),
            &[("NVTX_INJECTION64_PATH", "/nsys/libinj.so")],
        );
        assert!(!p.set.iter().any(|(k, _)| k == "NVTX_INJECTION64_PATH"));
        assert_eq!(
            p.warnings,
            ["NVTX_INJECTION64_PATH is already set (/nsys/libinj.so): kept, so NVTX ranges will not be recorded"]
        );
    }

    #[test]
    fn each_mode_sets_its_variables() {
        let cases: [(Modes, &[(&str, &str)]); 6] = [
            (
                Modes {
                    torch: Some(Torch::Segments),
                    ..Modes::default()
                },
                &[("GPUMEMPROF_FRAMEWORK_MODES", "torch=segments")],
            ),
            (
                Modes {
                    torch: Some(Torch::Tensors),
                    ..Modes::default()
                },
                &[
                    ("GPUMEMPROF_FRAMEWORK_MODES", "torch=tensors"),
                    ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
                ],
            ),
            (
                Modes {
                    torch: Some(Torch::Uncached),
                    ..Modes::default()
                },
                &[
                    ("GPUMEMPROF_FRAMEWORK_MODES", "torch=uncached"),
                    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
                ],
            ),
            (
                Modes {
                    jax: Some(Jax::Platform),
                    ..Modes::default()
                },
                &[
                    ("GPUMEMPROF_FRAMEWORK_MODES", "jax=platform"),
                    ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
                ],
            ),
            (
                Modes {
                    tf: Some(Tf::Growth),
                    ..Modes::default()
                },
                &[
                    ("GPUMEMPROF_FRAMEWORK_MODES", "tf=growth"),
                    ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
                ],
            ),
            (
                Modes {
                    tf: Some(Tf::Async),
                    torch: Some(Torch::Tensors),
                    ..Modes::default()
                },
                &[
                    ("GPUMEMPROF_FRAMEWORK_MODES", "torch=tensors,tf=async"),
                    ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
                    ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
                ],
            ),
        ];
        for (modes, want) in cases {
            let p = run_plan(modes.clone(), &[]);
            let got = set(&p);
            let want: Vec<(&str, String)> = want.iter().map(|(k, v)| (*k, v.to_string())).collect();
            assert_eq!(got[3..], want[..], "{modes:?}");
            assert!(p.warnings.is_empty(), "{modes:?}: {:?}", p.warnings);
        }
    }

    #[test]
    fn tensors_merges_into_the_users_configuration() {
        let tensors = Modes {
            torch: Some(Torch::Tensors),
            ..Modes::default()
        };
        let p = run_plan(
            tensors.clone(),
            &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
        );
        assert!(set(&p).contains(&(
            "PYTORCH_CUDA_ALLOC_CONF",
            "expandable_segments:True,backend:cudaMallocAsync".into()
        )));
        // Both names set: both get the backend.
        let p = run_plan(
            tensors.clone(),
            &[
                ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128"),
                (
                    "PYTORCH_ALLOC_CONF",
                    "backend:native,roundup_power2_divisions:[256:1,512:2]",
                ),
            ],
        );
        let s = set(&p);
        assert!(s.contains(&(
            "PYTORCH_CUDA_ALLOC_CONF",
            "max_split_size_mb:128,backend:cudaMallocAsync".into()
        )));
        assert!(s.contains(&(
            "PYTORCH_ALLOC_CONF",
            "roundup_power2_divisions:[256:1,512:2],backend:cudaMallocAsync".into()
        )));
        assert_eq!(p.warnings, ["--torch=tensors replaces backend:native in PYTORCH_ALLOC_CONF with backend:cudaMallocAsync"]);
    }

    #[test]
    fn merge_keeps_an_async_backend_as_written() {
        assert_eq!(
            merge_backend("X", " backend:cudaMallocAsync , a:1"),
            (" backend:cudaMallocAsync , a:1".to_string(), None)
        );
        assert_eq!(
            merge_backend("X", ""),
            ("backend:cudaMallocAsync".to_string(), None)
        );
    }

    #[test]
    fn a_different_framework_value_is_replaced_with_a_warning() {
        let p = run_plan(
            Modes {
                tf: Some(Tf::Async),
                ..Modes::default()
            },
            &[("TF_GPU_ALLOCATOR", "bfc")],
        );
        assert_eq!(
            p.warnings,
            ["--tf=async replaces TF_GPU_ALLOCATOR=bfc with cuda_malloc_async"]
        );
    }
}
