//! The two-thread split of the row passes.

use std::cmp::Ordering;

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
