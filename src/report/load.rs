//! The report's loader: the prose of `data/prose/` (rendered to HTML) and the real models of
//! `data/models/` (imported). With the writer, the only part of the report that reads files.

use super::markdown;
use super::ProseInput;
use crate::error::{Error, Result};
use std::path::Path;

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

/// Reads and renders `data_dir/prose/` for the given families. Every block of
/// [`PROSE_BLOCKS`] must be there (an empty file: the section has no prose), so that a lost
/// file or folder is an error and not a page without its text; a family's note
/// (`prose/misses/<family>.md`) is optional.
pub fn load_prose<'a>(
    data_dir: &Path,
    families: impl IntoIterator<Item = &'a String>,
) -> Result<ProseInput> {
    let dir = data_dir.join("prose");
    if !dir.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: missing; the site's prose is read from it (one Markdown file per section: {}.md; \
             an empty file for a section without prose): restore it (e.g. `git checkout -- {}`), \
             or create it with those files",
            dir.display(),
            PROSE_BLOCKS.join(".md, "),
            dir.display()
        )));
    }
    let mut p = ProseInput::default();
    for name in PROSE_BLOCKS {
        let path = dir.join(format!("{name}.md"));
        let Some(md) = read_optional(&path)? else {
            return Err(Error::Invalid(format!(
                "{}: missing; the site's `{name}` section reads its prose from it: restore it \
                 (e.g. `git checkout -- {}`), or create it empty if the section has no prose",
                path.display(),
                path.display()
            )));
        };
        p.blocks
            .insert(name.to_string(), markdown::prose_to_html(&md));
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

/// Every real model under `data_dir/models/<name>/config.json`, imported (sorted by name),
/// with where it came from; none without the folder. A config that does not import is an
/// input error naming it.
pub(super) fn import_models(data_dir: &Path) -> Result<Vec<(crate::graph::Graph, String)>> {
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
