//! The calibration website: `memcal build` reads `data/`, runs the engine, turns its numbers
//! into a view model of formatted strings ([`view`], filled by [`adapter`]), renders pages
//! with askama templates (`templates/`), charts with plotters ([`charts`]) and prose with
//! pulldown-cmark ([`markdown`]), and writes a static site that opens from disk. The same
//! inputs give byte-identical output. See `docs/site.md`.

pub mod adapter;
pub mod cards;
pub mod charts;
mod digits;
mod download;
pub mod fit;
pub mod markdown;
mod names;
pub mod render;
pub mod view;

use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use adapter::{from_calibration, Built, ProseInput};
pub use view::Site;

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

/// The prose blocks `data/prose/<name>.md` the index reads, if present.
pub const PROSE_BLOCKS: [&str; 10] = [
    "headline",
    "scatter",
    "methods",
    "did_not_fit",
    "upper",
    "how",
    "out_of_sample",
    "misses",
    "excluded",
    "runs",
];

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A family name that can be a file name under `data/prose/misses/`.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Reads and renders `data_dir/prose/` for the given families.
pub fn load_prose<'a>(
    data_dir: &Path,
    families: impl IntoIterator<Item = &'a String>,
) -> Result<ProseInput> {
    let dir = data_dir.join("prose");
    let mut p = ProseInput::default();
    for name in PROSE_BLOCKS {
        if let Some(md) = read_optional(&dir.join(format!("{name}.md")))? {
            p.blocks
                .insert(name.to_string(), markdown::prose_to_html(&md));
        }
    }
    for f in families {
        if !plain_file_name(f) {
            continue;
        }
        if let Some(md) = read_optional(&dir.join("misses").join(format!("{f}.md")))? {
            p.misses.insert(f.clone(), markdown::prose_to_html(&md));
        }
    }
    Ok(p)
}

/// Runs the engine on `data_dir`, builds the view model and hands it to `f`.
pub fn with_site<T>(data_dir: &Path, f: impl FnOnce(&Built) -> Result<T>) -> Result<T> {
    with_site_reporting(data_dir, &mut Vec::new(), f)
}

/// [`with_site`], and the files under `runs/` that were not read put in `skipped`.
pub fn with_site_reporting<T>(
    data_dir: &Path,
    skipped: &mut Vec<crate::engine::Skipped>,
    f: impl FnOnce(&Built) -> Result<T>,
) -> Result<T> {
    let (ds, skips) = crate::engine::load_reporting(data_dir)?;
    *skipped = skips;
    let cal = crate::engine::calibrate(&ds);
    let mut families: BTreeSet<String> = cal.families.keys().cloned().collect();
    let mut last: Option<&str> = None;
    for r in &cal.rows {
        if last != Some(r.family.as_str()) {
            families.insert(r.family.to_string());
            last = Some(r.family.as_str());
        }
    }
    let mut prose = load_prose(data_dir, &families)?;
    prose.history = crate::review::audit_history(data_dir, &cal)?;
    let mut site = from_calibration(&cal, &ds.factors, &prose);
    let evidence = crate::plan_evidence::evidence(&ds, &cal);
    let verdicts = crate::plan_evidence::row_verdicts(&cal, &evidence);
    let outcomes = crate::plan_evidence::outcome_counts(&cal, &verdicts);
    site.set_row_verdicts(verdicts);
    let graphs_dir = data_dir.join("graphs");
    let graphs = if graphs_dir.is_dir() {
        crate::graph::load_dir(&graphs_dir)?
    } else {
        Vec::new()
    };
    let lines = crate::plan_evidence::full_size_verdicts(&graphs, &ds.factors, &evidence, 1);
    site.index.cards = Some(cards::view(&evidence, &lines, &outcomes));
    let models = import_models(data_dir)?;
    let jobs: Vec<(&crate::graph::Graph, String)> = graphs
        .iter()
        .filter(|g| g.cut_from.is_none())
        .map(|g| (g, "zoo (data/graphs/)".to_string()))
        .chain(models.iter().map(|(g, from)| (g, from.clone())))
        .collect();
    let fit_lines = crate::plan_evidence::will_it_fit(&jobs, &ds.factors, &evidence, &fit::BATCHES);
    site.fit = fit::page(&fit_lines, site.fit.meta.nav.clone());
    drop(jobs);
    drop(graphs);
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

/// Every real model under `data_dir/models/<name>/config.json`, imported (sorted by name),
/// with where it came from; none without the folder. A config that does not import is an
/// input error naming it.
fn import_models(data_dir: &Path) -> Result<Vec<(crate::graph::Graph, String)>> {
    let dir = data_dir.join("models");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("config.json").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name).join("config.json");
        let options = crate::import::Options {
            name: name.clone(),
            ..Default::default()
        };
        let imported = crate::import::hf(&path, &options)?;
        let graph = crate::graph::Graph::check_owned(imported.graph, &path)?;
        out.push((
            graph,
            format!(
                "imported ({}, data/models/{name}/config.json, sequence {})",
                imported.class, imported.seq
            ),
        ));
    }
    Ok(out)
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

