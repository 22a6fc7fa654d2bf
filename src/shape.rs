//! Symbolic shapes. A dimension is `coef x B^pow`: a fixed size (`pow = 0`), the batch axis `B`,
//! or a product of both after a reshape (`8B`). Shapes are inferred once per graph and evaluated
//! at a batch when features are computed.

use serde::{Serialize, Serializer};
use std::fmt;

/// One dimension: `coef x B^pow`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub struct Dim {
    pub coef: u64,
    pub pow: u32,
}

impl Dim {
    /// A fixed size.
    pub const fn fixed(n: u64) -> Self {
        Dim { coef: n, pow: 0 }
    }

    /// The batch axis `B`.
    pub const fn batch() -> Self {
        Dim { coef: 1, pow: 1 }
    }

    /// The fixed size, if the dimension does not depend on the batch.
    pub fn as_fixed(self) -> Option<u64> {
        (self.pow == 0).then_some(self.coef)
    }

    /// The size at a given batch.
    pub fn at(self, batch: u64) -> u64 {
        self.coef.saturating_mul(batch.saturating_pow(self.pow))
    }

    /// Product of two dimensions.
    pub fn times(self, other: Dim) -> Dim {
        Dim {
            coef: self.coef.saturating_mul(other.coef),
            pow: self.pow.saturating_add(other.pow),
        }
    }

    /// Sum of two dimensions of the same kind (both fixed, or both the same power of `B`).
    pub fn plus(self, other: Dim) -> Option<Dim> {
        (self.pow == other.pow).then(|| Dim {
            coef: self.coef.saturating_add(other.coef),
            pow: self.pow,
        })
    }

    /// Exact quotient, if it exists.
    pub fn divided_by(self, other: Dim) -> Option<Dim> {
        if other.coef == 0 || other.pow > self.pow || !self.coef.is_multiple_of(other.coef) {
            return None;
        }
        Some(Dim {
            coef: self.coef / other.coef,
            pow: self.pow - other.pow,
        })
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.coef, self.pow) {
            (c, 0) => write!(f, "{c}"),
            (1, 1) => write!(f, "B"),
            (1, p) => write!(f, "B^{p}"),
            (c, 1) => write!(f, "{c}B"),
            (c, p) => write!(f, "{c}B^{p}"),
        }
    }
}

impl Serialize for Dim {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_fixed() {
            Some(n) => s.serialize_u64(n),
            None => s.serialize_str(&self.to_string()),
        }
    }
}

/// A tensor shape.
#[derive(Clone, PartialEq, Eq, Debug, Hash, Default, Serialize)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements, symbolically.
    pub fn numel(&self) -> Dim {
        self.0.iter().fold(Dim::fixed(1), |acc, d| acc.times(*d))
    }

    /// Number of elements at a batch.
    pub fn numel_at(&self, batch: u64) -> u64 {
        self.0
            .iter()
            .fold(1u64, |acc, d| acc.saturating_mul(d.at(batch)))
    }

    /// Last dimension, if any.
    pub fn last(&self) -> Option<Dim> {
        self.0.last().copied()
    }

    /// True when some dimension depends on the batch.
    pub fn has_batch(&self) -> bool {
        self.0.iter().any(|d| d.pow > 0)
    }

    /// Sizes at a batch.
    pub fn at(&self, batch: u64) -> Vec<u64> {
        self.0.iter().map(|d| d.at(batch)).collect()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_multiply_divide_and_print() {
        let bt = Dim::batch().times(Dim::fixed(512));
        assert_eq!(bt.to_string(), "512B");
        assert_eq!(bt.at(8), 4096);
        assert_eq!(bt.divided_by(Dim::fixed(512)), Some(Dim::batch()));
        assert_eq!(bt.divided_by(Dim::fixed(3)), None);
        assert_eq!(Dim::fixed(3).divided_by(Dim::batch()), None);
        let s = Shape(vec![Dim::batch(), Dim::fixed(4), Dim::fixed(5)]);
        assert_eq!(s.numel_at(2), 40);
        assert_eq!(s.to_string(), "[B, 4, 5]");
    }
}
