//! Tensor parallelism for one rank (`tp:k=K`), read from torch 2.11's
//! `torch.distributed.tensor.parallel` (`ColwiseParallel`, `RowwiseParallel`,
//! `parallelize_module`) and DTensor's redistribution (`_redistribute.py`, `placement_types.py`,
//! `_functional_collectives.py`), run the way `exporter/memcal_export/ranks.py` runs it:
//!
//! - **Which modules are split** ([`roles`]): every attention layer splits its heads (q, k and v
//!   colwise, the output projection rowwise: each rank holds `heads / K` heads, and `kv_heads /
//!   K`); every pair of linears joined by elementwise ops alone (an MLP: gate and up to down,
//!   fc1 through its activation to fc2) goes colwise then rowwise. Everything else (embeddings,
//!   norms, the LM head, an MoE's experts, the pooler) is replicated. This is the plan
//!   `ranks.py`'s `TP_PLANS` gives Llama, Mistral, Mixtral (attention only: its experts are one
//!   fused parameter, not linears) and BERT, and Megatron's.
//! - **The rank's own graph** ([`local_graph`]): the same nodes with the rank's widths (an
//!   attention's heads / K with the head width kept; a colwise linear's outputs / K, a rowwise
//!   one's inputs / K, its bias whole), so every activation between a colwise and a rowwise
//!   layer, its saved tensors and gradients, and every split parameter with its gradient and
//!   AdamW states are the rank's share; the plain rules simulate it.
//! - **Load**: the whole model is built first (`ranks.py` builds it, then
//!   `parallelize_module`); each split parameter's shard (`distribute_tensor`: `_shard_tensor`,
//!   `mesh_scatter`) is made before its whole tensor is freed, in module order. Not drawn: the
//!   scatter's own copies on the source rank (rank 0 holds about K more shards for a moment at
//!   its first split parameter in the rows); the load is not a row's peak.
//! - **Forward**: a rowwise layer's output is a partial sum; `Partial -> Replicate` is the
//!   functional all-reduce, which clones its input (`all_reduce`: `input.clone()`, then
//!   `all_reduce_` in place): one output-sized buffer more until the partial is freed.
//! - **Backward**: a colwise layer's input gradient is partial; `from_local`'s backward
//!   redistributes it to the input's `Replicate` (the same clone and all-reduce): one
//!   input-sized buffer more. An attention's q, k and v are three colwise layers on one input,
//!   reduced one after another (autograd runs v's, k's, then q's): the accumulated input
//!   gradient, the partial and its clone, two input sizes over the gradient left.
//! - **Optimizer**: torch's AdamW (`_init_group` makes every state before any update), then
//!   the plain update's temporaries per (local) parameter.
//!
//! Collectives: gloo's `all_reduce` works in place (nothing in torch's allocator), as NCCL's; the
//! clone is DTensor's own, on either backend.

use super::{BufId, Kind, Sim};
use crate::graph::Graph;
use crate::strategy::{Kind as SKind, Part};

/// Tensor parallelism over `k` ranks, for `rank`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tp {
    pub k: u64,
    pub rank: u64,
}

impl Tp {
    /// The rule set's settings for `part` (rank 0), None for another part.
    pub fn of_part(part: &Part) -> Option<Tp> {
        (part.kind == SKind::Tp).then(|| Tp {
            k: part.get("k"),
            rank: 0,
        })
    }
}

use crate::ops::family::TpForm;
pub use crate::ops::family::TpRole as Role;

