//! The error of one prediction, the nearest-rank quantile, and the running tallies that become
//! a method's [`MethodMetrics`].

use super::intervals;
use super::results::*;
use crate::run::RunStatus;

/// A prediction's |predicted / measured - 1|, on a completed run of at least `threshold`
/// bytes (`measured` is absent for the others): the error every median and share is over.
pub fn abs_rel_error(pred: f64, measured: Option<u64>, threshold: u64) -> Option<f64> {
    measured
        .filter(|m| *m >= threshold)
        .map(|m| (pred / m as f64 - 1.0).abs())
}

/// A row result's error under `method` (see [`abs_rel_error`]).
pub fn row_abs_rel_error(r: &RowResult, method: Method, threshold: u64) -> Option<f64> {
    let pred = *r.predictions.get(&method)?;
    let measured = if r.status == RunStatus::Completed {
        r.measured_bytes
    } else {
        None
    };
    abs_rel_error(pred, measured, threshold)
}

/// Nearest-rank empirical quantile of an ascending slice: sorted[ceil(percent * n / 100) - 1].
pub fn nearest_rank(sorted: &[f64], percent: u32) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let rank = (percent as u64 * n).div_ceil(100).clamp(1, n);
    Some(sorted[(rank - 1) as usize])
}

/// The median (the mean of the two middle values of an even count); sorts `v`.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Running tallies of one method over a set of rows.
#[derive(Default, Clone)]
pub(super) struct Acc {
    pub(super) rows: u64,
    pub(super) errors: Vec<f64>,
    pub(super) m: MethodMetrics,
}

impl Acc {
    pub(super) fn merge(&mut self, o: Acc) {
        self.rows += o.rows;
        self.errors.extend(o.errors);
        let (m, n) = (&mut self.m, o.m);
        m.did_not_fit_checks += n.did_not_fit_checks;
        m.fit_checks += n.fit_checks;
        m.correct_checks += n.correct_checks;
        m.missed_oom.extend(n.missed_oom);
        m.false_alarm_edge.extend(n.false_alarm_edge);
        m.false_alarm_over.extend(n.false_alarm_over);
    }

    pub(super) fn finish(mut self) -> MethodMetrics {
        let mut m = self.m;
        m.rows = self.rows;
        let n = self.errors.len() as u64;
        m.error_rows = n;
        if n > 0 {
            let within = self.errors.iter().filter(|e| **e <= WITHIN).count() as u64;
            m.within_25pct = Some(within as f64 / n as f64);
            m.within_25pct_interval = intervals::share_interval(within, n);
        }
        m.median_abs_rel_error = median(&mut self.errors);
        m.max_abs_rel_error = self.errors.iter().copied().reduce(f64::max);
        let counted = m.fit_checks + m.did_not_fit_checks;
        if counted > 0 {
            m.accuracy = Some(m.correct_checks as f64 / counted as f64);
        }
        // `median` sorted the errors.
        m.median_interval = intervals::median_interval(&self.errors);
        let missed = m.missed_oom.len() as u64;
        if m.did_not_fit_checks > 0 {
            m.missed_oom_share = Some(missed as f64 / m.did_not_fit_checks as f64);
            m.missed_oom_interval = intervals::share_interval(missed, m.did_not_fit_checks);
        }
        m.few_runs = m.median_abs_rel_error.is_some()
            && m.median_interval
                .is_none_or(|i| i.width() > intervals::FEW_RUNS_MEDIAN_WIDTH);
        for list in [
            &mut m.missed_oom,
            &mut m.false_alarm_edge,
            &mut m.false_alarm_over,
        ] {
            list.sort();
            list.shrink_to_fit();
        }
        m
    }
}

/// A fitted completed run's weight in the fit: 1, or `small_runs.weight` below the small-run
/// threshold.
pub(super) fn fit_weight(f: &crate::factors::FactorsFile, measured: u64) -> f64 {
    if measured < f.small_runs.threshold_bytes {
        f.small_runs.weight
    } else {
        1.0
    }
}

/// Each method's tallies finished into its metrics (methods that predicted no row left out).
pub(super) fn finish_all(accs: Vec<Acc>) -> std::collections::BTreeMap<Method, MethodMetrics> {
    Method::ALL
        .iter()
        .zip(accs)
        .filter(|(_, a)| a.rows > 0)
        .map(|(m, a)| (*m, a.finish()))
        .collect()
}
