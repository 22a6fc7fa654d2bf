//! The inference rule set: transformers' `model.generate` (greedy, `use_cache=True`), op by op,
//! as `python3 -m memcal_export.generate` measures it (`exporter/memcal_export/generate.py`).
//!
//! What is simulated, in the order transformers runs it:
//! - `model_load`: the parameters, fp32, as a checkpoint loads them (no initialisation
//!   temporaries: building with random weights is a measurement artifact, see
//!   `engine::Row::after_load_bytes`).
//! - `inputs`: `input_ids` and `attention_mask`, `[B, P]` int64 each.
//! - `prefill`: the forward over the prompt under `no_grad` (the training rules' forward with
//!   autograd off: nothing saved, every value freed at its last use, dropout the identity as in
//!   `eval()`), each causal self-attention layer adding its cache before its op runs
//!   (`DynamicCache`: K and V of the prompt, `torch.cat` onto an empty tensor, a copy;
//!   `StaticCache`: K and V for `P + N` tokens, allocated at the layer's first update), the LM
//!   head and what follows it (Gemma-2's soft-capping) at the last position only
//!   (`logits_to_keep=1`); then generate's float32 copy of the last logits (`B x vocab x 4`),
//!   freed once the token is chosen, and the sequence grown by one token (`B x (P + 1)` int64).
//! - `decode`: `N - 1` forwards of one token; at each causal self-attention layer the
//!   `DynamicCache` concatenates K, then V (the new tensor, one token longer, exists beside
//!   the old one until the old is dropped); a `StaticCache` writes in place. The previous
//!   step's logits live until the new forward returns (`outputs = model(...)`). When
//!   `generate` returns, the caches and logits go; the sequences `[B, P + N]` stay.
//!
//! Not simulated (printed as notes): encoder-decoders (their encoder runs once and their
//! decoder starts from one token: the graph binds one length to both), sliding-window layers
//! (counted at the whole context), a graph drawn at a fixed length other than the prompt.

use super::rules::{self, Backend, Output};
use super::{BufId, Kind, Mem, PhaseSummary, SavedSets, Scratch, Sim, Value};
use crate::graph::{Graph, GraphFile};
use crate::strategy::memory::{self, CacheLength};
use crate::strategy::CacheImpl;
use serde::Serialize;

/// One simulated `generate` call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generation {
    pub graph: String,
    pub batch: u64,
    pub prompt: u64,
    pub new: u64,
    pub cache: CacheImpl,
    pub weight_bytes: u64,
    /// The caches when the last token is chosen.
    pub kv_cache_bytes: u64,
    /// `model_load`, `inputs`, `prefill`, `decode`.
    pub phases: Vec<PhaseSummary>,
    /// The highest point after `model_load` (what the measured rows are compared on).
    pub peak_bytes: u64,
    pub peak_phase: String,
    /// Approximations made for this graph.
    pub notes: Vec<String>,
}

