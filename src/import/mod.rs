//! `memcal import hf CONFIG.json`: a Hugging Face `config.json` read into a `memcal-graph/1`
//! graph, in Rust, with no download and no Python. Each supported `model_type` maps onto the
//! zoo's builder for the same architecture (`crate::zoo::sized`) at the config's sizes, so
//! the parameter count is the real model's (tested against published counts in
//! `tests/import.rs`). What the graph format cannot say about the implementation transformers
//! runs is listed in [`Imported::approximations`] and printed with the graph.

use crate::error::{Error, Result};
use crate::graph::GraphFile;
use serde_json::{Map, Value};
use std::path::Path;

mod activation;
mod decoders;
mod dropout;
mod more;
use more::{deepseek_v2, distilbert, electra, opt};
pub mod measured;

/// One supported `model_type`: what transformers class it is, and how its graph is built.
struct Kind {
    model_type: &'static str,
    /// The transformers model class the graph follows (with its head).
    class: &'static str,
    build: fn(&Config, &Options) -> Result<Built>,
    /// The config class's `attribute_map`: (alias, field) pairs transformers reads as one
    /// field (`num_hidden_layers` is BART's `encoder_layers`).
    aliases: &'static [(&'static str, &'static str)],
    /// The nodes (ids, or id prefixes before a dot) of the embeddings module when the class's
    /// `_no_split_modules` names it beside the blocks (`BertEmbeddings`, `ViTEmbeddings`):
    /// FSDP wraps it as one unit of its own ([`embeddings_unit`]); empty where it names the
    /// blocks alone.
    embeddings_unit: &'static [&'static str],
}

const GPT2_ALIASES: &[(&str, &str)] = &[
    ("hidden_size", "n_embd"),
    ("max_position_embeddings", "n_positions"),
    ("num_attention_heads", "n_head"),
    ("num_hidden_layers", "n_layer"),
];
const T5_ALIASES: &[(&str, &str)] = &[
    ("hidden_size", "d_model"),
    ("num_attention_heads", "num_heads"),
    ("num_hidden_layers", "num_layers"),
    ("head_dim", "d_kv"),
];
const BART_ALIASES: &[(&str, &str)] = &[
    ("num_attention_heads", "encoder_attention_heads"),
    ("hidden_size", "d_model"),
    ("num_hidden_layers", "encoder_layers"),
];
const MIXTRAL_ALIASES: &[(&str, &str)] = &[("num_experts", "num_local_experts")];
const DISTILBERT_ALIASES: &[(&str, &str)] = &[
    ("hidden_size", "dim"),
    ("num_attention_heads", "n_heads"),
    ("num_hidden_layers", "n_layers"),
];
const DEEPSEEK_V2_ALIASES: &[(&str, &str)] = &[("num_experts", "n_routed_experts")];

/// transformers' `BertEmbeddings` (and RoBERTa's, XLM-R's, CamemBERT's), a unit in their
/// `_no_split_modules`: the nodes `bert` draws under `embeddings.`.
const BERT_EMBEDDINGS: &[&str] = &["embeddings"];
/// transformers' `ViTEmbeddings` (patch projection, class token, position embeddings), a unit
/// in `_no_split_modules`: the nodes `vit` draws for it.
const VIT_EMBEDDINGS: &[&str] = &[
    "conv_proj",
    "flatten",
    "to_tokens",
    "class_token",
    "encoder.pos_embedding",
];

/// Every supported `model_type` (adding one touches this table and its builder).
const KINDS: &[Kind] = &[
    Kind {
        model_type: "gpt2",
        class: "GPT2LMHeadModel",
        build: gpt2,
        aliases: GPT2_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "llama",
        class: "LlamaForCausalLM",
        build: llama,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "mistral",
        class: "MistralForCausalLM",
        build: llama,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "mixtral",
        class: "MixtralForCausalLM",
        build: mixtral,
        aliases: MIXTRAL_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "qwen2",
        class: "Qwen2ForCausalLM",
        build: qwen2,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "qwen3",
        class: "Qwen3ForCausalLM",
        build: qwen3,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "gemma",
        class: "GemmaForCausalLM",
        build: gemma,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "bert",
        class: "BertModel (with its pooler)",
        build: bert,
        aliases: &[],
        embeddings_unit: BERT_EMBEDDINGS,
    },
    Kind {
        model_type: "roberta",
        class: "RobertaModel (with its pooler)",
        build: bert,
        aliases: &[],
        embeddings_unit: BERT_EMBEDDINGS,
    },
    // transformers' XLMRobertaModel is RoBERTa's code (modeling_xlm_roberta.py is generated
    // from modeling_roberta.py): the same graph, at XLM-R's vocabulary.
    Kind {
        model_type: "xlm-roberta",
        class: "XLMRobertaModel (with its pooler)",
        build: bert,
        aliases: &[],
        embeddings_unit: BERT_EMBEDDINGS,
    },
    // CamembertModel is RoBERTa's code too (modeling_camembert.py is generated from
    // modeling_roberta.py).
    Kind {
        model_type: "camembert",
        class: "CamembertModel (with its pooler)",
        build: bert,
        aliases: &[],
        embeddings_unit: BERT_EMBEDDINGS,
    },
    Kind {
        model_type: "opt",
        class: "OPTForCausalLM",
        build: opt,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "distilbert",
        class: "DistilBertModel",
        build: distilbert,
        aliases: DISTILBERT_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "electra",
        class: "ElectraModel",
        build: electra,
        aliases: &[],
        embeddings_unit: &[],
    },
    Kind {
        model_type: "deepseek_v2",
        class: "DeepseekV2ForCausalLM",
        build: deepseek_v2,
        aliases: DEEPSEEK_V2_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "t5",
        class: "T5ForConditionalGeneration",
        build: t5,
        aliases: T5_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "bart",
        class: "BartForConditionalGeneration",
        build: bart,
        aliases: BART_ALIASES,
        embeddings_unit: &[],
    },
    Kind {
        model_type: "vit",
        class: "ViTForImageClassification",
        build: vit,
        aliases: &[],
        embeddings_unit: VIT_EMBEDDINGS,
    },
];

/// The embeddings unit FSDP wraps in a graph of `family` (`hf-<model_type>`, as `import hf`
/// names it): [`Kind::embeddings_unit`]; empty for any other family.
pub fn embeddings_unit(family: &str) -> &'static [&'static str] {
    KINDS
        .iter()
        .find(|k| family.strip_prefix("hf-") == Some(k.model_type))
        .map_or(&[], |k| k.embeddings_unit)
}

