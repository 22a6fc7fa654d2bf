//! The six features of a run (graph, batch, precision), in bytes. Definitions and a worked
//! example per op family are in `docs/features.md`; `tests/features.rs` recomputes them.

use crate::graph::Graph;
use crate::ops::Op;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A precision profile of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// Everything in float32 (the CPU default).
    #[serde(rename = "fp32")]
    Fp32,
    /// float32 weights under bfloat16 autocast (the CUDA default).
    #[serde(rename = "bf16-autocast")]
    Bf16Autocast,
}

impl Precision {
    /// Every profile, in a fixed order.
    pub const ALL: [Precision; 2] = [Precision::Fp32, Precision::Bf16Autocast];

    /// Bytes per activation element.
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16Autocast => 2,
        }
    }

    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16Autocast => "bf16-autocast",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fp32" => Ok(Precision::Fp32),
            "bf16-autocast" => Ok(Precision::Bf16Autocast),
            other => Err(format!(
                "unknown precision profile `{other}` (known: fp32, bf16-autocast)"
            )),
        }
    }
}

/// Number of features.
pub const N_FEATURES: usize = 6;

/// Feature names, in order, as used in `data/factors.json` and on the page.
pub const FEATURE_NAMES: [&str; N_FEATURES] = [
    "model_state",
    "layer_outputs",
    "intermediates",
    "attention_scores",
    "recurrent_gates",
    "largest_tensor",
];

/// The six features of one run, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Features {
    /// 16 bytes x trainable parameters: fp32 weights, gradients, two Adam states.
    pub model_state: u64,
    /// Every layer's output at the batch (views excluded).
    pub layer_outputs: u64,
    /// Tensors inside compound layers (attention q, k, v, context; expert hidden states).
    pub intermediates: u64,
    /// Attention probabilities stored for backward by eager attention.
    pub attention_scores: u64,
    /// Recurrent gate states for every step, layer and direction.
    pub recurrent_gates: u64,
    /// The largest single tensor (activation or parameter).
    pub largest_tensor: u64,
}

impl Features {
    /// The features as an array, in [`FEATURE_NAMES`] order.
    pub fn as_array(&self) -> [u64; N_FEATURES] {
        [
            self.model_state,
            self.layer_outputs,
            self.intermediates,
            self.attention_scores,
            self.recurrent_gates,
            self.largest_tensor,
        ]
    }

    /// The features as f64, for the fit.
    pub fn as_f64(&self) -> [f64; N_FEATURES] {
        self.as_array().map(|v| v as f64)
    }
}

/// What one node contributes, in elements (activations) or bytes (largest parameter tensor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeContribution {
    pub id: String,
    pub op: &'static str,
    pub layer_output_elements: u64,
    /// Each internal tensor's element count.
    pub intermediate_tensors: Vec<u64>,
    /// Intermediates counted: the internal tensors less the layer's own output (never negative).
    pub intermediate_elements: u64,
    pub score_elements: u64,
    pub gate_elements: u64,
    pub largest_parameter_elements: u64,
}

/// Product of sizes, saturating at `u64::MAX` (absurd graphs and batches give "more than any
/// card", never an overflow panic).
fn prod(sizes: &[u64]) -> u64 {
    sizes.iter().fold(1u64, |a, v| a.saturating_mul(*v))
}

/// Per-node contributions at a batch.
pub fn contributions(graph: &Graph, batch: u64) -> Vec<NodeContribution> {
    (0..graph.nodes.len())
        .map(|k| NodeContribution {
            id: graph.nodes[k].id.clone(),
            ..contribution(graph, k, batch)
        })
        .collect()
}

