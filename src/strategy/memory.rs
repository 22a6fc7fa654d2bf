//! The per-device memory of a training step under a [`Strategy`]: the plain plan's terms
//! (weights, gradients, optimizer state, activations) transformed by each part's formula
//! ([`super::STRATEGIES`] states them), and inference with a KV cache.
//!
//! The plain activations term `A` is the deciding method's plain estimate less the model
//! state (16 bytes a parameter): what the plain step holds beyond weights, gradients and AdamW
//! states at its peak. Everything else is read from the graph.

use super::{Kind, Strategy};
use crate::features::Precision;
use crate::graph::Graph;
use serde::Serialize;

/// What the formulas read from the graph (at the batch).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphTerms {
    pub parameters: u64,
    /// Parameters in 2-D matrices of linear layers and attention/MoE projections (TP shards them).
    pub matrix_parameters: u64,
    /// LoRA/QLoRA targets: the 2-D matrices of the linear layers, attention and MoE projections
    /// inside the blocks (not the embeddings, not the head).
    pub targets: Vec<Target>,
    /// The largest parameter tensor, in elements.
    pub largest_parameter: u64,
    /// The largest layer (one node's parameters; DeepSpeed's `largest_layer_params`).
    pub largest_layer: u64,
    /// The largest block's parameters (an FSDP unit).
    pub largest_block: u64,
    /// Blocks (`layers0`, `h3`, `encoder.layer1`, ...), in order.
    pub blocks: u64,
    /// The share of the activation elements produced inside the blocks.
    pub inside_share: f64,
    /// Elements of one block's output (the largest), per batch.
    pub boundary_elements: u64,
    /// The fewest heads of an attention (its key/value heads under grouped-query attention):
    /// tensor parallel gives every rank whole heads. None: no attention op.
    pub heads: Option<u64>,
    /// What a pipeline stage holds of the graph.
    pub pipeline: PipelineTerms,
}

/// The graph as pipeline stages cut it: the nodes before the first block (embeddings: stage
/// 0's), each block, the nodes after (final norm, head, loss: the last stage's).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PipelineTerms {
    pub pre_parameters: u64,
    pub post_parameters: u64,
    /// Per block, in order.
    pub block_parameters: Vec<u64>,
    /// Activation elements (the same count as `inside_share`'s) before, per block, after.
    pub pre_elements: u64,
    pub block_elements: Vec<u64>,
    pub post_elements: u64,
    /// The largest output after the blocks (the logits): what the last stage keeps of every
    /// micro-batch until the next step (torch's `PipelineStage.output_chunks`).
    pub output_elements: u64,
}

impl PipelineTerms {
    /// The blocks of stage `r` of `s`: contiguous, as even as can be, earlier stages taking
    /// the extra (the per-rank campaign's split, `exporter/memcal_export/pipeline.py`).
    pub fn blocks_of(&self, r: u64, s: u64) -> std::ops::Range<usize> {
        let l = self.block_parameters.len() as u64;
        let (base, extra) = (l / s.max(1), l % s.max(1));
        let start = r * base + r.min(extra);
        let len = base + u64::from(r < extra);
        start as usize..(start + len).min(l) as usize
    }

    /// Stage `r` of `s`: (its parameters, its share of the activation elements).
    pub fn stage(&self, r: u64, s: u64) -> (u64, f64) {
        let blocks = self.blocks_of(r, s);
        let mut params: u64 = self.block_parameters[blocks.clone()].iter().sum();
        let mut elements: u64 = self.block_elements[blocks].iter().sum();
        if r == 0 {
            params += self.pre_parameters;
            elements += self.pre_elements;
        }
        if r + 1 == s {
            params += self.post_parameters;
            elements += self.post_elements;
        }
        let total =
            self.pre_elements + self.block_elements.iter().sum::<u64>() + self.post_elements;
        (params, elements as f64 / total.max(1) as f64)
    }
}

/// The fewest heads of an attention node of the graph (key/value heads under GQA).
fn attention_heads(graph: &Graph) -> Option<u64> {
    graph
        .nodes
        .iter()
        .filter_map(|n| n.op.attention_heads())
        .min()
}

