//! The mixture of experts (`moe`): every fact of it.

use super::Family;
use super::{prod, Intermediates, TextbookRole};
use crate::graph::Graph;
use crate::ops::attributes::{at_most, Attrs, MAX_REPEATS};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;
use crate::simulate::cuda::*;
use crate::simulate::rules::Sizes;
use crate::simulate::rules::*;

/// Attributes of `moe`.
pub(super) fn parse_moe(a: &mut Attrs) -> Result<Op, String> {
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
        }
    })
}

/// `moe`: a mixture of experts.
pub(super) struct MoeFamily;

impl Family for MoeFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        _out: &mut Shape,
    ) -> Result<(), String> {
        if let Op::Moe { dim: d, .. } = op {
            ck.expect_rank(&[3])?;
            ck.expect_last(*d, "model width")?;
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        if let Op::Moe {
            dim,
            hidden,
            num_experts,
            ..
        } = op
        {
            p.push(vec![*num_experts, *dim]);
            for _ in 0..*num_experts {
                p.push(vec![*hidden, *dim]);
                p.push(vec![*hidden, *dim]);
                p.push(vec![*dim, *hidden]);
            }
        }
    }

    /// Router logits; per routed token: w1 and w3 outputs, w2 output.
    fn intermediates(
        &self,
        op: &Op,
        x: &Shape,
        _memory: Option<&Shape>,
        batch: u64,
    ) -> Intermediates {
        let Op::Moe {
            dim,
            hidden,
            num_experts,
            top_k,
        } = op
        else {
            unreachable!("not a mixture of experts")
        };
        let t = x.numel_at(batch) / (*dim).max(1);
        Intermediates {
            tensors: vec![
                prod(&[t, *num_experts]),
                prod(&[t, *top_k, *hidden]),
                prod(&[t, *top_k, *hidden]),
                prod(&[t, *top_k, *dim]),
            ],
            less_output: true,
            ..Default::default()
        }
    }

    fn textbook(&self, _op: &Op) -> TextbookRole {
        TextbookRole::NotTransformer
    }

    /// The router, then every expert's w1, w3 and w2.
    fn matrices(&self, op: &Op) -> Vec<(u64, u64)> {
        let Op::Moe {
            dim,
            hidden,
            num_experts,
            ..
        } = op
        else {
            unreachable!("not a mixture of experts")
        };
        let mut m = vec![(*dim, *num_experts)];
        for _ in 0..*num_experts {
            m.extend([(*dim, *hidden), (*dim, *hidden), (*hidden, *dim)]);
        }
        m
    }

    fn projection_width(&self, op: &Op) -> Option<u64> {
        match op {
            Op::Moe { dim, .. } => Some(*dim),
            _ => None,
        }
    }

    /// The router and every expert's w1, w3 and w2.
    fn lora_targets(&self, _op: &Op) -> usize {
        usize::MAX
    }

    /// The router's tokens, then each expert's share of the routed tokens (routing assumed
    /// uniform, as the plain rule does).
    fn lora_tokens(&self, op: &Op, s: &Sizes, j: usize, _inp: u64) -> u64 {
        let Op::Moe {
            dim,
            top_k,
            num_experts,
            ..
        } = op
        else {
            unreachable!("not a mixture of experts")
        };
        if j > 0 {
            s.rows(*dim) * top_k / (*num_experts).max(1)
        } else {
            s.rows(*dim)
        }
    }

    /// The router's tokens, then every routed token through w1, w3 and w2.
    fn lora_adapter_bytes(&self, op: &Op, s: &Sizes, rank: u64) -> Option<u64> {
        match op {
            Op::Moe { dim, top_k, .. } => Some((s.rows(*dim) * (1 + 3 * top_k)) * rank * 4),
            _ => None,
        }
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        moe_rule(s)
    }

    fn cuda_rule(&self, _op: &Op, _s: &Sizes, call: &CudaCall) -> OpRule {
        assumed_at_bf16(call, "assumed: the cpu-fp32 stages at bf16 (router, top-k, SwiGLU experts; routing assumed uniform)")
    }

    /// Zeros like the (fp32-promoted) input; experts' outputs are cast to it.
    fn autocast_output(&self, _op: &Op, input: u64, _promoted: u64) -> u64 {
        input
    }
}

/// Mixture of experts: router, top-k and SwiGLU experts.
fn moe_rule(s: &Sizes) -> OpRule {
    let e = s.e;
    let y = s.y();
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let Op::Moe {
        dim,
        hidden,
        num_experts,
        top_k,
    } = &s.node.op
    else {
        unreachable!("moe_rule: not a mixture of experts")
    };
    let t = s.rows(*dim);
    let routed = t * top_k;
    let saved = vec![
        InputContiguous(0),
        Internal {
            what: "router softmax",
            bytes: t * num_experts * e,
        },
        Internal {
            what: "top-k values (saved by the renormalising div), their sum, int64 indices",
            bytes: routed * (e + 8) + t * e,
        },
        Internal {
            what: "routing positions (int64 nonzero)",
            bytes: routed * 16,
        },
        Internal {
            what: "expert inputs (gathered rows)",
            bytes: routed * dim * e,
        },
        Internal {
            what: "w1 output, silu output, w3 output, gated hidden",
            bytes: 4 * routed * hidden * e,
        },
        Internal {
            what: "w2 output, routing weight, weighted output (index_add_ saves its source)",
            bytes: routed * (2 * dim + 1) * e,
        },
    ];
    // Experts run in reverse in backward; the first one's `w2 * weight` backward (its
    // output's gathered gradient, the gradient of w2's output and a product temporary)
    // is the highest point, with routing assumed uniform over the experts.
    let per_expert = routed.div_ceil(*num_experts);
    let mut r = OpRule::new(Output::New(y), saved, one, Calibrated("calibrated on sim-moe"))
        .fwd(routed * e)
        .note("router, top-k, SwiGLU experts on their routed tokens: saves the gathered rows, every expert hidden state and each expert's weighted output; forward also holds the renormalised top-k values; backward peaks in the first expert's backward (routing assumed uniform: the real split is random)");
    let first = 3 * per_expert * dim * e;
    r.backward_peak = Some(BackwardPeak {
        freed: first,
        held: first,
        params: vec![],
    });
    r
}
