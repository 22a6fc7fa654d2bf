//! DistilBERT and ELECTRA (post-LN encoders without a pooler) and DeepSeek-V2 (the zoo's MLA
//! decoder).

use super::{activation, attention, dropout, sequence, within, Built, Config, Options, ROTARY};
use crate::error::{Error, Result};

/// The `drawn:` lines of an encoder's dropouts: `hidden` after the embeddings' norm and after
/// the layer nodes `at` accepts, `attn` on the attention probabilities.
fn encoder_dropouts(
    graph: &mut crate::graph::GraphFile,
    o: &Options,
    (field, p): (&str, f64),
    attn: f64,
    at: fn(&str) -> bool,
    where_: &str,
) -> Vec<String> {
    let n = dropout::after(graph, p, |id| id == "embeddings.layer_norm" || at(id));
    let mut said = attention(graph, o.attn, attn);
    said.push(dropout::said(field, p, n, where_));
    said
}

/// DistilBertModel (`modeling_distilbert.py`): word and learned position embeddings (no
/// token types), LayerNorm, `n_layers` post-LN layers (q_lin, k_lin, v_lin, out_lin with
/// biases; lin1, `activation`, lin2), no pooler: trained by MSE of the first token's output.
pub(super) fn distilbert(c: &Config, o: &Options) -> Result<Built> {
    c.require(
        "sinusoidal_pos_embds",
        c.flag_or("sinusoidal_pos_embds", false)?,
        false,
        "learned positions",
    )?;
    let d = c.size("dim")?;
    let heads = c.size("n_heads")?;
    divides(c, d, heads, "dim", "n_heads")?;
    let positions = c.size_or("max_position_embeddings", 512)?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 512, positions)?;
    within(c, "max_position_embeddings", seq, positions)?;
    let e = crate::zoo::sized::Encoder {
        vocab: c.size("vocab_size")?,
        type_vocab: 0,
        positions,
        t: seq,
        embed: d,
        d,
        layers: c.size("n_layers")?,
        heads,
        ff: c.size("hidden_dim")?,
    };
    let desc = format!(
        "DistilBERT encoder (post-LN): {} layers, d={d}, {heads} heads, ffn {}, T={seq}, vocab {}, no pooler: MSE of the first token's output",
        e.layers, e.ff, e.vocab
    );
    let mut graph = crate::zoo::sized::encoder(e, desc);
    let mut drawn = vec![super::activation(c, &mut graph, "activation", "gelu")?];
    // Embeddings: dropout(LayerNorm(...)); TransformerBlock: no dropout after attention, the
    // FFN's dropout after lin2.
    drawn.extend(encoder_dropouts(
        &mut graph,
        o,
        ("dropout", c.probability_or("dropout", 0.1)?),
        c.probability_or("attention_dropout", 0.1)?,
        |id| dropout::in_block(id, "encoder.layer", ".output"),
        "after the embeddings and each feed-forward's lin2",
    ));
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: Vec::new(),
        drawn,
    })
}

