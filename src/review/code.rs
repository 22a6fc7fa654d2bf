//! The code side of a review: which files of code differ between two states (with the
//! functions their changes are in), and the base ref's own memcal, built once per commit into
//! a cache and reused. Only reads the repository (`git diff`, `git archive`); writes only
//! under the cache folder.

use super::git;
use super::state::ReviewState;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The paths whose change changes what the engine computes: the code and its dependencies.
pub const CODE_PATHS: [&str; 4] = ["src", "Cargo.toml", "Cargo.lock", "build.rs"];

/// The cargo profile base builds use unless `MEMCAL_BASE_PROFILE` names another
/// (`dev`: quicker to build, slower to run; the tests use it).
pub const DEFAULT_PROFILE: &str = "release";

/// A file of code that differs, with the functions (git's hunk headers) its changes are in.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChangedFile {
    pub path: String,
    /// Where in the file each change is (`fn accelerate(...)`, `impl Rule for Linear`), in
    /// order, each once; empty for a new, deleted or binary file.
    pub functions: Vec<String>,
}

/// The files of [`CODE_PATHS`] that differ between commit `base` and `head` (a commit, or
/// `None`: the working tree, uncommitted and untracked files included).
pub fn changed_code(repo: &Path, base: &str, head: Option<&str>) -> Result<Vec<ChangedFile>> {
    let range: Vec<&str> = std::iter::once(base).chain(head).collect();
    let mut args = vec!["diff", "--name-only", "--no-renames"];
    args.extend(&range);
    args.push("--");
    args.extend(CODE_PATHS);
    let names = String::from_utf8_lossy(&git(repo, &args)?).to_string();
    let mut paths: Vec<String> = names.lines().map(str::to_string).collect();
    if head.is_none() {
        let mut args = vec!["ls-files", "--others", "--exclude-standard", "--"];
        args.extend(CODE_PATHS);
        let untracked = git(repo, &args)?;
        paths.extend(
            String::from_utf8_lossy(&untracked)
                .lines()
                .map(str::to_string),
        );
    }
    paths.sort();
    paths.dedup();
    // Git's own Rust hunk headers (`diff=rust`), without touching the repository's attributes.
    let attrs = tempfile::NamedTempFile::new().map_err(|source| Error::Io {
        path: std::env::temp_dir(),
        source,
    })?;
    std::fs::write(attrs.path(), "*.rs diff=rust\n").map_err(|source| Error::Io {
        path: attrs.path().to_path_buf(),
        source,
    })?;
    let attr_arg = format!("core.attributesFile={}", attrs.path().display());
    let mut out = Vec::new();
    for path in paths {
        let mut args = vec!["-c", &attr_arg, "diff", "-U0", "--no-color"];
        args.extend(&range);
        args.extend(["--", path.as_str()]);
        let text = String::from_utf8_lossy(&git(repo, &args)?).to_string();
        let mut functions: Vec<String> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with("@@")) {
            let context = line.splitn(3, "@@").nth(2).unwrap_or("").trim();
            if !context.is_empty() && !functions.iter().any(|f| f == context) {
                functions.push(context.to_string());
            }
        }
        out.push(ChangedFile { path, functions });
    }
    Ok(out)
}

/// The memcal of one commit, built (or found in the cache).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BaseBuild {
    pub commit: String,
    pub binary: PathBuf,
    /// The source it was built from (the commit's files, `data/` and `site/` left out).
    #[serde(skip)]
    pub source: PathBuf,
    /// Found in the cache: not built by this run.
    pub cached: bool,
    /// The cargo profile it was built with.
    pub profile: String,
    /// Seconds this run spent building it (0 when cached).
    pub build_seconds: f64,
}

/// The cache folder of base builds when `--base-cache` is not given.
pub fn default_cache(repo: &Path) -> PathBuf {
    repo.join("target").join("memcal-base")
}

/// Builds memcal as it is at `commit` into `cache` (`src/<commit>`: its files; `target/`:
/// cargo's, shared by every commit so dependencies build once; `bin/<commit>-<profile>/memcal`:
/// the binary), or finds it there. `say` gets one line of progress before a build.
pub fn build_at(
    repo: &Path,
    commit: &str,
    cache: &Path,
    say: &mut dyn FnMut(&str),
) -> std::result::Result<BaseBuild, String> {
    let profile = std::env::var("MEMCAL_BASE_PROFILE").unwrap_or(DEFAULT_PROFILE.to_string());
    if !matches!(profile.as_str(), "release" | "dev") {
        return Err(format!(
            "MEMCAL_BASE_PROFILE is `{profile}`; use `release` or `dev`"
        ));
    }
    let source = cache.join("src").join(commit);
    let bin_dir = cache.join("bin").join(format!("{commit}-{profile}"));
    let binary = bin_dir.join("memcal");
    if binary.is_file() && source.is_dir() {
        return Ok(BaseBuild {
            commit: commit.to_string(),
            binary,
            source,
            cached: true,
            profile,
            build_seconds: 0.0,
        });
    }
    let started = Instant::now();
    say(&format!(
        "memcal diff: building memcal at {} ({profile} profile) into {} (once per commit; a few minutes the first time)",
        &commit[..12.min(commit.len())],
        cache.display()
    ));
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    if source.is_dir() {
        std::fs::remove_dir_all(&source).map_err(|e| fail("cannot clear the old source", &e))?;
    }
    std::fs::create_dir_all(&source).map_err(|e| fail("cannot create the cache", &e))?;
    let tar = git(
        repo,
        &[
            "archive",
            "--format=tar",
            commit,
            "--",
            ".",
            ":(exclude)data",
            ":(exclude)site",
        ],
    )
    .map_err(|e| e.to_string())?;
    super::extract_tar(&tar, &source).map_err(|e| e.to_string())?;
    // The cargo that runs this memcal, if any (`CARGO`), else the one on the PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&source)
        .env("CARGO_TARGET_DIR", cache.join("target"))
        .args([
            "build",
            "--quiet",
            "--profile",
            &profile,
            "-p",
            "memcal",
            "--bin",
            "memcal",
        ])
        .output()
        .map_err(|e| fail("cannot run cargo", &e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        return Err(format!(
            "cargo build failed: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let dir = if profile == "dev" { "debug" } else { "release" };
    let built = cache.join("target").join(dir).join("memcal");
    std::fs::create_dir_all(&bin_dir).map_err(|e| fail("cannot create the cache", &e))?;
    let partial = bin_dir.join("memcal.partial");
    std::fs::copy(&built, &partial).map_err(|e| fail("cannot copy the binary", &e))?;
    std::fs::rename(&partial, &binary).map_err(|e| fail("cannot place the binary", &e))?;
    Ok(BaseBuild {
        commit: commit.to_string(),
        binary,
        source,
        cached: false,
        profile,
        build_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Runs a built memcal's `review-state` on `data_dir`, the OpInfo samples taken from
/// `samples_repo`; the error says why its state cannot be had.
pub fn state_of(
    build: &BaseBuild,
    data_dir: &Path,
    samples_repo: &Path,
) -> std::result::Result<ReviewState, String> {
    let out = Command::new(&build.binary)
        .arg("review-state")
        .arg("--data")
        .arg(data_dir)
        .arg("--repo")
        .arg(samples_repo)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", build.binary.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("unrecognized subcommand") {
            return Err(
                "its memcal predates `memcal review-state` (code review), so it cannot report its own numbers".into(),
            );
        }
        return Err(format!(
            "its memcal failed on its data (exit {}): {}",
            out.status.code().unwrap_or(-1),
            err.trim()
        ));
    }
    ReviewState::parse(&out.stdout)
}