/// A LoRA target matrix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub node: String,
    pub in_features: u64,
    pub out_features: u64,
    /// Tokens it is applied to at the batch (rows of its input).
    pub tokens: u64,
}

/// The block a node belongs to: its id up to its first dotted segment that carries a digit
/// and the all-digit segments right after it (`layers0.mlp.up` -> `layers0`, `layer3.0.conv1` -> `layer3.0`,
/// `encoder.block1.ff` -> `encoder.block1`); None outside any block.
pub fn block_of(id: &str) -> Option<String> {
    let segs: Vec<&str> = id.split('.').collect();
    let first = segs
        .iter()
        .position(|s| s.bytes().any(|b| b.is_ascii_digit()))?;
    let mut end = first;
    while end + 1 < segs.len() && segs[end + 1].bytes().all(|b| b.is_ascii_digit()) {
        end += 1;
    }
    Some(segs[..=end].join("."))
}

/// Reads the terms of a graph at a batch.
pub fn graph_terms(graph: &Graph, batch: u64) -> GraphTerms {
    let contributions = crate::features::contributions(graph, batch);
    let mut blocks: Vec<String> = Vec::new();
    let mut block_params: Vec<u64> = Vec::new();
    let (mut inside, mut total, mut boundary) = (0u64, 0u64, 0u64);
    let mut targets = Vec::new();
    let (mut matrix_parameters, mut largest_parameter, mut largest_layer) = (0u64, 0u64, 0u64);
    let mut pipe = PipelineTerms::default();
    for (k, n) in graph.nodes.iter().enumerate() {
        let c = &contributions[k];
        let acts = c
            .layer_output_elements
            .saturating_add(c.intermediate_elements)
            .saturating_add(c.score_elements)
            .saturating_add(c.gate_elements);
        total = total.saturating_add(acts);
        let tensors = n.op.parameter_tensors();
        let params: u64 = tensors.iter().map(|d| d.iter().product::<u64>()).sum();
        largest_layer = largest_layer.max(params);
        largest_parameter = largest_parameter.max(
            tensors
                .iter()
                .map(|d| d.iter().product::<u64>())
                .max()
                .unwrap_or(0),
        );
        let mats = n.op.family().matrices(&n.op);
        matrix_parameters += mats.iter().map(|(i, o)| i * o).sum::<u64>();
        let Some(b) = block_of(&n.id) else {
            if blocks.is_empty() {
                pipe.pre_parameters += params;
                pipe.pre_elements = pipe.pre_elements.saturating_add(acts);
            } else {
                pipe.post_parameters += params;
                pipe.post_elements = pipe.post_elements.saturating_add(acts);
                pipe.output_elements = pipe.output_elements.max(c.layer_output_elements);
            }
            continue;
        };
        inside = inside.saturating_add(acts);
        if blocks.last() != Some(&b) {
            blocks.push(b);
            block_params.push(0);
            pipe.block_elements.push(0);
        }
        *block_params.last_mut().expect("pushed") += params;
        *pipe.block_elements.last_mut().expect("pushed") += acts;
        boundary = boundary.max(c.layer_output_elements);
        let Some(width) = n.op.family().projection_width(&n.op) else {
            continue;
        };
        let tokens = c.layer_output_elements / width.max(1);
        for (i, o) in mats {
            targets.push(Target {
                node: n.id.clone(),
                in_features: i,
                out_features: o,
                tokens,
            });
        }
    }
    GraphTerms {
        parameters: graph.parameters(),
        matrix_parameters,
        targets,
        largest_parameter,
        largest_layer,
        largest_block: block_params.iter().copied().max().unwrap_or(0),
        blocks: blocks.len() as u64,
        inside_share: if total == 0 {
            0.0
        } else {
            inside as f64 / total as f64
        },
        boundary_elements: boundary,
        heads: attention_heads(graph),
        pipeline: PipelineTerms {
            block_parameters: block_params,
            ..pipe
        },
    }
}

/// Per-device bytes of one training step under a strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Terms {
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    /// Saved activations and transients of the forward and backward (the plain `A`, transformed).
    pub activations: f64,
    /// Gathered parameters, gradient buckets, dequantized weights: buffers a strategy adds.
    pub buffers: f64,
    pub trainable_parameters: u64,
}

