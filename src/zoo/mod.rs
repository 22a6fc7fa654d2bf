//! The zoo: Rust builders that emit every `memcal-graph/1` file under `data/graphs/`.
//!
//! Each architecture family has a full-size template (variant `full`) and reduced variants
//! (`r1`, `r2`, ...) cut from it, small enough to measure on a CPU. The five published templates
//! (`gpt2-small`, `bert-base-cased`, `resnet50`, `vit-b16`, `t5-small`) reproduce the published
//! parameter counts exactly; every other graph is named `<family>-<variant>`.
//!
//! Graphs are built with [`Builder`]: inputs and nodes are appended in order (so every file is
//! already topologically sorted), node ids are dotted paths such as `h3.attn`.

mod cnn;
mod recurrent;
mod transformer;
pub(crate) use transformer::sized;

use crate::error::{Error, Result};
use crate::graph::{BufferFile, DType, FileDim, GraphFile, InputFile, NodeFile, GRAPH_FORMAT};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// The batch axis in a shape passed to [`Builder::input`] / [`Builder::int_input`].
pub const B: u64 = 0;

/// Builds one [`GraphFile`] node by node.
#[derive(Debug, Clone)]
pub struct Builder {
    file: GraphFile,
}

impl Builder {
    /// A new empty graph `name` of `family`, variant `variant` (`full` for a template).
    pub fn new(name: &str, family: &str, variant: &str) -> Self {
        Builder {
            file: GraphFile {
                format: GRAPH_FORMAT.to_string(),
                name: name.to_string(),
                family: family.to_string(),
                variant: variant.to_string(),
                cut_from: None,
                description: None,
                inputs: Vec::new(),
                buffers: Vec::new(),
                nodes: Vec::new(),
                loss: String::new(),
                notes: Vec::new(),
            },
        }
    }

    /// Marks the graph as a reduced variant cut from the template `template`.
    pub fn cut_from(mut self, template: &str) -> Self {
        self.file.cut_from = Some(template.to_string());
        self
    }

    /// A one-line human description.
    pub fn describe(mut self, text: impl Into<String>) -> Self {
        self.file.description = Some(text.into());
        self
    }

    fn shape(shape: &[u64]) -> Vec<FileDim> {
        shape
            .iter()
            .map(|&d| {
                if d == B {
                    FileDim::Symbol("B".to_string())
                } else {
                    FileDim::Size(d)
                }
            })
            .collect()
    }

    /// A float32 input; [`B`] in `shape` is the batch axis. Returns its name.
    pub fn input(&mut self, name: &str, shape: &[u64]) -> String {
        self.file.inputs.push(InputFile {
            name: name.to_string(),
            shape: Self::shape(shape),
            dtype: DType::Float32,
            classes: None,
        });
        name.to_string()
    }

    /// An int64 input (token ids or labels) with values in `[0, classes)`. Returns its name.
    pub fn int_input(&mut self, name: &str, shape: &[u64], classes: u64) -> String {
        self.file.inputs.push(InputFile {
            name: name.to_string(),
            shape: Self::shape(shape),
            dtype: DType::Int64,
            classes: Some(classes),
        });
        name.to_string()
    }

    /// An extra non-trainable buffer the torch module registers.
    pub fn buffer(&mut self, name: &str, shape: &[u64], dtype: &str) {
        self.file.buffers.push(BufferFile {
            name: name.to_string(),
            shape: shape.to_vec(),
            dtype: dtype.to_string(),
        });
    }

    /// Appends a node; `attrs` is a JSON object (or `null` for none). Returns the node's id.
    pub fn node(&mut self, id: &str, op: &str, inputs: &[&str], attrs: Value) -> String {
        let attributes = match attrs {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => panic!("zoo: attributes of `{id}` must be a JSON object, found {other}"),
        };
        self.file.nodes.push(NodeFile {
            id: id.to_string(),
            op: op.to_string(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            attributes,
        });
        id.to_string()
    }

    /// Finishes the graph with `loss` naming the loss node.
    pub fn finish(mut self, loss: &str) -> GraphFile {
        self.file.loss = loss.to_string();
        self.file
    }
}

/// `prefix.name`, or `name` when the prefix is empty.
pub(crate) fn id(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Every graph of the zoo (full templates and reduced variants), sorted by name.
pub fn all() -> Vec<GraphFile> {
    let mut graphs = Vec::new();
    graphs.extend(transformer::graphs());
    graphs.extend(cnn::graphs());
    graphs.extend(recurrent::graphs());
    graphs.sort_by(|a, b| a.name.cmp(&b.name));
    graphs
}

/// The bytes of a graph file: pretty JSON with a trailing newline.
pub fn to_bytes(graph: &GraphFile) -> Vec<u8> {
    graph.to_bytes()
}

/// [`write`] of `graphs`, refusing (unless `force`) to write over a file whose bytes differ
/// from what it would write (see [`crate::outputs::changed_files`]): nothing is written then.
pub fn write_checked(dir: &Path, graphs: &[GraphFile], force: bool) -> Result<Vec<PathBuf>> {
    if !force {
        let files: Vec<(PathBuf, Vec<u8>)> = graphs
            .iter()
            .map(|g| (dir.join(format!("{}.json", g.name)), to_bytes(g)))
            .collect();
        let changed = crate::outputs::changed_files(&files);
        if !changed.is_empty() {
            return Err(crate::outputs::changed_graphs_error(&changed));
        }
    }
    write(dir, graphs)
}

/// Writes every zoo graph as `<dir>/<name>.json` (creating `dir`), returning the paths in name
/// order. The bytes are deterministic; a file whose bytes are already right is not rewritten.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>> {
    write(dir, &all())
}

/// Writes each of `graphs` as `<dir>/<name>.json` (creating `dir`), returning the paths in the
/// order given; a file whose bytes are already right is not rewritten.
pub fn write(dir: &Path, graphs: &[GraphFile]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths = Vec::new();
    for g in graphs {
        let path = dir.join(format!("{}.json", g.name));
        let bytes = to_bytes(g);
        if std::fs::read(&path).ok().as_deref() != Some(bytes.as_slice()) {
            std::fs::write(&path, &bytes).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Every graph `memcal graphs` writes into `data/graphs/`: the zoo and the imported graph of
/// each real model of `models_dir/measured.json` ([`crate::import::measured`]), sorted by
/// name. A measured model named like a zoo graph is an input error.
pub fn data_graphs(models_dir: &Path) -> Result<Vec<GraphFile>> {
    let mut graphs = all();
    let measured = crate::import::measured::graphs(models_dir)?;
    let generating = crate::import::measured::generate::graphs(models_dir)?;
    for (g, file) in measured
        .iter()
        .map(|g| (g, crate::import::measured::FILE))
        .chain(
            generating
                .iter()
                .map(|g| (g, crate::import::measured::generate::FILE)),
        )
    {
        if graphs.iter().any(|z| z.name == g.name) {
            return Err(Error::field(
                &models_dir.join(file),
                "graph",
                format!(
                    "`{}` is a zoo graph's name; name the real model otherwise (e.g. hf-{})",
                    g.name, g.name
                ),
            ));
        }
    }
    graphs.extend(measured);
    for g in generating {
        if graphs.iter().any(|z| z.name == g.name) {
            return Err(Error::field(
                &models_dir.join(crate::import::measured::generate::FILE),
                "graph",
                format!(
                    "`{}` is named twice (also in measured.json or the zoo)",
                    g.name
                ),
            ));
        }
        graphs.push(g);
    }
    graphs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(graphs)
}
