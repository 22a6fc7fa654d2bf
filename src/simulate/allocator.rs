//! A replay of torch 2.11's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! `DeviceCachingAllocator`) under the `PYTORCH_CUDA_ALLOC_CONF` settings of
//! [`AllocatorSettings`] (parsed as `c10/core/AllocatorConfig.cpp` `AllocatorConfig::parseArgs`
//! does). With no settings (the default configuration: `max_split_size` unlimited,
//! `max_non_split_rounding_size` = `kLargeBuffer`, `roundup_power2_divisions` 0, expandable
//! segments off, no garbage-collection threshold) it is the replay it always was, byte for
//! byte. It is fed the simulator's sequence of allocations and frees and answers what
//! `torch.cuda.memory_allocated` / `memory_reserved` (the aggregate `allocated_bytes` and
//! `reserved_bytes` stats) would read, with their peaks.
//!
//! The rules, each as the source has it:
//! - `round_size`: a request is rounded up to a multiple of `kMinBlockSize` = 512 bytes (at
//!   least 512).
//! - `get_pool`: rounded sizes up to `kSmallSize` = 1 MiB go to the small pool, larger ones to
//!   the large pool.
//! - `get_allocation_size`: a new segment (`cudaMalloc`) is `kSmallBuffer` = 2 MiB for a small
//!   request, `kLargeBuffer` = 20 MiB for a request under `kMinLargeAlloc` = 10 MiB, else the
//!   request rounded up to `kRoundLarge` = 2 MiB.
//! - `get_free_block`: best fit within the pool: the smallest cached free block of at least the
//!   rounded size (the block set is ordered by stream, size, then address; one stream here).
//!   With `max_split_size` M set: a request under M does not take a block of M or more (the
//!   search stops there: every later block is larger), and a request of M or more takes a
//!   block only if it is under request + `max_non_split_rounding_size` (20 MiB unless
//!   `max_non_split_rounding_mb` says otherwise).
//! - `should_split`: a found block is split when the remainder is at least 512 bytes (small
//!   pool, or any pool with expandable segments) or, in the large pool, when the request is
//!   under M and the remainder more than `kSmallSize` = 1 MiB; otherwise the whole block is
//!   handed out and counted as allocated (so a request of M or more is never split off).
//! - `free_block` / `try_merge_blocks`: a freed block merges with the free neighbours of its
//!   segment that are mapped as it is, and goes back to its pool's cache; segments are never
//!   returned to the device...
//! - ...except when `alloc_block` fails: when `set_fraction` and `total_allocated_memory +
//!   alloc_size > allowed_memory_maximum` (`setMemoryFraction` caps the **reserved** bytes,
//!   not the allocated ones) or when the device has no room. Then, in `malloc`'s order:
//!   `release_available_cached_blocks` (only with M set: the smallest cached block of at least
//!   max(request, M) is freed, else the largest cached blocks of M or more, largest first,
//!   until they add up to max(request, M); `alloc_block` is retried if that freed enough);
//!   then `release_cached_blocks` frees every cached segment that is not split (a wholly free
//!   segment) in both pools, and `alloc_block` is retried once more; if that fails too the
//!   allocation raises "CUDA out of memory".
//! - `garbage_collect_cached_blocks` (only with `garbage_collection_threshold` T set **and** a
//!   memory fraction, the replay's cap): before `alloc_block`, when reserved passes T x
//!   allowed, the large pool's whole cached segments are freed oldest first (age: the pool's
//!   `get_free_block` calls since the block was cached, `gc_count`), those at or above the
//!   mean age in each pass, until reserved is back under T x allowed or nothing is left.
//! - Expandable segments (`ExpandableSegment`, `find_expandable_block`, `map_block`,
//!   `try_allocate_expandable_block`, `unmap_block`, `release_blocks`): each pool gets one
//!   virtual segment (per stream; one stream here) whose address space is mapped to memory in
//!   pages of `kSmallBuffer` = 2 MiB (small pool) or `kLargeBuffer` = 20 MiB (large pool).
//!   `reserved_bytes` counts the mapped pages only. When no cached block fits,
//!   `find_expandable_block` takes the lowest unmapped range of the pool's segment (starting
//!   at the free block just before it, if there is one) and `map_block` maps the pages the
//!   request still needs, so that a free block at the end grows in place instead of a new
//!   segment being made. `get_free_block` ranks a block followed by unmapped space by the size
//!   it could grow to (so it prefers a larger block in the middle over the growable end).
//!   On an allocation failure `release_cached_blocks` unmaps every whole page of each cached
//!   block (`unmap_block`), and frees a segment left wholly unmapped.
//!
//! Left out: streams other than one (each stream's blocks are their own); CUDA graphs'
//! private pools; `recordStream` events; `roundup_power2_divisions` and the
//! `cudaMallocAsync` backend (refused by [`AllocatorSettings::parse`], not modelled); the
//! address space of an expandable segment (1 1/8 x the device's memory in torch; unlimited
//! here, which matters only after unmapping holes on an out-of-memory); the device running
//! out of pages before the cap (`map` failing part way); switching expandable segments on or
//! off mid-run (the settings are fixed for a replay); and `release_available_cached_blocks`
//! or garbage collection meeting an expandable block (torch's `release_block` asserts it never
//! does; the replay skips those blocks).

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// `kMinBlockSize`: every request is rounded to a multiple of this.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: the largest request of the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: the small pool's segment size (and its expandable segments' page).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: the segment size for requests between 1 and 10 MiB (and the large pool's
/// expandable-segment page, and the default `max_non_split_rounding_size`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: requests from this size on get a segment of their own size.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: large segments are rounded up to this.
pub const ROUND_LARGE: u64 = 2 << 20;
/// An expandable segment's address space, in pages (torch: 1 1/8 x the device's memory; here
/// more than any device has, 2 TiB of small pages or 20 TiB of large ones).
const EXPANDABLE_PAGES: u64 = 1 << 20;
const MB: u64 = 1 << 20;

