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
use crate::graph::Graph;
use crate::shape::Shape;
use crate::simulate::cuda::{as_on_cpu, CudaCall};
use crate::simulate::rules::{OpRule, Sizes};

/// How an attention op attends ([`Family::attends`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attends {
    /// Causal self-attention: a decoder's, with a cache that grows with the context.
    CausalSelf,
    /// Cross-attention to a sequence of this many tokens (an encoder's output): a fixed cache.
    Cross(u64),
    /// Self-attention both ways: an encoder's, no cache.
    Bidirectional,
}

/// Where an op runs in transformers' generate ([`Family::generate_peak`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateAt {
    pub batch: u64,
    /// Tokens of this forward (the prompt in the prefill, 1 a decode step).
    pub tokens: u64,
    /// The op's caches are in the level before it (its K and V updated before its sdpa).
    pub cached: bool,
    /// A sliding layer given a boolean mask (`create_sliding_window_causal_mask` cannot skip
    /// it: the keys reach the window): the keys' count. sdpa then gets the mask, so
    /// `repeat_kv` copies K and V to every head (a view where there is one kv head) and torch
    /// makes the mask additive (`convert_boolean_attn_mask`: `[B, 1, Tq, Tk]` float32).
    pub mask_kv: Option<u64>,
}

/// Where an attention with a position bias stands in transformers 5's T5 forward under no_grad
/// ([`Family::biased_sdpa_no_grad_peak`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BiasedAttention {
    pub batch: u64,
    /// Query tokens.
    pub tq: u64,
    /// Key tokens: the cache's after this step's update (self-attention), the encoder's
    /// (cross-attention).
    pub tk: u64,
    /// Key tokens projected by this call (the new ones; 0: a cross-attention reusing its
    /// cached K and V).
    pub projected: u64,
    /// How the bias comes to this layer.
    pub bias: BiasSource,
}

/// How an attention gets its position bias in T5's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BiasSource {
    /// Computed here (`compute_bias`): the bucket arithmetic, then the bias, kept by the
    /// stack; a permuted view, so sdpa's mask is a contiguous copy each layer.
    Relative,
    /// Made here as zeros (a layer with no relative bias and none passed in: the decoder's
    /// first cross-attention), kept by the stack; contiguous, so no copy.
    Zeros,
    /// Passed in by an earlier layer: `copied` where it is the relative bias (a permuted view).
    Held { copied: bool },
}

/// An sdpa call: causal (its flag), else cross-attention where the key's length (axis 2 of
/// `[B, heads, T, head_dim]`) differs from the query's, else both ways.
pub(super) fn sdpa_attends(
    causal: bool,
    query: Option<&Shape>,
    key: Option<&Shape>,
) -> Option<Attends> {
    if causal {
        return Some(Attends::CausalSelf);
    }
    let (tq, tk) = (query?.0.get(2)?, key?.0.get(2)?);
    Some(match tk.as_fixed() {
        Some(n) if tq != tk => Attends::Cross(n),
        _ => Attends::Bidirectional,
    })
}

/// How an op can split under tensor parallelism (`simulate::tp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpForm {
    /// Whole on every rank.
    Replicated,
    /// A linear layer: colwise or rowwise, as its neighbours decide.
    Linear,
    /// An attention layer that splits its heads.
    Heads,
    /// An attention layer with no split form drawn (why).
    Unsplittable(&'static str),
}

/// A node's part under tensor parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpRole {
    /// An attention layer: its heads split (q, k, v colwise, the output projection rowwise).
    Heads,
    /// A linear whose outputs are split (its input whole).
    Colwise,
    /// A linear whose inputs are split: its output a partial sum, all-reduced.
    Rowwise,
    /// An elementwise op between a colwise and a rowwise linear: on the rank's share.
    Inside,
}

