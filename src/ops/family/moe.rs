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
            grouped: a.one_of("layout", &[("per_expert", false), ("grouped", true)], false)?,
            renormalize: a.flag_or("renormalize", true)?,
        }
    })
}

/// `moe`: a mixture of experts.
pub(super) struct MoeFamily;

impl Family for MoeFamily {
    fn saves_weight_views(&self, _op: &Op) -> bool {
        true // the router's `F.linear`, each expert's slice of the fused weights
    }

    fn zero3_leaf(&self, _op: &Op) -> bool {
        true // MixtralSparseMoeBlock, Qwen2/3 MoE blocks: DeepSpeed's default leaf modules
    }

    /// transformers 5's sparse MoE block under no_grad (`MixtralSparseMoeBlock.forward`, the
    /// router `MixtralTopKRouter.forward` and `grouped_mm_experts_forward` in
    /// `integrations/moe.py`), over N tokens, S = N x top_k routed rows: the router's logits
    /// (`_`, kept to the block's return), top-k weights and indices; then, beside the sorted
    /// ids, the permutation, the routed weights and histc's float input (24 bytes a row): the
    /// gathered input `[S, D]` with the gate-up output `[S, 2I]`, `act(gate)` and its product
    /// with `up`; the down projection `[S, D]` beside the product; `proj_out * w` and its
    /// reordering (`weighted_out[inv_perm]`) beside the gathered input and the down output;
    /// the per-token sum `[N, D]`.
    fn generate_peak(&self, op: &Op, at: &super::GenerateAt) -> Option<u64> {
        let (batch, tokens) = (at.batch, at.tokens);
        let Op::Moe {
            dim: d,
            hidden: i,
            num_experts: e,
            top_k: k,
            grouped: true,
            ..
        } = *op
        else {
            return None;
        };
        let n = batch * tokens;
        let s = n * k;
        let router = n * e * 4 + n * k * (4 + 8);
        let rows = s * 24;
        let gate = s * (d + 4 * i) * 4;
        let down = s * (2 * d + i) * 4;
        let reorder = s * 4 * d * 4 + s * 16;
        let sum = s * 3 * d * 4 + n * d * 4;
        Some(router + rows + gate.max(down).max(reorder).max(sum))
    }

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
            grouped,
            ..
        } = op
        {
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
            ..
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

    /// The router, then every expert's w1, w3 and w2 (the grouped layout's 3-D experts are not
    /// 2-D matrices: the router alone).
    fn matrices(&self, op: &Op) -> Vec<(u64, u64)> {
        let Op::Moe {
            dim,
            hidden,
            num_experts,
            grouped,
            ..
        } = op
        else {
            unreachable!("not a mixture of experts")
        };
        let mut m = vec![(*dim, *num_experts)];
        if *grouped {
            return m;
        }
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
        grouped,
        renormalize,
    } = &s.node.op
    else {
        unreachable!("moe_rule: not a mixture of experts")
    };
    if *grouped {
        return moe_grouped_rule(s, [*dim, *hidden, *num_experts, *top_k], *renormalize);
    }
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

/// Mixture of experts in transformers 5's layout (`layout: "grouped"`): the router
/// (`MixtralTopKRouter`: linear, softmax, topk, with `renormalize` an in-place `/=` by the sum)
/// and `grouped_mm_experts_forward` (integrations/moe.py, the default experts implementation):
/// the T x k routed rows sorted by expert (`torch.sort`), gathered (`hidden_states[perm //
/// top_k]`), one `grouped_mm` with the 3-D `gate_up_proj`, `act(gate) * up` on its chunks, one
/// `grouped_mm` with `down_proj`, times the sorted weights, un-sorted (`[inv_perm]`) and summed
/// over k (no `index_add_`, no per-expert loop: nothing depends on how the tokens split).
/// What each call saves (derivatives.yaml) was checked on a single `MixtralSparseMoeBlock`
/// with saved-tensor hooks and the counting allocator: every byte of the list below.
fn moe_grouped_rule(
    s: &Sizes,
    [dim, hidden, experts, top_k]: [u64; 4],
    renormalize: bool,
) -> OpRule {
    let e = s.e;
    let t = s.rows(dim);
    let routed = t * top_k;
    use Saved::*;
    let mut saved = vec![
        // The router's linear saves its input.
        InputContiguous(0),
        Internal {
            what: "router softmax (saved by softmax), int64 top-k indices (saved by topk)",
            bytes: t * experts * e + t * top_k * 8,
        },
        Internal {
            what: "int64 sort permutations: perm // top_k and perm (saved by the two gathers as indices), inv_perm (saved by the un-sorting gather); the int32 grouped_mm offsets",
            bytes: 3 * routed * 8 + experts * 4,
        },
        Internal {
            what: "gathered rows sorted by expert (saved by the gate_up grouped_mm)",
            bytes: routed * dim * e,
        },
        Internal {
            what: "gate_up output (its chunks saved by act and the product), act output and gated hidden (saved by the product and the down grouped_mm)",
            bytes: 4 * routed * hidden * e,
        },
        Internal {
            what: "down output and the sorted routing weights (saved by the weighting product)",
            bytes: routed * (dim + 1) * e,
        },
    ];
    if renormalize {
        saved.push(Internal {
            what: "top-k values and their sum (saved by the in-place `/=`)",
            bytes: (routed + t) * e,
        });
    }
    let mut r = OpRule::new(Output::New(s.y()), saved, vec![Grad::New], Source::TorchSource)
        // At the un-sorting gather: the weighted rows in expert order and in token order
        // (the output, T rows, comes after the first is freed), the sorted expert ids and
        // their float copy for histc, the router logits the caller still holds.
        .fwd(2 * routed * dim * e - t * dim * e + routed * (8 + e) + t * experts * e)
        .note("transformers 5 grouped_mm experts: router, tokens sorted by expert, one grouped_mm each for the 3-D gate_up_proj and down_proj, weighted, un-sorted, summed over k; saves the gathered rows, the gate_up output, act output, gated hidden, down output and int64 permutations; no per-expert loop, so the split of tokens over experts does not change the memory");
    // Backward's highest point, in the weighting product's backward (its first node but the
    // un-sorting gather's): the gather's [R, d] gradient (`index_backward`: zeros +
    // index_put_) and the product's two [R, d] products (grad * weight, grad * down output
    // before its sum to [R, 1]); the incoming gradient is gone by then unless held elsewhere.
    // A single MixtralSparseMoeBlock holding its incoming gradient peaks at 3 R d e less 2 KB
    // (T = 256) and 16 KB (T = 2048) over the level.
    let rows3 = 3 * routed * dim * e;
    r.backward_peak = Some(BackwardPeak {
        freed: rows3 - t * dim * e,
        held: rows3,
        params: vec![],
    });
    r
}
