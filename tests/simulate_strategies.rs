//! The simulator's strategy rule sets (`simulate_strategy`: checkpointing, LoRA, QLoRA):
//! unit checks on small graphs, exact phase-by-phase checks against `memcal-measure run
//! --strategy` rows of fixtures (`tests/fixtures/sim/measured/strategies-cpu-fp32.json`), and
//! every strategy row of `data/runs/` phase by phase within a stated tolerance.

use memcal::features::Precision;
use memcal::graph::Graph;
use memcal::run::RunRow;
use memcal::simulate::{simulate, simulate_strategy, Simulation};
use memcal::strategy::parse;
use serde::Deserialize;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Graph {
    Graph::load(&root().join(format!("tests/fixtures/sim/{name}.json"))).expect("fixture loads")
}

fn sim(g: &Graph, batch: u64, spec: &str) -> Simulation {
    let s = parse(spec).expect("spec parses");
    simulate_strategy(g, batch, Precision::Fp32, &s, true).expect("simulates")
}

fn phase_end(s: &Simulation, name: &str) -> u64 {
    s.phase(name).expect("phase simulated").end
}

#[test]
fn plain_strategy_is_the_plain_simulation() {
    let g = fixture("strat-mlp-blocks");
    let a = simulate(&g, 4, Precision::Fp32).unwrap();
    let b = sim(&g, 4, "plain");
    assert_eq!(a, b);
}

#[test]
fn checkpoint_keeps_only_stage_boundaries_after_forward() {
    let g = fixture("strat-mlp-blocks");
    let plain = simulate(&g, 8, Precision::Fp32).unwrap();
    let ck = sim(&g, 8, "checkpoint:every=1");
    let ck2 = sim(&g, 8, "checkpoint:every=2");
    // Parameters, gradients and AdamW states are the plain step's.
    assert_eq!(
        phase_end(&plain, "step3.optimizer"),
        phase_end(&ck, "step3.optimizer")
    );
    assert_eq!(plain.phase("model_load"), ck.phase("model_load"));
    // What the forward leaves for the backward: the stage boundaries only, fewer with longer
    // segments, far less than the plain step's saved activations.
    let fwd =
        |s: &Simulation| phase_end(s, "step2.forward") - s.phase("step2.forward").unwrap().start;
    assert!(fwd(&ck2) < fwd(&ck), "{} {}", fwd(&ck2), fwd(&ck));
    assert!(2 * fwd(&ck) < fwd(&plain), "{} {}", fwd(&ck), fwd(&plain));
    // The backward ends where the plain one does (gradients), less the 4-byte loss, which the
    // staged backward drops inside the phase (`Tape::backward`'s `drop(loss)`).
    assert_eq!(
        phase_end(&plain, "step2.backward"),
        phase_end(&ck, "step2.backward") + 4
    );
}

#[test]
fn checkpoint_rejects_a_loss_inside_a_block() {
    let mut g = fixture("strat-mlp-blocks");
    let last = g.nodes.len() - 1;
    g.nodes[last].id = "blocks9.loss".into();
    g.loss = "blocks9.loss".into();
    let s = parse("checkpoint").unwrap();
    // Renaming the loss leaves the graph unchecked: either refusal is fine, never a panic.
    let _ = simulate_strategy(&g, 2, Precision::Fp32, &s, false);
}

#[test]
fn lora_trains_only_the_adapters() {
    let g = fixture("strat-mlp-blocks");
    let r = 4;
    let s = sim(&g, 4, &format!("lora:r={r}"));
    // Adapters: A [r, in] and B [out, r] on every linear inside a block.
    let adapters: u64 = g
        .nodes
        .iter()
        .filter(|n| memcal::strategy::memory::block_of(&n.id).is_some())
        .filter_map(|n| match n.op {
            memcal::ops::Op::Linear {
                in_features,
                out_features,
                ..
            } => Some(r * (in_features + out_features) * 4),
            _ => None,
        })
        .sum();
    let load = s.phase("model_load").unwrap().end;
    assert_eq!(load, 4 * g.parameters() + adapters);
    // After step 1's optimizer: the base, the adapters and their two AdamW states.
    let opt = s.phase("step1.optimizer").unwrap();
    assert_eq!(opt.end - s.phase("inputs").unwrap().end, 2 * adapters);
}

