//! The op table: every op of `memcal-graph/1`, its typed attributes, its shape rule, its trainable
//! parameter tensors and the buffers torch registers for it. See `docs/graph-format.md`.
//!
//! One file per op family under `family/` holds every fact of its ops (how each parses, its
//! shape rule, its parameters, its features, what the strategies and the simulator ask of it);
//! `family/mod.rs` is the registry: the table of kinds, names and parsers (each name is written
//! there once, [`Op::name`] and `Display` read it) and the one `match` that sends an op to its
//! family. `attributes` is the typed attribute reader; `parse`, `parameters`, `shape` and `tie`
//! are the entry points that ask the family. This file holds the types and what every op says of
//! itself. See `docs/ops.md` ("Adding an op").

pub mod aten;
mod attributes;
pub(crate) mod family;
pub mod generic;
mod parameters;
mod parse;
mod shape;
mod tie;

pub use attributes::MAX_REPEATS;
pub use parse::op_names;

use serde::Serialize;

/// Elementwise activation functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    Relu,
    /// `gelu`, exact (`approximate="none"`, torch's default).
    Gelu,
    /// `gelu` with `approximate="tanh"` (the fused kernel; `gelu_pytorch_tanh` in
    /// transformers). GPT-2's `gelu_new` is the same function written out in Python: a chain
    /// of `unary` ops, not this.
    GeluTanh,
    Silu,
    Tanh,
}

/// A generic elementwise function of one tensor: what a model writes out in Python, op by op
/// (GPT-2's `gelu_new` is `pow`, `mul_scalar`, `add`, `tanh`, `add_scalar`, `mul`). Each
/// says what autograd saves for its backward (`tools/autograd/derivatives.yaml`, torch 2.11):
/// [`UnaryFn::saves`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryFn {
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sigmoid,
    Tanh,
    Neg,
    Abs,
    Sin,
    Cos,
    Erf,
    Reciprocal,
    /// `x ** exponent` with a Python number (`pow.Tensor_Scalar`).
    Pow(f64),
    /// `x * scalar` with a Python number (`mul.Scalar`).
    MulScalar(f64),
    /// `x + scalar` with a Python number (`add.Scalar`).
    AddScalar(f64),
}

/// What autograd saves of a [`UnaryFn`] for its backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnarySaves {
    /// Nothing (`neg`, `mul.Scalar`, `add.Scalar`: the gradient needs no tensor).
    Nothing,
    /// Its input (`self` in the formula: `log`, `abs`, `sin`, `cos`, `erf`, `pow`).
    Input,
    /// Its output (`result`: `exp`, `sqrt`, `rsqrt`, `sigmoid`, `tanh`, `reciprocal`).
    Output,
}

/// Every function of the `unary` op: its name in the file (attribute `fn`) and what it saves
/// (derivatives.yaml: `exp: grad * result`, `log: grad.div(self)`, `sqrt: grad / (2 * result)`,
/// `rsqrt: -0.5 * grad * result.pow(3)`, `sigmoid: sigmoid_backward(grad, result)`,
/// `tanh: tanh_backward(grad, result)`, `neg: grad.neg()`, `abs: grad * self.sgn()`,
/// `sin: grad * self.cos()`, `cos: grad * -self.sin()`, `erf: 2/sqrt(pi) * exp(-self^2) * grad`,
/// `reciprocal: -grad * (result * result)`, `pow.Tensor_Scalar: pow_backward(grad, self,
/// exponent)`, `mul.Scalar: mul_tensor_backward(grad, other)` with a number `other`,
/// `add.Scalar: grad`). The three with a number read it from the attribute named third. The
/// entries are in [`UnaryFn`]'s variant order (a test checks it).
pub const UNARY_FNS: &[UnaryEntry] = &[
    ("exp", UnarySaves::Output, None, |_| UnaryFn::Exp),
    ("log", UnarySaves::Input, None, |_| UnaryFn::Log),
    ("sqrt", UnarySaves::Output, None, |_| UnaryFn::Sqrt),
    ("rsqrt", UnarySaves::Output, None, |_| UnaryFn::Rsqrt),
    ("sigmoid", UnarySaves::Output, None, |_| UnaryFn::Sigmoid),
    ("tanh", UnarySaves::Output, None, |_| UnaryFn::Tanh),
    ("neg", UnarySaves::Nothing, None, |_| UnaryFn::Neg),
    ("abs", UnarySaves::Input, None, |_| UnaryFn::Abs),
    ("sin", UnarySaves::Input, None, |_| UnaryFn::Sin),
    ("cos", UnarySaves::Input, None, |_| UnaryFn::Cos),
    ("erf", UnarySaves::Input, None, |_| UnaryFn::Erf),
    ("reciprocal", UnarySaves::Output, None, |_| {
        UnaryFn::Reciprocal
    }),
    ("pow", UnarySaves::Input, Some("exponent"), UnaryFn::Pow),
    (
        "mul_scalar",
        UnarySaves::Nothing,
        Some("scalar"),
        UnaryFn::MulScalar,
    ),
    (
        "add_scalar",
        UnarySaves::Nothing,
        Some("scalar"),
        UnaryFn::AddScalar,
    ),
];

