//! The baselines against published figures.

use memcal::baselines::{accelerate, textbook};
use memcal::features::Precision;
use memcal::graph::Graph;
use std::path::Path;

fn zoo_graph(name: &str) -> Graph {
    let file = memcal::zoo::all()
        .into_iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("zoo has {name}"));
    Graph::check(&file, Path::new(name)).expect("zoo graph is valid")
}

#[test]
fn accelerate_reproduces_its_documented_bert_base_cased_output() {
    // `accelerate estimate-memory bert-base-cased`, float32 row:
    // largest layer 84.95 MB, total 413.18 MB, training using Adam 1.61 GB (1024-based units).
    let a = accelerate(&zoo_graph("bert-base-cased"), Precision::Fp32);
    assert_eq!(a.printed_largest_layer, "84.95 MB");
    assert_eq!(a.printed_total, "413.18 MB");
    assert_eq!(a.printed_training, "1.61 GB");
    // Its exact bytes: 108,310,272 parameters x 4 + two int64 [1, 512] buffers.
    assert_eq!(a.total_bytes, 108_310_272 * 4 + 2 * 512 * 8);
    assert_eq!(a.training_bytes, 4 * a.total_bytes);
    // The bfloat16 row: 8 bytes per parameter, the optimizer term.
    let h = accelerate(&zoo_graph("bert-base-cased"), Precision::Bf16Autocast);
    assert_eq!(h.training_bytes, 2 * a.total_bytes);
}

#[test]
fn textbook_applies_to_gpt_and_bert_only() {
    let t = textbook(&zoo_graph("gpt2-small"), 8).expect("applies to GPT-2");
    assert_eq!(
        (t.layers, t.sequence, t.hidden, t.heads),
        (12, 1024, 768, 12)
    );
    assert_eq!(t.model_bytes, 14 * 124_439_808);
    assert_eq!(
        t.activation_bytes,
        12 * 8 * 1024 * (34 * 768 + 5 * 12 * 1024)
    );
    assert!(textbook(&zoo_graph("bert-base-cased"), 8).is_ok());
    let why = textbook(&zoo_graph("resnet50"), 8).unwrap_err();
    assert!(why.contains("no attention"), "{why}");
    let why = textbook(&zoo_graph("t5-small"), 8).unwrap_err();
    assert!(why.contains("cross-attention"), "{why}");
}
