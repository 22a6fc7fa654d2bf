//! The runs tables: their columns, a row's cells (and the same row rendered straight into
//! HTML, byte for byte, for a million rows), and the source the runs pages and the family
//! pages' tables are filled from one page at a time.

use super::*;

/// The columns of the runs table.
pub(super) fn runs_columns(with_family: bool) -> Vec<Column> {
    let mut c = vec![col("Run", false), col("Graph", false)];
    if with_family {
        c.push(col("Family", false));
    }
    c.extend([
        col("Regime", false),
        col("Precision", false),
        col("Batch", true),
        col("Status", false),
        col("Bucket", false),
        col("Measured peak", true),
        col("Out of memory at", true),
    ]);
    for m in Method::ALL {
        c.push(col(method_name(m), true));
    }
    c.push(col("Bound at q95", true));
    c.push(col(VERDICT_COLUMN, false));
    c
}

/// The runs tables' last column: `memcal plan`'s verdict on the row, in one line.
const VERDICT_COLUMN: &str = "memcal plan's verdict at the capacity it ran under";

/// `simulator: 2.53 GB, bound 2.94 GB, against 2.15 GB: does not fit (right)`, into `out`;
/// the missing dash without a verdict.
pub(super) fn push_verdict(out: &mut String, v: Option<&RowVerdict>) {
    let Some(v) = v else {
        out.push_str(fmt::MISSING);
        return;
    };
    out.push_str(v.method.label());
    out.push_str(": ");
    digits::push_gb(out, v.estimate_bytes);
    out.push_str(", bound ");
    digits::push_gb(out, v.bound_bytes);
    out.push_str(", against ");
    digits::push_gb(out, v.capacity_bytes as f64);
    out.push_str(": ");
    out.push_str(v.verdict.as_str());
    out.push_str(" (");
    out.push_str(v.outcome.as_str());
    out.push(')');
}

pub(super) fn runs_row(
    ctx: &Ctx,
    r: &RowResult,
    v: Option<&RowVerdict>,
    with_family: bool,
) -> Vec<Cell> {
    let mut cells = vec![Cell::text(&r.run_id), Cell::text(&r.graph)];
    if with_family {
        cells.push(Cell::text(&r.family).link(ctx.family_href(&r.family)));
    }
    cells.extend([
        Cell::text(ctx.regime_label(&r.regime)),
        Cell::text(r.precision.as_str()),
        Cell::num(fmt::count(r.batch), r.batch.to_string()),
        Cell::text(status_name(r.status)),
        Cell::text(bucket_name(r.bucket)),
        bytes_cell(r.measured_bytes.map(|b| b as f64)),
        bytes_cell(r.oom_capacity_bytes.map(|b| b as f64)),
    ]);
    for m in Method::ALL {
        cells.push(bytes_cell(r.predictions.get(&m).copied()));
    }
    cells.push(bytes_cell(r.bound_q95_bytes));
    let mut line = String::new();
    push_verdict(&mut line, v);
    cells.push(Cell::text(line));
    cells
}

/// A runs table without its rows (filled page by page, see [`Source`]).
pub(super) fn runs_table(id: &str, caption: &str, with_family: bool) -> Table {
    let mut t = table(id, caption, runs_columns(with_family), "No runs yet.");
    t.sortable = true;
    t
}

/// What the lazily filled parts of the site are made from: the calibration and, per runs
/// page and per family page, the indices of its rows in `cal.rows`.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    pub(super) ctx: Ctx<'a>,
    pub(super) runs_rows: Vec<Vec<u32>>,
    pub(super) runs_with_family: bool,
    pub(super) family_rows: Vec<Vec<u32>>,
    /// `memcal plan`'s verdict on each row of `cal.rows` (empty until
    /// [`Built::set_row_verdicts`]: every verdict cell then shows the missing dash).
    pub(super) row_verdicts: Vec<Option<RowVerdict>>,
    /// The JSON download without indentation (when the runs table is split: the same
    /// content in about 60% of the bytes).
    pub(super) compact_download: bool,
}

