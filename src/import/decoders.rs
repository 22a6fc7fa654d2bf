//! Decoder types described as data: one [`Desc`] per `model_type` (which norm, which biases,
//! which feed-forward, how the residual adds up, the head, transformers' defaults for fields a
//! config leaves out), built by the zoo's part-by-part decoder (`crate::zoo::sized::decoder`).
//! What a type does beyond the table (Gemma-2's soft-capping, Granite's multipliers, Falcon's
//! layouts) is its `tweak`, which also says what the graph leaves out.

use super::ROTARY;
use super::{activation, dropout, gqa, lm_head_drawn, sequence, Attn, Built, Config, Options};
use crate::error::{Error, Result};
use crate::zoo::sized::{Bias, Eager, Fused, Norm, Parts, QkNorm, Residual, Rotary, Sparse};

/// Where a dropout of the config sits (the node it follows).
#[derive(Clone, Copy)]
enum Site {
    /// After the token embedding.
    Embedding,
    /// After each layer's attention output projection.
    Attention,
    /// After each layer's feed-forward output.
    Mlp,
}

/// A config field that may make a choice, and transformers' default for it.
#[derive(Clone, Copy)]
enum Flag {
    Fixed(bool),
    Field(&'static str, bool),
}

/// One decoder `model_type`.
pub(super) struct Desc {
    pub(super) model_type: &'static str,
    pub(super) class: &'static str,
    pub(super) aliases: &'static [(&'static str, &'static str)],
    /// The activation's field and transformers' default.
    act: (&'static str, &'static str),
    /// The feed-forward width's field (`None`: 4 x hidden_size when the field below is
    /// absent) and, for types that have one, a default multiple of the width.
    ff: (&'static str, Option<u64>),
    norm: Norm,
    /// Attention projection biases: the flag, and which projections it biases.
    attn_bias: (Flag, Bias),
    mlp_bias: Flag,
    gated: bool,
    /// The parallel-residual flag (true: Parallel with `shared_norm`).
    parallel: (Flag, bool),
    tie: Flag,
    head_bias: bool,
    /// Sequence fallback when `max_position_embeddings` is absent.
    seq_fallback: u64,
    /// The config's dropouts: field, transformers' default, where.
    dropouts: &'static [(&'static str, f64, Site)],
    /// The attention-probability dropout's field (gqa_attention draws none: said when > 0).
    attn_dropout: &'static str,
    /// Partial rotary drawn op by op (`rotary_qk`: the rotated part concatenated with the
    /// rest, a new q and k in the heads' layout): transformers' default
    /// `partial_rotary_factor` for the type; None: rotary left to gqa_attention.
    rotary: Option<f64>,
    /// What the type does beyond the table: edits the parts, returns (drawn, approximations).
    tweak: Tweak,
}

type Tweak = fn(&Config, &mut Parts, &mut Notes) -> Result<()>;

/// What an import says.
#[derive(Default)]
pub(super) struct Notes {
    drawn: Vec<String>,
    approximations: Vec<String>,
    /// The attention transformers runs for the type whatever is asked (Gemma-2: eager).
    attn: Option<Attn>,
    /// Every layer slides when the config sets `sliding_window`.
    sliding: bool,
}

const GPTJ_ALIASES: &[(&str, &str)] = &[
    ("max_position_embeddings", "n_positions"),
    ("hidden_size", "n_embd"),
    ("num_attention_heads", "n_head"),
    ("num_hidden_layers", "n_layer"),
];

fn none(_: &Config, _: &mut Parts, _: &mut Notes) -> Result<()> {
    Ok(())
}

