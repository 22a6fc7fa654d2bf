//! The simulator's reserved peak (the CUDA caching-allocator replay) against the rows' measured
//! reserved peak, per precision profile: reported apart from the allocated methods, which the
//! planner and the card checks use. Only rows where both exist count (completed CUDA rows).

use super::Dataset;
use crate::features::Precision;
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::BTreeMap;

/// Rows measured at this many bytes or more are the ones the accuracy targets speak of.
pub const LARGE_ROW_BYTES: u64 = 1_000_000_000;

/// |simulated - measured| / measured over a profile's rows (shares: 0.05 is 5%).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservedSummary {
    /// Completed rows with a measured and a simulated reserved peak.
    pub rows: u64,
    pub median_abs_rel_error: Option<f64>,
    pub max_abs_rel_error: Option<f64>,
    /// The same over rows whose measured allocated peak is at least 1 GB.
    pub large_rows: u64,
    pub large_median_abs_rel_error: Option<f64>,
    pub large_max_abs_rel_error: Option<f64>,
}

fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The summary of every profile with at least one such row (usable rows only: a row whose
/// graph changed since it was measured does not count).
pub fn simulated_reserved(ds: &Dataset) -> BTreeMap<Precision, ReservedSummary> {
    let mut errs: BTreeMap<Precision, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in &ds.rows {
        if r.status != RunStatus::Completed || r.graph_changed || r.graph_mismatch {
            continue;
        }
        let (Some(m), Some(s)) = (r.measured_reserved_bytes, r.simulated_reserved_bytes) else {
            continue;
        };
        if m == 0 {
            continue;
        }
        let e = (s as f64 - m as f64).abs() / m as f64;
        let slot = errs.entry(r.precision).or_default();
        slot.0.push(e);
        if r.measured_bytes.unwrap_or(0) >= LARGE_ROW_BYTES {
            slot.1.push(e);
        }
    }
    errs.into_iter()
        .map(|(p, (mut all, mut large))| {
            all.sort_by(f64::total_cmp);
            large.sort_by(f64::total_cmp);
            (
                p,
                ReservedSummary {
                    rows: all.len() as u64,
                    median_abs_rel_error: median(&all),
                    max_abs_rel_error: all.last().copied(),
                    large_rows: large.len() as u64,
                    large_median_abs_rel_error: median(&large),
                    large_max_abs_rel_error: large.last().copied(),
                },
            )
        })
        .collect()
}
