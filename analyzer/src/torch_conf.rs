//! PyTorch's caching-allocator configuration as the profiled job had it: the first of
//! `PYTORCH_CUDA_ALLOC_CONF` and `PYTORCH_ALLOC_CONF` that was set when the process started
//! (the shim records both in the trace header's `framework.env`), read with PyTorch's
//! syntax, `key:value` pairs separated by commas. Unknown keys are ignored here (PyTorch
//! itself rejects them, so a job that ran had none); a value PyTorch would refuse leaves
//! the default.

/// What the reports need of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocConf {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `large_segment_size_mb` in bytes: the segment made for a request of 1 to 10 MiB.
    pub large_segment_size: u64,
}

const MIB: u64 = 1 << 20;
/// `kSmallSize`, `kSmallBuffer`, `kMinLargeAlloc`, `kRoundLarge` (c10's constants).
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;

impl Default for AllocConf {
    fn default() -> Self {
        AllocConf {
            expandable_segments: false,
            large_segment_size: 20 * MIB,
        }
    }
}

impl AllocConf {
    /// The configuration recorded in a trace header (the default when none was set).
    pub fn of_header(header: &serde_json::Value) -> AllocConf {
        let env = &header["framework"]["env"];
        ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
            .iter()
            .find_map(|k| env.get(*k).and_then(|v| v.as_str()))
            .map_or_else(AllocConf::default, AllocConf::parse)
    }

    /// `expandable_segments:True,large_segment_size_mb:40`, as PyTorch reads it.
    pub fn parse(text: &str) -> AllocConf {
        let mut conf = AllocConf::default();
        for pair in text.split(',') {
            let Some((key, value)) = pair.split_once(':') else {
                continue;
            };
            match (key.trim(), value.trim()) {
                ("expandable_segments", v) => conf.expandable_segments = v == "True",
                ("large_segment_size_mb", v) => {
                    if let Some(mb) = v
                        .parse::<u64>()
                        .ok()
                        .filter(|mb| *mb > MIN_LARGE_ALLOC / MIB)
                    {
                        conf.large_segment_size = mb.saturating_mul(MIB);
                    }
                }
                _ => {}
            }
        }
        conf
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
