//! The report's writer: the site's files under a folder (staged, manifest, renamed in), and
//! the comparison of a fresh build with a committed site folder.

use super::{render, render_files, BuildSummary, Built};
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

pub(super) fn write_into(
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