/// Node `k`'s contribution, its `id` left empty (the features need no copy of it).
fn contribution(graph: &Graph, k: usize, batch: u64) -> NodeContribution {
    let node = &graph.nodes[k];
    let x = graph
        .input_shape(k, 0)
        .expect("checked graph: inputs exist");
    let out = node.output.numel_at(batch);
    // Tokens: every leading element of a [..., d] input.
    let tokens = |width: u64| x.numel_at(batch) / width.max(1);
    let mut c = NodeContribution {
        op: node.op.name(),
        layer_output_elements: if node.op.is_view() { 0 } else { out },
        largest_parameter_elements: node
            .op
            .parameter_tensors()
            .iter()
            .map(|s| prod(s))
            .max()
            .unwrap_or(0),
        ..Default::default()
    };
    let mut less_output = false;
    match &node.op {
        Op::MultiheadAttention { .. } | Op::GqaAttention { .. } | Op::MlaAttention { .. } => {
            attention_intermediates(graph, k, batch, x, &mut c)
        }
        Op::Moe {
            dim,
            hidden,
            num_experts,
            top_k,
            ..
        } => {
            let t = tokens(*dim);
            // Router logits; per routed token: w1 and w3 outputs, w2 output.
            c.intermediate_tensors = vec![
                prod(&[t, *num_experts]),
                prod(&[t, *top_k, *hidden]),
                prod(&[t, *top_k, *hidden]),
                prod(&[t, *top_k, *dim]),
            ];
            less_output = true;
        }
        Op::Lstm(r) | Op::Gru(r) => {
            let gates = if matches!(node.op, Op::Lstm(_)) { 4 } else { 3 };
            let steps = tokens(r.input_size);
            c.gate_elements = prod(&[steps, gates, r.hidden_size, r.directions(), r.num_layers]);
        }
        // The op's saved and intermediate tensors are its output alone (the layer-output
        // feature); listed, not a fallback: a new op must say.
        Op::Linear { .. }
        | Op::Embedding { .. }
        | Op::Conv1d(_)
        | Op::Conv2d(_)
        | Op::ConvTranspose2d(_)
        | Op::BatchNorm { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::GroupNorm { .. }
        | Op::Activation(_)
        | Op::Dropout { .. }
        | Op::Add
        | Op::Mul
        | Op::Sub
        | Op::Div
        | Op::Unary(_)
        | Op::Concat { .. }
        | Op::Upsample { .. }
        | Op::MaxPool(_)
        | Op::AvgPool(_)
        | Op::AdaptiveAvgPool { .. }
        | Op::Flatten { .. }
        | Op::Reshape { .. }
        | Op::Permute { .. }
        | Op::SelectToken { .. }
        | Op::Softmax { .. }
        | Op::Mean { .. }
        | Op::CrossEntropy
        | Op::Mse
        | Op::LearnedPosition { .. }
        | Op::PrependToken { .. }
        | Op::Parameter { .. }
        | Op::Matmul
        | Op::Slice { .. }
        | Op::Sdpa { .. }
        | Op::Constant { .. }
        | Op::Expand { .. }
        // A generic ATen node: its output alone, as an elementwise op (docs/features.md).
        | Op::Aten(_) => {}
    }
    let internal = c
        .intermediate_tensors
        .iter()
        .fold(0u64, |a, v| a.saturating_add(*v));
    c.intermediate_elements = if less_output {
        internal.saturating_sub(out)
    } else {
        internal
    };
    c
}

/// An attention layer's q, k, v and context tensors, and (eager multi-head attention) its
/// B x h x Tq x Tk scores; `x` is its input's shape.
fn attention_intermediates(
    graph: &Graph,
    k: usize,
    batch: u64,
    x: &crate::shape::Shape,
    c: &mut NodeContribution,
) {
    let node = &graph.nodes[k];
    // Tokens: every leading element of a [..., d] input.
    let tokens = |width: u64| x.numel_at(batch) / width.max(1);
    match &node.op {
        Op::MultiheadAttention {
            embed_dim: d,
            num_heads,
            sdpa,
            ..
        } => {
            let b = x.0[0].at(batch);
            let tq = x.0[1].at(batch);
            let tk = node
                .inputs
                .get(1)
                .and_then(|_| graph.input_shape(k, 1))
                .map_or(tq, |s| s.0[1].at(batch));
            // q, k, v, and the context entering the output projection.
            c.intermediate_tensors = vec![
                prod(&[b, tq, *d]),
                prod(&[b, tk, *d]),
                prod(&[b, tk, *d]),
                prod(&[b, tq, *d]),
            ];
            // SDPA never materialises the [B,h,Tq,Tk] scores.
            c.score_elements = if *sdpa {
                0
            } else {
                prod(&[b, *num_heads, tq, tk])
            };
        }
        Op::GqaAttention {
            embed_dim,
            num_heads,
            num_kv_heads,
            head_dim,
            ..
        } => {
            let t = tokens(*embed_dim);
            c.intermediate_tensors = vec![
                prod(&[t, *num_heads, *head_dim]),
                prod(&[t, *num_kv_heads, *head_dim]),
                prod(&[t, *num_kv_heads, *head_dim]),
                prod(&[t, *num_heads, *head_dim]),
            ];
        }
        Op::MlaAttention {
            embed_dim,
            num_heads: h,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            ..
        } => {
            let t = tokens(*embed_dim);
            if *q_lora_rank > 0 {
                c.intermediate_tensors.push(prod(&[t, *q_lora_rank]));
            }
            c.intermediate_tensors.extend([
                prod(&[t, *h, qk_nope_head_dim.saturating_add(*qk_rope_head_dim)]),
                prod(&[t, kv_lora_rank.saturating_add(*qk_rope_head_dim)]),
                prod(&[t, *h, qk_nope_head_dim.saturating_add(*v_head_dim)]),
                prod(&[t, *h, *v_head_dim]),
            ]);
        }
        _ => unreachable!("attention_intermediates: not an attention layer"),
    }
}

/// The six features of a run.
pub fn features(graph: &Graph, batch: u64, precision: Precision) -> Features {
    let ab = precision.activation_bytes();
    let mut f = Features {
        model_state: graph.parameters().saturating_mul(16),
        ..Default::default()
    };
    let mut largest = 0u64;
    for k in 0..graph.nodes.len() {
        let c = contribution(graph, k, batch);
        let add = |acc: &mut u64, elements: u64| *acc = acc.saturating_add(prod(&[elements, ab]));
        add(&mut f.layer_outputs, c.layer_output_elements);
        add(&mut f.intermediates, c.intermediate_elements);
        add(&mut f.attention_scores, c.score_elements);
        add(&mut f.recurrent_gates, c.gate_elements);
        let biggest_activation = c
            .intermediate_tensors
            .iter()
            .copied()
            .chain([c.layer_output_elements, c.score_elements])
            .max()
            .unwrap_or(0);
        largest = largest
            .max(biggest_activation.saturating_mul(ab))
            .max(c.largest_parameter_elements.saturating_mul(4));
    }
    f.largest_tensor = largest;
    f
}
