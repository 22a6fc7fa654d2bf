//! The elementwise ops (the activations, `dropout`, `add`, `mul`, `sub`, `div`, `unary`): every
//! fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::{broadcast, Checks};
use crate::ops::*;
use crate::shape::Shape;
use crate::simulate::cuda::*;
use crate::simulate::rules::*;
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

    /// A binary op broadcasts only tensors made from `constant` nodes.
    fn broadcasts_only_constants(&self, op: &Op) -> bool {
        matches!(op, Op::Add | Op::Mul | Op::Sub | Op::Div)
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        elementwise_rule(s)
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        let (n_in, n_out, ex) = (s.n_in(0), s.n_out(), call.ex);
        match op {
            Op::Dropout { p } if *p > 0.0 => OpRule::new(
                Output::New(n_out * ex),
                vec![Saved::Internal {
                    what: "bool mask (native_dropout)",
                    bytes: n_in,
                }],
                vec![Grad::New],
                Source::TorchSource,
            )
            .keeps_layout()
            .note("CUDA native_dropout: saves a bool mask (1 byte per element)"),
            Op::Unary(f) if fp32_listed(*f) && ex != F32 => {
                unary_fp32(s, *f, call.graph, call.k, call.batch, call.values)
            }
            _ => as_on_cpu(s, call, matches!(op, Op::Add | Op::Sub)),
        }
    }

    /// autocast's fp32 list (AT_FORALL_FP32: exp, log, reciprocal, rsqrt, pow); a binary op's
    /// inputs promoted.
    fn autocast_output(&self, op: &Op, input: u64, promoted: u64) -> u64 {
        match op {
            Op::Unary(f) if fp32_listed(*f) => F32,
            Op::Add | Op::Mul | Op::Sub | Op::Div => promoted,
            _ => input,
        }
    }
}

/// Elementwise ops: activations, unary functions, dropout and binary arithmetic.
fn elementwise_rule(s: &Sizes) -> OpRule {
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::Activation(Activation::Relu) => {
            OpRule::new(Output::New(y), vec![Out], one, Measured).keeps_layout().note("saves its output")
        }
        Op::Activation(Activation::Tanh) => {
            OpRule::new(Output::New(y), vec![Out], one, Measured).keeps_layout().note("saves its output")
        }
        Op::Activation(Activation::Gelu) | Op::Activation(Activation::Silu) => {
            OpRule::new(Output::New(y), vec![Input(0)], one, Measured).keeps_layout().note("saves its input")
        }
        Op::Activation(Activation::GeluTanh) => OpRule::new(Output::New(y), vec![Input(0)], one, Measured)
            .keeps_layout()
            .note("gelu(approximate=\"tanh\"): one fused kernel each way, saves its input (derivatives.yaml `gelu_backward(grad, self, approximate)`)"),
        Op::Unary(f) => unary(*f, x, y),
        Op::Dropout { p } if *p == 0.0 => OpRule::new(Output::View, vec![], vec![Grad::OfOutput], TorchSource)
            .keeps_layout()
            .note("p = 0 returns its input: no new tensor"),
        Op::Dropout { .. } => OpRule::new(
            Output::New(y),
            vec![Internal { what: "noise (float32, input size)", bytes: x }],
            one,
            Measured,
        )
        .keeps_layout()
        .note("CPU has no fused dropout: saves a float32 noise tensor of the input's size (input * noise)"),
        Op::Add => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput, Grad::OfOutput], Measured)
            .keeps_layout()
            .note("saves nothing; backward passes its gradient to both inputs without a copy"),
        Op::Mul => OpRule::new(Output::New(y), vec![InputFor(0, 1), InputFor(1, 0)], vec![Grad::New, Grad::New], Measured)
            .keeps_layout()
            .note("saves each factor for the other's gradient"),
        Op::Sub => OpRule::new(Output::New(y), vec![], vec![Grad::OfOutput, Grad::New], Measured)
            .keeps_layout()
            .note("saves nothing (derivatives.yaml `sub.Tensor`: self `grad`, other `-grad`): the first input's gradient is the incoming one, the second's a new negated copy"),
        Op::Div => OpRule::new(Output::New(y), vec![InputFor(0, 1), Input(1)], vec![Grad::New, Grad::New], Measured)
            .keeps_layout()
            .bwd(2 * x)
            .note("saves both (derivatives.yaml `div.Tensor`: self `grad / other`, other `-grad * ((self / other) / other)`); backward holds two input-sized temporaries beside the gradients"),
        _ => unreachable!("elementwise_rule: not an elementwise op"),
    }
}
