//! The normalisations (`batch_norm`, `layer_norm`, `rms_norm`, `group_norm`): every fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;

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
}
