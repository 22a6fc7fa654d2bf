//! The two sides of `memcal diff`, each scored by its own code: a git ref's data by that ref's
//! memcal (built once per commit, [`super::code`]), the working tree's data or a folder by
//! the running memcal. When no file of code differs, nothing is built and the running memcal
//! scores both; when the base cannot be built or cannot report, both are scored by the
//! running memcal and the report says so first.

use super::code::{self, BaseBuild, ChangedFile};
use super::state::ReviewState;
use super::{git, DataState};
use crate::engine;
use crate::error::Result;
use crate::factors::{FactorHistory, FactorsFile};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One side: its data, and the numbers its code computed on it.
pub struct Side {
    pub label: String,
    pub factors: FactorsFile,
    pub history: FactorHistory,
    pub state: ReviewState,
    _data: DataState,
}

/// Which code scored each side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodeComparison {
    /// `code-and-data`: base code on base data against head code on head data (also when no
    /// code differs: then one memcal is both); `data-only`: the running memcal scored both.
    pub compared: &'static str,
    /// Why only the data was compared (absent when code and data were).
    pub reason: Option<String>,
    /// The files of code that differ between the sides (`src/`, `Cargo.toml`, `Cargo.lock`).
    pub changed_files: Vec<ChangedFile>,
    /// The base ref's memcal, where one was built or found in the cache.
    pub base_build: Option<BaseBuild>,
    /// The head ref's memcal, where head is a ref whose code is not the working tree's.
    pub head_build: Option<BaseBuild>,
    /// Methods one side has and the other does not (compared where both have them).
    pub methods_in_one_side: Vec<String>,
}

/// What `memcal diff` compares.
pub struct Request<'a> {
    pub repo: &'a Path,
    pub base: &'a str,
    /// `None`: the working tree (its `data/` and this memcal's code).
    pub head: Option<&'a str>,
    /// Where base builds are cached.
    pub cache: PathBuf,
}

/// Where a side's data and code come from.
enum Origin {
    /// A commit of the repository.
    Commit(String),
    /// The working tree's `data/` and code.
    WorkingTree,
    /// A folder: its data, this memcal's code.
    Folder,
}

fn origin(spec: Option<&str>, repo: &Path) -> Result<(DataState, Origin)> {
    let Some(spec) = spec else {
        let data = DataState {
            label: "working tree".into(),
            data_dir: repo.join("data"),
            _tmp: None,
        };
        return Ok((data, Origin::WorkingTree));
    };
    let data = DataState::open(spec, repo)?;
    if data._tmp.is_none() {
        return Ok((data, Origin::Folder));
    }
    let commit = String::from_utf8_lossy(&git(
        repo,
        &["rev-parse", "--verify", &format!("{spec}^{{commit}}")],
    )?)
    .trim()
    .to_string();
    Ok((data, Origin::Commit(commit)))
}

/// The side scored by the running memcal (files under `runs/` it skips are said, as `fit` says
/// them).
fn here(data: DataState, repo: &Path, say: &mut dyn FnMut(&str)) -> Result<Side> {
    let (ds, skipped) = engine::load_reporting(&data.data_dir)?;
    let warning = crate::cli_io::skipped_warning(&data.data_dir, &skipped);
    if !warning.is_empty() {
        say(warning.trim_end());
    }
    let cal = engine::calibrate(&ds);
    let state = ReviewState::of(&cal, ds.factors.small_runs.threshold_bytes, Some(repo));
    let history = FactorHistory::load_or_empty(&data.data_dir.join("factors-history.json"))?;
    Ok(Side {
        label: data.label.clone(),
        factors: ds.factors,
        history,
        state,
        _data: data,
    })
}

/// The side scored by a built memcal (its factors read by this one).
fn there(data: DataState, state: ReviewState) -> Result<Side> {
    let factors = FactorsFile::load(&data.data_dir.join("factors.json"))?;
    let history = FactorHistory::load_or_empty(&data.data_dir.join("factors-history.json"))?;
    Ok(Side {
        label: data.label.clone(),
        factors,
        history,
        state,
        _data: data,
    })
}

/// The cache folder, made if missing: a folder that cannot be made or written is a bad argument
/// (exit 2), not a base that cannot build.
fn cache_ready(cache: &Path) -> Result<()> {
    let probe = cache.join(".memcal-write-probe");
    std::fs::create_dir_all(cache)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            crate::error::Error::Invalid(format!(
                "--base-cache {}: cannot write there ({e}); pass a writable folder for the base builds",
                cache.display()
            ))
        })
}

