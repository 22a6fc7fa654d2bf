//! What an op owns: its trainable parameter tensors and the buffers torch registers for it.

use super::Op;

impl Op {
    /// Shapes of the trainable parameter tensors this op owns (a tied weight is owned by the
    /// embedding and not listed here).
    pub fn parameter_tensors(&self) -> Vec<Vec<u64>> {
        let mut p = Vec::new();
        match self {
            Op::Linear {
                in_features,
                out_features,
                bias,
                tie,
            } => {
                if tie.is_none() {
                    p.push(vec![*out_features, *in_features]);
                }
                if *bias {
                    p.push(vec![*out_features]);
                }
            }
            Op::Embedding {
                num_embeddings,
                embedding_dim,
                tie: None,
            } => p.push(vec![*num_embeddings, *embedding_dim]),
            // A tied embedding reads another's table and owns none.
            Op::Embedding { tie: Some(_), .. } => {}
            Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => self.conv_parameters(&mut p),
            Op::BatchNorm { num_features: c } => {
                p.push(vec![*c]);
                p.push(vec![*c]);
            }
            Op::LayerNorm {
                normalized_shape: d,
                bias,
            } => {
                p.push(vec![*d]);
                if *bias {
                    p.push(vec![*d]);
                }
            }
            Op::RmsNorm { dim } => p.push(vec![*dim]),
            Op::GroupNorm { num_channels, .. } => {
                p.push(vec![*num_channels]);
                p.push(vec![*num_channels]);
            }
            Op::MultiheadAttention { .. } | Op::GqaAttention { .. } | Op::MlaAttention { .. } => {
                self.attention_parameters(&mut p)
            }
            Op::Moe {
                dim,
                hidden,
                num_experts,
                grouped,
                ..
            } => {
                p.push(vec![*num_experts, *dim]);
                if *grouped {
                    // transformers' 3-D `gate_up_proj` and `down_proj`.
                    p.push(vec![*num_experts, 2 * hidden, *dim]);
                    p.push(vec![*num_experts, *dim, *hidden]);
                }
                for _ in 0..if *grouped { 0 } else { *num_experts } {
                    p.push(vec![*hidden, *dim]);
                    p.push(vec![*hidden, *dim]);
                    p.push(vec![*dim, *hidden]);
                }
            }
            Op::Lstm(r) | Op::Gru(r) => {
                let gates = if matches!(self, Op::Lstm(_)) { 4 } else { 3 };
                let h = r.hidden_size;
                for layer in 0..r.num_layers {
                    let input = if layer == 0 {
                        r.input_size
                    } else {
                        h.saturating_mul(r.directions())
                    };
                    let gh = h.saturating_mul(gates);
                    for _ in 0..r.directions() {
                        p.push(vec![gh, input]);
                        p.push(vec![gh, h]);
                        p.push(vec![gh]);
                        p.push(vec![gh]);
                    }
                }
            }
            Op::LearnedPosition { num_positions, dim } => p.push(vec![*num_positions, *dim]),
            Op::PrependToken { dim } => p.push(vec![*dim]),
            Op::Parameter { shape } => p.push(shape.clone()),
            // Its parameters, shared ones included (the graph counts a shared name once).
            Op::Aten(a) => p.extend(a.parameter_tensors()),
            // No trainable parameter (listed, not a fallback: a new op must say).
            Op::Activation(_)
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
            | Op::Matmul
            | Op::Slice { .. }
            | Op::Sdpa { .. }
            | Op::Constant { .. }
            | Op::Expand { .. } => {}
        }
        p
    }

