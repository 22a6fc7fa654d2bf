//! Transformer families: `gpt`, `bert`, `vit`, `t5`, `llama`, `mla`, `mixtral`.

use super::{id, Builder, B};
use crate::graph::GraphFile;
use serde_json::{json, Value};

/// Starts a graph: the template (variant `full`) is named `template`; a reduced variant is
/// `<family>-<variant>`, cut from `template`.
pub(crate) fn start(family: &str, variant: &str, template: &str, desc: String) -> Builder {
    if variant == "full" {
        Builder::new(template, family, variant).describe(desc)
    } else {
        Builder::new(&format!("{family}-{variant}"), family, variant)
            .cut_from(template)
            .describe(desc)
    }
}

/// Size of a plain transformer (GPT, BERT, ViT, T5 use the fields they need).
#[derive(Debug, Clone, Copy)]
struct Tf {
    vocab: u64,
    positions: u64,
    t: u64,
    d: u64,
    layers: u64,
    heads: u64,
    ff: u64,
}

impl Tf {
    /// A reduced GPT/BERT variant: an 8,192-token vocabulary, positions = sequence, FFN 4d.
    fn reduced(t: u64, d: u64, layers: u64, heads: u64) -> Tf {
        Tf {
            vocab: 8192,
            positions: t,
            t,
            d,
            layers,
            heads,
            ff: 4 * d,
        }
    }
}

fn mha(b: &mut Builder, id_: &str, inputs: &[&str], d: u64, heads: u64, causal: bool) -> String {
    b.node(
        id_,
        "multihead_attention",
        inputs,
        json!({"embed_dim": d, "num_heads": heads, "causal": causal, "bias": true}),
    )
}

fn linear(b: &mut Builder, id_: &str, x: &str, i: u64, o: u64, bias: bool) -> String {
    if bias {
        b.node(
            id_,
            "linear",
            &[x],
            json!({"in_features": i, "out_features": o}),
        )
    } else {
        b.node(
            id_,
            "linear",
            &[x],
            json!({"in_features": i, "out_features": o, "bias": false}),
        )
    }
}

/// Pre-LN block (GPT-2, ViT): x + attn(ln(x)), then x + mlp(ln(x)) with a GELU MLP.
fn pre_ln_block(b: &mut Builder, p: &str, x: &str, c: &Tf, causal: bool) -> String {
    let ln1 = b.node(
        &id(p, "ln_1"),
        "layer_norm",
        &[x],
        json!({"normalized_shape": c.d}),
    );
    let attn = mha(b, &id(p, "attn"), &[&ln1], c.d, c.heads, causal);
    let x1 = b.node(&id(p, "add_1"), "add", &[x, &attn], Value::Null);
    let ln2 = b.node(
        &id(p, "ln_2"),
        "layer_norm",
        &[&x1],
        json!({"normalized_shape": c.d}),
    );
    let fc = linear(b, &id(p, "mlp.fc"), &ln2, c.d, c.ff, true);
    let act = b.node(&id(p, "mlp.gelu"), "gelu", &[&fc], Value::Null);
    let proj = linear(b, &id(p, "mlp.proj"), &act, c.ff, c.d, true);
    b.node(&id(p, "add_2"), "add", &[&x1, &proj], Value::Null)
}

/// Post-LN block (BERT): ln(x + attn(x)), then ln(x + mlp(x)).
fn post_ln_block(b: &mut Builder, p: &str, x: &str, c: &Tf) -> String {
    let attn = mha(b, &id(p, "attention"), &[x], c.d, c.heads, false);
    let x1 = b.node(&id(p, "attention.add"), "add", &[x, &attn], Value::Null);
    let ln1 = b.node(
        &id(p, "attention.layer_norm"),
        "layer_norm",
        &[&x1],
        json!({"normalized_shape": c.d}),
    );
    let fc = linear(b, &id(p, "intermediate"), &ln1, c.d, c.ff, true);
    let act = b.node(&id(p, "intermediate.gelu"), "gelu", &[&fc], Value::Null);
    let out = linear(b, &id(p, "output"), &act, c.ff, c.d, true);
    let x2 = b.node(&id(p, "output.add"), "add", &[&ln1, &out], Value::Null);
    b.node(
        &id(p, "output.layer_norm"),
        "layer_norm",
        &[&x2],
        json!({"normalized_shape": c.d}),
    )
}

/// GPT-2 style decoder with a tied LM head.
fn gpt(variant: &str, c: Tf) -> GraphFile {
    let desc = format!(
        "GPT-2 style decoder: {} layers, d={}, {} heads, T={}, vocab {}, eager causal attention, tied LM head",
        c.layers, c.d, c.heads, c.t, c.vocab
    );
    let mut b = start("gpt", variant, "gpt2-small", desc);
    let tokens = b.int_input("tokens", &[B, c.t], c.vocab);
    let labels = b.int_input("labels", &[B, c.t], c.vocab);
    b.node(
        "wte",
        "embedding",
        &[&tokens],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.d}),
    );
    let mut x = b.node(
        "wpe",
        "learned_position",
        &["wte"],
        json!({"num_positions": c.positions, "dim": c.d}),
    );
    for l in 0..c.layers {
        x = pre_ln_block(&mut b, &format!("h{l}"), &x, &c, true);
    }
    let ln = b.node(
        "ln_f",
        "layer_norm",
        &[&x],
        json!({"normalized_shape": c.d}),
    );
    let logits = b.node(
        "lm_head",
        "linear",
        &[&ln],
        json!({"in_features": c.d, "out_features": c.vocab, "bias": false, "tie": "wte"}),
    );
    b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
    b.finish("loss")
}

/// BERT encoder (post-LN) with the pooler, trained by MSE of the pooled output against a target.
fn bert(variant: &str, c: Tf) -> GraphFile {
    bert_with(variant, c, 2)
}

/// [`bert`] with `type_vocab` token types (RoBERTa has one).
fn bert_with(variant: &str, c: Tf, type_vocab: u64) -> GraphFile {
    let desc = format!(
        "BERT encoder (post-LN): {} layers, d={}, {} heads, T={}, vocab {}, pooler (token 0 -> linear -> tanh), MSE of the pooled output",
        c.layers, c.d, c.heads, c.t, c.vocab
    );
    let mut b = start("bert", variant, "bert-base-cased", desc);
    let ids = b.int_input("input_ids", &[B, c.t], c.vocab);
    let types = b.int_input("token_type_ids", &[B, c.t], type_vocab);
    let target = b.input("target", &[B, c.d]);
    b.buffer("embeddings.position_ids", &[1, c.positions], "int64");
    b.buffer("embeddings.token_type_ids", &[1, c.positions], "int64");
    let w = b.node(
        "embeddings.word",
        "embedding",
        &[&ids],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.d}),
    );
    let ty = b.node(
        "embeddings.token_type",
        "embedding",
        &[&types],
        json!({"num_embeddings": type_vocab, "embedding_dim": c.d}),
    );
    let sum = b.node("embeddings.add", "add", &[&w, &ty], Value::Null);
    let pos = b.node(
        "embeddings.position",
        "learned_position",
        &[&sum],
        json!({"num_positions": c.positions, "dim": c.d}),
    );
    let mut x = b.node(
        "embeddings.layer_norm",
        "layer_norm",
        &[&pos],
        json!({"normalized_shape": c.d}),
    );
    for l in 0..c.layers {
        x = post_ln_block(&mut b, &format!("encoder.layer{l}"), &x, &c);
    }
    let cls = b.node("pooler.first", "select_token", &[&x], json!({"index": 0}));
    let dense = linear(&mut b, "pooler.dense", &cls, c.d, c.d, true);
    let pooled = b.node("pooler.tanh", "tanh", &[&dense], Value::Null);
    b.node("loss", "mse", &[&pooled, &target], Value::Null);
    b.finish("loss")
}

/// Vision transformer: patch conv, class token, learned positions, pre-LN blocks, head.
#[derive(Debug, Clone, Copy)]
struct Vit {
    image: u64,
    patch: u64,
    classes: u64,
    tf: Tf,
}

fn vit(variant: &str, v: Vit) -> GraphFile {
    let c = v.tf;
    let tokens = (v.image / v.patch) * (v.image / v.patch);
    let desc = format!(
        "ViT: {}x{} images, patch {}, {} tokens + class token, {} layers, d={}, {} heads, {} classes",
        v.image, v.image, v.patch, tokens, c.layers, c.d, c.heads, v.classes
    );
    let mut b = start("vit", variant, "vit-b16", desc);
    let img = b.input("images", &[B, 3, v.image, v.image]);
    let labels = b.int_input("labels", &[B], v.classes);
    let conv = b.node(
        "conv_proj",
        "conv2d",
        &[&img],
        json!({"in_channels": 3, "out_channels": c.d, "kernel_size": v.patch, "stride": v.patch}),
    );
    let flat = b.node("flatten", "flatten", &[&conv], json!({"start_dim": 2}));
    let seq = b.node("to_tokens", "permute", &[&flat], json!({"dims": [0, 2, 1]}));
    let cls = b.node("class_token", "prepend_token", &[&seq], json!({"dim": c.d}));
    let mut x = b.node(
        "encoder.pos_embedding",
        "learned_position",
        &[&cls],
        json!({"num_positions": tokens + 1, "dim": c.d}),
    );
    for l in 0..c.layers {
        x = pre_ln_block(&mut b, &format!("encoder.layer{l}"), &x, &c, false);
    }
    let ln = b.node(
        "encoder.ln",
        "layer_norm",
        &[&x],
        json!({"normalized_shape": c.d}),
    );
    let first = b.node("class_output", "select_token", &[&ln], json!({"index": 0}));
    let head = linear(&mut b, "head", &first, c.d, v.classes, true);
    b.node("loss", "cross_entropy", &[&head, &labels], Value::Null);
    b.finish("loss")
}

