//! The learned tensors added to a sequence and the constants (`learned_position`,
//! `prepend_token`, `parameter`, `constant`): every fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::{batch_or_sizes, Attrs};
use crate::ops::shape::{sizes, Checks};
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::rules::*;

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
    fn takes_ids(&self, op: &Op) -> bool {
        // A position table is indexed by position ids.
        matches!(op, Op::LearnedPosition { .. })
    }

    fn learned_positions(&self, op: &Op) -> Option<u64> {
        match op {
            Op::LearnedPosition { num_positions, .. } => Some(*num_positions),
            _ => None,
        }
    }

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
            // A constant is never trained.
            _ => {}
        }
    }

    /// The position table and the class token.
    fn randn_init(&self, op: &Op, _i: usize, _count: usize) -> bool {
        matches!(op, Op::LearnedPosition { .. } | Op::PrependToken { .. })
    }

    /// x's gradient is a slice of the output's along the token axis.
    fn gradient_contiguous(
        &self,
        op: &Op,
        _output_contiguous: Option<bool>,
        contig: bool,
        _rank: usize,
    ) -> bool {
        match op {
            Op::PrependToken { .. } => false,
            _ => contig,
        }
    }

    fn cpu_rule(&self, op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        let e = s.e;
        let y = s.y();
        use Source::*;
        match op {
            Op::LearnedPosition { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput], Assumed)
                .keeps_layout()
                .bwd(s.dim(1) * s.dim(2) * e)
                .note("x + table[0..T]: saves nothing; the table's gradient is a batch sum (T x d) scattered into a table-size buffer"),
            Op::PrependToken { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput], Assumed)
                .note("cat(class token expanded, x): saves nothing; x's gradient is a slice of the output's"),
            Op::Constant { .. } => OpRule::new(Output::New(y), vec![], vec![Grad::None], TorchSource)
                .note("made from constants outside autograd: saves nothing, takes no gradient; freed after its last reader (or kept by one that saves it, a product's other factor)"),
            _ => unreachable!("not a token op"),
        }
    }

    /// A constant's dtype.
    fn element_bytes(&self, op: &Op) -> Option<u64> {
        match op {
            Op::Constant { dtype, .. } => Some(dtype.bytes()),
            _ => None,
        }
    }

    /// A learned position is x + a table slice (fp32); a constant is made in float32 (rotary
    /// tables, masks) or bool, outside autocast's lists.
    fn autocast_output(&self, op: &Op, input: u64, _promoted: u64) -> u64 {
        match op {
            Op::LearnedPosition { .. } => F32,
            Op::Constant { dtype, .. } => dtype.bytes(),
            _ => input,
        }
    }
}
