//! Override entries for gradient formulas and reductions (`FunctionsManual.cpp` helpers,
//! norms, cumulative ops, pointwise ops): see [`super`]. Sorted by op name.
//!
//! A formula's temporaries are the bytes it holds at its highest point besides its results
//! (the generic rule adds the results). C++ temporaries live until their statement ends; a
//! named local until its helper returns. A bool tensor is one byte an element; a Scalar's
//! wrapped 0-dim tensor lives only inside the op that wraps it, so it is not drawn.

use super::{wrap, Call, Override};
use crate::ops::generic::{AtenValue, ElemType};

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
/// at self's size and a product of the output's size). The stored FunctionsManual.cpp predates
/// the mask; the 2.11 form is read from its call sequence (`eq(denom, 0)` after the reciprocal,
/// so `denom` is a named local) and agrees with the text quoted from FunctionsManual.cpp by
/// third-party ports.
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

/// logcumsumexp's backward (FunctionsManual.cpp logcumsumexp_backward, real branch): named
/// `grad_min` (a 0-dim scalar), `log_abs_grad = grad.abs().log()`, `log_grad_positive` and
/// `log_grad_negative` (`at::where`, the output's size each), then `output_pos` and
/// `output_neg`, each `(reverse_logcumsumexp(x - result) + self).exp()`: the difference, the
/// lambda's returned flip (its inner flip and logcumsumexp freed as it returns), the sum and the
/// exp, with `output_pos` alive while `output_neg` is made; the result is their difference.
fn logcumsumexp_backward(c: &Call, _: &str) -> Option<u64> {
    if c.dims("self").is_empty() || c.numel("self") == 0 {
        return Some(0);
    }
    let (y, e) = (c.out_bytes(0), c.out_elem(0));
    // Highest: the three named, output_pos, and output_neg's four; less the result.
    Some(e + 3 * y + y + 4 * y - y)
}

/// mvlgamma's forward (UnaryOps.cpp mvlgamma): `args = arange(-p / 2 + 0.5, 0.5, 0.5)` (p
/// elements), `args = args.add(self.unsqueeze(-1))` (p of self's size; the arange freed),
/// `args.lgamma_().sum(-1)` (the result) and its `.add_(<double>)`: the wrapped double scalar
/// and its copy at the result's dtype (TensorIterator's promotion), alive with `args`.
fn mvlgamma_forward(c: &Call) -> u64 {
    let (y, e) = (c.out_bytes(0), c.out_elem(0));
    let p = c.int("p").unwrap_or(1).max(1) as u64;
    let first = p * e + p * y;
    let last = p * y + y + 8 + e;
    first.max(last).saturating_sub(y)
}

/// mvlgamma's backward (FunctionsManual.cpp mvlgamma_backward): the same `args` (p of self's
/// size), then `grad * args.digamma_().sum(-1)`: the sum beside `args`.
fn mvlgamma_backward(c: &Call, _: &str) -> Option<u64> {
    let (y, e) = (c.out_bytes(0), c.out_elem(0));
    let p = c.int("p").unwrap_or(1).max(1) as u64;
    Some((p * e + p * y).max(p * y + y))
}

/// The `correction` argument (1 when left out or None).
fn correction(c: &Call) -> f64 {
    match value(c, "correction") {
        Some(AtenValue::Int(i)) => *i as f64,
        Some(AtenValue::Float(x)) => *x,
        _ => 1.0,
    }
}

/// var_backward's temporaries (FunctionsManual.cpp), its gradient of the result's size:
/// `(2.0 / dof) * grad * (self - self.mean(dim, true))`: the scaled gradient and the mean (the
/// result's size each) and `self - mean` (self's size), alive as the product (the result) is
/// made. A full reduction with `dof <= 0` takes `grad * at::where(self == self.mean(), nan,
/// inf)`: the mean, a bool and the `where` (self's size).
fn var_temps(c: &Call) -> u64 {
    let (r, n) = (c.out_bytes(0), c.bytes("self"));
    let full = c.dims("self").is_empty()
        || !matches!(
            value(c, "dim"),
            Some(AtenValue::List(_)) | Some(AtenValue::Int(_))
        );
    if full && c.numel("self") as f64 - correction(c) <= 0.0 {
        return r + c.numel("self") + n;
    }
    2 * r + n
}

