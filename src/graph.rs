//! Loading and checking `memcal-graph/1` files: parse, type every op, order the nodes, infer
//! every shape. Any problem is an [`Error`] naming the file and the node or field.

use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shape::{Dim, Shape};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
type HashMap<K, V> = crate::name_hash::NameMap<K, V>;
type HashSet<K> = crate::name_hash::NameSet<K>;
use std::path::{Path, PathBuf};

/// The format tag every graph carries.
pub const GRAPH_FORMAT: &str = "memcal-graph/1";

/// Element type of a graph input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// An activation input; its bytes follow the run's precision profile.
    Float32,
    /// Token ids or class labels.
    Int64,
}

/// One dimension as written in a file: `"B"` or a positive integer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum FileDim {
    Size(u64),
    Symbol(String),
}

/// A number or a string; a negative or fractional number is refused here, with the value (an
/// untagged enum would only say that no variant matched).
impl<'de> Deserialize<'de> for FileDim {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = FileDim;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"B\" or a positive integer")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<FileDim, E> {
                Ok(FileDim::Size(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<FileDim, E> {
                u64::try_from(v).map(FileDim::Size).map_err(|_| {
                    E::custom(format!(
                        "a dimension must be \"B\" or a positive integer, found {v}"
                    ))
                })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<FileDim, E> {
                Err(E::custom(format!(
                    "a dimension must be \"B\" or a positive integer, found {v}"
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<FileDim, E> {
                Ok(FileDim::Symbol(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A graph input as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    pub name: String,
    pub shape: Vec<FileDim>,
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<u64>,
}

/// An extra non-trainable buffer (accelerate counts them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferFile {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: String,
}

/// A node as written in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    pub id: String,
    pub op: String,
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub attributes: Map<String, Value>,
}

/// A whole graph file, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphFile {
    pub format: String,
    pub name: String,
    pub family: String,
    pub variant: String,
    #[serde(default)]
    pub cut_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub inputs: Vec<InputFile>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buffers: Vec<BufferFile>,
    pub nodes: Vec<NodeFile>,
    pub loss: String,
}

/// A checked graph input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Input {
    pub name: String,
    pub shape: Shape,
    pub dtype: DType,
    pub classes: Option<u64>,
}

/// A checked node: typed op, inputs, inferred output shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub id: String,
    pub op: Op,
    pub inputs: Vec<String>,
    pub output: Shape,
}

/// A loaded, checked graph. Nodes are in a topological order (the file's order where it is one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    pub name: String,
    pub family: String,
    pub variant: String,
    pub cut_from: Option<String>,
    pub description: Option<String>,
    pub inputs: Vec<Input>,
    pub buffers: Vec<BufferFile>,
    pub nodes: Vec<Node>,
    pub loss: String,
    /// SHA-256 (hex) of the file's bytes; empty for a graph built in memory.
    pub sha256: String,
    /// Where it was loaded from, if anywhere.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Every value's name (inputs and nodes) to where it is, so that [`Graph::shape_of`] is a
    /// lookup rather than a scan (a scan per node made a 200,000-node graph quadratic).
    #[serde(skip)]
    names: NameIndex,
}

/// Where a value is: a graph input or a node, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Input(usize),
    Node(usize),
}

/// [`Graph`]'s name index. Equal for any two graphs (it is derived from the fields compared).
#[derive(Debug, Clone, Default)]
struct NameIndex(HashMap<String, Slot>);

impl PartialEq for NameIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Turns a JSON error into one that names the file and the field (dotted path) and says what to
/// do: a file that is not complete JSON is a [`Error::Parse`]; a wrong, missing or unknown field
/// is an [`Error::Field`]. `doc` is the format's documentation, named in the hint.
pub(crate) fn json_error(
    path: &Path,
    what: &'static str,
    doc: &str,
    text: &str,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> Error {
    use serde_json::error::Category;
    let at = e.path().to_string();
    let inner = e.into_inner();
    let msg = inner.to_string();
    // serde_json reports some type errors (a bool where an enum's string goes) as syntax errors;
    // the file is really malformed only if it is not JSON at all.
    let not_json = serde_json::from_str::<serde::de::IgnoredAny>(text).is_err();
    if not_json
        && matches!(
            inner.classify(),
            Category::Syntax | Category::Eof | Category::Io
        )
    {
        let message = if text.starts_with('\u{feff}') {
            "the file starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON does not \
             allow; save it without one"
                .to_string()
        } else if let Some(token) = non_finite_at(text, inner.line(), inner.column()) {
            format!(
                "`{token}` at line {} column {} is not a JSON number (JSON has no Infinity or \
                 NaN); write a finite number",
                inner.line(),
                inner.column()
            )
        } else if text.trim().is_empty() {
            format!("the file is empty; write it in the format of {doc}, or delete it")
        } else {
            // A factors file is fixed, never deleted; a row or graph file may be stray.
            let or_delete = if what.starts_with("factors") {
                ""
            } else {
                ", or delete it"
            };
            format!("{msg}; the file is cut short or not JSON: fix it ({doc}){or_delete}")
        };
        return Error::Parse {
            path: path.to_path_buf(),
            what,
            message,
        };
    }
    // serde reports a missing field at its parent; name the field itself.
    let missing = msg
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let field = match missing {
        Some(m) if at == "." || at.is_empty() => m.to_string(),
        Some(m) => format!("{at}.{m}"),
        None if at.is_empty() => ".".into(),
        None => at,
    };
    let hint = if missing.is_some() {
        format!("add it ({doc} lists every field)")
    } else if msg.starts_with("unknown field") {
        "remove it or fix its spelling".to_string()
    } else {
        format!("{doc} gives every field's type")
    };
    Error::Field {
        path: path.to_path_buf(),
        field,
        message: format!("{msg}; {hint}"),
    }
}

/// `Infinity`, `-Infinity` or `NaN` where serde_json stopped (line and column from 1), if
/// that is what stopped it.
fn non_finite_at(text: &str, line: usize, column: usize) -> Option<&'static str> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let at = column.saturating_sub(1);
    ["-Infinity", "Infinity", "NaN"]
        .into_iter()
        .find(|t| (at.saturating_sub(1)..=at).any(|k| l.get(k..).is_some_and(|r| r.starts_with(t))))
}

/// The error for bytes after a complete JSON document (a second row, a stray brace): the
/// document is one value, and nothing but white space may follow it.
pub(crate) fn trailing_error(path: &Path, what: &'static str, e: &serde_json::Error) -> Error {
    let hint = if what.starts_with("run row") {
        " (several rows go in a .jsonl row bundle, one row per line)"
    } else {
        ""
    };
    Error::Parse {
        path: path.to_path_buf(),
        what,
        message: format!(
            "more after the document ends at line {} column {}: a file holds one JSON \
             document{hint}; remove the rest",
            e.line(),
            e.column()
        ),
    }
}

/// SHA-256 of bytes, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Graph {
    /// Reads, parses and checks a graph file.
    pub fn load(path: &Path) -> Result<Graph> {
        if path.is_dir() {
            return Err(Error::Invalid(format!(
                "{}: is a directory where a graph file is expected; remove or rename it",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut g = Graph::from_bytes(&bytes, path)?;
        g.path = Some(path.to_path_buf());
        Ok(g)
    }

    /// Parses and checks graph bytes; `path` is only used in messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Graph> {
        let text = std::str::from_utf8(bytes).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            what: "graph",
            message: format!("not UTF-8 text ({e})"),
        })?;
        // Parsed plainly first (tracking each field's path costs about a third of the parse of
        // a large graph); a file that fails is parsed again with paths, for the message.
        let de = &mut serde_json::Deserializer::from_str(text);
        let file = match GraphFile::deserialize(&mut *de) {
            Ok(file) => file,
            Err(_) => {
                let de = &mut serde_json::Deserializer::from_str(text);
                let e = match serde_path_to_error::deserialize::<_, GraphFile>(&mut *de) {
                    Err(e) => e,
                    Ok(_) => {
                        return Err(Error::Parse {
                            path: path.to_path_buf(),
                            what: "graph",
                            message: "parses with field paths but not without (a bug in \
                                      memcal: please report it)"
                                .into(),
                        })
                    }
                };
                return Err(json_error(
                    path,
                    "graph JSON",
                    "docs/graph-format.md",
                    text,
                    e,
                ));
            }
        };
        de.end()
            .map_err(|e| trailing_error(path, "graph JSON", &e))?;
        let mut g = Graph::check(&file, path)?;
        g.sha256 = sha256_hex(bytes);
        Ok(g)
    }

    /// Checks a parsed file: format, names, ops, order, shapes, ties, loss.
    pub fn check(file: &GraphFile, path: &Path) -> Result<Graph> {
        if file.format != GRAPH_FORMAT {
            return Err(Error::field(
                path,
                "format",
                format!(
                    "expected \"{GRAPH_FORMAT}\", found \"{}\"; this memcal reads only {GRAPH_FORMAT}",
                    file.format
                ),
            ));
        }
        for (field, value) in [
            ("name", &file.name),
            ("family", &file.family),
            ("variant", &file.variant),
        ] {
            if value.trim().is_empty() {
                return Err(Error::field(path, field, "must not be empty"));
            }
        }
        let mut shapes: HashMap<&str, Shape> =
            HashMap::with_capacity_and_hasher(file.nodes.len() + 8, Default::default());
        let mut inputs = Vec::new();
        for (i, input) in file.inputs.iter().enumerate() {
            let field = format!("inputs[{i}]");
            let mut dims = Vec::new();
            for d in &input.shape {
                dims.push(match d {
                    FileDim::Size(n) if *n > 0 => Dim::fixed(*n),
                    FileDim::Symbol(s) if s == "B" => Dim::batch(),
                    other => {
                        let found = match other {
                            FileDim::Size(n) => n.to_string(),
                            FileDim::Symbol(s) => format!("\"{s}\""),
                        };
                        return Err(Error::field(
                            path,
                            &format!("{field}.shape"),
                            format!("entries must be \"B\" or a positive integer, found {found}"),
                        ));
                    }
                });
            }
            if input.dtype == DType::Int64 && !matches!(input.classes, Some(c) if c > 0) {
                return Err(Error::field(
                    path,
                    &format!("{field}.classes"),
                    "an int64 input needs `classes` (a positive integer: values are drawn in [0, classes))",
                ));
            }
            if shapes.insert(&input.name, Shape(dims.clone())).is_some() {
                return Err(Error::field(
                    path,
                    &field,
                    format!("duplicate input name `{}`", input.name),
                ));
            }
            inputs.push(Input {
                name: input.name.clone(),
                shape: Shape(dims),
                dtype: input.dtype,
                classes: input.classes,
            });
        }

        // Type every op first, so an unknown op is reported before ordering problems.
        let mut ops = Vec::with_capacity(file.nodes.len());
        let mut index: HashMap<&str, usize> =
            HashMap::with_capacity_and_hasher(file.nodes.len(), Default::default());
        let node_ids: HashSet<&str> = file.nodes.iter().map(|n| n.id.as_str()).collect();
        let int64_inputs: HashSet<&str> = file
            .inputs
            .iter()
            .filter(|i| i.dtype == DType::Int64)
            .map(|i| i.name.as_str())
            .collect();
        for (i, n) in file.nodes.iter().enumerate() {
            if n.id.trim().is_empty() {
                return Err(Error::field(
                    path,
                    &format!("nodes[{i}].id"),
                    "must not be empty",
                ));
            }
            if shapes.contains_key(n.id.as_str()) || index.insert(&n.id, i).is_some() {
                return Err(Error::node(
                    path,
                    &n.id,
                    "duplicate id (ids and input names must be unique)",
                ));
            }
            let op = Op::parse(&n.op, &n.attributes).map_err(|m| Error::node(path, &n.id, m))?;
            let (lo, hi) = op.arity();
            if n.inputs.len() < lo || n.inputs.len() > hi {
                let want = if lo == hi {
                    lo.to_string()
                } else if hi == usize::MAX {
                    format!("at least {lo}")
                } else {
                    format!("{lo} to {hi}")
                };
                return Err(Error::node(
                    path,
                    &n.id,
                    format!("`{}` takes {want} input(s), found {}", n.op, n.inputs.len()),
                ));
            }
            for inp in &n.inputs {
                if !shapes.contains_key(inp.as_str()) && !node_ids.contains(inp.as_str()) {
                    return Err(Error::node(
                        path,
                        &n.id,
                        format!("input `{inp}` is neither a graph input nor a node"),
                    ));
                }
            }
            ops.push(op);
        }

        // Kahn's algorithm, taking ready nodes in file order: a file already in order keeps it.
        let n = file.nodes.len();
        let mut pending: Vec<usize> = file
            .nodes
            .iter()
            .map(|node| {
                node.inputs
                    .iter()
                    .filter(|i| index.contains_key(i.as_str()))
                    .count()
            })
            .collect();
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in file.nodes.iter().enumerate() {
            for inp in &node.inputs {
                if let Some(&j) = index.get(inp.as_str()) {
                    users[j].push(i);
                }
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| pending[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &u in &users[i] {
                pending[u] -= 1;
                if pending[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() < n {
            let stuck = (0..n).find(|i| pending[*i] > 0).unwrap_or(0);
            return Err(Error::node(
                path,
                &file.nodes[stuck].id,
                "is part of a cycle (a node depends on its own output)",
            ));
        }

        let mut nodes = Vec::with_capacity(n);
        for i in order {
            let nf = &file.nodes[i];
            let op = ops[i].clone();
            let ins: Vec<&Shape> = nf.inputs.iter().map(|x| &shapes[x.as_str()]).collect();
            for (k, (name, s)) in nf.inputs.iter().zip(&ins).enumerate() {
                let int_input =
                    int64_inputs.contains(name.as_str()) && !index.contains_key(name.as_str());
                let wants_int = matches!(op, Op::Embedding { .. })
                    || (k == 1 && matches!(op, Op::CrossEntropy));
                if int_input != wants_int {
                    return Err(Error::node(
                        path,
                        &nf.id,
                        if wants_int {
                            format!("input `{name}` {s} must be an int64 graph input")
                        } else {
                            format!("input `{name}` is an int64 graph input; only embedding and cross_entropy labels take one")
                        },
                    ));
                }
            }
            let output = op.infer(&ins).map_err(|m| Error::node(path, &nf.id, m))?;
            shapes.insert(&nf.id, output.clone());
            nodes.push(Node {
                id: nf.id.clone(),
                op,
                inputs: nf.inputs.clone(),
                output,
            });
        }

        // Ties: a tied linear or embedding must name an embedding that owns its table (is not
        // tied itself) and whose table matches it.
        let by_id: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(k, n)| (n.id.as_str(), k))
            .collect();
        for node in &nodes {
            let (t, want_num, want_dim, what) = match &node.op {
                Op::Linear {
                    in_features,
                    out_features,
                    tie: Some(t),
                    ..
                } => (
                    t,
                    *out_features,
                    *in_features,
                    "a tied linear needs in_features = {dim} and out_features = {num}",
                ),
                Op::Embedding {
                    num_embeddings,
                    embedding_dim,
                    tie: Some(t),
                } => (
                    t,
                    *num_embeddings,
                    *embedding_dim,
                    "a tied embedding needs num_embeddings = {num} and embedding_dim = {dim}",
                ),
                _ => continue,
            };
            let target = by_id.get(t.as_str()).map(|&k| &nodes[k]);
            match target.map(|m| &m.op) {
                Some(Op::Embedding {
                    num_embeddings,
                    embedding_dim,
                    tie: None,
                }) => {
                    if *embedding_dim != want_dim || *num_embeddings != want_num {
                        let need = what
                            .replace("{dim}", &embedding_dim.to_string())
                            .replace("{num}", &num_embeddings.to_string());
                        let found = if matches!(node.op, Op::Linear { .. }) {
                            format!("{want_dim} and {want_num}")
                        } else {
                            format!("{want_num} and {want_dim}")
                        };
                        return Err(Error::node(
                            path,
                            &node.id,
                            format!(
                                "tied to `{t}` of [{num_embeddings}, {embedding_dim}], but {need}, found {found}"
                            ),
                        ));
                    }
                }
                Some(Op::Embedding { tie: Some(_), .. }) => {
                    return Err(Error::node(
                        path,
                        &node.id,
                        format!("`tie` names `{t}`, which is itself tied; name the embedding that owns the table"),
                    ))
                }
                _ => {
                    return Err(Error::node(
                        path,
                        &node.id,
                        format!("`tie` names `{t}`, which is not an embedding node"),
                    ))
                }
            }
        }

        // Sizes saturate rather than overflow; a saturated parameter count means absurd sizes.
        let mut total = 0u64;
        for node in &nodes {
            let p = node.op.parameters();
            match total.checked_add(p) {
                Some(t) if p != u64::MAX && t != u64::MAX => total = t,
                _ => {
                    return Err(Error::node(
                        path,
                        &node.id,
                        "the graph's parameter count overflows 64 bits here; check this node's sizes and its input shapes",
                    ))
                }
            }
        }

        match by_id.get(file.loss.as_str()).map(|&k| &nodes[k]) {
            None => {
                return Err(Error::field(
                    path,
                    "loss",
                    format!("names `{}`, which is not a node", file.loss),
                ))
            }
            Some(m) if !m.op.is_loss() => {
                return Err(Error::field(
                    path,
                    "loss",
                    format!(
                        "`{}` is a `{}` node; the loss must be cross_entropy or mse",
                        m.id,
                        m.op.name()
                    ),
                ))
            }
            Some(_) => {}
        }

        drop(by_id);
        let mut names =
            HashMap::with_capacity_and_hasher(inputs.len() + nodes.len(), Default::default());
        for (k, i) in inputs.iter().enumerate() {
            names.insert(i.name.clone(), Slot::Input(k));
        }
        for (k, n) in nodes.iter().enumerate() {
            names.insert(n.id.clone(), Slot::Node(k));
        }
        Ok(Graph {
            names: NameIndex(names),
            name: file.name.clone(),
            family: file.family.clone(),
            variant: file.variant.clone(),
            cut_from: file.cut_from.clone(),
            description: file.description.clone(),
            inputs,
            buffers: file.buffers.clone(),
            nodes,
            loss: file.loss.clone(),
            sha256: String::new(),
            path: None,
        })
    }

    /// Trainable parameters, a tied weight counted once.
    pub fn parameters(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.op.parameters())
            .fold(0u64, u64::saturating_add)
    }

    /// False when no input has a batch axis: the graph loads, but is flagged "no batch axis".
    pub fn has_batch_axis(&self) -> bool {
        self.inputs.iter().any(|i| i.shape.has_batch())
    }

    /// The shape of a value (graph input or node output) by name: looked up in the graph's
    /// index (a scan for a graph whose fields were changed after it was checked).
    pub fn shape_of(&self, name: &str) -> Option<&Shape> {
        match self.names.0.get(name) {
            Some(Slot::Input(k)) if self.inputs.get(*k).is_some_and(|i| i.name == name) => {
                return Some(&self.inputs[*k].shape)
            }
            Some(Slot::Node(k)) if self.nodes.get(*k).is_some_and(|n| n.id == name) => {
                return Some(&self.nodes[*k].output)
            }
            _ => {}
        }
        self.inputs
            .iter()
            .find(|i| i.name == name)
            .map(|i| &i.shape)
            .or_else(|| self.nodes.iter().find(|n| n.id == name).map(|n| &n.output))
    }
}

/// Loads every `*.json` graph under a folder, sorted by file name. Errors name the file.
pub fn load_dir(dir: &Path) -> Result<Vec<Graph>> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths = Vec::new();
    for e in entries {
        let e = e.map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            paths.push(p);
        }
    }
    paths.sort();
    let mut graphs = Vec::with_capacity(paths.len());
    for p in paths {
        let g = Graph::load(&p)?;
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if stem != g.name {
            return Err(Error::field(
                &p,
                "name",
                format!(
                    "is `{}` but the file is named `{stem}.json`; rename one so they agree",
                    g.name
                ),
            ));
        }
        graphs.push(g);
    }
    Ok(graphs)
}
