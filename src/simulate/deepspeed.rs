//! DeepSpeed's ZeRO stages 1 and 2 in the simulator, for one rank: what
//! `deepspeed/runtime/zero/stage_1_and_2.py` (DeepSpeed 0.18.2, `DeepSpeedZeroOptimizer`) holds
//! when, with the settings `exporter/memcal_export/ranks.py` runs (fp32, torch's AdamW as the
//! client optimizer, every other setting DeepSpeed's default: `contiguous_gradients`,
//! `reduce_scatter` and `use_multi_rank_bucket_allreduce` on, `overlap_comm` off for stages 1
//! and 2, `round_robin_gradients` off; gloo collectives).
//!
//! - Load (`__init__`): the trainable parameters, in order, are copied into one flat buffer
//!   padded to a multiple of `2 x world` elements (`flatten_dense_tensors_aligned` with
//!   `nccl_start_alignment_factor = 2`) while the originals are still held (`param.cpu_data`
//!   is the same storage on CPU), then the originals go (the parameters become views of the
//!   flat buffer); the rank's partition (`padded / world` elements) is cloned as the fp32
//!   master copy.
//! - Backward: the first gradient hook (`register_post_accumulate_grad_hook`, run as each
//!   parameter's gradient is accumulated) allocates the reduce buffer, `reduce_bucket_size`
//!   elements (`backward_prologue`). Stage 2 reduces in the hooks, stage 1 after the whole
//!   backward (the engine's `allreduce_gradients` walks the parameters in order): each
//!   gradient is copied into the buffer and the parameter's `.grad` becomes a view of it (its
//!   own buffer freed), a larger one than the bucket stays where it is
//!   (`extra_large_param_to_reduce`); a gradient that would overflow the bucket first reduces
//!   it (`reduce_ipg_grads`). A reduction flattens the bucket's slices (one per destination
//!   partition) into a new tensor each time their running total passes the bucket size and at
//!   the end (`allreduce_and_scatter`, `allreduce_bucket`: `flatten`, a view when it gathers
//!   one slice; gloo's all-reduce scratch is outside torch's allocator; `unflatten` gives
//!   views), then copies every gradient of a
//!   parameter overlapping this rank's partition into one buffer made at the first reduction
//!   (`copy_grads_in_partition`: the sum of those parameters' whole sizes), and drops the
//!   others (stage 2; stage 1 keeps their views of the buffer until the epilogue's
//!   `zero_grad`). The epilogue reduces what is left and frees the reduce buffer.
//! - Step: the partition's gradients are flattened into a new fp32 tensor and the reduced
//!   gradients freed; AdamW steps the flat master copy (its two states made at the first step,
//!   its update's temporaries as for any AdamW step); the flat gradient goes; the flat weights
//!   are all-gathered from every rank's partition (`all_gather_into_tensor`, which gloo runs
//!   through a temporary of the output's size).
//!
//! The small tensors DeepSpeed makes besides (a 4-byte `torch.empty(1)` a parameter while it
//! flattens, the loss scale, the gradient norm's scalars) are not counted.

use super::{BufId, Kind, Sim};
use crate::strategy::{Kind as SKind, Part};

/// `nccl_start_alignment_factor` (stage_1_and_2.py): the flat buffer is padded to a multiple of
/// this times the world.
const ALIGNMENT: u64 = 2;

/// The device and collective backend a rule set models. The rows are the CPU's with gloo;
/// where an accelerator with NCCL differs, its rule is read from the code and not measured (no
/// per-rank GPU row yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collectives {
    /// The CPU, `ProcessGroupGloo`: `all_gather_into_tensor` gathers into a temporary of the
    /// output's size and copies it out; DeepSpeed's `param.data.cpu()` is the parameter's own
    /// storage, so the originals live while the flat buffer is made (both measured).
    Gloo,
    /// A CUDA device, `ProcessGroupNCCL`: `all_gather_into_tensor` writes the output in place
    /// (`ncclAllGather` on its storage), no temporary; DeepSpeed moves the parameters to the host
    /// before it flattens them there and copies the flat buffer to the device
    /// (`stage_1_and_2.py` `__init__`), so the device never holds both. From source, not measured.
    Nccl,
}

