//! The calibration website: `memcal build` reads `data/`, runs the engine, turns its numbers
//! into a view model of formatted strings ([`view`], filled by [`adapter`]), renders pages
//! with askama templates (`templates/`), charts with plotters ([`charts`]) and prose with
//! pulldown-cmark ([`markdown`]), and writes a static site that opens from disk. The same
//! inputs give byte-identical output. See `docs/site.md`.

pub mod adapter;
pub mod charts;
mod digits;
mod download;
pub mod format;
pub mod markdown;
pub mod render;
pub mod view;

use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use adapter::{from_calibration, ProseInput};
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
    /// Stale files removed from the site folder.
    pub removed: Vec<String>,
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
            p.blocks.insert(name.to_string(), markdown::to_html(&md));
        }
    }
    for f in families {
        if !plain_file_name(f) {
            continue;
        }
        if let Some(md) = read_optional(&dir.join("misses").join(format!("{f}.md")))? {
            p.misses.insert(f.clone(), markdown::to_html(&md));
        }
    }
    Ok(p)
}

/// Runs the engine on `data_dir`, builds the view model and hands it to `f`.
pub fn with_site<T>(data_dir: &Path, f: impl FnOnce(&Site) -> Result<T>) -> Result<T> {
    let ds = crate::engine::load(data_dir)?;
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
    prose.history = crate::review::audit_history(data_dir, Some(&cal))?;
    let site = from_calibration(&cal, &ds.factors, &prose);
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

/// Writes the site of `site` into `out_dir` through [`SiteWriter`], page by page. Stale pages,
/// charts and downloads of an earlier build are removed; other files in `out_dir` are left
/// alone.
pub fn write_site(site: &Site, out_dir: &Path, debug_json: bool) -> Result<BuildSummary> {
    let io = |path: PathBuf| move |source| Error::Io { path, source };
    let before = existing_files(out_dir)?;
    let files =
        render::render_into(site, debug_json, &SiteWriter { out_dir }).map_err(Error::Invalid)?;
    let mut removed = Vec::new();
    for rel in before {
        if site_owned(&rel) && files.binary_search(&rel).is_err() {
            let p = out_dir.join(&rel);
            std::fs::remove_file(&p).map_err(io(p.clone()))?;
            removed.push(rel);
        }
    }
    Ok(BuildSummary {
        rows: site.counted_rows,
        pages: files.iter().filter(|k| k.ends_with(".html")).count(),
        charts: files.iter().filter(|k| k.ends_with(".svg")).count(),
        files,
        removed,
    })
}

/// Files under `dir`, relative and `/`-separated, sorted.
fn existing_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(|e| Error::Io {
            path: e.path().unwrap_or(dir).to_path_buf(),
            source: e
                .into_io_error()
                .unwrap_or_else(|| std::io::Error::other("walk failed")),
        })?;
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(dir)
                .expect("walkdir stays under its root");
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(out)
}

/// Whether a file in the site folder is one a build makes (and may remove when stale).
fn site_owned(rel: &str) -> bool {
    let top = !rel.contains('/');
    let chart = rel.starts_with("charts/") && rel.matches('/').count() == 1;
    (top && [".html", ".json", ".csv", ".css"]
        .iter()
        .any(|x| rel.ends_with(x)))
        || (chart && rel.ends_with(".svg"))
}

/// Builds the site from `data_dir` into `out_dir` (see [`write_site`]). With `debug_json`,
/// each page's view model is written next to it as JSON.
pub fn build_site(data_dir: &Path, out_dir: &Path, debug_json: bool) -> Result<BuildSummary> {
    with_site(data_dir, |site| write_site(site, out_dir, debug_json))
}

/// Builds the site in memory and compares it with `committed_site_dir`: `Ok` when every file
/// is byte-identical and nothing is missing or extra; otherwise the first differing path
/// (sorted) with what differs.
pub fn check_site(data_dir: &Path, committed_site_dir: &Path) -> std::result::Result<(), String> {
    let (_, files) = render_files(data_dir, false).map_err(|e| e.to_string())?;
    let on_disk: BTreeSet<String> = existing_files(committed_site_dir)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|r| site_owned(r))
        .collect();
    let all: BTreeSet<&String> = files.keys().chain(on_disk.iter()).collect();
    for rel in all {
        match (files.get(rel), on_disk.contains(rel)) {
            (Some(want), true) => {
                let p = committed_site_dir.join(rel);
                let have = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                if &have != want {
                    return Err(format!("{rel}: differs from a fresh build"));
                }
            }
            (Some(_), false) => return Err(format!("{rel}: missing (a fresh build writes it)")),
            (None, _) => return Err(format!("{rel}: extra (a fresh build does not write it)")),
        }
    }
    Ok(())
}
