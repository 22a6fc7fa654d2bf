//! The adapter from the engine's [`Calibration`] to the view model. It selects and formats the
//! engine's numbers; it computes no metric. Where the engine does not report something the
//! page would show, the page leaves it out (see `docs/site.md`, "Missing from the engine").

use super::charts::ratio::RatioChart;
use super::charts::scatter::{ScatterChart, ScatterPoint};
use super::charts::Chart;
use super::digits;
use super::view::*;
use crate::engine::intervals::Interval;
use crate::engine::{
    Calibration, CheckRef, Method, MethodMetrics, RowResult, Truth, NEAREST_RANK_RULE,
};
use crate::factors::FactorsFile;
use crate::features::FEATURE_NAMES;
use crate::format as fmt;
use crate::plan::Verdict;
use crate::plan_evidence::RowVerdict;
use crate::review::AuditedEntry;
use crate::run::RunStatus;
use crate::units;
use std::collections::BTreeMap;

mod family;
mod headline;
mod layout;
mod runs;

use super::names::*;
use runs::{runs_table, Source};

/// More rows than this and the runs table is split into one page per family, and each family
/// into pages of at most this many rows.
pub const RUNS_PER_PAGE_LIMIT: usize = 2000;

/// A chart draws at most this many points; above it, every k-th in run-id order (the caption
/// says so).
pub const CHART_POINTS_LIMIT: usize = 2000;

/// The did-not-fit table on the index lists at most this many checks (the first in run-id
/// order; the caption says how many there are and the JSON download has them all).
pub const DID_NOT_FIT_LIMIT: usize = 2000;

/// A known miss lists at most this many of its checks by name.
pub const MISSES_LISTED_LIMIT: usize = 100;

/// The site's title.
pub const TITLE: &str = "Memory calibration";

/// What the site reads from `data/` besides the engine's output: prose, already rendered to
/// HTML, by block name (`headline`, `methods`, ...), the maintainers' notes on known misses by
/// family, and the factor history (`data/factors-history.json`) as `memcal audit` established it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProseInput {
    pub blocks: BTreeMap<String, String>,
    pub misses: BTreeMap<String, String>,
    pub history: Vec<AuditedEntry>,
}

/// The factor history page: one row per fixing of the factors and profile, newest first, with
/// the values the audit established (the factors file of the entry's commit, the medians
/// recomputed from that commit's rows); an entry that fails the audit shows no values.
fn history_page(history: &[AuditedEntry], nav: Vec<Link>) -> HistoryPage {
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
    for e in history.iter().rev() {
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
                "fails ({} differences; see `memcal audit`): {}",
                e.differences.len(),
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
        intro: "Each fixing is one run of `memcal fit --write-factors`, the only command that changes data/factors.json; data/factors-history.json logs it. This page does not show the log as typed: each entry is audited as `memcal audit` does it, and the values below are those of the data/factors.json of the commit that first has the entry's fixing time (\"From\"), with the held-out and in-sample medians recomputed from that commit's rows. An entry whose log differs from its commit in any field, or that no commit has, is marked as failing and shows no values. A profile that a fit leaves unchanged keeps the time its factors were fixed (\"Profile's factors fixed at\").".into(),
        table: t,
    }
}

/// The methods drawn as scatter charts, in page order.
const SCATTER_METHODS: [Method; 5] = [
    Method::Accelerate,
    Method::Textbook,
    Method::PlanHeldOutArchitecture,
    Method::PlanAsShipped,
    Method::Simulated,
];

/// Everything the adapter looks up besides the calibration.
#[derive(Debug, Clone)]
struct Ctx<'a> {
    cal: &'a Calibration,
    factors: &'a FactorsFile,
    prose: &'a ProseInput,
    /// Family -> page file.
    family_files: BTreeMap<String, String>,
    /// Families in chart-legend order.
    families: Vec<String>,
    /// What the charts' runs are, e.g. `CPU runs`: every counted row's device, when they share
    /// one; `runs` otherwise.
    runs_label: String,
}

