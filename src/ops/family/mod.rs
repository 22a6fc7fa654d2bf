//! The op families: one file per family of ops holding every fact of its ops (how each parses,
//! its shape rule, its parameters, ...), and this registry, which dispatches an op to its
//! family (one `match` in [`Op::family`]) and lists every op's name with its parser
//! ([`OPS`]). Callers ask an op through [`Family`]'s methods instead of matching on its
//! variant.
//!
//! Adding an op: its variant (and [`OpKind`]) in `ops/mod.rs`, its facts in its family's file
//! (or a new family's), and its lines here: its entry in [`OPS`] and its arm in
//! [`Op::family`].

mod aten;
mod attention;
mod conv;
mod elementwise;
mod embedding;
mod linear;
mod loss;
mod moe;
mod norm;
mod reduce;
mod resample;
mod rnn;
mod tokens;
mod views;

use super::attributes::Attrs;
use super::shape::Checks;
use super::{Op, OpKind};
use crate::shape::Shape;

/// Every fact of an op that depends on which op it is. Each family implements it for its
/// ops; a method without a default is one every family must answer (a new family does not
/// compile until it does).
pub(crate) trait Family: Sync {
    /// The shape rule: `out` starts as input 0's shape (`ck` checks input 0); the error says
    /// what was expected and what was found.
    fn infer(&self, op: &Op, inputs: &[&Shape], ck: &Checks, out: &mut Shape)
        -> Result<(), String>;

    /// Appends the shapes of the trainable parameter tensors the op owns (a tied weight is
    /// owned by the embedding and not listed).
    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>);

    /// Buffers torch registers for the op, as (elements, bytes per element).
    fn buffers(&self, _op: &Op) -> Vec<(u64, u64)> {
        Vec::new()
    }
}

impl Op {
    /// The op's family: where its facts are.
    pub(crate) fn family(&self) -> &'static dyn Family {
        match self {
            Op::Linear { .. } | Op::Matmul => &linear::LinearFamily,
            Op::Embedding { .. } => &embedding::EmbeddingFamily,
            Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => &conv::ConvFamily,
            Op::BatchNorm { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::GroupNorm { .. } => &norm::NormFamily,
            Op::Activation(_)
            | Op::Dropout { .. }
            | Op::Add
            | Op::Mul
            | Op::Sub
            | Op::Div
            | Op::Unary(_) => &elementwise::ElementwiseFamily,
            Op::Concat { .. }
            | Op::Upsample { .. }
            | Op::MaxPool(_)
            | Op::AvgPool(_)
            | Op::AdaptiveAvgPool { .. } => &resample::ResampleFamily,
            Op::Flatten { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::SelectToken { .. }
            | Op::Slice { .. }
            | Op::Expand { .. } => &views::ViewsFamily,
            Op::Softmax { .. } | Op::Mean { .. } => &reduce::ReduceFamily,
            Op::CrossEntropy | Op::Mse => &loss::LossFamily,
            Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Sdpa { .. } => &attention::AttentionFamily,
            Op::Moe { .. } => &moe::MoeFamily,
            Op::Lstm(_) | Op::Gru(_) => &rnn::RnnFamily,
            Op::LearnedPosition { .. }
            | Op::PrependToken { .. }
            | Op::Parameter { .. }
            | Op::Constant { .. } => &tokens::TokensFamily,
            Op::Aten(_) => &aten::AtenFamily,
        }
    }
}

/// How an op's attributes parse (the error names the attribute).
pub(super) type Parser = fn(&mut Attrs) -> Result<Op, String>;

/// Every op of the format, in [`OpKind`] order: its kind, its name in the file (written here
/// only: [`Op::name`] and an op's `Display` read it from this table) and its family's parser.
/// [`Op::parse`] reads this table, a test checks that every entry round-trips, and the
/// unknown-op message lists these names.
pub(super) static OPS: &[(OpKind, &str, Parser)] = &[
    (OpKind::Linear, "linear", linear::parse_linear),
    (OpKind::Embedding, "embedding", embedding::parse_embedding),
    (OpKind::Conv1d, "conv1d", conv::parse_conv1d),
    (OpKind::Conv2d, "conv2d", conv::parse_conv2d),
    (
        OpKind::ConvTranspose2d,
        "conv_transpose2d",
        conv::parse_conv_transpose2d,
    ),
    (OpKind::BatchNorm, "batch_norm", norm::parse_batch_norm),
    (OpKind::LayerNorm, "layer_norm", norm::parse_layer_norm),
    (OpKind::RmsNorm, "rms_norm", norm::parse_rms_norm),
    (OpKind::GroupNorm, "group_norm", norm::parse_group_norm),
    (OpKind::Relu, "relu", elementwise::parse_relu),
    (OpKind::Gelu, "gelu", elementwise::parse_gelu),
    (OpKind::Silu, "silu", elementwise::parse_silu),
    (OpKind::Tanh, "tanh", elementwise::parse_tanh),
    (OpKind::Dropout, "dropout", elementwise::parse_dropout),
    (OpKind::Add, "add", elementwise::parse_add),
    (OpKind::Mul, "mul", elementwise::parse_mul),
    (OpKind::Sub, "sub", elementwise::parse_sub),
    (OpKind::Div, "div", elementwise::parse_div),
    (OpKind::Unary, "unary", elementwise::parse_unary),
    (OpKind::Concat, "concat", resample::parse_concat),
    (OpKind::Upsample, "upsample", resample::parse_upsample),
    (OpKind::MaxPool, "max_pool", resample::parse_max_pool),
    (OpKind::AvgPool, "avg_pool", resample::parse_avg_pool),
    (
        OpKind::AdaptiveAvgPool,
        "adaptive_avg_pool",
        resample::parse_adaptive_avg_pool,
    ),
    (OpKind::Flatten, "flatten", views::parse_flatten),
    (OpKind::Reshape, "reshape", views::parse_reshape),
    (OpKind::Permute, "permute", views::parse_permute),
    (
        OpKind::SelectToken,
        "select_token",
        views::parse_select_token,
    ),
    (OpKind::Softmax, "softmax", reduce::parse_softmax),
    (OpKind::Mean, "mean", reduce::parse_mean),
    (
        OpKind::CrossEntropy,
        "cross_entropy",
        loss::parse_cross_entropy,
    ),
    (OpKind::Mse, "mse", loss::parse_mse),
    (
        OpKind::MultiheadAttention,
        "multihead_attention",
        attention::parse_multihead_attention,
    ),
    (
        OpKind::GqaAttention,
        "gqa_attention",
        attention::parse_gqa_attention,
    ),
    (
        OpKind::MlaAttention,
        "mla_attention",
        attention::parse_mla_attention,
    ),
    (OpKind::Moe, "moe", moe::parse_moe),
    (OpKind::Lstm, "lstm", rnn::parse_lstm),
    (OpKind::Gru, "gru", rnn::parse_gru),
    (
        OpKind::LearnedPosition,
        "learned_position",
        tokens::parse_learned_position,
    ),
    (
        OpKind::PrependToken,
        "prepend_token",
        tokens::parse_prepend_token,
    ),
    (OpKind::Parameter, "parameter", tokens::parse_parameter),
    (OpKind::Matmul, "matmul", linear::parse_matmul),
    (OpKind::Slice, "slice", views::parse_slice),
    (OpKind::Sdpa, "sdpa", attention::parse_sdpa),
    (OpKind::Constant, "constant", tokens::parse_constant),
    (OpKind::Expand, "expand", views::parse_expand),
    (OpKind::Aten, "aten", aten::parse_aten),
];