/// T5: shared embedding, pre-RMS-norm encoder and decoder without biases, ReLU FF, relative
/// attention buckets on the first self-attention of each stack, tied LM head.
#[derive(Debug, Clone, Copy)]
struct T5 {
    tf: Tf,
    t_dec: u64,
    buckets: u64,
}

fn t5_attn(
    b: &mut Builder,
    id_: &str,
    inputs: &[&str],
    c: &Tf,
    causal: bool,
    buckets: u64,
) -> String {
    let attrs = if buckets > 0 {
        json!({"embed_dim": c.d, "num_heads": c.heads, "causal": causal, "bias": false, "relative_attention_buckets": buckets})
    } else {
        json!({"embed_dim": c.d, "num_heads": c.heads, "causal": causal, "bias": false})
    };
    b.node(id_, "multihead_attention", inputs, attrs)
}

fn rms(b: &mut Builder, id_: &str, x: &str, d: u64) -> String {
    b.node(id_, "rms_norm", &[x], json!({"dim": d}))
}

fn t5_ff(b: &mut Builder, p: &str, x: &str, c: &Tf) -> String {
    let ln = rms(b, &id(p, "ff.norm"), x, c.d);
    let wi = linear(b, &id(p, "ff.wi"), &ln, c.d, c.ff, false);
    let act = b.node(&id(p, "ff.relu"), "relu", &[&wi], Value::Null);
    let wo = linear(b, &id(p, "ff.wo"), &act, c.ff, c.d, false);
    b.node(&id(p, "ff.add"), "add", &[x, &wo], Value::Null)
}

fn t5(variant: &str, v: T5) -> GraphFile {
    let c = v.tf;
    let desc = format!(
        "T5 encoder-decoder: {}+{} layers, d={}, {} heads, d_ff={}, encoder T={}, decoder T={}, vocab {}, shared embedding, tied LM head",
        c.layers, c.layers, c.d, c.heads, c.ff, c.t, v.t_dec, c.vocab
    );
    let mut b = start("t5", variant, "t5-small", desc);
    let ids = b.int_input("input_ids", &[B, c.t], c.vocab);
    let dec_ids = b.int_input("decoder_input_ids", &[B, v.t_dec], c.vocab);
    let labels = b.int_input("labels", &[B, v.t_dec], c.vocab);
    let emb = json!({"num_embeddings": c.vocab, "embedding_dim": c.d});
    let mut x = b.node("shared", "embedding", &[&ids], emb);
    for l in 0..c.layers {
        let p = format!("encoder.block{l}");
        let ln = rms(&mut b, &id(&p, "self_attn.norm"), &x, c.d);
        let buckets = if l == 0 { v.buckets } else { 0 };
        let sa = t5_attn(&mut b, &id(&p, "self_attn"), &[&ln], &c, false, buckets);
        let x1 = b.node(&id(&p, "self_attn.add"), "add", &[&x, &sa], Value::Null);
        x = t5_ff(&mut b, &p, &x1, &c);
    }
    let enc = rms(&mut b, "encoder.final_norm", &x, c.d);
    let mut y = b.node(
        "decoder.embed_tokens",
        "embedding",
        &[&dec_ids],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.d, "tie": "shared"}),
    );
    for l in 0..c.layers {
        let p = format!("decoder.block{l}");
        let ln = rms(&mut b, &id(&p, "self_attn.norm"), &y, c.d);
        let buckets = if l == 0 { v.buckets } else { 0 };
        let sa = t5_attn(&mut b, &id(&p, "self_attn"), &[&ln], &c, true, buckets);
        let y1 = b.node(&id(&p, "self_attn.add"), "add", &[&y, &sa], Value::Null);
        let ln2 = rms(&mut b, &id(&p, "cross_attn.norm"), &y1, c.d);
        let ca = t5_attn(&mut b, &id(&p, "cross_attn"), &[&ln2, &enc], &c, false, 0);
        let y2 = b.node(&id(&p, "cross_attn.add"), "add", &[&y1, &ca], Value::Null);
        y = t5_ff(&mut b, &p, &y2, &c);
    }
    let dec = rms(&mut b, "decoder.final_norm", &y, c.d);
    let logits = b.node(
        "lm_head",
        "linear",
        &[&dec],
        json!({"in_features": c.d, "out_features": c.vocab, "bias": false, "tie": "shared"}),
    );
    b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
    b.finish("loss")
}

/// SwiGLU feed-forward from linear/silu/mul: down(silu(gate(x)) * up(x)), no biases.
fn swiglu(b: &mut Builder, p: &str, x: &str, d: u64, hidden: u64) -> String {
    gated(b, p, x, d, hidden, "silu")
}

/// A gated feed-forward down(act(gate(x)) * up(x)) with the activation op `act` (`silu`:
/// SwiGLU; `gelu`: Gemma's GeGLU), no biases.
fn gated(b: &mut Builder, p: &str, x: &str, d: u64, hidden: u64, act: &str) -> String {
    let gate = linear(b, &id(p, "gate_proj"), x, d, hidden, false);
    let act = b.node(&id(p, act), act, &[&gate], Value::Null);
    let up = linear(b, &id(p, "up_proj"), x, d, hidden, false);
    let h = b.node(&id(p, "mul"), "mul", &[&act, &up], Value::Null);
    linear(b, &id(p, "down_proj"), &h, hidden, d, false)
}

/// The feed-forward of one decoder layer.
#[derive(Debug, Clone, Copy)]
enum Ffn {
    /// SwiGLU with this hidden width.
    Dense(u64),
    /// A `moe` block; `shared` > 0 adds an always-on SwiGLU expert of that hidden width.
    Moe {
        experts: u64,
        hidden: u64,
        top_k: u64,
        shared: u64,
    },
}

/// The attention of one decoder layer.
#[derive(Debug, Clone, Copy)]
enum Attn {
    Gqa {
        heads: u64,
        kv_heads: u64,
    },
    Mla {
        heads: u64,
        q_lora_rank: u64,
        kv_lora_rank: u64,
        nope: u64,
        rope: u64,
        v: u64,
    },
}

/// A pre-RMS-norm decoder (LLaMA, Mixtral, DeepSeek-style MLA) with an untied LM head.
#[derive(Debug, Clone, Copy)]
struct Decoder {
    vocab: u64,
    t: u64,
    d: u64,
    layers: u64,
    attn: Attn,
    /// Feed-forward of the first `dense_layers` layers.
    first_ffn: Ffn,
    dense_layers: u64,
    /// Feed-forward of the remaining layers.
    ffn: Ffn,
}

impl Decoder {
    /// Every layer with the same attention and feed-forward.
    fn uniform(vocab: u64, t: u64, d: u64, layers: u64, attn: Attn, ffn: Ffn) -> Decoder {
        Decoder {
            vocab,
            t,
            d,
            layers,
            attn,
            first_ffn: ffn,
            dense_layers: 0,
            ffn,
        }
    }
}

/// What a LLaMA-like decoder changes (Qwen2, Gemma); [`Style::LLAMA`] is LLaMA's own.
#[derive(Debug, Clone, Copy)]
struct Style {
    /// An explicit head size (Gemma's 256), else d / heads.
    head_dim: Option<u64>,
    /// Biased q, k and v projections, unbiased o_proj (Qwen2's `bias: "qkv"`).
    qkv_bias: bool,
    /// The gated feed-forward's activation op (`silu`, or `gelu` rewritten by the importer).
    act: &'static str,
    /// The embedding's output multiplied by this (Gemma's sqrt(hidden_size)).
    embed_scale: Option<f64>,
    /// The LM head reads the embedding's table.
    tied: bool,
}

impl Style {
    const LLAMA: Style = Style {
        head_dim: None,
        qkv_bias: false,
        act: "silu",
        embed_scale: None,
        tied: false,
    };
}

fn decoder(family: &str, variant: &str, template: &str, desc: String, c: Decoder) -> GraphFile {
    styled_decoder(family, variant, template, desc, c, Style::LLAMA)
}

