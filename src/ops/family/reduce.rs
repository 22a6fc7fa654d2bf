//! `softmax` and `mean`: every fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::*;

/// Attributes of `softmax`.
pub(super) fn parse_softmax(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Softmax { dim: a.int("dim")? })
}

/// Attributes of `mean`.
pub(super) fn parse_mean(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Mean {
        dim: a.int("dim")?,
        keepdim: a.flag_or("keepdim", false)?,
    })
}

/// `softmax` and `mean`: along one axis.
pub(super) struct ReduceFamily;

impl Family for ReduceFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Mean { dim, keepdim } => {
                let a = ck.axis(*dim, x.rank())?;
                if *keepdim {
                    out.0[a] = Dim::fixed(1);
                } else {
                    out.0.remove(a);
                }
            }
            Op::Softmax { dim } => {
                ck.axis(*dim, x.rank())?;
            }
            _ => unreachable!("not a softmax or mean"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}

    fn cpu_rule(&self, op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        let y = s.y();
        let one = vec![Grad::New];
        use Source::*;
        match op {
            Op::Mean { .. } => OpRule::new(Output::New(y), vec![], one, Measured)
                .note("saves nothing (mean_backward needs only sizes); backward expands the gradient and divides it: one new input-sized buffer"),
            Op::Softmax { .. } => OpRule::new(Output::New(y), vec![Saved::Out], one, Measured)
                .contiguous_input()
                .note("saves its output"),
            _ => unreachable!("not a softmax or mean"),
        }
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        let (n_in, n_out) = (s.n_in(0), s.n_out());
        let ex = s.e_in(0);
        use Saved::*;
        use Source::*;
        match op {
            Op::Softmax { .. } => {
                let t = if ex == F32 { 0 } else { n_in * F32 };
                let grad = if ex == F32 {
                    Grad::New
                } else {
                    Grad::ViaCast(n_in * F32)
                };
                OpRule::new(Output::New(n_out * F32), vec![Out], vec![grad], TorchSource)
                .fwd(t)
                .contiguous_input()
                .note("fp32_set_opt_dtype: a bf16 input is cast to a float32 copy (held while it runs); saves its float32 output")
            }
            _ => as_on_cpu(s, call, false),
        }
    }

    /// Softmax: fp32_set_opt_dtype.
    fn autocast_output(&self, op: &Op, input: u64, _promoted: u64) -> u64 {
        match op {
            Op::Softmax { .. } => F32,
            _ => input,
        }
    }
}
