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

/// The batch (product of all but the last two sizes) and the last size of tensor argument
/// `name` (a square matrix or a batch of them).
fn batch_and_n(c: &Call, name: &str) -> (u64, u64) {
    let d = c.dims(name);
    let k = d.len().saturating_sub(2);
    (d[..k].iter().product(), d.last().copied().unwrap_or(0))
}

/// `lu_solve_kernel`'s sanity checks (BatchLinearAlgebraKernel.cpp):
/// `pivots.gt(0).all().item<bool>()`, then `pivots.le(LU.size(-2)).all()`: each a wrapped
/// int64 Scalar, its int32 copy (TensorIterator's input cast) and a bool of the pivots' shape,
/// made and freed one after the other. Nothing when the result is empty (the trivial case
/// returns before).
fn lu_solve_checks(pivots: u64, result_empty: bool) -> u64 {
    if result_empty {
        0
    } else {
        WRAPPED_SCALAR + 4 + pivots
    }
}

/// `lu_det_P(pivots)` (LinearAlgebra.cpp) for `b` matrices of size `n`, one statement:
/// `(at::arange(1, n + 1, int32) != pivots).sum(-1, false, kLong).fmod_(2).mul_(-2).add_(1)`:
/// the arange and the bool stay to its end; the sum copies the bool to int64 first; each
/// in-place op wraps its Scalar. Leaves the int64 result (`8 * b` bytes) made.
fn lu_det_p(t: &mut Trace, b: u64, n: u64) {
    t.make(4 * n);
    t.make(b * n);
    t.with(8 * b * n, 8 * b);
    t.with(WRAPPED_SCALAR, 0);
    t.free(4 * n + b * n);
}

/// _linalg_det's forward (LinearAlgebra.cpp: _linalg_det_out): `info` (int32, one per
/// matrix); `linalg_lu_factor_ex_out` into the F-contiguous LU (getrf: no workspace); then
/// `at::mul_out(result, lu_det_P(pivots), at::prod(LU.diagonal(), -1))`, GCC evaluating the
/// right argument first (the prod is alive through lu_det_P); the int64 sign cast to the
/// result's dtype by the mul.
fn linalg_det_forward(c: &Call) -> u64 {
    let (b, n) = batch_and_n(c, "A");
    let e = c.elem("A");
    let mut t = Trace::default();
    t.make(4 * b);
    t.make(b * e);
    lu_det_p(&mut t, b, n);
    t.with(b * e, 0);
    t.peak
}

/// linalg_det_backward (FunctionsManual.cpp), grad mode off: `d_diag = grad * det.conj()`;
/// `d = at::diag_embed(d_diag...expand_as(pivots)).mT()` (the input's size); `LU_ = LU +
/// at::diag_embed(at::where(LU.diagonal() == 0., eps, 0.))`: the comparison's wrapped double
/// and its cast, a bool per diagonal element, `where`'s two default-dtype (float) wrapped
/// Scalars, the float diagonal and its float diag_embed, the sum (the input's size; F-strided
/// like LU, so lu_solve does not clone it); then `at::linalg_lu_solve(LU_, pivots, d)`: the
/// result and the kernel's checks. Nothing for an empty input (`return {}`).
fn linalg_det_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, n) = batch_and_n(c, "A");
    let e = c.elem("A");
    let m = b * n * n * e;
    if m == 0 {
        return Some(0);
    }
    let cast = |bytes: u64| if e == 4 { 0 } else { bytes };
    let mut t = Trace::default();
    t.make(b * e);
    t.make(m);
    t.with(WRAPPED_SCALAR + cast(e), b * n);
    t.with(4 + 4, b * n * 4);
    t.make(b * n * n * 4);
    t.with(cast(b * n * n * e), m);
    t.free(b * n + b * n * 4 + b * n * n * 4);
    t.make(m);
    t.with(lu_solve_checks(b * n, false), 0);
    Some(t.peak - m)
}

