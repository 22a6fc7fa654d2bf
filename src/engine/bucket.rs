//! Where a row goes: fitted, held out by regime, after the fit, or excluded with its reason
//! (`classify`); the one pass that puts every row in its bucket in run-id order and adds the
//! fitted rows to their profile's and family's fit block (`bucket_rows`); the path order rows
//! are read in.

use super::fits::Blocks;
use super::metrics::fit_weight;
use super::results::*;
use super::split::{join, sort_on_two_threads};
use super::{Dataset, Row};
use crate::factors::FactorsFile;
use crate::features::Precision;
use crate::run::RunStatus;
use crate::time::parse_rfc3339;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

pub(super) fn cmp_path(a: &str, b: &str) -> Ordering {
    // A row of a bundle is `file.jsonl:line`: by the file's path, then by line number.
    fn split(s: &str) -> (&str, u64) {
        s.rsplit_once(':')
            .filter(|(p, _)| p.ends_with(".jsonl"))
            .and_then(|(p, n)| n.parse().ok().map(|n| (p, n)))
            .unwrap_or((s, 0))
    }
    let (a, b) = (split(a), split(b));
    Path::new(a.0).cmp(Path::new(b.0)).then(a.1.cmp(&b.1))
}

pub(super) fn classify(
    ds: &Dataset,
    row: &Row,
    fixed_at: &[Option<(i64, u32)>; NP],
    regimes: &[(&str, bool, &str)],
    has_factors: &[bool; NP],
) -> Result<Bucket, (ExclusionReason, String)> {
    let f = &ds.factors;
    if let Some(problem) = &row.rank_problem {
        return Err(problem.clone());
    }
    if let Some(s) = &row.strategy {
        return Err((
            ExclusionReason::Strategy,
            format!("strategy {s}: calibrated in the strategies section"),
        ));
    }
    if row.status == RunStatus::Error {
        return Err((
            ExclusionReason::StatusError,
            "the run failed for a reason other than memory".into(),
        ));
    }
    if row.graph_changed {
        let now = ds
            .graphs
            .get(row.graph.as_str())
            .map_or("?", |g| g.sha256.as_str());
        return Err((
            ExclusionReason::GraphChanged,
            format!("graph `{}` is now {now}", row.graph),
        ));
    }
    if row.graph_mismatch {
        return Err((
            ExclusionReason::GraphMismatch,
            "the harness reported graph_mismatch".into(),
        ));
    }
    if !row.has_batch_axis {
        return Err((
            ExclusionReason::NoBatchAxis,
            format!("graph `{}` has no batch axis", row.graph),
        ));
    }
    let Some(&(_, training, device)) = regimes.iter().find(|(r, ..)| *r == row.regime.as_str())
    else {
        return Err((
            ExclusionReason::UnknownRegime,
            format!("regime `{}` is not in data/factors.json", row.regime),
        ));
    };
    if row.device_kind.as_str() != device {
        return Err((
            ExclusionReason::DeviceRegimeMismatch,
            format!(
                "device.kind is `{}` but regime `{}` is a `{device}` regime",
                row.device_kind, row.regime
            ),
        ));
    }
    if !has_factors[row.precision as usize] {
        return Err((
            ExclusionReason::NoFactorsForPrecision,
            format!("no factors for `{}`", row.precision),
        ));
    }
    if row.after_fit {
        let Some(fixed) = fixed_at[row.precision as usize] else {
            return Err((
                ExclusionReason::AfterFitUnfixed,
                "data/factors.json has no provenance.fixed_at".into(),
            ));
        };
        let later = parse_rfc3339(&row.timestamp).is_ok_and(|t| t > fixed);
        if !later {
            let at = f.fixed_at_for(row.precision).unwrap_or("");
            return Err((
                ExclusionReason::AfterFitNotLater,
                format!(
                    "timestamp {} is not later than fixed_at {at}",
                    row.timestamp
                ),
            ));
        }
        return Ok(Bucket::AfterFit);
    }
    if training {
        Ok(Bucket::Fitted)
    } else {
        Ok(Bucket::HeldOutRegime)
    }
}

/// The rows in buckets: the usable ones (row index, bucket, family index in name order) in
/// run-id order, the excluded ones with their reasons, the totals, the families, each
/// profile's fit blocks per family, and the SHA-256 of the fitted rows.
pub(super) struct Bucketed<'a> {
    pub usable: Vec<(usize, Bucket, usize)>,
    pub exclusions: Vec<Exclusion>,
    pub excluded_by_reason: BTreeMap<ExclusionReason, u64>,
    pub totals: Totals,
    /// Family names, by index (in name order).
    pub fam_names: Vec<&'a str>,
    pub blocks: BTreeMap<Precision, Blocks>,
    pub fitted_rows_sha256: String,
}