fn styled_decoder(
    family: &str,
    variant: &str,
    template: &str,
    desc: String,
    c: Decoder,
    style: Style,
) -> GraphFile {
    let mut b = start(family, variant, template, desc);
    let tokens = b.int_input("tokens", &[B, c.t], c.vocab);
    let labels = b.int_input("labels", &[B, c.t], c.vocab);
    let mut x = b.node(
        "embed_tokens",
        "embedding",
        &[&tokens],
        json!({"num_embeddings": c.vocab, "embedding_dim": c.d}),
    );
    if let Some(scale) = style.embed_scale {
        x = b.node(
            "embed_scale",
            "unary",
            &[&x],
            json!({"fn": "mul_scalar", "scalar": scale}),
        );
    }
    for l in 0..c.layers {
        let p = format!("layers{l}");
        let ln = rms(&mut b, &id(&p, "input_norm"), &x, c.d);
        let attrs = match c.attn {
            Attn::Gqa { heads, kv_heads } => {
                let mut a = json!({"embed_dim": c.d, "num_heads": heads, "num_kv_heads": kv_heads});
                if let Some(hd) = style.head_dim {
                    a["head_dim"] = json!(hd);
                }
                if style.qkv_bias {
                    a["bias"] = json!("qkv");
                }
                ("gqa_attention", a)
            }
            Attn::Mla {
                heads,
                q_lora_rank,
                kv_lora_rank,
                nope,
                rope,
                v,
            } => (
                "mla_attention",
                json!({"embed_dim": c.d, "num_heads": heads, "q_lora_rank": q_lora_rank,
                       "kv_lora_rank": kv_lora_rank, "qk_nope_head_dim": nope,
                       "qk_rope_head_dim": rope, "v_head_dim": v}),
            ),
        };
        let att = b.node(&id(&p, "self_attn"), attrs.0, &[&ln], attrs.1);
        let x1 = b.node(&id(&p, "attn_add"), "add", &[&x, &att], Value::Null);
        let ln2 = rms(&mut b, &id(&p, "post_attention_norm"), &x1, c.d);
        let ffn = if l < c.dense_layers {
            c.first_ffn
        } else {
            c.ffn
        };
        let out = match ffn {
            Ffn::Dense(hidden) => gated(&mut b, &id(&p, "mlp"), &ln2, c.d, hidden, style.act),
            Ffn::Moe {
                experts,
                hidden,
                top_k,
                shared,
            } => {
                let moe = b.node(
                    &id(&p, "moe"),
                    "moe",
                    &[&ln2],
                    json!({"dim": c.d, "hidden": hidden, "num_experts": experts, "top_k": top_k}),
                );
                if shared > 0 {
                    let s = swiglu(&mut b, &id(&p, "shared_experts"), &ln2, c.d, shared);
                    b.node(&id(&p, "moe_add"), "add", &[&moe, &s], Value::Null)
                } else {
                    moe
                }
            }
        };
        x = b.node(&id(&p, "mlp_add"), "add", &[&x1, &out], Value::Null);
    }
    let ln = rms(&mut b, "norm", &x, c.d);
    let logits = if style.tied {
        b.node(
            "lm_head",
            "linear",
            &[&ln],
            json!({"in_features": c.d, "out_features": c.vocab, "bias": false, "tie": "embed_tokens"}),
        )
    } else {
        linear(&mut b, "lm_head", &ln, c.d, c.vocab, false)
    };
    b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
    b.finish("loss")
}

fn llama(variant: &str, c: Decoder) -> GraphFile {
    let (heads, kv) = match c.attn {
        Attn::Gqa { heads, kv_heads } => (heads, kv_heads),
        Attn::Mla { .. } => unreachable!("llama uses gqa attention"),
    };
    let ff = match c.ffn {
        Ffn::Dense(h) => h,
        Ffn::Moe { .. } => unreachable!("llama is dense"),
    };
    let desc = format!(
        "LLaMA-style decoder: {} layers, d={}, {heads} heads ({kv} kv heads, sdpa), SwiGLU {ff}, RMSNorm, T={}, vocab {}, untied LM head",
        c.layers, c.d, c.t, c.vocab
    );
    decoder("llama", variant, "llama-full", desc, c)
}

fn mixtral(variant: &str, c: Decoder) -> GraphFile {
    let (heads, kv) = match c.attn {
        Attn::Gqa { heads, kv_heads } => (heads, kv_heads),
        Attn::Mla { .. } => unreachable!("mixtral uses gqa attention"),
    };
    let (e, h, k) = match c.ffn {
        Ffn::Moe {
            experts,
            hidden,
            top_k,
            ..
        } => (experts, hidden, top_k),
        Ffn::Dense(_) => unreachable!("mixtral is sparse"),
    };
    let desc = format!(
        "Mixtral-style sparse decoder: {} layers, d={}, {heads} heads ({kv} kv heads), MoE {e} SwiGLU experts of {h} (top-{k}), T={}, vocab {}",
        c.layers, c.d, c.t, c.vocab
    );
    decoder("mixtral", variant, "mixtral-full", desc, c)
}

fn mla(variant: &str, c: Decoder) -> GraphFile {
    let Attn::Mla {
        heads,
        kv_lora_rank,
        q_lora_rank,
        ..
    } = c.attn
    else {
        unreachable!("the mla family uses mla attention")
    };
    let ffn = match c.ffn {
        Ffn::Dense(h) => format!("SwiGLU {h}"),
        Ffn::Moe {
            experts,
            hidden,
            top_k,
            shared,
        } => format!(
            "{} dense SwiGLU layer(s) then MoE {experts} experts of {hidden} (top-{top_k}) + shared SwiGLU {shared}",
            c.dense_layers
        ),
    };
    let desc = format!(
        "DeepSeek-V2-style MLA decoder: {} layers, d={}, {heads} heads, kv_lora_rank {kv_lora_rank}, q_lora_rank {q_lora_rank}, {ffn}, T={}, vocab {}",
        c.layers, c.d, c.t, c.vocab
    );
    decoder("mla", variant, "mla-full", desc, c)
}

/// The zoo's transformer shapes at any size, for `crate::import`: each builds the graph the
/// zoo builds for its family (named like the zoo's full-size template; the importer renames it).
pub(crate) mod sized {
    use super::*;