pub(super) const DECODERS: &[Desc] = &[
    Desc {
        model_type: "gemma2",
        class: "Gemma2ForCausalLM",
        aliases: &[],
        act: ("hidden_activation", "gelu_pytorch_tanh"),
        ff: ("intermediate_size", None),
        norm: Norm::Rms,
        attn_bias: (Flag::Field("attention_bias", false), Bias::All),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", true),
        head_bias: false,
        seq_fallback: 8192,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: gemma2,
    },
    Desc {
        model_type: "phi3",
        class: "Phi3ForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Rms,
        attn_bias: (Flag::Fixed(false), Bias::None),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 4096,
        dropouts: &[
            ("embd_pdrop", 0.0, Site::Embedding),
            ("resid_pdrop", 0.0, Site::Attention),
            ("resid_pdrop", 0.0, Site::Mlp),
        ],
        attn_dropout: "attention_dropout",
        rotary: Some(1.0),
        tweak: phi3,
    },
    Desc {
        model_type: "starcoder2",
        class: "Starcoder2ForCausalLM",
        aliases: &[],
        act: ("hidden_act", "gelu_pytorch_tanh"),
        ff: ("intermediate_size", None),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Field("use_bias", true), Bias::All),
        mlp_bias: Flag::Field("use_bias", true),
        gated: false,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", true),
        head_bias: false,
        seq_fallback: 4096,
        dropouts: &[
            ("embedding_dropout", 0.0, Site::Embedding),
            ("residual_dropout", 0.0, Site::Attention),
            ("residual_dropout", 0.0, Site::Mlp),
        ],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: sliding,
    },
    Desc {
        model_type: "olmo",
        class: "OlmoForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Bare { eps: 1e-5 },
        attn_bias: (Flag::Field("attention_bias", false), Bias::All),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 2048,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: olmo,
    },
    Desc {
        model_type: "olmo2",
        class: "Olmo2ForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Rms,
        attn_bias: (Flag::Field("attention_bias", false), Bias::All),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 2048,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: olmo2,
    },
    Desc {
        model_type: "granite",
        class: "GraniteForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Rms,
        attn_bias: (Flag::Field("attention_bias", false), Bias::All),
        mlp_bias: Flag::Field("mlp_bias", false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 2048,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: granite,
    },
    Desc {
        model_type: "cohere",
        class: "CohereForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        // CohereLayerNorm: mean-subtracted, a weight and no bias.
        norm: Norm::Layer { bias: false },
        attn_bias: (Flag::Field("attention_bias", false), Bias::All),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(true), true),
        tie: Flag::Field("tie_word_embeddings", true),
        head_bias: false,
        seq_fallback: 8192,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: cohere,
    },
    Desc {
        model_type: "stablelm",
        class: "StableLmForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Field("use_qkv_bias", false), Bias::Qkv),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Field("use_parallel_residual", false), true),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 4096,
        dropouts: &[("hidden_dropout", 0.0, Site::Mlp)],
        attn_dropout: "attention_dropout",
        rotary: Some(0.25),
        tweak: stablelm,
    },
    Desc {
        model_type: "gpt_neox",
        class: "GPTNeoXForCausalLM",
        aliases: &[],
        act: ("hidden_act", "gelu"),
        ff: ("intermediate_size", None),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Field("attention_bias", true), Bias::All),
        mlp_bias: Flag::Fixed(true),
        gated: false,
        parallel: (Flag::Field("use_parallel_residual", true), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 2048,
        dropouts: &[
            ("hidden_dropout", 0.0, Site::Embedding),
            ("hidden_dropout", 0.0, Site::Attention),
            ("hidden_dropout", 0.0, Site::Mlp),
        ],
        attn_dropout: "attention_dropout",
        rotary: Some(0.25),
        tweak: fused,
    },
    Desc {
        model_type: "gptj",
        class: "GPTJForCausalLM",
        aliases: GPTJ_ALIASES,
        act: ("activation_function", "gelu_new"),
        ff: ("n_inner", Some(4)),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Fixed(false), Bias::None),
        mlp_bias: Flag::Fixed(true),
        gated: false,
        parallel: (Flag::Fixed(true), true),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: true,
        seq_fallback: 2048,
        dropouts: &[
            ("embd_pdrop", 0.0, Site::Embedding),
            ("resid_pdrop", 0.0, Site::Attention),
            ("resid_pdrop", 0.0, Site::Mlp),
        ],
        attn_dropout: "attn_pdrop",
        rotary: None,
        tweak: none,
    },
    Desc {
        model_type: "phi",
        class: "PhiForCausalLM",
        aliases: &[],
        act: ("hidden_act", "gelu_new"),
        ff: ("intermediate_size", None),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Fixed(true), Bias::All),
        mlp_bias: Flag::Fixed(true),
        gated: false,
        parallel: (Flag::Fixed(true), true),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: true,
        seq_fallback: 2048,
        dropouts: &[
            ("embd_pdrop", 0.0, Site::Embedding),
            ("resid_pdrop", 0.0, Site::Attention),
            ("resid_pdrop", 0.0, Site::Mlp),
        ],
        attn_dropout: "attention_dropout",
        rotary: Some(0.5),
        tweak: phi,
    },
    Desc {
        model_type: "falcon",
        class: "FalconForCausalLM",
        aliases: &[],
        act: ("activation", "gelu"),
        ff: ("ffn_hidden_size", Some(4)),
        norm: Norm::Layer { bias: true },
        attn_bias: (Flag::Field("bias", false), Bias::All),
        mlp_bias: Flag::Field("bias", false),
        gated: false,
        parallel: (Flag::Field("parallel_attn", true), true),
        tie: Flag::Field("tie_word_embeddings", true),
        head_bias: false,
        seq_fallback: 2048,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: falcon,
    },
    Desc {
        model_type: "qwen2_moe",
        class: "Qwen2MoeForCausalLM",
        aliases: &[],
        act: ("hidden_act", "silu"),
        ff: ("intermediate_size", None),
        norm: Norm::Rms,
        attn_bias: (Flag::Field("qkv_bias", true), Bias::Qkv),
        mlp_bias: Flag::Fixed(false),
        gated: true,
        parallel: (Flag::Fixed(false), false),
        tie: Flag::Field("tie_word_embeddings", false),
        head_bias: false,
        seq_fallback: 32768,
        dropouts: &[],
        attn_dropout: "attention_dropout",
        rotary: None,
        tweak: qwen2_moe,
    },
];