impl Ctx<'_> {
    /// `CPU` or `GPU` for a regime; a CPU regime is never labelled a GPU result.
    fn device(&self, regime: &str) -> &'static str {
        device_label(self.factors, regime)
    }

    /// `cpu-free (CPU)`.
    fn regime_label(&self, regime: &str) -> String {
        format!("{regime} ({})", self.device(regime))
    }

    /// The card's printed name in the regime's list or the planner's, else its size.
    fn card_name(&self, regime: &str, bytes: u64) -> String {
        let listed = self
            .factors
            .regimes
            .get(regime)
            .into_iter()
            .flat_map(|r| r.cards.iter())
            .chain(self.factors.cards.iter())
            .find(|c| c.bytes == bytes);
        match listed {
            Some(c) => c.name.clone(),
            None => units::both(bytes as f64),
        }
    }

    fn family_href(&self, family: &str) -> String {
        self.family_files
            .get(family)
            .cloned()
            .unwrap_or_else(|| "index.html".to_string())
    }

    fn block(&self, name: &str) -> String {
        self.prose.blocks.get(name).cloned().unwrap_or_default()
    }

    fn row(&self, run_id: &str) -> Option<&RowResult> {
        self.cal
            .rows
            .binary_search_by(|r| r.run_id.as_str().cmp(run_id))
            .ok()
            .map(|i| &self.cal.rows[i])
    }

    /// `run-id on 8 GiB`.
    fn check_ref(&self, c: &CheckRef) -> String {
        let regime = self.row(&c.run_id).map_or("", |r| r.regime.as_str());
        format!("{} on {}", c.run_id, self.card_name(regime, c.card_bytes))
    }
}

pub(crate) fn col(label: &str, numeric: bool) -> Column {
    Column {
        label: label.to_string(),
        numeric,
    }
}

pub(crate) fn table(id: &str, caption: &str, columns: Vec<Column>, empty: &str) -> Table {
    Table {
        id: id.to_string(),
        caption: caption.to_string(),
        columns,
        rows: Vec::new(),
        rows_html: None,
        empty_text: empty.to_string(),
        sortable: false,
    }
}

fn fact(label: &str, value: impl Into<String>) -> Fact {
    Fact {
        label: label.to_string(),
        value: value.into(),
    }
}

fn opt_pct(v: Option<f64>) -> Cell {
    match v {
        Some(x) => Cell::num(fmt::pct(x), fmt::pct_key(x)),
        None => Cell::num(fmt::MISSING, ""),
    }
}

fn count_cell(n: u64) -> Cell {
    Cell::num(fmt::count(n), n.to_string())
}

fn bytes_cell(b: Option<f64>) -> Cell {
    match b {
        Some(x) => Cell::num(fmt::bytes(x), fmt::bytes_key(x)),
        None => Cell::num(fmt::MISSING, ""),
    }
}

/// The columns of a method-metrics table after its first (row header) column.
fn metrics_columns(first: &str) -> Vec<Column> {
    vec![
        col(first, false),
        col("Rows predicted", true),
        col("Rows in the error", true),
        col("Median |error|", true),
        col("Max |error|", true),
        col(&format!("Within {}", fmt::within_band()), true),
        col("Did-not-fit checks", true),
        col("Missed (called fits)", true),
        col("Fit checks", true),
        col("False alarms near the card", true),
        col("False alarms, over-estimates", true),
        col("Accuracy over all checks", true),
    ]
}

fn metrics_cells(head: Cell, m: &MethodMetrics) -> Vec<Cell> {
    let missed = m.missed_oom.len() as u64;
    vec![
        head,
        count_cell(m.rows),
        count_cell(m.error_rows),
        interval_cell(
            m.median_abs_rel_error,
            m.median_interval,
            m.error_rows,
            m.few_runs,
        ),
        opt_pct(m.max_abs_rel_error),
        interval_cell(m.within_25pct, m.within_25pct_interval, m.error_rows, false),
        count_cell(m.did_not_fit_checks),
        if missed > 0 {
            count_cell(missed).class("bad")
        } else {
            count_cell(missed)
        },
        count_cell(m.fit_checks),
        count_cell(m.false_alarm_edge.len() as u64),
        count_cell(m.false_alarm_over.len() as u64),
        opt_pct(m.accuracy),
    ]
}

/// A share with its interval, sorted by the share.
fn interval_cell(v: Option<f64>, i: Option<Interval>, n: u64, few: bool) -> Cell {
    match v {
        Some(x) => {
            let c = Cell::num(fmt::pct_interval(x, i, n, few), fmt::pct_key(x));
            if few {
                c.class("warn")
            } else {
                c
            }
        }
        None => opt_pct(None),
    }
}

/// The measured value a chart draws: the peak, or the capacity an out-of-memory run failed on.
fn measured_point(r: &RowResult) -> Option<(f64, bool)> {
    match (r.status, r.measured_bytes, r.oom_capacity_bytes) {
        (RunStatus::Completed, Some(m), _) => Some((m as f64, false)),
        (RunStatus::Oom, _, Some(c)) => Some((c as f64, true)),
        _ => None,
    }
}

/// Every `step`-th of `n` items, so that at most [`CHART_POINTS_LIMIT`] remain.
fn chart_step(n: usize) -> usize {
    n.div_ceil(CHART_POINTS_LIMIT).max(1)
}

