//! The upper bound of each profile: the ratios measured / held-out-by-architecture prediction
//! over its fitted completed runs of at least the small-run threshold, their nearest-rank q90
//! and q95 (with intervals), and per family the quantiles of the other families' ratios alone
//! (so no fitted row's verdict is covered by its own ratio).

use super::intervals;
use super::metrics::nearest_rank;
use super::predict::Predictor;
use super::results::{Bucket, LeaveFamilyOut, Upper, NEAREST_RANK_RULE};
use super::Dataset;
use crate::features::Precision;
use crate::intern::Name;
use crate::run::RunStatus;
use std::collections::BTreeMap;

/// Per profile: the bound, and per family index the leave-family-out (q90, q95) of its fitted
/// rows (absent: no other family has ratios).
pub(super) struct Bounds {
    pub uppers: BTreeMap<Precision, Upper>,
    pub lfo: BTreeMap<Precision, Vec<Option<(f64, f64)>>>,
}

/// The bounds of `profiles` from the `usable` rows (row index, bucket, family index).
pub(super) fn bounds(
    ds: &Dataset,
    usable: &[(usize, Bucket, usize)],
    predictor: &Predictor,
    threshold: u64,
    profiles: impl Iterator<Item = Precision>,
    fam_names: &[&str],
) -> Bounds {
    let mut ratios: BTreeMap<Precision, Vec<(Name, f64, usize)>> = BTreeMap::new();
    let mut unpredicted: BTreeMap<Precision, Vec<Name>> = BTreeMap::new();
    for &(i, bucket, fam) in usable {
        let r = &ds.rows[i];
        if bucket != Bucket::Fitted || r.status != RunStatus::Completed {
            continue;
        }
        let Some(m) = r.measured_bytes.filter(|m| *m >= threshold) else {
            continue;
        };
        match predictor.predict(i, bucket, fam).1 {
            Some(e) if e > 0.0 => {
                ratios
                    .entry(r.precision)
                    .or_default()
                    .push((r.run_id.clone(), m as f64 / e, fam))
            }
            _ => unpredicted
                .entry(r.precision)
                .or_default()
                .push(r.run_id.clone()),
        }
    }
    let mut uppers: BTreeMap<Precision, Upper> = BTreeMap::new();
    // Per profile, per family index: the leave-family-out multipliers of its fitted rows.
    let mut lfo: BTreeMap<Precision, Vec<Option<(f64, f64)>>> = BTreeMap::new();
    for p in profiles {
        let mut ratios = ratios.remove(&p).unwrap_or_default();
        ratios.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let sorted: Vec<f64> = ratios.iter().map(|r| r.1).collect();
        let (q90, q95) = (nearest_rank(&sorted, 90), nearest_rank(&sorted, 95));
        let file = ds.factors.upper_for(p);
        let mut by_fam = vec![None; fam_names.len()];
        let mut leave_family_out = BTreeMap::new();
        for (k, slot) in by_fam.iter_mut().enumerate() {
            let others: Vec<f64> = ratios.iter().filter(|r| r.2 != k).map(|r| r.1).collect();
            if let (Some(a), Some(b)) = (nearest_rank(&others, 90), nearest_rank(&others, 95)) {
                *slot = Some((a, b));
                leave_family_out.insert(
                    fam_names[k].to_string(),
                    LeaveFamilyOut {
                        ratios: others.len() as u64,
                        q90: a,
                        q95: b,
                    },
                );
            }
        }
        lfo.insert(p, by_fam);
        uppers.insert(
            p,
            Upper {
                rule: NEAREST_RANK_RULE,
                q90,
                q95,
                q90_interval: intervals::quantile_interval(&sorted, 0.90),
                q95_interval: intervals::quantile_interval(&sorted, 0.95),
                q90_used: q90.unwrap_or(file.q90),
                q95_used: q95.unwrap_or(file.q95),
                ratios: ratios.into_iter().map(|(id, r, _)| (id, r)).collect(),
                unpredicted: unpredicted.remove(&p).unwrap_or_default(),
                leave_family_out,
            },
        );
    }
    Bounds { uppers, lfo }
}
