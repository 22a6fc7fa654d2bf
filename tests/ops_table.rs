//! The op table: every op the format knows parses from its name and gives the same name back,
//! and every op has an example here (a new op without one fails), so the names written in the
//! table and in `Op::name` cannot drift apart.

use memcal::ops::{op_names, Op};
use serde_json::{json, Map, Value};

/// One valid attribute set per op (from the zoo's graphs, `reshape` written here).
const EXAMPLES: &[(&str, &str)] = &[
        ("adaptive_avg_pool", "{\"output_size\": 1}"),
        ("add", "{}"),
        ("aten", "{\"target\": \"aten.addmm.default\", \"args\": [{\"param\": 1}, {\"input\": 0}, {\"param\": 0}], \"params\": [{\"name\": \"fc.weight\", \"shape\": [8, 4]}, {\"name\": \"fc.bias\", \"shape\": [4]}], \"shape\": [\"B\", 4]}"),
        ("avg_pool", "{\"kernel_size\": 2}"),
        ("batch_norm", "{\"num_features\": 64}"),
        ("concat", "{\"dim\": 1}"),
        ("constant", "{\"shape\": [\"B\", 1, 64, 64], \"dtype\": \"bool\"}"),
        ("conv1d", "{\"bias\": false, \"in_channels\": 12, \"kernel_size\": 7, \"out_channels\": 64, \"padding\": 3}"),
        ("conv2d", "{\"bias\": false, \"in_channels\": 3, \"kernel_size\": 3, \"out_channels\": 32, \"padding\": 1, \"stride\": 2}"),
        ("conv_transpose2d", "{\"in_channels\": 1024, \"kernel_size\": 2, \"out_channels\": 512, \"stride\": 2}"),
        ("cross_entropy", "{}"),
        ("div", "{}"),
        ("dropout", "{\"p\": 0.65}"),
        ("expand", "{\"shape\": [\"B\", 2, 4, 64, 32]}"),
        ("embedding", "{\"embedding_dim\": 768, \"num_embeddings\": 28996}"),
        ("flatten", "{\"start_dim\": 1}"),
        ("gelu", "{}"),
        ("gqa_attention", "{\"embed_dim\": 4096, \"num_heads\": 32, \"num_kv_heads\": 32}"),
        ("group_norm", "{\"num_channels\": 512, \"num_groups\": 512}"),
        ("gru", "{\"bidirectional\": true, \"hidden_size\": 512, \"input_size\": 300, \"num_layers\": 2}"),
        ("layer_norm", "{\"normalized_shape\": 768}"),
        ("learned_position", "{\"dim\": 768, \"num_positions\": 512}"),
        ("linear", "{\"in_features\": 768, \"out_features\": 3072}"),
        ("lstm", "{\"hidden_size\": 512, \"input_size\": 256, \"num_layers\": 2}"),
        ("matmul", "{}"),
        ("max_pool", "{\"kernel_size\": 2}"),
        ("mean", "{\"dim\": 1}"),
        ("mla_attention", "{\"embed_dim\": 2048, \"kv_lora_rank\": 512, \"num_heads\": 16, \"q_lora_rank\": 0, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128}"),
        ("moe", "{\"dim\": 4096, \"hidden\": 14336, \"num_experts\": 8, \"top_k\": 2}"),
        ("mse", "{}"),
        ("mul", "{}"),
        ("parameter", "{\"shape\": [16, 128]}"),
        ("multihead_attention", "{\"bias\": true, \"causal\": false, \"embed_dim\": 768, \"num_heads\": 12}"),
        ("permute", "{\"dims\": [0, 2, 1]}"),
        ("prepend_token", "{\"dim\": 768}"),
        ("relu", "{}"),
        ("reshape", "{\"shape\": [\"B\", -1]}"),
        ("rms_norm", "{\"dim\": 4096}"),
        ("sdpa", "{\"causal\": true, \"enable_gqa\": true}"),
        ("select_token", "{\"index\": 0}"),
        ("silu", "{}"),
        ("slice", "{\"dim\": 3, \"start\": 16, \"end\": 32}"),
        ("softmax", "{\"dim\": -1}"),
        ("sub", "{}"),
        ("tanh", "{}"),
        ("unary", "{\"fn\": \"pow\", \"exponent\": 3.0}"),
        ("upsample", "{\"scale_factor\": 2}"),
];

