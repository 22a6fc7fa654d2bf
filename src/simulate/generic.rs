//! The generic rule: what a generic `aten` node allocates, saves and frees, read off torch's
//! own tables ([`crate::ops::aten`], generated from `native_functions.yaml` and
//! `derivatives.yaml`), with no per-op code.
//!
//! The model (`docs/simulator.md`, "The generic rule"):
//! - forward: the node's output is a new tensor of its shape and dtype, unless the schema says
//!   the return aliases an argument (a view, or an in-place write): then no new memory. The
//!   op's other tensor returns are made too; autograd keeps those it saves, the rest are freed
//!   at once. Kernel scratch (buffers freed inside the call) only where the op's entry in
//!   [`super::generic_overrides`] gives it, read from the kernel's source.
//! - saved: the generated backward node's `SavedVariable`s: tensor arguments (parameters cost
//!   nothing more: they are alive anyway) and returns.
//! - backward ([`engine_backward`]): the formulas run in the generated node's order
//!   (load_derivatives.py: alphabetical by the entry's names), each result kept while the next
//!   runs, each formula's intermediate tensors alive together while it runs (C++ temporaries
//!   of one statement, each sized like the output: the generator counts them; a
//!   `maybe_multiply` by a Scalar argument that is 1 here makes nothing). A result is the
//!   incoming gradient or a view of it (no memory), or new: of the argument's size, or of the
//!   output's when the formula is an elementwise expression of `grad`, then summed down to a
//!   broadcast argument by the engine (`validate_outputs`' `sum_to`), as the incoming gradient
//!   itself is. A tensor passed as two arguments gets its gradients added up (`InputBuffer`).
//! - limits: a formula that calls a helper the generator cannot see into holds no
//!   temporaries here (unless the op's override entry gives them); a helper's statements are counted as one expression; an op with no
//!   derivative entry (or `not_implemented`) takes no gradient; a view's output aliases the
//!   node's first input. Each is named in the rule's note.

pub use super::generic_overrides::NodeInput;
use super::generic_overrides::{self as overrides, Call};
use super::rules::{Grad, OpRule, Output, Saved, Sizes, Source};
use crate::ops::aten::{Alias, AtenAutograd, GradFormula, GradResult, SavedTensor, Temporaries};
use crate::ops::generic::{AtenNode, AtenValue, TensorRef};
use crate::shape::Shape;

/// One input's (or parameter's) gradient once the node's backward and the engine's checks
/// are done, before it reaches the next node (or a leaf's `AccumulateGrad`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputGrad {
    /// Not computed (not differentiable, or not required).
    None,
    /// A new tensor of this many bytes.
    New(u64),
    /// The incoming gradient or a view of it (no new memory), as the formula returned it.
    OfGrad(GradResult),
}

/// The backward of a generic node as autograd's engine runs it (`torch/csrc/autograd/
/// engine.cpp`, `evaluate_function` then `validate_outputs`): the node's `apply` runs each
/// formula in turn, each result kept in `grad_inputs` while the next runs (with its
/// expression's temporaries, C++ temporaries of one statement); then `validate_outputs`
/// sums each gradient whose shape is not its input's down to it (`at::sum_to`, the old one
/// freed as it is replaced); then each input's gradients are added up in its `InputBuffer`
/// (`input_buffer.cpp`: in place into one nobody else holds, else `old + new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineBackward {
    /// The highest level over the one before (which holds the incoming gradient).
    pub peak: u64,
    /// One per node input.
    pub inputs: Vec<InputGrad>,
    /// One per parameter of the node.
    pub params: Vec<InputGrad>,
}

impl EngineBackward {
    /// Bytes of the new gradients it leaves.
    pub fn new_bytes(&self) -> u64 {
        self.inputs
            .iter()
            .chain(self.params.iter())
            .map(|g| match g {
                InputGrad::New(b) => *b,
                _ => 0,
            })
            .sum()
    }
}