/// The model types `memcal import hf` reads.
pub fn supported() -> Vec<&'static str> {
    KINDS
        .iter()
        .map(|k| k.model_type)
        .chain(decoders::DECODERS.iter().map(|d| d.model_type))
        .collect()
}

/// How a model type is built: its own function, or a decoder described in the table
/// ([`decoders::DECODERS`]).
enum Builds {
    Own(&'static Kind),
    Table(&'static decoders::Desc),
}

impl Builds {
    fn find(model_type: &str) -> Option<Builds> {
        KINDS
            .iter()
            .find(|k| k.model_type == model_type)
            .map(Builds::Own)
            .or_else(|| {
                decoders::DECODERS
                    .iter()
                    .find(|d| d.model_type == model_type)
                    .map(Builds::Table)
            })
    }

    fn class(&self) -> &'static str {
        match self {
            Builds::Own(k) => k.class,
            Builds::Table(d) => d.class,
        }
    }

    fn aliases(&self) -> &'static [(&'static str, &'static str)] {
        match self {
            Builds::Own(k) => k.aliases,
            Builds::Table(d) => d.aliases,
        }
    }

    fn build(&self, c: &Config, o: &Options) -> Result<Built> {
        match self {
            Builds::Own(k) => (k.build)(c, o),
            Builds::Table(d) => decoders::build(d, c, o),
        }
    }
}

/// What an unknown model type's refusal says: memcal's exporter traces the config's own
/// transformers class (torch and transformers needed), with the exact command for `path`.
fn exporter_route(path: &Path, map: &Map<String, Value>, model_type: &str) -> String {
    let vocab = map
        .get("vocab_size")
        .and_then(Value::as_u64)
        .map_or("VOCAB".to_string(), |v| v.to_string());
    let name = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("model");
    let family = if model_type.is_empty() {
        "hf-model".to_string()
    } else {
        format!("hf-{model_type}")
    };
    format!(
        "trace it with memcal's exporter instead (torch and transformers; exporter/README.md): `PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m memcal_export --hf-config {} --input input_ids=B,1024:int64:{vocab} --name {name} --family {family} --out {name}.json`, or write the graph by hand (docs/graph-format.md)",
        path.display()
    )
}

/// Choices the config does not fix.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Sequence length (tokens); None: the type's default, printed.
    pub seq: Option<u64>,
    /// Decoder sequence length of an encoder-decoder; None: as `seq`.
    pub decoder_seq: Option<u64>,
    /// The graph's name (and family `hf-<model_type>` unless `family` is given).
    pub name: String,
    pub family: Option<String>,
    /// Write the sequence length as the axis `"T"` (planned with `memcal plan --seq N`)
    /// instead of a number.
    pub seq_axis: bool,
    /// The attention implementation transformers is asked for (`attn_implementation`);
    /// default: sdpa, transformers' default for every class that supports it.
    pub attn: Attn,
}

/// transformers' `attn_implementation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Attn {
    /// `torch.nn.functional.scaled_dot_product_attention` (no padding mask: torch's flash
    /// kernel, which saves no `[B, heads, T, T]` tensor).
    #[default]
    Sdpa,
    /// The eager form: softmax(QKᵀ/√d) materialised and saved.
    Eager,
}

impl Attn {
    pub fn as_str(self) -> &'static str {
        match self {
            Attn::Sdpa => "sdpa",
            Attn::Eager => "eager",
        }
    }
}

/// Draws the grouped-query attention of a llama-family graph as transformers' attention
/// `attn` runs it, and says how: sdpa without a padding mask passes `enable_gqa=True` on the
/// unrepeated k and v (`use_gqa_in_sdpa`: torch >= 2.5, no attention mask); eager repeats k
/// and v to every head (`repeat_kv`), and also materialises the scores, which the graph's
/// `gqa_attention` does not draw (an approximation, returned second).
fn gqa(graph: &mut GraphFile, attn: Attn) -> (String, Option<String>) {
    let repeat = attn == Attn::Eager;
    for n in graph.nodes.iter_mut().filter(|n| n.op == "gqa_attention") {
        n.attributes.insert("repeat_kv".into(), Value::from(repeat));
    }
    match attn {
        Attn::Sdpa => ("attention: sdpa without a padding mask (transformers' default): enable_gqa on the unrepeated k and v, torch's flash kernel".into(), None),
        Attn::Eager => (
            "attention: eager: k and v repeated to every head (repeat_kv)".into(),
            Some("eager attention's [B, heads, T, T] probabilities are not drawn: the graph's gqa_attention runs sdpa on the repeated k and v".into()),
        ),
    }
}

/// transformers 5's experts on every `moe` node: the 3-D `gate_up_proj`/`down_proj` run by
/// `grouped_mm_experts_forward` (integrations/moe.py: the default `_experts_implementation`,
/// `get_correct_experts_implementation` picks "grouped_mm"), the top-k weights renormalised
/// when `renormalize`. Returns what the import says it drew.
fn grouped_experts(graph: &mut GraphFile, renormalize: bool) -> String {
    for n in graph.nodes.iter_mut().filter(|n| n.op == "moe") {
        n.attributes.insert("layout".into(), Value::from("grouped"));
        n.attributes
            .insert("renormalize".into(), Value::from(renormalize));
    }
    format!(
        "experts: transformers' grouped_mm layout (3-D gate_up_proj [E, 2 x hidden, d] and down_proj [E, d, hidden]; the routed rows sorted by expert, so the memory does not depend on how the tokens split); top-k weights {}",
        if renormalize {
            "renormalised to sum to one"
        } else {
            "not renormalised"
        }
    )
}

/// The activation (`hidden_act`, default exact `gelu`), attention and hidden dropout
/// (`hidden_dropout_prob`, default `dropout_default`, after the nodes `at` accepts) of a bert,
/// roberta or vit graph, drawn as transformers runs them.
fn encoder_choices(
    c: &Config,
    graph: &mut GraphFile,
    o: &Options,
    dropout_default: f64,
    at: fn(&str) -> bool,
) -> Result<Vec<String>> {
    let p = c.probability_or("hidden_dropout_prob", dropout_default)?;
    let n = dropout::after(graph, p, at);
    let attn_p = c.probability_or("attention_probs_dropout_prob", dropout_default)?;
    let mut said = vec![activation(c, graph, "hidden_act", "gelu")?];
    said.extend(attention(graph, o.attn, attn_p));
    said.push(dropout::said(
        "hidden_dropout_prob",
        p,
        n,
        "after the embeddings and each layer's attention and output projections",
    ));
    Ok(said)
}

