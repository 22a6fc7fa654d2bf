//! The calibration website: `memcal build` reads `data/`, runs the engine, turns its numbers
//! into a view model of formatted strings ([`view`], filled by [`build`]), renders pages
//! with askama templates (`templates/`), charts with plotters ([`charts`]) and prose with
//! pulldown-cmark ([`markdown`]), and writes a static site that opens from disk. The same
//! inputs give byte-identical output. See `docs/site.md`.

pub mod build;
pub mod charts;
mod digits;
mod download;
mod load;
pub mod markdown;
mod names;
pub mod render;
pub mod view;
mod write;

use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub use build::{cards, fit, from_calibration, Built, ProseInput};
pub use load::{load_prose, PROSE_BLOCKS};
pub use view::Site;
pub use write::{compare_site, write_site, SiteWriter};

/// What a build wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BuildSummary {
    /// Counted rows on the site.
    pub rows: usize,
    /// HTML pages written.
    pub pages: usize,
    /// SVG charts written.
    pub charts: usize,
    /// Every file written, relative to the site folder, sorted.
    pub files: Vec<String>,
    /// Files of the earlier build that this one does not write, removed.
    pub removed: Vec<String>,
    /// Files in the site folder that memcal did not write, kept.
    pub kept: Vec<String>,
    /// Files under `runs/` that are not rows and were not read, with why.
    pub skipped: Vec<crate::engine::Skipped>,
}

/// Runs the engine on `data_dir`, builds the view model and hands it to `f`.
pub fn with_site<T>(data_dir: &Path, f: impl FnOnce(&Built) -> Result<T>) -> Result<T> {
    with_site_reporting(data_dir, &mut Vec::new(), f)
}

/// [`with_site`], and the files under `runs/` that were not read put in `skipped`. The steps:
/// load the data set, calibrate, read the prose and the audited factor history, build the
/// view model, add what `memcal plan` would answer (its verdict on every row, the cards, the
/// "Will it fit?" page), hand the site to `f`.
pub fn with_site_reporting<T>(
    data_dir: &Path,
    skipped: &mut Vec<crate::engine::Skipped>,
    f: impl FnOnce(&Built) -> Result<T>,
) -> Result<T> {
    let (ds, skips) = crate::engine::load_reporting(data_dir)?;
    *skipped = skips;
    let cal = crate::engine::calibrate(&ds);
    let families: BTreeSet<String> = build::site_families(&cal).into_iter().collect();
    let mut prose = load_prose(data_dir, &families)?;
    require_history(data_dir, &ds.factors)?;
    prose.history = crate::review::audit_history(data_dir, &cal)?;
    let mut site = from_calibration(&cal, &ds.factors, &prose);
    add_plan_sections(&mut site, data_dir, &ds, &cal)?;
    let out = f(&site);
    drop(site);
    // A million rows take a while to free (each row's names and lists): the data set and the
    // calibration are freed on two threads.
    std::thread::scope(|sc| {
        sc.spawn(move || drop(ds));
        drop(cal);
    });
    out
}

