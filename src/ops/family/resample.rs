//! Concatenation, upsampling and the pools (`concat`, `upsample`, `max_pool`, `avg_pool`,
//! `adaptive_avg_pool`): every fact of each.

use super::Family;
use crate::ops::attributes::{pool, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};

/// Attributes of `concat`.
pub(super) fn parse_concat(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Concat { dim: a.int("dim")? })
}

/// Attributes of `upsample`.
pub(super) fn parse_upsample(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Upsample {
        scale_factor: a.size("scale_factor")?,
    })
}

/// Attributes of `max_pool`.
pub(super) fn parse_max_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::MaxPool(pool(a)?))
}

/// Attributes of `avg_pool`.
pub(super) fn parse_avg_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::AvgPool(pool(a)?))
}

/// Attributes of `adaptive_avg_pool`.
pub(super) fn parse_adaptive_avg_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::AdaptiveAvgPool {
        output_size: a.size("output_size")?,
    })
}

/// Concatenation, upsampling and the pools.
pub(super) struct ResampleFamily;

impl Family for ResampleFamily {
    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Concat { dim } => {
                let a = ck.axis(*dim, x.rank())?;
                for other in &inputs[1..] {
                    let same_rest = other.rank() == x.rank()
                        && (0..x.rank()).all(|i| i == a || other.0[i] == x.0[i]);
                    if !same_rest {
                        return Err(format!(
                            "inputs must agree on every dimension but {a}: expected {x}, found {other}"
                        ));
                    }
                    out.0[a] = out.0[a].plus(other.0[a]).ok_or_else(|| {
                        format!(
                            "cannot concatenate {} and {} along dimension {a}",
                            out.0[a], other.0[a]
                        )
                    })?;
                }
            }
            Op::Upsample { scale_factor } => {
                ck.expect_rank(&[4])?;
                for i in 2..4 {
                    out.0[i] = x.0[i].times(Dim::fixed(*scale_factor));
                }
            }
            Op::MaxPool(p) | Op::AvgPool(p) => {
                ck.expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = ck.spatial(x.0[i], p.kernel_size, p.stride, p.padding)?;
                }
            }
            Op::AdaptiveAvgPool { output_size } => {
                ck.expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = Dim::fixed(*output_size);
                }
            }
            _ => unreachable!("not a concat, upsample or pool"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}
}
