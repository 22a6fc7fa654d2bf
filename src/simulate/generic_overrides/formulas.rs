//! Override entries for gradient formulas and reductions (`FunctionsManual.cpp` helpers,
//! norms, cumulative ops, pointwise ops): see [`super`]. Sorted by op name.
//!
//! A formula's temporaries are the bytes it holds at its highest point besides its results
//! (the generic rule adds the results). C++ temporaries live until their statement ends; a
//! named local until its helper returns. A bool tensor is one byte an element; a Scalar's
//! wrapped 0-dim tensor lives only inside the op that wraps it, so it is not drawn.

use super::{wrap, Call, Override};
use crate::ops::generic::AtenValue;

/// The value passed as schema argument `name`, if any.
fn value<'a>(c: &'a Call, name: &str) -> Option<&'a AtenValue> {
    let k = c.node.op.args.iter().position(|a| a.name == name)?;
    c.node.arg(k)
}

/// Whether tensor argument `name` is given (not left out, not None).
fn given(c: &Call, name: &str) -> bool {
    matches!(
        value(c, name),
        Some(AtenValue::Input(_)) | Some(AtenValue::Param(_))
    )
}

/// Whether tensor argument `name` takes a gradient (`grad_input_mask`).
fn needs_grad(c: &Call, name: &str) -> bool {
    match value(c, name) {
        Some(AtenValue::Input(i)) => c.inputs.get(*i).is_some_and(|x| x.requires_grad),
        Some(AtenValue::Param(_)) => true,
        _ => false,
    }
}

/// Whether Scalar argument `name` is 1 at run time (passed as 1, or left at its default of 1).
fn is_one(c: &Call, name: &str) -> bool {
    match value(c, name) {
        None => true,
        Some(AtenValue::Int(1)) => true,
        Some(AtenValue::Float(x)) => *x == 1.0,
        _ => false,
    }
}

/// Elements of the broadcast of two shapes (numpy's rule).
fn broadcast_numel(a: &[u64], b: &[u64]) -> u64 {
    let n = a.len().max(b.len());
    (0..n)
        .map(|k| {
            let x = if k < a.len() { a[a.len() - 1 - k] } else { 1 };
            let y = if k < b.len() { b[b.len() - 1 - k] } else { 1 };
            if x == 1 {
                y
            } else {
                x
            }
        })
        .product()
}

/// Elements of the broadcast of tensor arguments `a` and `b`.
fn bc(c: &Call, a: &str, b: &str) -> u64 {
    broadcast_numel(&c.dims(a), &c.dims(b))
}

/// addcdiv's backward (derivatives.yaml addcdiv). tensor1: `grad * (value / tensor2)`, where
/// `Scalar / Tensor` is `empty_like(tensor2).fill_(value).div_(tensor2)` (ATen's
/// TensorOperators.h): one tensor of tensor2's size. tensor2: `-grad * (value * tensor1 /
/// (tensor2 * tensor2))`: `-grad` (the output's size), `value * tensor1` and `tensor2 *
/// tensor2` (their arguments' sizes) and their quotient (their broadcast), all alive as the
/// product is made. self: the incoming gradient, nothing more.
fn addcdiv_backward(c: &Call, arg: &str) -> Option<u64> {
    let e = c.out_elem(0);
    Some(match arg {
        "tensor1" => c.numel("tensor2") * e,
        "tensor2" => {
            c.out_bytes(0)
                + (c.numel("tensor1") + c.numel("tensor2") + bc(c, "tensor1", "tensor2")) * e
        }
        _ => 0,
    })
}

/// addcmul's backward (derivatives.yaml addcmul): tensor1 `grad * (tensor2 * value)`, tensor2
/// `grad * (tensor1 * value)`: the other factor times the Scalar, at that factor's size (the
/// Scalar product is made even when `value` is 1). self: the incoming gradient.
fn addcmul_backward(c: &Call, arg: &str) -> Option<u64> {
    let e = c.out_elem(0);
    Some(match arg {
        "tensor1" => c.numel("tensor2") * e,
        "tensor2" => c.numel("tensor1") * e,
        _ => 0,
    })
}