    /// GPT-2: learned positions, pre-LN blocks, GELU MLP of `ff`, tied LM head.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gpt2(
        vocab: u64,
        positions: u64,
        t: u64,
        d: u64,
        layers: u64,
        heads: u64,
        ff: u64,
    ) -> GraphFile {
        gpt(
            "full",
            Tf {
                vocab,
                positions,
                t,
                d,
                layers,
                heads,
                ff,
            },
        )
    }

    /// BERT (and RoBERTa, `type_vocab` 1): post-LN encoder with the pooler.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bert(
        vocab: u64,
        type_vocab: u64,
        positions: u64,
        t: u64,
        d: u64,
        layers: u64,
        heads: u64,
        ff: u64,
    ) -> GraphFile {
        bert_with(
            "full",
            Tf {
                vocab,
                positions,
                t,
                d,
                layers,
                heads,
                ff,
            },
            type_vocab,
        )
    }

    /// ViT for image classification.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn vit(
        image: u64,
        patch: u64,
        classes: u64,
        d: u64,
        layers: u64,
        heads: u64,
        ff: u64,
    ) -> GraphFile {
        let tf = Tf {
            vocab: 0,
            positions: 0,
            t: 0,
            d,
            layers,
            heads,
            ff,
        };
        super::vit(
            "full",
            Vit {
                image,
                patch,
                classes,
                tf,
            },
        )
    }

    /// T5 (ReLU feed-forward, tied head, as many decoder as encoder layers).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn t5(
        vocab: u64,
        t: u64,
        t_dec: u64,
        d: u64,
        layers: u64,
        heads: u64,
        ff: u64,
        buckets: u64,
    ) -> GraphFile {
        let tf = Tf {
            vocab,
            positions: t,
            t,
            d,
            layers,
            heads,
            ff,
        };
        super::t5("full", T5 { tf, t_dec, buckets })
    }

    /// LLaMA-style dense decoder (GQA, SwiGLU of `ff`, untied head).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn llama(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        heads: u64,
        kv_heads: u64,
        ff: u64,
    ) -> GraphFile {
        let attn = Attn::Gqa { heads, kv_heads };
        super::llama(
            "full",
            Decoder::uniform(vocab, t, d, layers, attn, Ffn::Dense(ff)),
        )
    }

    /// LLaMA with the LM head tied to the embedding (Llama 3.2 1B and 3B).
    pub(crate) fn llama_tied(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        [heads, kv_heads]: [u64; 2],
        ff: u64,
    ) -> GraphFile {
        let attn = Attn::Gqa { heads, kv_heads };
        let desc = format!(
            "LLaMA-style decoder: {layers} layers, d={d}, {heads} heads ({kv_heads} kv heads, sdpa), SwiGLU {ff}, RMSNorm, T={t}, vocab {vocab}, tied LM head"
        );
        let style = Style {
            tied: true,
            ..Style::LLAMA
        };
        let c = Decoder::uniform(vocab, t, d, layers, attn, Ffn::Dense(ff));
        styled_decoder("llama", "full", "llama-full", desc, c, style)
    }

    /// Qwen2: LLaMA with biased q, k and v projections (o_proj unbiased), the LM head tied
    /// to the embedding when `tied`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn qwen2(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        [heads, kv_heads, head_dim]: [u64; 3],
        ff: u64,
        tied: bool,
    ) -> GraphFile {
        let attn = Attn::Gqa { heads, kv_heads };
        let desc = format!(
            "Qwen2 decoder: {layers} layers, d={d}, {heads} heads of {head_dim} ({kv_heads} kv heads, biased q/k/v), SwiGLU {ff}, RMSNorm, T={t}, vocab {vocab}, {} LM head",
            if tied { "tied" } else { "untied" }
        );
        let style = Style {
            head_dim: Some(head_dim),
            qkv_bias: true,
            tied,
            ..Style::LLAMA
        };
        let c = Decoder::uniform(vocab, t, d, layers, attn, Ffn::Dense(ff));
        styled_decoder("llama", "full", "qwen2-full", desc, c, style)
    }

    /// Gemma: the embedding scaled by sqrt(d), heads of `head_dim` (heads x head_dim may
    /// exceed d), a gated feed-forward through `gelu` (the importer draws the config's
    /// activation), RMSNorm, the LM head tied to the embedding.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemma(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        [heads, kv_heads, head_dim]: [u64; 3],
        ff: u64,
    ) -> GraphFile {
        let attn = Attn::Gqa { heads, kv_heads };
        let desc = format!(
            "Gemma decoder: {layers} layers, d={d}, {heads} heads of {head_dim} ({kv_heads} kv heads), embedding x sqrt(d), GeGLU {ff}, RMSNorm, T={t}, vocab {vocab}, tied LM head"
        );
        let style = Style {
            head_dim: Some(head_dim),
            act: "gelu",
            embed_scale: Some((d as f64).sqrt()),
            tied: true,
            ..Style::LLAMA
        };
        let c = Decoder::uniform(vocab, t, d, layers, attn, Ffn::Dense(ff));
        styled_decoder("llama", "full", "gemma-full", desc, c, style)
    }

    /// One side of an encoder-decoder: layers, heads, feed-forward width.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Side {
        pub(crate) layers: u64,
        pub(crate) heads: u64,
        pub(crate) ff: u64,
    }

    /// BART for conditional generation: a shared embedding (each side's lookup multiplied by
    /// `embed_scale`), learned positions of `positions` rows per side, `layernorm_embedding`,
    /// post-LN layers with biased attention and a `gelu` feed-forward (the importer draws the
    /// config's activation), cross-attention in the decoder, the LM head tied to the
    /// embedding, plus the `final_logits_bias` buffer added to the logits.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bart(
        vocab: u64,
        positions: u64,
        [t, t_dec]: [u64; 2],
        d: u64,
        encoder: Side,
        decoder: Side,
        embed_scale: f64,
    ) -> GraphFile {
        let desc = format!(
            "BART encoder-decoder (post-LN): {}+{} layers, d={d}, {}/{} heads, ffn {}/{}, encoder T={t}, decoder T={t_dec}, vocab {vocab}, shared embedding, learned positions, tied LM head with final_logits_bias",
            encoder.layers, decoder.layers, encoder.heads, decoder.heads, encoder.ff, decoder.ff
        );
        let mut b = start("bart", "full", "bart-full", desc);
        let ids = b.int_input("input_ids", &[B, t], vocab);
        let dec_ids = b.int_input("decoder_input_ids", &[B, t_dec], vocab);
        let labels = b.int_input("labels", &[B, t_dec], vocab);
        b.buffer("final_logits_bias", &[1, vocab], "float32");
        let table = json!({"num_embeddings": vocab, "embedding_dim": d});
        let shared = b.node("shared", "embedding", &[&ids], table);
        let embed = |b: &mut Builder, p: &str, x: &str| {
            let scaled = b.node(
                &id(p, "embed_scale"),
                "unary",
                &[x],
                json!({"fn": "mul_scalar", "scalar": embed_scale}),
            );
            let pos = b.node(
                &id(p, "embed_positions"),
                "learned_position",
                &[&scaled],
                json!({"num_positions": positions, "dim": d}),
            );
            b.node(
                &id(p, "layernorm_embedding"),
                "layer_norm",
                &[&pos],
                json!({"normalized_shape": d}),
            )
        };
        let ln = |b: &mut Builder, id_: &str, x: &str| {
            b.node(id_, "layer_norm", &[x], json!({"normalized_shape": d}))
        };
        let ffn = |b: &mut Builder, p: &str, x: &str, ff: u64| {
            let fc1 = linear(b, &id(p, "fc1"), x, d, ff, true);
            let act = b.node(&id(p, "gelu"), "gelu", &[&fc1], Value::Null);
            let fc2 = linear(b, &id(p, "fc2"), &act, ff, d, true);
            let add = b.node(&id(p, "ffn_add"), "add", &[x, &fc2], Value::Null);
            ln(b, &id(p, "final_layer_norm"), &add)
        };
        let mut x = embed(&mut b, "encoder", &shared);
        for l in 0..encoder.layers {
            let p = format!("encoder.layers{l}");
            let sa = mha(&mut b, &id(&p, "self_attn"), &[&x], d, encoder.heads, false);
            let add = b.node(&id(&p, "self_attn_add"), "add", &[&x, &sa], Value::Null);
            let x1 = ln(&mut b, &id(&p, "self_attn_layer_norm"), &add);
            x = ffn(&mut b, &p, &x1, encoder.ff);
        }
        let enc = x;
        let tokens = b.node(
            "decoder.embed_tokens",
            "embedding",
            &[&dec_ids],
            json!({"num_embeddings": vocab, "embedding_dim": d, "tie": "shared"}),
        );
        let mut y = embed(&mut b, "decoder", &tokens);
        for l in 0..decoder.layers {
            let p = format!("decoder.layers{l}");
            let sa = mha(&mut b, &id(&p, "self_attn"), &[&y], d, decoder.heads, true);
            let add = b.node(&id(&p, "self_attn_add"), "add", &[&y, &sa], Value::Null);
            let y1 = ln(&mut b, &id(&p, "self_attn_layer_norm"), &add);
            let ca = mha(
                &mut b,
                &id(&p, "encoder_attn"),
                &[&y1, &enc],
                d,
                decoder.heads,
                false,
            );
            let add = b.node(&id(&p, "encoder_attn_add"), "add", &[&y1, &ca], Value::Null);
            let y2 = ln(&mut b, &id(&p, "encoder_attn_layer_norm"), &add);
            y = ffn(&mut b, &p, &y2, decoder.ff);
        }
        let logits = b.node(
            "lm_head",
            "linear",
            &[&y],
            json!({"in_features": d, "out_features": vocab, "bias": false, "tie": "shared"}),
        );
        // `lm_logits + self.final_logits_bias`: a buffer that needs no gradient, so the sum
        // saves nothing, as an elementwise op on the logits.
        let biased = b.node(
            "final_logits_bias",
            "unary",
            &[&logits],
            json!({"fn": "add_scalar", "scalar": 0.0}),
        );
        b.node("loss", "cross_entropy", &[&biased, &labels], Value::Null);
        b.finish("loss")
    }

    /// A decoder layer's normalization ([`Parts::norm`]).
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) enum Norm {
        /// RMSNorm with a weight of d.
        Rms,
        /// LayerNorm with a weight, and a bias when `bias`.
        Layer { bias: bool },
        /// LayerNorm without weight or bias (OLMo's `F.layer_norm(x, shape, None, None)`):
        /// drawn as the `aten.native_layer_norm` call torch records, with its eps.
        Bare { eps: f64 },
        /// Cohere's `CohereLayerNorm`, written out in torch ops (mean, centre, variance,
        /// rsqrt, times a weight of d), each saving what its backward reads: drawn op by op.
        Cohere { eps: f64 },
    }

    /// Which attention projections carry a bias.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) enum Bias {
        None,
        /// q, k and v (Qwen2's), not the output projection.
        Qkv,
        /// All four.
        All,
    }

    /// How q and k are normalized before attention.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) enum QkNorm {
        None,
        /// RMSNorm per head over head_dim (Qwen3's `q_norm`, `k_norm`: gqa_attention qk_norm).
        PerHead,
        /// RMSNorm over the whole projection, heads x head_dim (OLMo-2's): the attention is
        /// then drawn op by op, projections, norms, head views and one sdpa call.
        Full,
    }

    /// How a layer adds its attention and feed-forward to the residual stream.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) enum Residual {
        /// x + attn(norm(x)), then x + mlp(norm(x)) (LLaMA).
        Sequential,
        /// x + attn(norm(x)) + mlp(norm'(x)); `shared_norm`: one norm read by both (GPT-J,
        /// Phi, Falcon-7B, Cohere), else two (GPT-NeoX).
        Parallel { shared_norm: bool },
        /// Gemma-2's: x + norm(attn(norm(x))), then x + norm(mlp(norm(x))).
        Sandwich,
        /// OLMo-2's: x + norm(attn(x)), then x + norm(mlp(x)).
        PostNorm,
    }

    /// A sparse feed-forward ([`Parts::moe`]).
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Sparse {
        pub(crate) experts: u64,
        pub(crate) hidden: u64,
        pub(crate) top_k: u64,
        /// An always-on SwiGLU expert of this width (0: none).
        pub(crate) shared: u64,
        /// The shared expert's output times sigmoid(linear(x, 1)) (Qwen2-MoE's
        /// `shared_expert_gate`).
        pub(crate) shared_gate: bool,
        /// Which layers are sparse (the others take the dense feed-forward of `Parts::ff`).
        pub(crate) layers: Vec<bool>,
        /// The top-k weights renormalised to sum to one (the importer's `moe` attribute).
        pub(crate) renormalize: bool,
    }

    /// A decoder described part by part, for the importer's table of types: each field is
    /// one choice a model class makes.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Parts {
        pub(crate) vocab: u64,
        pub(crate) t: u64,
        pub(crate) d: u64,
        pub(crate) layers: u64,
        pub(crate) heads: u64,
        pub(crate) kv_heads: u64,
        pub(crate) head_dim: u64,
        /// The dense feed-forward's hidden width.
        pub(crate) ff: u64,
        pub(crate) norm: Norm,
        pub(crate) attn_bias: Bias,
        pub(crate) qk_norm: QkNorm,
        /// A gated feed-forward down(act(gate(x)) * up(x)), else down(act(up(x))). Its
        /// activation is drawn as the `gelu` op (id `….mlp.act`), which the importer rewrites
        /// as the config's.
        pub(crate) gated: bool,
        pub(crate) mlp_bias: bool,
        pub(crate) residual: Residual,
        /// Learned positions (a table of this many rows added to the embedding).
        pub(crate) positions: Option<u64>,
        /// The embedding's output times this.
        pub(crate) embed_scale: Option<f64>,
        /// Each attention and feed-forward output times this before the residual add.
        pub(crate) residual_scale: Option<f64>,
        /// The logits times this.
        pub(crate) logits_scale: Option<f64>,
        /// The logits soft-capped: cap * tanh(logits / cap).
        pub(crate) softcap: Option<f64>,
        pub(crate) tied: bool,
        pub(crate) head_bias: bool,
        pub(crate) moe: Option<Sparse>,
        /// Rotary positions drawn op by op ([`Rotary`]); None: not drawn (gqa_attention).
        pub(crate) rotary: Option<Rotary>,
        /// Eager attention drawn op by op ([`Eager`]); None: one sdpa call.
        pub(crate) eager: Option<Eager>,
        /// One fused q/k/v projection, its output viewed as q, k and v.
        pub(crate) fused_qkv: Fused,
        /// One fused gate/up projection chunked in two (Phi-3's `gate_up_proj`):
        /// `up * act(gate)`.
        pub(crate) fused_gate_up: bool,
    }

    /// Rotary positions drawn op by op ([`Parts::rotary`]).
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) struct Rotary {
        /// The rotated dims of each head (`int(head_dim * partial_rotary_factor)`).
        pub(crate) dims: u64,
        /// `cat(x_rot * cos + rotate_half(x_rot) * sin, x[..., dims:])` (GPT-NeoX, Phi,
        /// StableLM, Phi-3: a new q and k in the heads' layout, even when `dims` is the whole
        /// head); false: LLaMA's `x * cos + rotate_half(x) * sin` on the whole head.
        pub(crate) concat: bool,
    }

    /// Eager attention ([`Parts::eager`]): `softmax(q @ kᵀ * scale (soft-capped) + mask) @ v`
    /// with k and v repeated to every head (`repeat_kv`), the `[B, heads, T, T]` scores kept.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) struct Eager {
        pub(crate) scale: f64,
        /// `cap * tanh(scores / cap)` (Gemma-2's `attn_logit_softcapping`).
        pub(crate) softcap: Option<f64>,
    }

    /// What a decoder's layers share: the rotary cos and sin tables and the float causal mask,
    /// each computed once a forward and drawn at the first layer that reads it.
    #[derive(Default)]
    struct Shared {
        tables: Option<[String; 2]>,
        mask: Option<String>,
    }

    /// How a fused q/k/v projection's output is cut into q, k and v ([`Parts::fused_qkv`]).
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub(crate) enum Fused {
        /// Three projections.
        No,
        /// GPT-NeoX's: viewed `[B, T, heads, 3 x head_dim]`, chunked per head.
        PerHead,
        /// Phi-3's: `[q | k | v]` sliced off the last axis, then each viewed as heads.
        Blocks,
    }

    fn norm(b: &mut Builder, id_: &str, x: &str, d: u64, t: u64, kind: Norm) -> String {
        match kind {
            Norm::Rms => rms(b, id_, x, d),
            Norm::Layer { bias: true } => {
                b.node(id_, "layer_norm", &[x], json!({"normalized_shape": d}))
            }
            Norm::Layer { bias: false } => b.node(
                id_,
                "layer_norm",
                &[x],
                json!({"normalized_shape": d, "bias": false}),
            ),
            Norm::Cohere { eps } => cohere_norm(b, id_, x, [d, t], eps),
            Norm::Bare { eps } => b.node(
                id_,
                "aten",
                &[x],
                json!({
                    "target": "aten.native_layer_norm.default",
                    "args": [{"input": 0}, [d], null, null, eps],
                    "outputs": [{"shape": ["B", t, d]}, {"shape": ["B", t, 1]}, {"shape": ["B", t, 1]}],
                    "module": id_,
                }),
            ),
        }
    }

    /// `CohereLayerNorm.forward` (`modeling_cohere.py`): `(x - mean) * rsqrt(var + eps)`
    /// times the weight, `x - mean` computed twice, as torch records it (its float32 casts are
    /// no-ops on float32 activations). The broadcasting products are `aten` nodes.
    fn cohere_norm(b: &mut Builder, id_: &str, x: &str, [d, t]: [u64; 2], eps: f64) -> String {
        let at = |s: &str| format!("{id_}.{s}");
        let mean = |b: &mut Builder, name: &str, x: &str| {
            b.node(&at(name), "mean", &[x], json!({"dim": -1, "keepdim": true}))
        };
        let aten = |b: &mut Builder, name: &str, target: &str, ins: &[&str], extra: Value| {
            let mut a = json!({
                "target": target,
                "args": [{"input": 0}, {"input": 1}],
                "shape": ["B", t, d],
                "module": id_,
            });
            if let (Value::Object(a), Value::Object(extra)) = (&mut a, extra) {
                a.extend(extra);
            }
            b.node(&at(name), "aten", ins, a)
        };
        let m = mean(b, "mean", x);
        let centred = aten(b, "sub", "aten.sub.Tensor", &[x, &m], Value::Null);
        let sq = b.node(
            &at("pow"),
            "unary",
            &[&centred],
            json!({"fn": "pow", "exponent": 2.0}),
        );
        let var = mean(b, "variance", &sq);
        let centred = aten(b, "sub.2", "aten.sub.Tensor", &[x, &m], Value::Null);
        let var = b.node(
            &at("add_eps"),
            "unary",
            &[&var],
            json!({"fn": "add_scalar", "scalar": eps}),
        );
        let r = b.node(&at("rsqrt"), "unary", &[&var], json!({"fn": "rsqrt"}));
        let normed = aten(b, "mul", "aten.mul.Tensor", &[&centred, &r], Value::Null);
        aten(
            b,
            "weight",
            "aten.mul.Tensor",
            &[&normed],
            json!({
                "args": [{"param": 0}, {"input": 0}],
                "params": [{"name": at("weight"), "shape": [d]}],
            }),
        )
    }

    fn scaled(b: &mut Builder, id_: &str, x: &str, scale: Option<f64>) -> String {
        match scale {
            Some(s) => b.node(id_, "unary", &[x], json!({"fn": "mul_scalar", "scalar": s})),
            None => x.to_string(),
        }
    }

    /// The attention of [`Parts`] at layer prefix `p`; `shared`: what the layers share.
    fn parts_attention(
        b: &mut Builder,
        p: &str,
        x: &str,
        c: &Parts,
        shared: &mut Shared,
    ) -> String {
        let (h, kv, hd) = (c.heads, c.kv_heads, c.head_dim);
        let by_op = c.qk_norm == QkNorm::Full || c.rotary.is_some() || c.eager.is_some();
        if !by_op && c.fused_qkv == Fused::No {
            let mut a =
                json!({"embed_dim": c.d, "num_heads": h, "num_kv_heads": kv, "head_dim": hd});
            match c.attn_bias {
                Bias::None => {}
                Bias::Qkv => a["bias"] = json!("qkv"),
                Bias::All => a["bias"] = json!(true),
            }
            if c.qk_norm == QkNorm::PerHead {
                a["qk_norm"] = json!(true);
            }
            return b.node(&id(p, "self_attn"), "gqa_attention", &[x], a);
        }
        let qkv_bias = c.attn_bias != Bias::None;
        let blocks = (c.fused_qkv == Fused::Blocks).then(|| {
            let width = (h + 2 * kv) * hd;
            linear(b, &id(p, "self_attn.qkv_proj"), x, c.d, width, qkv_bias)
        });
        let heads = |b: &mut Builder, name: &str, n: u64| {
            let proj = match &blocks {
                None => linear(
                    b,
                    &id(p, &format!("self_attn.{name}_proj")),
                    x,
                    c.d,
                    n * hd,
                    qkv_bias,
                ),
                Some(qkv) => {
                    let start = match name {
                        "q" => 0,
                        "k" => h * hd,
                        _ => (h + kv) * hd,
                    };
                    b.node(
                        &id(p, &format!("self_attn.{name}_block")),
                        "slice",
                        &[qkv],
                        json!({"dim": 2, "start": start, "end": start + n * hd}),
                    )
                }
            };
            let normed = if name == "v" || c.qk_norm != QkNorm::Full {
                proj
            } else {
                rms(b, &id(p, &format!("self_attn.{name}_norm")), &proj, n * hd)
            };
            let view = b.node(
                &id(p, &format!("self_attn.{name}_view")),
                "reshape",
                &[&normed],
                json!({"shape": ["B", -1, n, hd]}),
            );
            b.node(
                &id(p, &format!("self_attn.{name}_heads")),
                "permute",
                &[&view],
                json!({"dims": [0, 2, 1, 3]}),
            )
        };
        let [q, k, v] = if c.fused_qkv == Fused::PerHead {
            fused_qkv(b, p, x, c)
        } else {
            [heads(b, "q", h), heads(b, "k", kv), heads(b, "v", kv)]
        };
        let (q, k) = match c.rotary {
            Some(r) => rotary_qk(b, p, [&q, &k], [c.t, hd], r, &mut shared.tables),
            None => (q, k),
        };
        let attn = match c.eager {
            None => b.node(
                &id(p, "self_attn.sdpa"),
                "sdpa",
                &[&q, &k, &v],
                json!({"causal": true, "enable_gqa": kv != h}),
            ),
            Some(e) => eager_attention(b, p, [&q, &k, &v], c, e, &mut shared.mask),
        };
        let back = b.node(
            &id(p, "self_attn.transpose"),
            "permute",
            &[&attn],
            json!({"dims": [0, 2, 1, 3]}),
        );
        let flat = b.node(
            &id(p, "self_attn.merge"),
            "reshape",
            &[&back],
            json!({"shape": ["B", -1, h * hd]}),
        );
        linear(
            b,
            &id(p, "self_attn"),
            &flat,
            h * hd,
            c.d,
            c.attn_bias == Bias::All,
        )
    }

    /// GPT-NeoX's fused projection: `query_key_value(x).view(B, T, heads, 3 x head_dim)
    /// .transpose(1, 2).chunk(3, dim=-1)`: q, k and v are views of one `[B, T, 3d]` output.
    fn fused_qkv(b: &mut Builder, p: &str, x: &str, c: &Parts) -> [String; 3] {
        let (h, hd) = (c.heads, c.head_dim);
        let qkv_bias = c.attn_bias != Bias::None;
        let proj = linear(
            b,
            &id(p, "self_attn.qkv_proj"),
            x,
            c.d,
            3 * h * hd,
            qkv_bias,
        );
        let view = b.node(
            &id(p, "self_attn.qkv_view"),
            "reshape",
            &[&proj],
            json!({"shape": ["B", -1, h, 3 * hd]}),
        );
        let heads = b.node(
            &id(p, "self_attn.qkv_heads"),
            "permute",
            &[&view],
            json!({"dims": [0, 2, 1, 3]}),
        );
        let chunk = |b: &mut Builder, name: &str, i: u64| {
            b.node(
                &id(p, &format!("self_attn.{name}_heads")),
                "slice",
                &[&heads],
                json!({"dim": 3, "start": i * hd, "end": (i + 1) * hd}),
            )
        };
        [chunk(b, "q", 0), chunk(b, "k", 1), chunk(b, "v", 2)]
    }

    /// Rotary positions on the first `rot` dims of q's and k's heads, as transformers'
    /// `apply_rotary_pos_emb` of GPT-NeoX, Phi and StableLM runs them: `x_rot * cos +
    /// rotate_half(x_rot) * sin` (rotate_half: `cat(-x2, x1)`), then `cat(x_rot, x_pass)`.
    /// The cos and sin tables (`[1, T, rot]`, computed once per forward) are `tables`.
    fn rotary_qk(
        b: &mut Builder,
        p: &str,
        [q, k]: [&str; 2],
        [t, hd]: [u64; 2],
        r: Rotary,
        tables: &mut Option<[String; 2]>,
    ) -> (String, String) {
        let rot = r.dims;
        let slice = |b: &mut Builder, name: &str, x: &str, start: u64, end: u64| {
            b.node(
                &id(p, &format!("self_attn.{name}")),
                "slice",
                &[x],
                json!({"dim": 3, "start": start, "end": end}),
            )
        };
        let split = |b: &mut Builder, name: &str, x: &str| {
            if !r.concat {
                return (x.to_string(), None);
            }
            let rotated = slice(b, &format!("{name}_rot"), x, 0, rot);
            let pass = (rot < hd).then(|| slice(b, &format!("{name}_pass"), x, rot, hd));
            (rotated, pass)
        };
        let (qr, qp) = split(b, "q", q);
        let (kr, kp) = split(b, "k", k);
        let mut rotate = |b: &mut Builder, name: &str, r: &str| {
            let table = |b: &mut Builder, which: &str, after: &str| {
                b.node(
                    &format!("rotary_emb.{which}"),
                    "constant",
                    &[after],
                    json!({"shape": [1, t, rot]}),
                )
            };
            let cos = match tables {
                Some([cos, _]) => cos.clone(),
                None => table(b, "cos", r),
            };
            let at = |s: &str| id(p, &format!("self_attn.{name}_rotary.{s}"));
            let m1 = b.node(&at("cos"), "mul", &[r, &cos], Value::Null);
            let x1 = b.node(
                &at("x1"),
                "slice",
                &[r],
                json!({"dim": 3, "start": 0, "end": rot / 2}),
            );
            let x2 = b.node(
                &at("x2"),
                "slice",
                &[r],
                json!({"dim": 3, "start": rot / 2, "end": rot}),
            );
            let neg = b.node(&at("neg"), "unary", &[&x2], json!({"fn": "neg"}));
            let half = b.node(
                &at("rotate_half"),
                "concat",
                &[&neg, &x1],
                json!({"dim": -1}),
            );
            let sin = match tables {
                Some([_, sin]) => sin.clone(),
                None => {
                    let sin = table(b, "sin", &half);
                    *tables = Some([cos, sin.clone()]);
                    sin
                }
            };
            let m2 = b.node(&at("sin"), "mul", &[&half, &sin], Value::Null);
            b.node(&at("add"), "add", &[&m1, &m2], Value::Null)
        };
        let qe = rotate(b, "q", &qr);
        let ke = rotate(b, "k", &kr);
        if !r.concat {
            return (qe, ke);
        }
        let join = |b: &mut Builder, name: &str, e: &str, pass: Option<String>| {
            let mut ins = vec![e];
            ins.extend(pass.as_deref());
            b.node(
                &id(p, &format!("self_attn.{name}_embed")),
                "concat",
                &ins,
                json!({"dim": -1}),
            )
        };
        (join(b, "q", &qe, qp), join(b, "k", &ke, kp))
    }

    /// transformers' `eager_attention_forward` (Gemma-2's): k and v repeated to every head
    /// (`repeat_kv`: a view expanded, then copied), `q @ kᵀ * scale`, soft-capped, plus the
    /// float causal mask (`[B, 1, T, T]`, built once a forward: `mask`), softmax, `@ v`.
    fn eager_attention(
        b: &mut Builder,
        p: &str,
        [q, k, v]: [&str; 3],
        c: &Parts,
        e: Eager,
        mask: &mut Option<String>,
    ) -> String {
        let (h, kv, hd, t) = (c.heads, c.kv_heads, c.head_dim, c.t);
        let at = |s: &str| id(p, &format!("self_attn.{s}"));
        let repeat = |b: &mut Builder, name: &str, x: &str| {
            if kv == h {
                return x.to_string();
            }
            let one = b.node(
                &at(&format!("{name}_group")),
                "reshape",
                &[x],
                json!({"shape": ["B", kv, 1, t, hd]}),
            );
            let wide = b.node(
                &at(&format!("{name}_expand")),
                "expand",
                &[&one],
                json!({"shape": ["B", kv, h / kv, t, hd]}),
            );
            b.node(
                &at(&format!("{name}_repeat")),
                "reshape",
                &[&wide],
                json!({"shape": ["B", h, t, hd]}),
            )
        };
        let k = repeat(b, "k", k);
        let v = repeat(b, "v", v);
        let kt = b.node(&at("k_t"), "permute", &[&k], json!({"dims": [0, 1, 3, 2]}));
        let scores = b.node(&at("scores"), "matmul", &[q, &kt], Value::Null);
        let mut s = scaled(b, &at("scale"), &scores, Some(e.scale));
        if let Some(cap) = e.softcap {
            s = scaled(b, &at("softcap.div"), &s, Some(1.0 / cap));
            s = b.node(&at("softcap.tanh"), "unary", &[&s], json!({"fn": "tanh"}));
            s = scaled(b, &at("softcap"), &s, Some(cap));
        }
        let m = mask
            .get_or_insert_with(|| {
                b.node(
                    "causal_mask",
                    "constant",
                    &[&s],
                    json!({"shape": ["B", 1, t, t]}),
                )
            })
            .clone();
        let masked = b.node(&at("masked"), "add", &[&s, &m], Value::Null);
        let probs = b.node(&at("softmax"), "softmax", &[&masked], json!({"dim": -1}));
        b.node(&at("attn_v"), "matmul", &[&probs, &v], Value::Null)
    }

    /// The feed-forward of [`Parts`] at layer `l` (prefix `p`).
    fn parts_mlp(b: &mut Builder, p: &str, l: u64, x: &str, c: &Parts) -> String {
        if let Some(s) = c.moe.as_ref().filter(|s| s.layers[l as usize]) {
            let moe = b.node(
                &id(p, "moe"),
                "moe",
                &[x],
                json!({"dim": c.d, "hidden": s.hidden, "num_experts": s.experts, "top_k": s.top_k}),
            );
            if s.shared == 0 {
                return moe;
            }
            let mut shared = swiglu(b, &id(p, "shared_expert"), x, c.d, s.shared);
            if s.shared_gate {
                let g = linear(b, &id(p, "shared_expert_gate"), x, c.d, 1, false);
                let g = b.node(
                    &id(p, "shared_expert_gate.sigmoid"),
                    "unary",
                    &[&g],
                    json!({"fn": "sigmoid"}),
                );
                // sigmoid(gate) [B, T, 1] * shared [B, T, d]: torch broadcasts, which the
                // graph's `mul` does not; drawn as the aten call torch records.
                shared = b.node(
                    &id(p, "shared_expert.gated"),
                    "aten",
                    &[&g, &shared],
                    json!({
                        "target": "aten.mul.Tensor",
                        "args": [{"input": 0}, {"input": 1}],
                        "shape": ["B", c.t, c.d],
                        "module": id(p, "shared_expert"),
                    }),
                );
            }
            return b.node(&id(p, "moe_add"), "add", &[&moe, &shared], Value::Null);
        }
        let mp = id(p, "mlp");
        let hidden = c.ff;
        if c.fused_gate_up {
            let gu = linear(b, &id(&mp, "gate_up_proj"), x, c.d, 2 * hidden, c.mlp_bias);
            let half = |b: &mut Builder, name: &str, start: u64| {
                b.node(
                    &id(&mp, name),
                    "slice",
                    &[&gu],
                    json!({"dim": 2, "start": start, "end": start + hidden}),
                )
            };
            let gate = half(b, "gate", 0);
            let up = half(b, "up", hidden);
            let act = b.node(&id(&mp, "act"), "gelu", &[&gate], Value::Null);
            let h = b.node(&id(&mp, "mul"), "mul", &[&up, &act], Value::Null);
            linear(b, &id(&mp, "down_proj"), &h, hidden, c.d, c.mlp_bias)
        } else if c.gated {
            let gate = linear(b, &id(&mp, "gate_proj"), x, c.d, hidden, c.mlp_bias);
            let act = b.node(&id(&mp, "act"), "gelu", &[&gate], Value::Null);
            let up = linear(b, &id(&mp, "up_proj"), x, c.d, hidden, c.mlp_bias);
            let h = b.node(&id(&mp, "mul"), "mul", &[&act, &up], Value::Null);
            linear(b, &id(&mp, "down_proj"), &h, hidden, c.d, c.mlp_bias)
        } else {
            let up = linear(b, &id(&mp, "up_proj"), x, c.d, hidden, c.mlp_bias);
            let act = b.node(&id(&mp, "act"), "gelu", &[&up], Value::Null);
            linear(b, &id(&mp, "down_proj"), &act, hidden, c.d, c.mlp_bias)
        }
    }

    /// The decoder [`Parts`] describes, with the LM head and the loss. Node ids follow the
    /// zoo's decoders: `embed_tokens`, `layers<l>.input_norm`, `.self_attn`, `.attn_add`,
    /// `.post_attention_norm`, `.mlp…`, `.mlp_add`, `norm`, `lm_head`.
    pub(crate) fn decoder(c: &Parts, desc: String) -> GraphFile {
        let mut b = start("decoder", "full", "decoder-full", desc);
        let tokens = b.int_input("tokens", &[B, c.t], c.vocab);
        let labels = b.int_input("labels", &[B, c.t], c.vocab);
        let mut x = b.node(
            "embed_tokens",
            "embedding",
            &[&tokens],
            json!({"num_embeddings": c.vocab, "embedding_dim": c.d}),
        );
        x = scaled(&mut b, "embed_scale", &x, c.embed_scale);
        if let Some(n) = c.positions {
            x = b.node(
                "embed_positions",
                "learned_position",
                &[&x],
                json!({"num_positions": n, "dim": c.d}),
            );
        }
        let (d, t) = (c.d, c.t);
        let mut shared = Shared::default();
        for l in 0..c.layers {
            let p = format!("layers{l}");
            let p = p.as_str();
            x = match c.residual {
                Residual::Sequential | Residual::Sandwich | Residual::PostNorm => {
                    let sandwich = c.residual == Residual::Sandwich;
                    let post = c.residual == Residual::PostNorm;
                    let h = if post {
                        x.clone()
                    } else {
                        norm(&mut b, &id(p, "input_norm"), &x, d, t, c.norm)
                    };
                    let mut a = parts_attention(&mut b, p, &h, c, &mut shared);
                    if sandwich || post {
                        a = norm(&mut b, &id(p, "post_attention_norm"), &a, d, t, c.norm);
                    }
                    let a = scaled(&mut b, &id(p, "attn_scale"), &a, c.residual_scale);
                    let x1 = b.node(&id(p, "attn_add"), "add", &[&x, &a], Value::Null);
                    let h2 = if post {
                        x1.clone()
                    } else if sandwich {
                        norm(&mut b, &id(p, "pre_feedforward_norm"), &x1, d, t, c.norm)
                    } else {
                        norm(&mut b, &id(p, "post_attention_norm"), &x1, d, t, c.norm)
                    };
                    let mut m = parts_mlp(&mut b, p, l, &h2, c);
                    if sandwich || post {
                        m = norm(&mut b, &id(p, "post_feedforward_norm"), &m, d, t, c.norm);
                    }
                    let m = scaled(&mut b, &id(p, "mlp_scale"), &m, c.residual_scale);
                    b.node(&id(p, "mlp_add"), "add", &[&x1, &m], Value::Null)
                }
                Residual::Parallel { shared_norm } => {
                    let h = norm(&mut b, &id(p, "input_norm"), &x, d, t, c.norm);
                    let a = parts_attention(&mut b, p, &h, c, &mut shared);
                    let h2 = if shared_norm {
                        h
                    } else {
                        norm(&mut b, &id(p, "post_attention_norm"), &x, d, t, c.norm)
                    };
                    let m = parts_mlp(&mut b, p, l, &h2, c);
                    let s = b.node(&id(p, "attn_mlp_add"), "add", &[&a, &m], Value::Null);
                    b.node(&id(p, "mlp_add"), "add", &[&x, &s], Value::Null)
                }
            };
        }
        let ln = norm(&mut b, "norm", &x, d, t, c.norm);
        let mut head = json!({"in_features": d, "out_features": c.vocab});
        if !c.head_bias {
            head["bias"] = json!(false);
        }
        if c.tied {
            head["tie"] = json!("embed_tokens");
        }
        let mut logits = b.node("lm_head", "linear", &[&ln], head);
        logits = scaled(&mut b, "logits_scale", &logits, c.logits_scale);
        if let Some(cap) = c.softcap {
            let s = scaled(&mut b, "softcap.div", &logits, Some(1.0 / cap));
            let s = b.node("softcap.tanh", "unary", &[&s], json!({"fn": "tanh"}));
            logits = scaled(&mut b, "softcap", &s, Some(cap));
        }
        b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
        b.finish("loss")
    }

    /// An encoder without BERT's extras, for [`encoder`].
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Encoder {
        pub(crate) vocab: u64,
        /// Token types (0: none, DistilBERT's).
        pub(crate) type_vocab: u64,
        pub(crate) positions: u64,
        pub(crate) t: u64,
        /// The embeddings' width (ELECTRA-small's 128), projected to d when it differs.
        pub(crate) embed: u64,
        pub(crate) d: u64,
        pub(crate) layers: u64,
        pub(crate) heads: u64,
        pub(crate) ff: u64,
    }

    /// A post-LN encoder without a pooler (DistilBertModel, ElectraModel): BERT's layers,
    /// trained by MSE of the first token's output against a target.
    pub(crate) fn encoder(e: Encoder, desc: String) -> GraphFile {
        let c = Tf {
            vocab: e.vocab,
            positions: e.positions,
            t: e.t,
            d: e.d,
            layers: e.layers,
            heads: e.heads,
            ff: e.ff,
        };
        let mut b = start("encoder", "full", "encoder-full", desc);
        let ids = b.int_input("input_ids", &[B, c.t], c.vocab);
        let types =
            (e.type_vocab > 0).then(|| b.int_input("token_type_ids", &[B, c.t], e.type_vocab));
        let target = b.input("target", &[B, c.d]);
        b.buffer("embeddings.position_ids", &[1, c.positions], "int64");
        if e.type_vocab > 0 {
            b.buffer("embeddings.token_type_ids", &[1, c.positions], "int64");
        }
        let mut x = b.node(
            "embeddings.word",
            "embedding",
            &[&ids],
            json!({"num_embeddings": c.vocab, "embedding_dim": e.embed}),
        );
        if let Some(types) = types {
            let ty = b.node(
                "embeddings.token_type",
                "embedding",
                &[&types],
                json!({"num_embeddings": e.type_vocab, "embedding_dim": e.embed}),
            );
            x = b.node("embeddings.add", "add", &[&x, &ty], Value::Null);
        }
        let pos = b.node(
            "embeddings.position",
            "learned_position",
            &[&x],
            json!({"num_positions": c.positions, "dim": e.embed}),
        );
        x = b.node(
            "embeddings.layer_norm",
            "layer_norm",
            &[&pos],
            json!({"normalized_shape": e.embed}),
        );
        if e.embed != c.d {
            x = linear(&mut b, "embeddings_project", &x, e.embed, c.d, true);
        }
        for l in 0..c.layers {
            x = post_ln_block(&mut b, &format!("encoder.layer{l}"), &x, &c);
        }
        let first = b.node("first_token", "select_token", &[&x], json!({"index": 0}));
        b.node("loss", "mse", &[&first, &target], Value::Null);
        b.finish("loss")
    }

    /// DeepSeek-V2's MLA attention sizes.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Mla {
        pub(crate) heads: u64,
        pub(crate) q_lora_rank: u64,
        pub(crate) kv_lora_rank: u64,
        pub(crate) nope: u64,
        pub(crate) rope: u64,
        pub(crate) v: u64,
    }

    /// DeepSeek-V2: the zoo's MLA decoder, the first `dense_layers` layers with a SwiGLU of
    /// `ff`, the others `experts` routed SwiGLU experts of `hidden` (top-`top_k`) plus a
    /// shared SwiGLU of `shared`; untied LM head.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn deepseek_v2(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        a: Mla,
        [ff, dense_layers]: [u64; 2],
        [experts, hidden, top_k, shared]: [u64; 4],
    ) -> GraphFile {
        super::mla(
            "full",
            Decoder {
                vocab,
                t,
                d,
                layers,
                attn: Attn::Mla {
                    heads: a.heads,
                    q_lora_rank: a.q_lora_rank,
                    kv_lora_rank: a.kv_lora_rank,
                    nope: a.nope,
                    rope: a.rope,
                    v: a.v,
                },
                first_ffn: Ffn::Dense(ff),
                dense_layers,
                ffn: Ffn::Moe {
                    experts,
                    hidden,
                    top_k,
                    shared,
                },
            },
        )
    }

    /// Mixtral-style sparse decoder (`experts` SwiGLU experts of `hidden`, top-`top_k`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mixtral(
        vocab: u64,
        t: u64,
        d: u64,
        layers: u64,
        heads: u64,
        kv_heads: u64,
        experts: u64,
        hidden: u64,
        top_k: u64,
    ) -> GraphFile {
        let ffn = Ffn::Moe {
            experts,
            hidden,
            top_k,
            shared: 0,
        };
        let attn = Attn::Gqa { heads, kv_heads };
        super::mixtral("full", Decoder::uniform(vocab, t, d, layers, attn, ffn))
    }
}