impl Terms {
    pub fn total(&self) -> f64 {
        self.weights + self.gradients + self.optimizer + self.activations + self.buffers
    }
}

/// The terms of plain training with the plain activations term `activations`, the weights,
/// gradients and both AdamW states at `precision`'s weight element (4 bytes; 2 in pure bf16).
pub fn plain_terms(g: &GraphTerms, activations: f64, precision: Precision) -> Terms {
    let p = g.parameters as f64;
    let wb = precision.weight_bytes() as f64;
    Terms {
        weights: wb * p,
        gradients: wb * p,
        optimizer: 2.0 * wb * p,
        activations,
        buffers: 0.0,
        trainable_parameters: g.parameters,
    }
}

/// LoRA adapter parameters at rank r over the targets.
pub fn adapter_parameters(g: &GraphTerms, r: u64) -> u64 {
    g.targets
        .iter()
        .map(|t| r * (t.in_features + t.out_features))
        .sum()
}

/// The per-device terms of a strategy at `precision` (its activation and weight elements); a
/// pipeline's are its worst stage's ([`strategy_terms_at`] per stage).
pub fn strategy_terms(
    g: &GraphTerms,
    plain_activations: f64,
    s: &Strategy,
    precision: Precision,
) -> Terms {
    let stages = s.part(Kind::Pp).map_or(1, |p| p.get("stages"));
    (0..stages)
        .map(|r| strategy_terms_at(g, plain_activations, s, precision, r))
        .max_by(|a, b| a.total().total_cmp(&b.total()))
        .expect("at least one stage")
}

/// The terms of pipeline stage `stage` (0 without a pipeline).
pub fn strategy_terms_at(
    g: &GraphTerms,
    plain_activations: f64,
    s: &Strategy,
    precision: Precision,
    stage: u64,
) -> Terms {
    let mut t = plain_terms(g, plain_activations, precision);
    let p = g.parameters as f64;
    let ab = precision.activation_bytes() as f64;
    // The frozen base's weight element under LoRA and QLoRA (bf16 in pure bf16; the adapters
    // are float32 either way: peft's `autocast_adapter_dtype` upcasts them over a bf16 base).
    let wb = precision.weight_bytes() as f64;
    let targets: u64 = g
        .targets
        .iter()
        .map(|t| t.in_features * t.out_features)
        .sum();
    let largest_target = g
        .targets
        .iter()
        .map(|t| t.in_features * t.out_features)
        .max()
        .unwrap_or(0) as f64;
    let low_rank = s.part(Kind::Lora).or(s.part(Kind::Qlora));
    if let Some(part) = low_rank {
        let r = part.get("r");
        let pa = adapter_parameters(g, r) as f64;
        let adapter_acts: f64 = g.targets.iter().map(|x| (x.tokens * r) as f64).sum::<f64>() * ab;
        t.trainable_parameters = adapter_parameters(g, r);
        t.gradients = 4.0 * pa;
        t.optimizer = 8.0 * pa;
        t.activations += adapter_acts;
        t.weights = if part.kind == Kind::Qlora {
            t.buffers += largest_target * ab;
            wb * (p - targets as f64) + targets as f64 * (0.5 + 4.0 / 64.0) + 4.0 * pa
        } else {
            wb * p + 4.0 * pa
        };
    }
    if s.has(Kind::Adam8bit) {
        t.optimizer = t.trainable_parameters as f64 * 2.0 * (1.0 + 4.0 / 2048.0);
    }
    if let Some(k) = s.part(Kind::Checkpoint).map(|x| x.get("every")) {
        let l = g.blocks.max(1) as f64;
        let k = (k as f64).min(l);
        let segments = (l / k).ceil();
        let inside = g.inside_share;
        t.activations = t.activations * ((1.0 - inside) + inside * k / l)
            + segments * g.boundary_elements as f64 * ab;
    }
    if let Some(k) = s.part(Kind::Tp).map(|x| x.get("k") as f64) {
        let mp = g.matrix_parameters.min(g.parameters) as f64;
        let share = (mp / k + (p - mp)) / p.max(1.0);
        t.weights *= share;
        t.gradients *= share;
        t.optimizer *= share;
        let inside = g.inside_share;
        t.activations *= (1.0 - inside) + inside * (10.0 + 24.0 / k) / 34.0;
    }
    if let Some(pp) = s.part(Kind::Pp) {
        pipeline_stage(&mut t, g, pp, stage, ab);
    }
    shard(&mut t, g, s);
    t
}