/// addr's backward (derivatives.yaml addr): vec1 `maybe_multiply(grad.mv(vec2), alpha)`, vec2
/// `maybe_multiply(grad.t().mv(vec1), alpha)`: with `alpha` not 1 the `mv` (the vector's size)
/// is a temporary of the product; with 1 it is the result. self: `maybe_multiply(grad,
/// beta)`, the result itself.
fn addr_backward(c: &Call, arg: &str) -> Option<u64> {
    let e = c.out_elem(0);
    Some(match arg {
        "vec1" | "vec2" if !is_one(c, "alpha") => c.numel(arg) * e,
        _ => 0,
    })
}

/// atan2's backward (FunctionsManual.cpp atan2_backward, torch 2.11): `denom = self * self +
/// other * other` and `recip = denom.reciprocal()` (named, the output's size each; `recip` is
/// masked in place where `denom == 0`), then one statement making both results: `grad *
/// other * recip` (a temporary product of the output's size) and `grad * -self * recip` (`-self`
/// at self's size and a product of the output's size).
fn atan2_backward(c: &Call, _: &str) -> Option<u64> {
    let y = c.out_bytes(0);
    let mut t = 2 * y;
    if needs_grad(c, "self") {
        t += y;
    }
    if needs_grad(c, "other") {
        t += c.bytes("self") + y;
    }
    Some(t)
}

/// clamp.Tensor's backward (FunctionsManual.cpp, the Tensor overloads). self: `clamp_backward`:
/// `zero = at::scalar_tensor(0.)`, a bool per given bound (`self >= min`, `self <= max`, the
/// broadcast of self and the bound; `logical_and_` in place), then `where(pred, grad, zero)`.
/// min, max: `clamp_backward_min_max`: `zero`, then per bound that needs a gradient, in its own
/// block: two bools (`self < min` and `min < max`, or `self > max` and `max < min`) and its
/// `where` result, the first result alive while the second block runs.
fn clamp_tensor_backward(c: &Call, arg: &str) -> Option<u64> {
    let e = c.out_elem(0);
    let (has_min, has_max) = (given(c, "min"), given(c, "max"));
    if arg == "self" {
        let mut t = 0;
        if has_min {
            t += bc(c, "self", "min");
        }
        if has_max {
            t += bc(c, "self", "max");
        }
        return Some(if has_min || has_max { t + e } else { 0 });
    }
    let y = c.out_bytes(0);
    let (m0, m1) = (needs_grad(c, "min"), needs_grad(c, "max"));
    let results = if m0 { y } else { 0 } + if m1 { y } else { 0 };
    let peak = if has_min && has_max {
        let b0 = bc(c, "self", "min") + bc(c, "min", "max");
        let b1 = bc(c, "self", "max") + bc(c, "min", "max");
        let p0 = if m0 { e + b0 + y } else { 0 };
        let p1 = if m1 { e + results - y + b1 + y } else { 0 };
        p0.max(p1)
    } else if has_min && m0 {
        e + bc(c, "self", "min") + y
    } else if has_max && m1 {
        e + bc(c, "self", "max") + y
    } else {
        0
    };
    Some(peak.saturating_sub(results))
}

/// cumsum's backward (FunctionsManual.cpp cumsum_backward): `grad.to(self.scalar_type())`
/// (a copy only when the dtypes differ), then `grad.flip(dim).cumsum(dim).flip(dim)`: the
/// first flip and the cumsum alive as the last flip (the result) is made. A gradient of at
/// most one element, or a size-1 axis, is returned as it is.
fn cumsum_backward(c: &Call, _: &str) -> Option<u64> {
    let d = c.dims("self");
    let n = c.numel("self");
    let e = c.elem("self");
    let cast = if c.out_elem(0) != e { n * e } else { 0 };
    let dim = wrap(c.int("dim").unwrap_or(0), d.len());
    if n <= 1 || d.get(dim).copied().unwrap_or(1) == 1 {
        return Some(cast);
    }
    Some(cast + 2 * n * e)
}