/// A scatter chart of `method` over `rows`, and how many runs it stands for: above
/// [`CHART_POINTS_LIMIT`] points it draws every k-th in run-id order.
fn scatter<'r>(
    ctx: &Ctx,
    method: Method,
    file: String,
    title: String,
    rows: impl Iterator<Item = &'r RowResult> + Clone,
) -> (ScatterChart, usize) {
    let point = |r: &RowResult| -> Option<(f64, f64, bool)> {
        let p = *r.predictions.get(&method)?;
        let (m, oom) = measured_point(r)?;
        Some((p, m, oom))
    };
    let total = rows.clone().filter(|r| point(r).is_some()).count();
    let step = chart_step(total);
    let points = rows
        .filter_map(|r| point(r).map(|p| (r, p)))
        .step_by(step)
        .map(|(r, (p, m, oom))| ScatterPoint {
            run_id: r.run_id.to_string(),
            family: r.family.to_string(),
            predicted_bytes: p,
            measured_bytes: m,
            oom,
            gpu: ctx
                .factors
                .regimes
                .get(r.regime.as_str())
                .is_some_and(|g| g.device == "cuda"),
        })
        .collect();
    (
        ScatterChart {
            file,
            title,
            x_label: format!("predicted by {}, GB", method_name(method)),
            families: ctx.families.clone(),
            points,
        },
        total,
    )
}

/// ` (every 3rd of them drawn, in run-id order)` when a chart draws a sample; empty otherwise.
fn sample_note(drawn: usize, total: usize) -> String {
    if drawn == total {
        String::new()
    } else {
        format!(
            " ({} of them drawn: every {}th in run-id order)",
            fmt::count(drawn as u64),
            chart_step(total)
        )
    }
}

/// The caps the chart's out-of-memory crosses sit at, in GB with their GiB: the axes are in
/// GB and the caps were set in GiB. Empty when no run ran out of memory.
fn caps_note(c: &ScatterChart) -> String {
    let caps: std::collections::BTreeSet<u64> = c
        .points
        .iter()
        .filter(|p| p.oom)
        .map(|p| p.measured_bytes as u64)
        .collect();
    if caps.is_empty() {
        return String::new();
    }
    let caps: Vec<String> = caps.iter().map(|&b| units::both(b as f64)).collect();
    format!(
        "; out-of-memory crosses at {} {}",
        if caps.len() == 1 {
            "the cap"
        } else {
            "the caps"
        },
        caps.join(", ")
    )
}

fn chart_ref(c: &ScatterChart, total: usize, what: &str) -> ChartRef {
    ChartRef {
        src: format!("charts/{}", c.file),
        alt: format!(
            "Log-log scatter of measured peak against {what} for {}{}, coloured by architecture family{}, with the line measured = predicted and a band of ±{:.0}%; out-of-memory runs are crosses at the capacity they failed on.",
            fmt::runs(total as u64),
            sample_note(c.points.len(), total),
            if c.points.iter().any(|p| p.gpu) && c.points.iter().any(|p| !p.gpu) {
                ", CPU runs as dots and GPU runs as triangles"
            } else {
                ""
            },
            crate::engine::WITHIN * 100.0
        ),
        caption: format!("{}; axes in GB{}", c.title, caps_note(c)),
    }
}

impl Built<'_> {
    /// `memory-calibration.json`: the settings, the feature names and every counted row with
    /// its features, predictions and card checks (by index into the shared `check_lists`),
    /// exactly as the engine reports them, serialised straight into `w`, with a trailing
    /// newline. Pretty JSON; compact (no indentation) when the runs
    /// table is split (more than [`RUNS_PER_PAGE_LIMIT`] rows).
    pub fn write_download_json(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        super::download::json::write(self.source.ctx.cal, self.source.compact_download, w)
    }

    /// `memory-calibration.csv`: one line per counted row, written straight into `w`.
    pub fn write_download_csv(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let factors = self.source.ctx.factors;
        super::download::csv::write(self.source.ctx.cal, &|r| device_label(factors, r), w)
    }
}

fn downloads() -> Vec<Link> {
    vec![
        Link {
            href: "memory-calibration.json".into(),
            text: "memory-calibration.json (rows, features, predictions)".into(),
        },
        Link {
            href: "memory-calibration.csv".into(),
            text: "memory-calibration.csv".into(),
        },
    ]
}

