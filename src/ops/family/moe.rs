//! The mixture of experts (`moe`): every fact of it.

use super::Family;
use crate::ops::attributes::{at_most, Attrs, MAX_REPEATS};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;

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
}