/// max/min (the full reductions)' backward: FunctionsManual.cpp evenly_distribute_backward, its
/// CPU branch: `mask = input == value` (`input.isnan()` when the value is NaN: a bool of the
/// input's size), `grad.new_zeros(input.sizes())` (the result), then `mask.sum()`: summing a
/// bool into int64 makes an int64 copy of the mask first (ReduceOpsUtils.h make_reduction:
/// `self.to(in_dtype)`) beside its 0-dim result.
fn evenly_distribute_backward(c: &Call, _: &str) -> Option<u64> {
    let n = c.numel("self");
    Some(n + 8 * n + 8)
}

/// ldexp.Tensor's forward (BinaryOps.cpp ldexp: `at::mul(self, at::pow(2.0, other))`): the
/// power, at other's size, alive as the product is made.
fn ldexp_forward(c: &Call) -> u64 {
    c.numel("other") * c.out_elem(0)
}

/// ldexp.Tensor's backward (derivatives.yaml ldexp.Tensor): self `grad * at::pow(2, other)`:
/// the power at other's size; other `grad * result * M_LN2`: the first product, the output's
/// size.
fn ldexp_backward(c: &Call, arg: &str) -> Option<u64> {
    Some(if arg == "other" {
        c.out_bytes(0)
    } else {
        c.numel("other") * c.out_elem(0)
    })
}

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "addcdiv.default",
        read_from: "derivatives.yaml addcdiv; ATen/TensorOperators.h (Scalar / Tensor)",
        forward_scratch: None,
        backward_temporaries: Some(addcdiv_backward),
        approximates: None,
    },
    Override {
        op: "addcmul.default",
        read_from: "derivatives.yaml addcmul",
        forward_scratch: None,
        backward_temporaries: Some(addcmul_backward),
        approximates: None,
    },
    Override {
        op: "addr.default",
        read_from: "derivatives.yaml addr; FunctionsManual.cpp maybe_multiply",
        forward_scratch: None,
        backward_temporaries: Some(addr_backward),
        approximates: None,
    },
    Override {
        op: "atan2.default",
        read_from: "FunctionsManual.cpp atan2_backward (torch 2.11: denom, recip masked where denom == 0)",
        forward_scratch: None,
        backward_temporaries: Some(atan2_backward),
        approximates: None,
    },
    Override {
        op: "clamp.Tensor",
        read_from: "FunctionsManual.cpp clamp_backward (Tensor bounds), clamp_backward_min_max",
        forward_scratch: None,
        backward_temporaries: Some(clamp_tensor_backward),
        approximates: None,
    },
    Override {
        op: "cumsum.default",
        read_from: "FunctionsManual.cpp cumsum_backward",
        forward_scratch: None,
        backward_temporaries: Some(cumsum_backward),
        approximates: None,
    },
    Override {
        op: "div.Tensor_mode",
        read_from: "FunctionsManual.cpp div_tensor_self_backward, div_tensor_other_backward",
        forward_scratch: None,
        // With a rounding mode both formulas return `at::zeros_like(grad, ...)`, the result
        // itself; without one the generic count of `grad / other` and `-grad * ((self / other)
        // / other)` stands.
        backward_temporaries: Some(|c, _| c.text("rounding_mode").map(|_| 0)),
        approximates: None,
    },
    Override {
        op: "ldexp.Tensor",
        read_from: "BinaryOps.cpp ldexp; derivatives.yaml ldexp.Tensor",
        forward_scratch: Some(ldexp_forward),
        backward_temporaries: Some(ldexp_backward),
        approximates: None,
    },
    Override {
        op: "max.default",
        read_from: "FunctionsManual.cpp evenly_distribute_backward (CPU branch); ReduceOpsUtils.h make_reduction",
        forward_scratch: None,
        backward_temporaries: Some(evenly_distribute_backward),
        approximates: None,
    },
    Override {
        op: "min.default",
        read_from: "FunctionsManual.cpp evenly_distribute_backward (CPU branch); ReduceOpsUtils.h make_reduction",
        forward_scratch: None,
        backward_temporaries: Some(evenly_distribute_backward),
        approximates: None,
    },
];
