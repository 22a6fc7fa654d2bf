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
    /// What the drawing approximates (`docs/graph-format.md`): printed by `memcal plan`,
    /// carried in `--json` and on the page; a graph with notes is an "approximate graph".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<GraphNote>,
}

impl GraphFile {
    /// The bytes memcal writes for a graph file: pretty JSON with a trailing newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a graph always serialises");
        bytes.push(b'\n');
        bytes
    }
}

/// One approximation the exporter made, at a node (or the whole graph).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphNote {
    /// The node it concerns (None: the whole graph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub text: String,
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
    /// The file's approximation notes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<GraphNote>,
    /// The length the sequence axis `"T"` of the file's inputs was given (None: it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// SHA-256 (hex) of the file's bytes; empty for a graph built in memory.
    pub sha256: String,
    /// For a file with notes: SHA-256 (hex) of the bytes memcal writes for it without them
    /// ([`GraphFile::to_bytes`]). A run measured on the graph before its approximations were
    /// written into it still measured this graph: notes are words about the drawing, not part
    /// of it.
    #[serde(skip)]
    pub sha256_without_notes: Option<String>,
    /// Where it was loaded from, if anywhere.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// A file with the sequence axis `"T"`, kept so that [`Graph::at_seq`] binds it again at
    /// another length (a prompt, a decode step).
    #[serde(skip)]
    pub file_with_axis: Option<std::sync::Arc<GraphFile>>,
    /// Every value's name (inputs and nodes) to where it is, so that [`Graph::shape_of`] is a
    /// lookup rather than a scan (a scan per node made a 200,000-node graph quadratic). Made
    /// at the first lookup by name: planning a graph needs none.
    #[serde(skip)]
    names: LazyNames,
    /// Each node's inputs as positions, as the check resolved them.
    #[serde(skip)]
    positions: Positions,
}

/// Where a value is: a graph input or a node, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Input(usize),
    Node(usize),
}

/// [`Graph`]'s name index: each value's name, by its 64-bit hash, to where it is. A lookup
/// checks the name found there (two names with one hash, or fields changed after the check,
/// fall back to a scan), so the index holds no second copy of the names. Equal for any two
/// graphs (it is derived from the fields compared).
#[derive(Debug, Clone, Default)]
struct NameIndex(HashMap<u64, Slot>);

impl NameIndex {
    fn key(name: &str) -> u64 {
        use std::hash::BuildHasher;
        crate::name_hash::NameHash.hash_one(name)
    }

    fn of(inputs: &[Input], nodes: &[Node]) -> NameIndex {
        let mut m =
            HashMap::with_capacity_and_hasher(inputs.len() + nodes.len(), Default::default());
        for (k, i) in inputs.iter().enumerate() {
            m.insert(NameIndex::key(&i.name), Slot::Input(k));
        }
        for (k, n) in nodes.iter().enumerate() {
            m.insert(NameIndex::key(&n.id), Slot::Node(k));
        }
        NameIndex(m)
    }
}

/// [`NameIndex`], made when first needed.
#[derive(Debug, Clone, Default)]
struct LazyNames(std::sync::OnceLock<NameIndex>);

impl PartialEq for LazyNames {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Each node's inputs as value positions (graph inputs `0..n_inputs`, then node `j` at
/// `n_inputs + j`): node `k`'s are `args[starts[k]..starts[k + 1]]`. Resolved by the check,
/// so that the stages after it (features, simulation) look no name up. Equal for any two
/// graphs (it is derived from the fields compared).
#[derive(Debug, Clone, Default)]
struct Positions {
    n_inputs: usize,
    starts: Vec<u32>,
    args: Vec<u32>,
    /// The loss node's position among the nodes.
    loss: usize,
    /// Trainable parameters (the sum the check made).
    parameters: u64,
}

impl PartialEq for Positions {
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
        Graph::load_at(path, None)
    }

    /// [`Graph::load`] with the sequence axis `"T"` (where the file's inputs have one) at
    /// `seq` tokens; a file with a `"T"` and no `seq` is refused, saying to give one.
    pub fn load_at(path: &Path, seq: Option<u64>) -> Result<Graph> {
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
        let mut g = Graph::from_bytes_at(&bytes, path, seq)?;
        g.path = Some(path.to_path_buf());
        Ok(g)
    }

