//! The card checks and the metrics' tallies of a run of rows: each row's predictions, its
//! bound, every card of its regime checked against the truth by every method and by the bound,
//! and the row's result. `calibrate` runs it on two halves of the rows and merges the parts in
//! order.

use super::metrics::{abs_rel_error, fit_weight, Acc};
use super::predict::Predictor;
use super::results::*;
use super::Dataset;
use crate::features::Precision;
use crate::plan::{self, Verdict};
use crate::run::RunStatus;
use std::collections::{BTreeMap, BTreeSet};

/// One row's predictions, in the checks.
struct Pred {
    fam: usize,
    bucket: Bucket,
    preds: PerMethod<f64>,
    /// The row's out-of-sample plan estimate (for the bound).
    oos: Option<f64>,
}

// Checks and metrics, over two halves of the rows on two threads, merged in order (the
// result does not depend on the split).
pub(super) struct Part<'a> {
    pub overall: Vec<Acc>,
    /// Per family and precision profile: index `family * NP + precision as usize`.
    pub fam_accs: Vec<Vec<Acc>>,
    /// Per precision profile (by `Precision as usize`); its errors are the families' put
    /// together at the end.
    pub prof_accs: Vec<Vec<Acc>>,
    pub fam_graphs: Vec<BTreeSet<&'a str>>,
    pub fam_rows: Vec<u64>,
    pub bound: BoundMetrics,
}

/// What the checks need besides the rows: the predictions, the bounds and the family count.
pub(super) struct Checker<'a> {
    pub ds: &'a Dataset,
    pub predictor: &'a Predictor<'a>,
    pub uppers: &'a BTreeMap<Precision, Upper>,
    pub lfo: &'a BTreeMap<Precision, Vec<Option<(f64, f64)>>>,
    /// Families, by index.
    pub families: usize,
}

impl<'a> Checker<'a> {
    /// The rows of `part` (row index, bucket, family index) checked; each row's result is
    /// written into its slot of `out` (no second copy of the results while they are merged).
    pub fn run(&self, part: &[(usize, Bucket, usize)], out: &mut [Option<RowResult>]) -> Part<'a> {
        let ds = self.ds;
        let f = &ds.factors;
        let threshold = f.small_runs.threshold_bytes;
        let h = f.headroom;
        let (predictor, uppers, lfo) = (self.predictor, self.uppers, self.lfo);
        let weight_of = |m: u64| fit_weight(f, m);