#[test]
fn qlora_packs_the_targets_at_load() {
    let g = fixture("strat-mlp-blocks");
    let s = sim(&g, 4, "qlora:r=4");
    let l = sim(&g, 4, "lora:r=4");
    let (mut packed, mut fp32) = (0u64, 0u64);
    for n in &g.nodes {
        if memcal::strategy::memory::block_of(&n.id).is_none() {
            continue;
        }
        if let memcal::ops::Op::Linear {
            in_features: i,
            out_features: o,
            ..
        } = n.op
        {
            let (c, a, t) = memcal::simulate::lowrank::packed_bytes(o, i);
            packed += c + a + t;
            fp32 += o * i * 4;
        }
    }
    assert_eq!(
        s.phase("model_load").unwrap().end,
        l.phase("model_load").unwrap().end - fp32 + packed
    );
    // The load peaks while the first target is packed: the whole fp32 base is alive.
    assert!(s.phase("model_load").unwrap().peak > 4 * g.parameters());
}

#[test]
fn unsupported_parts_are_errors_not_panics() {
    let g = fixture("strat-mlp-blocks");
    for spec in [
        "zero3:world=8+checkpoint",
        "fsdp:world=2+checkpoint",
        "adam8bit",
        "tp:k=2+checkpoint",
        "pp:stages=2+lora",
    ] {
        let s = parse(spec).unwrap();
        assert!(
            simulate_strategy(&g, 2, Precision::Fp32, &s, false).is_err(),
            "{spec}"
        );
    }
    let s = parse("checkpoint").unwrap();
    assert!(simulate_strategy(&g, 2, Precision::Bf16Autocast, &s, false).is_err());
    // A graph with no block has nothing to adapt.
    let flat = fixture("sim-conv-bn-pool");
    let s = parse("lora:r=4").unwrap();
    assert!(simulate_strategy(&flat, 2, Precision::Fp32, &s, false).is_err());
}

#[test]
fn strategy_simulation_is_deterministic() {
    let g = fixture("strat-mlp-blocks");
    for spec in [
        "checkpoint:every=2",
        "lora:r=8",
        "qlora:r=4",
        "checkpoint+lora:r=4",
    ] {
        assert_eq!(sim(&g, 3, spec), sim(&g, 3, spec), "{spec}");
    }
}

/// One measured run, reduced to its phases.
#[derive(Deserialize)]
struct Measured {
    graph: String,
    sha256: String,
    batch: u64,
    strategy: String,
    phases: Vec<MeasuredPhase>,
}

#[derive(Deserialize)]
struct MeasuredPhase {
    name: String,
    start: u64,
    peak: u64,
    end: u64,
}

/// Per phase (start, peak, end): (simulated, measured) pairs off by more than `tol`.
fn mismatches(
    sim: &Simulation,
    phases: &[(String, u64, u64, u64)],
    tol: f64,
    slack: u64,
    label: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, start, peak, end) in phases {
        let Some(s) = sim.phase(name) else {
            out.push(format!("{label} {name}: not simulated"));
            continue;
        };
        for (what, got, want) in [
            ("start", s.start, *start),
            ("peak", s.peak, *peak),
            ("end", s.end, *end),
        ] {
            let err = (got as f64 - want as f64) / want.max(1) as f64;
            if err.abs() > tol && got.abs_diff(want) > slack {
                out.push(format!(
                    "{label} {name} {what}: simulated {got}, measured {want} ({:+.3}%)",
                    100.0 * err
                ));
            }
        }
    }
    out
}

