//! `calibrate`: buckets, fits, held-out refits, the upper bound, card checks and metrics. Pure:
//! no I/O, and the same rows in any order give the same result to the last bit.

use super::intervals::{self};
use super::Dataset;
use crate::factors::FactorsFile;
use crate::features::{Precision, FEATURE_NAMES};

use super::bound::{bounds, Bounds};
use super::bucket::{bucket_rows, Bucketed};
use super::checks::{Checker, Part};
use super::fits::{fit_profiles, Fitted};
use super::groups::implementation_groups;
use super::metrics::*;
use super::misses::family_reports;
use super::predict::Predictor;
use super::results::*;
use super::split::join;

/// Runs the whole calibration on a dataset. Pure and deterministic.
pub fn calibrate(ds: &Dataset) -> Calibration {
    // The facts of the measurement read every row and nothing else: on a thread of their own.
    let (mut c, measured) = join(|| calibrate_rows(ds), || Measured::of(&ds.rows));
    c.measured = measured;
    c
}

/// [`calibrate`] but for `measured`.
fn calibrate_rows(ds: &Dataset) -> Calibration {
    let f = &ds.factors;
    let threshold = f.small_runs.threshold_bytes;
    let Bucketed {
        usable,
        exclusions,
        excluded_by_reason,
        totals,
        fam_names,
        blocks,
        fitted_rows_sha256,
    } = bucket_rows(ds);

    let (groups, group_of) = implementation_groups(&fam_names, &ds.graphs);
    let Fitted {
        mut fits,
        held: held_factors,
        group: group_factors,
    } = fit_profiles(f, &blocks, &fam_names, &groups, &group_of);
    let predictor = Predictor {
        rows: &ds.rows,
        fits: &fits,
        held: &held_factors,
        group: &group_factors,
    };

    let Bounds { uppers, lfo } = bounds(
        ds,
        &usable,
        &predictor,
        threshold,
        fits.keys().copied(),
        &fam_names,
    );

    let checker = Checker {
        ds,
        predictor: &predictor,
        uppers: &uppers,
        lfo: &lfo,
        families: fam_names.len(),
    };
    // Checks and metrics over two halves of the rows on two threads, merged in order (the
    // result does not depend on the split); each half writes its rows' results into its half
    // of one vector of slots.
    let (first, second) = usable.split_at(usable.len() / 2);
    let mut slots: Vec<Option<RowResult>> = Vec::with_capacity(usable.len());
    slots.resize_with(usable.len(), || None);
    let (out_a, out_b) = slots.split_at_mut(first.len());
    let c = &checker;
    let (mut part, second_part) = join(|| c.run(first, out_a), move || c.run(second, out_b));
    part.merge(second_part);
    // In place: an Option<RowResult> is a RowResult's size (its names are never null).
    let rows_out: Vec<RowResult> = slots
        .into_iter()
        .map(|r| r.expect("every usable row has its result"))
        .collect();
    let Part {
        mut overall,
        fam_accs,
        mut prof_accs,
        fam_graphs,
        fam_rows,
        bound,
    } = part;

    for (mi, acc) in overall.iter_mut().enumerate() {
        let n = fam_accs.iter().map(|f| f[mi].errors.len()).sum();
        acc.errors.reserve_exact(n);
        for f in &fam_accs {
            acc.errors.extend_from_slice(&f[mi].errors);
        }
    }
    let methods = finish_all(overall);
    for (pi, accs) in prof_accs.iter_mut().enumerate() {
        for (mi, acc) in accs.iter_mut().enumerate() {
            for f in fam_accs.iter().skip(pi).step_by(NP) {
                acc.errors.extend_from_slice(&f[mi].errors);
            }
        }
    }
    let (families, known_misses) = family_reports(&fam_names, fam_accs, &fam_graphs, &fam_rows);

    let factors_file_rows_match = f
        .provenance
        .as_ref()
        .is_some_and(|p| p.rows_sha256 == fitted_rows_sha256);

    for (p, u) in uppers {
        if let Some(pf) = fits.get_mut(&p) {
            pf.upper = u;
        }
    }
    for (p, accs) in Precision::ALL.into_iter().zip(prof_accs) {
        if let Some(pf) = fits.get_mut(&p) {
            pf.methods = finish_all(accs);
        }
    }
    Calibration {
        tool_version: env!("CARGO_PKG_VERSION"),
        settings: settings(f),
        totals,
        excluded_by_reason,
        exclusions,
        fits,
        implementation_groups: groups,
        methods,
        bound,
        families,
        known_misses,
        factors_file_rows_match,
        fitted_rows_sha256,
        textbook_not_applicable: ds
            .graphs
            .iter()
            .filter_map(|(g, i)| i.textbook_not_applicable.clone().map(|r| (g.clone(), r)))
            .collect(),
        approximate_graphs: ds
            .graphs
            .iter()
            .filter(|(_, i)| !i.approximations.is_empty())
            .map(|(g, i)| (g.clone(), i.approximations.clone()))
            .collect(),
        // Set by `calibrate`.
        measured: Measured::default(),
        rows: rows_out,
        simulated_reserved: super::reserved::simulated_reserved(ds),
    }
}

fn settings(f: &FactorsFile) -> Settings {
    Settings {
        headroom: f.headroom,
        small_runs_threshold_bytes: f.small_runs.threshold_bytes,
        small_runs_weight: f.small_runs.weight,
        oom_penalty: f.oom_penalty,
        bound_floor_bytes: f.bound_floor_bytes,
        training_regimes: f.training_regimes.clone(),
        fixed_at: f.provenance.as_ref().map(|p| p.fixed_at.clone()),
        feature_names: FEATURE_NAMES,
        confidence: intervals::CONFIDENCE,
        interval_rule: intervals::INTERVAL_RULE,
        few_runs_median_width: intervals::FEW_RUNS_MEDIAN_WIDTH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_by_hand() {
        let v: Vec<f64> = (1..=10).map(|i| i as f64).collect();
        // ceil(0.9 * 10) = 9 -> 9th value; ceil(0.95 * 10) = 10 -> 10th.
        assert_eq!(nearest_rank(&v, 90), Some(9.0));
        assert_eq!(nearest_rank(&v, 95), Some(10.0));
        assert_eq!(nearest_rank(&[], 95), None);
        assert_eq!(nearest_rank(&[3.0], 90), Some(3.0));
    }
}
