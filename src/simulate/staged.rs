//! Staged runs: activation checkpointing (`checkpoint[:every=K]`) and QLoRA's recomputed
//! nodes, as the harness runs them (`measurement/src/strategies.rs`: `stages`,
//! `Tape::forward`, `Tape::backward`, `run_range`, `surrogate`), and the adapters' load.
//!
//! - Stages: segments of K consecutive blocks (`block_of`) recomputed in backward, or under
//!   QLoRA each node holding a 4-bit target; the nodes between are kept stages.
//! - Forward, stage by stage: a recomputed stage runs under no_grad (nothing saved; an op's
//!   internal tensors are transients) and keeps its external inputs for its backward; a kept
//!   stage runs with autograd. Each value is released after its last use inside the stage
//!   unless it is a live output (used by a later stage, or the loss). Every live output that
//!   needs a gradient (all of a recomputed stage's) is replaced by a detached leaf sharing its
//!   buffer, which the stage's record holds until the stage's backward; an external input is
//!   dropped once the stage that uses it last is done.
//! - Backward: `loss.backward()` through the loss's stage (its graph ends at the leaves: their
//!   `.grad`), the loss dropped, then stage by stage in reverse: a stage whose leaves got no
//!   gradient is dropped; a recomputed one re-runs with autograd from its saved inputs; then
//!   the surrogate `Σ sum(t * g)` over its outputs with a gradient (each product a temporary
//!   of the output's size; a 4-byte scalar each) and its backward: `MulBackward` makes each
//!   output's incoming gradient (a new buffer of its size: `grad * other`, derivatives.yaml
//!   `mul.Tensor`, `other` the leaf's gradient), then the stage's nodes as in a plain backward.
//!   A leaf's gradient is what `AccumulateGrad` does (`accumulate_grad.h`): the incoming buffer
//!   stolen when nothing else holds it and its layout matches the leaf's, else a copy; a later
//!   one added in place. Once the stage is done, its recomputed values, saved inputs, leaves
//!   and their gradients go.

use super::lowrank::{self, LowRank};
use super::rules::OpRule;
use super::{BufId, Kind, SavedSets, Scratch, Sim, Value};
use crate::graph::Graph;
use crate::strategy::{Kind as SKind, Strategy};
use std::ops::Range;

/// What a strategy changes in the simulated step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Blocks a checkpointed segment.
    pub checkpoint_every: Option<u64>,
    pub low_rank: Option<LowRank>,
    /// DistributedDataParallel (`ddp`, and `zero1`, which runs over it): the reducer's flat
    /// gradient buckets, one element a trainable parameter, made at construction
    /// (`torch/csrc/distributed/c10d/reducer.cpp`, `initialize_buckets`: `at::empty` of each
    /// bucket's total; `gradient_as_bucket_view` off, so `.grad` stays its own tensor and is
    /// copied in and out) and kept for the run.
    pub ddp_buckets: bool,
    /// ZeroRedundancyOptimizer (`zero1`): (this rank, world). The rank's AdamW holds and
    /// steps only its partition (`_partition_parameters`: parameters sorted by size, largest
    /// first, each to the rank with the fewest elements so far, the lowest such rank).
    pub zero1: Option<(u64, u64)>,
    /// DeepSpeed's ZeRO stage 1 or 2 ([`super::deepspeed`]), alone.
    pub deepspeed: Option<super::deepspeed::DeepSpeed>,
    /// FSDP1 or FSDP2 (`fsdp`, [`super::fsdp`]), alone.
    pub fsdp: Option<super::fsdp::Fsdp>,
    /// Tensor parallelism (`tp`, [`super::tp`]), alone.
    pub tp: Option<super::tp::Tp>,
    /// Pipeline parallelism (`pp`, [`super::pp`]), alone.
    pub pp: Option<super::pp::Pp>,
    /// DeepSpeed's ZeRO-3 (`zero3`, [`super::zero3`]), alone.
    pub zero3: Option<super::zero3::Zero3>,
}

