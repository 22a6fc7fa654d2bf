//! Per family: its metrics over all its rows and over each profile's alone, its graphs and row
//! count, and the known misses the engine finds, per profile and for every method that is tested
//! on rows it did not see (all but the in-sample refit): a did-not-fit check the method called
//! "fits", or, for the two methods a verdict can be decided by (the six-factor plan held out by
//! architecture and the simulator), a median |error| beyond the ±25% band.

use super::metrics::{finish_all, Acc};
use super::results::*;
use crate::features::Precision;
use std::collections::{BTreeMap, BTreeSet};

/// Whether a family's median |error| beyond the ±25% band is a known miss of `method`: only for
/// the methods a verdict can be decided by (the six-factor plan held out by architecture and
/// the simulator); the others are baselines or splits of the plan.
pub fn held_to_band(method: Method) -> bool {
    matches!(method, Method::PlanHeldOutArchitecture | Method::Simulated)
}

/// The families' reports (by name) and the known misses, from each family's per-profile
/// tallies (`fam_accs[family * NP + profile]`), graphs and row counts.
pub(super) fn family_reports(
    fam_names: &[&str],
    fam_accs: Vec<Vec<Acc>>,
    fam_graphs: &[BTreeSet<&str>],
    fam_rows: &[u64],
) -> (BTreeMap<String, FamilyReport>, Vec<KnownMiss>) {
    let mut families = BTreeMap::new();
    let mut known_misses = Vec::new();
    let mut cells = fam_accs.into_iter();
    for k in 0..fam_names.len() {
        let name = fam_names[k].to_string();
        // The family's cells, one per profile: each finished alone, then all merged.
        let mut by_profile = BTreeMap::new();
        let mut accs: Option<Vec<Acc>> = None;
        for p in Precision::ALL {
            let cell = cells.next().expect("a cell per family and profile");
            if cell.iter().any(|a| a.rows > 0) {
                by_profile.insert(p, finish_all(cell.clone()));
            }
            match &mut accs {
                None => accs = Some(cell),
                Some(all) => {
                    for (a, b) in all.iter_mut().zip(cell) {
                        a.merge(b);
                    }
                }
            }
        }
        let ms = finish_all(accs.expect("at least one profile"));
        for (&precision, pms) in &by_profile {
            for (&method, m) in pms {
                if held_to_band(method) {
                    if let Some(e) = m.median_abs_rel_error.filter(|e| *e > WITHIN) {
                        known_misses.push(KnownMiss {
                            family: name.clone(),
                            precision,
                            method,
                            text: format!(
                                "{}: {}median |error| {:.1}% over {} runs (beyond {:.0}%)",
                                precision.as_str(),
                                if method == Method::Simulated {
                                    ""
                                } else {
                                    "held-out "
                                },
                                e * 100.0,
                                m.error_rows,
                                WITHIN * 100.0
                            ),
                            median_abs_rel_error: Some(e),
                            missed_oom: Vec::new(),
                        });
                    }
                }
                if method != Method::PlanRefitInSample && !m.missed_oom.is_empty() {
                    known_misses.push(KnownMiss {
                        family: name.clone(),
                        precision,
                        method,
                        text: format!(
                            "{}: {} of {} did-not-fit checks called \"fits\" by {}",
                            precision.as_str(),
                            m.missed_oom.len(),
                            m.did_not_fit_checks,
                            method.as_str()
                        ),
                        median_abs_rel_error: m.median_abs_rel_error,
                        missed_oom: m.missed_oom.clone(),
                    });
                }
            }
        }
        families.insert(
            name,
            FamilyReport {
                graphs: fam_graphs[k].iter().map(|g| g.to_string()).collect(),
                rows: fam_rows[k],
                methods: ms,
                by_profile,
            },
        );
    }
    (families, known_misses)
}