/// The generic rule of `a` at the sizes of `s`.
pub(crate) fn rule(a: &AtenNode, s: &Sizes) -> OpRule {
    let n = s.values.args(s.k).len();
    let inputs: Vec<NodeInput> = (0..n)
        .filter_map(|i| {
            s.shape_in(i).map(|shape| NodeInput {
                shape,
                bytes: s.x(i),
                requires_grad: true,
            })
        })
        .collect();
    rule_for_inputs(a, s.batch, &inputs)
}

/// The generic rule of `a` at `batch`, its inputs of these shapes (each of the output's dtype,
/// each requiring grad).
pub fn rule_for(a: &AtenNode, batch: u64, inputs: &[&Shape]) -> OpRule {
    let e = a.outputs[a.item].dtype.bytes();
    let inputs: Vec<NodeInput> = inputs
        .iter()
        .map(|&shape| NodeInput {
            shape,
            bytes: shape.numel_at(batch).saturating_mul(e),
            requires_grad: true,
        })
        .collect();
    rule_for_inputs(a, batch, &inputs)
}

fn bytes_of(a: &AtenNode, batch: u64, o: usize) -> u64 {
    a.bound
        .get(o)
        .map_or(0, |sh| sh.numel_at(batch))
        .saturating_mul(a.outputs.get(o).map_or(0, |x| x.dtype.bytes()))
}

/// The generic rule of `a` at `batch` for these inputs.
pub fn rule_for_inputs(a: &AtenNode, batch: u64, inputs: &[NodeInput]) -> OpRule {
    let y = bytes_of(a, batch, a.item);
    let returns = a.op.returns;
    let alias = returns.get(a.item).map_or(Alias::None, |r| r.alias);
    let output = match alias {
        Alias::None => Output::New(y),
        Alias::View(_) | Alias::InPlace(_) => Output::View,
    };
    let n_inputs = inputs.len();
    let mut saved = Vec::new();
    let mut forward_transient = 0u64;
    let (differentiable, note, source) = match &a.op.autograd {
        AtenAutograd::Formulas {
            saved: list, grads, ..
        } => {
            saved = saved_of(a, batch, y, alias, list);
            let opaque = grads
                .iter()
                .any(|g| matches!(g.temporaries, Temporaries::Opaque(_)));
            let note = if opaque && overrides::covers_backward(a) {
                "generic ATen op (derivatives.yaml): saves what its backward node saves; its gradient helper's temporaries read from torch's source (generic_overrides.rs)"
            } else if opaque {
                "generic ATen op (derivatives.yaml): saves what its backward node saves; a gradient formula calls a helper whose temporaries are not counted (approximate backward)"
            } else {
                "generic ATen op (derivatives.yaml): saves what its backward node saves; each gradient formula's temporaries counted from its expression"
            };
            (true, note, Source::TorchSource)
        }
        AtenAutograd::NotImplemented => (
            false,
            "generic ATen op: derivatives.yaml says not_implemented; no gradient (approximate)",
            Source::Assumed,
        ),
        AtenAutograd::NonDifferentiable => (
            false,
            "generic ATen op: not differentiable (derivatives.yaml); saves nothing",
            Source::TorchSource,
        ),
        AtenAutograd::Missing if a.op.composite => (
            false,
            "generic ATen op, a composite drawn whole (CompositeImplicitAutograd): the gradient flows to its inputs, what its decomposition saves is not drawn (approximate)",
            Source::Assumed,
        ),
        AtenAutograd::Missing => (
            false,
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
            forward_transient = forward_transient.saturating_add(bytes_of(a, batch, o));
        }
    }
    let mut grads = vec![Grad::None; n_inputs];
    let mut backward_transient = 0;
    // A gradient that is `grad.reshape(...)`: a view of a contiguous incoming gradient, a copy
    // of a non-contiguous one (the simulator tracks which).
    let mut reshapes = false;
    if differentiable {
        let engine = engine_backward(a, batch, inputs);
        for (g, e) in grads.iter_mut().zip(&engine.inputs) {
            *g = match e {
                InputGrad::None => Grad::None,
                InputGrad::New(_) => Grad::New,
                InputGrad::OfGrad(_) => Grad::OfOutput,
            };
        }
        reshapes = engine
            .inputs
            .iter()
            .any(|e| matches!(e, InputGrad::OfGrad(GradResult::Reshape)));
        backward_transient = engine.peak.saturating_sub(engine.new_bytes());
    } else if a.op.composite && matches!(a.op.autograd, AtenAutograd::Missing) {
        // A composite op drawn whole: its decomposition's gradient flows to every input
        // (the incoming one where the op is a view, reshaped back), its inner ops' savings
        // unknown.
        reshapes = alias != Alias::None;
        for (i, g) in grads.iter_mut().enumerate() {
            let same_shape = inputs.get(i).is_some_and(|x| *x.shape == *a.shape());
            *g = if alias != Alias::None && same_shape {
                Grad::OfOutput
            } else {
                Grad::New
            };
        }
    }
    // Kernel scratch (generic_overrides.rs): buffers freed inside the call, over its end.
    let scratch = overrides::forward_scratch(&Call {
        node: a,
        batch,
        inputs,
    });
    let forward_peak = (scratch > 0).then(|| {
        let made = match output {
            Output::New(b) => b,
            _ => 0,
        };
        let internal: u64 = saved
            .iter()
            .map(|x| match x {
                Saved::Internal { bytes, .. } => *bytes,
                _ => 0,
            })
            .sum();
        made.saturating_add(forward_transient)
            .saturating_add(internal)
            .saturating_add(scratch)
    });
    let mut rule = OpRule::new(output, saved, grads, source)
        .fwd(forward_transient)
        .bwd(backward_transient)
        .note(note);
    rule.output_contiguous = Some(a.outputs[a.item].contiguous);
    rule.grad_reshapes = reshapes;
    rule.forward_peak = forward_peak;
    rule
}

