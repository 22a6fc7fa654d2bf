//! What memcal may write and remove: the site folder's contract (a manifest of what memcal wrote,
//! a fresh folder renamed in) and the guards on the files `memcal fit` and `memcal graphs`
//! write. `docs/hardening.md` ("Outputs") documents the rules.
//!
//! The site folder (`memcal build --out DIR`):
//! - carries [`MANIFEST`], the list of every file memcal wrote there; only those files are ever
//!   removed;
//! - is refused when it is not empty and has no manifest (it is someone else's folder), when it
//!   is the data folder or inside it, and when it is a file;
//! - is written whole into a temporary sibling (`.DIR.memcal-new-*`) and renamed in, so that a
//!   crash or a second build running at the same time never leaves a mix of two builds; files
//!   in it that memcal did not write are moved into the new folder.

use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// The manifest's file name, at the top of the site folder.
pub const MANIFEST: &str = ".memcal-manifest";

/// The manifest's first line.
pub const MANIFEST_FORMAT: &str = "memcal-site-manifest/1";

/// The manifest's text for the files `files` (relative, `/`-separated, sorted): the format
/// line, a comment, then one path a line.
pub fn manifest_text(files: &[String]) -> String {
    let mut s = String::with_capacity(64 + files.iter().map(|f| f.len() + 1).sum::<usize>());
    s.push_str(MANIFEST_FORMAT);
    s.push_str("\n# The files `memcal build` wrote in this folder; a build removes only these.\n");
    for f in files {
        s.push_str(f);
        s.push('\n');
    }
    s
}

/// Reads the manifest `dir/.memcal-manifest`: `None` when there is none.
pub fn read_manifest(dir: &Path) -> Result<Option<BTreeSet<String>>> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path, source }),
    };
    let mut lines = text.lines();
    if lines.next() != Some(MANIFEST_FORMAT) {
        return Err(Error::Parse {
            path,
            what: "site manifest",
            message: format!(
                "the first line is not `{MANIFEST_FORMAT}`; memcal did not write it: move the \
                 folder away or give another --out"
            ),
        });
    }
    let mut files = BTreeSet::new();
    for (k, l) in lines.enumerate() {
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if !plain_relative(l) {
            return Err(Error::Parse {
                path,
                what: "site manifest",
                message: format!(
                    "line {}: `{l}` is not a plain relative path inside the folder; memcal \
                     did not write it: move the folder away or give another --out",
                    k + 2
                ),
            });
        }
        files.insert(l.to_string());
    }
    Ok(Some(files))
}

/// A `/`-separated path with only normal components (no `..`, no root, no `.`).
fn plain_relative(rel: &str) -> bool {
    !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Files under `dir`, relative and `/`-separated, sorted (symlinks count as files and are not
/// followed).
pub fn files_under(dir: &Path) -> Result<Vec<String>> {
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
        if !entry.file_type().is_dir() {
            out.push(relative_slash(dir, entry.path()));
        }
    }
    Ok(out)
}

fn relative_slash(dir: &Path, path: &Path) -> String {
    let rel = path
        .strip_prefix(dir)
        .expect("walkdir stays under its root");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// `path` made absolute with every existing part resolved (symlinks, `..`): the nearest
/// existing ancestor canonicalised, the rest appended.
fn resolved(path: &Path) -> Result<PathBuf> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?
            .join(path)
    };
    if let Ok(c) = abs.canonicalize() {
        return Ok(c);
    }
    // Not all of it exists: `.` and `..` taken lexically, then the nearest existing ancestor
    // resolved.
    let mut lexical = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                lexical.pop();
            }
            other => lexical.push(other),
        }
    }
    let mut rest = Vec::new();
    let mut at = lexical.as_path();
    loop {
        match at.canonicalize() {
            Ok(c) => {
                let mut p = c;
                for part in rest.iter().rev() {
                    p.push(part);
                }
                return Ok(p);
            }
            Err(_) => match (at.parent(), at.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    at = parent;
                }
                _ => return Ok(lexical),
            },
        }
    }
}

