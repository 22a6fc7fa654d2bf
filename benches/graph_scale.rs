//! Graph scale: loading, checking, features, simulation and `memcal plan` on large graphs.
//! Prints figures; asserts nothing about time (a benchmark, not a timed test).
//!
//! ```sh
//! cargo bench --bench graph_scale                       # 1,000,000-node chain, 100,000-node GPT
//! MEMCAL_GRAPH_SIZES=10000,100000 cargo bench --bench graph_scale   # chains of these sizes only
//! ```
//!
//! Two graphs, written to a temporary folder first:
//! - a chain: the input, `n` relus one after the other, a linear and a cross-entropy loss;
//! - a real-shaped graph: `data/graphs/gpt2-small.json` with its 8-node transformer block
//!   repeated until the graph has about 100,000 nodes (12,500 blocks; every op kind of GPT-2).
//!
//! For each: the file's size, then the in-process stages (parse + check, features, simulation)
//! and `memcal plan FILE --batch 1 --precision fp32` run as a child process (the release
//! binary cargo built for this bench), its wall time and its peak RSS (`VmHWM` of the child,
//! read from `/proc` until it exits).

use memcal::features::{self, Precision};

/// The allocator the `memcal` binary uses, so that the in-process figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use memcal::graph::{Graph, GraphFile, NodeFile};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A chain of `n` relus between an input `[B, 8]` and a linear + cross-entropy head.
fn chain(n: usize) -> GraphFile {
    let mut text = String::with_capacity(64 * n + 1024);
    text.push_str(
        r#"{"format":"memcal-graph/1","name":"chain","family":"chain","variant":"c",
"inputs":[{"name":"x","shape":["B",8],"dtype":"float32"},
{"name":"y","shape":["B"],"dtype":"int64","classes":4}],"nodes":["#,
    );
    let mut prev = "x".to_string();
    for k in 0..n {
        let id = format!("r{k}");
        text.push_str(&format!(
            r#"{{"id":"{id}","op":"relu","inputs":["{prev}"]}},"#
        ));
        prev = id;
    }
    text.push_str(&format!(
        r#"{{"id":"fc","op":"linear","inputs":["{prev}"],"attributes":{{"in_features":8,"out_features":4}}}},
{{"id":"loss","op":"cross_entropy","inputs":["fc","y"]}}],"loss":"loss"}}"#
    ));
    serde_json::from_str(&text).expect("the chain is a graph file")
}

/// gpt2-small with its block `h0.*` repeated `blocks` times (blocks `h0` .. `h{blocks-1}`).
fn deep_gpt(blocks: usize) -> GraphFile {
    let text = std::fs::read_to_string(repo().join("data/graphs/gpt2-small.json")).unwrap();
    let mut g: GraphFile = serde_json::from_str(&text).unwrap();
    let block: Vec<NodeFile> = g
        .nodes
        .iter()
        .filter(|n| n.id.starts_with("h0."))
        .cloned()
        .collect();
    let first = g
        .nodes
        .iter()
        .position(|n| n.id.starts_with("h0."))
        .unwrap();
    let head: Vec<NodeFile> = g.nodes[..first].to_vec();
    let tail: Vec<NodeFile> = g
        .nodes
        .iter()
        .filter(|n| !n.id.starts_with('h') || !n.id.contains('.'))
        .skip(head.len())
        .cloned()
        .collect();
    // The block's input from outside it (the embeddings' sum feeding h0).
    let block_in: String = block
        .iter()
        .flat_map(|n| n.inputs.iter())
        .find(|i| !i.starts_with("h0."))
        .cloned()
        .unwrap();
    let last_of_block = block.last().unwrap().id.clone(); // h0.add_2
    let mut nodes = head;
    let mut prev_out = block_in.clone();
    for k in 0..blocks {
        for n in &block {
            let mut m = n.clone();
            m.id = n.id.replacen("h0.", &format!("h{k}."), 1);
            m.inputs = n
                .inputs
                .iter()
                .map(|i| {
                    if i == &block_in {
                        prev_out.clone()
                    } else {
                        i.replacen("h0.", &format!("h{k}."), 1)
                    }
                })
                .collect();
            nodes.push(m);
        }
        prev_out = last_of_block.replacen("h0.", &format!("h{k}."), 1);
    }
    let old_last = format!("h{}.add_2", 11);
    for mut n in tail {
        for i in &mut n.inputs {
            if i == &old_last {
                *i = prev_out.clone();
            }
        }
        nodes.push(n);
    }
    g.nodes = nodes;
    g.name = "gpt-deep".into();
    g
}

/// The peak RSS of a child process in MiB: `VmHWM` read from `/proc/<pid>/status` every 2 ms
/// until it exits (the last reading; the high-water mark only grows).
fn run_child(args: &[&str]) -> (f64, f64, bool) {
    let t = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_memcal"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("memcal runs");
    let status_path = format!("/proc/{}/status", child.id());
    let mut hwm_kib = 0u64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_path) {
            if let Some(v) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
            {
                hwm_kib = hwm_kib.max(v);
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            let secs = t.elapsed().as_secs_f64();
            return (secs, hwm_kib as f64 / 1024.0, status.success());
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn measure(label: &str, file: &GraphFile, dir: &Path) {
    let path = dir.join(format!("{label}.json"));
    let bytes = serde_json::to_vec(file).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let nodes = file.nodes.len();
    let t = Instant::now();
    let g = Graph::load(&path).expect("the graph loads");
    let t_load = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let f = features::features(&g, 1, Precision::Fp32);
    let t_feat = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let sim = memcal::simulate::simulate(&g, 1, Precision::Fp32).expect("it simulates");
    let t_sim = t.elapsed().as_secs_f64();
    drop(g);
    let p = path.to_str().unwrap();
    let factors = repo().join("data/factors.json");
    let args = [
        "plan",
        p,
        "--batch",
        "1",
        "--precision",
        "fp32",
        "--factors",
        factors.to_str().unwrap(),
    ];
    let (secs, mib, ok) = run_child(&args);
    let (secs2, mib2, _) = run_child(&args);
    println!(
        "{label}: {nodes} nodes, {:.1} MB file; in process: parse + check {t_load:.2} s, \
         features {t_feat:.2} s (layer_outputs {} bytes), simulation {t_sim:.2} s (peak {} \
         bytes, {} timeline events); `memcal plan`: {secs:.2} s and {secs2:.2} s, peak RSS \
         {mib:.0} MiB and {mib2:.0} MiB{}",
        bytes.len() as f64 / 1e6,
        f.layer_outputs,
        sim.peak_bytes,
        sim.timeline.len(),
        if ok { "" } else { " (FAILED)" }
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the arguments.
    let dir = tempfile::tempdir().unwrap();
    let sizes: Vec<usize> = std::env::var("MEMCAL_GRAPH_SIZES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().parse().unwrap()).collect())
        .unwrap_or_else(|| vec![1_000_000]);
    for n in &sizes {
        measure(&format!("chain-{n}"), &chain(*n), dir.path());
    }
    if std::env::var("MEMCAL_GRAPH_SIZES").is_err() {
        measure("gpt2-12500-blocks", &deep_gpt(12_500), dir.path());
    }
}