impl Flag {
    fn read(self, c: &Config) -> Result<bool> {
        match self {
            Flag::Fixed(b) => Ok(b),
            Flag::Field(f, d) => c.flag_or(f, d),
        }
    }
}

/// The attention sizes, checked against each other: heads divide the width (unless the
/// config gives `head_dim`), kv heads divide heads.
pub(super) fn heads(c: &Config, d: u64) -> Result<[u64; 3]> {
    let heads = c.size("num_attention_heads")?;
    let kv = c.size_or("num_key_value_heads", heads)?;
    if !heads.is_multiple_of(kv) {
        return Err(Error::field(
            c.path,
            "num_key_value_heads",
            format!("{kv} does not divide `num_attention_heads` {heads} (each kv head serves a whole group of query heads)"),
        ));
    }
    let head_dim = match c.get("head_dim") {
        Some(_) => c.size("head_dim")?,
        None => {
            if !d.is_multiple_of(heads) {
                return Err(Error::field(
                    c.path,
                    "num_attention_heads",
                    format!("{heads} does not divide `hidden_size` {d} (a head is hidden_size / num_attention_heads wide; give head_dim otherwise)"),
                ));
            }
            d / heads
        }
    };
    Ok([heads, kv, head_dim])
}

/// Builds the decoder `desc` describes from the config.
pub(super) fn build(desc: &Desc, c: &Config, o: &Options) -> Result<Built> {
    // The table reads transformers' standard names (`hidden_size`); a type whose config class
    // stores another (GPT-J's `n_embd`) has it read under the standard name too.
    let mut map = c.map.clone();
    for (standard, field) in desc.aliases {
        if let Some(v) = c.get(field) {
            map.insert(standard.to_string(), v.clone());
        }
    }
    let c = &Config {
        path: c.path,
        map: &map,
    };
    let d = c.size("hidden_size")?;
    let [heads, kv_heads, head_dim] = heads(c, d)?;
    let ff = match desc.ff {
        (field, Some(times)) => c.size_or(field, times * d)?,
        (field, None) => c.size(field)?,
    };
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, desc.seq_fallback)?;
    let parallel = desc.parallel.0.read(c)?;
    let tied = desc.tie.read(c)?;
    let mut parts = Parts {
        vocab: c.size("vocab_size")?,
        t: seq,
        d,
        layers: c.size("num_hidden_layers")?,
        heads,
        kv_heads,
        head_dim,
        ff,
        norm: desc.norm,
        attn_bias: if desc.attn_bias.0.read(c)? {
            desc.attn_bias.1
        } else {
            Bias::None
        },
        qk_norm: QkNorm::None,
        gated: desc.gated,
        mlp_bias: desc.mlp_bias.read(c)?,
        residual: if parallel {
            Residual::Parallel {
                shared_norm: desc.parallel.1,
            }
        } else {
            Residual::Sequential
        },
        positions: None,
        embed_scale: None,
        residual_scale: None,
        logits_scale: None,
        softcap: None,
        tied,
        head_bias: desc.head_bias,
        moe: None,
        rotary: None,
        eager: None,
        fused_qkv: Fused::No,
        fused_gate_up: false,
    };
    if let Some(default) = desc.rotary {
        parts.rotary = Some(Rotary {
            dims: rotary_dims(c, head_dim, default)?,
            concat: true,
        });
    }
    let mut notes = Notes::default();
    (desc.tweak)(c, &mut parts, &mut notes)?;
    let description = describe(desc, &parts);
    let mut graph = crate::zoo::sized::decoder(&parts, description);
    let (field, default) = desc.act;
    let act = c.text_or(field, default)?;
    let said = activation::apply(&mut graph, act)
        .map_err(|e| Error::Invalid(format!("{}: field `{field}`: {e}", c.path.display())))?;
    let mut drawn = vec![format!("activation ({field}): {said}")];
    drawn.push(format!(
        "residual: {}",
        match parts.residual {
            Residual::Sequential => "x + attn(norm(x)), then + mlp(norm(x))",
            Residual::Parallel { shared_norm: true } =>
                "parallel: x + attn(norm(x)) + mlp(norm(x)), one norm read by both",
            Residual::Parallel { shared_norm: false } =>
                "parallel: x + attn(norm1(x)) + mlp(norm2(x))",
            Residual::Sandwich =>
                "x + norm(attn(norm(x))), then + norm(mlp(norm(x))) (four norms a layer)",
            Residual::PostNorm => "x + norm(attn(x)), then + norm(mlp(x))",
        }
    ));
    drawn.extend(notes.drawn);
    if let Some(s) = &parts.moe {
        drawn.push(super::grouped_experts(&mut graph, s.renormalize));
    }
    let attn = notes.attn.unwrap_or(o.attn);
    let mut approximations = attention_notes(&parts, &mut graph, attn, &mut drawn);
    drawn.push(lm_head_drawn(tied));
    for (field, default, site) in desc.dropouts {
        let p = c.probability_or(field, *default)?;
        let (n, where_) = match site {
            Site::Embedding => (
                dropout::after(&mut graph, p, |id| id == "embed_tokens"),
                "after the token embedding",
            ),
            Site::Attention => (
                dropout::after(&mut graph, p, |id| {
                    dropout::in_block(id, "layers", ".self_attn")
                }),
                "after each attention's output projection",
            ),
            Site::Mlp => (
                dropout::after(&mut graph, p, |id| {
                    dropout::in_block(id, "layers", ".mlp.down_proj")
                }),
                "after each feed-forward",
            ),
        };
        drawn.push(dropout::said(field, p, n, where_));
    }
    let p = c.probability_or(desc.attn_dropout, 0.0)?;
    if p > 0.0 {
        approximations.push(format!("attention dropout ({} = {p}) on the probabilities is not drawn (sdpa's dropout_p: on CUDA's flash kernel only its RNG state; on CPU sdpa's math path keeps the [B, heads, T, T] probabilities)", desc.attn_dropout));
    }
    approximations.extend(notes.approximations);
    if notes.sliding {
        let (window, approx) = super::sliding_layers(c, o, &mut graph, seq)?;
        drawn.extend(window);
        approximations.extend(approx);
    }
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations,
        drawn,
    })
}

