//! The op table: every op of `memcal-graph/1`, its typed attributes, its shape rule, its trainable
//! parameter tensors and the buffers torch registers for it. See `docs/graph-format.md`.

use crate::shape::{Dim, Shape};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Elementwise activation functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    Relu,
    Gelu,
    Silu,
    Tanh,
}

/// Convolution attributes (1-d and 2-d; square kernels).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conv {
    pub in_channels: u64,
    pub out_channels: u64,
    pub kernel_size: u64,
    pub stride: u64,
    pub padding: u64,
    pub groups: u64,
    pub bias: bool,
}

/// Transposed 2-d convolution attributes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvTranspose {
    pub in_channels: u64,
    pub out_channels: u64,
    pub kernel_size: u64,
    pub stride: u64,
    pub padding: u64,
    pub output_padding: u64,
    pub bias: bool,
}

/// Pooling attributes (1-d or 2-d by input rank).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pool {
    pub kernel_size: u64,
    pub stride: u64,
    pub padding: u64,
}

/// Recurrent layer attributes (batch first, both biases).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rnn {
    pub input_size: u64,
    pub hidden_size: u64,
    pub num_layers: u64,
    pub bidirectional: bool,
}

impl Rnn {
    pub fn directions(&self) -> u64 {
        if self.bidirectional {
            2
        } else {
            1
        }
    }
}

/// One entry of a `reshape` target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum ReshapeDim {
    Batch,
    Fixed(u64),
    Infer,
}

/// A typed op with its attributes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    Linear {
        in_features: u64,
        out_features: u64,
        bias: bool,
        tie: Option<String>,
    },
    Embedding {
        num_embeddings: u64,
        embedding_dim: u64,
        /// Another embedding whose table this one reads (T5's shared table used by encoder and
        /// decoder); a tied embedding owns no parameters.
        tie: Option<String>,
    },
    Conv1d(Conv),
    Conv2d(Conv),
    ConvTranspose2d(ConvTranspose),
    BatchNorm {
        num_features: u64,
    },
    LayerNorm {
        normalized_shape: u64,
        bias: bool,
    },
    RmsNorm {
        dim: u64,
    },
    GroupNorm {
        num_groups: u64,
        num_channels: u64,
    },
    Activation(Activation),
    Dropout {
        p: f64,
    },
    Add,
    Mul,
    Concat {
        dim: i64,
    },
    Upsample {
        scale_factor: u64,
    },
    MaxPool(Pool),
    AvgPool(Pool),
    AdaptiveAvgPool {
        output_size: u64,
    },
    Flatten {
        start_dim: i64,
        end_dim: i64,
    },
    Reshape {
        shape: Vec<ReshapeDim>,
    },
    Permute {
        dims: Vec<i64>,
    },
    SelectToken {
        index: i64,
    },
    Softmax {
        dim: i64,
    },
    CrossEntropy,
    Mse,
    MultiheadAttention {
        embed_dim: u64,
        num_heads: u64,
        causal: bool,
        bias: bool,
        relative_attention_buckets: u64,
    },
    GqaAttention {
        embed_dim: u64,
        num_heads: u64,
        num_kv_heads: u64,
        head_dim: u64,
        causal: bool,
        bias: bool,
    },
    MlaAttention {
        embed_dim: u64,
        num_heads: u64,
        q_lora_rank: u64,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
        causal: bool,
    },
    Moe {
        dim: u64,
        hidden: u64,
        num_experts: u64,
        top_k: u64,
    },
    Lstm(Rnn),
    Gru(Rnn),
    LearnedPosition {
        num_positions: u64,
        dim: u64,
    },
    PrependToken {
        dim: u64,
    },
}

