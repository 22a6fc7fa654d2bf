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
//! Encoder-decoders (T5, BART): the decoder's inputs are bound at one token (its start
//! token); the encoder runs once in the prefill over the prompt and its output is kept to the
//! end; each cross-attention caches K and V of the encoder's tokens at the first step and
//! reuses them (`T5Attention.forward`: "after the first generated id, we can subsequently
//! re-use all key/value_states from cache").
//!
//! T5 (a stack whose attention computes a relative position bias): each attention as
//! transformers 5's default sdpa runs it under no_grad, the bias kept by its stack
//! ([`PositionBias`]).
//!
//! Sliding layers (attribute `sliding_window`): the caches as `DynamicSlidingWindowLayer` and
//! `StaticSlidingWindowLayer` keep them ([`CacheNode::held`]), and the mask sdpa then gets
//! ([`SlidingMask`]).
//!
//! Not simulated (an error with the reason): attention drawn op by op without sdpa (Gemma-2's
//! eager soft-capping), a graph drawn at a fixed length other than the prompt.

use super::rules::{self, Backend, Output};
use super::{BufId, Kind, Mem, PhaseSummary, SavedSets, Scratch, Sim, Value};
use crate::graph::{Graph, GraphFile};
use crate::ops::family::{Attends, BiasSource, BiasedAttention, GenerateAt};
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
    let encoder_decoder = layers.iter().any(|l| l.length != CacheLength::Context);
    if encoder_decoder && graph.file_with_axis.is_none() {
        return Err(format!(
            "graph `{}` is an encoder-decoder drawn at a fixed length: its generate (the encoder over the prompt, the decoder from one token) needs the sequence axis; import it with --seq-axis",
            graph.name
        ));
    }
    let mut file = eval_file(graph)?;
    if encoder_decoder {
        decoder_from_one_token(&mut file)?;
    }
    let path = graph
        .path
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(&graph.name));
    let mut notes = Vec::new();
    let (prefill_graph, step_graph) = if encoder_decoder {
        // The encoder over the prompt; the decoder at one token in the prefill and each step.
        let g = Graph::check_owned_at(file, &path, Some(prompt)).map_err(|e| e.to_string())?;
        (g.clone(), Some(g))
    } else if graph.file_with_axis.is_some() {
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
    // The caches as the bound graph has them (a cross-attention's length is the encoder's).
    let layers = memory::cache_layers(&prefill_graph);
    let encoder = encoder_decoder
        .then(|| encoder_part(&prefill_graph, &values, &layers))
        .flatten();
    sim.last_use = python_scope_last_use(&prefill_graph, &values, &sim.last_use, encoder.as_ref());
    let job = Job {
        batch,
        prompt,
        new,
        cache,
        layers: cache_nodes(&layers, batch),
        vocab: head_vocab(&prefill_graph),
        seq0: if encoder.is_some() { 1 } else { prompt },
        biased: biased_stacks(&prefill_graph, encoder.as_ref()),
        encoder,
    };
    if encoder_decoder && job.encoder.is_none() {
        return Err(format!(
            "graph `{}`: its encoder's output (the cross-attention's key) was not found",
            graph.name
        ));
    }
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
    s1.last_use = python_scope_last_use(g1, &values1, &s1.last_use, job.encoder.as_ref());
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
    /// The attention nodes with a cache.
    layers: Vec<CacheNode>,
    /// The LM head's chain (the node producing the logits and every node after it up to the
    /// loss), and the vocabulary.
    vocab: Option<(Vec<String>, u64)>,
    /// Tokens of the generated sequence after the prefill: the prompt, or for an
    /// encoder-decoder the decoder's start token.
    seq0: u64,
    encoder: Option<Encoder>,
    /// Per stack (0: an encoder-decoder's encoder, 1: the rest): an attention in it computes
    /// a relative position bias (T5: [`PositionBias`]).
    biased: [bool; 2],
}