/// Whether `path` is the folder `dir` or inside it (both resolved).
pub fn is_within(path: &Path, dir: &Path) -> Result<bool> {
    let (p, d) = (resolved(path)?, resolved(dir)?);
    Ok(p.starts_with(&d))
}

/// Refuses an output `out` (a flag named `flag`) that is the data folder `data` or inside it.
fn not_in_data(out: &Path, data: &Path, flag: &str, what: &str) -> Result<()> {
    if is_within(out, data)? {
        let how = if resolved(out)? == resolved(data)? {
            "is the data folder"
        } else {
            "is inside the data folder"
        };
        return Err(Error::Invalid(format!(
            "{}: {flag} {how} {}; memcal never writes {what} into its inputs: give a folder \
             outside it, e.g. {flag} site",
            out.display(),
            data.display()
        )));
    }
    Ok(())
}

/// The site folder a build writes, checked before anything is read or written.
#[derive(Debug)]
pub struct SiteTarget {
    /// The folder as given (for messages).
    shown: PathBuf,
    /// The folder, resolved.
    dir: PathBuf,
    /// The files the folder's manifest lists (empty for a new or empty folder).
    owned: BTreeSet<String>,
    /// Files in the folder that its manifest does not list (kept: moved into the new folder).
    foreign: Vec<String>,
}

/// What [`SiteTarget::commit`] did besides writing the files.
#[derive(Debug, Default)]
pub struct Committed {
    /// Files of the earlier build that this one no longer writes, now gone.
    pub removed: Vec<String>,
    /// Files memcal did not write, kept in the new folder.
    pub kept: Vec<String>,
}