/// What the decoder's attention is drawn as (pushed onto `drawn`), and what it leaves out
/// (returned); a `gqa_attention` graph gets `attn`'s repeat_kv choice.
fn attention_notes(
    parts: &Parts,
    graph: &mut crate::graph::GraphFile,
    attn: Attn,
    drawn: &mut Vec<String>,
) -> Vec<String> {
    let head_dim = parts.head_dim;
    let mut approximations: Vec<String> = match (parts.rotary, parts.eager) {
        (None, _) => vec![ROTARY.to_string()],
        (Some(_), None) => vec!["the causal mask is not drawn (a [T, T] tensor)".to_string()],
        (Some(_), Some(_)) => Vec::new(),
    };
    if let Some(Rotary {
        dims: rot,
        concat: true,
    }) = parts.rotary
    {
        drawn.push(format!("rotary: the first {rot} of each head's {head_dim} dims of q and k rotated op by op (x * cos + rotate_half(x) * sin, then concatenated with the rest: new q and k in the heads' layout, so the attention's output is copied back to [B, T, d]); one cos and one sin table of [1, T, {rot}]"));
    }
    if parts.eager.is_some() {
        drawn.push("attention: eager, drawn op by op (projections, head views, rotary, k and v repeated to every head, q @ kᵀ scaled and soft-capped, plus one float causal mask of [B, 1, T, T], softmax, @ v: the [B, heads, T, T] scores and probabilities kept)".into());
    } else if parts.rotary.is_some() || parts.fused_qkv != Fused::No {
        drawn.push("attention: drawn op by op (projections, head views, rotary, one sdpa call with enable_gqa when kv heads are fewer)".into());
        if attn == Attn::Eager {
            approximations.push("--attn eager: the attention is drawn as sdpa (its [B, heads, T, T] probabilities are not drawn)".into());
        }
    } else if parts.qk_norm == QkNorm::Full {
        drawn.push("attention: drawn op by op (projections, q/k norms over all heads, head views, one sdpa call with enable_gqa when kv heads are fewer)".into());
        if attn == Attn::Eager {
            approximations.push("--attn eager: the attention is drawn as sdpa (its [B, heads, T, T] probabilities are not drawn)".into());
        }
    } else {
        let (said, eager) = gqa(graph, attn);
        drawn.push(said);
        approximations.extend(eager);
    }
    approximations
}

