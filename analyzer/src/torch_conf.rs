//! PyTorch's caching-allocator configuration as the profiled job had it: the first of
//! `PYTORCH_CUDA_ALLOC_CONF` and `PYTORCH_ALLOC_CONF` that was set when the process started
//! (the shim records both in the trace header's `framework.env`), read with PyTorch's
//! syntax, `key:value` pairs separated by commas, and the policy's sizes that follow from
//! it (`round_size`, `get_allocation_size`). Read from a trace, unknown keys are ignored
//! (PyTorch itself rejects them, so a job that ran had none) and a value PyTorch would
//! refuse leaves the default; given by a user (`whatif --set`), both are errors.

/// The configuration: every key of PyTorch's that changes where blocks go (the keys
/// of `AcceleratorAllocatorConfig` and `CUDAAllocatorConfig`, c10/core/AllocatorConfig.h
/// and c10/cuda/CUDAAllocatorConfig.h), with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllocConf {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `large_segment_size_mb` in bytes: the segment made for a request of 1 to 10 MiB,
    /// and the page of the large pool's expandable segment.
    pub large_segment_size: u64,
    /// `max_split_size_mb` in bytes (`u64::MAX`: unlimited): blocks this large or larger
    /// are never split, and only requests this large take them.
    pub max_split_size: u64,
    /// `max_non_split_rounding_mb` in bytes (`None`: `large_segment_size`): how much
    /// larger than an oversize request an unsplit block handed to it may be.
    pub max_non_split_rounding: Option<u64>,
    /// `garbage_collection_threshold` (0: off; acts only with a memory fraction).
    pub garbage_collection_threshold: f64,
    /// `roundup_power2_divisions`, per interval `[2^(20+i), 2^(21+i))`, 0 or 1: off.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `per_process_memory_fraction` (1: no cap).
    pub per_process_memory_fraction: f64,
    /// `backend:cudaMallocAsync`: CUDA's own pool places blocks, not this policy.
    pub backend_async: bool,
}

const MIB: u64 = 1 << 20;
/// `kMinBlockSize`, `kSmallSize`, `kSmallBuffer`, `kMinLargeAlloc`, `kRoundLarge` (c10's
/// constants).
pub const MIN_BLOCK_SIZE: u64 = 512;
pub const SMALL_SIZE: u64 = MIB;
pub const SMALL_BUFFER: u64 = 2 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;
/// The intervals of `roundup_power2_divisions`: 1 MiB up to 32 GiB and above.
pub const ROUNDUP_INTERVALS: usize = 16;

/// Keys PyTorch accepts that do not change where blocks go (pinned memory, locking).
const INERT_KEYS: &[&str] = &[
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
    "throw_on_cudamalloc_oom",
];

impl Default for AllocConf {
    fn default() -> Self {
        AllocConf {
            expandable_segments: false,
            large_segment_size: 20 * MIB,
            max_split_size: u64::MAX,
            max_non_split_rounding: None,
            garbage_collection_threshold: 0.0,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            per_process_memory_fraction: 1.0,
            backend_async: false,
        }
    }
}

impl AllocConf {
    /// The configuration recorded in a trace header (the default when none was set).
    pub fn of_header(header: &serde_json::Value) -> AllocConf {
        Self::text_of_header(header).map_or_else(AllocConf::default, AllocConf::parse)
    }

    /// `PYTORCH_CUDA_ALLOC_CONF`, else `PYTORCH_ALLOC_CONF`, as the process had it.
    pub fn text_of_header(header: &serde_json::Value) -> Option<&str> {
        let env = &header["framework"]["env"];
        ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
            .iter()
            .find_map(|k| env.get(*k).and_then(|v| v.as_str()))
    }

    /// `expandable_segments:True,large_segment_size_mb:40`, as PyTorch reads it; a pair
    /// PyTorch would refuse leaves its default (a job that ran had none).
    pub fn parse(text: &str) -> AllocConf {
        let mut conf = AllocConf::default();
        for pair in pairs(text) {
            let _ = conf.set_pair(pair);
        }
        conf
    }

