//! The elementwise ops (the activations, `dropout`, `add`, `mul`, `sub`, `div`, `unary`): every
//! fact of each.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::{broadcast, Checks};
use crate::ops::*;
use crate::shape::Shape;
use serde_json::Value;

/// Attributes of `relu`.
pub(super) fn parse_relu(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Activation(Activation::Relu))
}

/// Attributes of `gelu`.
pub(super) fn parse_gelu(a: &mut Attrs) -> Result<Op, String> {
    match a.get("approximate") {
        None => Ok(Op::Activation(Activation::Gelu)),
        Some(Value::String(s)) if s == "none" => Ok(Op::Activation(Activation::Gelu)),
        Some(Value::String(s)) if s == "tanh" => Ok(Op::Activation(Activation::GeluTanh)),
        Some(v) => Err(format!(
            "attribute `approximate` must be \"none\" or \"tanh\" (torch's gelu), found {v}"
        )),
    }
}

/// Attributes of `silu`.
pub(super) fn parse_silu(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Activation(Activation::Silu))
}

/// Attributes of `tanh`.
pub(super) fn parse_tanh(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Activation(Activation::Tanh))
}

/// Attributes of `dropout`.
pub(super) fn parse_dropout(a: &mut Attrs) -> Result<Op, String> {
    Ok({
        let p = match a.get("p") {
            None => return Err("missing attribute `p` (a probability)".into()),
            Some(v) => v
                .as_f64()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| format!("attribute `p` must be a number in [0, 1), found {v}"))?,
        };
        Op::Dropout { p }
    })
}

/// Attributes of `add`.
pub(super) fn parse_add(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Add)
}

/// Attributes of `mul`.
pub(super) fn parse_mul(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Mul)
}

/// Attributes of `sub`.
pub(super) fn parse_sub(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Sub)
}

/// Attributes of `div`.
pub(super) fn parse_div(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Div)
}

/// Attributes of `unary`.
pub(super) fn parse_unary(a: &mut Attrs) -> Result<Op, String> {
    let names = || UNARY_FNS.iter().map(|e| e.0).collect::<Vec<_>>().join(", ");
    let entry = match a.get("fn") {
        Some(Value::String(f)) => UnaryFn::lookup(f).ok_or_else(|| {
            format!(
                "attribute `fn`: unknown function `{f}` (known: {})",
                names()
            )
        })?,
        Some(v) => return Err(format!("attribute `fn` must be a function name, found {v}")),
        None => return Err(format!("missing attribute `fn` (one of: {})", names())),
    };
    let scalar = match entry.2 {
        None => 0.0,
        Some(key) => match a.get(key) {
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("attribute `{key}` must be a finite number, found {v}"))?,
            None => {
                return Err(format!(
                    "missing attribute `{key}` (a number) for `{}`",
                    entry.0
                ))
            }
        },
    };
    Ok(Op::Unary((entry.3)(scalar)))
}

/// The elementwise ops: activations, `dropout`, `add`, `mul`, `sub`, `div` and `unary`.
pub(super) struct ElementwiseFamily;

impl Family for ElementwiseFamily {
    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        match op {
            Op::Activation(_) | Op::Dropout { .. } | Op::Unary(_) => {}
            Op::Add | Op::Mul | Op::Sub | Op::Div => {
                *out = broadcast(ck.x, inputs[1])?;
            }
            _ => unreachable!("not an elementwise op"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}
}
