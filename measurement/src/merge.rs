//! `merge SHARD_DIRS... --into data/runs/<regime>/`: checks every row the shards wrote (format,
//! graph SHA-256 against `data/graphs`, no duplicate run id, no overwrite of an existing row,
//! every planned run present or reported missing with its shard), then moves them in. Nothing
//! moves unless every check passes; the rows are linked in first (a failure removes the links
//! made so far), and only then removed from the shard folders.

use crate::campaign;
use crate::measure::{Exit, EXIT_USAGE};
use crate::shard::{self, PlannedRun, ShardRecord, SHARD_RECORD};
use memcal::graph::sha256_hex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The format tag of `merged.json` (a shard folder's list of rows moved out of it).
pub const MERGED_FORMAT: &str = "memcal-merged/1";
/// The format tag of `merge --json`'s report.
pub const REPORT_FORMAT: &str = "memcal-merge-report/1";
const MERGED_RECORD: &str = "merged.json";

/// Options of `merge`.
#[derive(Debug, Clone)]
pub struct MergeArgs {
    /// Shard folders, or folders holding `shard-*` folders.
    pub inputs: Vec<PathBuf>,
    pub into: PathBuf,
    /// The plan the shards ran; lets merge name the runs of shards that left no folder.
    pub plan: Option<PathBuf>,
    pub graphs: PathBuf,
    /// Where existing rows are searched for duplicate run ids (default: the `runs` folder
    /// above `into`, or `into`).
    pub runs_root: Option<PathBuf>,
    pub check: bool,
    pub allow_missing: bool,
    pub json: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MergedRecord {
    format: String,
    rows: Vec<MergedRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MergedRow {
    run: String,
    run_id: String,
    /// Path relative to the shard folder.
    row: String,
    to: String,
}

/// One row that moves.
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    pub run: String,
    pub run_id: String,
    pub status: String,
    pub from: String,
    pub to: String,
    #[serde(skip)]
    shard_dir: PathBuf,
    #[serde(skip)]
    row: String,
}

/// A planned run without a row.
#[derive(Debug, Clone, Serialize)]
pub struct Missing {
    pub run: String,
    pub shard: usize,
    pub reason: String,
}

/// What `merge` found (and, unless `--check`, did): `merge --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub plan: String,
    pub plan_sha256: String,
    pub shards: usize,
    pub shards_found: Vec<usize>,
    pub planned: usize,
    pub into: String,
    pub checked_only: bool,
    pub moved: Vec<Move>,
    pub already_merged: Vec<String>,
    pub missing: Vec<Missing>,
    pub errors: Vec<String>,
}

fn is_shard_dir(d: &Path) -> bool {
    d.join(SHARD_RECORD).is_file()
}

/// The shard folders named by the inputs, with their records, checked to come from one plan.
fn find_shards(inputs: &[PathBuf]) -> Result<Vec<(PathBuf, ShardRecord)>, Exit> {
    let mut dirs = Vec::new();
    for input in inputs {
        if is_shard_dir(input) {
            dirs.push(input.clone());
            continue;
        }
        let entries = std::fs::read_dir(input)
            .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", input.display())))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_shard_dir(p))
            .collect();
        if found.is_empty() {
            return Err(Exit::usage(format!(
                "{}: not a shard folder (no {SHARD_RECORD}) and holds none; pass the folder that \
                 `campaign --shard` wrote (its --out) or its shard-*-of-* folders",
                input.display()
            )));
        }
        found.sort();
        dirs.extend(found);
    }
    let mut shards: Vec<(PathBuf, ShardRecord)> = Vec::new();
    for d in dirs {
        let r = ShardRecord::load(&d)?;
        if let Some((first, f)) = shards.first() {
            if (f.plan_sha256.as_str(), f.shards, f.plan_runs)
                != (r.plan_sha256.as_str(), r.shards, r.plan_runs)
            {
                return Err(Exit::usage(format!(
                    "{} and {} come from different campaigns (plan SHA-256 {} with {} shards, \
                     and {} with {} shards): merge one campaign at a time",
                    first.join(SHARD_RECORD).display(),
                    d.join(SHARD_RECORD).display(),
                    f.plan_sha256,
                    f.shards,
                    r.plan_sha256,
                    r.shards
                )));
            }
        }
        if let Some((other, _)) = shards.iter().find(|(_, s)| s.shard == r.shard) {
            if other.canonicalize().ok() == d.canonicalize().ok() {
                continue;
            }
            return Err(Exit::usage(format!(
                "{} and {} are both shard {} of {}: merge one of them",
                other.display(),
                d.display(),
                r.shard,
                r.shards
            )));
        }
        shards.push((d, r));
    }
    shards.sort_by_key(|(_, r)| r.shard);
    Ok(shards)
}

/// Every planned run with its shard: from the plan when given, else from the records.
fn expected_runs(
    a: &MergeArgs,
    shards: &[(PathBuf, ShardRecord)],
) -> Result<(Vec<(usize, PlannedRun)>, String), Exit> {
    let first = &shards[0].1;
    let Some(plan) = &a.plan else {
        let mut runs: Vec<(usize, PlannedRun)> = shards
            .iter()
            .flat_map(|(_, r)| r.runs.iter().map(|p| (r.shard, p.clone())))
            .collect();
        runs.sort_by_key(|(_, p)| p.index);
        return Ok((runs, first.plan.clone()));
    };
    let bytes = std::fs::read(plan)
        .map_err(|e| Exit::usage(format!("{}: cannot read: {e}", plan.display())))?;
    let sha = sha256_hex(&bytes);
    if sha != first.plan_sha256 {
        return Err(Exit::usage(format!(
            "--plan {}: SHA-256 {sha} is not the plan the shards ran ({}, recorded in {}); the \
             plan changed after the campaign: pass the plan they ran",
            plan.display(),
            first.plan_sha256,
            shards[0].0.join(SHARD_RECORD).display()
        )));
    }
    let jobs = campaign::load_plan(plan, Path::new(""))?;
    let runs = shard::planned(&jobs, Path::new(""))
        .into_iter()
        .map(|p| (shard::shard_of(p.index, first.shards), p))
        .collect();
    Ok((runs, plan.display().to_string()))
}

/// Run ids of the rows already under `root` (row files and bundles), each with its file.
fn existing_run_ids(root: &Path) -> Result<HashMap<String, String>, Exit> {
    let mut ids = HashMap::new();
    if !root.is_dir() {
        return Ok(ids);
    }
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.map_err(|e| Exit::usage(format!("{}: {e}", root.display())))?;
        let p = entry.path();
        let ext = p.extension().and_then(|x| x.to_str());
        if !entry.file_type().is_file() || !matches!(ext, Some("json" | "jsonl")) {
            continue;
        }
        let bytes = std::fs::read(p).map_err(|e| Exit::usage(format!("{}: {e}", p.display())))?;
        let bad = |e: memcal::Error| Exit::usage(format!("existing row: {e}"));
        if ext == Some("json") {
            let row = memcal::engine::parse_row(&bytes, p).map_err(bad)?;
            ids.insert(row.run_id, p.display().to_string());
        } else {
            for (k, line) in bytes.split(|b| *b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let at = PathBuf::from(format!("{}:{}", p.display(), k + 1));
                let row = memcal::engine::parse_row(line, &at).map_err(bad)?;
                ids.insert(row.run_id, at.display().to_string());
            }
        }
    }
    Ok(ids)
}

