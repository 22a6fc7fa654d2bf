//! `load`: reads `data/factors.json`, `data/graphs/*.json` and every row under `data/runs/`,
//! validates each row (errors name the file and the field) and joins it to its graph.

use super::time::parse_rfc3339;
use super::{Dataset, GraphInfo, Row};
use crate::baselines;
use crate::error::{Error, Result};
use crate::factors::FactorsFile;
use crate::features::{self, Features, Precision};
use crate::graph::{self, Graph};
use crate::run::{RunRow, RunStatus, RUN_FORMAT};
use serde::Deserialize as _;
use sha2::Digest as _;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The marker of rows measured after the factors were fixed.
pub const AFTER_FIT: &str = "after-fit";

/// One line of [`rows_sha256`]: `"{run_id}\t{file_sha256 in hex}\n"`.
fn hash_line(h: &mut sha2::Sha256, id: &str, sha_hex: &[u8]) {
    h.update(id.as_bytes());
    h.update(b"\t");
    h.update(sha_hex);
    h.update(b"\n");
}

/// SHA-256 over the fitted rows: the hex digest of the lines `"{run_id}\t{file_sha256}\n"`,
/// one per row, sorted by run id (then by file hash).
pub fn rows_sha256(rows: &[(&str, &str)]) -> String {
    let mut v = rows.to_vec();
    v.sort();
    let mut h = sha2::Sha256::new();
    for (id, sha) in v {
        hash_line(&mut h, id, sha.as_bytes());
    }
    super::Digest(h.finalize().into()).hex()
}

/// [`rows_sha256`] of rows already in its order (by run id, then file hash), hashed as they
/// come.
pub fn rows_sha256_sorted<'a>(rows: impl Iterator<Item = (&'a str, super::Digest)>) -> String {
    let mut h = sha2::Sha256::new();
    for (id, sha) in rows {
        hash_line(&mut h, id, &sha.hex_bytes());
    }
    super::Digest(h.finalize().into()).hex()
}

fn field(path: &Path, field: &str, message: impl Into<String>) -> Error {
    Error::Field {
        path: path.to_path_buf(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Parses and validates one row file's bytes; `path` names it in errors.
pub fn parse_row(bytes: &[u8], path: &Path) -> Result<RunRow> {
    let text = std::str::from_utf8(bytes).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        what: "run row",
        message: format!("not UTF-8 text ({e})"),
    })?;
    // Plain serde first; only a row that fails is parsed again to find the failing field's path
    // (the same deserializer, so the same rows pass and the same message is reported).
    let row: RunRow = match RunRow::deserialize(&mut serde_json::Deserializer::from_str(text)) {
        Ok(row) => row,
        Err(_) => {
            let de = &mut serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                graph::json_error(path, "run row JSON", "docs/run-format.md", text, e)
            })?
        }
    };
    if row.format != RUN_FORMAT {
        return Err(field(
            path,
            "format",
            format!("expected \"{RUN_FORMAT}\", found \"{}\"", row.format),
        ));
    }
    if row.run_id.trim().is_empty() {
        return Err(field(path, "run_id", "must not be empty"));
    }
    if row.graph.name.trim().is_empty() {
        return Err(field(path, "graph.name", "must not be empty"));
    }
    if row.graph.sha256.len() != 64 || !row.graph.sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(field(path, "graph.sha256", "must be 64 hex digits"));
    }
    if row.batch == 0 {
        return Err(field(path, "batch", "must be a positive integer"));
    }
    row.precision
        .parse::<Precision>()
        .map_err(|m| field(path, "precision", m))?;
    if row.regime.trim().is_empty() {
        return Err(field(path, "regime", "must not be empty"));
    }
    if let Some(m) = &row.marker {
        if m != AFTER_FIT {
            return Err(field(
                path,
                "marker",
                format!("the only marker is \"{AFTER_FIT}\", found \"{m}\""),
            ));
        }
    }
    parse_rfc3339(&row.timestamp).map_err(|m| field(path, "timestamp", m))?;
    let cap = row
        .device
        .emulated_capacity_bytes
        .unwrap_or(row.device.capacity_bytes);
    if cap == 0 {
        return Err(field(
            path,
            "device.capacity_bytes",
            "the capacity the run ran under must be positive",
        ));
    }
    match row.status {
        RunStatus::Completed => {
            let Some(peak) = &row.peak else {
                return Err(field(path, "peak", "a completed run must record its peak"));
            };
            if peak.allocated_bytes == 0 {
                return Err(field(
                    path,
                    "peak.allocated_bytes",
                    "a completed run's peak must be positive",
                ));
            }
            if row.oom.is_some() {
                return Err(field(
                    path,
                    "oom",
                    "a completed run has no out-of-memory failure",
                ));
            }
            if row.error.is_some() {
                return Err(field(path, "error", "a completed run has no error"));
            }
        }
        RunStatus::Oom => {
            if row.peak.is_some() {
                return Err(field(
                    path,
                    "peak",
                    "an out-of-memory run cannot claim a peak (it never finished)",
                ));
            }
            if row.oom.is_none() {
                return Err(field(
                    path,
                    "oom",
                    "an out-of-memory run must say where it ran out",
                ));
            }
        }
        RunStatus::Error => {
            if row.peak.is_some() {
                return Err(field(path, "peak", "a failed run cannot claim a peak"));
            }
            if row.error.is_none() {
                return Err(field(path, "error", "a failed run must say what failed"));
            }
        }
    }
    Ok(row)
}

