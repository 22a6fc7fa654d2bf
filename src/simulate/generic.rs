//! The generic rule: what a generic `aten` node allocates, saves and frees, read off torch's
//! own tables ([`crate::ops::aten`], generated from `native_functions.yaml` and
//! `derivatives.yaml`), with no per-op code.
//!
//! The model (`docs/simulator.md`, "The generic rule"):
//! - forward: the node's output is a new tensor of its shape and dtype, unless the schema says
//!   the return aliases an argument (a view, or an in-place write): then no new memory. The
//!   op's other tensor returns are made too; autograd keeps those it saves, the rest are freed
//!   at once. No kernel scratch is modelled.
//! - saved: the generated backward node's `SavedVariable`s: tensor arguments (parameters cost
//!   nothing more: they are alive anyway) and returns.
//! - backward: one gradient per differentiable tensor argument that requires grad: the
//!   incoming gradient itself when the formula returns it or a view of it (and the shapes
//!   agree), else a new tensor of the argument's size. While a formula runs, the
//!   intermediate tensors of its expression are alive together (C++ temporaries of one
//!   statement), each sized like the node's output: the generator counts them.
//! - limits: a formula that calls a helper the generator cannot see into holds no
//!   temporaries here; an op with no derivative entry (or `not_implemented`) takes no
//!   gradient; a view's output aliases the node's first input. Each is named in the rule's note.

use super::rules::{Grad, OpRule, Output, Saved, Sizes, Source};
use crate::ops::aten::{Alias, AtenAutograd, GradResult, SavedTensor, Temporaries};
use crate::ops::generic::{AtenNode, AtenValue, TensorRef};
use crate::shape::Shape;

/// The generic rule of `a` at the sizes of `s`.
pub(super) fn rule(a: &AtenNode, s: &Sizes) -> OpRule {
    let n = s.values.args(s.k).len();
    let shapes: Vec<&Shape> = (0..n).filter_map(|i| s.shape_in(i)).collect();
    rule_for(a, s.batch, &shapes)
}

