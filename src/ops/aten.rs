//! torch's own facts about every ATen operator, as a table generated from the pinned torch
//! wheel's `native_functions.yaml` and `derivatives.yaml` (`scripts/gen_aten_table.py` writes
//! [`ATEN_OPS`] into `aten_table.rs`; CI regenerates it and checks the bytes). The generic
//! `aten` node of the graph format (`docs/graph-format.md`) looks its target up here, and the
//! simulator's generic rule (`simulate::generic`) reads what the op saves, which inputs are
//! differentiable, which outputs alias an input and how many temporaries each gradient formula
//! makes. Nothing here is written by hand: a hand rule overrides the table in the simulator.

#[path = "aten_table.rs"]
mod table;

pub use table::ATEN_OPS;

/// One ATen overload: its schema, from `native_functions.yaml`, and its autograd facts, from
/// `derivatives.yaml`.
#[derive(Debug)]
pub struct AtenOp {
    /// `<op>.<overload>` as torch's `OpOverload` names it (`mul.Tensor`, `relu.default`); a
    /// graph's `target` is this with `aten.` before it.
    pub name: &'static str,
    /// The schema's arguments in order (keyword-only ones last, flagged).
    pub args: &'static [AtenArg],
    /// The schema's returns in order.
    pub returns: &'static [AtenReturn],
    /// Its kernel is `CompositeImplicitAutograd`: eager autograd runs its decomposition and
    /// records the ops that makes, not this one.
    pub composite: bool,
    pub autograd: AtenAutograd,
}

/// One argument of a schema.
#[derive(Debug)]
pub struct AtenArg {
    pub name: &'static str,
    pub ty: ArgType,
    /// After the schema's `*`: given by keyword only.
    pub kwarg_only: bool,
    /// The schema gives it a default.
    pub has_default: bool,
}

/// An argument's type, as far as memory is concerned (`SymInt` is `Int`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    Tensor,
    OptionalTensor,
    TensorList,
    /// `Tensor?[]` (index's indices).
    OptionalTensorList,
    Scalar,
    Int,
    IntList,
    Float,
    Bool,
    Str,
    ScalarType,
    /// Anything else (layouts, devices, memory formats, generators, optional scalars...).
    Other,
}

impl ArgType {
    /// Whether the argument holds tensors.
    pub fn is_tensor(self) -> bool {
        matches!(
            self,
            ArgType::Tensor
                | ArgType::OptionalTensor
                | ArgType::TensorList
                | ArgType::OptionalTensorList
        )
    }
}

/// One return of a schema.
#[derive(Debug)]
pub struct AtenReturn {
    /// A tensor list (`Tensor[]`: split, unbind).
    pub list: bool,
    /// Whether it is a tensor at all (`int`, `float`, `bool`, `Scalar` returns are not).
    pub tensor: bool,
    pub alias: Alias,
}

/// What a return shares with an argument, from the schema's alias annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alias {
    /// A new tensor.
    None,
    /// `Tensor(a)` on a return and argument `k`: a view of argument `k` (no new memory).
    View(u8),
    /// `Tensor(a!)` on a return and argument `k`: argument `k` itself, written in place (an
    /// in-place op or an `out=` overload).
    InPlace(u8),
}

/// An op's autograd facts.
#[derive(Debug)]
pub enum AtenAutograd {
    /// An entry of `derivatives.yaml` with formulas.
    Formulas {
        /// The tensors autograd saves for backward (`SavedVariable`s of the generated node).
        saved: &'static [SavedTensor],
        /// One per differentiable argument, in the entry's order.
        grads: &'static [GradFormula],
        /// `output_differentiability`, one per return (all true when the entry omits it).
        outputs_differentiable: &'static [bool],
    },
    /// The entry says `not_implemented` for every argument.
    NotImplemented,
    /// The entry exists and no output is differentiable (or every formula is
    /// `non_differentiable`), or the op has no entry and torchgen's
    /// `DONT_REQUIRE_DERIVATIVE` names it (`new_ones`, `zeros_like`, `argmax`): its outputs
    /// never require grad.
    NonDifferentiable,
    /// No entry in `derivatives.yaml` (a composite op that decomposes, or an op with no
    /// autograd kernel).
    Missing,
}

