//! FSDP2 (`fully_shard`) and FSDP1 in the simulator, for one rank: what torch 2.11's
//! `torch/distributed/fsdp/_fully_shard/` (`_fsdp_param.py`, `_fsdp_param_group.py`,
//! `_fsdp_collectives.py`, `_fsdp_state.py`) holds when, with the settings
//! `exporter/memcal_export/ranks.py` runs: `fully_shard` on every block, then on the model
//! (the root unit: the parameters outside the blocks), `reshard_after_forward` as the spec's
//! `reshard`, fp32, no mixed precision, no offload, gloo collectives, AdamW (foreach off) over
//! the sharded parameters.
//!
//! - Units: a block ([`crate::strategy::memory::block_of`] of its nodes) is one unit, and so
//!   is the embeddings module where transformers' `_no_split_modules` names it (BERT's family,
//!   ViT: [`crate::import::embeddings_unit`], for a graph `import hf` drew); every parameter
//!   outside them belongs to the root. A unit's nodes are taken as consecutive. A parameter is sharded on its first
//!   dimension: each rank's shard is `ceil(rows / world)` rows, padded to that on every rank
//!   (`_init_sharded_param`: `new_zeros(padded_sharded_size)`); a unit's unsharded size is
//!   `world` x its padded shards.
//! - Load: the model is built whole (as the plain step), then each unit, blocks first and the
//!   root last, allocates all its shards while its originals are held, then drops them.
//! - Forward: a unit's pre-forward all-gathers it (`foreach_all_gather`: the flat output, one
//!   unsharded size; gloo's `all_gather_into_tensor` a temporary of the output's size) and copies
//!   it out into one tensor a parameter (`foreach_all_gather_copy_out`: one unsharded size more;
//!   the parameters are views of them). The flat output is kept until the next unit's copy-out
//!   starts (`wait_for_unshard`'s implicit prefetch state) and the last one until the root's
//!   post-forward. With `reshard`, the post-forward frees the unit's unsharded tensors
//!   (`free_storage`: autograd's saved references to the weights keep no memory). The root's
//!   forward spans the model: its pre-forward runs before the first node, its post-forward
//!   before the loss (computed outside the model).
//! - Backward: the root's pre-backward (a hook on the model's outputs: before the first node
//!   after the loss) and each block's (before its last node) unshard the unit if it is sharded
//!   (all-gather, copy-out, the flat output freed at once) and prefetch the unit that ran before
//!   it in the forward (`_backward_prefetch`: its all-gather; its copy-out at its own
//!   pre-backward). A block's post-backward (after its first node) and the root's (after the
//!   whole backward) reshard the unit, free the previous reduce-scatter input, and reduce
//!   (`foreach_reduce`): the input (one unsharded size) made while the gradients live, the
//!   gradients dropped but the last one (still bound to the copy-in loop's variable until the
//!   function returns), the output (the padded shards: the sharded gradients are its views),
//!   gloo's `reduce_scatter_tensor` a temporary of the input's size. The input is kept until
//!   the next reduction or the end of the backward (`ReduceScatterState`).
//! - Step: torch.optim's AdamW over the sharded parameters: every parameter's two states made
//!   first (`Adam._init_group`; the rank's own rows, not padded), then each one's update, then
//!   the sharded gradients freed.
//!
//! FSDP1 (`fsdp:version=1`: `FullyShardedDataParallel` with a `ModuleWrapPolicy` over the same
//! classes, `FULL_SHARD` for `reshard=1`, `SHARD_GRAD_OP` for 0; torch 2.11's
//! `torch/distributed/fsdp/_flat_param.py` and `_runtime_utils.py`) differs where its one flat
//! parameter a unit does:
//! - shards: the unit's parameters flattened into one tensor, padded to a multiple of the world
//!   (every rank's shard the first chunk's size); at load the flat copy is made while the
//!   originals live, then the shard, then both freed.
//! - gathering: into the padded unsharded flat parameter itself (gloo's temporary of its size
//!   beside it; no copy-out, no kept output); the root is never freed after its forward.
//! - backward: autograd's split of the flat parameter holds the unit's gradients until its last
//!   one, then concatenates them into one flat gradient; the post-backward hook then reshards,
//!   pads a copy where the flat parameter is padded, makes the sharded gradient and
//!   reduce-scatters (gloo's temporary), and the flat gradient goes as it ends.
//! - step: AdamW over the flat parameters: each unit's two states of its padded shard, made
//!   first, then the updates.
//!
//! Approximations: a unit's parameters reduce in the module's registration order, which the
//! graph does not keep: the last one (whose gradient lives to the end of the reduction) is
//! taken as the root's last parameter and a block's last vector (its last norm: transformers'
//! blocks register their norms last). The small tensors FSDP makes besides (a few hundred
//! bytes) are not counted.