#[test]
fn every_op_in_the_table_round_trips_its_name() {
    let mut names: Vec<&str> = op_names();
    names.sort_unstable();
    let mut examples: Vec<&str> = EXAMPLES.iter().map(|(n, _)| *n).collect();
    examples.sort_unstable();
    assert_eq!(
        names, examples,
        "every op of the table has an example here, and no other"
    );
    for (name, attributes) in EXAMPLES {
        let map: Map<String, Value> = serde_json::from_str(attributes).unwrap();
        let op = Op::parse(name, &map).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(op.name(), *name);
    }
}

#[test]
fn an_unknown_op_lists_every_known_one() {
    let e = Op::parse("convolution", &Map::new()).unwrap_err();
    assert!(
        e.starts_with("unknown op `convolution` (known ops: linear, embedding,"),
        "{e}"
    );
    for n in op_names() {
        assert!(e.contains(n), "{n} in {e}");
    }
}

#[test]
fn every_unary_function_parses_and_says_what_it_saves() {
    use memcal::ops::{UnaryFn, UNARY_FNS};
    for (name, _, scalar, _) in UNARY_FNS {
        let mut map = Map::new();
        map.insert("fn".into(), Value::from(*name));
        if let Some(key) = scalar {
            map.insert(key.to_string(), Value::from(2.0));
        }
        let op = Op::parse("unary", &map).unwrap_or_else(|e| panic!("{name}: {e}"));
        let Op::Unary(f) = op else {
            panic!("{name} parses to {op:?}")
        };
        assert_eq!(f.name(), *name, "the table is in variant order");
        assert_eq!(f.scalar(), scalar.map(|_| 2.0));
    }
    assert_eq!(UnaryFn::Tanh.saves(), memcal::ops::UnarySaves::Output);
    assert_eq!(UnaryFn::Pow(3.0).saves(), memcal::ops::UnarySaves::Input);
    let bad = |json: &str| {
        let map: Map<String, Value> = serde_json::from_str(json).unwrap();
        Op::parse("unary", &map).unwrap_err()
    };
    assert!(bad("{}").contains("missing attribute `fn`"));
    assert!(bad("{\"fn\": \"cosh\"}").contains("unknown function `cosh`"));
    assert!(bad("{\"fn\": \"pow\"}").contains("missing attribute `exponent`"));
    assert!(bad("{\"fn\": \"exp\", \"scalar\": 1}").contains("unknown attribute"));
}

#[test]
fn gelu_takes_the_tanh_approximation() {
    let parse = |json: &str| Op::parse("gelu", &serde_json::from_str(json).unwrap());
    assert_eq!(
        parse("{\"approximate\": \"tanh\"}").unwrap(),
        Op::Activation(memcal::ops::Activation::GeluTanh)
    );
    assert_eq!(
        parse("{\"approximate\": \"none\"}").unwrap(),
        Op::Activation(memcal::ops::Activation::Gelu)
    );
    assert!(parse("{\"approximate\": \"erf\"}")
        .unwrap_err()
        .contains("approximate"));
}

#[test]
fn attention_takes_a_backend() {
    let parse = |json: &str| Op::parse("multihead_attention", &serde_json::from_str(json).unwrap());
    let op = parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\"}").unwrap();
    assert!(matches!(op, Op::MultiheadAttention { sdpa: true, .. }));
    assert_eq!(op.arity(), (1, 2), "sdpa self- or cross-attention");
    assert!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"flash\"}")
            .unwrap_err()
            .contains("backend")
    );
    assert!(parse(
        "{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"relative_attention_buckets\": 32}"
    )
    .unwrap_err()
    .contains("relative_attention_buckets"));
}

