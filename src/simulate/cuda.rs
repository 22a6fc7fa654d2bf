//! The `cuda-bf16-autocast` rule table: torch 2.11 (2.11.0+cu130) on an sm90 GPU with float32
//! weights and bf16 autocast around the forward pass, as `memcal-measure` runs it (tch: the
//! harness's `--device cuda --precision bf16-autocast`). Every rule is read off torch 2.11's
//! sources; none was fitted to a GPU row. `docs/simulator.md` lists them with the files:
//!
//! - **which dtype each op runs in**: `ATen/autocast_mode.h` of torch 2.11 (the lists
//!   `AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`, `AT_FORALL_FP32_SET_OPT_DTYPE`,
//!   registered for CUDA in `aten/src/ATen/autocast_mode.cpp`): `linear`, `conv*`, `matmul`,
//!   `bmm`, `scaled_dot_product_attention` and the RNN cells run in bf16; `layer_norm`,
//!   `group_norm`, `mse_loss`, `nll_loss`, `upsample_nearest2d`, `pow`, `rsqrt` in float32;
//!   `softmax` and `log_softmax` cast a bf16 input to float32 (`input.toType(kFloat)` in
//!   `SoftMax.cpp`, a full-size copy; the fused half-to-float path is for fp16 only). Ops in no
//!   list run in their inputs' dtype (type promotion: bf16 + fp32 is fp32).
//! - **the autocast cache** (`cached_cast`, `autocast_mode.cpp`): a bf16 copy of every fp32
//!   leaf that requires grad (the weights) is made at its first use and cached until
//!   `clear_cache()` at the end of the autocast region (the harness's shim calls it when it
//!   turns autocast off after forward). A copy autograd saved (`mm` saves `mat2` for the
//!   input's gradient, `convolution` its weight) lives on until that op's backward; the others
//!   go at the end of forward. Casts of non-leaf activations are not cached: each lower-
//!   precision op casts an fp32 input again, and saves the bf16 copy.
//! - **gradients**: each cast is an autograd node (`_to_copy`, derivatives.yaml:
//!   `_to_copy_backward`): a gradient is made at the op's dtype and converted to the source's
//!   dtype, so a weight's bf16 gradient and its fp32 `.grad` exist together for a moment.
//! - **fused CUDA kernels**: `dropout` is `native_dropout` (a bool mask, 1 byte per element);
//!   `rms_norm` of fp32 input and weight is `_fused_rms_norm` (saves input and rstd, as
//!   `layer_norm`); `scaled_dot_product_attention` of the GQA path is flash attention (sm90,
//!   bf16, head dim a multiple of 8 up to 256, no mask): saves q, k, v, the output, a
//!   float32 logsumexp `[B, H, T]` and a 16-byte rng state; its backward allocates dq, dk, dv,
//!   a float32 `dq_accum` `[B, T rounded to 128, H, head dim rounded to 32]` and `softmax_d`
//!   `[B, H, T rounded to 128]` (FlashAttention-2's `mha_bwd`).
//! - **cuBLAS workspaces** (`CublasHandlePool.cpp`): on sm90 `getChosenWorkspaceSize()` is
//!   4096 KiB x 8 = 32 MiB per (handle, stream), and cuBLASLt's own workspace is
//!   `CUBLASLT_WORKSPACE_SIZE` = 1024 KiB (the unified workspace is off by default), both from
//!   the caching allocator and kept; handles are per thread, and autograd runs CUDA backward on
//!   its own device thread: one pair for forward (main thread), one for backward.
//! - **AdamW**: tch's `nn::AdamW` runs libtorch's C++ `torch::optim::AdamW`, one parameter at a
//!   time (no foreach or fused path in the C++ frontend): the same two temporaries as on CPU.
//!
//! Not derivable statically, and so not counted: cuDNN convolution workspaces (chosen by
//! cuDNN's heuristics at run time) and cuDNN RNN reserve space; the RNN rules are marked
//! `assumed`.

use super::rules::{
    cpu_rule_at, BackwardPeak, CopySaved, Grad, OpRule, Output, Saved, Sizes, Source, Values,
};
use crate::graph::{Graph, Node};
use crate::ops::Op;

/// bf16 element bytes.
const BF16: u64 = 2;
/// float32 element bytes.
const F32: u64 = 4;
/// cuBLAS workspace per (handle, stream) on sm90 (`getChosenWorkspaceSize`, 4096 KiB x 8).
pub const CUBLAS_WORKSPACE: u64 = 4096 * 8 * 1024;
/// cuBLASLt workspace (`CUBLASLT_WORKSPACE_SIZE` default, 1024 KiB).
pub const CUBLASLT_WORKSPACE: u64 = 1024 * 1024;