/// Stage `r` of a pipeline (torch's `PipelineStage` under `ScheduleGPipe` / `Schedule1F1B`):
/// the model states of its blocks (and the embeddings on the first stage, the head on the
/// last); its share of the activations, for every micro-batch under GPipe (all forwards before
/// the backwards) or min(S - r, M) of M under 1F1B (the warm-up forwards in flight); the
/// receive buffers it keeps between steps, one a micro-batch (the input activations on a stage
/// past the first, the output gradients on one before the last: together a block boundary at
/// the batch each), and on the last stage every micro-batch's output (the logits), kept for the
/// merged output `step` returns.
fn pipeline_stage(t: &mut Terms, g: &GraphTerms, pp: &super::Part, r: u64, ab: f64) {
    let (s, m) = (pp.get("stages"), pp.get("micro"));
    let (params, share) = g.pipeline.stage(r, s);
    let states = params as f64 / g.parameters.max(1) as f64;
    t.weights *= states;
    t.gradients *= states;
    t.optimizer *= states;
    t.trainable_parameters = (t.trainable_parameters as f64 * states).round() as u64;
    let in_flight = if pp.word("schedule") == "gpipe" {
        1.0
    } else {
        (s - r).min(m) as f64 / m as f64
    };
    t.activations *= share * in_flight;
    let boundary = g.boundary_elements as f64 * ab;
    t.buffers += boundary * (u64::from(r > 0) + u64::from(r + 1 < s)) as f64;
    if r + 1 == s {
        t.buffers += g.pipeline.output_elements as f64 * ab;
    }
}

/// ZeRO / FSDP sharding over the data-parallel world.
fn shard(t: &mut Terms, g: &GraphTerms, s: &Strategy) {
    let n = s.data_parallel() as f64;
    let frozen = s.has(Kind::Lora) || s.has(Kind::Qlora);
    // Under LoRA the base layers gathered are frozen: no full gradient for them.
    let grad = if frozen { 0.0 } else { 1.0 };
    if let Some(z) = s.parts.iter().find(|p| p.deepspeed()) {
        deepspeed(t, g, z, n, grad);
        return;
    }
    if s.has(Kind::Zero1) {
        t.optimizer /= n;
    }
    if s.has(Kind::Ddp) || s.has(Kind::Zero1) {
        // DistributedDataParallel's reducer: flat buckets of every trainable gradient.
        t.buffers += 4.0 * t.trainable_parameters as f64;
    }
    if s.has(Kind::Fsdp) {
        t.optimizer /= n;
        t.gradients /= n;
        // reshard=0: every block gathered in the forward stays gathered until its backward.
        let kept = s.part(Kind::Fsdp).is_some_and(|p| p.get("reshard") == 0);
        if !kept {
            t.weights /= n;
        }
        t.buffers += 4.0 * g.largest_block as f64 * (2.0 + grad);
    }
}

/// DeepSpeed's ZeRO stages 1-3 in fp32 (`deepspeed/runtime/zero/stage_1_and_2.py`,
/// `stage3.py`): the optimizer holds an fp32 copy of the rank's partition (4 bytes a trainable
/// parameter / N, even when the weights are fp32) beside the Adam states; the gradients are
/// reduced into the partition; the contiguous reduce buffer is `reduce_bucket_size` elements
/// (allocated whole: in each backward for stages 1-2, at initialization for stage 3).
/// Stage 3 also partitions the weights and gathers a layer at a time (in use and prefetched,
/// and its full gradient).
fn deepspeed(t: &mut Terms, g: &GraphTerms, z: &super::Part, n: f64, grad: f64) {
    t.optimizer = t.optimizer / n + 4.0 * t.trainable_parameters as f64 / n;
    t.gradients /= n;
    t.buffers += 4.0 * z.get("bucket") as f64;
    if z.kind == Kind::Zero3 {
        t.weights /= n;
        t.buffers += 4.0 * g.largest_layer as f64 * (2.0 + grad);
    }
}

