//! The `linear` and `matmul` ops: every fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
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
}
