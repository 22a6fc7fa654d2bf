//! Presenting a calibration: its JSON, the table `memcal fit` prints, and the refitted factors
//! file.

use super::results::{Calibration, Method, MethodMetrics};
use super::Dataset;
use crate::factors::{FactorsFile, Profile, Provenance, Upper};
use crate::features::{Precision, FEATURE_NAMES};
use std::fmt::Write;

/// The calibration as pretty JSON with a trailing newline. Deterministic: maps are BTreeMaps,
/// lists are sorted, floats are printed by serde_json (shortest round-trip form).
/// The format of calibration.json (`memcal fit`'s file and `--json`).
pub const CALIBRATION_FORMAT: &str = "memcal-calibration/1";

pub fn write_calibration_json(cal: &Calibration) -> String {
    let v = crate::cli_io::with_format(CALIBRATION_FORMAT, cal).expect("calibration serialises");
    let mut s = serde_json::to_string_pretty(&v).expect("calibration serialises");
    s.push('\n');
    s
}

use crate::format::{opt_pct as pct, opt_ratio, MISSING};

fn gb(v: u64) -> String {
    crate::units::gb(v as f64)
}

fn method_line(name: &str, m: &MethodMetrics) -> String {
    format!(
        "{name:<28} {:>7} {:>7} {:>9} {:>9} {:>11} {:>10} {:>9} {:>9}",
        m.rows,
        m.error_rows,
        pct(m.median_abs_rel_error),
        pct(m.within_25pct),
        format!("{}/{}", m.missed_oom.len(), m.did_not_fit_checks),
        format!("{}/{}", m.false_alarm_edge.len(), m.fit_checks),
        m.false_alarm_over.len(),
        pct(m.accuracy),
    )
}

