//! The real models memcal measures (`data/models/measured.json`, format
//! `memcal-measured-models/1`): each entry names a config under `data/models/`, optionally
//! reduced (some of its fields replaced, so that it trains on a CPU), the graph it is imported
//! as, and the batches the campaign (`python3 -m memcal_export.campaign`) measures the real
//! transformers class at. `memcal graphs` writes each entry's graph into `data/graphs/` beside
//! the zoo's, so a row of the real model is planned from the graph `memcal import hf` draws.

use super::Options;
use crate::error::{Error, Result};
use crate::graph::GraphFile;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::path::Path;

/// The format tag of `measured.json`.
pub const FORMAT: &str = "memcal-measured-models/1";

/// The file's name under the models folder.
pub const FILE: &str = "measured.json";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    format: String,
    #[allow(dead_code)]
    about: Option<String>,
    models: Vec<Entry>,
}

/// One measured real model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The graph's name (its file `data/graphs/<graph>.json`); the rows' `graph.name`.
    pub graph: String,
    /// The folder under `data/models/` whose `config.json` is read.
    pub model: String,
    /// Sequence length (default: the importer's, printed by `memcal import hf`).
    #[serde(default)]
    pub seq: Option<u64>,
    /// The batches the campaign measures.
    pub batches: Vec<u64>,
    /// Config fields replaced (a reduced model): name -> value.
    #[serde(default)]
    pub reduce: Option<Map<String, Value>>,
    /// Where the campaign measures it: `cpu` (default: `python3 -m memcal_export.campaign`) or
    /// `cuda` (the GPU campaign, `python3 -m memcal_export.gpu`; its batches are that plan's).
    #[serde(default)]
    pub device: Option<String>,
}

/// A spec file under the models folder, parsed (None: no such file).
fn read_spec<S: serde::de::DeserializeOwned>(path: &Path, what: &'static str) -> Result<Option<S>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            what,
            message: format!("{e} (the format is described in data/models/README.md)"),
        })
}

/// The checks every entry shares: the file's format, a plain graph name named once, a model
/// folder with a config.
fn check_entry(
    path: &Path,
    models_dir: &Path,
    k: usize,
    (graph, model): (&str, &str),
    names: &mut BTreeSet<String>,
) -> Result<()> {
    let at = |f: &str| format!("models[{k}].{f}");
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !s.starts_with('.')
    };
    if !plain(graph) {
        return Err(Error::field(
            path,
            &at("graph"),
            format!("`{graph}` is not a plain file name (letters, digits, - _ .)"),
        ));
    }
    if !names.insert(graph.to_string()) {
        return Err(Error::field(
            path,
            &at("graph"),
            format!("`{graph}` is named twice"),
        ));
    }
    let config = models_dir.join(model).join("config.json");
    if !plain(model) || !config.is_file() {
        return Err(Error::field(
            path,
            &at("model"),
            format!("no config at {}", config.display()),
        ));
    }
    Ok(())
}

fn check_format(path: &Path, found: &str, format: &str) -> Result<()> {
    if found != format {
        return Err(Error::field(
            path,
            "format",
            format!("is `{found}`; must be `{format}`"),
        ));
    }
    Ok(())
}

/// The entries of `models_dir/measured.json`, checked; none without the file.
pub fn entries(models_dir: &Path) -> Result<Vec<Entry>> {
    let path = models_dir.join(FILE);
    let Some(spec) = read_spec::<Spec>(&path, "measured models")? else {
        return Ok(Vec::new());
    };
    check_format(&path, &spec.format, FORMAT)?;
    let mut names = BTreeSet::new();
    for (k, e) in spec.models.iter().enumerate() {
        let at = |f: &str| format!("models[{k}].{f}");
        check_entry(&path, models_dir, k, (&e.graph, &e.model), &mut names)?;
        if e.batches.is_empty() || e.batches.contains(&0) {
            return Err(Error::field(
                &path,
                &at("batches"),
                "must list positive batches",
            ));
        }
        if let Some(d) = e
            .device
            .as_deref()
            .filter(|d| !matches!(*d, "cpu" | "cuda"))
        {
            return Err(Error::field(
                &path,
                &at("device"),
                format!("is `{d}`; must be `cpu` or `cuda`"),
            ));
        }
        if e.seq == Some(0) {
            return Err(Error::field(&path, &at("seq"), "must be positive"));
        }
    }
    Ok(spec.models)
}

