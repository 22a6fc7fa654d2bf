//! The six features of a run (graph, batch, precision), in bytes. Definitions and a worked
//! example per op family are in `docs/features.md`; `tests/features.rs` recomputes them.

use crate::graph::Graph;
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
    /// bfloat16 weights, gradients and AdamW states (`model.to(torch.bfloat16)`, no autocast:
    /// every activation bf16). With LoRA or QLoRA the frozen base is bf16 and the adapters are
    /// float32 (peft's `autocast_adapter_dtype`), trained under bf16 autocast.
    #[serde(rename = "bf16")]
    Bf16,
}

impl Precision {
    /// Every profile, in a fixed order.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Bf16Autocast, Precision::Bf16];

    /// Bytes per activation element.
    pub fn activation_bytes(self) -> u64 {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16Autocast | Precision::Bf16 => 2,
        }
    }

    /// Bytes a trainable parameter holds in the optimizer's phase: its weight, gradient and
    /// both AdamW states, each 4 bytes in float32 (fp32, and bf16 autocast's float32 weights),
    /// each 2 in pure bf16 (torch's AdamW makes its states `zeros_like` the parameter).
    pub fn state_bytes_per_parameter(self) -> u64 {
        match self {
            Precision::Fp32 | Precision::Bf16Autocast => 16,
            Precision::Bf16 => 8,
        }
    }

    /// The profile whose fitted factors this one takes while none of its own rows is fitted:
    /// pure bf16 takes bf16 autocast's (the same activation element on the same devices; the
    /// weights' element is in the `model_state` feature itself).
    pub fn borrows_from(self) -> Option<Precision> {
        match self {
            Precision::Bf16 => Some(Precision::Bf16Autocast),
            Precision::Fp32 | Precision::Bf16Autocast => None,
        }
    }

    /// Bytes of one weight element.
    pub fn weight_bytes(self) -> u64 {
        self.state_bytes_per_parameter() / 4
    }

    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16Autocast => "bf16-autocast",
            Precision::Bf16 => "bf16",
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
            "bf16" => Ok(Precision::Bf16),
            other => Err(format!(
                "unknown precision profile `{other}` (known: fp32, bf16-autocast, bf16)"
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
    /// Trainable parameters x their weight, gradient and two Adam states: 16 bytes in float32
    /// (fp32, bf16 autocast), 8 in pure bf16.
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
    // The op's internal tensors (its family's: none for most, whose saved and intermediate
    // tensors are their output alone).
    let memory = node.inputs.get(1).and_then(|_| graph.input_shape(k, 1));
    let inner = node.op.family().intermediates(&node.op, x, memory, batch);
    c.intermediate_tensors = inner.tensors;
    c.score_elements = inner.scores;
    c.gate_elements = inner.gates;
    let less_output = inner.less_output;
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

/// The six features of a run.
pub fn features(graph: &Graph, batch: u64, precision: Precision) -> Features {
    let ab = precision.activation_bytes();
    let mut f = Features {
        model_state: graph
            .parameters()
            .saturating_mul(precision.state_bytes_per_parameter()),
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
        largest = largest.max(biggest_activation.saturating_mul(ab)).max(
            c.largest_parameter_elements
                .saturating_mul(precision.weight_bytes()),
        );
    }
    f.largest_tensor = largest;
    f
}