/// `round_size` with the default configuration.
pub fn round_size(size: u64) -> u64 {
    if size < MIN_BLOCK {
        MIN_BLOCK
    } else {
        size.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// `get_allocation_size`: the size of the segment a rounded request makes when nothing cached
/// fits it.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// The caching allocator's settings, as `PYTORCH_CUDA_ALLOC_CONF` sets them. The default is
/// torch's default configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AllocatorSettings {
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
    /// `max_split_size_mb:N`, in bytes (None: unlimited).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb:N`, in bytes (None: `kLargeBuffer`).
    pub max_non_split_rounding: Option<u64>,
    /// `garbage_collection_threshold:F`, in (0, 1) (None: off).
    pub garbage_collection_threshold: Option<f64>,
}

fn parse_bool(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(format!(
            "expected a single True/False argument for {key}, found `{value}`"
        )),
    }
}

fn parse_mb(key: &str, value: &str) -> Result<u64, String> {
    let mb: u64 = value
        .parse()
        .map_err(|_| format!("{key} must be a whole number of MiB, found `{value}`"))?;
    if mb < LARGE_BUFFER / MB {
        return Err(format!(
            "{key} too small, must be >= {} (torch's minimum), found {mb}",
            LARGE_BUFFER / MB
        ));
    }
    mb.checked_mul(MB)
        .ok_or_else(|| format!("{key} too large, found {mb}"))
}

impl AllocatorSettings {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string: `key:value` options joined by commas (spaces
    /// ignored, as torch's lexer drops them; empty: the defaults). Modelled:
    /// `expandable_segments:True|False`, `max_split_size_mb:N` (N >= 20),
    /// `max_non_split_rounding_mb:N` (N >= 20), `garbage_collection_threshold:F` (0 < F < 1).
    /// Accepted and ignored (no effect on device memory): `backend:native`,
    /// `release_lock_on_cudamalloc`, `pinned_use_cuda_host_register`,
    /// `pinned_num_register_threads`, `pinned_use_background_threads`,
    /// `pinned_reserve_segment_size_mb`, `graph_capture_record_stream_reuse`. An unknown key, a
    /// malformed value, or `roundup_power2_divisions` / `backend:cudaMallocAsync` (not
    /// modelled) is an error naming the key.
    pub fn parse(conf: &str) -> Result<AllocatorSettings, String> {
        let conf: String = conf.chars().filter(|c| *c != ' ').collect();
        let mut s = AllocatorSettings::default();
        let items: Vec<&str> = conf.split(',').collect();
        let n = items.len();
        for (i, item) in items.into_iter().enumerate() {
            if item.is_empty() {
                // torch accepts a trailing comma (and an empty string).
                if i + 1 == n {
                    continue;
                }
                return Err("an empty option between commas".into());
            }
            let Some((key, value)) = item.split_once(':') else {
                return Err(format!(
                    "option `{item}` has no value (expected `{item}:VALUE`)"
                ));
            };
            match key {
                "expandable_segments" => s.expandable_segments = parse_bool(key, value)?,
                "max_split_size_mb" => s.max_split_size = Some(parse_mb(key, value)?),
                "max_non_split_rounding_mb" => {
                    s.max_non_split_rounding = Some(parse_mb(key, value)?)
                }
                "garbage_collection_threshold" => {
                    let f: f64 = value.parse().map_err(|_| {
                        format!("garbage_collection_threshold must be a number, found `{value}`")
                    })?;
                    if !(f > 0.0 && f < 1.0) {
                        return Err(format!(
                            "garbage_collection_threshold is invalid, set it in (0.0, 1.0), found {value}"
                        ));
                    }
                    s.garbage_collection_threshold = Some(f);
                }
                "backend" => match value {
                    "native" => {}
                    "cudaMallocAsync" => {
                        return Err("backend:cudaMallocAsync is not modelled (the replay is of the native caching allocator)".into())
                    }
                    _ => {
                        return Err(format!(
                            "unknown allocator backend `{value}` for key 'backend', options are native and cudaMallocAsync"
                        ))
                    }
                },
                "roundup_power2_divisions" => {
                    return Err(
                        "roundup_power2_divisions is not modelled by the allocator replay".into(),
                    )
                }
                "release_lock_on_cudamalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_background_threads"
                | "graph_capture_record_stream_reuse" => {
                    parse_bool(key, value)?;
                }
                "pinned_num_register_threads" | "pinned_reserve_segment_size_mb" => {
                    value.parse::<u64>().map_err(|_| {
                        format!("{key} must be a whole number, found `{value}`")
                    })?;
                }
                _ => {
                    return Err(format!(
                        "unrecognized key '{key}' in the CUDA allocator config"
                    ))
                }
            }
        }
        Ok(s)
    }

    /// Torch's defaults.
    pub fn is_default(&self) -> bool {
        *self == AllocatorSettings::default()
    }

    /// `max_split_size`: unlimited (`SIZE_MAX`) unless set.
    pub fn max_split(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }

    /// `max_non_split_rounding_size`.
    pub fn non_split_rounding(&self) -> u64 {
        self.max_non_split_rounding.unwrap_or(LARGE_BUFFER)
    }

    /// The canonical string (the modelled options in a fixed order; None for the defaults).
    pub fn canonical(&self) -> Option<String> {
        (!self.is_default()).then(|| self.to_string())
    }
}

/// The modelled options as `PYTORCH_CUDA_ALLOC_CONF` writes them, in a fixed order (empty for
/// the defaults).
impl fmt::Display for AllocatorSettings {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut parts = Vec::new();
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m / MB));
        }
        if let Some(m) = self.max_non_split_rounding {
            parts.push(format!("max_non_split_rounding_mb:{}", m / MB));
        }
        if let Some(t) = self.garbage_collection_threshold {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        f.write_str(&parts.join(","))
    }
}