/// ElectraModel (`modeling_electra.py`, the discriminator without its head): BERT's
/// embeddings at `embedding_size`, projected to hidden_size when they differ
/// (`embeddings_project`), BERT's layers, no pooler.
pub(super) fn electra(c: &Config, o: &Options) -> Result<Built> {
    c.require(
        "position_embedding_type",
        c.text_or("position_embedding_type", "absolute")?,
        "absolute",
        "learned absolute positions",
    )?;
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    divides(c, d, heads, "hidden_size", "num_attention_heads")?;
    let positions = c.size("max_position_embeddings")?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 512, positions)?;
    within(c, "max_position_embeddings", seq, positions)?;
    let e = crate::zoo::sized::Encoder {
        vocab: c.size("vocab_size")?,
        type_vocab: c.size_or("type_vocab_size", 2)?,
        positions,
        t: seq,
        embed: c.size_or("embedding_size", 128)?,
        d,
        layers: c.size("num_hidden_layers")?,
        heads,
        ff: c.size("intermediate_size")?,
    };
    let desc = format!(
        "ELECTRA encoder (post-LN): embeddings of {}{}, {} layers, d={d}, {heads} heads, ffn {}, T={seq}, vocab {}, no pooler: MSE of the first token's output",
        e.embed,
        if e.embed != d { " projected to d" } else { "" },
        e.layers,
        e.ff,
        e.vocab
    );
    let mut graph = crate::zoo::sized::encoder(e, desc);
    let mut drawn = vec![activation(c, &mut graph, "hidden_act", "gelu")?];
    drawn.extend(encoder_dropouts(
        &mut graph,
        o,
        (
            "hidden_dropout_prob",
            c.probability_or("hidden_dropout_prob", 0.1)?,
        ),
        c.probability_or("attention_probs_dropout_prob", 0.1)?,
        |id| {
            dropout::in_block(id, "encoder.layer", ".attention")
                || dropout::in_block(id, "encoder.layer", ".output")
        },
        "after the embeddings and each layer's attention and output projections",
    ));
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: Vec::new(),
        drawn,
    })
}

/// `heads` divides the width `d`: else the config contradicts itself, naming both fields.
fn divides(c: &Config, d: u64, heads: u64, d_field: &str, heads_field: &str) -> Result<()> {
    if !d.is_multiple_of(heads) {
        return Err(Error::field(
            c.path,
            heads_field,
            format!("{heads} does not divide `{d_field}` {d} (each head is {d_field} / {heads_field} wide)"),
        ));
    }
    Ok(())
}

/// DeepSeek-V2 (`modeling_deepseek_v2.py`): MLA attention (q through a low-rank q_a/q_b pair
/// when `q_lora_rank` is set), the first `first_k_dense_replace` layers dense SwiGLU, the
/// others `n_routed_experts` routed SwiGLU experts plus `n_shared_experts` shared ones (one
/// SwiGLU of n_shared x moe_intermediate_size), RMSNorm, untied LM head.
pub(super) fn deepseek_v2(c: &Config, o: &Options) -> Result<Built> {
    c.require(
        "attention_bias",
        c.flag_or("attention_bias", false)?,
        false,
        "projections without bias",
    )?;
    c.require(
        "tie_word_embeddings",
        c.flag_or("tie_word_embeddings", false)?,
        false,
        "an untied LM head",
    )?;
    c.require(
        "hidden_act",
        c.text_or("hidden_act", "silu")?,
        "silu",
        "SwiGLU feed-forwards and experts",
    )?;
    c.require(
        "moe_layer_freq",
        c.size_or("moe_layer_freq", 1)?,
        1,
        "every layer after the dense ones sparse",
    )?;
    let q_lora_rank = match c.get("q_lora_rank") {
        None => 0,
        Some(_) => c.size("q_lora_rank")?,
    };
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, 2048)?;
    let layers = c.size("num_hidden_layers")?;
    // DeepseekV2Config's default is 0 (every layer sparse), which `size` would refuse.
    let dense = match c.get("first_k_dense_replace") {
        None => 0,
        Some(v) if v.as_u64() == Some(0) => 0,
        Some(_) => c.size("first_k_dense_replace")?,
    };
    let hidden = c.size("moe_intermediate_size")?;
    let shared = match c.get("n_shared_experts") {
        None => 0,
        Some(_) => c.size("n_shared_experts")? * hidden,
    };
    let a = crate::zoo::sized::Mla {
        heads: c.size("num_attention_heads")?,
        q_lora_rank,
        kv_lora_rank: c.size("kv_lora_rank")?,
        nope: c.size("qk_nope_head_dim")?,
        rope: c.size("qk_rope_head_dim")?,
        v: c.size("v_head_dim")?,
    };
    let mut graph = crate::zoo::sized::deepseek_v2(
        c.size("vocab_size")?,
        seq,
        c.size("hidden_size")?,
        layers,
        a,
        [c.size("intermediate_size")?, dense.min(layers)],
        [
            c.size("n_routed_experts")?,
            hidden,
            c.size("num_experts_per_tok")?,
            shared,
        ],
    );
    let experts = super::grouped_experts(&mut graph, false);
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: vec![ROTARY.to_string()],
        drawn: vec![
            format!(
                "MLA attention through sdpa (q_lora_rank = {q_lora_rank}{}); {dense} dense layer(s) first; shared experts: one SwiGLU of {shared}",
                if q_lora_rank == 0 { ": q projected directly" } else { "" }
            ),
            // DeepseekV2TopkRouter scales the top-k values (`* routed_scaling_factor`, a
            // new tensor, nothing saved) and never renormalises them (topk_method and groups
            // choose which experts, not how many).
            experts,
        ],
    })
}