/// _linalg_slogdet's forward (LinearAlgebra.cpp: _linalg_slogdet_out): `info`; the LU into
/// the F-contiguous output; `at::mul_out(sign, diag_U.sgn().prod(-1), lu_det_P(pivots))`,
/// GCC evaluating the right argument first (lu_det_P's int64 result alive through the sgn and
/// its prod), the sign cast by the mul; then `at::sum_out(logabsdet, diag_U.abs().log_(),
/// -1)`.
fn linalg_slogdet_forward(c: &Call) -> u64 {
    let (b, n) = batch_and_n(c, "A");
    let e = c.elem("A");
    let mut t = Trace::default();
    t.make(4 * b);
    lu_det_p(&mut t, b, n);
    t.make(b * n * e);
    t.make(b * e);
    t.with(b * e, 0);
    t.free(8 * b + b * n * e + b * e);
    t.with(b * n * e, 0);
    t.peak
}

/// triangular_solve_backward (FunctionsManual.cpp), `output_mask` the arguments that take a
/// gradient: `grad_b = std::get<0>(grad_x.triangular_solve(a.conj(), ...))` (its cloned
/// coefficient, A's size, gone with the statement); for A, `-grad_b.matmul(x.mH())` (the
/// matmul and its negation, A's size), then `.triu/.tril` (a new one beside it) and
/// `grad_a.add(grad_m)` (another). `grad_b` is made even when only A takes a gradient.
fn triangular_solve_backward(c: &Call, _: &str) -> Option<u64> {
    let bsz = c.out_bytes(0);
    let m = c.out_bytes(1);
    let (self_rg, a_rg) = (requires_grad(c, "self"), requires_grad(c, "A"));
    let mut t = Trace::default();
    t.make(bsz);
    t.make(m);
    t.free(m);
    if a_rg {
        t.make(m);
        t.make(m);
        t.free(m);
        t.make(m);
        t.free(m);
        t.make(m);
        t.free(m);
    }
    let results = if self_rg { bsz } else { 0 } + if a_rg { m } else { 0 };
    Some(t.peak.saturating_sub(results))
}

/// The batch (product of all but the last two sizes) and the last two sizes of tensor
/// argument `name`.
fn batch_m_n(c: &Call, name: &str) -> (u64, u64, u64) {
    let d = c.dims(name);
    let k = d.len().saturating_sub(2);
    let at = |i: usize| d.get(i).copied().unwrap_or(1);
    (d[..k].iter().product(), at(k), at(k + 1))
}

/// svd_backward (FunctionsManual.cpp) with the gradients of U, S and Vh all defined (the
/// OpInfo check gives every output one), real: `UhgU = skew(U^H gU)` and `VhgV = skew(Vh
/// gVh^H)` (k x k, the matmul beside the skew); `E` (its `S * S` beside it); `(UhgU * S +
/// S * VhgV) / E` (four k x k at once); `+ gS.diag_embed()`; then for m > n `U gA`, `gUSinv
/// = gU / S`, `gA + gUSinv - U (U^H gUSinv)` and `gA Vh` (m < n the mirror image), for m ==
/// n `U (gA Vh)`. The result (m x n) is made last.
fn svd_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "A");
    let e = c.elem("A");
    let k = m.min(n);
    let (kk, s, result) = (b * k * k * e, b * k * e, b * m * n * e);
    if result == 0 {
        return Some(0);
    }
    let mut t = Trace::default();
    for _ in 0..2 {
        t.make(kk);
        t.make(kk);
        t.free(kk);
    }
    t.make(s);
    t.make(kk);
    t.free(s);
    // a, b, their sum and the quotient; a, b, the sum and E then go.
    t.make(4 * kk);
    t.free(4 * kk);
    // `ret + gS.diag_embed()`: the diag_embed and the sum; the old ret and it then go.
    t.make(kk);
    t.make(kk);
    t.free(2 * kk);
    if m != n {
        // mk: U gA (m > n) or gA Vh (m < n), the long side by k.
        let mk = b * m.max(n) * k * e;
        t.make(mk);
        t.free(kk);
        t.make(mk);
        t.make(mk);
        t.make(kk);
        t.make(mk);
        t.make(mk);
        t.free(mk + kk + mk + mk);
        t.make(result);
    } else {
        t.make(kk);
        t.make(result);
    }
    Some(t.peak - result)
}

