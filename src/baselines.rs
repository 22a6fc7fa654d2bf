//! The two baselines the plan is compared with: accelerate's `estimate-memory`, reproduced from
//! its source (1.10.1, `commands/estimate.py` and `utils/modeling.py`), and the textbook formula
//! 14P + L·B·T·(34d + 5hT) for GPT/BERT-style graphs (Korthikanti et al. 2022, 16-bit
//! activations).

use crate::features::Precision;
use crate::graph::Graph;
use crate::ops::family::TextbookRole;
use crate::ops::Op;
use crate::units::accelerate_convert_bytes;
use serde::Serialize;

/// accelerate's estimate for a graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accelerate {
    /// Bytes of every parameter and buffer of the float32 model (`compute_module_sizes`):
    /// parameters and float buffers at 4 bytes, integer buffers at their own size.
    pub total_bytes: u64,
    /// The largest layer (the largest module without children): here the largest node.
    pub largest_layer_bytes: u64,
    /// "Training using Adam" for the run's precision row: the MAX of model, gradients,
    /// optimizer and step (float32: 4x total; float16/bfloat16: 2x total).
    pub training_bytes: u64,
    /// The row accelerate prints for this precision.
    pub dtype_row: &'static str,
    /// As accelerate prints them (1024-based units labelled KB/MB/GB).
    pub printed_largest_layer: String,
    pub printed_total: String,
    pub printed_training: String,
}

/// Product of sizes, saturating at `u64::MAX` (absurd graphs never overflow).
fn prod(sizes: &[u64]) -> u64 {
    sizes.iter().fold(1u64, |a, v| a.saturating_mul(*v))
}

/// Reproduces accelerate's estimate (weights built in float32; buffers counted).
pub fn accelerate(graph: &Graph, precision: Precision) -> Accelerate {
    let dtype_bytes = |d: &str| match d {
        "int64" | "float64" => 8,
        "int32" | "float32" => 4,
        "float16" | "bfloat16" | "int16" => 2,
        _ => 1,
    };
    let extra_buffers: u64 = graph
        .buffers
        .iter()
        .map(|b| prod(&b.shape).saturating_mul(dtype_bytes(&b.dtype)))
        .fold(0u64, u64::saturating_add);
    let node_bytes = |op: &Op| -> u64 {
        op.parameters().saturating_mul(4).saturating_add(
            op.buffers()
                .iter()
                .map(|(n, b)| n.saturating_mul(*b))
                .fold(0u64, u64::saturating_add),
        )
    };
    let total_bytes = graph
        .nodes
        .iter()
        .map(|n| node_bytes(&n.op))
        .fold(0u64, u64::saturating_add)
        .saturating_add(extra_buffers);
    let largest_layer_bytes = graph
        .nodes
        .iter()
        .map(|n| node_bytes(&n.op))
        .max()
        .unwrap_or(0);
    // estimate_training_usage(bytes = float32 total): float32 -> model 1x, gradients 1x,
    // optimizer 2x, step 4x; float16/bfloat16 -> model 1x, gradients 1.5x, optimizer 2x, step 2x.
    let (training_bytes, dtype_row) = match precision {
        Precision::Fp32 => (total_bytes.saturating_mul(4), "float32"),
        Precision::Bf16Autocast | Precision::Bf16 => {
            let fp16 = total_bytes / 2;
            let m = [
                total_bytes,
                total_bytes.saturating_add(fp16),
                total_bytes.saturating_mul(2),
                total_bytes.saturating_mul(2),
            ];
            (m.into_iter().max().unwrap_or(0), "bfloat16")
        }
    };
    Accelerate {
        total_bytes,
        largest_layer_bytes,
        training_bytes,
        dtype_row,
        printed_largest_layer: accelerate_convert_bytes(largest_layer_bytes as f64),
        printed_total: accelerate_convert_bytes(total_bytes as f64),
        printed_training: accelerate_convert_bytes(training_bytes as f64),
    }
}

/// The textbook formula's inputs and result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Textbook {
    pub parameters: u64,
    pub layers: u64,
    pub batch: u64,
    pub sequence: u64,
    pub hidden: u64,
    pub heads: u64,
    /// 14 bytes x parameters (fp32 master weights, fp16 weights and gradients, Adam states).
    pub model_bytes: u64,
    /// L·B·T·(34d + 5hT): 16-bit activations of eager-attention transformer blocks.
    pub activation_bytes: u64,
    pub total_bytes: u64,
}

/// Why the textbook formula does not apply to a graph.
pub type NotApplicable = String;

/// The activation term alone: L·B·T·(34d + 5hT) bytes.
pub fn textbook_activations(layers: u64, batch: u64, seq: u64, hidden: u64, heads: u64) -> u64 {
    let per_token = prod(&[34, hidden]).saturating_add(prod(&[5, heads, seq]));
    prod(&[layers, batch, seq, per_token])
}

/// The textbook formula, where the graph is a GPT/BERT-style stack: every attention is eager
/// self-attention (`multihead_attention` with one input) of one width, one head count and one
/// sequence length, and there is no recurrent, expert or convolutional layer beyond an input
/// patch embedding.
pub fn textbook(graph: &Graph, batch: u64) -> Result<Textbook, NotApplicable> {
    let mut shape: Option<(u64, u64, u64)> = None;
    let mut layers = 0;
    let mut mixed = false;
    for n in &graph.nodes {
        match n.op.family().textbook(&n.op) {
            TextbookRole::EagerAttention {
                embed_dim,
                num_heads,
            } => {
                if n.inputs.len() != 1 {
                    return Err(format!(
                        "node `{}` is cross-attention; the formula covers self-attention stacks only",
                        n.id
                    ));
                }
                let t = n.output.0[1].as_fixed().unwrap_or(0);
                let this = (embed_dim, num_heads, t);
                if shape.is_some_and(|s| s != this) {
                    mixed = true;
                }
                shape = Some(this);
                layers += 1;
            }
            TextbookRole::SdpaAttention => {
                return Err(format!(
                    "node `{}` runs attention through scaled_dot_product_attention; the formula assumes eager attention",
                    n.id
                ))
            }
            TextbookRole::NotTransformer => {
                return Err(format!(
                    "node `{}` is a `{}` layer; the formula covers transformer blocks only",
                    n.id,
                    n.op.name()
                ))
            }
            TextbookRole::Covered => {}
        }
    }
    if mixed {
        return Err("attention layers differ in width, heads or sequence".into());
    }
    let (hidden, heads, sequence) = shape
        .ok_or_else(|| "no attention layer; the formula covers transformers only".to_string())?;
    let parameters = graph.parameters();
    let model_bytes = parameters.saturating_mul(14);
    let activation_bytes = textbook_activations(layers, batch, sequence, hidden, heads);
    Ok(Textbook {
        parameters,
        layers,
        batch,
        sequence,
        hidden,
        heads,
        model_bytes,
        activation_bytes,
        total_bytes: model_bytes.saturating_add(activation_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn korthikanti_worked_example() {
        // L=12, B=8, T=512, d=768, h=12: 2,793,406,464 bytes (the widely quoted 2.1 GB is wrong).
        assert_eq!(textbook_activations(12, 8, 512, 768, 12), 2_793_406_464);
    }
}