/// OPTForCausalLM (`modeling_opt.py`): GPT-2's shape (pre-LN layers with biased attention, an
/// `activation_function` feed-forward of `ffn_dim`, a final LayerNorm, the LM head tied to the
/// embedding) with learned positions of max_position_embeddings + 2 rows (offset 2) and
/// dropout after each attention and fc2.
pub(super) fn opt(c: &Config, o: &Options) -> Result<Built> {
    let d = c.size("hidden_size")?;
    let heads = c.size("num_attention_heads")?;
    divides(c, d, heads, "hidden_size", "num_attention_heads")?;
    for (field, want, why) in [
        (
            "do_layer_norm_before",
            true,
            "pre-LN layers (OPT-350m's post-LN is not drawn)",
        ),
        ("enable_bias", true, "biased projections"),
        (
            "layer_norm_elementwise_affine",
            true,
            "LayerNorms with weight and bias",
        ),
        ("_remove_final_layer_norm", false, "the final LayerNorm"),
        ("tie_word_embeddings", true, "a tied LM head"),
    ] {
        c.require(field, c.flag_or(field, want)?, want, why)?;
    }
    c.require(
        "word_embed_proj_dim",
        c.size_or("word_embed_proj_dim", d)?,
        d,
        "embeddings as wide as hidden_size (no project_in/project_out)",
    )?;
    let layerdrop = c.probability_or("layerdrop", 0.0)?;
    c.require("layerdrop", layerdrop, 0.0, "every layer run in training")?;
    let positions = c.size("max_position_embeddings")?;
    let (seq, seq_source) = sequence(c, o, "max_position_embeddings", 4096, positions)?;
    within(c, "max_position_embeddings", seq, positions)?;
    let mut graph = crate::zoo::sized::gpt2(
        c.size("vocab_size")?,
        positions + 2,
        seq,
        d,
        c.size("num_hidden_layers")?,
        heads,
        c.size("ffn_dim")?,
    );
    let mut drawn = vec![activation(c, &mut graph, "activation_function", "relu")?];
    drawn.extend(attention(
        &mut graph,
        o.attn,
        c.probability_or("attention_dropout", 0.0)?,
    ));
    let p = c.probability_or("dropout", 0.1)?;
    let n = dropout::after(&mut graph, p, |id| {
        dropout::in_block(id, "h", ".attn") || dropout::in_block(id, "h", ".mlp.proj")
    });
    drawn.push(dropout::said(
        "dropout",
        p,
        n,
        "after each layer's attention and fc2",
    ));
    Ok(Built {
        graph,
        seq,
        seq_source,
        approximations: vec![
            "positions: OPTLearnedPositionalEmbedding looks rows 2..T+2 up (from the attention mask's cumsum: a [B, T, d] lookup, then added); drawn as learned_position (the table's first T rows added, no [B, T, d] lookup)".to_string(),
        ],
        drawn,
    })
}