fn runs_root(a: &MergeArgs) -> PathBuf {
    if let Some(r) = &a.runs_root {
        return r.clone();
    }
    a.into
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "runs"))
        .unwrap_or(&a.into)
        .to_path_buf()
}

/// Why a planned run has no row, from its shard's record.
fn missing_reason(r: &ShardRecord, run: &str) -> String {
    if let Some((at, o)) = r.last_outcome(run) {
        let m = o.message.as_deref().unwrap_or("");
        return format!(
            "{} on {} (attempt started {}): {m}",
            o.outcome, at.host, at.started
        );
    }
    match r.attempts.last() {
        Some(at) => format!(
            "the attempt started {} on {} did not finish (killed, time limit, or still running)",
            at.started, at.host
        ),
        None => "never started".into(),
    }
}

fn graph_sha(
    cache: &mut BTreeMap<String, Result<String, String>>,
    graphs: &Path,
    name: &str,
) -> Result<String, String> {
    cache
        .entry(name.to_string())
        .or_insert_with(|| {
            let p = graphs.join(format!("{name}.json"));
            std::fs::read(&p)
                .map(|b| sha256_hex(&b))
                .map_err(|e| format!("{}: {e}", p.display()))
        })
        .clone()
}

/// Checks everything; moves nothing.
fn plan_merge(a: &MergeArgs) -> Result<Report, Exit> {
    let shards = find_shards(&a.inputs)?;
    let (runs, plan) = expected_runs(a, &shards)?;
    let first = &shards[0].1;
    let by_index: BTreeMap<usize, &(PathBuf, ShardRecord)> =
        shards.iter().map(|s| (s.1.shard, s)).collect();
    let existing = existing_run_ids(&runs_root(a))?;
    let mut report = Report {
        format: REPORT_FORMAT,
        plan,
        plan_sha256: first.plan_sha256.clone(),
        shards: first.shards,
        shards_found: by_index.keys().copied().collect(),
        planned: runs.len(),
        into: a.into.display().to_string(),
        checked_only: a.check,
        moved: Vec::new(),
        already_merged: Vec::new(),
        missing: Vec::new(),
        errors: Vec::new(),
    };
    for k in (0..first.shards).filter(|k| !by_index.contains_key(k)) {
        if a.plan.is_none() {
            report.missing.push(Missing {
                run: "(unknown runs: pass --plan to name them)".into(),
                shard: k,
                reason: format!("shard {k} of {}: no folder among the inputs", first.shards),
            });
        }
    }
    let mut graph_cache = BTreeMap::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for (s, p) in &runs {
        let Some((dir, rec)) = by_index.get(s).map(|x| (&x.0, &x.1)) else {
            report.missing.push(Missing {
                run: p.run.clone(),
                shard: *s,
                reason: format!("shard {s} of {}: no folder among the inputs", first.shards),
            });
            continue;
        };
        let src = dir.join(&p.row);
        let dest = a.into.join(&p.row);
        if !src.exists() {
            let merged = read_merged(dir);
            if merged.rows.iter().any(|m| m.row == p.row) && dest.exists() {
                report.already_merged.push(p.run.clone());
            } else {
                report.missing.push(Missing {
                    run: p.run.clone(),
                    shard: *s,
                    reason: missing_reason(rec, &p.run),
                });
            }
            continue;
        }
        let bytes = match std::fs::read(&src) {
            Ok(b) => b,
            Err(e) => {
                report
                    .errors
                    .push(format!("{}: cannot read: {e}", src.display()));
                continue;
            }
        };
        let row = match memcal::engine::parse_row(&bytes, &src) {
            Ok(r) => r,
            Err(e) => {
                report.errors.push(e.to_string());
                continue;
            }
        };
        if row.batch != p.batch {
            report.errors.push(format!(
                "{}: field `batch`: {} but the plan's run `{}` has batch {}",
                src.display(),
                row.batch,
                p.run,
                p.batch
            ));
        }
        match graph_sha(&mut graph_cache, &a.graphs, &row.graph.name) {
            Err(e) => report.errors.push(format!(
                "{}: field `graph.name`: graph `{}` not found ({e})",
                src.display(),
                row.graph.name
            )),
            Ok(sha) if sha != row.graph.sha256 => report.errors.push(format!(
                "{}: field `graph.sha256`: {} but {}/{}.json has {sha} (the graph changed after \
                 the run: re-measure it)",
                src.display(),
                row.graph.sha256,
                a.graphs.display(),
                row.graph.name
            )),
            Ok(_) => {}
        }
        if dest.exists() {
            report.errors.push(format!(
                "conflict: {} would overwrite the existing row {}",
                src.display(),
                dest.display()
            ));
        }
        let from = src.display().to_string();
        if let Some(other) = seen.get(&row.run_id).or_else(|| existing.get(&row.run_id)) {
            report.errors.push(format!(
                "duplicate run id `{}`: {from} and {other}",
                row.run_id
            ));
        }
        seen.insert(row.run_id.clone(), from.clone());
        report.moved.push(Move {
            run: p.run.clone(),
            run_id: row.run_id,
            status: serde_json::to_value(row.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            from,
            to: dest.display().to_string(),
            shard_dir: dir.clone(),
            row: p.row.clone(),
        });
    }
    stray_files(&shards, &runs, &mut report.errors);
    Ok(report)
}

/// Row files in a shard folder that no planned run of that shard names.
fn stray_files(
    shards: &[(PathBuf, ShardRecord)],
    runs: &[(usize, PlannedRun)],
    errors: &mut Vec<String>,
) {
    for (dir, rec) in shards {
        let planned: Vec<PathBuf> = runs
            .iter()
            .filter(|(s, _)| *s == rec.shard)
            .map(|(_, p)| dir.join(&p.row))
            .collect();
        for entry in walkdir::WalkDir::new(dir)
            .min_depth(2)
            .sort_by_file_name()
            .into_iter()
            .flatten()
        {
            let p = entry.path();
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if entry.file_type().is_file() && !hidden && !planned.iter().any(|q| q == p) {
                errors.push(format!(
                    "{}: not a planned run of shard {} of {}; move or delete it",
                    p.display(),
                    rec.shard,
                    rec.shards
                ));
            }
        }
    }
}

fn read_merged(dir: &Path) -> MergedRecord {
    std::fs::read_to_string(dir.join(MERGED_RECORD))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Puts `src`'s bytes at `dest` without ever replacing a file: a hard link, or (across file
/// systems) a copy to a temporary sibling linked to the final name.
fn link_or_copy(src: &Path, dest: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(src, dest) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("row");
            let tmp = dest.with_file_name(format!(".{name}.merge.{}.tmp", std::process::id()));
            let copied = std::fs::copy(src, &tmp)
                .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|_| std::fs::hard_link(&tmp, dest));
            let _ = std::fs::remove_file(&tmp);
            copied
        }
        other => other,
    }
}