fn describe(desc: &Desc, p: &Parts) -> String {
    let norm = match p.norm {
        Norm::Rms => "RMSNorm",
        Norm::Layer { bias: true } => "LayerNorm",
        Norm::Layer { bias: false } => "LayerNorm without bias",
        Norm::Bare { .. } => "LayerNorm without weight or bias",
        Norm::Cohere { .. } => "CohereLayerNorm (a weight, no bias)",
    };
    let ffn = match &p.moe {
        Some(s) => format!(
            "MoE {} SwiGLU experts of {} (top-{}){}",
            s.experts,
            s.hidden,
            s.top_k,
            if s.shared > 0 {
                format!(" + shared expert {}", s.shared)
            } else {
                String::new()
            }
        ),
        None => format!("{} {}", if p.gated { "gated MLP" } else { "MLP" }, p.ff),
    };
    format!(
        "{} decoder: {} layers, d={}, {} heads of {} ({} kv heads), {ffn}, {norm}, T={}, vocab {}, {} LM head",
        desc.model_type,
        p.layers,
        p.d,
        p.heads,
        p.head_dim,
        p.kv_heads,
        p.t,
        p.vocab,
        if p.tied { "tied" } else { "untied" }
    )
}

/// A type whose every layer slides when the config sets `sliding_window` (written on the
/// attention nodes after the build: `super::sliding_layers`).
fn sliding(_: &Config, _: &mut Parts, n: &mut Notes) -> Result<()> {
    n.sliding = true;
    Ok(())
}

/// GPT-NeoX: one query_key_value projection viewed per head as [q | k | v] and chunked
/// (`GPTNeoXAttention.forward`), so q, k and v are views of its output.
fn fused(_: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    p.fused_qkv = Fused::PerHead;
    n.drawn.push("query_key_value: one projection of 3 x hidden_size, viewed [B, T, heads, 3 x head_dim] and chunked into q, k and v (views of it)".into());
    Ok(())
}

