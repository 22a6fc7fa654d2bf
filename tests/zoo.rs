//! The zoo: published parameter counts, every graph checks, families and variants, and
//! `write_all` round-trips through `load_dir` with deterministic bytes.

use memcal::graph::{load_dir, Graph, GraphFile};
use memcal::ops::Op;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn checked() -> Vec<(GraphFile, Graph)> {
    memcal::zoo::all()
        .into_iter()
        .map(|f| {
            let path = format!("{}.json", f.name);
            let g = Graph::check(&f, Path::new(&path))
                .unwrap_or_else(|e| panic!("zoo graph `{}` fails its check: {e}", f.name));
            (f, g)
        })
        .collect()
}

fn params(name: &str) -> u64 {
    let f = memcal::zoo::all()
        .into_iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no zoo graph `{name}`"));
    Graph::check(&f, Path::new(name)).unwrap().parameters()
}

#[test]
fn published_parameter_counts_are_exact() {
    assert_eq!(params("gpt2-small"), 124_439_808);
    assert_eq!(params("bert-base-cased"), 108_310_272);
    assert_eq!(params("resnet50"), 25_557_032);
    assert_eq!(params("vit-b16"), 86_567_656);
    assert_eq!(params("t5-small"), 60_506_624);
}

#[test]
fn other_templates_match_their_published_counts() {
    // LLaMA-7B, Mixtral-8x7B (as reported by HF `num_parameters()`), torchvision MobileNetV2,
    // Zaremba et al.'s large PTB LSTM (2 x 1500, vocab 10k; "66M").
    assert_eq!(params("llama-full"), 6_738_415_616);
    assert_eq!(params("mixtral-full"), 46_702_792_704);
    assert_eq!(params("mobilenet-full"), 3_504_872);
    assert_eq!(params("lstm-lm-full"), 66_034_000);
}

#[test]
fn bert_lists_the_hf_buffers() {
    let bert = memcal::zoo::all()
        .into_iter()
        .find(|g| g.name == "bert-base-cased")
        .unwrap();
    let names: Vec<(&str, &[u64], &str)> = bert
        .buffers
        .iter()
        .map(|b| (b.name.as_str(), b.shape.as_slice(), b.dtype.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("embeddings.position_ids", &[1u64, 512][..], "int64"),
            ("embeddings.token_type_ids", &[1u64, 512][..], "int64"),
        ]
    );
}

#[test]
fn every_graph_checks_and_ends_in_a_loss() {
    for (f, g) in checked() {
        let loss = g.nodes.iter().find(|n| n.id == g.loss).unwrap();
        assert!(loss.op.is_loss(), "{}", f.name);
        assert!(g.has_batch_axis(), "{} has no batch axis", f.name);
        assert_eq!(f.format, "memcal-graph/1");
    }
}

#[test]
fn families_templates_and_reduced_variants() {
    let all = memcal::zoo::all();
    let names: BTreeSet<&str> = all.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names.len(), all.len(), "graph names must be unique");
    let sorted: Vec<&str> = all.iter().map(|g| g.name.as_str()).collect();
    let mut want = sorted.clone();
    want.sort();
    assert_eq!(sorted, want, "all() is sorted by name");

    let mut families: BTreeMap<&str, Vec<&GraphFile>> = BTreeMap::new();
    for g in &all {
        families.entry(g.family.as_str()).or_default().push(g);
    }
    assert!(families.len() >= 15, "{} families", families.len());
    for fam in [
        "mlp",
        "resnet",
        "vit",
        "gpt",
        "bert",
        "t5",
        "llama",
        "mla",
        "mixtral",
        "unet",
        "lstm-lm",
        "gru",
        "cnn-lstm",
        "conv1d-audio",
    ] {
        assert!(families.contains_key(fam), "missing family {fam}");
    }
    let published = [
        "gpt2-small",
        "bert-base-cased",
        "resnet50",
        "vit-b16",
        "t5-small",
    ];
    for (fam, graphs) in &families {
        let full: Vec<_> = graphs.iter().filter(|g| g.variant == "full").collect();
        assert_eq!(
            full.len(),
            1,
            "family {fam} needs exactly one full template"
        );
        let template = &full[0].name;
        assert!(full[0].cut_from.is_none());
        assert!(
            published.contains(&template.as_str()) || *template == format!("{fam}-full"),
            "template {template}"
        );
        let reduced: Vec<_> = graphs.iter().filter(|g| g.variant != "full").collect();
        assert!(
            (3..=4).contains(&reduced.len()),
            "family {fam} has {} reduced variants",
            reduced.len()
        );
        for r in reduced {
            assert_eq!(r.cut_from.as_deref(), Some(template.as_str()), "{}", r.name);
            assert_eq!(r.name, format!("{fam}-{}", r.variant));
            assert!(r.variant.starts_with('r'), "{}", r.name);
        }
    }
}