use super::deepspeed::Collectives;
use super::{BufId, Kind, Sim};
use crate::graph::Graph;
use crate::strategy::{Kind as SKind, Part};

/// FSDP2 for one rank: whether units reshard after forward, the rank, the world and the
/// collective backend (gloo's all-gather and reduce-scatter each make a temporary of the
/// unsharded size, measured; NCCL's work in place, from source and not measured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fsdp {
    /// 1: FSDP1 (`FullyShardedDataParallel`, one flat parameter a unit); 2: FSDP2.
    pub version: u8,
    pub reshard: bool,
    pub rank: u64,
    pub world: u64,
    pub collectives: Collectives,
}

impl Fsdp {
    /// The rule set's settings for `part` (rank 0), None for another part.
    pub fn of_part(part: &Part) -> Option<Fsdp> {
        (part.kind == SKind::Fsdp).then(|| Fsdp {
            version: if part.get("version") == 1 { 1 } else { 2 },
            reshard: part.get("reshard") == 1,
            rank: 0,
            world: part.get("world"),
            collectives: Collectives::Gloo,
        })
    }
}

/// What a simulation of `strategy` on `collectives` assumes beyond the measured rows (None
/// where it is what the rows measured, or FSDP is not in it).
pub fn unmeasured_note(
    strategy: &crate::strategy::Strategy,
    collectives: Collectives,
) -> Option<&'static str> {
    let covered = strategy.parts.iter().any(|p| Fsdp::of_part(p).is_some());
    (covered && collectives == Collectives::Nccl).then_some(
        "a CUDA device with NCCL, from torch's FSDP code, not measured: the all-gather and the reduce-scatter work in place, where the CPU rows (gloo) also hold a temporary of the gathered unit during each",
    )
}

/// The units an FSDP simulation of `graph` wraps, in words for a plan (None without FSDP):
/// how many blocks, the embeddings where they are a unit, the root; and, for a graph `import
/// hf` did not draw, that no other module is taken as a unit.
pub fn units_note(graph: &Graph, strategy: &crate::strategy::Strategy) -> Option<String> {
    let part = strategy.parts.iter().find_map(Fsdp::of_part)?;
    let g = grouping(graph);
    let blocks = g.units - 1 - usize::from(g.embeddings);
    let version = if part.version == 1 { "FSDP1" } else { "FSDP2" };
    let mut note = format!(
        "{version} units as memcal_export.ranks wraps them: {} blocks{}, and the root (every other parameter)",
        blocks,
        if !g.embeddings { "" } else { ", the embeddings (transformers' _no_split_modules)" }
    );
    if !graph.family.starts_with("hf-") {
        note.push_str(
            "; the graph is not import hf's, so no module beside its blocks is taken as a unit",
        );
    }
    Some(note)
}

/// Which unit each node of a graph belongs to (0: the root; then the embeddings where they
/// are a unit and the blocks, in order of first use), how many units, and whether the
/// embeddings are one.
struct Grouping {
    node_unit: Vec<usize>,
    units: usize,
    embeddings: bool,
}