/// Every row of `ds` in its bucket or excluded, in one pass in run-id order on two threads.
pub(super) fn bucket_rows(ds: &Dataset) -> Bucketed<'_> {
    let f = &ds.factors;
    // When each profile's factors were fixed (its after-the-fit rows must be later).
    let fixed_at = Precision::ALL.map(|p| f.fixed_at_for(p).and_then(|t| parse_rfc3339(t).ok()));
    let order = run_id_order(ds);
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
    let pass = Pass {
        ds,
        fixed_at,
        regimes: &regimes,
        has_factors,
        total: order.len(),
    };
    let half = |part: &[u32], prev: Option<usize>, direct: bool| pass.half(part, prev, direct);
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
            add_fitted(f, &mut blocks, &ds.rows[i], fam);
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
    let totals = totals(&usable, exclusions.len(), ds.rows.len());

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
    Bucketed {
        usable,
        exclusions,
        excluded_by_reason,
        totals,
        fam_names,
        blocks,
        fitted_rows_sha256,
    }
}

/// The rows in the order the engine reads them: by run id, then by path (duplicates become
/// neighbours, the first by path first), as indices into `ds.rows`.
fn run_id_order(ds: &Dataset) -> Vec<u32> {
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
    keys.iter().map(|k| k.1).collect()
}

/// The row totals: every input is fitted, held out by regime, after the fit or excluded.
fn totals(usable: &[(usize, Bucket, usize)], excluded: usize, inputs: usize) -> Totals {
    let count = |b: Bucket| usable.iter().filter(|(_, x, _)| *x == b).count() as u64;
    let (fitted, regime, after) = (
        count(Bucket::Fitted),
        count(Bucket::HeldOutRegime),
        count(Bucket::AfterFit),
    );
    let (excluded, inputs) = (excluded as u64, inputs as u64);
    Totals {
        inputs,
        fitted,
        held_out_regime: regime,
        after_fit: after,
        excluded,
        balanced: inputs == fitted + regime + after + excluded,
    }
}

/// A fitted row's part of its profile's and family's fit block: its normal equations (a
/// completed run, weighted as `fit_weight` says) or its constraint vector (an out-of-memory run
/// at its capacity, with the headroom).
fn add_fitted(f: &FactorsFile, blocks: &mut BTreeMap<Precision, Blocks>, row: &Row, fam: usize) {
    let list = blocks.entry(row.precision).or_default();
    if list.len() <= fam {
        list.resize(fam + 1, None);
    }
    let e = list[fam].get_or_insert_with(Default::default);
    match (row.status, row.measured_bytes) {
        (RunStatus::Completed, Some(m)) => {
            e.0.add_run(&row.features.as_f64(), m as f64, fit_weight(f, m))
        }
        (RunStatus::Oom, _) => {
            let c = row.capacity_bytes as f64;
            e.1.push(row.features.as_f64().map(|v| (1.0 + f.headroom) * v / c));
        }
        _ => {}
    }
}

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

/// What classifying a row needs besides the row (computed once per pass).
struct Pass<'a, 'r> {
    ds: &'a Dataset,
    fixed_at: [Option<crate::time::Instant>; Precision::ALL.len()],
    regimes: &'r [(&'a str, bool, &'a str)],
    has_factors: [bool; Precision::ALL.len()],
    /// Rows in the whole pass (the first half's usable rows take the second's after them).
    total: usize,
}

impl<'a> Pass<'a, '_> {
    /// One half of the rows in run-id order (`direct`: the first half, which hashes and adds
    /// its fitted rows as it goes); `prev` is the row before the half that is not a duplicate
    /// (the first of its run id).
    fn half(&self, part: &[u32], mut prev: Option<usize>, direct: bool) -> Half<'a> {
        let ds = self.ds;
        let mut out = Half {
            // The first half's usable rows take the second's after them.
            usable: Vec::with_capacity(if direct { self.total } else { part.len() }),
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
                    classify(ds, row, &self.fixed_at, self.regimes, &self.has_factors)
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
                    add_fitted(&ds.factors, &mut out.blocks, row, fam);
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
    }
}
