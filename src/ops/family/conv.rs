//! The convolutions (`conv1d`, `conv2d`, `conv_transpose2d`): every fact of each.

use super::Family;
use super::TextbookRole;
use crate::graph::Graph;
use crate::ops::attributes::{conv, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::*;

/// Attributes of `conv1d`.
pub(super) fn parse_conv1d(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Conv1d(conv(a)?))
}

/// Attributes of `conv2d`.
pub(super) fn parse_conv2d(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Conv2d(conv(a)?))
}

/// Attributes of `conv_transpose2d`.
pub(super) fn parse_conv_transpose2d(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::ConvTranspose2d(ConvTranspose {
        in_channels: a.size("in_channels")?,
        out_channels: a.size("out_channels")?,
        kernel_size: a.size("kernel_size")?,
        stride: a.size_or("stride", 1)?,
        padding: a.count_or("padding", 0)?,
        output_padding: a.count_or("output_padding", 0)?,
        bias: a.flag_or("bias", true)?,
    }))
}

/// `conv1d`, `conv2d` and `conv_transpose2d`.
pub(super) struct ConvFamily;

impl Family for ConvFamily {
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match op {
            Op::Conv1d(c) => {
                ck.expect_rank(&[3])?;
                ck.expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                out.0[2] = ck.spatial(x.0[2], c.kernel_size, c.stride, c.padding)?;
            }
            Op::Conv2d(c) => {
                ck.expect_rank(&[4])?;
                ck.expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                for i in 2..4 {
                    out.0[i] = ck.spatial(x.0[i], c.kernel_size, c.stride, c.padding)?;
                }
            }
            Op::ConvTranspose2d(c) => {
                ck.expect_rank(&[4])?;
                ck.expect_channels(c.in_channels)?;
                out.0[1] = Dim::fixed(c.out_channels);
                for i in 2..4 {
                    let len = ck.fixed(x.0[i], "a spatial dimension")?;
                    let full = (len - 1)
                        .saturating_mul(c.stride)
                        .saturating_add(c.kernel_size)
                        .saturating_add(c.output_padding);
                    if full <= c.padding.saturating_mul(2) {
                        return Err(format!(
                            "padding {} leaves no output for shape {x}",
                            c.padding
                        ));
                    }
                    out.0[i] = Dim::fixed(full - c.padding.saturating_mul(2));
                }
            }
            _ => unreachable!("not a convolution"),
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        match op {
            Op::Conv1d(c) => {
                p.push(vec![
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            Op::Conv2d(c) => {
                p.push(vec![
                    c.out_channels,
                    c.in_channels / c.groups,
                    c.kernel_size,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            Op::ConvTranspose2d(c) => {
                p.push(vec![
                    c.in_channels,
                    c.out_channels,
                    c.kernel_size,
                    c.kernel_size,
                ]);
                if c.bias {
                    p.push(vec![c.out_channels]);
                }
            }
            _ => unreachable!("not a convolution"),
        }
    }

    /// A 2-d convolution is covered (a ViT's patch embedding); the others are no part of a
    /// transformer block.
    fn textbook(&self, op: &Op) -> TextbookRole {
        match op {
            Op::Conv2d(_) => TextbookRole::Covered,
            _ => TextbookRole::NotTransformer,
        }
    }

    fn cpu_rule(&self, _op: &Op, graph: &Graph, s: &Sizes) -> OpRule {
        conv_rule(graph, s)
    }

    fn cuda_rule(&self, _op: &Op, s: &Sizes, call: &CudaCall) -> OpRule {
        use Saved::*;
        let (n_in, n_out, ex) = (s.n_in(0), s.n_out(), call.ex);
        let (saved, grad) = cast_saved("bf16 cast of the input (autocast)", n_in, ex);
        let saved = match saved {
            InputContiguous(_) => Input(0),
            other => other,
        };
        let mut r = OpRule::new(Output::New(n_out * BF16), vec![saved], vec![grad], Source::TorchSource)
            .note("lower_precision_fp (cuDNN): saves its bf16 input and the bf16 weight copy; cuDNN's workspace is chosen at run time and not counted");
        r.autocast = Some(CopySaved::Always);
        if !call.input_grad {
            r.grads = vec![Grad::None];
        }
        r
    }

    fn runs_in_bf16(&self, _op: &Op) -> bool {
        true
    }
}

/// Convolutions (oneDNN on CPU): saved input, reorders, padding of narrow heads.
fn conv_rule(graph: &Graph, s: &Sizes) -> OpRule {
    let node = s.node;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let w: u64 = node
        .op
        .parameter_tensors()
        .first()
        .map_or(0, |t| t.iter().product::<u64>() * 4);
    // A conv with fewer than 8 output channels (a segmentation head) has its output
    // padded to 16 channels by oneDNN: (16 / C - 1) more outputs in forward, 16 / C in
    // backward (measured with C = 2), and its input's channels to a multiple of 16.
    let out_c = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) => c.out_channels,
        Op::ConvTranspose2d(c) => c.out_channels,
        _ => 16,
    };
    let in_c = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) => c.in_channels,
        Op::ConvTranspose2d(c) => c.in_channels,
        _ => 16,
    };
    // oneDNN's "first convolution" (`is_1stconv` in `jit_avx512_common_conv_kernel.cpp`: fewer
    // than 16 input channels, one group, on avx512_core) reads its input in the plain layout;
    // other inputs are reordered into 16-channel blocks.
    let first_conv = in_c < 16
        && match &node.op {
            Op::Conv1d(c) | Op::Conv2d(c) => c.groups == 1,
            _ => false,
        };
    let (pad_fwd, pad_bwd) = if out_c < 8 {
        // Its input is reordered with channels padded to a multiple of 16 too
        // (measured: 64 and 24 input channels), unless oneDNN reads it plain.
        let pad_in = if first_conv {
            0
        } else {
            x * in_c.div_ceil(16) * 16 / in_c - x
        };
        (y * 16 / out_c - y + pad_in, y * 16 / out_c + pad_in)
    } else {
        (0, 0)
    };
    let bwd = (x + y).max(w)
        + pad_bwd
        // conv1d runs as a 2-d conv on an unsqueezed weight: one more weight-sized
        // buffer in backward (measured on stride-1 conv1d).
        + if matches!(node.op, Op::Conv1d(_)) { w } else { 0 };
    // Strided dense convs (depthwise ones measured exact without this).
    let stride = match &node.op {
        Op::Conv1d(c) | Op::Conv2d(c) if c.groups == 1 => c.stride,
        _ => 1,
    };
    // The input's gradient is computed unless the input is data.
    let input_grad = graph.inputs.iter().all(|i| i.name != node.inputs[0]);
    let mut r = OpRule::new(
        Output::New(y),
        vec![Input(0)],
        one,
        Calibrated("calibrated on sim-seg-head, sim-conv1d-s1, sim-conv1d-s2, sim-conv2d-s2"),
    )
        .contiguous_input()
        .fwd(x + w + pad_fwd)
        .bwd(bwd)
        .note("saves its input; oneDNN holds input- and weight-sized reorders in forward, and the larger of input+output and the weight in backward; a strided conv's input gradient holds three input-sized buffers before the weight gradient exists (10-30 KB of fixed scratch on small convs not counted)");
    if stride > 1 && input_grad {
        // Measured on stride-2 conv1d and conv2d: the input-gradient stage (the
        // gradient and two input-sized buffers) or the weight stage, whichever is higher.
        let peak = (3 * x).max(x + w + bwd);
        r.backward_peak = Some(BackwardPeak {
            freed: peak,
            held: peak,
            params: vec![],
        });
    }
    r
}
