//! The normalisations (`batch_norm`, `layer_norm`, `rms_norm`, `group_norm`): every fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;
use crate::simulate::cuda::*;
use crate::simulate::rules::*;
use crate::simulate::rules::{OpRule, Saved};

/// Attributes of `batch_norm`.
pub(super) fn parse_batch_norm(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::BatchNorm {
        num_features: a.size("num_features")?,
    })
}

/// Attributes of `layer_norm`.
pub(super) fn parse_layer_norm(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::LayerNorm {
        normalized_shape: a.size("normalized_shape")?,
        bias: a.flag_or("bias", true)?,
    })
}

/// Attributes of `rms_norm`.
pub(super) fn parse_rms_norm(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::RmsNorm {
        dim: a.size("dim")?,
    })
}

/// Attributes of `group_norm`.
pub(super) fn parse_group_norm(a: &mut Attrs) -> Result<Op, String> {
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
}

/// `batch_norm`, `layer_norm`, `rms_norm` and `group_norm`.
pub(super) struct NormFamily;

impl Family for NormFamily {
    /// Their input's shape.
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        _out: &mut Shape,
    ) -> Result<(), String> {
        match op {
            Op::BatchNorm { num_features: c } => {
                ck.expect_rank(&[2, 3, 4])?;
                ck.expect_channels(*c)?;
            }
            Op::GroupNorm {
                num_channels: c, ..
            } => {
                ck.expect_rank(&[3, 4])?;
                ck.expect_channels(*c)?;
            }
            Op::LayerNorm {
                normalized_shape: d,
                ..
            } => ck.expect_last(*d, "normalized_shape")?,
            Op::RmsNorm { dim } => ck.expect_last(*dim, "dim")?,
            _ => unreachable!("not a normalisation"),
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        match op {
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
            _ => unreachable!("not a normalisation"),
        }
    }

    /// Batch norm keeps running mean and variance (float32) and a batch counter (int64).
    fn buffers(&self, op: &Op) -> Vec<(u64, u64)> {
        match op {
            Op::BatchNorm { num_features } => vec![(*num_features, 4), (*num_features, 4), (1, 8)],
            _ => Vec::new(),
        }
    }

    /// `x * rstd` is saved by the weight's `mul` for the weight's gradient only: with the
    /// weight frozen it is a temporary of the forward.
    fn lora_frozen(&self, op: &Op, r: &mut OpRule) {
        if !matches!(op, Op::RmsNorm { .. }) {
            return;
        }
        let mut moved = 0;
        r.saved.retain(|x| match x {
            Saved::Internal {
                what: "x*rstd",
                bytes,
            } => {
                moved += bytes;
                false
            }
            _ => true,
        });
        r.forward_transient += moved;
        r.note = "frozen RMSNorm: saves its input and rstd; x*rstd (saved by the weight's mul for the weight's gradient) is a forward temporary";
    }

    /// Batch norm's running mean and variance.
    fn running_stats_bytes(&self, op: &Op) -> Option<u64> {
        match op {
            Op::BatchNorm { num_features } => Some(2 * num_features * 4),
            _ => None,
        }
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        norm_rule(s)
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        use Saved::*;
        let (n_out, ex) = (s.n_out(), call.ex);
        match op {
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
                Source::TorchSource,
            )
            .note(
                "`_fused_rms_norm` (CUDA kernel; fp32 input and weight): saves its input and rstd",
            ),
            Op::RmsNorm { .. } => as_on_cpu(s, call, false),
            _ => cuda_norm_rule(s),
        }
    }

    /// Layer and group norm: the fp32 policy; RMSNorm: `_fused_rms_norm` keeps the input's
    /// dtype, its fp32 weight promotes a bf16 input in the composite fallback; batch norm is in
    /// no autocast list.
    fn autocast_output(&self, op: &Op, input: u64, _promoted: u64) -> u64 {
        match op {
            Op::BatchNorm { .. } => input,
            _ => F32,
        }
    }
}

/// Normalisations: batch, layer, rms and group norms.
fn norm_rule(s: &Sizes) -> OpRule {
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::BatchNorm { num_features } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "save_mean+save_invstd",
                    bytes: 2 * num_features * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and inverse std (2C float32)"),
        Op::LayerNorm {
            normalized_shape, ..
        } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "mean+rstd",
                    bytes: 2 * s.rows(*normalized_shape) * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and rstd (2 x rows float32)"),
        Op::RmsNorm { dim } => {
            let rows = s.rows(*dim) * 4;
            OpRule::new(
                Output::New(y),
                vec![Input(0), Internal { what: "x*rstd", bytes: x }, Internal { what: "rstd", bytes: rows }],
                one,
                TorchSource,
            )
            .fwd(x + 2 * rows)
            .bwd((2 * x).saturating_sub(rows))
            .note("composite (pow, mean, rsqrt, mul, mul): saves its input, x*rstd (a full activation) and rstd; forward holds x^2")
        }
        Op::GroupNorm { num_groups, .. } => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "mean+rstd",
                    bytes: 2 * s.dim(0) * num_groups * 4,
                },
            ],
            one,
            Measured,
        )
        .contiguous_input()
        .note("saves its input plus mean and rstd (2 x B x groups float32)"),
        _ => unreachable!("norm_rule: not a normalisation"),
    }
}

/// Layer, group and batch norms under autocast (the fp32 policy, or the input's dtype for batch
/// norm, which is in no autocast list).
fn cuda_norm_rule(s: &Sizes) -> OpRule {
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
