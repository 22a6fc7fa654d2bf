//! The generic `aten` node: every fact of it (torch's tables in `ops/aten.rs` and
//! `ops/generic.rs` give most).

use super::Family;
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