/// Links every row in; on any failure removes the links made so far and says why.
fn move_rows(report: &Report) -> Result<(), Exit> {
    let mut linked: Vec<&Path> = Vec::new();
    for m in &report.moved {
        let dest = Path::new(&m.to);
        let res = dest
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| link_or_copy(Path::new(&m.from), dest));
        if let Err(e) = res {
            for d in &linked {
                let _ = std::fs::remove_file(d);
            }
            return Err(Exit::usage(format!(
                "{} -> {}: {e}; nothing was moved",
                m.from, m.to
            )));
        }
        linked.push(dest);
    }
    let mut by_shard: BTreeMap<&Path, Vec<&Move>> = BTreeMap::new();
    for m in &report.moved {
        by_shard.entry(m.shard_dir.as_path()).or_default().push(m);
    }
    for (dir, moves) in by_shard {
        let mut rec = read_merged(dir);
        rec.format = MERGED_FORMAT.into();
        rec.rows.extend(moves.iter().map(|m| MergedRow {
            run: m.run.clone(),
            run_id: m.run_id.clone(),
            row: m.row.clone(),
            to: m.to.clone(),
        }));
        let mut text = serde_json::to_string_pretty(&rec).expect("serialises");
        text.push('\n');
        shard::write_replace(&dir.join(MERGED_RECORD), &text)?;
        for m in moves {
            std::fs::remove_file(&m.from)
                .map_err(|e| Exit::usage(format!("{}: moved, but cannot remove: {e}", m.from)))?;
        }
    }
    Ok(())
}

