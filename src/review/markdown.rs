//! The `memcal diff` report as a pull-request comment: one bottom line per precision profile
//! first (new missed OOMs counted first), then which code scored each side and what code,
//! rules and features changed, hand-edited factors, then only what moved (unchanged methods in
//! one line), the families, the card verdicts that changed (new missed OOMs first), and the
//! long lists collapsed in `<details>`. Every list is cut with a count so the
//! comment always fits under [`COMMENT_LIMIT`] characters (GitHub refuses comments over
//! 65,536). Formats the [`DiffReport`]; computes nothing.

use super::diff::{plural, Change, DiffReport, MethodDelta, Verdict, VerdictChange};
use crate::engine::intervals::Interval;
use crate::engine::Truth;
use std::fmt::Write;

/// The most characters a comment may have.
pub const COMMENT_LIMIT: usize = 60_000;

/// How many entries each cut list shows.
#[derive(Clone, Copy)]
struct Limits {
    verdicts: usize,
    families: usize,
    items: usize,
}

/// The report as Markdown, fit for a pull-request comment (under [`COMMENT_LIMIT`] characters).
pub fn diff_markdown(d: &DiffReport) -> String {
    let mut limits = Limits {
        verdicts: 200,
        families: 60,
        items: 200,
    };
    loop {
        let s = render(d, limits);
        if s.chars().count() <= COMMENT_LIMIT || limits.verdicts + limits.items == 0 {
            return s;
        }
        limits = Limits {
            verdicts: limits.verdicts / 2,
            families: limits.families / 2,
            items: limits.items / 2,
        };
    }
}

/// A table cell: `|` escaped, line breaks as spaces.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

use crate::format::opt_pct as pct;

/// `base → head (±change)` for a share shown in percent.
fn pct_change(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) if a == b => format!("{} (no change)", pct(Some(a))),
        (Some(b), Some(a)) => format!(
            "{} → {} ({:+.1} pts)",
            pct(Some(b)),
            pct(Some(a)),
            (a - b) * 100.0
        ),
        _ => format!("{} → {}", pct(before), pct(after)),
    }
}

/// `base → head (±change)` for counts `n/of`.
fn count_change(b: u64, b_of: u64, a: u64, a_of: u64) -> String {
    if (b, b_of) == (a, a_of) {
        format!("{a}/{a_of} (no change)")
    } else {
        format!("{b}/{b_of} → {a}/{a_of} ({:+})", a as i64 - b as i64)
    }
}

fn truth(t: Option<Truth>) -> &'static str {
    match t {
        Some(Truth::Fits) => "fits",
        Some(Truth::DoesNotFit) => "does not fit",
        Some(Truth::Unknown) => "unknown",
        None => "none",
    }
}

fn verdict(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "fits",
        Some(false) => "does not fit",
        None => "none",
    }
}

/// A collapsed block: the summary line, then the body.
fn details(s: &mut String, summary: &str, body: &str) {
    let _ = write!(
        s,
        "<details><summary>{summary}</summary>\n\n{body}\n</details>\n\n"
    );
}

/// "… and N more" under a cut list.
fn more(shown: usize, total: usize) -> String {
    if total > shown {
        format!(
            "\n… and {} more (the full list: `memcal diff --json`)\n",
            total - shown
        )
    } else {
        String::new()
    }
}

fn render(d: &DiffReport, lim: Limits) -> String {
    let mut s = String::new();
    if let Some(why) = &d.code.reason {
        let _ = writeln!(s, "⚠ **Data only:** {why}.\n");
    }
    let _ = writeln!(s, "## memcal: estimation error, {} → {}\n", d.base, d.head);
    bottom_lines(&mut s, d);
    code(&mut s, d);
    hand_edits(&mut s, d);
    gates(&mut s, d);
    summary(&mut s, d);
    rules(&mut s, d, lim.items);
    features(&mut s, d);
    factors(&mut s, d);
    families(&mut s, d, lim.families);
    verdicts(&mut s, d, lim.verdicts);
    added(&mut s, d, lim.items);
    let list = |s: &mut String, title: &str, items: Vec<String>| {
        if items.is_empty() {
            let _ = writeln!(s, "{title}: none.\n");
            return;
        }
        let mut body = String::new();
        for i in items.iter().take(lim.items) {
            let _ = writeln!(body, "- {i}");
        }
        body.push_str(&more(lim.items.min(items.len()), items.len()));
        details(s, &format!("{title} ({})", items.len()), &body);
    };
    list(&mut s, "Rows removed", d.rows_removed.clone());
    list(
        &mut s,
        "Rows newly excluded",
        d.newly_excluded
            .iter()
            .map(|e| format!("{}: {}: {}", e.run_id, e.reason, e.detail))
            .collect(),
    );
    s
}