/// Simulates `model.generate` of `batch` prompts of `prompt` tokens producing `new` tokens with
/// `cache`. An error for what is not simulated (an encoder-decoder, a graph with no causal
/// self-attention, a graph drawn at a fixed length other than the prompt).
pub fn simulate_generate(
    graph: &Graph,
    batch: u64,
    prompt: u64,
    new: u64,
    cache: CacheImpl,
) -> Result<Generation, String> {
    if batch == 0 || prompt == 0 || new == 0 {
        return Err("batch, prompt and new tokens must each be at least 1".into());
    }
    if let Some(why) = memory::refusal(graph) {
        return Err(why);
    }
    let layers = memory::cache_layers(graph);
    if layers.iter().any(|l| l.length != CacheLength::Context) {
        return Err(format!(
            "graph `{}` is an encoder-decoder: its generate (the encoder once, the decoder from one token) is not simulated yet; the formula (`plan --inference`) plans it",
            graph.name
        ));
    }
    let file = eval_file(graph)?;
    let path = graph
        .path
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(&graph.name));
    let mut notes = Vec::new();
    let (prefill_graph, step_graph) = if graph.file_with_axis.is_some() {
        let bind = |seq| Graph::check_owned_at(file.clone(), &path, Some(seq));
        (
            bind(prompt).map_err(|e| e.to_string())?,
            Some(bind(1).map_err(|e| e.to_string())?),
        )
    } else {
        let g = Graph::check_owned_at(file, &path, None).map_err(|e| e.to_string())?;
        let drawn = g
            .inputs
            .iter()
            .find(|i| i.dtype == crate::graph::DType::Int64)
            .and_then(|i| i.shape.0.get(1)?.as_fixed());
        if drawn != Some(prompt) {
            return Err(format!(
                "graph `{}` is drawn at a fixed length ({}), not the prompt's {prompt} tokens; import it with --seq-axis",
                graph.name,
                drawn.map_or("none".into(), |d| d.to_string())
            ));
        }
        notes.push("the decode steps' activations at one token are not simulated (the graph is drawn at a fixed length): the caches' growth and the logits are".into());
        (g, None)
    };
    let backend = Backend::for_precision(crate::features::Precision::Fp32)?;
    let values = rules::Values::new(&prefill_graph, backend)?;
    let value_bytes: Vec<u64> = (0..values.len())
        .map(|v| values.shape(v).numel_at(batch) * values.elem(v))
        .collect();
    let mut sim = Sim::new(
        &prefill_graph,
        &values,
        &value_bytes,
        batch,
        backend,
        &super::staged::Plan::default(),
    )?;
    sim.rec.record = false;
    sim.last_use = python_scope_last_use(&prefill_graph, &values, &sim.last_use);
    let job = Job {
        batch,
        prompt,
        new,
        cache,
        layers: cache_nodes(&prefill_graph, &layers, batch),
        vocab: head_vocab(&prefill_graph),
    };
    let mut state = sim.load_and_prefill(&job);
    let weight_bytes = sim.mem.live.parameters;
    let mut phases = std::mem::take(&mut sim.rec.phases);
    let level = sim.mem.total();
    let (g1, ops) = match &step_graph {
        Some(g1) => (g1, true),
        None => (&prefill_graph, false),
    };
    let values1 = rules::Values::new(g1, backend)?;
    let bytes1: Vec<u64> = (0..values1.len())
        .map(|v| values1.shape(v).numel_at(batch) * values1.elem(v))
        .collect();
    let mut s1 = Sim::new(
        g1,
        &values1,
        &bytes1,
        batch,
        backend,
        &super::staged::Plan::default(),
    )?;
    s1.rec.record = false;
    s1.last_use = python_scope_last_use(g1, &values1, &s1.last_use);
    let decode = s1.decode(&job, &mut state, level, ops);
    phases.push(decode);
    let after_load = phases.iter().skip(1).max_by_key(|p| p.peak);
    let (peak_bytes, peak_phase) =
        after_load.map_or((0, String::new()), |p| (p.peak, p.name.clone()));
    Ok(Generation {
        graph: graph.name.clone(),
        batch,
        prompt,
        new,
        cache,
        weight_bytes,
        kv_cache_bytes: state.cache_bytes,
        phases,
        peak_bytes,
        peak_phase,
        notes,
    })
}

