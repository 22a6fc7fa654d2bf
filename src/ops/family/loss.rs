//! The losses (`cross_entropy`, `mse`): every fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;

/// Attributes of `cross_entropy`.
pub(super) fn parse_cross_entropy(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::CrossEntropy)
}

/// Attributes of `mse`.
pub(super) fn parse_mse(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Mse)
}

/// The losses: `cross_entropy` and `mse`.
pub(super) struct LossFamily;

impl Family for LossFamily {
    /// A scalar.
    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::CrossEntropy => {
                let labels = inputs[1];
                let mut want = x.clone();
                want.0.pop();
                if x.rank() < 2 || *labels != want {
                    return Err(format!(
                        "labels must have the logits' shape without the class axis: logits {x}, expected labels {want}, found {labels}"
                    ));
                }
                *out = Shape::default();
            }
            Op::Mse => {
                if inputs[1] != x {
                    return Err(format!(
                        "target must match the prediction: expected {x}, found {}",
                        inputs[1]
                    ));
                }
                *out = Shape::default();
            }
            _ => unreachable!("not a loss"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}
}