impl Plan {
    /// The plan of a strategy; an error for a part with no rule set.
    pub fn from_strategy(s: &Strategy) -> Result<Plan, String> {
        let mut p = Plan::default();
        for part in &s.parts {
            match part.kind {
                SKind::Checkpoint => {
                    let every = part.get("every");
                    if every == 0 {
                        return Err("checkpoint: every must be at least 1".into());
                    }
                    p.checkpoint_every = Some(every);
                }
                SKind::Lora | SKind::Qlora => {
                    let r = part.get("r");
                    if r == 0 {
                        return Err(format!("{part}: r must be at least 1"));
                    }
                    p.low_rank = Some(LowRank {
                        r,
                        quantize: part.kind == SKind::Qlora,
                    });
                }
                SKind::Ddp => p.ddp_buckets = true,
                SKind::Zero1 | SKind::Zero2 if part.deepspeed() => {
                    if s.parts.len() > 1 {
                        return Err(format!(
                            "`{part}`: the simulator's DeepSpeed rule set covers it alone, not with other parts (its formula stands)"
                        ));
                    }
                    p.deepspeed = super::deepspeed::DeepSpeed::of_part(part);
                }
                SKind::Fsdp => {
                    if s.parts.len() > 1 {
                        return Err(format!(
                            "`{part}`: the simulator's FSDP rule set covers it alone, not with other parts (its formula stands)"
                        ));
                    }
                    p.fsdp = super::fsdp::Fsdp::of_part(part);
                }
                SKind::Pp => {
                    if s.parts.len() > 1 {
                        return Err(format!(
                            "`{part}`: the simulator's pipeline rule set covers it alone, not with other parts (its formula stands)"
                        ));
                    }
                    p.pp = super::pp::Pp::of_part(part);
                }
                SKind::Tp => {
                    if s.parts.len() > 1 {
                        return Err(format!(
                            "`{part}`: the simulator's tensor-parallel rule set covers it alone, not with other parts (its formula stands)"
                        ));
                    }
                    p.tp = super::tp::Tp::of_part(part);
                }
                SKind::Zero3 => {
                    if s.parts.len() > 1 {
                        return Err(format!(
                            "`{part}`: the simulator's ZeRO-3 rule set covers it alone, not with other parts (its formula stands)"
                        ));
                    }
                    p.zero3 = super::zero3::Zero3::of_part(part);
                }
                SKind::Zero1 => {
                    p.ddp_buckets = true;
                    p.zero1 = Some((0, part.get("world")));
                }
                other => {
                    return Err(format!(
                        "`{part}`: the simulator has no rule set for {other:?} (its formula stands)"
                    ))
                }
            }
        }
        Ok(p)
    }

    pub fn is_plain(&self) -> bool {
        self.checkpoint_every.is_none()
            && self.low_rank.is_none()
            && !self.ddp_buckets
            && self.zero1.is_none()
            && self.deepspeed.is_none()
            && self.fsdp.is_none()
            && self.tp.is_none()
            && self.pp.is_none()
            && self.zero3.is_none()
    }
}

/// A stage with what the forward needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageInfo {
    pub nodes: Range<usize>,
    pub recompute: bool,
    /// Values (positions) its nodes read that it does not produce, in order.
    pub external: Vec<usize>,
    /// Its nodes whose outputs are used after it (or are the loss), in node order.
    pub live: Vec<usize>,
}