/// A tensor autograd saves for an op's backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedTensor {
    /// Argument `k` (a tensor, an optional tensor or a tensor list) as it is.
    Input(u8),
    /// Argument `k`, saved only when argument `g` requires grad: the one gradient that reads
    /// it is `g`'s (gen_variable_type.py's `guard_for`, `grad_fn->should_compute_output`).
    InputIf(u8, u8),
    /// Return `k` (`result`, `result0`, ...).
    Output(u8),
}

/// The formula of one differentiable argument's gradient.
#[derive(Debug)]
pub struct GradFormula {
    /// The argument it is the gradient of.
    pub input: u8,
    /// What the formula returns.
    pub result: GradResult,
    /// A `New` result has the shape of the op's output: an elementwise expression of `grad`
    /// (tensor operators, ATen operators tagged `pointwise`), so an argument broadcast to the
    /// output gets its gradient at the output's shape, and autograd's engine sums it down
    /// (`validate_outputs` in `torch/csrc/autograd/engine.cpp`: `at::sum_to`).
    pub output_shaped: bool,
    /// Intermediate tensors the formula makes besides its result; C++ temporaries of one
    /// expression, alive until the expression ends.
    pub temporaries: Temporaries,
    /// The formula as derivatives.yaml writes it (for notes and docs).
    pub formula: &'static str,
    /// The formula's reading when the op's Scalar arguments `unit.args` are all 1 (their
    /// schema default), where that differs: `maybe_multiply(t, s)` (FunctionsManual.cpp)
    /// returns `t` itself when `s` is 1 at run time, else `t * s`.
    pub unit: Option<UnitReading>,
}

/// A gradient formula's reading when some Scalar arguments are 1.
#[derive(Debug)]
pub struct UnitReading {
    /// The arguments (schema names) that must be 1.
    pub args: &'static [&'static str],
    pub result: GradResult,
    pub temporaries: Temporaries,
    pub output_shaped: bool,
}

/// What a gradient formula returns. All but `New` make no new memory; they differ in what
/// autograd's `AccumulateGrad` does with them at a leaf (`torch/csrc/autograd/functions/
/// accumulate_grad.h`, `accumulateGrad`): it keeps (steals) a gradient that no one else holds
/// (`use_count() <= 1`) and that obeys the layout contract (`obeys_layout_contract`: the
/// strides of the leaf on its non-size-1 axes, no stride 0; or contiguous for a leaf that is
/// not non-overlapping and dense), and clones it otherwise (`clone_obey_contract`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GradResult {
    /// A new tensor.
    New,
    /// The incoming gradient itself (`grad`, `handle_r_to_c(self, grad)`, `grad.conj()` of a
    /// real tensor): the same tensor, held by whoever holds the incoming gradient too.
    Grad,
    /// A view of all of the incoming gradient, its strides permuted, size-1 axes added or
    /// dropped (`grad.t()`, `permute_backwards`, `unsqueeze_to`, `grad.squeeze(dim)`): a
    /// fresh tensor of its own.
    View,
    /// A view of a block of the incoming gradient (`grad.narrow`, `grad.select`,
    /// `grad.diagonal`: `cat_tensors_backward`, `stack_tensors_backward`), with the
    /// gradient's strides.
    Part,
    /// A stride-0 view of it (`grad.expand`, `sum_backward`): never obeys the layout
    /// contract.
    Expand,
    /// `grad.reshape(..)`: a view when the incoming gradient is contiguous, else a copy.
    Reshape,
}

impl GradResult {
    /// The incoming gradient or a view of it (no new memory when the formula runs).
    pub fn of_grad(self) -> bool {
        self != GradResult::New
    }
}

/// How many intermediate tensors a gradient formula makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporaries {
    /// Counted from the formula's expression (helpers expanded by the generator's own table).
    Counted(u8),
    /// The formula calls a function whose temporaries the generator does not know: named.
    Opaque(&'static str),
}

/// The table entry of `name` (`mul.Tensor`; `aten.` and a `.default` overload are accepted).
pub fn lookup(target: &str) -> Option<&'static AtenOp> {
    let name = target.strip_prefix("aten.").unwrap_or(target);
    ATEN_OPS
        .binary_search_by(|op| op.name.cmp(name))
        .ok()
        .map(|k| &ATEN_OPS[k])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_unique() {
        for w in ATEN_OPS.windows(2) {
            assert!(w[0].name < w[1].name, "{} then {}", w[0].name, w[1].name);
        }
    }
}
