//! The table of ops: each name in the file format with its attribute parser.

use super::attributes::{at_most, conv, pool, positive, rnn, Attrs, MAX_REPEATS};
use super::*;
use serde_json::{Map, Value};

/// Every op name the format knows, in the table's order (for error messages).
pub fn op_names() -> Vec<&'static str> {
    OPS.iter().map(|(_, n, _)| *n).collect()
}

/// The name of an op kind in the file format: its entry in the table (entry `k as usize` is
/// kind `k`; a test checks it).
pub(super) fn kind_name(k: OpKind) -> &'static str {
    OPS[k as usize].1
}

/// Every op of the format, in [`OpKind`] order: its kind, its name in the file (written here
/// only: [`Op::name`] and an op's `Display` read it from this table) and how its attributes
/// parse (the error names the attribute). [`Op::parse`] reads this table, a test checks that
/// every entry round-trips, and the unknown-op message lists these names.
type Parser = fn(&mut Attrs) -> Result<Op, String>;

static OPS: &[(OpKind, &str, Parser)] = &[
    (OpKind::Linear, "linear", |a| {
        Ok(Op::Linear {
            in_features: a.size("in_features")?,
            out_features: a.size("out_features")?,
            bias: a.flag_or("bias", true)?,
            tie: match a.get("tie") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => {
                    return Err(format!(
                        "attribute `tie` must name an embedding node, found {v}"
                    ))
                }
            },
        })
    }),
    (OpKind::Embedding, "embedding", |a| {
        Ok(Op::Embedding {
            num_embeddings: a.size("num_embeddings")?,
            embedding_dim: a.size("embedding_dim")?,
            tie: match a.get("tie") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => {
                    return Err(format!(
                        "attribute `tie` must name an embedding node, found {v}"
                    ))
                }
            },
        })
    }),
    (OpKind::Conv1d, "conv1d", |a| Ok(Op::Conv1d(conv(a)?))),
    (OpKind::Conv2d, "conv2d", |a| Ok(Op::Conv2d(conv(a)?))),
    (OpKind::ConvTranspose2d, "conv_transpose2d", |a| {
        Ok(Op::ConvTranspose2d(ConvTranspose {
            in_channels: a.size("in_channels")?,
            out_channels: a.size("out_channels")?,
            kernel_size: a.size("kernel_size")?,
            stride: a.size_or("stride", 1)?,
            padding: a.count_or("padding", 0)?,
            output_padding: a.count_or("output_padding", 0)?,
            bias: a.flag_or("bias", true)?,
        }))
    }),
    (OpKind::BatchNorm, "batch_norm", |a| {
        Ok(Op::BatchNorm {
            num_features: a.size("num_features")?,
        })
    }),
    (OpKind::LayerNorm, "layer_norm", |a| {
        Ok(Op::LayerNorm {
            normalized_shape: a.size("normalized_shape")?,
            bias: a.flag_or("bias", true)?,
        })
    }),
    (OpKind::RmsNorm, "rms_norm", |a| {
        Ok(Op::RmsNorm {
            dim: a.size("dim")?,
        })
    }),
    (OpKind::GroupNorm, "group_norm", |a| {
        Ok({
            let num_groups = a.size("num_groups")?;
            let num_channels = a.size("num_channels")?;
            if !num_channels.is_multiple_of(num_groups) {
                return Err(format!(
                    "num_groups = {num_groups} must divide num_channels = {num_channels}"
                ));
            }
            Op::GroupNorm {
                num_groups,
                num_channels,
            }
        })
    }),
    (OpKind::Relu, "relu", |_| {
        Ok(Op::Activation(Activation::Relu))
    }),
    (OpKind::Gelu, "gelu", |a| match a.get("approximate") {
        None => Ok(Op::Activation(Activation::Gelu)),
        Some(Value::String(s)) if s == "none" => Ok(Op::Activation(Activation::Gelu)),
        Some(Value::String(s)) if s == "tanh" => Ok(Op::Activation(Activation::GeluTanh)),
        Some(v) => Err(format!(
            "attribute `approximate` must be \"none\" or \"tanh\" (torch's gelu), found {v}"
        )),
    }),
    (OpKind::Silu, "silu", |_| {
        Ok(Op::Activation(Activation::Silu))
    }),
    (OpKind::Tanh, "tanh", |_| {
        Ok(Op::Activation(Activation::Tanh))
    }),
    (OpKind::Dropout, "dropout", |a| {
        Ok({
            let p = match a.get("p") {
                None => return Err("missing attribute `p` (a probability)".into()),
                Some(v) => v
                    .as_f64()
                    .filter(|p| (0.0..1.0).contains(p))
                    .ok_or_else(|| {
                        format!("attribute `p` must be a number in [0, 1), found {v}")
                    })?,
            };
            Op::Dropout { p }
        })
    }),
    (OpKind::Add, "add", |_| Ok(Op::Add)),
    (OpKind::Mul, "mul", |_| Ok(Op::Mul)),
    (OpKind::Sub, "sub", |_| Ok(Op::Sub)),
    (OpKind::Div, "div", |_| Ok(Op::Div)),
    (OpKind::Unary, "unary", |a| {
        let names = || UNARY_FNS.iter().map(|e| e.0).collect::<Vec<_>>().join(", ");
        let entry = match a.get("fn") {
            Some(Value::String(f)) => UnaryFn::lookup(f).ok_or_else(|| {
                format!(
                    "attribute `fn`: unknown function `{f}` (known: {})",
                    names()
                )
            })?,
            Some(v) => return Err(format!("attribute `fn` must be a function name, found {v}")),
            None => return Err(format!("missing attribute `fn` (one of: {})", names())),
        };
        let scalar = match entry.2 {
            None => 0.0,
            Some(key) => match a.get(key) {
                Some(v) => v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                    format!("attribute `{key}` must be a finite number, found {v}")
                })?,
                None => {
                    return Err(format!(
                        "missing attribute `{key}` (a number) for `{}`",
                        entry.0
                    ))
                }
            },
        };
        Ok(Op::Unary((entry.3)(scalar)))
    }),
    (OpKind::Concat, "concat", |a| {
        Ok(Op::Concat { dim: a.int("dim")? })
    }),
    (OpKind::Upsample, "upsample", |a| {
        Ok(Op::Upsample {
            scale_factor: a.size("scale_factor")?,
        })
    }),
    (OpKind::MaxPool, "max_pool", |a| Ok(Op::MaxPool(pool(a)?))),
    (OpKind::AvgPool, "avg_pool", |a| Ok(Op::AvgPool(pool(a)?))),
    (OpKind::AdaptiveAvgPool, "adaptive_avg_pool", |a| {
        Ok(Op::AdaptiveAvgPool {
            output_size: a.size("output_size")?,
        })
    }),
    (OpKind::Flatten, "flatten", |a| {
        Ok(Op::Flatten {
            start_dim: a.int_or("start_dim", 1)?,
            end_dim: a.int_or("end_dim", -1)?,
        })
    }),
    (OpKind::Reshape, "reshape", |a| {
        Ok({
            let entries = match a.get("shape") {
                Some(Value::Array(v)) => v,
                Some(v) => return Err(format!("attribute `shape` must be a list, found {v}")),
                None => return Err("missing attribute `shape` (a list)".into()),
            };
            let mut shape = Vec::with_capacity(entries.len());
            for e in entries {
                shape.push(match e {
                    Value::String(s) if s == "B" => ReshapeDim::Batch,
                    v if v.as_i64() == Some(-1) => ReshapeDim::Infer,
                    v => ReshapeDim::Fixed(positive("shape", v).map_err(|_| {
                        format!(
                            "`shape` entries must be \"B\", -1 or a positive integer, found {v}"
                        )
                    })?),
                });
            }
            if shape.iter().filter(|d| **d == ReshapeDim::Infer).count() > 1 {
                return Err("attribute `shape` may hold at most one -1".into());
            }
            Op::Reshape { shape }
        })
    }),
    (OpKind::Permute, "permute", |a| {
        Ok({
            let dims = match a.get("dims") {
                Some(Value::Array(v)) => v
                    .iter()
                    .map(|d| {
                        d.as_i64()
                            .ok_or_else(|| format!("`dims` entries must be integers, found {d}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Some(v) => return Err(format!("attribute `dims` must be a list, found {v}")),
                None => return Err("missing attribute `dims` (a list)".into()),
            };
            Op::Permute { dims }
        })
    }),
    (OpKind::SelectToken, "select_token", |a| {
        Ok(Op::SelectToken {
            index: a.int("index")?,
        })
    }),
    (OpKind::Softmax, "softmax", |a| {
        Ok(Op::Softmax { dim: a.int("dim")? })
    }),
    (OpKind::Mean, "mean", |a| {
        Ok(Op::Mean {
            dim: a.int("dim")?,
            keepdim: a.flag_or("keepdim", false)?,
        })
    }),
    (OpKind::CrossEntropy, "cross_entropy", |_| {
        Ok(Op::CrossEntropy)
    }),
    (OpKind::Mse, "mse", |_| Ok(Op::Mse)),
    (OpKind::MultiheadAttention, "multihead_attention", |a| {
        Ok({
            let embed_dim = a.size("embed_dim")?;
            let num_heads = a.size("num_heads")?;
            if !embed_dim.is_multiple_of(num_heads) {
                return Err(format!(
                    "num_heads = {num_heads} must divide embed_dim = {embed_dim}"
                ));
            }
            let relative_attention_buckets = a.count_or("relative_attention_buckets", 0)?;
            let sdpa = a.one_of("backend", &[("eager", false), ("sdpa", true)], false)?;
            if sdpa && relative_attention_buckets > 0 {
                return Err("backend \"sdpa\" takes no relative_attention_buckets (a relative position bias is added to materialised scores: eager)".into());
            }
            let dropout = match a.get("dropout") {
                None => 0.0,
                Some(v) => v
                    .as_f64()
                    .filter(|p| (0.0..1.0).contains(p))
                    .ok_or_else(|| {
                        format!("attribute `dropout` must be a number in [0, 1), found {v}")
                    })?,
            };
            let kdim = match a.get("kdim") {
                None => embed_dim,
                Some(_) => a.size("kdim")?,
            };
            let torch_impl = a.one_of("impl", &[("separate", false), ("torch", true)], false)?;
            let batch_first = a.flag_or("batch_first", true)?;
            if !batch_first && !torch_impl {
                return Err("batch_first: false takes impl \"torch\" (torch.nn.MultiheadAttention's own [T, B, E] layout)".into());
            }
            if torch_impl && !sdpa {
                return Err("impl \"torch\" takes backend \"sdpa\" (torch.nn.MultiheadAttention with need_weights=False; its eager path is not drawn yet)".into());
            }
            Op::MultiheadAttention {
                embed_dim,
                num_heads,
                causal: a.flag_or("causal", false)?,
                bias: a.flag_or("bias", true)?,
                relative_attention_buckets,
                sdpa,
                dropout,
                kdim,
                torch_impl,
                batch_first,
            }
        })
    }),
    (OpKind::GqaAttention, "gqa_attention", |a| {
        Ok({
            let embed_dim = a.size("embed_dim")?;
            let num_heads = a.size("num_heads")?;
            let num_kv_heads = a.size("num_kv_heads")?;
            if !num_heads.is_multiple_of(num_kv_heads) {
                return Err(format!(
                    "num_kv_heads = {num_kv_heads} must divide num_heads = {num_heads}"
                ));
            }
            if a.map.get("head_dim").is_none() && !embed_dim.is_multiple_of(num_heads) {
                return Err(format!(
                    "num_heads = {num_heads} must divide embed_dim = {embed_dim} (or give head_dim)"
                ));
            }
            // `bias`: false, true (all four projections) or "qkv" (q, k and v only).
            let (bias, out_bias) = match a.get("bias") {
                None => (false, false),
                Some(Value::Bool(b)) => (*b, *b),
                Some(Value::String(s)) if s == "qkv" => (true, false),
                Some(v) => {
                    return Err(format!(
                        "attribute `bias` must be true, false or \"qkv\", found {v}"
                    ))
                }
            };
            Op::GqaAttention {
                embed_dim,
                num_heads,
                num_kv_heads,
                head_dim: a.size_or("head_dim", embed_dim / num_heads)?,
                causal: a.flag_or("causal", true)?,
                bias,
                out_bias,
                repeat_kv: a.flag_or("repeat_kv", true)?,
                qk_norm: a.flag_or("qk_norm", false)?,
            }
        })
    }),
    (OpKind::MlaAttention, "mla_attention", |a| {
        Ok(Op::MlaAttention {
            embed_dim: a.size("embed_dim")?,
            num_heads: a.size("num_heads")?,
            q_lora_rank: a.count_or("q_lora_rank", 0)?,
            kv_lora_rank: a.size("kv_lora_rank")?,
            qk_nope_head_dim: a.size("qk_nope_head_dim")?,
            qk_rope_head_dim: a.size("qk_rope_head_dim")?,
            v_head_dim: a.size("v_head_dim")?,
            causal: a.flag_or("causal", true)?,
        })
    }),
    (OpKind::Moe, "moe", |a| {
        Ok({
            let num_experts = at_most("num_experts", a.size("num_experts")?, MAX_REPEATS)?;
            let top_k = a.size("top_k")?;
            if top_k > num_experts {
                return Err(format!(
                    "top_k = {top_k} exceeds num_experts = {num_experts}"
                ));
            }
            Op::Moe {
                dim: a.size("dim")?,
                hidden: a.size("hidden")?,
                num_experts,
                top_k,
                grouped: a.one_of("layout", &[("per_expert", false), ("grouped", true)], false)?,
                renormalize: a.flag_or("renormalize", true)?,
            }
        })
    }),
    (OpKind::Lstm, "lstm", |a| Ok(Op::Lstm(rnn(a)?))),
    (OpKind::Gru, "gru", |a| Ok(Op::Gru(rnn(a)?))),
    (OpKind::LearnedPosition, "learned_position", |a| {
        Ok(Op::LearnedPosition {
            num_positions: a.size("num_positions")?,
            dim: a.size("dim")?,
        })
    }),
    (OpKind::PrependToken, "prepend_token", |a| {
        Ok(Op::PrependToken {
            dim: a.size("dim")?,
        })
    }),
    (OpKind::Parameter, "parameter", |a| {
        Ok({
            let entries = match a.get("shape") {
                Some(Value::Array(v)) if !v.is_empty() => v,
                Some(v) => {
                    return Err(format!(
                        "attribute `shape` must be a non-empty list of sizes, found {v}"
                    ))
                }
                None => return Err("missing attribute `shape` (a list of sizes)".into()),
            };
            let shape = entries
                .iter()
                .map(|e| positive("shape", e))
                .collect::<Result<Vec<u64>, String>>()?;
            Op::Parameter { shape }
        })
    }),
    (OpKind::Matmul, "matmul", |_| Ok(Op::Matmul)),
    (OpKind::Slice, "slice", |a| {
        Ok({
            let dim = a.int("dim")?;
            let start = a.count_or("start", 0)?;
            let end = a.size("end")?;
            if end <= start {
                return Err(format!("`end` = {end} must exceed `start` = {start}"));
            }
            Op::Slice { dim, start, end }
        })
    }),
    (OpKind::Sdpa, "sdpa", |a| {
        Ok(Op::Sdpa {
            causal: a.flag_or("causal", false)?,
            enable_gqa: a.flag_or("enable_gqa", false)?,
        })
    }),
    (OpKind::Constant, "constant", |a| {
        let dtype = a.one_of(
            "dtype",
            &[
                ("float32", ConstantDType::Float32),
                ("bool", ConstantDType::Bool),
            ],
            ConstantDType::Float32,
        )?;
        Ok(Op::Constant {
            shape: batch_or_sizes(a)?,
            dtype,
        })
    }),
    (OpKind::Expand, "expand", |a| {
        Ok(Op::Expand {
            shape: batch_or_sizes(a)?,
        })
    }),
    (OpKind::Aten, "aten", |a| {
        let node = super::generic::AtenNode::parse(a.map)?;
        a.use_all();
        Ok(Op::Aten(Box::new(node)))
    }),
];

/// Attribute `shape`: a non-empty list of `"B"` and positive sizes.
fn batch_or_sizes(a: &mut Attrs) -> Result<Vec<ReshapeDim>, String> {
    let entries = match a.get("shape") {
        Some(Value::Array(v)) if !v.is_empty() => v,
        Some(v) => {
            return Err(format!(
                "attribute `shape` must be a non-empty list of \"B\" and sizes, found {v}"
            ))
        }
        None => return Err("missing attribute `shape` (a list of \"B\" and sizes)".into()),
    };
    let mut shape = Vec::with_capacity(entries.len());
    for e in entries {
        shape.push(match e {
            Value::String(s) if s == "B" => ReshapeDim::Batch,
            v => ReshapeDim::Fixed(positive("shape", v).map_err(|_| {
                format!("`shape` entries must be \"B\" or a positive integer, found {v}")
            })?),
        });
    }
    Ok(shape)
}

impl Op {
    /// Parses an op from its name and attribute map. The error text names the attribute.
    pub fn parse(name: &str, attributes: &Map<String, Value>) -> Result<Op, String> {
        let mut a = Attrs::new(attributes);
        let Some((_, _, parse)) = OPS.iter().find(|(_, n, _)| *n == name) else {
            return Err(format!(
                "unknown op `{name}` (known ops: {}; any ATen call can be drawn as a generic `aten` node: docs/graph-format.md)",
                op_names().join(", ")
            ));
        };
        let op = parse(&mut a)?;
        a.finish()?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_kind_order() {
        for (i, (k, n, _)) in OPS.iter().enumerate() {
            assert_eq!(*k as usize, i, "entry {i} (`{n}`) is out of OpKind order");
        }
        assert_eq!(OPS.len(), OpKind::LAST as usize + 1);
    }
}