    /// Parses and checks graph bytes; `path` is only used in messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Graph> {
        Graph::from_bytes_at(bytes, path, None)
    }

    /// [`Graph::from_bytes`] with the sequence axis at `seq` tokens.
    pub fn from_bytes_at(bytes: &[u8], path: &Path, seq: Option<u64>) -> Result<Graph> {
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
        // Only a file with notes pays for the second serialisation.
        let without_notes = (!file.notes.is_empty()).then(|| {
            let mut bare = file.clone();
            bare.notes.clear();
            sha256_hex(&bare.to_bytes())
        });
        let mut g = Graph::check_owned_at(file, path, seq)?;
        g.sha256 = sha256_hex(bytes);
        g.sha256_without_notes = without_notes;
        Ok(g)
    }

    /// Checks a parsed file: format, names, ops, order, shapes, ties, loss.
    pub fn check(file: &GraphFile, path: &Path) -> Result<Graph> {
        Graph::check_owned(file.clone(), path)
    }

    /// [`Graph::check`] taking the file, whose names move into the graph (a large graph is
    /// not held twice). Every step is linear in the file's size: names are looked up once,
    /// then the nodes refer to each other by position.
    pub fn check_owned(file: GraphFile, path: &Path) -> Result<Graph> {
        Graph::check_owned_at(file, path, None)
    }

    /// [`Graph::check_owned`] with the sequence axis `"T"` at `seq` tokens.
    pub fn check_owned_at(mut file: GraphFile, path: &Path, seq: Option<u64>) -> Result<Graph> {
        check_header(&file, path)?;
        let inputs = check_inputs(&file, path, seq)?;
        let has_seq = file.inputs.iter().any(|i| {
            i.shape
                .iter()
                .any(|d| matches!(d, FileDim::Symbol(s) if s == "T"))
        });
        let file_with_axis = has_seq.then(|| std::sync::Arc::new(file.clone()));
        let n_inputs = inputs.len();
        let resolved = resolve(&file, n_inputs, path)?;
        let order = topological_order(&file, &resolved, n_inputs, path)?;
        let Resolved {
            index,
            mut ops,
            starts,
            args,
        } = resolved;
        // Generic nodes' shapes are expressions of B and T: bind T now.
        let bound_seq = if has_seq { seq } else { None };
        for (i, op) in ops.iter_mut().enumerate() {
            if let Some(a) = op.as_generic_mut() {
                a.bind(bound_seq)
                    .map_err(|m| Error::node(path, &file.nodes[i].id, m))?;
            }
        }
        let args_of = |i: usize| &args[starts[i] as usize..starts[i + 1] as usize];
        let mut outputs: Vec<Option<Shape>> = vec![None; file.nodes.len()];
        // Nodes computed from `constant` nodes alone (no gradient reaches them): only these
        // may be broadcast by a binary op.
        let mut constant = vec![false; file.nodes.len()];
        for &i in &order {
            let nf = &file.nodes[i];
            let op = &ops[i];
            let ins: Vec<&Shape> = args_of(i)
                .iter()
                .map(|&v| match v as usize {
                    v if v < n_inputs => &inputs[v].shape,
                    v => outputs[v - n_inputs]
                        .as_ref()
                        .expect("inputs come first in a topological order"),
                })
                .collect();
            check_input_kinds(path, nf, op, args_of(i), &ins, &inputs)?;
            // A loss that reads labels (cross-entropy): their classes fit its logits.
            if op.is_loss() && op.family().wants_int_input(op, 1) {
                check_label_classes(path, nf, args_of(i), &ins, &inputs)?;
            }
            let output = op.infer(&ins).map_err(|m| Error::node(path, &nf.id, m))?;
            let of_constants = |v: u32| (v as usize) >= n_inputs && constant[v as usize - n_inputs];
            let made_of_constants = op.is_constant()
                || (op.parameters() == 0 && args_of(i).iter().all(|&v| of_constants(v)));
            check_constant_inputs(path, nf, op, args_of(i), &ins, &output, &of_constants)?;
            constant[i] = made_of_constants;
            outputs[i] = Some(output);
        }
        let node_op = |name: &str| match index.get(name) {
            Some(v) if v as usize >= n_inputs => Some(&ops[v as usize - n_inputs]),
            _ => None,
        };
        for &i in &order {
            ops[i]
                .check_tie(&node_op)
                .map_err(|m| Error::node(path, &file.nodes[i].id, m))?;
        }
        for (i, note) in file.notes.iter().enumerate() {
            if let Some(id) = &note.node {
                if node_op(id).is_none() {
                    return Err(Error::field(
                        path,
                        &format!("notes[{i}].node"),
                        format!("names `{id}`, which is not a node"),
                    ));
                }
            }
        }
        let total = count_parameters(&file, &ops, &order, path)?;
        check_loss(path, &file.loss, node_op(&file.loss))?;
        // Positions in the graph's (topological) order.
        let mut position = vec![0u32; order.len()];
        for (p, &i) in order.iter().enumerate() {
            position[i] = (n_inputs + p) as u32;
        }
        // The loss was checked above to name a node.
        let loss_at = index
            .get(&file.loss)
            .map_or(0, |v| position[v as usize - n_inputs] as usize - n_inputs);
        let mut positions = Positions {
            n_inputs,
            starts: Vec::with_capacity(order.len() + 1),
            args: Vec::with_capacity(args.len()),
            loss: loss_at,
            parameters: total,
        };
        positions.starts.push(0);
        for &i in &order {
            positions
                .args
                .extend(args_of(i).iter().map(|&v| match v as usize {
                    v if v < n_inputs => v as u32,
                    v => position[v - n_inputs],
                }));
            positions.starts.push(positions.args.len() as u32);
        }

        drop(index);

        // The names move from the file into the graph, in order.
        let mut ops: Vec<Option<Op>> = ops.into_iter().map(Some).collect();
        let mut nodes = Vec::with_capacity(order.len());
        for i in order {
            let nf = &mut file.nodes[i];
            nodes.push(Node {
                id: std::mem::take(&mut nf.id),
                op: ops[i].take().expect("each node once"),
                inputs: {
                    // The parser's vector has room for four names; most nodes have one.
                    let mut inputs = std::mem::take(&mut nf.inputs);
                    inputs.shrink_to_fit();
                    inputs
                },
                output: outputs[i].take().expect("every node's shape is inferred"),
            });
        }
        Ok(Graph {
            names: LazyNames::default(),
            positions,
            name: file.name,
            family: file.family,
            variant: file.variant,
            cut_from: file.cut_from,
            description: file.description,
            inputs,
            buffers: file.buffers,
            nodes,
            loss: file.loss,
            notes: file.notes,
            seq: if has_seq { seq } else { None },
            sha256: String::new(),
            sha256_without_notes: None,
            path: None,
            file_with_axis,
        })
    }

    /// The same graph with its sequence axis `"T"` at `seq` tokens (its hashes and path kept);
    /// an error for a graph of fixed lengths.
    pub fn at_seq(&self, seq: u64) -> Result<Graph> {
        let path = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from(&self.name));
        let Some(file) = &self.file_with_axis else {
            return Err(Error::Invalid(format!(
                "{}: graph `{}` has no sequence axis \"T\" to bind at {seq} tokens",
                path.display(),
                self.name
            )));
        };
        let mut g = Graph::check_owned_at(GraphFile::clone(file), &path, Some(seq))?;
        g.sha256 = self.sha256.clone();
        g.sha256_without_notes = self.sha256_without_notes.clone();
        g.path = self.path.clone();
        Ok(g)
    }

    /// The same graph with node `k`'s op replaced by `ops[k]` (the same inputs), every output
    /// shape inferred again in order and the parameter count made again: a rank's own graph
    /// under tensor parallelism (`simulate::tp`). An error names the node whose shape no
    /// longer infers. Hashes and path are kept (the rows were measured on the file).
    pub fn with_ops(&self, ops: Vec<Op>) -> std::result::Result<Graph, String> {
        if ops.len() != self.nodes.len() {
            return Err(format!("{} ops for {} nodes", ops.len(), self.nodes.len()));
        }
        let mut g = self.clone();
        let before: u64 = g.nodes.iter().map(|n| n.op.parameters()).sum();
        let after: u64 = ops.iter().map(|o| o.parameters()).sum();
        for (n, op) in g.nodes.iter_mut().zip(ops) {
            n.op = op;
        }
        let n_inputs = g.inputs.len();
        for k in 0..g.nodes.len() {
            let args: Vec<u32> = match g.input_positions(k) {
                Some(a) => a.to_vec(),
                None => return Err("a graph built in memory has no resolved inputs".into()),
            };
            let ins: Vec<&Shape> = args
                .iter()
                .map(|&v| match v as usize {
                    v if v < n_inputs => &g.inputs[v].shape,
                    v => &g.nodes[v - n_inputs].output,
                })
                .collect();
            let out = g.nodes[k]
                .op
                .infer(&ins)
                .map_err(|m| format!("node `{}`: {m}", g.nodes[k].id))?;
            g.nodes[k].output = out;
        }
        g.positions.parameters = (g.positions.parameters + after).saturating_sub(before);
        // Binding another length would read the file's ops again.
        g.file_with_axis = None;
        Ok(g)
    }

    /// Trainable parameters, a tied weight counted once (as the check summed them, for a graph
    /// whose nodes were not added or removed since).
    pub fn parameters(&self) -> u64 {
        if self.positions.starts.len() == self.nodes.len() + 1 && !self.nodes.is_empty() {
            return self.positions.parameters;
        }
        self.nodes
            .iter()
            .map(|n| n.op.parameters())
            .fold(0u64, u64::saturating_add)
    }

    /// The implementation blocks the graph's nodes use (`Op::block`), sorted and distinct.
    pub fn blocks(&self) -> Vec<&'static str> {
        let mut b: Vec<&'static str> = self.nodes.iter().filter_map(|n| n.op.block()).collect();
        b.sort_unstable();
        b.dedup();
        b
    }

    /// False when no input has a batch axis: the graph loads, but is flagged "no batch axis".
    pub fn has_batch_axis(&self) -> bool {
        self.inputs.iter().any(|i| i.shape.has_batch())
    }

    /// Where the value `name` (a graph input or a node) is: looked up in the graph's index (a
    /// scan for a graph whose fields were changed after it was checked).
    pub fn slot_of(&self, name: &str) -> Option<Slot> {
        let names = self
            .names
            .0
            .get_or_init(|| NameIndex::of(&self.inputs, &self.nodes));
        match names.0.get(&NameIndex::key(name)) {
            Some(&Slot::Input(k)) if self.inputs.get(k).is_some_and(|i| i.name == name) => {
                return Some(Slot::Input(k))
            }
            Some(&Slot::Node(k)) if self.nodes.get(k).is_some_and(|n| n.id == name) => {
                return Some(Slot::Node(k))
            }
            _ => {}
        }
        self.inputs
            .iter()
            .position(|i| i.name == name)
            .map(Slot::Input)
            .or_else(|| self.nodes.iter().position(|n| n.id == name).map(Slot::Node))
    }

    /// Node `k`'s inputs as value positions (graph inputs `0..inputs.len()`, then node `j` at
    /// `inputs.len() + j`), as the check resolved them; None for a graph built otherwise or
    /// whose inputs or nodes were added or removed since (look the names up then).
    pub fn input_positions(&self, k: usize) -> Option<&[u32]> {
        let p = &self.positions;
        if p.n_inputs != self.inputs.len() || p.starts.len() != self.nodes.len() + 1 {
            return None;
        }
        let args = &p.args[p.starts[k] as usize..p.starts[k + 1] as usize];
        (args.len() == self.nodes[k].inputs.len()).then_some(args)
    }

    /// The nodes (by index) whose output no node reads and that are not the loss: a dead
    /// branch. Valid PyTorch, and planned as it runs (computed in forward, freed when forward
    /// returns: `tests/fixtures/sim/sim-dead-branch.json`, measured on CUDA), but often a
    /// leftover of an edit, so `memcal plan` names it.
    pub fn dead_nodes(&self) -> Vec<usize> {
        let n_inputs = self.inputs.len();
        let mut used = vec![false; self.nodes.len()];
        let by_position = (0..self.nodes.len()).all(|k| self.input_positions(k).is_some());
        if by_position {
            for k in 0..self.nodes.len() {
                for &v in self.input_positions(k).unwrap_or(&[]) {
                    if let Some(i) = (v as usize).checked_sub(n_inputs) {
                        used[i] = true;
                    }
                }
            }
        } else {
            let read: HashSet<&str> = self
                .nodes
                .iter()
                .flat_map(|n| n.inputs.iter().map(String::as_str))
                .collect();
            for (k, n) in self.nodes.iter().enumerate() {
                used[k] = read.contains(n.id.as_str());
            }
        }
        if let Some(l) = self.loss_index() {
            used[l] = true;
        }
        (0..self.nodes.len()).filter(|&k| !used[k]).collect()
    }

    /// The loss node's index (None if `loss` names no node).
    pub fn loss_index(&self) -> Option<usize> {
        let l = self.positions.loss;
        if self.nodes.get(l).is_some_and(|n| n.id == self.loss) {
            return Some(l);
        }
        match self.slot_of(&self.loss)? {
            Slot::Node(k) => Some(k),
            Slot::Input(_) => None,
        }
    }

    /// The shape of node `k`'s input `i`.
    pub fn input_shape(&self, k: usize, i: usize) -> Option<&Shape> {
        match self.input_positions(k) {
            Some(args) => {
                let v = *args.get(i)? as usize;
                Some(match v.checked_sub(self.inputs.len()) {
                    None => &self.inputs[v].shape,
                    Some(j) => &self.nodes[j].output,
                })
            }
            None => self.shape_of(self.nodes[k].inputs.get(i)?),
        }
    }

    /// The shape of a value (graph input or node output) by name.
    pub fn shape_of(&self, name: &str) -> Option<&Shape> {
        Some(match self.slot_of(name)? {
            Slot::Input(k) => &self.inputs[k].shape,
            Slot::Node(k) => &self.nodes[k].output,
        })
    }
}

