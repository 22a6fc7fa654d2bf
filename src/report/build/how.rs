//! The "How" section: the formula, the factors, the settings, the fit, the splits, the refits,
//! accelerate's estimate and the numbers injected into the prose.

use super::*;

pub(super) fn how(ctx: &Ctx) -> HowView {
    HowView {
        formula: format!(
            "estimate = Σ factorᵢ × featureᵢ over the {} features; bound = max(floor, estimate × q95); the plan fits a card when estimate × (1 + headroom) ≤ card",
            fmt::number_word(crate::features::N_FEATURES)
        ),
        factors: factors_table(ctx),
        settings: settings(ctx),
        fit: fit_facts(ctx),
        splits: splits_table(ctx),
        refits: refits_table(ctx),
        accelerate: accelerate_table(ctx),
        injected: injected_table(ctx),
    }
}

/// The factors per precision profile: today's fit and the file's (the file's alone before any fit).
fn factors_table(ctx: &Ctx) -> Table {
    let cal = ctx.cal;
    let s = &cal.settings;
    let mut columns = vec![col("Feature", false)];
    for (p, pf) in &cal.fits {
        columns.push(col(&format!("{p}: today ({})", pf.shipped.source), true));
        columns.push(col(&format!("{p}: in data/factors.json"), true));
    }
    let mut factors = table(
        "factors",
        "The factors, per precision profile",
        columns,
        "No precision profile has been fitted yet.",
    );
    for (i, name) in s.feature_names.iter().enumerate() {
        let mut row = vec![Cell::text(*name)];
        for pf in cal.fits.values() {
            let a = pf.shipped.factors[i];
            let b = pf.file_factors[i];
            row.push(Cell::num(fmt::factor(a), fmt::factor(a)));
            row.push(Cell::num(fmt::factor(b), fmt::factor(b)));
        }
        factors.rows.push(row);
    }
    if cal.fits.is_empty() {
        // Still show the shipped file's factors.
        let mut columns = vec![col("Feature", false)];
        for p in ctx.factors.profiles.keys() {
            columns.push(col(&format!("{p}: in data/factors.json"), true));
        }
        factors.columns = columns;
        for (i, name) in FEATURE_NAMES.iter().enumerate() {
            let mut row = vec![Cell::text(*name)];
            for p in ctx.factors.profiles.values() {
                row.push(Cell::num(
                    fmt::factor(p.factors[i]),
                    fmt::factor(p.factors[i]),
                ));
            }
            factors.rows.push(row);
        }
    }
    factors
}

/// The engine's settings.
fn settings(ctx: &Ctx) -> Vec<Fact> {
    let cal = ctx.cal;
    let s = &cal.settings;
    let settings = vec![
        fact("Headroom", fmt::pct(s.headroom)),
        fact("Bound floor", units::both(s.bound_floor_bytes as f64)),
        fact(
            "Small runs",
            format!(
                "below {}, weighed {}",
                units::gb(s.small_runs_threshold_bytes as f64),
                s.small_runs_weight
            ),
        ),
        fact("Out-of-memory penalty", format!("{}", s.oom_penalty)),
        fact("Training regimes", s.training_regimes.join(", ")),
        fact(
            "Factors fixed at",
            s.fixed_at.clone().unwrap_or_else(|| "not fixed yet".into()),
        ),
        fact("Quantile rule", NEAREST_RANK_RULE),
    ];
    settings
}

/// What the fit was fitted on and how each profile's solve ended.
fn fit_facts(ctx: &Ctx) -> Vec<Fact> {
    let cal = ctx.cal;
    let mut fit = vec![
        fact("Rows fitted", fmt::count(cal.totals.fitted)),
        fact("SHA-256 of the fitted rows", cal.fitted_rows_sha256.clone()),
        fact(
            "data/factors.json fitted on these rows",
            if cal.factors_file_rows_match {
                "yes"
            } else {
                "no"
            },
        ),
    ];
    for (p, pf) in &cal.fits {
        let v = match &pf.shipped.outcome {
            Some(o) => format!(
                "{} and {}, {} short; solver {} after {}",
                fmt::plural(o.completed_runs, "completed run"),
                fmt::plural(o.oom_runs, "out-of-memory run"),
                fmt::plural(o.oom_short, "constraint"),
                o.solver_status,
                fmt::plural(o.solves as u64, "solve")
            ),
            None => format!("{} (no fitted row)", pf.shipped.source),
        };
        fit.push(fact(&format!("Fit of {p}"), v));
    }
    fit
}

