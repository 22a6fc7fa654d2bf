//! The views (`flatten`, `reshape`, `permute`, `select_token`, `slice`, `expand`): every fact
//! of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::{batch_or_sizes, positive, Attrs};
use crate::ops::shape::{sizes, Checks};
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::rules::*;
use serde_json::Value;

/// Attributes of `flatten`.
pub(super) fn parse_flatten(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Flatten {
        start_dim: a.int_or("start_dim", 1)?,
        end_dim: a.int_or("end_dim", -1)?,
    })
}

/// Attributes of `reshape`.
pub(super) fn parse_reshape(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let entries = match a.get("shape") {
            Some(Value::Array(v)) => v,
            Some(v) => return Err(format!("attribute `shape` must be a list, found {v}")),
            None => return Err("missing attribute `shape` (a list)".into()),
        };
        let mut shape = Vec::with_capacity(entries.len());
        for e in entries {
            shape.push(match e {
                Value::String(s) if s == "B" => ReshapeDim::Batch,
                v if v.as_i64() == Some(-1) => ReshapeDim::Infer,
                v => ReshapeDim::Fixed(positive("shape", v).map_err(|_| {
                    format!("`shape` entries must be \"B\", -1 or a positive integer, found {v}")
                })?),
            });
        }
        if shape.iter().filter(|d| **d == ReshapeDim::Infer).count() > 1 {
            return Err("attribute `shape` may hold at most one -1".into());
        }
        Op::Reshape { shape }
    })
}

/// Attributes of `permute`.
pub(super) fn parse_permute(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let dims = match a.get("dims") {
            Some(Value::Array(v)) => v
                .iter()
                .map(|d| {
                    d.as_i64()
                        .ok_or_else(|| format!("`dims` entries must be integers, found {d}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(format!("attribute `dims` must be a list, found {v}")),
            None => return Err("missing attribute `dims` (a list)".into()),
        };
        Op::Permute { dims }
    })
}

/// Attributes of `select_token`.
pub(super) fn parse_select_token(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::SelectToken {
        index: a.int("index")?,
    })
}

/// Attributes of `slice`.
pub(super) fn parse_slice(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let dim = a.int("dim")?;
        let start = a.count_or("start", 0)?;
        let end = a.size("end")?;
        if end <= start {
            return Err(format!("`end` = {end} must exceed `start` = {start}"));
        }
        Op::Slice { dim, start, end }
    })
}

/// Attributes of `expand`.
pub(super) fn parse_expand(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Expand {
        shape: batch_or_sizes(a)?,
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

/// Views and copies that rearrange their input: slice, expand, flatten, reshape, permute,
/// token selection.
pub(super) struct ViewsFamily;

impl Family for ViewsFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Slice { dim, start, end } => {
                let a = ck.axis(*dim, x.rank())?;
                let len = ck.fixed(x.0[a], "the sliced dimension")?;
                if *end > len {
                    return Err(format!("slice end {end} exceeds dimension {a} of {x}"));
                }
                out.0[a] = Dim::fixed(end - start);
            }
            Op::Expand { shape } => {
                *out = sizes(shape);
                let fits = out.rank() == x.rank()
                    && x.0
                        .iter()
                        .zip(&out.0)
                        .all(|(a, b)| a == b || *a == Dim::fixed(1));
                if !fits {
                    return Err(format!(
                        "cannot expand {x} to {out}: only axes of size 1 broadcast"
                    ));
                }
            }
            Op::Flatten { start_dim, end_dim } => {
                let s = ck.axis(*start_dim, x.rank())?;
                let e = ck.axis(*end_dim, x.rank())?;
                if s > e {
                    return Err(format!(
                        "start_dim {start_dim} comes after end_dim {end_dim} for shape {x}"
                    ));
                }
                let merged = x.0[s..=e].iter().fold(Dim::fixed(1), |a, d| a.times(*d));
                out.0.splice(s..=e, [merged]);
            }
            Op::Reshape { shape } => {
                let total = x.numel();
                let mut known = Dim::fixed(1);
                for d in shape {
                    match d {
                        ReshapeDim::Batch => known = known.times(Dim::batch()),
                        ReshapeDim::Fixed(n) => known = known.times(Dim::fixed(*n)),
                        ReshapeDim::Infer => {}
                    }
                }
                let inferred = if shape.contains(&ReshapeDim::Infer) {
                    total.divided_by(known)
                } else {
                    (known == total).then_some(Dim::fixed(1))
                };
                let inferred = inferred.ok_or_else(|| {
                    format!("cannot reshape {x} ({total} elements) into {shape:?}")
                })?;
                *out = Shape(
                    shape
                        .iter()
                        .map(|d| match d {
                            ReshapeDim::Batch => Dim::batch(),
                            ReshapeDim::Fixed(n) => Dim::fixed(*n),
                            ReshapeDim::Infer => inferred,
                        })
                        .collect(),
                );
            }
            Op::Permute { dims } => {
                if dims.len() != x.rank() {
                    return Err(format!(
                        "expected {} permutation entries for shape {x}, found {}",
                        x.rank(),
                        dims.len()
                    ));
                }
                let mut seen = vec![false; x.rank()];
                let mut v = Vec::with_capacity(dims.len());
                for d in dims {
                    let a = ck.axis(*d, x.rank())?;
                    if std::mem::replace(&mut seen[a], true) {
                        return Err(format!("dimension {d} appears twice in `dims`"));
                    }
                    v.push(x.0[a]);
                }
                *out = Shape(v);
            }
            Op::SelectToken { index } => {
                ck.expect_rank(&[3])?;
                let t = ck.fixed(x.0[1], "the token dimension")? as i64;
                if *index >= t || *index < -t {
                    return Err(format!("token index {index} is out of range for shape {x}"));
                }
                out.0.remove(1);
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
            _ => unreachable!("not a view"),
        }
        Ok(())
    }

    /// A `parameter`'s tensor; the others have none.
    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        if let Op::Parameter { shape } = op {
            p.push(shape.clone());
        }
    }

    /// A slice along a non-leading axis.
    fn splits_at(&self, op: &Op, rank: usize) -> Option<usize> {
        match op {
            Op::Slice { dim, .. } => {
                let r = rank as i64;
                let d = if *dim < 0 { dim + r } else { *dim };
                (d > 0).then_some(d as usize)
            }
            _ => None,
        }
    }

    fn regroups(&self, op: &Op) -> bool {
        matches!(op, Op::Reshape { .. } | Op::Flatten { .. })
    }

    fn permutation<'o>(&self, op: &'o Op) -> Option<&'o [i64]> {
        match op {
            Op::Permute { dims } => Some(dims),
            _ => None,
        }
    }

    /// Permuting back: assumed to undo an earlier permute when the incoming gradient is
    /// itself permuted.
    fn gradient_contiguous(
        &self,
        op: &Op,
        output_contiguous: Option<bool>,
        contig: bool,
        _rank: usize,
    ) -> bool {
        match op {
            Op::Permute { .. } => output_contiguous == Some(true) || !contig,
            _ => contig,
        }
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        view_rule(s)
    }
}