/// One entry of [`UNARY_FNS`]: the name, what it saves, the attribute of its number (if it
/// takes one) and how it is made from that number.
pub type UnaryEntry = (
    &'static str,
    UnarySaves,
    Option<&'static str>,
    fn(f64) -> UnaryFn,
);

impl UnaryFn {
    /// Its entry in [`UNARY_FNS`] (the entries are in variant order; a test checks it).
    fn entry(self) -> &'static UnaryEntry {
        let k = match self {
            UnaryFn::Exp => 0,
            UnaryFn::Log => 1,
            UnaryFn::Sqrt => 2,
            UnaryFn::Rsqrt => 3,
            UnaryFn::Sigmoid => 4,
            UnaryFn::Tanh => 5,
            UnaryFn::Neg => 6,
            UnaryFn::Abs => 7,
            UnaryFn::Sin => 8,
            UnaryFn::Cos => 9,
            UnaryFn::Erf => 10,
            UnaryFn::Reciprocal => 11,
            UnaryFn::Pow(_) => 12,
            UnaryFn::MulScalar(_) => 13,
            UnaryFn::AddScalar(_) => 14,
        };
        &UNARY_FNS[k]
    }

    /// Its name in the file (the `fn` attribute).
    pub fn name(self) -> &'static str {
        self.entry().0
    }

    /// What autograd saves of it.
    pub fn saves(self) -> UnarySaves {
        self.entry().1
    }

    /// The number it carries, if any.
    pub fn scalar(self) -> Option<f64> {
        match self {
            UnaryFn::Pow(v) | UnaryFn::MulScalar(v) | UnaryFn::AddScalar(v) => Some(v),
            _ => None,
        }
    }

    /// The entry of the function named `name` (the `fn` attribute).
    pub fn lookup(name: &str) -> Option<&'static UnaryEntry> {
        UNARY_FNS.iter().find(|e| e.0 == name)
    }
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

/// The element type of a `constant`: float32 (rotary tables, additive masks) or bool (the
/// boolean attention masks transformers builds from a padding mask), 1 byte per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ConstantDType {
    Float32,
    Bool,
}

impl ConstantDType {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            ConstantDType::Float32 => 4,
            ConstantDType::Bool => 1,
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

/// The kinds of op, in the op table's order (`family/mod.rs`): each activation function is a kind
/// of its own. Each kind's name is written once, in that table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Linear,
    Embedding,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    BatchNorm,
    LayerNorm,
    RmsNorm,
    GroupNorm,
    Relu,
    Gelu,
    Silu,
    Tanh,
    Dropout,
    Add,
    Mul,
    Sub,
    Div,
    Unary,
    Concat,
    Upsample,
    MaxPool,
    AvgPool,
    AdaptiveAvgPool,
    Flatten,
    Reshape,
    Permute,
    SelectToken,
    Softmax,
    Mean,
    CrossEntropy,
    Mse,
    MultiheadAttention,
    GqaAttention,
    MlaAttention,
    Moe,
    Lstm,
    Gru,
    LearnedPosition,
    PrependToken,
    Parameter,
    Matmul,
    Slice,
    Sdpa,
    Constant,
    Expand,
    Aten,
}

impl OpKind {
    /// The last kind (the table's length less one).
    pub const LAST: OpKind = OpKind::Aten;
}