/// DeepSpeed's published ZeRO-2 estimator without offload (`estimate_zero2_model_states_mem_needs`,
/// `cpu_offload=False`): `4 * total_params + int(16 * total_params / total_gpus)` bytes a GPU
/// (its code; its docs print `2 * total_params + 16 * total_params / total_gpus`). Mixed
/// precision (fp16 weights and gradients, fp32 master and Adam states), not memcal's fp32
/// protocol: a comparison, not the plan.
pub fn deepspeed_zero2(total_params: u64, gpus: u64) -> u64 {
    4 * total_params + 16 * total_params / gpus
}

/// The ZeRO-2 figure DeepSpeed's documentation prints: `2 * params + 16 * params / gpus`.
pub fn deepspeed_zero2_docs(total_params: u64, gpus: u64) -> u64 {
    2 * total_params + 16 * total_params / gpus
}

/// DeepSpeed's published ZeRO-3 estimator without offload
/// (`estimate_zero3_model_states_mem_needs`, `cpu_offload=False`):
/// `4 * largest_layer_params + int(18 * total_params / total_gpus)`.
pub fn deepspeed_zero3(total_params: u64, largest_layer_params: u64, gpus: u64) -> u64 {
    4 * largest_layer_params + 18 * total_params / gpus
}

/// The ZeRO paper's model-state bytes a device (mixed-precision Adam, K = 12): baseline
/// (2 + 2 + K)P, P_os 4P + KP/N, P_os+g 2P + (2 + K)P/N, P_os+g+p (4 + K)P/N.
pub fn zero_paper(stage: u8, params: u64, n: u64) -> u64 {
    let (p, k) = (params as f64, 12.0);
    let n = n as f64;
    let v = match stage {
        0 => (4.0 + k) * p,
        1 => 4.0 * p + k * p / n,
        2 => 2.0 * p + (2.0 + k) * p / n,
        _ => (4.0 + k) * p / n,
    };
    v.round() as u64
}

/// Inference with a KV cache at a context: weights, cache, the prefill's transient and its
/// last-position logits (a formula).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inference {
    /// Tokens the prefill runs over (the prompt; for an encoder-decoder, the encoder's input).
    pub prompt: u64,
    /// Tokens the growing caches hold at the end (prompt plus generated).
    pub context: u64,
    pub batch: u64,
    pub weight_bytes: u64,
    pub kv_cache_bytes: u64,
    /// The prefill's transient: `B x prompt x (2 x widest op + residual) x bytes`, the logits
    /// left out of the widest op.
    pub prefill_bytes: u64,
    /// The prefill's logits at the last position only (transformers' `logits_to_keep=1`, vLLM,
    /// TGI): `B x vocab x bytes`, and `generate`'s float32 copy of them, `B x vocab x 4`.
    pub logits_bytes: u64,
    pub total_bytes: u64,
    /// Per attention layer with a cache: (node, kv heads, head dim, whether it grows).
    pub layers: Vec<CacheLayer>,
}

/// How long an attention layer's cache is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheLength {
    /// Causal self-attention: one entry per token of the context, growing while decoding.
    Context,
    /// Cross-attention: the encoder's output, fixed at its length in tokens.
    Fixed(u64),
}

/// One attention layer's cache shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheLayer {
    pub node: String,
    /// Tensors cached a token (2: K and V; 1: MLA's compressed latent).
    pub tensors: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub length: CacheLength,
    /// A sliding layer's window (attribute `sliding_window`): transformers' cache keeps its
    /// last W - 1 tokens once a decode step has run ([`held_tokens`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
}

