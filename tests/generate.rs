//! The generate rule set (`simulate::generate`) against the `cpu-generate` rows: real
//! transformers `model.generate` measured on CPU (`python3 -m memcal_export.generate`).

use memcal::graph::Graph;
use memcal::simulate::generate::simulate_generate;
use memcal::strategy::{parse_row_spec, CacheImpl, RowSpec};
use std::path::Path;

/// Every row: (graph, batch, prompt, new, cache, the highest peak after `model_load`).
fn rows() -> Vec<(String, u64, u64, u64, CacheImpl, u64)> {
    let mut out = Vec::new();
    let root = Path::new("data/runs/cpu-generate");
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for d in dirs {
        let mut files: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            let row: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            let Ok(RowSpec::Generate { prompt, new, cache }) =
                parse_row_spec(row["strategy"].as_str().unwrap())
            else {
                panic!("{}: not a generate row", f.display());
            };
            let after_load = row["phases"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["name"] != "model_load")
                .map(|p| p["allocated_peak"].as_u64().unwrap())
                .max()
                .unwrap();
            out.push((
                row["graph"]["name"].as_str().unwrap().to_string(),
                row["batch"].as_u64().unwrap(),
                prompt,
                new,
                cache,
                after_load,
            ));
        }
    }
    out
}

fn graph(name: &str) -> Graph {
    Graph::load_at(
        &Path::new("data/graphs").join(format!("{name}.json")),
        Some(1),
    )
    .unwrap()
}

#[test]
fn the_simulator_reproduces_transformers_generate_on_its_rows() {
    let rows = rows();
    assert!(rows.len() >= 60, "{} rows", rows.len());
    let mut errors: Vec<(f64, String)> = Vec::new();
    let mut encdec: Vec<(f64, String)> = Vec::new();
    let mut families = std::collections::BTreeSet::new();
    for (name, batch, prompt, new, cache, measured) in &rows {
        let g = graph(name);
        match simulate_generate(&g, *batch, *prompt, *new, *cache) {
            Ok(sim) => {
                let e = (*measured as f64 - sim.peak_bytes as f64) / *measured as f64;
                let case = (
                    e.abs(),
                    format!("{name} b{batch} p{prompt} n{new} {cache:?}"),
                );
                if g.inputs.iter().any(|i| i.name.starts_with("decoder")) {
                    encdec.push(case);
                } else {
                    errors.push(case);
                    families.insert(g.family.clone());
                }
            }
            Err(why) => {
                // What is not simulated says why: a graph drawn at a fixed length other than
                // the prompt, attention drawn op by op without sdpa (Gemma-2's eager
                // soft-capping).
                assert!(
                    why.contains("fixed length")
                        || why.contains("no attention op this planner knows"),
                    "{name}: {why}"
                );
            }
        }
    }
    errors.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = errors[errors.len() / 2].0;
    let worst = errors.last().unwrap();
    assert!(errors.len() >= 100, "{} rows simulated", errors.len());
    assert!(families.len() >= 8, "{families:?}");
    assert!(median <= 0.01, "median |error| {median}");
    assert!(worst.0 <= 0.03, "max |error| {} at {}", worst.0, worst.1);
    // Encoder-decoders (T5, BART): the encoder once over the prompt, the decoder from its start
    // token, cross-attention caches fixed at the prompt; T5's attention as transformers 5's
    // default sdpa runs it under no_grad (the relative bias as the flash kernel's mask). The
    // same bounds as the decoders.
    encdec.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(encdec.len() >= 32, "{} encoder-decoder rows", encdec.len());
    let median = encdec[encdec.len() / 2].0;
    let worst = encdec.last().unwrap();
    assert!(median <= 0.01, "encoder-decoder median |error| {median}");
    assert!(
        worst.0 <= 0.03,
        "encoder-decoder max {} at {}",
        worst.0,
        worst.1
    );
}

