//! Override entries for the linear algebra ops (LAPACK workspaces, pivots, the `linalg_*`
//! backward helpers): see [`super`]. Sorted by op name.

use super::{Call, Override};
use crate::ops::generic::AtenValue;

/// Scalar argument `name` as a number (`default` when left out; `inf`/`-inf` as written).
fn scalar(c: &Call, name: &str, default: f64) -> f64 {
    match c.value(name) {
        None | Some(AtenValue::None) => default,
        Some(AtenValue::Int(i)) => *i as f64,
        Some(AtenValue::Float(x)) => *x,
        Some(AtenValue::Other(t)) if t.contains("-inf") => f64::NEG_INFINITY,
        Some(AtenValue::Other(t)) if t.contains("inf") => f64::INFINITY,
        Some(_) => f64::NAN,
    }
}

/// Whether tensor argument `name` takes a gradient here.
fn requires_grad(c: &Call, name: &str) -> bool {
    c.input(name).is_some_and(|x| x.requires_grad)
}

/// `wrapped_scalar_tensor(s)` (aten/src/ATen/ScalarOps.h), which a `Tensor * Scalar` makes
/// for its Scalar: a 0-dim double (or int64) tensor, freed as the product returns.
const WRAPPED_SCALAR: u64 = 8;

/// The broadcast shape's elements of tensor arguments `a` and `b` (`infer_size`).
fn broadcast_numel(c: &Call, a: &str, b: &str) -> u64 {
    let (x, y) = (c.dims(a), c.dims(b));
    let n = x.len().max(y.len());
    (0..n)
        .map(|k| {
            let dx = if k + x.len() >= n {
                x[k + x.len() - n]
            } else {
                1
            };
            let dy = if k + y.len() >= n {
                y[k + y.len() - n]
            } else {
                1
            };
            if dx == 1 {
                dy
            } else {
                dx
            }
        })
        .product()
}

/// `maybe_multiply(product, alpha)` (FunctionsManual.cpp) for argument `arg`: with `alpha`
/// other than 1, `product * alpha` is made beside the product (the argument's size) and the
/// Scalar's wrapped tensor; with `alpha` 1 the product is the result. `beta`'s `grad * beta`
/// is the result itself, beside the wrapped Scalar.
fn maybe_multiply_backward(c: &Call, arg: &str) -> Option<u64> {
    if arg == "self" {
        return Some(if scalar(c, "beta", 1.0) == 1.0 {
            0
        } else {
            WRAPPED_SCALAR
        });
    }
    if scalar(c, "alpha", 1.0) == 1.0 {
        return Some(0);
    }
    Some(c.numel(arg) * c.elem(arg) + WRAPPED_SCALAR)
}

/// `norm_backward(grad, self, p, norm, dim, keepdim)` (FunctionsManual.cpp) on an input of
/// `n` elements (`d` bytes) with a norm of `r` elements of `e` bytes: the bytes it holds
/// besides its result at its highest point (its input not counted). None: `p == 0` (no
/// gradient) or a p that is not a number.
fn norm_backward_temporaries(p: f64, d: u64, n: u64, r: u64, e: u64) -> Option<u64> {
    if p == 1.0 {
        // `self.sgn() * grad`: the sgn beside the product.
        Some(d)
    } else if p == 2.0 {
        // `grad * (self / norm).masked_fill_(norm == 0, 0)`: the quotient and a bool of the
        // norm's shape beside the product.
        Some(d + r)
    } else if p.is_infinite() {
        // `self_abs = self.abs()`; `mask = self_abs.eq(norm).logical_or(self_abs.isnan())`
        // (a bool of the input's shape); `self.sgn() * ((grad / mask.sum(dim, true)) *
        // mask)`: the int64 sum and the quotient (the norm's shape), `* mask` and the sgn
        // (the input's), all alive with the product (GCC evaluates the right operand first:
        // the bool-to-int64 copy of the sum is gone by then).
        Some(d + n + 8 * r + r * e + d + d)
    } else if p > 0.0 && p < 1.0 {
        // `self_scaled = self.sgn() * self.abs().pow_(p - 1).masked_fill_(self == 0, 0)`:
        // the sgn, the abs and a bool of the input's shape beside it; then `self_scaled *
        // grad * norm.pow(1 - p)`: `self_scaled * grad` and the pow beside self_scaled.
        Some(d + d + n.max(r * e))
    } else if p > 1.0 && p < 2.0 {
        // `self_scaled = self.sgn() * self.abs().pow_(p - 1)` (the sgn and the abs beside
        // it); `scale_v = grad / norm.pow(p - 1)`; `self_scaled * scale_v`.
        Some((d + d).max(d + r * e))
    } else if p > 2.0 {
        // `self_scaled = self * self.abs().pow_(p - 2)` (the abs beside it, then gone);
        // `scale_v = grad / norm.pow(p - 1)` (the norm's shape); `self_scaled * scale_v`.
        Some(d.max(d + r * e))
    } else {
        None
    }
}