/// The dtype (element bytes) autocast gives the node's output, from its inputs' dtypes
/// (`inputs`: each input's element bytes, in order).
pub fn output_element(node: &Node, inputs: &[u64]) -> u64 {
    let input = |i: usize| inputs.get(i).copied().unwrap_or(F32);
    let promoted = inputs
        .iter()
        .copied()
        .filter(|&e| e <= F32)
        .max()
        .unwrap_or(F32);
    match &node.op {
        // lower_precision_fp (AT_FORALL_LOWER_PRECISION_FP; RNNs through `_cudnn_rnn`'s
        // autocast wrapper).
        op if runs_in_bf16(op) => BF16,
        // fp32 policy, fp32_set_opt_dtype, and float32 losses.
        Op::LayerNorm { .. }
        | Op::GroupNorm { .. }
        | Op::Upsample { .. }
        | Op::Softmax { .. }
        | Op::CrossEntropy
        | Op::Mse => F32,
        // An fp32 table: embedding is in no autocast list.
        Op::Embedding { .. } => F32,
        // `_fused_rms_norm` keeps the input's dtype; its fp32 weight promotes a bf16 input in
        // the composite fallback.
        Op::RmsNorm { .. } => F32,
        // x + table slice (fp32).
        Op::LearnedPosition { .. } => F32,
        // Made in float32 (rotary tables, masks), outside autocast's lists.
        Op::Constant { dtype, .. } => dtype.bytes(),
        // zeros like the (fp32-promoted) input; experts' outputs are cast to it.
        Op::Moe { .. } => input(0),
        // autocast's fp32 list (AT_FORALL_FP32: exp, log, reciprocal, rsqrt, pow).
        Op::Unary(f) if fp32_listed(*f) => F32,
        Op::Add | Op::Mul | Op::Sub | Op::Div | Op::Concat { .. } => promoted,
        // Everything else keeps input 0's dtype (batch_norm, activations, pools, views, the
        // class token cast to the input's kind).
        _ => input(0),
    }
}

/// sdpa with a mask on CUDA (read off torch 2.11's attention.cpp, not measured): the flash
/// kernel takes no mask, so the memory-efficient one runs. Autocast casts a float32 mask to
/// bf16 and `convert_boolean_attn_mask` makes a bool one additive at bf16; `preprocess_mask`
/// pads its last axis to a multiple of 16 (a new tensor when Tk is not one); the kernel saves
/// that bias and a logsumexp whose query axis is rounded up to 32 (`kAlignLSE`).
fn sdpa_mask(s: &Sizes, r: &mut OpRule) {
    use super::rules::{SDPA_BOOL_MASK, SDPA_LOGSUMEXP};
    let (b, h, tq) = (s.dim(0), s.dim(1), s.dim(2));
    let tk = s.shape_in(3).map_or(1, |m| m.0[3].at(s.batch));
    let rows = s.n_in(3) / tk.max(1);
    let padded = tk.div_ceil(16) * 16;
    let ready = s.e_in(3) == BF16 && padded == tk;
    r.saved.retain(|x| match x {
        Saved::Input(3) => false,
        Saved::Internal { what, .. } => *what != SDPA_BOOL_MASK && *what != SDPA_LOGSUMEXP,
        _ => true,
    });
    r.saved.push(if ready {
        Saved::Input(3)
    } else {
        Saved::Internal {
            what: "the mask at bf16, its last axis padded to a multiple of 16",
            bytes: rows * padded * BF16,
        }
    });
    r.saved.push(Saved::Internal {
        what: SDPA_LOGSUMEXP,
        bytes: b * h * tq.div_ceil(32) * 32 * F32,
    });
}