        let nm = Method::ALL.len();
        let new_accs = || (0..nm).map(|_| Acc::default()).collect::<Vec<Acc>>();
        let mut overall = new_accs();
        let mut fam_accs: Vec<Vec<Acc>> = (0..self.families * NP).map(|_| new_accs()).collect();
        let mut prof_accs: Vec<Vec<Acc>> = Precision::ALL.iter().map(|_| new_accs()).collect();
        let mut fam_graphs: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); self.families];
        let mut fam_rows = vec![0u64; self.families];
        let mut last_graph: Vec<&str> = vec![""; self.families];
        let mut bound = BoundMetrics::default();
        let mut lists = CheckLists::default();
        let mut checks: Vec<Check> = Vec::new();
        for (&(i, bucket, fam), slot) in part.iter().zip(out.iter_mut()) {
            let r = &ds.rows[i];
            let id = &r.run_id;
            let (preds, oos) = predictor.predict(i, bucket, fam);
            let p = Pred {
                fam,
                bucket,
                preds,
                oos,
            };
            if last_graph[p.fam] != r.graph.as_str() {
                fam_graphs[p.fam].insert(r.graph.as_str());
                last_graph[p.fam] = r.graph.as_str();
            }
            fam_rows[p.fam] += 1;
            let measured = match r.status {
                RunStatus::Completed => r.measured_bytes,
                _ => None,
            };
            for (method, pred) in p.preds.iter() {
                let mi = method as usize;
                let err = abs_rel_error(pred, measured, threshold);
                // The errors go to the family only; the overall list is the families' put
                // together once (one copy of a million errors fewer while the checks run).
                overall[mi].rows += 1;
                prof_accs[r.precision as usize][mi].rows += 1;
                let acc = &mut fam_accs[p.fam * NP + r.precision as usize][mi];
                acc.rows += 1;
                if let Some(e) = err {
                    acc.errors.push(e);
                }
            }
            let (q90m, q95m) = match p.bucket {
                Bucket::AfterFit => {
                    let u = f.upper_for(r.precision);
                    (u.q90, u.q95)
                }
                // A fitted row's bound comes from the other families' ratios alone.
                Bucket::Fitted => lfo[&r.precision][p.fam].unwrap_or_else(|| {
                    let u = f.upper_for(r.precision);
                    (u.q90, u.q95)
                }),
                Bucket::HeldOutRegime => {
                    let u = &uppers[&r.precision];
                    (u.q90_used, u.q95_used)
                }
            };
            let b90 = p.oos.map(|e| plan::bound(e, q90m, f.bound_floor_bytes));
            let b95 = p.oos.map(|e| plan::bound(e, q95m, f.bound_floor_bytes));
            let cards = &f.regimes[r.regime.as_str()].cards;
            checks.clear();
            for card in cards {
                let t = truth(r.status, measured, r.capacity_bytes, card.bytes);
                let edge = t == Truth::Fits
                    && measured.is_some_and(|m| m as f64 >= card.bytes as f64 * (1.0 - h));
                let mut fits_by = PerMethod::default();
                for (method, pred) in p.preds.iter() {
                    let says_fits = match method {
                        Method::Accelerate | Method::Textbook => pred <= card.bytes as f64,
                        _ => plan::plan_fits(pred, h, card.bytes),
                    };
                    fits_by.set(method, says_fits);
                    if t == Truth::Unknown {
                        continue;
                    }
                    let cref = || CheckRef {
                        run_id: id.clone(),
                        card_bytes: card.bytes,
                    };
                    let mi = method as usize;
                    for acc in [
                        &mut overall[mi],
                        &mut fam_accs[p.fam * NP + r.precision as usize][mi],
                        &mut prof_accs[r.precision as usize][mi],
                    ] {
                        let m = &mut acc.m;
                        match t {
                            Truth::DoesNotFit => {
                                m.did_not_fit_checks += 1;
                                if says_fits {
                                    m.missed_oom.push(cref());
                                } else {
                                    m.correct_checks += 1;
                                }
                            }
                            _ => {
                                m.fit_checks += 1;
                                if says_fits {
                                    m.correct_checks += 1;
                                } else if edge {
                                    m.false_alarm_edge.push(cref());
                                } else {
                                    m.false_alarm_over.push(cref());
                                }
                            }
                        }
                    }
                }
                let v90 = p
                    .oos
                    .zip(b90)
                    .map(|(e, b)| plan::bound_verdict(e, b, h, card.bytes));
                let v95 = p
                    .oos
                    .zip(b95)
                    .map(|(e, b)| plan::bound_verdict(e, b, h, card.bytes));
                for (v, counts) in [(v90, &mut bound.q90), (v95, &mut bound.q95)] {
                    let Some(v) = v else { continue };
                    match t {
                        Truth::DoesNotFit => {
                            counts.on_did_not_fit.add(v);
                            if v == Verdict::Fits {
                                counts.missed_oom.push(CheckRef {
                                    run_id: id.clone(),
                                    card_bytes: card.bytes,
                                });
                            }
                        }
                        Truth::Fits => counts.on_fit.add(v),
                        Truth::Unknown => {}
                    }
                }
                checks.push(Check {
                    card_bytes: card.bytes,
                    truth: t,
                    edge,
                    fits: fits_by,
                    bound_q90: v90,
                    bound_q95: v95,
                });
            }
            *slot = Some(RowResult {
                run_id: id.clone(),
                file: r.file.clone(),
                graph: r.graph.clone(),
                family: r.family.clone(),
                regime: r.regime.clone(),
                precision: r.precision,
                batch: r.batch,
                status: r.status,
                bucket: p.bucket,
                measured_bytes: measured,
                oom_capacity_bytes: (r.status == RunStatus::Oom).then_some(r.capacity_bytes),
                capacity_bytes: r.capacity_bytes,
                weight: (p.bucket == Bucket::Fitted)
                    .then_some(())
                    .and(measured)
                    .map(weight_of),
                features: r.features.as_array(),
                predictions: Predictions::from(&p.preds),
                bound_q90_bytes: b90,
                bound_q95_bytes: b95,
                checks: lists.share(&checks),
            });
        }
        Part {
            overall,
            fam_accs,
            prof_accs,
            fam_graphs,
            fam_rows,
            bound,
        }
    }
}

impl<'a> Part<'a> {
    /// `other`, the part of the rows after this one's, added in order.
    pub fn merge(&mut self, other: Part<'a>) {
        for (a, b) in self.overall.iter_mut().zip(other.overall) {
            a.merge(b);
        }
        for (fa, fb) in self.fam_accs.iter_mut().zip(other.fam_accs) {
            for (a, b) in fa.iter_mut().zip(fb) {
                a.merge(b);
            }
        }
        for (pa, pb) in self.prof_accs.iter_mut().zip(other.prof_accs) {
            for (a, b) in pa.iter_mut().zip(pb) {
                a.merge(b);
            }
        }
        for (ga, gb) in self.fam_graphs.iter_mut().zip(other.fam_graphs) {
            ga.extend(gb);
        }
        for (ra, rb) in self.fam_rows.iter_mut().zip(other.fam_rows) {
            *ra += rb;
        }
        for (ba, bb) in [
            (&mut self.bound.q90, other.bound.q90),
            (&mut self.bound.q95, other.bound.q95),
        ] {
            ba.on_did_not_fit.merge(&bb.on_did_not_fit);
            ba.on_fit.merge(&bb.on_fit);
            ba.missed_oom.extend(bb.missed_oom);
        }
        self.bound.q90.missed_oom.sort();
        self.bound.q95.missed_oom.sort();
    }
}