    /// The convolutions' weights (and biases).
    fn conv_parameters(&self, p: &mut Vec<Vec<u64>>) {
        match self {
            Op::Conv1d(c) => {
                p.push(vec![
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            Op::Conv2d(c) => {
                p.push(vec![
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel_size,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            Op::ConvTranspose2d(c) => {
                p.push(vec![
                    c.in_channels,
                    c.out_channels,
                    c.kernel_size,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            _ => unreachable!("conv_parameters: not a convolution"),
        }
    }

    /// The attention layers' projections (and biases, relative position bias, q/k norms).
    fn attention_parameters(&self, p: &mut Vec<Vec<u64>>) {
        match self {
            Op::MultiheadAttention {
                embed_dim: d,
                bias,
                kdim,
                torch_impl: true,
                ..
            } => {
                // torch.nn.MultiheadAttention's own: in_proj_weight [3d, d] (or q, k and v
                // weights when kdim is not d), in_proj_bias [3d], out_proj.
                if kdim == d {
                    p.push(vec![3 * d, *d]);
                } else {
                    p.extend([vec![*d, *d], vec![*d, *kdim], vec![*d, *kdim]]);
                }
                if *bias {
                    p.push(vec![3 * d]);
                }
                p.push(vec![*d, *d]);
                if *bias {
                    p.push(vec![*d]);
                }
            }
            Op::MultiheadAttention {
                embed_dim: d,
                num_heads,
                bias,
                relative_attention_buckets,
                kdim,
                ..
            } => {
                // q, k, v, out: k and v take the memory's width (kdim) to d.
                for width in [*d, *kdim, *kdim, *d] {
                    p.push(vec![*d, width]);
                    if *bias {
                        p.push(vec![*d]);
                    }
                }
                if *relative_attention_buckets > 0 {
                    p.push(vec![*relative_attention_buckets, *num_heads]);
                }
            }
            Op::GqaAttention {
                embed_dim: d,
                num_heads,
                num_kv_heads,
                head_dim,
                bias,
                out_bias,
                qk_norm,
                ..
            } => {
                let q = num_heads.saturating_mul(*head_dim);
                let kv = num_kv_heads.saturating_mul(*head_dim);
                for (o, i, b) in [
                    (q, *d, *bias),
                    (kv, *d, *bias),
                    (kv, *d, *bias),
                    (*d, q, *out_bias),
                ] {
                    p.push(vec![o, i]);
                    if b {
                        p.push(vec![o]);
                    }
                }
                if *qk_norm {
                    // q_norm and k_norm: one weight of head_dim each, after the projections.
                    p.push(vec![*head_dim]);
                    p.push(vec![*head_dim]);
                }
            }
            Op::MlaAttention {
                embed_dim: d,
                num_heads: h,
                q_lora_rank,
                kv_lora_rank,
                qk_nope_head_dim,
                qk_rope_head_dim,
                v_head_dim,
                ..
            } => {
                let qk = qk_nope_head_dim.saturating_add(*qk_rope_head_dim);
                let hqk = h.saturating_mul(qk);
                if *q_lora_rank > 0 {
                    p.push(vec![*q_lora_rank, *d]);
                    p.push(vec![*q_lora_rank]);
                    p.push(vec![hqk, *q_lora_rank]);
                } else {
                    p.push(vec![hqk, *d]);
                }
                p.push(vec![kv_lora_rank.saturating_add(*qk_rope_head_dim), *d]);
                p.push(vec![*kv_lora_rank]);
                p.push(vec![
                    h.saturating_mul(qk_nope_head_dim.saturating_add(*v_head_dim)),
                    *kv_lora_rank,
                ]);
                p.push(vec![*d, h.saturating_mul(*v_head_dim)]);
            }
            _ => unreachable!("attention_parameters: not an attention layer"),
        }
    }

    /// Trainable parameters this op owns.
    pub fn parameters(&self) -> u64 {
        self.parameter_tensors()
            .iter()
            .map(|s| s.iter().fold(1u64, |a, v| a.saturating_mul(*v)))
            .fold(0u64, u64::saturating_add)
    }

    /// Buffers torch registers for the op, as (elements, bytes per element). Batch norm keeps
    /// running mean and variance (float32) and a batch counter (int64).
    pub fn buffers(&self) -> Vec<(u64, u64)> {
        match self {
            Op::BatchNorm { num_features } => vec![(*num_features, 4), (*num_features, 4), (1, 8)],
            // No registered buffer (listed, not a fallback: a new op must say).
            Op::Linear { .. }
            | Op::Embedding { .. }
            | Op::Conv1d(_)
            | Op::Conv2d(_)
            | Op::ConvTranspose2d(_)
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
            | Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Moe { .. }
            | Op::Lstm(_)
            | Op::Gru(_)
            | Op::LearnedPosition { .. }
            | Op::PrependToken { .. }
            | Op::Parameter { .. }
            | Op::Matmul
            | Op::Slice { .. }
            | Op::Sdpa { .. }
            | Op::Constant { .. }
            | Op::Expand { .. }
            | Op::Aten(_) => Vec::new(),
        }
    }
}