/// Draws the self-attention of a gpt2, bert, roberta or vit graph as `attn` (every
/// `multihead_attention` node takes `backend`), with sdpa's training dropout `p` (the
/// config's attention dropout), and says how.
fn attention(graph: &mut GraphFile, attn: Attn, p: f64) -> Vec<String> {
    for n in graph
        .nodes
        .iter_mut()
        .filter(|n| n.op == "multihead_attention")
    {
        n.attributes
            .insert("backend".into(), Value::from(attn.as_str()));
    }
    let mut said = vec![attention_said(attn)];
    said.extend(attention_dropout(graph, p));
    said
}

/// Draws dropout `p` on every `multihead_attention`'s probabilities (training), and says how.
fn attention_dropout(graph: &mut GraphFile, p: f64) -> Option<String> {
    if p <= 0.0 {
        return None;
    }
    let mut sdpa = false;
    for n in graph
        .nodes
        .iter_mut()
        .filter(|n| n.op == "multihead_attention")
    {
        sdpa |= n.attributes.get("backend").and_then(Value::as_str) == Some("sdpa");
        n.attributes.insert("dropout".into(), Value::from(p));
    }
    Some(if sdpa {
        format!("attention dropout {p} (model.train()): sdpa's dropout_p; on CPU torch's flash kernel takes no dropout, so sdpa runs its math path and keeps the [B, heads, T, T] probabilities, dropout mask and output; CUDA's flash kernel keeps only its RNG state")
    } else {
        format!("attention dropout {p} (model.train()) on the eager probabilities: a float mask and the dropped probabilities are kept beside them")
    })
}

fn attention_said(attn: Attn) -> String {
    match attn {
        Attn::Sdpa => "attention: sdpa (transformers' default attn_implementation; no padding mask, so torch's flash kernel unless dropout is on: it saves q, k, v, the output and a [B, heads, T] logsumexp, no [B, heads, T, T] tensor)".into(),
        Attn::Eager => "attention: eager (attn_implementation=\"eager\": the [B, heads, T, T] probabilities are saved)".into(),
    }
}

/// The inputs whose second axis is the sequence (the names the zoo's builders give them).
const SEQUENCE_INPUTS: [&str; 5] = [
    "tokens",
    "labels",
    "input_ids",
    "token_type_ids",
    "decoder_input_ids",
];

/// An imported graph, with what it assumed.
#[derive(Debug, Clone)]
pub struct Imported {
    pub graph: GraphFile,
    pub model_type: String,
    pub class: &'static str,
    /// The sequence length used, and where it came from.
    pub seq: u64,
    pub seq_source: String,
    /// Where the graph differs from what transformers runs for this config (memory, not
    /// parameters).
    pub approximations: Vec<String>,
    /// How the implementation choices the config makes are drawn (the activation).
    pub drawn: Vec<String>,
}

struct Built {
    graph: GraphFile,
    seq: u64,
    seq_source: String,
    approximations: Vec<String>,
    drawn: Vec<String>,
}

/// A config file's fields, each read with an error that names the file and the field.
struct Config<'a> {
    path: &'a Path,
    map: &'a Map<String, Value>,
}

impl Config<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// A positive integer field.
    fn size(&self, field: &str) -> Result<u64> {
        match self.get(field) {
            Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                Error::field(
                    self.path,
                    field,
                    format!("must be a positive integer, found {v}"),
                )
            }),
            None => Err(Error::field(
                self.path,
                field,
                "missing; a config of this model_type has it (copy the model's config.json whole)",
            )),
        }
    }

    /// A positive integer field, or `default` when it is absent or null.
    fn size_or(&self, field: &str, default: u64) -> Result<u64> {
        match self.get(field) {
            None => Ok(default),
            Some(_) => self.size(field),
        }
    }

    fn flag_or(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(Error::field(
                self.path,
                field,
                format!("must be true or false, found {v}"),
            )),
        }
    }

    /// A probability field (dropout rates), in [0, 1).
    fn probability_or(&self, field: &str, default: f64) -> Result<f64> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|p| (0.0..1.0).contains(p))
                .ok_or_else(|| {
                    Error::field(
                        self.path,
                        field,
                        format!("must be a probability in [0, 1), found {v}"),
                    )
                }),
        }
    }

    fn text_or<'s>(&'s self, field: &str, default: &'s str) -> Result<&'s str> {
        match self.get(field) {
            None => Ok(default),
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(Error::field(
                self.path,
                field,
                format!("must be a string, found {v}"),
            )),
        }
    }

    /// Refuses a config whose `field` is not `want` (what the graph can express).
    fn require<T: PartialEq + std::fmt::Display>(
        &self,
        field: &str,
        found: T,
        want: T,
        why: &str,
    ) -> Result<()> {
        if found == want {
            return Ok(());
        }
        Err(Error::field(
            self.path,
            field,
            format!("is {found}; memcal's graph for this model type needs {want} ({why}), so this config cannot be imported yet"),
        ))
    }
}

/// The config file `memcal import hf` reads for `path`: `path` itself, or a model folder's
/// `config.json`.
pub fn config_file(path: &Path) -> std::path::PathBuf {
    if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    }
}

/// Reads `config.json` (or the `config.json` of a model's folder) and builds its graph.
pub fn hf(path: &Path, options: &Options) -> Result<Imported> {
    let config = config_file(path);
    if path.is_dir() && !config.is_file() {
        return Err(Error::Invalid(format!(
            "{}: a folder without a config.json; give the model's config.json (the file the hub serves beside its weights)",
            path.display()
        )));
    }
    hf_fields(&config, &read_config(&config)?, options)
}

/// A Hugging Face `config.json`'s fields; a file that is not a JSON object is an input error
/// naming it.
pub(crate) fn read_config(path: &Path) -> Result<Map<String, Value>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        what: "Hugging Face config",
        message: format!("{e}; give the model's config.json as it is on the hub"),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(Error::Parse {
            path: path.to_path_buf(),
            what: "Hugging Face config",
            message: "not a JSON object; give the model's config.json".into(),
        }),
    }
}

