//! Section 1, the headline: one table per precision profile (each measured on its own device)
//! of every method's out-of-sample numbers with the verdict method marked, the regimes with the
//! facts their rows give, and the cards. Formatting only: every number is the engine's.

use super::{col, count_cell, fact, interval_cell, method_name, table, Ctx};
use crate::engine::{Calibration, Method, MethodMetrics, RegimeFacts, RegimeRows};
use crate::features::Precision;
use crate::format as fmt;
use crate::report::view::{Cell, Headline, Table};
use crate::units;

/// The headline table's methods, in its order after the profile's verdict method (which comes
/// first): the plan as shipped and out of sample, the simulator and the baselines. (The
/// in-sample refit is in the methods section.)
pub(crate) const HEADLINE_METHODS: [Method; 8] = [
    Method::PlanAsShipped,
    Method::PlanHeldOutArchitecture,
    Method::PlanHeldOutImplementation,
    Method::PlanHeldOutRegime,
    Method::PlanAfterFit,
    Method::Simulated,
    Method::Accelerate,
    Method::Textbook,
];

/// `CPU` or `GPU` for a device kind as the rows record it.
fn kind_label(kind: &str) -> &str {
    match kind {
        "cpu" => "CPU",
        "cuda" => "GPU",
        other => other,
    }
}

/// `CPU fp32` and the device names of profile `p`, from its rows' devices
/// (`cpu: Intel(R) Xeon(R)`, `Calibration.measured.devices_by_profile`).
pub(super) fn profile_title(cal: &Calibration, p: Precision) -> (String, String) {
    let profile = p.as_str();
    let devices = cal.measured.devices_by_profile.get(&p);
    let mut kinds: Vec<&str> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for d in devices.into_iter().flatten() {
        let (kind, name) = d.split_once(": ").unwrap_or(("", d.as_str()));
        let k = kind_label(kind);
        if !kinds.contains(&k) {
            kinds.push(k);
        }
        names.push(name.to_string());
    }
    let title = if kinds.is_empty() {
        profile.to_string()
    } else {
        format!("{} {profile}", kinds.join(" and "))
    };
    (title, fmt::list(&names, "; "))
}

/// `8 of 325; 2.5% (95%: 1.2–4.8%)`, marked bad when any was missed.
fn missed_cell(m: &MethodMetrics) -> Cell {
    let missed = m.missed_oom.len() as u64;
    let text = match m.missed_oom_share {
        Some(x) => format!(
            "{} of {}; {}",
            fmt::count(missed),
            fmt::count(m.did_not_fit_checks),
            fmt::pct_interval(x, m.missed_oom_interval, m.did_not_fit_checks, false)
        ),
        None => format!(
            "{} of {}",
            fmt::count(missed),
            fmt::count(m.did_not_fit_checks)
        ),
    };
    let c = Cell::num(text, missed.to_string());
    if missed > 0 {
        c.class("bad")
    } else {
        c
    }
}

/// One profile's headline table.
fn profile_table(
    profile: &str,
    title: &str,
    devices: &str,
    borrowed_from: Option<&str>,
    verdict: Option<Method>,
    ms: &[(Method, &MethodMetrics)],
) -> Table {
    let band = fmt::within_band();
    let borrowed = borrowed_from.map_or(String::new(), |from| {
        format!(" (its factors are {from}'s: none of its rows is fitted, every one is held out)")
    });
    let mut t = table(
        &format!("headline-{profile}"),
        &format!("{title} ({devices}): each method over this profile's rows alone{borrowed}"),
        vec![
            col("Method", false),
            col("Median |error|", true),
            col("Did-not-fit checks called \"fits\"", true),
            col(&format!("Within {band}"), true),
            col("Runs in the error", true),
        ],
        "No method has predicted a row of this profile yet.",
    );
    for (m, mm) in ms {
        let head = if Some(*m) == verdict {
            Cell::text(format!("{}: the verdict method", method_name(*m))).class("verdict")
        } else {
            Cell::text(method_name(*m))
        };
        t.rows.push(vec![
            head,
            interval_cell(
                mm.median_abs_rel_error,
                mm.median_interval,
                mm.error_rows,
                mm.few_runs,
            ),
            missed_cell(mm),
            interval_cell(
                mm.within_25pct,
                mm.within_25pct_interval,
                mm.error_rows,
                false,
            ),
            count_cell(mm.error_rows),
        ]);
    }
    t
}

/// One table per profile with rows, in profile order.
fn headline_tables(ctx: &Ctx) -> Vec<Table> {
    let verdicts = crate::plan::evidence::verdict_methods(ctx.cal);
    ctx.cal
        .fits
        .iter()
        .filter(|(_, pf)| !pf.methods.is_empty())
        .map(|(p, pf)| {
            let (title, names) = profile_title(ctx.cal, *p);
            // The verdict method (`memcal plan`'s, from the held-out records) first.
            let verdict = verdicts.get(p).copied();
            let ms: Vec<(Method, &MethodMetrics)> = verdict
                .into_iter()
                .chain(HEADLINE_METHODS.into_iter().filter(|m| Some(*m) != verdict))
                .filter_map(|m| Some((m, pf.methods.get(&m)?)))
                .collect();
            let borrowed = ctx
                .factors
                .profiles
                .get(p.as_str())
                .and_then(|x| x.borrowed_from.as_deref());
            profile_table(p.as_str(), &title, &names, borrowed, verdict, &ms)
        })
        .collect()
}

