//! Prints the generate simulator's phases for every `cpu-generate` row of a graph beside the
//! row's measured phases: `cargo run --example generate_phases -- data GRAPH`.

use memcal::graph::Graph;
use memcal::strategy::{parse_row_spec, RowSpec};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (data, name) = (&args[1], &args[2]);
    let path = std::path::Path::new(data)
        .join("graphs")
        .join(format!("{name}.json"));
    let g = Graph::load_at(&path, Some(1)).expect("graph");
    let dir = std::path::Path::new(data)
        .join("runs/cpu-generate")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("rows")
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let row: serde_json::Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        let Ok(RowSpec::Generate { prompt, new, cache }) =
            parse_row_spec(row["strategy"].as_str().unwrap())
        else {
            continue;
        };
        let batch = row["batch"].as_u64().unwrap();
        println!("{} b{batch} p{prompt} n{new} {}", name, cache.as_str());
        let sim = memcal::simulate::generate::simulate_generate(&g, batch, prompt, new, cache);
        let phases = row["phases"].as_array().unwrap();
        for p in phases {
            let n = p["name"].as_str().unwrap();
            let m = |k: &str| p[k].as_i64().unwrap();
            let s = sim
                .as_ref()
                .ok()
                .and_then(|s| s.phases.iter().find(|x| x.name == n));
            let d =
                |a: i64, b: Option<u64>| b.map_or("-".into(), |b| format!("{:+}", b as i64 - a));
            println!(
                "  {n:<10} start {:>11} {:>9}  peak {:>11} {:>9}  end {:>11} {:>9}",
                m("allocated_start"),
                d(m("allocated_start"), s.map(|x| x.start)),
                m("allocated_peak"),
                d(m("allocated_peak"), s.map(|x| x.peak)),
                m("allocated_end"),
                d(m("allocated_end"), s.map(|x| x.end)),
            );
        }
        if let Err(e) = sim {
            println!("  {e}");
        }
    }
}
