//! DeepSpeed's ZeRO stage 3 in the simulator, for one rank: what DeepSpeed 0.18.2
//! (`deepspeed/runtime/zero/stage3.py`, `partition_parameters.py`,
//! `partitioned_param_coordinator.py`, `parameter_offload.py`) holds when, with the settings
//! `exporter/memcal_export/ranks.py` runs: fp32, the model built whole and handed to
//! `deepspeed.initialize` (not under `zero.Init`), torch's AdamW (foreach off) as the client
//! optimizer, every other setting DeepSpeed's default (`stage3_param_persistence_threshold`
//! 1e5, `stage3_prefetch_bucket_size` 5e7, `stage3_max_live_parameters` 1e9,
//! `stage3_max_reuse_distance` 1e9, `contiguous_gradients` and `reduce_scatter` on,
//! `sub_group_size` 1e9: one fp32 sub-group), gloo collectives. Names below: a parameter's
//! elements `n`, padded to a multiple of the world `a` (each parameter on its own,
//! `Init._aligned_size`), its partition `a / world` on every rank; `S` = 4 bytes x the sum of
//! the partitions.
//!
//! - Modules: every `nn.Module` with parameters of its own is fetched and released as one
//!   (`fetch_sub_module`, `release_sub_module`): within a graph node, each matrix with the
//!   vectors after it (a linear's weight and bias, an attention's q, k, v and o projections);
//!   a fused MoE is one ZeRO-3 leaf module (`DEFAULT_LEAF_MODULE_CLASSES`).
//! - Load (`DeepSpeedEngine.__init__` -> `DeepSpeedZeroOptimizer_Stage3.__init__`): each
//!   parameter's partition made while its whole tensor lives, then the whole freed
//!   (`_zero_init_param`); the partitions copied into one flat `S` and freed (`defragment`; the
//!   fp32 master is that same tensor for an fp32 model, `_create_fp32_partitions`); a zeroed
//!   `S` made and dropped (`initialize_optimizer_states`); the reduce bucket
//!   (`reduce_bucket_size` elements) and the gradient partitions' buffer `S` made and kept
//!   (`_setup_for_real_optimizer`) with two 1-byte flags; every parameter gathered once while
//!   its gradient hook is made and partitioned again (`create_reduce_and_remove_grad_hooks`).
//! - Gathering (`all_gather_coalesced`): one parameter into a buffer of `a` it keeps; several
//!   into a flat of their `a`s whose first wait copies each out (`n` each) and which goes with
//!   its last parameter's wait; gloo's `all_gather_into_tensor` a temporary of the output's size
//!   while it runs.
//! - Step 1 (the coordinator records its trace): each module gathered at its forward and
//!   released after it, persistent parameters too; a storage autograd saved a view of stays
//!   until the module's backward (a linear's `weight.t()`, the MoE's expert slices; a norm's or
//!   an embedding's weight is saved as the parameter itself and goes). The backward gathers
//!   each module again while that view lives.
//! - Steps 2 and on (the trace complete): the persistent parameters (at most 1e5 elements) are
//!   gathered at every step's end and kept; the coordinator prefetches the trace's next
//!   parameters in chunks of `stage3_prefetch_bucket_size` elements (at most
//!   `stage3_max_live_parameters` gathered) from the root module's fetch on, and after a
//!   module's forward releases only what the trace does not use again within
//!   `stage3_max_reuse_distance` elements (`__params_to_release`): a model below that keeps all
//!   its parameters gathered from the forward to their backward. A parameter released in the
//!   forward is gathered again at its backward (its backward prefetch is not drawn).
//! - Backward: each gradient, as autograd completes it, is copied into the reduce bucket (its
//!   own tensor freed) when it fits, else kept until reduced; a gradient that would overflow a
//!   non-empty bucket reduces it first; one reduction (`__avg_scatter_grads` ->
//!   `reduce_scatter_coalesced`) concatenates the gradients' padded chunks (a single gradient
//!   of a multiple of the world elements is used as it is) and gloo's `reduce_scatter_tensor`
//!   copies its input; the rank's chunk goes into the partitions' buffer. After its backward a
//!   module's parameters are released, except a module none of whose inputs requires a
//!   gradient (an embedding of token ids: `PostBackwardFunctionModule` never runs), whose
//!   parameters stay until the step. The epilogue reduces what the bucket holds.
//! - Step: every gathered parameter released; the gradient norm's double copy of the largest
//!   partition; the partitions' gradients flattened (`S`); AdamW on the flat partition (its
//!   two states and `step` made at the first step; two temporaries of `S` during the update);
//!   the flat gradient freed; the persistent parameters gathered (`_post_step`).
//!
//! Not drawn: the few scalars DeepSpeed keeps besides (the gradient norm's 8 bytes and the
//! engine's 4-byte loss are), the timing of gloo's asynchronous gathers at the step's end (a
//! persistent parameter's temporary sometimes still alive at the phase's end on the rows).