fn nav(runs_pages: &[Link]) -> Vec<Link> {
    let mut v: Vec<Link> = [
        ("index.html#headline", "Headline"),
        (
            "index.html#predicted-against-measured",
            "Predicted against measured",
        ),
        ("index.html#four-ways", "Four ways"),
        ("index.html#did-not-fit", "Did not fit"),
        ("index.html#upper-bound", "Upper bound"),
        ("index.html#planning", "Planning a job"),
        ("index.html#how", "How"),
        ("index.html#out-of-sample", "Out of sample"),
        ("index.html#known-misses", "Known misses"),
        ("index.html#not-counted", "Not counted"),
        ("index.html#all-runs", "All runs"),
        ("fit.html", "Will it fit?"),
        ("history.html", "Factor history"),
    ]
    .iter()
    .map(|(h, t)| Link {
        href: h.to_string(),
        text: t.to_string(),
    })
    .collect();
    if let [one] = runs_pages {
        v.push(one.clone());
    }
    v
}

/// Builds the whole view model from the engine's calibration, the factors file it ran with
/// and the rendered prose.
pub fn from_calibration<'a>(
    cal: &'a Calibration,
    factors: &'a FactorsFile,
    prose: &'a ProseInput,
) -> Built<'a> {
    from_calibration_paged(cal, factors, prose, RUNS_PER_PAGE_LIMIT)
}