/// `1 to 12 per graph; 14 of 45 graphs have one`, or `6 per graph`.
fn batches_text(f: &RegimeFacts) -> String {
    if f.min_batches_per_graph == f.max_batches_per_graph {
        return format!("{} per graph", fmt::count(f.min_batches_per_graph));
    }
    let mut s = format!(
        "{} to {} per graph",
        fmt::count(f.min_batches_per_graph),
        fmt::count(f.max_batches_per_graph)
    );
    if f.graphs_with_one_batch > 0 {
        s.push_str(&format!(
            "; {} of {} graphs {} one",
            fmt::count(f.graphs_with_one_batch),
            fmt::count(f.graphs),
            if f.graphs_with_one_batch == 1 {
                "has"
            } else {
                "have"
            }
        ));
    }
    s
}

/// The caps a regime's rows ran under, and how many ran uncapped.
fn caps_text(f: &RegimeFacts) -> String {
    let caps: Vec<String> = f.caps_bytes.iter().map(|&b| units::gib(b as f64)).collect();
    match (caps.is_empty(), f.uncapped_rows) {
        (true, _) => "none: every row ran at the device's capacity".to_string(),
        (false, 0) => caps.join(", "),
        (false, n) => format!("{}; {} uncapped", caps.join(", "), fmt::runs(n)),
    }
}

/// One line of the regimes table.
fn regime_row(label: String, description: &str, role: &str, f: &RegimeFacts) -> Vec<Cell> {
    let measured = f.rows > 0;
    let or_missing = |s: String| {
        if measured {
            s
        } else {
            fmt::MISSING.to_string()
        }
    };
    let devices: Vec<String> = f
        .devices
        .iter()
        .map(|d| d.split_once(": ").map_or(d.clone(), |(_, n)| n.to_string()))
        .collect();
    let capacities: Vec<String> = f
        .device_capacities_bytes
        .iter()
        .map(|&b| units::both(b as f64))
        .collect();
    vec![
        Cell::text(label),
        Cell::text(description),
        Cell::text(role),
        count_cell(f.rows),
        count_cell(f.graphs),
        Cell::text(or_missing(batches_text(f))),
        Cell::text(fmt::list(&devices, "; ")),
        Cell::text(fmt::list(&capacities, "; ")),
        Cell::text(or_missing(caps_text(f))),
    ]
}

/// The regimes, each with its description and the facts of its rows (those measured after the
/// fit on a line of their own).
fn regimes_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "regimes",
        "The regimes: how each was measured, in words from data/factors.json, and what its rows say",
        vec![
            col("Regime", false),
            col("Description", false),
            col("Role", false),
            col("Rows read", true),
            col("Graphs", true),
            col("Batches", false),
            col("Device", false),
            col("Device capacity", false),
            col("Emulated caps", false),
        ],
        "No regime is listed in data/factors.json.",
    );
    let none = RegimeRows::default();
    for (label, r) in &ctx.factors.regimes {
        let rows = ctx.cal.measured.regimes.get(label).unwrap_or(&none);
        let training = ctx.cal.settings.training_regimes.contains(label);
        let role = if training {
            "training: its rows are fitted"
        } else {
            "held out: its rows are never fitted"
        };
        t.rows.push(regime_row(
            ctx.regime_label(label),
            &r.description,
            role,
            &rows.measured,
        ));
        if rows.after_fit.rows > 0 {
            t.rows.push(regime_row(
                format!("{}, after the fit", ctx.regime_label(label)),
                &r.description,
                "after the fit: measured after the factors were fixed, never fitted",
                &rows.after_fit,
            ));
        }
    }
    t
}

pub(super) fn headline(ctx: &Ctx) -> Headline {
    let cal = ctx.cal;
    let t = &cal.totals;
    let m = &cal.measured;
    let facts = vec![
        fact("Run rows read", fmt::count(t.inputs)),
        fact("Fitted", fmt::count(t.fitted)),
        fact("Held out by regime", fmt::count(t.held_out_regime)),
        fact("After the fit", fmt::count(t.after_fit)),
        fact("Not counted", fmt::count(t.excluded)),
        fact(
            "Architecture families",
            fmt::count(ctx.families.len() as u64),
        ),
        fact("memcal version", cal.tool_version),
        fact("Devices", fmt::list(&m.devices, "; ")),
        fact("Measured from", fmt::or_dash(m.first_run.clone())),
        fact("Measured until", fmt::or_dash(m.last_run.clone())),
        fact("Harness", fmt::list(&m.harness_versions, "; ")),
        fact("torch", fmt::list(&m.torch_versions, "; ")),
    ];
    let cards = ctx
        .factors
        .cards
        .iter()
        .map(|c| {
            format!(
                "{}: {} bytes ({})",
                c.name,
                fmt::count(c.bytes),
                units::gib(c.bytes as f64)
            )
        })
        .collect();
    let note = format!(
        "The verdict method, marked ▶, is the one whose \"fits\" memcal plan prints. Median |error| and the share within {} are over completed runs of at least {}; a did-not-fit check is a card a run did not fit, and calling it \"fits\" is the expensive mistake.",
        fmt::within_band(),
        units::gb(cal.settings.small_runs_threshold_bytes as f64)
    );
    Headline {
        scope: Vec::new(),
        note,
        facts,
        tables: headline_tables(ctx),
        regimes: regimes_table(ctx),
        cards,
        cpu_only: ctx.runs_label == "CPU runs",
    }
}