use super::deepspeed::Collectives;
use super::{BufId, Kind, Sim};
use crate::strategy::{Kind as SKind, Part};

/// `stage3_param_persistence_threshold`: a parameter of at most this many elements is never
/// released once gathered at a step's end.
pub const PERSISTENCE_THRESHOLD: u64 = 100_000;
/// `stage3_prefetch_bucket_size` (elements).
pub const PREFETCH_BUCKET: u64 = 50_000_000;
/// `stage3_max_live_parameters` (elements).
pub const MAX_LIVE: u64 = 1_000_000_000;
/// `stage3_max_reuse_distance` (elements).
pub const MAX_REUSE: u64 = 1_000_000_000;

/// DeepSpeed's ZeRO-3 for one rank: the rank, the world, `reduce_bucket_size` in elements and
/// the collective backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zero3 {
    pub rank: u64,
    pub world: u64,
    pub bucket: u64,
    pub collectives: Collectives,
}

impl Zero3 {
    /// The rule set's settings for `part` (rank 0), None for another part.
    pub fn of_part(part: &Part) -> Option<Zero3> {
        (part.kind == SKind::Zero3).then(|| Zero3 {
            rank: 0,
            world: part.get("world"),
            bucket: part.get("bucket"),
            collectives: Collectives::Gloo,
        })
    }
}

/// What a simulation of `strategy` on `collectives` assumes beyond the measured rows (None
/// where it is what the rows measured, or ZeRO-3 is not in it).
pub fn unmeasured_note(
    strategy: &crate::strategy::Strategy,
    collectives: Collectives,
) -> Option<&'static str> {
    let covered = strategy.parts.iter().any(|p| Zero3::of_part(p).is_some());
    (covered && collectives == Collectives::Nccl).then_some(
        "a CUDA device with NCCL, from DeepSpeed's and torch's code, not measured: the all-gathers and the reduce-scatter work in place, where the CPU rows (gloo) also hold a temporary of each gather's output and a copy of each reduction's input",
    )
}

/// How the ZeRO-3 simulation runs DeepSpeed, for a plan to print (None without ZeRO-3): as
/// the rows measured it, the model built whole before `deepspeed.initialize`.
pub fn protocol_note(strategy: &crate::strategy::Strategy) -> Option<&'static str> {
    strategy.parts.iter().find_map(Zero3::of_part)?;
    Some(
        "ZeRO-3 as memcal_export.ranks runs it: the model built whole on every rank, then partitioned by deepspeed.initialize (not under deepspeed.zero.Init), so F.linear saves a view of each gathered weight (weight.t()) that keeps its storage from the forward to its backward; under zero.Init DeepSpeed's memory-efficient linear saves the parameter itself and the load never holds the whole model (not drawn)",
    )
}

/// One `nn.Module` with parameters of its own: its parameters, in order.
#[derive(Debug, Clone)]
struct Module {
    params: Vec<usize>,
}