/// Each node's role (None: replicated). An error names an attention layer with no split form.
pub fn roles(graph: &Graph) -> Result<Vec<Option<Role>>, String> {
    let n = graph.nodes.len();
    let n_inputs = graph.inputs.len();
    let mut roles: Vec<Option<Role>> = vec![None; n];
    // Each node's readers.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for k in 0..n {
        for &v in graph.input_positions(k).unwrap_or(&[]) {
            if let Some(j) = (v as usize).checked_sub(n_inputs) {
                readers[j].push(k);
            }
        }
    }
    for (k, node) in graph.nodes.iter().enumerate() {
        match node.op.family().tp_form(&node.op) {
            TpForm::Heads => roles[k] = Some(Role::Heads),
            TpForm::Unsplittable(why) => return Err(format!("node `{}`: {why}", node.id)),
            _ => {}
        }
    }
    let is_linear = |k: usize| {
        let op = &graph.nodes[k].op;
        op.family().tp_form(op) == TpForm::Linear
    };
    let elementwise = |k: usize| graph.nodes[k].op.is_elementwise();
    for r in 0..n {
        if !is_linear(r) || roles[r].is_some() {
            continue;
        }
        // Back from the linear's input through elementwise nodes to the linears that start
        // the chain; none of it may be read outside the chain.
        let mut inside = Vec::new();
        let mut starts = Vec::new();
        let mut stack: Vec<u32> = graph.input_positions(r).unwrap_or(&[]).to_vec();
        let mut ok = true;
        while let Some(v) = stack.pop() {
            let Some(j) = (v as usize).checked_sub(n_inputs) else {
                ok = false;
                break;
            };
            if inside.contains(&j) || starts.contains(&j) {
                continue;
            }
            if roles[j].is_some() {
                ok = false;
                break;
            }
            if is_linear(j) {
                starts.push(j);
            } else if elementwise(j) {
                inside.push(j);
                stack.extend_from_slice(graph.input_positions(j).unwrap_or(&[]));
            } else {
                ok = false;
                break;
            }
        }
        let chain = |j: &usize| inside.contains(j) || starts.contains(j) || *j == r;
        ok = ok
            && !starts.is_empty()
            && inside
                .iter()
                .chain(&starts)
                .all(|&j| readers[j].iter().all(chain));
        if ok {
            roles[r] = Some(Role::Rowwise);
            for &j in &starts {
                roles[j] = Some(Role::Colwise);
            }
            for &j in &inside {
                roles[j] = Some(Role::Inside);
            }
        }
    }
    Ok(roles)
}

/// What a tensor-parallel simulation of `graph` splits, in words for a plan (None without
/// `tp`, or for a graph whose attention has no split form: the simulation says why).
pub fn split_note(graph: &Graph, strategy: &crate::strategy::Strategy) -> Option<String> {
    let tp = strategy.parts.iter().find_map(Tp::of_part)?;
    let roles = roles(graph).ok()?;
    let count = |r: Role| roles.iter().filter(|x| **x == Some(r)).count();
    Some(format!(
        "tp:k={} splits {} attention layers' heads (q, k, v colwise, out rowwise) and {} MLPs (linears joined by elementwise ops: colwise, then rowwise) across the ranks; every other parameter (embeddings, norms, the output head, an MoE's experts) is whole on every rank; the model is built whole on each rank before it is split (as memcal_export.ranks builds it)",
        tp.k,
        count(Role::Heads),
        count(Role::Rowwise)
    ))
}

/// The rank's own graph under `k`-way tensor parallelism, with each node's role: an error
/// names the node and the width `k` does not divide.
pub fn local_graph(graph: &Graph, k: u64) -> Result<(Graph, Vec<Option<Role>>), String> {
    if k == 0 {
        return Err("tp: k must be at least 1".into());
    }
    let roles = roles(graph)?;
    let mut ops = Vec::with_capacity(graph.nodes.len());
    for (node, role) in graph.nodes.iter().zip(&roles) {
        ops.push(match role {
            Some(r) => node
                .op
                .family()
                .tp_local(&node.op, *r, k)
                .map_err(|m| format!("node `{}`: {m}", node.id))?,
            None => node.op.clone(),
        });
    }
    let local = graph.with_ops(ops)?;
    Ok((local, roles))
}

/// What the rule set keeps: each node's role, and each parameter's whole bytes (as the model
/// is built before it is split). The ranks' layouts are the same (the rank only chooses the
/// scatter's source, whose copies are not drawn).
pub(super) struct State {
    pub roles: Vec<Option<Role>>,
    pub whole: Vec<u64>,
}