/// The rule for `node` at `batch` under bf16 autocast on CUDA.
pub fn rule(graph: &Graph, k: usize, batch: u64, values: &Values) -> OpRule {
    let node = &graph.nodes[k];
    let s = Sizes {
        node,
        k,
        batch,
        e: BF16,
        values,
    };
    let (n_in, n_out) = (s.n_in(0), s.n_out());
    let ex = s.e_in(0);
    let input_grad = graph.inputs.iter().all(|i| i.name != node.inputs[0]);
    use Saved::*;
    use Source::*;
    // An fp32 input to a lower-precision op is cast (a new bf16 copy, which the op saves); its
    // gradient comes back through the cast.
    let cast_saved = |what: &'static str, n: u64, e: u64| -> (Saved, Grad) {
        if e == F32 {
            (
                Internal {
                    what,
                    bytes: n * BF16,
                },
                Grad::ViaCast(n * BF16),
            )
        } else {
            (InputContiguous(0), Grad::New)
        }
    };
    let mut r = match &node.op {
        Op::Linear { .. } => {
            let (saved, grad) = cast_saved("bf16 cast of the input (autocast)", n_in, ex);
            let mut r = OpRule::new(Output::New(n_out * BF16), vec![saved], vec![grad], TorchSource)
                .note("lower_precision_fp: an fp32 input is cast to a bf16 copy, which addmm saves; the bf16 weight copy (autocast cache) is saved for the input's gradient; bf16 output");
            r.autocast = Some(CopySaved::IfInputRequiresGrad);
            r.cublas = true;
            r
        }
        Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => {
            let (saved, grad) = cast_saved("bf16 cast of the input (autocast)", n_in, ex);
            let saved = match saved {
                InputContiguous(_) => Input(0),
                other => other,
            };
            let mut r = OpRule::new(Output::New(n_out * BF16), vec![saved], vec![grad], TorchSource)
                .note("lower_precision_fp (cuDNN): saves its bf16 input and the bf16 weight copy; cuDNN's workspace is chosen at run time and not counted");
            r.autocast = Some(CopySaved::Always);
            r
        }
        Op::LayerNorm { .. } | Op::GroupNorm { .. } | Op::BatchNorm { .. } => norm_rule(&s),
        Op::RmsNorm { dim } if ex == F32 => OpRule::new(
            Output::New(n_out * F32),
            vec![
                Input(0),
                Internal {
                    what: "rstd (float32 rows)",
                    bytes: s.rows(*dim) * F32,
                },
            ],
            vec![Grad::New],
            TorchSource,
        )
        .note("`_fused_rms_norm` (CUDA kernel; fp32 input and weight): saves its input and rstd"),
        Op::Dropout { p } if *p > 0.0 => OpRule::new(
            Output::New(n_out * ex),
            vec![Internal {
                what: "bool mask (native_dropout)",
                bytes: n_in,
            }],
            vec![Grad::New],
            TorchSource,
        )
        .keeps_layout()
        .note("CUDA native_dropout: saves a bool mask (1 byte per element)"),
        Op::Upsample { .. } | Op::Softmax { .. } | Op::CrossEntropy | Op::Mse => fp32_policy(&s),
        Op::Unary(f) if fp32_listed(*f) && ex != F32 => unary_fp32(&s, *f, graph, k, batch, values),
        Op::Matmul | Op::Sdpa { .. } => operand_cast_rule(graph, k, batch, values, &s),
        Op::MultiheadAttention { .. } | Op::GqaAttention { .. } => attention_rule(&s),
        Op::Lstm(_) | Op::Gru(_) | Op::Moe { .. } | Op::MlaAttention { .. } => {
            let mut r = cpu_rule_at(graph, k, batch, values, BF16);
            r.source = Assumed;
            r.autocast = Some(CopySaved::Always);
            r.cublas = true;
            r.note = match &node.op {
                Op::Lstm(_) | Op::Gru(_) => "assumed: the cpu-fp32 stages at bf16 (cuDNN's RNN reserve space and workspace are chosen by cuDNN at run time; not derived)",
                Op::Moe { .. } => "assumed: the cpu-fp32 stages at bf16 (router, top-k, SwiGLU experts; routing assumed uniform)",
                _ => "assumed: the cpu-fp32 stages at bf16 (q/k and v head sizes differ: sdpa's memory-efficient path on CUDA, not derived)",
            };
            r
        }
        // Everything else: the same tensors as on CPU, sized by autocast's dtypes.
        _ => {
            let mut r = cpu_rule_at(graph, k, batch, values, ex);
            r.source = TorchSource;
            // A binary op's gradient for an input of a lower dtype than its output is cast to
            // that dtype by the engine (`validate_outputs`): a new buffer, not the output's.
            if matches!(node.op, Op::Add | Op::Sub | Op::Concat { .. }) {
                for (i, g) in r.grads.iter_mut().enumerate() {
                    if s.e_in(i) != s.e_out() {
                        *g = Grad::New;
                    }
                }
            }
            r
        }
    };
    if !input_grad
        && matches!(
            node.op,
            Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_)
        )
    {
        r.grads = vec![Grad::None];
    }
    if r.autocast.is_some() {
        r.bf16_param_grads = true;
    }
    r
}