/// A gathering in flight (steps 2 and on): its parameters, how many are still to be waited,
/// its flat output (several parameters), and whether its first wait copied them out.
struct Handle {
    params: Vec<usize>,
    left: usize,
    flat: Option<BufId>,
    waited: bool,
}

/// The reduce bucket's contents: elements, its gradients' parameters, and the gradients kept
/// as they are (too large for it).
#[derive(Default)]
struct Bucket {
    elements: u64,
    params: Vec<usize>,
    standalone: Vec<BufId>,
}

/// The rule set's state through a run.
pub(super) struct State {
    z: Zero3,
    /// Modules in forward order; each node's modules.
    modules: Vec<Module>,
    node_modules: Vec<Vec<usize>>,
    /// Per parameter: elements, padded elements, persistent, the forward saves a view of it,
    /// the node whose backward completes its gradient.
    n: Vec<u64>,
    a: Vec<u64>,
    persist: Vec<bool>,
    viewed: Vec<bool>,
    hook_node: Vec<usize>,
    /// Per node: none of its inputs requires a gradient (its post-backward never runs).
    no_grad_input: Vec<bool>,
    /// The flat partition's bytes (`S`).
    s: u64,
    /// Each parameter's gathered storage; what a saved view keeps of it (step 1).
    held: Vec<Option<BufId>>,
    retained: Vec<Option<BufId>>,
    bucket: Bucket,
    adam: bool,
    losses: Option<BufId>,
    /// The forward being run (1 = the trace is recorded).
    step: u32,
    /// Steps 2 and on: the trace's parameter queue (parameter, trace position), its next
    /// entry, each parameter's most recent trace position fetched for, and the handles.
    queue: Vec<(usize, usize)>,
    next: usize,
    recent: Vec<Option<usize>>,
    in_flight: Vec<Option<usize>>,
    handles: Vec<Handle>,
}

impl State {
    pub fn new(
        z: Zero3,
        graph: &crate::graph::Graph,
        values: &super::rules::Values,
        params: &[super::Param],
        node_params: &[Vec<usize>],
    ) -> State {
        let mut modules = Vec::new();
        let mut node_modules = vec![Vec::new(); node_params.len()];
        let mut viewed = vec![false; params.len()];
        let mut hook_node = vec![usize::MAX; params.len()];
        let mut no_grad_input = vec![false; node_params.len()];
        for (k, ps) in node_params.iter().enumerate() {
            let op = &graph.nodes[k].op;
            let family = op.family();
            for &p in ps {
                // Backward runs last node first: the first node using it completes it.
                hook_node[p] = hook_node[p].min(k);
                viewed[p] = family.saves_weight_views(op) && params[p].rank >= 2;
            }
            no_grad_input[k] = family.takes_ids(op)
                || values
                    .args(k)
                    .iter()
                    .all(|&v| values.as_node(v as usize).is_none());
            let leaf = family.zero3_leaf(op);
            for &p in ps {
                let starts = modules.is_empty()
                    || node_modules[k].is_empty()
                    || (!leaf && params[p].rank >= 2);
                if starts {
                    node_modules[k].push(modules.len());
                    modules.push(Module { params: Vec::new() });
                }
                if let Some(m) = node_modules[k].last() {
                    modules[*m].params.push(p);
                }
            }
        }
        let n = super::deepspeed::elements(params);
        let a: Vec<u64> = n.iter().map(|&n| n.div_ceil(z.world) * z.world).collect();
        let s = a.iter().map(|a| a / z.world * 4).sum();
        State {
            z,
            modules,
            node_modules,
            persist: n.iter().map(|&n| n <= PERSISTENCE_THRESHOLD).collect(),
            n,
            a,
            viewed,
            hook_node,
            no_grad_input,
            s,
            held: vec![None; params.len()],
            retained: vec![None; params.len()],
            bucket: Bucket::default(),
            adam: false,
            losses: None,
            step: 0,
            queue: Vec::new(),
            next: 0,
            recent: vec![None; params.len()],
            in_flight: vec![None; params.len()],
            handles: Vec::new(),
        }
    }