/// The writer: files under `out_dir`, each written as it is rendered. A page whose bytes are
/// already on disk is left untouched; the downloads are streamed into their files.
pub struct SiteWriter<'a> {
    pub out_dir: &'a Path,
}

impl SiteWriter<'_> {
    fn path(&self, rel: &str) -> std::result::Result<PathBuf, String> {
        let p = self.out_dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        Ok(p)
    }
}

impl render::Sink for SiteWriter<'_> {
    fn put(&self, rel: &str, bytes: Vec<u8>) -> std::result::Result<(), String> {
        let p = self.path(rel)?;
        if std::fs::read(&p).ok().as_deref() != Some(bytes.as_slice()) {
            std::fs::write(&p, &bytes).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        }
        Ok(())
    }

    fn stream(
        &self,
        rel: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> std::result::Result<(), String> {
        let p = self.path(rel)?;
        let err = |e: std::io::Error| format!("cannot write {}: {e}", p.display());
        let file = std::fs::File::create(&p).map_err(err)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        write(&mut w).map_err(err)?;
        std::io::Write::flush(&mut w).map_err(err)
    }
}

/// Writes the site of `site` into `out_dir` through [`SiteWriter`], page by page, by the
/// output contract of [`crate::outputs`]: into a temporary sibling folder with a manifest,
/// renamed in; of an earlier build's files only those its manifest lists are removed, and a
/// non-empty folder without a manifest is refused.
pub fn write_site(site: &Built, out_dir: &Path, debug_json: bool) -> Result<BuildSummary> {
    write_into(
        site,
        crate::outputs::SiteTarget::prepare(out_dir, None)?,
        debug_json,
    )
}

fn write_into(
    site: &Built,
    target: crate::outputs::SiteTarget,
    debug_json: bool,
) -> Result<BuildSummary> {
    let staged = target.stage()?;
    let files = render::render_into(
        site,
        debug_json,
        &SiteWriter {
            out_dir: staged.path(),
        },
    )
    .map_err(Error::Invalid)?;
    let done = target.commit(staged, &files)?;
    Ok(BuildSummary {
        rows: site.counted_rows,
        pages: files.iter().filter(|k| k.ends_with(".html")).count(),
        charts: files.iter().filter(|k| k.ends_with(".svg")).count(),
        files,
        removed: done.removed,
        kept: done.kept,
        skipped: Vec::new(),
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
        write_into(site, target, debug_json)
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

/// Builds the site in memory and compares it with `committed_site_dir`, manifest included:
/// `None` when they agree, else the first differing path (sorted) and what differs. A file
/// that the committed manifest does not list and a fresh build does not write is not memcal's
/// and is not compared. Bad input is an error.
pub fn compare_site(data_dir: &Path, committed_site_dir: &Path) -> Result<Option<String>> {
    let (_, mut files) = render_files(data_dir, false)?;
    let listed: Vec<String> = files.keys().cloned().collect();
    files.insert(
        crate::outputs::MANIFEST.to_string(),
        crate::outputs::manifest_text(&listed).into_bytes(),
    );
    let owned = crate::outputs::read_manifest(committed_site_dir)?.unwrap_or_default();
    let on_disk: BTreeSet<String> = crate::outputs::files_under(committed_site_dir)?
        .into_iter()
        .filter(|r| files.contains_key(r) || owned.contains(r))
        .collect();
    let all: BTreeSet<&String> = files.keys().chain(on_disk.iter()).collect();
    for rel in all {
        match (files.get(rel), on_disk.contains(rel)) {
            (Some(want), true) => {
                let p = committed_site_dir.join(rel);
                let have = std::fs::read(&p).map_err(|source| Error::Io {
                    path: p.clone(),
                    source,
                })?;
                if &have != want {
                    return Ok(Some(format!("{rel}: differs from a fresh build")));
                }
            }
            (Some(_), false) => {
                return Ok(Some(format!("{rel}: missing (a fresh build writes it)")))
            }
            (None, _) => {
                return Ok(Some(format!(
                    "{rel}: extra (a fresh build does not write it)"
                )))
            }
        }
    }
    Ok(None)
}
