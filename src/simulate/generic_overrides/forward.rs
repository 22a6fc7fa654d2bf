//! Override entries for the forward kernel scratch of CPU kernels (LAPACK, upsample, indexing):
//! see [`super`]. Sorted by op name.

#[allow(unused_imports)]
use super::{wrap, Call, Override};

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[];