/// `n / k`, or an error naming the width and the node's field.
pub(crate) fn tp_share(what: &str, n: u64, k: u64) -> Result<u64, String> {
    if k > 0 && n.is_multiple_of(k) {
        Ok(n / k)
    } else {
        Err(format!(
            "tp:k={k} does not divide {what} = {n}: each rank takes {what} / k"
        ))
    }
}

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

    /// The CPU simulator's rule (the cpu-fp32 table, `docs/simulator.md`): what the op's
    /// forward makes, saves and holds, and what its backward makes, at the sizes of `s`.
    fn cpu_rule(&self, op: &Op, graph: &Graph, s: &Sizes) -> OpRule;

    /// The bytes per element of the op's output whatever the backend (a `constant`'s dtype, a
    /// generic node's output dtype); None: the backend's.
    fn element_bytes(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// The CUDA simulator's rule under bf16 autocast. The default: the same tensors as on
    /// CPU, sized by autocast's dtypes.
    fn cuda_rule(&self, _op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        as_on_cpu(s, call, false)
    }

    /// It runs on autocast's lower-precision list (`AT_FORALL_LOWER_PRECISION_FP`: linear,
    /// conv, matmul/bmm and sdpa inside attention; RNNs through `_cudnn_rnn`'s wrapper): a
    /// bf16 output.
    fn runs_in_bf16(&self, _op: &Op) -> bool {
        false
    }

    /// The element bytes autocast gives its output when it does not run in bf16, from its
    /// input 0's and its inputs' promoted dtype. The default: input 0's (batch norm,
    /// activations, pools, views, the class token cast to the input's kind).
    fn autocast_output(&self, _op: &Op, input: u64, _promoted: u64) -> u64 {
        input
    }

    /// The op's internal tensors for the features (`docs/features.md`) at `batch`, `x` its
    /// input's shape and `memory` its second input's (cross-attention's memory). The default:
    /// none (its saved and intermediate tensors are its output alone, the layer-output
    /// feature; a generic ATen node is counted so, as an elementwise op).
    fn intermediates(
        &self,
        _op: &Op,
        _x: &Shape,
        _memory: Option<&Shape>,
        _batch: u64,
    ) -> Intermediates {
        Intermediates::default()
    }

    /// What the textbook formula (Korthikanti et al.) makes of the op. The default: a part of
    /// a GPT/BERT-style stack besides its attention (the formula's 34·d per token covers it).
    fn textbook(&self, _op: &Op) -> TextbookRole {
        TextbookRole::Covered
    }

    /// Whether input `k` is int64 (indices, labels). The default: float.
    fn wants_int_input(&self, _op: &Op, _k: usize) -> bool {
        false
    }

    /// Whether an input broadcast to the output must be made from `constant` nodes (a binary
    /// op broadcasts only tensors that take no gradient).
    fn broadcasts_only_constants(&self, _op: &Op) -> bool {
        false
    }

    /// The input that must be made from `constant` nodes, if any (sdpa's mask).
    fn constant_only_input(&self, _op: &Op) -> Option<usize> {
        None
    }

    /// The embedding whose table the op reads, if it is tied to one.
    fn tie<'o>(&self, _op: &'o Op) -> Option<Tie<'o>> {
        None
    }

    /// The embedding table the op is, if it is an embedding.
    fn table(&self, _op: &Op) -> Option<Table> {
        None
    }

    // Inference: the KV caches (`strategy::memory`) and transformers' generate
    // (`simulate::generate`).

    /// How the op attends, where it is an attention: to itself causally (a decoder), to
    /// another sequence (cross-attention, fixed at the key's length), or both ways (an
    /// encoder). `n_inputs`: the node's inputs; `query` and `key`: its inputs 0 and 1.
    fn attends(
        &self,
        _op: &Op,
        _n_inputs: usize,
        _query: Option<&Shape>,
        _key: Option<&Shape>,
    ) -> Option<Attends> {
        None
    }

    /// The learned position table's length, where the op is one (no context is longer).
    fn learned_positions(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// The attention's sliding window (attribute `sliding_window`), where it has one.
    fn sliding_window(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// The rotary dims of the attention, where transformers computes rotary `cos` and `sin`
    /// for it once a forward (a GQA attention's head_dim, MLA's qk_rope_head_dim).
    fn rotary_dims(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// transformers' forward of the op under no_grad in `generate` ([`GenerateAt`]): its
    /// highest point over the level before it (which holds its caches where `cached`), where
    /// the rule set reads it from transformers' code rather than the training rule's no_grad
    /// forward.
    fn generate_peak(&self, _op: &Op, _at: &GenerateAt) -> Option<u64> {
        None
    }

    /// A cross-attention at a decode step that reuses its cached K and V of `kv_len` tokens:
    /// the bytes it holds while it runs (q, the scores, the weights, the context).
    fn cached_cross_attention_transient(
        &self,
        _op: &Op,
        _batch: u64,
        _tokens: u64,
        _kv_len: u64,
    ) -> Option<u64> {
        None
    }

    /// The heads of the relative position bias the op computes, where it is the attention
    /// that computes one for its stack (T5's first layer of the encoder and of the decoder:
    /// `has_relative_attention_bias`).
    fn relative_position_bias_heads(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// The op's forward under no_grad as transformers 5 runs an attention with a position
    /// bias and its default sdpa (`T5Attention.forward` -> `sdpa_attention_forward`): its
    /// highest point over the level before it, and the bytes of the bias it makes (kept by
    /// the stack until its forward returns); see [`BiasedAttention`].
    fn biased_sdpa_no_grad_peak(&self, _op: &Op, _at: &BiasedAttention) -> Option<(u64, u64)> {
        None
    }

    // The strategies' questions.

    /// The 2-D projection matrices of the op, as (in, out). The default: its 2-D parameter
    /// tensors.
    fn matrices(&self, op: &Op) -> Vec<(u64, u64)> {
        op.parameter_tensors()
            .into_iter()
            .filter(|d| d.len() == 2)
            .map(|d| (d[1], d[0]))
            .collect()
    }

    /// The width of the op's output if it is a linear map that LoRA adapts and QLoRA
    /// quantizes inside a block (a linear, an attention layer's projections, a MoE). The
    /// default: it is none.
    fn projection_width(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// The KV cache the op holds in inference, as (tensors, kv_heads, head_dim); `key` is its
    /// second input's shape. The default: none.
    fn kv_cache(&self, _op: &Op, _key: Option<&Shape>) -> Option<(u64, u64, u64)> {
        None
    }

    // LoRA and QLoRA in the simulator (`simulate/lowrank.rs`).

    /// How many of its 2-D parameter tensors (the first) LoRA adapts inside a block.
    fn lora_targets(&self, _op: &Op) -> usize {
        0
    }

    /// Tokens LoRA target `j`, `inp` wide, is applied to.
    fn lora_tokens(&self, _op: &Op, s: &Sizes, _j: usize, inp: u64) -> u64 {
        s.rows(inp)
    }

    /// The bytes of the adapters' `x·Aᵀ` (fp32, `rank` wide) when they are not each target's
    /// tokens times the rank.
    fn lora_adapter_bytes(&self, _op: &Op, _s: &Sizes, _rank: u64) -> Option<u64> {
        None
    }

    /// Eager attention: the output projection runs last in forward, first in backward.
    fn is_eager_attention(&self, _op: &Op) -> bool {
        false
    }

    /// An adapted op's frozen inner parts (MLA's RMSNorms): what they no longer save.
    fn lora_frozen_inner(&self, _op: &Op, _s: &Sizes, _r: &mut OpRule) {}

    /// The rule of the op holding no target: its parameters (if any) are frozen.
    fn lora_frozen(&self, _op: &Op, _r: &mut OpRule) {}

    /// The rule of the op as a single adapted linear map (a linear's own finish); false: a
    /// compound op, which `lowrank.rs` finishes.
    fn lora_single(&self, _op: &Op, _r: &mut OpRule, _lora: &LoraCall) -> bool {
        false
    }

    // The simulator's questions.

    /// Its forward goes through cuBLASLt (`addmm` with a bias: torch's `gemm_and_bias`).
    fn uses_cublaslt(&self, _op: &Op) -> bool {
        false
    }

    /// Bytes of running statistics allocated at model load (batch norm's running mean and
    /// variance; the harness registers no batch counter).
    fn running_stats_bytes(&self, _op: &Op) -> Option<u64> {
        None
    }

    /// Whether the op's forward has autograd save views of its weight matrices (`F.linear`
    /// saves `weight.t()`, an MoE its experts' slices) rather than the parameters themselves:
    /// under DeepSpeed's ZeRO-3 (`simulate::zero3`) such a storage outlives the parameter's
    /// release until the op's backward. Norms, embeddings and convolutions save the parameter.
    fn saves_weight_views(&self, _op: &Op) -> bool {
        false
    }

    /// Whether the op's input is integer ids (an embedding, a position table): no gradient
    /// flows into it, so DeepSpeed's post-backward hook never runs for its module.
    fn takes_ids(&self, _op: &Op) -> bool {
        false
    }

    /// Whether the op's parameters are one DeepSpeed ZeRO-3 leaf module (fetched and released
    /// together: `DEFAULT_LEAF_MODULE_CLASSES`, the MoE blocks); otherwise each weight matrix
    /// with the vectors after it is one module.
    fn zero3_leaf(&self, _op: &Op) -> bool {
        false
    }

    /// How the op splits under tensor parallelism (`simulate::tp`): replicated unless its
    /// family says otherwise.
    fn tp_form(&self, _op: &Op) -> TpForm {
        TpForm::Replicated
    }

    /// The op as one of `k` tensor-parallel ranks holds it in `role` (its heads, or its
    /// outputs or inputs, / k); an error names the width `k` does not divide.
    fn tp_local(&self, op: &Op, _role: TpRole, _k: u64) -> Result<Op, String> {
        Ok(op.clone())
    }

    /// Whether parameter tensor `i` of `count` is initialised by tch's `randn * std + mean`
    /// (which holds a second copy and scalars while it runs).
    fn randn_init(&self, _op: &Op, _i: usize, _count: usize) -> bool {
        false
    }

    /// A view of a contiguous input that splits it into two groups of axes at this axis of
    /// its `rank`-axis output (a slice along a non-leading axis).
    fn splits_at(&self, _op: &Op, _rank: usize) -> Option<usize> {
        None
    }

    /// It regroups axes (a reshape, a flatten): a view of a non-contiguous input only where
    /// it keeps the input's groups of axes apart; reshaping a non-contiguous gradient copies
    /// it.
    fn regroups(&self, _op: &Op) -> bool {
        false
    }

    /// The axis order it permutes its input to (a permute).
    fn permutation<'o>(&self, _op: &'o Op) -> Option<&'o [i64]> {
        None
    }

    /// Whether the gradient it hands on as the incoming one (`Grad::OfOutput`) is contiguous,
    /// the incoming one being `contig`; `output_contiguous` is its rule's, `rank` its output's.
    /// The default: as the incoming one.
    fn gradient_contiguous(
        &self,
        _op: &Op,
        _output_contiguous: Option<bool>,
        contig: bool,
        _rank: usize,
    ) -> bool {
        contig
    }

    /// It reads its input as a matrix through matmul: a non-contiguous input costs scalars
    /// (a linear).
    fn matmul_on_strided_input(&self, _op: &Op) -> bool {
        false
    }

    /// It reads its gradient as a contiguous matrix for an input of `input_rank` axes (a
    /// linear on a 3-d input): a non-contiguous gradient is copied first.
    fn copies_strided_gradient(&self, _op: &Op, _input_rank: usize) -> bool {
        false
    }
}

/// A LoRA target's facts for [`Family::lora_single`].
pub(crate) struct LoraCall {
    /// Each target's (tokens, out, in).
    pub targets: Vec<(u64, u64, u64)>,
    pub rank: u64,
    /// The input requires a gradient.
    pub x_grad: bool,
    /// QLoRA.
    pub quantize: bool,
}

/// A tied op: the embedding it names and the table's sizes it needs.
pub(crate) struct Tie<'o> {
    /// The embedding node it names.
    pub target: &'o str,
    /// The table's rows and width it needs.
    pub num: u64,
    pub dim: u64,
    /// What it needs, in words (`{num}` and `{dim}` stand for the table's sizes).
    pub need: &'static str,
    /// Its own sizes are written width first (a linear's in_features, out_features).
    pub dim_first: bool,
}

/// An embedding's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    pub num_embeddings: u64,
    pub embedding_dim: u64,
    /// It reads another embedding's table (and owns none).
    pub tied: bool,
}