/// The rotary dims of a head, `int(head_dim * partial_rotary_factor)` as transformers
/// computes them; the factor from `rope_parameters`, the top-level `partial_rotary_factor` or
/// GPT-NeoX's older `rotary_pct` (transformers moves both into `rope_parameters`), else the
/// type's `default`. Two of them that disagree are an input error naming both.
fn rotary_dims(c: &Config, head_dim: u64, default: f64) -> Result<u64> {
    let nested = c
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .filter(|v| !v.is_null());
    let found: Vec<(&str, &serde_json::Value)> = [
        ("rope_parameters.partial_rotary_factor", nested),
        ("partial_rotary_factor", c.get("partial_rotary_factor")),
        ("rotary_pct", c.get("rotary_pct")),
    ]
    .into_iter()
    .filter_map(|(f, v)| v.map(|v| (f, v)))
    .collect();
    let mut factor = default;
    for (i, (field, v)) in found.iter().enumerate() {
        let f = v
            .as_f64()
            .filter(|f| *f > 0.0 && *f <= 1.0)
            .ok_or_else(|| {
                Error::field(
                    c.path,
                    field,
                    format!("must be a number in (0, 1], found {v}"),
                )
            })?;
        if let Some((first, w)) = found[..i].iter().find(|(_, w)| w.as_f64() != Some(f)) {
            return Err(Error::field(
                c.path,
                field,
                format!("is {v}, but `{first}` is {w}: both give the share of each head that is rotated; make them equal"),
            ));
        }
        factor = f;
    }
    let rot = (head_dim as f64 * factor) as u64;
    if rot < 2 {
        return Err(Error::field(
            c.path,
            found.first().map_or("partial_rotary_factor", |(f, _)| f),
            format!(
                "{factor} of head_dim {head_dim} rotates {rot} dims; rotate_half needs at least 2"
            ),
        ));
    }
    Ok(rot)
}

/// Gemma-2: the embedding times sqrt(hidden_size), four norms a layer, the final logits
/// soft-capped; eager attention (Gemma2 has no sdpa: `_supports_sdpa = False`).
fn gemma2(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    p.embed_scale = Some((p.d as f64).sqrt());
    p.residual = Residual::Sandwich;
    c.require(
        "use_bidirectional_attention",
        c.flag_or("use_bidirectional_attention", false)?,
        false,
        "causal attention",
    )?;
    let cap = |field: &str, default: f64| -> Result<Option<f64>> {
        match c.map.get(field) {
            None => Ok(Some(default)),
            Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_f64().filter(|x| *x > 0.0).map(Some).ok_or_else(|| {
                Error::field(
                    c.path,
                    field,
                    format!("must be a positive number or null, found {v}"),
                )
            }),
        }
    };
    p.softcap = cap("final_logit_softcapping", 30.0)?;
    if let Some(s) = p.softcap {
        n.drawn.push(format!("final_logit_softcapping: logits = {s} * tanh(logits / {s}) (mul_scalar, tanh, mul_scalar)"));
    }
    let softcap = cap("attn_logit_softcapping", 50.0)?;
    if let Some(s) = softcap {
        n.drawn.push(format!(
            "attn_logit_softcapping = {s}: the scores {s} * tanh(scores / {s})"
        ));
    }
    // Gemma2Attention.scaling = query_pre_attn_scalar ** -0.5.
    let scalar = match c.get("query_pre_attn_scalar") {
        None => 256.0,
        Some(v) => v.as_f64().filter(|x| *x > 0.0).ok_or_else(|| {
            Error::field(
                c.path,
                "query_pre_attn_scalar",
                format!("must be a positive number, found {v}"),
            )
        })?,
    };
    p.eager = Some(Eager {
        scale: scalar.powf(-0.5),
        softcap,
    });
    p.rotary = Some(Rotary {
        dims: p.head_dim,
        concat: false,
    });
    n.attn = Some(Attn::Eager);
    n.drawn.push(format!(
        "embedding scale: the embedding's output times sqrt(hidden_size) = {:.4} (a mul_scalar op)",
        (p.d as f64).sqrt()
    ));
    n.drawn.push("attention: eager whatever --attn says (Gemma2 does not support sdpa: it would skip the soft-capping)".into());
    n.approximations
        .push("Gemma2RMSNorm multiplies by (1 + weight) in float32: drawn as rms_norm".into());
    n.approximations.push("sliding-window layers (every other layer) are drawn as full causal attention: eager adds a banded mask instead of a causal one, the same size".into());
    Ok(())
}

/// Phi-3 (`modeling_phi3.py`): one qkv_proj sliced into q, k and v, one gate_up_proj chunked
/// in two (`up * act(gate)`), rotary through a concatenation (`rotary`).
fn phi3(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    p.fused_qkv = Fused::Blocks;
    p.fused_gate_up = true;
    n.drawn.push("qkv_proj and gate_up_proj: one projection each, sliced into q, k and v (then viewed as heads) and into gate and up (views of it)".into());
    sliding(c, p, n)
}

