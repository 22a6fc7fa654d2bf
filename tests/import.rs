//! `memcal import hf`: real configs (transcribed in `tests/fixtures/hf/`) give graphs with the
//! published parameter counts, which `memcal plan` takes like any graph; bad configs exit 2
//! naming the file and the field.

use memcal::graph::Graph;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(model: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/hf/{model}/config.json"))
}

fn import(config: &Path, extra: &[&str]) -> Graph {
    let options = memcal::import::Options {
        seq: extra.first().map(|s| s.parse().unwrap()),
        decoder_seq: None,
        name: "imported".into(),
        family: None,
        seq_axis: false,
        attn: Default::default(),
    };
    let imported = memcal::import::hf(config, &options).expect("the config imports");
    Graph::check(&imported.graph, config).expect("the imported graph checks")
}

#[test]
fn parameter_counts_are_the_published_ones() {
    // Published counts: the model cards and `model.num_parameters()` of transformers' classes.
    for (model, count) in [
        ("gpt2", 124_439_808u64),
        ("Llama-2-7b-hf", 6_738_415_616),
        ("Mistral-7B-v0.1", 7_241_732_096),
        ("Mixtral-8x7B-v0.1", 46_702_792_704),
        ("bert-base-cased", 108_310_272),
        ("roberta-base", 124_645_632),
        // XLMRobertaModel with its pooler: RoBERTa-base at a vocabulary of 250,002:
        // 250002 x 768 + 514 x 768 + 768 + 2 x 768 + 12 x 7,087,872 + 768² + 768.
        ("xlm-roberta-base", 278_043_648),
        ("t5-small", 60_506_624),
        ("vit-base-patch16-224", 86_567_656),
        // The six below are also what transformers 5.24's `num_parameters()` gives for these
        // config files (the model built on the meta device).
        // Qwen2 (modeling_qwen2.py: q/k/v with bias, o_proj without), derived from the shapes
        // and matching the model cards' 7.62B and 494M (0.49B in the Qwen2 technical report).
        // Qwen2-7B, untied: 2 x 152064 x 3584 (embedding, lm_head) + 3584 (norm) + 28 x
        // (q 3584² + 3584, k and v 3584 x 512 + 512 each, o 3584², SwiGLU 3 x 3584 x 18944,
        // two norms 2 x 3584) = 1,089,994,752 + 3,584 + 28 x 233,057,792.
        ("Qwen2-7B", 7_615_616_512),
        // Qwen2-0.5B, tied: 151936 x 896 + 896 + 24 x (896² + 896 + 2 x (896 x 128 + 128) +
        // 896² + 3 x 896 x 4864 + 2 x 896) = 136,134,656 + 896 + 24 x 14,912,384.
        ("Qwen2-0.5B", 494_032_768),
        // Qwen3 (modeling_qwen3.py: no biases, head_dim 128, q_norm and k_norm of head_dim):
        // 0.6B, tied: 151936 x 1024 + 1024 + 28 x (1024 x 2048 + 2 x 1024 x 1024 + 2048 x 1024
        // + 2 x 128 + 3 x 1024 x 3072 + 2 x 1024) = 155,582,464 + 1,024 + 28 x 15,730,944.
        ("Qwen3-0.6B", 596_049_920),
        // 8B, untied: 2 x 151936 x 4096 + 4096 + 36 x (2 x 4096² + 2 x 4096 x 1024 + 2 x 128 +
        // 3 x 4096 x 12288 + 2 x 4096) = 1,244,659,712 + 4,096 + 36 x 192,946,432.
        ("Qwen3-8B", 8_190_735_360),
        // Gemma (modeling_gemma.py): the Gemma technical report's (Table 2) non-embedding
        // counts, 1,981,884,416 (2B) and 7,751,248,896 (7B), plus the embedding at the hub
        // configs' vocabulary of 256,000 (the report counts 256,128 rows): 256000 x 2048 and
        // 256000 x 3072; the LM head is tied.
        ("gemma-2b", 2_506_172_416),
        // The GPU campaign's models (measurement/campaigns/gpu-real.json): the model cards'
        // counts, and what transformers 5.17's `num_parameters()` gave for the models built on
        // an H200 from these configs (data/gpu/). Llama 3.2 ties its LM head to the embedding:
        // 1B 128256 x 2048 + 2048 + 16 x (2048² + 2 x 2048 x 512 + 2048² + 3 x 2048 x 8192 +
        // 2 x 2048) = 262,670,336 + 16 x 60,821,504.
        ("Llama-3.2-1B", 1_235_814_400),
        ("Llama-3.2-3B", 3_212_749_824),
        ("Llama-3.1-8B", 8_030_261_248),
        ("Mistral-7B-v0.3", 7_248_023_552),
        ("Qwen2.5-1.5B", 1_543_714_304),
        ("Qwen2.5-3B", 3_085_938_688),
        ("Qwen3-1.7B", 1_720_574_976),
        ("Qwen3-4B", 4_022_468_096),
        ("gemma-7b", 8_537_680_896),
        // BART (modeling_bart.py), `num_parameters()` of BartForConditionalGeneration (the
        // final_logits_bias buffer is not a parameter): shared 50265 x d, two position tables
        // of 1026 x d, two layernorm_embedding, L encoder layers of 4(d² + d) + 2 LayerNorms +
        // fc1, fc2 and L decoder layers with a cross-attention and its LayerNorm more.
        // bart-base (d 768, 6 + 6, ffn 3072): 38,603,520 + 1,575,936 + 3,072 + 6 x 7,087,872 +
        // 6 x 9,451,776.
        ("bart-base", 139_420_416),
        // bart-large (d 1024, 12 + 12, ffn 4096): 51,471,360 + 2,101,248 + 4,096 + 12 x
        // 12,596,224 + 12 x 16,796,672.
        ("bart-large", 406_291_456),
        // Issue 37's types: each count is what transformers 5.24 gives for the fixture's
        // config.json (`AutoConfig.for_model(model_type, **config)`, the model built on the meta
        // device, `sum(p.numel() for p in model.parameters())`, tied weights counted once;
        // tests/fixtures/hf/README.md), and the model card's published size.
        ("gemma-2-2b", 2_614_341_888),
        ("Phi-3-mini-4k-instruct", 3_821_079_552),
        ("starcoder2-3b", 3_030_371_328),
        ("OLMo-1B-hf", 1_176_764_416),
        ("OLMo-2-1124-7B", 7_298_617_344),
        ("granite-3.0-2b-base", 2_533_531_648),
        ("c4ai-command-r-v01", 34_980_831_232),
        ("stablelm-3b-4e1t", 2_795_443_200),
        ("pythia-160m", 162_322_944),
        ("gpt-j-6b", 6_050_882_784),
        ("phi-2", 2_779_683_840),
        ("falcon-7b", 6_921_720_704),
        ("opt-125m", 125_239_296),
        // The encoders as AutoModel builds them: DistilBertModel and ElectraModel have no
        // pooler, CamembertModel has one.
        ("distilbert-base-uncased", 66_362_880),
        ("electra-small-discriminator", 13_483_008),
        ("camembert-base", 110_621_952),
        ("Qwen1.5-MoE-A2.7B", 14_315_784_192),
        ("DeepSeek-V2-Lite", 15_706_484_224),
    ] {
        let g = import(&fixture(model), &[]);
        assert_eq!(g.parameters(), count, "{model}");
        assert_eq!(g.variant, "imported");
        assert!(g.family.starts_with("hf-"), "{}", g.family);
    }
}

