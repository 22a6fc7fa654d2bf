//! The known misses: per precision profile, every method's missed did-not-fit checks and the
//! families beyond the ±25% band, the method that decides `memcal plan`'s verdict on that
//! profile first (on the index); and every known miss the engine found, family by family (on a
//! page of its own).

use super::*;
use crate::engine::{KnownMiss, WITHIN};
use crate::features::Precision;

/// The methods in the order the page gives them on `p`: the one that decides the verdict
/// first, then the others in the engine's order; the in-sample refit is not a test.
fn method_order(decides: Option<Method>) -> Vec<Method> {
    let mut out: Vec<Method> = decides.into_iter().collect();
    out.extend(
        Method::ALL
            .into_iter()
            .filter(|m| Some(*m) != decides && *m != Method::PlanRefitInSample),
    );
    out
}

fn of_profile<'a>(ctx: &'a Ctx, p: Precision, m: Method) -> impl Iterator<Item = &'a KnownMiss> {
    ctx.cal
        .known_misses
        .iter()
        .filter(move |k| k.precision == p && k.method == m)
}

/// One table per profile: each method's missed checks (of the profile's did-not-fit checks) and
/// the families they fall in, and the families whose median is beyond the band.
pub(super) fn misses(ctx: &Ctx) -> Vec<Table> {
    let decides = crate::plan::evidence::verdict_methods(ctx.cal);
    let mut out = Vec::new();
    for (&p, pf) in &ctx.cal.fits {
        let d = decides.get(&p).copied();
        let mut t = table(
            &format!("misses-{}", p.as_str()),
            &format!(
                "Known misses of {}: every method, the one that decides the verdict first",
                headline::profile_title(ctx.cal, p).0
            ),
            vec![
                col("Method", false),
                col("Did-not-fit checks called \"fits\"", true),
                col("In families", false),
                col("Families beyond ±25% median |error|", false),
            ],
            "No method has predicted a row of this profile.",
        );
        for m in method_order(d) {
            let Some(mm) = pf.methods.get(&m) else {
                continue;
            };
            let name = if Some(m) == d {
                format!("{} (decides the verdict)", method_name(m))
            } else {
                method_name(m).to_string()
            };
            let missed = of_profile(ctx, p, m)
                .filter(|k| !k.missed_oom.is_empty())
                .map(|k| format!("{} ({})", k.family, k.missed_oom.len()))
                .collect::<Vec<_>>();
            let beyond = of_profile(ctx, p, m)
                .filter(|k| k.missed_oom.is_empty())
                .filter_map(|k| {
                    let e = k.median_abs_rel_error.filter(|e| *e > WITHIN)?;
                    Some(format!("{} ({})", k.family, fmt::pct(e)))
                })
                .collect::<Vec<_>>();
            let held = crate::engine::held_to_band(m);
            t.rows.push(vec![
                Cell::text(name),
                Cell::num(
                    format!(
                        "{} of {}",
                        fmt::count(mm.missed_oom.len() as u64),
                        fmt::count(mm.did_not_fit_checks)
                    ),
                    mm.missed_oom.len().to_string(),
                ),
                Cell::text(if missed.is_empty() {
                    "none".to_string()
                } else {
                    missed.join(", ")
                }),
                Cell::text(match (held, beyond.is_empty()) {
                    (false, _) => "not held to the band (a baseline or a split of the plan)".into(),
                    (true, true) => "none".into(),
                    (true, false) => beyond.join(", "),
                }),
            ]);
        }
        out.push(t);
    }
    out
}

/// Every known miss, profile by profile, the deciding method first, family by family, with the
/// checks it missed; moved to a page of its own by the caller.
pub(super) fn misses_by_family(ctx: &Ctx) -> Table {
    let decides = crate::plan::evidence::verdict_methods(ctx.cal);
    let mut t = table(
        "misses-by-family",
        "Every known miss, per profile and family",
        vec![
            col("Family", false),
            col("Method", false),
            col("What the engine found", false),
            col("Median |error|", true),
            col("Did-not-fit checks called fits", false),
        ],
        "No known misses.",
    );
    for &p in ctx.cal.fits.keys() {
        for m in method_order(decides.get(&p).copied()) {
            for k in of_profile(ctx, p, m) {
                t.rows.push(vec![
                    Cell::text(&k.family).link(ctx.family_href(&k.family)),
                    Cell::text(method_name(m)),
                    Cell::text(&k.text),
                    opt_pct(k.median_abs_rel_error),
                    Cell::text(fmt::or_dash(listed(ctx, k))),
                ]);
            }
        }
    }
    t
}

/// A miss's checks, the first [`MISSES_LISTED_LIMIT`] of them.
fn listed(ctx: &Ctx, k: &KnownMiss) -> Option<String> {
    if k.missed_oom.is_empty() {
        return None;
    }
    let mut listed = k
        .missed_oom
        .iter()
        .take(MISSES_LISTED_LIMIT)
        .map(|c| ctx.check_ref(c))
        .collect::<Vec<_>>()
        .join("; ");
    if k.missed_oom.len() > MISSES_LISTED_LIMIT {
        listed.push_str(&format!(
            "; and {} more (memory-calibration.json has every check)",
            fmt::count((k.missed_oom.len() - MISSES_LISTED_LIMIT) as u64)
        ));
    }
    Some(listed)
}

/// The maintainers' notes on known misses (`data/prose/misses/<family>.md`), each under its
/// family's name, for the page of every miss.
pub(super) fn notes_html(ctx: &Ctx) -> String {
    use askama::filters::{Escaper, Html};
    let mut out = String::new();
    for (f, html) in &ctx.prose.misses {
        out.push_str("<h2><a href=\"");
        let _ = Html.write_escaped_str(&mut out, &ctx.family_href(f));
        out.push_str("\">");
        let _ = Html.write_escaped_str(&mut out, f);
        out.push_str("</a></h2>\n<div class=\"note\">");
        out.push_str(html);
        out.push_str("</div>\n");
    }
    out
}
