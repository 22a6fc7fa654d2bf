//! The build of the view model from the engine's [`Calibration`]. It selects and formats the
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
use crate::plan::verdicts::RowVerdict;
use crate::plan::Verdict;
use crate::review::AuditedEntry;
use crate::run::RunStatus;
use crate::units;
use std::collections::BTreeMap;

pub mod cards;
pub(crate) mod cells;
mod ctx;
mod did_not_fit;
mod excluded;
mod family;
pub mod fit;
mod headline;
mod history;
mod how;
mod index;
mod layout;
mod methods;
mod misses;
mod nav;
mod out_of_sample;
pub mod real;
mod runs;
mod scatters;
pub(crate) mod scope;
pub mod strategies;
mod upper;

use super::names::*;
use cells::*;
pub(crate) use ctx::site_families;
use ctx::Ctx;
use did_not_fit::did_not_fit_table;
use excluded::excluded_table;
use history::history_page;
use how::how;
use methods::{methods_by_profile_table, simulated_reserved_table};
use misses::misses;
use nav::{downloads, nav};
use out_of_sample::out_of_sample;
use runs::{runs_table, Source};
use scatters::scatter_charts;
use scatters::{chart_ref, scatter};
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
/// each family's runs into pages of at most `runs_per_page` rows. The build, step by step:
/// the context, the runs and family pages (beside the index's scatter charts, on a thread of
/// their own), the bound's ratio charts, the index, the history and "Will it fit?" pages.
pub fn from_calibration_paged<'a>(
    cal: &'a Calibration,
    factors: &'a FactorsFile,
    prose: &'a ProseInput,
    runs_per_page: usize,
) -> Built<'a> {
    let ctx = Ctx::new(cal, factors, prose);
    let pages = pages(&ctx, runs_per_page.max(1));
    let mut charts = pages.charts;
    let (ratio_charts, upper_charts) = upper::ratio_charts(&ctx);
    charts.extend(ratio_charts);
    charts.sort_by(|a, b| a.file().cmp(b.file()));
    let mut index = index::page(
        &ctx,
        &pages.nav,
        pages.scatter_refs,
        upper_charts,
        pages.links,
    );
    let tables = index::move_tables(&ctx, &mut index, &pages.nav);
    Built {
        site: Site {
            counted_rows: cal.rows.len(),
            index,
            runs: pages.runs,
            families: pages.families,
            history: history_page(&prose.history, pages.nav.clone()),
            fit: fit::page(&[], pages.nav.clone()),
            tables,
            charts,
        },
        source: Source {
            ctx,
            runs_rows: pages.runs_rows,
            runs_with_family: !pages.split,
            family_rows: pages.family_rows,
            row_verdicts: Vec::new(),
            compact_download: pages.split,
        },
    }
}

/// The runs pages, the family pages and the index's scatter charts.
struct Pages {
    /// Every chart so far: the index's scatters, then the family pages'.
    charts: Vec<Chart>,
    scatter_refs: Vec<ChartGroup>,
    runs: Vec<RunsPage>,
    runs_rows: Vec<Vec<u32>>,
    families: Vec<FamilyPage>,
    family_rows: Vec<Vec<u32>>,
    /// Whether the runs table is split by family.
    split: bool,
    /// The runs pages the index and the nav link.
    links: Vec<Link>,
    nav: Vec<Link>,
}

/// Lays out the runs pages (one, or per family in pages of at most `runs_per_page` rows) and
/// the family pages, while the scatter charts over every row are made on a thread of their own
/// (the family pages' charts come after them).
fn pages(ctx: &Ctx, runs_per_page: usize) -> Pages {
    let cal = ctx.cal;
    let fam_rows = ctx.rows_by_family();
    let split = cal.rows.len() > runs_per_page;
    let counts: Vec<usize> = fam_rows.iter().map(|r| r.len()).collect();
    let files: Vec<&str> = ctx
        .families
        .iter()
        .map(|f| ctx.family_files[f].as_str())
        .collect();
    let layout::Links {
        family_pages: family_page_links,
        runs: links,
    } = layout::links(&ctx.families, &files, &counts, split, runs_per_page);
    let nav = nav(&links);
    std::thread::scope(|sc| {
        let top = sc.spawn(|| scatter_charts(ctx));
        let (runs, runs_rows) = runs::pages(
            ctx,
            &fam_rows,
            &family_page_links,
            &links,
            &nav,
            runs_per_page,
        );
        let mut fam_charts = Vec::new();
        let mut families = Vec::new();
        let mut family_rows = Vec::new();
        for (k, f) in ctx.families.iter().enumerate() {
            let page_links = if split {
                &family_page_links[k][..]
            } else {
                &[]
            };
            let rows = fam_rows[k].iter().map(|&i| &cal.rows[i as usize]);
            let (page, chart) = family::page(ctx, f, rows, page_links, &nav);
            fam_charts.extend(chart);
            family_rows.push(if split {
                Vec::new()
            } else {
                fam_rows[k].clone()
            });
            families.push(page);
        }
        let (mut charts, scatter_refs) = top.join().expect("the chart thread does not panic");
        charts.extend(fam_charts);
        Pages {
            charts,
            scatter_refs,
            runs,
            runs_rows,
            families,
            family_rows,
            split,
            links,
            nav,
        }
    })
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
    /// [`crate::plan::verdicts::row_verdicts`] computes them).
    pub fn set_row_verdicts(&mut self, verdicts: Vec<Option<RowVerdict>>) {
        self.source.row_verdicts = verdicts;
    }
}
