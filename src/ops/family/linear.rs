//! The `linear` and `matmul` ops: every fact of each.

use super::Family;
use super::LoraCall;
use super::Tie;
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::OpRule;
use crate::simulate::rules::*;
use serde_json::Value;

/// Attributes of `linear`.
pub(super) fn parse_linear(a: &mut Attrs) -> Result<Op, String> {
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
}

/// Attributes of `matmul`.
pub(super) fn parse_matmul(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Matmul)
}

/// `linear` and `matmul`.
pub(super) struct LinearFamily;

impl Family for LinearFamily {
    fn saves_weight_views(&self, _op: &Op) -> bool {
        true // `F.linear`: mm / addmm save `weight.t()`
    }

    fn tp_form(&self, op: &Op) -> super::TpForm {
        match op {
            Op::Linear { .. } => super::TpForm::Linear,
            _ => super::TpForm::Replicated,
        }
    }

    /// Colwise: the outputs (and the bias) / k; rowwise: the inputs / k, the bias whole.
    fn tp_local(&self, op: &Op, role: super::TpRole, k: u64) -> Result<Op, String> {
        let mut op = op.clone();
        match (&mut op, role) {
            (Op::Linear { out_features, .. }, super::TpRole::Colwise) => {
                *out_features = super::tp_share("out_features", *out_features, k)?;
            }
            (Op::Linear { in_features, .. }, super::TpRole::Rowwise) => {
                *in_features = super::tp_share("in_features", *in_features, k)?;
            }
            _ => {}
        }
        Ok(op)
    }

    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Linear {
                in_features,
                out_features,
                ..
            } => {
                ck.expect_last(*in_features, "in_features")?;
                *out.0.last_mut().unwrap() = Dim::fixed(*out_features);
            }
            Op::Matmul => {
                let w = inputs[1];
                let r = x.rank();
                if r < 2
                    || w.rank() != r
                    || x.0[..r - 2] != w.0[..r - 2]
                    || x.0[r - 1] != w.0[r - 2]
                {
                    return Err(format!(
                        "expected [..., n, k] and [..., k, m] with the same leading dimensions, found {x} and {w}"
                    ));
                }
                out.0[r - 1] = w.0[r - 1];
            }
            _ => unreachable!("not a linear or matmul"),
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        if let Op::Linear {
            in_features,
            out_features,
            bias,
            tie,
        } = op
        {
            if tie.is_none() {
                p.push(vec![*out_features, *in_features]);
            }
            if *bias {
                p.push(vec![*out_features]);
            }
        }
    }

    fn tie<'o>(&self, op: &'o Op) -> Option<Tie<'o>> {
        match op {
            Op::Linear {
                in_features,
                out_features,
                tie: Some(t),
                ..
            } => Some(Tie {
                target: t,
                num: *out_features,
                dim: *in_features,
                need: "a tied linear needs in_features = {dim} and out_features = {num}",
                dim_first: true,
            }),
            _ => None,
        }
    }

    fn projection_width(&self, op: &Op) -> Option<u64> {
        match op {
            Op::Linear { out_features, .. } => Some(*out_features),
            _ => None,
        }
    }

    /// An untied linear's weight (a tied one's is an embedding's table).
    fn lora_targets(&self, op: &Op) -> usize {
        usize::from(matches!(op, Op::Linear { tie: None, .. }))
    }

    /// A frozen linear (the head, a projection outside the blocks): its input is saved only
    /// for its weight's gradient.
    fn lora_frozen(&self, op: &Op, r: &mut OpRule) {
        if matches!(op, Op::Linear { .. }) {
            r.saved.clear();
            r.note = "frozen linear: saves nothing (its input is saved only for the weight's gradient, derivatives.yaml mm/addmm with should_compute_output)";
        }
    }

    fn lora_single(&self, op: &Op, r: &mut OpRule, lora: &LoraCall) -> bool {
        if !matches!(op, Op::Linear { .. }) {
            return false;
        }
        let rank = lora.rank;
        let (tokens, out, inp) = lora.targets[0];
        let y = tokens * out * 4;
        // Base and adapter outputs beside their sum.
        r.forward_transient += 2 * y;
        // The base path's input gradient beside the adapter path's (added in place), by
        // when B's `mm` has run and its saved `x·Aᵀ` is released (the engine releases a
        // node's saved variables once it has run); or, when the input needs no gradient,
        // the gradient of `x·Aᵀ`.
        let u = tokens * rank * 4;
        r.backward_transient += if lora.x_grad {
            (tokens * inp * 4).saturating_sub(u)
        } else {
            u
        };
        r.note = if lora.quantize {
            "QLoRA linear: dequantizes its weight (kept by mm for the input's gradient), base + x·Aᵀ·Bᵀ: saves its input and x·Aᵀ; the base and adapter outputs exist with their sum"
        } else {
            "LoRA linear: base + x·Aᵀ·Bᵀ: saves its input (for A's gradient) and x·Aᵀ (for B's); the base and adapter outputs exist with their sum; backward adds the base path's input gradient into the adapter path's"
        };
        true
    }

    fn uses_cublaslt(&self, op: &Op) -> bool {
        matches!(op, Op::Linear { bias: true, .. })
    }

    fn matmul_on_strided_input(&self, op: &Op) -> bool {
        matches!(op, Op::Linear { .. })
    }

    fn copies_strided_gradient(&self, op: &Op, input_rank: usize) -> bool {
        matches!(op, Op::Linear { .. }) && input_rank >= 3
    }

    fn cpu_rule(&self, op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        let y = s.y();
        use Saved::*;
        use Source::*;
        match op {
            Op::Linear { .. } => OpRule::new(Output::New(y), vec![InputContiguous(0)], vec![Grad::New], Measured)
                .note("saves its input (a contiguous copy when the input is not contiguous); backward: grad input, weight and bias grads"),
            Op::Matmul => OpRule::new(Output::New(y), vec![InputFolded(0, 1), InputFolded(1, 0)], vec![Grad::New, Grad::New], TorchSource)
                .note("torch.matmul of batched operands (LinearAlgebra.cpp `_matmul_impl`): each is expanded and reshaped to 3-d, a copy where its batch axes do not merge (a transposed head view), and bmm saves each for the other's gradient (derivatives.yaml `bmm`); backward makes both gradients new"),
            _ => unreachable!("not a linear or matmul"),
        }
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        let (n_in, n_out, ex) = (s.n_in(0), s.n_out(), call.ex);
        match op {
            Op::Linear { .. } => {
                let (saved, grad) = cast_saved("bf16 cast of the input (autocast)", n_in, ex);
                let mut r = OpRule::new(Output::New(n_out * BF16), vec![saved], vec![grad], Source::TorchSource)
                    .note("lower_precision_fp: an fp32 input is cast to a bf16 copy, which addmm saves; the bf16 weight copy (autocast cache) is saved for the input's gradient; bf16 output");
                r.autocast = Some(CopySaved::IfInputRequiresGrad);
                r.cublas = true;
                r
            }
            _ => operand_cast_rule(call, s, false),
        }
    }

    fn runs_in_bf16(&self, _op: &Op) -> bool {
        true
    }
}