fn olmo(c: &Config, _: &mut Parts, n: &mut Notes) -> Result<()> {
    n.drawn.push("norms: OlmoLayerNorm, F.layer_norm without weight or bias, drawn as the aten.native_layer_norm call torch records".into());
    if let Some(v) = c.get("clip_qkv") {
        n.approximations.push(format!(
            "clip_qkv = {v}: the clamps of q, k and v are not drawn"
        ));
    }
    Ok(())
}

fn olmo2(_: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    p.residual = Residual::PostNorm;
    p.qk_norm = QkNorm::Full;
    n.drawn.push(
        "q_norm and k_norm: RMSNorm over all heads (heads x head_dim), before the head views"
            .into(),
    );
    Ok(())
}

fn granite(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    let number = |field: &str| -> Result<f64> {
        match c.get(field) {
            None => Ok(1.0),
            Some(v) => v.as_f64().filter(|x| *x > 0.0).ok_or_else(|| {
                Error::field(
                    c.path,
                    field,
                    format!("must be a positive number, found {v}"),
                )
            }),
        }
    };
    let (e, r, l) = (
        number("embedding_multiplier")?,
        number("residual_multiplier")?,
        number("logits_scaling")?,
    );
    p.embed_scale = Some(e);
    p.residual_scale = Some(r);
    p.logits_scale = Some(1.0 / l);
    number("attention_multiplier")?;
    n.drawn.push(format!("multipliers: the embedding times {e}, each attention and feed-forward output times {r} before its residual add, the logits divided by {l} (mul_scalar ops); attention_multiplier is sdpa's scale"));
    Ok(())
}

fn cohere(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    c.require(
        "use_qk_norm",
        c.flag_or("use_qk_norm", false)?,
        false,
        "no per-head q/k LayerNorms",
    )?;
    let scale = match c.get("logit_scale") {
        None => 0.0625,
        Some(v) => v.as_f64().ok_or_else(|| {
            Error::field(
                c.path,
                "logit_scale",
                format!("must be a number, found {v}"),
            )
        })?,
    };
    p.logits_scale = Some(scale);
    n.drawn.push(format!(
        "logit_scale: the logits times {scale} (a mul_scalar op)"
    ));
    let eps = match c.get("layer_norm_eps") {
        None => 1e-5,
        Some(v) => v.as_f64().filter(|e| *e > 0.0).ok_or_else(|| {
            Error::field(
                c.path,
                "layer_norm_eps",
                format!("must be a positive number, found {v}"),
            )
        })?,
    };
    p.norm = Norm::Cohere { eps };
    n.drawn.push("norms: CohereLayerNorm as transformers writes it, op by op (mean, x - mean twice, pow, mean, + eps, rsqrt, two products: each keeps what its backward reads)".into());
    n.approximations.push(
        "CohereLayerNorm's float32 casts are not drawn (no-ops on float32 activations; under bf16 autocast the norm's float32 copies are not drawn)"
            .into(),
    );
    Ok(())
}

fn stablelm(c: &Config, _: &mut Parts, _: &mut Notes) -> Result<()> {
    c.require(
        "qk_layernorm",
        c.flag_or("qk_layernorm", false)?,
        false,
        "no per-head q/k LayerNorms",
    )
}

fn phi(c: &Config, _: &mut Parts, _: &mut Notes) -> Result<()> {
    c.require(
        "qk_layernorm",
        c.flag_or("qk_layernorm", false)?,
        false,
        "no q/k LayerNorms",
    )
}