/// [`hf`] of a config already read: `map`'s fields, errors naming `path`.
pub fn hf_fields(path: &Path, map: &Map<String, Value>, options: &Options) -> Result<Imported> {
    let raw = Config { path, map };
    let model_type = raw.text_or("model_type", "")?;
    let Some(kind) = Builds::find(model_type) else {
        let found = if model_type.is_empty() {
            "missing".to_string()
        } else {
            format!("`{model_type}`")
        };
        return Err(Error::field(
            path,
            "model_type",
            format!(
                "{found}; memcal imports {}; {}",
                supported().join(", "),
                exporter_route(path, map, model_type)
            ),
        ));
    };
    let resolved = resolve_aliases(path, map, kind.aliases())?;
    let config = Config {
        path,
        map: &resolved,
    };
    let built = kind.build(&config, options)?;
    let mut graph = built.graph;
    if options.seq_axis {
        symbolic_sequence(&mut graph, model_type, built.seq, options)
            .map_err(|m| Error::Invalid(format!("{}: --seq-axis: {m}", path.display())))?;
    }
    graph.name = options.name.clone();
    graph.family = options
        .family
        .clone()
        .unwrap_or_else(|| format!("hf-{model_type}"));
    graph.variant = "imported".into();
    graph.cut_from = None;
    graph.description = Some(format!(
        "imported from a Hugging Face config ({}, model_type {model_type}) at sequence length {}: {}",
        kind.class(),
        built.seq,
        graph.description.clone().unwrap_or_default()
    ));
    // What the drawing approximates is written into the graph, so `memcal plan` prints it
    // (first, in --json and on the page) wherever the graph goes, not only on import's stderr.
    graph.notes = built
        .approximations
        .iter()
        .map(|text| crate::graph::GraphNote {
            node: None,
            text: text.clone(),
        })
        .collect();
    Ok(Imported {
        graph,
        model_type: model_type.to_string(),
        class: kind.class(),
        seq: built.seq,
        seq_source: built.seq_source,
        approximations: built.approximations,
        drawn: built.drawn,
    })
}

/// The config with each alias read as its field, as transformers' `attribute_map` reads it; an
/// alias and its field that disagree are an input error (which one the model gets depends on
/// the order of the keys).
fn resolve_aliases(
    path: &Path,
    map: &Map<String, Value>,
    aliases: &[(&str, &str)],
) -> Result<Map<String, Value>> {
    let mut out = map.clone();
    for (alias, field) in aliases {
        let Some(a) = map.get(*alias).filter(|v| !v.is_null()) else {
            continue;
        };
        match map.get(*field).filter(|v| !v.is_null()) {
            Some(f) if f != a => {
                return Err(Error::field(
                    path,
                    alias,
                    format!("is {a}, but `{field}` is {f}: transformers reads `{alias}` as `{field}` (the config class's attribute_map), so the model gets whichever comes last; make them equal"),
                ))
            }
            Some(_) => {}
            None => {
                out.insert(field.to_string(), a.clone());
            }
        }
    }
    Ok(out)
}