/// An op's internal tensors, in elements, for the features.
#[derive(Debug, Clone, Default)]
pub(crate) struct Intermediates {
    /// Each internal tensor's element count.
    pub tensors: Vec<u64>,
    /// The `[B, h, Tq, Tk]` attention scores it materialises.
    pub scores: u64,
    /// A recurrent layer's gate activations.
    pub gates: u64,
    /// The tensors include the op's own output (counted less it).
    pub less_output: bool,
}

/// What the textbook formula makes of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextbookRole {
    /// Eager self-attention of this width and heads: a layer of the formula.
    EagerAttention { embed_dim: u64, num_heads: u64 },
    /// Attention through scaled_dot_product_attention: the formula assumes eager attention.
    SdpaAttention,
    /// A layer that is no part of a transformer block.
    NotTransformer,
    /// A part of a transformer block the formula covers.
    Covered,
}

/// Product of sizes, saturating at `u64::MAX`.
fn prod(sizes: &[u64]) -> u64 {
    sizes.iter().fold(1u64, |a, v| a.saturating_mul(*v))
}

impl Op {
    /// An op of the elementwise family (activations, dropout, add, mul, sub, div, unary: the
    /// list `family` sends to it): its output is its input's shape, element by element.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Activation(_)
                | Op::Dropout { .. }
                | Op::Add
                | Op::Mul
                | Op::Sub
                | Op::Div
                | Op::Unary(_)
        )
    }

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
            // The same list as `is_elementwise`.
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
            | Op::Expand { .. }
            | Op::Parameter { .. } => &views::ViewsFamily,
            Op::Softmax { .. } | Op::Mean { .. } => &reduce::ReduceFamily,
            Op::CrossEntropy | Op::Mse => &loss::LossFamily,
            Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Sdpa { .. } => &attention::AttentionFamily,
            Op::Moe { .. } => &moe::MoeFamily,
            Op::Lstm(_) | Op::Gru(_) => &rnn::RnnFamily,
            Op::LearnedPosition { .. } | Op::PrependToken { .. } | Op::Constant { .. } => {
                &tokens::TokensFamily
            }
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
    (OpKind::Parameter, "parameter", views::parse_parameter),
    (OpKind::Matmul, "matmul", linear::parse_matmul),
    (OpKind::Slice, "slice", views::parse_slice),
    (OpKind::Sdpa, "sdpa", attention::parse_sdpa),
    (OpKind::Constant, "constant", tokens::parse_constant),
    (OpKind::Expand, "expand", views::parse_expand),
    (OpKind::Aten, "aten", aten::parse_aten),
];