/// The harness's stages of a plan (None: no staging): segments of `every` blocks under
/// checkpointing, else under QLoRA each node holding a target. An error when the loss would
/// be in a recomputed stage (the harness's loss would have no graph).
pub fn stages(
    graph: &Graph,
    values: &super::rules::Values,
    plan: &Plan,
) -> Result<Option<Vec<StageInfo>>, String> {
    let n = graph.nodes.len();
    let quantized = plan.low_rank.is_some_and(|l| l.quantize);
    let Some(ranges) = crate::strategy::stages::ranges(graph, plan.checkpoint_every, quantized)
    else {
        return Ok(None);
    };
    let mut last_use = vec![usize::MAX; values.len()];
    for k in 0..n {
        for &v in values.args(k) {
            last_use[v as usize] = k;
        }
    }
    let loss = graph.loss_index();
    let mut out = Vec::with_capacity(ranges.len());
    for (r, recompute) in ranges {
        let mut external: Vec<usize> = r
            .clone()
            .flat_map(|k| values.args(k).iter().map(|&v| v as usize))
            .filter(|&v| values.as_node(v).is_none_or(|j| !r.contains(&j)))
            .collect();
        external.sort_unstable();
        external.dedup();
        let live: Vec<usize> = r
            .clone()
            .filter(|&k| {
                let v = values.node_value(k);
                Some(k) == loss || (last_use[v] != usize::MAX && last_use[v] >= r.end)
            })
            .collect();
        if recompute && loss.is_some_and(|l| r.contains(&l)) {
            return Err(format!(
                "the loss `{}` is inside a recomputed stage: no graph to backpropagate",
                graph.loss
            ));
        }
        out.push(StageInfo {
            nodes: r,
            recompute,
            external,
            live,
        });
    }
    Ok(Some(out))
}

/// What the staged forward keeps for the backward, per stage.
pub(super) struct Record {
    /// A recomputed stage's inputs (retained).
    inputs: Vec<(usize, Value)>,
    /// Live outputs that became leaves: node, the buffer the record holds.
    outputs: Vec<(usize, Value)>,
    /// A kept stage's saved tensors.
    saved: SavedSets,
}

/// The staged forward's result.
pub(super) struct Tape {
    records: Vec<Record>,
    loss: Option<BufId>,
    /// Whether each node's output is a leaf's (its layout, for `AccumulateGrad`).
    leaf_contig: Vec<Option<bool>>,
}

