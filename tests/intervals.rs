//! The engine's 95% intervals: their coverage over many synthetic samples, and their place in
//! the calibration (hand-computed ranks and Wilson bounds are unit tests in
//! `src/engine/intervals.rs`).

use memcal::engine::intervals::{median_interval, share_interval, CONFIDENCE};
use memcal::engine::synthetic::Lcg;

/// The share of `trials` samples of `n` exponential values whose median interval covers the
/// true median (ln 2).
fn median_coverage(n: usize, trials: usize, seed: u64) -> f64 {
    let mut rng = Lcg(seed);
    let truth = std::f64::consts::LN_2;
    let mut covered = 0;
    for _ in 0..trials {
        let mut v: Vec<f64> = (0..n).map(|_| -(1.0 - rng.unit()).ln()).collect();
        v.sort_by(f64::total_cmp);
        if median_interval(&v).is_some_and(|i| i.contains(truth)) {
            covered += 1;
        }
    }
    covered as f64 / trials as f64
}

#[test]
fn the_median_interval_covers_the_true_median_95_percent_of_the_time() {
    for (n, seed) in [(20, 1), (222, 2)] {
        let c = median_coverage(n, 4000, seed);
        assert!(
            (c - CONFIDENCE).abs() <= 0.02,
            "n = {n}: coverage {c} (stated {CONFIDENCE})"
        );
    }
}

#[test]
fn the_share_interval_covers_the_true_share_95_percent_of_the_time() {
    let mut rng = Lcg(3);
    for (p, n) in [(0.3, 100u64), (0.9, 222)] {
        let trials = 4000;
        let mut covered = 0;
        for _ in 0..trials {
            let k = (0..n).filter(|_| rng.unit() < p).count() as u64;
            if share_interval(k, n).is_some_and(|i| i.contains(p)) {
                covered += 1;
            }
        }
        let c = covered as f64 / trials as f64;
        assert!((c - CONFIDENCE).abs() <= 0.02, "p = {p}, n = {n}: {c}");
    }
}

#[test]
fn every_median_the_engine_reports_has_its_interval_or_says_why_not() {
    let ds = memcal::engine::synthetic::dataset(3000, 6, [1.2, 0.9, 1.3, 3.6, 5.2, 2.0], 0.1, 7);
    let cal = memcal::engine::calibrate(&ds);
    let mut seen = 0;
    for m in cal
        .methods
        .values()
        .chain(cal.families.values().flat_map(|f| f.methods.values()))
    {
        let Some(med) = m.median_abs_rel_error else {
            continue;
        };
        seen += 1;
        match m.median_interval {
            Some(i) => assert!(i.low <= med && med <= i.high, "{i:?} around {med}"),
            None => assert!(m.error_rows < 6 && m.few_runs, "{m:?}"),
        }
        if let (Some(w), Some(i)) = (m.within_25pct, m.within_25pct_interval) {
            assert!(i.low <= w && w <= i.high);
        }
    }
    assert!(seen > 10);
    let up = &cal.fits[&memcal::features::Precision::Fp32].upper;
    let (q95, i) = (up.q95.unwrap(), up.q95_interval.unwrap());
    assert!(i.low <= q95 && q95 <= i.high);
}