#[test]
fn strategy_fixtures_match_their_measured_runs_exactly() {
    let path = root().join("tests/fixtures/sim/measured/strategies-cpu-fp32.json");
    let text = std::fs::read_to_string(&path).expect("measured summaries are committed");
    let rows: Vec<Measured> = serde_json::from_str(&text).expect("summaries parse");
    assert!(rows.len() >= 14);
    let mut failures = Vec::new();
    for m in &rows {
        let g = fixture(&m.graph);
        assert_eq!(
            g.sha256, m.sha256,
            "{}: the fixture changed since it was measured",
            m.graph
        );
        let s = sim(&g, m.batch, &m.strategy);
        let phases: Vec<_> = m
            .phases
            .iter()
            .map(|p| (p.name.clone(), p.start, p.peak, p.end))
            .collect();
        let label = format!("{} b{} {}", m.graph, m.batch, m.strategy);
        // Exact but for the plain rules' 4-byte scalar at cross entropy and the loss kept to
        // the backward's end (docs/simulator.md), which an unstaged backward inherits.
        failures.extend(mismatches(&s, &phases, 0.0, 4, &label));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn data_rows() -> Vec<(PathBuf, RunRow)> {
    let mut out = Vec::new();
    for dir in ["cpu-checkpoint", "cpu-lora", "cpu-qlora"] {
        let Ok(fams) = std::fs::read_dir(root().join("data/runs").join(dir)) else {
            continue;
        };
        let mut fams: Vec<PathBuf> = fams.filter_map(|e| e.ok().map(|e| e.path())).collect();
        fams.sort();
        for f in fams {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&f)
                .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            files.sort();
            for p in files
                .into_iter()
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
            {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, serde_json::from_str(&text).unwrap()));
            }
        }
    }
    out
}

/// Allowed relative error of a data row's phases, with its reason (the gaps are listed in
/// docs/simulator.md).
fn tolerance(row: &RunRow) -> f64 {
    let family = row.graph.name.split('-').next().unwrap_or("");
    let spec = row.strategy.as_deref().unwrap_or("");
    match (family, spec.split(':').next().unwrap_or("")) {
        // oneDNN's convolution scratch, and a backward 1-2.4% low under checkpointing.
        ("resnet", _) => 0.025,
        // bert and vit under QLoRA at batch 4: backward up to 1.5% low (at an MLP linear).
        ("bert" | "vit", "qlora") => 0.016,
        // MLA under LoRA: backward about 1.1% low.
        ("mla", "lora") => 0.012,
        // MoE routing is random (uniform split assumed); vit's backward end 0.5% low.
        ("mixtral" | "vit" | "mla", _) => 0.006,
        _ => 0.0005,
    }
}