/// Whether B is a vector (or a batch of them) on the right of A
/// (`linalg_solve_is_vector_rhs`, LinearAlgebraUtils.h): one dim fewer than A, A's shape
/// without its last size.
fn solve_vector_rhs(c: &Call) -> bool {
    let (a, b) = (c.dims("A"), c.dims("B"));
    b.len() + 1 == a.len() && b[..] == a[..a.len() - 1]
}

/// _linalg_solve_ex's forward (BatchLinearAlgebra.cpp: _linalg_solve_ex_out): the LU into
/// its output; `at::linalg_lu_solve_out(result_, ...)` with `result_ = result.unsqueeze(-1)`
/// for a vector B, whose strides are not the F-contiguous ones the structured kernel asks for:
/// a proxy of the result's size, copied back; then lu_solve_kernel's checks.
fn linalg_solve_ex_forward(c: &Call) -> u64 {
    let (b, n) = batch_and_n(c, "A");
    let empty = c.out_numel(0) == 0;
    let proxy = if solve_vector_rhs(c) && !empty {
        c.out_bytes(0)
    } else {
        0
    };
    proxy + lu_solve_checks(b * n, empty)
}

/// linalg_solve_backward (FunctionsManual.cpp), grad mode off: `gB_ =
/// at::linalg_lu_solve(LU, pivots, gX, ...)` (B's size, with the kernel's checks); for A,
/// `-gB_.matmul(X_.mH())` (the matmul and its negation, A's size). gB_ is made even when only
/// A takes a gradient.
fn linalg_solve_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, n) = batch_and_n(c, "A");
    let (gb, m) = (c.bytes("B"), c.bytes("A"));
    let mut t = Trace::default();
    t.make(gb);
    t.with(lu_solve_checks(b * n, gb == 0), 0);
    if requires_grad(c, "A") {
        t.make(m);
        t.make(m);
        t.free(m);
    }
    let results =
        if requires_grad(c, "A") { m } else { 0 } + if requires_grad(c, "B") { gb } else { 0 };
    Some(t.peak.saturating_sub(results))
}

/// cholesky_backward (FunctionsManual.cpp): `gA = L_.mH().matmul(gL_).tril()` (the matmul
/// beside the tril); `gA = 0.5 * (gA + gA.tril(-1).mH())` (the tril, the sum and the product,
/// with the Scalar's wrapped double and its cast to the input's dtype); then two
/// `linalg_solve_triangular` calls, each making the next gA (the last one the result).
fn cholesky_backward(c: &Call, _: &str) -> Option<u64> {
    let e = c.elem("self");
    let m = c.bytes("self");
    if m == 0 {
        return Some(0);
    }
    let mut t = Trace::default();
    t.make(m);
    t.make(m);
    t.free(m);
    t.make(m);
    t.make(m);
    t.with(WRAPPED_SCALAR + if e == 8 { 0 } else { e }, m);
    t.free(3 * m);
    t.make(m);
    t.free(m);
    t.make(m);
    Some(t.peak - m)
}

/// lu_unpack_backward (FunctionsManual.cpp) with both L's and U's gradients defined (the
/// OpInfo check gives every differentiable output one): m == n, `L_grad.tril(-1) +
/// U_grad.triu()`; else `get_L1(L_grad) + get_U1(U_grad)` (two k x k and their sum), then
/// `at::cat` with the rest of the longer one. The result (LU's size) is made last.
fn lu_unpack_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "LU_data");
    let e = c.elem("LU_data");
    let k = m.min(n);
    let result = b * m * n * e;
    if result == 0 {
        return Some(0);
    }
    let kk = b * k * k * e;
    let mut t = Trace::default();
    if m == n {
        t.make(kk);
        t.make(kk);
        t.make(result);
    } else {
        t.make(kk);
        t.make(kk);
        t.make(kk);
        t.free(2 * kk);
        t.make(result);
    }
    Some(t.peak - result)
}

