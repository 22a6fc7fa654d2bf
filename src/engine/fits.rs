//! The fits of each precision profile: the shipped fit on every fitted row, the refit without
//! each family (held out by architecture) and without each implementation group (held out by
//! implementation), from the profile's per-family blocks of normal equations and out-of-memory
//! constraints.

use super::fit::{fit, FitOutcome, Normal};
use super::groups::ImplementationGroup;
use super::results::{FitReport, ProfileFits, Upper};
use crate::factors::FactorsFile;
use crate::features::{Precision, N_FEATURES};
use std::collections::BTreeMap;

/// One profile's and family's part of the fit: the normal equations of its completed runs and
/// the constraint vectors of its out-of-memory runs (in run-id order).
pub(super) type Block = (Normal, Vec<[f64; N_FEATURES]>);
/// A profile's blocks, by family index (absent: the family has no fitted row there).
pub(super) type Blocks = Vec<Option<Block>>;
/// Per family index: held-out factors (absent: nothing left to fit on).
pub(super) type PerFamily = Vec<Option<[f64; N_FEATURES]>>;

/// The fits, and per profile the held-out factors each family's fitted rows are predicted by.
pub(super) struct Fitted {
    pub fits: BTreeMap<Precision, ProfileFits>,
    /// Refitted without the family (held out by architecture).
    pub held: BTreeMap<Precision, PerFamily>,
    /// Refitted without the family's implementation group (held out by implementation).
    pub group: BTreeMap<Precision, PerFamily>,
}

/// Every profile of `f` with factors: its fits from `blocks` (`fam_names` in index order,
/// `group_of` each family's group in `groups`). The upper bound and the metrics are set later.
pub(super) fn fit_profiles(
    f: &FactorsFile,
    blocks: &BTreeMap<Precision, Blocks>,
    fam_names: &[&str],
    groups: &[ImplementationGroup],
    group_of: &[usize],
) -> Fitted {
    let mut fits: BTreeMap<Precision, ProfileFits> = BTreeMap::new();
    // Per profile, per family index: the held-out-by-architecture factors.
    let mut held_factors: BTreeMap<Precision, Vec<Option<[f64; N_FEATURES]>>> = BTreeMap::new();
    // Per profile, per family index: the held-out-by-implementation factors (its group's).
    let mut group_factors: BTreeMap<Precision, Vec<Option<[f64; N_FEATURES]>>> = BTreeMap::new();
    for p in Precision::ALL {
        let Some(file_factors) = f.factors(p).copied() else {
            continue;
        };
        let fam = blocks.get(&p);
        let present: Vec<(usize, &Block)> = fam
            .map(|v| {
                v.iter()
                    .enumerate()
                    .filter_map(|(k, b)| b.as_ref().map(|b| (k, b)))
                    .collect()
            })
            .unwrap_or_default();
        let shipped = if present.is_empty() {
            FitReport {
                factors: file_factors,
                source: "kept",
                outcome: None,
            }
        } else {
            let (n, ooms) = sum_blocks(&present, |_| true);
            fitted(fit(&n, &ooms, f.oom_penalty, &file_factors))
        };
        let mut held = BTreeMap::new();
        let mut hf = vec![None; fam_names.len()];
        for &(left, _) in &present {
            if let Some(r) = refit_without(&present, |k| k == left, f.oom_penalty) {
                hf[left] = Some(r.factors);
                held.insert(fam_names[left].to_string(), r);
            }
        }
        // Each group of several families refitted without all of them; a group of one is its
        // family's fit above.
        let mut held_impl = BTreeMap::new();
        let mut gf = vec![None; fam_names.len()];
        for (g, group) in groups.iter().enumerate() {
            let members: Vec<usize> = (0..fam_names.len()).filter(|&k| group_of[k] == g).collect();
            let factors = if members.len() == 1 {
                hf[members[0]]
            } else {
                refit_without(&present, |k| group_of[k] == g, f.oom_penalty).map(|r| {
                    let factors = r.factors;
                    held_impl.insert(group.name.clone(), r);
                    factors
                })
            };
            for &k in &members {
                gf[k] = factors;
            }
        }
        held_factors.insert(p, hf);
        group_factors.insert(p, gf);
        fits.insert(
            p,
            ProfileFits {
                file_factors,
                shipped,
                held_out_architecture: held,
                held_out_implementation: held_impl,
                // Set once the held-out predictions and the checks exist (below).
                upper: Upper::default(),
                methods: BTreeMap::new(),
            },
        );
    }
    Fitted {
        fits,
        held: held_factors,
        group: group_factors,
    }
}

/// The normal equations and out-of-memory constraints of the blocks of `present` whose family
/// `keep` selects, added in `present`'s order (so the same floats as one pass).
fn sum_blocks(
    present: &[(usize, &Block)],
    keep: impl Fn(usize) -> bool,
) -> (Normal, Vec<[f64; N_FEATURES]>) {
    let mut n = Normal::default();
    let mut ooms = Vec::new();
    for (k, (nb, ob)) in present {
        if keep(*k) {
            n.add(nb);
            ooms.extend_from_slice(ob);
        }
    }
    (n, ooms)
}

/// A held-out refit: every block but those of the families `leave_out` selects, from zero;
/// absent when no completed run is left to fit on.
fn refit_without(
    present: &[(usize, &Block)],
    leave_out: impl Fn(usize) -> bool,
    oom_penalty: f64,
) -> Option<FitReport> {
    let (n, ooms) = sum_blocks(present, |k| !leave_out(k));
    (n.n > 0).then(|| fitted(fit(&n, &ooms, oom_penalty, &[0.0; N_FEATURES])))
}

fn fitted(out: FitOutcome) -> FitReport {
    FitReport {
        factors: out.factors,
        source: "fit",
        outcome: Some(out),
    }
}
