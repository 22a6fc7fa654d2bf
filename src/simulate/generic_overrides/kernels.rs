//! Override entries for CPU kernels' scratch and backward helpers of indexing, scatter,
//! upsample, masked, sparse, fft, loss and copy ops: see [`super`]. Sorted by op name.

#[allow(unused_imports)]
use super::{wrap, Call, Override};

/// The table: one entry per op, sorted by name.
pub static OVERRIDES: &[Override] = &[];
