//! The views (`flatten`, `reshape`, `permute`, `select_token`, `slice`, `expand`): every fact
//! of each.

use super::Family;
use crate::ops::attributes::{batch_or_sizes, positive, Attrs};
use crate::ops::shape::{sizes, Checks};
use crate::ops::*;
use crate::shape::{Dim, Shape};
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
            _ => unreachable!("not a view"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}
}