/// One attention node's cache.
struct CacheNode {
    id: String,
    /// Tensors cached (K and V: 2).
    tensors: u64,
    /// Bytes of one token of one tensor for the whole batch (fp32).
    per_token: u64,
    /// A cross-attention's length (the encoder's), fixed; None: grows with the sequence.
    fixed: Option<u64>,
    /// A sliding layer's window (`DynamicSlidingWindowLayer`, `StaticSlidingWindowLayer`).
    window: Option<u64>,
}

impl CacheNode {
    /// Tokens the layer's cache holds, `tokens` in the sequence: a cross-attention its fixed
    /// length; a dynamic layer what it has grown to (a sliding one: the prefill's whole
    /// `torch.cat`, of which its keys are a view, until a decode step's `cat` of the last
    /// W - 1 and the new token replaces it; `stepped` once one has); a static layer its
    /// length (`max_cache_len`, a sliding one's at most W).
    fn held(&self, cache: CacheImpl, full: u64, tokens: u64, stepped: bool) -> u64 {
        if let Some(t) = self.fixed {
            return t;
        }
        match (cache, self.window) {
            (CacheImpl::Static, w) => w.map_or(full, |w| w.min(full)),
            (CacheImpl::Dynamic, Some(w)) if stepped => tokens.min(w),
            (CacheImpl::Dynamic, _) => tokens,
        }
    }
}

/// An encoder-decoder's encoder: its nodes (run once, in the prefill) and its output (kept by
/// generate's `model_kwargs["encoder_outputs"]` to the end).
struct Encoder {
    nodes: Vec<bool>,
    output: usize,
}

/// The decoder's token inputs (and the labels) at one token: generate starts the decoder from
/// its start token. The inputs named `decoder_*` or `labels` with the axis `"T"`.
fn decoder_from_one_token(file: &mut GraphFile) -> Result<(), String> {
    let mut v = serde_json::to_value(&*file).map_err(|e| e.to_string())?;
    let mut found = false;
    if let Some(inputs) = v.get_mut("inputs").and_then(|i| i.as_array_mut()) {
        for i in inputs {
            let name = i
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or_default()
                .to_string();
            if !(name.starts_with("decoder") || name == "labels") {
                continue;
            }
            if let Some(shape) = i.get_mut("shape").and_then(|s| s.as_array_mut()) {
                for d in shape.iter_mut().filter(|d| d.as_str() == Some("T")) {
                    *d = serde_json::json!(1);
                    found |= name.starts_with("decoder");
                }
            }
        }
    }
    if !found {
        return Err(
            "an encoder-decoder graph with no `decoder_*` token input on the axis T".into(),
        );
    }
    *file = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok(())
}

/// The encoder's nodes (those no decoder input reaches) and its output (the value the
/// cross-attentions read as their key).
fn encoder_part(
    graph: &Graph,
    values: &rules::Values,
    layers: &[memory::CacheLayer],
) -> Option<Encoder> {
    let n = graph.nodes.len();
    let decoder_input: Vec<bool> = graph
        .inputs
        .iter()
        .map(|i| i.name.starts_with("decoder"))
        .collect();
    let mut decoder = vec![false; n];
    for k in 0..n {
        decoder[k] = values
            .args(k)
            .iter()
            .any(|&v| match values.as_node(v as usize) {
                Some(j) => decoder[j],
                None => decoder_input[v as usize],
            });
    }
    let cross = layers.iter().find(|l| l.length != CacheLength::Context)?;
    let k = graph.nodes.iter().position(|x| x.id == cross.node)?;
    let output = *values.args(k).get(1)? as usize;
    Some(Encoder {
        nodes: decoder.iter().map(|d| !d).collect(),
        output,
    })
}