/// Tokens a layer's cache holds at its largest, `prompt` tokens prefilled and `context` at the
/// end, as transformers' `DynamicCache` keeps them: a growing layer the context; a sliding
/// layer (`DynamicSlidingWindowLayer`) the whole prompt after the prefill (its keys a view of
/// the prompt's `torch.cat`), then at most W (each step's `cat` of the last W - 1 and the new
/// token), so max(prompt, min(context, W)); a cross-attention the encoder's length.
pub fn held_tokens(l: &CacheLayer, prompt: u64, context: u64) -> u64 {
    match (l.length, l.window) {
        (CacheLength::Fixed(t), _) => t,
        (CacheLength::Context, None) => context,
        (CacheLength::Context, Some(w)) => prompt.max(context.min(w)),
    }
}

/// Cache bytes a token of context adds while no layer slides (every growing layer, sliding
/// ones included: what a serving engine's per-token KV figure counts), for `batch` 1.
pub fn bytes_per_token(layers: &[CacheLayer], bytes: u64) -> u64 {
    layers
        .iter()
        .filter(|l| l.length == CacheLength::Context)
        .map(|l| l.tensors * l.kv_heads * l.head_dim * bytes)
        .sum()
}

use crate::ops::family::Attends;

/// How attention node `k` attends ([`crate::ops::family::Family::attends`]).
fn attends(graph: &Graph, k: usize) -> Option<Attends> {
    let n = &graph.nodes[k];
    n.op.family().attends(
        &n.op,
        n.inputs.len(),
        graph.input_shape(k, 0),
        graph.input_shape(k, 1),
    )
}

/// The attention layers' cache shapes (GQA-aware; MLA caches its latent and rope key): every
/// causal self-attention (growing with the context) and every cross-attention of a graph that
/// has one (fixed at the encoder's length); an encoder's bidirectional self-attention has no
/// cache. An attention drawn op by op (an exported graph's `sdpa` node) caches its k and v
/// inputs, `[B, kv_heads, T, head_dim]`: k's heads and width (k as sdpa reads it: repeated to
/// every query head where the graph repeats it).
pub fn cache_layers(graph: &Graph) -> Vec<CacheLayer> {
    let mut layers: Vec<CacheLayer> = Vec::new();
    let mut causal = false;
    for (k, n) in graph.nodes.iter().enumerate() {
        let Some(how) = attends(graph, k) else {
            continue;
        };
        let length = match how {
            Attends::CausalSelf => CacheLength::Context,
            Attends::Cross(t) => CacheLength::Fixed(t),
            Attends::Bidirectional => continue,
        };
        causal |= length == CacheLength::Context;
        let key = graph.input_shape(k, 1).or(graph.input_shape(k, 0));
        let shape = n.op.family().kv_cache(&n.op, key);
        let Some((tensors, kv_heads, head_dim)) = shape else {
            continue;
        };
        layers.push(CacheLayer {
            node: n.id.clone(),
            tensors,
            kv_heads,
            head_dim,
            length,
            window: n.op.family().sliding_window(&n.op),
        });
    }
    // A graph with no decoder has nothing to generate with.
    if !causal {
        layers.clear();
    }
    layers
}

/// Why a graph cannot be planned for inference with a KV cache (None: it can).
pub fn refusal(graph: &Graph) -> Option<String> {
    if !cache_layers(graph).is_empty() {
        return None;
    }
    let bidirectional = (0..graph.nodes.len())
        .filter(|&k| attends(graph, k) == Some(Attends::Bidirectional))
        .count();
    Some(if bidirectional > 0 {
        format!(
            "graph `{}` has no causal self-attention: its {bidirectional} attention layer(s) attend both ways (an encoder), which generates no tokens and keeps no KV cache; plan it with `memcal plan` (a forward pass) instead",
            graph.name
        )
    } else {
        format!(
            "graph `{}` has no attention op this planner knows (multihead, gqa or mla attention, sdpa with is_causal), so no KV cache to plan",
            graph.name
        )
    })
}

/// `Σ tensors x kv_heads x head_dim x tokens x batch x bytes` over the layers with a cache, a
/// layer's tokens [`held_tokens`] (`2 * layers * kv_heads * head_dim * context * batch * bytes`
/// for a uniform GQA stack with no sliding window).
pub fn kv_cache_bytes(
    layers: &[CacheLayer],
    prompt: u64,
    context: u64,
    batch: u64,
    bytes: u64,
) -> u64 {
    layers
        .iter()
        .map(|l| {
            (l.tensors * l.kv_heads * l.head_dim).saturating_mul(held_tokens(l, prompt, context))
        })
        .fold(0u64, u64::saturating_add)
        .saturating_mul(batch)
        .saturating_mul(bytes)
}

