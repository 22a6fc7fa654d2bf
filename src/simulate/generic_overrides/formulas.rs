//! Override entries for gradient formulas and reductions (`FunctionsManual.cpp` helpers,
//! norms, cumulative ops, pointwise ops): see [`super`]. Sorted by op name.

#[allow(unused_imports)]
use super::{wrap, Call, Override};

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[];