/// Layer, group and batch norms under autocast (the fp32 policy, or the input's dtype for batch
/// norm, which is in no autocast list).
fn norm_rule(s: &Sizes) -> OpRule {
    let (n_in, n_out) = (s.n_in(0), s.n_out());
    let ex = s.e_in(0);
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::LayerNorm { normalized_shape, .. } => {
            let rows = s.rows(*normalized_shape) * F32;
            let (x_saved, grad) = fp32_cast(n_in, ex);
            OpRule::new(
                Output::New(n_out * F32),
                vec![x_saved, Internal { what: "mean+rstd (float32 rows)", bytes: 2 * rows }],
                vec![grad],
                TorchSource,
            )
            .note("fp32 policy: a bf16 input is cast to float32 (saved); saves mean and rstd; float32 output")
        }
        Op::GroupNorm { num_groups, .. } => {
            let (x_saved, grad) = fp32_cast(n_in, ex);
            OpRule::new(
                Output::New(n_out * F32),
                vec![x_saved, Internal { what: "mean+rstd (2 x B x groups float32)", bytes: 2 * s.dim(0) * num_groups * F32 }],
                vec![grad],
                TorchSource,
            )
            .note("fp32 policy: a bf16 input is cast to float32 (saved); saves mean and rstd")
        }
        Op::BatchNorm { num_features } => OpRule::new(
            Output::New(n_out * ex),
            vec![Input(0), Internal { what: "save_mean+save_invstd (2C float32)", bytes: 2 * num_features * F32 }],
            vec![Grad::New],
            TorchSource,
        )
        .note("in no autocast list: runs in its input's dtype (bf16 after a conv); saves its input, mean and inverse std"),
        _ => unreachable!("norm_rule: not a layer, group or batch norm"),
    }
}

/// `matmul` and sdpa: the CPU rule at bf16, with each fp32 operand cast to a saved bf16 copy.
fn operand_cast_rule(graph: &Graph, k: usize, batch: u64, values: &Values, s: &Sizes) -> OpRule {
    let node = s.node;
    use Saved::*;
    use Source::*;
    // lower_precision_fp: each fp32 operand is cast to a bf16 copy, which the op saves
    // and whose gradient comes back through the cast; bf16 operands are read as they
    // are (derived from the autocast lists and the CPU rule; not measured).
    let mut r = cpu_rule_at(graph, k, batch, values, BF16);
    // sdpa's mask (input 3) takes no gradient: `sdpa_mask` below.
    for i in 0..node.inputs.len().min(3) {
        if s.e_in(i) == F32 {
            let n = s.n_in(i);
            r.saved
                .retain(|x| !matches!(x, InputFolded(a, _) | Input(a) if *a == i));
            r.saved.push(Internal {
                what: "bf16 cast of an operand (autocast)",
                bytes: n * BF16,
            });
            r.grads[i] = Grad::ViaCast(n * BF16);
        }
    }
    if matches!(node.op, Op::Sdpa { .. }) {
        // The flash kernel on sm90 (no CPU scratch); its Philox RNG state is not counted.
        r.backward_transient = 0;
        if node.inputs.len() > 3 {
            sdpa_mask(s, &mut r);
        }
    }
    r.cublas = matches!(node.op, Op::Matmul);
    r.source = TorchSource;
    r.note = "lower_precision_fp: fp32 operands cast to bf16 copies (saved); the CPU rule's tensors at bf16 (not measured on a GPU)";
    r
}

/// Multi-head and grouped-query attention under autocast.
fn attention_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    use Source::*;
    match &node.op {
        Op::MultiheadAttention {
            sdpa: true,
            torch_impl: true,
            embed_dim,
            kdim,
            bias,
            ..
        } => {
            // torch.nn.MultiheadAttention's own forward: not derived for CUDA; the
            // separate-projection rule, with out_proj found in its packed parameter list.
            let mut r = gqa(s, node);
            if let Some(peak) = r.backward_peak.as_mut() {
                peak.params = super::rules::torch_mha_out_proj(*embed_dim, *kdim, *bias);
            }
            r.source = Assumed;
            r
        }
        Op::MultiheadAttention { sdpa: true, .. } => gqa(s, node),
        Op::MultiheadAttention { .. } => mha(s, node),
        Op::GqaAttention { .. } => gqa(s, node),
        _ => unreachable!("attention_rule: not a multi-head or grouped-query attention"),
    }
}