    /// Applies `key:value[,key:value]...` (PyTorch's syntax); the first pair PyTorch
    /// would refuse is the error, in words.
    pub fn apply(&mut self, text: &str) -> Result<(), String> {
        for pair in pairs(text) {
            self.set_pair(pair)?;
        }
        Ok(())
    }

    fn set_pair(&mut self, pair: &str) -> Result<(), String> {
        let (key, value) = pair
            .split_once(':')
            .ok_or_else(|| format!("{pair:?}: give KEY:VALUE (e.g. expandable_segments:True)"))?;
        let (key, value) = (key.trim(), value.trim());
        let mb = |least: u64| -> Result<u64, String> {
            let v: u64 = value
                .parse()
                .map_err(|_| format!("{key}: {value:?} is not a whole number of MB"))?;
            if v < least {
                return Err(format!(
                    "{key}: {v} is too small, PyTorch needs at least {least}"
                ));
            }
            Ok(v.saturating_mul(MIB))
        };
        let fraction = |low_open: bool| -> Result<f64, String> {
            let v: f64 = value
                .parse()
                .map_err(|_| format!("{key}: {value:?} is not a number"))?;
            let ok = if low_open {
                v > 0.0 && v < 1.0
            } else {
                v > 0.0 && v <= 1.0
            };
            if !ok {
                return Err(format!("{key}: {v} is out of PyTorch's range"));
            }
            Ok(v)
        };
        let large_mb = self.large_segment_size / MIB;
        match key {
            "expandable_segments" => {
                self.expandable_segments = match value {
                    "True" => true,
                    "False" => false,
                    _ => return Err(format!("{key}: give True or False, not {value:?}")),
                }
            }
            "large_segment_size_mb" => self.large_segment_size = mb(MIN_LARGE_ALLOC / MIB + 1)?,
            "max_split_size_mb" => self.max_split_size = mb(large_mb)?,
            "max_non_split_rounding_mb" => self.max_non_split_rounding = Some(mb(large_mb)?),
            "garbage_collection_threshold" => self.garbage_collection_threshold = fraction(true)?,
            "per_process_memory_fraction" => self.per_process_memory_fraction = fraction(false)?,
            "roundup_power2_divisions" => self.roundup_power2_divisions = divisions(value)?,
            "backend" => {
                self.backend_async = match value {
                    "native" => false,
                    "cudaMallocAsync" => true,
                    _ => {
                        return Err(format!(
                            "{key}: give native or cudaMallocAsync, not {value:?}"
                        ))
                    }
                }
            }
            k if INERT_KEYS.contains(&k) => {}
            _ => {
                return Err(format!(
                    "{key:?} is not a key of PyTorch's allocator configuration"
                ))
            }
        }
        Ok(())
    }

    /// The keys that differ from PyTorch's defaults, in PyTorch's syntax (empty: the
    /// defaults).
    pub fn to_text(&self) -> String {
        let d = AllocConf::default();
        let mut keys = Vec::new();
        if self.backend_async {
            keys.push("backend:cudaMallocAsync".to_string());
        }
        if self.expandable_segments {
            keys.push("expandable_segments:True".into());
        }
        if self.large_segment_size != d.large_segment_size {
            keys.push(format!(
                "large_segment_size_mb:{}",
                self.large_segment_size / MIB
            ));
        }
        if self.max_split_size != d.max_split_size {
            keys.push(format!("max_split_size_mb:{}", self.max_split_size / MIB));
        }
        if let Some(r) = self.max_non_split_rounding {
            keys.push(format!("max_non_split_rounding_mb:{}", r / MIB));
        }
        if self.garbage_collection_threshold != d.garbage_collection_threshold {
            keys.push(format!(
                "garbage_collection_threshold:{}",
                self.garbage_collection_threshold
            ));
        }
        if self.per_process_memory_fraction != d.per_process_memory_fraction {
            keys.push(format!(
                "per_process_memory_fraction:{}",
                self.per_process_memory_fraction
            ));
        }
        let r = &self.roundup_power2_divisions;
        if r != &d.roundup_power2_divisions {
            if r.iter().all(|x| *x == r[0]) {
                keys.push(format!("roundup_power2_divisions:{}", r[0]));
            } else {
                let list: Vec<String> = (r.iter().enumerate())
                    .map(|(i, x)| format!("{}:{x}", 1u64 << i))
                    .collect();
                keys.push(format!("roundup_power2_divisions:[{}]", list.join(",")));
            }
        }
        keys.join(",")
    }

