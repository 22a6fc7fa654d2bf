//! Which files under `data/runs/` are rows: every file there is either read (a row file
//! `*.json` or a row bundle `*.jsonl`), reported as skipped with why, or an error.
//!
//! Symlinks are followed when they resolve inside the data folder (a row file or a whole
//! folder such as `runs/cuda` may be a link to another place in it); a link that resolves
//! outside it, a dangling link and a link loop are errors naming the link.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A file under `runs/` that is not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The file, relative to the data folder, `/`-separated.
    pub file: String,
    /// Why it was not read.
    pub reason: String,
}

/// The files under `runs/` to read, in sorted path order, and those skipped.
#[derive(Debug, Default)]
pub struct RunFiles {
    pub paths: Vec<PathBuf>,
    /// About how many rows each path holds (one a row file; one per 512 bytes of a bundle).
    pub weights: Vec<usize>,
    pub skipped: Vec<Skipped>,
}

/// What a name ending tells of a file under `runs/`.
enum Kind {
    Row,
    Bundle,
    /// `.JSON`, `.Jsonl` ...: meant as a row, refused so that it is not silently lost.
    WrongCase(String),
    Other,
}

fn kind(path: &Path) -> Kind {
    match path.extension().and_then(|x| x.to_str()) {
        Some("json") => Kind::Row,
        Some("jsonl") => Kind::Bundle,
        Some(x) if x.eq_ignore_ascii_case("json") || x.eq_ignore_ascii_case("jsonl") => {
            Kind::WrongCase(x.to_string())
        }
        _ => Kind::Other,
    }
}

/// The error for a walk that failed at `e` (a loop, a dangling link, an unreadable folder).
fn walk_error(runs_dir: &Path, e: walkdir::Error) -> Error {
    let path = e.path().unwrap_or(runs_dir).to_path_buf();
    if let Some(ancestor) = e.loop_ancestor() {
        return Error::Invalid(format!(
            "{}: is a symlink loop (it leads back to {}, a folder it is in); remove the link",
            path.display(),
            ancestor.display()
        ));
    }
    let dangling = path.is_symlink() && !path.exists();
    if dangling {
        let to = std::fs::read_link(&path).map_or_else(|_| "?".into(), |t| t.display().to_string());
        return Error::Invalid(format!(
            "{}: is a symlink to {to}, which does not exist; remove the link or restore its \
             target",
            path.display()
        ));
    }
    Error::Io {
        path,
        source: e
            .into_io_error()
            .unwrap_or_else(|| std::io::Error::other("walk failed")),
    }
}

/// Lists `data_dir/runs/` (see the module's rules). A data folder without `runs/` is an error
/// (an empty data set has an empty `runs/`), so that a wrong `--data` never builds an empty
/// site.
pub fn scan_runs(data_dir: &Path) -> Result<RunFiles> {
    let runs_dir = data_dir.join("runs");
    match std::fs::metadata(&runs_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "{}: is a file; the data folder's runs/ is a folder of row files",
                runs_dir.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Invalid(format!(
                "{}: missing; a data folder holds factors.json, graphs/ and runs/ (an empty \
                 runs/ when there are no rows yet): is --data the right folder?",
                runs_dir.display()
            )))
        }
        Err(source) => {
            return Err(Error::Io {
                path: runs_dir,
                source,
            })
        }
    }
    let root = data_dir.canonicalize().map_err(|source| Error::Io {
        path: data_dir.to_path_buf(),
        source,
    })?;
    let mut out = RunFiles::default();
    let walk = walkdir::WalkDir::new(&runs_dir)
        .follow_links(true)
        .sort_by_file_name();
    for entry in walk {
        let entry = entry.map_err(|e| walk_error(&runs_dir, e))?;
        let path = entry.path();
        if entry.path_is_symlink() {
            let target = path.canonicalize().map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if !target.starts_with(&root) {
                return Err(Error::Invalid(format!(
                    "{}: is a symlink to {}, outside the data folder {}; memcal follows links \
                     only within the data folder: copy or move the rows in",
                    path.display(),
                    target.display(),
                    data_dir.display()
                )));
            }
        }
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        let rel = relative(data_dir, path);
        if !ft.is_file() {
            out.skipped.push(Skipped {
                file: rel,
                reason: "not a regular file (a pipe, socket or device)".into(),
            });
            continue;
        }
        let weight = match kind(path) {
            Kind::Row => 1,
            Kind::Bundle => {
                let len = entry.metadata().map_or(0, |m| m.len());
                (len / 512).max(1) as usize
            }
            Kind::WrongCase(x) => {
                return Err(Error::Invalid(format!(
                    "{}: ends in `.{x}`; row files end in `.json` and row bundles in `.jsonl` \
                     (lower case): rename it so that it is read",
                    path.display()
                )))
            }
            Kind::Other => {
                if let Some(what) = holds_rows(path) {
                    let ext = if what == "a row bundle" {
                        "jsonl"
                    } else {
                        "json"
                    };
                    // `b8` -> `b8.json`, `b8.txt` -> `b8.json`.
                    let stem = if path.extension().is_some() {
                        path.file_stem()
                    } else {
                        path.file_name()
                    };
                    let name = stem.map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                    return Err(Error::Invalid(format!(
                        "{}: holds {what} but its name does not end in `.{ext}`, so it would not \
                         be read (and its rows not counted); rename it to `{name}.{ext}` (or, if \
                         it is a copy, move it out of runs/)",
                        path.display()
                    )));
                }
                out.skipped.push(Skipped {
                    file: rel,
                    reason: "not a row file (row files end in .json, row bundles in .jsonl)".into(),
                });
                continue;
            }
        };
        out.paths.push(entry.into_path());
        out.weights.push(weight);
    }
    Ok(out)
}

/// Files larger than this are not opened to see whether they hold rows.
const PEEK_LIMIT: u64 = 64 << 20;

/// Whether a file that is not named as a row holds one: `Some("a run row")` when the file is a
/// JSON object of format `memcal-run/1`, `Some("a row bundle")` when its first line is; `None`
/// otherwise (or when it cannot be read: it is skipped and reported like any other file).
fn holds_rows(path: &Path) -> Option<&'static str> {
    if std::fs::metadata(path).ok()?.len() > PEEK_LIMIT {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    let is_row = |b: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(b)
            .ok()
            .is_some_and(|v| {
                v.get("format").and_then(|f| f.as_str()) == Some(crate::run::RUN_FORMAT)
            })
    };
    if is_row(&bytes) {
        return Some("a run row");
    }
    let first = bytes.split(|&b| b == b'\n').next()?;
    (first.len() < bytes.len() && is_row(first)).then_some("a row bundle")
}

/// `path` relative to `data_dir`, `/`-separated.
pub(super) fn relative(data_dir: &Path, path: &Path) -> String {
    let mut rel = String::new();
    for c in path.strip_prefix(data_dir).unwrap_or(path).components() {
        if !rel.is_empty() {
            rel.push('/');
        }
        rel.push_str(&c.as_os_str().to_string_lossy());
    }
    rel
}