/// DeepSpeed's ZeRO stage 1 or 2 for one rank: the stage, the rank, the world,
/// `reduce_bucket_size` in elements and the collective backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeepSpeed {
    pub stage: u8,
    pub rank: u64,
    pub world: u64,
    pub bucket: u64,
    pub collectives: Collectives,
}

impl DeepSpeed {
    /// The rule set's settings for `part` (rank 0), None for a part it does not cover.
    pub fn of_part(part: &Part) -> Option<DeepSpeed> {
        let stage = match part.kind {
            SKind::Zero1 if part.deepspeed() => 1,
            SKind::Zero2 => 2,
            _ => return None,
        };
        Some(DeepSpeed {
            stage,
            rank: 0,
            world: part.get("world"),
            bucket: part.get("bucket"),
            collectives: Collectives::Gloo,
        })
    }
}

/// The parameters' elements (fp32: 4 bytes each), in the simulator's order.
pub(super) fn elements(params: &[super::Param]) -> Vec<u64> {
    params.iter().map(|p| p.bytes / 4).collect()
}

/// The ranks of `ds`'s world by the size of their buffer of reduced gradients, largest first
/// (ties by rank), at most `limit` (at least one): the ranks whose peaks differ most.
pub(super) fn ranks_largest_first(numel: &[u64], ds: DeepSpeed, limit: usize) -> Vec<u64> {
    let mut ranks: Vec<(u64, u64)> = (0..ds.world)
        .map(|rank| {
            (
                rank,
                Layout::new(numel, &DeepSpeed { rank, ..ds }).in_partition,
            )
        })
        .collect();
    ranks.sort_by_key(|&(r, n)| (std::cmp::Reverse(n), r));
    ranks.truncate(limit.max(1));
    ranks.into_iter().map(|(r, _)| r).collect()
}

/// What a simulation of `strategy` on `collectives` assumes beyond the measured rows, for a
/// plan to print: None where the rule set is the one the rows measured (gloo) or covers no part.
pub fn unmeasured_note(
    strategy: &crate::strategy::Strategy,
    collectives: Collectives,
) -> Option<&'static str> {
    let covered = strategy
        .parts
        .iter()
        .any(|p| DeepSpeed::of_part(p).is_some());
    (covered && collectives == Collectives::Nccl).then_some(
        "a CUDA device with NCCL, from DeepSpeed's and torch's code, not measured: the weights are flattened on the host and the all-gather writes in place, where the CPU rows (gloo) also hold the originals while flattening and a temporary of the flat weights at the step's end (4 bytes a parameter each)",
    )
}

/// Where the trainable parameters lie in the flat buffer, and this rank's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Each parameter's first element in the flat buffer, and its elements.
    pub offsets: Vec<u64>,
    pub numel: Vec<u64>,
    /// The flat buffer's elements, padded.
    pub padded: u64,
    /// Elements a partition.
    pub partition: u64,
    /// Does the parameter overlap this rank's partition?
    pub own: Vec<bool>,
    /// Elements of the buffer of this rank's reduced gradients (the whole of every parameter
    /// that overlaps the partition).
    pub in_partition: u64,
}

impl Layout {
    /// The layout of fp32 parameters of `numel` elements each, in order, for `ds`'s rank.
    pub fn new(numel: &[u64], ds: &DeepSpeed) -> Layout {
        let mut offsets = Vec::with_capacity(numel.len());
        let mut at = 0u64;
        for n in numel {
            offsets.push(at);
            at += n;
        }
        let align = ALIGNMENT * ds.world;
        let padded = at.div_ceil(align) * align;
        let partition = padded / ds.world;
        let (start, end) = (ds.rank * partition, (ds.rank + 1) * partition);
        let own: Vec<bool> = offsets
            .iter()
            .zip(numel)
            .map(|(&o, &n)| o < end && o + n > start)
            .collect();
        let in_partition = numel
            .iter()
            .zip(&own)
            .filter(|(_, o)| **o)
            .map(|(n, _)| n)
            .sum();
        Layout {
            offsets,
            numel: numel.to_vec(),
            padded,
            partition,
            own,
            in_partition,
        }
    }