/// Every transformer graph.
pub(crate) fn graphs() -> Vec<GraphFile> {
    let mut g = Vec::new();
    encoders_and_gpt2(&mut g);
    decoders(&mut g);
    g
}

/// GPT-2, BERT, ViT and T5: the full sizes and their reduced variants.
fn encoders_and_gpt2(g: &mut Vec<GraphFile>) {
    // GPT-2 small: 124,439,808 parameters.
    let gpt2 = Tf {
        vocab: 50257,
        positions: 1024,
        t: 1024,
        d: 768,
        layers: 12,
        heads: 12,
        ff: 3072,
    };
    g.push(gpt("full", gpt2));
    for (v, t, d, layers, heads) in [
        ("r1", 512, 256, 4, 4),
        ("r2", 512, 384, 6, 6),
        ("r3", 512, 512, 8, 8),
    ] {
        g.push(gpt(v, Tf::reduced(t, d, layers, heads)));
    }

    // bert-base-cased: 108,310,272 parameters.
    let bert_base = Tf {
        vocab: 28996,
        positions: 512,
        t: 512,
        d: 768,
        layers: 12,
        heads: 12,
        ff: 3072,
    };
    g.push(bert("full", bert_base));
    for (v, t, d, layers, heads) in [
        ("r1", 512, 256, 4, 4),
        ("r2", 256, 384, 6, 6),
        ("r3", 512, 512, 8, 8),
    ] {
        g.push(bert(v, Tf::reduced(t, d, layers, heads)));
    }

    // ViT-B/16: 86,567,656 parameters.
    let vit_b16 = Vit {
        image: 224,
        patch: 16,
        classes: 1000,
        tf: Tf {
            vocab: 0,
            positions: 197,
            t: 197,
            d: 768,
            layers: 12,
            heads: 12,
            ff: 3072,
        },
    };
    g.push(vit("full", vit_b16));
    for (v, image, patch, d, layers, heads) in [
        ("r1", 128, 8, 256, 8, 4),
        ("r2", 128, 8, 384, 6, 6),
        ("r3", 128, 8, 512, 8, 8),
    ] {
        let t = (image / patch) * (image / patch) + 1;
        g.push(vit(
            v,
            Vit {
                image,
                patch,
                classes: 100,
                tf: Tf {
                    vocab: 0,
                    positions: t,
                    t,
                    d,
                    layers,
                    heads,
                    ff: 4 * d,
                },
            },
        ));
    }

    // T5-small: 60,506,624 parameters.
    let t5_small = T5 {
        tf: Tf {
            vocab: 32128,
            positions: 512,
            t: 512,
            d: 512,
            layers: 6,
            heads: 8,
            ff: 2048,
        },
        t_dec: 128,
        buckets: 32,
    };
    g.push(t5("full", t5_small));
    for (v, t, t_dec, d, layers, heads) in [
        ("r1", 512, 128, 256, 2, 4),
        ("r2", 512, 128, 384, 4, 6),
        ("r3", 512, 256, 512, 4, 8),
    ] {
        g.push(t5(
            v,
            T5 {
                tf: Tf {
                    vocab: 8192,
                    positions: t,
                    t,
                    d,
                    layers,
                    heads,
                    ff: 4 * d,
                },
                t_dec,
                buckets: 32,
            },
        ));
    }
}