/// The brief for reduced variants: at most ~60M parameters, attention T <= 512, vocab <= 8192,
/// CNN images <= 128x128.
#[test]
fn reduced_variants_stay_small() {
    for (f, g) in checked() {
        if f.variant == "full" {
            continue;
        }
        assert!(
            g.parameters() <= 60_000_000,
            "{}: {} parameters",
            f.name,
            g.parameters()
        );
        for i in &g.inputs {
            if let Some(c) = i.classes {
                assert!(c <= 8192, "{}: input {} has {c} classes", f.name, i.name);
            }
            if i.shape.rank() == 4 {
                let side = i.shape.0[2].as_fixed().unwrap();
                assert!(side <= 128, "{}: {side}px images", f.name);
            }
        }
        for n in &g.nodes {
            let attention = matches!(
                n.op,
                Op::MultiheadAttention { .. } | Op::GqaAttention { .. } | Op::MlaAttention { .. }
            );
            if attention {
                let t = n.output.0[1].as_fixed().unwrap();
                assert!(t <= 512, "{}: attention over {t} tokens", f.name);
            }
        }
    }
}

#[test]
fn write_all_round_trips_with_deterministic_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = memcal::zoo::write_all(dir.path()).unwrap();
    let all = memcal::zoo::all();
    assert_eq!(paths.len(), all.len());
    let loaded = load_dir(dir.path()).unwrap();
    assert_eq!(loaded.len(), all.len());
    for (g, f) in loaded.iter().zip(&all) {
        assert_eq!(g.name, f.name);
        assert_eq!(g.nodes.len(), f.nodes.len());
    }
    let first: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    for b in &first {
        assert_eq!(b.last(), Some(&b'\n'));
    }
    let other = tempfile::tempdir().unwrap();
    let again = memcal::zoo::write_all(other.path()).unwrap();
    let second: Vec<Vec<u8>> = again.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(first, second, "two writes give identical bytes");
    // Rewriting over existing files keeps the bytes too.
    memcal::zoo::write_all(dir.path()).unwrap();
    let third: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert_eq!(first, third);
}