    /// Parameter `p` cut at the partitions' boundaries: (partition, elements), in order.
    fn slices(&self, p: usize) -> Vec<(u64, u64)> {
        let (mut at, end) = (self.offsets[p], self.offsets[p] + self.numel[p]);
        let mut out = Vec::new();
        while at < end {
            let part = at / self.partition;
            let stop = ((part + 1) * self.partition).min(end);
            out.push((part, stop - at));
            at = stop;
        }
        out
    }

    /// The sizes, in elements, of the flat tensors one reduction of `params` (a bucket, in
    /// order) makes one after another: the slices, consecutive ones of one partition merged,
    /// gathered until their total passes `bucket`, then the rest (`allreduce_and_scatter`);
    /// a gathering of one slice makes none.
    pub fn flattens(&self, params: &[usize], bucket: u64) -> Vec<u64> {
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for &p in params {
            for (part, n) in self.slices(p) {
                match merged.last_mut() {
                    Some(last) if last.0 == part => last.1 += n,
                    _ => merged.push((part, n)),
                }
            }
        }
        // A chunk of one slice is flattened into a view of it (`flatten_dense_tensors` of
        // one tensor is `t.contiguous().view(-1)`, aten/src/ATen/native/TensorShape.cpp):
        // nothing new.
        let mut out = Vec::new();
        let (mut total, mut count) = (0, 0);
        for (_, n) in merged {
            total += n;
            count += 1;
            if total > bucket {
                if count > 1 {
                    out.push(total);
                }
                (total, count) = (0, 0);
            }
        }
        if count > 1 {
            out.push(total);
        }
        out
    }
}

/// The rule set's state through a run.
pub(super) struct State {
    pub ds: DeepSpeed,
    pub layout: Layout,
    /// The node whose backward makes each parameter's last gradient contribution (its hook
    /// runs after it): the first node that uses it.
    pub last_node: Vec<usize>,
    /// The reduce buffer, while it exists.
    ipg: Option<BufId>,
    /// The bucket's parameters and elements.
    bucket: Vec<usize>,
    elements: u64,
    /// Gradients too large for the bucket, left where they are until reduced.
    large: Vec<(usize, BufId)>,
    /// Stage 1: reduced large gradients of other ranks' partitions, kept until `zero_grad`.
    held: Vec<BufId>,
    /// The reduced gradients of this rank's partition.
    in_partition: Option<BufId>,
    /// AdamW's two states of the flat master copy.
    states: Option<(BufId, BufId)>,
}

impl State {
    pub fn new(ds: DeepSpeed, numel: &[u64], node_params: &[Vec<usize>]) -> State {
        let mut last_node = vec![usize::MAX; numel.len()];
        for (k, ps) in node_params.iter().enumerate() {
            for &p in ps {
                last_node[p] = last_node[p].min(k);
            }
        }
        State {
            ds,
            layout: Layout::new(numel, &ds),
            last_node,
            ipg: None,
            bucket: Vec::new(),
            elements: 0,
            large: Vec::new(),
            held: Vec::new(),
            in_partition: None,
            states: None,
        }
    }
}

