//! Recomputes the worked examples of docs/features.md by hand, op family by op family.

use memcal::features::{contributions, features, Precision};
use memcal::graph::Graph;
use std::path::Path;

fn graph(json: &str) -> Graph {
    Graph::from_bytes(json.as_bytes(), Path::new("test.json")).expect("valid graph")
}

#[test]
fn mlp_worked_example() {
    // x [B, 256] -> linear 256->1024 -> relu -> linear 1024->10 -> cross_entropy
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"mlp","family":"mlp","variant":"t","inputs":[
        {"name":"x","shape":["B",256],"dtype":"float32"},
        {"name":"y","shape":["B"],"dtype":"int64","classes":10}],
        "nodes":[
        {"id":"fc1","op":"linear","inputs":["x"],"attributes":{"in_features":256,"out_features":1024}},
        {"id":"act","op":"relu","inputs":["fc1"]},
        {"id":"fc2","op":"linear","inputs":["act"],"attributes":{"in_features":1024,"out_features":10}},
        {"id":"loss","op":"cross_entropy","inputs":["fc2","y"]}],"loss":"loss"}"#,
    );
    let p = 256 * 1024 + 1024 + 1024 * 10 + 10;
    assert_eq!(g.parameters(), p);
    let f = features(&g, 32, Precision::Fp32);
    assert_eq!(f.model_state, 16 * p);
    // fc1 32x1024, relu 32x1024, fc2 32x10, loss 1 element; 4 bytes each.
    assert_eq!(f.layer_outputs, (32 * 1024 * 2 + 32 * 10 + 1) * 4);
    assert_eq!(f.intermediates, 0);
    assert_eq!(f.attention_scores, 0);
    assert_eq!(f.recurrent_gates, 0);
    // The largest tensor is fc1's weight: 256 x 1024 x 4 bytes.
    assert_eq!(f.largest_tensor, 256 * 1024 * 4);
    // bf16 autocast halves activation bytes, not model state.
    let h = features(&g, 32, Precision::Bf16Autocast);
    assert_eq!(h.layer_outputs * 2, f.layer_outputs);
    assert_eq!(h.model_state, f.model_state);
    // Pure bf16 halves the activations and the model state (bf16 weights, gradients and both
    // AdamW states: 8 bytes a parameter), and the largest weight.
    let b = features(&g, 32, Precision::Bf16);
    assert_eq!(b.layer_outputs, h.layer_outputs);
    assert_eq!(b.model_state, 8 * p);
    assert_eq!(b.largest_tensor, 256 * 1024 * 2);
    assert_eq!("bf16".parse::<Precision>(), Ok(Precision::Bf16));
}

#[test]
fn eager_attention_worked_example() {
    // tokens [B, 128] -> embedding 1000x64 -> mha (4 heads, causal) -> linear 64->1000 -> CE
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"att","family":"gpt","variant":"t","inputs":[
        {"name":"t","shape":["B",128],"dtype":"int64","classes":1000},
        {"name":"y","shape":["B",128],"dtype":"int64","classes":1000}],
        "nodes":[
        {"id":"emb","op":"embedding","inputs":["t"],"attributes":{"num_embeddings":1000,"embedding_dim":64}},
        {"id":"att","op":"multihead_attention","inputs":["emb"],"attributes":{"embed_dim":64,"num_heads":4,"causal":true}},
        {"id":"head","op":"linear","inputs":["att"],"attributes":{"in_features":64,"out_features":1000,"bias":false,"tie":"emb"}},
        {"id":"loss","op":"cross_entropy","inputs":["head","t"]}],"loss":"loss"}"#,
    );
    // Tied head owns no weight: embedding 64,000 + attention 4*64*64 + 4*64.
    assert_eq!(g.parameters(), 64_000 + 4 * 64 * 64 + 4 * 64);
    let b = 2;
    let f = features(&g, b, Precision::Fp32);
    // q, k, v, context: 4 x B x T x d.
    assert_eq!(f.intermediates, 4 * b * 128 * 64 * 4);
    // scores: B x heads x T x T.
    assert_eq!(f.attention_scores, b * 4 * 128 * 128 * 4);
    // layer outputs: emb, att (B T 64 each), logits (B T 1000), loss (1).
    assert_eq!(f.layer_outputs, (2 * b * 128 * 64 + b * 128 * 1000 + 1) * 4);
    // largest tensor: the logits.
    assert_eq!(f.largest_tensor, b * 128 * 1000 * 4);
}

#[test]
fn recurrent_and_moe_worked_examples() {
    let g = graph(
        r#"{"format":"memcal-graph/1","name":"rnn","family":"lstm","variant":"t","inputs":[
        {"name":"x","shape":["B",50,16],"dtype":"float32"},
        {"name":"y","shape":["B",50,64],"dtype":"float32"}],
        "nodes":[
        {"id":"lstm","op":"lstm","inputs":["x"],"attributes":{"input_size":16,"hidden_size":32,"num_layers":2,"bidirectional":true}},
        {"id":"moe","op":"moe","inputs":["lstm"],"attributes":{"dim":64,"hidden":128,"num_experts":4,"top_k":2}},
        {"id":"loss","op":"mse","inputs":["moe","y"]}],"loss":"loss"}"#,
    );
    // LSTM: layer 1: 2 dirs x (4*32*(16+32) + 8*32); layer 2 input 64: 2 x (4*32*(64+32) + 8*32).
    let lstm = 2 * (4 * 32 * 48 + 256) + 2 * (4 * 32 * 96 + 256);
    let moe = 4 * 64 + 4 * 3 * 64 * 128;
    assert_eq!(g.parameters(), lstm + moe);
    let b = 3;
    let f = features(&g, b, Precision::Fp32);
    // gates: B x T x 4 gates x hidden x directions x layers.
    assert_eq!(f.recurrent_gates, b * 50 * 4 * 32 * 2 * 2 * 4);
    // moe: router (E) + top_k x (2 hidden + d) less its own output (d), per token.
    let tokens = b * 50;
    assert_eq!(f.intermediates, tokens * (4 + 2 * (2 * 128 + 64) - 64) * 4);
    let c = contributions(&g, b);
    assert_eq!(c[0].layer_output_elements, b * 50 * 64);
}