/// LLaMA, Mixtral and the MLA decoder: the full sizes and their reduced variants.
fn decoders(g: &mut Vec<GraphFile>) {
    // LLaMA-7B: 6,738,415,616 parameters.
    let dense = |vocab, t, d, layers, heads, kv_heads, ff| Decoder {
        vocab,
        t,
        d,
        layers,
        attn: Attn::Gqa { heads, kv_heads },
        first_ffn: Ffn::Dense(ff),
        dense_layers: layers,
        ffn: Ffn::Dense(ff),
    };
    g.push(llama("full", dense(32000, 2048, 4096, 32, 32, 32, 11008)));
    g.push(llama("r1", dense(8192, 512, 256, 4, 4, 2, 688)));
    g.push(llama("r2", dense(8192, 512, 512, 6, 8, 2, 1376)));
    g.push(llama("r3", dense(8192, 512, 384, 12, 6, 2, 1024)));

    // Mixtral-8x7B: 46,702,792,704 parameters.
    let sparse = |vocab, t, d, layers, heads, kv_heads, experts, hidden| Decoder {
        vocab,
        t,
        d,
        layers,
        attn: Attn::Gqa { heads, kv_heads },
        first_ffn: Ffn::Dense(0),
        dense_layers: 0,
        ffn: Ffn::Moe {
            experts,
            hidden,
            top_k: 2,
            shared: 0,
        },
    };
    g.push(mixtral(
        "full",
        sparse(32000, 4096, 4096, 32, 32, 8, 8, 14336),
    ));
    g.push(mixtral("r1", sparse(8192, 256, 256, 4, 4, 2, 8, 512)));
    g.push(mixtral("r2", sparse(8192, 512, 384, 4, 6, 2, 8, 768)));
    g.push(mixtral("r3", sparse(8192, 512, 384, 6, 6, 2, 8, 768)));

    // DeepSeek-V2-Lite-like MLA decoder (27 layers, first dense, then 64 routed + 2 shared).
    g.push(mla(
        "full",
        Decoder {
            vocab: 102400,
            t: 4096,
            d: 2048,
            layers: 27,
            attn: Attn::Mla {
                heads: 16,
                q_lora_rank: 0,
                kv_lora_rank: 512,
                nope: 128,
                rope: 64,
                v: 128,
            },
            first_ffn: Ffn::Dense(10944),
            dense_layers: 1,
            ffn: Ffn::Moe {
                experts: 64,
                hidden: 1408,
                top_k: 6,
                shared: 2816,
            },
        },
    ));
    let small_mla = |t, d, layers, heads, q_lora_rank, kv_lora_rank, head, ffn| Decoder {
        vocab: 8192,
        t,
        d,
        layers,
        attn: Attn::Mla {
            heads,
            q_lora_rank,
            kv_lora_rank,
            nope: head,
            rope: head / 2,
            v: head,
        },
        first_ffn: Ffn::Dense(4 * d),
        dense_layers: 1,
        ffn,
    };
    g.push(mla(
        "r1",
        small_mla(512, 256, 4, 4, 0, 64, 32, Ffn::Dense(688)),
    ));
    g.push(mla(
        "r2",
        small_mla(512, 384, 6, 6, 0, 128, 32, Ffn::Dense(1024)),
    ));
    g.push(mla(
        "r3",
        small_mla(
            512,
            384,
            6,
            6,
            192,
            128,
            64,
            Ffn::Moe {
                experts: 8,
                hidden: 384,
                top_k: 2,
                shared: 768,
            },
        ),
    ));
}