/// The graph of every entry of `models_dir/measured.json`, imported as `memcal import hf`
/// imports the entry's config with its `reduce` fields replaced (family `hf-<model_type>`).
pub fn graphs(models_dir: &Path) -> Result<Vec<GraphFile>> {
    entries(models_dir)?
        .iter()
        .map(|e| graph(models_dir, e))
        .collect()
}

/// One entry's graph.
pub fn graph(models_dir: &Path, e: &Entry) -> Result<GraphFile> {
    graph_with(models_dir, e, false)
}

/// One entry's graph, its sequence length the axis `"T"` where `seq_axis`.
fn graph_with(models_dir: &Path, e: &Entry, seq_axis: bool) -> Result<GraphFile> {
    let path = models_dir.join(&e.model).join("config.json");
    let mut map = super::read_config(&path)?;
    let reduce = e.reduce.clone().unwrap_or_default();
    for (k, v) in &reduce {
        map.insert(k.clone(), v.clone());
    }
    let options = Options {
        seq: e.seq,
        name: e.graph.clone(),
        seq_axis,
        ..Default::default()
    };
    let imported = super::hf_fields(&path, &map, &options)?;
    let mut graph = imported.graph;
    let config = format!("data/models/{}/config.json", e.model);
    let from = if reduce.is_empty() {
        format!("{config},")
    } else {
        let fields: Vec<String> = reduce.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!("reduced from {config} ({});", fields.join(", "))
    };
    graph.description = Some(format!("{from} {}", graph.description.unwrap_or_default()));
    Ok(graph)
}

/// The models measured generating text (`data/models/generate.json`, format
/// `memcal-generate-models/1`; `python3 -m memcal_export.generate` measures them): each entry's
/// graph is imported with the sequence axis `"T"`, so the prefill and every decode step are
/// planned from one graph at their lengths.
pub mod generate {
    use super::*;

    /// The format tag of `generate.json`.
    pub const FORMAT: &str = "memcal-generate-models/1";

    /// The file's name under the models folder.
    pub const FILE: &str = "generate.json";

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Spec {
        format: String,
        #[allow(dead_code)]
        about: Option<String>,
        models: Vec<Entry>,
    }

    /// One model measured generating: its config, reduced, and the cases the campaign runs.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Entry {
        pub graph: String,
        pub model: String,
        #[serde(default)]
        pub reduce: Option<Map<String, Value>>,
        pub batches: Vec<u64>,
        /// Prompt lengths in tokens.
        pub prompts: Vec<u64>,
        /// `max_new_tokens` values.
        pub new: Vec<u64>,
        /// `dynamic` and/or `static`.
        pub caches: Vec<String>,
    }

    /// The entries of `models_dir/generate.json`, checked; none without the file.
    pub fn entries(models_dir: &Path) -> Result<Vec<Entry>> {
        let path = models_dir.join(FILE);
        let Some(spec) = read_spec::<Spec>(&path, "generating models")? else {
            return Ok(Vec::new());
        };
        check_format(&path, &spec.format, FORMAT)?;
        let mut names = BTreeSet::new();
        for (k, e) in spec.models.iter().enumerate() {
            let at = |f: &str| format!("models[{k}].{f}");
            check_entry(&path, models_dir, k, (&e.graph, &e.model), &mut names)?;
            for (field, v) in [
                ("batches", &e.batches),
                ("prompts", &e.prompts),
                ("new", &e.new),
            ] {
                if v.is_empty() || v.contains(&0) {
                    return Err(Error::field(
                        &path,
                        &at(field),
                        "must list positive numbers",
                    ));
                }
            }
            if e.caches.is_empty()
                || e.caches
                    .iter()
                    .any(|c| !matches!(c.as_str(), "dynamic" | "static"))
            {
                return Err(Error::field(
                    &path,
                    &at("caches"),
                    "must list `dynamic` and/or `static`",
                ));
            }
        }
        Ok(spec.models)
    }

    /// Every entry's graph, imported with the sequence axis `"T"`.
    pub fn graphs(models_dir: &Path) -> Result<Vec<GraphFile>> {
        entries(models_dir)?
            .iter()
            .map(|e| {
                let mut m = super::Entry {
                    graph: e.graph.clone(),
                    model: e.model.clone(),
                    seq: None,
                    batches: e.batches.clone(),
                    reduce: e.reduce.clone(),
                    device: None,
                };
                // A type whose graph holds tensors sized by the sequence (rotary tables drawn as
                // constants) takes no axis: drawn at the longest prompt instead (its
                // description says the length).
                super::graph_with(models_dir, &m, true).or_else(|_| {
                    m.seq = e.prompts.iter().max().copied();
                    super::graph_with(models_dir, &m, false)
                })
            })
            .collect()
    }
}