/// Falcon: multi-query (one kv head) or, with `new_decoder_architecture`, `num_kv_heads`
/// groups and two norms in parallel; a fused query_key_value; the residual's dropouts.
fn falcon(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    c.require(
        "alibi",
        c.flag_or("alibi", false)?,
        false,
        "rotary positions",
    )?;
    let new = c.flag_or("new_decoder_architecture", false)?;
    if new {
        p.kv_heads = c.size_or("num_kv_heads", p.heads)?;
        if !p.heads.is_multiple_of(p.kv_heads) {
            return Err(Error::field(
                c.path,
                "num_kv_heads",
                format!(
                    "{} does not divide `num_attention_heads` {}",
                    p.kv_heads, p.heads
                ),
            ));
        }
        let lns = c.size_or("num_ln_in_parallel_attn", 2)?;
        p.residual = Residual::Parallel {
            shared_norm: lns != 2,
        };
    } else if c.flag_or("multi_query", true)? {
        p.kv_heads = 1;
    }
    // FalconAttention (`modeling_falcon.py`): FalconLinear is `x @ W.T (+ bias)`; _split_heads
    // cuts k and v off the fused output by indexing (copies) and broadcasts them over the
    // query heads; sdpa gets k and v of one head under multi_query, which only its math path
    // takes.
    n.approximations.push(if new {
        "Falcon's attention is drawn as gqa_attention (three projections, sdpa with enable_gqa): transformers' x @ W.T projections, the fused query_key_value cut by indexing (k and v copied) and k and v broadcast to every head and flattened (copies) are not drawn, so the graph's peak is low".into()
    } else if p.kv_heads == 1 {
        "Falcon's attention is drawn as gqa_attention (three projections, sdpa with enable_gqa): transformers' x @ W.T projections, the fused query_key_value cut by indexing (k and v copied), and sdpa's math path (one kv head broadcast over the query heads: the [B, heads, T, T] probabilities kept) are not drawn, so the graph's peak is low".into()
    } else {
        "Falcon's attention is drawn as gqa_attention (three projections): transformers' x @ W.T projections and the fused query_key_value's views are not drawn".into()
    });
    let hidden = c.probability_or("hidden_dropout", 0.0)?;
    let attn = c.probability_or("attention_dropout", 0.0)?;
    // FalconDecoderLayer's dropout_add: hidden_dropout after the layer's output, and (not
    // parallel) attention_dropout after the attention's; drawn only at 0.
    let sequential = !matches!(p.residual, Residual::Parallel { .. });
    for (field, value) in [("hidden_dropout", hidden), ("attention_dropout", attn)] {
        if value > 0.0 && (field == "hidden_dropout" || sequential) {
            return Err(Error::field(
                c.path,
                field,
                format!("is {value}; memcal draws Falcon's dropout_add only at 0.0 (the released models' value)"),
            ));
        }
    }
    Ok(())
}

/// Qwen2-MoE: sparse layers (every `decoder_sparse_step`-th, less `mlp_only_layers`) of
/// routed SwiGLU experts plus a shared expert gated by sigmoid(linear(x, 1)).
fn qwen2_moe(c: &Config, p: &mut Parts, n: &mut Notes) -> Result<()> {
    c.require(
        "hidden_act",
        c.text_or("hidden_act", "silu")?,
        "silu",
        "SwiGLU experts",
    )?;
    c.require(
        "use_sliding_window",
        c.flag_or("use_sliding_window", false)?,
        false,
        "full causal attention in every layer",
    )?;
    let experts = c.size("num_experts")?;
    let step = c.size_or("decoder_sparse_step", 1)?;
    let only: Vec<u64> = match c.get("mlp_only_layers") {
        None => Vec::new(),
        Some(serde_json::Value::Array(v)) => v
            .iter()
            .map(|x| {
                x.as_u64().ok_or_else(|| {
                    Error::field(
                        c.path,
                        "mlp_only_layers",
                        format!("must list layer indices, found {x}"),
                    )
                })
            })
            .collect::<Result<_>>()?,
        Some(v) => {
            return Err(Error::field(
                c.path,
                "mlp_only_layers",
                format!("must be a list of layer indices, found {v}"),
            ))
        }
    };
    let layers = (0..p.layers)
        .map(|l| !only.contains(&l) && (l + 1) % step == 0)
        .collect();
    p.moe = Some(Sparse {
        experts,
        hidden: c.size("moe_intermediate_size")?,
        top_k: c.size_or("num_experts_per_tok", 4)?,
        shared: c.size_or("shared_expert_intermediate_size", 0)?,
        shared_gate: true,
        layers,
        // Qwen2MoeTopKRouter: `if self.norm_topk_prob: router_top_value /= ...`.
        renormalize: c.flag_or("norm_topk_prob", false)?,
    });
    n.drawn.push("shared expert: SwiGLU, times sigmoid(shared_expert_gate(x)) (a [B, T, 1] gate broadcast: drawn as the aten.mul call)".into());
    Ok(())
}
