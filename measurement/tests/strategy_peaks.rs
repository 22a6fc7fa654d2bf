//! A checkpointed step peaks lower than the plain one, QLoRA lower than LoRA, and the
//! inference protocol's phases hold the weights and the cache. One test in this file: the
//! counting allocator is global, so no other test thread may allocate while it reads.

use memcal::graph::Graph;
use memcal::strategy::parse_row_spec;
use memcal_measure::counters::Backend;
use memcal_measure::protocol::{run_with, Precision};
use memcal_measure::strategies;
use std::path::Path;

fn graph(name: &str) -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Graph::load(&root.join(format!("data/graphs/{name}.json"))).expect("graph loads")
}

fn protocol(spec: &str) -> strategies::Protocol {
    strategies::protocol(&parse_row_spec(spec).unwrap()).unwrap()
}

#[test]
fn rows_record_their_strategy_and_checkpointing_lowers_the_peak() {
    memcal_measure::counters::install_cpu_counter().unwrap();
    let g = graph("llama-r1");
    let peak = |spec: Option<&str>| {
        let p = spec.map(protocol);
        let out = run_with(&g, 2, Backend::Cpu, Precision::Fp32, p.as_ref());
        assert_eq!(
            out.status,
            memcal::run::RunStatus::Completed,
            "{spec:?}: {:?}",
            out.failure
        );
        memcal_measure::protocol::overall_peak(&out.phases)
            .unwrap()
            .allocated_bytes
    };
    let plain = peak(None);
    assert!(peak(Some("checkpoint")) < plain);
    assert!(peak(Some("qlora:r=4")) < peak(Some("lora:r=4")));
    let out = run_with(
        &g,
        1,
        Backend::Cpu,
        Precision::Fp32,
        Some(&protocol("inference:prompt=16,decode=4")),
    );
    let names: Vec<&str> = out.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["model_load", "inputs", "prefill", "decode"]);
    // The prefill holds at least the weights and the cache (2 x 4 layers x 2 kv heads x 64
    // x 20 tokens x 4 bytes).
    let prefill = out.phases[2].allocated_peak.unwrap();
    assert!(prefill >= g.parameters() * 4 + 2 * 4 * 2 * 64 * 20 * 4);
    assert!(strategies::protocol(&parse_row_spec("zero3:world=8").unwrap()).is_err());
}
