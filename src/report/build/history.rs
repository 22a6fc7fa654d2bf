//! The factor history page: each entry as `memcal audit` established it.

use super::*;

/// The factor history page: one row per fixing of the factors and profile, newest first, with
/// the values the audit established (the factors file of the entry's commit, the medians
/// recomputed from that commit's rows); an entry that fails the audit shows no values.
pub(super) fn history_page(history: &[AuditedEntry], nav: Vec<Link>) -> HistoryPage {
    let mut columns = vec![
        col("Fixed at (UTC)", false),
        col("From", false),
        col("Profile", false),
        col("Profile's factors fixed at", false),
        col("Rows fitted", true),
    ];
    columns.extend(FEATURE_NAMES.iter().map(|f| col(f, true)));
    columns.extend([
        col("q90", true),
        col("q95", true),
        col("Held-out median |error| (recomputed)", true),
        col("In-sample median |error| (recomputed)", true),
        col("Rows SHA-256", false),
        col("memcal", false),
        col("Audit", false),
    ]);
    let mut t = table(
        "factor-history",
        "Every fixing of the factors, newest first, one row per precision profile, as audited",
        columns,
        "The factors have not been fitted yet: data/factors.json holds the seed values.",
    );
    let width = t.columns.len();
    // Newest first by fixing time (the log's order reversed, unless the log is out of order:
    // then the entry that breaks it fails the audit and says so).
    let mut newest_first: Vec<&AuditedEntry> = history.iter().rev().collect();
    newest_first.sort_by(|a, b| b.fixed_at.cmp(&a.fixed_at));
    for e in newest_first {
        let from = e
            .source
            .as_ref()
            .map_or("no version of data/factors.json".to_string(), |s| {
                s.describe()
            });
        let Some(v) = e.values.as_ref().filter(|_| e.differences.is_empty()) else {
            let mut row = vec![
                Cell::text(e.fixed_at.clone()),
                Cell::text(from),
                Cell::text(fmt::MISSING.to_string()),
            ];
            row.resize(width - 1, Cell::text(fmt::MISSING.to_string()));
            row.push(Cell::text(format!(
                "fails ({}; see `memcal audit`): {}",
                fmt::plural(e.differences.len() as u64, "difference"),
                e.differences.first().map_or("", String::as_str)
            )));
            t.rows.push(row);
            continue;
        };
        for (p, f) in &v.profiles {
            let (q90, q95) = v.upper.get(p).map_or((v.q90, v.q95), |u| (u.q90, u.q95));
            let mut row = vec![
                Cell::text(e.fixed_at.clone()),
                Cell::text(from.clone()),
                Cell::text(p.clone()),
                Cell::text(
                    v.profile_fixed_at
                        .get(p)
                        .cloned()
                        .unwrap_or_else(|| fmt::MISSING.to_string()),
                ),
                count_cell(v.rows),
            ];
            row.extend(f.iter().map(|x| Cell::num(fmt::factor(*x), format!("{x}"))));
            row.extend([
                Cell::num(fmt::factor(q90), format!("{q90}")),
                Cell::num(fmt::factor(q95), format!("{q95}")),
                opt_pct(e.held_out_median),
                opt_pct(e.in_sample_median),
                Cell::text(v.rows_sha256.chars().take(16).collect::<String>()),
                Cell::text(v.tool_version.clone()),
                Cell::text("audited".to_string()),
            ]);
            t.rows.push(row);
        }
    }
    HistoryPage {
        meta: PageMeta {
            file: "history.html".into(),
            title: format!("Factor history: {TITLE}"),
            nav,
        },
        intro: "Each fixing is one run of `memcal fit --write-factors`, the only command that changes data/factors.json; data/factors-history.json logs it. This page does not show the log as typed: each entry is audited as `memcal audit` does it, and the values below are those of the data/factors.json of the commit that first has the entry's fixing time (\"From\"), with the held-out and in-sample medians recomputed from that commit's rows. An entry whose log differs from its commit in any field, that no commit has, or that is out of order in the log (its fixing time not later than the entry before it, or its commit earlier), is marked as failing and shows no values. A profile that a fit leaves unchanged keeps the time its factors were fixed (\"Profile's factors fixed at\").".into(),
        table: t,
    }
}