/// dist's backward: `-norm_backward(grad, self - other, p, result)` for other (its result
/// negated: the un-negated one is held as the negation is made), then `norm_backward(grad,
/// self - other, p, result)` for self. Each gradient has the broadcast shape until the engine
/// sums it down after the node: an argument smaller than it holds the difference more.
fn dist_backward(c: &Call, arg: &str) -> Option<u64> {
    let e = c.out_elem(0);
    let d = broadcast_numel(c, "self", "other") * e;
    let n = broadcast_numel(c, "self", "other");
    // `self - other` is a temporary of the statement: alive throughout.
    let t = d + norm_backward_temporaries(scalar(c, "p", 2.0), d, n, 1, e)?;
    let wider = |name: &str| d.saturating_sub(c.numel(name) * c.elem(name));
    Some(if arg == "other" {
        t.max(d + d) + wider("other")
    } else {
        let held = if requires_grad(c, "other") {
            wider("other")
        } else {
            0
        };
        t + held + wider("self")
    })
}

/// Bytes held over a helper's statements: `live` now, `peak` the highest so far.
#[derive(Default)]
struct Trace {
    live: u64,
    peak: u64,
}

impl Trace {
    /// A tensor of `b` bytes made.
    fn make(&mut self, b: u64) {
        self.live = self.live.saturating_add(b);
        self.peak = self.peak.max(self.live);
    }

    /// A tensor of `b` bytes freed.
    fn free(&mut self, b: u64) {
        self.live = self.live.saturating_sub(b);
    }

    /// An op's result of `out` bytes made while a copy of `tmp` bytes it made of an input (a
    /// cast, a wrapped Scalar) is alive; the copy then freed.
    fn with(&mut self, tmp: u64, out: u64) {
        self.make(tmp);
        self.make(out);
        self.free(tmp);
    }
}

/// The accumulate type's element bytes on CPU for `e`-byte floats
/// (`at::toAccumulateType(t, kCPU)`, ATen/AccumulateType.h: float and double accumulate in
/// double, half and bfloat16 in float).
fn cpu_acc_elem(e: u64) -> u64 {
    if e >= 4 {
        8
    } else {
        4
    }
}