/// linalg_lu_solve's backward. B: `at::linalg_lu_solve(LU, pivots, grad, left, !adjoint)`
/// (its result, the kernel's checks). LU: linalg_lu_solve_LU (FunctionsManual.cpp), `[P, L,
/// U] = at::lu_unpack(LU, pivots, true, left == adjoint)` (P and the int64 permutation only
/// when unpacking the pivots), then for left != adjoint `gR = solve_triangular(U^H,
/// -gX.matmul(X^H))` (the product, its negation, the solve), `gL = solve_triangular(L^H,
/// gR.matmul(U^H), ...).tril(-1)`, `gL + gR.triu()`; else `gR = -P^T X gX^H P` (the chain's
/// products, the first X's size), `gR = solve_triangular(L^H, gR, ...)`, `gU =
/// solve_triangular(U^H, L^H gR, ...).triu()`, `gR.tril(-1) + gU`. Each product of the
/// square LU's size; the result (the last sum) made last.
fn linalg_lu_solve_backward(c: &Call, arg: &str) -> Option<u64> {
    let (b, n) = batch_and_n(c, "LU");
    if arg == "B" {
        return Some(lu_solve_checks(b * n, c.out_numel(0) == 0));
    }
    let kk = c.bytes("LU");
    let x = c.out_bytes(0);
    if kk == 0 || x == 0 {
        return Some(0);
    }
    let left = c.flag("left").unwrap_or(true);
    let adjoint = c.flag("adjoint").unwrap_or(false);
    let mut t = Trace::default();
    if left != adjoint {
        t.make(2 * kk);
        t.make(3 * kk);
        t.free(2 * kk);
        t.make(3 * kk);
        t.free(2 * kk);
    } else {
        let batched = c.dims("LU").len() > 2;
        t.make(3 * kk);
        t.with(8 * n + if batched { 8 * b * n } else { 0 }, 0);
        t.make(x + 3 * kk);
        t.free(x + 2 * kk);
        t.make(kk);
        t.free(kk);
        t.make(3 * kk);
        t.free(2 * kk);
    }
    t.make(kk);
    t.make(kk);
    Some(t.peak - kk)
}

/// linalg_lu_factor_ex's backward (FunctionsManual.cpp): lu_factor_ex_backward unpacks `[P,
/// L, U] = at::lu_unpack(LU, pivots, true, pivot)` (the int64 permutation beside them), then
/// linalg_lu_backward with `L_grad`, `U_grad` views of grad: for m == n `L^H L_grad` and its
/// `tril(-1)`, `+ (U_grad U^H).triu()` (product, triu, sum), two triangular solves; for m < n
/// `L^H L_grad`, `- U_grad.triu() U^H` (triu of U's size, product, difference), the solve of
/// its `tril(-1)`, `at::cat({A_grad + U1_grad.triu(), U2_grad})` (A's size), the second solve
/// (m > n the mirror image, L's `tril(-1)` of L's size); then `P.matmul(A_grad)` (the
/// result) when pivoting.
fn lu_factor_ex_backward(c: &Call, _: &str) -> Option<u64> {
    lu_backward(c, true)
}

/// linalg_lu's backward: linalg_lu_backward (FunctionsManual.cpp) on the saved P, L and U,
/// both gradients defined (see [`lu_factor_ex_backward`], without its unpacking).
fn linalg_lu_backward(c: &Call, _: &str) -> Option<u64> {
    lu_backward(c, false)
}

