//! How sure each figure is: 95% confidence intervals for the engine's medians, quantiles and
//! shares, with statrs's distributions.
//!
//! - A median or quantile gets the distribution-free interval of order statistics: for the
//!   p-quantile of n values, the ranks l and u (1-based) with X ~ Binomial(n, p),
//!   l = the largest rank with P(X <= l - 1) <= α/2 and u = the smallest rank with
//!   P(X <= u - 1) >= 1 - α/2; the interval [x(l), x(u)] covers the true quantile with
//!   probability P(l <= X <= u - 1) >= 1 - α, whatever the distribution. Too few values for
//!   such ranks (n < 6 for a median at 95%): no interval.
//! - A share k of n gets the Wilson score interval (its coverage stays close to the stated
//!   level even for shares near 0 or 1, where the normal interval fails).

use serde::Serialize;
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Normal};

/// The stated confidence level of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// A median |error| whose interval is wider than this (in fractions: 0.10 = 10 percentage
/// points), or that has none, is flagged "few runs".
pub const FEW_RUNS_MEDIAN_WIDTH: f64 = 0.10;

/// The rule behind the intervals, in words (in calibration.json and on the page).
pub const INTERVAL_RULE: &str = "95% intervals: order statistics of the binomial distribution for medians and quantiles (distribution-free), Wilson score for shares";

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn width(&self) -> f64 {
        self.high - self.low
    }

    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// The 1-based ranks (l, u) of the order statistics that bound the `p`-quantile of `n` values
/// at [`CONFIDENCE`], or `None` when `n` is too small for them.
pub fn quantile_ranks(n: u64, p: f64) -> Option<(u64, u64)> {
    if n == 0 || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let alpha = 1.0 - CONFIDENCE;
    let b = Binomial::new(p, n).ok()?;
    // F(k - 1) = P(X <= k - 1) rises with k: binary searches over k in 1..=n.
    let f = |k: u64| b.cdf(k - 1);
    // l: the largest k with F(k - 1) <= α/2.
    if f(1) > alpha / 2.0 {
        return None;
    }
    let (mut lo, mut hi) = (1u64, n);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if f(mid) <= alpha / 2.0 {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let l = lo;
    // u: the smallest k with F(k - 1) >= 1 - α/2.
    if f(n) < 1.0 - alpha / 2.0 {
        return None;
    }
    let (mut lo, mut hi) = (1u64, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if f(mid) >= 1.0 - alpha / 2.0 {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some((l, lo))
}

/// The interval of the `p`-quantile of ascending `sorted` values.
pub fn quantile_interval(sorted: &[f64], p: f64) -> Option<Interval> {
    let (l, u) = quantile_ranks(sorted.len() as u64, p)?;
    Some(Interval {
        low: sorted[(l - 1) as usize],
        high: sorted[(u - 1) as usize],
    })
}

/// The interval of the median of ascending `sorted` values.
pub fn median_interval(sorted: &[f64]) -> Option<Interval> {
    quantile_interval(sorted, 0.5)
}

/// The Wilson score interval of the share `k` of `n` (none for n = 0).
pub fn share_interval(k: u64, n: u64) -> Option<Interval> {
    if n == 0 || k > n {
        return None;
    }
    let z = Normal::standard().inverse_cdf(1.0 - (1.0 - CONFIDENCE) / 2.0);
    let (all, none) = (k == n, k == 0);
    let (n, p) = (n as f64, k as f64 / n as f64);
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At k = 0 and k = n the bound is exactly 0 and 1 (the formula's rounding aside).
    Some(Interval {
        low: if none { 0.0 } else { (centre - half).max(0.0) },
        high: if all { 1.0 } else { (centre + half).min(1.0) },
    })
}

/// The two-sided p-value of the sign test: `up` pairs that rose and `down` that fell (ties
/// left out), under "as likely to rise as to fall".
pub fn sign_test_p(up: u64, down: u64) -> Option<f64> {
    let n = up + down;
    if n == 0 {
        return None;
    }
    let b = Binomial::new(0.5, n).ok()?;
    let k = up.min(down);
    Some((2.0 * b.cdf(k)).min(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_match_the_hand_computed_ones() {
        // Computed by hand from the binomial sums (exact rational arithmetic).
        assert_eq!(quantile_ranks(7, 0.5), Some((1, 7)));
        assert_eq!(quantile_ranks(20, 0.5), Some((6, 15)));
        assert_eq!(quantile_ranks(222, 0.5), Some((96, 127)));
        assert_eq!(quantile_ranks(1000, 0.5), Some((469, 532)));
        assert_eq!(quantile_ranks(132, 0.95), Some((120, 131)));
        assert_eq!(quantile_ranks(132, 0.9), Some((112, 126)));
        assert_eq!(quantile_ranks(6, 0.5), Some((1, 6)));
        assert_eq!(quantile_ranks(5, 0.5), None);
        assert_eq!(quantile_ranks(1, 0.5), None);
        // 20 values are too few for an upper bound on the 90th percentile.
        assert_eq!(quantile_ranks(20, 0.9), None);
    }

    #[test]
    fn wilson_matches_the_hand_computed_ones() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let i = share_interval(3, 20).unwrap();
        assert!(close(i.low, 0.052368745896216595) && close(i.high, 0.36041886474075696));
        let i = share_interval(207, 222).unwrap();
        assert!(close(i.low, 0.891524889987674) && close(i.high, 0.9586290233043828));
        let i = share_interval(7, 7).unwrap();
        assert!(close(i.low, 0.6456695649333126) && i.high == 1.0);
        assert_eq!(share_interval(0, 7).unwrap().low, 0.0);
        assert_eq!(share_interval(0, 0), None);
    }

    #[test]
    fn sign_test_by_hand() {
        // 10 rises, 0 falls: 2 / 2^10.
        assert!((sign_test_p(10, 0).unwrap() - 2.0 / 1024.0).abs() < 1e-12);
        assert_eq!(sign_test_p(3, 3), Some(1.0));
        assert_eq!(sign_test_p(0, 0), None);
    }
}
