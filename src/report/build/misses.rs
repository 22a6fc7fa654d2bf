//! The known misses, per family.

use super::*;

pub(super) fn misses(ctx: &Ctx) -> Vec<MissGroup> {
    let mut by_family: BTreeMap<&str, Vec<&crate::engine::KnownMiss>> = BTreeMap::new();
    for k in &ctx.cal.known_misses {
        by_family.entry(k.family.as_str()).or_default().push(k);
    }
    by_family
        .into_iter()
        .map(|(f, list)| {
            let mut t = table(
                &format!("misses-{}", fmt::slug(f)),
                &format!("Known misses of {f}"),
                vec![
                    col("Method", false),
                    col("What the engine found", false),
                    col("Median |error|", true),
                    col("Did-not-fit checks called fits", false),
                ],
                "",
            );
            for k in list {
                t.rows.push(vec![
                    Cell::text(method_name(k.method)),
                    Cell::text(&k.text),
                    opt_pct(k.median_abs_rel_error),
                    Cell::text(fmt::or_dash(if k.missed_oom.is_empty() {
                        None
                    } else {
                        Some({
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
                            listed
                        })
                    })),
                ]);
            }
            MissGroup {
                family: f.to_string(),
                family_href: ctx.family_href(f),
                note_html: ctx.prose.misses.get(f).cloned(),
                table: t,
            }
        })
        .collect()
}