impl std::str::FromStr for AllocatorSettings {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AllocatorSettings::parse(s)
    }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    segment: usize,
    allocated: bool,
    /// Backed by memory (always, outside expandable segments).
    mapped: bool,
    /// `gc_count_base`: the pool's `get_free_block` calls when the block was cached.
    gc_base: u64,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    base: u64,
    size: u64,
    small: bool,
    /// Released to the device (after an out-of-memory retry).
    released: bool,
    /// An expandable segment: its page size.
    page: Option<u64>,
}

/// An allocation the program could not get: the caching allocator's "CUDA out of memory".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutOfMemory {
    /// The requested bytes.
    pub requested: u64,
    /// The segment size it needed.
    pub segment: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// The emulated cap (`setMemoryFraction` x device total), or the device's capacity.
    pub limit: u64,
}

/// The allocator's state: segments, blocks by address, the two pools' free blocks, the stats.
#[derive(Debug, Clone)]
pub struct CachingAllocator {
    limit: u64,
    /// `set_fraction`: `limit` is a memory fraction's cap (garbage collection needs one).
    fraction: bool,
    settings: AllocatorSettings,
    segments: Vec<Segment>,
    /// Every block (allocated, cached or unmapped) by address.
    blocks: BTreeMap<u64, Block>,
    /// Cached free blocks of each pool, ordered as torch's `BlockComparatorSize` (size, then
    /// address).
    free_small: BTreeSet<(u64, u64)>,
    free_large: BTreeSet<(u64, u64)>,
    /// Unmapped ranges of expandable segments (`BlockPool::unmapped`, by address).
    unmapped_small: BTreeSet<u64>,
    unmapped_large: BTreeSet<u64>,
    /// `get_free_blocks_call_count` of the small and large pools.
    gc_calls: [u64; 2],
    next_base: u64,
    allocated: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    /// Segments released by out-of-memory retries.
    pub retries: u64,
}

impl CachingAllocator {
    /// An allocator with torch's default settings whose `alloc_block` fails past `limit`
    /// reserved bytes: the emulated capacity (`setMemoryFraction`) or the device's memory.
    pub fn new(limit: u64) -> CachingAllocator {
        CachingAllocator::with_settings(Some(limit), &AllocatorSettings::default())
    }

    /// An allocator under `settings`, its reserved bytes capped at `limit` by a memory fraction
    /// (None: no cap).
    pub fn with_settings(limit: Option<u64>, settings: &AllocatorSettings) -> CachingAllocator {
        CachingAllocator {
            limit: limit.unwrap_or(u64::MAX / 4),
            fraction: limit.is_some(),
            settings: settings.clone(),
            segments: Vec::new(),
            blocks: BTreeMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            unmapped_small: BTreeSet::new(),
            unmapped_large: BTreeSet::new(),
            gc_calls: [0; 2],
            // Segment addresses are only an order; start above 0.
            next_base: 1 << 40,
            allocated: 0,
            reserved: 0,
            peak_allocated: 0,
            peak_reserved: 0,
            retries: 0,
        }
    }