/// Upsampling, softmax and the losses: float32 ops under autocast (the fp32 and
/// fp32_set_opt_dtype policies), with cross entropy's log_softmax left in bf16.
fn fp32_policy(s: &Sizes) -> OpRule {
    let (n_in, n_out) = (s.n_in(0), s.n_out());
    let ex = s.e_in(0);
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::Upsample { .. } => {
            let t = if ex == F32 { 0 } else { n_in * F32 };
            let grad = if ex == F32 { Grad::New } else { Grad::ViaCast(n_in * F32) };
            OpRule::new(Output::New(n_out * F32), vec![], vec![grad], TorchSource)
                .fwd(t)
                .note("fp32 policy: a bf16 input is cast to a float32 copy while it runs; saves nothing; float32 output")
        }
        Op::Softmax { .. } => {
            let t = if ex == F32 { 0 } else { n_in * F32 };
            let grad = if ex == F32 { Grad::New } else { Grad::ViaCast(n_in * F32) };
            OpRule::new(Output::New(n_out * F32), vec![Out], vec![grad], TorchSource)
                .fwd(t)
                .contiguous_input()
                .note("fp32_set_opt_dtype: a bf16 input is cast to a float32 copy (held while it runs); saves its float32 output")
        }
        // Revised after the first comparison with the GPU rows (the frozen table had the
        // log_softmax in float32): cross_entropy_loss is CompositeImplicitAutograd
        // (LossNLL.cpp, `cross_entropy_loss_symint`) and calls
        // `log_softmax(self, class_dim, self.scalar_type())`: the dtype is given, so autocast's
        // fp32_set_opt_dtype leaves it bf16; then nll_loss (fp32 policy) casts the bf16
        // log-probabilities to a float32 copy, which nll_loss_forward saves as `self`.
        Op::CrossEntropy if ex == BF16 => OpRule::new(
            Output::New(4),
            vec![
                Internal { what: "log_softmax output (bf16 N x V)", bytes: n_in * BF16 },
                Internal { what: "float32 cast of the log-probabilities (saved by nll_loss)", bytes: n_in * F32 },
                Internal { what: "total_weight", bytes: 4 },
            ],
            vec![Grad::New, Grad::None],
            TorchSource,
        )
        .bwd(n_in * BF16)
        .contiguous_input()
        .note("cross_entropy_loss: log_softmax in the logits' bf16 (dtype given explicitly, so autocast leaves it), then nll_loss (fp32 policy) on a float32 copy it saves; backward: nll_loss's float32 N x V gradient, cast back to bf16, log_softmax's bf16 gradient (revised after the GPU comparison)"),
        Op::CrossEntropy => {
            let lsm = n_in * F32;
            let t = if ex == F32 { 0 } else { n_in * F32 };
            let grad = if ex == F32 { Grad::New } else { Grad::ViaCast(lsm) };
            OpRule::new(
                Output::New(4),
                vec![Internal { what: "log_softmax output (float32 N x V)", bytes: lsm }, Internal { what: "total_weight", bytes: 4 }],
                vec![grad, Grad::None],
                TorchSource,
            )
            .fwd(t)
            .bwd(lsm)
            .contiguous_input()
            .note("log_softmax (fp32_set_opt_dtype: bf16 logits cast to a float32 copy) + nll_loss (fp32): saves the float32 N x V log-softmax; backward holds it, nll_loss's and log_softmax's float32 N x V gradients, then casts to bf16")
        }
        Op::Mse => {
            let (x_saved, grad) = fp32_cast(n_in, ex);
            OpRule::new(
                Output::New(n_in * F32),
                vec![x_saved, Input(1)],
                vec![grad, Grad::New],
                Calibrated("calibrated on sim-mse-only, sim-mse-wide (CPU; the input-sized loss buffer)"),
            )
            .fwd(n_in * F32 + 12)
            .note("fp32 policy: a bf16 prediction is cast to float32 (saved); as on CPU, the loss keeps an input-sized buffer until it is dropped")
        }
        _ => unreachable!("fp32_policy for another op"),
    }
}

/// An fp32-policy op on a bf16 input casts it to a float32 copy, which it saves; its gradient
/// comes back through the cast.
fn fp32_cast(n: u64, e: u64) -> (Saved, Grad) {
    if e == F32 {
        (Saved::Input(0), Grad::New)
    } else {
        (
            Saved::Internal {
                what: "float32 cast of the bf16 input (autocast fp32 policy)",
                bytes: n * F32,
            },
            Grad::ViaCast(n * F32),
        )
    }
}

