//! The shape rule: each family's ([`super::family`]), and the checks and helpers they share.

use super::*;
use crate::shape::{Dim, Shape};

impl Op {
    /// Infers the output shape from the input shapes (its family's rule). The error says what
    /// was expected and what was found.
    pub fn infer(&self, inputs: &[&Shape]) -> Result<Shape, String> {
        let x = inputs[0];
        let ck = Checks { x };
        let mut out = x.clone();
        self.family().infer(self, inputs, &ck, &mut out)?;
        Ok(out)
    }
}

/// The checks of an op's input `x`; each error says what was expected and what was found.
pub(crate) struct Checks<'a> {
    pub(super) x: &'a Shape,
}

impl Checks<'_> {
    /// `d` as a fixed size (`what`: which dimension, for the error).
    pub(super) fn fixed(&self, d: Dim, what: &str) -> Result<u64, String> {
        let x = self.x;
        d.as_fixed()
            .ok_or_else(|| format!("{what} must be a fixed size, found {d} in {x}"))
    }

    pub(super) fn expect_last(&self, want: u64, what: &str) -> Result<(), String> {
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

    pub(super) fn expect_rank(&self, ranks: &[usize]) -> Result<(), String> {
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

    pub(super) fn expect_channels(&self, want: u64) -> Result<(), String> {
        let x = self.x;
        if x.rank() >= 2 && x.0[1] == Dim::fixed(want) {
            Ok(())
        } else {
            Err(format!(
                "expected {want} channels at dimension 1, found shape {x}"
            ))
        }
    }

    pub(super) fn axis(&self, dim: i64, rank: usize) -> Result<usize, String> {
        let x = self.x;
        let r = rank as i64;
        let a = if dim < 0 { dim + r } else { dim };
        if (0..r).contains(&a) {
            Ok(a as usize)
        } else {
            Err(format!("dimension {dim} is out of range for shape {x}"))
        }
    }

    pub(super) fn spatial(&self, len: Dim, k: u64, s: u64, p: u64) -> Result<Dim, String> {
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
pub(super) fn sizes(shape: &[ReshapeDim]) -> Shape {
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