/// std_backward (FunctionsManual.cpp): `grad_var = (grad / (result * 2)).masked_fill_(result
/// == 0, 0)` (the result's size), moved into var_backward, alive while it runs.
fn std_temps(c: &Call) -> u64 {
    c.out_bytes(0) + var_temps(c)
}

/// var_mean/std_mean's second part (FunctionsManual.cpp var_mean_backward, std_mean_backward):
/// `aux = mean_backward(gmean, ...)` (`sum_backward`'s expand over n: self's size) beside the
/// first part's gradient, then `gself + aux` (the result).
fn mean_part(c: &Call) -> u64 {
    2 * c.bytes("self")
}

/// var/std's forward on CPU (ReduceOps.cpp std_var_out): a float or double reduction to one
/// element takes std_var_all_cpu, whose `self.mean().item<double>()` makes the mean (mean_out:
/// `at::sum_out(...).div_(dim_prod)`: the 0-dim sum, the wrapped int64 divisor and its copy at
/// the mean's dtype, TensorIterator's promotion) beside the result.
fn var_std_forward(c: &Call) -> u64 {
    let e = c.out_elem(0);
    let floating = matches!(
        c.node.outputs.first().map(|o| o.dtype),
        Some(ElemType::Float32) | Some(ElemType::Float64)
    );
    if c.out_numel(0) <= 1 && c.numel("self") > 0 && floating && c.elem("self") == e {
        2 * e + 8
    } else {
        0
    }
}

/// prod (the full reduction)'s backward (FunctionsManual.cpp prod_backward): `(input ==
/// 0).nonzero()` (a bool of the input's size, and no rows), then `grad * (result / input)`:
/// the quotient (the input's size) beside the result. A 0-dim input returns the gradient.
fn prod_backward(c: &Call, _: &str) -> Option<u64> {
    if c.dims("self").is_empty() {
        return Some(0);
    }
    Some(c.numel("self").max(c.bytes("self")))
}

/// prod.dim_int's backward (FunctionsManual.cpp prod_backward, with dim): `zero_mask = input ==
/// 0` (a bool of the input's size), `slice_zero_count = zero_mask.sum(dim, true)` (int64 of
/// the result's size; summing a bool makes an int64 copy of it first, ReduceOpsUtils.h
/// make_reduction), then `grad * (result / input)` beside both.
fn prod_dim_backward(c: &Call, _: &str) -> Option<u64> {
    if c.dims("self").is_empty() {
        return Some(0);
    }
    let (m, n) = (c.numel("self"), c.bytes("self"));
    let counts = 8 * c.out_numel(0);
    let peak = (m + 8 * m + counts).max(m + counts + 2 * n);
    Some(peak - n)
}

/// special_i1's backward (FunctionsManual.cpp i1_backward): named `self_is_not_tiny` (a bool),
/// `safe_self` (a `where`), then `gradx = safe_self.i0() - result * safe_self.reciprocal()`:
/// i0, the reciprocal, the product and the difference, with the two named before; the result
/// `grad * where(self_is_not_tiny, gradx, 0.5)` comes after the temporaries are gone.
fn i1_backward(c: &Call, _: &str) -> Option<u64> {
    let (m, n, e) = (c.numel("self"), c.bytes("self"), c.out_elem(0));
    Some((m + 5 * n).max(m + 4 * n + e) - n)
}

/// special_i1e's backward (FunctionsManual.cpp i1e_backward): as i1_backward, with `gradx =
/// special_i0e(safe_self) - result * (safe_self.sgn() + safe_self.reciprocal())`: six tensors
/// of self's size in the statement.
fn i1e_backward(c: &Call, _: &str) -> Option<u64> {
    let (m, n, e) = (c.numel("self"), c.bytes("self"), c.out_elem(0));
    Some((m + 7 * n).max(m + 4 * n + e) - n)
}