/// renorm's backward (FunctionsManual.cpp: renorm_backward) on CPU: its statements in order,
/// with the accumulate type (`a` bytes, double for float) for the norm and everything mixed
/// with it. A binary op of a float and a double tensor on CPU first copies the float input to
/// double (TensorIterator's `promote_inputs_to_common_dtype`: `op.tensor().to(common_dtype_)`),
/// (aten/src/ATen/TensorIterator.cpp: compute_types), and a reduction to another dtype copies
/// its input (ReduceOps.cpp: `make_reduction`'s `self.to(in_dtype)`).
/// None: a p whose `norm_backward` branch is not read here.
fn renorm_backward(c: &Call, _: &str) -> Option<u64> {
    let d = c.dims("self");
    if d.is_empty() {
        return None;
    }
    let dim = super::wrap(c.int("dim").unwrap_or(0), d.len());
    let (n, r, e) = (c.numel("self"), d[dim], c.elem("self"));
    let a = cpu_acc_elem(e);
    let cast = |k: u64| if a == e { 0 } else { k * a };
    let p = scalar(c, "p", 2.0);
    let mut t = Trace::default();
    // norm = linalg_vector_norm(self, p, reduce_dims, keepdim, acc_type): self copied to it.
    t.with(cast(n), r * a);
    // grad_output = (self.conj() * grad).sum(reduce_dims, true, acc_type).
    t.make(n * e);
    t.with(cast(n), r * a);
    t.free(n * e);
    // nb = norm_backward(grad_output, self, p, norm, reduce_dims, true): acc-typed.
    if p == 2.0 {
        // grad * (self / norm).masked_fill_(norm == 0, 0)
        t.with(cast(n), n * a);
        t.make(r);
        t.make(n * a);
        t.free(n * a + r);
    } else if p == 1.0 {
        // self.sgn() * grad
        t.make(n * e);
        t.with(cast(n), n * a);
        t.free(n * e);
    } else if p.is_infinite() {
        // self_abs; mask = self_abs.eq(norm).logical_or(self_abs.isnan()); then
        // self.sgn() * ((grad / mask.sum(dim, true)) * mask), the right operand first.
        t.make(n * e);
        t.with(cast(n), n);
        t.make(n);
        t.make(n);
        t.free(n + n);
        t.with(8 * n, 8 * r);
        t.with(r * a, r * a);
        t.with(n * a, n * a);
        t.make(n * e);
        t.with(cast(n), n * a);
        t.free(n * e + n + 8 * r + r * a + n * a + n * e);
    } else {
        return None;
    }
    // grad_output, moved into norm_backward's by-value parameter, goes with the statement.
    t.free(r * a);
    // invnorm = (norm + 1e-7).reciprocal()
    t.make(r * a);
    t.make(r * a);
    t.free(r * a);
    // grad_norm = maxnorm * invnorm * (grad - invnorm * nb)
    t.make(r * a);
    t.make(n * a);
    t.with(cast(n), n * a);
    t.make(n * a);
    t.free(r * a + n * a + n * a);
    // at::where(norm > maxnorm, grad_norm.to(grad.scalar_type()), grad): the result, which
    // the generic rule counts apart (made last: the bytes beside it are the peak less it).
    t.make(r);
    t.make(if a == e { 0 } else { n * e });
    t.make(n * e);
    Some(t.peak - n * e)
}

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "addbmm.default",
        read_from: "derivatives.yaml addbmm; FunctionsManual.cpp: maybe_multiply",
        forward_scratch: None,
        // batch1/batch2: `maybe_multiply(<bmm>, alpha)`: the bmm is the argument's size.
        backward_temporaries: Some(maybe_multiply_backward),
        approximates: None,
    },
    Override {
        op: "addmv.default",
        read_from: "derivatives.yaml addmv; FunctionsManual.cpp: maybe_multiply",
        forward_scratch: None,
        // mat: `maybe_multiply(grad.ger(vec), alpha)`; vec: `maybe_multiply(mat.t().mv(grad),
        // alpha)`: the ger and the mv are the argument's size.
        backward_temporaries: Some(maybe_multiply_backward),
        approximates: None,
    },
    Override {
        op: "dist.default",
        read_from: "aten/src/ATen/native/ReduceOps.cpp: dist; derivatives.yaml dist; FunctionsManual.cpp: norm_backward",
        // `at::norm(self - other, p)`: the difference, of the broadcast shape.
        forward_scratch: Some(|c| broadcast_numel(c, "self", "other") * c.out_elem(0)),
        backward_temporaries: Some(dist_backward),
        approximates: Some("backward: norm_backward's p = 1, 2 and finite p > 2 branches are read; another p keeps the generic count"),
    },
    Override {
        op: "linalg_vector_norm.default",
        read_from: "derivatives.yaml linalg_vector_norm; FunctionsManual.cpp: linalg_vector_norm_backward, norm_backward",
        forward_scratch: None,
        backward_temporaries: Some(|c, _| {
            let n = c.numel("self");
            let (r, e) = (c.out_numel(0), c.out_elem(0));
            norm_backward_temporaries(scalar(c, "ord", 2.0), n * c.elem("self"), n, r, e)
        }),
        approximates: Some("backward: ord = 0 returns no gradient in torch; the generic rule still draws one"),
    },
    Override {
        op: "renorm.default",
        read_from: "aten/src/ATen/native/Normalization.cpp: renorm_out; FunctionsManual.cpp: renorm_backward, norm_backward",
        // `norm = at::linalg_vector_norm(self, p, reduce_dims, /*keepdim=*/true)` in the CUDA
        // accumulate type (float for float, half and bfloat16): the size of `dim`; the scale
        // factor is written into it, or into an `at::empty` of the input's dtype when that
        // differs.
        forward_scratch: Some(|c| {
            let d = c.dims("self");
            let r = if d.is_empty() {
                1
            } else {
                d[super::wrap(c.int("dim").unwrap_or(0), d.len())]
            };
            let e = c.elem("self");
            if e < 4 {
                r * 4 + r * e
            } else {
                r * e
            }
        }),
        backward_temporaries: Some(renorm_backward),
        approximates: Some("backward: norm_backward's p = 1, 2 and inf branches are read; another p keeps the generic count"),
    },
];
