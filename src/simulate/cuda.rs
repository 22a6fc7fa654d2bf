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
    cpu_rule_at, BackwardPeak, CopySaved, Grad, OpRule, Output, Saved, Sizes, Source, Values, BF16,
    F32,
};
use crate::graph::Graph;

/// cuBLAS workspace per (handle, stream) on sm90 (`getChosenWorkspaceSize`, 4096 KiB x 8).
pub const CUBLAS_WORKSPACE: u64 = 4096 * 8 * 1024;
/// cuBLASLt workspace (`CUBLASLT_WORKSPACE_SIZE` default, 1024 KiB).
pub const CUBLASLT_WORKSPACE: u64 = 1024 * 1024;

/// sdpa with a mask on CUDA (read off torch 2.11's attention.cpp, not measured): the flash
/// kernel takes no mask, so the memory-efficient one runs. Autocast casts a float32 mask to
/// bf16 and `convert_boolean_attn_mask` makes a bool one additive at bf16; `preprocess_mask`
/// pads its last axis to a multiple of 16 (a new tensor when Tk is not one); the kernel saves
/// that bias and a logsumexp whose query axis is rounded up to 32 (`kAlignLSE`).
pub(crate) fn sdpa_mask(s: &Sizes, r: &mut OpRule) {
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

/// What a family's CUDA rule is given besides the sizes: the node, its batch and the values'
/// element sizes (to start from the CPU rule's tensors at another dtype), whether its input
/// requires a gradient, and its input's element bytes.
pub(crate) struct CudaCall<'a> {
    pub graph: &'a Graph,
    pub k: usize,
    pub batch: u64,
    pub values: &'a Values<'a>,
    pub input_grad: bool,
    pub ex: u64,
}

/// An fp32 input to a lower-precision op is cast (a new bf16 copy, which the op saves); its
/// gradient comes back through the cast.
pub(crate) fn cast_saved(what: &'static str, n: u64, e: u64) -> (Saved, Grad) {
    if e == F32 {
        (
            Saved::Internal {
                what,
                bytes: n * BF16,
            },
            Grad::ViaCast(n * BF16),
        )
    } else {
        (Saved::InputContiguous(0), Grad::New)
    }
}

/// The op's tensors as on CPU, sized by autocast's dtypes (`ex`: its input's); with
/// `casts_grads`, a binary op's gradient for an input of a lower dtype than its output is cast
/// to that dtype by the engine (`validate_outputs`): a new buffer, not the output's.
pub(crate) fn as_on_cpu(s: &Sizes, call: &CudaCall, casts_grads: bool) -> OpRule {
    let mut r = cpu_rule_at(call.graph, call.k, call.batch, call.values, call.ex);
    r.source = Source::TorchSource;
    if casts_grads {
        for (i, g) in r.grads.iter_mut().enumerate() {
            if s.e_in(i) != s.e_out() {
                *g = Grad::New;
            }
        }
    }
    r
}

/// A compound op assumed to hold the cpu-fp32 stages at bf16 (`note` says which).
pub(crate) fn assumed_at_bf16(call: &CudaCall, note: &'static str) -> OpRule {
    let mut r = cpu_rule_at(call.graph, call.k, call.batch, call.values, BF16);
    r.source = Source::Assumed;
    r.autocast = Some(CopySaved::Always);
    r.cublas = true;
    r.note = note;
    r
}

/// The rule for `node` at `batch` under bf16 autocast on CUDA: its family's.
pub fn rule(graph: &Graph, k: usize, batch: u64, values: &Values) -> OpRule {
    let node = &graph.nodes[k];
    let s = Sizes {
        node,
        k,
        batch,
        e: BF16,
        values,
    };
    let ex = s.e_in(0);
    let input_grad = graph.inputs.iter().all(|i| i.name != node.inputs[0]);
    let call = CudaCall {
        graph,
        k,
        batch,
        values,
        input_grad,
        ex,
    };
    let mut r = node.op.family().cuda_rule(&node.op, &s, &call);
    if r.autocast.is_some() {
        r.bf16_param_grads = true;
    }
    r
}

/// `matmul` and sdpa: the CPU rule at bf16, with each fp32 operand cast to a saved bf16 copy.
pub(crate) fn operand_cast_rule(call: &CudaCall, s: &Sizes, sdpa: bool) -> OpRule {
    let (graph, k, batch, values) = (call.graph, call.k, call.batch, call.values);
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
    if sdpa {
        // The flash kernel on sm90 (no CPU scratch); its Philox RNG state is not counted.
        r.backward_transient = 0;
        if node.inputs.len() > 3 {
            sdpa_mask(s, &mut r);
        }
    }
    r.cublas = !sdpa;
    r.source = TorchSource;
    r.note = "lower_precision_fp: fp32 operands cast to bf16 copies (saved); the CPU rule's tensors at bf16 (not measured on a GPU)";
    r
}

/// An fp32-policy op on a bf16 input casts it to a float32 copy, which it saves; its gradient
/// comes back through the cast.
pub(crate) fn fp32_cast(n: u64, e: u64) -> (Saved, Grad) {
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
pub(crate) fn high(deltas: &[i64]) -> u64 {
    let mut level = 0i64;
    let mut top = 0i64;
    for d in deltas {
        level += d;
        top = top.max(level);
    }
    top.max(0) as u64
}

/// Attention through flash sdpa on CUDA: `[embed_dim, heads, kv_heads, head_dim]`.
/// `(bias, out_bias)`: the q, k, v projections' biases and the output projection's.
/// `qk_norm`: q and k through `_fused_rms_norm` first (the `rms_norm` rule: it saves its input
/// and a float32 rstd per row); derived from torch's source, not measured on CUDA.
pub(crate) fn flash(
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

/// Whether autocast runs a generic elementwise function in float32 (`AT_FORALL_FP32` in
/// `ATen/autocast_mode.h`: exp, log, reciprocal, rsqrt and pow are listed; the others run in
/// their input's dtype).
pub(crate) fn fp32_listed(f: crate::ops::UnaryFn) -> bool {
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
pub(crate) fn unary_fp32(
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