impl SiteTarget {
    /// Checks the site folder `out` against the rules above; `data` is the data folder it may
    /// not be or be inside.
    pub fn prepare(out: &Path, data: Option<&Path>) -> Result<SiteTarget> {
        if let Some(d) = data {
            not_in_data(out, d, "--out", "a site")?;
        }
        let dir = resolved(out)?;
        if dir.parent().is_none() || dir.file_name().is_none() {
            return Err(Error::Invalid(format!(
                "{}: cannot be the site folder (it has no parent folder to build next to); \
                 give a folder such as --out site",
                out.display()
            )));
        }
        let mut target = SiteTarget {
            shown: out.to_path_buf(),
            dir,
            owned: BTreeSet::new(),
            foreign: Vec::new(),
        };
        match std::fs::metadata(&target.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err(Error::Invalid(format!(
                    "{}: cannot be the site folder: a folder on its path is a file ({}); give \
                     an --out whose folders are folders",
                    out.display(),
                    os_text(&e)
                )))
            }
            Err(source) => {
                return Err(Error::Io {
                    path: out.to_path_buf(),
                    source,
                })
            }
            Ok(m) if !m.is_dir() => {
                return Err(Error::Invalid(format!(
                    "{}: is a file, and --out names the site folder; give a folder (new, empty, \
                     or one memcal built)",
                    out.display()
                )))
            }
            Ok(_) => {}
        }
        let present = files_under(&target.dir)?;
        let Some(owned) = read_manifest(&target.dir)? else {
            if present.is_empty() {
                return Ok(target);
            }
            let shown: Vec<&str> = present.iter().take(3).map(String::as_str).collect();
            return Err(Error::Invalid(format!(
                "{}: is not empty ({} files: {}{}) and has no {MANIFEST}, so memcal did not \
                 build it; memcal removes only files it wrote: give a new or empty folder as \
                 --out, or move those files away (a site built by a memcal without manifests: \
                 remove the folder and build again)",
                out.display(),
                present.len(),
                shown.join(", "),
                if present.len() > 3 { ", ..." } else { "" }
            )));
        };
        target.foreign = present
            .into_iter()
            .filter(|f| f != MANIFEST && !owned.contains(f))
            .collect();
        target.owned = owned;
        Ok(target)
    }

    /// A new, empty temporary folder next to the site folder to build into.
    pub fn stage(&self) -> Result<tempfile::TempDir> {
        let parent = self.dir.parent().expect("checked in prepare");
        std::fs::create_dir_all(parent).map_err(|e| self.cannot_write(parent, e))?;
        let name = self.dir.file_name().expect("checked in prepare");
        tempfile::Builder::new()
            .prefix(&format!(".{}.memcal-new-", name.to_string_lossy()))
            .tempdir_in(parent)
            .map_err(|e| self.cannot_write(parent, e))
    }

    fn cannot_write(&self, at: &Path, e: std::io::Error) -> Error {
        Error::Invalid(format!(
            "{}: cannot write the site: {}: {}; give an --out you can write to",
            self.shown.display(),
            at.display(),
            os_text(&e)
        ))
    }

    /// Puts the built folder `staged` (holding `files`, sorted) in place of the site folder:
    /// writes the manifest, moves the files memcal did not write into it, renames the old
    /// folder aside, renames the new one in, and removes from the old one only the files its
    /// manifest lists (and then the folders left empty).
    pub fn commit(self, staged: tempfile::TempDir, files: &[String]) -> Result<Committed> {
        let new = staged.path().to_path_buf();
        for f in &self.foreign {
            if files.binary_search(f).is_ok() {
                return Err(Error::Invalid(format!(
                    "{}: {f} was not written by memcal (its {MANIFEST} does not list it) but \
                     this build writes it; move it away and build again",
                    self.shown.display()
                )));
            }
        }
        let manifest = new.join(MANIFEST);
        std::fs::write(&manifest, manifest_text(files))
            .map_err(|e| self.cannot_write(&manifest, e))?;
        let existed = self.dir.exists();
        let mut old = None;
        if existed {
            let aside = self.aside()?;
            std::fs::rename(&self.dir, aside.path()).map_err(|e| self.race(e))?;
            // The old folder is ours now: it is removed by hand below, never as a whole.
            old = Some(aside.keep());
        }
        let keep_new = staged.keep();
        let mut moved: Vec<&String> = Vec::new();
        let mut failed = None;
        if let Some(old) = &old {
            for f in &self.foreign {
                let (from, to) = (old.join(f), keep_new.join(f));
                let step = to
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::rename(&from, &to));
                if let Err(e) = step {
                    failed = Some(self.cannot_write(&from, e));
                    break;
                }
                moved.push(f);
            }
        }
        if failed.is_none() {
            if let Err(e) = std::fs::rename(&keep_new, &self.dir) {
                failed = Some(Error::Invalid(format!(
                    "{}: cannot rename the new site into place ({e}); another build may have \
                     written it meanwhile",
                    self.shown.display()
                )));
            }
        }
        if let Some(e) = failed {
            return Err(self.roll_back(e, &keep_new, old.as_deref(), &moved));
        }
        let mut done = Committed {
            kept: self.foreign.clone(),
            ..Committed::default()
        };
        if let Some(old) = old {
            for f in self.owned.iter().map(String::as_str).chain([MANIFEST]) {
                match std::fs::remove_file(old.join(f)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(self.cannot_write(&old.join(f), e)),
                }
            }
            remove_empty_dirs(&old);
            done.removed = self
                .owned
                .iter()
                .filter(|f| files.binary_search(f).is_err())
                .cloned()
                .collect();
        }
        Ok(done)
    }

    /// After a failed swap: the files memcal did not write go back into the previous site and
    /// the previous site back into place; the error says where everything is.
    fn roll_back(&self, e: Error, new: &Path, old: Option<&Path>, moved: &[&String]) -> Error {
        let mut back = true;
        if let Some(old) = old {
            for f in moved {
                back &= std::fs::rename(new.join(f), old.join(f)).is_ok();
            }
            back &= !self.dir.exists() && std::fs::rename(old, &self.dir).is_ok();
        }
        let where_old = match old {
            Some(o) if !back => format!("; the previous site is in {}", o.display()),
            Some(_) => "; the previous site is back in place".to_string(),
            None => String::new(),
        };
        Error::Invalid(format!(
            "{e}; the new site is left in {}{where_old}",
            new.display()
        ))
    }

    /// An empty temporary folder next to the site folder that the old site is renamed onto.
    fn aside(&self) -> Result<tempfile::TempDir> {
        let parent = self.dir.parent().expect("checked in prepare");
        let name = self.dir.file_name().expect("checked in prepare");
        tempfile::Builder::new()
            .prefix(&format!(".{}.memcal-old-", name.to_string_lossy()))
            .tempdir_in(parent)
            .map_err(|e| self.cannot_write(parent, e))
    }

    fn race(&self, e: std::io::Error) -> Error {
        Error::Invalid(format!(
            "{}: cannot move the previous site aside ({e}); another build may be running: \
             wait for it and build again",
            self.shown.display()
        ))
    }
}