/// The highest running total of a sequence of allocations (+) and frees (-).
fn high(deltas: &[i64]) -> u64 {
    let mut level = 0i64;
    let mut top = 0i64;
    for d in deltas {
        level += d;
        top = top.max(level);
    }
    top.max(0) as u64
}

/// Eager multi-head attention as the harness's `mha` runs it under autocast.
fn mha(s: &Sizes, node: &Node) -> OpRule {
    let Op::MultiheadAttention {
        embed_dim: d,
        num_heads: h,
        causal,
        relative_attention_buckets: nb,
        bias,
        ..
    } = &node.op
    else {
        unreachable!("mha rule for another op")
    };
    let (b, tq) = (s.dim(0), s.dim(1));
    let tk = s.shape_in(1).map_or(tq, |m| m.0[1].at(s.batch));
    let ex = s.e_in(0);
    let ekv = if node.inputs.len() > 1 { s.e_in(1) } else { ex };
    let (aq, ak, sc) = (b * tq * d * BF16, b * tk * d * BF16, b * h * tq * tk);
    let tt = tq * tk;
    let i = |v: u64| v as i64;
    // Casts of fp32 inputs: one per projection (activations are not cached).
    let cq = if ex == F32 { aq } else { 0 };
    let ckv = if ekv == F32 { 2 * ak } else { 0 };
    let mut saved = vec![];
    if cq + ckv > 0 {
        saved.push(Saved::Internal {
            what: "bf16 casts of the input for the q, k, v projections",
            bytes: cq + ckv,
        });
    }
    saved.extend([
        Saved::Internal {
            what: "q*scale (contiguous bf16 copy for bmm)",
            bytes: aq,
        },
        Saved::Internal {
            what: "k^T (contiguous bf16 copy for bmm)",
            bytes: ak,
        },
        Saved::Internal {
            what: "softmax output (float32 B x H x Tq x Tk)",
            bytes: sc * F32,
        },
        Saved::Internal {
            what: "bf16 cast of the attention weights (for attn @ v)",
            bytes: sc * BF16,
        },
        Saved::Internal {
            what: "v (contiguous bf16 copy for bmm)",
            bytes: ak,
        },
        Saved::Internal {
            what: "context (contiguous bf16, out_proj input)",
            bytes: aq,
        },
    ]);
    if node.inputs.len() > 1 {
        saved.push(Saved::Input(1));
    }
    let (mask, bucket) = (
        if *causal { tt } else { 0 },
        if *nb > 0 { tt * 8 } else { 0 },
    );
    if *causal {
        saved.push(Saved::Internal {
            what: "causal mask (bool Tq x Tk)",
            bytes: mask,
        });
    }
    if *nb > 0 {
        saved.push(Saved::Internal {
            what: "bucket indices (int64 Tq x Tk)",
            bytes: bucket,
        });
    }
    // Forward, in the harness's order; q, k, v projections, q*scale, the scores and the
    // context are Rust locals until the function returns.
    let rel = if *nb > 0 { h * tt * F32 } else { 0 };
    let fwd = high(&[
        i(cq + ckv),
        i(aq + 2 * ak),
        i(aq),
        i(aq + ak + sc * BF16),
        i(bucket + rel),
        -i(rel),
        i(mask + if *causal { sc * BF16 } else { 0 }),
        -i(if *causal { sc * BF16 } else { 0 }),
        i(2 * sc * F32),
        -i(sc * F32),
        i(sc * BF16 + ak + aq),
        i(aq),
        i(aq),
    ]);
    // Backward stages after the level before it (saved tensors and the incoming gradient):
    // out_proj, attn @ v, the weights' cast back, softmax, the scores' cast, masked_fill, the
    // bias, q @ k^T, q*scale.
    let wo = d * d * BF16 + if *bias { d * BF16 } else { 0 };
    let stages = |freed: bool| {
        high(&[
            i(aq + wo),
            -i(wo + aq + if freed { aq } else { 0 }),
            i(sc * BF16 + ak),
            -i(sc * BF16 + ak + aq),
            i(sc * F32),
            -i(sc * BF16),
            i(sc * F32),
            -i(2 * sc * F32),
            i(sc * BF16),
            -i(sc * F32),
            i(if *causal { sc * BF16 } else { 0 }),
            -i(if *causal { sc * BF16 + mask } else { 0 }),
            i(rel),
            -i(rel),
            i(aq + ak),
            -i(aq + ak + sc * BF16),
            i(aq),
        ])
    };
    let grads = if ex == F32 {
        vec![Grad::ViaCast(aq)]
    } else {
        vec![Grad::New]
    };
    let mut grads = grads;
    if node.inputs.len() > 1 {
        grads.push(if ekv == F32 {
            Grad::ViaCast(ak)
        } else {
            Grad::New
        });
    }
    let o_proj = if *bias { vec![6, 7] } else { vec![3] };
    let mut r = OpRule::new(Output::New(aq), saved, grads, Source::TorchSource)
        .fwd(fwd)
        .note("eager attention under autocast: bf16 projections (an fp32 input cast once per projection), bf16 scores, softmax in float32 (fp32_set_opt_dtype: a float32 copy of the scores, a float32 output saved), cast back to bf16 for attn @ v (saved); backward stage by stage through both casts");
    r.forward_transient = 0;
    r.forward_peak = Some(fwd);
    r.backward_peak = Some(BackwardPeak {
        freed: stages(true),
        held: stages(false),
        params: o_proj,
    });
    r.autocast = Some(CopySaved::IfInputRequiresGrad);
    r.cublas = true;
    r
}