/// Every op name the format knows, for error messages.
pub const OP_NAMES: &[&str] = &[
    "linear",
    "embedding",
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "batch_norm",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "relu",
    "gelu",
    "silu",
    "tanh",
    "dropout",
    "add",
    "mul",
    "concat",
    "upsample",
    "max_pool",
    "avg_pool",
    "adaptive_avg_pool",
    "flatten",
    "reshape",
    "permute",
    "select_token",
    "softmax",
    "cross_entropy",
    "mse",
    "multihead_attention",
    "gqa_attention",
    "mla_attention",
    "moe",
    "lstm",
    "gru",
    "learned_position",
    "prepend_token",
];

/// Reads typed attributes and rejects unknown ones.
struct Attrs<'a> {
    map: &'a Map<String, Value>,
    used: BTreeSet<&'static str>,
}

impl<'a> Attrs<'a> {
    fn new(map: &'a Map<String, Value>) -> Self {
        Attrs {
            map,
            used: BTreeSet::new(),
        }
    }

    fn get(&mut self, key: &'static str) -> Option<&'a Value> {
        self.used.insert(key);
        self.map.get(key)
    }

    fn size(&mut self, key: &'static str) -> Result<u64, String> {
        match self.get(key) {
            None => Err(format!("missing attribute `{key}` (a positive integer)")),
            Some(v) => positive(key, v),
        }
    }

    fn size_or(&mut self, key: &'static str, default: u64) -> Result<u64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => positive(key, v),
        }
    }

    fn count_or(&mut self, key: &'static str, default: u64) -> Result<u64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!("attribute `{key}` must be a non-negative integer, found {v}")
            }),
        }
    }

    fn int_or(&mut self, key: &'static str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| format!("attribute `{key}` must be an integer, found {v}")),
        }
    }

    fn int(&mut self, key: &'static str) -> Result<i64, String> {
        match self.get(key) {
            None => Err(format!("missing attribute `{key}` (an integer)")),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| format!("attribute `{key}` must be an integer, found {v}")),
        }
    }

    fn flag_or(&mut self, key: &'static str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("attribute `{key}` must be true or false, found {v}")),
        }
    }

    fn finish(self) -> Result<(), String> {
        let unknown: Vec<&String> = self
            .map
            .keys()
            .filter(|k| !self.used.contains(k.as_str()))
            .collect();
        match unknown.first() {
            None => Ok(()),
            Some(k) => {
                let mut known: Vec<&str> = self.used.iter().copied().collect();
                known.sort_unstable();
                Err(format!(
                    "unknown attribute `{k}` (this op takes: {})",
                    if known.is_empty() {
                        "no attributes".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            }
        }
    }
}

fn positive(key: &str, v: &Value) -> Result<u64, String> {
    match v.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "attribute `{key}` must be a positive integer, found {v}"
        )),
    }
}

/// The most experts or recurrent layers one node may have: each gets its own parameter tensors,
/// so a larger count is a typo (and would take unbounded memory to enumerate).
pub const MAX_REPEATS: u64 = 1 << 16;

fn at_most(key: &str, n: u64, max: u64) -> Result<u64, String> {
    if n <= max {
        Ok(n)
    } else {
        Err(format!(
            "attribute `{key}` must be at most {max}, found {n}; check the value"
        ))
    }
}

fn conv(a: &mut Attrs) -> Result<Conv, String> {
    let c = Conv {
        in_channels: a.size("in_channels")?,
        out_channels: a.size("out_channels")?,
        kernel_size: a.size("kernel_size")?,
        stride: a.size_or("stride", 1)?,
        padding: a.count_or("padding", 0)?,
        groups: a.size_or("groups", 1)?,
        bias: a.flag_or("bias", true)?,
    };
    if !c.in_channels.is_multiple_of(c.groups) || !c.out_channels.is_multiple_of(c.groups) {
        return Err(format!(
            "groups = {} must divide in_channels = {} and out_channels = {}",
            c.groups, c.in_channels, c.out_channels
        ));
    }
    Ok(c)
}

fn pool(a: &mut Attrs) -> Result<Pool, String> {
    let kernel_size = a.size("kernel_size")?;
    Ok(Pool {
        kernel_size,
        stride: a.size_or("stride", kernel_size)?,
        padding: a.count_or("padding", 0)?,
    })
}