/// Writes the sequence axis of the graph's token inputs as `"T"`.
fn symbolic_sequence(
    graph: &mut GraphFile,
    model_type: &str,
    seq: u64,
    options: &Options,
) -> std::result::Result<(), String> {
    if model_type == "vit" {
        return Err("a ViT's tokens follow from its image size; it has no sequence axis".into());
    }
    if graph
        .nodes
        .iter()
        .any(|n| n.op == "constant" || n.op == "expand")
    {
        return Err(format!("{model_type}'s graph draws tensors sized by the sequence length (rotary cos and sin tables, the causal mask, repeated k and v: `constant` and `expand` nodes of {seq} tokens), which take no axis \"T\"; give --seq N instead"));
    }
    if options.decoder_seq.is_some_and(|d| d != seq) {
        return Err("the decoder's length differs from the encoder's; one axis \"T\" cannot be both (leave out --decoder-seq)".into());
    }
    for input in &mut graph.inputs {
        if SEQUENCE_INPUTS.contains(&input.name.as_str()) && input.shape.len() == 2 {
            input.shape[1] = crate::graph::FileDim::Symbol("T".into());
        }
    }
    // The builders' `aten` nodes (OLMo's bare LayerNorm, Qwen2-MoE's gate product) write their
    // `[B, T, ...]` output shapes with the length; the axis is "T" there too.
    let seq_axis = |shape: &mut Value| {
        if let Some(dim) = shape.as_array_mut().and_then(|a| a.get_mut(1)) {
            if dim.as_u64() == Some(seq) {
                *dim = Value::from("T");
            }
        }
    };
    for node in graph.nodes.iter_mut().filter(|n| n.op == "aten") {
        for (key, value) in node.attributes.iter_mut() {
            match (key.as_str(), value) {
                ("shape", shape) => seq_axis(shape),
                ("outputs", Value::Array(outputs)) => {
                    outputs
                        .iter_mut()
                        .filter_map(|o| o.get_mut("shape"))
                        .for_each(seq_axis);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A config's `sliding_window` (transformers builds a sliding cache layer for every layer of a
/// type that sets one: `get_layer_types_and_kwargs`), written on each attention node
/// (`gqa_attention`, or a causal `sdpa` drawn op by op) as `sliding_window` where it can act: a
/// graph with the sequence axis, or a window shorter than the drawn length (a graph drawn at
/// `seq` <= W never slides at its length, and is left as it was). Said in `drawn`; a window
/// shorter than the length is an approximation of the training forward (full causal attention
/// drawn where transformers gives sdpa a banded mask).
fn sliding_layers(
    c: &Config,
    o: &Options,
    graph: &mut GraphFile,
    seq: u64,
) -> Result<(Option<String>, Option<String>)> {
    let Some(w) = c.get("sliding_window").filter(|v| !v.is_null()) else {
        return Ok((None, None));
    };
    let w = w.as_u64().filter(|&w| w > 0).ok_or_else(|| {
        Error::field(
            c.path,
            "sliding_window",
            "must be a positive whole number of tokens or null",
        )
    })?;
    if !o.seq_axis && w >= seq {
        return Ok((
            Some(format!("sliding_window = {w}: not written (the graph is drawn at {seq} tokens, where no layer slides; import with --seq-axis to plan inference past it)")),
            None,
        ));
    }
    let mut n = 0;
    for node in &mut graph.nodes {
        let causal_sdpa = node.op == "sdpa"
            && node.attributes.get("causal").and_then(|v| v.as_bool()) == Some(true);
        if node.op == "gqa_attention" || causal_sdpa {
            node.attributes
                .insert("sliding_window".into(), Value::from(w));
            n += 1;
        }
    }
    let drawn = format!("sliding_window = {w} on {n} attention layers: transformers' cache keeps each layer's last {} tokens (the inference formula and the generate rule set read it)", w - 1);
    let approx = (w < seq).then(|| format!("sliding-window attention (sliding_window = {w} < T = {seq}): the training forward is drawn as full causal attention (transformers gives sdpa a banded mask, so not the flash kernel)"));
    Ok((Some(drawn), approx))
}

/// The sequence length: `--seq`, else the type's default (`field`'s value capped at `cap`).
fn sequence(
    c: &Config,
    o: &Options,
    field: &str,
    cap: u64,
    fallback: u64,
) -> Result<(u64, String)> {
    if let Some(s) = o.seq {
        return Ok((s, "--seq".into()));
    }
    let max = c.size_or(field, fallback)?;
    if max > cap {
        Ok((
            cap,
            format!("the default: {field} = {max} capped at {cap}; --seq to choose"),
        ))
    } else {
        Ok((max, format!("{field}; --seq to choose")))
    }
}

/// A learned position table of `positions` rows holds at most that many tokens.
fn within(c: &Config, field: &str, seq: u64, positions: u64) -> Result<()> {
    if seq > positions {
        return Err(Error::Invalid(format!(
            "{}: --seq {seq} is longer than the model's {positions} learned positions (field `{field}`); give --seq {positions} or less",
            c.path.display()
        )));
    }
    Ok(())
}

/// Draws the activation the config names in `field` (default `default`, transformers'
/// default for the class) as transformers runs it ([`activation::apply`]), and says how.
fn activation(c: &Config, graph: &mut GraphFile, field: &str, default: &str) -> Result<String> {
    let act = c.text_or(field, default)?;
    let said = activation::apply(graph, act)
        .map_err(|e| Error::Invalid(format!("{}: field `{field}`: {e}", c.path.display())))?;
    Ok(format!("activation ({field}): {said}"))
}

fn gpt2(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("n_embd")?;
    let positions = c.size("n_positions")?;
    let (seq, seq_source) = sequence(c, o, "n_positions", positions, positions)?;
    within(c, "n_positions", seq, positions)?;
    let ff = c.size_or("n_inner", 4 * d)?;
    let approximations = Vec::new();
    let mut graph = crate::zoo::sized::gpt2(
        c.size("vocab_size")?,
        positions,
        seq,
        d,
        c.size("n_layer")?,
        c.size("n_head")?,
        ff,
    );
    // GPT2Config's default is `gelu_new`, written out in Python (NewGELUActivation).
    let mut drawn = vec![activation(
        c,
        &mut graph,
        "activation_function",
        "gelu_new",
    )?];
    drawn.extend(attention(
        &mut graph,
        o.attn,
        c.probability_or("attn_pdrop", 0.1)?,
    ));
    // GPT2Model: drop(wte + wpe); each block's resid_dropout after c_proj, and the MLP's
    // dropout after its c_proj.
    let embd = c.probability_or("embd_pdrop", 0.1)?;
    let n = dropout::after(&mut graph, embd, |id| id == "wpe");
    drawn.push(dropout::said("embd_pdrop", embd, n, "after the embeddings"));
    let resid = c.probability_or("resid_pdrop", 0.1)?;
    let n = dropout::after(&mut graph, resid, |id| {
        dropout::in_block(id, "h", ".attn") || dropout::in_block(id, "h", ".mlp.proj")
    });
    drawn.push(dropout::said(
        "resid_pdrop",
        resid,
        n,
        "after each block's attention and MLP projections",
    ));
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations,
        drawn,
    })
}

/// The attention and head choices a LLaMA-family config may make that the graph cannot.
fn decoder_checks(c: &Config, d: u64, heads: u64, tied_allowed: bool) -> Result<()> {
    c.require(
        "attention_bias",
        c.flag_or("attention_bias", false)?,
        false,
        "projections without bias",
    )?;
    c.require(
        "mlp_bias",
        c.flag_or("mlp_bias", false)?,
        false,
        "a feed-forward without bias",
    )?;
    if !tied_allowed {
        c.require(
            "tie_word_embeddings",
            c.flag_or("tie_word_embeddings", false)?,
            false,
            "an untied LM head",
        )?;
    }
    c.require(
        "hidden_act",
        c.text_or("hidden_act", "silu")?,
        "silu",
        "a SwiGLU feed-forward",
    )?;
    c.require(
        "head_dim",
        c.size_or("head_dim", d / heads)?,
        d / heads,
        "hidden_size / num_attention_heads per head",
    )
}

fn llama(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    decoder_checks(c, d, heads, true)?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, 2048)?;
    // Llama 3.2 (1B, 3B) ties the LM head to the embedding (LlamaConfig's default: false).
    let tied = c.flag_or("tie_word_embeddings", false)?;
    let sizes = (
        c.size("vocab_size")?,
        c.size("num_hidden_layers")?,
        c.size_or("num_key_value_heads", heads)?,
        c.size("intermediate_size")?,
    );
    let (vocab, layers, kv_heads, ff) = sizes;
    let mut graph = if tied {
        crate::zoo::sized::llama_tied(vocab, seq, d, layers, [heads, kv_heads], ff)
    } else {
        crate::zoo::sized::llama(vocab, seq, d, layers, heads, kv_heads, ff)
    };
    let (drawn, eager) = gqa(&mut graph, o.attn);
    let (window, window_approx) = sliding_layers(c, o, &mut graph, seq)?;
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: std::iter::once(ROTARY.to_string())
            .chain(eager)
            .chain(window_approx)
            .collect(),
        drawn: [drawn, lm_head_drawn(tied)]
            .into_iter()
            .chain(window)
            .collect(),
    })
}

fn mixtral(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    decoder_checks(c, d, heads, false)?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, 4096)?;
    let mut graph = crate::zoo::sized::mixtral(
        c.size("vocab_size")?,
        seq,
        d,
        c.size("num_hidden_layers")?,
        heads,
        c.size_or("num_key_value_heads", heads)?,
        c.size_or("num_local_experts", 8)?,
        c.size("intermediate_size")?,
        c.size_or("num_experts_per_tok", 2)?,
    );
    let (drawn, eager) = gqa(&mut graph, o.attn);
    // MixtralTopKRouter renormalises the top-k values (`router_top_value /= ...sum(...)`).
    let experts = grouped_experts(&mut graph, true);
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: std::iter::once(
            "rotary position tables and the causal mask are not drawn".to_string(),
        )
        .chain(eager)
        .collect(),
        drawn: vec![drawn, experts],
    })
}