/// Where every row goes, with how it is predicted.
fn splits_table(ctx: &Ctx) -> Table {
    let cal = ctx.cal;
    let t = &cal.totals;
    let mut splits = table(
        "splits",
        "Where every row goes",
        vec![
            col("Bucket", false),
            col("Rows", true),
            col("Predicted by", false),
        ],
        "",
    );
    for (name, n, by) in [
        (
            "fitted",
            t.fitted,
            "the shipped factors (in-sample) and the factors refitted without its family",
        ),
        (
            "held out by regime",
            t.held_out_regime,
            "the shipped factors, fitted on the training regimes",
        ),
        (
            "after the fit",
            t.after_fit,
            "the factors in data/factors.json as fixed",
        ),
        ("not counted", t.excluded, "nothing (see Not counted)"),
        ("all rows read", t.inputs, fmt::MISSING),
    ] {
        splits
            .rows
            .push(vec![Cell::text(name), count_cell(n), Cell::text(by)]);
    }
    splits
}

/// accelerate's estimate per graph and precision, as it prints it.
fn accelerate_table(ctx: &Ctx) -> Table {
    let cal = ctx.cal;
    let mut accelerate = table(
        "accelerate",
        "accelerate's estimate-memory, reproduced per graph and precision (as it prints, 1024-based units)",
        vec![
            col("Graph", false),
            col("Precision", false),
            col("Training estimate, as printed", true),
            col("Training estimate", true),
        ],
        "No graph has a run yet.",
    );
    let mut seen = BTreeMap::new();
    for r in &cal.rows {
        if let Some(b) = r.predictions.get(&Method::Accelerate) {
            seen.entry((r.graph.as_str(), r.precision.as_str()))
                .or_insert(*b);
        }
    }
    for ((g, p), b) in seen {
        accelerate.rows.push(vec![
            Cell::text(g),
            Cell::text(p),
            Cell::num(units::accelerate_convert_bytes(b), fmt::bytes_key(b)),
            Cell::num(units::both(b), fmt::bytes_key(b)),
        ]);
    }
    accelerate
}

/// The numbers placed into the prose, with the engine field of each.
fn injected_table(ctx: &Ctx) -> Table {
    let cal = ctx.cal;
    let s = &cal.settings;
    let t = &cal.totals;
    let mut injected = table(
        "injected",
        "Numbers placed into this page's sentences, and the engine field each comes from",
        vec![
            col("Number", false),
            col("Value", true),
            col("Engine field", false),
        ],
        "",
    );
    let inj: Vec<(&str, String, &str)> = vec![
        ("rows read", fmt::count(t.inputs), "totals.inputs"),
        ("rows fitted", fmt::count(t.fitted), "totals.fitted"),
        (
            "rows not counted",
            fmt::count(t.excluded),
            "totals.excluded",
        ),
        ("headroom", fmt::pct(s.headroom), "settings.headroom"),
        (
            "small-run threshold",
            units::gb(s.small_runs_threshold_bytes as f64),
            "settings.small_runs_threshold_bytes",
        ),
    ];
    for (n, v, f) in inj {
        injected
            .rows
            .push(vec![Cell::text(n), Cell::num(v.clone(), v), Cell::text(f)]);
    }
    for (p, pf) in &cal.fits {
        for (q, v) in [("q90", pf.upper.q90_used), ("q95", pf.upper.q95_used)] {
            let v = fmt::ratio(v);
            injected.rows.push(vec![
                Cell::text(format!("{q} used ({})", p.as_str())),
                Cell::num(v.clone(), v),
                Cell::text(format!("fits.{}.upper.{q}_used", p.as_str())),
            ]);
        }
    }
    injected
}

/// The held-out-by-architecture refits, per profile and family.
fn refits_table(ctx: &Ctx) -> Table {
    let cal = ctx.cal;
    let mut refits = Vec::new();
    for (p, pf) in &cal.fits {
        for (fam, r) in &pf.held_out_architecture {
            refits.push((p.as_str().to_string(), fam.clone(), r));
        }
    }
    let mut refit_table = table(
        "refits",
        "The held-out-by-architecture refits: each family's factors fitted without it",
        vec![
            col("Precision", false),
            col("Family held out", false),
            col("Source", false),
            col("Completed runs", true),
            col("Out-of-memory runs", true),
            col("Solver", false),
        ],
        "No refit yet.",
    );
    for (p, fam, r) in refits {
        let (c, o, st) = match &r.outcome {
            Some(o) => (
                count_cell(o.completed_runs),
                count_cell(o.oom_runs),
                o.solver_status.clone(),
            ),
            None => (
                Cell::num(fmt::MISSING, ""),
                Cell::num(fmt::MISSING, ""),
                fmt::MISSING.to_string(),
            ),
        };
        refit_table.rows.push(vec![
            Cell::text(p),
            Cell::text(&fam).link(ctx.family_href(&fam)),
            Cell::text(r.source),
            c,
            o,
            Cell::text(st),
        ]);
    }
    refit_table
}