/// [`from_calibration`] with the runs table split by family above `runs_per_page` rows, and
/// each family's runs into pages of at most `runs_per_page` rows.
pub fn from_calibration_paged<'a>(
    cal: &'a Calibration,
    factors: &'a FactorsFile,
    prose: &'a ProseInput,
    runs_per_page: usize,
) -> Built<'a> {
    let runs_per_page = runs_per_page.max(1);
    // Families: the engine's list, sorted (BTreeMap), plus any family a row names.
    let mut names: std::collections::BTreeSet<&str> =
        cal.families.keys().map(|f| f.as_str()).collect();
    let mut last = None;
    for r in &cal.rows {
        if last != Some(r.family.as_str()) {
            names.insert(r.family.as_str());
            last = Some(r.family.as_str());
        }
    }
    let families: Vec<String> = names.into_iter().map(|f| f.to_string()).collect();
    let mut family_files = BTreeMap::new();
    let mut used = std::collections::BTreeSet::new();
    for f in &families {
        let base = format!("family-{}", fmt::slug(f));
        let mut name = format!("{base}.html");
        let mut k = 2;
        while used.contains(&name) {
            name = format!("{base}-{k}.html");
            k += 1;
        }
        used.insert(name.clone());
        family_files.insert(f.clone(), name);
    }
    let mut devices: Vec<&str> = Vec::new();
    let mut last = None;
    for r in &cal.rows {
        if last == Some(r.regime.as_str()) {
            continue;
        }
        last = Some(r.regime.as_str());
        let d = device_label(factors, &r.regime);
        if !devices.contains(&d) {
            devices.push(d);
        }
    }
    let runs_label = match devices.as_slice() {
        [one] => format!("{one} runs"),
        _ => "runs".to_string(),
    };
    let ctx = Ctx {
        cal,
        factors,
        prose,
        family_files,
        families,
        runs_label,
    };
    let empty = cal.totals.inputs == 0;
    // Each family's rows, as indices into `cal.rows` (run-id order).
    // (A row's family found by its name's shared allocation first, then by the name.)
    let mut fam_rows: Vec<Vec<u32>> = vec![Vec::new(); ctx.families.len()];
    let mut by_alloc: std::collections::HashMap<usize, usize> = Default::default();
    for (i, r) in cal.rows.iter().enumerate() {
        let k = *by_alloc
            .entry(std::sync::Arc::as_ptr(&r.family.0) as usize)
            .or_insert_with(|| {
                ctx.families
                    .binary_search_by(|f| f.as_str().cmp(r.family.as_str()))
                    .expect("every row's family is listed")
            });
        fam_rows[k].push(i as u32);
    }
    let rows_of = |k: usize| fam_rows[k].iter().map(|&i| &cal.rows[i as usize]);

    // Charts. The scatter charts over every row are made on a thread of their own while the
    // runs pages and the family pages are laid out (the family pages' charts come after them).
    let top_charts = || {
        let mut charts = Vec::new();
        let mut scatter_refs = Vec::new();
        // One chart per precision profile (each measured on its own device) and method.
        for (p, pf) in &cal.fits {
            if pf.methods.is_empty() {
                continue;
            }
            let devices = cal
                .measured
                .devices_by_profile
                .get(p)
                .cloned()
                .unwrap_or_default();
            let (profile_title, _) = headline::profile_title(&devices, p.as_str());
            let mut group = ChartGroup {
                heading: profile_title.clone(),
                charts: Vec::new(),
            };
            for m in SCATTER_METHODS {
                let (c, total) = scatter(
                    &ctx,
                    m,
                    format!("scatter-{}-{}.svg", m.as_str(), p.as_str()),
                    format!("{}: {profile_title} runs", method_name(m)),
                    cal.rows.iter().filter(|r| r.precision == *p),
                );
                if c.points.is_empty() {
                    continue;
                }
                group.charts.push(chart_ref(&c, total, method_name(m)));
                charts.push(Chart::Scatter(c));
            }
            if !group.charts.is_empty() {
                scatter_refs.push(group);
            }
        }
        (charts, scatter_refs)
    };
    let mut fam_charts = Vec::new();
    let (
        (mut charts, scatter_refs),
        runs_pages,
        runs_rows,
        split,
        page_links,
        nav_links,
        family_pages,
        family_rows,
    ) = std::thread::scope(|sc| {
        let top = sc.spawn(top_charts);
        // Runs pages: one, or per family in pages of at most `runs_per_page` rows.
        let mut runs_pages: Vec<RunsPage> = Vec::new();
        let mut runs_rows: Vec<Vec<u32>> = Vec::new();
        let split = cal.rows.len() > runs_per_page;
        let counts: Vec<usize> = fam_rows.iter().map(|r| r.len()).collect();
        let files: Vec<&str> = ctx
            .families
            .iter()
            .map(|f| ctx.family_files[f].as_str())
            .collect();
        let layout::Links {
            family_pages: family_page_links,
            runs: page_links,
        } = layout::links(&ctx.families, &files, &counts, split, runs_per_page);
        let nav_links = nav(&page_links);
        if split {
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
                            nav: nav_links.clone(),
                        },
                        heading: title,
                        intro,
                        others: page_links.clone(),
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
                    nav: nav_links.clone(),
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

        // Family pages.
        let mut family_pages = Vec::new();
        let mut family_rows = Vec::new();
        for (k, f) in ctx.families.iter().enumerate() {
            let links = if split {
                &family_page_links[k][..]
            } else {
                &[]
            };
            let (page, chart) = family::page(&ctx, f, rows_of(k), links, &nav_links);
            fam_charts.extend(chart);
            family_rows.push(if split {
                Vec::new()
            } else {
                fam_rows[k].clone()
            });
            family_pages.push(page);
        }

        (
            top.join().expect("the chart thread does not panic"),
            runs_pages,
            runs_rows,
            split,
            page_links,
            nav_links,
            family_pages,
            family_rows,
        )
    });
    charts.extend(fam_charts);
    drop(fam_rows);

    // Section 5's charts: one per profile with ratios.
    let mut upper_charts = Vec::new();
    for (p, pf) in &cal.fits {
        let u = &pf.upper;
        if u.ratios.is_empty() {
            continue;
        }
        let file = format!("upper-bound-ratios-{}.svg", p.as_str());
        let c = RatioChart {
            file: file.clone(),
            title: format!(
                "Measured / held-out prediction, fitted {} {}",
                p.as_str(),
                ctx.runs_label
            ),
            ratios: {
                // Above the limit, evenly spaced in ratio order (the first and last included).
                let n = u.ratios.len();
                let drawn = n.min(CHART_POINTS_LIMIT);
                (0..drawn)
                    .map(|i| {
                        let j = if drawn > 1 {
                            i * (n - 1) / (drawn - 1)
                        } else {
                            0
                        };
                        u.ratios[j].1
                    })
                    .collect()
            },
            q90: u.q90_used,
            q95: u.q95_used,
            q90_label: format!("q90 = {}", fmt::ratio(u.q90_used)),
            q95_label: format!("q95 = {}", fmt::ratio(u.q95_used)),
        };
        charts.push(Chart::Ratio(c));
        upper_charts.push(ChartRef {
            src: format!("charts/{file}"),
            alt: format!(
                "Each of {}{} of the {} profile as a dot at its ratio of measured peak to held-out prediction, in ratio order, with vertical lines at ratio 1, q90 = {} and q95 = {}.",
                fmt::runs(u.ratios.len() as u64),
                if u.ratios.len() > CHART_POINTS_LIMIT {
                    format!(
                        " ({} of them drawn, evenly spaced in ratio order)",
                        fmt::count(CHART_POINTS_LIMIT as u64)
                    )
                } else {
                    String::new()
                },
                p.as_str(),
                fmt::ratio(u.q90_used),
                fmt::ratio(u.q95_used)
            ),
            caption: format!(
                "The distribution the {} upper-bound multipliers are read from.",
                p.as_str()
            ),
        });
    }
    charts.sort_by(|a, b| a.file().cmp(b.file()));

    let index = IndexPage {
        meta: PageMeta {
            file: "index.html".into(),
            title: TITLE.into(),
            nav: nav_links.clone(),
        },
        empty,
        empty_text: "No measured rows yet: the sections below fill in once run rows are added under data/runs/ and the site is rebuilt.".into(),
        prose: Prose {
            headline: ctx.block("headline"),
            scatter: ctx.block("scatter"),
            methods: ctx.block("methods"),
            did_not_fit: ctx.block("did_not_fit"),
            upper: ctx.block("upper"),
            how: ctx.block("how"),
            out_of_sample: ctx.block("out_of_sample"),
            misses: ctx.block("misses"),
            excluded: ctx.block("excluded"),
            runs: ctx.block("runs"),
        },
        headline: headline::headline(&ctx),
        scatter: scatter_refs,
        methods: methods_table(&ctx),
        methods_by_profile: methods_by_profile_table(&ctx),
        simulated_reserved: simulated_reserved_table(&ctx),
        did_not_fit: did_not_fit_table(&ctx),
        upper: UpperView {
            charts: upper_charts,
            multipliers: multipliers_table(&ctx),
            counts: bound_counts_table(&ctx),
        },
        how: how(&ctx),
        out_of_sample: out_of_sample(&ctx),
        misses: misses(&ctx),
        excluded: excluded_table(&ctx),
        all_runs: AllRunsView {
            summary: format!(
                "{} counted, {} not counted. The runs table lists every counted run with every method's prediction.",
                fmt::runs(cal.rows.len() as u64),
                fmt::runs(cal.totals.excluded)
            ),
            pages: page_links,
            downloads: downloads(),
        },
        cards: None,
    };
    Built {
        site: Site {
            counted_rows: cal.rows.len(),
            index,
            runs: runs_pages,
            families: family_pages,
            history: history_page(&prose.history, nav_links.clone()),
            fit: super::fit::page(&[], nav_links.clone()),
            charts,
        },
        source: Source {
            ctx,
            runs_rows,
            runs_with_family: !split,
            family_rows,
            row_verdicts: Vec::new(),
            compact_download: split,
        },
    }
}

