//! The simulator's phases of a graph beside a measured row's, phase by phase (where a real
//! model and its imported graph part):
//!
//!     cargo run --release --example sim_vs_row -- data/graphs/hf-gpt2.json data/runs/cpu-real/hf-gpt2/b1.json
//!
//! A row with a strategy is simulated under it, a per-rank row at its rank.
use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::run::RunRow;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [graph, row] = args.as_slice() else {
        eprintln!("usage: sim_vs_row GRAPH ROW");
        std::process::exit(2);
    };
    let g = Graph::load(std::path::Path::new(graph)).expect("the graph loads");
    let row: RunRow = serde_json::from_slice(&std::fs::read(row).expect("the row reads"))
        .expect("a memcal-run/1 row");
    let precision: Precision = row.precision.parse().expect("a known precision");
    let sim = match row.strategy.as_deref() {
        None => memcal::simulate::simulate(&g, row.batch, precision),
        Some(spec) => {
            let s = memcal::strategy::parse(spec).expect("a training strategy");
            match row.rank {
                Some(rank) => memcal::simulate::simulate_rank(
                    &g,
                    row.batch,
                    precision,
                    &s,
                    rank,
                    true,
                    memcal::simulate::deepspeed::Collectives::Gloo,
                ),
                None => memcal::simulate::simulate_strategy(&g, row.batch, precision, &s, true),
            }
        }
    }
    .expect("the simulator has rules");
    println!(
        "{:18} {:>15} {:>15} {:>12}   {:>15} {:>12}  at",
        "phase", "measured peak", "simulated", "diff", "end diff", ""
    );
    for p in &row.phases {
        let Some(s) = sim.phases.iter().find(|s| s.name == p.name) else {
            continue;
        };
        let peak = p.allocated_peak.unwrap_or(0) as i128;
        let end = p.allocated_end.unwrap_or(0) as i128;
        println!(
            "{:18} {:>15} {:>15} {:>12}   {:>15} {:>12}  {}",
            p.name,
            peak,
            s.peak,
            s.peak as i128 - peak,
            s.end,
            s.end as i128 - end,
            s.peak_node
        );
    }
    // MEMCAL_EVENTS=PHASE: that phase's simulated events too (node, high, after).
    if let Ok(phase) = std::env::var("MEMCAL_EVENTS") {
        for e in sim.timeline.iter().filter(|e| e.phase == phase) {
            println!("{}\t{}\t{}", e.node, e.bytes, e.after);
        }
    }
}