/// linalg_lu_backward's statements, after `lu_unpack` when `unpack` (lu_factor_ex_backward).
fn lu_backward(c: &Call, unpack: bool) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "A");
    let e = c.elem("A");
    let k = m.min(n);
    let a = b * m * n * e;
    if a == 0 {
        return Some(0);
    }
    let pivot = c.flag("pivot").unwrap_or(true);
    let kk = b * k * k * e;
    let (p, l, u) = (
        if pivot { b * m * m * e } else { 0 },
        b * m * k * e,
        b * k * n * e,
    );
    let mut t = Trace::default();
    if unpack {
        t.make(p + l + u);
    }
    if unpack && pivot {
        let batched = c.dims("A").len() > 2;
        t.with(8 * m + if batched { 8 * b * m } else { 0 }, 0);
    }
    if m == n {
        t.make(kk);
        t.make(kk);
        t.free(kk);
        t.make(3 * kk);
        t.free(3 * kk);
        for _ in 0..2 {
            t.make(kk);
            t.free(kk);
        }
    } else {
        // The long factor's triangle: U_grad.triu() (m < n) or L_grad.tril(-1) (m > n).
        let long = if m < n { u } else { l };
        t.make(kk);
        t.make(long + 2 * kk);
        t.free(long + 2 * kk);
        t.make(2 * kk);
        t.free(2 * kk);
        t.make(2 * kk + a);
        t.free(3 * kk);
        t.make(a);
        t.free(a);
    }
    if pivot {
        t.make(a);
    }
    Some(t.peak.saturating_sub(a))
}

/// linalg_qr_backward (FunctionsManual.cpp) with the gradients of Q and R both defined:
/// `gA = gR.matmul(R.mH()) - Q.mH().matmul(gQ)` (two k x k products and their difference);
/// for m >= n `Q.matmul(syminvadj(gA.triu()))` (the triu, `X + X.mH()`, the product of Q's
/// size), `gA + gQ`, the triangular solve (the result); for m < n
/// `Q.matmul(trilImInvAdjSkew(-gA))` (the negation, `X - X.mH()` and its tril, the product),
/// the solve, `at::cat({gA, gA.new_zeros(..)}, -1)` (A's size) and `gA + Q.matmul(gR)` (the
/// product and the result, A's size).
fn linalg_qr_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "A");
    let e = c.elem("A");
    let k = m.min(n);
    let a = b * m * n * e;
    if a == 0 {
        return Some(0);
    }
    let kk = b * k * k * e;
    let mut t = Trace::default();
    t.make(3 * kk);
    t.free(2 * kk);
    if m >= n {
        t.make(2 * kk);
        t.make(a);
        t.free(3 * kk);
        t.make(a);
        t.free(a);
        t.make(a);
    } else {
        t.make(3 * kk);
        t.free(kk);
        t.make(kk);
        t.free(3 * kk);
        t.make(kk);
        t.free(kk);
        let zeros = b * m * (n - m) * e;
        t.make(zeros + a);
        t.free(zeros + kk);
        t.make(a);
        t.make(a);
    }
    Some(t.peak - a)
}

/// householder_product_backward (FunctionsManual.cpp), grad mode off (K updated in place),
/// on an input of `b` matrices m x n with k reflectors, elements of `e` bytes: `input =
/// input_.tril(-1)`; the squared column norms (a product of the first k columns, then their
/// sum); `sigma = tau / (tau * norms - 1.0)`; `K = result.matmul(grad.mH())` (m x m);
/// `apply_simple_transformation` in place (left: `u` a row, `t * v` a column, their product
/// the narrowed K's size; right: `t * v` gone before `u * v.mH()`); `input_grad` and
/// `tau_grad` as zeros; then per column i (last to first with `flip_order`) `update_grad`
/// (`vHK`, `Kv`, and `v_grad`'s products beside them, `tau_grad`'s 1 x 1 product) and, but
/// for the last, the two in-place updates of K while `v_grad` and `tau_grad` are held.
fn householder_backward_trace(
    t: &mut Trace,
    (b, m, n, k, e): (u64, u64, u64, u64, u64),
    flip: bool,
) {
    let (inp, tau, col) = (b * m * n * e, b * k * e, b * m * e);
    // In-place updates of K from row/column j: left (rows m - j), right (columns m - j).
    let left = |t: &mut Trace, j: u64| {
        let rows = m.saturating_sub(j);
        t.make(col + b * rows * e + b * rows * m * e);
        t.free(col + b * rows * e + b * rows * m * e);
    };
    let right = |t: &mut Trace, j: u64| {
        let cols = m.saturating_sub(j);
        t.make(b * cols * e + col);
        t.free(b * cols * e);
        t.make(b * m * cols * e);
        t.free(col + b * m * cols * e);
    };
    t.make(inp);
    t.make(b * m * k * e);
    t.make(tau);
    t.free(b * m * k * e);
    t.make(tau);
    t.with(WRAPPED_SCALAR + if e == 8 { 0 } else { e }, tau);
    t.make(tau);
    t.free(2 * tau);
    t.make(b * m * m * e);
    if flip {
        right(t, k - 1);
    } else {
        left(t, 0);
    }
    t.make(inp + tau);
    for step in 0..k {
        let i = if flip { k - 1 - step } else { step };
        t.make(col + col);
        t.make(b * e + col + col + col);
        t.free(b * e + col + col);
        t.make(b * e + b * e);
        t.free(b * e);
        t.free(col + col);
        if step + 1 < k {
            if flip {
                right(t, i - 1);
                left(t, i);
            } else {
                left(t, i + 1);
                right(t, i);
            }
        }
        t.free(col + b * e);
    }
}