/// The site's view model (plain data) and the rows its runs tables and downloads stream from
/// ([`Built::runs_page`], [`Built::family_page`], [`Built::write_download_json`],
/// [`Built::write_download_csv`]). Reads as the site it holds.
#[derive(Debug, Clone)]
pub struct Built<'a> {
    pub site: Site,
    source: Source<'a>,
}

impl std::ops::Deref for Built<'_> {
    type Target = Site;
    fn deref(&self) -> &Site {
        &self.site
    }
}

impl std::ops::DerefMut for Built<'_> {
    fn deref_mut(&mut self) -> &mut Site {
        &mut self.site
    }
}

impl Built<'_> {
    /// Gives the runs tables `memcal plan`'s verdict on each row (in `cal.rows` order, as
    /// [`crate::plan_evidence::row_verdicts`] computes them).
    pub fn set_row_verdicts(&mut self, verdicts: Vec<Option<RowVerdict>>) {
        self.source.row_verdicts = verdicts;
    }
}

fn methods_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "methods",
        "Each method's error and card checks, over the rows it predicts",
        metrics_columns("Method"),
        "No method has predicted a row yet.",
    );
    for m in Method::ALL {
        if let Some(mm) = ctx.cal.methods.get(&m) {
            t.rows.push(metrics_cells(Cell::text(method_name(m)), mm));
        }
    }
    t
}

/// The methods again, over each precision profile's rows alone (the profiles are measured on
/// different devices: one profile's rows never flatter or spoil the other's numbers).
fn methods_by_profile_table(ctx: &Ctx) -> Table {
    let mut columns = vec![col("Precision profile", false)];
    columns.extend(metrics_columns("Method"));
    let mut t = table(
        "methods-by-profile",
        "Each method's error and card checks, per precision profile",
        columns,
        "No method has predicted a row yet.",
    );
    for (p, pf) in &ctx.cal.fits {
        for m in Method::ALL {
            if let Some(mm) = pf.methods.get(&m) {
                let mut row = vec![Cell::text(p.as_str())];
                row.extend(metrics_cells(Cell::text(method_name(m)), mm));
                t.rows.push(row);
            }
        }
    }
    t
}

/// The simulator's reserved peak (the CUDA caching-allocator replay) against the rows'
/// measured reserved peak, per profile: apart from the methods, which predict allocated bytes.
fn simulated_reserved_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "simulated-reserved",
        "The simulated training step's reserved peak (a replay of the CUDA caching allocator), against each completed GPU run's measured reserved peak",
        vec![
            col("Precision profile", false),
            col("Rows", true),
            col("Median |error|", true),
            col("Max |error|", true),
            col("Rows >= 1 GB", true),
            col("Median |error| (>= 1 GB)", true),
            col("Max |error| (>= 1 GB)", true),
        ],
        "No row has a simulated reserved peak yet (only CUDA rows have one).",
    );
    for (p, r) in &ctx.cal.simulated_reserved {
        t.rows.push(vec![
            Cell::text(p.as_str()),
            count_cell(r.rows),
            opt_pct(r.median_abs_rel_error),
            opt_pct(r.max_abs_rel_error),
            count_cell(r.large_rows),
            opt_pct(r.large_median_abs_rel_error),
            opt_pct(r.large_max_abs_rel_error),
        ]);
    }
    t
}