fn print_report(r: &Report) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &r.moved {
        *counts.entry(m.status.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    eprintln!(
        "merge: plan {} ({} runs in {} shards; shards found: {} of {})",
        r.plan,
        r.planned,
        r.shards,
        r.shards_found.len(),
        r.shards
    );
    let verb = if r.checked_only || !r.errors.is_empty() {
        "would move"
    } else {
        "moved"
    };
    eprintln!(
        "  {verb} {} rows into {} ({}); {} already merged; {} missing; {} errors",
        r.moved.len(),
        r.into,
        if counts.is_empty() {
            "none".into()
        } else {
            counts.join(", ")
        },
        r.already_merged.len(),
        r.missing.len(),
        r.errors.len()
    );
    for m in &r.missing {
        eprintln!(
            "  missing: {} (shard {} of {}): {}",
            m.run, m.shard, r.shards, m.reason
        );
    }
    for e in &r.errors {
        eprintln!("  error: {e}");
    }
}

/// The `merge` command. Exit status: 0 when every planned run is merged (or, with `--check`,
/// would be), 1 when runs are missing (nothing moved unless `--allow-missing`), 2 when a row or
/// an input is bad (nothing moved).
pub fn merge_command(a: &MergeArgs) -> Result<i32, Exit> {
    let report = plan_merge(a)?;
    let missing_blocks = !report.missing.is_empty() && !a.allow_missing;
    let code = if !report.errors.is_empty() {
        EXIT_USAGE
    } else if missing_blocks {
        1
    } else {
        0
    };
    if code == 0 && !a.check {
        move_rows(&report)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("the report serialises")
        );
    }
    print_report(&report);
    if missing_blocks && report.errors.is_empty() {
        eprintln!(
            "merge: {} planned runs have no row: nothing moved. Rerun their shards (a retried \
             shard resumes), or pass --allow-missing to merge the rest",
            report.missing.len()
        );
    }
    Ok(code)
}