/// linalg_householder_product's backward: [`householder_backward_trace`] over the results
/// (input's and tau's gradients, the zeros it fills).
fn householder_product_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "input");
    let e = c.elem("input");
    let k = c.dims("tau").last().copied().unwrap_or(0);
    let (inp, tau) = (b * m * n * e, b * k * e);
    if inp == 0 || tau == 0 {
        return Some(0);
    }
    let mut t = Trace::default();
    householder_backward_trace(&mut t, (b, m, n, k, e), false);
    let results = if requires_grad(c, "input") { inp } else { 0 }
        + if requires_grad(c, "tau") { tau } else { 0 };
    Some(t.peak.saturating_sub(results))
}

/// ormqr_backward (FunctionsManual.cpp): for other, `at::ormqr(self, tau, grad, left,
/// !transpose)` (other's size); for self or tau, householder_product_backward with
/// `flip_order = !(left ^ transpose)` ([`householder_backward_trace`]), K the square of
/// self's rows.
fn ormqr_backward(c: &Call, _: &str) -> Option<u64> {
    let (b, m, n) = batch_m_n(c, "self");
    let e = c.elem("self");
    let k = c.dims("input2").last().copied().unwrap_or(0);
    let (inp, tau, other) = (b * m * n * e, b * k * e, c.bytes("input3"));
    let mut t = Trace::default();
    if requires_grad(c, "input3") {
        t.make(other);
    }
    if (requires_grad(c, "self") || requires_grad(c, "input2")) && inp > 0 && tau > 0 {
        let left = c.flag("left").unwrap_or(true);
        let transpose = c.flag("transpose").unwrap_or(false);
        householder_backward_trace(&mut t, (b, m, n, k, e), !(left ^ transpose));
    }
    let results = if requires_grad(c, "self") { inp } else { 0 }
        + if requires_grad(c, "input2") { tau } else { 0 }
        + if requires_grad(c, "input3") { other } else { 0 };
    Some(t.peak.saturating_sub(results))
}