/// `label (7.0% → 8.4%, +1.4 pts)` for a method of a profile.
fn moved(d: &DiffReport, p: crate::features::Precision, m: crate::engine::Method) -> String {
    let Some(x) = d.methods.iter().find(|x| x.profile == p && x.method == m) else {
        return m.label().to_string();
    };
    match x.median_change_points {
        Some(pts) => format!(
            "{} ({} → {}, {pts:+.1} pts)",
            m.label(),
            pct(x.before.median_abs_rel_error),
            pct(x.after.median_abs_rel_error)
        ),
        None => m.label().to_string(),
    }
}

fn bottom_lines(s: &mut String, d: &DiffReport) {
    if d.bottom_lines.is_empty() {
        let _ = writeln!(s, "**No rows in either state.**\n");
    }
    for b in &d.bottom_lines {
        let mut parts: Vec<String> = Vec::new();
        if b.new_missed_oom > 0 {
            parts.push(format!(
                "**{} new missed out-of-memory {}** (runs that did not fit a card now called \"fits\")",
                b.new_missed_oom,
                plural(b.new_missed_oom, "check", "checks")
            ));
        }
        for (what, ms) in [
            ("Regressed", &b.regressed),
            ("Improved", &b.improved),
            ("Within noise", &b.within_noise),
        ] {
            if !ms.is_empty() {
                let names: Vec<String> = ms.iter().map(|m| moved(d, b.profile, *m)).collect();
                parts.push(format!("{what}: {}", names.join("; ")));
            }
        }
        let icon = match b.verdict {
            Verdict::Regresses | Verdict::Mixed => "❌",
            Verdict::Improves => "✅",
            Verdict::WithinNoise | Verdict::Unchanged => "➖",
        };
        let rest = if parts.is_empty() {
            " No median moved and no check is newly missed.".to_string()
        } else {
            format!(" {}.", parts.join(". "))
        };
        let _ = writeln!(
            s,
            "{icon} **{}: {}.**{rest}\n",
            b.profile.as_str(),
            b.verdict.words()
        );
    }
}

fn code(s: &mut String, d: &DiffReport) {
    let c = &d.code;
    if c.reason.is_some() {
        // Said on the first line.
    } else if let Some(b) = &c.base_build {
        let how = if b.cached {
            "found in the cache".to_string()
        } else {
            format!("built in {:.0} s", b.build_seconds)
        };
        let _ = writeln!(
            s,
            "Scored: the base's data by the base's own memcal (commit {}, {how}); head's data by head's code.\n",
            &b.commit[..12.min(b.commit.len())]
        );
    } else {
        let _ = writeln!(
            s,
            "Scored: no file of code differs, so one memcal scored both sides (nothing built).\n"
        );
    }
    if !c.changed_files.is_empty() {
        let _ = writeln!(s, "Code that changed:\n");
        for f in &c.changed_files {
            if f.functions.is_empty() {
                let _ = writeln!(s, "- `{}`", f.path);
            } else {
                let fns: Vec<String> = f.functions.iter().map(|x| format!("`{x}`")).collect();
                let _ = writeln!(s, "- `{}`: {}", f.path, fns.join(", "));
            }
        }
        s.push('\n');
    }
    if !c.methods_in_one_side.is_empty() {
        let _ = writeln!(
            s,
            "Methods only one side has (not compared): {}.\n",
            c.methods_in_one_side.join(", ")
        );
    }
}