/// Features, accelerate's and the textbook's bytes per (graph, batch, precision).
type FeatureCache = HashMap<(String, u64, Precision), (Features, u64, Option<u64>, Option<u64>)>;

/// Turns a parsed row into an engine row, joined to its graph.
fn join(
    row: RunRow,
    rel: String,
    file_sha256: super::Digest,
    path: &Path,
    graphs: &BTreeMap<String, (Graph, GraphInfo)>,
    cache: &mut FeatureCache,
    names: &mut super::Interner,
) -> Result<Row> {
    let Some((g, info)) = graphs.get(&row.graph.name) else {
        return Err(field(
            path,
            "graph.name",
            format!(
                "names graph `{}`, which is not in the data folder's graphs/ (no graphs/{}.json); add the graph or fix the name",
                row.graph.name, row.graph.name
            ),
        ));
    };
    let precision: Precision = row.precision.parse().expect("validated in parse_row");
    let key = (row.graph.name.clone(), row.batch, precision);
    let (features, accelerate_bytes, textbook_bytes, simulated_bytes) =
        *cache.entry(key).or_insert_with(|| {
            (
                features::features(g, row.batch, precision),
                baselines::accelerate(g, precision).training_bytes,
                baselines::textbook(g, row.batch)
                    .ok()
                    .map(|t| t.total_bytes),
                crate::simulate::simulate(g, row.batch, precision)
                    .ok()
                    .map(|s| s.peak_bytes),
            )
        });
    if features.as_array().contains(&u64::MAX) {
        return Err(field(
            path,
            "batch",
            format!(
                "at batch {} graph `{}` needs more than 2^64 bytes (its features overflow); check the batch",
                row.batch, row.graph.name
            ),
        ));
    }
    Ok(Row {
        file: rel.into(),
        file_sha256,
        graph_changed: row.graph.sha256 != g.sha256,
        run_id: row.run_id.into(),
        family: names.name(&info.family),
        graph: names.name(&row.graph.name),
        regime: names.name(&row.regime),
        precision,
        batch: row.batch,
        status: row.status,
        measured_bytes: row.peak.map(|p| p.allocated_bytes),
        capacity_bytes: row
            .device
            .emulated_capacity_bytes
            .unwrap_or(row.device.capacity_bytes),
        after_fit: row.marker.as_deref() == Some(AFTER_FIT),
        timestamp: names.name(&row.timestamp),
        graph_mismatch: row.graph_mismatch,
        has_batch_axis: info.has_batch_axis,
        features,
        accelerate_bytes,
        textbook_bytes,
        simulated_bytes,
        device: names.name(&row.device.name),
        device_kind: names.name(&row.device.kind),
        harness_version: names.name(&row.tool_version),
        torch_version: names.name(&row.device.torch),
    })
}