/// Views and view-like ops: reshape, permute, token selection, slice, expand, and a
/// parameter expanded over the batch.
fn view_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let one = vec![Grad::New];
    use Source::*;
    match &s.node.op {
        Op::Flatten { .. } | Op::Reshape { .. } => {
            OpRule::new(Output::ReshapeView, vec![], vec![Grad::OfOutput], Measured)
                .note("a view (a copy if the input is not contiguous); backward reshapes the gradient")
        }
        Op::Permute { .. } => {
            let mut r = OpRule::new(Output::View, vec![], vec![Grad::OfOutput], Measured)
                .note("a non-contiguous view; backward permutes the gradient back (a view)");
            r.output_contiguous = Some(is_identity(node));
            r
        }
        Op::SelectToken { .. } => OpRule::new(Output::View, vec![], one, Measured)
            .note("a strided view (keeps the whole input alive); backward scatters into a zero tensor of the input's size"),
        Op::Slice { dim, .. } => {
            let r = s.shape_in(0).map_or(1, |x| x.rank()) as i64;
            let first_axis = (if *dim < 0 { dim + r } else { *dim }) == 0;
            let mut rule = OpRule::new(Output::View, vec![], one, TorchSource)
                .note("a strided view; saves nothing; backward (derivatives.yaml `slice_backward`) makes a zero tensor of the input's size and copies the gradient in");
            rule.output_contiguous = if first_axis { None } else { Some(false) };
            rule
        }
        Op::Expand { .. } => {
            let mut rule = OpRule::new(Output::View, vec![], one, TorchSource)
                .note("a stride-0 view (no new memory, not contiguous: a reshape after it copies); backward sums the gradient back to the input's size (derivatives.yaml `expand`: `at::sum_to(grad, self.sym_sizes())`), a new buffer");
            rule.output_contiguous = Some(false);
            rule
        }
        Op::Parameter { .. } => {
            let mut rule = OpRule::new(Output::New(0), vec![], vec![Grad::None], Assumed)
                .note("the parameter expanded over the batch: a stride-0 view (no new memory, not contiguous: a reader that needs a contiguous input copies it); its gradient is the incoming one summed over the batch, a parameter-sized buffer; the input gets none");
            rule.output_contiguous = Some(false);
            rule
        }
        _ => unreachable!("view_rule: not a view"),
    }
}

fn is_identity(node: &crate::graph::Node) -> bool {
    match &node.op {
        Op::Permute { dims } => {
            let r = dims.len() as i64;
            dims.iter()
                .enumerate()
                .all(|(i, d)| (if *d < 0 { d + r } else { *d }) == i as i64)
        }
        _ => false,
    }
}
