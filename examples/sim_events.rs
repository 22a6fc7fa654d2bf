//! Every simulated event of a graph's first forward and backward (node, live bytes at its high
//! point and after it), to find where the simulator and a real run part:
//!
//!     cargo run --example sim_events -- GRAPH BATCH [PHASE_PREFIX]
use memcal::features::Precision;
use memcal::graph::Graph;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (graph, batch, prefix) = match args.as_slice() {
        [g, b] => (g, b, "step1."),
        [g, b, p] => (g, b, p.as_str()),
        _ => {
            eprintln!("usage: sim_events GRAPH BATCH [PHASE_PREFIX]");
            std::process::exit(2);
        }
    };
    let g = Graph::load(std::path::Path::new(graph)).expect("the graph loads");
    let batch: u64 = batch.parse().expect("a batch");
    let sim = memcal::simulate::simulate(&g, batch, Precision::Fp32).expect("rules");
    for e in sim.timeline.iter().filter(|e| e.phase.starts_with(prefix)) {
        println!("{}\t{}\t{}\t{}", e.phase, e.node, e.bytes, e.after);
    }
}