impl Sim<'_> {
    /// The bytes a parameter is built with: the whole tensor under tensor parallelism.
    pub(super) fn tp_built_bytes(&self, p: usize) -> u64 {
        self.tp
            .as_ref()
            .and_then(|t| t.whole.get(p).copied())
            .unwrap_or(self.params[p].bytes)
    }

    /// `parallelize_module`: each split parameter's shard made, then its whole tensor freed.
    pub(super) fn tp_load(&mut self, param_bufs: &[BufId]) {
        let Some(st) = self.tp.as_ref() else { return };
        let split: Vec<usize> = (0..self.params.len())
            .filter(|&p| st.whole.get(p).is_some_and(|&w| w != self.params[p].bytes))
            .collect();
        for p in split {
            self.mem.at(&self.params[p].label);
            self.mem.alloc(self.params[p].bytes, Kind::Parameters);
            let high = self.rec.high("tp shard", &self.mem);
            if let Some(&b) = param_bufs.get(p) {
                self.mem.release(b);
            }
            self.rec.event("tp shard", high, &self.mem);
        }
    }

    /// After node `k`'s forward: a rowwise layer's all-reduce clones its partial output.
    /// Returns the level reached (0 for another node).
    pub(super) fn tp_post_forward(&mut self, k: usize) -> u64 {
        let Some(st) = self.tp.as_ref() else { return 0 };
        match st.roles[k] {
            Some(Role::Rowwise | Role::Heads) => {
                let y = self.value_bytes[self.values.node_value(k)];
                self.rec.high_plus(&self.graph.nodes[k].id, &self.mem, y)
            }
            _ => 0,
        }
    }

    /// After node `k`'s backward (its input's gradient made): a colwise layer's partial input
    /// gradient and the all-reduce's clone of it; an attention's three (the accumulated
    /// gradient beside the last partial and its clone). Returns the level reached.
    pub(super) fn tp_post_backward(&mut self, k: usize) -> u64 {
        let Some(st) = self.tp.as_ref() else { return 0 };
        let x = || {
            let v = self.values.args(k)[0] as usize;
            self.value_bytes[v]
        };
        let extra = match st.roles[k] {
            Some(Role::Colwise) => x(),
            Some(Role::Heads) => 2 * x(),
            _ => return 0,
        };
        self.rec
            .high_plus(&self.graph.nodes[k].id, &self.mem, extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(text: &str) -> Graph {
        Graph::from_bytes(text.as_bytes(), std::path::Path::new("t.json")).unwrap()
    }

    const MLP: &str = r#"{"format":"memcal-graph/1","name":"t","family":"t","variant":"t",
      "inputs":[{"name":"x","shape":["B",8,16],"dtype":"float32"},{"name":"y","shape":["B",8,4],"dtype":"float32"}],
      "nodes":[
        {"id":"attn","op":"gqa_attention","inputs":["x"],"attributes":{"embed_dim":16,"num_heads":4,"num_kv_heads":2}},
        {"id":"gate","op":"linear","inputs":["attn"],"attributes":{"in_features":16,"out_features":32}},
        {"id":"act","op":"silu","inputs":["gate"]},
        {"id":"up","op":"linear","inputs":["attn"],"attributes":{"in_features":16,"out_features":32}},
        {"id":"mul","op":"mul","inputs":["act","up"]},
        {"id":"down","op":"linear","inputs":["mul"],"attributes":{"in_features":32,"out_features":16}},
        {"id":"head","op":"linear","inputs":["down"],"attributes":{"in_features":16,"out_features":4}},
        {"id":"loss","op":"mse","inputs":["head","y"]}],
      "loss":"loss"}"#;

    #[test]
    fn an_mlp_splits_colwise_then_rowwise_and_attention_its_heads() {
        let g = graph(MLP);
        let r = roles(&g).unwrap();
        use Role::*;
        assert_eq!(
            r,
            vec![
                Some(Heads),
                Some(Colwise),
                Some(Inside),
                Some(Colwise),
                Some(Inside),
                Some(Rowwise),
                None,
                None
            ]
        );
        let (local, _) = local_graph(&g, 2).unwrap();
        // The MLP's inside is the rank's half; the rowwise output and the head whole.
        assert_eq!(local.nodes[4].output.to_string(), "[B, 8, 16]");
        assert_eq!(local.nodes[5].output.to_string(), "[B, 8, 16]");
        let whole = g.parameters();
        // attention: q 16x16 -> 8x16, k and v 8x16 -> 4x16, o 16x16 -> 16x8; the MLP halves;
        // the head stays.
        let split = (16 * 16 + 2 * 8 * 16 + 16 * 16) / 2 + (2 * (16 * 32 + 32) + 32 * 16) / 2;
        assert_eq!(local.parameters(), whole - split);
        let err = local_graph(&g, 4).unwrap_err();
        assert!(err.contains("num_kv_heads = 2"), "{err}");
    }
}