fn cache_nodes(layers: &[memory::CacheLayer], batch: u64) -> Vec<CacheNode> {
    layers
        .iter()
        .map(|l| CacheNode {
            id: l.node.clone(),
            tensors: l.tensors,
            per_token: l.kv_heads * l.head_dim * 4 * batch,
            fixed: match l.length {
                CacheLength::Fixed(t) => Some(t),
                CacheLength::Context => None,
            },
            window: l.window,
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
fn python_scope_last_use(
    graph: &Graph,
    values: &rules::Values,
    last_use: &[usize],
    encoder: Option<&Encoder>,
) -> Vec<usize> {
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
            && node.op.family().table(&node.op).is_some()
            && values
                .args(k)
                .iter()
                .all(|&v| values.as_node(v as usize).is_none());
        let v = values.node_value(k);
        if (embeds || Some(v) == head_input) && out[v] != usize::MAX {
            out[v] = n;
        }
    }
    // An encoder runs alone (`model.get_encoder()(...)` before the first forward): its locals
    // go when it returns, its output is kept to the end.
    if let Some(e) = encoder {
        let last = (0..n).rev().find(|&k| e.nodes[k]).unwrap_or(0);
        for k in 0..n {
            let v = values.node_value(k);
            if e.nodes[k] && out[v] == n {
                out[v] = last;
            }
        }
        out[e.output] = n;
    }
    out
}

/// Rotary position embeddings: transformers' decoders compute `cos` and `sin`,
/// `[B, T, rotary dims]` float32 each, once before the first layer
/// (`position_embeddings = self.rotary_emb(...)` in `LlamaModel.forward` and its copies) and
/// hold them until the forward returns. The rotary dims: a GQA attention's head_dim, MLA's
/// qk_rope_head_dim.
fn rotary_bytes(graph: &Graph, batch: u64, tokens: u64) -> u64 {
    let dims = graph
        .nodes
        .iter()
        .find_map(|n| n.op.family().rotary_dims(&n.op));
    dims.map_or(0, |d| 2 * batch * tokens * d * 4)
}

/// T5's position biases under no_grad (transformers 5, its default sdpa: `T5Stack.forward`
/// passes the first layer's bias to every later layer, so each stack keeps it until its
/// forward returns; the decoder's first cross-attention makes a zeros bias kept the same way).
/// Each attention of a stack with a relative bias runs as
/// [`crate::ops::family::Family::biased_sdpa_no_grad_peak`] says.
struct PositionBias<'j> {
    /// Per stack (0: an encoder-decoder's encoder, 1: the rest): a relative bias in it.
    biased: [bool; 2],
    /// The biases made so far: (stack, cross-attention's, buffer).
    held: Vec<(usize, bool, BufId)>,
    /// The encoder's nodes, and its last (its stack's biases go after it).
    encoder: Option<&'j [bool]>,
    encoder_end: Option<usize>,
    /// Tokens cached before this forward, and the static cache's length (None: dynamic).
    past: u64,
    static_len: Option<u64>,
    batch: u64,
}

/// [`Job::biased`]: which stacks hold an attention that computes a relative position bias.
fn biased_stacks(graph: &Graph, encoder: Option<&Encoder>) -> [bool; 2] {
    let mut biased = [false; 2];
    for (k, node) in graph.nodes.iter().enumerate() {
        let family = node.op.family();
        if family.relative_position_bias_heads(&node.op).is_some() {
            let in_encoder = encoder.is_some_and(|e| e.nodes[k]);
            biased[usize::from(!in_encoder)] = true;
        }
    }
    biased
}

impl<'j> PositionBias<'j> {
    fn new(job: &'j Job, past: u64) -> Self {
        let encoder = job.encoder.as_ref().map(|e| &e.nodes[..]);
        PositionBias {
            biased: job.biased,
            held: Vec::new(),
            encoder,
            encoder_end: encoder.and_then(|e| e.iter().rposition(|&x| x)),
            past,
            static_len: (job.cache == CacheImpl::Static).then_some(job.seq0 + job.new),
            batch: job.batch,
        }
    }

    /// Node `k`'s rule where it is an attention of a biased stack; the bias bytes it makes.
    fn rule(
        &self,
        graph: &Graph,
        values: &rules::Values,
        k: usize,
        reuse_cross: bool,
        rule: &mut rules::OpRule,
    ) -> Option<(usize, bool, u64)> {
        let stack = usize::from(!self.encoder.is_some_and(|e| e[k]));
        if !self.biased[stack] {
            return None;
        }
        let node = &graph.nodes[k];
        let args = values.args(k);
        let shape = |j: usize| args.get(j).map(|&v| values.shape(v as usize));
        let attends = node
            .op
            .family()
            .attends(&node.op, node.inputs.len(), shape(0), shape(1))?;
        let tq = shape(0)?.0.get(1)?.as_fixed()?;
        let held = |cross: bool| self.held.iter().any(|h| h.0 == stack && h.1 == cross);
        let (tk, projected, bias, cross) = match attends {
            Attends::Cross(t) => {
                let bias = if held(true) {
                    BiasSource::Held { copied: false }
                } else {
                    BiasSource::Zeros
                };
                (t, if reuse_cross { 0 } else { t }, bias, true)
            }
            _ => {
                let tk = match (stack, self.static_len) {
                    (0, _) => tq,
                    (_, Some(len)) => len,
                    (_, None) => self.past + tq,
                };
                let bias = if node
                    .op
                    .family()
                    .relative_position_bias_heads(&node.op)
                    .is_some()
                {
                    BiasSource::Relative
                } else {
                    BiasSource::Held { copied: true }
                };
                (tk, tq, bias, false)
            }
        };
        let at = BiasedAttention {
            batch: self.batch,
            tq,
            tk,
            projected,
            bias,
        };
        let (peak, made) = node.op.family().biased_sdpa_no_grad_peak(&node.op, &at)?;
        read_from_transformers(rule, peak);
        (made > 0).then_some((stack, cross, made))
    }

    /// After node `k`: the bias it made kept; the encoder's biases gone after its last node.
    fn after(&mut self, mem: &mut Mem, k: usize, made: Option<(usize, bool, u64)>) {
        if let Some((stack, cross, bytes)) = made {
            let b = mem.alloc(bytes, Kind::SavedActivations);
            self.held.push((stack, cross, b));
        }
        if Some(k) == self.encoder_end {
            self.held.retain(|&(stack, _, b)| {
                if stack == 0 {
                    mem.release(b);
                }
                stack != 0
            });
        }
    }

    fn release_all(&mut self, mem: &mut Mem) {
        for (_, _, b) in self.held.drain(..) {
            mem.release(b);
        }
    }
}

/// An op whose no_grad forward the rule set reads from transformers' code: nothing saved, no
/// training transient, its highest point `peak` over the level before it.
fn read_from_transformers(rule: &mut rules::OpRule, peak: u64) {
    rule.saved.clear();
    rule.forward_transient = 0;
    rule.forward_transient_no_grad = Some(0);
    rule.forward_peak = Some(peak);
}

/// The boolean mask of a forward whose sliding layers reach their window
/// (`create_sliding_window_causal_mask`: sdpa cannot skip it once the keys number W,
/// `_ignore_causal_mask_sdpa`), `[1, 1, Tq, Tk]`, made before the first layer (its highest
/// point: the position comparisons and their conjunctions, three of its size) and held by the
/// forward; each sliding layer's sdpa gets it ([`GenerateAt::mask_kv`]).
struct SlidingMask {
    /// The keys a sliding layer reads (None: no mask).
    kv: Option<u64>,
    bytes: u64,
}

impl SlidingMask {
    fn new(job: &Job, tokens: u64, past: u64) -> Self {
        let window = job.layers.iter().filter_map(|l| l.window).min();
        // The prefill's keys are the prompt (the cache's `torch.cat`, or a static layer's
        // whole states); a decode step's the last W - 1 and the new token.
        let kv = window.and_then(|w| {
            let kv = if past == 0 {
                tokens
            } else {
                past.min(w - 1) + tokens
            };
            (kv >= w).then_some(kv)
        });
        SlidingMask {
            kv,
            bytes: kv.map_or(0, |kv| tokens * kv),
        }
    }

    /// The keys of an op's mask, where it is a sliding attention.
    fn kv(&self, op: &crate::ops::Op) -> Option<u64> {
        op.family().sliding_window(op).and(self.kv)
    }

    fn make(&self, mem: &mut Mem, rec: &mut super::Recorder) -> BufId {
        let parts: Vec<BufId> = (0..3)
            .map(|_| mem.alloc(self.bytes, Kind::Transients))
            .collect();
        rec.high("sliding_window_mask", mem);
        for &b in &parts[1..] {
            mem.release(b);
        }
        parts[0]
    }
}

/// What passes from the prefill to the decode steps.
struct State {
    /// Tokens the growing caches hold.
    tokens: u64,
    /// An encoder-decoder's encoder output, kept to the end (bytes).
    encoder_output: u64,
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
        // Registered buffers the graph declares (BART's `final_logits_bias`).
        for b in &self.graph.buffers {
            let elem = if b.dtype == "int64" { 8 } else { 4 };
            self.mem
                .alloc(b.shape.iter().product::<u64>() * elem, Kind::Parameters);
        }
        self.rec.high("-", &self.mem);
        self.rec.end(&self.mem);

        self.begin(0, "inputs".into());
        let ids = self.mem.alloc(job.batch * job.prompt * 8, Kind::Inputs);
        self.mem.alloc(job.batch * job.prompt * 8, Kind::Inputs);
        self.rec.high("-", &self.mem);
        self.rec.end(&self.mem);

        self.begin(1, "prefill".into());
        let held = |l: &CacheNode| l.held(job.cache, job.seq0 + job.new, job.seq0, false);
        // The logits stay alive (generate's `outputs`) into the first decode step.
        let (_logits, encoder_output) =
            self.forward_no_grad(job, ids, false, None, 0, |mem, _, i| {
                let l = &job.layers[i];
                for _ in 0..l.tensors {
                    mem.alloc(l.per_token * held(l), Kind::SavedActivations);
                }
                Vec::new()
            });
        let logits_bytes = self.pick_token(job, job.seq0 + 1);
        self.rec.end(&self.mem);
        State {
            tokens: job.seq0,
            encoder_output: encoder_output.map_or(0, |b| self.mem.bufs[b].bytes),
            cache_bytes: job
                .layers
                .iter()
                .map(|l| l.tensors * l.per_token * held(l))
                .sum(),
            logits: logits_bytes,
            ids: job.batch * (job.seq0 + 1) * 8,
        }
    }

    /// generate's choice of the first token: the float32 copy of the last logits, freed once
    /// the token is chosen; the sequence grown to `len` tokens beside the caller's prompt (the
    /// decode steps grow it themselves). Returns the logits' bytes.
    fn pick_token(&mut self, job: &Job, len: u64) -> u64 {
        let vocab = job.vocab.as_ref().map_or(0, |v| v.1);
        let copy = self.mem.alloc(job.batch * vocab * 4, Kind::Transients);
        self.mem.alloc(job.batch * len * 8, Kind::Inputs);
        self.rec.high("generate.next_token", &self.mem);
        self.mem.release(copy);
        job.batch * vocab * 4
    }

    /// One forward under no_grad over the whole graph but its loss (and, with `skip_encoder`,
    /// an encoder-decoder's encoder, whose output is `carried`), the logits' chain at the last
    /// position only (at one token the chain is that already). `at_cache(.., i)` runs before
    /// the i-th attention node with a cache. Returns the logits' buffer and, when the encoder
    /// ran, its output's (kept).
    fn forward_no_grad(
        &mut self,
        job: &Job,
        ids: BufId,
        skip_encoder: bool,
        carried: Option<BufId>,
        past: u64,
        mut at_cache: impl FnMut(&mut Mem, &mut super::Recorder, usize) -> Vec<BufId>,
    ) -> (Option<BufId>, Option<BufId>) {
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
        if let (Some(b), Some(e)) = (carried, &job.encoder) {
            self.mem.retain(b);
            env[e.output] = Some(Value {
                buf: b,
                contiguous: true,
                perm: rules::Perm::identity(values.shape(e.output).rank()),
                split: None,
                requires_grad: false,
            });
        }
        let tokens = graph
            .inputs
            .iter()
            .find(|i| i.dtype == crate::graph::DType::Int64)
            .and_then(|i| i.shape.0.get(1)?.as_fixed())
            .unwrap_or(1);
        // The head's length: the decoder's (the prompt for a decoder-only model).
        let head_tokens = job
            .vocab
            .as_ref()
            .and_then(|(chain, _)| graph.nodes.iter().find(|n| Some(&n.id) == chain.last()))
            .and_then(|n| n.output.0.get(1)?.as_fixed())
            .unwrap_or(tokens);
        let loss = self.loss;
        let skip = |k: usize| {
            Some(k) == loss || (skip_encoder && job.encoder.as_ref().is_some_and(|e| e.nodes[k]))
        };
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
        let mut biases = PositionBias::new(job, past);
        let masks = SlidingMask::new(job, tokens, past);
        let mut mask_buf = None;
        for k in 0..n {
            if rotary_buf.is_none() && rotary > 0 && graph.nodes[k].id.contains('.') {
                rotary_buf = Some(self.mem.alloc(rotary, Kind::SavedActivations));
            }
            if mask_buf.is_none() && masks.bytes > 0 && graph.nodes[k].id.contains('.') {
                mask_buf = Some(masks.make(&mut self.mem, &mut self.rec));
            }
            if skip(k) {
                saved.starts.push(saved.bufs.len() as u32);
                continue;
            }
            let id = &graph.nodes[k].id;
            // The cache's update runs inside the attention: what it replaces (a DynamicCache's
            // shorter tensors) is dropped once the op is done.
            let mut replaced = Vec::new();
            if let Some(i) = job.layers.iter().position(|l| &l.id == id) {
                self.mem.at(id);
                replaced = at_cache(&mut self.mem, &mut self.rec, i);
            }
            let mut rule = rules_all[self.rule_of[k] as usize].clone();
            // Where the rule set reads the op's no_grad forward from transformers' code
            // (rotary attention, the sparse MoE block: `Family::generate_peak`).
            let op = &graph.nodes[k].op;
            let cached = job.layers.iter().any(|l| &l.id == id);
            let at = GenerateAt {
                batch: job.batch,
                tokens,
                cached,
                mask_kv: masks.kv(op),
            };
            if let Some(peak) = op.family().generate_peak(op, &at) {
                read_from_transformers(&mut rule, peak);
            }
            // A cross-attention after the first step reuses its cached K and V
            // (`T5Attention.forward`: "after the first generated id, we can subsequently re-use
            // all key/value_states from cache").
            if skip_encoder {
                let fixed = job
                    .layers
                    .iter()
                    .find(|l| &l.id == id)
                    .and_then(|l| l.fixed);
                if let Some(t) = fixed.and_then(|kv| {
                    op.family()
                        .cached_cross_attention_transient(op, job.batch, head_tokens, kv)
                }) {
                    rule.saved.clear();
                    rule.forward_peak = None;
                    rule.forward_transient = t;
                    rule.forward_transient_no_grad = Some(t);
                }
            }
            let made_bias = biases.rule(graph, values, k, skip_encoder, &mut rule);
            let in_head = head.is_some_and(|h| h.contains(id));
            if in_head && head_tokens > 1 {
                let t = head_tokens;
                if let Output::New(b) = rule.output {
                    rule.output = Output::New(b / t);
                }
                rule.forward_transient /= t;
                rule.forward_transient_no_grad = rule.forward_transient_no_grad.map(|x| x / t);
                rule.forward_peak = rule.forward_peak.map(|x| x / t);
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
            biases.after(&mut self.mem, k, made_bias);
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
        if let Some(b) = mask_buf {
            self.mem.release(b);
        }
        biases.release_all(&mut self.mem);
        // The forward returns: what nobody holds goes; the logits stay in its output, and the
        // encoder's output in generate's model_kwargs.
        let mut encoder_output = None;
        if let Some(e) = job.encoder.as_ref().filter(|_| !skip_encoder) {
            encoder_output = env[e.output].take().map(|x| x.buf);
        }
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
        (logits, encoder_output)
    }

    /// The decode phase in a simulation of its own (the graph at one token where `ops`):
    /// `new - 1` forwards of one token (op by op where `ops`, else only the caches' growth and
    /// the logits), over the `level` bytes the prefill left.
    fn decode(&mut self, job: &Job, state: &mut State, level: u64, ops: bool) -> PhaseSummary {
        let dynamic = job.cache == CacheImpl::Dynamic;
        let full = job.seq0 + job.new;
        let held =
            |l: &CacheNode, tokens: u64, stepped: bool| l.held(job.cache, full, tokens, stepped);
        // The prefill's level as this simulation's buffers: each cache tensor (they grow), the
        // encoder's output, the last logits, the sequence, and the rest (weights, inputs) as
        // one block.
        let mut caches: Vec<Vec<BufId>> = Vec::new();
        let mut carried = 0u64;
        for l in &job.layers {
            let per = l.per_token * held(l, state.tokens, false);
            caches.push(
                (0..l.tensors)
                    .map(|_| self.mem.alloc(per, Kind::SavedActivations))
                    .collect(),
            );
            carried += per * l.tensors;
        }
        let encoder_output = (state.encoder_output > 0)
            .then(|| self.mem.alloc(state.encoder_output, Kind::SavedActivations));
        let mut logits = Some(self.mem.alloc(state.logits, Kind::SavedActivations));
        let mut ids = self.mem.alloc(state.ids, Kind::Inputs);
        carried += state.encoder_output + state.logits + state.ids;
        self.mem
            .alloc(level.saturating_sub(carried), Kind::Parameters);
        self.begin(1, "decode".into());
        let mut tokens = state.tokens;
        for _ in 1..job.new {
            let len = tokens + 1;
            // torch.cat of the cache and the new token, K then V (`self.keys = torch.cat(...)`):
            // each new tensor exists beside the old one until the assignment drops it. A
            // cross-attention's cache is reused as it is.
            // A full static sliding layer rolls: `self.keys.roll(-1)` and the values' roll,
            // new tensors of its length, both alive until `copy_` back and the update returns.
            let grow =
                |mem: &mut Mem, rec: &mut super::Recorder, caches: &mut [Vec<BufId>], i: usize| {
                    let l = &job.layers[i];
                    if l.fixed.is_some() {
                        return;
                    }
                    if !dynamic {
                        let m = held(l, len, true);
                        if l.window.is_some() && tokens >= m {
                            let rolls: Vec<BufId> = (0..l.tensors)
                                .map(|_| mem.alloc(l.per_token * m, Kind::Transients))
                                .collect();
                            rec.high("cache.roll", mem);
                            rolls.into_iter().for_each(|b| mem.release(b));
                        }
                        return;
                    }
                    for b in caches[i].iter_mut() {
                        let grown =
                            mem.alloc(l.per_token * held(l, len, true), Kind::SavedActivations);
                        rec.high("cache.cat", mem);
                        mem.release(std::mem::replace(b, grown));
                    }
                };
            let fresh_logits = if ops {
                let caches_ref = &mut caches;
                self.forward_no_grad(job, ids, true, encoder_output, tokens, |mem, rec, i| {
                    grow(mem, rec, caches_ref, i);
                    Vec::new()
                })
                .0
            } else {
                for i in 0..caches.len() {
                    grow(&mut self.mem, &mut self.rec, &mut caches, i);
                }
                let l = self.mem.alloc(state.logits, Kind::SavedActivations);
                self.rec.high("lm_head", &self.mem);
                Some(l)
            };
            // generate copies the new logits to float32 and grows the sequence while the
            // previous step's output still holds its logits; they go once the token is chosen
            // (calibrated on gen-llama-r1 b4 prompt 256 new 8's per-call readings, the generate
            // campaign's cache: alive at the next forward's start, gone before the one after;
            // not read from transformers' code).
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
        let stepped = job.new > 1;
        state.cache_bytes = job
            .layers
            .iter()
            .map(|l| l.tensors * l.per_token * held(l, tokens, stepped))
            .sum();
        // generate returns: the caches, the encoder's output and the logits go, the sequences
        // stay.
        if let Some(l) = logits {
            self.mem.release(l);
        }
        if let Some(e) = encoder_output {
            self.mem.release(e);
        }
        for bufs in &caches {
            for &b in bufs {
                self.mem.release(b);
            }
        }
        self.rec.end(&self.mem);
        self.rec.phases.pop().expect("the decode phase")
    }
}