fn hand_edits(s: &mut String, d: &DiffReport) {
    if d.hand_edits.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "⚠ **The factors were edited by hand** (`memcal audit` fails on this):\n"
    );
    for e in &d.hand_edits {
        let _ = writeln!(s, "- {e}");
    }
    s.push('\n');
}

fn rules(s: &mut String, d: &DiffReport, limit: usize) {
    if d.rules_changed.is_empty() {
        return;
    }
    let n_ops = d.rules_changed.len();
    let _ = writeln!(
        s,
        "### Simulator rules that changed ({n_ops} ATen {})\n\nThe generic rule's predictions on torch's OpInfo samples (`tests/fixtures/opinfo`, measured with the counting allocator) differ for these ops.\n",
        plural(n_ops as u64, "op", "ops")
    );
    let n = |v: Option<u64>| v.map_or("absent".to_string(), |x| x.to_string());
    let mut t = String::from(
        "| ATen op | samples | predicted exactly (base → head) | refused (base → head) |\n|---|---:|---:|---:|\n",
    );
    for r in d.rules_changed.iter().take(limit) {
        let _ = writeln!(
            t,
            "| {} | {} | {} → {} | {} → {} |",
            cell(&r.op),
            r.samples,
            n(r.exact_before),
            n(r.exact_after),
            n(r.refused_before),
            n(r.refused_after)
        );
    }
    t.push_str(&more(limit.min(n_ops), n_ops));
    if n_ops <= 10 {
        s.push_str(&t);
        s.push('\n');
    } else {
        details(s, &format!("The {n_ops} ops"), &t);
    }
}

fn features(s: &mut String, d: &DiffReport) {
    if d.features_changed.is_empty() {
        return;
    }
    let _ = writeln!(s, "### Features that changed\n");
    for f in &d.features_changed {
        let _ = writeln!(
            s,
            "- `{}`: on {} {} of {} {} (e.g. `{}`: {} → {})",
            f.feature,
            f.rows,
            plural(f.rows, "row", "rows"),
            f.graphs.len(),
            plural(f.graphs.len() as u64, "graph", "graphs"),
            f.example.run_id,
            crate::units::gb(f.example.before as f64),
            crate::units::gb(f.example.after as f64)
        );
    }
    s.push('\n');
}

fn added(s: &mut String, d: &DiffReport, limit: usize) {
    if d.rows_added.is_empty() {
        let _ = writeln!(s, "Rows added: none.\n");
        return;
    }
    let mut body = String::from(
        "Every method's error on each added row (predicted / measured − 1; **bold** beyond ±25%).\n\n| run | profile | measured | errors |\n|---|---|---:|---|\n",
    );
    for r in d.rows_added.iter().take(limit) {
        let errors: Vec<String> = r
            .errors
            .iter()
            .map(|(m, e)| {
                let v = format!("{:+.1}%", e * 100.0);
                if e.abs() > crate::engine::WITHIN {
                    format!("{} **{v}**", m.label())
                } else {
                    format!("{} {v}", m.label())
                }
            })
            .collect();
        let _ = writeln!(
            body,
            "| {} | {} | {} | {} |",
            cell(&r.run_id),
            r.profile.as_str(),
            r.measured_bytes
                .map_or("out of memory".to_string(), |b| crate::units::gb(b as f64)),
            cell(&if errors.is_empty() {
                "not in the error's sample".to_string()
            } else {
                errors.join(", ")
            })
        );
    }
    body.push_str(&more(limit.min(d.rows_added.len()), d.rows_added.len()));
    details(s, &format!("Rows added ({})", d.rows_added.len()), &body);
}