/// What a decoder's import says of its LM head.
fn lm_head_drawn(tied: bool) -> String {
    format!(
        "LM head: {} (tie_word_embeddings = {tied})",
        if tied {
            "the embedding's table"
        } else {
            "its own matrix"
        }
    )
}

/// The rotary tables and the causal mask every LLaMA-like import leaves out.
const ROTARY: &str =
    "rotary position tables and the causal mask are not drawn (a few [T, head_dim] and [T, T] tensors)";

/// A Qwen decoder as transformers builds it: a SwiGLU feed-forward, full causal attention in
/// every layer, `head_dim` from the config (else `head_dim_default`), the LM head tied when
/// `tie_word_embeddings`; Qwen2's biased q, k and v (o_proj unbiased) until the caller redraws
/// the projections.
struct Qwen {
    graph: GraphFile,
    seq: u64,
    seq_source: String,
    tied: bool,
    /// layers, d, heads, kv heads, head_dim, feed-forward, vocabulary.
    sizes: [u64; 7],
}

fn qwen_decoder(
    c: &Config,
    o: &Options,
    head_dim_default: Option<u64>,
    seq_fallback: u64,
) -> Result<Qwen> {
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    c.require(
        "hidden_act",
        c.text_or("hidden_act", "silu")?,
        "silu",
        "a SwiGLU feed-forward",
    )?;
    c.require(
        "use_sliding_window",
        c.flag_or("use_sliding_window", false)?,
        false,
        "full causal attention in every layer",
    )?;
    let tied = c.flag_or("tie_word_embeddings", false)?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, seq_fallback)?;
    let sizes = [
        c.size("num_hidden_layers")?,
        d,
        heads,
        c.size_or("num_key_value_heads", heads)?,
        c.size_or("head_dim", head_dim_default.unwrap_or(d / heads))?,
        c.size("intermediate_size")?,
        c.size("vocab_size")?,
    ];
    let [layers, _, _, kv_heads, head_dim, ff, vocab] = sizes;
    let graph =
        crate::zoo::sized::qwen2(vocab, seq, d, layers, [heads, kv_heads, head_dim], ff, tied);
    Ok(Qwen {
        graph,
        seq,
        seq_source,
        tied,
        sizes,
    })
}

impl Qwen {
    /// What the import says: its projections (`projections`), the attention, the head.
    fn built(mut self, o: &Options, projections: String) -> Built {
        let (attention, eager) = gqa(&mut self.graph, o.attn);
        let tied = self.tied;
        Built {
            graph: self.graph,
            seq: self.seq,
            seq_source: self.seq_source,
            approximations: std::iter::once(ROTARY.to_string()).chain(eager).collect(),
            drawn: vec![projections, attention, lm_head_drawn(tied)],
        }
    }
}

/// Qwen2 (`modeling_qwen2.py`): LLaMA's layers with `bias=True` on q_proj, k_proj and v_proj
/// and `bias=False` on o_proj, `head_dim` from the config or hidden_size / heads, the LM head
/// tied to the embedding when `tie_word_embeddings` (Qwen2Config's default: false).
fn qwen2(c: &Config, o: &Options) -> Result<Built> {
    Ok(qwen_decoder(c, o, None, 32768)?.built(
        o,
        "attention projections: q, k and v with a bias, o_proj without (gqa_attention bias \"qkv\")".into(),
    ))
}

/// Qwen3 (`modeling_qwen3.py`): Qwen2's layers with `attention_bias` (Qwen3Config's default:
/// false) on all four projections, `head_dim` from the config (default 128), and q and k
/// RMS-normalized per head (`q_norm`, `k_norm` over head_dim: gqa_attention `qk_norm`).
fn qwen3(c: &Config, o: &Options) -> Result<Built> {
    let bias = c.flag_or("attention_bias", false)?;
    let mut q = qwen_decoder(c, o, Some(128), 40960)?;
    for n in q.graph.nodes.iter_mut().filter(|n| n.op == "gqa_attention") {
        n.attributes.insert("qk_norm".into(), Value::from(true));
        n.attributes.insert("bias".into(), Value::from(bias));
    }
    let [layers, d, heads, kv_heads, head_dim, ff, vocab] = q.sizes;
    q.graph.description = Some(format!(
        "Qwen3 decoder: {layers} layers, d={d}, {heads} heads of {head_dim} ({kv_heads} kv heads, per-head q/k RMS norms{}), SwiGLU {ff}, RMSNorm, T={}, vocab {vocab}, {} LM head",
        if bias { ", biased projections" } else { "" },
        q.seq,
        if q.tied { "tied" } else { "untied" }
    ));
    let projections = format!(
        "attention projections: {} (attention_bias = {bias}); q_norm and k_norm per head (gqa_attention qk_norm)",
        if bias { "all four with a bias" } else { "without bias" }
    );
    Ok(q.built(o, projections))
}

/// Gemma (`modeling_gemma.py`): the embedding's output times sqrt(hidden_size), `head_dim`
/// heads (Gemma-7B: 16 x 256 = 4096 on a width of 3072), a gated feed-forward through
/// `hidden_act` (GemmaConfig's default `gelu_pytorch_tanh`; the released configs' `"gelu"`
/// is read as `gelu_pytorch_tanh`, GemmaConfig.__post_init__ in transformers 5, after
/// transformers PR 29402), GemmaRMSNorm, the LM head tied to the embedding.
fn gemma(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    c.require(
        "attention_bias",
        c.flag_or("attention_bias", false)?,
        false,
        "projections without bias",
    )?;
    c.require(
        "tie_word_embeddings",
        c.flag_or("tie_word_embeddings", true)?,
        true,
        "a tied LM head",
    )?;
    c.require(
        "use_bidirectional_attention",
        c.flag_or("use_bidirectional_attention", false)?,
        false,
        "causal attention",
    )?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, 8192)?;
    let mut graph = crate::zoo::sized::gemma(
        c.size("vocab_size")?,
        seq,
        d,
        c.size("num_hidden_layers")?,
        [
            heads,
            c.size_or("num_key_value_heads", heads)?,
            c.size_or("head_dim", 256)?,
        ],
        c.size("intermediate_size")?,
    );
    let named = c.text_or("hidden_act", "gelu_pytorch_tanh")?;
    let act = if named == "gelu" {
        "gelu_pytorch_tanh"
    } else {
        named
    };
    let said = activation::apply(&mut graph, act)
        .map_err(|e| Error::Invalid(format!("{}: field `hidden_act`: {e}", c.path.display())))?;
    let act = if named == "gelu" {
        format!("activation (hidden_act): \"gelu\", which GemmaConfig reads as gelu_pytorch_tanh (the released configs' legacy value): {said}")
    } else {
        format!("activation (hidden_act): {said}")
    };
    let (attention, eager) = gqa(&mut graph, o.attn);
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: [
            ROTARY.to_string(),
            "GemmaRMSNorm multiplies by (1 + weight) in float32: drawn as rms_norm (the same tensors saved, less a [d] temporary)".to_string(),
        ]
        .into_iter()
        .chain(eager)
        .collect(),
        drawn: vec![
            format!(
                "embedding scale: the embedding's output times sqrt(hidden_size) = {:.4} (a mul_scalar op)",
                (d as f64).sqrt()
            ),
            act,
            attention,
        ],
    })
}