/// polar's backward (FunctionsManual.cpp polar_backward): `grad_abs = at::real(grad.conj() *
/// at::sgn(result))` and `grad_angle = at::real(grad.conj() * result_mul_1_j)`, each a real
/// view holding a complex product of the output's size; `result_mul_1_j` (the output's size)
/// is named; mul, not conjugate-aware, materializes `grad.conj()` (ConjugateFallback.cpp) for
/// the length of each product. The highest point is the second product: four complex tensors
/// of the output's size, less the results as the rule counts them (the arguments' sizes).
fn polar_backward(c: &Call, _: &str) -> Option<u64> {
    let mut results = 0;
    for a in ["abs", "angle"] {
        if needs_grad(c, a) {
            results += c.bytes(a);
        }
    }
    Some((4 * c.out_bytes(0)).saturating_sub(results))
}

/// pow.Tensor_Tensor's backward (FunctionsManual.cpp). self: pow_backward_self, one statement:
/// `at::where(exponent == 0.0, at::scalar_tensor(0.), grad * (exponent * self.pow(exponent -
/// 1)))`: a bool and `exponent - 1` (exponent's size), a 0-dim zero, the power, the products
/// (the output's size). exponent: pow_backward_exponent: `cond = at::logical_and(self == 0,
/// exponent >= 0)` (named, the broadcast shape), then `grad * at::where(cond, 0., result *
/// self.log())`: the zero, the log (self's size), the product and the `where`.
fn pow_tensor_backward(c: &Call, arg: &str) -> Option<u64> {
    let (y, e, m) = (c.out_bytes(0), c.out_elem(0), c.out_numel(0));
    Some(if arg == "self" {
        c.numel("exponent") + e + c.bytes("exponent") + 3 * y
    } else {
        (c.numel("self") + c.numel("exponent") + m).max(m + e + c.bytes("self") + 2 * y)
    })
}

/// sinc's backward (FunctionsManual.cpp sinc_backward): named `self_pi` and `self_squared_pi`
/// (`self * self` a temporary), `out = grad * ((self_pi * self_pi.cos() - self_pi.sin()) /
/// self_squared_pi)` (five temporaries and out), then `at::where(self_squared_pi == 0.0, 0.,
/// out)` (a bool and a 0-dim zero).
fn sinc_backward(c: &Call, _: &str) -> Option<u64> {
    let (m, n, e) = (c.numel("self"), c.bytes("self"), c.out_elem(0));
    Some((8 * n).max(4 * n + m + e) - n)
}

/// The `*_scatter` ops' backward (derivatives.yaml select_scatter, slice_scatter,
/// diagonal_scatter): self `<op>_scatter(grad, zeros_like(src), ...)`: the zeros, src's size;
/// src: a view of the gradient.
fn scatter_backward(c: &Call, arg: &str) -> Option<u64> {
    (arg == "self").then(|| c.bytes("src"))
}

/// cumprod's backward (ReduceOps.cpp cumprod_backward, the path of an input with no zeros):
/// named `w = output * grad` (the output's size) and `is_zero = input == 0` (a bool), then
/// `reversed_cumsum(w, dim).div(input)`: inside the helper a flip, its cumsum and the last
/// flip (the first two freed as it returns), then the quotient (the result). An input of at
/// most one element, or a size-1 axis, returns the gradient.
fn cumprod_backward(c: &Call, _: &str) -> Option<u64> {
    let d = c.dims("self");
    let (m, n) = (c.numel("self"), c.bytes("self"));
    let dim = wrap(c.int("dim").unwrap_or(0), d.len());
    if m <= 1 || d.get(dim).copied().unwrap_or(1) == 1 {
        return Some(0);
    }
    Some((4 * n + m).max(3 * n + m + n) - n)
}

/// _prelu_kernel's backward (Activation.cpp _prelu_kernel_backward): one TensorIterator with
/// two outputs, `grad_self` and `grad_weight`, both of the broadcast (the output's) shape, made
/// whichever argument needs a gradient; the rule counts the results at the arguments' sizes,
/// so the rest of the two is drawn here (weight's output-sized gradient is summed down to
/// weight's size after the formula, by validate_outputs).
fn prelu_backward(c: &Call, _: &str) -> Option<u64> {
    let mut results = 0;
    for a in ["self", "weight"] {
        if needs_grad(c, a) {
            results += c.bytes(a);
        }
    }
    Some((2 * c.out_bytes(0)).saturating_sub(results))
}