fn gates(s: &mut String, d: &DiffReport) {
    if d.gates.is_empty() {
        let _ = writeln!(
            s,
            "No gate checked (a report only; `--fail-on default` gates a pull request).\n"
        );
    } else if d.failures.is_empty() {
        let _ = writeln!(
            s,
            "✅ No gate crossed (checked: {}).\n",
            d.gates
                .iter()
                .map(|g| format!("`{g}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    } else {
        let _ = writeln!(s, "❌ **{} gate(s) crossed:**\n", d.failures.len());
        for f in &d.failures {
            let _ = writeln!(s, "- {f}");
        }
        s.push('\n');
    }
}

/// A median with its 95% interval: `7.0% (95%: 6.0–8.1%)`, or `7.0% (no interval)`.
fn median_with_interval(v: Option<f64>, i: Option<Interval>) -> String {
    match (v, i) {
        (Some(x), Some(i)) => format!(
            "{} (95%: {:.1}–{})",
            pct(Some(x)),
            i.low * 100.0,
            pct(Some(i.high))
        ),
        (Some(x), None) => format!("{} (few runs: no interval)", pct(Some(x))),
        (None, _) => pct(None),
    }
}

/// The median's change in criterion's words, with both intervals.
fn median_change(m: &MethodDelta) -> String {
    let (b, a) = (
        median_with_interval(m.before.median_abs_rel_error, m.before.median_interval),
        median_with_interval(m.after.median_abs_rel_error, m.after.median_interval),
    );
    match (m.change, m.median_change_points) {
        (Change::NoChangeDetected, _) => format!("{a}: no change detected"),
        (c, Some(pts)) => format!("{b} → {a}: {pts:+.1} pts, {}", c.words()),
        (c, None) => format!("{b} → {a}: {}", c.words()),
    }
}

/// Whether any of a method's numbers moved.
fn any_moved(m: &MethodDelta) -> bool {
    m.change != Change::NoChangeDetected || m.before != m.after
}

fn summary(s: &mut String, d: &DiffReport) {
    let (shown, still): (Vec<&MethodDelta>, Vec<&MethodDelta>) =
        d.methods.iter().partition(|m| any_moved(m));
    let _ = writeln!(s, "### What moved (base → head)\n");
    if !shown.is_empty() {
        let _ = writeln!(
            s,
            "A median's change is \"regressed\" or \"improved\" only beyond the noise: a sign test on the rows both states share (p < 0.05), or else head's median outside base's 95% interval; otherwise \"within noise\".\n\n| profile | method | median \\|error\\| (95% interval) | within ±25% | missed OOMs (of did-not-fit checks) | false alarms (of fit checks) |\n|---|---|---:|---:|---:|---:|"
        );
    }
    for m in &shown {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            m.profile.as_str(),
            cell(m.method.label()),
            cell(&median_change(m)),
            pct_change(m.before.within_25pct, m.after.within_25pct),
            count_change(
                m.before.missed_oom,
                m.before.did_not_fit_checks,
                m.after.missed_oom,
                m.after.did_not_fit_checks
            ),
            count_change(
                m.before.false_alarms,
                m.before.fit_checks,
                m.after.false_alarms,
                m.after.fit_checks
            ),
        );
    }
    if !shown.is_empty() {
        s.push('\n');
    }
    if !still.is_empty() {
        let names: Vec<String> = still
            .iter()
            .map(|m| format!("{} ({})", m.method.label(), m.profile.as_str()))
            .collect();
        let _ = writeln!(
            s,
            "Unchanged ({}): {}: every number the same.\n",
            still.len(),
            names.join(", ")
        );
    }
}

fn factors(s: &mut String, d: &DiffReport) {
    let changed: Vec<_> = d.factors.iter().filter(|f| f.before != f.after).collect();
    if changed.is_empty() {
        let _ = writeln!(s, "### Factors\n\nNo factor changed.\n");
        return;
    }
    let _ = writeln!(
        s,
        "### Factors that changed ({} of {})\n\n| profile | feature | base | head |\n|---|---|---:|---:|",
        changed.len(),
        d.factors.len()
    );
    let num = |v: Option<f64>| v.map_or("missing".to_string(), |x| format!("{x:.4}"));
    for f in changed {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            cell(&f.profile),
            f.feature,
            num(f.before),
            num(f.after)
        );
    }
    s.push('\n');
}

fn families(s: &mut String, d: &DiffReport, limit: usize) {
    let changed: Vec<_> = d.families.iter().filter(|f| f.before != f.after).collect();
    let _ = writeln!(
        s,
        "### Per family (largest change first)\n\n{} of {} family medians changed.\n",
        changed.len(),
        d.families.len()
    );
    if changed.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "| family | profile | method | base | head | change (points) |\n|---|---|---|---:|---:|---:|"
    );
    for f in changed.iter().take(limit) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            cell(&f.family),
            f.profile.as_str(),
            cell(f.method.label()),
            pct(f.before),
            pct(f.after),
            f.change_points
                .map_or("missing".into(), |x| format!("{x:+.2}"))
        );
    }
    s.push_str(&more(limit.min(changed.len()), changed.len()));
    s.push('\n');
}