/// Grouped-query attention: projections, k and v repeated to all heads, flash sdpa.
fn gqa(s: &Sizes, node: &Node) -> OpRule {
    match &node.op {
        Op::GqaAttention {
            embed_dim,
            num_heads,
            num_kv_heads,
            head_dim,
            bias,
            out_bias,
            repeat_kv,
            qk_norm,
            ..
        } => flash(
            s,
            [*embed_dim, *num_heads, *num_kv_heads, *head_dim],
            (*bias, *out_bias),
            (*repeat_kv, *qk_norm),
        ),
        // backend "sdpa": self- or cross-attention, as many kv heads as heads.
        Op::MultiheadAttention {
            embed_dim,
            num_heads,
            bias,
            sdpa: true,
            ..
        } => flash(
            s,
            [*embed_dim, *num_heads, *num_heads, embed_dim / num_heads],
            (*bias, *bias),
            (true, false),
        ),
        _ => unreachable!("sdpa rule for another op"),
    }
}

/// Attention through flash sdpa on CUDA: `[embed_dim, heads, kv_heads, head_dim]`.
/// `(bias, out_bias)`: the q, k, v projections' biases and the output projection's.
/// `qk_norm`: q and k through `_fused_rms_norm` first (the `rms_norm` rule: it saves its input
/// and a float32 rstd per row); derived from torch's source, not measured on CUDA.
fn flash(
    s: &Sizes,
    [embed_dim, h, kvh, hd]: [u64; 4],
    (bias, out_bias): (bool, bool),
    (repeat_kv, qk_norm): (bool, bool),
) -> OpRule {
    let (b, t) = (s.dim(0), s.dim(1));
    let ex = s.e_in(0);
    let i = |v: u64| v as i64;
    // Cross-attention: k and v project the memory (input 1), of its own length and dtype.
    let cross = s.shape_in(1).is_some();
    let tk = s.shape_in(1).map_or(t, |m| m.0[1].at(s.batch));
    let em = if cross { s.e_in(1) } else { ex };
    let x = b * t * embed_dim * BF16;
    let xm = b * tk * embed_dim * BF16;
    let q = b * t * h * hd * BF16;
    let kv = b * tk * kvh * hd * BF16;
    let repeated = h > kvh && repeat_kv;
    let (ks, vs) = if repeated { (q, q) } else { (kv, kv) };
    let casts = if ex == F32 { x } else { 0 } + if em == F32 { 2 * xm } else { 0 };
    let lse = b * h * t * F32;
    let mut saved = vec![];
    if casts > 0 {
        saved.push(Saved::Internal {
            what: "bf16 casts of the input for the q, k, v projections",
            bytes: casts,
        });
    }
    saved.extend([
        Saved::Internal {
            what: "q projection (bf16)",
            bytes: q,
        },
        Saved::Internal {
            what: "k (bf16, repeated to all heads)",
            bytes: ks,
        },
        Saved::Internal {
            what: "v (bf16, repeated to all heads)",
            bytes: vs,
        },
        Saved::Internal {
            what: "flash output (bf16, o_proj input)",
            bytes: q,
        },
        Saved::Internal {
            what: "logsumexp B x H x T float32 and rng state",
            bytes: lse + 16,
        },
    ]);
    if qk_norm {
        saved.extend([
            Saved::Internal {
                what: "q projection (q_norm's input, bf16) and its float32 rstd",
                bytes: q + b * t * h * F32,
            },
            Saved::Internal {
                what: "k projection (k_norm's input, bf16) and its float32 rstd",
                bytes: kv + b * tk * kvh * F32,
            },
        ]);
    }
    let fwd = if repeated { 2 * kv } else { 0 };
    // FlashAttention-2 mha_bwd: dq, dk, dv, dq_accum (float32, T rounded to 128, head dim to 32)
    // and softmax_d (float32 B x H x T rounded to 128).
    let t128 = t.div_ceil(128) * 128;
    let hd32 = hd.div_ceil(32) * 32;
    let accum = b * t128 * h * hd32 * F32 + b * h * t128 * F32;
    let wo = embed_dim * h * hd * BF16 + if out_bias { embed_dim * BF16 } else { 0 };
    let y = s.y();
    let stages = |freed: bool| {
        high(&[
            i(q + wo),
            -i(wo + if freed { y } else { 0 }),
            i(q + ks + vs + accum),
            -i(accum),
        ])
    };
    let grad = |e: u64, bytes: u64| {
        if e == F32 {
            Grad::ViaCast(bytes)
        } else {
            Grad::New
        }
    };
    let mut grads = vec![grad(ex, x)];
    if cross {
        saved.push(Saved::Input(1));
        grads.push(grad(em, xm));
    }
    let o = if bias { 6 } else { 3 };
    let o_proj = if out_bias { vec![o, o + 1] } else { vec![o] };
    let mut r = OpRule::new(Output::New(y), saved, grads, Source::TorchSource)
        .fwd(fwd)
        .note("bf16 q, k, v projections (an fp32 input cast once per projection), k and v repeated to all heads, flash sdpa (sm90, bf16): saves q, k, v, the output, float32 logsumexp and rng state; backward holds dq, dk, dv and flash's float32 dq_accum");
    r.backward_peak = Some(BackwardPeak {
        freed: stages(true),
        held: stages(false),
        params: o_proj,
    });
    r.autocast = Some(CopySaved::IfInputRequiresGrad);
    r.cublas = true;
    r
}