impl Source<'_> {
    /// Fills a runs table: with `cells`, a cell per value (for `--debug-json`); otherwise
    /// `rows_html`, the same rows rendered straight into HTML (see [`runs_rows_html`]).
    fn fill(&self, t: &mut Table, rows: &[u32], with_family: bool, cells: bool) {
        let cal = self.ctx.cal;
        let verdict = |i: u32| self.row_verdicts.get(i as usize).and_then(|v| v.as_ref());
        let rows = rows.iter().map(|&i| (&cal.rows[i as usize], verdict(i)));
        if cells {
            t.rows = rows
                .map(|(r, v)| runs_row(&self.ctx, r, v, with_family))
                .collect();
        } else if rows.len() > 0 {
            let mut html = String::with_capacity(rows.len() * 1300);
            for (r, v) in rows {
                runs_row_html(&self.ctx, r, v, with_family, &mut html);
            }
            t.rows_html = Some(html);
        }
    }
}

/// One row of a runs table as the table macro (`templates/macros.html`) renders
/// [`runs_row`]'s cells, byte for byte, written into `out` without a string per cell. A test
/// renders the fixture both ways and compares.
pub(super) fn runs_row_html(
    ctx: &Ctx,
    r: &RowResult,
    v: Option<&RowVerdict>,
    with_family: bool,
    out: &mut String,
) {
    use askama::filters::{Escaper, Html};
    let esc = |out: &mut String, s: &str| {
        let _ = Html.write_escaped_str(&mut *out, s);
    };
    let text = |out: &mut String, s: &str| {
        out.push_str("<td>");
        esc(out, s);
        out.push_str("</td>");
    };
    let bytes = |out: &mut String, b: Option<f64>| match b {
        Some(x) => {
            // `{x:.0}` and `fmt::bytes(x)` (nothing in either needs escaping).
            out.push_str("<td class=\"num\" data-sort=\"");
            digits::push_fixed(out, x, 0);
            out.push_str("\">");
            digits::push_gb(out, x);
            out.push_str("</td>");
        }
        None => {
            out.push_str("<td class=\"num\" data-sort=\"\">");
            out.push_str(fmt::MISSING);
            out.push_str("</td>");
        }
    };
    out.push_str("<tr><th scope=\"row\">");
    esc(out, &r.run_id);
    out.push_str("</th>");
    text(out, &r.graph);
    if with_family {
        out.push_str("<td><a href=\"");
        esc(out, &ctx.family_href(&r.family));
        out.push_str("\">");
        esc(out, &r.family);
        out.push_str("</a></td>");
    }
    // `ctx.regime_label`, escaped as one text: the regime escaped, then " (device)".
    out.push_str("<td>");
    esc(out, &r.regime);
    out.push_str(" (");
    esc(out, ctx.device(&r.regime));
    out.push_str(")</td>");
    text(out, r.precision.as_str());
    out.push_str("<td class=\"num\" data-sort=\"");
    digits::push_u64(out, r.batch);
    out.push_str("\">");
    esc(out, &fmt::count(r.batch));
    out.push_str("</td>");
    text(out, status_name(r.status));
    text(out, bucket_name(r.bucket));
    bytes(out, r.measured_bytes.map(|b| b as f64));
    bytes(out, r.oom_capacity_bytes.map(|b| b as f64));
    for m in Method::ALL {
        bytes(out, r.predictions.get(&m).copied());
    }
    bytes(out, r.bound_q95_bytes);
    // The verdict needs no escaping (method labels, GB figures and fixed words).
    out.push_str("<td>");
    push_verdict(out, v);
    out.push_str("</td>");
    out.push_str("</tr>\n");
}

