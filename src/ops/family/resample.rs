//! Concatenation, upsampling and the pools (`concat`, `upsample`, `max_pool`, `avg_pool`,
//! `adaptive_avg_pool`): every fact of each.

use super::Family;
use crate::graph::Graph;
use crate::ops::attributes::{pool, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::*;

/// Attributes of `concat`.
pub(super) fn parse_concat(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Concat { dim: a.int("dim")? })
}

/// Attributes of `upsample`.
pub(super) fn parse_upsample(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Upsample {
        scale_factor: a.size("scale_factor")?,
    })
}

/// Attributes of `max_pool`.
pub(super) fn parse_max_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::MaxPool(pool(a)?))
}

/// Attributes of `avg_pool`.
pub(super) fn parse_avg_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::AvgPool(pool(a)?))
}

/// Attributes of `adaptive_avg_pool`.
pub(super) fn parse_adaptive_avg_pool(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::AdaptiveAvgPool {
        output_size: a.size("output_size")?,
    })
}

/// Concatenation, upsampling and the pools.
pub(super) struct ResampleFamily;

impl Family for ResampleFamily {
    fn infer(
        &self,
        op: &Op,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Concat { dim } => {
                let a = ck.axis(*dim, x.rank())?;
                for other in &inputs[1..] {
                    let same_rest = other.rank() == x.rank()
                        && (0..x.rank()).all(|i| i == a || other.0[i] == x.0[i]);
                    if !same_rest {
                        return Err(format!(
                            "inputs must agree on every dimension but {a}: expected {x}, found {other}"
                        ));
                    }
                    out.0[a] = out.0[a].plus(other.0[a]).ok_or_else(|| {
                        format!(
                            "cannot concatenate {} and {} along dimension {a}",
                            out.0[a], other.0[a]
                        )
                    })?;
                }
            }
            Op::Upsample { scale_factor } => {
                ck.expect_rank(&[4])?;
                for i in 2..4 {
                    out.0[i] = x.0[i].times(Dim::fixed(*scale_factor));
                }
            }
            Op::MaxPool(p) | Op::AvgPool(p) => {
                ck.expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = ck.spatial(x.0[i], p.kernel_size, p.stride, p.padding)?;
                }
            }
            Op::AdaptiveAvgPool { output_size } => {
                ck.expect_rank(&[3, 4])?;
                for i in 2..x.rank() {
                    out.0[i] = Dim::fixed(*output_size);
                }
            }
            _ => unreachable!("not a concat, upsample or pool"),
        }
        Ok(())
    }

    /// No trainable parameter.
    fn parameter_tensors(&self, _op: &Op, _p: &mut Vec<Vec<u64>>) {}

    /// A concat's gradient slices along a non-leading axis are strided.
    fn gradient_contiguous(
        &self,
        op: &Op,
        _output_contiguous: Option<bool>,
        contig: bool,
        rank: usize,
    ) -> bool {
        match op {
            Op::Concat { dim } => {
                let r = rank as i64;
                (if *dim < 0 { dim + r } else { *dim }) == 0 && contig
            }
            _ => contig,
        }
    }

    fn cpu_rule(&self, op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        match op {
            Op::Concat { .. } => OpRule::new(
                Output::New(s.y()),
                vec![],
                vec![Grad::OfOutput; s.node.inputs.len()],
                Source::Measured,
            )
            .note("a new buffer; saves nothing; backward hands out slices (views) of its gradient"),
            _ => pool_rule(s),
        }
    }

    fn cuda_rule(&self, op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        let (n_in, n_out) = (s.n_in(0), s.n_out());
        let ex = s.e_in(0);
        use Source::*;
        match op {
            Op::Upsample { .. } => {
                let t = if ex == F32 { 0 } else { n_in * F32 };
                let grad = if ex == F32 {
                    Grad::New
                } else {
                    Grad::ViaCast(n_in * F32)
                };
                OpRule::new(Output::New(n_out * F32), vec![], vec![grad], TorchSource)
                .fwd(t)
                .note("fp32 policy: a bf16 input is cast to a float32 copy while it runs; saves nothing; float32 output")
            }
            _ => as_on_cpu(s, call, matches!(op, Op::Concat { .. })),
        }
    }

    /// Upsampling: the fp32 policy; a concat's inputs promoted.
    fn autocast_output(&self, op: &Op, input: u64, promoted: u64) -> u64 {
        match op {
            Op::Upsample { .. } => F32,
            Op::Concat { .. } => promoted,
            _ => input,
        }
    }
}

/// Resampling and pooling: upsample, max, average and adaptive average pools.
fn pool_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let batch = s.batch;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    match &s.node.op {
        Op::Upsample { .. } => {
            OpRule::new(Output::New(y), vec![], one, Measured).note("nearest: saves nothing")
        }
        Op::MaxPool(_) => OpRule::new(
            Output::New(y),
            vec![
                Input(0),
                Internal {
                    what: "indices (int64)",
                    bytes: node.output.numel_at(batch) * 8,
                },
            ],
            one,
            Measured,
        )
        .note("saves its input plus int64 indices of the output's size"),
        Op::AvgPool(_) => {
            OpRule::new(Output::New(y), vec![Input(0)], one, Measured).note("saves its input")
        }
        Op::AdaptiveAvgPool { output_size: 1 } => OpRule::new(
            Output::New(y),
            vec![],
            one,
            Measured,
        )
        .fwd(x.saturating_sub(y))
        .note("output 1 runs as mean(): saves nothing; forward holds an input-sized temporary"),
        Op::AdaptiveAvgPool { .. } => {
            OpRule::new(Output::New(y), vec![Input(0)], one, TorchSource).note("saves its input")
        }
        _ => unreachable!("pool_rule: not a pool"),
    }
}