/// Removes `dir` and the folders under it that hold nothing (deepest first); a folder that
/// still holds something is left as it is.
fn remove_empty_dirs(dir: &Path) {
    let dirs: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .contents_first(true)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_dir())
        .map(|e| e.into_path())
        .collect();
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
}

/// The operating system's words for an io error, without the temporary path `tempfile` adds
/// to its errors (a random name, which would make the message differ from run to run).
fn os_text(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
        None => e.kind().to_string(),
    }
}

/// Writes a file through a temporary sibling and a rename, so that a reader never sees half of
/// it. An output that cannot be written is a bad argument (exit 2), and the message says so.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let cannot = |e: std::io::Error| {
        Error::Invalid(format!(
            "{}: cannot write: {}; choose a path you can write to",
            path.display(),
            os_text(&e)
        ))
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".memcal-write-")
        .tempfile_in(parent)
        .map_err(cannot)?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(cannot)?;
    tmp.persist(path).map_err(|e| cannot(e.error))?;
    Ok(())
}

/// Checks the file `out` that `memcal fit` writes `calibration.json` into: not a folder, and
/// (unless `force`) not in the data folder `data` (its inputs).
pub fn check_calibration_out(out: &Path, data: &Path, force: bool) -> Result<()> {
    if out.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: is a folder, and --out names the calibration file; give a file path such as \
             --out {}",
            out.display(),
            out.join("calibration.json").display()
        )));
    }
    if !force && is_within(out, data)? {
        return Err(Error::Invalid(format!(
            "{}: --out is inside the data folder {}, whose files are memcal's inputs (this \
             would write over or beside factors.json, graphs or rows); write it elsewhere, e.g. \
             --out calibration.json, or pass --force to write there anyway",
            out.display(),
            data.display()
        )));
    }
    Ok(())
}

/// The graphs `memcal graphs` would write over that differ from what it writes (edited by hand,
/// or written by another memcal): their paths, sorted.
pub fn changed_files(files: &[(PathBuf, Vec<u8>)]) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|(p, bytes)| match std::fs::read(p) {
            Ok(have) => &have != bytes,
            Err(_) => p.exists(),
        })
        .map(|(p, _)| p.clone())
        .collect()
}

/// The error for [`changed_files`]: names them and says how to force.
pub fn changed_graphs_error(changed: &[PathBuf]) -> Error {
    let names: Vec<String> = changed
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    Error::Invalid(format!(
        "{}{}: {} what this memcal generates (edited by hand, or made by another version); \
         memcal graphs does not write over a changed graph: move it away, or pass --force to \
         replace it",
        names.join(", "),
        if changed.len() > 5 { ", ..." } else { "" },
        if changed.len() == 1 {
            "differs from".to_string()
        } else {
            format!("{} files differ from", changed.len())
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let files = vec!["a.html".to_string(), "charts/b.svg".to_string()];
        std::fs::write(dir.path().join(MANIFEST), manifest_text(&files)).unwrap();
        let got = read_manifest(dir.path()).unwrap().unwrap();
        assert_eq!(got.into_iter().collect::<Vec<_>>(), files);
    }

    #[test]
    fn a_manifest_naming_a_path_outside_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{MANIFEST_FORMAT}\n../x\n");
        std::fs::write(dir.path().join(MANIFEST), text).unwrap();
        assert!(read_manifest(dir.path()).is_err());
    }

    #[test]
    fn within_resolves_dots() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        assert!(is_within(&data.join("x/../site"), &data).unwrap());
        assert!(is_within(&data, &data).unwrap());
        assert!(!is_within(&d.path().join("site"), &data).unwrap());
    }
}