fn did_not_fit_table(ctx: &Ctx) -> Table {
    let mut columns = vec![
        col("Run", false),
        col("Regime", false),
        col("Card", false),
        col("What happened", false),
    ];
    for m in Method::ALL {
        columns.push(col(method_name(m), false));
    }
    columns.push(col("Bound at q90", false));
    columns.push(col("Bound at q95", false));
    let mut t = table(
        "did-not-fit",
        "Every check where the run did not fit the card, and what each method said",
        columns,
        "No run has failed to fit a card yet.",
    );
    let verdict_cell = |v: Option<Verdict>| match v {
        None => Cell::text(fmt::MISSING),
        Some(Verdict::Fits) => Cell::text(verdict_name(Verdict::Fits)).class("bad"),
        Some(Verdict::Borderline) => Cell::text(verdict_name(Verdict::Borderline)).class("warn"),
        Some(Verdict::DoesNotFit) => Cell::text(verdict_name(Verdict::DoesNotFit)).class("good"),
    };
    let total: usize = ctx
        .cal
        .rows
        .iter()
        .map(|r| {
            r.checks
                .iter()
                .filter(|c| c.truth == Truth::DoesNotFit)
                .count()
        })
        .sum();
    if total > DID_NOT_FIT_LIMIT {
        t.caption = format!(
            "{}: the first {} in run-id order of {}; memory-calibration.json has every check",
            t.caption,
            fmt::count(DID_NOT_FIT_LIMIT as u64),
            fmt::count(total as u64)
        );
    }
    'rows: for r in &ctx.cal.rows {
        for c in r.checks.iter().filter(|c| c.truth == Truth::DoesNotFit) {
            if t.rows.len() == DID_NOT_FIT_LIMIT {
                break 'rows;
            }
            let what = match (r.status, r.measured_bytes, r.oom_capacity_bytes) {
                (RunStatus::Oom, _, Some(cap)) => {
                    format!("ran out of memory at {}", ctx.card_name(&r.regime, cap))
                }
                (_, Some(m), _) => format!("peaked at {}", units::both(m as f64)),
                _ => status_name(r.status).to_string(),
            };
            let mut row = vec![
                Cell::text(&r.run_id),
                Cell::text(ctx.regime_label(&r.regime)),
                Cell::text(ctx.card_name(&r.regime, c.card_bytes)),
                Cell::text(what),
            ];
            for m in Method::ALL {
                row.push(match c.fits.get(&m) {
                    None => Cell::text(fmt::MISSING),
                    Some(true) => Cell::text("fits").class("bad"),
                    Some(false) => Cell::text("does not fit").class("good"),
                });
            }
            row.push(verdict_cell(c.bound_q90));
            row.push(verdict_cell(c.bound_q95));
            t.rows.push(row);
        }
    }
    t
}

fn multipliers_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "multipliers",
        "The upper-bound multipliers, per precision profile",
        vec![
            col("Profile", false),
            col("Multiplier", false),
            col("Held-out ratios", true),
            col("From today's held-out ratios", true),
            col("Used by the checks", true),
            col("In data/factors.json", true),
        ],
        "",
    );
    let q = |v: Option<f64>| match v {
        Some(x) => Cell::num(fmt::ratio(x), fmt::ratio(x)),
        None => Cell::num("none (no ratios)", ""),
    };
    for (p, pf) in &ctx.cal.fits {
        let (u, file) = (&pf.upper, ctx.factors.upper_for(*p));
        let n = u.ratios.len() as u64;
        for (name, today, interval, used, in_file) in [
            ("q90", u.q90, u.q90_interval, u.q90_used, file.q90),
            ("q95", u.q95, u.q95_interval, u.q95_used, file.q95),
        ] {
            t.rows.push(vec![
                Cell::text(p.as_str()),
                Cell::text(name),
                count_cell(n),
                match today {
                    Some(x) => Cell::num(fmt::ratio_interval(x, interval, n), fmt::ratio(x)),
                    None => q(None),
                },
                Cell::num(fmt::ratio(used), fmt::ratio(used)),
                Cell::num(fmt::ratio(in_file), fmt::ratio(in_file)),
            ]);
        }
    }
    t
}

