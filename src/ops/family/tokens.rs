//! The learned tensors added to a sequence and the constants (`learned_position`,
//! `prepend_token`, `parameter`, `constant`): every fact of each.

use super::Family;
use crate::ops::attributes::{batch_or_sizes, positive, Attrs};
use crate::ops::shape::{sizes, Checks};
use crate::ops::*;
use crate::shape::{Dim, Shape};
use serde_json::Value;

/// Attributes of `learned_position`.
pub(super) fn parse_learned_position(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::LearnedPosition {
        num_positions: a.size("num_positions")?,
        dim: a.size("dim")?,
    })
}

/// Attributes of `prepend_token`.
pub(super) fn parse_prepend_token(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::PrependToken {
        dim: a.size("dim")?,
    })
}

/// Attributes of `parameter`.
pub(super) fn parse_parameter(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let entries = match a.get("shape") {
            Some(Value::Array(v)) if !v.is_empty() => v,
            Some(v) => {
                return Err(format!(
                    "attribute `shape` must be a non-empty list of sizes, found {v}"
                ))
            }
            None => return Err("missing attribute `shape` (a list of sizes)".into()),
        };
        let shape = entries
            .iter()
            .map(|e| positive("shape", e))
            .collect::<Result<Vec<u64>, String>>()?;
        Op::Parameter { shape }
    })
}

/// Attributes of `constant`.
pub(super) fn parse_constant(a: &mut Attrs) -> Result<Op, String> {
    let dtype = a.one_of(
        "dtype",
        &[
            ("float32", ConstantDType::Float32),
            ("bool", ConstantDType::Bool),
        ],
        ConstantDType::Float32,
    )?;
    Ok(Op::Constant {
        shape: batch_or_sizes(a)?,
        dtype,
    })
}

/// The learned tensors added to a sequence and the constants: `learned_position`,
/// `prepend_token`, `parameter` and `constant`.
pub(super) struct TokensFamily;

impl Family for TokensFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::LearnedPosition { num_positions, dim } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*dim, "dim")?;
                let t = ck.fixed(x.0[1], "the sequence dimension")?;
                if t > *num_positions {
                    return Err(format!(
                        "sequence {t} exceeds num_positions {num_positions}"
                    ));
                }
            }
            Op::Parameter { shape } => {
                if x.rank() == 0 {
                    return Err("the input must have a batch axis (its batch is what the parameter is broadcast over)".into());
                }
                *out = Shape(
                    std::iter::once(x.0[0])
                        .chain(shape.iter().map(|&d| Dim::fixed(d)))
                        .collect(),
                );
            }
            Op::PrependToken { dim } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*dim, "dim")?;
                out.0[1] = x.0[1].plus(Dim::fixed(1)).ok_or_else(|| {
                    format!("the token dimension must be a fixed size, found {x}")
                })?;
            }
            Op::Constant { shape, .. } => *out = sizes(shape),
            _ => unreachable!("not a token op"),
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        match op {
            Op::LearnedPosition { num_positions, dim } => p.push(vec![*num_positions, *dim]),
            Op::PrependToken { dim } => p.push(vec![*dim]),
            Op::Parameter { shape } => p.push(shape.clone()),
            // A constant is never trained.
            _ => {}
        }
    }
}