    /// The trace position of module `m`'s forward (the root is 0) and of its backward.
    fn forward_at(&self, m: usize) -> usize {
        m + 1
    }
    fn backward_at(&self, m: usize) -> usize {
        1 + self.modules.len() + (self.modules.len() - 1 - m)
    }
    /// The module at trace position `t` (None: the root).
    fn module_at(&self, t: usize) -> Option<usize> {
        let m = self.modules.len();
        match t {
            0 => None,
            t if t <= m => Some(t - 1),
            t => Some(2 * m - t),
        }
    }

    /// `__params_to_release` after the module at trace position `t`: its parameters that are
    /// not persistent, not fetched for a later position by a prefetch, and not used again by
    /// the trace within `stage3_max_reuse_distance` elements.
    fn to_release(&self, m: usize, t: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self.modules[m]
            .params
            .iter()
            .copied()
            .filter(|&p| !self.persist[p] && self.recent[p].is_none_or(|r| r <= t))
            .collect();
        let mut walked = 0u64;
        for u in t + 1..=2 * self.modules.len() {
            if walked >= MAX_REUSE || out.is_empty() {
                break;
            }
            if let Some(o) = self.module_at(u) {
                for &p in &self.modules[o].params {
                    out.retain(|&q| q != p);
                    walked += self.n[p];
                }
            }
        }
        out
    }
}