    /// `max_non_split_rounding_mb` in effect.
    pub fn non_split_rounding(&self) -> u64 {
        self.max_non_split_rounding
            .unwrap_or(self.large_segment_size)
    }

    /// `round_size`: the block size PyTorch looks for when `size` bytes are asked for.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let d = self.divisions_for(size);
        if d > 1 && size > MIN_BLOCK_SIZE * d {
            roundup_power2_next_division(size, d)
        } else {
            size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
        }
    }

    /// `roundup_power2_divisions(size)`: sizes below 1 MiB take the first interval's.
    fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - u64::from(size.leading_zeros());
        let index = log.saturating_sub(20).min(ROUNDUP_INTERVALS as u64 - 1);
        self.roundup_power2_divisions[index as usize]
    }

    /// `get_allocation_size`: the segment PyTorch asks CUDA for when a block of `size`
    /// (already rounded) finds no cached block; its out-of-memory message calls it "Tried
    /// to allocate".
    pub fn allocation_size(&self, size: u64) -> u64 {
        if size <= SMALL_SIZE {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            self.large_segment_size
        } else {
            size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
        }
    }
}

/// The `key:value` pairs of a configuration string: commas inside `[...]` (a
/// `roundup_power2_divisions` list) do not separate.
fn pairs(text: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|p| !p.trim().is_empty())
}

/// `parseRoundUpPower2Divisions`: one number for every interval, or
/// `[B1:d1,...,>:dN]` with B a power-of-two boundary in MB (its interval is log2 B); the
/// first entry also fills the intervals below it, `>` those after the last boundary.
fn divisions(value: &str) -> Result<[u64; ROUNDUP_INTERVALS], String> {
    let key = "roundup_power2_divisions";
    let number = |t: &str| -> Result<u64, String> {
        let v: u64 = (t.trim().parse()).map_err(|_| format!("{key}: {t:?} is not a number"))?;
        if v != 0 && !v.is_power_of_two() {
            return Err(format!("{key}: {v} is not a power of 2"));
        }
        Ok(v)
    };
    let mut out = [0u64; ROUNDUP_INTERVALS];
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        out.fill(number(value)?);
        return Ok(out);
    };
    let mut last: Option<usize> = None;
    for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
        let (bound, d) = entry
            .split_once(':')
            .ok_or_else(|| format!("{key}: {entry:?}: give BOUNDARY_MB:DIVISIONS"))?;
        let d = number(d)?;
        if bound.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(ROUNDUP_INTERVALS)..].fill(d);
            continue;
        }
        let b: u64 = (bound.trim().parse())
            .ok()
            .filter(|b: &u64| b.is_power_of_two())
            .ok_or_else(|| format!("{key}: {bound:?} is not a power-of-two size in MB"))?;
        let index = (63 - b.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if last.is_none() {
            out[..index].fill(d);
        }
        out[index] = d;
        last = Some(index);
    }
    Ok(out)
}

