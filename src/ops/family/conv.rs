//! The convolutions (`conv1d`, `conv2d`, `conv_transpose2d`): every fact of each.

use super::Family;
use crate::ops::attributes::{conv, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};

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
}