impl std::fmt::Display for Op {
    /// The op's name in the file format.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
    /// `a - b` of two tensors of one shape (`sub.Tensor`: saves nothing).
    Sub,
    /// `a / b` of two tensors of one shape (`div.Tensor`: saves both).
    Div,
    /// A generic elementwise function of one tensor.
    Unary(UnaryFn),
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
    /// The mean over one axis (`x.mean(dim, keepdim)`: mean pooling over tokens, a global
    /// average written out). Saves nothing (derivatives.yaml `mean.dim: mean_backward(grad,
    /// sizes, dim, numel / result.numel(), keepdim)` needs only sizes).
    Mean {
        dim: i64,
        keepdim: bool,
    },
    CrossEntropy,
    Mse,
    MultiheadAttention {
        embed_dim: u64,
        num_heads: u64,
        /// Each head's width: `embed_dim / num_heads` from a file (no attribute gives it);
        /// a tensor-parallel rank's own graph (`simulate::tp`) keeps it while it takes
        /// `num_heads` to the rank's heads, so q, k, v and the context are
        /// `num_heads * head_dim` wide and the output projection takes them back to
        /// `embed_dim`.
        head_dim: u64,
        causal: bool,
        bias: bool,
        relative_attention_buckets: u64,
        /// Attribute `backend`: `"eager"` (the default: softmax(QKᵀ/√d) materialised and
        /// saved, torch.nn.MultiheadAttention with need_weights=True, transformers'
        /// `attn_implementation="eager"`) or `"sdpa"` (`scaled_dot_product_attention`, what
        /// transformers runs by default and torch.nn.MultiheadAttention with
        /// need_weights=False: no `[B,h,Tq,Tk]` tensor; self- or cross-attention).
        sdpa: bool,
        /// Attribute `dropout` [0]: dropout on the attention probabilities in training
        /// (transformers' `attn_pdrop`, `attention_probs_dropout_prob`, T5's `dropout_rate`):
        /// eager drops out the materialised probabilities (a float mask and the dropped
        /// probabilities kept); sdpa's `dropout_p`: on CPU torch's flash kernel takes no
        /// dropout, so sdpa runs its math path and keeps the `[B,h,T,T]` probabilities; CUDA's
        /// flash kernel keeps only its RNG state.
        dropout: f64,
        /// Attribute `kdim` [embed_dim]: the memory's width for cross-attention, which the k
        /// and v projections take to `embed_dim` (torch.nn.MultiheadAttention's kdim = vdim:
        /// one memory input is both key and value).
        kdim: u64,
        /// Attribute `impl` [`"separate"`]: `"separate"` projects q, k and v of the `[B, T, E]`
        /// input each with its own linear (transformers' attention modules, memcal's harness);
        /// `"torch"` is torch.nn.MultiheadAttention's own forward (batch_first,
        /// `F.multi_head_attention_forward`): the projections read `[T, B, E]` views, so each
        /// saves a contiguous copy of its input (the memory once, or twice with a kdim of its
        /// own); self-attention's q, k and v are views of one packed `[3, T, B, E]` buffer;
        /// the output is a transposed view. Backend sdpa only.
        torch_impl: bool,
        /// Attribute `batch_first` [true] (impl `"torch"` only): false is torch's default
        /// layout, values `[T, B, E]` (the memory `[S, B, kdim]`): the projections read the
        /// inputs as they are (no copies), and the output is contiguous `[T, B, E]`.
        batch_first: bool,
    },
    GqaAttention {
        embed_dim: u64,
        num_heads: u64,
        num_kv_heads: u64,
        head_dim: u64,
        causal: bool,
        /// The q, k and v projections have a bias (attribute `bias` true, or `"qkv"`).
        bias: bool,
        /// The output projection has a bias (attribute `bias` true; false with `"qkv"`:
        /// Qwen2's attention, biased q, k and v and an unbiased o_proj).
        out_bias: bool,
        /// Attribute `repeat_kv` [true]: k and v are repeated to every head before sdpa
        /// (transformers' `repeat_kv`, its path with a padding mask); false: sdpa is called
        /// with `enable_gqa=True` on the unrepeated k and v (transformers' sdpa path without a
        /// mask, torch >= 2.5).
        repeat_kv: bool,
        /// Attribute `qk_norm` [false]: q and k are RMS-normalized per head over `head_dim`
        /// before the attention, each with its own weight (Qwen3's `q_norm` and `k_norm`).
        qk_norm: bool,
        /// Attribute `sliding_window` [0: none]: every query attends to at most this many
        /// tokens, itself included (Mistral's, Qwen2's, Phi-3's `sliding_window`). The
        /// training rules draw full causal attention (at T <= W the same); transformers' cache
        /// keeps a sliding layer's last W - 1 tokens (`DynamicSlidingWindowLayer`,
        /// `StaticSlidingWindowLayer`), which the inference formula and the generate rule set
        /// read.
        sliding_window: u64,
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
        /// `layout: "grouped"`: transformers 5's experts (`MixtralExperts` and its copies under
        /// `@use_experts_implementation`, run by `grouped_mm_experts_forward`): one 3-D
        /// `gate_up_proj` `[E, 2 x hidden, dim]` and `down_proj` `[E, dim, hidden]`, the routed
        /// rows sorted by expert and multiplied by `grouped_mm`. Default (`"per_expert"`): w1,
        /// w3, w2 per expert, a loop over the experts, `index_add_` back.
        grouped: bool,
        /// Whether the top-k probabilities are renormalised to sum to one (Mixtral's in-place
        /// `/=`; default true); Qwen2-MoE and DeepSeek-V2 (`norm_topk_prob` false) do not.
        renormalize: bool,
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
    /// A free learned tensor of `shape` (a Perceiver's latent array), broadcast over the batch
    /// of its one input (whose values are not read) as `latents.expand(B, ...)`: output
    /// `[B, *shape]`, a stride-0 view of the parameter (no new memory); its gradient is the
    /// incoming one summed over the batch.
    Parameter {
        shape: Vec<u64>,
    },
    /// `a @ b` of two values (`torch.matmul`, batched): `[..., n, k] x [..., k, m] -> [..., n,
    /// m]` with equal leading axes (eager attention's `q @ k.transpose(-2, -1)` and `p @ v`,
    /// written out op by op).
    Matmul,
    /// `x[..., start:end, ...]` on one axis `dim` (`aten.slice`, step 1): a strided view.
    /// `chunk` and `split` are one slice per piece; partial rotary's `q[..., :rot]`.
    Slice {
        dim: i64,
        start: u64,
        end: u64,
    },
    /// `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=causal,
    /// enable_gqa=enable_gqa)` of three values `[B, h, Tq, hd]`, `[B, kv, Tk, hd]`, `[B, kv,
    /// Tk, hdv]` and an optional fourth, the mask (made from `constant` nodes, broadcast to
    /// `[B, h, Tq, Tk]`: a padding mask), no dropout: what transformers' sdpa attention calls,
    /// written out op by op. Output `[B, h, Tq, hdv]`.
    Sdpa {
        causal: bool,
        enable_gqa: bool,
        /// Attribute `sliding_window` [0: none]: as `gqa_attention`'s (an importer's sdpa of a
        /// sliding layer; an exported graph's mask holds the window, which is not read).
        sliding_window: u64,
    },
    /// A tensor made from constants in every forward and never trained (rotary cos/sin tables,
    /// attention masks): `shape` entries are `"B"` or sizes; its one input (any value) is not
    /// read but for its batch. No gradient flows through it. It may be broadcast by `add`,
    /// `mul`, `sub` and `div`.
    Constant {
        shape: Vec<ReshapeDim>,
        dtype: ConstantDType,
    },
    /// `x.expand(shape)`: axes of size 1 broadcast to `shape` (entries `"B"` or sizes), a
    /// stride-0 view (transformers' `repeat_kv` expands `[B, kv, 1, T, hd]` to `[B, kv, n, T,
    /// hd]` before its reshape copies it). Its gradient is the incoming one summed back.
    Expand {
        shape: Vec<ReshapeDim>,
    },
    /// One ATen operator call drawn generically (`docs/graph-format.md`, "The generic `aten`
    /// node"): torch's tables give its facts ([`aten`]), the file its shapes.
    Aten(Box<generic::AtenNode>),
}

impl Op {
    /// The op's kind: its entry in the op table.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Linear { .. } => OpKind::Linear,
            Op::Embedding { .. } => OpKind::Embedding,
            Op::Conv1d(_) => OpKind::Conv1d,
            Op::Conv2d(_) => OpKind::Conv2d,
            Op::ConvTranspose2d(_) => OpKind::ConvTranspose2d,
            Op::BatchNorm { .. } => OpKind::BatchNorm,
            Op::LayerNorm { .. } => OpKind::LayerNorm,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
            Op::GroupNorm { .. } => OpKind::GroupNorm,
            Op::Activation(Activation::Relu) => OpKind::Relu,
            Op::Activation(Activation::Gelu) | Op::Activation(Activation::GeluTanh) => OpKind::Gelu,
            Op::Activation(Activation::Silu) => OpKind::Silu,
            Op::Activation(Activation::Tanh) => OpKind::Tanh,
            Op::Dropout { .. } => OpKind::Dropout,
            Op::Add => OpKind::Add,
            Op::Mul => OpKind::Mul,
            Op::Sub => OpKind::Sub,
            Op::Div => OpKind::Div,
            Op::Unary(_) => OpKind::Unary,
            Op::Concat { .. } => OpKind::Concat,
            Op::Upsample { .. } => OpKind::Upsample,
            Op::MaxPool(_) => OpKind::MaxPool,
            Op::AvgPool(_) => OpKind::AvgPool,
            Op::AdaptiveAvgPool { .. } => OpKind::AdaptiveAvgPool,
            Op::Flatten { .. } => OpKind::Flatten,
            Op::Reshape { .. } => OpKind::Reshape,
            Op::Permute { .. } => OpKind::Permute,
            Op::SelectToken { .. } => OpKind::SelectToken,
            Op::Softmax { .. } => OpKind::Softmax,
            Op::Mean { .. } => OpKind::Mean,
            Op::CrossEntropy => OpKind::CrossEntropy,
            Op::Mse => OpKind::Mse,
            Op::MultiheadAttention { .. } => OpKind::MultiheadAttention,
            Op::GqaAttention { .. } => OpKind::GqaAttention,
            Op::MlaAttention { .. } => OpKind::MlaAttention,
            Op::Moe { .. } => OpKind::Moe,
            Op::Lstm(_) => OpKind::Lstm,
            Op::Gru(_) => OpKind::Gru,
            Op::LearnedPosition { .. } => OpKind::LearnedPosition,
            Op::PrependToken { .. } => OpKind::PrependToken,
            Op::Parameter { .. } => OpKind::Parameter,
            Op::Matmul => OpKind::Matmul,
            Op::Slice { .. } => OpKind::Slice,
            Op::Sdpa { .. } => OpKind::Sdpa,
            Op::Constant { .. } => OpKind::Constant,
            Op::Expand { .. } => OpKind::Expand,
            Op::Aten(_) => OpKind::Aten,
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
            | Op::Aten(_) => None,
        }
    }

    /// Views create no new tensor.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Flatten { .. }
                | Op::Reshape { .. }
                | Op::Permute { .. }
                | Op::SelectToken { .. }
                | Op::Parameter { .. }
                | Op::Slice { .. }
                | Op::Expand { .. }
        ) || matches!(self, Op::Aten(a) if a.output_is_view())
    }

    /// A `constant`: made from constants in every forward, never trained (it reads its input
    /// only for its batch).
    pub fn is_constant(&self) -> bool {
        matches!(self, Op::Constant { .. })
    }

    /// The generic ATen node this op is, if it is one.
    pub fn as_generic(&self) -> Option<&generic::AtenNode> {
        match self {
            Op::Aten(a) => Some(a),
            _ => None,
        }
    }

    /// The generic ATen node this op is, if it is one, to bind its shapes.
    pub fn as_generic_mut(&mut self) -> Option<&mut generic::AtenNode> {
        match self {
            Op::Aten(a) => Some(a),
            _ => None,
        }
    }

    /// Losses produce the scalar that training minimises.
    pub fn is_loss(&self) -> bool {
        matches!(self, Op::CrossEntropy | Op::Mse)
    }

    /// How many inputs the op takes: (min, max).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Add | Op::Mul | Op::Sub | Op::Div | Op::CrossEntropy | Op::Mse | Op::Matmul => {
                (2, 2)
            }
            Op::Sdpa { .. } => (3, 4),
            Op::Concat { .. } => (1, usize::MAX),
            Op::MultiheadAttention { .. } => (1, 2),
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
            | Op::Unary(_)
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
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Moe { .. }
            | Op::Lstm(_)
            | Op::Gru(_)
            | Op::LearnedPosition { .. }
            | Op::PrependToken { .. }
            | Op::Parameter { .. }
            | Op::Slice { .. }
            | Op::Constant { .. }
            | Op::Expand { .. } => (1, 1),
            Op::Aten(_) => (1, usize::MAX),
        }
    }
}