/// The summary `memcal fit` prints.
pub fn summary_table(cal: &Calibration) -> String {
    let mut s = String::new();
    let t = &cal.totals;
    let _ = writeln!(
        s,
        "rows: {} in = {} fitted + {} held out by regime + {} after the fit + {} excluded{}",
        t.inputs,
        t.fitted,
        t.held_out_regime,
        t.after_fit,
        t.excluded,
        if t.balanced {
            ""
        } else {
            "  (DOES NOT ADD UP)"
        }
    );
    for (reason, n) in &cal.excluded_by_reason {
        let _ = writeln!(s, "  excluded, {}: {n}", reason.as_str());
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "factors ({}):", FEATURE_NAMES.join(", "));
    for (p, pf) in &cal.fits {
        let fmt = |a: &[f64; 6]| {
            a.iter()
                .map(|v| format!("{v:.4}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let detail = match &pf.shipped.outcome {
            Some(o) => format!(
                "{} completed + {} OOM runs, {} OOM short, solver {}{}",
                o.completed_runs,
                o.oom_runs,
                o.oom_short,
                o.solver_status,
                if o.unsupported_features.is_empty() {
                    String::new()
                } else {
                    format!(", kept (no data): {}", o.unsupported_features.join(" "))
                }
            ),
            None => "no fitted rows: current factors kept".into(),
        };
        let _ = writeln!(
            s,
            "  {p:<14} refit (in-sample)  [{}]  ({detail})",
            fmt(&pf.shipped.factors)
        );
        let _ = writeln!(
            s,
            "  {:<14} in data/factors.json  [{}]",
            "",
            fmt(&pf.file_factors)
        );
        let _ = writeln!(
            s,
            "  {:<14} held-out-by-architecture refits: {}",
            "",
            pf.held_out_architecture.len()
        );
    }
    let _ = writeln!(
        s,
        "\nupper bound per profile, over its fitted runs >= {} (measured / held-out prediction, nearest rank):",
        gb(cal.settings.small_runs_threshold_bytes),
    );
    for (p, pf) in &cal.fits {
        let u = &pf.upper;
        let _ = writeln!(
            s,
            "  {p:<14} {} runs: q90 {}  q95 {}{}",
            u.ratios.len(),
            opt_ratio(u.q90),
            opt_ratio(u.q95),
            if u.unpredicted.is_empty() {
                String::new()
            } else {
                format!(
                    "  ({} runs without a held-out prediction)",
                    u.unpredicted.len()
                )
            }
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<28} {:>7} {:>7} {:>9} {:>9} {:>11} {:>10} {:>9} {:>9}",
        "method",
        "rows",
        "err>=1G",
        "median|e|",
        "within25",
        "missed OOM",
        "edge",
        "over-est",
        "accuracy"
    );
    for method in Method::ALL {
        match cal.methods.get(&method) {
            Some(m) => {
                let _ = writeln!(s, "{}", method_line(method.as_str(), m));
            }
            None => {
                let _ = writeln!(s, "{:<28} {:>7}", method.as_str(), MISSING);
            }
        }
    }
    let _ = writeln!(s);
    for (name, b) in [("q90", &cal.bound.q90), ("q95", &cal.bound.q95)] {
        let _ = writeln!(
            s,
            "bound at {name}: on did-not-fit checks {} fits / {} borderline / {} does not fit; on fit checks {} / {} / {}",
            b.on_did_not_fit.fits,
            b.on_did_not_fit.borderline,
            b.on_did_not_fit.does_not_fit,
            b.on_fit.fits,
            b.on_fit.borderline,
            b.on_fit.does_not_fit
        );
    }
    if cal.known_misses.is_empty() {
        let _ = writeln!(s, "\nknown misses: none");
    } else {
        let _ = writeln!(s, "\nknown misses:");
        for k in &cal.known_misses {
            let _ = writeln!(s, "  {}: {}", k.family, k.text);
        }
    }
    s
}

/// The factors file with the calibration's shipped factors and bound multipliers for each
/// profile that has fitted rows (the others keep theirs) and new provenance. A fitted profile
/// whose factors and multipliers come out exactly as they were keeps the time they were fixed
/// (its after-the-fit rows stay after the fit); a changed one is fixed at `now_rfc3339`.
pub fn refit_factors_file(ds: &Dataset, cal: &Calibration, now_rfc3339: &str) -> FactorsFile {
    let mut f = ds.factors.clone();
    for (p, pf) in &cal.fits {
        if pf.shipped.source != "fit" {
            continue;
        }
        // No fitted run >= the threshold with a held-out prediction: the multipliers stay.
        let upper = match (pf.upper.q90, pf.upper.q95) {
            (Some(q90), Some(q95)) => Upper { q90, q95 },
            _ => ds.factors.upper_for(*p).clone(),
        };
        let unchanged = pf.file_factors == pf.shipped.factors && *ds.factors.upper_for(*p) == upper;
        let fixed_at = match ds.factors.fixed_at_for(*p) {
            Some(t) if unchanged => t.to_string(),
            _ => now_rfc3339.to_string(),
        };
        f.profiles.insert(
            p.as_str().to_string(),
            Profile {
                factors: pf.shipped.factors,
                upper: Some(upper),
                fixed_at: Some(fixed_at),
                borrowed_from: None,
            },
        );
    }
    // A profile with rows and no factors yet (none of its rows in a fitted regime) takes the
    // factors, multipliers and fixing time of the profile it borrows from: its rows are then
    // checked after that fit, and the file says whose factors they are.
    for p in Precision::ALL {
        let (Some(from), None) = (p.borrows_from(), f.factors(p)) else {
            continue;
        };
        let Some(source) = ds.factors.profiles.get(from.as_str()) else {
            continue;
        };
        if ds.rows.iter().any(|r| r.precision == p) {
            let fixed_at = ds.factors.fixed_at_for(from).map(str::to_string);
            f.profiles.insert(
                p.as_str().to_string(),
                Profile {
                    factors: source.factors,
                    upper: Some(ds.factors.upper_for(from).clone()),
                    fixed_at,
                    borrowed_from: Some(from.as_str().to_string()),
                },
            );
        }
    }
    f.provenance = Some(Provenance {
        fixed_at: now_rfc3339.to_string(),
        rows_sha256: cal.fitted_rows_sha256.clone(),
        rows: cal.totals.fitted,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    });
    f
}
