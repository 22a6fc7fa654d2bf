//! `softmax` and `mean`: every fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};

/// Attributes of `softmax`.
pub(super) fn parse_softmax(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Softmax { dim: a.int("dim")? })
}

/// Attributes of `mean`.
pub(super) fn parse_mean(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Mean {
        dim: a.int("dim")?,
        keepdim: a.flag_or("keepdim", false)?,
    })
}

/// `softmax` and `mean`: along one axis.
pub(super) struct ReduceFamily;

impl Family for ReduceFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Mean { dim, keepdim } => {
                let a = ck.axis(*dim, x.rank())?;
                if *keepdim {
                    out.0[a] = Dim::fixed(1);
                } else {
                    out.0.remove(a);
                }
            }
            Op::Softmax { dim } => {
                ck.axis(*dim, x.rank())?;
            }
            _ => unreachable!("not a softmax or mean"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}
}