/// A formula's reading for this call: its `unit` reading when the Scalar arguments it names
/// are all 1 here (passed as 1, or left at their schema default of 1).
fn reading(a: &AtenNode, f: &GradFormula) -> (GradResult, Temporaries, bool) {
    if let Some(u) = &f.unit {
        let is_one = |name: &str| {
            let Some(k) = a.op.args.iter().position(|x| x.name == name) else {
                return false;
            };
            match a.arg(k) {
                None => true,
                Some(AtenValue::Int(1)) => true,
                Some(AtenValue::Float(x)) => *x == 1.0,
                _ => false,
            }
        };
        if u.args.iter().all(|n| is_one(n)) {
            return (u.result, u.temporaries, u.output_shaped);
        }
    }
    (f.result, f.temporaries, f.output_shaped)
}

/// One gradient the node's formulas make: for which slot (a node input, or a parameter after
/// them), what it is, and whether it has the output's shape.
struct Made {
    slot: usize,
    grad: InputGrad,
    output_shaped: bool,
}

/// The engine's backward of `a` (see [`EngineBackward`]); every gradient `None` when the op
/// has no formulas.
pub fn engine_backward(a: &AtenNode, batch: u64, inputs: &[NodeInput]) -> EngineBackward {
    let n = inputs.len();
    let np = a.params.len();
    let mut out = EngineBackward {
        peak: 0,
        inputs: vec![InputGrad::None; n],
        params: vec![InputGrad::None; np],
    };
    let AtenAutograd::Formulas {
        grads: formulas, ..
    } = &a.op.autograd
    else {
        return out;
    };
    let y = bytes_of(a, batch, a.item);
    let e = a.outputs[a.item].dtype.bytes();
    let out_dims: Vec<u64> = a.shape().0.iter().map(|d| d.at(batch)).collect();
    // The slots: node inputs, then parameters (alive anyway, each requiring grad).
    let mut dims: Vec<Vec<u64>> = inputs
        .iter()
        .map(|x| x.shape.0.iter().map(|d| d.at(batch)).collect())
        .collect();
    let mut bytes: Vec<u64> = inputs.iter().map(|x| x.bytes).collect();
    let mut requires: Vec<bool> = inputs.iter().map(|x| x.requires_grad).collect();
    for p in &a.params {
        bytes.push(p.shape.iter().product::<u64>().saturating_mul(e));
        dims.push(p.shape.clone());
        requires.push(true);
    }
    let slot_of = |r: TensorRef| match r {
        TensorRef::Input(i) => i,
        TensorRef::Param(p) => n + p,
    };
    // Which slots each schema argument holds (a tensor list holds several; one tensor may be
    // passed as several arguments).
    let slots_of_arg = |k: usize| -> Vec<usize> {
        refs_of(a, k)
            .into_iter()
            .map(slot_of)
            .filter(|&s| s < bytes.len())
            .collect()
    };
    // The node's apply: formulas in the entry's order; one shared by several arguments
    // (`self, other: atan2_backward(...)`) runs once, for the arguments that need it.
    let mut made: Vec<Made> = Vec::new();
    let mut live = 0u64;
    let mut done = vec![false; formulas.len()];
    for f0 in 0..formulas.len() {
        if done[f0] {
            continue;
        }
        let group: Vec<usize> = (f0..formulas.len())
            .filter(|&j| !done[j] && formulas[j].formula == formulas[f0].formula)
            .collect();
        let mut results = 0u64;
        let mut any = false;
        for &j in &group {
            done[j] = true;
            let f = &formulas[j];
            let (result, _, output_shaped) = reading(a, f);
            for s in slots_of_arg(f.input as usize) {
                if !requires[s] {
                    continue;
                }
                any = true;
                let broadcast = dims[s] != out_dims && broadcastable(&dims[s], &out_dims);
                let grad = match result {
                    GradResult::New => {
                        let b = if output_shaped && broadcast {
                            y
                        } else {
                            bytes[s]
                        };
                        results = results.saturating_add(b);
                        InputGrad::New(b)
                    }
                    r => InputGrad::OfGrad(r),
                };
                made.push(Made {
                    slot: s,
                    grad,
                    output_shaped: broadcast
                        && (result == GradResult::Grad
                            || (result == GradResult::New && output_shaped)),
                });
            }
        }
        if !any {
            continue;
        }
        let call = Call {
            node: a,
            batch,
            inputs,
        };
        let arg =
            a.op.args
                .get(formulas[f0].input as usize)
                .map_or("", |x| x.name);
        let temporaries = match (
            overrides::backward_temporaries(&call, arg),
            reading(a, &formulas[f0]).1,
        ) {
            (Some(b), _) => b,
            (None, Temporaries::Counted(t)) => (t as u64).saturating_mul(y),
            (None, Temporaries::Opaque(_)) => 0,
        };
        out.peak = out
            .peak
            .max(live.saturating_add(temporaries).saturating_add(results));
        live = live.saturating_add(results);
    }
    sum_down(&mut made, &bytes, &mut live, &mut out.peak);
    input_buffers(&made, &bytes, n, &mut live, &mut out);
    out.peak = out.peak.max(live);
    out
}