/// native_group_norm's backward when the mean and rstd returns take gradients too
/// (FunctionsManual.cpp infinitely_differentiable_native_group_norm_backward): named `ds =
/// (dY * X).sum(3)` and `db = dY.sum(3)` (N·C each, the product a temporary of the input's
/// size), then for the input `var`, `rstd_cube`, `dvar`, `b`, `c` (N·G each) and `a = rstd *
/// gamma` (N·C), then `dX = a * dY + b * X + c`: three temporaries of the input's size beside
/// dX (var_mean_backward's part, `dX += ...`, reaches the same: its gradient, `aux` and their
/// sum beside dX); for the weight `((ds - db * mean) * rstd).sum(0)` (three N·C temporaries).
fn group_norm_backward(c: &Call, _: &str) -> Option<u64> {
    let e = c.out_elem(0);
    let x = c.bytes("input");
    let (n, ch, g) = (
        c.int("N").unwrap_or(1).max(0) as u64,
        c.int("C").unwrap_or(1).max(0) as u64,
        c.int("group").unwrap_or(1).max(0) as u64,
    );
    let (nc, ng) = (n * ch * e, n * g * e);
    let mut named = 2 * nc;
    let mut peak = named + x;
    let dx = if needs_grad(c, "input") { x } else { 0 };
    if dx > 0 {
        named += 5 * ng + if given(c, "weight") { nc } else { 0 };
        peak = peak.max(named + 4 * x);
    }
    let mut results = dx;
    if needs_grad(c, "weight") {
        peak = peak.max(named + dx + 3 * nc + ch * e);
        results += ch * e;
    }
    if needs_grad(c, "bias") {
        results += ch * e;
    }
    Some(peak.saturating_sub(results))
}

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "_prelu_kernel.default",
        read_from: "Activation.cpp _prelu_kernel_backward",
        forward_scratch: None,
        backward_temporaries: Some(prelu_backward),
        approximates: None,
    },
    Override {
        op: "_softmax_backward_data.default",
        read_from: "derivatives.yaml _softmax_backward_data",
        forward_scratch: None,
        // grad_output: `_softmax_backward_data(grad.to(output.dtype()), ...)`, the result itself
        // (the `.to` a copy only when the dtypes differ); output: the generic count of
        // softmax_double_backward stands.
        backward_temporaries: Some(|c, arg| {
            (arg == "grad_output").then(|| {
                if c.out_elem(0) == c.elem("output") {
                    0
                } else {
                    c.numel("output") * c.elem("output")
                }
            })
        }),
        approximates: None,
    },
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
        op: "cumprod.default",
        read_from: "ReduceOps.cpp cumprod_backward, reversed_cumsum",
        forward_scratch: None,
        backward_temporaries: Some(cumprod_backward),
        approximates: Some("an input with no zeros (cumprod_backward's zero branch depends on the values and is not drawn)"),
    },
    Override {
        op: "cumsum.default",
        read_from: "FunctionsManual.cpp cumsum_backward",
        forward_scratch: None,
        backward_temporaries: Some(cumsum_backward),
        approximates: None,
    },
    Override {
        op: "diagonal_scatter.default",
        read_from: "derivatives.yaml diagonal_scatter",
        forward_scratch: None,
        backward_temporaries: Some(scatter_backward),
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
        op: "logcumsumexp.default",
        read_from: "FunctionsManual.cpp logcumsumexp_backward",
        forward_scratch: None,
        backward_temporaries: Some(logcumsumexp_backward),
        approximates: Some("a real input (logcumsumexp_backward's complex branch is not drawn)"),
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
    Override {
        op: "mvlgamma.default",
        read_from: "UnaryOps.cpp mvlgamma; FunctionsManual.cpp mvlgamma_backward",
        forward_scratch: Some(mvlgamma_forward),
        backward_temporaries: Some(mvlgamma_backward),
        approximates: None,
    },
    Override {
        op: "native_group_norm.default",
        read_from: "FunctionsManual.cpp infinitely_differentiable_native_group_norm_backward, var_mean_backward; derivatives.yaml native_group_norm",
        forward_scratch: None,
        backward_temporaries: Some(group_norm_backward),
        approximates: Some("every return takes a gradient (the mean and rstd too), so derivatives.yaml takes infinitely_differentiable_native_group_norm_backward; with the output's gradient alone torch calls the native_group_norm_backward kernel, whose buffers are not drawn"),
    },
    Override {
        op: "polar.default",
        read_from: "FunctionsManual.cpp polar_backward; ConjugateFallback.cpp",
        forward_scratch: None,
        backward_temporaries: Some(polar_backward),
        approximates: None,
    },
    Override {
        op: "pow.Tensor_Tensor",
        read_from: "FunctionsManual.cpp pow_backward_self, pow_backward_exponent",
        forward_scratch: None,
        backward_temporaries: Some(pow_tensor_backward),
        approximates: None,
    },
    Override {
        op: "prod.default",
        read_from: "FunctionsManual.cpp prod_backward",
        forward_scratch: None,
        backward_temporaries: Some(prod_backward),
        approximates: Some("an input with no zeros (prod_backward's prod_safe_zeros_backward branch depends on the values and is not drawn)"),
    },
    Override {
        op: "prod.dim_int",
        read_from: "FunctionsManual.cpp prod_backward (dim); ReduceOpsUtils.h make_reduction",
        forward_scratch: None,
        backward_temporaries: Some(prod_dim_backward),
        approximates: Some("an input with no zeros (prod_backward's prod_safe_zeros_backward branch depends on the values and is not drawn)"),
    },
    Override {
        op: "select_scatter.default",
        read_from: "derivatives.yaml select_scatter",
        forward_scratch: None,
        backward_temporaries: Some(scatter_backward),
        approximates: None,
    },
    Override {
        op: "sinc.default",
        read_from: "FunctionsManual.cpp sinc_backward",
        forward_scratch: None,
        backward_temporaries: Some(sinc_backward),
        approximates: None,
    },
    Override {
        op: "slice_scatter.default",
        read_from: "derivatives.yaml slice_scatter",
        forward_scratch: None,
        backward_temporaries: Some(scatter_backward),
        approximates: None,
    },
    Override {
        op: "special_i1.default",
        read_from: "FunctionsManual.cpp i1_backward",
        forward_scratch: None,
        backward_temporaries: Some(i1_backward),
        approximates: None,
    },
    Override {
        op: "special_i1e.default",
        read_from: "FunctionsManual.cpp i1e_backward",
        forward_scratch: None,
        backward_temporaries: Some(i1e_backward),
        approximates: None,
    },
    Override {
        op: "std.correction",
        read_from: "ReduceOps.cpp std_var_out, std_var_all_cpu, mean_out; FunctionsManual.cpp std_backward, var_backward",
        forward_scratch: Some(var_std_forward),
        backward_temporaries: Some(|c, _| Some(std_temps(c))),
        approximates: None,
    },
    Override {
        op: "std_mean.correction",
        read_from: "FunctionsManual.cpp std_mean_backward, std_backward, var_backward, mean_backward",
        forward_scratch: None,
        backward_temporaries: Some(|c, _| Some(std_temps(c).max(mean_part(c)))),
        approximates: None,
    },
    Override {
        op: "var.correction",
        read_from: "ReduceOps.cpp std_var_out, std_var_all_cpu, mean_out; FunctionsManual.cpp var_backward",
        forward_scratch: Some(var_std_forward),
        backward_temporaries: Some(|c, _| Some(var_temps(c))),
        approximates: None,
    },
    Override {
        op: "var_mean.correction",
        read_from: "FunctionsManual.cpp var_mean_backward, var_backward, mean_backward",
        forward_scratch: None,
        backward_temporaries: Some(|c, _| Some(var_temps(c).max(mean_part(c)))),
        approximates: None,
    },
];