/// A rough size report (`cargo test --test zoo -- --ignored --nocapture sizes`): parameters and
/// a crude float32 training-memory proxy at batch 8 (weights, grads and two AdamW moments plus
/// every node output and eager attention scores).
#[test]
#[ignore]
fn sizes() {
    for (f, g) in checked() {
        let batch = 8;
        let p = g.parameters();
        let mut act: u64 = 0;
        let mut flops: u64 = 0;
        for n in &g.nodes {
            let out: u64 = n.output.0.iter().map(|d| d.at(batch)).product();
            if !n.op.is_view() {
                act += out;
            }
            let rows = |s: &memcal::shape::Shape| -> u64 {
                s.0[..s.rank().saturating_sub(1)]
                    .iter()
                    .map(|d| d.at(batch))
                    .product()
            };
            match &n.op {
                Op::MultiheadAttention { num_heads, .. } => {
                    let t = n.output.0[1].at(batch);
                    let tk = g
                        .shape_of(n.inputs.last().unwrap())
                        .map(|s| s.0[1].at(batch))
                        .unwrap_or(t);
                    act += 2 * batch * num_heads * t * tk;
                    flops += 2 * n.op.parameters() * rows(&n.output)
                        + 4 * rows(&n.output) * tk * n.output.0[2].at(batch);
                }
                Op::GqaAttention { .. } | Op::MlaAttention { .. } => {
                    let t = n.output.0[1].at(batch);
                    flops += 2 * n.op.parameters() * rows(&n.output)
                        + 4 * rows(&n.output) * t * n.output.0[2].at(batch);
                }
                Op::Moe {
                    dim, hidden, top_k, ..
                } => {
                    act += rows(&n.output) * top_k * hidden * 3;
                    flops += 6 * rows(&n.output) * top_k * dim * hidden;
                }
                Op::Conv1d(_) | Op::Conv2d(_) | Op::ConvTranspose2d(_) => {
                    let spatial: u64 = n.output.0[2..].iter().map(|d| d.at(batch)).product();
                    let per = if matches!(n.op, Op::ConvTranspose2d(_)) {
                        let s: u64 = g.shape_of(&n.inputs[0]).unwrap().0[2..]
                            .iter()
                            .map(|d| d.at(batch))
                            .product();
                        s * batch
                    } else {
                        spatial * batch
                    };
                    flops += 2 * n.op.parameters() * per;
                }
                Op::Lstm(r) | Op::Gru(r) => {
                    // Autograd keeps the gates and states of every step, layer and direction.
                    let gates = if matches!(n.op, Op::Lstm(_)) { 6 } else { 5 };
                    act += rows(&n.output) * r.num_layers * r.directions() * gates * r.hidden_size;
                    flops += 2 * n.op.parameters() * rows(&n.output);
                }
                Op::Linear { .. } => {
                    flops += 2 * n.op.parameters() * rows(&n.output);
                }
                _ => {}
            }
        }
        let mb = (16 * p + 4 * act) as f64 / 1e6;
        // 3 steps of forward + backward (3x the forward) at ~50 GFLOP/s.
        let secs = 3.0 * 3.0 * flops as f64 / 50e9;
        println!(
            "{:<22} {:>16} params  ~{:>9.0} MB @B=8  ~{:>7.1} s/3 steps @B=8",
            f.name, p, mb, secs
        );
    }
}

/// T5's decoder reads the shared table through an embedding `tie`: it owns no parameters, and a
/// tie to a missing, mismatched or itself-tied embedding is rejected.
#[test]
fn embedding_ties_are_checked() {
    let t5 = memcal::zoo::all()
        .into_iter()
        .find(|g| g.name == "t5-small")
        .unwrap();
    let path = Path::new("t5-small.json");
    let dec = t5
        .nodes
        .iter()
        .position(|n| n.id == "decoder.embed_tokens")
        .unwrap();
    let untied = {
        let mut f = t5.clone();
        f.nodes[dec].attributes.remove("tie");
        Graph::check(&f, path).unwrap().parameters()
    };
    assert_eq!(untied - params("t5-small"), 32128 * 512);

    let mut wrong_dim = t5.clone();
    wrong_dim.nodes[dec]
        .attributes
        .insert("embedding_dim".into(), 256.into());
    assert!(Graph::check(&wrong_dim, path).is_err());

    let mut chained = t5.clone();
    let lm = chained
        .nodes
        .iter()
        .position(|n| n.id == "lm_head")
        .unwrap();
    chained.nodes[lm]
        .attributes
        .insert("tie".into(), "decoder.embed_tokens".into());
    let err = Graph::check(&chained, path).unwrap_err().to_string();
    assert!(err.contains("itself tied"), "{err}");

    let mut missing = t5;
    missing.nodes[dec]
        .attributes
        .insert("tie".into(), "nope".into());
    assert!(Graph::check(&missing, path).is_err());
}