#[test]
fn attention_takes_a_memory_of_its_own_width() {
    let parse = |json: &str| Op::parse("multihead_attention", &serde_json::from_str(json).unwrap());
    assert!(matches!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4}").unwrap(),
        Op::MultiheadAttention { kdim: 64, .. }
    ));
    assert!(matches!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4, \"kdim\": 24}").unwrap(),
        Op::MultiheadAttention { kdim: 24, .. }
    ));
    assert!(parse("{\"embed_dim\": 64, \"num_heads\": 4, \"kdim\": 0}").is_err());
    // The graph: q and out d x d, k and v d x kdim; the memory must be kdim wide, and a kdim
    // other than d needs one.
    let graph = |memory: Option<u64>, kdim: u64| {
        let mut inputs = vec![json!({"name": "x", "shape": ["B", 8, 64], "dtype": "float32"})];
        let mut att = vec!["x"];
        if let Some(w) = memory {
            inputs.push(json!({"name": "m", "shape": ["B", 5, w], "dtype": "float32"}));
            att.push("m");
        }
        inputs.push(json!({"name": "y", "shape": ["B", 8, 64], "dtype": "float32"}));
        let file: memcal::graph::GraphFile = serde_json::from_value(json!({
            "format": "memcal-graph/1", "name": "t", "family": "t", "variant": "op",
            "inputs": inputs,
            "nodes": [
                {"id": "att", "op": "multihead_attention", "inputs": att,
                 "attributes": {"embed_dim": 64, "num_heads": 4, "kdim": kdim}},
                {"id": "loss", "op": "mse", "inputs": ["att", "y"]}
            ],
            "loss": "loss"
        }))
        .unwrap();
        memcal::graph::Graph::check(&file, std::path::Path::new("t.json"))
    };
    let g = graph(Some(24), 24).unwrap();
    assert_eq!(g.parameters(), 2 * 64 * 64 + 2 * 64 * 24 + 4 * 64);
    assert!(graph(Some(64), 24)
        .unwrap_err()
        .to_string()
        .contains("kdim"));
    assert!(graph(None, 24)
        .unwrap_err()
        .to_string()
        .contains("give the memory"));
}

#[test]
fn grouped_query_attention_may_leave_kv_unrepeated() {
    let parse = |json: &str| Op::parse("gqa_attention", &serde_json::from_str(json).unwrap());
    let base = "\"embed_dim\": 64, \"num_heads\": 4, \"num_kv_heads\": 2";
    assert!(matches!(
        parse(&format!("{{{base}}}")).unwrap(),
        Op::GqaAttention {
            repeat_kv: true,
            ..
        }
    ));
    assert!(matches!(
        parse(&format!("{{{base}, \"repeat_kv\": false}}")).unwrap(),
        Op::GqaAttention {
            repeat_kv: false,
            ..
        }
    ));
}

#[test]
fn grouped_query_attention_may_bias_q_k_and_v_only() {
    let parse = |json: &str| Op::parse("gqa_attention", &serde_json::from_str(json).unwrap());
    let base = "\"embed_dim\": 64, \"num_heads\": 4, \"num_kv_heads\": 2";
    let params = |op: &Op| op.parameters();
    let (none, all, qkv) = (
        parse(&format!("{{{base}}}")).unwrap(),
        parse(&format!("{{{base}, \"bias\": true}}")).unwrap(),
        parse(&format!("{{{base}, \"bias\": \"qkv\"}}")).unwrap(),
    );
    assert!(matches!(
        qkv,
        Op::GqaAttention {
            bias: true,
            out_bias: false,
            ..
        }
    ));
    // q: 64, k and v: 2 x 16 each; o: 64.
    assert_eq!(params(&all) - params(&none), 64 + 32 + 32 + 64);
    assert_eq!(params(&qkv) - params(&none), 64 + 32 + 32);
    let err = parse(&format!("{{{base}, \"bias\": \"o\"}}")).unwrap_err();
    assert!(err.contains("\"qkv\""), "{err}");
}