/// The memcal of `commit` and its state on `data`, or why not.
fn built_state(
    req: &Request,
    commit: &str,
    data: &DataState,
    say: &mut dyn FnMut(&str),
) -> std::result::Result<(BaseBuild, ReviewState), String> {
    let build = code::build_at(req.repo, commit, &req.cache, say)?;
    say(&format!(
        "memcal diff: scoring {} with its own memcal",
        data.label
    ));
    let state = code::state_of(&build, &data.data_dir, req.repo)?;
    Ok((build, state))
}

/// A ref's side scored by the ref's own memcal; where that cannot be had, by this memcal, with
/// why.
fn own_code(
    req: &Request,
    commit: &str,
    data: DataState,
    say: &mut dyn FnMut(&str),
) -> Result<(Side, Option<BaseBuild>, Option<String>)> {
    cache_ready(&req.cache)?;
    Ok(match built_state(req, commit, &data, say) {
        Ok((build, state)) => (there(data, state)?, Some(build), None),
        Err(why) => (here(data, req.repo, say)?, None, Some(why)),
    })
}

/// Opens both sides. `say` gets a line of progress before each long step.
pub fn open_sides(
    req: &Request,
    say: &mut dyn FnMut(&str),
) -> Result<(Side, Side, CodeComparison)> {
    let (head_data, head_origin) = origin(req.head, req.repo)?;
    let (base_data, base_origin) = origin(Some(req.base), req.repo)?;
    let mut cmp = CodeComparison {
        compared: "code-and-data",
        reason: None,
        changed_files: Vec::new(),
        base_build: None,
        head_build: None,
        methods_in_one_side: Vec::new(),
    };
    // Head: a commit whose code differs from the working tree's is built; anything else is
    // this memcal's.
    let head_commit = match &head_origin {
        Origin::Commit(c) => Some(c.clone()),
        _ => None,
    };
    say(&format!("memcal diff: scoring {}", head_data.label));
    let head = match &head_commit {
        Some(c) if !code::changed_code(req.repo, c, None)?.is_empty() => {
            let (side, build, why) = own_code(req, c, head_data, say)?;
            cmp.head_build = build;
            if let Some(why) = why {
                cmp.compared = "data-only";
                cmp.reason = Some(format!(
                    "head's code could not score its data ({why}); this memcal scored both sides"
                ));
            }
            side
        }
        _ => here(head_data, req.repo, say)?,
    };
    let base = match base_origin {
        Origin::Commit(c) => {
            cmp.changed_files = code::changed_code(req.repo, &c, head_commit.as_deref())?;
            // This memcal is the base's code when the base's code is the working tree's; head's
            // build is, when the base's code is head's.
            let base_is_here = code::changed_code(req.repo, &c, None)?.is_empty();
            let head_build = cmp.head_build.clone();
            let (side, why) = if cmp.compared == "data-only" || base_is_here {
                say(&format!("memcal diff: scoring {}", base_data.label));
                (here(base_data, req.repo, say)?, None)
            } else if let (true, Some(build)) = (cmp.changed_files.is_empty(), head_build) {
                say(&format!(
                    "memcal diff: scoring {} with head's memcal (the same code)",
                    base_data.label
                ));
                match code::state_of(&build, &base_data.data_dir, req.repo) {
                    Ok(state) => (there(base_data, state)?, None),
                    Err(why) => (here(base_data, req.repo, say)?, Some(why)),
                }
            } else {
                let (side, build, why) = own_code(req, &c, base_data, say)?;
                cmp.base_build = build;
                (side, why)
            };
            if let Some(why) = why {
                cmp.compared = "data-only";
                cmp.reason = Some(format!(
                    "the base's code could not score its data ({why}); this memcal scored both sides, so the change of code is not measured"
                ));
            }
            side
        }
        Origin::WorkingTree | Origin::Folder => {
            cmp.compared = "data-only";
            cmp.reason =
                Some("the base is a folder, not a git ref: this memcal scored both sides".into());
            here(base_data, req.repo, say)?
        }
    };
    let mut one_side: Vec<String> = base
        .state
        .unknown_methods()
        .into_iter()
        .chain(head.state.unknown_methods())
        .collect();
    one_side.sort();
    one_side.dedup();
    cmp.methods_in_one_side = one_side;
    Ok((base, head, cmp))
}