/// A data folder whose factors were fitted (`provenance`) has the history that fit wrote next
/// to them (`factors-history.json`): without it the site's history page would be empty as if
/// nothing had been fitted.
fn require_history(data_dir: &Path, factors: &crate::factors::FactorsFile) -> Result<()> {
    let path = data_dir.join("factors-history.json");
    match (&factors.provenance, path.exists()) {
        (Some(p), false) => Err(Error::Invalid(format!(
            "{}: missing, but {} was fitted (provenance.fixed_at {}) and `memcal fit \
             --write-factors` writes the history next to it: restore it (e.g. `git checkout -- \
             {}`)",
            path.display(),
            data_dir.join("factors.json").display(),
            p.fixed_at,
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// What `memcal plan` answers, on the site: its verdict on every row (the runs tables), the
/// cards with the full-size graphs' verdicts (the Planning section) and the "Will it fit?"
/// page over the zoo's full-size graphs and the real models of `data/models/`.
fn add_plan_sections(
    site: &mut Built,
    data_dir: &Path,
    ds: &crate::engine::Dataset,
    cal: &crate::engine::Calibration,
) -> Result<()> {
    let evidence = crate::plan::evidence::evidence(ds, cal);
    let verdicts = crate::plan::verdicts::row_verdicts(cal, &evidence);
    let outcomes = crate::plan::verdicts::outcome_counts(cal, &verdicts);
    site.set_row_verdicts(verdicts);
    let graphs_dir = data_dir.join("graphs");
    let graphs = if graphs_dir.is_dir() {
        crate::graph::load_dir(&graphs_dir)?
    } else {
        Vec::new()
    };
    let lines = crate::plan::verdicts::full_size_verdicts(&graphs, &ds.factors, &evidence, 1);
    let nav = site.fit.meta.nav.clone();
    let mut planning = cards::view(&evidence, &lines, &outcomes);
    let verdicts = build::cells::move_out(
        &mut planning.verdicts,
        "full-size-verdicts.html",
        "What memcal plan says of every full-size graph",
        String::new(),
        &nav,
    );
    site.index.cards = Some(planning);
    let strategies = crate::strategy::evidence::evidence_from(ds, &graphs);
    site.index.headline.scope = build::scope::scope(ds, cal, &evidence, &strategies);
    let mut view = build::strategies::view(&strategies);
    let by_family = build::cells::move_out(
        &mut view.by_family,
        "strategies-by-family.html",
        "Strategies: each measured strategy per family",
        String::new(),
        &nav,
    );
    let ranks = build::cells::move_out(
        &mut view.ranks,
        "strategies-by-rank.html",
        "Strategies measured per rank: each world and rank",
        String::new(),
        &nav,
    );
    site.index.strategies = Some(view);
    site.tables.extend([verdicts, by_family, ranks]);
    site.index.real = Some(build::real::view(
        &crate::engine::real::real_models(ds, cal),
        &crate::engine::real::gpu_by_allocator(ds, cal),
    ));
    let models = load::import_models(data_dir)?;
    let jobs: Vec<(&crate::graph::Graph, String)> = graphs
        .iter()
        .filter(|g| g.cut_from.is_none())
        .map(|g| (g, "zoo (data/graphs/)".to_string()))
        .chain(models.iter().map(|(g, from)| (g, from.clone())))
        .collect();
    let fit_lines =
        crate::plan::verdicts::will_it_fit(&jobs, &ds.factors, &evidence, &fit::BATCHES);
    site.fit = fit::page(&fit_lines, site.fit.meta.nav.clone());
    Ok(())
}

/// What [`render_files`] returns besides the files: the index's view model and the count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub counted_rows: usize,
    pub index: view::IndexPage,
}

/// Every file of the site built from `data_dir`, by relative path, in memory.
pub fn render_files(
    data_dir: &Path,
    debug_json: bool,
) -> Result<(Rendered, BTreeMap<String, Vec<u8>>)> {
    with_site(data_dir, |s| {
        let files = render::render(s, debug_json).map_err(Error::Invalid)?;
        Ok((
            Rendered {
                counted_rows: s.counted_rows,
                index: s.index.clone(),
            },
            files,
        ))
    })
}

/// Builds the site from `data_dir` into `out_dir` (see [`write_site`]). With `debug_json`,
/// each page's view model is written next to it as JSON.
/// The folder is checked (see [`crate::outputs::SiteTarget::prepare`]: not the data folder or
/// inside it) before the data is read.
pub fn build_site(data_dir: &Path, out_dir: &Path, debug_json: bool) -> Result<BuildSummary> {
    let target = crate::outputs::SiteTarget::prepare(out_dir, Some(data_dir))?;
    let mut skipped = Vec::new();
    let mut summary = with_site_reporting(data_dir, &mut skipped, |site| {
        write::write_into(site, target, debug_json)
    })?;
    summary.skipped = skipped;
    Ok(summary)
}

/// Builds the site in memory and compares it with `committed_site_dir`: `Ok` when every file
/// is byte-identical and nothing is missing or extra; otherwise the first differing path
/// (sorted) with what differs. An input error is an `Err` too (see [`compare_site`] to tell
/// them apart).
pub fn check_site(data_dir: &Path, committed_site_dir: &Path) -> std::result::Result<(), String> {
    match compare_site(data_dir, committed_site_dir) {
        Ok(None) => Ok(()),
        Ok(Some(first)) => Err(first),
        Err(e) => Err(e.to_string()),
    }
}
