#!/usr/bin/env python3
"""Writes `src/ops/aten_table.rs`: torch's own facts about every ATen operator.

Usage (from the repository root; `.libtorch` is the pinned torch wheel, see
`scripts/setup-libtorch.sh`):

    PYTHONPATH=.libtorch python3 scripts/gen_aten_table.py --out src/ops/aten_table.rs

Without `--out` the table goes to stdout. A summary (counts per autograd kind, counted vs
opaque formulas, the most common opaque helpers) goes to stderr.

Sources, all inside the wheel and read with torchgen's own parsers:

- `torchgen/packaged/ATen/native/native_functions.yaml` (+ `tags.yaml`), parsed by
  `torchgen.gen.parse_native_yaml`: every registered overload (including the out= and
  functional variants torchgen generates, tagged `generated`), its schema and its dispatch
  (`has_composite_implicit_autograd_kernel`).
- `torchgen/packaged/autograd/derivatives.yaml`, parsed by
  `torchgen.packaged.autograd.load_derivatives.load_derivatives` and matched to overloads by
  `torchgen.api.autograd.match_differentiability_info`, exactly as torch's autograd codegen
  (`gen_variable_type`) does: an in-place overload without its own entry reuses its functional
  overload's entry. The one departure: an out= overload gets only an entry of its own (eager
  autograd refuses out= arguments that require grad, whatever torchgen matched).

Each gradient formula is then read by a small C++ expression evaluator (`Formula`) that counts
the tensors it makes. Helpers of `torch/csrc/autograd/FunctionsManual.cpp` it knows are in
`HELPERS`; a helper it does not know makes the formula `Temporaries::Opaque(<name>)`.

What the table's fields mean, where torchgen leaves a choice:

- `saved`: the whole tensors the generated backward node keeps (DifferentiabilityInfo's
  all_saved_inputs/all_saved_outputs), Inputs then Outputs, each by index. torchgen rewrites
  `self.sym_sizes()`, `self.options()`, `self.scalar_type()`, `zeros_like(self)` ... into saved
  non-tensors: those are left out. An in-place overload that reuses its functional entry and
  saves `self` saves a clone of `self` taken before the write (gen_variable_type's
  `original_self`): Input(k) of an in-place op is that clone. `InputIf(k, g)`: argument k,
  saved only when argument g requires grad (gen_variable_type's `guard_for`: a tensor that one
  argument's gradient alone reads is saved under `grad_fn->should_compute_output(edge)`; the
  `original_self` clone is taken under the same guard).
- `grads`: one per differentiable argument, in the order the generated backward node runs
  them (load_derivatives.py: `sorted(defn.keys())`, alphabetical by the entry's names); an entry line naming several
  arguments (`input, weight, bias: native_layer_norm_backward(...)`) gives each the same
  formula, its result one of the tuple's tensors and its temporaries those of the whole
  expression besides the tuple (so a simulator should count a shared formula once).
- Counting: every tensor-valued binary or unary operator and every call of an ATen operator
  or known helper that is not a view makes tensors; `temporaries` are those made besides the
  result (all of them when the result is `grad` or a view of it). `reshape`, `contiguous`,
  `to` and `clone` count as new (they may copy); `conj()` of a real tensor does not. A
  ternary's condition is settled for first-order training on a GPU where it can be
  (`CONDITION_ATOMS`), else the formula is Opaque("ternary").
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import re
import sys

TORCH_VERSION = "2.11.0"

# --------------------------------------------------------------------------------------------
# What the evaluator knows about C++ callees.
# --------------------------------------------------------------------------------------------

# Methods/functions that return a view of their first tensor operand (no new memory). Not
# `reshape` (copies when the input is not viewable), not `contiguous`/`to`/`clone`. Each
# view of the incoming gradient is one of three kinds, which decide whether autograd's
# AccumulateGrad may keep it as a leaf's `.grad` (accumulate_grad.h: it steals a gradient
# nobody else holds when `obeys_layout_contract(grad, variable)`, else clones it):
# "whole" (all of it, its strides permuted, sizes 1 added or dropped: the input's layout
# when the output's came from the input), "part" (a block of it, its strides as they are)
# and "expand" (stride 0 somewhere: never obeys the contract).
WHOLE_VIEWS = {
    "t", "transpose", "permute", "view", "unsqueeze", "squeeze", "alias",
    # The same views under other names.
    "view_as", "mT", "mH", "movedim", "swapaxes", "swapdims",
    # `at::real` of a real tensor is the tensor; of a complex one a view.
    "real", "imag", "view_as_real", "view_as_complex",
}
PART_VIEWS = {
    "narrow", "select", "slice", "diagonal", "as_strided", "unfold",
    # unbind/split are views (Tensor(a)[] returns).
    "unbind", "split", "split_with_sizes", "chunk",
}
EXPAND_VIEWS = {"expand", "expand_as"}
VIEWS = WHOLE_VIEWS | PART_VIEWS | EXPAND_VIEWS


def view_kind(name: str) -> str:
    return "whole" if name in WHOLE_VIEWS else "part" if name in PART_VIEWS else "expand"


# How a view of a view of the incoming gradient is classed: the least stealable wins.
# None is the gradient itself; "reshape" is `grad.reshape(..)`: a view when the gradient is
# contiguous, else a copy.
VIEW_ORDER = {None: 0, "whole": 1, "reshape": 2, "part": 3, "expand": 4}


def compose(a: str | None, b: str | None) -> str | None:
    return max(a, b, key=VIEW_ORDER.get)


# Methods that return their receiver unchanged for the real tensors training uses (`conj` of a
# real tensor is a no-op; `resolve_conj` of a non-conjugated one is the tensor itself).
PASSTHROUGH_METHODS = {"conj", "resolve_conj", "resolve_neg", "value"}

# Methods of a tensor that return something that is not a tensor.
SCALAR_METHODS = {
    "sym_sizes", "sym_size", "sizes", "size", "dim", "scalar_type", "options", "defined",
    "numel", "sym_numel", "dtype", "layout", "device", "is_complex", "sym_strides", "strides",
    "suggest_memory_format", "is_xpu", "is_cpu", "is_cuda", "has_value", "toDouble",
    "toFloat", "isComplex", "toComplexDouble", "item", "is_contiguous", "sym_blocksize",
    "_nested_tensor_size", "requires_grad", "is_sparse", "is_floating_point",
}

# Free functions whose arguments and result are not tensors (C++ math, c10 list utilities).
SCALAR_FUNCS = {
    "sqrt", "std::sqrt", "exp", "std::exp", "log", "std::log", "pow", "std::pow", "fmap",
    "reverse_list", "reverse_list_symint", "GradMode::is_enabled", "c10::SymInt",
    "std::vector", "std::tuple", "std::make_tuple", "Tensor", "at::OptionalArrayRef",
    "at::OptionalIntArrayRef", "at::IntArrayRef", "c10::SymIntArrayRef", "std::optional",
    "c10::optional", "::std::nullopt",
}

# Free functions whose result is not a tensor, whatever their arguments (torchgen replaces
# most of these by saved non-tensor values before the formula runs).
NON_TENSOR_FUNCS = {
    "TensorGeometry", "to_args_sizes", "to_args_sizes_symint", "to_args_scalartypes",
    "strides_or_error", "isComplexType", "at::isComplexType",
}

# Free functions that return one of their tensor arguments unchanged (no new memory):
# the argument's index.
PASSTHROUGH_FUNCS = {"std::move": 0, "std::optional": 0, "c10::optional": 0, "wrap_opt_if": 0}


@dataclasses.dataclass(frozen=True)
class Helper:
    """A `FunctionsManual.cpp` helper, on the path first-order training takes (real dtypes,
    defined grads, grad mode off during backward, tensors on the GPU).

    new: the tensors its body makes (its result included when that is one of them), not what
        its arguments make (the evaluator counts those); or a function of the argument values
        (`Val`s) where the body depends on which overload or literal it gets.
    result: "new" (a tensor it makes), or "arg0"/"arg1" (that argument itself or a view of
        it); or a function of the argument values giving one of those.
    outputs: the tensors it returns (a std::tuple of that many), 1 for a Tensor.
    note: what the body does, as read.
    view: for an "argK" result, the view of that argument it returns (`VIEW_ORDER`), None
        when it returns the argument itself.
    full: a "new" result has the shape of the gradient it is given (the op's output): an
        elementwise expression of `grad` (broadcast against the inputs), so an input broadcast
        to the output gets it at the output's shape and the engine sums it down. An "argK"
        result has its argument's shape.
    """

    new: object
    result: object = "new"
    outputs: int = 1
    note: str = ""
    view: str | None = None
    full: object = False

    def made(self, args) -> int:
        return self.new(args) if callable(self.new) else self.new

    def returns(self, args) -> str:
        return self.result(args) if callable(self.result) else self.result


# `maybe_multiply(t, s)` returns t itself when the Scalar s is 1 at run time (it compares the
# value). A formula that passes one of the op's Scalar arguments (`alpha`, `beta`, `value`) is
# read twice: as written (s not 1), and with the arguments named here taken as 1 (the reading
# the table gives for a call that passes 1 or leaves them at their schema default of 1).
UNIT = {"assume": set(), "seen": set()}


def is_one(v) -> bool:
    """A literal 1 (`maybe_multiply(t, 1)` returns t), or an argument taken as 1."""
    if v.name is not None:
        UNIT["seen"].add(v.name)
        if v.name in UNIT["assume"]:
            return True
    return v.literal is not None and re.fullmatch(r"1(\.0*)?[fFlL]?", v.literal) is not None


def alpha_new(k: int, base: int):
    """`base` tensors, and one more for `maybe_multiply(.., alpha)` unless argument k is 1."""
    return lambda args: base + (0 if len(args) > k and is_one(args[k]) else 1)


# The helpers whose bodies were read in torch/csrc/autograd/FunctionsManual.cpp. The copy
# read is pytorch/pytorch at commit 002ca6715ba1 (the one the code index holds; the v2.11.0
# tag itself, 70d99e998b49, is not stored there); every name below but `sum_to` (ATen's
# ExpandUtils.h) is declared in the 2.11.0 wheel's
# torch/include/torch/csrc/autograd/FunctionsManual.h, and none is an ATen operator. A
# helper declared in that header and absent here makes its formula Opaque(<name>); a call
# to an ATen operator (`at::` or bare, `_symint` spellings included) is one kernel: one new
# tensor per tensor it returns, nothing inside (its views excepted: VIEWS).
HELPERS: dict[str, Helper] = {
    "handle_r_to_c": Helper(0, "arg1", note="returns gradient_result (at::real of it, a view, for R->C)"),
    "maybe_multiply": Helper(
        lambda args: 0 if is_one(args[1]) else 1,
        lambda args: "arg0" if is_one(args[1]) else "new",
        full=lambda args: args[0].full,
        note="t * s; t itself when s is 1: a literal 1 is exact, any other alpha counts as a new tensor (conservative)"),
    "mul_tensor_backward": Helper(1, note="grad * other.conj(), handle_r_to_c", full=True),
    "div_tensor_self_backward": Helper(1, note="grad / other.conj(), handle_r_to_c (no rounding_mode)", full=True),
    "div_tensor_other_backward": Helper(4, note="-grad * ((self / other) / other).conj(): -, /, /, *", full=True),
    "pow_backward": Helper(3, note="grad * (exp * self.pow(exp - 1)).conj() for a real exponent != 0: pow, *, *", full=True),
    "pow_backward_self": Helper(7, note="at::where(exponent == 0.0, at::scalar_tensor(0.0), grad * (exponent * self.pow(exponent - 1)).conj()): ==, scalar_tensor, -, pow, *, *, where", full=True),
    "pow_backward_exponent": Helper(
        lambda args: 8 if args[1].tensor else 2,
        note="Tensor self: cond = logical_and(self == 0, exponent >= 0), grad * where(cond, scalar_tensor(0), (result * self.to(dtype).log()).conj()): ==, >=, and, scalar_tensor, log, *, where, *; Scalar base != 0: grad * (result * log(base)): *, *", full=True),
    "sum_backward": Helper(0, "arg0", view="expand", note="grad (unsqueezed when !keepdim) .expand_symint(sizes): a view of grad"),
    "nansum_backward": Helper(3, note="sum_backward(...) * self.isnan().logical_not(): isnan, logical_not, *"),
    "mean_backward": Helper(1, note="sum_backward(grad, ...) / n: a view of grad divided: one"),
    "restore_reduced_dims": Helper(0, "arg0", view="reshape", note="output.reshape_symint(target_shape) of a contiguous reduction output: a view"),
    "unsqueeze_multiple": Helper(0, "arg0", view="whole", note="unsqueezes: a view"),
    "unsqueeze_to": Helper(0, "arg0", view="whole", note="unsqueezes: a view"),
    "permute_backwards": Helper(0, "arg0", view="whole", note="grad.permute(inverse dims): a view"),
    "scale_grad_by_count": Helper(3, note="(grad / mask.sum(dims, true)) * mask: sum, /, *"),
    "prod_backward": Helper(
        lambda args: 4 if len(args) <= 3 else 5,
        note="no zero in input: (input == 0).nonzero() then grad * (result / input).conj(): ==, nonzero, /, *; the dim overload: ==, sum, sum, /, *"),
    "cumsum_backward": Helper(3, note="grad.flip(dim).cumsum(dim).flip(dim)"),
    "logsumexp_backward": Helper(3, note="grad * (self - result).exp().conj() (unsqueezes are views): -, exp, *"),
    "unbind_backward": Helper(1, note="at::stack of the grads (undefined ones: expanded 0-dim zeros)"),
    "cat_tensors_backward": Helper(0, "arg0", view="part", note="grad.narrow_symint(dim, ...) per input: views of grad"),
    "stack_tensors_backward": Helper(0, "arg0", view="part", note="grad.select(dim, i) per input: views of grad"),
    "block_diag_backward": Helper(0, "arg0", view="part", note="grad.slice(..).slice(..) per input: views of grad"),
    "clamp_backward": Helper(4, note="min and max given: zero = scalar_tensor(0), where((self >= min).logical_and_(self <= max), grad, zero): scalar_tensor, >=, <=, where (one bound: 3)", full=True),
    "clamp_backward_min_max": Helper(7, outputs=2, note="zero, then per output: <, <, logical_and_, where / >, <, logical_or_, where", full=True),
    "mm_mat1_backward": Helper(alpha_new(5, 1), note="maybe_multiply(grad.mm(mat2.t().conj()), alpha.conj()): mm, and * unless alpha is a literal 1"),
    "mm_mat2_backward": Helper(alpha_new(5, 1), note="maybe_multiply(mat1.t().conj().mm(grad), alpha.conj()): mm, and * unless alpha is a literal 1"),
    "_grouped_mm_mat1_backward": Helper(alpha_new(6, 1), note="maybe_multiply(at::_grouped_mm(...), alpha.conj())"),
    "_grouped_mm_mat2_backward": Helper(alpha_new(6, 1), note="maybe_multiply(at::_grouped_mm(...), alpha.conj())"),
    "repeat_backward": Helper(1, note="grad.reshape_symint(grad_size) (a view of the contiguous grad) .sum(sum_dims); one more sum per leading repeat dimension"),
    "_fused_dropout_backward": Helper(1, note="grad mode off: at::_masked_scale(grad, mask, 1 / p1m)", full=True),
    "infinitely_differentiable_native_dropout_backward": Helper(3, note="grad * (mask.type_as(grad) * scale): type_as, *, *", full=True),
    "evenly_distribute_backward": Helper(6, note="CUDA path: input.isnan(), value.isnan(), logical_and_, (input == value).logical_or_(..), mask * (grad / mask.sum()): isnan, isnan, ==, sum, /, *"),
    "var_backward": Helper(4, note="(2 / (n - correction)) * grad * (self - self.mean(dim, true)): *, mean, -, *"),
    "std_backward": Helper(7, note="(grad / (result * 2)).masked_fill_(result == 0, 0): *, /, ==; then var_backward's 4"),
    "var_mean_backward": Helper(6, note="var_backward (4) + mean_backward (1) + add"),
    "std_mean_backward": Helper(9, note="std_backward (7) + mean_backward (1) + add"),
    "split_with_sizes_backward": Helper(1, note="at::cat of the grads (undefined ones zero-filled)"),
    "split_backward": Helper(1, note="split_with_sizes_backward: at::cat of the grads"),
    "max_pool_double_backward": Helper(1, note="grad.contiguous(fmt).view(..).gather(-1, indices).view(..): gather (contiguous grad)"),
    "infinitely_differentiable_silu_backward": Helper(6, note="sigmoid; grad * sigmoid * (1.0 + input * (1.0 - sigmoid))", full=True),
    "infinitely_differentiable_mish_backward": Helper(10, note="sigmoid, exp, log1p, tanh; grad * (t + input * sigmoid * (1.0 - t * t))", full=True),
    "infinitely_differentiable_logit_backward": Helper(8, note="where(logical_and(self >= lo, self <= hi), grad / (self * (1.0 - self)), zeros({}))", full=True),
    "binary_cross_entropy_target_backward": Helper(1, note="at::logit(self).neg_(), then mul_/div_ in place"),
    "binary_cross_entropy_with_logits_backward": Helper(1, note="no pos_weight, grad mode off: input.sigmoid().sub_(target), then mul_ in place (pos_weight: 3)"),
    "binary_cross_entropy_with_logits_target_backward": Helper(2, note="no pos_weight: -self * grad_output, then mul_/div_ in place"),
    "log_sigmoid_double_backward": Helper(4, note="z = input.sigmoid(); grad * (z - 1) * z"),
    "softmax_double_backward": Helper(9, note="grad_output * grad - (output * grad_output).sum(dim, true) * grad - grad_output * (output * grad).sum(dim, true)"),
    "atan2_backward": Helper(9, outputs=2, note="recip = (self * self + other * other).reciprocal(); grad * other * recip, grad * -self * recip", full=True),
    "_euclidean_dist_backward": Helper(10, outputs=2, note="ratio = grad / res; masked_fill_(res == 0); x1 * ratio.sum(-1, true) - ratio.matmul(x2), x2 * ratio.sum(-2).unsqueeze(-1) - ratio.mT().matmul(x1)"),
    "sgn_backward": Helper(1, note="real x: at::_efficientzerotensor (a zero tensor with no storage)"),
    "masked_fill_backward": Helper(2, note="grad.masked_select(mask).sum()"),
    "copysign_tensor_self_backward": Helper(3, note="ratio = result / self; ratio.masked_fill_(self == 0, 0); grad * ratio", full=True),
    "angle_backward": Helper(1, note="real self: at::zeros_like(self)"),
    "mvlgamma_backward": Helper(4, note="arange, args.add(self.unsqueeze(-1)), digamma_ in place, sum, *"),
    "log1p_backward": Helper(2, note="grad / (self + 1).conj(): +, /", full=True),
    "sinc_backward": Helper(12, note="self * M_PI, self * self * M_PI, cos, *, sin, -, /, grad *, == 0.0, scalar_tensor, where", full=True),
    "constant_pad_nd_backward": Helper(1, note="at::constant_pad_nd(grad, negated pad)"),
    "index_backward": Helper(0, "arg0", note="at::_index_put_impl_ into its first argument (zeros the formula makes), in place"),
    "_cudnn_ctc_loss_backward": Helper(1, note="zero_infinity false: raw_grad * grad_out.unsqueeze(0).unsqueeze(2)"),
    "_cudnn_convolution_backward": Helper(2, outputs=2, note="at::convolution_backward without the bias gradient"),
    "_to_copy_backward": Helper(1, note="grad.to(self_options, copy=false): a conversion back (the tensor itself when nothing differs)"),
    "to_sparse_backward": Helper(1, note="strided self: grad.to_dense()"),
    "take_backward": Helper(1, note="at::zeros_like(self).put_(indices, grad, true)"),
    "slice_backward_wrapper": Helper(1, note="at::slice_backward_symint: zeros with grad copied into the slice"),
    "norm_backward": Helper(3, note="p = 2 (the default): grad * (self / norm).masked_fill_(norm == 0, 0) (unsqueezes are views): /, ==, *; other p make more"),
    "linalg_vector_norm_backward": Helper(3, note="norm_backward: p = 2 (the default ord): /, ==, *"),
    "deg2rad_backward": Helper(1, note="at::mul(grad, Scalar(M_PI_180))", full=True),
    "rad2deg_backward": Helper(1, note="at::mul(grad, Scalar(M_180_PI))", full=True),
    "mse_loss_double_backward": Helper(1, note="2 * grad, then /= in place"),
    "smooth_l1_loss_double_backward": Helper(6, note="(input - target).abs(), grad * (d < beta).type_as(grad) / beta: -, abs, <, type_as, *, /"),
    "huber_loss_double_backward": Helper(4, note="(input - target).abs(), grad * (d < delta): -, abs, <, *"),
    "sum_to": Helper(1, note="at::sum_to: a sum over the broadcast dimensions (none: the tensor itself)"),
}

# --------------------------------------------------------------------------------------------
# Tokeniser and evaluator of one formula.
# --------------------------------------------------------------------------------------------

TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|/\*.*?\*/)
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?[fFlLuU]*)
  | (?P<str>"(?:[^"\\]|\\.)*")
  | (?P<ident>(?:::)?[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)
  | (?P<op>->|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:.,()\[\]{}&|~=;])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenise(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            raise SyntaxError(f"cannot tokenise {text[pos:pos + 20]!r} in {text!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append(m.group(0))
    return out


@dataclasses.dataclass(frozen=True)
class Val:
    """A sub-expression's value.

    kind: "scalar" (no tensor), "grad" (the incoming gradient or a view of it), "saved" (an
        input/output tensor of the forward, or a view of one), "new" (a tensor an operation
        made, or a view of one), "tuple" (a std::tuple of `outputs` new tensors).
    new: tensors made while evaluating it (operands included).
    opaque: the first callee whose temporaries are unknown, if any.
    outputs: the tensors of a "tuple".
    view: for "grad", None when it is the incoming gradient itself, else the kind of view.
    full: the tensor has the incoming gradient's shape: `grad`, and an elementwise
        expression of a tensor that has (tensor operators, ATen operators tagged `pointwise`
        in native_functions.yaml, helpers marked `full`).
    """

    kind: str
    new: int = 0
    opaque: str | None = None
    outputs: int = 1
    literal: str | None = None  # the text of a number literal
    view: str | None = None  # for "grad": which view of the incoming gradient (VIEW_ORDER)
    full: bool = False  # has the incoming gradient's shape (the op's output's)
    name: str | None = None  # a scalar that is one of the op's arguments (`alpha.conj()`)

    @property
    def tensor(self) -> bool:
        return self.kind != "scalar"


def merge_opaque(vals) -> str | None:
    for v in vals:
        if v.opaque:
            return v.opaque
    return None


# What a ternary's condition is on the path first-order training takes on a GPU: the
# formula runs because the (first) gradient is defined; the gradients of the other outputs
# (a norm's mean and rstd) are not; backward runs without grad mode (no create_graph) and
# without retain_graph; tensors are real and on CUDA. Any other condition leaves the
# formula Opaque("ternary") unless both branches make the same.
CONDITION_ATOMS = [
    (r"grad\.defined\(\)|grads\[0\]\.defined\(\)", True),
    (r"grads\[[1-9]\d*\]\.defined\(\)", False),
    (r"(at::)?GradMode::is_enabled\(\)", False),
    (r"retain_variables", False),
    (r"\w+(\[\w+\])?\.(is_complex|isComplex)\(\)", False),
    (r"\w+(\[\w+\])?\.device\(\)\.(is_xpu|is_cpu|is_mps)\(\)", False),
]


def truth(cond: str):
    """True/False when `cond` (a ternary's condition, tokens joined) is known on that path."""
    cond = cond.strip()
    while cond.startswith("(") and cond.endswith(")") and depth_ok(cond[1:-1]):
        cond = cond[1:-1]
    for op, combine in (("||", any), ("&&", all)):
        parts = split_top(cond, op)
        if len(parts) > 1:
            vals = [truth(p) for p in parts]
            if op == "||" and True in vals or op == "&&" and False in vals:
                return op == "||"
            return combine(vals) if None not in vals else None
    if cond.startswith("!"):
        v = truth(cond[1:])
        return None if v is None else not v
    for pattern, value in CONDITION_ATOMS:
        if re.fullmatch(pattern, cond):
            return value
    return None


def depth_ok(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def split_top(text: str, op: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith(op, i):
            parts.append(text[start:i])
            start = i + len(op)
            i += len(op)
            continue
        i += 1
    parts.append(text[start:])
    return parts


class Formula:
    """Recursive descent over one C++ expression, evaluating what it allocates."""

    def __init__(self, text: str, tensor_names: set[str], grad_names: set[str], aten):
        self.text = text
        self.toks = tokenise(text)
        self.i = 0
        self.tensor_names = tensor_names
        self.grad_names = grad_names
        self.aten = aten  # AtenIndex

    # -- token helpers
    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise SyntaxError(f"expected {want!r}, got {tok!r} at token {self.i} of {self.text!r}")
        self.i += 1
        return tok

    def skip_balanced(self, open_: str, close: str) -> list[str]:
        """Skips from an `open_` token to its matching `close`; returns the tokens inside."""
        self.take(open_)
        depth, inside = 1, []
        while True:
            tok = self.take()
            if tok == open_:
                depth += 1
            elif tok == close:
                depth -= 1
                if depth == 0:
                    return inside
            inside.append(tok)

    def parse(self) -> Val:
        v = self.expr()
        if self.peek() is not None:
            raise SyntaxError(f"trailing {self.toks[self.i:]} in {self.text!r}")
        return v

    # -- grammar
    def expr(self) -> Val:
        start = self.i
        cond = self.logical_or()
        if self.peek() != "?":
            return cond
        cond_text = "".join(self.toks[start:self.i])
        self.take("?")
        then = self.expr()
        self.take(":")
        other = self.expr()
        known = truth(cond_text)
        if known is True:
            return then
        if known is False:
            return other
        if (then.kind, then.new, then.outputs, then.opaque) == (other.kind, other.new, other.outputs, other.opaque):
            return then  # either branch makes the same (`cond ? 1 : 1.0 / (1.0 - p)`)
        return Val(then.kind if then.kind == other.kind else "new", opaque="ternary")

    def binary_level(self, ops: set[str], sub) -> Val:
        left = sub()
        while self.peek() in ops:
            self.take()
            right = sub()
            left = self.binop(left, right)
        return left

    def binop(self, left: Val, right: Val, logical: bool = False) -> Val:
        new = left.new + right.new
        opaque = merge_opaque([left, right])
        if not logical and (left.tensor or right.tensor):
            return Val("new", new + 1, opaque, full=left.full or right.full)
        return Val("scalar", new, opaque)

    def logical_or(self) -> Val:
        left = self.logical_and()
        while self.peek() == "||":
            self.take()
            left = self.binop(left, self.logical_and(), logical=True)
        return left

    def logical_and(self) -> Val:
        left = self.bit_or()
        while self.peek() == "&&":
            self.take()
            left = self.binop(left, self.bit_or(), logical=True)
        return left

    def bit_or(self) -> Val:
        return self.binary_level({"|"}, self.bit_and)

    def bit_and(self) -> Val:
        return self.binary_level({"&"}, self.equality)

    def equality(self) -> Val:
        return self.binary_level({"==", "!="}, self.relational)

    def relational(self) -> Val:
        return self.binary_level({"<", ">", "<=", ">="}, self.additive)

    def additive(self) -> Val:
        return self.binary_level({"+", "-"}, self.multiplicative)

    def multiplicative(self) -> Val:
        return self.binary_level({"*", "/", "%"}, self.unary)

    def unary(self) -> Val:
        tok = self.peek()
        if tok in ("-", "+", "!", "~"):
            self.take()
            v = self.unary()
            if tok == "-" and v.tensor:
                return Val("new", v.new + 1, v.opaque, full=v.full)
            if tok == "+" or not v.tensor:
                return v if tok == "+" else Val("scalar", v.new, v.opaque)
            return Val("new", v.new + 1, v.opaque, full=v.full)
        return self.postfix()

    def args(self) -> list[Val]:
        self.take("(")
        out = []
        if self.peek() == ")":
            self.take(")")
            return out
        while True:
            out.append(self.expr())
            if self.peek() == ",":
                self.take(",")
                continue
            self.take(")")
            return out

    def postfix(self) -> Val:
        v = self.primary()
        while True:
            tok = self.peek()
            if tok in (".", "->"):
                self.take()
                name = self.take()
                if self.peek() == "(":
                    v = self.method(v, name, self.args())
                else:
                    v = Val("scalar", v.new, v.opaque)  # a data member: not a tensor
            elif tok == "[":
                self.take("[")
                idx = self.expr()
                self.take("]")
                # grads[i], self[i] (a tensor list's element), grad_input_mask[i] (a bool).
                v = dataclasses.replace(v, new=v.new + idx.new, opaque=merge_opaque([v, idx]))
            else:
                return v

    def primary(self) -> Val:
        tok = self.peek()
        if tok is None:
            raise SyntaxError(f"unexpected end of {self.text!r}")
        if tok == "(":
            self.take("(")
            v = self.expr()
            self.take(")")
            return v
        if tok == "{":
            inside = self.skip_balanced("{", "}")
            sub = Formula(" ".join(inside) or "0", self.tensor_names, self.grad_names, self.aten)
            vals = sub.comma_list() if inside else []
            if any(v.tensor for v in vals):
                return Val("new", sum(v.new for v in vals), "braced list")
            return Val("scalar", sum(v.new for v in vals), merge_opaque(vals))
        if tok == "[":  # a lambda: [captures](params){ body }
            self.skip_balanced("[", "]")
            self.skip_balanced("(", ")")
            self.skip_balanced("{", "}")
            return Val("scalar")
        self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return Val("scalar", literal=tok)
        if tok[0] == '"':
            return Val("scalar")
        name = tok
        template = None
        if self.peek() == "<" and (name.startswith(("std::", "c10::", "::std::")) or name in (
                "at::OptionalArrayRef", "static_cast")):
            template = self.skip_balanced("<", ">")
        if self.peek() == "(":
            return self.call(name, template, self.args())
        if name in self.grad_names:
            return Val("grad", full=True)
        if name in self.tensor_names:
            return Val("saved")
        return Val("scalar", name=name)

    def comma_list(self) -> list[Val]:
        out = [self.expr()]
        while self.peek() == ",":
            self.take(",")
            out.append(self.expr())
        if self.peek() is not None:
            raise SyntaxError(f"trailing tokens in braced list of {self.text!r}")
        return out

    # -- calls
    def method(self, recv: Val, name: str, args: list[Val]) -> Val:
        new = recv.new + sum(a.new for a in args)
        opaque = merge_opaque([recv, *args])
        if not recv.tensor:
            # alpha.conj(), other.toDouble(): conj of a real Scalar is the Scalar
            return Val("scalar", new, opaque, name=recv.name if name == "conj" else None)
        base = name[: -len("_symint")] if name.endswith("_symint") else name
        if base in SCALAR_METHODS:
            return Val("scalar", new, opaque)
        if base in PASSTHROUGH_METHODS:
            return dataclasses.replace(recv, new=new, opaque=opaque)
        if base in VIEWS:
            view = compose(recv.view, view_kind(base)) if recv.kind == "grad" else None
            return Val(recv.kind, new, opaque, recv.outputs, view=view)
        if base == "reshape" and recv.kind == "grad":
            return Val("grad", new, opaque, view=compose(recv.view, "reshape"))
        full = self.aten.is_pointwise(base) and (recv.full or any(a.full for a in args))
        if base.endswith("_") and self.aten.is_op(base):
            # in place on the receiver
            return Val(recv.kind, new, opaque, view=recv.view, full=recv.full)
        if self.aten.is_op(base):
            n = self.aten.tensor_returns(base)
            return Val("new" if n == 1 else "tuple", new + n, opaque, n, full=full)
        return Val("new", new + 1, opaque or base)

    def call(self, name: str, template: list[str] | None, args: list[Val]) -> Val:
        new = sum(a.new for a in args)
        opaque = merge_opaque(args)
        if name == "std::get":
            # One element of a tuple: the others die with the expression (already counted).
            return Val("new", new, opaque)
        if name in PASSTHROUGH_FUNCS and args:
            a = args[PASSTHROUGH_FUNCS[name]]
            return dataclasses.replace(a, new=new, opaque=opaque, literal=None)
        bare = name
        for prefix in ("::at::", "at::", "::"):
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
                break
        base = bare[: -len("_symint")] if bare.endswith("_symint") else bare
        if name in NON_TENSOR_FUNCS or base in NON_TENSOR_FUNCS:
            return Val("scalar", new, opaque)
        if name in SCALAR_FUNCS and not any(a.tensor for a in args):
            return Val("scalar", new, opaque)
        if base in HELPERS:
            h = HELPERS[base]
            made, result = h.made(args), h.returns(args)
            if result.startswith("arg"):
                a = args[int(result[3:])]
                view = compose(a.view, h.view) if a.kind == "grad" else None
                full = a.full and h.view is None
                return Val(a.kind, new + made, opaque, a.outputs, view=view, full=full)
            kind = "new" if h.outputs == 1 else "tuple"
            full = h.full(args) if callable(h.full) else h.full
            return Val(kind, new + made, opaque, h.outputs, full=full)
        if base == "not_implemented":
            return Val("new", new, opaque or "not_implemented")
        if base in self.aten.manual and not name.startswith("at::"):
            return Val("new", new + 1, opaque or base)  # a FunctionsManual.cpp helper
        if self.aten.is_op(base):
            if base in VIEWS:
                if not args:
                    return Val("scalar")
                a = args[0]
                view = compose(a.view, view_kind(base)) if a.kind == "grad" else None
                return Val(a.kind, new, opaque, a.outputs, view=view)
            if base == "reshape" and args and args[0].kind == "grad":
                return Val("grad", new, opaque, view=compose(args[0].view, "reshape"))
            if not any(a.tensor for a in args) and not self.aten.is_factory(base):
                return Val("scalar", new, opaque)  # sqrt(M_PI): the C math function
            n = self.aten.tensor_returns(base)
            if base.endswith("_") and args and args[0].tensor:
                return Val(args[0].kind, new, opaque, view=args[0].view, full=args[0].full)
            full = self.aten.is_pointwise(base) and any(a.full for a in args)
            return Val("new" if n == 1 else "tuple", new + n, opaque, n, full=full)
        if not any(a.tensor for a in args) and name in SCALAR_FUNCS:
            return Val("scalar", new, opaque)
        return Val("new", new + 1, opaque or base)


class AtenIndex:
    """What the evaluator needs of native_functions.yaml and FunctionsManual.h."""

    def __init__(self, fns, manual_names: set[str]):
        returns = collections.defaultdict(list)
        has_tensor_arg = collections.defaultdict(bool)
        from torchgen.model import SchemaKind

        for f in fns:
            base = str(f.func.name.name)
            n = sum(1 for r in f.func.returns if r.type.is_tensor_like())
            if f.func.kind() != SchemaKind.out:
                returns[base].append(n)
            else:
                returns.setdefault(base, [])
            if any(a.type.is_tensor_like() for a in f.func.arguments.flat_non_out):
                has_tensor_arg[base] = True
        self.returns = returns
        self.has_tensor_arg = has_tensor_arg
        # Elementwise operators (the `pointwise` tag of native_functions.yaml), by base name.
        self.pointwise = {str(f.func.name.name) for f in fns if "pointwise" in f.tags}
        self.manual = manual_names - set(HELPERS)

    def is_op(self, name: str) -> bool:
        return name in self.returns

    def is_pointwise(self, name: str) -> bool:
        return name in self.pointwise

    def is_factory(self, name: str) -> bool:
        return not self.has_tensor_arg[name]

    def tensor_returns(self, name: str) -> int:
        counts = collections.Counter(self.returns[name] or [1])
        return max(1, min(counts, key=lambda n: (-counts[n], n)))


@dataclasses.dataclass(frozen=True)
class Grad:
    input: int
    result: str  # "New" | "Grad" | "View" | "Part" | "Expand" | "Reshape"
    temporaries: tuple  # ("Counted", n) | ("Opaque", name)
    formula: str
    full: bool  # a New result has the output's shape (an elementwise expression of grad)
    unit: tuple | None = None  # (arg names, (result, full, temps)) when those are all 1


GRAD_RESULTS = {None: "Grad", "whole": "View", "part": "Part", "expand": "Expand", "reshape": "Reshape"}


def analyse_unit(formula: str, n_vars: int, tensor_names, grad_names, aten, one_names):
    """The formula's reading as written, and, when it passes any of `one_names` (Scalar
    arguments whose schema default is 1) to `maybe_multiply`, its reading with those taken as
    1: (reading, (names, reading) or None)."""
    UNIT["assume"], UNIT["seen"] = set(), set()
    plain = analyse(formula, n_vars, tensor_names, grad_names, aten)
    names = sorted(UNIT["seen"] & one_names)
    if not names:
        return plain, None
    UNIT["assume"], UNIT["seen"] = set(names), set()
    unit = analyse(formula, n_vars, tensor_names, grad_names, aten)
    UNIT["assume"] = set()
    return plain, ((tuple(names), unit) if unit != plain else None)


def analyse(formula: str, n_vars: int, tensor_names, grad_names, aten) -> tuple[str, bool, tuple]:
    v = Formula(formula, tensor_names, grad_names, aten).parse()
    full = v.full and v.kind in ("new", "tuple")
    if v.kind == "grad":
        result, made = GRAD_RESULTS[v.view], 0
    elif v.kind == "tuple":
        result, made = "New", min(v.outputs, n_vars)
    elif v.kind == "new":
        result, made = "New", 1
    else:  # a saved tensor or a scalar: new memory nowhere, every tensor made is a temporary
        result, made = "New", 0
    if v.opaque:
        return result, full, ("Opaque", v.opaque)
    temps = v.new - made
    if temps < 0:
        raise AssertionError(f"negative temporaries for {formula!r}: {v}")
    return result, full, ("Counted", temps)


# --------------------------------------------------------------------------------------------
# The table.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Op:
    name: str
    args: list  # (name, ty, kwarg_only, has_default)
    returns: list  # (list, tensor, alias)
    composite: bool
    autograd: tuple  # ("Formulas", saved, grads, outs) | ("NotImplemented",) | ...


def arg_type(t) -> str:
    from torchgen.model import BaseTy, BaseType, ListType, OptionalType

    base_map = {
        BaseTy.Tensor: "Tensor",
        BaseTy.int: "Int",
        BaseTy.SymInt: "Int",
        BaseTy.float: "Float",
        BaseTy.bool: "Bool",
        BaseTy.SymBool: "Bool",
        BaseTy.str: "Str",
        BaseTy.Scalar: "Scalar",
        BaseTy.ScalarType: "ScalarType",
    }
    if isinstance(t, BaseType):
        return base_map.get(t.name, "Other")
    if isinstance(t, OptionalType):
        e = t.elem
        if isinstance(e, BaseType) and e.name == BaseTy.Tensor:
            return "OptionalTensor"
        return arg_type(e)  # int? -> Int, int[]? -> IntList, Tensor[]? -> TensorList
    if isinstance(t, ListType):
        e = t.elem
        if isinstance(e, BaseType) and e.name == BaseTy.Tensor:
            return "TensorList"
        if isinstance(e, OptionalType) and isinstance(e.elem, BaseType) and e.elem.name == BaseTy.Tensor:
            return "OptionalTensorList"
        if isinstance(e, BaseType) and e.name in (BaseTy.int, BaseTy.SymInt):
            return "IntList"
        return "Other"
    raise TypeError(f"unknown torchgen type {t!r}")


def return_alias(r, args) -> tuple:
    if r.annotation is None:
        return ("None",)
    for k, a in enumerate(args):
        if a.annotation is not None and a.annotation.alias_set == r.annotation.alias_set:
            return ("InPlace", k) if r.annotation.is_write else ("View", k)
    raise AssertionError(f"return annotation {r.annotation} matches no argument")


def is_not_implemented(formula: str) -> bool:
    return re.match(r"\s*not_implemented(_list)?\(", formula) is not None


def build(torchgen_dir: str):
    from torchgen.api import cpp
    from torchgen.api.autograd import match_differentiability_info
    from torchgen.gen import parse_native_yaml
    from torchgen.model import SchemaKind
    from torchgen.packaged.autograd.load_derivatives import load_derivatives

    native = os.path.join(torchgen_dir, "packaged", "ATen", "native")
    native_yaml = os.path.join(native, "native_functions.yaml")
    tags_yaml = os.path.join(native, "tags.yaml")
    deriv_yaml = os.path.join(torchgen_dir, "packaged", "autograd", "derivatives.yaml")

    fns = parse_native_yaml(native_yaml, tags_yaml).native_functions
    infos, _ = load_derivatives(deriv_yaml, native_yaml, tags_yaml)
    exact = set(infos)  # before match_differentiability_info adds generated foreach infos
    matched = match_differentiability_info(fns, infos)

    manual_h = os.path.join(
        os.path.dirname(torchgen_dir), "torch", "include", "torch", "csrc", "autograd",
        "FunctionsManual.h",
    )
    manual_names = set()
    if os.path.exists(manual_h):
        with open(manual_h) as fh:
            manual_names = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", fh.read()))
    aten = AtenIndex(fns, manual_names)

    analysed: dict = {}
    ops = []
    for m in matched:
        f = m.func
        schema = f.func
        name = f"{schema.name.name}.{schema.name.overload_name or 'default'}"
        flat = list(schema.arguments.flat_all)
        kwarg = set(id(a) for a in schema.arguments.flat_kwarg_only) | set(
            id(a) for a in schema.arguments.out
        )
        args = [(a.name, arg_type(a.type), id(a) in kwarg, a.default is not None) for a in flat]
        arg_index = {a.name: k for k, a in enumerate(flat)}
        returns = []
        for r in schema.returns:
            is_list = r.type.is_list_like() is not None and r.type.is_tensor_like()
            returns.append((bool(is_list), r.type.is_tensor_like(), return_alias(r, flat)))

        info = (m.info or {}).get("Default")
        if info is not None and schema.kind() == SchemaKind.out and schema not in exact:
            info = None  # eager autograd refuses out= arguments that require grad
        ops.append(Op(name, args, returns, f.has_composite_implicit_autograd_kernel,
                      autograd_of(f, info, flat, arg_index, analysed, aten, cpp)))
    ops.sort(key=lambda o: o.name)
    for a, b in zip(ops, ops[1:]):
        if a.name >= b.name:
            raise AssertionError(f"names not unique: {a.name} {b.name}")
    return ops


def saved_guard(info, canon, arg_index):
    """gen_variable_type.py's `guard_for`, read as an argument: a saved input that only one
    argument's gradient reads is saved under `if (grad_fn->should_compute_output(edge))`, so only
    when that argument requires grad (`mul(x, mask)` with a constant mask keeps no `x`). Returns
    a function of a SavedAttribute giving that argument's index, or None where torchgen saves
    it unguarded (one differentiable argument, a tensor-list argument, a `*_backward` entry, a
    non-Tensor type, a tensor read by several formulas, a multi-argument formula without a
    single `wrap_opt_if(x, grad_input_mask[k])`)."""
    from torchgen.api.types import BaseCType, tensorT
    from torchgen.model import ListType

    names = {n for d in info.derivatives for n in d.var_names}
    with_derivatives = [a for a in canon.func.arguments.flat_non_out if a.name in names]
    tensor_list = any(isinstance(a.type, ListType) and a.type.is_tensor_like() for a in with_derivatives)

    def guard(arg):
        if tensor_list or "backward" in info.name or len(with_derivatives) <= 1:
            return None
        if arg.nctype.type != BaseCType(tensorT):
            return None
        used_in = [d for d in info.derivatives if arg in d.saved_inputs]
        if len(used_in) != 1:
            return None
        d = used_in[0]
        if len(d.var_names) == 1:
            var = d.var_names[0]
        else:
            m = re.search(rf"wrap_opt_if\({re.escape(arg.nctype.name)},\s*grad_input_mask\[(\d+)\]\s*\)", d.formula)
            if m is None:
                return None
            var = with_derivatives[int(m.group(1))].name
        return arg_index.get(var)

    return guard


def autograd_of(f, info, flat, arg_index, analysed, aten, cpp) -> tuple:
    from torchgen.model import SchemaKind

    if info is None:
        # torchgen's DONT_REQUIRE_DERIVATIVE (new_ones, zeros_like, argmax, logical_and...):
        # no grad_fn is made and the outputs never require grad.
        from torchgen.packaged.autograd.gen_variable_type import DONT_REQUIRE_DERIVATIVE

        base = f.func.name.name.base
        if base in DONT_REQUIRE_DERIVATIVE or str(f.func.name.name) in DONT_REQUIRE_DERIVATIVE:
            return ("NonDifferentiable",)
        return ("Missing",)
    nret = len(f.func.returns)
    od = info.output_differentiability
    if od is not None:
        outs = [bool(od[k]) if k < len(od) else False for k in range(nret)]
    else:
        outs = [True] * nret
    if od is not None and not any(od):
        return ("NonDifferentiable",)
    real = [d for d in info.derivatives if not is_not_implemented(d.original_formula)]
    if not info.derivatives:
        return ("NonDifferentiable",)  # every formula is non_differentiable
    if not real:
        return ("NotImplemented",)

    # Names as the formulas write them: the canonical function's arguments and returns. An
    # in-place variant shares its functional entry's names; an in-place foreach op
    # (`_foreach_clamp_max_.List`) reuses its reference op's entry (`clamp_max.Tensor`), whose
    # arguments are matched by position and whose `result` is the mutated `self`.
    canon = info.func
    ret_names = [n if n != "self" else "result" for n in cpp.return_names(canon)]
    canon_args = list(canon.func.arguments.flat_all)
    if canon is not f and [a.name for a in canon_args] != [a.name for a in flat]:
        pairs = zip(canon.func.arguments.flat_non_out, f.func.arguments.flat_non_out)
        arg_index = {ca.name: arg_index[fa.name] for ca, fa in pairs}
    ret_index = {n: k for k, n in enumerate(ret_names)}
    mutated_self = not f.func.returns and f.func.kind() == SchemaKind.inplace
    tensor_names = {a.name for a in canon_args if a.type.is_tensor_like()}
    tensor_names |= {n for n, r in zip(ret_names, canon.func.returns) if r.type.is_tensor_like()}
    grad_names = {"grad", "grads"} | set(info.available_named_gradients)

    # Saved tensors. torchgen saves an argument whole, or replaces an expression of it that
    # is not a tensor (self.sym_sizes(), self.options(), self.scalar_type(), self.dim()...)
    # by a saved non-tensor (self_sym_sizes...); only the whole tensors are kept here. A
    # formula's `self.conj()` or `result.pow(3)` keeps the whole tensor saved (Input/Output of
    # it), the expression being evaluated in backward.
    saved = []
    guard = saved_guard(info, canon, arg_index)
    for v in list(info.all_saved_inputs) + list(info.all_saved_outputs):
        n = v.nctype.name
        n = getattr(n, "name", n)
        if v.expr != n:
            continue
        if n in arg_index and flat[arg_index[n]].type.is_tensor_like():
            g = guard(v) if v in info.all_saved_inputs else None
            s = ("Input", arg_index[n]) if g is None else ("InputIf", arg_index[n], g)
        elif n in ret_index and mutated_self:
            s = ("Input", 0)
        elif n in ret_index and f.func.returns[ret_index[n]].type.is_tensor_like():
            s = ("Output", ret_index[n])
        else:
            continue  # a non-tensor (dim, alpha) or a packed TensorOptions
        if s not in saved:
            saved.append(s)

    saved.sort()  # torchgen builds some entries' saved lists from sets: fix an order
    grads = []
    for d in real:
        key = (id(info), d.original_formula, d.var_names)
        if key not in analysed:
            one_names = {a.name for a in canon_args if str(a.type) == "Scalar" and a.default == "1"}
            analysed[key] = analyse_unit(d.original_formula, len(d.var_names), tensor_names,
                                         grad_names, aten, one_names)
        (result, full, temps), unit = analysed[key]
        for var in d.var_names:
            if var not in arg_index:
                raise AssertionError(f"{f.func.name}: derivative for unknown argument {var}")
            grads.append(Grad(arg_index[var], result, temps, d.original_formula, full, unit))
    # In the order the generated backward node runs them: `info.derivatives`, which
    # load_derivatives.py builds from `sorted(defn.keys())`, the entry's variable names in
    # alphabetical order (div.Tensor: `other` before `self`), each result kept while the next runs.
    return ("Formulas", saved, grads, outs)


# --------------------------------------------------------------------------------------------
# Rust.
# --------------------------------------------------------------------------------------------


def rust_str(s: str) -> str:
    s = " ".join(s.split())  # derivatives.yaml folds long formulas over lines
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rust_alias(al) -> str:
    return "Alias::None" if al[0] == "None" else f"Alias::{al[0]}({al[1]})"


def rust_temps(t) -> str:
    return f"Counted({t[1]})" if t[0] == "Counted" else f"Opaque({rust_str(t[1])})"


def rust_op(o: Op) -> str:
    args = ", ".join(
        f"a({rust_str(n)}, {ty}, {str(kw).lower()}, {str(d).lower()})" for n, ty, kw, d in o.args
    )
    rets = ", ".join(
        f"r({str(lst).lower()}, {str(t).lower()}, {rust_alias(al)})" for lst, t, al in o.returns
    )
    lines = [
        "    AtenOp {",
        f"        name: {rust_str(o.name)},",
        f"        args: &[{args}],",
        f"        returns: &[{rets}],",
        f"        composite: {str(o.composite).lower()},",
    ]
    ag = o.autograd
    if ag[0] == "Formulas":
        _, saved, grads, outs = ag
        lines.append("        autograd: Formulas {")
        lines.append("            saved: &[" + ", ".join(f"{x[0]}({', '.join(map(str, x[1:]))})" for x in saved) + "],")
        lines.append("            grads: &[")
        for g in grads:
            temps = rust_temps(g.temporaries)
            if g.unit is None:
                lines.append(
                    f"                g({g.input}, {g.result}, {temps}, {str(g.full).lower()}, {rust_str(g.formula)}),"
                )
            else:
                names, (u_result, u_full, u_temps) = g.unit
                lines.append(
                    f"                gu({g.input}, {g.result}, {temps}, {str(g.full).lower()}, {rust_str(g.formula)}, "
                    f"&[{', '.join(rust_str(n) for n in names)}], {u_result}, {rust_temps(u_temps)}, {str(u_full).lower()}),"
                )
        lines.append("            ],")
        lines.append(
            "            outputs_differentiable: &[" + ", ".join(str(b).lower() for b in outs) + "],"
        )
        lines.append("        },")
    else:
        lines.append(f"        autograd: {ag[0]},")
    lines.append("    },")
    return "\n".join(lines) + "\n"


HEADER = """\
// @generated by scripts/gen_aten_table.py from torch {version} (torchgen/packaged: native_functions.yaml, derivatives.yaml) -- do not edit
// Regenerate: PYTHONPATH=.libtorch python3 scripts/gen_aten_table.py --out src/ops/aten_table.rs
// Check: scripts/check-aten-table.sh

use super::*;
use ArgType::*;
use AtenAutograd::*;
use GradResult::*;
use SavedTensor::*;
use Temporaries::*;

const fn a(name: &'static str, ty: ArgType, kwarg_only: bool, has_default: bool) -> AtenArg {{
    AtenArg {{
        name,
        ty,
        kwarg_only,
        has_default,
    }}
}}

const fn r(list: bool, tensor: bool, alias: Alias) -> AtenReturn {{
    AtenReturn {{
        list,
        tensor,
        alias,
    }}
}}

const fn g(
    input: u8,
    result: GradResult,
    temporaries: Temporaries,
    output_shaped: bool,
    formula: &'static str,
) -> GradFormula {{
    GradFormula {{
        input,
        result,
        temporaries,
        output_shaped,
        formula,
        unit: None,
    }}
}}

#[allow(clippy::too_many_arguments)]
const fn gu(
    input: u8,
    result: GradResult,
    temporaries: Temporaries,
    output_shaped: bool,
    formula: &'static str,
    args: &'static [&'static str],
    unit_result: GradResult,
    unit_temporaries: Temporaries,
    unit_output_shaped: bool,
) -> GradFormula {{
    GradFormula {{
        input,
        result,
        temporaries,
        output_shaped,
        formula,
        unit: Some(UnitReading {{
            args,
            result: unit_result,
            temporaries: unit_temporaries,
            output_shaped: unit_output_shaped,
        }}),
    }}
}}

/// Every overload of `native_functions.yaml` (with torchgen's generated variants), sorted by
/// name.
#[rustfmt::skip]
pub static ATEN_OPS: &[AtenOp] = &[
"""


def emit(ops, version: str) -> str:
    parts = [HEADER.format(version=version)]
    parts.extend(rust_op(o) for o in ops)
    parts.append("];\n")
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# Checks and summary.
# --------------------------------------------------------------------------------------------

# Temporaries the project measured on real runs; the evaluator must reproduce them exactly.
SANITY = {
    "exp.default": ("New", ("Counted", 0)),
    "log.default": ("New", ("Counted", 0)),
    "sqrt.default": ("New", ("Counted", 1)),
    "rsqrt.default": ("New", ("Counted", 2)),
    "sigmoid.default": ("New", ("Counted", 0)),
    "tanh.default": ("New", ("Counted", 0)),
    "neg.default": ("New", ("Counted", 0)),
    "abs.default": ("New", ("Counted", 1)),
    "sin.default": ("New", ("Counted", 1)),
    "cos.default": ("New", ("Counted", 2)),
    "erf.default": ("New", ("Counted", 4)),
    "reciprocal.default": ("New", ("Counted", 2)),
    "pow.Tensor_Scalar": ("New", ("Counted", 2)),
    "mul.Scalar": ("New", ("Counted", 0)),
    "add.Scalar": ("Grad", ("Counted", 0)),
}


def sanity_check(ops) -> None:
    by_name = {o.name: o for o in ops}
    for name, (result, temps) in SANITY.items():
        ag = by_name[name].autograd
        assert ag[0] == "Formulas", (name, ag)
        g = [g for g in ag[2] if g.input == 0][0]
        got = (g.result, g.temporaries)
        assert got == (result, temps), f"sanity check {name}: got {got}, want {(result, temps)}"


def summary(ops) -> str:
    kinds = collections.Counter(o.autograd[0] for o in ops)
    counted = opaque = 0
    names = collections.Counter()
    for o in ops:
        if o.autograd[0] != "Formulas":
            continue
        for g in o.autograd[2]:
            if g.temporaries[0] == "Counted":
                counted += 1
            else:
                opaque += 1
                names[g.temporaries[1]] += 1
    lines = [f"{len(ops)} ops: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))]
    lines.append(f"grad formulas: Counted {counted}, Opaque {opaque}")
    lines.append("most common opaque: " + ", ".join(f"{n} {c}" for n, c in names.most_common(30)))
    return "\n".join(lines)


def torch_version(torchgen_dir: str) -> str:
    path = os.path.join(os.path.dirname(torchgen_dir), "torch", "version.py")
    with open(path) as fh:
        m = re.search(r"__version__\s*=\s*'([^']+)'", fh.read())
    return m.group(1).split("+")[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the table here (default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    p.add_argument("--dump", help="also write every gradient formula and its reading here (TSV)")
    opts = p.parse_args()
    try:
        import torchgen
    except ImportError:
        sys.exit("gen_aten_table: cannot import torchgen; run with PYTHONPATH=.libtorch")
    torchgen_dir = os.path.dirname(torchgen.__file__)
    version = torch_version(torchgen_dir)
    if version != TORCH_VERSION:
        sys.exit(f"gen_aten_table: torchgen is from torch {version}, want {TORCH_VERSION}")
    ops = build(torchgen_dir)
    sanity_check(ops)
    text = emit(ops, version)
    if opts.out:
        with open(opts.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    if not opts.quiet:
        print(summary(ops), file=sys.stderr)
    if opts.dump:
        with open(opts.dump, "w") as fh:
            for o in ops:
                if o.autograd[0] == "Formulas":
                    for g in o.autograd[2]:
                        fh.write(f"{o.name}\t{g.input}\t{g.result}{'/full' if g.full else ''}\t{g.temporaries}\t{g.formula}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