impl Sim<'_> {
    fn z3(&self) -> Option<&State> {
        self.zero3.as_ref()
    }

    /// `deepspeed.initialize` after the whole model was built: partitions, the flat partition,
    /// the optimizer's zeroed buffer, the reduce bucket and the gradients' buffer, the hooks'
    /// gathers.
    pub(super) fn zero3_load(&mut self, param_bufs: &[BufId]) {
        let Some(st) = self.z3() else { return };
        let (a, n, world, s) = (st.a.clone(), st.n.clone(), st.z.world, st.s);
        let (bucket, gloo) = (st.z.bucket * 4, st.z.collectives == Collectives::Gloo);
        let mut parts = Vec::with_capacity(a.len());
        for (p, &b) in param_bufs.iter().enumerate() {
            self.mem.at("zero3 partition");
            parts.push(self.mem.alloc(a[p] / world * 4, Kind::Parameters));
            let high = self.rec.high("zero3 partition", &self.mem);
            self.mem.release(b);
            self.rec.event("zero3 partition", high, &self.mem);
        }
        self.mem.at("zero3 flat partition");
        self.mem.alloc(s, Kind::Parameters);
        let high = self.rec.high("zero3 flat partition", &self.mem);
        for b in parts {
            self.mem.release(b);
        }
        self.rec.event("zero3 flat partition", high, &self.mem);
        self.mem.at("zero3 optimizer states init");
        let zeros = self.mem.alloc(s, Kind::Transients);
        let high = self.rec.high("zero3 optimizer states init", &self.mem);
        self.mem.release(zeros);
        self.rec
            .event("zero3 optimizer states init", high, &self.mem);
        self.mem.at("zero3 buffers");
        self.mem.alloc(bucket, Kind::Gradients);
        self.mem.alloc(s, Kind::Gradients);
        self.mem.alloc(2, Kind::Gradients);
        let high = self.rec.high("zero3 buffers", &self.mem);
        self.rec.event("zero3 buffers", high, &self.mem);
        // `create_reduce_and_remove_grad_hooks`: each parameter gathered (`_allgather_params`:
        // the flat output, gloo's temporary, then the parameter's copy) and partitioned again.
        let label = "zero3 gradient hooks";
        let mut high = 0;
        for p in 0..a.len() {
            self.mem.at(label);
            let flat = self.mem.alloc(a[p] * 4, Kind::Transients);
            let tmp = gloo.then(|| self.mem.alloc(a[p] * 4, Kind::Transients));
            high = high.max(self.rec.high(label, &self.mem));
            if let Some(t) = tmp {
                self.mem.release(t);
            }
            let copy = self.mem.alloc(n[p] * 4, Kind::Transients);
            high = high.max(self.rec.high(label, &self.mem));
            self.mem.release(flat);
            self.mem.release(copy);
        }
        self.rec.event(label, high, &self.mem);
    }

    /// Gathers `ps` as one handle (`all_gather_coalesced`) and, when `wait`, waits for them:
    /// one parameter into a buffer of its padded size; several into a flat, copied out at the
    /// first wait. Returns the handle (steps 2 and on), None when waited at once.
    fn zero3_gather(&mut self, ps: Vec<usize>, wait: bool, label: &str) -> Option<usize> {
        let st = self.z3()?;
        if ps.is_empty() {
            return None;
        }
        let flat_bytes: u64 = ps.iter().map(|&p| st.a[p] * 4).sum();
        let gloo = st.z.collectives == Collectives::Gloo;
        self.mem.at(label);
        let flat = self.mem.alloc(flat_bytes, Kind::Parameters);
        let tmp = gloo.then(|| self.mem.alloc(flat_bytes, Kind::Transients));
        let high = self.rec.high(label, &self.mem);
        if let Some(t) = tmp {
            self.mem.release(t);
        }
        self.rec.event(label, high, &self.mem);
        let single = ps.len() == 1;
        let st = self.zero3.as_mut()?;
        if single {
            st.held[ps[0]] = Some(flat);
        }
        let h = st.handles.len();
        for &p in &ps {
            st.in_flight[p] = Some(h);
        }
        st.handles.push(Handle {
            left: ps.len(),
            params: ps.clone(),
            flat: (!single).then_some(flat),
            waited: single,
        });
        if wait {
            for p in ps {
                self.zero3_wait(p, label);
            }
            return None;
        }
        Some(h)
    }

    /// A parameter's wait: its handle's first wait copies every parameter of it out; the flat
    /// output goes with its last parameter's wait.
    fn zero3_wait(&mut self, p: usize, label: &str) {
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        let Some(h) = st.in_flight[p].take() else {
            return;
        };
        if !st.handles[h].waited {
            st.handles[h].waited = true;
            let ps = st.handles[h].params.clone();
            let bytes: Vec<u64> = ps.iter().map(|&q| st.n[q] * 4).collect();
            self.mem.at(label);
            let bufs: Vec<BufId> = bytes
                .iter()
                .map(|&b| self.mem.alloc(b, Kind::Parameters))
                .collect();
            let high = self.rec.high(label, &self.mem);
            self.rec.event(label, high, &self.mem);
            let Some(st) = self.zero3.as_mut() else {
                return;
            };
            for (q, b) in ps.into_iter().zip(bufs) {
                st.held[q] = Some(b);
            }
        }
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        st.handles[h].left -= 1;
        if st.handles[h].left == 0 {
            if let Some(f) = st.handles[h].flat.take() {
                self.mem.release(f);
                self.rec.event(label, self.mem.total(), &self.mem);
            }
        }
    }

    /// Releases parameter `p`'s gathered storage (`free_param`); a storage a saved view holds
    /// is kept until its module's backward when `keep_views`.
    fn zero3_release(&mut self, p: usize, keep_views: bool) {
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        let Some(b) = st.held[p].take() else { return };
        if keep_views && st.viewed[p] {
            st.retained[p] = Some(b);
        } else {
            self.mem.release(b);
        }
    }

    /// The parameters of module `m` not gathered nor in flight.
    fn zero3_missing(&self, m: usize) -> Vec<usize> {
        self.z3().map_or_else(Vec::new, |st| {
            st.modules[m]
                .params
                .iter()
                .copied()
                .filter(|&p| st.held[p].is_none() && st.in_flight[p].is_none())
                .collect()
        })
    }

    /// Before node `k`'s forward: each of its modules fetched (step 1: gathered and waited;
    /// later steps: waited for, gathered if not in flight, then the next chunk prefetched). The
    /// first node begins a forward, and from step 2 the root module's fetch prefetches.
    pub(super) fn zero3_pre_forward(&mut self, k: usize) {
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        if k == 0 {
            st.step += 1;
            if st.step >= 2 {
                st.queue.clear();
                st.next = 0;
                st.recent.iter_mut().for_each(|r| *r = None);
                st.handles.clear();
                let mut queue = Vec::new();
                for t in 1..=2 * st.modules.len() {
                    if let Some(m) = st.module_at(t) {
                        queue.extend(st.modules[m].params.iter().map(|&p| (p, t)));
                    }
                }
                st.queue = queue;
                self.zero3_prefetch("zero3 prefetch");
            }
        }
        let Some(st) = self.z3() else { return };
        let (mods, step) = (st.node_modules[k].clone(), st.step);
        for m in mods {
            let need = self.zero3_missing(m);
            if step == 1 {
                self.zero3_gather(need, true, "zero3 fetch");
                continue;
            }
            self.zero3_gather(need, false, "zero3 fetch");
            let Some(st) = self.z3() else { return };
            let (ps, t) = (st.modules[m].params.clone(), st.forward_at(m));
            for &p in &ps {
                self.zero3_wait(p, "zero3 wait");
            }
            // The queue advances past this module's parameters.
            let Some(st) = self.zero3.as_mut() else {
                return;
            };
            let fresh = ps
                .iter()
                .filter(|&&p| st.recent[p].is_none_or(|r| r < t))
                .count();
            let mut done = 0;
            while st.next < st.queue.len() && done < fresh {
                let (p, at) = st.queue[st.next];
                st.next += 1;
                st.recent[p] = Some(at);
                done += 1;
            }
            self.zero3_prefetch("zero3 prefetch");
        }
    }

    /// The coordinator's prefetch: the queue's next parameters not gathered, up to the prefetch
    /// bucket (and the live limit), gathered as one handle.
    fn zero3_prefetch(&mut self, label: &str) {
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        let live: u64 = (0..st.n.len())
            .filter(|&p| st.held[p].is_some() || st.in_flight[p].is_some())
            .map(|p| st.n[p])
            .sum();
        let cap = MAX_LIVE.saturating_sub(live).min(PREFETCH_BUCKET);
        let (mut picked, mut numel) = (Vec::new(), 0u64);
        while st.next < st.queue.len() && numel < cap {
            let (p, at) = st.queue[st.next];
            st.next += 1;
            st.recent[p] = Some(st.recent[p].map_or(at, |r| r.max(at)));
            if st.held[p].is_none() && st.in_flight[p].is_none() && !picked.contains(&p) {
                picked.push(p);
                numel += st.n[p];
            }
        }
        self.zero3_gather(picked, false, label);
    }

    /// After node `k`'s forward: each module released, a storage a saved view holds kept.
    pub(super) fn zero3_post_forward(&mut self, k: usize) {
        let Some(st) = self.z3() else { return };
        for m in st.node_modules[k].clone() {
            self.zero3_release_module(m, true);
        }
    }

    /// `release_sub_module` of module `m` after its forward (`forward`) or its backward: step
    /// 1 (the trace being recorded) releases every parameter, later steps what the trace does
    /// not use again soon ([`State::to_release`]); after a forward a storage a saved view
    /// holds is kept to the backward.
    fn zero3_release_module(&mut self, m: usize, forward: bool) {
        let Some(st) = self.z3() else { return };
        let release = if st.step == 1 {
            st.modules[m].params.clone()
        } else if forward {
            st.to_release(m, st.forward_at(m))
        } else {
            st.to_release(m, st.backward_at(m))
        };
        for p in release {
            self.zero3_release(p, forward);
        }
    }

    /// Before node `k`'s backward: its modules' parameters not gathered are gathered, those
    /// in flight waited for.
    pub(super) fn zero3_pre_backward(&mut self, k: usize) {
        let Some(st) = self.z3() else { return };
        for m in st.node_modules[k].clone().into_iter().rev() {
            let need = self.zero3_missing(m);
            self.zero3_gather(need, true, "zero3 backward fetch");
            let Some(st) = self.z3() else { return };
            for p in st.modules[m].params.clone() {
                self.zero3_wait(p, "zero3 backward fetch");
            }
        }
    }

    /// After node `k`'s backward: the saved views' storage goes, each gradient it completed
    /// goes to the reduce bucket, and its modules are released (not a module fed no gradient;
    /// from step 2 not the persistent parameters).
    pub(super) fn zero3_post_backward(&mut self, k: usize, grads: &mut [Option<BufId>]) {
        let Some(st) = self.z3() else { return };
        let mods: Vec<usize> = st.node_modules[k].iter().rev().copied().collect();
        for &m in &mods {
            let Some(st) = self.zero3.as_mut() else {
                return;
            };
            let kept: Vec<BufId> = st.modules[m]
                .params
                .iter()
                .filter_map(|&p| st.retained[p].take())
                .collect();
            for b in kept {
                self.mem.release(b);
            }
        }
        for &m in &mods {
            let Some(st) = self.z3() else { return };
            let ready: Vec<usize> = st.modules[m]
                .params
                .iter()
                .rev()
                .copied()
                .filter(|&p| st.hook_node[p] == k && grads[p].is_some())
                .collect();
            for p in ready {
                self.zero3_grad(p, grads);
            }
        }
        let Some(st) = self.z3() else { return };
        if st.no_grad_input[k] {
            return;
        }
        for &m in &mods {
            self.zero3_release_module(m, false);
        }
    }

    /// A gradient completed (`reduce_independent_p_g_buckets_and_remove_grads`): the bucket
    /// reduced first if it would overflow, then the gradient copied in (its tensor freed) or,
    /// too large, kept as it is.
    fn zero3_grad(&mut self, p: usize, grads: &mut [Option<BufId>]) {
        let Some(st) = self.z3() else { return };
        let (n, cap) = (st.n[p], st.z.bucket);
        if st.bucket.elements > 0 && st.bucket.elements + n > cap {
            self.zero3_reduce();
        }
        let Some(g) = grads[p].take() else { return };
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        if st.bucket.elements + n <= cap {
            self.mem.release(g);
        } else {
            st.bucket.standalone.push(g);
        }
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        st.bucket.elements += n;
        st.bucket.params.push(p);
    }

    /// One reduction of the bucket (`__reduce_and_partition_ipg_grads`): the gradients'
    /// padded chunks concatenated (one gradient of a multiple of the world's elements used as
    /// it is), gloo's copy of that input; the kept gradients freed.
    fn zero3_reduce(&mut self) {
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        let b = std::mem::take(&mut st.bucket);
        if b.params.is_empty() {
            return;
        }
        let world = st.z.world;
        let gloo = st.z.collectives == Collectives::Gloo;
        let in_place = b.params.len() == 1 && st.n[b.params[0]] % world == 0;
        let input: u64 = if in_place {
            st.n[b.params[0]] * 4
        } else {
            b.params.iter().map(|&p| st.a[p] * 4).sum()
        };
        let label = "zero3 reduce-scatter";
        self.mem.at(label);
        let cat = (!in_place).then(|| self.mem.alloc(input, Kind::Transients));
        let copy = gloo.then(|| self.mem.alloc(input, Kind::Transients));
        let high = self.rec.high(label, &self.mem);
        for x in [copy, cat].into_iter().flatten().chain(b.standalone) {
            self.mem.release(x);
        }
        self.rec.event(label, high, &self.mem);
    }

    /// After the whole backward: the engine's kept loss (`self.losses`, 4 bytes), then the
    /// epilogue's reduction of what the bucket holds.
    pub(super) fn zero3_after_backward(&mut self) {
        if self.zero3.is_none() {
            return;
        }
        self.mem.at("zero3 engine.losses");
        let l = self.mem.alloc(4, Kind::Transients);
        if let Some(st) = self.zero3.as_mut() {
            st.losses = Some(l);
        }
        self.zero3_reduce();
    }

    /// `step`: every gathered parameter released; the gradient norm's double copy of the
    /// largest partition; the flat gradient; AdamW on the flat partition (its states and
    /// `step` first, the gradient norm's scalar kept); the flat gradient freed; the persistent
    /// parameters gathered; the engine's loss dropped.
    pub(super) fn zero3_step(&mut self, step: u32) {
        self.begin(step, format!("step{step}.optimizer"));
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        // A prefetch no module waited for (a model past the reuse distance) goes too.
        let flats: Vec<BufId> = st
            .handles
            .iter_mut()
            .filter_map(|h| h.flat.take())
            .collect();
        st.handles.clear();
        st.in_flight.iter_mut().for_each(|h| *h = None);
        for f in flats {
            self.mem.release(f);
        }
        let Some(st) = self.z3() else { return };
        for p in 0..st.n.len() {
            self.zero3_release(p, false);
        }
        let Some(st) = self.z3() else { return };
        let (s, world) = (st.s, st.z.world);
        let largest = st.a.iter().map(|a| a / world).max().unwrap_or(0);
        let first = !st.adam;
        let label = "zero3 step";
        self.mem.at(label);
        let norm = self.mem.alloc(largest * 8, Kind::Transients);
        let mut high = self.rec.high(label, &self.mem);
        self.mem.release(norm);
        let flat = self.mem.alloc(s, Kind::Gradients);
        if first {
            self.mem.alloc(s, Kind::OptimizerState);
            self.mem.alloc(s, Kind::OptimizerState);
            self.mem.alloc(4, Kind::OptimizerState);
            self.mem.alloc(8, Kind::OptimizerState);
        }
        let t = self
            .mem
            .alloc(super::rules::adamw_transient(s), Kind::Transients);
        high = high.max(self.rec.high(label, &self.mem));
        self.mem.release(t);
        self.mem.release(flat);
        self.rec.event(label, high, &self.mem);
        // `_post_step` -> `_allgather_params_coalesced`: every persistent parameter's buffer
        // made, then each gathered asynchronously (gloo's temporaries together).
        let Some(st) = self.zero3.as_mut() else {
            return;
        };
        st.adam = true;
        let persistent: Vec<(usize, u64)> = (0..st.n.len())
            .filter(|&p| st.persist[p])
            .map(|p| (p, st.a[p] * 4))
            .collect();
        let gloo = st.z.collectives == Collectives::Gloo;
        let label = "zero3 persistent gather";
        self.mem.at(label);
        let bufs: Vec<(usize, BufId)> = persistent
            .iter()
            .map(|&(p, b)| (p, self.mem.alloc(b, Kind::Parameters)))
            .collect();
        let temps: Vec<BufId> = if gloo {
            persistent
                .iter()
                .map(|&(_, b)| self.mem.alloc(b, Kind::Transients))
                .collect()
        } else {
            Vec::new()
        };
        let high = self.rec.high(label, &self.mem);
        for t in temps {
            self.mem.release(t);
        }
        self.rec.event(label, high, &self.mem);
        if let Some(st) = self.zero3.as_mut() {
            for (p, b) in bufs {
                st.held[p] = Some(b);
            }
        }
        if let Some(l) = self.zero3.as_mut().and_then(|st| st.losses.take()) {
            self.mem.release(l);
        }
        self.rec
            .event("zero3 step end", self.mem.total(), &self.mem);
        self.rec.end(&self.mem);
    }
}