#[test]
fn a_dynamic_cache_grows_by_concatenation_and_a_static_one_is_allocated_up_front() {
    let g = graph("gen-llama-r1");
    let dynamic = simulate_generate(&g, 2, 64, 16, CacheImpl::Dynamic).unwrap();
    let stat = simulate_generate(&g, 2, 64, 16, CacheImpl::Static).unwrap();
    // 2 layers x K and V x batch 2 x 4 kv heads x 128 x 4 bytes a token.
    let per_token = 2 * 2 * 2 * 4 * 128 * 4;
    let end = |s: &memcal::simulate::generate::Generation, p: &str| {
        s.phases.iter().find(|x| x.name == p).unwrap().end
    };
    // After the prefill a static cache holds the 16 tokens still to come.
    assert_eq!(
        end(&stat, "prefill") - end(&dynamic, "prefill"),
        16 * per_token
    );
    // When the last token is chosen the dynamic cache holds 64 + 15 tokens, the static 80.
    assert_eq!(dynamic.kv_cache_bytes, 79 * per_token);
    assert_eq!(stat.kv_cache_bytes, 80 * per_token);
    // Both return with the caches gone: the weights, the inputs and the sequences.
    assert_eq!(end(&dynamic, "decode"), end(&stat, "decode"));
    assert_eq!(dynamic.peak_phase, "prefill");
}

/// A sliding layer (gen-mistral-sw-r1: window 48, 2 layers of one kv head of 128): the
/// dynamic cache keeps the whole prompt after the prefill, then each step's `cat` of the last
/// 47 tokens and the new one; a static cache allocates 48 up front.
#[test]
fn a_sliding_cache_keeps_its_window() {
    let g = graph("gen-mistral-sw-r1");
    let per_token = 2 * 2 * 128 * 4;
    let end = |s: &memcal::simulate::generate::Generation, p: &str| {
        s.phases.iter().find(|x| x.name == p).unwrap().end
    };
    let dynamic = simulate_generate(&g, 1, 256, 8, CacheImpl::Dynamic).unwrap();
    let stat = simulate_generate(&g, 1, 256, 8, CacheImpl::Static).unwrap();
    assert_eq!(dynamic.kv_cache_bytes, 48 * per_token);
    assert_eq!(stat.kv_cache_bytes, 48 * per_token);
    // After the prefill the dynamic cache still holds the prompt's 256 tokens.
    assert_eq!(
        end(&dynamic, "prefill") - end(&stat, "prefill"),
        (256 - 48) * per_token
    );
    // Below the window it grows as a full layer does.
    let short = simulate_generate(&g, 1, 16, 8, CacheImpl::Dynamic).unwrap();
    assert_eq!(short.kv_cache_bytes, 23 * per_token);
}

#[test]
fn encoders_are_refused_and_encoder_decoders_keep_fixed_cross_attention_caches() {
    // t5 reduced: 2 decoder layers, 8 heads of 64; K and V, fp32, batch 2.
    let t5 = graph("gen-t5-small");
    let per_token = 2 * 2 * 8 * 64 * 4;
    let sim = simulate_generate(&t5, 2, 100, 8, CacheImpl::Dynamic).unwrap();
    // The self-attention caches hold the start token and 7 generated tokens when the last
    // one is chosen; the cross-attention caches the 100 encoder tokens.
    assert_eq!(sim.kv_cache_bytes, 2 * per_token * (8 + 100));
    let vit = Graph::load(Path::new("data/graphs/hf-vit-base-patch16-224.json")).unwrap();
    let err = simulate_generate(&vit, 1, 32, 8, CacheImpl::Dynamic).unwrap_err();
    assert!(err.contains("no causal self-attention"), "{err}");
    let g = graph("gen-llama-r1");
    assert!(simulate_generate(&g, 0, 32, 8, CacheImpl::Dynamic).is_err());
    assert!(simulate_generate(&g, 1, 32, 0, CacheImpl::Dynamic).is_err());
}