/// Whether an op runs on autocast's lower-precision list (`AT_FORALL_LOWER_PRECISION_FP`:
/// linear, conv, matmul/bmm and sdpa inside attention; RNNs through `_cudnn_rnn`'s wrapper).
pub fn runs_in_bf16(op: &Op) -> bool {
    matches!(
        op,
        Op::Linear { .. }
            | Op::Conv1d(_)
            | Op::Conv2d(_)
            | Op::ConvTranspose2d(_)
            | Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Lstm(_)
            | Op::Gru(_)
            | Op::Matmul
            | Op::Sdpa { .. }
    )
}

/// Whether autocast runs a generic elementwise function in float32 (`AT_FORALL_FP32` in
/// `ATen/autocast_mode.h`: exp, log, reciprocal, rsqrt and pow are listed; the others run in
/// their input's dtype).
fn fp32_listed(f: crate::ops::UnaryFn) -> bool {
    use crate::ops::UnaryFn as U;
    match f {
        U::Exp | U::Log | U::Reciprocal | U::Rsqrt | U::Pow(_) => true,
        U::Sqrt
        | U::Sigmoid
        | U::Tanh
        | U::Neg
        | U::Abs
        | U::Sin
        | U::Cos
        | U::Erf
        | U::MulScalar(_)
        | U::AddScalar(_) => false,
    }
}

/// A generic elementwise function on autocast's fp32 list, of a bf16 input: the input is cast
/// to a float32 copy, which the function saves where it saves its input (else the copy lives
/// while it runs); the output and the backward's temporaries are float32, and the gradient
/// comes back through the cast's `ToCopyBackward` (the cpu-fp32 rule's tensors at float32).
fn unary_fp32(
    s: &Sizes,
    f: crate::ops::UnaryFn,
    graph: &Graph,
    k: usize,
    batch: u64,
    values: &Values,
) -> OpRule {
    let n = s.n_in(0);
    let mut r = cpu_rule_at(graph, k, batch, values, F32);
    let cast = n * F32;
    match f.saves() {
        crate::ops::UnarySaves::Input => {
            r.saved = vec![Saved::Internal {
                what: "float32 cast of the bf16 input (autocast fp32 list)",
                bytes: cast,
            }];
        }
        crate::ops::UnarySaves::Output | crate::ops::UnarySaves::Nothing => {
            r.forward_transient = cast;
        }
    }
    r.grads = vec![Grad::ViaCast(cast)];
    r.source = Source::TorchSource;
    r.note = "autocast fp32 list (exp, log, reciprocal, rsqrt, pow): the bf16 input is cast to float32, the function runs and saves in float32";
    r
}