/// `roundup_power2_next_division`: `size` rounded up to the next of `divisions` equal
/// steps between two powers of two (1200 in 4 divisions: 1280).
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> divisions.trailing_zeros();
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_read_as_pytorch_reads_it() {
        let header = serde_json::json!({"framework": {"env": {
            "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128, expandable_segments:True",
            "PYTORCH_ALLOC_CONF": "expandable_segments:False"
        }}});
        // PYTORCH_CUDA_ALLOC_CONF is read first.
        assert!(AllocConf::of_header(&header).expandable_segments);
        let only_new = serde_json::json!({"framework": {"env": {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}}});
        assert!(AllocConf::of_header(&only_new).expandable_segments);
        assert_eq!(
            AllocConf::of_header(&serde_json::json!({})),
            AllocConf::default()
        );
        assert!(!AllocConf::parse("expandable_segments:true").expandable_segments);
        assert_eq!(
            AllocConf::parse("large_segment_size_mb:40").large_segment_size,
            40 * MIB
        );
        // PyTorch refuses 10 or less: the default stays.
        assert_eq!(
            AllocConf::parse("large_segment_size_mb:8").large_segment_size,
            20 * MIB
        );
    }

    #[test]
    fn every_key_is_read_with_pytorchs_limits() {
        let mut c = AllocConf::default();
        c.apply("max_split_size_mb:128,garbage_collection_threshold:0.6,per_process_memory_fraction:0.5")
            .unwrap();
        assert_eq!(c.max_split_size, 128 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(c.per_process_memory_fraction, 0.5);
        assert_eq!(c.non_split_rounding(), 20 * MIB);
        c.apply("max_non_split_rounding_mb:64, backend:cudaMallocAsync")
            .unwrap();
        assert_eq!((c.non_split_rounding(), c.backend_async), (64 * MIB, true));
        // What PyTorch refuses is refused, in words.
        let refuse = |text: &str| AllocConf::default().apply(text).unwrap_err();
        assert_eq!(
            refuse("max_split_size_mb:8"),
            "max_split_size_mb: 8 is too small, PyTorch needs at least 20"
        );
        assert_eq!(
            refuse("garbage_collection_threshold:1.0"),
            "garbage_collection_threshold: 1 is out of PyTorch's range"
        );
        assert_eq!(
            refuse("expandable_segments:yes"),
            "expandable_segments: give True or False, not \"yes\""
        );
        assert_eq!(
            refuse("no_such_key:1"),
            "\"no_such_key\" is not a key of PyTorch's allocator configuration"
        );
        assert_eq!(
            refuse("roundup_power2_divisions:3"),
            "roundup_power2_divisions: 3 is not a power of 2"
        );
        assert!(AllocConf::default()
            .apply("release_lock_on_cudamalloc:True")
            .is_ok());
        // Written back with only what differs from the defaults.
        assert_eq!(
            c.to_text(),
            "backend:cudaMallocAsync,max_split_size_mb:128,max_non_split_rounding_mb:64,\
             garbage_collection_threshold:0.6,per_process_memory_fraction:0.5"
        );
        assert_eq!(
            AllocConf::parse(" expandable_segments:False ").to_text(),
            ""
        );
    }

    #[test]
    fn sizes_round_as_round_size_rounds_them() {
        let c = AllocConf::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(3 * MIB + 1), 3 * MIB + 512);
        // The source's own example, 1200 in 4 divisions (below 1 MiB: the first interval).
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        let mut four = AllocConf::default();
        four.apply("roundup_power2_divisions:4").unwrap();
        // Only above 512 bytes per division (2 KiB here); 9,000 B: 8 KiB + 2 KiB steps.
        assert_eq!(four.round_size(1200), 1536);
        assert_eq!(four.round_size(9000), 10240);
        // 1.1 GiB in 4 divisions of [1 GiB, 2 GiB): 1.25 GiB.
        assert_eq!(four.round_size(1126 * MIB), 1280 * MIB);
        assert_eq!(four.round_size(1024 * MIB), 1024 * MIB);
        // A list: the first entry fills below it, `>` after the last; between, off.
        let mut list = AllocConf::default();
        list.apply("roundup_power2_divisions:[2:4,64:2,>:8],expandable_segments:True")
            .unwrap();
        let d = list.roundup_power2_divisions;
        assert_eq!((d[0], d[1], d[2], d[6], d[7], d[15]), (4, 4, 0, 2, 8, 8));
        assert!(list.expandable_segments);
        // 96.5 MiB lies in [64 MiB, 128 MiB): 2 divisions, so 128 MiB.
        assert_eq!(list.round_size(96 * MIB + 512), 128 * MIB);
    }

    #[test]
    fn segments_are_sized_as_get_allocation_size_sizes_them() {
        let c = AllocConf::default();
        assert_eq!(c.allocation_size(512), 2 * MIB);
        assert_eq!(c.allocation_size(MIB), 2 * MIB);
        assert_eq!(c.allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(c.allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(c.allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(c.allocation_size(256 * MIB + 512), 258 * MIB);
    }
}