fn verdict_table(rows: &[&VerdictChange]) -> String {
    let mut t = String::from(
        "| run | profile | card | method | the run (base → head) | verdict (base → head) |\n|---|---|---|---|---|---|\n",
    );
    for v in rows {
        let run = if v.added {
            format!("{} (added)", v.run_id)
        } else {
            v.run_id.clone()
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} → {} | {} → {} |",
            cell(&run),
            v.profile.as_str(),
            cell(&v.card),
            cell(v.method.label()),
            truth(v.truth_before),
            truth(Some(v.truth)),
            verdict(v.before),
            if v.new_missed_oom {
                format!("{} ⚠ new missed OOM", verdict(v.after))
            } else {
                verdict(v.after).to_string()
            }
        );
    }
    t
}

fn verdicts(s: &mut String, d: &DiffReport, limit: usize) {
    let (new, other): (Vec<&VerdictChange>, Vec<&VerdictChange>) =
        d.verdict_changes.iter().partition(|v| v.new_missed_oom);
    let _ = writeln!(
        s,
        "### Card verdicts that changed ({}; {} new missed OOMs)\n",
        d.verdict_changes.len(),
        new.len()
    );
    if !new.is_empty() {
        let shown = limit.min(new.len());
        let _ = writeln!(
            s,
            "New missed OOMs: did-not-fit checks now called \"fits\".\n"
        );
        s.push_str(&verdict_table(&new[..shown]));
        s.push_str(&more(shown, new.len()));
        s.push('\n');
    }
    if !other.is_empty() {
        let shown = limit.min(other.len());
        let mut body = verdict_table(&other[..shown]);
        body.push_str(&more(shown, other.len()));
        details(
            s,
            &format!("Other changed verdicts ({})", other.len()),
            &body,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Method;
    use crate::features::Precision;
    use crate::review::{AddedRow, CodeComparison};

    #[test]
    fn a_huge_report_is_cut_under_the_limit() {
        let long = "x".repeat(120);
        let change = |k: usize| VerdictChange {
            run_id: format!("cpu-free/{long}/b{k}"),
            profile: Precision::Fp32,
            card_bytes: 1 << 32,
            card: "4 GiB".into(),
            method: Method::PlanAsShipped,
            added: k.is_multiple_of(2),
            truth_before: None,
            truth: Truth::DoesNotFit,
            before: None,
            after: Some(true),
            new_missed_oom: k.is_multiple_of(3),
        };
        let d = DiffReport {
            format: super::super::DIFF_FORMAT,
            base: "main".into(),
            head: "data".into(),
            code: CodeComparison {
                compared: "code-and-data",
                reason: None,
                changed_files: vec![],
                base_build: None,
                head_build: None,
                methods_in_one_side: vec![],
            },
            bottom_lines: vec![],
            hand_edits: vec![],
            gates: vec![],
            failures: vec![],
            factors: vec![],
            rules_changed: vec![],
            features_changed: vec![],
            methods: vec![],
            families: vec![],
            verdict_changes: (0..20_000).map(change).collect(),
            rows_added: (0..20_000)
                .map(|k| AddedRow {
                    run_id: format!("cpu-free/{long}/b{k}"),
                    profile: Precision::Fp32,
                    family: "x".into(),
                    measured_bytes: Some(1 << 30),
                    errors: [(Method::Simulated, 0.35)].into_iter().collect(),
                })
                .collect(),
            rows_removed: vec![],
            newly_excluded: vec![],
        };
        let md = diff_markdown(&d);
        assert!(md.chars().count() <= COMMENT_LIMIT, "{}", md.len());
        // It was cut, and says by how much.
        assert!(md.contains("… and "), "{md}");
        assert!(md.contains("Rows added (20000)"));
    }
}