    pub fn allocated(&self) -> u64 {
        self.allocated
    }
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }
    /// Segments currently held (cudaMalloc'd, or expandable, and not released).
    pub fn segments(&self) -> usize {
        self.segments.iter().filter(|s| !s.released).count()
    }

    /// `resetPeakStats`: peaks become the current levels.
    pub fn reset_peaks(&mut self) {
        self.peak_allocated = self.allocated;
        self.peak_reserved = self.reserved;
    }

    fn pool(&mut self, small: bool) -> &mut BTreeSet<(u64, u64)> {
        if small {
            &mut self.free_small
        } else {
            &mut self.free_large
        }
    }

    fn pool_ref(&self, small: bool) -> &BTreeSet<(u64, u64)> {
        if small {
            &self.free_small
        } else {
            &self.free_large
        }
    }

    fn unmapped(&mut self, small: bool) -> &mut BTreeSet<u64> {
        if small {
            &mut self.unmapped_small
        } else {
            &mut self.unmapped_large
        }
    }

    fn gc_enabled(&self) -> bool {
        self.fraction && self.settings.garbage_collection_threshold.is_some()
    }

    /// `insert_into_blocks`: a free mapped block joins its pool's cache.
    fn cache(&mut self, addr: u64, small: bool) {
        let count = self.gc_calls[usize::from(!small)];
        let b = self.blocks.get_mut(&addr).expect("cached block exists");
        b.gc_base = count;
        let size = b.size;
        self.pool(small).insert((size, addr));
    }

    /// The block just before `addr` in its segment.
    fn prev_of(&self, addr: u64) -> Option<u64> {
        let seg = self.blocks[&addr].segment;
        self.blocks
            .range(..addr)
            .next_back()
            .filter(|(&pa, p)| p.segment == seg && pa + p.size == addr)
            .map(|(&pa, _)| pa)
    }

    /// The block just after `addr` in its segment.
    fn next_of(&self, addr: u64) -> Option<u64> {
        let b = self.blocks[&addr];
        let end = addr + b.size;
        self.blocks
            .get(&end)
            .filter(|n| n.segment == b.segment)
            .map(|_| end)
    }

    /// Whether the block at `addr` is a whole segment (`!is_split()`).
    fn whole(&self, addr: u64) -> bool {
        let b = self.blocks[&addr];
        let seg = self.segments[b.segment];
        seg.base == addr && seg.size == b.size
    }

    fn expandable(&self, addr: u64) -> bool {
        self.segments[self.blocks[&addr].segment].page.is_some()
    }

    /// `malloc`: the address of the block handed out for `orig` bytes (0 bytes: no block;
    /// torch allocates nothing for an empty tensor).
    pub fn malloc(&mut self, orig: u64) -> Result<Option<u64>, OutOfMemory> {
        if orig == 0 {
            return Ok(None);
        }
        let size = round_size(orig);
        let small = size <= SMALL_SIZE;
        let addr = match self.get_free_block(size, small) {
            Some(a) => a,
            None => {
                if self.gc_enabled() {
                    self.garbage_collect_cached_blocks();
                }
                let seg = allocation_size(size);
                let mut got = self.alloc_block(size, seg, small);
                if got.is_none() && self.release_available_cached_blocks(size, small) {
                    got = self.alloc_block(size, seg, small);
                }
                match got {
                    Some(a) => a,
                    None => {
                        // release_cached_blocks, then one retry.
                        self.release_cached_blocks();
                        self.retries += 1;
                        match self.alloc_block(size, seg, small) {
                            Some(a) => a,
                            None => {
                                return Err(OutOfMemory {
                                    requested: orig,
                                    segment: seg,
                                    allocated: self.allocated,
                                    reserved: self.reserved,
                                    limit: self.limit,
                                })
                            }
                        }
                    }
                }
            }
        };
        // should_split
        let block = self.blocks[&addr];
        let remaining = block.size - size;
        let split = if small || self.settings.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            size < self.settings.max_split() && remaining > SMALL_SIZE
        };
        let given = if split {
            self.blocks.insert(
                addr + size,
                Block {
                    size: remaining,
                    segment: block.segment,
                    allocated: false,
                    mapped: true,
                    gc_base: 0,
                },
            );
            self.cache(addr + size, small);
            size
        } else {
            block.size
        };
        self.blocks.insert(
            addr,
            Block {
                size: given,
                allocated: true,
                ..block
            },
        );
        self.allocated += given;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Ok(Some(addr))
    }

    /// `get_free_block`: the cached block a request takes, out of its pool.
    fn get_free_block(&mut self, size: u64, small: bool) -> Option<u64> {
        if self.gc_enabled() {
            self.gc_calls[usize::from(!small)] += 1;
        }
        let mut it = self.pool_ref(small).range((size, 0)..);
        let mut cur = *it.next()?;
        if self.settings.expandable_segments {
            // Rank a block by the size it could grow to (it and the unmapped space after it).
            let grows = |a: u64| {
                let b = self.blocks[&a];
                b.size
                    + self
                        .next_of(a)
                        .map(|n| self.blocks[&n])
                        .filter(|n| !n.mapped)
                        .map_or(0, |n| n.size)
            };
            for &next in it {
                if !self.expandable(cur.1) || grows(next.1) >= grows(cur.1) {
                    break;
                }
                cur = next;
            }
        }
        let m = self.settings.max_split();
        // Do not return an oversized block for a large request.
        if size < m && cur.0 >= m {
            return None;
        }
        // Allow an oversized block to be rounded up, within a limit.
        if size >= m && cur.0 >= size.saturating_add(self.settings.non_split_rounding()) {
            return None;
        }
        self.pool(small).remove(&cur);
        Some(cur.1)
    }

    /// `alloc_block`: a new segment (or newly mapped pages) for a request that no cached block
    /// serves; None when the cap forbids it.
    fn alloc_block(&mut self, size: u64, alloc_size: u64, small: bool) -> Option<u64> {
        if self.reserved + alloc_size > self.limit {
            return None;
        }
        if self.settings.expandable_segments {
            return Some(self.try_allocate_expandable_block(size, small));
        }
        Some(self.new_segment(alloc_size, small))
    }

    fn new_segment(&mut self, size: u64, small: bool) -> u64 {
        let base = self.next_base;
        // Leave a gap so that segments never look adjacent.
        self.next_base += size + ROUND_LARGE;
        self.segments.push(Segment {
            base,
            size,
            small,
            released: false,
            page: None,
        });
        self.blocks.insert(
            base,
            Block {
                size,
                segment: self.segments.len() - 1,
                allocated: false,
                mapped: true,
                gc_base: 0,
            },
        );
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        base
    }

    /// `find_expandable_block`: the lowest-addressed run of free and unmapped space of the
    /// pool's expandable segments that holds `size` (starting at the free block before an
    /// unmapped range, if any); a new expandable segment when there is none.
    fn find_expandable_block(&mut self, size: u64, small: bool) -> u64 {
        let starts: Vec<u64> = self.unmapped(small).iter().copied().collect();
        for u in starts {
            let mut c = u;
            if let Some(p) = self.prev_of(u) {
                if !self.blocks[&p].allocated {
                    c = p;
                }
            }
            let (mut bytes, mut b) = (0, Some(c));
            while bytes < size {
                match b {
                    Some(a) if !self.blocks[&a].allocated => {
                        bytes += self.blocks[&a].size;
                        b = self.next_of(a);
                    }
                    _ => break,
                }
            }
            if bytes >= size {
                return c;
            }
        }
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let space = page * EXPANDABLE_PAGES;
        let base = self.next_base;
        self.next_base += space + ROUND_LARGE;
        self.segments.push(Segment {
            base,
            size: space,
            small,
            released: false,
            page: Some(page),
        });
        self.blocks.insert(
            base,
            Block {
                size: space,
                segment: self.segments.len() - 1,
                allocated: false,
                mapped: false,
                gc_base: 0,
            },
        );
        self.unmapped(small).insert(base);
        base
    }

    /// `map_block`: maps the pages covering the first `size` bytes of the unmapped block at
    /// `addr`, merges them with free mapped neighbours and caches the result (its address).
    fn map_block(&mut self, addr: u64, size: u64) -> u64 {
        let b = self.blocks[&addr];
        let seg = self.segments[b.segment];
        let page = seg.page.expect("an expandable segment");
        let off = addr - seg.base;
        let (begin, end) = (off / page, (off + size).div_ceil(page));
        let mapped = (end - begin) * page;
        let small = seg.small;
        self.unmapped(small).remove(&addr);
        if mapped < b.size {
            self.blocks.insert(
                addr + mapped,
                Block {
                    size: b.size - mapped,
                    ..b
                },
            );
            self.unmapped(small).insert(addr + mapped);
        }
        let mut start = addr;
        let mut total = mapped;
        if let Some(p) = self.prev_of(addr) {
            let pb = self.blocks[&p];
            if !pb.allocated && pb.mapped {
                self.pool(small).remove(&(pb.size, p));
                start = p;
                total += pb.size;
            }
        }
        self.blocks.remove(&addr);
        self.blocks.insert(
            start,
            Block {
                size: total,
                segment: b.segment,
                allocated: false,
                mapped: true,
                gc_base: 0,
            },
        );
        if let Some(n) = self.next_of(start) {
            let nb = self.blocks[&n];
            if !nb.allocated && nb.mapped {
                self.pool(small).remove(&(nb.size, n));
                self.blocks.remove(&n);
                self.blocks.get_mut(&start).expect("mapped block").size += nb.size;
            }
        }
        self.cache(start, small);
        self.reserved += mapped;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        start
    }

    /// `try_allocate_expandable_block`: grows the pool's expandable segment until a free block
    /// of `size` exists; that block, out of the pool.
    fn try_allocate_expandable_block(&mut self, size: u64, small: bool) -> u64 {
        let c = self.find_expandable_block(size, small);
        let mut cand = if self.blocks[&c].mapped {
            c
        } else {
            let s = self.blocks[&c].size.min(size);
            self.map_block(c, s)
        };
        while self.blocks[&cand].size < size {
            let have = self.blocks[&cand].size;
            let next = cand + have;
            let s = self.blocks[&next].size.min(size - have);
            cand = self.map_block(next, s);
        }
        let key = (self.blocks[&cand].size, cand);
        self.pool(small).remove(&key);
        cand
    }

    /// `free` / `free_block`: the block goes back to its pool, merged with free neighbours.
    pub fn free(&mut self, addr: u64) {
        let Some(mut b) = self.blocks.get(&addr).copied() else {
            debug_assert!(false, "free of an unknown block");
            return;
        };
        debug_assert!(b.allocated, "double free");
        self.allocated -= b.size;
        b.allocated = false;
        let small = self.segments[b.segment].small;
        let mut start = addr;
        // Merge with the previous block of the same segment.
        if let Some((&pa, &p)) = self.blocks.range(..addr).next_back() {
            if p.segment == b.segment && !p.allocated && p.mapped && pa + p.size == addr {
                self.pool(small).remove(&(p.size, pa));
                self.blocks.remove(&addr);
                start = pa;
                b.size += p.size;
            }
        }
        // And with the next one.
        let end = start + b.size;
        if let Some(n) = self.blocks.get(&end).copied() {
            if n.segment == b.segment && !n.allocated && n.mapped {
                self.pool(small).remove(&(n.size, end));
                self.blocks.remove(&end);
                b.size += n.size;
            }
        }
        self.blocks.insert(start, b);
        self.cache(start, small);
    }

    /// `release_block`: a cached whole segment goes back to the device.
    fn release_block(&mut self, addr: u64, small: bool) {
        let b = self.blocks[&addr];
        self.pool(small).remove(&(b.size, addr));
        self.blocks.remove(&addr);
        self.segments[b.segment].released = true;
        self.reserved -= b.size;
    }

    /// `release_available_cached_blocks`: with `max_split_size` set, frees the smallest cached
    /// block of at least max(request, M), or else the largest blocks of M or more until they
    /// add up to it. Whether enough was freed.
    fn release_available_cached_blocks(&mut self, size: u64, small: bool) -> bool {
        let m = self.settings.max_split();
        if m == u64::MAX {
            return false;
        }
        let key = size.max(m);
        let found = self.pool_ref(small).range((key, 0)..).next().copied();
        if let Some((_, a)) = found {
            if self.whole(a) && !self.expandable(a) {
                self.release_block(a, small);
                return true;
            }
            return false;
        }
        let mut released = 0;
        while released < key {
            match self.pool_ref(small).iter().next_back().copied() {
                Some((s, a)) if s >= m && self.whole(a) && !self.expandable(a) => {
                    self.release_block(a, small);
                    released += s;
                }
                _ => break,
            }
        }
        released >= key
    }

    /// `release_cached_blocks` / `release_blocks`: every cached block that is a whole segment
    /// goes back to the device; an expandable segment's cached blocks are unmapped page by page,
    /// and a segment left wholly unmapped is freed.
    fn release_cached_blocks(&mut self) {
        for small in [false, true] {
            let cached: Vec<(u64, u64)> = self.pool_ref(small).iter().copied().collect();
            let mut to_unmap = Vec::new();
            for (_, a) in cached {
                if self.expandable(a) {
                    to_unmap.push(a);
                } else if self.whole(a) {
                    self.release_block(a, small);
                }
            }
            for a in to_unmap {
                if let Some(u) = self.unmap_block(a, small) {
                    if self.whole(u) {
                        let seg = self.blocks[&u].segment;
                        self.unmapped(small).remove(&u);
                        self.blocks.remove(&u);
                        self.segments[seg].released = true;
                    }
                }
            }
        }
    }

    /// `unmap_block`: unmaps the whole pages of the cached block at `addr` (the parts before
    /// and after stay cached), merging with unmapped neighbours; the unmapped block's address,
    /// or None when no page lies wholly inside.
    fn unmap_block(&mut self, addr: u64, small: bool) -> Option<u64> {
        let b = self.blocks[&addr];
        let seg = self.segments[b.segment];
        let page = seg.page.expect("an expandable segment");
        let off = addr - seg.base;
        let (begin, end) = (off.div_ceil(page), (off + b.size) / page);
        if begin >= end {
            return None;
        }
        self.pool(small).remove(&(b.size, addr));
        let (ua, ue) = (seg.base + begin * page, seg.base + end * page);
        if ua > addr {
            self.blocks.insert(
                addr,
                Block {
                    size: ua - addr,
                    ..b
                },
            );
            self.cache(addr, small);
        }
        if addr + b.size > ue {
            self.blocks.insert(
                ue,
                Block {
                    size: addr + b.size - ue,
                    ..b
                },
            );
            self.cache(ue, small);
        }
        self.blocks.insert(
            ua,
            Block {
                size: ue - ua,
                mapped: false,
                ..b
            },
        );
        let mut start = ua;
        if let Some(p) = self.prev_of(ua) {
            if !self.blocks[&p].mapped {
                self.unmapped(small).remove(&p);
                let s = self.blocks.remove(&ua).expect("unmapped block").size;
                self.blocks.get_mut(&p).expect("unmapped neighbour").size += s;
                start = p;
            }
        }
        if let Some(n) = self.next_of(start) {
            if !self.blocks[&n].mapped {
                self.unmapped(small).remove(&n);
                let s = self.blocks.remove(&n).expect("unmapped neighbour").size;
                self.blocks.get_mut(&start).expect("unmapped block").size += s;
            }
        }
        self.unmapped(small).insert(start);
        self.reserved -= ue - ua;
        Some(start)
    }

    /// `garbage_collect_cached_blocks`: when reserved passes threshold x the cap, frees the
    /// large pool's whole cached segments, those at least as old as the mean first, until
    /// reserved is back under it.
    fn garbage_collect_cached_blocks(&mut self) {
        let Some(t) = self.settings.garbage_collection_threshold else {
            return;
        };
        let threshold = (t * self.limit as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let calls = self.gc_calls[1];
        let freeable = |a: &Self, addr: u64| a.whole(addr) && !a.expandable(addr);
        let age = |a: &Self, addr: u64| calls - a.blocks[&addr].gc_base;
        let (mut total_age, mut count) = (0u64, 0u64);
        for &(_, addr) in &self.free_large {
            if freeable(self, addr) {
                total_age += age(self, addr);
                count += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let mean = total_age as f64 / count as f64;
            freed = false;
            let cached: Vec<(u64, u64)> = self.free_large.iter().copied().collect();
            for (s, addr) in cached {
                if freeable(self, addr) && age(self, addr) as f64 >= mean {
                    freed = true;
                    reclaimed += s;
                    total_age -= age(self, addr);
                    count -= 1;
                    self.release_block(addr, false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const BIG: u64 = 1 << 50;

    #[test]
    fn requests_round_to_512_bytes() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(512), 512);
        assert_eq!(round_size(513), 1024);
        let mut a = CachingAllocator::new(BIG);
        a.malloc(4).unwrap();
        assert_eq!(a.allocated(), 512);
        // A small request opens a 2 MiB segment of the small pool.
        assert_eq!(a.reserved(), 2 * MIB);
    }

    #[test]
    fn segment_sizes_follow_get_allocation_size() {
        assert_eq!(allocation_size(MIB), 2 * MIB);
        assert_eq!(allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(10 * MIB + 512), 12 * MIB);
        let mut a = CachingAllocator::new(BIG);
        a.malloc(3 * MIB).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (3 * MIB, 20 * MIB));
        // The 17 MiB remainder was split off (more than 1 MiB) and serves the next request.
        a.malloc(5 * MIB).unwrap();
        assert_eq!(
            (a.allocated(), a.reserved(), a.segments()),
            (8 * MIB, 20 * MIB, 1)
        );
        // 12 MiB are left in that segment: 11 MiB fit there; 13 MiB do not, and get a segment
        // of their own rounded to 2 MiB (14 MiB).
        a.malloc(11 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (20 * MIB, 1));
        a.malloc(13 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (34 * MIB, 2));
    }

    #[test]
    fn small_requests_share_a_segment_and_large_ones_do_not_use_it() {
        let mut a = CachingAllocator::new(BIG);
        for _ in 0..4 {
            a.malloc(512 * 1024).unwrap();
        }
        // Four 512 KiB blocks fill one 2 MiB segment exactly; a fifth needs a new one.
        assert_eq!(a.reserved(), 2 * MIB);
        a.malloc(512).unwrap();
        assert_eq!(a.reserved(), 4 * MIB);
        // A 1 MiB + 512 request is large: a 20 MiB segment, whatever the small pool has.
        a.malloc(MIB + 1).unwrap();
        assert_eq!(a.reserved(), 24 * MIB);
    }

    #[test]
    fn best_fit_takes_the_smallest_block_that_fits() {
        let mut a = CachingAllocator::new(BIG);
        let x = a.malloc(30 * MIB).unwrap().unwrap();
        let y = a.malloc(12 * MIB).unwrap().unwrap();
        a.free(x);
        a.free(y);
        // 12 MiB and 30 MiB segments are cached; an 11 MiB request takes the 12 MiB one.
        // Its 1 MiB remainder is not split (a large block splits only past 1 MiB): the whole
        // 12 MiB counts as allocated.
        let z = a.malloc(11 * MIB).unwrap().unwrap();
        assert_eq!(z, y);
        assert_eq!(a.allocated(), 12 * MIB);
        assert_eq!(a.reserved(), 42 * MIB);
    }

    #[test]
    fn frees_merge_neighbours_and_nothing_is_released() {
        let mut a = CachingAllocator::new(BIG);
        let p = a.malloc(4 * MIB).unwrap().unwrap();
        let q = a.malloc(4 * MIB).unwrap().unwrap();
        let r = a.malloc(4 * MIB).unwrap().unwrap();
        a.free(p);
        a.free(r);
        a.free(q);
        assert_eq!((a.allocated(), a.reserved()), (0, 20 * MIB));
        // Merged back into one 20 MiB block: a 19 MiB request fits without a new segment.
        a.malloc(19 * MIB).unwrap();
        assert_eq!(a.reserved(), 20 * MIB);
    }

    #[test]
    fn the_fraction_caps_reserved_and_an_oom_retry_releases_whole_cached_segments() {
        let mut a = CachingAllocator::new(64 * MIB);
        let x = a.malloc(40 * MIB).unwrap().unwrap();
        a.free(x);
        // 40 MiB cached + 50 MiB would pass 64 MiB (a 50 MiB request does not fit in the
        // cached 40 MiB block): the cached segment is released and the retry succeeds.
        a.malloc(50 * MIB).unwrap();
        assert_eq!((a.reserved(), a.retries), (50 * MIB, 1));
        // Allocated 50 MiB, reserved 50 MiB: a 20 MiB request fails although the device has
        // room, because reserved would pass the cap.
        let e = a.malloc(20 * MIB).unwrap_err();
        assert_eq!(
            (e.allocated, e.reserved, e.limit),
            (50 * MIB, 50 * MIB, 64 * MIB)
        );
    }

    #[test]
    fn a_split_segment_is_not_released() {
        let mut a = CachingAllocator::new(40 * MIB);
        let x = a.malloc(2 * MIB).unwrap().unwrap();
        let _y = a.malloc(2 * MIB).unwrap().unwrap();
        a.free(x);
        // The 20 MiB segment is partly in use: the retry cannot free it.
        assert!(a.malloc(30 * MIB).is_err());
        assert_eq!(a.reserved(), 20 * MIB);
    }

    #[test]
    fn peaks_reset_to_the_current_level() {
        let mut a = CachingAllocator::new(BIG);
        let x = a.malloc(16 * MIB).unwrap().unwrap();
        a.free(x);
        assert_eq!(
            (a.peak_allocated(), a.peak_reserved()),
            (16 * MIB, 16 * MIB)
        );
        a.reset_peaks();
        assert_eq!((a.peak_allocated(), a.peak_reserved()), (0, 16 * MIB));
    }

    fn with(conf: &str, limit: Option<u64>) -> CachingAllocator {
        CachingAllocator::with_settings(limit, &AllocatorSettings::parse(conf).unwrap())
    }

    #[test]
    fn settings_parse_as_torch_reads_them() {
        assert!(AllocatorSettings::parse("").unwrap().is_default());
        assert_eq!(
            AllocatorSettings::parse("expandable_segments:False")
                .unwrap()
                .canonical(),
            None
        );
        let s = AllocatorSettings::parse(" max_split_size_mb : 512 , expandable_segments:True,")
            .unwrap();
        assert!(s.expandable_segments);
        assert_eq!(s.max_split_size, Some(512 * MIB));
        assert_eq!(
            s.to_string(),
            "expandable_segments:True,max_split_size_mb:512"
        );
        let g = AllocatorSettings::parse(
            "garbage_collection_threshold:0.6,release_lock_on_cudamalloc:True",
        )
        .unwrap();
        assert_eq!(g.garbage_collection_threshold, Some(0.6));
        assert_eq!(AllocatorSettings::parse(&g.to_string()).unwrap(), g);
        for (bad, names) in [
            ("foo:1", "'foo'"),
            ("max_split_size_mb:10", "max_split_size_mb"),
            ("max_split_size_mb:big", "max_split_size_mb"),
            ("expandable_segments:yes", "expandable_segments"),
            ("expandable_segments", "expandable_segments"),
            (
                "garbage_collection_threshold:1.5",
                "garbage_collection_threshold",
            ),
            ("roundup_power2_divisions:4", "roundup_power2_divisions"),
            ("backend:cudaMallocAsync", "cudaMallocAsync"),
            ("expandable_segments:True,,max_split_size_mb:512", "empty"),
        ] {
            let e = AllocatorSettings::parse(bad).unwrap_err();
            assert!(e.contains(names), "{bad}: {e}");
        }
    }

    #[test]
    fn under_max_split_size_an_oversize_block_is_neither_taken_nor_split() {
        // Defaults: a freed 600 MiB segment serves a 100 MiB request (split: the remainder is
        // over 1 MiB); nothing new is reserved.
        let mut d = CachingAllocator::new(BIG);
        let x = d.malloc(600 * MIB).unwrap().unwrap();
        d.free(x);
        d.malloc(100 * MIB).unwrap();
        assert_eq!((d.reserved(), d.segments()), (600 * MIB, 1));
        // max_split_size_mb:512: get_free_block refuses the 600 MiB block for a request under
        // 512 MiB, so the 100 MiB request makes a segment of its own.
        let mut a = with("max_split_size_mb:512", None);
        let x = a.malloc(600 * MIB).unwrap().unwrap();
        a.free(x);
        a.malloc(100 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (700 * MIB, 2));
        // A request of 512 MiB or more takes it only within 20 MiB
        // (max_non_split_rounding_size): 590 MiB does (600 < 610), whole: a request over
        // max_split_size is never split, so the 10 MiB slack counts as allocated.
        let y = a.malloc(590 * MIB).unwrap().unwrap();
        assert_eq!(y, x);
        assert_eq!((a.allocated(), a.reserved()), (700 * MIB, 700 * MIB));
        a.free(y);
        // 560 MiB does not (600 >= 580): a new 560 MiB segment.
        a.malloc(560 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (1260 * MIB, 3));
    }

    #[test]
    fn max_split_size_releases_one_oversize_block_before_everything() {
        // Cap 1000 MiB. A 600 MiB segment cached, a 300 MiB one in use (it could not take the
        // oversize block): 900 MiB reserved. A 200 MiB request fails alloc_block (1100 > 1000);
        // release_available_cached_blocks frees the smallest cached block of at least
        // max(200, 512) MiB, the 600 MiB one, and the retry succeeds with no
        // release_cached_blocks (no retry counted).
        let mut a = with("max_split_size_mb:512", Some(1000 * MIB));
        let x = a.malloc(600 * MIB).unwrap().unwrap();
        a.free(x);
        a.malloc(300 * MIB).unwrap();
        assert_eq!(a.reserved(), 900 * MIB);
        a.malloc(200 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments(), a.retries), (500 * MIB, 2, 0));
    }

    #[test]
    fn expandable_segments_map_20_mib_pages_of_one_segment() {
        // Two 30 MiB allocations: the first maps two 20 MiB pages (40 MiB) and leaves a 10 MiB
        // free tail (split: any remainder of 512 bytes or more); the second starts at that
        // tail and maps one more page: 60 MiB reserved in one segment, all of it allocated.
        let mut a = with("expandable_segments:True", None);
        let x = a.malloc(30 * MIB).unwrap().unwrap();
        assert_eq!((a.allocated(), a.reserved()), (30 * MIB, 40 * MIB));
        let y = a.malloc(30 * MIB).unwrap().unwrap();
        assert_eq!(y, x + 30 * MIB);
        assert_eq!(
            (a.allocated(), a.reserved(), a.segments()),
            (60 * MIB, 60 * MIB, 1)
        );
        // A 15 MiB request finds no cached block: one more page, 15 MiB of it left cached.
        a.malloc(15 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (80 * MIB, 1));
        a.malloc(5 * MIB).unwrap();
        assert_eq!((a.allocated(), a.reserved()), (80 * MIB, 80 * MIB));
    }

    #[test]
    fn expandable_small_pool_grows_in_2_mib_pages() {
        let mut a = with("expandable_segments:True", None);
        a.malloc(MIB).unwrap();
        assert_eq!(a.reserved(), 2 * MIB);
        a.malloc(MIB).unwrap();
        assert_eq!(a.reserved(), 2 * MIB);
        a.malloc(MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (4 * MIB, 1));
        // A large request opens the large pool's own segment.
        a.malloc(2 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments()), (24 * MIB, 2));
    }

    #[test]
    fn expandable_best_fit_prefers_a_block_that_cannot_grow() {
        // A: 40 MiB (two pages, no tail). B: 10 MiB in a third page, a 10 MiB free tail after
        // it. Free A. An 8 MiB request: the smallest fitting block is the tail (10 MiB), but
        // get_free_block ranks it by the size it could grow to and takes the 40 MiB block.
        let mut a = with("expandable_segments:True", None);
        let x = a.malloc(40 * MIB).unwrap().unwrap();
        a.malloc(10 * MIB).unwrap();
        assert_eq!(a.reserved(), 60 * MIB);
        a.free(x);
        let y = a.malloc(8 * MIB).unwrap().unwrap();
        assert_eq!(y, x);
        assert_eq!((a.allocated(), a.reserved()), (18 * MIB, 60 * MIB));
    }

    #[test]
    fn expandable_oom_retry_unmaps_cached_pages() {
        // Cap 100 MiB. 60 MiB mapped and freed; a 70 MiB request does not fit the cached block
        // and 60 + 70 > 100: release_cached_blocks unmaps the three pages (the segment, wholly
        // unmapped, is freed) and the retry maps four pages of a new one.
        let mut a = with("expandable_segments:True", Some(100 * MIB));
        let x = a.malloc(60 * MIB).unwrap().unwrap();
        a.free(x);
        assert_eq!(a.reserved(), 60 * MIB);
        a.malloc(70 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments(), a.retries), (80 * MIB, 1, 1));
        // Partly used pages stay mapped: free the 70 MiB, allocate 5 MiB at the start, and a
        // 90 MiB request unmaps only the pages wholly inside the cached 75 MiB (three of four).
        let mut b = with("expandable_segments:True", Some(100 * MIB));
        let y = b.malloc(70 * MIB).unwrap().unwrap();
        b.free(y);
        b.malloc(5 * MIB).unwrap();
        assert_eq!(b.reserved(), 80 * MIB);
        b.malloc(90 * MIB).unwrap_err();
        assert_eq!((b.reserved(), b.segments()), (20 * MIB, 1));
    }

    #[test]
    fn garbage_collection_frees_the_oldest_cached_segments_first() {
        // Cap 100 MiB, threshold 0.5: 50 MiB. X (20 MiB) is cached after one get_free_block
        // call, Y (40 MiB) after two; reserved 60 MiB. A 44 MiB request (third call) finds no
        // block: reserved is 10 MiB over the threshold; ages 2 and 1, mean 1.5: X alone goes,
        // which is enough. The 44 MiB segment fits beside the still-cached Y (84 <= 100).
        let mut a = with("garbage_collection_threshold:0.5", Some(100 * MIB));
        let x = a.malloc(20 * MIB).unwrap().unwrap();
        a.free(x);
        let y = a.malloc(40 * MIB).unwrap().unwrap();
        a.free(y);
        a.malloc(44 * MIB).unwrap();
        assert_eq!((a.reserved(), a.segments(), a.retries), (84 * MIB, 2, 0));
        // Without garbage collection the cap (60 + 44 > 100) forces release_cached_blocks:
        // both go.
        let mut d = with("", Some(100 * MIB));
        let x = d.malloc(20 * MIB).unwrap().unwrap();
        d.free(x);
        let y = d.malloc(40 * MIB).unwrap().unwrap();
        d.free(y);
        d.malloc(44 * MIB).unwrap();
        assert_eq!((d.reserved(), d.segments(), d.retries), (44 * MIB, 1, 1));
        // Without a memory fraction the threshold does nothing (torch checks set_fraction).
        let mut n = with("garbage_collection_threshold:0.5", None);
        let x = n.malloc(30 * MIB).unwrap().unwrap();
        n.free(x);
        n.malloc(40 * MIB).unwrap();
        assert_eq!(n.reserved(), 70 * MIB);
    }
}