impl Sim<'_> {
    /// DeepSpeed's initialization: the flat copy of the parameters (`param_bufs`, freed once
    /// it is made) and the fp32 master copy of the partition.
    pub(super) fn ds_load(&mut self, param_bufs: &[BufId]) {
        let Some(st) = self.ds.as_ref() else { return };
        let (padded, partition) = (st.layout.padded, st.layout.partition);
        let on_host = st.ds.collectives == Collectives::Gloo;
        self.mem.at("deepspeed flat parameters");
        if !on_host {
            // On an accelerator the parameters go to the host first (`param.cpu_data =
            // param.data.cpu()`), the flat buffer is made there and copied to the device.
            for &b in param_bufs {
                self.mem.release(b);
            }
        }
        let flat = self.mem.alloc(padded * 4, Kind::Parameters);
        let high = self.rec.high("deepspeed flat parameters", &self.mem);
        if on_host {
            // On the CPU `.cpu()` is the same storage: the originals live through the copy.
            for &b in param_bufs {
                self.mem.release(b);
            }
        }
        self.rec.event("deepspeed flat parameters", high, &self.mem);
        let _ = flat; // held for the run
        self.mem.at("deepspeed fp32 partition");
        self.mem.alloc(partition * 4, Kind::OptimizerState);
        let high = self.rec.high("deepspeed fp32 partition", &self.mem);
        self.rec.event("deepspeed fp32 partition", high, &self.mem);
    }

    /// The gradient hooks of node `k`'s parameters whose gradients are complete: the reduce
    /// buffer made at the first; under stage 2 each gradient moved into the bucket.
    pub(super) fn ds_hooks(&mut self, k: usize, grads: &mut [Option<BufId>]) {
        let Some(st) = self.ds.as_ref() else { return };
        let ready: Vec<usize> = self.node_params[k]
            .iter()
            .copied()
            .filter(|&p| st.last_node[p] == k && grads[p].is_some())
            .collect();
        let stage = st.ds.stage;
        for p in ready {
            self.ds_prologue();
            if stage == 2 {
                self.ds_bucket(p, grads);
            }
        }
    }

    /// `backward_prologue`: the reduce buffer, at the first hook of a backward.
    fn ds_prologue(&mut self) {
        let Some(st) = self.ds.as_mut() else { return };
        if st.ipg.is_none() {
            let bytes = st.ds.bucket * 4;
            self.mem.at("deepspeed reduce buffer");
            let b = self.mem.alloc(bytes, Kind::Gradients);
            if let Some(st) = self.ds.as_mut() {
                st.ipg = Some(b);
            }
            let high = self.rec.high("deepspeed reduce buffer", &self.mem);
            self.rec.event("deepspeed reduce buffer", high, &self.mem);
        }
    }

    /// `reduce_independent_p_g_buckets_and_remove_grads` for parameter `p`.
    fn ds_bucket(&mut self, p: usize, grads: &mut [Option<BufId>]) {
        let Some(g) = grads[p].take() else { return };
        let (numel, bucket, elements) = match self.ds.as_ref() {
            Some(st) => (st.layout.numel[p], st.ds.bucket, st.elements),
            None => return,
        };
        if elements + numel > bucket {
            self.ds_reduce();
        }
        let Some(st) = self.ds.as_mut() else { return };
        if numel > bucket {
            st.large.push((p, g));
        } else {
            // Copied into the buffer; `.grad` becomes a view of it.
            self.mem.release(g);
        }
        st.elements += numel;
        st.bucket.push(p);
    }

    /// `reduce_ipg_grads`: the bucket's flattened copies, then this rank's gradients copied
    /// into its partition's buffer and the rest dropped (stage 1 keeps views of the reduce
    /// buffer: no memory).
    fn ds_reduce(&mut self) {
        let Some(st) = self.ds.as_mut() else { return };
        let params = std::mem::take(&mut st.bucket);
        let large = std::mem::take(&mut st.large);
        st.elements = 0;
        if params.is_empty() {
            return;
        }
        let flattens = st.layout.flattens(&params, st.ds.bucket);
        let own = params.iter().any(|&p| st.layout.own[p]);
        let need_partition = own && st.in_partition.is_none();
        let in_partition_bytes = st.layout.in_partition * 4;
        self.mem.at("deepspeed reduce");
        for n in flattens {
            let t = self.mem.alloc(n * 4, Kind::Transients);
            let high = self.rec.high("deepspeed reduce", &self.mem);
            self.mem.release(t);
            self.rec.event("deepspeed reduce", high, &self.mem);
        }
        if need_partition {
            let b = self.mem.alloc(in_partition_bytes, Kind::Gradients);
            if let Some(st) = self.ds.as_mut() {
                st.in_partition = Some(b);
            }
            let high = self.rec.high("deepspeed reduce", &self.mem);
            self.rec.event("deepspeed reduce", high, &self.mem);
        }
        // A large gradient of this rank's is copied into the partition's buffer (its own
        // freed), any other dropped (stage 2) or kept until the epilogue's `zero_grad`.
        for (p, g) in large {
            match self.ds.as_mut() {
                Some(st) if st.ds.stage == 1 && !st.layout.own[p] => st.held.push(g),
                _ => self.mem.release(g),
            }
        }
    }

    /// After the backward: stage 1's walk over every gradient (in parameter order), then the
    /// epilogue (the rest reduced, the reduce buffer freed).
    pub(super) fn ds_after_backward(&mut self, grads: &mut [Option<BufId>]) {
        let Some(st) = self.ds.as_ref() else { return };
        if st.ds.stage == 1 {
            for p in 0..grads.len() {
                if grads[p].is_some() {
                    self.ds_prologue();
                    self.ds_bucket(p, grads);
                }
            }
        }
        self.ds_reduce();
        let Some(st) = self.ds.as_mut() else { return };
        let mut free: Vec<BufId> = std::mem::take(&mut st.held);
        free.extend(st.ipg.take());
        for b in free {
            self.mem.release(b);
        }
        self.rec
            .event("deepspeed epilogue", self.mem.total(), &self.mem);
    }

    /// `step`: the flat gradient of the partition, AdamW on the master copy, the all-gather.
    pub(super) fn ds_step(&mut self, step: u32) {
        self.begin(step, format!("step{step}.optimizer"));
        let Some(st) = self.ds.as_ref() else { return };
        let (partition, padded) = (st.layout.partition * 4, st.layout.padded * 4);
        let gloo = st.ds.collectives == Collectives::Gloo;
        let label = "deepspeed step";
        self.mem.at(label);
        let flat_grad = self.mem.alloc(partition, Kind::Gradients);
        let high = self.rec.high(label, &self.mem);
        self.rec.event(label, high, &self.mem);
        if let Some(b) = self.ds.as_mut().and_then(|st| st.in_partition.take()) {
            self.mem.release(b);
        }
        if self.ds.as_ref().is_some_and(|st| st.states.is_none()) {
            let a = self.mem.alloc(partition, Kind::OptimizerState);
            let b = self.mem.alloc(partition, Kind::OptimizerState);
            if let Some(st) = self.ds.as_mut() {
                st.states = Some((a, b));
            }
        }
        let t = self
            .mem
            .alloc(super::rules::adamw_transient(partition), Kind::Transients);
        let high = self.rec.high(label, &self.mem);
        self.mem.release(t);
        self.mem.release(flat_grad);
        self.rec.event(label, high, &self.mem);
        if gloo {
            let gather = self.mem.alloc(padded, Kind::Transients);
            let high = self.rec.high("deepspeed all-gather", &self.mem);
            self.mem.release(gather);
            self.rec.event("deepspeed all-gather", high, &self.mem);
        }
        self.rec.end(&self.mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(rank: u64, world: u64, bucket: u64) -> DeepSpeed {
        DeepSpeed {
            stage: 2,
            rank,
            world,
            bucket,
            collectives: Collectives::Gloo,
        }
    }

    #[test]
    fn the_flat_buffer_is_padded_and_partitioned() {
        // 10 + 7 = 17 elements, padded to 20 (a multiple of 2 x 2), partitions of 10.
        let l = Layout::new(&[10, 7], &ds(0, 2, 100));
        assert_eq!((l.padded, l.partition), (20, 10));
        assert_eq!(l.own, vec![true, false]);
        assert_eq!(l.in_partition, 10);
        let l = Layout::new(&[10, 7], &ds(1, 2, 100));
        assert_eq!(l.own, vec![false, true]);
        // A parameter across the boundary counts whole on both ranks.
        let l = Layout::new(&[6, 6, 8], &ds(0, 2, 100));
        assert_eq!((l.partition, l.own.clone()), (10, vec![true, true, false]));
        assert_eq!(l.in_partition, 12);
        assert_eq!(Layout::new(&[6, 6, 8], &ds(1, 2, 100)).in_partition, 14);
    }

    #[test]
    fn a_reduction_flattens_until_the_bucket_overflows() {
        let l = Layout::new(&[6, 6, 8], &ds(0, 2, 100));
        // Slices: (0, 6), (0, 4) + (1, 2), (1, 8): merged (0, 10), (1, 10).
        assert_eq!(l.flattens(&[0, 1, 2], 100), vec![20]);
        // Each chunk one slice: views.
        assert_eq!(l.flattens(&[0, 1, 2], 9), Vec::<u64>::new());
        assert_eq!(l.flattens(&[0, 1, 2], 12), vec![20]);
        assert_eq!(l.flattens(&[2], 100), Vec::<u64>::new());
        assert_eq!(l.flattens(&[1], 100), vec![6]);
    }
}
