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

mod did_not_fit;
mod excluded;
mod family;
mod headline;
mod history;
mod how;
mod layout;
mod methods;
mod misses;
mod out_of_sample;
mod runs;
mod scatters;
mod upper;

use super::names::*;
use did_not_fit::did_not_fit_table;
use excluded::excluded_table;
use history::history_page;
use how::how;
use methods::{methods_by_profile_table, methods_table, simulated_reserved_table};
use misses::misses;
use out_of_sample::out_of_sample;
use runs::{runs_table, Source};
use scatters::scatter_charts;
use upper::{bound_counts_table, multipliers_table};

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

pub(crate) fn opt_pct(v: Option<f64>) -> Cell {
    match v {
        Some(x) => Cell::num(fmt::pct(x), fmt::pct_key(x)),
        None => Cell::num(fmt::MISSING, ""),
    }
}

pub(crate) fn count_cell(n: u64) -> Cell {
    Cell::num(fmt::count(n), n.to_string())
}

pub(crate) fn bytes_cell(b: Option<f64>) -> Cell {
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
    let top_charts = || scatter_charts(&ctx);
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
        let (runs_pages, runs_rows) = runs::pages(
            &ctx,
            &fam_rows,
            &family_page_links,
            &page_links,
            &nav_links,
            runs_per_page,
        );

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
    let (ratio_charts, upper_charts) = upper::ratio_charts(&ctx);
    charts.extend(ratio_charts);
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