fn bound_counts_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "bound-counts",
        "The bound's three verdicts on did-not-fit and fit checks",
        vec![
            col("Multiplier", false),
            col("Did not fit: called fits", true),
            col("Did not fit: borderline", true),
            col("Did not fit: does not fit", true),
            col("Fit: fits", true),
            col("Fit: borderline", true),
            col("Fit: does not fit", true),
        ],
        "",
    );
    for (name, b) in [("q90", &ctx.cal.bound.q90), ("q95", &ctx.cal.bound.q95)] {
        let dnf = &b.on_did_not_fit;
        let fit = &b.on_fit;
        let missed = count_cell(dnf.fits);
        t.rows.push(vec![
            Cell::text(name),
            if dnf.fits > 0 {
                missed.class("bad")
            } else {
                missed
            },
            count_cell(dnf.borderline),
            count_cell(dnf.does_not_fit),
            count_cell(fit.fits),
            count_cell(fit.borderline),
            count_cell(fit.does_not_fit),
        ]);
    }
    t
}

fn how(ctx: &Ctx) -> HowView {
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
    let t = &cal.totals;
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
    let mut refits = Vec::new();
    for (p, pf) in &cal.fits {
        for (fam, r) in &pf.held_out_architecture {
            refits.push((p.as_str().to_string(), fam.clone(), r));
        }
    }
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
    HowView {
        formula: format!(
            "estimate = Σ factorᵢ × featureᵢ over the {} features; bound = max(floor, estimate × q95); the plan fits a card when estimate × (1 + headroom) ≤ card",
            fmt::number_word(crate::features::N_FEATURES)
        ),
        factors,
        settings,
        fit,
        splits,
        refits: refit_table,
        accelerate,
        injected,
    }
}

fn out_of_sample(ctx: &Ctx) -> Vec<Table> {
    let cal = ctx.cal;
    let mut arch = table(
        "oos-architecture",
        "By architecture: each family predicted by factors refitted without it",
        metrics_columns("Family"),
        "No family has held-out predictions yet.",
    );
    for (f, rep) in &cal.families {
        if let Some(m) = rep.methods.get(&Method::PlanHeldOutArchitecture) {
            arch.rows
                .push(metrics_cells(Cell::text(f).link(ctx.family_href(f)), m));
        }
    }
    let mut groups = table(
        "implementation-groups",
        "Implementation groups: families whose graphs share an implementation block (an attention, mixture-of-experts, recurrent or convolution op, built by one harness builder and simulated by one rule) are held out together",
        vec![
            col("Families held out together", false),
            col("Blocks they share", false),
        ],
        "No family yet.",
    );
    for g in &cal.implementation_groups {
        groups.rows.push(vec![
            Cell::text(g.families.join(", ")),
            Cell::text(if g.shared_blocks.is_empty() {
                "none (a group of its own)".to_string()
            } else {
                g.shared_blocks.join(", ")
            }),
        ]);
    }
    let mut by_impl = table(
        "oos-implementation",
        "By implementation: each family predicted by factors refitted without its whole implementation group",
        metrics_columns("Family"),
        "No family has held-out predictions yet.",
    );
    for (f, rep) in &cal.families {
        if let Some(m) = rep.methods.get(&Method::PlanHeldOutImplementation) {
            by_impl
                .rows
                .push(metrics_cells(Cell::text(f).link(ctx.family_href(f)), m));
        }
    }
    let mut by_regime = table(
        "oos-regime",
        "By regime: rows of regimes outside the training regimes, predicted by the shipped factors",
        metrics_columns("Method"),
        "No held-out regime has rows yet.",
    );
    if let Some(m) = cal.methods.get(&Method::PlanHeldOutRegime) {
        if m.rows > 0 {
            by_regime.rows.push(metrics_cells(
                Cell::text(method_name(Method::PlanHeldOutRegime)),
                m,
            ));
        }
    }
    let mut after = table(
        "oos-after-fit",
        "After the fit: rows measured after the factors were fixed",
        metrics_columns("Method"),
        "No row has been measured after the fit yet.",
    );
    if let Some(m) = cal.methods.get(&Method::PlanAfterFit) {
        if m.rows > 0 {
            after.rows.push(metrics_cells(
                Cell::text(method_name(Method::PlanAfterFit)),
                m,
            ));
        }
    }
    vec![arch, groups, by_impl, by_regime, after]
}

fn misses(ctx: &Ctx) -> Vec<MissGroup> {
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

fn excluded_table(ctx: &Ctx) -> Table {
    let mut t = table(
        "excluded",
        "Rows not counted, with the reason the engine found",
        vec![
            col("Run", false),
            col("File", false),
            col("Reason", false),
            col("Detail", false),
        ],
        "Every row read is counted.",
    );
    for e in &ctx.cal.exclusions {
        t.rows.push(vec![
            Cell::text(&e.run_id),
            Cell::text(&e.file),
            Cell::text(reason_name(e.reason)),
            Cell::text(&e.detail),
        ]);
    }
    t
}