/// Reads, parses, checks, hashes and joins the row files `paths` in order, stopping at the first
/// error.
fn load_rows(
    data_dir: &Path,
    paths: &[std::path::PathBuf],
    capacity: usize,
    graphs: &BTreeMap<String, (Graph, GraphInfo)>,
) -> Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(capacity);
    let mut cache = HashMap::new();
    let mut names = super::Interner::default();
    for path in paths {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let row = parse_row(&bytes, path)?;
        let rel = path
            .strip_prefix(data_dir)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        rows.push(join(
            row,
            rel,
            super::Digest::of(&bytes),
            path,
            graphs,
            &mut cache,
            &mut names,
        )?);
    }
    Ok(rows)
}

/// Reads `data_dir/factors.json`, `data_dir/graphs/*.json` and every `data_dir/runs/**/*.json`
/// (sorted paths). A missing `graphs/` or `runs/` folder counts as empty.
pub fn load(data_dir: &Path) -> Result<Dataset> {
    let factors_path = data_dir.join("factors.json");
    let factors = FactorsFile::load(&factors_path)?;
    if let Some(p) = &factors.provenance {
        parse_rfc3339(&p.fixed_at).map_err(|m| field(&factors_path, "provenance.fixed_at", m))?;
    }
    let graphs_dir = data_dir.join("graphs");
    let loaded = if graphs_dir.is_dir() {
        graph::load_dir(&graphs_dir)?
    } else {
        Vec::new()
    };
    let mut graphs = BTreeMap::new();
    for g in loaded {
        let info = GraphInfo {
            family: g.family.clone(),
            sha256: g.sha256.clone(),
            parameters: g.parameters(),
            has_batch_axis: g.has_batch_axis(),
            textbook_not_applicable: baselines::textbook(&g, 1).err(),
        };
        graphs.insert(g.name.clone(), (g, info));
    }

    let runs_dir = data_dir.join("runs");
    let mut paths = Vec::new();
    if runs_dir.is_dir() {
        for entry in walkdir::WalkDir::new(&runs_dir).sort_by_file_name() {
            let entry = entry.map_err(|e| Error::Io {
                path: e.path().unwrap_or(&runs_dir).to_path_buf(),
                source: e
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("walk failed")),
            })?;
            if entry.file_type().is_file() && entry.path().extension().is_some_and(|x| x == "json")
            {
                paths.push(entry.into_path());
            }
        }
    }
    // Read, parse, check, hash and join the rows on up to `threads` threads, each a contiguous
    // run of the sorted paths with its own feature cache and interner (equal names compare
    // equal whichever interner made them). Each run stops at its first error; the runs are
    // joined in path order, so the rows keep path order and the error reported is the first in
    // path order, as if read one by one.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(paths.len().div_ceil(1_000).max(1));
    let per = paths.len().div_ceil(threads).max(1);
    let total = paths.len();
    let graphs_ref = &graphs;
    let runs: Vec<Result<Vec<Row>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .chunks(per)
            .enumerate()
            .map(|(k, chunk)| {
                // The first run's vector takes every row, so joining copies only the others.
                let capacity = if k == 0 { total } else { chunk.len() };
                scope.spawn(move || load_rows(data_dir, chunk, capacity, graphs_ref))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a row-loading thread panicked"))
            .collect()
    });
    let mut rows: Vec<Row> = Vec::new();
    for run in runs {
        let run = run?;
        if rows.is_empty() {
            rows = run;
        } else {
            rows.extend(run);
        }
    }
    Ok(Dataset {
        factors,
        rows,
        graphs: graphs.into_iter().map(|(k, (_, i))| (k, i)).collect(),
    })
}
