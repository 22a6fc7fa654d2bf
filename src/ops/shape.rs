//! The shape rule of every op.

use super::*;
use crate::shape::{Dim, Shape};

impl Op {
    /// Infers the output shape from the input shapes. The error says what was expected and
    /// what was found.
    pub fn infer(&self, inputs: &[&Shape]) -> Result<Shape, String> {
        let x = inputs[0];
        let ck = Checks { x };
        let mut out = x.clone();
        match self {
            Op::Linear {
                in_features,
                out_features,
                ..
            } => {
                ck.expect_last(*in_features, "in_features")?;
                *out.0.last_mut().unwrap() = Dim::fixed(*out_features);
            }
            Op::Embedding { embedding_dim, .. } => out.0.push(Dim::fixed(*embedding_dim)),
            Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => {
                self.conv_shape(&ck, &mut out)?
            }
            Op::BatchNorm { .. }
            | Op::GroupNorm { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. } => self.norm_shape(&ck)?,
            Op::Activation(_) | Op::Dropout { .. } | Op::Unary(_) => {}
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
            Op::Add | Op::Mul | Op::Sub | Op::Div => {
                out = broadcast(x, inputs[1])?;
            }
            Op::Matmul => {
                let w = inputs[1];
                let r = x.rank();
                if r < 2
                    || w.rank() != r
                    || x.0[..r - 2] != w.0[..r - 2]
                    || x.0[r - 1] != w.0[r - 2]
                {
                    return Err(format!(
                        "expected [..., n, k] and [..., k, m] with the same leading dimensions, found {x} and {w}"
                    ));
                }
                out.0[r - 1] = w.0[r - 1];
            }
            Op::Slice { .. }
            | Op::Expand { .. }
            | Op::Flatten { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::SelectToken { .. } => self.view_shape(&ck, &mut out)?,
            Op::Sdpa { .. } => self.sdpa_shape(inputs, &ck, &mut out)?,
            Op::Constant { shape, .. } => out = sizes(shape),
            Op::Aten(a) => out = a.shape().clone(),
            Op::Concat { .. }
            | Op::Upsample { .. }
            | Op::MaxPool(_)
            | Op::AvgPool(_)
            | Op::AdaptiveAvgPool { .. } => self.resample_shape(inputs, &ck, &mut out)?,
            Op::CrossEntropy | Op::Mse => self.loss_shape(inputs, &ck, &mut out)?,
            Op::MultiheadAttention { .. }
            | Op::GqaAttention { .. }
            | Op::MlaAttention { .. }
            | Op::Moe { .. }
            | Op::Lstm(_)
            | Op::Gru(_)
            | Op::LearnedPosition { .. }
            | Op::Parameter { .. }
            | Op::PrependToken { .. } => self.sequence_shape(inputs, &ck, &mut out)?,
        }
        Ok(out)
    }

    /// The convolutions' shapes.
    fn conv_shape(&self, ck: &Checks, out: &mut Shape) -> Result<(), String> {
        let x = ck.x;
        match self {
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
            _ => unreachable!("conv_shape: not a convolution"),
        }
        Ok(())
    }

    /// The normalisations' shapes: their input's.
    fn norm_shape(&self, ck: &Checks) -> Result<(), String> {
        match self {
            Op::BatchNorm { num_features: c } => {
                ck.expect_rank(&[2, 3, 4])?;
                ck.expect_channels(*c)?;
            }
            Op::GroupNorm {
                num_channels: c, ..
            } => {
                ck.expect_rank(&[3, 4])?;
                ck.expect_channels(*c)?;
            }
            Op::LayerNorm {
                normalized_shape: d,
                ..
            } => ck.expect_last(*d, "normalized_shape")?,
            Op::RmsNorm { dim } => ck.expect_last(*dim, "dim")?,
            _ => unreachable!("norm_shape: not a normalisation"),
        }
        Ok(())
    }

    /// Scaled dot-product attention's shape: q's, with v's head size; the mask must broadcast
    /// to the scores.
    fn sdpa_shape(&self, inputs: &[&Shape], ck: &Checks, out: &mut Shape) -> Result<(), String> {
        let x = ck.x;
        match self {
            Op::Sdpa { causal, enable_gqa } => {
                let (k, v) = (inputs[1], inputs[2]);
                let ok = x.rank() == 4
                    && k.rank() == 4
                    && v.rank() == 4
                    && k.0[0] == x.0[0]
                    && v.0[..3] == k.0[..3]
                    && k.0[3] == x.0[3];
                if !ok {
                    return Err(format!(
                        "expected q [B, h, Tq, hd], k [B, kv, Tk, hd] and v [B, kv, Tk, hdv], found {x}, {k} and {v}"
                    ));
                }
                let heads_match = if *enable_gqa {
                    x.0[1].divided_by(k.0[1]).is_some()
                } else {
                    x.0[1] == k.0[1]
                };
                if !heads_match {
                    return Err(format!(
                        "k and v have {} heads and q {}: they must be equal, or divide q's with enable_gqa",
                        k.0[1], x.0[1]
                    ));
                }
                out.0[3] = v.0[3];
                if let Some(m) = inputs.get(3) {
                    if *causal {
                        return Err("an sdpa with a mask takes causal: false (torch refuses an explicit attn_mask with is_causal; put causality in the mask)".into());
                    }
                    let scores = [x.0[0], x.0[1], x.0[2], k.0[2]];
                    let fits = m.rank() == 4
                        && m.0
                            .iter()
                            .zip(&scores)
                            .all(|(a, b)| a == b || *a == Dim::fixed(1));
                    if !fits {
                        return Err(format!(
                            "the mask {m} must broadcast to the scores [B, h, Tq, Tk] = [{}, {}, {}, {}] (each axis equal or 1)",
                            scores[0], scores[1], scores[2], scores[3]
                        ));
                    }
                }
            }
            _ => unreachable!("sdpa_shape: not sdpa"),
        }
        Ok(())
    }

    /// Views and copies that rearrange their input: slice, expand, flatten, reshape, permute,
    /// token selection.
    fn view_shape(&self, ck: &Checks, out: &mut Shape) -> Result<(), String> {
        let x = ck.x;
        match self {
            Op::Slice { dim, start, end } => {
                let a = ck.axis(*dim, x.rank())?;
                let len = ck.fixed(x.0[a], "the sliced dimension")?;
                if *end > len {
                    return Err(format!("slice end {end} exceeds dimension {a} of {x}"));
                }
                out.0[a] = Dim::fixed(end - start);
            }
            Op::Expand { shape } => {
                *out = sizes(shape);
                let fits = out.rank() == x.rank()
                    && x.0
                        .iter()
                        .zip(&out.0)
                        .all(|(a, b)| a == b || *a == Dim::fixed(1));
                if !fits {
                    return Err(format!(
                        "cannot expand {x} to {out}: only axes of size 1 broadcast"
                    ));
                }
            }
            Op::Flatten { start_dim, end_dim } => {
                let s = ck.axis(*start_dim, x.rank())?;
                let e = ck.axis(*end_dim, x.rank())?;
                if s > e {
                    return Err(format!(
                        "start_dim {start_dim} comes after end_dim {end_dim} for shape {x}"
                    ));
                }
                let merged = x.0[s..=e].iter().fold(Dim::fixed(1), |a, d| a.times(*d));
                out.0.splice(s..=e, [merged]);
            }
            Op::Reshape { shape } => {
                let total = x.numel();
                let mut known = Dim::fixed(1);
                for d in shape {
                    match d {
                        ReshapeDim::Batch => known = known.times(Dim::batch()),
                        ReshapeDim::Fixed(n) => known = known.times(Dim::fixed(*n)),
                        ReshapeDim::Infer => {}
                    }
                }
                let inferred = if shape.contains(&ReshapeDim::Infer) {
                    total.divided_by(known)
                } else {
                    (known == total).then_some(Dim::fixed(1))
                };
                let inferred = inferred.ok_or_else(|| {
                    format!("cannot reshape {x} ({total} elements) into {shape:?}")
                })?;
                *out = Shape(
                    shape
                        .iter()
                        .map(|d| match d {
                            ReshapeDim::Batch => Dim::batch(),
                            ReshapeDim::Fixed(n) => Dim::fixed(*n),
                            ReshapeDim::Infer => inferred,
                        })
                        .collect(),
                );
            }
            Op::Permute { dims } => {
                if dims.len() != x.rank() {
                    return Err(format!(
                        "expected {} permutation entries for shape {x}, found {}",
                        x.rank(),
                        dims.len()
                    ));
                }
                let mut seen = vec![false; x.rank()];
                let mut v = Vec::with_capacity(dims.len());
                for d in dims {
                    let a = ck.axis(*d, x.rank())?;
                    if std::mem::replace(&mut seen[a], true) {
                        return Err(format!("dimension {d} appears twice in `dims`"));
                    }
                    v.push(x.0[a]);
                }
                *out = Shape(v);
            }
            Op::SelectToken { index } => {
                ck.expect_rank(&[3])?;
                let t = ck.fixed(x.0[1], "the token dimension")? as i64;
                if *index >= t || *index < -t {
                    return Err(format!("token index {index} is out of range for shape {x}"));
                }
                out.0.remove(1);
            }
            _ => unreachable!("view_shape: not a view"),
        }
        Ok(())
    }

    /// Concatenation, upsampling and the pools.
    fn resample_shape(
        &self,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match self {
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
            _ => unreachable!("resample_shape: not a concat, upsample or pool"),
        }
        Ok(())
    }

    /// The losses: a scalar.
    fn loss_shape(&self, inputs: &[&Shape], ck: &Checks, out: &mut Shape) -> Result<(), String> {
        let x = ck.x;
        match self {
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
            _ => unreachable!("loss_shape: not a loss"),
        }
        Ok(())
    }

    /// Attention, mixture of experts, recurrent layers and the sequence ops: their input's
    /// shape (a recurrent layer's last axis is its hidden size times its directions).
    fn sequence_shape(
        &self,
        inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let x = ck.x;
        match self {
            Op::MultiheadAttention {
                embed_dim: d,
                kdim,
                batch_first,
                ..
            } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*d, "embed_dim")?;
                // The batch axis: 0, or 1 in torch's default [T, B, E] layout.
                let b = usize::from(!*batch_first);
                match inputs.get(1) {
                    Some(kv)
                        if kv.rank() != 3 || kv.0[b] != x.0[b] || kv.0[2] != Dim::fixed(*kdim) =>
                    {
                        return Err(if *batch_first {
                            format!("memory must be [{}, Tk, {kdim}] (kdim), found {kv}", x.0[0])
                        } else {
                            format!(
                                "memory must be [Tk, {}, {kdim}] (batch_first: false), found {kv}",
                                x.0[1]
                            )
                        });
                    }
                    None if kdim != d => {
                        return Err(format!("kdim = {kdim} differs from embed_dim = {d}: give the memory (a second input {kdim} wide)"));
                    }
                    _ => {}
                }
            }
            Op::GqaAttention { embed_dim: d, .. }
            | Op::MlaAttention { embed_dim: d, .. }
            | Op::Moe { dim: d, .. } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*d, "model width")?;
            }
            Op::Lstm(r) | Op::Gru(r) => {
                ck.expect_rank(&[3])?;
                ck.expect_last(r.input_size, "input_size")?;
                out.0[2] = Dim::fixed(r.hidden_size.saturating_mul(r.directions()));
            }
            Op::LearnedPosition { num_positions, dim } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*dim, "dim")?;
                let t = ck.fixed(x.0[1], "the sequence dimension")?;
                if t > *num_positions {
                    return Err(format!(
                        "sequence {t} exceeds num_positions {num_positions}"
                    ));
                }
            }
            Op::Parameter { shape } => {
                if x.rank() == 0 {
                    return Err("the input must have a batch axis (its batch is what the parameter is broadcast over)".into());
                }
                *out = Shape(
                    std::iter::once(x.0[0])
                        .chain(shape.iter().map(|&d| Dim::fixed(d)))
                        .collect(),
                );
            }
            Op::PrependToken { dim } => {
                ck.expect_rank(&[3])?;
                ck.expect_last(*dim, "dim")?;
                out.0[1] = x.0[1].plus(Dim::fixed(1)).ok_or_else(|| {
                    format!("the token dimension must be a fixed size, found {x}")
                })?;
            }
            _ => unreachable!("sequence_shape: not a sequence op"),
        }
        Ok(())
    }
}

