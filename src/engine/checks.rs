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
    /// Per row: the predictions, the errors into the accumulators, the bound's multipliers,
    /// every card of the row's regime checked, the row's result.
    pub fn run(&self, part: &[(usize, Bucket, usize)], out: &mut [Option<RowResult>]) -> Part<'a> {
        let ds = self.ds;
        let f = &ds.factors;
        let nm = Method::ALL.len();
        let new_accs = || (0..nm).map(|_| Acc::default()).collect::<Vec<Acc>>();
        let mut t = Part {
            overall: new_accs(),
            fam_accs: (0..self.families * NP).map(|_| new_accs()).collect(),
            prof_accs: Precision::ALL.iter().map(|_| new_accs()).collect(),
            fam_graphs: vec![BTreeSet::new(); self.families],
            fam_rows: vec![0u64; self.families],
            bound: BoundMetrics::default(),
        };
        let mut last_graph: Vec<&str> = vec![""; self.families];
        let mut lists = CheckLists::default();
        let mut checks: Vec<Check> = Vec::new();
        for (&(i, bucket, fam), slot) in part.iter().zip(out.iter_mut()) {
            let r = &ds.rows[i];
            let (preds, oos) = self.predictor.predict(i, bucket, fam);
            let p = Pred {
                fam,
                bucket,
                preds,
                oos,
            };
            if last_graph[p.fam] != r.graph.as_str() {
                t.fam_graphs[p.fam].insert(r.graph.as_str());
                last_graph[p.fam] = r.graph.as_str();
            }
            t.fam_rows[p.fam] += 1;
            let measured = match r.status {
                RunStatus::Completed => r.measured_bytes,
                _ => None,
            };
            t.add_errors(&p, r.precision, measured, f.small_runs.threshold_bytes);
            let (q90m, q95m) = self.multipliers(r.precision, p.bucket, p.fam);
            let b90 = p.oos.map(|e| plan::bound(e, q90m, f.bound_floor_bytes));
            let b95 = p.oos.map(|e| plan::bound(e, q95m, f.bound_floor_bytes));
            checks.clear();
            for card in &f.regimes[r.regime.as_str()].cards {
                let truth = truth(r.status, measured, r.capacity_bytes, card.bytes);
                let cref = || CheckRef {
                    run_id: r.run_id.clone(),
                    card_bytes: card.bytes,
                };
                let edge = truth == Truth::Fits
                    && measured.is_some_and(|m| m as f64 >= card.bytes as f64 * (1.0 - f.headroom));
                let fits =
                    t.check_methods(&p, r.precision, card.bytes, f.headroom, truth, edge, cref);
                let verdict = |b: Option<f64>| {
                    p.oos
                        .zip(b)
                        .map(|(e, b)| plan::bound_verdict(e, b, f.headroom, card.bytes))
                };
                let (v90, v95) = (verdict(b90), verdict(b95));
                t.bound.q90.tally(v90, truth, cref);
                t.bound.q95.tally(v95, truth, cref);
                checks.push(Check {
                    card_bytes: card.bytes,
                    truth,
                    edge,
                    fits,
                    bound_q90: v90,
                    bound_q95: v95,
                });
            }
            *slot = Some(RowResult {
                run_id: r.run_id.clone(),
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
                    .map(|m| fit_weight(f, m)),
                features: r.features.as_array(),
                predictions: Predictions::from(&p.preds),
                bound_q90_bytes: b90,
                bound_q95_bytes: b95,
                checks: lists.share(&checks),
            });
        }
        t
    }

    /// The bound's q90 and q95 multipliers for a row: a fitted row's from the other families'
    /// ratios alone, a held-out-by-regime row's from the shipped fit's, an after-fit row's from
    /// the factors file as fixed.
    fn multipliers(&self, precision: Precision, bucket: Bucket, fam: usize) -> (f64, f64) {
        let file = || {
            let u = self.ds.factors.upper_for(precision);
            (u.q90, u.q95)
        };
        match bucket {
            Bucket::AfterFit => file(),
            Bucket::Fitted => self.lfo[&precision][fam].unwrap_or_else(file),
            Bucket::HeldOutRegime => {
                let u = &self.uppers[&precision];
                (u.q90_used, u.q95_used)
            }
        }
    }
}

impl Part<'_> {
    /// Each method's error on the row, into its family's accumulator (the overall list is the
    /// families' put together once: one copy of a million errors fewer while the checks run),
    /// and the row counted overall and per profile.
    fn add_errors(
        &mut self,
        p: &Pred,
        precision: Precision,
        measured: Option<u64>,
        threshold: u64,
    ) {
        for (method, pred) in p.preds.iter() {
            let mi = method as usize;
            self.overall[mi].rows += 1;
            self.prof_accs[precision as usize][mi].rows += 1;
            let acc = &mut self.fam_accs[p.fam * NP + precision as usize][mi];
            acc.rows += 1;
            if let Some(e) = abs_rel_error(pred, measured, threshold) {
                acc.errors.push(e);
            }
        }
    }

    /// Every method's answer on one card, tallied overall, per family and per profile when the
    /// truth is known; returns who said it fits.
    #[allow(clippy::too_many_arguments)]
    fn check_methods(
        &mut self,
        p: &Pred,
        precision: Precision,
        card: u64,
        headroom: f64,
        truth: Truth,
        edge: bool,
        cref: impl Fn() -> CheckRef,
    ) -> PerMethod<bool> {
        let mut fits_by = PerMethod::default();
        for (method, pred) in p.preds.iter() {
            let says_fits = match method {
                Method::Accelerate | Method::Textbook => pred <= card as f64,
                _ => plan::plan_fits(pred, headroom, card),
            };
            fits_by.set(method, says_fits);
            if truth == Truth::Unknown {
                continue;
            }
            let mi = method as usize;
            for acc in [
                &mut self.overall[mi],
                &mut self.fam_accs[p.fam * NP + precision as usize][mi],
                &mut self.prof_accs[precision as usize][mi],
            ] {
                acc.m.tally(truth, says_fits, edge, &cref);
            }
        }
        fits_by
    }
}

impl MethodMetrics {
    /// One card check of a method: a did-not-fit check it called "fits" is a missed
    /// out-of-memory; a fit check it refused is a false alarm near the card (`edge`) or an
    /// over-estimate.
    fn tally(&mut self, truth: Truth, says_fits: bool, edge: bool, cref: &impl Fn() -> CheckRef) {
        match truth {
            Truth::DoesNotFit => {
                self.did_not_fit_checks += 1;
                if says_fits {
                    self.missed_oom.push(cref());
                } else {
                    self.correct_checks += 1;
                }
            }
            _ => {
                self.fit_checks += 1;
                if says_fits {
                    self.correct_checks += 1;
                } else if edge {
                    self.false_alarm_edge.push(cref());
                } else {
                    self.false_alarm_over.push(cref());
                }
            }
        }
    }
}

impl BoundCounts {
    /// One card check of the bound's verdict (none without an out-of-sample estimate).
    fn tally(&mut self, v: Option<Verdict>, truth: Truth, cref: impl Fn() -> CheckRef) {
        let Some(v) = v else { return };
        match truth {
            Truth::DoesNotFit => {
                self.on_did_not_fit.add(v);
                if v == Verdict::Fits {
                    self.missed_oom.push(cref());
                }
            }
            Truth::Fits => self.on_fit.add(v),
            Truth::Unknown => {}
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