/// The vocabulary of a language model's logits: the last axis of the loss's input where the
/// loss is a cross-entropy over tokens (None otherwise).
fn vocabulary(graph: &Graph) -> Option<u64> {
    let l = graph.loss_index()?;
    if graph.nodes[l].op.name() != "cross_entropy" {
        return None;
    }
    graph.input_shape(l, 0)?.0.last()?.as_fixed()
}

/// The widest value a token of the forward produces (elements a token; the logits, which
/// the prefill makes for the last position only, left out), and the residual width.
fn widths(graph: &Graph, vocab: Option<u64>) -> (u64, u64) {
    let mut widest = 0u64;
    let mut residual = 0u64;
    for n in &graph.nodes {
        let w = n.output.last().and_then(|d| d.as_fixed()).unwrap_or(0);
        if Some(w) != vocab {
            widest = widest.max(w);
        }
        if let Some(t) = n.op.family().table(&n.op) {
            residual = residual.max(t.embedding_dim);
        }
    }
    (widest, residual)
}

/// Inference of `batch` sequences: a prefill over `prompt` tokens, caches at `context` tokens,
/// weights and activations in `bytes` an element: the cache, the weights, the prefill's
/// transient (the widest op's input and output with the residual stream,
/// `B x prompt x (2 x widest + residual) x bytes`) and the last position's logits with
/// `generate`'s float32 copy. A formula. `plan --inference --context N` takes the prompt as
/// the whole context (the worst case). Refused ([`refusal`]) for a graph with no causal
/// self-attention.
pub fn inference(
    graph: &Graph,
    batch: u64,
    prompt: u64,
    context: u64,
    bytes: u64,
) -> Result<Inference, String> {
    if let Some(why) = refusal(graph) {
        return Err(why);
    }
    if let Some(most) = position_limit(graph).filter(|&m| context > m) {
        return Err(format!(
            "a context of {context} tokens is longer than graph `{}`'s learned position table ({most} positions): use --context {most} or less",
            graph.name
        ));
    }
    let layers = cache_layers(graph);
    let kv = kv_cache_bytes(&layers, prompt, context, batch, bytes);
    let vocab = vocabulary(graph);
    let (widest, residual) = widths(graph, vocab);
    let prefill = batch
        .saturating_mul(prompt)
        .saturating_mul(2 * widest + residual)
        .saturating_mul(bytes);
    let logits = vocab.map_or(0, |v| batch.saturating_mul(v).saturating_mul(bytes + 4));
    let weights = graph.parameters().saturating_mul(bytes);
    Ok(Inference {
        prompt,
        context,
        batch,
        weight_bytes: weights,
        kv_cache_bytes: kv,
        prefill_bytes: prefill,
        logits_bytes: logits,
        total_bytes: weights
            .saturating_add(kv)
            .saturating_add(prefill)
            .saturating_add(logits),
        layers,
    })
}

/// The learned position table's length, where the graph has one (gpt2, bert, opt): no context
/// can be longer. None: rotary or relative positions, no table.
pub fn position_limit(graph: &Graph) -> Option<u64> {
    graph
        .nodes
        .iter()
        .filter_map(|n| n.op.family().learned_positions(&n.op))
        .min()
}

/// The longest context (up to 2^24, the prompt the whole context) whose inference fits `room`
/// bytes; None: not even 1 (or the graph is refused).
pub fn longest_context(graph: &Graph, batch: u64, bytes: u64, room: f64) -> Option<u64> {
    refusal(graph).is_none().then_some(())?;
    let most = position_limit(graph).unwrap_or(1 << 24).min(1 << 24);
    crate::search::largest_fitting(most, |c| {
        inference(graph, batch, c, c, bytes).is_ok_and(|i| (i.total_bytes as f64) <= room)
    })
}