/// The graph file as `eval()` runs it: every dropout (an op, or an attention's probabilities)
/// at p = 0.
fn eval_file(graph: &Graph) -> Result<GraphFile, String> {
    let file = match &graph.file_with_axis {
        Some(f) => GraphFile::clone(f),
        None => {
            let path = graph
                .path
                .as_ref()
                .ok_or_else(|| format!("graph `{}` was not loaded from a file", graph.name))?;
            let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?
        }
    };
    let mut v = serde_json::to_value(&file).map_err(|e| e.to_string())?;
    if let Some(nodes) = v.get_mut("nodes").and_then(|n| n.as_array_mut()) {
        for n in nodes {
            let dropout = n.get("op").and_then(|o| o.as_str()) == Some("dropout");
            if let Some(attrs) = n.get_mut("attributes").and_then(|a| a.as_object_mut()) {
                for key in ["p", "dropout"] {
                    if (key == "dropout" || dropout) && attrs.contains_key(key) {
                        attrs.insert(key.into(), serde_json::json!(0.0));
                    }
                }
            }
        }
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// What the rule set needs of the job.
struct Job {
    batch: u64,
    prompt: u64,
    new: u64,
    cache: CacheImpl,
    /// Per causal self-attention node (by id): tensors cached, and bytes of one token of one
    /// tensor for the whole batch (fp32).
    layers: Vec<(String, u64, u64)>,
    /// The LM head's chain (the node producing the logits and every node after it up to the
    /// loss), and the vocabulary.
    vocab: Option<(Vec<String>, u64)>,
}

fn cache_nodes(
    graph: &Graph,
    layers: &[memory::CacheLayer],
    batch: u64,
) -> Vec<(String, u64, u64)> {
    let _ = graph;
    layers
        .iter()
        .map(|l| {
            (
                l.node.clone(),
                l.tensors,
                l.kv_heads * l.head_dim * 4 * batch,
            )
        })
        .collect()
}

/// The logits' chain: the loss's input, back through nodes of the same last axis (the
/// vocabulary) to the one that makes it (the LM head), with the vocabulary.
fn head_vocab(graph: &Graph) -> Option<(Vec<String>, u64)> {
    let l = graph.loss_index()?;
    let vocab = graph.input_shape(l, 0)?.0.last()?.as_fixed()?;
    let mut chain = Vec::new();
    let mut name = graph.nodes[l].inputs.first()?.clone();
    loop {
        let k = graph.nodes.iter().position(|n| n.id == name)?;
        chain.push(name.clone());
        let wide =
            |s: Option<&crate::shape::Shape>| s.and_then(|s| s.0.last()?.as_fixed()) == Some(vocab);
        match graph.nodes[k].inputs.first() {
            Some(i) if wide(graph.input_shape(k, 0)) => name = i.clone(),
            _ => break,
        }
    }
    Some((chain, vocab))
}

/// How long Python keeps each value under no_grad, read from transformers' forward code: an
/// argument of a module call lives until the call returns (the caller's variable and the
/// callee's parameter hold it), so a value made outside a module and read inside it lives until
/// the module's last node (`layers0.post_attention_norm` through `layers0.mlp.down_proj`; a
/// block's input through the whole block); the token embeddings (`inputs_embeds`, a local of
/// the model's forward never rebound) and the last hidden state (held by the model's output
/// while the head runs) live until the forward returns. Node ids name modules by their dotted
/// prefixes.
fn python_scope_last_use(graph: &Graph, values: &rules::Values, last_use: &[usize]) -> Vec<usize> {
    let n = graph.nodes.len();
    let path = |k: usize| -> Vec<&str> {
        let id = graph.nodes[k].id.as_str();
        let mut parts: Vec<&str> = id.split('.').collect();
        parts.pop();
        parts
    };
    // The last node of every module prefix.
    let mut end_of: std::collections::HashMap<String, usize> = Default::default();
    for k in 0..n {
        let parts = path(k);
        for i in 1..=parts.len() {
            end_of.insert(parts[..i].join("."), k);
        }
        // A node named like a module (`h0.mlp.gelu` after `h0.mlp.gelu.tanh`) is its last op.
        end_of.insert(graph.nodes[k].id.clone(), k);
    }
    let mut out = last_use.to_vec();
    for c in 0..n {
        let cm = path(c);
        for &v in values.args(c) {
            let v = v as usize;
            let Some(p) = values.as_node(v) else {
                continue;
            };
            let pm = path(p);
            let diverge = (0..cm.len()).find(|&i| pm.get(i) != Some(&cm[i]));
            if let Some(i) = diverge {
                if let Some(&end) = end_of.get(&cm[..=i].join(".")) {
                    out[v] = out[v].max(end);
                }
            }
        }
    }
    // `inputs_embeds = self.embed_tokens(input_ids)`: a local of the model's forward, never
    // rebound (each layer rebinds `hidden_states` instead); and the last hidden state, which the
    // model's output holds while the head runs.
    let head_input = head_vocab(graph).and_then(|(chain, _)| {
        let k = graph
            .nodes
            .iter()
            .position(|n| Some(&n.id) == chain.last())?;
        values.args(k).first().map(|&v| v as usize)
    });
    for k in 0..n {
        let node = &graph.nodes[k];
        let embeds = !node.id.contains('.')
            && matches!(node.op, crate::ops::Op::Embedding { .. })
            && values
                .args(k)
                .iter()
                .all(|&v| values.as_node(v as usize).is_none());
        let v = values.node_value(k);
        if (embeds || Some(v) == head_input) && out[v] != usize::MAX {
            out[v] = n;
        }
    }
    out
}

/// Rotary position embeddings: transformers' decoders compute `cos` and `sin`,
/// `[B, T, rotary dims]` float32 each, once before the first layer
/// (`position_embeddings = self.rotary_emb(...)` in `LlamaModel.forward` and its copies) and
/// hold them until the forward returns. The rotary dims: a GQA attention's head_dim, MLA's
/// qk_rope_head_dim.
fn rotary_bytes(graph: &Graph, batch: u64, tokens: u64) -> u64 {
    let dims = graph.nodes.iter().find_map(|n| match n.op {
        crate::ops::Op::GqaAttention { head_dim, .. } => Some(head_dim),
        crate::ops::Op::MlaAttention {
            qk_rope_head_dim, ..
        } => Some(qk_rope_head_dim),
        _ => None,
    });
    dims.map_or(0, |d| 2 * batch * tokens * d * 4)
}

/// transformers' rotary attention under no_grad (`LlamaAttention.forward` and its copies in
/// Mistral, Mixtral, Qwen2/3, Gemma, OLMo, Phi-3): q, k and v projected; `apply_rotary_pos_emb`
/// computes `(q * cos) + (rotate_half(q) * sin)`, whose highest point holds q, k, v and three
/// q-sized temporaries (`q * cos`, `rotate_half(q)`, its product with `sin`; `rotate_half`'s
/// `-x2` is half of one and gone by then), then the same for k; the cache's update copies k and
/// v (the caches, already in the level: allocated before the op by the rule set); sdpa's
/// output (q-sized) and its float32 logsumexp beside q; then `o_proj`. Returns the highest of
/// these stages over the level before the op (which holds the caches), where the op is such an
/// attention. `cached`: the op's caches are in that level.
fn rope_attention_peak(op: &crate::ops::Op, batch: u64, tokens: u64, cached: bool) -> Option<u64> {
    let crate::ops::Op::GqaAttention {
        embed_dim,
        num_heads,
        num_kv_heads,
        head_dim,
        qk_norm,
        ..
    } = *op
    else {
        return None;
    };
    let rows = batch * tokens;
    let q = rows * num_heads * head_dim * 4;
    let k = rows * num_kv_heads * head_dim * 4;
    let caches = if cached { 2 * k } else { 0 };
    // q_norm's own temporaries (the projection, x^2 and x*rstd) come before the rotation.
    let norm = if qk_norm { 3 * q } else { 0 };
    let rope_q = (4 * q + 2 * k).max(norm + 2 * k);
    let rope_k = 2 * q + 4 * k + k;
    let update = q + 2 * k + caches;
    let lse = batch * num_heads * tokens * 4;
    let sdpa = q + q + lse + caches;
    let y = rows * embed_dim * 4;
    let out = q + y + caches;
    Some(
        rope_q
            .max(rope_k)
            .max(update)
            .saturating_sub(caches)
            .max(sdpa.saturating_sub(caches))
            .max(out.saturating_sub(caches)),
    )
}

/// transformers 5's sparse MoE block under no_grad (`MixtralSparseMoeBlock.forward`, the
/// router `MixtralTopKRouter.forward` and `grouped_mm_experts_forward` in
/// `integrations/moe.py`), over N tokens, S = N x top_k routed rows: the router's logits
/// (`_`, kept to the block's return), top-k weights and indices; then, each row's live set
/// beside the sorted ids, the permutation, the routed weights and histc's float input (24
/// bytes a row): the gathered input `[S, D]` with the gate-up output `[S, 2I]`, `act(gate)` and
/// its product with `up`; the down projection `[S, D]` beside the product; `proj_out * w` and
/// its reordering (`weighted_out[inv_perm]`) beside the gathered input and the down output;
/// the per-token sum `[N, D]`. Returns the highest over the level before the op.
fn grouped_moe_peak(op: &crate::ops::Op, batch: u64, tokens: u64) -> Option<u64> {
    let crate::ops::Op::Moe {
        dim: d,
        hidden: i,
        num_experts: e,
        top_k: k,
        grouped: true,
        ..
    } = *op
    else {
        return None;
    };
    let n = batch * tokens;
    let s = n * k;
    let router = n * e * 4 + n * k * (4 + 8);
    let rows = s * 24;
    let gate = s * (d + 4 * i) * 4;
    let down = s * (2 * d + i) * 4;
    let reorder = s * 4 * d * 4 + s * 16;
    let sum = s * 3 * d * 4 + n * d * 4;
    Some(router + rows + gate.max(down).max(reorder).max(sum))
}

/// What passes from the prefill to the decode steps.
struct State {
    /// Per cache layer: the bytes of each tensor now.
    tokens: u64,
    cache_bytes: u64,
    /// Last step's logits, the grown sequence (bytes).
    logits: u64,
    ids: u64,
}

impl Sim<'_> {
    /// `model_load`, `inputs` and `prefill`.
    fn load_and_prefill(&mut self, job: &Job) -> State {
        self.begin(0, "model_load".into());
        for i in 0..self.params.len() {
            let bytes = self.params[i].bytes;
            self.mem.alloc(bytes, Kind::Parameters);
        }
        self.rec.high("-", &self.mem);
        self.rec.end(&self.mem);

        self.begin(0, "inputs".into());
        let ids = self.mem.alloc(job.batch * job.prompt * 8, Kind::Inputs);
        self.mem.alloc(job.batch * job.prompt * 8, Kind::Inputs);
        self.rec.high("-", &self.mem);
        self.rec.end(&self.mem);

        self.begin(1, "prefill".into());
        let tokens = match job.cache {
            CacheImpl::Dynamic => job.prompt,
            CacheImpl::Static => job.prompt + job.new,
        };
        // The logits stay alive (generate's `outputs`) into the first decode step.
        let _logits = self.forward_no_grad(job, ids, |mem, _, per_token, tensors| {
            for _ in 0..tensors {
                mem.alloc(per_token * tokens, Kind::SavedActivations);
            }
            Vec::new()
        });
        let logits_bytes = self.pick_token(job, job.prompt + 1, None);
        self.rec.end(&self.mem);
        State {
            tokens: job.prompt,
            cache_bytes: job.layers.iter().map(|(_, t, b)| t * b * tokens).sum(),
            logits: logits_bytes,
            ids: job.batch * (job.prompt + 1) * 8,
        }
    }

    /// generate's choice of the next token: the float32 copy of the last logits, freed once the
    /// token is chosen; the sequence grown to `len` tokens (replacing `old`, the previous
    /// growth). Returns the logits' bytes.
    fn pick_token(&mut self, job: &Job, len: u64, old: Option<BufId>) -> u64 {
        let vocab = job.vocab.as_ref().map_or(0, |v| v.1);
        let copy = self.mem.alloc(job.batch * vocab * 4, Kind::Transients);
        let grown = self.mem.alloc(job.batch * len * 8, Kind::Inputs);
        if let Some(o) = old {
            self.mem.release(o);
        }
        self.rec.high("generate.next_token", &self.mem);
        self.mem.release(copy);
        let _ = grown;
        job.batch * vocab * 4
    }

    /// One forward under no_grad over the whole graph but its loss, the logits' chain at the
    /// last position only (at one token the chain is that already). `at_cache` runs before
    /// each causal self-attention node. Returns the logits' buffer.
    fn forward_no_grad(
        &mut self,
        job: &Job,
        ids: BufId,
        mut at_cache: impl FnMut(&mut Mem, &mut super::Recorder, u64, u64) -> Vec<BufId>,
    ) -> Option<BufId> {
        let graph = self.graph;
        let values = self.values;
        let n = graph.nodes.len();
        let mut env: Vec<Option<Value>> = vec![None; values.len()];
        for (i, input) in graph.inputs.iter().enumerate() {
            // The token input reads generate's sequence; labels are not an input of generate.
            if input.dtype == crate::graph::DType::Int64 && input.name != "labels" {
                self.mem.retain(ids);
                env[i] = Some(Value {
                    buf: ids,
                    contiguous: true,
                    perm: rules::Perm::identity(input.shape.rank()),
                    split: None,
                    requires_grad: false,
                });
            }
        }
        let tokens = graph
            .inputs
            .iter()
            .find(|i| i.dtype == crate::graph::DType::Int64)
            .and_then(|i| i.shape.0.get(1)?.as_fixed())
            .unwrap_or(1);
        let rules_all = std::mem::take(&mut self.rules);
        let mut saved = SavedSets::new(0, n);
        let mut autocast: Vec<Option<BufId>> = vec![None; self.params.len()];
        let mut scratch = Scratch::default();
        let head = job.vocab.as_ref().map(|v| &v.0);
        let mut logits = None;
        let rotary = rotary_bytes(graph, job.batch, tokens);
        let mut ends: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (v, &end) in self.last_use.iter().enumerate() {
            if end < n && values.as_node(v).is_some() {
                ends[end].push(v);
            }
        }
        let mut rotary_buf = None;
        for k in 0..n {
            if rotary_buf.is_none() && rotary > 0 && graph.nodes[k].id.contains('.') {
                rotary_buf = Some(self.mem.alloc(rotary, Kind::SavedActivations));
            }
            if Some(k) == self.loss {
                saved.starts.push(saved.bufs.len() as u32);
                continue;
            }
            let id = &graph.nodes[k].id;
            // The cache's update runs inside the attention: what it replaces (a DynamicCache's
            // shorter tensors) is dropped once the op is done.
            let mut replaced = Vec::new();
            if let Some((_, tensors, per_token)) = job.layers.iter().find(|(l, ..)| l == id) {
                self.mem.at(id);
                replaced = at_cache(&mut self.mem, &mut self.rec, *per_token, *tensors);
            }
            let mut rule = rules_all[self.rule_of[k] as usize].clone();
            if let Some(peak) = grouped_moe_peak(&graph.nodes[k].op, job.batch, tokens) {
                rule.saved.clear();
                rule.forward_transient = 0;
                rule.forward_transient_no_grad = Some(0);
                rule.forward_peak = Some(peak);
            }
            if let Some(peak) = rope_attention_peak(
                &graph.nodes[k].op,
                job.batch,
                tokens,
                job.layers.iter().any(|(l, ..)| l == id),
            ) {
                rule.saved.clear();
                rule.forward_transient = 0;
                rule.forward_transient_no_grad = Some(0);
                rule.forward_peak = Some(peak);
            }
            let in_head = head.is_some_and(|h| h.contains(id));
            if in_head && tokens > 1 {
                if let Output::New(b) = rule.output {
                    rule.output = Output::New(b / tokens);
                }
                rule.forward_transient /= tokens;
                rule.forward_transient_no_grad = rule.forward_transient_no_grad.map(|t| t / tokens);
                rule.forward_peak = rule.forward_peak.map(|t| t / tokens);
            }
            self.forward_node(
                k,
                &rule,
                &mut env,
                &mut saved,
                &mut autocast,
                &mut scratch,
                false,
            );
            for b in replaced {
                self.mem.release(b);
            }
            // Values whose (scope-extended) life ends here.
            for &v in &ends[k] {
                if let Some(x) = env[v].take() {
                    self.mem.release(x.buf);
                }
            }
        }
        if let Some(b) = rotary_buf {
            self.mem.release(b);
        }
        // The forward returns: what nobody holds goes; the logits stay in its output.
        let logits_node = head.and_then(|h| h.first());
        for k in 0..n {
            if let Some(x) = env[values.node_value(k)].take() {
                if Some(&graph.nodes[k].id) == logits_node {
                    logits = Some(x.buf);
                } else {
                    self.mem.release(x.buf);
                }
            }
        }
        for (i, _) in graph.inputs.iter().enumerate() {
            if let Some(x) = env[i].take() {
                self.mem.release(x.buf);
            }
        }
        self.rules = rules_all;
        self.rec.high("-", &self.mem);
        logits
    }

    /// The decode phase in a simulation of its own (the graph at one token where `ops`):
    /// `new - 1` forwards of one token (op by op where `ops`, else only the caches' growth and
    /// the logits), over the `level` bytes the prefill left.
    fn decode(&mut self, job: &Job, state: &mut State, level: u64, ops: bool) -> PhaseSummary {
        let dynamic = job.cache == CacheImpl::Dynamic;
        let held = |tokens: u64| {
            if dynamic {
                tokens
            } else {
                job.prompt + job.new
            }
        };
        // The prefill's level as this simulation's buffers: each cache tensor (they grow), the
        // last logits, the sequence, and the rest (weights, inputs) as one block.
        let mut caches: Vec<(u64, Vec<BufId>)> = Vec::new();
        let mut carried = 0u64;
        for (_, tensors, per_token) in &job.layers {
            let per = per_token * held(state.tokens);
            let bufs = (0..*tensors)
                .map(|_| self.mem.alloc(per, Kind::SavedActivations))
                .collect();
            carried += per * tensors;
            caches.push((*per_token, bufs));
        }
        let mut logits = Some(self.mem.alloc(state.logits, Kind::SavedActivations));
        let mut ids = self.mem.alloc(state.ids, Kind::Inputs);
        carried += state.logits + state.ids;
        self.mem
            .alloc(level.saturating_sub(carried), Kind::Parameters);
        self.begin(1, "decode".into());
        let mut tokens = state.tokens;
        for _ in 1..job.new {
            let len = tokens + 1;
            // torch.cat of the cache and the new token, K then V (`self.keys = torch.cat(...)`):
            // each new tensor exists beside the old one until the assignment drops it.
            let grow = |mem: &mut Mem,
                        rec: &mut super::Recorder,
                        caches: &mut [(u64, Vec<BufId>)],
                        i: usize| {
                let (per_token, bufs) = &mut caches[i];
                for b in bufs.iter_mut() {
                    let grown = mem.alloc(*per_token * len, Kind::SavedActivations);
                    rec.high("cache.cat", mem);
                    mem.release(std::mem::replace(b, grown));
                }
            };
            let fresh_logits = if ops {
                let mut layer = 0usize;
                let caches_ref = &mut caches;
                self.forward_no_grad(job, ids, |mem, rec, _, _| {
                    if dynamic {
                        grow(mem, rec, caches_ref, layer);
                    }
                    layer += 1;
                    Vec::new()
                })
            } else {
                if dynamic {
                    for i in 0..caches.len() {
                        grow(&mut self.mem, &mut self.rec, &mut caches, i);
                    }
                }
                let l = self.mem.alloc(state.logits, Kind::SavedActivations);
                self.rec.high("lm_head", &self.mem);
                Some(l)
            };
            // generate copies the new logits to float32 and grows the sequence while the
            // previous step's output still holds its logits; they go once the token is chosen
            // (measured: alive at the next forward's start, gone before the one after).
            let copy = self.mem.alloc(state.logits, Kind::Transients);
            let grown = self.mem.alloc(job.batch * (len + 1) * 8, Kind::Inputs);
            self.rec.high("generate.next_token", &self.mem);
            self.mem.release(copy);
            self.mem.release(ids);
            ids = grown;
            if let Some(old) = logits.take() {
                self.mem.release(old);
            }
            logits = fresh_logits;
            tokens = len;
        }
        state.tokens = tokens;
        state.cache_bytes = job
            .layers
            .iter()
            .map(|(_, t, b)| t * b * held(tokens))
            .sum();
        // generate returns: the caches and the logits go, the sequences stay.
        if let Some(l) = logits {
            self.mem.release(l);
        }
        for (_, bufs) in &caches {
            for &b in bufs {
                self.mem.release(b);
            }
        }
        self.rec.end(&self.mem);
        self.rec.phases.pop().expect("the decode phase")
    }
}
