//! The headline's first lines: what was measured and what was not, in sentences computed from
//! the rows. Per precision profile (each on its own device): the counted rows, the families,
//! the largest model and peak, the real implementations, the range the factors were fitted on;
//! then the strategies that have rows and those that are formulas, and why rows are not
//! counted. Every number and name comes from the data set, its calibration and the plan's
//! evidence; nothing here is typed by hand.

use super::headline::profile_title;
use crate::engine::{row_abs_rel_error, Calibration, Dataset, Method, Row};
use crate::features::Precision;
use crate::format as fmt;
use crate::plan::evidence::Evidence;
use crate::report::names::reason_name;
use crate::units;
use std::collections::{BTreeMap, BTreeSet};

/// The largest model among `rows` by the graph's parameter count: (parameters, graph).
fn largest<'a>(ds: &'a Dataset, rows: impl Iterator<Item = &'a Row>) -> Option<(u64, &'a str)> {
    rows.filter_map(|r| {
        let g = ds.graphs.get(r.graph.as_str())?;
        Some((g.parameters, r.graph.as_str()))
    })
    .max()
}

/// One profile's sentence: its counted rows, families, largest model and peak, real classes.
fn profile_sentence(ds: &Dataset, cal: &Calibration, p: Precision) -> Option<String> {
    let counted: BTreeSet<&str> = cal
        .rows
        .iter()
        .filter(|r| r.precision == p)
        .map(|r| r.run_id.as_str())
        .collect();
    if counted.is_empty() {
        return None;
    }
    let rows: Vec<&Row> = ds
        .rows
        .iter()
        .filter(|r| counted.contains(r.run_id.as_str()))
        .collect();
    let families: BTreeSet<&str> = rows.iter().map(|r| r.family.as_str()).collect();
    let (title, names) = profile_title(cal, p);
    let mut s = format!(
        "{title} ({names}): {} counted, of {} families",
        fmt::runs(rows.len() as u64),
        fmt::count(families.len() as u64)
    );
    if let Some((n, g)) = largest(ds, rows.iter().copied()) {
        s.push_str(&format!(
            "; the largest model measured has {} parameters ({g})",
            fmt::count(n)
        ));
    }
    if let Some(peak) = rows.iter().filter_map(|r| r.measured_bytes).max() {
        s.push_str(&format!(
            "; the largest measured peak is {}",
            units::gb(peak as f64)
        ));
    }
    let real: Vec<&Row> = rows
        .iter()
        .copied()
        .filter(|r| r.implementation.is_some())
        .collect();
    let libraries: BTreeSet<&str> = real
        .iter()
        .filter_map(|r| r.implementation.as_ref()?.as_str().split(' ').next())
        .collect();
    match largest(ds, real.iter().copied()) {
        None => s.push_str("; no real library's class was measured on it"),
        Some((n, g)) => s.push_str(&format!(
            "; real library classes ({}): {} of {} families, the largest {} parameters ({g})",
            libraries.into_iter().collect::<Vec<_>>().join(", "),
            fmt::runs(real.len() as u64),
            fmt::count(
                real.iter()
                    .map(|r| r.family.as_str())
                    .collect::<BTreeSet<_>>()
                    .len() as u64
            ),
            fmt::count(n)
        )),
    }
    s.push('.');
    Some(s)
}

/// The range a profile's factors were fitted on, and what a job outside it gets.
fn range_sentence(ev: &Evidence, p: Precision) -> Option<String> {
    let r = ev.profiles.get(&p)?.range.as_ref()?;
    Some(format!(
        "{}: the six-factor plan was fitted on {} of {} to {} parameters and peaks of {} to {}; memcal plan widens the bound of a job outside this range, or refuses it.",
        p.as_str(),
        fmt::runs(r.rows),
        fmt::count(r.parameters_min),
        fmt::count(r.parameters_max),
        units::gb(r.peak_min as f64),
        units::gb(r.peak_max as f64)
    ))
}

/// How close the simulated step comes per profile: runs matched to the byte, runs within 1%,
/// and the largest error, so a median that rounds to 0.0% reads as what it is. Over the rows
/// the headline's error counts (completed, at or above the small-runs threshold).
fn simulator_sentence(cal: &Calibration, p: Precision) -> Option<String> {
    let threshold = cal.settings.small_runs_threshold_bytes;
    let errors: Vec<(f64, &str)> = cal
        .rows
        .iter()
        .filter(|r| r.precision == p)
        .filter(|r| row_abs_rel_error(r, Method::Simulated, threshold).is_some())
        .filter_map(|r| {
            let measured = r.measured_bytes? as f64;
            let sim = *r.predictions.get(&Method::Simulated)?;
            (measured > 0.0).then(|| ((sim - measured) / measured, r.run_id.as_str()))
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    let exact = errors.iter().filter(|(e, _)| *e == 0.0).count();
    let within = errors.iter().filter(|(e, _)| e.abs() <= 0.01).count();
    let (worst, run) = errors
        .iter()
        .copied()
        .max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()).then(b.1.cmp(a.1)))?;
    Some(format!(
        "{}: the simulated step matches {} of {} measured to the byte and {} within 1%; its largest error is {} ({run}).",
        p.as_str(),
        fmt::count(exact as u64),
        fmt::runs(errors.len() as u64),
        fmt::count(within as u64),
        fmt::signed_pct(worst)
    ))
}

/// The strategies with rows (how they were measured) and those that are formulas only.
fn strategies_sentence(st: &crate::strategy::evidence::Evidence) -> String {
    let mut by_label: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in &st.rows {
        by_label
            .entry(r.label)
            .or_default()
            .insert(r.strategy.as_str());
    }
    let mut parts: Vec<String> = by_label
        .iter()
        .map(|(label, kinds)| {
            format!(
                "{label}: {}",
                kinds.iter().copied().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    parts.push(if st.formulas_only.is_empty() {
        "no strategy is a formula only".to_string()
    } else {
        format!("formulas, not measured: {}", st.formulas_only.join(", "))
    });
    format!(
        "Strategies and inference ({}): {}.",
        fmt::runs(st.rows.len() as u64),
        parts.join("; ")
    )
}

/// Why rows are not counted: each reason with its count, the most frequent first.
fn excluded_sentence(cal: &Calibration) -> Option<String> {
    if cal.totals.excluded == 0 {
        return None;
    }
    let mut reasons: Vec<_> = cal.excluded_by_reason.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    Some(format!(
        "{} of {} read are not counted in the figures: {}.",
        fmt::runs(cal.totals.excluded),
        fmt::count(cal.totals.inputs),
        reasons
            .iter()
            .map(|(r, n)| format!("{} {}", fmt::count(**n), reason_name(**r)))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// The headline's sentences on what was measured and what was not.
pub(crate) fn scope(
    ds: &Dataset,
    cal: &Calibration,
    ev: &Evidence,
    st: &crate::strategy::evidence::Evidence,
) -> Vec<String> {
    let mut out = Vec::new();
    for &p in cal.fits.keys() {
        out.extend(profile_sentence(ds, cal, p));
        out.extend(range_sentence(ev, p));
        out.extend(simulator_sentence(cal, p));
    }
    out.push(strategies_sentence(st));
    out.extend(excluded_sentence(cal));
    out
}