#[test]
fn strategy_rows_match_phase_by_phase() {
    let rows = data_rows();
    assert!(rows.len() >= 200, "{} rows", rows.len());
    let verbose = std::env::var("MEMCAL_SIM_STRATEGY_ROWS").is_ok();
    let mut failures = Vec::new();
    for (path, row) in &rows {
        let g = Graph::load(&root().join(format!("data/graphs/{}.json", row.graph.name)))
            .expect("graph loads");
        let spec = row.strategy.as_deref().expect("strategy rows");
        let s = sim(&g, row.batch, spec);
        let phases: Vec<_> = row
            .phases
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.allocated_start,
                    p.allocated_peak.unwrap_or(0),
                    p.allocated_end.unwrap_or(0),
                )
            })
            .collect();
        let label = path
            .strip_prefix(root())
            .unwrap_or(path)
            .display()
            .to_string();
        let tol = if verbose { 0.0 } else { tolerance(row) };
        let bad = mismatches(&s, &phases, tol, if verbose { 4 } else { 0 }, &label);
        if verbose {
            for b in &bad {
                println!("{b}");
            }
        } else {
            failures.extend(bad);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn print_strategy_runs_from_env() {
    // MEMCAL_SIM_STRATEGY_RUNS=/folder/of/rows cargo test --release --test simulate_strategies
    //     print_strategy_runs -- --nocapture
    let Ok(dir) = std::env::var("MEMCAL_SIM_STRATEGY_RUNS") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    for p in files {
        let row: RunRow = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let file = format!("{}.json", row.graph.name);
        let path = [
            root().join("tests/fixtures/sim"),
            root().join("data/graphs"),
        ]
        .into_iter()
        .map(|d| d.join(&file))
        .find(|p| p.exists())
        .expect("a fixture or a zoo graph");
        let g = Graph::load(&path).unwrap();
        let s = sim(&g, row.batch, row.strategy.as_deref().unwrap_or("plain"));
        for ph in &row.phases {
            let Some(x) = s.phase(&ph.name) else { continue };
            let m = (
                ph.allocated_start,
                ph.allocated_peak.unwrap_or(0),
                ph.allocated_end.unwrap_or(0),
            );
            println!(
                "{:<22} b{} {:<20} {:<16} start {:>+9} peak {:>+9} end {:>+9} | meas peak {:>10} at {}",
                row.graph.name,
                row.batch,
                row.strategy.as_deref().unwrap_or("plain"),
                ph.name,
                x.start as i64 - m.0 as i64,
                x.peak as i64 - m.1 as i64,
                x.end as i64 - m.2 as i64,
                m.1,
                x.peak_node
            );
        }
    }
}

/// FSDP's rule sets on a small graph: each rank ends the load holding its shards only (FSDP2:
/// every parameter's padded rows; FSDP1: one padded flat shard a unit), keeping the blocks
/// gathered through the forward (`reshard=0`) holds more there, and NCCL (no temporaries)
/// peaks no higher than gloo.
#[test]
fn fsdp_ranks_hold_their_shards_and_gather_units() {
    use memcal::simulate::{deepspeed::Collectives, simulate_rank};
    let g = fixture("strat-mlp-blocks");
    let run = |spec: &str, rank: u64, c: Collectives| {
        let s = parse(spec).unwrap();
        simulate_rank(&g, 2, Precision::Fp32, &s, rank, true, c).unwrap()
    };
    let plain = simulate(&g, 2, Precision::Fp32).unwrap();
    let whole = plain.phase("model_load").unwrap().end;
    for version in [1, 2] {
        let on = run(
            &format!("fsdp:world=2,version={version},reshard=1"),
            0,
            Collectives::Gloo,
        );
        let off = run(
            &format!("fsdp:world=2,version={version},reshard=0"),
            0,
            Collectives::Gloo,
        );
        let loaded = on.phase("model_load").unwrap().end;
        assert!(
            loaded >= whole / 2 && loaded < whole / 2 + whole / 8,
            "{version}: {loaded} of {whole}"
        );
        assert!(
            off.phase("step2.forward").unwrap().end > on.phase("step2.forward").unwrap().end,
            "{version}: reshard=0 keeps the gathered blocks"
        );
        let nccl = run(
            &format!("fsdp:world=2,version={version}"),
            0,
            Collectives::Nccl,
        );
        let gathering = |s: &Simulation| {
            s.timeline
                .iter()
                .filter(|e| e.node == "fsdp all-gather")
                .map(|e| e.bytes)
                .max()
                .unwrap()
        };
        assert!(
            gathering(&nccl) < gathering(&on),
            "{version}: no temporaries on NCCL"
        );
        assert!(
            run(
                &format!("fsdp:world=4,version={version}"),
                3,
                Collectives::Gloo
            )
            .peak_bytes
                <= run(
                    &format!("fsdp:world=4,version={version}"),
                    0,
                    Collectives::Gloo
                )
                .peak_bytes
        );
    }
}

/// DeepSpeed's ZeRO-3 on a real import (hf-llama-r1: 39,094,784 parameters, every one an even
/// number of elements, so no padding at world 2): the load ends on the flat partition, the
/// gradients' partition buffer, the reduce bucket and two 1-byte flags, exactly; every rank
/// holds the same; step 1 records the trace (each module released after its forward, a
/// linear's weight kept by its saved view), steps 2 and on keep every parameter gathered from
/// the forward to its backward (the model is within the reuse distance), so their forward ends
/// at least 4 bytes a non-persistent parameter higher; NCCL draws no copy of a reduction's input.
#[test]
fn zero3_ranks_hold_their_partitions_and_gather_by_the_trace() {
    use memcal::simulate::{deepspeed::Collectives, simulate_rank};
    let g = Graph::load(&root().join("data/graphs/hf-llama-r1.json")).unwrap();
    let s = parse("zero3:world=2,bucket=10000000").unwrap();
    let run = |rank: u64, c: Collectives| {
        simulate_rank(&g, 1, Precision::Fp32, &s, rank, true, c).unwrap()
    };
    let r0 = run(0, Collectives::Gloo);
    let p = 39_094_784u64;
    assert_eq!(g.parameters(), p);
    let partition = 4 * p / 2;
    assert_eq!(
        r0.phase("model_load").unwrap().end,
        2 * partition + 4 * 10_000_000 + 2
    );
    assert_eq!(run(1, Collectives::Gloo).peak_bytes, r0.peak_bytes);
    let held = |name: &str| {
        let ph = r0.phase(name).unwrap();
        ph.end - ph.start
    };
    // Step 1 keeps each linear's weight by its saved view and frees the embedding (saved as
    // ids); step 2 keeps every non-persistent parameter gathered: the difference is the
    // token embedding, 32,000 x 512 x 4 bytes.
    assert_eq!(
        held("step2.forward") - held("step1.forward"),
        32_000 * 512 * 4
    );
    // The persistent parameters (at most 1e5 elements: the five RMSNorm weights, 512 each)
    // are gathered at the step's end and kept.
    let persistent = 4 * 512 * 5;
    assert!(held("step2.forward") >= 4 * p - persistent);
    let nccl = run(0, Collectives::Nccl);
    let reducing = |s: &Simulation| {
        s.timeline
            .iter()
            .filter(|e| e.node == "zero3 reduce-scatter")
            .map(|e| e.bytes)
            .max()
            .unwrap()
    };
    assert!(
        reducing(&nccl) < reducing(&r0),
        "no copy of the input on NCCL"
    );
}

/// Tensor parallelism on a real import (hf-llama-r1: 2 blocks, d 512, 8 heads, SwiGLU 1376,
/// vocab 32000): a rank ends the load holding the embedding, the LM head and the norms whole
/// and half of every attention and MLP projection; its forward reaches one rowwise output more
/// than its own graph's nodes (the all-reduce's clone); a k that splits a head is refused.
#[test]
fn tp_ranks_hold_their_share_and_reduce_rowwise_outputs() {
    use memcal::simulate::{deepspeed::Collectives, simulate_rank};
    let g = Graph::load(&root().join("data/graphs/hf-llama-r1.json")).unwrap();
    let s = parse("tp:k=2").unwrap();
    let sim = simulate_rank(&g, 1, Precision::Fp32, &s, 0, true, Collectives::Gloo).unwrap();
    let (d, f, v, blocks) = (512u64, 1376u64, 32000u64, 2u64);
    let whole = 2 * v * d + (2 * blocks + 1) * d;
    let split = blocks * (4 * d * d + 3 * d * f) / 2;
    let load = sim.phase("model_load").unwrap();
    assert_eq!(load.end, 4 * (whole + split));
    // Built whole first: the peak holds every parameter and the first shard.
    assert_eq!(load.peak, 4 * (whole + 2 * split) + 4 * d * d / 2);
    // The rowwise down_proj's output (1 x 512 x 512 floats) reduced: a clone beside it.
    let y = 4 * 512 * d;
    let at = |node: &str| {
        sim.timeline
            .iter()
            .find(|e| e.step == 1 && e.phase == "step1.forward" && e.node == node)
            .unwrap()
            .bytes
    };
    assert!(at("layers0.mlp.down_proj") >= y, "the clone counted");
    let err = memcal::simulate::simulate_rank(
        &g,
        1,
        Precision::Fp32,
        &parse("tp:k=16").unwrap(),
        0,
        false,
        Collectives::Gloo,
    )
    .unwrap_err();
    assert!(err.contains("num_heads = 8"), "{err}");
}

/// A pipeline on a real import (hf-llama-r1: 2 blocks, vocab 32000, T 512) at batch 4 in 2
/// micro-batches: stage 0 keeps the embeddings and block 0, stage 1 block 1, the norm and the
/// head; the last stage keeps every micro-batch's logits to the next step; GPipe holds both
/// micro-batches' activations where 1F1B holds one on the last stage; a batch the micro-batches
/// do not divide, and more stages than blocks, are refused.
#[test]
fn pp_stages_hold_their_share_and_the_schedule_decides_what_is_in_flight() {
    use memcal::simulate::{deepspeed::Collectives, simulate_rank};
    let g = Graph::load(&root().join("data/graphs/hf-llama-r1.json")).unwrap();
    let run = |spec: &str, rank: u64, batch: u64| {
        simulate_rank(
            &g,
            batch,
            Precision::Fp32,
            &parse(spec).unwrap(),
            rank,
            false,
            Collectives::Gloo,
        )
    };
    let (d, f, v) = (512u64, 1376u64, 32000u64);
    let block = 4 * d * d + 3 * d * f + 2 * d;
    let gpipe = "pp:stages=2,micro=2,schedule=gpipe";
    let s0 = run(gpipe, 0, 4).unwrap();
    let s1 = run(gpipe, 1, 4).unwrap();
    assert_eq!(s0.phase("model_load").unwrap().end, 4 * (v * d + block));
    assert_eq!(s1.phase("model_load").unwrap().end, 4 * (block + d + v * d));
    // Between steps the last stage holds its weights, AdamW's states, the receive buffers
    // (2 micro-batches of 2 x 512 x 512) and both micro-batches' logits (2 x 512 x 32000).
    let held = s1.phase("step2.optimizer").unwrap().end;
    let inputs = 2 * 4 * 512 * 8;
    let recv = 2 * 4 * 2 * 512 * d;
    let logits = 2 * 4 * 2 * 512 * v;
    assert_eq!(held, 3 * 4 * (block + d + v * d) + inputs + recv + logits);
    let one_f_one_b = run("pp:stages=2,micro=2,schedule=1f1b", 1, 4).unwrap();
    assert!(one_f_one_b.peak_bytes < s1.peak_bytes);
    assert!(run(gpipe, 0, 3).unwrap_err().contains("does not divide"));
    assert!(run("pp:stages=3,micro=2,schedule=gpipe", 0, 4)
        .unwrap_err()
        .contains("2 blocks"));
    // A U-Net's skip connections cross any cut: refused, naming the reader.
    let unet = Graph::load(&root().join("data/graphs/unet-r1.json")).unwrap();
    let s = parse("pp:stages=2,micro=2,schedule=gpipe").unwrap();
    let err =
        simulate_rank(&unet, 2, Precision::Fp32, &s, 1, false, Collectives::Gloo).unwrap_err();
    assert!(err.contains("skip connection"), "{err}");
}

/// Every stage of a pipeline is simulated, past the 16 ranks a data-parallel strategy's worst
/// rank is searched among: the last stage (the logits) is often the worst.
#[test]
fn every_pipeline_stage_is_a_distinct_rank() {
    let g = Graph::load(&root().join("data/graphs/hf-mistral-7b-v0.3.json")).unwrap();
    let s = parse("pp:stages=32,micro=32,schedule=gpipe").unwrap();
    let ranks = memcal::simulate::distinct_ranks(&g, &s, 16);
    assert_eq!(ranks, (0..32).collect::<Vec<u64>>());
}
