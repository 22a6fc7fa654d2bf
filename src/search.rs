//! A search every planning mode shares (the largest batch, the longest context), in a module of
//! its own so that the planners (`plan`, `strategy::memory`) import it without importing each
//! other.

/// The largest n in 1..=max for which `fits(n)` holds, given that it holds for every n below
/// one that holds (a batch, a context length); None when not even 1 fits. Binary search.
pub fn largest_fitting(max: u64, fits: impl Fn(u64) -> bool) -> Option<u64> {
    if !fits(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}