impl Sim<'_> {
    /// LoRA and QLoRA at load (`apply_low_rank`), after the base: per target, A and B, then
    /// under QLoRA the weight packed (its transients) and its fp32 buffer freed.
    pub(super) fn load_adapters(&mut self, param_bufs: &[BufId]) {
        let Some(lr) = self.low_rank else { return };
        for t in std::mem::take(&mut self.targets).iter() {
            for p in [t.a, t.b] {
                self.mem.at(&self.params[p].label);
                self.mem.alloc(self.params[p].bytes, Kind::Parameters);
                let high = self.rec.high(&self.params[p].label, &self.mem);
                self.rec.event(&self.params[p].label, high, &self.mem);
            }
            if lr.quantize {
                let label = self.params[t.base].label.clone();
                self.mem.at(&label);
                let (codes, absmax, table) = lowrank::packed_bytes(t.out, t.inp);
                let q = self
                    .mem
                    .alloc(lowrank::quantize_transient(t.out, t.inp), Kind::Transients);
                for b in [absmax, table, codes] {
                    self.mem.alloc(b, Kind::Parameters);
                }
                let high = self.rec.high(&label, &self.mem);
                self.mem.release(q);
                if let Some(&w) = param_bufs.get(t.base) {
                    self.mem.release(w);
                }
                self.rec.event(&label, high, &self.mem);
            }
        }
    }

    /// Runs nodes `range` over `local`, releasing each value after its last use inside the
    /// range unless it is the output of a node in `keep` (`run_range`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_range(
        &mut self,
        range: Range<usize>,
        local: &mut [Option<Value>],
        keep: &[usize],
        saved: &mut SavedSets,
        grad_mode: bool,
        rules: &[OpRule],
        scratch: &mut Scratch,
    ) {
        let values = self.values;
        let mut last: Vec<(usize, usize)> = Vec::new();
        for k in range.clone() {
            for &v in values.args(k) {
                match last.iter_mut().find(|(w, _)| *w == v as usize) {
                    Some(e) => e.1 = k,
                    None => last.push((v as usize, k)),
                }
            }
        }
        let mut cache: Vec<Option<BufId>> = Vec::new();
        for k in range {
            let rule = &rules[self.rule_of[k] as usize];
            let high = self.forward_node(k, rule, local, saved, &mut cache, scratch, grad_mode);
            for &v in values.args(k) {
                let v = v as usize;
                let kept = values.as_node(v).is_some_and(|j| keep.contains(&j));
                if !kept && last.iter().any(|&(w, at)| w == v && at == k) {
                    if let Some(x) = local[v].take() {
                        self.mem.release(x.buf);
                    }
                }
            }
            self.rec.event(&self.graph.nodes[k].id, high, &self.mem);
        }
    }

    /// Releases every value left in `env` that is a node's (graph inputs are the caller's).
    fn drop_env(&mut self, env: &mut [Option<Value>]) {
        for (v, x) in env.iter_mut().enumerate() {
            if self.values.as_node(v).is_some() {
                if let Some(x) = x.take() {
                    self.mem.release(x.buf);
                }
            }
        }
    }

    /// The staged forward (`Tape::forward`).
    pub(super) fn forward_staged(
        &mut self,
        step: u32,
        stages: &[StageInfo],
        inputs: &[Value],
        rules: &[OpRule],
        scratch: &mut Scratch,
    ) -> Tape {
        self.begin(step, format!("step{step}.forward"));
        let values = self.values;
        let n = self.graph.nodes.len();
        let mut env: Vec<Option<Value>> = inputs.iter().copied().map(Some).collect();
        env.resize(values.len(), None);
        let mut tape = Tape {
            records: Vec::with_capacity(stages.len()),
            loss: None,
            leaf_contig: vec![None; n],
        };
        for st in stages {
            let mut local: Vec<Option<Value>> = vec![None; values.len()];
            for &v in &st.external {
                if let Some(x) = env[v] {
                    self.mem.retain(x.buf);
                    local[v] = Some(x);
                }
            }
            let mut saved_inputs = Vec::new();
            if st.recompute {
                for &v in &st.external {
                    if let Some(x) = env[v] {
                        self.mem.retain(x.buf);
                        saved_inputs.push((v, x));
                    }
                }
            }
            let r = st.nodes.clone();
            let mut saved = SavedSets::new(r.start, r.len());
            let grad_mode = !st.recompute;
            self.run_range(
                r.clone(),
                &mut local,
                &st.live,
                &mut saved,
                grad_mode,
                rules,
                scratch,
            );
            let mut outputs = Vec::new();
            for &j in &st.live {
                let v = values.node_value(j);
                let Some(t) = local[v].take() else { continue };
                if Some(j) == self.loss {
                    tape.loss = Some(t.buf);
                    continue;
                }
                if st.recompute || t.requires_grad {
                    let leaf = Value {
                        requires_grad: true,
                        ..t
                    };
                    self.mem.retain(t.buf);
                    env[v] = Some(leaf);
                    tape.leaf_contig[j] = Some(t.contiguous);
                    outputs.push((j, leaf));
                } else {
                    env[v] = Some(t);
                }
            }
            for &v in &st.external {
                let last = self.last_use[v];
                if values.as_node(v).is_some() && last != usize::MAX && last < r.end {
                    if let Some(x) = env[v].take() {
                        self.mem.release(x.buf);
                    }
                }
            }
            // The stage's locals go: values nobody used, and the graph inputs copied in.
            for x in local.iter_mut() {
                if let Some(x) = x.take() {
                    self.mem.release(x.buf);
                }
            }
            tape.records.push(Record {
                inputs: saved_inputs,
                outputs,
                saved,
            });
        }
        self.drop_env(&mut env);
        self.rec.end(&self.mem);
        tape
    }

    /// The staged backward (`Tape::backward`).
    pub(super) fn backward_staged(
        &mut self,
        step: u32,
        stages: &[StageInfo],
        mut tape: Tape,
        grads: &mut [Option<BufId>],
        rules: &[OpRule],
        scratch: &mut Scratch,
    ) {
        self.begin(step, format!("step{step}.backward"));
        let n = self.graph.nodes.len();
        let mut out_grad: Vec<Option<BufId>> = vec![None; n];
        let mut grad_contig = vec![true; n];
        let mut leaf_grad: Vec<Option<BufId>> = vec![None; n];
        // loss.backward(): the loss's stage, from the root gradient.
        if let Some(l) = self.loss {
            if let Some(s) = stages.iter().position(|s| s.nodes.contains(&l)) {
                // Held by the engine until the backward is done.
                let root = self.mem.alloc(4, Kind::ActivationGradients);
                self.mem.retain(root);
                out_grad[l] = Some(root);
                let r = stages[s].nodes.clone();
                let mut saved = std::mem::replace(&mut tape.records[s].saved, SavedSets::new(0, 0));
                self.backward_range(
                    r,
                    &mut saved,
                    grads,
                    rules,
                    scratch,
                    &mut out_grad,
                    &mut grad_contig,
                );
                tape.records[s].saved = saved;
                self.accumulate_leaves(
                    &stages[s],
                    &mut out_grad,
                    &grad_contig,
                    &mut leaf_grad,
                    &tape,
                );
                self.mem.release(root);
            }
        }
        if let Some(l) = tape.loss.take() {
            self.mem.release(l);
        }
        while let Some(rec) = tape.records.pop() {
            let st = &stages[tape.records.len()];
            self.stage_backward(
                st,
                rec,
                grads,
                rules,
                scratch,
                (&mut out_grad, &mut grad_contig),
                &mut leaf_grad,
                &tape,
            );
        }
        self.rec.end(&self.mem);
    }

    /// One stage's turn in the staged backward: its recompute (with autograd), the surrogate
    /// and its backward; then what the stage held goes.
    #[allow(clippy::too_many_arguments)]
    fn stage_backward(
        &mut self,
        st: &StageInfo,
        mut rec: Record,
        grads: &mut [Option<BufId>],
        rules: &[OpRule],
        scratch: &mut Scratch,
        (out_grad, grad_contig): (&mut [Option<BufId>], &mut [bool]),
        leaf_grad: &mut [Option<BufId>],
        tape: &Tape,
    ) {
        let values = self.values;
        let with_grad: Vec<usize> = rec
            .outputs
            .iter()
            .map(|(j, _)| *j)
            .filter(|&j| leaf_grad[j].is_some())
            .collect();
        let mut local: Vec<Option<Value>> = Vec::new();
        if !with_grad.is_empty() {
            let r = st.nodes.clone();
            let mut pairs: Vec<(usize, Value)> = Vec::new();
            if st.recompute {
                local = vec![None; values.len()];
                for &(v, x) in &rec.inputs {
                    self.mem.retain(x.buf);
                    local[v] = Some(x);
                }
                rec.saved = SavedSets::new(r.start, r.len());
                self.run_range(
                    r.clone(),
                    &mut local,
                    &with_grad,
                    &mut rec.saved,
                    true,
                    rules,
                    scratch,
                );
                for &j in &with_grad {
                    if let Some(t) = local[values.node_value(j)] {
                        pairs.push((j, t));
                    }
                }
            } else {
                pairs = rec
                    .outputs
                    .iter()
                    .filter(|(j, _)| with_grad.contains(j))
                    .copied()
                    .collect();
            }
            pairs.retain(|(j, t)| t.requires_grad && self.requires_grad[*j]);
            if !pairs.is_empty() {
                let scalar = self.surrogate(&pairs, out_grad, grad_contig);
                let root = self.mem.alloc(4, Kind::ActivationGradients);
                let mut saved = std::mem::replace(&mut rec.saved, SavedSets::new(0, 0));
                self.backward_range(r, &mut saved, grads, rules, scratch, out_grad, grad_contig);
                rec.saved = saved;
                self.accumulate_leaves(st, out_grad, grad_contig, leaf_grad, tape);
                self.mem.release(root);
                if let Some(s) = scalar {
                    self.mem.release(s);
                }
            }
        }
        // The stage is done: what it recomputed, saved and held goes.
        for k in st.nodes.clone() {
            rec.saved.release(k, &mut self.mem);
        }
        for x in local.iter_mut() {
            if let Some(x) = x.take() {
                self.mem.release(x.buf);
            }
        }
        for (_, x) in rec.inputs {
            self.mem.release(x.buf);
        }
        for (j, x) in rec.outputs {
            self.mem.release(x.buf);
            if let Some(g) = leaf_grad[j].take() {
                self.mem.release(g);
            }
        }
        let label = &self.graph.nodes[st.nodes.start].id;
        self.rec.event(label, self.mem.total(), &self.mem);
    }

    /// The surrogate `Σ sum(t * g)`: each product a temporary of the output's size, a 4-byte
    /// sum each, added into one scalar (returned, freed by the caller after its backward); its
    /// backward's `MulBackward` makes each output's incoming gradient, a new
    /// buffer of its size in the leaf's layout.
    fn surrogate(
        &mut self,
        pairs: &[(usize, Value)],
        out_grad: &mut [Option<BufId>],
        grad_contig: &mut [bool],
    ) -> Option<BufId> {
        let mut acc: Option<BufId> = None;
        for &(j, _) in pairs {
            let id = &self.graph.nodes[j].id;
            let bytes = self.value_bytes[self.values.node_value(j)];
            let product = self.mem.alloc(bytes, Kind::Transients);
            let sum = self.mem.alloc(4, Kind::Transients);
            let high = self.rec.high(id, &self.mem);
            self.mem.release(product);
            acc = Some(match acc {
                None => sum,
                Some(a) => {
                    let s = self.mem.alloc(4, Kind::Transients);
                    self.mem.release(a);
                    self.mem.release(sum);
                    s
                }
            });
            self.rec.event(id, high, &self.mem);
        }
        for &(j, t) in pairs.iter().rev() {
            let bytes = self.value_bytes[self.values.node_value(j)];
            let g = self.mem.alloc(bytes, Kind::ActivationGradients);
            out_grad[j] = Some(g);
            grad_contig[j] = t.contiguous;
        }
        acc
    }

    /// `AccumulateGrad` for the stage's external leaves: the first gradient stolen when its
    /// buffer has no other holder and the leaf's layout, else copied; a later one added in
    /// place.
    fn accumulate_leaves(
        &mut self,
        st: &StageInfo,
        out_grad: &mut [Option<BufId>],
        grad_contig: &[bool],
        leaf_grad: &mut [Option<BufId>],
        tape: &Tape,
    ) {
        for &v in &st.external {
            let Some(j) = self.values.as_node(v) else {
                continue;
            };
            let Some(g) = out_grad[j].take() else {
                continue;
            };
            match (leaf_grad[j], tape.leaf_contig[j]) {
                (Some(_), _) => self.mem.release(g),
                (None, layout) => {
                    let steal =
                        self.mem.bufs[g].refs == 1 && layout.is_none_or(|c| c == grad_contig[j]);
                    if steal {
                        leaf_grad[j] = Some(g);
                    } else {
                        let bytes = self.value_bytes[v];
                        let c = self.mem.alloc(bytes, Kind::ActivationGradients);
                        self.rec.high(&self.graph.nodes[j].id, &self.mem);
                        self.mem.release(g);
                        leaf_grad[j] = Some(c);
                    }
                }
            }
        }
    }
}
