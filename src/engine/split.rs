//! The thread splits of the row passes: two halves (the checks, the sort), or contiguous
//! runs of about equal weight (the loader); each merged in order, so the outcome does not
//! depend on the split.

use std::cmp::Ordering;
use std::ops::Range;

/// Sorts `v` by `cmp` on two threads (each half alone, then merged): the same order as
/// `sort_by` for a total order.
pub(super) fn sort_on_two_threads<T, F>(v: &mut Vec<T>, cmp: F)
where
    T: Send + Copy,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    if v.len() < 1 << 14 {
        v.sort_by(&cmp);
        return;
    }
    let mid = v.len() / 2;
    let (a, b) = v.split_at_mut(mid);
    std::thread::scope(|sc| {
        let other = sc.spawn(|| b.sort_by(&cmp));
        a.sort_by(&cmp);
        other.join().expect("the sorting thread does not panic");
    });
    let (a, b) = v.split_at(mid);
    let mut out = Vec::with_capacity(v.len());
    let (mut x, mut y) = (0, 0);
    while x < a.len() && y < b.len() {
        if cmp(&b[y], &a[x]) == Ordering::Less {
            out.push(b[y]);
            y += 1;
        } else {
            out.push(a[x]);
            x += 1;
        }
    }
    out.extend_from_slice(&a[x..]);
    out.extend_from_slice(&b[y..]);
    *v = out;
}

/// Runs `b` on a second thread while `a` runs on this one, and returns both results: the
/// engine's row passes split their rows in two halves this way (the two results are then
/// merged in order, so the outcome does not depend on the split).
pub(super) fn join<A, B>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B)
where
    B: Send,
{
    std::thread::scope(|sc| {
        let hb = sc.spawn(b);
        let ra = a();
        (ra, hb.join().expect("an engine thread does not panic"))
    })
}

/// A contiguous run of items and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub items: Range<usize>,
    pub weight: usize,
}

/// `weights` cut into at most `threads` contiguous runs of about equal weight: run k ends at
/// the first item where the weight so far reaches (k + 1) shares. Every item is in one run,
/// in order.
pub(super) fn weighted_runs(weights: &[usize], threads: usize) -> Vec<Run> {
    let total: usize = weights.iter().sum();
    let per = total.div_ceil(threads.max(1)).max(1);
    let mut runs = Vec::with_capacity(threads);
    let (mut from, mut sum, mut before) = (0, 0, 0);
    for (k, w) in weights.iter().enumerate() {
        sum += w;
        if sum >= per * (runs.len() + 1) || k + 1 == weights.len() {
            runs.push(Run {
                items: from..k + 1,
                weight: sum - before,
            });
            from = k + 1;
            before = sum;
        }
    }
    runs
}

/// `f` on every run (with its index), each on a thread of its own; the results in run order.
pub(super) fn on_threads_in_order<R: Send>(
    runs: Vec<Run>,
    f: impl Fn(usize, Run) -> R + Sync,
) -> Vec<R> {
    let f = &f;
    std::thread::scope(|sc| {
        let handles: Vec<_> = runs
            .into_iter()
            .enumerate()
            .map(|(k, run)| sc.spawn(move || f(k, run)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an engine thread does not panic"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_every_item_in_order_at_about_equal_weight() {
        let w = [1, 1, 5, 1, 1, 1, 1, 1];
        let runs = weighted_runs(&w, 3);
        assert_eq!(
            runs,
            vec![
                Run {
                    items: 0..3,
                    weight: 7
                },
                Run {
                    items: 3..4,
                    weight: 1
                },
                Run {
                    items: 4..8,
                    weight: 4
                },
            ]
        );
        assert_eq!(weighted_runs(&[], 4), vec![]);
        assert_eq!(weighted_runs(&[2, 2, 2, 2], 2).len(), 2);
        let got = on_threads_in_order(weighted_runs(&[1; 10], 4), |k, r| (k, r.items.len()));
        assert_eq!(got.iter().map(|g| g.1).sum::<usize>(), 10);
        assert!(got.iter().enumerate().all(|(i, g)| g.0 == i));
    }
}
