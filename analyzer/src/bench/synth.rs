//! A synthetic trace of a training loop's shape, written with the format crate's own
//! writer, for the analyzer benchmark. Deterministic (a fixed xorshift seed), so every run
//! of a given size replays the same records.
//!
//! ```text
//!  init   2000 parameters from 400 call sites, live to the end
//!  step   forward:  128 layers x (6 activations kept + 1 workspace alloc/free)
//!         backward: per layer, reversed: a gradient temporary (alloc/free), the layer's
//!                   activations freed, a gradient accumulation buffer (alloc/free)
//!         optimizer: 100 groups x one temporary (alloc/free)
//!         a pinned-host batch buffer (data-loader thread), freed at the step's end
//!  every 20th step is an evaluation step: forward only (other call sites), activations
//!  freed at each layer's end; every 4th step leaks one buffer; every 5000th an
//!  allocation fails with out-of-memory and is retried
//! ```
//!
//! Addresses come from a caching-allocator-like pool (per size, last freed first), so they
//! repeat as in a real run; sizes depend on the layer, the op and a per-step sequence
//! length (four buckets), so the live set and the address space stay bounded. About
//! 2,700 distinct stacks, 22 to 40 frames deep, each defined just before its first use.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use gpumemprof_format::{
    Alloc, AllocFailed, Free, MemKind, Module, Sample, Stats, TraceWriter, BLOCK_FLUSH_BYTES,
};

/// Bumped whenever the generated records change, so a cached trace is regenerated.
pub const GENERATOR_VERSION: u64 = 2;

const LAYERS: usize = 128;
const OPS: usize = 6;
const OPT_GROUPS: usize = 100;
const PARAM_SITES: usize = 400;
const PARAMS_PER_SITE: usize = 5;
const LEAK_SITES: usize = 3;
/// What the shim writes (`pipeline::ZSTD_LEVEL`).
const ZSTD_LEVEL: i32 = 1;