fn bert(c: &Config, o: &Options) -> Result<Built> {
    let roberta = matches!(
        c.text_or("model_type", "")?,
        "roberta" | "xlm-roberta" | "camembert"
    );
    let positions = c.size("max_position_embeddings")?;
    // RoBERTa's positions start after the padding index: two rows are never used for tokens.
    let usable = if roberta {
        positions.saturating_sub(2).max(1)
    } else {
        positions
    };
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", usable.min(512), usable)?;
    within(c, "max_position_embeddings", seq, usable)?;
    c.require(
        "position_embedding_type",
        c.text_or("position_embedding_type", "absolute")?,
        "absolute",
        "learned absolute positions",
    )?;
    let approximations = Vec::new();
    let mut graph = crate::zoo::sized::bert(
        c.size("vocab_size")?,
        c.size_or("type_vocab_size", 2)?,
        positions,
        seq,
        c.size("hidden_size")?,
        c.size("num_hidden_layers")?,
        c.size("num_attention_heads")?,
        c.size("intermediate_size")?,
    );
    // BertEmbeddings: dropout(LayerNorm(...)); BertSelfOutput and BertOutput: dropout after
    // the dense projection, before the residual LayerNorm. BertConfig's default is 0.1.
    let drawn = encoder_choices(c, &mut graph, o, 0.1, |id| {
        id == "embeddings.layer_norm"
            || dropout::in_block(id, "encoder.layer", ".attention")
            || dropout::in_block(id, "encoder.layer", ".output")
    })?;
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations,
        drawn,
    })
}

fn t5(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("d_model")?;
    let heads = c.size("num_heads")?;
    let layers = c.size("num_layers")?;
    c.require(
        "d_kv",
        c.size("d_kv")?,
        d / heads,
        "d_model / num_heads per head",
    )?;
    c.require(
        "num_decoder_layers",
        c.size_or("num_decoder_layers", layers)?,
        layers,
        "as many decoder as encoder layers",
    )?;
    c.require(
        "feed_forward_proj",
        c.text_or("feed_forward_proj", "relu")?,
        "relu",
        "the original T5's ReLU feed-forward",
    )?;
    c.require(
        "tie_word_embeddings",
        c.flag_or("tie_word_embeddings", true)?,
        true,
        "a tied LM head",
    )?;
    let (seq, seq_source) = sequence(c, o, "n_positions", 512, 512)?;
    let t_dec = o.decoder_seq.unwrap_or(seq);
    let graph = crate::zoo::sized::t5(
        c.size("vocab_size")?,
        seq,
        t_dec,
        d,
        layers,
        heads,
        c.size("d_ff")?,
        c.size_or("relative_attention_num_buckets", 32)?,
    );
    // T5Stack: dropout(embeddings); each layer adds dropout(attention) and dropout(ff) to
    // the residual; T5DenseActDense drops out after its activation; dropout(final norm).
    let p = c.probability_or("dropout_rate", 0.1)?;
    let mut graph = graph;
    let n = dropout::after(&mut graph, p, |id| {
        id == "shared"
            || id == "decoder.embed_tokens"
            || id.ends_with(".final_norm")
            || id.ends_with(".self_attn")
            || id.ends_with(".cross_attn")
            || id.ends_with(".ff.relu")
            || id.ends_with(".ff.wo")
    });
    let mut drawn = vec![dropout::said(
        "dropout_rate",
        p,
        n,
        "after the embeddings, each attention and feed-forward output, inside each feed-forward after its activation, and after the final norms",
    )];
    // T5Attention drops out its eager probabilities with the same rate.
    drawn.extend(attention_dropout(&mut graph, p));
    drawn.push("attention: eager (transformers 5's sdpa gets the relative position bias as a float mask that needs a gradient, so under autograd torch's sdpa runs its math path, the scores as drawn; under no_grad, memcal's generate rule set runs it as the CPU flash kernel with the bias as its mask)".into());
    // memcal's eager attention keeps its raw scores until the op returns (the harness's Rust
    // locals); with no dropout T5Attention frees them sooner (the proof: +1.99%, exact with
    // dropout, which keeps a tensor of their size anyway).
    let mut approximations = if p == 0.0 {
        vec!["T5's attention without dropout: memcal's eager attention keeps each layer's raw scores \
              ([B, heads, T, T]) until the op returns, where transformers frees them sooner; the \
              forward peak may be high by about their size (+1.99% on a 2 + 2-layer T5)"
            .to_string()]
    } else {
        Vec::new()
    };
    if o.attn == Attn::Eager {
        approximations.push("--attn eager: the graph is the same as under sdpa (under autograd both materialise the scores), and the generate rule set runs T5's attention as transformers' default sdpa does under no_grad (the flash kernel), not eager's [B, heads, Tq, Tk] scores".into());
    }
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations,
        drawn,
    })
}

