//! Override entries for the linear algebra ops (LAPACK workspaces, pivots, the `linalg_*`
//! backward helpers): see [`super`]. Sorted by op name.

#[allow(unused_imports)]
use super::{wrap, Call, Override};

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[];
