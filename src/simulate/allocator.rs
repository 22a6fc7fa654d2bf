//! A replay of torch 2.11's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`,
//! `DeviceCachingAllocator`, with the default configuration: no `PYTORCH_CUDA_ALLOC_CONF`, so
//! `max_split_size` is unlimited, `roundup_power2_divisions` is 0, expandable segments are off
//! and there is no garbage-collection threshold). It is fed the simulator's sequence of
//! allocations and frees and answers what `torch.cuda.memory_allocated` / `memory_reserved`
//! (the aggregate `allocated_bytes` and `reserved_bytes` stats) would read, with their peaks.
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
//! - `should_split`: a found block is split when the remainder is at least 512 bytes (small
//!   pool) or more than `kSmallSize` = 1 MiB (large pool); otherwise the whole block is handed
//!   out and counted as allocated.
//! - `free_block`: a freed block merges with free neighbours of its segment and goes back to
//!   its pool's cache; segments are never returned to the device...
//! - ...except on an allocation failure: `alloc_block` fails when `set_fraction` and
//!   `total_allocated_memory + size > allowed_memory_maximum` (`setMemoryFraction` caps the
//!   **reserved** bytes, not the allocated ones) or when the device has no room;
//!   `release_available_cached_blocks` does nothing with the default unlimited
//!   `max_split_size`; then `release_cached_blocks` frees every cached segment that is not
//!   split (a wholly free segment) in both pools and `alloc_block` is retried once; if that
//!   fails too the allocation raises "CUDA out of memory".

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// `kMinBlockSize`: every request is rounded to a multiple of this.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: the largest request of the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: the small pool's segment size.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: the segment size for requests between 1 and 10 MiB.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: requests from this size on get a segment of their own size.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: large segments are rounded up to this.
pub const ROUND_LARGE: u64 = 2 << 20;

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

#[derive(Debug, Clone, Copy)]
struct Block {
    size: u64,
    segment: usize,
    allocated: bool,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    base: u64,
    size: u64,
    small: bool,
    /// Released to the device (after an out-of-memory retry).
    released: bool,
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
    segments: Vec<Segment>,
    /// Every block (allocated or cached) by address.
    blocks: BTreeMap<u64, Block>,
    /// Cached free blocks of each pool, ordered as torch's `BlockComparatorSize` (size, then
    /// address).
    free_small: BTreeSet<(u64, u64)>,
    free_large: BTreeSet<(u64, u64)>,
    next_base: u64,
    allocated: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    /// Segments released by out-of-memory retries.
    pub retries: u64,
}

impl CachingAllocator {
    /// An allocator whose `alloc_block` fails past `limit` reserved bytes: the emulated
    /// capacity (`setMemoryFraction`) or the device's memory.
    pub fn new(limit: u64) -> CachingAllocator {
        CachingAllocator {
            limit,
            segments: Vec::new(),
            blocks: BTreeMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
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
    /// Segments currently held (cudaMalloc'd and not released).
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

    /// `malloc`: the address of the block handed out for `orig` bytes (0 bytes: no block;
    /// torch allocates nothing for an empty tensor).
    pub fn malloc(&mut self, orig: u64) -> Result<Option<u64>, OutOfMemory> {
        if orig == 0 {
            return Ok(None);
        }
        let size = round_size(orig);
        let small = size <= SMALL_SIZE;
        let found = self.pool(small).range((size, 0)..).next().copied();
        let addr = match found {
            Some(key) => {
                self.pool(small).remove(&key);
                key.1
            }
            None => {
                let seg = allocation_size(size);
                if self.reserved + seg > self.limit {
                    // release_cached_blocks, then one retry.
                    self.release_cached_blocks();
                    self.retries += 1;
                    if self.reserved + seg > self.limit {
                        return Err(OutOfMemory {
                            requested: orig,
                            segment: seg,
                            allocated: self.allocated,
                            reserved: self.reserved,
                            limit: self.limit,
                        });
                    }
                }
                self.new_segment(seg, small)
            }
        };
        // should_split
        let block = self.blocks[&addr];
        let remaining = block.size - size;
        let split = if small {
            remaining >= MIN_BLOCK
        } else {
            remaining > SMALL_SIZE
        };
        let given = if split {
            self.blocks.insert(
                addr + size,
                Block {
                    size: remaining,
                    segment: block.segment,
                    allocated: false,
                },
            );
            self.pool(small).insert((remaining, addr + size));
            size
        } else {
            block.size
        };
        self.blocks.insert(
            addr,
            Block {
                size: given,
                segment: block.segment,
                allocated: true,
            },
        );
        self.allocated += given;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Ok(Some(addr))
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
        });
        self.blocks.insert(
            base,
            Block {
                size,
                segment: self.segments.len() - 1,
                allocated: false,
            },
        );
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        base
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
            if p.segment == b.segment && !p.allocated && pa + p.size == addr {
                self.pool(small).remove(&(p.size, pa));
                self.blocks.remove(&addr);
                start = pa;
                b.size += p.size;
            }
        }
        // And with the next one.
        let end = start + b.size;
        if let Some(n) = self.blocks.get(&end).copied() {
            if n.segment == b.segment && !n.allocated {
                self.pool(small).remove(&(n.size, end));
                self.blocks.remove(&end);
                b.size += n.size;
            }
        }
        self.blocks.insert(start, b);
        self.pool(small).insert((b.size, start));
    }

    /// `release_cached_blocks`: every cached block that is a whole segment goes back to the
    /// device.
    fn release_cached_blocks(&mut self) {
        let whole: Vec<(u64, u64, bool)> = self
            .free_small
            .iter()
            .map(|&(s, a)| (s, a, true))
            .chain(self.free_large.iter().map(|&(s, a)| (s, a, false)))
            .filter(|&(s, a, _)| {
                let seg = self.segments[self.blocks[&a].segment];
                seg.base == a && seg.size == s
            })
            .collect();
        for (s, a, small) in whole {
            let seg = self.blocks[&a].segment;
            self.pool(small).remove(&(s, a));
            self.blocks.remove(&a);
            self.segments[seg].released = true;
            self.reserved -= s;
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
}