/// The format tag and the names that must not be empty.
fn check_header(file: &GraphFile, path: &Path) -> Result<()> {
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
        printable(path, field, value)?;
    }
    for (i, input) in file.inputs.iter().enumerate() {
        printable(path, &format!("inputs[{i}].name"), &input.name)?;
    }
    for (i, node) in file.nodes.iter().enumerate() {
        printable(path, &format!("nodes[{i}].id"), &node.id)?;
    }
    Ok(())
}

/// A name holds no control character (a NUL, a newline ...): names are printed, compared and
/// used in file names, and such a character makes one unreadable or cut short.
fn printable(path: &Path, field: &str, value: &str) -> Result<()> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(Error::field(
            path,
            field,
            format!(
                "holds the control character U+{:04X}{}; a name is printable text: remove it",
                c as u32,
                if c == '\0' { " (NUL)" } else { "" }
            ),
        )),
        None => Ok(()),
    }
}

/// The graph inputs, checked: dimensions, int64 classes, unique names.
fn check_inputs(file: &GraphFile, path: &Path, seq: Option<u64>) -> Result<Vec<Input>> {
    let mut seen: HashSet<&str> = HashSet::default();
    let mut inputs = Vec::with_capacity(file.inputs.len());
    for (i, input) in file.inputs.iter().enumerate() {
        let field = format!("inputs[{i}]");
        let mut dims = Vec::new();
        for d in &input.shape {
            dims.push(match d {
                FileDim::Size(n) if *n > 0 => Dim::fixed(*n),
                FileDim::Symbol(s) if s == "B" => Dim::batch(),
                FileDim::Symbol(s) if s == "T" => {
                    match seq {
                        Some(n) if n > 0 => Dim::fixed(n),
                        _ => return Err(Error::field(
                            path,
                            &format!("{field}.shape"),
                            "has the sequence axis \"T\": give its length (memcal plan --seq N)",
                        )),
                    }
                }
                other => {
                    let found = match other {
                        FileDim::Size(n) => n.to_string(),
                        FileDim::Symbol(s) => format!("\"{s}\""),
                    };
                    return Err(Error::field(
                        path,
                        &format!("{field}.shape"),
                        format!(
                            "entries must be \"B\", \"T\" or a positive integer, found {found}"
                        ),
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
        if !seen.insert(&input.name) {
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
    Ok(inputs)
}

/// The file's names resolved once: every value's position (graph inputs `0..n_inputs`, then
/// node `i` of the file at `n_inputs + i`), each node's typed op, and its inputs as positions
/// (node `i`'s are `args[starts[i]..starts[i + 1]]`).
struct Resolved<'f> {
    index: FileIndex<'f>,
    ops: Vec<Op>,
    starts: Vec<u32>,
    args: Vec<u32>,
}

/// The name of a file's value `v` (graph inputs, then nodes).
fn value_name(file: &GraphFile, v: u32) -> &str {
    let v = v as usize;
    match v.checked_sub(file.inputs.len()) {
        None => &file.inputs[v].name,
        Some(i) => &file.nodes[i].id,
    }
}

/// A file's value names (graph inputs, then nodes) to their positions, keyed by each name's
/// 64-bit hash (no key is a pointer to follow); a hit is checked against the name at that
/// position, and names that share a hash with another go to `collided` (normally empty).
struct FileIndex<'f> {
    file: &'f GraphFile,
    by_hash: HashMap<u64, u32>,
    collided: HashMap<&'f str, u32>,
}

impl<'f> FileIndex<'f> {
    fn new(file: &'f GraphFile) -> FileIndex<'f> {
        let n = file.inputs.len() + file.nodes.len();
        FileIndex {
            file,
            by_hash: HashMap::with_capacity_and_hasher(n, Default::default()),
            collided: HashMap::default(),
        }
    }

    fn name(&self, v: u32) -> &'f str {
        value_name(self.file, v)
    }

    /// Adds value `v` by its name; false if the name is already there.
    fn insert(&mut self, v: u32) -> bool {
        let name = self.name(v);
        let file = self.file;
        match self.by_hash.entry(NameIndex::key(name)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(v);
                true
            }
            std::collections::hash_map::Entry::Occupied(e) => {
                if value_name(file, *e.get()) == name {
                    return false;
                }
                match self.collided.entry(name) {
                    std::collections::hash_map::Entry::Vacant(c) => {
                        c.insert(v);
                        true
                    }
                    std::collections::hash_map::Entry::Occupied(_) => false,
                }
            }
        }
    }

    fn get(&self, name: &str) -> Option<u32> {
        match self.by_hash.get(&NameIndex::key(name)) {
            Some(&v) if self.name(v) == name => Some(v),
            Some(_) => self.collided.get(name).copied(),
            None => None,
        }
    }
}

/// Types every op and resolves every input name, reporting the first problem in file order
/// (an empty or duplicate id, an unknown op, a wrong input count, an unknown input).
fn resolve<'f>(file: &'f GraphFile, n_inputs: usize, path: &Path) -> Result<Resolved<'f>> {
    let n = file.nodes.len();
    if n_inputs + n >= u32::MAX as usize {
        return Err(Error::field(
            path,
            "nodes",
            "more than 2^32 values in one graph",
        ));
    }
    let mut index = FileIndex::new(file);
    for k in 0..n_inputs {
        index.insert(k as u32);
    }
    // Every id first (an input may name a later node); the first repeated one is noted.
    let mut first_duplicate = None;
    for i in 0..n {
        if !index.insert((n_inputs + i) as u32) && first_duplicate.is_none() {
            first_duplicate = Some(i);
        }
    }
    let mut ops = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n + 1);
    let mut args = Vec::with_capacity(n + n / 2);
    starts.push(0);
    for (i, node) in file.nodes.iter().enumerate() {
        if node.id.trim().is_empty() {
            return Err(Error::field(
                path,
                &format!("nodes[{i}].id"),
                "must not be empty",
            ));
        }
        if first_duplicate == Some(i) {
            return Err(Error::node(
                path,
                &node.id,
                "duplicate id (ids and input names must be unique)",
            ));
        }
        let op =
            Op::parse(&node.op, &node.attributes).map_err(|m| Error::node(path, &node.id, m))?;
        let (lo, hi) = op.arity();
        if node.inputs.len() < lo || node.inputs.len() > hi {
            let want = if lo == hi {
                lo.to_string()
            } else if hi == usize::MAX {
                format!("at least {lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return Err(Error::node(
                path,
                &node.id,
                format!(
                    "`{}` takes {want} input(s), found {}",
                    node.op,
                    node.inputs.len()
                ),
            ));
        }
        for inp in &node.inputs {
            // Most inputs are the node just before (a chain, a block's next op): no lookup.
            let previous = i.checked_sub(1).filter(|&j| file.nodes[j].id == *inp);
            match previous
                .map(|j| (n_inputs + j) as u32)
                .or_else(|| index.get(inp))
            {
                Some(v) => args.push(v),
                None => {
                    return Err(Error::node(
                        path,
                        &node.id,
                        format!("input `{inp}` is neither a graph input nor a node"),
                    ))
                }
            }
        }
        starts.push(args.len() as u32);
        ops.push(op);
    }
    Ok(Resolved {
        index,
        ops,
        starts,
        args,
    })
}

/// Kahn's algorithm, taking ready nodes in file order: a file already in order keeps it.
fn topological_order(
    file: &GraphFile,
    r: &Resolved,
    n_inputs: usize,
    path: &Path,
) -> Result<Vec<usize>> {
    let n = file.nodes.len();
    let node_args = |i: usize| {
        r.args[r.starts[i] as usize..r.starts[i + 1] as usize]
            .iter()
            .filter(|&&v| v as usize >= n_inputs)
            .map(|&v| v as usize - n_inputs)
    };
    // Each node's users, as one flat list (`users[first[j]..first[j + 1]]` use node j).
    let mut pending = vec![0u32; n];
    let mut first = vec![0u32; n + 1];
    for (i, count) in pending.iter_mut().enumerate() {
        for j in node_args(i) {
            *count += 1;
            first[j + 1] += 1;
        }
    }
    for j in 0..n {
        first[j + 1] += first[j];
    }
    let mut fill = first.clone();
    let mut users = vec![0u32; first[n] as usize];
    for i in 0..n {
        for j in node_args(i) {
            users[fill[j] as usize] = i as u32;
            fill[j] += 1;
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
        .filter(|&i| pending[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &u in &users[first[i] as usize..first[i + 1] as usize] {
            let u = u as usize;
            pending[u] -= 1;
            if pending[u] == 0 {
                ready.push(std::cmp::Reverse(u));
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
    Ok(order)
}

/// Node `nf`'s inputs by dtype (an int64 graph input only where the op reads indices, labels or
/// its batch), and a generic node's input references (each must name an input it has).
fn check_input_kinds(
    path: &Path,
    nf: &NodeFile,
    op: &Op,
    args: &[u32],
    ins: &[&Shape],
    inputs: &[Input],
) -> Result<()> {
    let n_inputs = inputs.len();
    for (k, (&v, s)) in args.iter().zip(ins).enumerate() {
        let int_input = (v as usize) < n_inputs && inputs[v as usize].dtype == DType::Int64;
        let wants_int = op.family().wants_int_input(op, k);
        // A `constant` reads its input only for its batch: an int64 one is the padding
        // mask its attention mask is built from.
        let reads_batch = op.is_constant();
        if int_input != wants_int && !(int_input && reads_batch) {
            let name = &nf.inputs[k];
            return Err(Error::node(
                path,
                &nf.id,
                if wants_int {
                    format!("input `{name}` {s} must be an int64 graph input")
                } else {
                    format!("input `{name}` is an int64 graph input; only embedding, cross_entropy labels and constant (for its batch) take one")
                },
            ));
        }
    }
    if let Some(a) = op.as_generic() {
        let n = nf.inputs.len();
        if let Some(k) = a.tensor_refs().iter().find_map(|t| match t {
            crate::ops::generic::TensorRef::Input(k) if *k >= n => Some(*k),
            _ => None,
        }) {
            return Err(Error::node(
                path,
                &nf.id,
                format!("attribute `args`: {{\"input\": {k}}}, but the node has {n} input(s)"),
            ));
        }
    }
    Ok(())
}

/// Only a tensor made from `constant` nodes (`of_constants`) may be broadcast by a binary op to
/// its `output`, or be sdpa's mask.
fn check_constant_inputs(
    path: &Path,
    nf: &NodeFile,
    op: &Op,
    args: &[u32],
    ins: &[&Shape],
    output: &Shape,
    of_constants: &dyn Fn(u32) -> bool,
) -> Result<()> {
    if op.family().broadcasts_only_constants(op) {
        for (k, (&v, s)) in args.iter().zip(ins).enumerate() {
            if **s != *output && !of_constants(v) {
                return Err(Error::node(
                    path,
                    &nf.id,
                    format!(
                        "input `{}` {s} is broadcast to {output}: only a tensor made from `constant` nodes (no gradient) may be broadcast; give both inputs the shape {output}",
                        nf.inputs[k]
                    ),
                ));
            }
        }
    }
    if let Some(mask) = op.family().constant_only_input(op) {
        if let Some(&v) = args.get(mask) {
            if !of_constants(v) {
                return Err(Error::node(
                    path,
                    &nf.id,
                    format!(
                        "input `{}` is sdpa's mask: it must be made from `constant` nodes (a mask takes no gradient)",
                        nf.inputs[mask]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The trainable parameters of the nodes in `order`, a parameter named by several generic nodes
/// counted once; an error at the node where the count overflows.
fn count_parameters(file: &GraphFile, ops: &[Op], order: &[usize], path: &Path) -> Result<u64> {
    // Sizes saturate rather than overflow; a saturated parameter count means absurd sizes.
    let mut total = 0u64;
    let mut shared = std::collections::HashSet::new();
    for &i in order {
        let p = match ops[i].as_generic() {
            // A parameter named by several generic nodes is counted once.
            Some(a) => a
                .params
                .iter()
                .filter(|p| shared.insert(p.name.clone()))
                .map(|p| p.shape.iter().fold(1u64, |x, v| x.saturating_mul(*v)))
                .fold(0u64, u64::saturating_add),
            None => ops[i].parameters(),
        };
        match total.checked_add(p) {
            Some(t) if p != u64::MAX && t != u64::MAX => total = t,
            _ => {
                return Err(Error::node(
                    path,
                    &file.nodes[i].id,
                    "the graph's parameter count overflows 64 bits here; check this node's sizes and its input shapes",
                ))
            }
        }
    }
    Ok(total)
}

/// A cross-entropy's labels (an int64 graph input) take no more values than its logits have
/// classes (their last dimension): a label past the logits is no class at all.
fn check_label_classes(
    path: &Path,
    nf: &NodeFile,
    args: &[u32],
    ins: &[&Shape],
    inputs: &[Input],
) -> Result<()> {
    let (Some(&labels), Some(logits)) = (args.get(1), ins.first()) else {
        return Ok(());
    };
    let Some(input) = inputs.get(labels as usize) else {
        return Ok(());
    };
    let (Some(classes), Some(width)) = (input.classes, logits.last().and_then(|d| d.as_fixed()))
    else {
        return Ok(());
    };
    if classes > width {
        return Err(Error::node(
            path,
            &nf.id,
            format!(
                "its labels `{}` take {classes} classes (inputs[{labels}].classes) but the logits \
                 {logits} have {width} (their last dimension); set the input's classes to at \
                 most {width}, or widen the logits",
                input.name
            ),
        ));
    }
    Ok(())
}

/// The loss must name a node (`op`), and one that is a loss.
fn check_loss(path: &Path, loss: &str, op: Option<&Op>) -> Result<()> {
    match op {
        None => {
            return Err(Error::field(
                path,
                "loss",
                format!("names `{}`, which is not a node", loss),
            ))
        }
        Some(op) if !op.is_loss() => {
            return Err(Error::field(
                path,
                "loss",
                format!(
                    "`{}` is a `{}` node; the loss must be cross_entropy or mse",
                    loss,
                    op.name()
                ),
            ))
        }
        Some(_) => {}
    }
    Ok(())
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
        // A graph with the sequence axis "T" (the generate campaign's) is bound at 1 token
        // here; whoever plans it binds it at its own length ([`Graph::at_seq`]).
        let g = Graph::load_at(&p, Some(1))?;
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