/// linalg_lu's forward (BatchLinearAlgebra.cpp: linalg_lu_out): `pivots` (int32, k per
/// matrix) and `info` (int32, one per matrix); `linalg_lu_factor_ex_out` into L (m > n) or U,
/// C-contiguous outputs (the meta's `set_output_raw_strided(.., {}, ..)`) the structured
/// kernel does not take as its F-contiguous LU: a proxy of A's size, copied back; then `lu_unpack_out`'s int64 permutation when pivoting.
fn linalg_lu_forward(c: &Call) -> u64 {
    let (b, m, n) = batch_m_n(c, "A");
    let e = c.elem("A");
    let k = m.min(n);
    if b * m * n == 0 {
        return 0;
    }
    // `maybe_create_proxy` compares the strides exactly.
    let proxy = b * m * n * e;
    let perm = if c.flag("pivot").unwrap_or(true) {
        8 * m + if c.dims("A").len() > 2 { 8 * b * m } else { 0 }
    } else {
        0
    };
    4 * b * k + 4 * b + proxy.max(perm)
}

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[
    Override {
        op: "_linalg_det.default",
        read_from: "aten/src/ATen/native/LinearAlgebra.cpp: _linalg_det_out, lu_det_P; FunctionsManual.cpp: linalg_det_backward; BatchLinearAlgebraKernel.cpp: lu_solve_kernel",
        forward_scratch: Some(linalg_det_forward),
        backward_temporaries: Some(linalg_det_backward),
        approximates: Some("backward: with grad mode off (no create_graph); float32 (where's float wrapped Scalars and diagonal)"),
    },
    Override {
        op: "_linalg_slogdet.default",
        read_from: "aten/src/ATen/native/LinearAlgebra.cpp: _linalg_slogdet_out, lu_det_P; FunctionsManual.cpp: slogdet_backward; BatchLinearAlgebraKernel.cpp: lu_solve_kernel",
        forward_scratch: Some(linalg_slogdet_forward),
        // A real input, grad mode off: `d = at::diag_embed(g...expand_as(pivots)).mT()`
        // (the input's size), then `at::linalg_lu_solve(LU, pivots, d, ...)` on the
        // F-contiguous LU: its result and the kernel's checks.
        backward_temporaries: Some(|c, _| {
            let (b, n) = batch_and_n(c, "A");
            let m = b * n * n * c.elem("A");
            if m == 0 {
                return Some(0);
            }
            Some(m + lu_solve_checks(b * n, false))
        }),
        approximates: Some("backward: a real input with grad mode off (no create_graph)"),
    },
    Override {
        op: "_linalg_solve_ex.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: _linalg_solve_ex_out, linalg_lu_solve_out; BatchLinearAlgebraKernel.cpp: lu_solve_kernel; FunctionsManual.cpp: linalg_solve_backward",
        forward_scratch: Some(linalg_solve_ex_forward),
        backward_temporaries: Some(linalg_solve_backward),
        approximates: Some("backward: grad mode off (no create_graph)"),
    },
    Override {
        op: "_linalg_svd.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: _linalg_svd_out; BatchLinearAlgebraKernel.cpp: svd_kernel, apply_svd; FunctionsManual.cpp: svd_backward",
        // `info = at::zeros(<batch>, kInt)`; svd_kernel's `cloneBatchedColumnMajor(A)` (gesdd
        // destroys its input). The LAPACK workspace (`work`, `iwork`, `rwork`) is a
        // std::vector, outside the tensor allocator. Nothing for an empty input.
        forward_scratch: Some(|c| {
            let (b, m, n) = batch_m_n(c, "A");
            if b * m * n == 0 {
                return 0;
            }
            c.bytes("A") + 4 * b
        }),
        backward_temporaries: Some(svd_backward),
        approximates: Some("backward: the gradients of U, S and Vh all defined (svdvals alone takes a shorter path); a real input, reduced matrices"),
    },
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
        op: "cholesky.default",
        read_from: "FunctionsManual.cpp: cholesky_backward",
        forward_scratch: None,
        backward_temporaries: Some(cholesky_backward),
        approximates: Some("backward: linalg_solve_triangular's own copies are not drawn"),
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
        op: "linalg_cholesky_ex.default",
        read_from: "FunctionsManual.cpp: cholesky_backward",
        forward_scratch: None,
        backward_temporaries: Some(cholesky_backward),
        approximates: Some("backward: linalg_solve_triangular's own copies are not drawn"),
    },
    Override {
        op: "linalg_householder_product.default",
        read_from: "FunctionsManual.cpp: householder_product_backward, apply_simple_transformation",
        // orgqr's `work` (`at::empty({lwork})`, sized by the library's workspace query): not
        // drawn.
        forward_scratch: None,
        backward_temporaries: Some(householder_product_backward),
        approximates: Some("forward: the LAPACK workspace (sized by the library's query) is not drawn; backward: grad mode off"),
    },
    Override {
        op: "linalg_inv_ex.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: linalg_inv_ex_out, linalg_solve_ex_out, _linalg_solve_ex_out; BatchLinearAlgebraKernel.cpp: lu_solve_kernel",
        // The identity in the result, then `at::linalg_solve_ex_out(result, info, A, result)`:
        // `LU = B.new_empty({0})` and `pivots` (int32), filled by the LU factorization, then
        // the solve in place (lu_solve_kernel's checks).
        forward_scratch: Some(|c| {
            let (b, n) = batch_and_n(c, "A");
            if b * n == 0 {
                return 0;
            }
            c.bytes("A") + 4 * b * n + lu_solve_checks(b * n, false)
        }),
        backward_temporaries: None,
        approximates: None,
    },
    Override {
        op: "linalg_lu.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: linalg_lu_out, lu_unpack_out; FunctionsManual.cpp: linalg_lu_backward",
        forward_scratch: Some(linalg_lu_forward),
        backward_temporaries: Some(linalg_lu_backward),
        approximates: Some("backward: the gradients of L and U both defined; linalg_solve_triangular's own copies are not drawn"),
    },
    Override {
        op: "linalg_lu_factor_ex.default",
        read_from: "FunctionsManual.cpp: lu_factor_ex_backward, linalg_lu_backward; BatchLinearAlgebra.cpp: lu_unpack_out",
        forward_scratch: None,
        backward_temporaries: Some(lu_factor_ex_backward),
        approximates: Some("backward: linalg_solve_triangular's own copies are not drawn"),
    },
    Override {
        op: "linalg_lu_solve.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: linalg_lu_solve_out, lu_unpack_out; BatchLinearAlgebraKernel.cpp: lu_solve_kernel; FunctionsManual.cpp: linalg_lu_solve_LU",
        // B copied into the result; LU used as is when F-contiguous (`borrow_else_clone`);
        // the kernel's pivot checks.
        forward_scratch: Some(|c| lu_solve_checks(c.numel("pivots"), c.out_numel(0) == 0)),
        backward_temporaries: Some(linalg_lu_solve_backward),
        approximates: Some("LU taken as F-contiguous (lu_factor's layout; another is cloned); linalg_solve_triangular's own copies are not drawn"),
    },
    Override {
        op: "linalg_qr.default",
        read_from: "FunctionsManual.cpp: linalg_qr_backward",
        // geqrf/orgqr's `work` (BatchLinearAlgebraKernel.cpp: `at::empty({lwork})`) is sized
        // by the LAPACK library's workspace query: not drawn.
        forward_scratch: None,
        backward_temporaries: Some(linalg_qr_backward),
        approximates: Some("forward: the LAPACK workspace (sized by the library's query) is not drawn; backward: the gradients of Q and R both defined, linalg_solve_triangular's own copies not drawn"),
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
        op: "lu_unpack.default",
        read_from: "aten/src/ATen/native/BatchLinearAlgebra.cpp: lu_unpack_out; FunctionsManual.cpp: lu_unpack_backward",
        // unpack_pivots: `perm = at::arange(m, kLong).expand(P.shape[:-1]).contiguous()` (the
        // arange, and for a batch its expanded copy, alive together); `pivots.contiguous()`
        // of contiguous pivots is themselves. L and U are written into the outputs.
        forward_scratch: Some(|c| {
            if c.flag("unpack_pivots") == Some(false) {
                return 0;
            }
            let (b, m, _) = batch_m_n(c, "LU_data");
            let batched = c.dims("LU_data").len() > 2;
            8 * m + if batched { 8 * b * m } else { 0 }
        }),
        backward_temporaries: Some(lu_unpack_backward),
        approximates: Some("backward: the gradients of L and U both defined"),
    },
    Override {
        op: "ormqr.default",
        read_from: "FunctionsManual.cpp: ormqr_backward, householder_product_backward, apply_simple_transformation",
        // ormqr's `work` (`at::empty({lwork})`, sized by the library's workspace query), in
        // the forward and in the backward's `at::ormqr`: not drawn.
        forward_scratch: None,
        backward_temporaries: Some(ormqr_backward),
        approximates: Some("the LAPACK workspace (sized by the library's query) is not drawn; backward: grad mode off"),
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
    Override {
        op: "triangular_solve.default",
        read_from: "FunctionsManual.cpp: triangular_solve_backward",
        forward_scratch: None,
        backward_temporaries: Some(triangular_solve_backward),
        approximates: None,
    },
];