#[test]
fn the_sequence_length_is_the_one_asked_for() {
    let g = import(&fixture("Llama-2-7b-hf"), &["512"]);
    let tokens = g.inputs.iter().find(|i| i.name == "tokens").unwrap();
    assert_eq!(tokens.shape.0[1].at(1), 512);
    // The parameter count does not depend on it.
    assert_eq!(g.parameters(), 6_738_415_616);
}

fn memcal(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("memcal runs")
}

#[test]
fn an_imported_graph_is_planned_like_any_graph() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gpt2.json");
    let config = fixture("gpt2");
    let o = memcal(&[
        "import",
        "hf",
        config.to_str().unwrap(),
        "--seq",
        "256",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let note = String::from_utf8_lossy(&o.stderr);
    assert!(note.contains("124,439,808 parameters"), "{note}");
    assert!(
        note.contains("gelu_new"),
        "the decomposed GELU is named: {note}"
    );
    let o = memcal(&[
        "plan",
        out.to_str().unwrap(),
        "--batch",
        "2",
        "--precision",
        "fp32",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("124,439,808"));
    // Without --out the graph goes to standard output, byte for byte the file.
    let o = memcal(&[
        "import",
        "hf",
        config.to_str().unwrap(),
        "--seq",
        "256",
        "--name",
        "gpt2",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(o.stdout, std::fs::read(&out).unwrap());
}

#[test]
fn bad_configs_exit_2_naming_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (
            write(
                "rwkv.json",
                r#"{"model_type": "rwkv", "vocab_size": 50277}"#,
            ),
            "field `model_type`: `rwkv`",
        ),
        (
            write("none.json", r#"{"n_embd": 8}"#),
            "field `model_type`: missing",
        ),
        (
            write("gpt.json", r#"{"model_type": "gpt2", "n_embd": 8}"#),
            "field `n_positions`: missing",
        ),
        (
            write("neg.json", r#"{"model_type": "gpt2", "n_embd": -8}"#),
            "field `n_embd`: must be a positive integer",
        ),
        (
            write(
                "tied.json",
                r#"{"model_type": "mixtral", "hidden_size": 64, "num_attention_heads": 4, "tie_word_embeddings": true}"#,
            ),
            "field `tie_word_embeddings`: is true",
        ),
        (
            write("cut.json", r#"{"model_type": "#),
            "malformed Hugging Face config",
        ),
        // Fields that contradict each other: both named.
        (
            write(
                "heads.json",
                r#"{"model_type": "phi3", "hidden_size": 100, "num_attention_heads": 3, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8}"#,
            ),
            "field `num_attention_heads`: 3 does not divide `hidden_size` 100",
        ),
        (
            write(
                "kv.json",
                r#"{"model_type": "starcoder2", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8}"#,
            ),
            "field `num_key_value_heads`: 3 does not divide `num_attention_heads` 4",
        ),
        (
            write(
                "dim.json",
                r#"{"model_type": "distilbert", "dim": 100, "n_heads": 3, "n_layers": 2, "vocab_size": 10, "hidden_dim": 8}"#,
            ),
            "field `n_heads`: 3 does not divide `dim` 100",
        ),
        (
            write(
                "falcon-kv.json",
                r#"{"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 8, "new_decoder_architecture": true, "num_kv_heads": 3, "num_hidden_layers": 2, "vocab_size": 10}"#,
            ),
            "field `num_kv_heads`: 3 does not divide `num_attention_heads` 8",
        ),
        (
            write(
                "moe.json",
                r#"{"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "num_experts": -4}"#,
            ),
            "field `num_experts`: must be a positive integer",
        ),
        (
            write(
                "mla.json",
                r#"{"model_type": "deepseek_v2", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "moe_intermediate_size": 8, "kv_lora_rank": -1}"#,
            ),
            "field `kv_lora_rank`: must be a positive integer",
        ),
        (
            write(
                "granite.json",
                r#"{"model_type": "granite", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "logits_scaling": -8}"#,
            ),
            "field `logits_scaling`: must be a positive number",
        ),
        (
            write(
                "electra-heads.json",
                r#"{"model_type": "electra", "hidden_size": 100, "num_attention_heads": 3, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "max_position_embeddings": 64}"#,
            ),
            "field `num_attention_heads`: 3 does not divide `hidden_size` 100",
        ),
        (
            write(
                "olmo-kv.json",
                r#"{"model_type": "olmo", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8}"#,
            ),
            "field `num_key_value_heads`: 3 does not divide `num_attention_heads` 4",
        ),
        (
            write(
                "cohere-neg.json",
                r#"{"model_type": "cohere", "hidden_size": -64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8}"#,
            ),
            "field `hidden_size`: must be a positive integer",
        ),
        // An alias that disagrees with its field (the config class's attribute_map).
        (
            write(
                "gptj-alias.json",
                r#"{"model_type": "gptj", "n_embd": 64, "hidden_size": 128, "n_head": 4, "n_layer": 2, "vocab_size": 10, "n_positions": 64}"#,
            ),
            "field `hidden_size`: is 128, but `n_embd` is 64",
        ),
        (
            write(
                "distilbert-alias.json",
                r#"{"model_type": "distilbert", "dim": 64, "hidden_size": 128, "n_heads": 4, "n_layers": 2, "vocab_size": 10, "hidden_dim": 8}"#,
            ),
            "field `hidden_size`: is 128, but `dim` is 64",
        ),
        // Two spellings of the rotated share of a head that disagree; one out of range.
        (
            write(
                "neox-rotary.json",
                r#"{"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "rotary_pct": 0.25, "rope_parameters": {"partial_rotary_factor": 0.5}}"#,
            ),
            "field `rotary_pct`: is 0.25, but `rope_parameters.partial_rotary_factor` is 0.5",
        ),
        (
            write(
                "phi-rotary.json",
                r#"{"model_type": "phi", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "intermediate_size": 8, "partial_rotary_factor": 1.5}"#,
            ),
            "field `partial_rotary_factor`: must be a number in (0, 1]",
        ),
    ];
    for (path, want) in &cases {
        let o = memcal(&["import", "hf", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", path.display());
        assert!(err.contains(want), "{}: {err}", path.display());
        assert!(
            err.contains(path.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
    }
    // An unknown model_type is refused with the exporter's exact command for the file.
    let o = memcal(&["import", "hf", cases[0].0.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "PYTHONPATH=.libtorch:.libtorch/py:exporter python3 -m memcal_export --hf-config {} --input input_ids=B,1024:int64:50277",
            cases[0].0.display()
        )),
        "{err}"
    );
    // A sequence longer than the learned positions.
    let gpt2 = fixture("gpt2");
    let o = memcal(&["import", "hf", gpt2.to_str().unwrap(), "--seq", "2048"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("1024 learned positions"));
    // An existing --out is not written over without --force.
    let out = write("taken.json", "keep me");
    let o = memcal(&[
        "import",
        "hf",
        gpt2.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
}

#[test]
fn a_sequence_axis_is_planned_at_the_length_given() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/graphs/gpt2-small.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&fixed).unwrap()).unwrap();
    for input in v["inputs"].as_array_mut().unwrap() {
        input["shape"][1] = serde_json::json!("T");
    }
    let symbolic = dir.path().join("gpt2-t.json");
    std::fs::write(&symbolic, serde_json::to_vec(&v).unwrap()).unwrap();
    let plan = |path: &Path, extra: &[&str]| {
        let mut args = vec!["plan", path.to_str().unwrap(), "--batch", "2", "--json"];
        args.extend_from_slice(extra);
        let o = memcal(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (
            v["six_factor"]["features"].clone(),
            v["estimate_bytes"].clone(),
        )
    };
    assert_eq!(plan(&symbolic, &["--seq", "1024"]), plan(&fixed, &[]));
    assert_ne!(plan(&symbolic, &["--seq", "512"]), plan(&fixed, &[]));
    // Without --seq the axis has no length: exit 2, naming the field and the flag.
    let o = memcal(&["plan", symbolic.to_str().unwrap(), "--batch", "2"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("inputs[0].shape") && err.contains("--seq"),
        "{err}"
    );
}

#[test]
fn the_will_it_fit_page_plans_every_model_in_data() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("site/fit.html")).unwrap();
    let mut models = 0;
    for e in std::fs::read_dir(root.join("data/models")).unwrap() {
        let dir = e.unwrap().path();
        let config = dir.join("config.json");
        if !config.is_file() {
            continue;
        }
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let g = import(&config, &[]);
        let params = memcal::format::count(g.parameters());
        let rows = page
            .matches(&format!("data/models/{name}/config.json"))
            .count();
        assert_eq!(
            rows,
            memcal::report::fit::BATCHES.len(),
            "{name}: one row per batch"
        );
        assert!(
            page.contains(&format!("data-sort=\"{}\">{params}</td>", g.parameters())),
            "{name}'s {params} parameters are not on the page"
        );
        models += 1;
    }
    assert!(models >= 8, "{models} models in data/models");
}

#[test]
fn an_imported_sequence_axis_is_planned_at_any_length() {
    let dir = tempfile::tempdir().unwrap();
    let config = fixture("Llama-2-7b-hf");
    let (axis, fixed) = (dir.path().join("axis.json"), dir.path().join("fixed.json"));
    for (out, extra) in [(&axis, "--seq-axis"), (&fixed, "--seq=512")] {
        let o = memcal(&[
            "import",
            "hf",
            config.to_str().unwrap(),
            extra,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let text = std::fs::read_to_string(&axis).unwrap();
    assert!(text.contains("\"T\""), "the axis is written");
    let plan = |path: &Path, extra: &[&str]| {
        let mut args = vec!["plan", path.to_str().unwrap(), "--batch", "1", "--json"];
        args.extend_from_slice(extra);
        let o = memcal(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["features"].clone()
    };
    assert_eq!(plan(&axis, &["--seq", "512"]), plan(&fixed, &[]));
    // A ViT has no sequence axis to write.
    let vit = fixture("vit-base-patch16-224");
    let o = memcal(&["import", "hf", vit.to_str().unwrap(), "--seq-axis"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no sequence axis"));
}

#[test]
fn attention_is_drawn_as_transformers_runs_it() {
    use memcal::ops::Op;
    let sdpa = |g: &Graph| {
        g.nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::MultiheadAttention { sdpa, .. } => Some(*sdpa),
                _ => None,
            })
            .collect::<Vec<bool>>()
    };
    // transformers' default: sdpa on every attention of gpt2, bert and vit.
    for m in ["gpt2", "bert-base-cased", "vit-base-patch16-224"] {
        let path = fixture(m);
        if !path.exists() {
            continue;
        }
        let g = import(&path, &[]);
        let s = sdpa(&g);
        assert!(!s.is_empty() && s.iter().all(|x| *x), "{m}: {s:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gpt2-eager.json");
    let config = fixture("gpt2");
    let o = memcal(&[
        "import",
        "hf",
        config.to_str().unwrap(),
        "--seq",
        "64",
        "--attn",
        "eager",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let note = String::from_utf8_lossy(&o.stderr);
    assert!(note.contains("attention: eager"), "{note}");
    let g = Graph::load(&out).unwrap();
    assert!(sdpa(&g).iter().all(|x| !*x));
}

#[test]
fn training_dropout_is_drawn_where_transformers_applies_it() {
    use memcal::ops::Op;
    let dropouts = |g: &Graph| -> Vec<(String, f64)> {
        g.nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Dropout { p } => Some((n.id.clone(), p)),
                _ => None,
            })
            .collect()
    };
    // GPT-2 (12 layers, embd_pdrop = resid_pdrop = 0.1): after the embeddings, and after each
    // block's attention and MLP projections; later readers read the dropped value.
    let g = import(&fixture("gpt2"), &["64"]);
    let d = dropouts(&g);
    assert_eq!(d.len(), 1 + 2 * 12);
    assert_eq!(d[0], ("wpe.dropout".to_string(), 0.1));
    assert!(d.iter().any(|(id, _)| id == "h3.mlp.proj.dropout"));
    let add = g.nodes.iter().find(|n| n.id == "h0.add_1").unwrap();
    assert_eq!(add.inputs, ["wpe.dropout", "h0.attn.dropout"]);
    // BERT (hidden_dropout_prob 0.1): embeddings, each layer's attention and output.
    let g = import(&fixture("bert-base-cased"), &["128"]);
    assert_eq!(dropouts(&g).len(), 1 + 2 * 12);
    // ViT's default is 0.0: torch returns the input, nothing is drawn.
    let g = import(&fixture("vit-base-patch16-224"), &[]);
    assert_eq!(dropouts(&g).len(), 0);
    // Attention dropout (attn_pdrop, attention_probs_dropout_prob) is sdpa's dropout_p.
    for model in ["gpt2", "bert-base-cased"] {
        let g = import(&fixture(model), &["64"]);
        let p: Vec<f64> = g
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::MultiheadAttention { sdpa, dropout, .. } => {
                    assert!(sdpa, "{model}");
                    Some(dropout)
                }
                _ => None,
            })
            .collect();
        assert_eq!(p, vec![0.1; 12], "{model}");
    }
}

#[test]
fn qwen2_gemma_and_bart_are_drawn_as_transformers_runs_them() {
    use memcal::ops::Op;
    // Qwen2: q, k and v biased, o_proj not; untied 7B, tied 0.5B.
    let g = import(&fixture("Qwen2-7B"), &["256"]);
    assert!(g.nodes.iter().any(|n| matches!(
        n.op,
        Op::GqaAttention {
            bias: true,
            out_bias: false,
            ..
        }
    )));
    // Gemma-7B: 16 heads of 256 on a width of 3072, the tanh GELU, the scaled embedding.
    let g = import(&fixture("gemma-7b"), &["256"]);
    assert!(g.nodes.iter().any(|n| matches!(
        n.op,
        Op::GqaAttention {
            embed_dim: 3072,
            num_heads: 16,
            head_dim: 256,
            ..
        }
    )));
    assert!(g.nodes.iter().any(|n| n.id == "embed_scale"));
    let o = memcal(&[
        "import",
        "hf",
        fixture("gemma-2b").to_str().unwrap(),
        "--seq",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let note = String::from_utf8_lossy(&o.stderr);
    assert!(
        note.contains("gelu_pytorch_tanh") && note.contains("sqrt(hidden_size)"),
        "{note}"
    );
    // BART: sdpa self- and cross-attention (said), a decoder length of its own.
    let o = memcal(&[
        "import",
        "hf",
        fixture("bart-base").to_str().unwrap(),
        "--seq",
        "128",
        "--decoder-seq",
        "64",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let note = String::from_utf8_lossy(&o.stderr);
    assert!(note.contains("in the cross-attention"), "{note}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let g = Graph::check(&serde_json::from_value(v).unwrap(), &fixture("bart-base")).unwrap();
    assert_eq!(g.parameters(), 139_420_416);
    let backends: Vec<bool> = g
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::MultiheadAttention { sdpa, .. } => Some(*sdpa),
            _ => None,
        })
        .collect();
    // 6 encoder and 6 decoder self-attentions, 6 cross-attentions.
    assert_eq!(backends.len(), 18);
    assert!(backends.iter().all(|s| *s));
    let o = memcal(&[
        "import",
        "hf",
        fixture("bart-base").to_str().unwrap(),
        "--seq",
        "2048",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("1024 learned positions"));
}

#[test]
fn what_qwen2_gemma_and_bart_cannot_draw_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let edit = |model: &str, field: &str, value: serde_json::Value| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(model)).unwrap()).unwrap();
        v[field] = value;
        let p = dir.path().join(format!("{model}-{field}.json"));
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        p
    };
    for (path, want) in [
        (
            edit("Qwen2-7B", "use_sliding_window", true.into()),
            "field `use_sliding_window`",
        ),
        (
            edit("gemma-2b", "tie_word_embeddings", false.into()),
            "field `tie_word_embeddings`",
        ),
        (
            edit("gemma-2b", "hidden_act", "swish2".into()),
            "field `hidden_act`",
        ),
        (
            edit("bart-base", "d_model", "768".into()),
            "field `d_model`",
        ),
        (
            edit("bart-base", "decoder_layers", serde_json::Value::Null),
            "field `decoder_layers`: missing",
        ),
    ] {
        let o = memcal(&["import", "hf", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", path.display());
        assert!(err.contains(want), "{}: {err}", path.display());
        assert!(
            err.contains(path.file_name().unwrap().to_str().unwrap()),
            "{err}"
        );
    }
}

/// `data/models/measured.json` (the real models the campaign measures): each entry's graph is
/// the import of its config with the `reduce` fields replaced, and a reduced model says so.
#[test]
fn measured_models_import_with_their_reduced_fields() {
    let models = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/models");
    let entries = memcal::import::measured::entries(&models).expect("measured.json reads");
    assert!(!entries.is_empty());
    for e in &entries {
        let g = memcal::import::measured::graph(&models, e).expect("the entry imports");
        let checked = Graph::check(&g, &models).expect("the graph checks");
        assert_eq!(g.name, e.graph);
        assert!(g.family.starts_with("hf-"), "{}", g.family);
        let description = g.description.clone().unwrap_or_default();
        match &e.reduce {
            Some(r) => {
                for k in r.keys() {
                    assert!(
                        description.contains(k.as_str()),
                        "{}: {description}",
                        e.graph
                    );
                }
            }
            None => {
                // A full-size model has the real parameter count: that of its plain import.
                let full = import(&models.join(&e.model).join("config.json"), &[]);
                assert_eq!(checked.parameters(), full.parameters(), "{}", e.graph);
            }
        }
    }
}

#[test]
fn bad_measured_models_name_the_file_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = dir.path().join("gpt2");
    std::fs::create_dir_all(&gpt2).unwrap();
    std::fs::copy(fixture("gpt2"), gpt2.join("config.json")).unwrap();
    let spec = dir.path().join("measured.json");
    for (text, field) in [
        (r#"{"format": "x", "models": []}"#, "format"),
        (
            r#"{"format": "memcal-measured-models/1", "models": [{"graph": "a", "model": "nope", "batches": [1]}]}"#,
            "models[0].model",
        ),
        (
            r#"{"format": "memcal-measured-models/1", "models": [{"graph": "a", "model": "gpt2", "batches": []}]}"#,
            "models[0].batches",
        ),
        (
            r#"{"format": "memcal-measured-models/1", "models": [{"graph": "a", "model": "gpt2", "batches": [1]}, {"graph": "a", "model": "gpt2", "batches": [2]}]}"#,
            "models[1].graph",
        ),
        (
            r#"{"format": "memcal-measured-models/1", "models": [{"graph": "../a", "model": "gpt2", "batches": [1]}]}"#,
            "models[0].graph",
        ),
    ] {
        std::fs::write(&spec, text).unwrap();
        let err = memcal::import::measured::entries(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("measured.json") && err.contains(field),
            "{field}: {err}"
        );
    }
    std::fs::write(
        &spec,
        r#"{"format": "memcal-measured-models/1", "models": [], "extra": 1}"#,
    )
    .unwrap();
    let err = memcal::import::measured::entries(dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("measured.json") && err.contains("extra"),
        "{err}"
    );
    // No file: no measured models.
    std::fs::remove_file(&spec).unwrap();
    assert!(memcal::import::measured::entries(dir.path())
        .unwrap()
        .is_empty());
}

#[test]
fn bad_generating_models_name_the_file_and_the_field() {
    use memcal::import::measured::generate::entries;
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = dir.path().join("gpt2");
    std::fs::create_dir_all(&gpt2).unwrap();
    std::fs::copy(fixture("gpt2"), gpt2.join("config.json")).unwrap();
    let spec = dir.path().join("generate.json");
    let entry = |fields: &str| {
        format!(
            r#"{{"format": "memcal-generate-models/1", "models": [{{"graph": "g", "model": "gpt2", {fields}}}]}}"#
        )
    };
    let ok = r#""batches": [1], "prompts": [8], "new": [4], "caches": ["dynamic"]"#;
    for (text, field) in [
        (
            r#"{"format": "memcal-measured-models/1", "models": []}"#.to_string(),
            "format",
        ),
        (entry(&ok.replace("[8]", "[0]")), "models[0].prompts"),
        (entry(&ok.replace("[4]", "[]")), "models[0].new"),
        (entry(&ok.replace("dynamic", "paged")), "models[0].caches"),
        (entry(&ok.replace(r#""batches": [1], "#, "")), "batches"),
        (
            entry(ok).replace(r#""model": "gpt2""#, r#""model": "nope""#),
            "models[0].model",
        ),
    ] {
        std::fs::write(&spec, text).unwrap();
        let err = entries(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("generate.json") && err.contains(field),
            "{field}: {err}"
        );
    }
    std::fs::write(&spec, entry(ok)).unwrap();
    assert_eq!(entries(dir.path()).unwrap().len(), 1);
    std::fs::remove_file(&spec).unwrap();
    assert!(entries(dir.path()).unwrap().is_empty());
}

/// transformers' `attribute_map`: an alias is read as its field, and an alias that disagrees
/// with its field is refused naming both (the model would get whichever key comes last).
#[test]
fn config_aliases_are_read_as_transformers_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(name)).unwrap()).unwrap();
        edit(v.as_object_mut().unwrap());
        let p = dir.path().join(format!("{name}.json"));
        std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
        p
    };
    let options = memcal::import::Options {
        name: "t".into(),
        seq: Some(64),
        ..Default::default()
    };
    // GPT-2 given hidden_size and num_hidden_layers instead of n_embd and n_layer.
    let aliased = write("gpt2", &|m| {
        let d = m.remove("n_embd").unwrap();
        let l = m.remove("n_layer").unwrap();
        m.insert("hidden_size".into(), d);
        m.insert("num_hidden_layers".into(), l);
    });
    let a = memcal::import::hf(&aliased, &options).unwrap();
    let b = memcal::import::hf(&fixture("gpt2"), &options).unwrap();
    assert_eq!(
        Graph::check(&a.graph, &aliased).unwrap().parameters(),
        124_439_808
    );
    assert_eq!(a.graph.nodes.len(), b.graph.nodes.len());
    // BART's num_hidden_layers is encoder_layers: disagreeing, refused naming both.
    let bad = write("bart-base", &|m| {
        m.insert("num_hidden_layers".into(), serde_json::json!(2));
    });
    let err = memcal::import::hf(&bad, &options).unwrap_err().to_string();
    assert!(
        err.contains("num_hidden_layers") && err.contains("encoder_layers"),
        "{err}"
    );
}

#[test]
fn a_models_folder_imports_its_config_json() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let folder = root.join("tests/fixtures/hf/gpt2");
    let o = memcal(&["import", "hf", folder.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("124,439,808 parameters"), "{err}");
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(g["name"], "gpt2", "the folder names the graph");
    // A folder without a config.json: exit 2, saying what to give.
    let empty = std::env::temp_dir().join(format!("memcal-empty-model-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = memcal(&["import", "hf", empty.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a folder without a config.json"), "{err}");
    std::fs::remove_dir_all(&empty).ok();
}

/// `memcal import hf --help` names every model_type the importer reads.
#[test]
fn the_help_lists_every_type() {
    let o = memcal(&["import", "hf", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for t in memcal::import::supported() {
        assert!(
            help.contains(&format!(" {t},")) || help.contains(&format!(" {t})")),
            "{t} is not in --help: {help}"
        );
    }
}

/// Issue 37's types: what each draws beyond LLaMA's shape, and what it says.
#[test]
fn issue_37_types_are_drawn_as_transformers_runs_them() {
    use memcal::ops::Op;
    let note = |model: &str| {
        let o = memcal(&[
            "import",
            "hf",
            fixture(model).to_str().unwrap(),
            "--seq",
            "64",
        ]);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(0), "{model}: {err}");
        err
    };
    let ids = |model: &str| -> Vec<String> {
        import(&fixture(model), &["64"])
            .nodes
            .iter()
            .map(|n| n.id.clone())
            .collect()
    };
    // Gemma-2: four norms a layer, the final soft-capping, eager attention, said.
    let g = ids("gemma-2-2b");
    for id in [
        "layers0.post_feedforward_norm",
        "softcap.tanh",
        "embed_scale",
    ] {
        assert!(g.iter().any(|i| i == id), "{id}");
    }
    let n = note("gemma-2-2b");
    assert!(
        n.contains("attn_logit_softcapping = 50") && n.contains("eager"),
        "{n}"
    );
    // OLMo: the bare LayerNorm as torch's call; OLMo-2: q/k norms over all heads, one sdpa.
    let g = import(&fixture("OLMo-1B-hf"), &["64"]);
    assert!(g.nodes.iter().any(|n| matches!(n.op, Op::Aten(_))));
    let g = import(&fixture("OLMo-2-1124-7B"), &["64"]);
    assert!(g
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::Sdpa { causal: true, .. })));
    assert!(g.nodes.iter().any(|n| n.id == "layers0.self_attn.k_norm"));
    // Parallel residuals: GPT-J, Phi, Falcon-7B and Cohere read one norm, GPT-NeoX two.
    for model in [
        "gpt-j-6b",
        "phi-2",
        "falcon-7b",
        "c4ai-command-r-v01",
        "pythia-160m",
    ] {
        let g = ids(model);
        assert!(g.iter().any(|i| i == "layers0.attn_mlp_add"), "{model}");
        assert_eq!(
            g.iter().any(|i| i == "layers0.post_attention_norm"),
            model == "pythia-160m",
            "{model}"
        );
    }
    // Rotary through a concatenation (GPT-NeoX, Phi, StableLM, Phi-3), drawn op by op at the
    // config's share of each head; GPT-NeoX's fused qkv chunked per head, Phi-3's sliced, with
    // its fused gate_up; Gemma-2's eager attention with soft-capped scores and one float mask;
    // Cohere's LayerNorm op by op.
    for (model, id) in [
        ("pythia-160m", "layers0.self_attn.qkv_heads"),
        ("pythia-160m", "layers0.self_attn.q_embed"),
        ("phi-2", "layers0.self_attn.k_embed"),
        ("stablelm-3b-4e1t", "layers0.self_attn.q_embed"),
        ("Phi-3-mini-4k-instruct", "layers0.self_attn.v_block"),
        ("Phi-3-mini-4k-instruct", "layers0.mlp.gate_up_proj"),
        ("gemma-2-2b", "layers0.self_attn.softcap.tanh"),
        ("gemma-2-2b", "causal_mask"),
        ("c4ai-command-r-v01", "layers0.input_norm.rsqrt"),
    ] {
        assert!(ids(model).iter().any(|i| i == id), "{model}: {id}");
    }
    // Phi-2's partial_rotary_factor 0.4 of head_dim 80: 32 dims; Pythia's rotary_pct 0.25 of 64.
    for (model, dims) in [("phi-2", 32), ("pythia-160m", 16)] {
        let g = import(&fixture(model), &["64"]);
        let rot = g
            .nodes
            .iter()
            .find(|n| n.id == "layers0.self_attn.q_rot")
            .expect(model);
        assert!(
            matches!(rot.op, Op::Slice { start: 0, end, .. } if end == dims),
            "{model}: {:?}",
            rot.op
        );
    }
    assert!(note("pythia-160m").contains("the first 16 of each head's 64 dims"));
    // Their rotary tables are constants of the sequence length: no axis "T", exit 2.
    let o = memcal(&[
        "import",
        "hf",
        fixture("pythia-160m").to_str().unwrap(),
        "--seq-axis",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("give --seq N instead"), "{err}");
    // Falcon-7B: multi-query attention.
    let g = import(&fixture("falcon-7b"), &["64"]);
    assert!(g.nodes.iter().any(|n| matches!(
        n.op,
        Op::GqaAttention {
            num_heads: 71,
            num_kv_heads: 1,
            ..
        }
    )));
    // Granite's multipliers and Cohere's logit scale.
    assert!(note("granite-3.0-2b-base").contains("divided by 8"));
    assert!(note("c4ai-command-r-v01").contains("times 0.0625"));
    // Phi-2 (resid_pdrop 0.1): dropout after each attention and MLP; StarCoder2's three.
    assert!(note("phi-2").contains("dropout (resid_pdrop = 0.1): 32 drawn"));
    assert!(note("starcoder2-3b").contains("dropout (embedding_dropout = 0.1): 1 drawn"));
    // Qwen2-MoE: the shared expert's sigmoid gate; DeepSeek-V2: MLA and one dense layer.
    assert!(ids("Qwen1.5-MoE-A2.7B")
        .iter()
        .any(|i| i == "layers3.shared_expert.gated"));
    let g = import(&fixture("DeepSeek-V2-Lite"), &["64"]);
    assert!(g
        .nodes
        .iter()
        .any(|n| matches!(n.op, Op::MlaAttention { .. })));
    // transformers 5's experts: the grouped layout on every MoE type, the top-k weights
    // renormalised by Mixtral only (Qwen1.5-MoE's norm_topk_prob is false; DeepSeek-V2 scales).
    for (model, renormalised) in [
        ("Mixtral-8x7B-v0.1", true),
        ("Qwen1.5-MoE-A2.7B", false),
        ("DeepSeek-V2-Lite", false),
    ] {
        let g = import(&fixture(model), &["64"]);
        let moes: Vec<_> = g
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Moe {
                    grouped,
                    renormalize,
                    ..
                } => Some((grouped, renormalize)),
                _ => None,
            })
            .collect();
        assert!(!moes.is_empty(), "{model}");
        assert!(moes.iter().all(|&m| m == (true, renormalised)), "{model}");
    }
    // Phi-3's 2047-token window is said when the sequence is longer.
    let o = memcal(&[
        "import",
        "hf",
        fixture("Phi-3-mini-4k-instruct").to_str().unwrap(),
        "--seq",
        "4096",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("sliding_window = 2047"));
    // Every type's import plans, and a sequence axis plans like a fixed length.
    let dir = tempfile::tempdir().unwrap();
    for model in [
        "OLMo-1B-hf",
        "Qwen1.5-MoE-A2.7B",
        "OLMo-2-1124-7B",
        "opt-125m",
    ] {
        let (axis, fixed) = (dir.path().join("axis.json"), dir.path().join("fixed.json"));
        for (out, extra) in [(&axis, "--seq-axis"), (&fixed, "--seq=64")] {
            let o = memcal(&[
                "import",
                "hf",
                fixture(model).to_str().unwrap(),
                extra,
                "--force",
                "--out",
                out.to_str().unwrap(),
            ]);
            assert_eq!(o.status.code(), Some(0), "{model}");
        }
        let plan = |path: &Path, extra: &[&str]| {
            let mut args = vec!["plan", path.to_str().unwrap(), "--batch", "1", "--json"];
            args.extend_from_slice(extra);
            let o = memcal(&args);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{model}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v["features"].clone()
        };
        assert_eq!(plan(&axis, &["--seq", "64"]), plan(&fixed, &[]), "{model}");
    }
}

/// A config's `sliding_window` is written on every attention where it can act (a graph with the
/// sequence axis, or a window shorter than the drawn length), and said; a bad one exits 2.
#[test]
fn sliding_windows_are_written_where_they_act() {
    let windows = |g: &Graph| -> Vec<Option<u64>> {
        use memcal::ops::Op;
        g.nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::GqaAttention { sliding_window, .. }
                | Op::Sdpa {
                    causal: true,
                    sliding_window,
                    ..
                } => Some((sliding_window > 0).then_some(sliding_window)),
                _ => None,
            })
            .collect()
    };
    let mistral = fixture("Mistral-7B-v0.1");
    // Drawn at 4096 tokens, the window (4096) never slides: nothing written.
    let g = import(&mistral, &["4096"]);
    assert!(windows(&g).iter().all(|w| w.is_none()));
    let g = import(&mistral, &["8192"]);
    let w = windows(&g);
    assert_eq!(w.len(), 32);
    assert!(w.iter().all(|&w| w == Some(4096)), "{w:?}");
    let options = memcal::import::Options {
        seq: None,
        decoder_seq: None,
        name: "imported".into(),
        family: None,
        seq_axis: true,
        attn: Default::default(),
    };
    let imported = memcal::import::hf(&mistral, &options).unwrap();
    assert!(
        imported
            .drawn
            .iter()
            .any(|d| d.contains("sliding_window = 4096 on 32 attention layers")),
        "{:?}",
        imported.drawn
    );
    // Phi-3 (attention drawn op by op): its causal sdpa calls carry the window.
    let g = import(&fixture("Phi-3-mini-4k-instruct"), &["4096"]);
    let w = windows(&g);
    assert!(!w.is_empty() && w.iter().all(|&w| w == Some(2047)), "{w:?}");
    // Mistral-7B-v0.3 has none (null).
    let g = import(&fixture("Mistral-7B-v0.3"), &["8192"]);
    assert!(windows(&g).iter().all(|w| w.is_none()));
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&mistral).unwrap();
    let bad = dir.path().join("config.json");
    std::fs::write(
        &bad,
        text.replace("\"sliding_window\": 4096", "\"sliding_window\": 0"),
    )
    .unwrap();
    let out = memcal(&[
        "import",
        "hf",
        bad.to_str().unwrap(),
        "--seq",
        "8192",
        "--out",
        dir.path().join("g.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sliding_window") && err.contains("config.json"),
        "{err}"
    );
}

/// The embeddings modules FSDP wraps as units where transformers' `_no_split_modules` names
/// them (`memcal::import::embeddings_unit`) name nodes `import hf` draws for those families,
/// and a family whose `_no_split_modules` names its blocks alone has none.
#[test]
fn embeddings_units_name_drawn_nodes() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/graphs");
    for (graph, family) in [
        ("hf-bert-base-cased", "hf-bert"),
        ("hf-roberta-base", "hf-roberta"),
        ("hf-vit-base-patch16-224", "hf-vit"),
    ] {
        let g = Graph::load(&data.join(format!("{graph}.json"))).expect("graph loads");
        assert_eq!(g.family, family);
        let unit = memcal::import::embeddings_unit(family);
        assert!(!unit.is_empty(), "{family}");
        for prefix in unit {
            assert!(
                g.nodes
                    .iter()
                    .any(|n| n.id == *prefix || n.id.starts_with(&format!("{prefix}."))),
                "{graph}: no node `{prefix}`"
            );
        }
    }
    for family in ["hf-llama", "hf-gpt2", "hf-t5", "zoo"] {
        assert!(
            memcal::import::embeddings_unit(family).is_empty(),
            "{family}"
        );
    }
}