/// API ids of the header's `apis` table below.
const CUDA_MALLOC: u16 = 1;
const CUDA_FREE: u16 = 2;
const CUDA_HOST_ALLOC: u16 = 3;
const CUDA_FREE_HOST: u16 = 4;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthInfo {
    pub bytes: u64,
    /// Alloc, free and failed-allocation records.
    pub events: u64,
    /// Every record, stacks and modules included.
    pub records: u64,
    pub stacks: u64,
    pub steps: u64,
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Call sites: stack ids with their frames (innermost first), defined on first use.
struct Sites {
    frames: Vec<Vec<u64>>,
    defined: Vec<bool>,
}

/// Frames of the training loop's outer part, shared by every stack (main, the Python
/// interpreter's eval loop, the training script).
const OUTER: [u64; 8] = [
    0x5600_0000_1a40,
    0x7f10_0021_3300,
    0x7f10_0021_5c80,
    0x7f10_0020_0010,
    0x7f10_0021_3300,
    0x7f10_0021_5c80,
    0x7f10_0020_0010,
    0x5600_0000_0f00,
];

impl Sites {
    fn new() -> Self {
        Sites {
            frames: Vec::new(),
            defined: Vec::new(),
        }
    }

    /// A new site: allocator frames, `op_depth` frames of the operator, then the
    /// interpreter frames of the layer (`path` picks the caller), then the outer loop.
    fn add(&mut self, rng: &mut Rng, path: u64, layer: u64, op_depth: usize) -> usize {
        let mut f = vec![0x7f30_0000_4410, 0x7f30_0000_5520, 0x7f20_0100_0a00];
        for _ in 0..op_depth {
            f.push(0x7f20_0000_0000 + rng.below(0x80_0000) * 16);
        }
        for d in 0..(8 + layer % 8) {
            f.push(0x7f10_0020_0000 + ((path * 131 + layer * 17 + d * 7) % 4096) * 64);
        }
        f.extend_from_slice(&OUTER);
        self.frames.push(f);
        self.defined.push(false);
        self.frames.len() // ids start at 1: 0 means "no stack"
    }
}

/// A caching allocator's reuse: freed blocks of a size go back to that size's list.
struct Pool {
    free: HashMap<u64, Vec<u64>>,
    next: u64,
}

impl Pool {
    fn new(base: u64) -> Self {
        Pool {
            free: HashMap::new(),
            next: base,
        }
    }
    fn take(&mut self, size: u64) -> u64 {
        if let Some(a) = self.free.get_mut(&size).and_then(Vec::pop) {
            return a;
        }
        let a = self.next;
        self.next += size.div_ceil(512) * 512;
        a
    }
    fn give(&mut self, address: u64, size: u64) {
        self.free.entry(size).or_default().push(address);
    }
}

struct Gen<W: Write> {
    w: TraceWriter<W>,
    rng: Rng,
    sites: Sites,
    device: Pool,
    host: Pool,
    time: u64,
    info: SynthInfo,
    bytes: u64,
}

impl<W: Write> Gen<W> {
    fn tick(&mut self, max: u64) -> u64 {
        self.time += 100 + self.rng.below(max);
        self.time
    }

    fn use_site(&mut self, site: usize) {
        if !self.sites.defined[site - 1] {
            self.sites.defined[site - 1] = true;
            let frames = &self.sites.frames[site - 1];
            self.w.encoder().stack(site as u64, frames);
            self.info.records += 1;
            self.info.stacks += 1;
        }
    }

    fn event(&mut self) -> io::Result<()> {
        self.info.events += 1;
        self.info.records += 1;
        if self.w.encoder().len() >= BLOCK_FLUSH_BYTES {
            let time = self.time;
            let stats = Stats {
                time_ns: time,
                events: self.info.events,
                queue_waits: 0,
                dropped: 0,
            };
            self.w.encoder().stats(&stats);
            self.info.records += 1;
            self.bytes += self.w.flush_block()? as u64;
        }
        Ok(())
    }

    fn alloc(&mut self, site: usize, kind: MemKind, size: u64) -> io::Result<u64> {
        self.use_site(site);
        let (pool, tid, api) = match kind {
            MemKind::PinnedHost => (&mut self.host, 1001, CUDA_HOST_ALLOC),
            _ => (&mut self.device, 1000, CUDA_MALLOC),
        };
        let address = pool.take(size);
        let time_ns = self.tick(3000);
        self.w.encoder().alloc(&Alloc {
            time_ns,
            tid,
            api,
            kind,
            device: 0,
            address,
            size,
            stream: 0,
            pool: 0,
            stack: site as u64,
        });
        self.event()?;
        Ok(address)
    }

    fn free(&mut self, site: usize, kind: MemKind, address: u64, size: u64) -> io::Result<()> {
        self.use_site(site);
        let (pool, tid, api) = match kind {
            MemKind::PinnedHost => (&mut self.host, 1001, CUDA_FREE_HOST),
            _ => (&mut self.device, 1000, CUDA_FREE),
        };
        pool.give(address, size);
        let time_ns = self.tick(2000);
        self.w.encoder().free(&Free {
            time_ns,
            tid,
            api,
            address,
            stream: 0,
            stack: site as u64,
            result: 0,
            flags: 0,
            kind: MemKind::Device,
            size: 0,
        });
        self.event()
    }

    fn pair(&mut self, alloc_site: usize, free_site: usize, size: u64) -> io::Result<()> {
        let a = self.alloc(alloc_site, MemKind::Device, size)?;
        self.free(free_site, MemKind::Device, a, size)
    }
}

/// Call-site ids of each phase of a step.
struct Plan {
    params: Vec<usize>,
    /// [train, eval][layer][op]; op `OPS` is the workspace.
    forward: [Vec<[usize; OPS + 1]>; 2],
    /// Per layer: gradient temporary, activation free, accumulation buffer.
    backward: Vec<[usize; 3]>,
    optimizer: Vec<usize>,
    leak: [usize; LEAK_SITES],
    pinned: [usize; 2],
}

fn plan(sites: &mut Sites, rng: &mut Rng) -> Plan {
    let params = (0..PARAM_SITES)
        .map(|i| sites.add(rng, 1, i as u64, 4))
        .collect();
    let mut forward = [Vec::new(), Vec::new()];
    for (path, fwd) in forward.iter_mut().enumerate() {
        for layer in 0..LAYERS as u64 {
            let mut ops = [0; OPS + 1];
            for op in ops.iter_mut() {
                *op = sites.add(rng, 2 + path as u64, layer, 3 + (layer % 4) as usize);
            }
            fwd.push(ops);
        }
    }
    let backward = (0..LAYERS as u64)
        .map(|layer| [0, 1, 2].map(|_| sites.add(rng, 4, layer, 5)))
        .collect();
    let optimizer = (0..OPT_GROUPS as u64)
        .map(|g| sites.add(rng, 5, g, 2))
        .collect();
    let leak = [0; LEAK_SITES].map(|_| sites.add(rng, 6, 0, 6));
    let pinned = [0; 2].map(|_| sites.add(rng, 7, 0, 3));
    Plan {
        params,
        forward,
        backward,
        optimizer,
        leak,
        pinned,
    }
}

/// Activation bytes of one op of one layer at a sequence-length bucket (multiples of 512).
fn act_size(layer: usize, op: usize, seq: u64) -> u64 {
    let base = [4u64 << 20, 4 << 20, 12 << 20, 16 << 20, 1 << 20, 2 << 20][op];
    let layer_scale = 1 + (layer % 3) as u64;
    base * layer_scale * (seq + 2) / 4 / 512 * 512
}

/// Writes a trace of about `target_bytes` (it stops at the first step that passes it).
pub fn generate(path: &Path, target_bytes: u64) -> io::Result<SynthInfo> {
    let header = serde_json::json!({
        "format": "gpumemprof-trace",
        "pid": 4242,
        "argv": ["python", "train.py", "--synthetic"],
        "start_monotonic_ns": 0,
        "clock": "CLOCK_MONOTONIC",
        "apis": [
            {"id": CUDA_MALLOC, "name": "cudaMalloc", "family": "runtime"},
            {"id": CUDA_FREE, "name": "cudaFree", "family": "runtime"},
            {"id": CUDA_HOST_ALLOC, "name": "cudaHostAlloc", "family": "runtime"},
            {"id": CUDA_FREE_HOST, "name": "cudaFreeHost", "family": "runtime"},
        ],
        "synthetic": {"generator": GENERATOR_VERSION, "target_bytes": target_bytes},
    });
    let file = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let w = TraceWriter::new(file, &header, ZSTD_LEVEL)?;
    let preamble = serde_json::to_vec(&header).map_or(0, |j| j.len() as u64 + 16);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut sites = Sites::new();
    let plan = plan(&mut sites, &mut rng);
    let mut g = Gen {
        w,
        rng,
        sites,
        device: Pool::new(0x7e00_0000_0000),
        host: Pool::new(0x7fd0_0000_0000),
        time: 1_000_000,
        info: SynthInfo::default(),
        bytes: preamble,
    };
    for (i, lib) in [
        "python3.11",
        "libtorch_cuda.so",
        "libc10_cuda.so",
        "libcudart.so.12",
    ]
    .iter()
    .enumerate()
    {
        let start = [
            0x5600_0000_0000u64,
            0x7f20_0000_0000,
            0x7f30_0000_0000,
            0x7f10_0000_0000,
        ][i];
        g.w.encoder().module(&Module {
            time_ns: 0,
            bias: start,
            start,
            end: start + 0x1000_0000,
            path: format!("/opt/synthetic/{lib}"),
            build_id: vec![i as u8; 20],
        });
        g.info.records += 1;
    }
    for &site in &plan.params {
        for _ in 0..PARAMS_PER_SITE {
            let size = (64 << 10) + g.rng.below(16 << 20) / 512 * 512;
            g.alloc(site, MemKind::Device, size)?;
        }
    }
    let mut acts: Vec<(u64, u64)> = Vec::with_capacity(OPS);
    let mut live: Vec<Vec<(u64, u64)>> = (0..LAYERS).map(|_| Vec::with_capacity(OPS)).collect();
    let mut step = 0u64;
    while g.bytes + g.w.encoder().len() as u64 / 4 < target_bytes {
        step += 1;
        g.time += 50_000; // the host's work between steps
        let seq = g.rng.below(4);
        let pinned_size = (8 << 20) * (seq + 1);
        let batch = g.alloc(plan.pinned[0], MemKind::PinnedHost, pinned_size)?;
        let eval = step.is_multiple_of(20);
        let fwd = &plan.forward[usize::from(eval)];
        for (layer, ops) in fwd.iter().enumerate() {
            acts.clear();
            for (op, &site) in ops[..OPS].iter().enumerate() {
                let size = act_size(layer, op, seq);
                acts.push((g.alloc(site, MemKind::Device, size)?, size));
            }
            g.pair(ops[OPS], ops[OPS], (256 << 10) << (layer % 4))?;
            if eval {
                for &(a, size) in acts.iter().rev() {
                    g.free(ops[0], MemKind::Device, a, size)?;
                }
            } else {
                live[layer].clone_from(&acts);
            }
        }
        if !eval {
            for (layer, sites) in plan.backward.iter().enumerate().rev() {
                g.pair(sites[0], sites[1], act_size(layer, 2, seq))?;
                for (a, size) in live[layer].drain(..).rev() {
                    g.free(sites[1], MemKind::Device, a, size)?;
                }
                g.pair(sites[2], sites[1], act_size(layer, 4, seq))?;
            }
            for &site in &plan.optimizer {
                let size = (1 << 20) + (site as u64 % 7) * (256 << 10);
                g.pair(site, site, size)?;
            }
        }
        if step.is_multiple_of(4) {
            let site = plan.leak[(step / 4) as usize % LEAK_SITES];
            g.alloc(site, MemKind::Device, 64 << 10)?;
        }
        if step.is_multiple_of(5000) {
            failed_then_retried(&mut g, plan.leak[0])?;
        }
        g.free(plan.pinned[1], MemKind::PinnedHost, batch, pinned_size)?;
        if step.is_multiple_of(64) {
            let time_ns = g.time;
            g.w.encoder().sample(&Sample {
                time_ns,
                device: 0,
                process_used: 40 << 30,
                device_used: 42 << 30,
                device_total: 80 << 30,
                query_ns: 0,
            });
            g.info.records += 1;
        }
    }
    let end = Stats {
        time_ns: g.time,
        events: g.info.events,
        queue_waits: 0,
        dropped: 0,
    };
    g.w.encoder().end(&end);
    g.info.records += 1;
    g.bytes += g.w.flush_block()? as u64;
    g.w.into_inner()
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    g.info.bytes = g.bytes;
    g.info.steps = step;
    Ok(g.info)
}

/// An out-of-memory failure of a 20 GiB request, then the caching allocator's retry of a
/// smaller one after emptying its cache.
fn failed_then_retried<W: Write>(g: &mut Gen<W>, site: usize) -> io::Result<()> {
    g.use_site(site);
    let time_ns = g.tick(1000);
    g.w.encoder().alloc_failed(&AllocFailed {
        time_ns,
        tid: 1000,
        api: CUDA_MALLOC,
        kind: MemKind::Device,
        device: 0,
        size: 20 << 30,
        stream: 0,
        pool: 0,
        stack: site as u64,
        result: 2,
        mem_free: 1 << 30,
        mem_total: 80 << 30,
    });
    g.event()?;
    g.pair(site, site, 512 << 20)
}
