//! The losses (`cross_entropy`, `mse`): every fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::Shape;
use crate::simulate::cuda::*;
use crate::simulate::rules::*;

/// Attributes of `cross_entropy`.
pub(super) fn parse_cross_entropy(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::CrossEntropy)
}

/// Attributes of `mse`.
pub(super) fn parse_mse(_a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Mse)
}

/// The losses: `cross_entropy` and `mse`.
pub(super) struct LossFamily;

impl Family for LossFamily {
    /// A scalar.
    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::CrossEntropy => {
                let labels = inputs[1];
                let mut want = x.clone();
                want.0.pop();
                if x.rank() < 2 || *labels != want {
                    return Err(format!(
                        "labels must have the logits' shape without the class axis: logits {x}, expected labels {want}, found {labels}"
                    ));
                }
                *out = Shape::default();
            }
            Op::Mse => {
                if inputs[1] != x {
                    return Err(format!(
                        "target must match the prediction: expected {x}, found {}",
                        inputs[1]
                    ));
                }
                *out = Shape::default();
            }
            _ => unreachable!("not a loss"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}

    /// Cross-entropy's labels.
    fn wants_int_input(&self, op: &Op, k: usize) -> bool {
        k == 1 && matches!(op, Op::CrossEntropy)
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        loss_rule(s)
    }

    /// Float32 ops under autocast (the fp32 and fp32_set_opt_dtype policies), with cross
    /// entropy's log_softmax left in bf16.
    fn cuda_rule(&self, op: &Op, s: &Sizes, _call: &CudaCall) -> OpRule {
        let n_in = s.n_in(0);
        let ex = s.e_in(0);
        use Saved::*;
        use Source::*;
        match op {
        // Revised after the first comparison with the GPU rows (the frozen table had the
        // log_softmax in float32): cross_entropy_loss is CompositeImplicitAutograd
        // (LossNLL.cpp, `cross_entropy_loss_symint`) and calls
        // `log_softmax(self, class_dim, self.scalar_type())`: the dtype is given, so autocast's
        // fp32_set_opt_dtype leaves it bf16; then nll_loss (fp32 policy) casts the bf16
        // log-probabilities to a float32 copy, which nll_loss_forward saves as `self`.
        Op::CrossEntropy if ex == BF16 => OpRule::new(
            Output::New(4),
            vec![
                Internal { what: "log_softmax output (bf16 N x V)", bytes: n_in * BF16 },
                Internal { what: "float32 cast of the log-probabilities (saved by nll_loss)", bytes: n_in * F32 },
                Internal { what: "total_weight", bytes: 4 },
            ],
            vec![Grad::New, Grad::None],
            TorchSource,
        )
        .bwd(n_in * BF16)
        .contiguous_input()
        .note("cross_entropy_loss: log_softmax in the logits' bf16 (dtype given explicitly, so autocast leaves it), then nll_loss (fp32 policy) on a float32 copy it saves; backward: nll_loss's float32 N x V gradient, cast back to bf16, log_softmax's bf16 gradient (revised after the GPU comparison)"),
        Op::CrossEntropy => {
            let lsm = n_in * F32;
            let t = if ex == F32 { 0 } else { n_in * F32 };
            let grad = if ex == F32 { Grad::New } else { Grad::ViaCast(lsm) };
            OpRule::new(
                Output::New(4),
                vec![Internal { what: "log_softmax output (float32 N x V)", bytes: lsm }, Internal { what: "total_weight", bytes: 4 }],
                vec![grad, Grad::None],
                TorchSource,
            )
            .fwd(t)
            .bwd(lsm)
            .contiguous_input()
            .note("log_softmax (fp32_set_opt_dtype: bf16 logits cast to a float32 copy) + nll_loss (fp32): saves the float32 N x V log-softmax; backward holds it, nll_loss's and log_softmax's float32 N x V gradients, then casts to bf16")
        }
        Op::Mse => {
            let (x_saved, grad) = fp32_cast(n_in, ex);
            OpRule::new(
                Output::New(n_in * F32),
                vec![x_saved, Input(1)],
                vec![grad, Grad::New],
                Calibrated("calibrated on sim-mse-only, sim-mse-wide (CPU; the input-sized loss buffer)"),
            )
            .fwd(n_in * F32 + 12)
            .note("fp32 policy: a bf16 prediction is cast to float32 (saved); as on CPU, the loss keeps an input-sized buffer until it is dropped")
        }
            _ => unreachable!("not a loss"),
        }
    }

    /// Float32 losses.
    fn autocast_output(&self, _op: &Op, _input: u64, _promoted: u64) -> u64 {
        F32
    }
}

/// Losses: cross-entropy and mean squared error.
fn loss_rule(s: &Sizes) -> OpRule {
    let x = s.x(0);
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::CrossEntropy => {
            let logits = x;
            OpRule::new(
                Output::New(4),
                vec![Internal { what: "log_softmax output", bytes: logits }, Internal { what: "total_weight", bytes: 4 }],
                vec![Grad::New, Grad::None],
                Measured,
            )
            .bwd(logits)
            .contiguous_input()
            .note("log_softmax + nll_loss: saves the N x V log-softmax output; backward holds it, nll_loss's N x V gradient and log_softmax's N x V gradient at once (3 N V)")
        }
        Op::Mse => OpRule::new(
            Output::New(x),
            vec![Input(0), Input(1)],
            vec![Grad::New, Grad::New],
            Calibrated("calibrated on sim-mse-only, sim-mse-wide"),
        )
        .fwd(x + 12)
        .note("saves prediction and target; the loss keeps an input-sized buffer alive until it is dropped; forward holds one more input-sized temporary"),
        _ => unreachable!("loss_rule: not a loss"),
    }
}
