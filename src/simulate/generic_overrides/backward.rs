//! Override entries for the backward helpers (`FunctionsManual.cpp`) and backward kernels:
//! see [`super`]. Sorted by op name.

#[allow(unused_imports)]
use super::{wrap, Call, Override};

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[];