/// The checks of an op's input `x`; each error says what was expected and what was found.
struct Checks<'a> {
    x: &'a Shape,
}

impl Checks<'_> {
    /// `d` as a fixed size (`what`: which dimension, for the error).
    fn fixed(&self, d: Dim, what: &str) -> Result<u64, String> {
        let x = self.x;
        d.as_fixed()
            .ok_or_else(|| format!("{what} must be a fixed size, found {d} in {x}"))
    }

    fn expect_last(&self, want: u64, what: &str) -> Result<(), String> {
        let x = self.x;
        match x.last() {
            Some(d) if d == Dim::fixed(want) => Ok(()),
            Some(d) => Err(format!(
                "expected last dimension {want} ({what}), found {d} in input shape {x}"
            )),
            None => Err(format!(
                "expected a tensor ending in {want}, found a scalar"
            )),
        }
    }

    fn expect_rank(&self, ranks: &[usize]) -> Result<(), String> {
        let x = self.x;
        if ranks.contains(&x.rank()) {
            Ok(())
        } else {
            Err(format!(
                "expected an input of rank {}, found shape {x}",
                ranks
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        }
    }

    fn expect_channels(&self, want: u64) -> Result<(), String> {
        let x = self.x;
        if x.rank() >= 2 && x.0[1] == Dim::fixed(want) {
            Ok(())
        } else {
            Err(format!(
                "expected {want} channels at dimension 1, found shape {x}"
            ))
        }
    }

    fn axis(&self, dim: i64, rank: usize) -> Result<usize, String> {
        let x = self.x;
        let r = rank as i64;
        let a = if dim < 0 { dim + r } else { dim };
        if (0..r).contains(&a) {
            Ok(a as usize)
        } else {
            Err(format!("dimension {dim} is out of range for shape {x}"))
        }
    }

    fn spatial(&self, len: Dim, k: u64, s: u64, p: u64) -> Result<Dim, String> {
        let x = self.x;
        let len = self.fixed(len, "a spatial dimension")?;
        let padded = len.saturating_add(p.saturating_mul(2));
        if padded < k {
            return Err(format!(
                "kernel {k} is larger than the padded input {padded} in shape {x}"
            ));
        }
        Ok(Dim::fixed((padded - k) / s + 1))
    }
}

/// A shape of `"B"` entries and sizes.
fn sizes(shape: &[ReshapeDim]) -> Shape {
    Shape(
        shape
            .iter()
            .map(|d| match d {
                ReshapeDim::Batch => Dim::batch(),
                ReshapeDim::Fixed(n) => Dim::fixed(*n),
                ReshapeDim::Infer => Dim::fixed(1),
            })
            .collect(),
    )
}

/// The shape of two operands broadcast together (numpy's rule: aligned from the last axis,
/// each pair equal or one of them 1).
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let r = a.rank().max(b.rank());
    let at = |s: &Shape, i: usize| -> Dim {
        let pad = r - s.rank();
        if i < pad {
            Dim::fixed(1)
        } else {
            s.0[i - pad]
        }
    };
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let (x, y) = (at(a, i), at(b, i));
        out.push(if x == y || y == Dim::fixed(1) {
            x
        } else if x == Dim::fixed(1) {
            y
        } else {
            return Err(format!(
                "the inputs' shapes {a} and {b} do not broadcast (dimension {i}: {x} and {y})"
            ));
        });
    }
    Ok(Shape(out))
}