impl Built<'_> {
    /// Runs page `k` with its table filled: a cell per value with `cells` (what
    /// `--debug-json` shows), else the rows already rendered (`Table::rows_html`).
    pub fn runs_page(&self, k: usize, cells: bool) -> RunsPage {
        let mut p = self.runs[k].clone();
        let s = &self.source;
        s.fill(&mut p.table, &s.runs_rows[k], s.runs_with_family, cells);
        p
    }

    /// Family page `k` with its runs table (if it has one) filled, as [`Built::runs_page`].
    pub fn family_page(&self, k: usize, cells: bool) -> FamilyPage {
        let mut p = self.families[k].clone();
        if let Some(t) = p.runs.as_mut() {
            self.source
                .fill(t, &self.source.family_rows[k], false, cells);
        }
        p
    }
}

/// The runs pages (their tables without rows) and each page's rows as indices into `cal.rows`:
/// one page of every row, or, where `family_page_links` is not empty (the table is split), per
/// family its pages of at most `runs_per_page` rows in run-id order (`fam_rows`: each family's
/// rows).
pub(super) fn pages(
    ctx: &Ctx,
    fam_rows: &[Vec<u32>],
    family_page_links: &[Vec<Link>],
    page_links: &[Link],
    nav_links: &[Link],
    runs_per_page: usize,
) -> (Vec<RunsPage>, Vec<Vec<u32>>) {
    let cal = ctx.cal;
    let mut runs_pages: Vec<RunsPage> = Vec::new();
    let mut runs_rows: Vec<Vec<u32>> = Vec::new();
    if !family_page_links.is_empty() {
        for (k, f) in ctx.families.iter().enumerate() {
            let n = fam_rows[k].len();
            let pages = &family_page_links[k];
            let many = pages.len() > 1;
            for (p, link) in pages.iter().enumerate() {
                let (a, b) = ((p * runs_per_page).min(n), ((p + 1) * runs_per_page).min(n));
                let (title, intro) = if many {
                    (
                        format!("Runs of {f}, page {} of {}", p + 1, pages.len()),
                        format!(
                            "Runs {} to {} of the {} of family {f}, in run-id order; the runs table is split by family, and each family into pages of at most {}, because there are {} in all.",
                            fmt::count(a as u64 + 1),
                            fmt::count(b as u64),
                            fmt::runs(n as u64),
                            fmt::runs(runs_per_page as u64),
                            fmt::runs(cal.rows.len() as u64)
                        ),
                    )
                } else {
                    (
                        format!("Runs of {f}"),
                        format!(
                            "{} of family {f}; the runs table is split by family because there are {} in all.",
                            fmt::runs(n as u64),
                            fmt::runs(cal.rows.len() as u64)
                        ),
                    )
                };
                runs_pages.push(RunsPage {
                    meta: PageMeta {
                        file: link.href.clone(),
                        title: format!("{title} — {TITLE}"),
                        nav: nav_links.to_vec(),
                    },
                    heading: title,
                    intro,
                    others: page_links.to_vec(),
                    pages: if many { pages.clone() } else { Vec::new() },
                    downloads: downloads(),
                    table: runs_table("runs", &format!("Every counted run of {f}"), false),
                });
                runs_rows.push(fam_rows[k][a..b].to_vec());
            }
        }
    } else {
        runs_pages.push(RunsPage {
            meta: PageMeta {
                file: "runs.html".into(),
                title: format!("All runs — {TITLE}"),
                nav: nav_links.to_vec(),
            },
            heading: "All runs".into(),
            intro: format!(
                "{} counted; click a column heading to sort. Sizes are in GB (10⁹ bytes).",
                fmt::runs(cal.rows.len() as u64)
            ),
            others: Vec::new(),
            pages: Vec::new(),
            downloads: downloads(),
            table: runs_table("runs", "Every counted run", true),
        });
        runs_rows.push((0..cal.rows.len() as u32).collect());
    }
    (runs_pages, runs_rows)
}