fn rnn(a: &mut Attrs) -> Result<Rnn, String> {
    Ok(Rnn {
        input_size: a.size("input_size")?,
        hidden_size: a.size("hidden_size")?,
        num_layers: at_most("num_layers", a.size_or("num_layers", 1)?, MAX_REPEATS)?,
        bidirectional: a.flag_or("bidirectional", false)?,
    })
}

impl Op {
    /// Parses an op from its name and attribute map. The error text names the attribute.
    pub fn parse(name: &str, attributes: &Map<String, Value>) -> Result<Op, String> {
        let mut a = Attrs::new(attributes);
        let op = match name {
            "linear" => Op::Linear {
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
            },
            "embedding" => Op::Embedding {
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
            },
            "conv1d" => Op::Conv1d(conv(&mut a)?),
            "conv2d" => Op::Conv2d(conv(&mut a)?),
            "conv_transpose2d" => Op::ConvTranspose2d(ConvTranspose {
                in_channels: a.size("in_channels")?,
                out_channels: a.size("out_channels")?,
                kernel_size: a.size("kernel_size")?,
                stride: a.size_or("stride", 1)?,
                padding: a.count_or("padding", 0)?,
                output_padding: a.count_or("output_padding", 0)?,
                bias: a.flag_or("bias", true)?,
            }),
            "batch_norm" => Op::BatchNorm {
                num_features: a.size("num_features")?,
            },
            "layer_norm" => Op::LayerNorm {
                normalized_shape: a.size("normalized_shape")?,
                bias: a.flag_or("bias", true)?,
            },
            "rms_norm" => Op::RmsNorm {
                dim: a.size("dim")?,
            },
            "group_norm" => {
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
            }
            "relu" => Op::Activation(Activation::Relu),
            "gelu" => Op::Activation(Activation::Gelu),
            "silu" => Op::Activation(Activation::Silu),
            "tanh" => Op::Activation(Activation::Tanh),
            "dropout" => {
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
            }
            "add" => Op::Add,
            "mul" => Op::Mul,
            "concat" => Op::Concat { dim: a.int("dim")? },
            "upsample" => Op::Upsample {
                scale_factor: a.size("scale_factor")?,
            },
            "max_pool" => Op::MaxPool(pool(&mut a)?),
            "avg_pool" => Op::AvgPool(pool(&mut a)?),
            "adaptive_avg_pool" => Op::AdaptiveAvgPool {
                output_size: a.size("output_size")?,
            },
            "flatten" => Op::Flatten {
                start_dim: a.int_or("start_dim", 1)?,
                end_dim: a.int_or("end_dim", -1)?,
            },
            "reshape" => {
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
                            format!("`shape` entries must be \"B\", -1 or a positive integer, found {v}")
                        })?),
                    });
                }
                if shape.iter().filter(|d| **d == ReshapeDim::Infer).count() > 1 {
                    return Err("attribute `shape` may hold at most one -1".into());
                }
                Op::Reshape { shape }
            }
            "permute" => {
                let dims = match a.get("dims") {
                    Some(Value::Array(v)) => v
                        .iter()
                        .map(|d| {
                            d.as_i64().ok_or_else(|| {
                                format!("`dims` entries must be integers, found {d}")
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                    Some(v) => return Err(format!("attribute `dims` must be a list, found {v}")),
                    None => return Err("missing attribute `dims` (a list)".into()),
                };
                Op::Permute { dims }
            }
            "select_token" => Op::SelectToken {
                index: a.int("index")?,
            },
            "softmax" => Op::Softmax { dim: a.int("dim")? },
            "cross_entropy" => Op::CrossEntropy,
            "mse" => Op::Mse,
            "multihead_attention" => {
                let embed_dim = a.size("embed_dim")?;
                let num_heads = a.size("num_heads")?;
                if !embed_dim.is_multiple_of(num_heads) {
                    return Err(format!(
                        "num_heads = {num_heads} must divide embed_dim = {embed_dim}"
                    ));
                }
                Op::MultiheadAttention {
                    embed_dim,
                    num_heads,
                    causal: a.flag_or("causal", false)?,
                    bias: a.flag_or("bias", true)?,
                    relative_attention_buckets: a.count_or("relative_attention_buckets", 0)?,
                }
            }
            "gqa_attention" => {
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
                Op::GqaAttention {
                    embed_dim,
                    num_heads,
                    num_kv_heads,
                    head_dim: a.size_or("head_dim", embed_dim / num_heads)?,
                    causal: a.flag_or("causal", true)?,
                    bias: a.flag_or("bias", false)?,
                }
            }
            "mla_attention" => Op::MlaAttention {
                embed_dim: a.size("embed_dim")?,
                num_heads: a.size("num_heads")?,
                q_lora_rank: a.count_or("q_lora_rank", 0)?,
                kv_lora_rank: a.size("kv_lora_rank")?,
                qk_nope_head_dim: a.size("qk_nope_head_dim")?,
                qk_rope_head_dim: a.size("qk_rope_head_dim")?,
                v_head_dim: a.size("v_head_dim")?,
                causal: a.flag_or("causal", true)?,
            },
            "moe" => {
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
                }
            }
            "lstm" => Op::Lstm(rnn(&mut a)?),
            "gru" => Op::Gru(rnn(&mut a)?),
            "learned_position" => Op::LearnedPosition {
                num_positions: a.size("num_positions")?,
                dim: a.size("dim")?,
            },
            "prepend_token" => Op::PrependToken {
                dim: a.size("dim")?,
            },
            other => {
                return Err(format!(
                    "unknown op `{other}` (known ops: {})",
                    OP_NAMES.join(", ")
                ))
            }
        };
        a.finish()?;
        Ok(op)
    }

    /// The op's name in the file format.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Linear { .. } => "linear",
            Op::Embedding { .. } => "embedding",
            Op::Conv1d(_) => "conv1d",
            Op::Conv2d(_) => "conv2d",
            Op::ConvTranspose2d(_) => "conv_transpose2d",
            Op::BatchNorm { .. } => "batch_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::GroupNorm { .. } => "group_norm",
            Op::Activation(Activation::Relu) => "relu",
            Op::Activation(Activation::Gelu) => "gelu",
            Op::Activation(Activation::Silu) => "silu",
            Op::Activation(Activation::Tanh) => "tanh",
            Op::Dropout { .. } => "dropout",
            Op::Add => "add",
            Op::Mul => "mul",
            Op::Concat { .. } => "concat",
            Op::Upsample { .. } => "upsample",
            Op::MaxPool(_) => "max_pool",
            Op::AvgPool(_) => "avg_pool",
            Op::AdaptiveAvgPool { .. } => "adaptive_avg_pool",
            Op::Flatten { .. } => "flatten",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::SelectToken { .. } => "select_token",
            Op::Softmax { .. } => "softmax",
            Op::CrossEntropy => "cross_entropy",
            Op::Mse => "mse",
            Op::MultiheadAttention { .. } => "multihead_attention",
            Op::GqaAttention { .. } => "gqa_attention",
            Op::MlaAttention { .. } => "mla_attention",
            Op::Moe { .. } => "moe",
            Op::Lstm(_) => "lstm",
            Op::Gru(_) => "gru",
            Op::LearnedPosition { .. } => "learned_position",
            Op::PrependToken { .. } => "prepend_token",
        }
    }

    /// The implementation block this op is, if it is one: an op whose harness builder and
    /// simulator rule carry a family's architecture (attention, mixture of experts, recurrent
    /// and convolution layers). Two families whose graphs share a block share its
    /// implementation, so the engine holds them out together ("held out by implementation").
    /// Every op answers here, with no fallback: a new op does not compile until it says.
    pub fn block(&self) -> Option<&'static str> {
        match self {
            Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Moe { .. }
            | Op::Lstm(_)
            | Op::Gru(_)
            | Op::Conv1d(_)
            | Op::Conv2d(_)
            | Op::ConvTranspose2d(_) => Some(self.name()),
            Op::Linear { .. }
            | Op::Embedding { .. }
            | Op::BatchNorm { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::GroupNorm { .. }
            | Op::Activation(_)
            | Op::Dropout { .. }
            | Op::Add
            | Op::Mul
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
            | Op::CrossEntropy
            | Op::Mse
            | Op::LearnedPosition { .. }
            | Op::PrependToken { .. } => None,
        }
    }

    /// Views create no new tensor.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Flatten { .. } | Op::Reshape { .. } | Op::Permute { .. } | Op::SelectToken { .. }
        )
    }

    /// Losses produce the scalar that training minimises.
    pub fn is_loss(&self) -> bool {
        matches!(self, Op::CrossEntropy | Op::Mse)
    }

    /// How many inputs the op takes: (min, max).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Add | Op::Mul | Op::CrossEntropy | Op::Mse => (2, 2),
            Op::Concat { .. } => (2, usize::MAX),
            Op::MultiheadAttention { .. } => (1, 2),
            _ => (1, 1),
        }
    }

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
            Op::MultiheadAttention {
                embed_dim: d,
                num_heads,
                bias,
                relative_attention_buckets,
                ..
            } => {
                for _ in 0..4 {
                    p.push(vec![*d, *d]);
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
                ..
            } => {
                let q = num_heads.saturating_mul(*head_dim);
                let kv = num_kv_heads.saturating_mul(*head_dim);
                for (o, i) in [(q, *d), (kv, *d), (kv, *d), (*d, q)] {
                    p.push(vec![o, i]);
                    if *bias {
                        p.push(vec![o]);
                    }
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
            Op::Moe {
                dim,
                hidden,
                num_experts,
                ..
            } => {
                p.push(vec![*num_experts, *dim]);
                for _ in 0..*num_experts {
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
            _ => {}
        }
        p
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
            _ => Vec::new(),
        }
    }

    /// Infers the output shape from the input shapes. The error says what was expected and
    /// what was found.
    pub fn infer(&self, inputs: &[&Shape]) -> Result<Shape, String> {
        let x = inputs[0];
        let fixed = |d: Dim, what: &str| {
            d.as_fixed()
                .ok_or_else(|| format!("{what} must be a fixed size, found {d} in {x}"))
        };
        let expect_last = |want: u64, what: &str| -> Result<(), String> {
            match x.last() {
                Some(d) if d == Dim::fixed(want) => Ok(()),
                Some(d) => Err(format!(
                    "expected last dimension {want} ({what}), found {d} in input shape {x}"
                )),
                None => Err(format!(
                    "expected a tensor ending in {want}, found a scalar"
                )),
            }
        };
        let expect_rank = |ranks: &[usize]| -> Result<(), String> {
            if ranks.contains(&x.rank()) {
                Ok(())
            } else {
                Err(format!(
                    "expected an input of rank {}, found shape {x}",
                    ranks
                        .iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ))
            }
        };
        let expect_channels = |want: u64| -> Result<(), String> {
            if x.rank() >= 2 && x.0[1] == Dim::fixed(want) {
                Ok(())
            } else {
                Err(format!(
                    "expected {want} channels at dimension 1, found shape {x}"
                ))
            }
        };
        let axis = |dim: i64, rank: usize| -> Result<usize, String> {
            let r = rank as i64;
            let a = if dim < 0 { dim + r } else { dim };
            if (0..r).contains(&a) {
                Ok(a as usize)
            } else {
                Err(format!("dimension {dim} is out of range for shape {x}"))
            }
        };
        let spatial = |len: Dim, k: u64, s: u64, p: u64| -> Result<Dim, String> {
            let len = fixed(len, "a spatial dimension")?;
            let padded = len.saturating_add(p.saturating_mul(2));
            if padded < k {
                return Err(format!(
                    "kernel {k} is larger than the padded input {padded} in shape {x}"
                ));
            }
            Ok(Dim::fixed((padded - k) / s + 1))
        };
        let mut out = x.clone();
        match self {
            Op::Linear {
                in_features,
                out_features,
                ..
            } => {
                expect_last(*in_features, "in_features")?;
                *out.0.last_mut().unwrap() = Dim::fixed(*out_features);
            }
            Op::Embedding { embedding_dim, .. } => out.0.push(Dim::fixed(*embedding_dim)),
            Op::Conv1d(c) => {
                expect_rank(&[3])?;
                expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                out.0[2] = spatial(x.0[2], c.kernel_size, c.stride, c.padding)?;
            }
            Op::Conv2d(c) => {
                expect_rank(&[4])?;
                expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                for i in 2..4 {
                    out.0[i] = spatial(x.0[i], c.kernel_size, c.stride, c.padding)?;
                }
            }
            Op::ConvTranspose2d(c) => {
                expect_rank(&[4])?;
                expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                for i in 2..4 {
                    let len = fixed(x.0[i], "a spatial dimension")?;
                    let full = (len - 1)
                        .saturating_mul(c.stride)
                        .saturating_add(c.kernel_size)
                        .saturating_add(c.output_padding);
                    if full <= c.padding.saturating_mul(2) {
                        return Err(format!(
                            "padding {} leaves no output for shape {x}",
                            c.padding
                        ));
                    }
                    out.0[i] = Dim::fixed(full - c.padding.saturating_mul(2));
                }
            }
            Op::BatchNorm { num_features: c } => {
                expect_rank(&[2, 3, 4])?;
                expect_channels(*c)?;
            }
            Op::GroupNorm {
                num_channels: c, ..
            } => {
                expect_rank(&[3, 4])?;
                expect_channels(*c)?;
            }
            Op::LayerNorm {
                normalized_shape: d,
                ..
            } => expect_last(*d, "normalized_shape")?,
            Op::RmsNorm { dim } => expect_last(*dim, "dim")?,
            Op::Activation(_) | Op::Dropout { .. } => {}
            Op::Softmax { dim } => {
                axis(*dim, x.rank())?;
            }
            Op::Add | Op::Mul => {
                if inputs[1] != x {
                    return Err(format!(
                        "both inputs must have the same shape: expected {x}, found {}",
                        inputs[1]
                    ));
                }
            }
            Op::Concat { dim } => {
                let a = axis(*dim, x.rank())?;
                for other in &inputs[1..] {
                    let same_rest = other.rank() == x.rank()
                        && (0..x.rank()).all(|i| i == a || other.0[i] == x.0[i]);
                    if !same_rest {
                        return Err(format!(
                            "inputs must agree on every dimension but {a}: expected {x}, found {other}"
                        ));
                    }
                    out.0[a] = out.0[a].plus(other.0[a]).ok_or_else(|| {
                        format!(
                            "cannot concatenate {} and {} along dimension {a}",
                            out.0[a], other.0[a]
                        )
                    })?;
                }
            }
            Op::Upsample { scale_factor } => {
                expect_rank(&[4])?;
                for i in 2..4 {
                    out.0[i] = x.0[i].times(Dim::fixed(*scale_factor));
                }
            }
            Op::MaxPool(p) | Op::AvgPool(p) => {
                expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = spatial(x.0[i], p.kernel_size, p.stride, p.padding)?;
                }
            }
            Op::AdaptiveAvgPool { output_size } => {
                expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = Dim::fixed(*output_size);
                }
            }
            Op::Flatten { start_dim, end_dim } => {
                let s = axis(*start_dim, x.rank())?;
                let e = axis(*end_dim, x.rank())?;
                if s > e {
                    return Err(format!(
                        "start_dim {start_dim} comes after end_dim {end_dim} for shape {x}"
                    ));
                }
                let merged = x.0[s..=e].iter().fold(Dim::fixed(1), |a, d| a.times(*d));
                out.0.splice(s..=e, [merged]);
            }
            Op::Reshape { shape } => {
                let total = x.numel();
                let mut known = Dim::fixed(1);
                for d in shape {
                    match d {
                        ReshapeDim::Batch => known = known.times(Dim::batch()),
                        ReshapeDim::Fixed(n) => known = known.times(Dim::fixed(*n)),
                        ReshapeDim::Infer => {}
                    }
                }
                let inferred = if shape.contains(&ReshapeDim::Infer) {
                    total.divided_by(known)
                } else {
                    (known == total).then_some(Dim::fixed(1))
                };
                let inferred = inferred.ok_or_else(|| {
                    format!("cannot reshape {x} ({total} elements) into {shape:?}")
                })?;
                out = Shape(
                    shape
                        .iter()
                        .map(|d| match d {
                            ReshapeDim::Batch => Dim::batch(),
                            ReshapeDim::Fixed(n) => Dim::fixed(*n),
                            ReshapeDim::Infer => inferred,
                        })
                        .collect(),
                );
            }
            Op::Permute { dims } => {
                if dims.len() != x.rank() {
                    return Err(format!(
                        "expected {} permutation entries for shape {x}, found {}",
                        x.rank(),
                        dims.len()
                    ));
                }
                let mut seen = vec![false; x.rank()];
                let mut v = Vec::with_capacity(dims.len());
                for d in dims {
                    let a = axis(*d, x.rank())?;
                    if std::mem::replace(&mut seen[a], true) {
                        return Err(format!("dimension {d} appears twice in `dims`"));
                    }
                    v.push(x.0[a]);
                }
                out = Shape(v);
            }
            Op::SelectToken { index } => {
                expect_rank(&[3])?;
                let t = fixed(x.0[1], "the token dimension")? as i64;
                if *index >= t || *index < -t {
                    return Err(format!("token index {index} is out of range for shape {x}"));
                }
                out.0.remove(1);
            }
            Op::CrossEntropy => {
                let labels = inputs[1];
                let mut want = x.clone();
                want.0.pop();
                if x.rank() < 2 || *labels != want {
                    return Err(format!(
                        "labels must have the logits' shape without the class axis: logits {x}, expected labels {want}, found {labels}"
                    ));
                }
                out = Shape::default();
            }
            Op::Mse => {
                if inputs[1] != x {
                    return Err(format!(
                        "target must match the prediction: expected {x}, found {}",
                        inputs[1]
                    ));
                }
                out = Shape::default();
            }
            Op::MultiheadAttention { embed_dim: d, .. } => {
                expect_rank(&[3])?;
                expect_last(*d, "embed_dim")?;
                if let Some(kv) = inputs.get(1) {
                    if kv.rank() != 3 || kv.0[0] != x.0[0] || kv.0[2] != Dim::fixed(*d) {
                        return Err(format!("memory must be [{}, Tk, {d}], found {kv}", x.0[0]));
                    }
                }
            }
            Op::GqaAttention { embed_dim: d, .. }
            | Op::MlaAttention { embed_dim: d, .. }
            | Op::Moe { dim: d, .. } => {
                expect_rank(&[3])?;
                expect_last(*d, "model width")?;
            }
            Op::Lstm(r) | Op::Gru(r) => {
                expect_rank(&[3])?;
                expect_last(r.input_size, "input_size")?;
                out.0[2] = Dim::fixed(r.hidden_size.saturating_mul(r.directions()));
            }
            Op::LearnedPosition { num_positions, dim } => {
                expect_rank(&[3])?;
                expect_last(*dim, "dim")?;
                let t = fixed(x.0[1], "the sequence dimension")?;
                if t > *num_positions {
                    return Err(format!(
                        "sequence {t} exceeds num_positions {num_positions}"
                    ));
                }
            }
            Op::PrependToken { dim } => {
                expect_rank(&[3])?;
                expect_last(*dim, "dim")?;
                out.0[1] = x.0[1].plus(Dim::fixed(1)).ok_or_else(|| {
                    format!("the token dimension must be a fixed size, found {x}")
                })?;
            }
        }
        Ok(out)
    }
}