/// validate_outputs: a gradient of the output's shape for a broadcast input is summed down to
/// the input's (the new sum, then the old one goes).
fn sum_down(made: &mut [Made], bytes: &[u64], live: &mut u64, peak: &mut u64) {
    for m in made.iter_mut() {
        if !m.output_shaped {
            continue;
        }
        let reduced = bytes[m.slot];
        *peak = (*peak).max(live.saturating_add(reduced));
        let old = match m.grad {
            InputGrad::New(b) => b,
            _ => 0,
        };
        *live = live.saturating_sub(old).saturating_add(reduced);
        m.grad = InputGrad::New(reduced);
    }
}

/// The InputBuffer: a slot given several gradients adds them up, in place into a new one (the
/// other freed), else into a new sum. Slots below `n` are the node's inputs, the rest its
/// parameters.
fn input_buffers(made: &[Made], bytes: &[u64], n: usize, live: &mut u64, out: &mut EngineBackward) {
    for (s, &size) in bytes.iter().enumerate() {
        let mine: Vec<InputGrad> = made
            .iter()
            .filter(|m| m.slot == s)
            .map(|m| m.grad)
            .collect();
        let g = match mine.as_slice() {
            [] => InputGrad::None,
            [one] => *one,
            many => {
                let news: Vec<u64> = many
                    .iter()
                    .filter_map(|g| match g {
                        InputGrad::New(b) => Some(*b),
                        _ => None,
                    })
                    .collect();
                if news.is_empty() {
                    out.peak = out.peak.max(live.saturating_add(size));
                    *live = live.saturating_add(size);
                } else {
                    *live = live.saturating_sub(news[1..].iter().sum::<u64>());
                }
                InputGrad::New(size)
            }
        };
        if s < n {
            out.inputs[s] = g;
        } else {
            out.params[s - n] = g;
        }
    }
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

/// What the generated backward node saves, as the simulator keeps it: `list` read for node
/// `a` (its value `y` bytes, its return's alias).
fn saved_of(a: &AtenNode, batch: u64, y: u64, alias: Alias, list: &[SavedTensor]) -> Vec<Saved> {
    let mut saved = Vec::new();
    for t in list.iter() {
        match *t {
            // An in-place op saving the argument it writes saves a clone taken before the
            // write (gen_variable_type.py's `original_self`).
            SavedTensor::Input(k) if alias == Alias::InPlace(k) => saved.push(Saved::Internal {
                what: ORIGINAL_SELF,
                bytes: y,
            }),
            SavedTensor::Input(k) => saved_input(a, k as usize, None, &mut saved),
            // Saved only when argument `g` requires grad: a parameter always does, a constant
            // never; an input's is known when the simulator runs.
            SavedTensor::InputIf(k, g) => match guard_of(a, g as usize) {
                Guard::Never => {}
                Guard::Always if alias == Alias::InPlace(k) => saved.push(Saved::Internal {
                    what: ORIGINAL_SELF,
                    bytes: y,
                }),
                Guard::Always => saved_input(a, k as usize, None, &mut saved),
                Guard::Input(j) if alias == Alias::InPlace(k) => saved.push(Saved::InternalFor {
                    what: ORIGINAL_SELF,
                    bytes: y,
                    j,
                }),
                Guard::Input(j) => saved_input(a, k as usize, Some(j), &mut saved),
            },
            SavedTensor::Output(o) if o as usize == a.item => saved.push(Saved::Out),
            SavedTensor::Output(o) => saved.push(Saved::Internal {
                what: "another output of the op, saved",
                bytes: bytes_of(a, batch, o as usize),
            }),
        }
    }
    saved
}

const ORIGINAL_SELF: &str =
    "a clone of the argument written in place, taken before the write (original_self), saved";

/// Whether the argument a saved tensor's guard names requires grad.
enum Guard {
    /// A constant (or absent): torchgen's guard is false, nothing is saved.
    Never,
    /// A parameter: always.
    Always,
    /// Node input `j`: as it does when the simulator runs.
    Input(usize),
}

fn guard_of(a: &AtenNode, g: usize) -> Guard {
    let refs = refs_of(a, g);
    if refs.iter().any(|r| matches!(r, TensorRef::Param(_))) {
        return Guard::Always;
    }
    match refs.iter().find_map(|r| match r {
        TensorRef::Input(i) => Some(*i),
        _ => None,
    }) {
        Some(j) => Guard::Input(j),
        None => Guard::Never,
    }
}

/// Saves schema argument `k`: a node input (or each input of a list) as it is, or only if node
/// input `j` requires grad (`guard`); a parameter is alive anyway.
fn saved_input(a: &AtenNode, k: usize, guard: Option<usize>, saved: &mut Vec<Saved>) {
    for r in refs_of(a, k) {
        if let TensorRef::Input(i) = r {
            saved.push(match guard {
                None => Saved::Input(i),
                Some(j) => Saved::InputFor(i, j),
            });
        }
    }
}

/// The tensors schema argument `k` names (none where it is absent or a literal).
fn refs_of(a: &AtenNode, k: usize) -> Vec<TensorRef> {
    let mut refs = Vec::new();
    if let Some(v) = a.arg(k) {
        collect(v, &mut refs);
    }
    refs
}

fn collect(v: &AtenValue, out: &mut Vec<TensorRef>) {
    match v {
        AtenValue::Input(i) => out.push(TensorRef::Input(*i)),
        AtenValue::Param(p) => out.push(TensorRef::Param(*p)),
        AtenValue::List(l) => l.iter().for_each(|x| collect(x, out)),
        _ => {}
    }
}