fn grouping(graph: &Graph) -> Grouping {
    let embeddings = crate::import::embeddings_unit(&graph.family);
    let in_embeddings = |id: &str| {
        embeddings.iter().any(|e| {
            id.strip_prefix(e)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    };
    let mut names: Vec<String> = Vec::new();
    let mut node_unit = Vec::with_capacity(graph.nodes.len());
    let mut found_embeddings = false;
    for n in &graph.nodes {
        let unit = if in_embeddings(&n.id) {
            found_embeddings = true;
            Some("(embeddings)".to_string())
        } else {
            crate::strategy::memory::block_of(&n.id)
        };
        let u = match unit {
            None => 0,
            Some(b) => match names.iter().position(|x| *x == b) {
                Some(i) => i + 1,
                None => {
                    names.push(b);
                    names.len()
                }
            },
        };
        node_unit.push(u);
    }
    Grouping {
        node_unit,
        units: names.len() + 1,
        embeddings: found_embeddings,
    }
}

/// A parameter's shard: (padded bytes, every rank's; this rank's own rows' bytes).
pub fn shard(bytes: u64, rows: u64, rank: u64, world: u64) -> (u64, u64) {
    let rows = rows.max(1);
    let per_row = bytes / rows;
    let chunk = rows.div_ceil(world);
    let own = chunk.min(rows.saturating_sub(rank * chunk));
    (chunk * per_row, own * per_row)
}

/// One unit: its parameters (simulator order), its nodes (a block's first and last; the root's
/// unused), its padded shards' bytes, and the parameter whose gradient lives to the end of
/// its reduction.
#[derive(Debug, Clone)]
struct Unit {
    params: Vec<usize>,
    first: usize,
    last: usize,
    padded: u64,
    /// Its parameters' bytes (FSDP1's flat parameter, unpadded).
    bytes: u64,
    last_param: Option<usize>,
}

/// The rule set's state through a run.
pub(super) struct State {
    f: Fsdp,
    /// Unit 0 is the root; then the embeddings (where a unit) and the blocks, in order.
    units: Vec<Unit>,
    /// Each node's unit ([`grouping`]).
    node_unit: Vec<usize>,
    padded: Vec<u64>,
    own: Vec<u64>,
    /// Each unit's unsharded tensors while gathered.
    unsharded: Vec<Option<BufId>>,
    /// The forward's kept flat all-gather output.
    kept_flat: Option<BufId>,
    /// A backward prefetch: the unit and its flat all-gather output.
    pending: Option<(usize, BufId)>,
    /// The last reduce-scatter input.
    rs_input: Option<BufId>,
    /// The reduce-scatter outputs (the sharded gradients' storage) and their parameters.
    sharded_grads: Vec<(BufId, usize, Vec<usize>)>,
    states: Vec<Option<(BufId, BufId)>>,
    root_pre_backward: bool,
}

impl State {
    pub fn new(
        f: Fsdp,
        graph: &Graph,
        params: &[super::Param],
        node_params: &[Vec<usize>],
    ) -> State {
        let Grouping {
            node_unit,
            units: count,
            ..
        } = grouping(graph);
        let mut units: Vec<Unit> = (0..count)
            .map(|_| Unit {
                params: Vec::new(),
                first: usize::MAX,
                last: 0,
                padded: 0,
                bytes: 0,
                last_param: None,
            })
            .collect();
        for (k, &u) in node_unit.iter().enumerate() {
            units[u].first = units[u].first.min(k);
            units[u].last = k;
        }
        let mut unit_of = vec![usize::MAX; params.len()];
        for (k, ps) in node_params.iter().enumerate() {
            for &p in ps {
                if unit_of[p] == usize::MAX {
                    unit_of[p] = node_unit[k];
                }
            }
        }
        let (mut padded, mut own) = (Vec::new(), Vec::new());
        for (p, prm) in params.iter().enumerate() {
            let (pad, mine) = shard(prm.bytes, prm.rows, f.rank, f.world);
            padded.push(pad);
            own.push(mine);
            if let Some(u) = units.get_mut(unit_of[p]) {
                u.params.push(p);
                u.padded += pad;
                u.bytes += prm.bytes;
            }
        }
        for (i, u) in units.iter_mut().enumerate() {
            let vector = u.params.iter().rev().find(|&&p| params[p].rank == 1);
            u.last_param = if i == 0 {
                u.params.last()
            } else {
                vector.or(u.params.last())
            }
            .copied();
        }
        if f.version == 1 {
            // One flat parameter a unit, padded to a multiple of the world
            // (`FlatParamHandle._get_shard`: every rank's shard is the first chunk's size).
            for u in &mut units {
                u.padded = (u.bytes / 4).div_ceil(f.world) * 4;
            }
        }
        let n = units.len();
        State {
            f,
            units,
            node_unit,
            padded,
            own,
            unsharded: vec![None; n],
            kept_flat: None,
            pending: None,
            rs_input: None,
            sharded_grads: Vec::new(),
            states: vec![None; params.len()],
            root_pre_backward: false,
        }
    }

    /// Unit `u`'s parameters that have a gradient, in order.
    fn with_grad(&self, u: usize, grads: &[Option<BufId>]) -> Vec<usize> {
        self.units[u]
            .params
            .iter()
            .copied()
            .filter(|&p| grads[p].is_some())
            .collect()
    }

    /// The unit other than the root whose last node is `k`.
    fn unit_ending_at(&self, k: usize) -> Option<usize> {
        let u = self.node_unit[k];
        (u != 0 && self.units[u].last == k).then_some(u)
    }

    fn gathered(&self, u: usize) -> u64 {
        self.units[u].padded * self.f.world
    }
}

impl Sim<'_> {
    /// `fully_shard` on every unit, blocks first: its shards made, then its originals freed.
    pub(super) fn fsdp_load(&mut self, param_bufs: &[BufId]) {
        let Some(st) = self.fsdp.as_ref() else { return };
        let order: Vec<usize> = (1..st.units.len()).chain([0]).collect();
        for u in order {
            let Some(st) = self.fsdp.as_ref() else { return };
            let (params, bytes) = (st.units[u].params.clone(), st.units[u].padded);
            // FSDP1 first flattens the unit's parameters into one tensor (freed once sharded).
            let flat = (st.f.version == 1).then_some(st.units[u].bytes);
            self.mem.at("fsdp shard");
            let flat = flat.map(|b| self.mem.alloc(b, Kind::Parameters));
            self.mem.alloc(bytes, Kind::Parameters);
            let high = self.rec.high("fsdp shard", &self.mem);
            if let Some(b) = flat {
                self.mem.release(b);
            }
            for p in params {
                if let Some(&b) = param_bufs.get(p) {
                    self.mem.release(b);
                }
            }
            self.rec.event("fsdp shard", high, &self.mem);
        }
    }

    /// `foreach_all_gather` of unit `u`: its flat output (returned) and gloo's temporary.
    /// FSDP1 gathers into the padded unsharded flat parameter itself
    /// (`_alloc_padded_unsharded_flat_param`, `_all_gather_flat_param`): the unit is gathered,
    /// nothing returned.
    fn fsdp_all_gather(&mut self, u: usize) -> Option<BufId> {
        let bytes = self.fsdp.as_ref()?.gathered(u);
        let v1 = self.fsdp.as_ref()?.f.version == 1;
        self.mem.at("fsdp all-gather");
        let kind = if v1 {
            Kind::Parameters
        } else {
            Kind::Transients
        };
        let flat = self.mem.alloc(bytes, kind);
        let gloo = self.fsdp.as_ref()?.f.collectives == Collectives::Gloo;
        let tmp = gloo.then(|| self.mem.alloc(bytes, Kind::Transients));
        let high = self.rec.high("fsdp all-gather", &self.mem);
        if let Some(t) = tmp {
            self.mem.release(t);
        }
        self.rec.event("fsdp all-gather", high, &self.mem);
        if v1 {
            self.fsdp.as_mut()?.unsharded[u] = Some(flat);
            return None;
        }
        Some(flat)
    }

    /// Gathers unit `u` now: FSDP2 all-gathers and copies out, the flat output kept in the
    /// forward until the next unit's copy-out and freed at once in the backward; FSDP1
    /// all-gathers into the unit's flat parameter.
    fn fsdp_unshard(&mut self, u: usize, forward: bool) {
        let flat = self.fsdp_all_gather(u);
        if self.fsdp.as_ref().is_none_or(|st| st.f.version == 1) {
            return;
        }
        if forward {
            if let Some(b) = self.fsdp.as_mut().and_then(|st| st.kept_flat.take()) {
                self.mem.release(b);
            }
        }
        self.fsdp_copy_out(u);
        match (forward, flat) {
            (true, flat) => {
                if let Some(st) = self.fsdp.as_mut() {
                    st.kept_flat = flat;
                }
            }
            (false, Some(b)) => self.mem.release(b),
            (false, None) => {}
        }
    }

    /// `foreach_all_gather_copy_out` of unit `u`: its unsharded tensors.
    fn fsdp_copy_out(&mut self, u: usize) {
        let Some(bytes) = self.fsdp.as_ref().map(|st| st.gathered(u)) else {
            return;
        };
        self.mem.at("fsdp copy-out");
        let b = self.mem.alloc(bytes, Kind::Parameters);
        if let Some(st) = self.fsdp.as_mut() {
            st.unsharded[u] = Some(b);
        }
        let high = self.rec.high("fsdp copy-out", &self.mem);
        self.rec.event("fsdp copy-out", high, &self.mem);
    }

    /// Frees unit `u`'s unsharded tensors (`reshard`).
    fn fsdp_reshard(&mut self, u: usize) {
        if let Some(b) = self.fsdp.as_mut().and_then(|st| st.unsharded[u].take()) {
            self.mem.release(b);
            self.rec.event("fsdp reshard", self.mem.total(), &self.mem);
        }
    }

    /// Before node `k`'s forward: the root's pre-forward (the first node), a block's (its
    /// first node), the root's post-forward (the loss).
    pub(super) fn fsdp_pre_forward(&mut self, k: usize) {
        let Some(st) = self.fsdp.as_ref() else { return };
        if Some(k) == self.loss {
            // FSDP1 never frees the root's parameters after its forward (`_post_forward_reshard`:
            // they are used at once by the backward).
            let reshard = st.f.reshard && st.f.version == 2;
            if reshard {
                self.fsdp_reshard(0);
            }
            if let Some(b) = self.fsdp.as_mut().and_then(|st| st.kept_flat.take()) {
                self.mem.release(b);
            }
            return;
        }
        // The root before the first node, then a unit starting at this node.
        let unit = st.node_unit[k];
        let root = (k == 0).then_some(0);
        let starts = (unit != 0 && st.units[unit].first == k).then_some(unit);
        for u in root.into_iter().chain(starts) {
            if self
                .fsdp
                .as_ref()
                .is_some_and(|st| st.unsharded[u].is_none())
            {
                self.fsdp_unshard(u, true);
            }
        }
    }

    /// After node `k`'s forward: a block's post-forward (its last node).
    pub(super) fn fsdp_post_forward(&mut self, k: usize) {
        let Some(st) = self.fsdp.as_ref() else { return };
        if !st.f.reshard {
            return;
        }
        if let Some(u) = st.unit_ending_at(k) {
            self.fsdp_reshard(u);
        }
    }

    /// Unit `u`'s pre-backward: unshard (a prefetched all-gather's copy-out, or a whole
    /// one), then prefetch the unit before it in forward order.
    fn fsdp_pre_backward_unit(&mut self, u: usize) {
        let Some(st) = self.fsdp.as_mut() else { return };
        if st.unsharded[u].is_none() {
            match st.pending {
                Some((v, b)) if v == u => {
                    st.pending = None;
                    self.fsdp_copy_out(u);
                    self.mem.release(b);
                }
                _ => self.fsdp_unshard(u, false),
            }
        }
        // `post_forward_order`: the blocks, then the root; the unit before the root is the
        // last block, before block i block i - 1.
        let Some(st) = self.fsdp.as_ref() else { return };
        let before = if u == 0 { st.units.len() - 1 } else { u - 1 };
        if before >= 1 && st.unsharded[before].is_none() && st.pending.is_none() {
            let flat = self.fsdp_all_gather(before);
            if let (Some(st), Some(b)) = (self.fsdp.as_mut(), flat) {
                st.pending = Some((before, b));
            }
        }
    }

    /// Before node `k`'s backward: the root's pre-backward (the first node after the loss),
    /// a block's (its last node).
    pub(super) fn fsdp_pre_backward(&mut self, k: usize) {
        let Some(st) = self.fsdp.as_ref() else { return };
        if Some(k) == self.loss {
            return;
        }
        if !st.root_pre_backward {
            if let Some(st) = self.fsdp.as_mut() {
                st.root_pre_backward = true;
            }
            self.fsdp_pre_backward_unit(0);
        }
        if let Some(u) = self.fsdp.as_ref().and_then(|st| st.unit_ending_at(k)) {
            self.fsdp_pre_backward_unit(u);
        }
    }

    /// After node `k`'s backward: a block's post-backward (its first node).
    pub(super) fn fsdp_post_backward(&mut self, k: usize, grads: &mut [Option<BufId>]) {
        let Some(st) = self.fsdp.as_ref() else { return };
        let u = st.node_unit[k];
        if u != 0 && st.units[u].first == k {
            self.fsdp_post_backward_unit(u, grads);
        }
    }

    /// After the whole backward: the root's post-backward, then the last reduce-scatter input
    /// freed (`finalize_backward`).
    pub(super) fn fsdp_after_backward(&mut self, grads: &mut [Option<BufId>]) {
        if self.fsdp.is_none() {
            return;
        }
        self.fsdp_post_backward_unit(0, grads);
        if let Some(st) = self.fsdp.as_mut() {
            st.root_pre_backward = false;
            if let Some(b) = st.rs_input.take() {
                self.mem.release(b);
            }
        }
        self.rec.event("fsdp finalize", self.mem.total(), &self.mem);
    }

    /// Unit `u`'s post-backward: reshard, the previous reduce-scatter input freed,
    /// `foreach_reduce` of the gradients it has.
    fn fsdp_post_backward_unit(&mut self, u: usize, grads: &mut [Option<BufId>]) {
        if self.fsdp.as_ref().is_some_and(|st| st.f.version == 1) {
            return self.fsdp1_post_backward_unit(u, grads);
        }
        self.fsdp_reshard(u);
        let Some(st) = self.fsdp.as_mut() else { return };
        let with_grad = st.with_grad(u, grads);
        if with_grad.is_empty() {
            return;
        }
        if let Some(b) = st.rs_input.take() {
            self.mem.release(b);
        }
        let (world, gloo) = (st.f.world, st.f.collectives == Collectives::Gloo);
        let shards: u64 = with_grad.iter().map(|&p| st.padded[p]).sum();
        let last = st.units[u]
            .last_param
            .filter(|p| with_grad.contains(p))
            .or(with_grad.last().copied());
        let label = "fsdp reduce-scatter";
        self.mem.at(label);
        let input = self.mem.alloc(shards * world, Kind::Gradients);
        let mut high = self.rec.high(label, &self.mem);
        let mut kept = None;
        for &p in &with_grad {
            if let Some(g) = grads[p].take() {
                if Some(p) == last {
                    kept = Some(g);
                } else {
                    self.mem.release(g);
                }
            }
        }
        let output = self.mem.alloc(shards, Kind::Gradients);
        let tmp = gloo.then(|| self.mem.alloc(shards * world, Kind::Transients));
        high = high.max(self.rec.high(label, &self.mem));
        if let Some(t) = tmp {
            self.mem.release(t);
        }
        if let Some(g) = kept {
            self.mem.release(g);
        }
        self.rec.event(label, high, &self.mem);
        if let Some(st) = self.fsdp.as_mut() {
            st.rs_input = Some(input);
            st.sharded_grads.push((output, u, with_grad));
        }
    }

    /// FSDP1's unit `u` once its flat parameter's gradient is made: autograd's split of the
    /// flat parameter concatenates the unit's gradients into one (held until then), then the
    /// post-backward hook (`_post_backward_hook`, `_reduce_grad`) reshards, pads a copy where
    /// the flat parameter is padded, makes the sharded gradient and reduce-scatters (gloo's
    /// temporary of the input's size); the unsharded gradient goes as the hook ends.
    fn fsdp1_post_backward_unit(&mut self, u: usize, grads: &mut [Option<BufId>]) {
        let Some(st) = self.fsdp.as_ref() else { return };
        let with_grad = st.with_grad(u, grads);
        if with_grad.is_empty() {
            self.fsdp_reshard(u);
            return;
        }
        let (bytes, shard) = (st.units[u].bytes, st.units[u].padded);
        let gathered = st.gathered(u);
        let gloo = st.f.collectives == Collectives::Gloo;
        let label = "fsdp reduce-scatter";
        self.mem.at(label);
        let flat_grad = self.mem.alloc(bytes, Kind::Gradients);
        let mut high = self.rec.high(label, &self.mem);
        for &p in &with_grad {
            if let Some(g) = grads[p].take() {
                self.mem.release(g);
            }
        }
        self.fsdp_reshard(u);
        self.mem.at(label);
        let padded = (gathered > bytes).then(|| self.mem.alloc(gathered, Kind::Gradients));
        let output = self.mem.alloc(shard, Kind::Gradients);
        let tmp = gloo.then(|| self.mem.alloc(gathered, Kind::Transients));
        high = high.max(self.rec.high(label, &self.mem));
        for b in [tmp, padded, Some(flat_grad)].into_iter().flatten() {
            self.mem.release(b);
        }
        self.rec.event(label, high, &self.mem);
        if let Some(st) = self.fsdp.as_mut() {
            st.sharded_grads.push((output, u, with_grad));
        }
    }

    /// `step`: torch.optim's AdamW over the sharded tensors with a gradient (FSDP2: each
    /// parameter's shard, its own rows; FSDP1: each unit's flat shard, padded, its states keyed
    /// by the unit's first parameter), every one's two states made first (`Adam._init_group`;
    /// a 4-byte `step` scalar besides, not counted), then each update's temporaries; then
    /// `zero_grad`.
    pub(super) fn fsdp_step(&mut self, step: u32) {
        self.begin(step, format!("step{step}.optimizer"));
        let Some(st) = self.fsdp.as_ref() else { return };
        // In order: FSDP1's units, FSDP2's parameters.
        let stepped: Vec<(usize, u64, String)> = if st.f.version == 1 {
            let mut units: Vec<usize> = st.sharded_grads.iter().map(|g| g.1).collect();
            units.sort_unstable();
            units
                .into_iter()
                .map(|u| {
                    let unit = &st.units[u];
                    (
                        unit.params[0],
                        unit.padded,
                        "fsdp flat parameter".to_string(),
                    )
                })
                .collect()
        } else {
            let mut params: Vec<usize> = st
                .sharded_grads
                .iter()
                .flat_map(|(_, _, ps)| ps.iter().copied())
                .collect();
            params.sort_unstable();
            params
                .into_iter()
                .map(|p| (p, st.own[p], self.params[p].label.clone()))
                .collect()
        };
        for (key, bytes, label) in &stepped {
            if self
                .fsdp
                .as_ref()
                .is_none_or(|st| st.states[*key].is_some())
            {
                continue;
            }
            self.mem.at(label);
            let a = self.mem.alloc(*bytes, Kind::OptimizerState);
            let b = self.mem.alloc(*bytes, Kind::OptimizerState);
            if let Some(st) = self.fsdp.as_mut() {
                st.states[*key] = Some((a, b));
            }
        }
        for (_, bytes, label) in &stepped {
            self.mem.at(label);
            let t = self
                .mem
                .alloc(super::rules::adamw_transient(*bytes), Kind::Transients);
            let high = self.rec.high(label, &self.mem);
            self.mem.release(t);
            self.rec.event(label, high, &self.mem);
        }
        self.fsdp_zero_grad();
    }

    /// `zero_grad`: the sharded gradients freed; the phase ends.
    fn fsdp_zero_grad(&mut self) {
        let grads = self
            .fsdp
            .as_mut()
            .map(|st| std::mem::take(&mut st.sharded_grads))
            .unwrap_or_default();
        for (b, _, _) in grads {
            self.mem.release(b);
        }
        self.rec.event("zero_grad", self.mem.total(), &self.mem);
        self.rec.end(&self.mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_padded_on_every_rank_and_owns_its_rows() {
        // 10 rows of 8 bytes over 4 ranks: chunks of 3 rows; rank 3 owns 1.
        assert_eq!(shard(80, 10, 0, 4), (24, 24));
        assert_eq!(shard(80, 10, 3, 4), (24, 8));
        // 2 rows over 4 ranks: ranks 2 and 3 own none.
        assert_eq!(shard(16, 2, 2, 4), (8, 0));
    }
}
