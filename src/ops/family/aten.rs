//! The generic `aten` node: every fact of it (torch's tables in `ops/aten.rs` and
//! `ops/generic.rs` give most).

use super::{Attends, Family};
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;
use crate::simulate::rules::*;

/// Attributes of `aten`.
pub(super) fn parse_aten(a: &mut Attrs) -> Result<Op, String> {
    let node = crate::ops::generic::AtenNode::parse(a.map)?;
    a.use_all();
    Ok(Op::Aten(Box::new(node)))
}

/// The generic `aten` node: torch's tables give its facts ([`crate::ops::aten`]), the file its
/// shapes.
pub(super) struct AtenFamily;

impl Family for AtenFamily {
    /// A generic sdpa call (`scaled_dot_product_attention`, or the kernel torch lowers it
    /// to): causal by its `is_causal` argument (by the schema's position, or by keyword).
    fn attends(
        &self,
        op: &Op,
        _n_inputs: usize,
        query: Option<&Shape>,
        key: Option<&Shape>,
    ) -> Option<Attends> {
        let Op::Aten(a) = op else { return None };
        super::sdpa_attends(sdpa_causal(a)?, query, key)
    }

    /// A generic sdpa caches its k and v inputs, `[B, kv_heads, T, head_dim]`.
    fn kv_cache(&self, op: &Op, key: Option<&Shape>) -> Option<(u64, u64, u64)> {
        let Op::Aten(a) = op else { return None };
        sdpa_causal(a)?;
        let key = key.filter(|k| k.rank() == 4)?;
        Some((2, key.0[1].as_fixed()?, key.0[3].as_fixed()?))
    }

    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        _ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        if let Op::Aten(a) = op {
            *out = a.shape().clone();
        }
        Ok(())
    }

    /// Its parameters, shared ones included (the graph counts a shared name once).
    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        if let Op::Aten(a) = op {
            p.extend(a.parameter_tensors());
        }
    }

    fn cpu_rule(&self, op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        let Op::Aten(a) = op else {
            unreachable!("not a generic node")
        };
        crate::simulate::generic::rule(a, s)
    }

    /// Its output's dtype.
    fn element_bytes(&self, op: &Op) -> Option<u64> {
        op.as_generic().map(|a| a.outputs[a.item].dtype.bytes())
    }
}

/// Whether a generic node is an sdpa call (not its backward), and if so whether it is causal.
fn sdpa_causal(a: &crate::ops::generic::AtenNode) -> Option<bool> {
    use crate::ops::generic::AtenValue;
    let name = a.op.name.split('.').next().unwrap_or_default();
    if !name
        .trim_start_matches('_')
        .starts_with("scaled_dot_product")
        || name.ends_with("_backward")
    {
        return None;
    }
    let at = a.op.args.iter().position(|x| x.name == "is_causal");
    let kw = a
        .kwargs
        .iter()
        .find(|(n, _)| n == "is_causal")
        .map(|(_, v)| v);
    Some(matches!(
        kw.or(at.and_then(|i| a.args.get(i))),
        Some(AtenValue::Bool(true))
    ))
}
