//! `calibrate`: buckets, fits, held-out refits, the upper bound, card checks and metrics. Pure:
//! no I/O, and the same rows in any order give the same result to the last bit.

use super::intervals::{self};
use super::{Dataset, Row};
use crate::factors::FactorsFile;
use crate::features::{Precision, FEATURE_NAMES};
use crate::run::RunStatus;
use crate::time::parse_rfc3339;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::bound::{bounds, Bounds};
use super::bucket::{classify, cmp_path};
use super::checks::{Checker, Part};
use super::fits::{fit_profiles, Blocks, Fitted};
use super::groups::implementation_groups;
use super::metrics::*;
use super::predict::Predictor;
use super::results::*;
use super::split::{join, sort_on_two_threads};

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
    // When each profile's factors were fixed (its after-the-fit rows must be later).
    let fixed_at = Precision::ALL.map(|p| f.fixed_at_for(p).and_then(|t| parse_rfc3339(t).ok()));
    // Order by (run id, path): duplicates become neighbours, the first by path first.
    let mut keys: Vec<(&str, u32)> = ds
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.run_id.as_str(), i as u32))
        .collect();
    let by_id_then_path = |a: &(&str, u32), b: &(&str, u32)| {
        a.0.cmp(b.0)
            .then_with(|| cmp_path(&ds.rows[a.1 as usize].file, &ds.rows[b.1 as usize].file))
    };
    if keys
        .windows(2)
        .any(|w| by_id_then_path(&w[0], &w[1]) == Ordering::Greater)
    {
        sort_on_two_threads(&mut keys, by_id_then_path);
    }
    let order: Vec<u32> = keys.iter().map(|k| k.1).collect();
    drop(keys);
    let regimes: Vec<(&str, bool, &str)> = f
        .regimes
        .iter()
        .map(|(k, r)| {
            (
                k.as_str(),
                f.training_regimes.contains(k),
                r.device.as_str(),
            )
        })
        .collect();
    let has_factors = Precision::ALL.map(|p| f.factors(p).is_some());
    let h = f.headroom;
    let weight_of = |m: u64| fit_weight(f, m);

    // One pass over the rows in run-id order (each row read once, while it is in the cache),
    // in two halves on two threads: bucket or exclusion; for a usable row its family
    // (numbered as first seen; by the name's shared allocation first, then by the name); for a
    // fitted row its line of the fitted rows' SHA-256 (usable rows are in run-id order and
    // their run ids distinct: duplicates are excluded, so this is rows_sha256's order) and its
    // part of the fit, per profile and family: normal equations of the completed runs,
    // constraint vectors of the out-of-memory runs, both in run-id order. The first half
    // hashes and adds its fitted rows as it goes; the second keeps its fitted rows' lines of
    // the SHA-256, hashed after the first's, and its fitted rows are added to the blocks after
    // the first's: the same order, so the same bytes and the same floats as one pass.
    // A fitted row's part of its profile's and family's block.
    let add_fitted = |blocks: &mut BTreeMap<Precision, Blocks>, row: &Row, fam: usize| {
        let list = blocks.entry(row.precision).or_default();
        if list.len() <= fam {
            list.resize(fam + 1, None);
        }
        let e = list[fam].get_or_insert_with(Default::default);
        match (row.status, row.measured_bytes) {
            (RunStatus::Completed, Some(m)) => {
                e.0.add_run(&row.features.as_f64(), m as f64, weight_of(m))
            }
            (RunStatus::Oom, _) => {
                let c = row.capacity_bytes as f64;
                e.1.push(row.features.as_f64().map(|v| (1.0 + h) * v / c));
            }
            _ => {}
        }
    };
    /// What a half of the rows gives.
    #[derive(Default)]
    struct Half<'a> {
        /// (row, bucket, family as an index into `families`).
        usable: Vec<(usize, Bucket, usize)>,
        exclusions: Vec<Exclusion>,
        /// Family names in the order first seen.
        families: Vec<&'a str>,
        /// The second half's fitted rows' lines of the SHA-256, hashed after the first's.
        lines: Vec<u8>,
        /// The first half's fitted rows, hashed and added as it goes.
        hash: super::load::RowsHasher,
        blocks: BTreeMap<Precision, Blocks>,
    }
    // `prev`: the row before the half that is not a duplicate (the first of its run id).
    let half = |part: &[u32], mut prev: Option<usize>, direct: bool| -> Half {
        let mut out = Half {
            // The first half's usable rows take the second's after them.
            usable: Vec::with_capacity(if direct { order.len() } else { part.len() }),
            ..Half::default()
        };
        let mut fam_by_alloc: HashMap<usize, usize, super::FastHash> = HashMap::default();
        let mut fam_by_name: HashMap<&str, usize> = HashMap::new();
        for i in part.iter().map(|&i| i as usize) {
            let row = &ds.rows[i];
            let dup = prev.filter(|&p| ds.rows[p].run_id == row.run_id);
            let result = match dup {
                Some(p) => Err((
                    ExclusionReason::DuplicateRunId,
                    format!("run id also in {}, which comes first", ds.rows[p].file),
                )),
                None => {
                    prev = Some(i);
                    classify(ds, row, &fixed_at, &regimes, &has_factors)
                }
            };
            let b = match result {
                Ok(b) => b,
                Err((reason, detail)) => {
                    out.exclusions.push(Exclusion {
                        run_id: row.run_id.to_string(),
                        file: row.file.to_string(),
                        reason,
                        detail,
                    });
                    continue;
                }
            };
            let alloc = Arc::as_ptr(&row.family.0) as usize;
            let fam = match fam_by_alloc.get(&alloc) {
                Some(&k) => k,
                None => {
                    let n = out.families.len();
                    let k = *fam_by_name.entry(row.family.as_str()).or_insert(n);
                    if k == n {
                        out.families.push(row.family.as_str());
                    }
                    fam_by_alloc.insert(alloc, k);
                    k
                }
            };
            out.usable.push((i, b, fam));
            if b == Bucket::Fitted {
                if direct {
                    out.hash.add(&row.run_id, &row.file_sha256);
                    add_fitted(&mut out.blocks, row, fam);
                } else {
                    super::load::RowsHasher::line_into(
                        &mut out.lines,
                        &row.run_id,
                        &row.file_sha256,
                    );
                }
            }
        }
        out
    };
    let mid = order.len() / 2;
    let (first, second) = order.split_at(mid);
    let prev_second = mid.checked_sub(1).map(|mut j| {
        while j > 0 && ds.rows[order[j - 1] as usize].run_id == ds.rows[order[j] as usize].run_id {
            j -= 1;
        }
        order[j] as usize
    });
    let (a, b) = join(
        || half(first, None, true),
        || half(second, prev_second, false),
    );
    drop(order);
    let Half {
        mut usable,
        mut exclusions,
        families: mut first_seen,
        hash: mut fitted_hash,
        mut blocks,
        ..
    } = a;
    // The second half's families as the first's numbers (new ones after them).
    let second_fam: Vec<usize> = b
        .families
        .iter()
        .map(|n| match first_seen.iter().position(|x| x == n) {
            Some(k) => k,
            None => {
                first_seen.push(n);
                first_seen.len() - 1
            }
        })
        .collect();
    fitted_hash.add_lines(&b.lines);
    drop(b.lines);
    for &(i, bk, fam) in &b.usable {
        let fam = second_fam[fam];
        if bk == Bucket::Fitted {
            add_fitted(&mut blocks, &ds.rows[i], fam);
        }
        usable.push((i, bk, fam));
    }
    exclusions.extend(b.exclusions);
    drop(b.usable);
    let fitted_rows_sha256 = fitted_hash.finish();
    exclusions.sort_by(|a, b| cmp_path(&a.file, &b.file));
    let mut excluded_by_reason = BTreeMap::new();
    for e in &exclusions {
        *excluded_by_reason.entry(e.reason).or_insert(0u64) += 1;
    }
    let count = |b: Bucket| usable.iter().filter(|(_, x, _)| *x == b).count() as u64;
    let totals = {
        let (fitted, regime, after) = (
            count(Bucket::Fitted),
            count(Bucket::HeldOutRegime),
            count(Bucket::AfterFit),
        );
        let excluded = exclusions.len() as u64;
        let inputs = ds.rows.len() as u64;
        Totals {
            inputs,
            fitted,
            held_out_regime: regime,
            after_fit: after,
            excluded,
            balanced: inputs == fitted + regime + after + excluded,
        }
    };

    // Families by index in name order.
    let mut fam_names = first_seen.clone();
    fam_names.sort_unstable();
    let mut rank = vec![0usize; fam_names.len()];
    for (k, n) in first_seen.iter().enumerate() {
        rank[k] = fam_names
            .binary_search(n)
            .expect("every family seen is in the sorted list");
    }
    for u in &mut usable {
        u.2 = rank[u.2];
    }
    for list in blocks.values_mut() {
        let mut by_rank: Blocks = vec![None; fam_names.len()];
        for (k, b) in list.drain(..).enumerate() {
            by_rank[rank[k]] = b;
        }
        *list = by_rank;
    }
    drop(first_seen);

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
    let (pa, pb) = join(|| c.run(first, out_a), move || c.run(second, out_b));
    // In place: an Option<RowResult> is a RowResult's size (its names are never null).
    let rows_out: Vec<RowResult> = slots
        .into_iter()
        .map(|r| r.expect("every usable row has its result"))
        .collect();
    let Part {
        mut overall,
        mut fam_accs,
        mut prof_accs,
        mut fam_graphs,
        mut fam_rows,
        mut bound,
    } = pa;
    for (a, b) in overall.iter_mut().zip(pb.overall) {
        a.merge(b);
    }
    for (fa, fb) in fam_accs.iter_mut().zip(pb.fam_accs) {
        for (a, b) in fa.iter_mut().zip(fb) {
            a.merge(b);
        }
    }
    for (pa, pb) in prof_accs.iter_mut().zip(pb.prof_accs) {
        for (a, b) in pa.iter_mut().zip(pb) {
            a.merge(b);
        }
    }
    for (ga, gb) in fam_graphs.iter_mut().zip(pb.fam_graphs) {
        ga.extend(gb);
    }
    for (ra, rb) in fam_rows.iter_mut().zip(pb.fam_rows) {
        *ra += rb;
    }
    for (ba, bb) in [
        (&mut bound.q90, pb.bound.q90),
        (&mut bound.q95, pb.bound.q95),
    ] {
        ba.on_did_not_fit.merge(&bb.on_did_not_fit);
        ba.on_fit.merge(&bb.on_fit);
        ba.missed_oom.extend(bb.missed_oom);
    }
    bound.q90.missed_oom.sort();
    bound.q95.missed_oom.sort();

    let finish = |accs: Vec<Acc>| -> BTreeMap<Method, MethodMetrics> {
        Method::ALL
            .iter()
            .zip(accs)
            .filter(|(_, a)| a.rows > 0)
            .map(|(m, a)| (*m, a.finish()))
            .collect()
    };
    for (mi, acc) in overall.iter_mut().enumerate() {
        let n = fam_accs.iter().map(|f| f[mi].errors.len()).sum();
        acc.errors.reserve_exact(n);
        for f in &fam_accs {
            acc.errors.extend_from_slice(&f[mi].errors);
        }
    }
    let methods = finish(overall);
    for (pi, accs) in prof_accs.iter_mut().enumerate() {
        for (mi, acc) in accs.iter_mut().enumerate() {
            for f in fam_accs.iter().skip(pi).step_by(NP) {
                acc.errors.extend_from_slice(&f[mi].errors);
            }
        }
    }
    let mut families = BTreeMap::new();
    let mut known_misses = Vec::new();
    let mut cells = fam_accs.into_iter();
    for k in 0..fam_names.len() {
        let name = fam_names[k].to_string();
        // The family's cells, one per profile: each finished alone, then all merged.
        let mut by_profile = BTreeMap::new();
        let mut accs: Option<Vec<Acc>> = None;
        for p in Precision::ALL {
            let cell = cells.next().expect("a cell per family and profile");
            if cell.iter().any(|a| a.rows > 0) {
                by_profile.insert(p, finish(cell.clone()));
            }
            match &mut accs {
                None => accs = Some(cell),
                Some(all) => {
                    for (a, b) in all.iter_mut().zip(cell) {
                        a.merge(b);
                    }
                }
            }
        }
        let ms = finish(accs.expect("at least one profile"));
        for (&precision, pms) in &by_profile {
            for (&method, m) in pms {
                if method == Method::PlanHeldOutArchitecture {
                    if let Some(e) = m.median_abs_rel_error.filter(|e| *e > WITHIN) {
                        known_misses.push(KnownMiss {
                            family: name.clone(),
                            precision,
                            method,
                            text: format!(
                                "{}: held-out median |error| {:.1}% over {} runs (beyond {:.0}%)",
                                precision.as_str(),
                                e * 100.0,
                                m.error_rows,
                                WITHIN * 100.0
                            ),
                            median_abs_rel_error: Some(e),
                            missed_oom: Vec::new(),
                        });
                    }
                }
                if method.out_of_sample_plan() && !m.missed_oom.is_empty() {
                    known_misses.push(KnownMiss {
                        family: name.clone(),
                        precision,
                        method,
                        text: format!(
                            "{}: {} of {} did-not-fit checks called \"fits\" by {}",
                            precision.as_str(),
                            m.missed_oom.len(),
                            m.did_not_fit_checks,
                            method.as_str()
                        ),
                        median_abs_rel_error: m.median_abs_rel_error,
                        missed_oom: m.missed_oom.clone(),
                    });
                }
            }
        }
        families.insert(
            name,
            FamilyReport {
                graphs: fam_graphs[k].iter().map(|g| g.to_string()).collect(),
                rows: fam_rows[k],
                methods: ms,
                by_profile,
            },
        );
    }

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
            pf.methods = finish(accs);
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