#[test]
fn sdpa_takes_a_mask_made_from_constants() {
    let parse = |json: &str| Op::parse("constant", &serde_json::from_str(json).unwrap());
    assert!(matches!(
        parse("{\"shape\": [\"B\", 1, 8, 8], \"dtype\": \"bool\"}").unwrap(),
        Op::Constant {
            dtype: memcal::ops::ConstantDType::Bool,
            ..
        }
    ));
    assert!(matches!(
        parse("{\"shape\": [\"B\", 1, 8, 8]}").unwrap(),
        Op::Constant {
            dtype: memcal::ops::ConstantDType::Float32,
            ..
        }
    ));
    assert!(parse("{\"shape\": [8], \"dtype\": \"int8\"}").is_err());
    // q, k, v [B, 4, 8, 16] from x; the mask a bool constant built from an int64 padding mask
    // (or, wrongly, from a value that takes a gradient, or shaped beyond the scores).
    let graph = |mask_from: &str, mask_shape: Value, causal: bool| {
        let file: memcal::graph::GraphFile = serde_json::from_value(json!({
            "format": "memcal-graph/1", "name": "t", "family": "t", "variant": "op",
            "inputs": [
                {"name": "x", "shape": ["B", 4, 8, 16], "dtype": "float32"},
                {"name": "pad", "shape": ["B", 8], "dtype": "int64", "classes": 2},
                {"name": "y", "shape": ["B", 4, 8, 16], "dtype": "float32"}
            ],
            "nodes": [
                {"id": "q", "op": "linear", "inputs": ["x"], "attributes": {"in_features": 16, "out_features": 16}},
                {"id": "mask", "op": "constant", "inputs": ["pad"], "attributes": {"shape": mask_shape, "dtype": "bool"}},
                {"id": "qt", "op": "permute", "inputs": ["q"], "attributes": {"dims": [0, 1, 3, 2]}},
                {"id": "grad_mask", "op": "matmul", "inputs": ["q", "qt"]},
                {"id": "att", "op": "sdpa", "inputs": ["q", "q", "q", mask_from], "attributes": {"causal": causal}},
                {"id": "loss", "op": "mse", "inputs": ["att", "y"]}
            ],
            "loss": "loss"
        }))
        .unwrap();
        memcal::graph::Graph::check(&file, std::path::Path::new("t.json"))
            .map_err(|e| e.to_string())
    };
    assert!(graph("mask", json!(["B", 1, 8, 8]), false).is_ok());
    assert!(graph("mask", json!([1, 1, 8, 8]), false).is_ok());
    let err = |m: &str, s: Value, c: bool| graph(m, s, c).unwrap_err();
    assert!(
        err("mask", json!(["B", 1, 8, 8]), true).contains("causal: false"),
        "mask with is_causal"
    );
    assert!(err("mask", json!(["B", 1, 8, 9]), false).contains("must broadcast to the scores"));
    let e = err("grad_mask", json!(["B", 1, 8, 8]), false);
    assert!(e.contains("made from `constant` nodes"), "{e}");
}

#[test]
fn attention_may_name_torchs_own_implementation() {
    let parse = |json: &str| Op::parse("multihead_attention", &serde_json::from_str(json).unwrap());
    assert!(matches!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"impl\": \"torch\"}")
            .unwrap(),
        Op::MultiheadAttention {
            torch_impl: true,
            ..
        }
    ));
    assert!(matches!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4}").unwrap(),
        Op::MultiheadAttention {
            torch_impl: false,
            ..
        }
    ));
    let eager = parse("{\"embed_dim\": 64, \"num_heads\": 4, \"impl\": \"torch\"}").unwrap_err();
    assert!(eager.contains("backend \"sdpa\""), "{eager}");
    assert!(parse(
        "{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"impl\": \"jax\"}"
    )
    .is_err());
    // The same parameter count either way: in_proj [3d, d] + [3d], out_proj.
    let torch =
        parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"impl\": \"torch\"}")
            .unwrap();
    let separate = parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\"}").unwrap();
    assert_eq!(torch.parameters(), separate.parameters());
    assert_eq!(torch.parameters(), 4 * 64 * 64 + 4 * 64);
}

#[test]
fn torchs_own_attention_may_keep_its_default_sequence_first_layout() {
    let parse = |json: &str| Op::parse("multihead_attention", &serde_json::from_str(json).unwrap());
    assert!(matches!(
        parse("{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"impl\": \"torch\", \"batch_first\": false}").unwrap(),
        Op::MultiheadAttention { batch_first: false, torch_impl: true, .. }
    ));
    let separate = parse(
        "{\"embed_dim\": 64, \"num_heads\": 4, \"backend\": \"sdpa\", \"batch_first\": false}",
    )
    .unwrap_err();
    assert!(separate.contains("impl \"torch\""), "{separate}");
}