/// The generic rule of `a` at `batch`, its inputs of these shapes.
pub fn rule_for(a: &AtenNode, batch: u64, inputs: &[&Shape]) -> OpRule {
    let bytes_of = |o: usize| -> u64 {
        a.bound
            .get(o)
            .map_or(0, |sh| sh.numel_at(batch))
            .saturating_mul(a.outputs[o].dtype.bytes())
    };
    let y = bytes_of(a.item);
    let returns = a.op.returns;
    let alias = returns.get(a.item).map_or(Alias::None, |r| r.alias);
    let output = match alias {
        Alias::None => Output::New(y),
        Alias::View(_) | Alias::InPlace(_) => Output::View,
    };
    let n_inputs = inputs.len();
    let mut saved = Vec::new();
    let mut forward_transient = 0u64;
    let (grads_of, note, source) = match &a.op.autograd {
        AtenAutograd::Formulas {
            saved: list,
            grads,
            ..
        } => {
            for t in list.iter() {
                match *t {
                    SavedTensor::Input(k) => saved_input(a, k as usize, &mut saved),
                    SavedTensor::Output(o) if o as usize == a.item => saved.push(Saved::Out),
                    SavedTensor::Output(o) => saved.push(Saved::Internal {
                        what: "another output of the op, saved",
                        bytes: bytes_of(o as usize),
                    }),
                }
            }
            let opaque = grads
                .iter()
                .any(|g| matches!(g.temporaries, Temporaries::Opaque(_)));
            let note = if opaque {
                "generic ATen op (derivatives.yaml): saves what its backward node saves; a gradient formula calls a helper whose temporaries are not counted (approximate backward)"
            } else {
                "generic ATen op (derivatives.yaml): saves what its backward node saves; each gradient formula's temporaries counted from its expression"
            };
            (Some(grads), note, Source::TorchSource)
        }
        AtenAutograd::NotImplemented => (
            None,
            "generic ATen op: derivatives.yaml says not_implemented; no gradient (approximate)",
            Source::Assumed,
        ),
        AtenAutograd::NonDifferentiable => (
            None,
            "generic ATen op: not differentiable (derivatives.yaml); saves nothing",
            Source::TorchSource,
        ),
        AtenAutograd::Missing if a.op.composite => (
            None,
            "generic ATen op, a composite drawn whole (CompositeImplicitAutograd): the gradient flows to its inputs, what its decomposition saves is not drawn (approximate)",
            Source::Assumed,
        ),
        AtenAutograd::Missing => (
            None,
            "generic ATen op with no derivatives.yaml entry: no gradient, nothing saved (approximate)",
            Source::Assumed,
        ),
    };
    // The op's other returns: made with the output; those not saved are freed at once.
    for (o, r) in returns.iter().enumerate() {
        let made = r.tensor && r.alias == Alias::None && o != a.item && o < a.outputs.len();
        let kept = saved.iter().any(|x| matches!(x, Saved::Internal { .. }))
            && matches!(&a.op.autograd, AtenAutograd::Formulas { saved, .. } if saved.contains(&SavedTensor::Output(o as u8)));
        if made && !kept {
            forward_transient = forward_transient.saturating_add(bytes_of(o));
        }
    }
    let mut grads = vec![Grad::None; n_inputs];
    let mut temporaries = 0u64;
    // Arguments broadcast to the output: the formula makes their gradient at the output's
    // size and the engine sums it down (`validate_outputs`' `sum_to`): both exist a moment.
    let mut broadcast = 0u64;
    let out_dims: Vec<u64> = a.shape().0.iter().map(|d| d.at(batch)).collect();
    let broadcasts = |dims: &[u64]| dims != out_dims.as_slice() && broadcastable(dims, &out_dims);
    if let Some(formulas) = grads_of {
        for (i, g) in grads.iter_mut().enumerate() {
            let Some(arg) = arg_holding(a, i) else {
                continue;
            };
            let Some(f) = formulas.iter().find(|f| f.input as usize == arg) else {
                continue;
            };
            let same_shape = inputs.get(i).is_some_and(|sh| **sh == *a.shape());
            *g = match f.result {
                GradResult::OfGrad if same_shape => Grad::OfOutput,
                _ => Grad::New,
            };
            if let Temporaries::Counted(n) = f.temporaries {
                temporaries = temporaries.max(n as u64);
            }
            let dims: Vec<u64> = inputs
                .get(i)
                .map_or(vec![], |sh| sh.0.iter().map(|d| d.at(batch)).collect());
            if broadcasts(&dims) {
                broadcast = broadcast.saturating_add(y);
            }
        }
        for (p, param) in a.params.iter().enumerate() {
            let Some(arg) = a.arg_of(TensorRef::Param(p)) else {
                continue;
            };
            if formulas.iter().any(|f| f.input as usize == arg) && broadcasts(&param.shape) {
                broadcast = broadcast.saturating_add(y);
            }
        }
    } else if a.op.composite && matches!(a.op.autograd, AtenAutograd::Missing) {
        // A composite op drawn whole: its decomposition's gradient flows to every input
        // (the incoming one where the op is a view), its inner ops' savings unknown.
        for (i, g) in grads.iter_mut().enumerate() {
            let same_shape = inputs.get(i).is_some_and(|sh| **sh == *a.shape());
            *g = if alias != Alias::None && same_shape {
                Grad::OfOutput
            } else {
                Grad::New
            };
        }
    }
    let mut rule = OpRule::new(output, saved, grads, source)
        .fwd(forward_transient)
        .bwd(temporaries.saturating_mul(y).max(broadcast))
        .note(note);
    rule.output_contiguous = Some(a.outputs[a.item].contiguous);
    rule
}

/// Whether `dims` broadcasts to `out` (numpy's rule: aligned from the right, each axis equal
/// or 1).
fn broadcastable(dims: &[u64], out: &[u64]) -> bool {
    dims.len() <= out.len()
        && dims
            .iter()
            .rev()
            .zip(out.iter().rev())
            .all(|(d, o)| d == o || *d == 1)
}

/// Saves schema argument `k`: a node input (or each input of a list) as it is; a parameter
/// is alive anyway.
fn saved_input(a: &AtenNode, k: usize, saved: &mut Vec<Saved>) {
    let mut refs = Vec::new();
    if let Some(v) = a.arg(k) {
        collect(v, &mut refs);
    }
    for r in refs {
        if let TensorRef::Input(i) = r {
            saved.push(Saved::Input(i));
        }
    }
}

fn collect(v: &AtenValue, out: &mut Vec<TensorRef>) {
    match v {
        AtenValue::Input(i) => out.push(TensorRef::Input(*i)),
        AtenValue::Param(p) => out.push(TensorRef::Param(*p)),
        AtenValue::List(l) => l.iter().for_each(|x| collect(x, out)),
        _ => {}
    }
}

/// The schema argument that node input `i` is passed as (directly or inside a list).
fn arg_holding(a: &AtenNode, i: usize) -> Option<usize> {
    if let Some(k) = a.arg_of(TensorRef::Input(i)) {
        return Some(k);
    }
    (0..a.op.args.len()).find(|&k| {
        let mut refs = Vec::new();
        if let Some(v) = a.arg(k) {
            collect(v, &mut refs);
        }
        refs.contains(&TensorRef::Input(i))
    })
}