/// BART (`modeling_bart.py`, BartForConditionalGeneration): the shared embedding (times
/// sqrt(d_model) when `scale_embedding`, else times 1.0: BartScaledWordEmbedding multiplies
/// either way), learned positions of max_position_embeddings + 2 rows (offset 2),
/// `layernorm_embedding`, post-LN encoder and decoder layers with biased attention and an
/// `activation_function` feed-forward, cross-attention, the tied LM head plus the
/// `final_logits_bias` buffer.
fn bart(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("d_model")?;
    let positions = c.size("max_position_embeddings")?;
    c.require(
        "tie_word_embeddings",
        c.flag_or("tie_word_embeddings", true)?,
        true,
        "a tied LM head",
    )?;
    let (seq, seq_source) = sequence(
        c,
        o,
        "max_position_embeddings",
        positions.min(512),
        positions,
    )?;
    within(c, "max_position_embeddings", seq, positions)?;
    let t_dec = o.decoder_seq.unwrap_or(seq);
    within(c, "max_position_embeddings", t_dec, positions)?;
    let side = |layers: &str, heads: &str, ff: &str| -> Result<crate::zoo::sized::Side> {
        Ok(crate::zoo::sized::Side {
            layers: c.size(layers)?,
            heads: c.size(heads)?,
            ff: c.size(ff)?,
        })
    };
    let encoder = side(
        "encoder_layers",
        "encoder_attention_heads",
        "encoder_ffn_dim",
    )?;
    let decoder = side(
        "decoder_layers",
        "decoder_attention_heads",
        "decoder_ffn_dim",
    )?;
    let scaled = c.flag_or("scale_embedding", false)?;
    let scale = if scaled { (d as f64).sqrt() } else { 1.0 };
    let mut graph = crate::zoo::sized::bart(
        c.size("vocab_size")?,
        positions + 2,
        [seq, t_dec],
        d,
        encoder,
        decoder,
        scale,
    );
    let act = activation(c, &mut graph, "activation_function", "gelu")?;
    let attention = encoder_decoder_attention(&mut graph, o.attn);
    let mut drawn = vec![
        format!("embedding scale: the lookup times {scale} (scale_embedding = {scaled}; a mul_scalar op)"),
        act,
        attention,
        "final_logits_bias: a [1, vocab] buffer added to the logits (no gradient: an add that saves nothing, drawn as add_scalar)".into(),
    ];
    drawn.extend(bart_dropout(c, &mut graph)?);
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: vec![
            "positions: BartLearnedPositionalEmbedding looks rows 2..T+2 up for each sequence (a [B, T, d] lookup, then added); drawn as learned_position (the table's first T rows added, no [B, T, d] lookup)".to_string(),
        ],
        drawn,
    })
}

/// BART's training dropouts (modeling_bart.py, BartConfig's defaults): `dropout` after each
/// stack's embedding norm and each attention and fc2 output; `activation_dropout` after each
/// feed-forward's activation (the node fc2 reads); `attention_dropout` on the probabilities.
fn bart_dropout(c: &Config, graph: &mut GraphFile) -> Result<Vec<String>> {
    let p = c.probability_or("dropout", 0.1)?;
    let n = dropout::after(graph, p, |id| {
        id.ends_with(".layernorm_embedding")
            || id.ends_with(".self_attn")
            || id.ends_with(".encoder_attn")
            || id.ends_with(".fc2")
    });
    let activations: std::collections::HashSet<String> = graph
        .nodes
        .iter()
        .filter(|n| n.id.ends_with(".fc2"))
        .filter_map(|n| n.inputs.first().cloned())
        .collect();
    let pa = c.probability_or("activation_dropout", 0.0)?;
    let na = dropout::after(graph, pa, |id| activations.contains(id));
    let mut said = vec![
        dropout::said(
            "dropout",
            p,
            n,
            "after each stack's embedding norm and each attention and fc2 output",
        ),
        dropout::said(
            "activation_dropout",
            pa,
            na,
            "after each feed-forward's activation",
        ),
    ];
    said.extend(attention_dropout(
        graph,
        c.probability_or("attention_dropout", 0.0)?,
    ));
    Ok(said)
}

/// Draws every attention of an encoder-decoder (both sides' self-attention and the decoder's
/// cross-attention) as transformers' `attn` runs it.
fn encoder_decoder_attention(graph: &mut GraphFile, attn: Attn) -> String {
    for n in graph
        .nodes
        .iter_mut()
        .filter(|n| n.op == "multihead_attention")
    {
        n.attributes
            .insert("backend".into(), Value::from(attn.as_str()));
    }
    match attn {
        Attn::Sdpa => "attention: sdpa (transformers' default; no padding mask, so torch's flash kernel) in the encoder's and the decoder's self-attention and in the cross-attention (k and v of the encoder's output)".into(),
        Attn::Eager => "attention: eager everywhere (the [B, heads, Tq, Tk] probabilities saved)".into(),
    }
}

fn vit(c: &Config, o: &Options) -> Result<Built> {
    let image = c.size_or("image_size", 224)?;
    let patch = c.size_or("patch_size", 16)?;
    if o.seq.is_some() {
        return Err(Error::Invalid(
            "--seq: a ViT's tokens follow from image_size and patch_size; leave --seq out".into(),
        ));
    }
    c.require(
        "num_channels",
        c.size_or("num_channels", 3)?,
        3,
        "RGB images",
    )?;
    c.require(
        "qkv_bias",
        c.flag_or("qkv_bias", true)?,
        true,
        "attention projections with bias",
    )?;
    if image % patch != 0 {
        return Err(Error::field(
            c.path,
            "patch_size",
            format!("{patch} does not divide image_size {image}"),
        ));
    }
    let classes = match c.get("id2label") {
        Some(Value::Object(m)) if !m.is_empty() => m.len() as u64,
        _ => c.size_or("num_labels", 2)?,
    };
    let tokens = (image / patch) * (image / patch) + 1;
    let mut graph = crate::zoo::sized::vit(
        image,
        patch,
        classes,
        c.size("hidden_size")?,
        c.size("num_hidden_layers")?,
        c.size("num_attention_heads")?,
        c.size("intermediate_size")?,
    );
    // ViTEmbeddings: dropout(patches + positions); ViTSelfOutput and ViTOutput: dropout after
    // the dense projection. ViTConfig's default is 0.0 (nothing drawn).
    let drawn = encoder_choices(c, &mut graph, o, 0.0, |id| {
        id == "encoder.pos_embedding"
            || dropout::in_block(id, "encoder.layer", ".attn")
            || dropout::in_block(id, "encoder.layer", ".mlp.proj")
    })?;
    Ok(Built {
        graph,
        seq: tokens,
        seq_source: "image_size and patch_size (the patches and the class token)".into(),
        approximations: Vec::new(),
        drawn,
    })
}
