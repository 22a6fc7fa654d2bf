//! Synthetic datasets generated from known factors, for the engine's tests and benchmark: rows
//! in memory ([`dataset`], no file is read) or a data folder on disk ([`write_data_folder`]).
//! Deterministic in the seed.

use super::{Dataset, GraphInfo, Row};
use crate::factors::{Card, FactorsFile, Profile, Provenance, Regime, SmallRuns, Upper};
use crate::features::{Features, Precision, N_FEATURES};
use crate::run::RunStatus;
use std::collections::BTreeMap;

/// A small deterministic generator (PCG-style LCG), so tests need no dependency.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let x = self.0;
        (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 11
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 42) as f64
    }
}

/// A factors file like `data/factors.json` (regimes `cpu-free` for training and `cpu-edge`),
/// fixed at 2026-01-01T00:00:00Z.
pub fn factors_file(factors: [f64; N_FEATURES]) -> FactorsFile {
    let gib = 1u64 << 30;
    let cards: Vec<Card> = [2u64, 4, 8, 16]
        .iter()
        .map(|g| Card {
            name: format!("{g} GiB"),
            bytes: g * gib,
        })
        .collect();
    let regime = |d: &str| Regime {
        device: "cpu".into(),
        description: d.into(),
        cards: cards.clone(),
    };
    FactorsFile {
        format: crate::factors::FACTORS_FORMAT.into(),
        profiles: Precision::ALL
            .iter()
            .map(|p| (p.as_str().to_string(), Profile::seed(factors)))
            .collect(),
        headroom: 0.15,
        upper: Upper {
            q90: 1.17,
            q95: 1.43,
        },
        bound_floor_bytes: 1_000_000_000,
        cards: cards.clone(),
        regimes: [
            ("cpu-free".to_string(), regime("uncapped")),
            ("cpu-edge".to_string(), regime("near the cap")),
        ]
        .into_iter()
        .collect(),
        training_regimes: vec!["cpu-free".into()],
        small_runs: SmallRuns {
            threshold_bytes: 1_000_000_000,
            weight: 0.5,
        },
        oom_penalty: 10.0,
        provenance: Some(Provenance {
            fixed_at: "2026-01-01T00:00:00Z".into(),
            rows_sha256: String::new(),
            rows: 0,
            tool_version: "0.0.0".into(),
        }),
    }
}

/// A row with the given features and outcome, all other fields plain (cpu-free, fp32, no
/// marker, graph unchanged, batch axis present).
pub fn row(
    run_id: &str,
    family: &str,
    features: [u64; N_FEATURES],
    status: RunStatus,
    measured: Option<u64>,
    capacity: u64,
) -> Row {
    Row {
        file: format!("runs/{run_id}.json").into(),
        file_sha256: super::Digest::of(run_id.as_bytes()),
        run_id: run_id.into(),
        graph: format!("{family}-g").into(),
        family: family.into(),
        regime: "cpu-free".into(),
        precision: Precision::Fp32,
        batch: 8,
        status,
        measured_bytes: measured,
        capacity_bytes: capacity,
        device_capacity_bytes: capacity,
        capped: false,
        after_fit: false,
        strategy: None,
        rank: None,
        world: None,
        backend: None,
        rank_problem: None,
        timestamp: "2025-06-01T00:00:00Z".into(),
        graph_changed: false,
        graph_mismatch: false,
        has_batch_axis: true,
        features: Features {
            model_state: features[0],
            layer_outputs: features[1],
            intermediates: features[2],
            attention_scores: features[3],
            recurrent_gates: features[4],
            largest_tensor: features[5],
        },
        accelerate_bytes: features[0] / 4,
        textbook_bytes: None,
        simulated_bytes: None,
        floor_bytes: 0,
        simulated_reserved_bytes: None,
        measured_reserved_bytes: None,
        after_load_bytes: None,
        device: "synthetic".into(),
        device_kind: "cpu".into(),
        harness_version: "synthetic".into(),
        implementation: None,
        torch_version: "-".into(),
        allocator_settings: None,
    }
}

/// `rows` runs over `families` families, measured as `truth`·features x (1 + noise), noise
/// uniform in ±`noise`. About 88% are completed `cpu-free` rows, 1% `cpu-free` out-of-memory
/// rows, 9% `cpu-edge` rows (a third of them out of memory at a capacity below their peak) and
/// 2% after-the-fit rows.
pub fn dataset(
    rows: usize,
    families: usize,
    truth: [f64; N_FEATURES],
    noise: f64,
    seed: u64,
) -> Dataset {
    let mut rng = Lcg(seed);
    // Per family: a constant part and a per-sample part of each feature (bytes), some zero.
    let shapes: Vec<([f64; N_FEATURES], [f64; N_FEATURES])> = (0..families)
        .map(|_| {
            let mut c = [0.0; N_FEATURES];
            let mut s = [0.0; N_FEATURES];
            c[0] = 2e8 + 2e9 * rng.unit();
            s[1] = 2e7 + 2e8 * rng.unit();
            s[2] = if rng.unit() < 0.7 {
                1e8 * rng.unit()
            } else {
                0.0
            };
            s[3] = if rng.unit() < 0.4 {
                1e8 * rng.unit()
            } else {
                0.0
            };
            s[4] = if rng.unit() < 0.2 {
                2e7 * rng.unit()
            } else {
                0.0
            };
            c[5] = 1e7 + 1e8 * rng.unit();
            s[5] = 1e6 * rng.unit();
            (c, s)
        })
        .collect();
    let mut graphs = BTreeMap::new();
    let names: Vec<String> = (0..families).map(|f| format!("fam{f:03}")).collect();
    for n in &names {
        graphs.insert(
            format!("{n}-g"),
            GraphInfo {
                family: n.clone(),
                sha256: String::new(),
                parameters: 0,
                has_batch_axis: true,
                textbook_not_applicable: Some("synthetic".into()),
                floor_bytes: [0; Precision::ALL.len()],
                blocks: Vec::new(),
                approximations: Vec::new(),
            },
        );
    }
    let gib = (1u64 << 30) as f64;
    let mut out = Vec::with_capacity(rows);
    let mut interned = super::Interner::default();
    for i in 0..rows {
        let f = i % families;
        let (c, s) = &shapes[f];
        let batch = 1 + rng.next_u64() % 64;
        let mut x = [0u64; N_FEATURES];
        for k in 0..N_FEATURES {
            x[k] = (c[k] + s[k] * batch as f64).round() as u64;
        }
        let peak: f64 = (0..N_FEATURES).map(|k| truth[k] * x[k] as f64).sum::<f64>()
            * (1.0 + noise * (2.0 * rng.unit() - 1.0));
        let kind = rng.unit();
        let id = format!("{}/b{batch}/r{i:07}", names[f]);
        let mut r = row(
            &id,
            &names[f],
            x,
            RunStatus::Completed,
            Some(peak.max(1.0) as u64),
            64 * (1u64 << 30),
        );
        r.batch = batch;
        if kind < 0.01 {
            r.status = RunStatus::Oom;
            r.measured_bytes = None;
            r.capacity_bytes = (peak * (0.6 + 0.35 * rng.unit())).max(1.0) as u64;
        } else if kind < 0.10 {
            r.regime = "cpu-edge".into();
            let cap = [2.0, 4.0, 8.0][(rng.next_u64() % 3) as usize] * gib;
            r.capacity_bytes = cap as u64;
            if kind < 0.04 || peak > cap {
                r.status = RunStatus::Oom;
                r.measured_bytes = None;
                r.capacity_bytes = (peak * (0.6 + 0.35 * rng.unit())).max(1.0) as u64;
            }
        } else if kind < 0.12 {
            r.after_fit = true;
            r.timestamp = "2026-06-01T00:00:00Z".into();
        }
        r.file = format!("runs/{}/{id}.json", r.regime).into();
        for n in [
            &mut r.graph,
            &mut r.family,
            &mut r.regime,
            &mut r.device,
            &mut r.device_kind,
            &mut r.harness_version,
            &mut r.torch_version,
            &mut r.timestamp,
        ] {
            *n = interned.name(n);
        }
        out.push(r);
    }
    Dataset {
        factors: factors_file(truth),
        rows: out,
        graphs,
    }
}

/// The graph of family `f` for [`write_data_folder`]: a token model (`fam{f:03}-g`, family
/// `fam{f:03}`) of the given sizes: embedding, an LSTM if `lstm`, a self-attention block if
/// `heads > 0`, a ReLU MLP of width `ff` if `ff > 0`, a decoder and a cross-entropy loss.
fn token_graph(
    f: usize,
    t: u64,
    d: u64,
    heads: u64,
    ff: u64,
    lstm: bool,
) -> crate::graph::GraphFile {
    use crate::zoo::{Builder, B};
    use serde_json::{json, Value};
    let vocab = 8192;
    let name = format!("fam{f:03}");
    let mut b = Builder::new(&format!("{name}-g"), &name, "full").describe(format!(
        "synthetic benchmark graph: T={t}, d={d}, heads {heads}, ff {ff}, lstm {lstm}"
    ));
    let tokens = b.int_input("tokens", &[B, t], vocab);
    let labels = b.int_input("labels", &[B, t], vocab);
    let mut x = b.node(
        "emb",
        "embedding",
        &[&tokens],
        json!({"num_embeddings": vocab, "embedding_dim": d}),
    );
    if lstm {
        x = b.node(
            "rnn",
            "lstm",
            &[&x],
            json!({"input_size": d, "hidden_size": d, "num_layers": 1}),
        );
    }
    if heads > 0 {
        let ln = b.node("ln", "layer_norm", &[&x], json!({"normalized_shape": d}));
        let attn = b.node(
            "attn",
            "multihead_attention",
            &[&ln],
            json!({"embed_dim": d, "num_heads": heads, "causal": true, "bias": true}),
        );
        x = b.node("add", "add", &[&x, &attn], Value::Null);
    }
    if ff > 0 {
        let fc = b.node(
            "fc",
            "linear",
            &[&x],
            json!({"in_features": d, "out_features": ff}),
        );
        let act = b.node("relu", "relu", &[&fc], Value::Null);
        x = b.node(
            "proj",
            "linear",
            &[&act],
            json!({"in_features": ff, "out_features": d}),
        );
    }
    let logits = b.node(
        "decoder",
        "linear",
        &[&x],
        json!({"in_features": d, "out_features": vocab}),
    );
    b.node("loss", "cross_entropy", &[&logits, &labels], Value::Null);
    b.finish("loss")
}

/// `2025-06-01T00:00:00Z` (or 2026 with `after_fit`) plus `seconds` (under 120 days).
fn timestamp(seconds: u64, after_fit: bool) -> String {
    let year = if after_fit { 2026 } else { 2025 };
    let mut day = seconds / 86_400;
    let mut month = 6;
    for len in [30, 31, 31, 30, 31] {
        if day < len {
            break;
        }
        day -= len;
        month += 1;
    }
    let s = seconds % 86_400;
    format!(
        "{year}-{month:02}-{:02}T{:02}:{:02}:{:02}Z",
        day + 1,
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Writes a data folder `dir` that [`load`](super::load) reads: `factors.json` (this module's
/// [`factors_file`] with factors `truth`), `graphs/` with `graphs` token-model graphs of varying
/// sizes (one family each; `fam{f:03}-g.json`), and `rows` `memcal-run/1` files under
/// `runs/NNNN/` (1,000 a folder, `rNNNNNNN.json`). The rows are the mix of [`dataset`]: about
/// 88% completed `cpu-free` rows, 1% `cpu-free` out of memory, 9% `cpu-edge` (some out of
/// memory) and 2% after the fit; each measured as `truth`·features x (1 ± 10%), its features
/// computed from its graph; each run has its own timestamp, 5 s after the previous one.
/// Deterministic in the seed. Returns the bytes written.
pub fn write_data_folder(
    dir: &std::path::Path,
    rows: usize,
    graphs: usize,
    truth: [f64; N_FEATURES],
    seed: u64,
) -> crate::error::Result<u64> {
    write_data_folder_as(dir, rows, graphs, truth, seed, Layout::Files)
}

/// How [`write_data_folder_as`] lays out the rows under `runs/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One pretty-printed row file per run: `runs/NNNN/rNNNNNNN.json`, 1,000 a folder.
    Files,
    /// Row bundles of this many rows (the last may hold fewer): `runs/bNNNNNNN.jsonl`, named by
    /// the index of its first row, one compact row per line.
    Bundles(usize),
}

/// [`write_data_folder`] with the rows laid out as `layout` says. The rows are the same
/// whatever the layout (only their bytes differ: pretty-printed files or compact lines).
pub fn write_data_folder_as(
    dir: &std::path::Path,
    rows: usize,
    graphs: usize,
    truth: [f64; N_FEATURES],
    seed: u64,
    layout: Layout,
) -> crate::error::Result<u64> {
    use crate::error::Error;
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let write =
        |path: &std::path::Path, bytes: &[u8]| std::fs::write(path, bytes).map_err(io(path));
    let mkdir = |path: &std::path::Path| std::fs::create_dir_all(path).map_err(io(path));
    let mut rng = Lcg(seed);
    let mut written = 0u64;
    mkdir(dir)?;
    let factors = factors_file(truth).to_json();
    write(&dir.join("factors.json"), factors.as_bytes())?;
    written += factors.len() as u64;
    // What a site build needs besides the rows: the factor history of the fitted factors (no
    // entry: they were never fitted by `memcal fit`) and a prose file per section (empty).
    let history = crate::factors::FactorHistory {
        format: crate::factors::HISTORY_FORMAT.into(),
        entries: Vec::new(),
    }
    .to_json();
    write(&dir.join("factors-history.json"), history.as_bytes())?;
    written += history.len() as u64;
    mkdir(&dir.join("prose"))?;
    for name in crate::report::PROSE_BLOCKS {
        write(&dir.join("prose").join(format!("{name}.md")), b"")?;
    }
    let gdir = dir.join("graphs");
    mkdir(&gdir)?;
    let mut loaded = Vec::with_capacity(graphs);
    for f in 0..graphs {
        let t = 64 << (rng.next_u64() % 3);
        let d = 128 * (1 + rng.next_u64() % 6);
        let heads = if rng.unit() < 0.4 { 4 } else { 0 };
        let ff = if rng.unit() < 0.7 {
            d * (1 + rng.next_u64() % 4)
        } else {
            0
        };
        let lstm = rng.unit() < 0.2;
        let file = token_graph(f, t, d, heads, ff, lstm);
        let bytes = crate::zoo::to_bytes(&file);
        let path = gdir.join(format!("{}.json", file.name));
        write(&path, &bytes)?;
        written += bytes.len() as u64;
        loaded.push(crate::graph::Graph::from_bytes(&bytes, &path)?);
    }
    let mut features = BTreeMap::new();
    let mut folder = None;
    let mut bundle = Vec::new();
    for i in 0..rows {
        let f = i % graphs;
        let g = &loaded[f];
        let batch = 1 + rng.next_u64() % 64;
        let x = *features
            .entry((f, batch))
            .or_insert_with(|| crate::features::features(g, batch, Precision::Fp32).as_array());
        let peak: f64 = (0..N_FEATURES).map(|k| truth[k] * x[k] as f64).sum::<f64>()
            * (1.0 + 0.1 * (2.0 * rng.unit() - 1.0));
        let peak = peak.max(1.0);
        let d = draw(&mut rng, peak);
        let row = synthetic_row(i, g, batch, x[0] / 4, peak as u64, d);
        match layout {
            Layout::Files => {
                let sub = dir.join("runs").join(format!("{:04}", i / 1000));
                if folder.as_ref() != Some(&sub) {
                    mkdir(&sub)?;
                    folder = Some(sub.clone());
                }
                let mut bytes = serde_json::to_vec_pretty(&row).expect("a row always serialises");
                bytes.push(b'\n');
                write(&sub.join(format!("r{i:07}.json")), &bytes)?;
                written += bytes.len() as u64;
            }
            Layout::Bundles(n) => {
                let n = n.max(1);
                serde_json::to_writer(&mut bundle, &row).expect("a row always serialises");
                bundle.push(b'\n');
                if (i + 1).is_multiple_of(n) || i + 1 == rows {
                    let runs = dir.join("runs");
                    if folder.is_none() {
                        mkdir(&runs)?;
                        folder = Some(runs.clone());
                    }
                    let first = i + 1 - bundle_rows(i, n, rows);
                    write(&runs.join(format!("b{first:07}.jsonl")), &bundle)?;
                    written += bundle.len() as u64;
                    bundle.clear();
                }
            }
        }
    }
    Ok(written)
}

/// A synthetic run's regime as drawn: its emulated capacity, whether it ran out of memory, and
/// whether it carries the after-fit marker.
#[derive(Debug, Clone, Copy)]
struct Draw {
    regime: &'static str,
    cap: Option<u64>,
    oom: bool,
    after_fit: bool,
}

/// Draws the regime of a run whose peak is `peak` bytes: out of memory under a cap below its
/// peak, at the edge of a 2, 4 or 8 GiB cap, marked as run after the fit, or free.
fn draw(rng: &mut Lcg, peak: f64) -> Draw {
    let gib = 1u64 << 30;
    let kind = rng.unit();
    let mut regime = "cpu-free";
    let mut cap = None;
    let mut oom = false;
    let mut after_fit = false;
    if kind < 0.01 {
        oom = true;
        cap = Some((peak * (0.6 + 0.35 * rng.unit())).max(1.0) as u64);
    } else if kind < 0.10 {
        regime = "cpu-edge";
        let c = [2, 4, 8][(rng.next_u64() % 3) as usize] * gib;
        cap = Some(c);
        if kind < 0.04 || peak > c as f64 {
            oom = true;
            cap = Some((peak * (0.6 + 0.35 * rng.unit())).max(1.0) as u64);
        }
    } else if kind < 0.12 {
        after_fit = true;
    }
    Draw {
        regime,
        cap,
        oom,
        after_fit,
    }
}

/// Row `i` of the synthetic folder: a run of `g` at `batch`, its model `model` bytes and its
/// peak `peak` bytes, in the regime drawn.
fn synthetic_row(
    i: usize,
    g: &crate::graph::Graph,
    batch: u64,
    model: u64,
    peak: u64,
    d: Draw,
) -> crate::run::RunRow {
    use crate::run::{DeviceInfo, Failure, GraphRef, ParameterCounts, Peak, Phase, RunRow};
    let Draw {
        regime,
        cap,
        oom,
        after_fit,
    } = d;
    let gib = 1u64 << 30;
    let device = |cap: Option<u64>| DeviceInfo {
        kind: "cpu".into(),
        name: "Synthetic CPU".into(),
        capacity_bytes: 64 * gib,
        emulated_capacity_bytes: cap,
        allocator: "cpu-counting-allocator".into(),
        allocator_settings: None,
        reserved_equals_allocated: true,
        torch: "2.11.0".into(),
        cuda: None,
        driver: None,
        cores: 2,
    };
    let phase = |name: &str, status: &str, start: u64, peak: Option<u64>, end: Option<u64>| Phase {
        name: name.into(),
        status: status.into(),
        allocated_start: start,
        reserved_start: start,
        allocated_peak: peak,
        reserved_peak: peak,
        allocated_end: end,
        reserved_end: end,
        wall_seconds: 0.25,
    };
    let mut phases = vec![
        phase("model_load", "ok", 0, Some(model), Some(model)),
        phase("inputs", "ok", model, Some(model), Some(model)),
    ];
    if oom {
        phases.push(phase("step1.forward", "oom", model, None, None));
    } else {
        phases.push(phase(
            "step1.forward",
            "ok",
            model,
            Some(peak / 2),
            Some(peak / 3),
        ));
        phases.push(phase(
            "step1.backward",
            "ok",
            peak / 3,
            Some(peak),
            Some(model),
        ));
        phases.push(phase(
            "step1.optimizer",
            "ok",
            model,
            Some(model),
            Some(model),
        ));
    }
    RunRow {
        format: crate::run::RUN_FORMAT.into(),
        run_id: format!("{regime}/{}/b{batch}/r{i:07}", g.name),
        graph: GraphRef {
            name: g.name.clone(),
            sha256: g.sha256.clone(),
        },
        batch,
        precision: Precision::Fp32.as_str().into(),
        regime: regime.into(),
        marker: after_fit.then(|| super::load::AFTER_FIT.to_string()),
        strategy: None,
        rank: None,
        world: None,
        backend: None,
        device: device(cap),
        host: "synthetic".into(),
        timestamp: timestamp(5 * i as u64, after_fit),
        tool_version: "memcal-measure 0.1.0".into(),
        implementation: None,
        parameters: ParameterCounts {
            graph: g.parameters(),
            built: g.parameters(),
        },
        graph_mismatch: false,
        status: if oom {
            RunStatus::Oom
        } else {
            RunStatus::Completed
        },
        oom: oom.then(|| Failure {
            phase: "step1.forward".into(),
            message: "out of memory (synthetic)".into(),
        }),
        error: None,
        phases,
        peak: (!oom).then(|| Peak {
            allocated_bytes: peak.max(1),
            reserved_bytes: peak.max(1),
            phase: "step1.backward".into(),
        }),
    }
}

/// The rows in the bundle that row `i` (its last) closes: `n`, or fewer for the last bundle.
fn bundle_rows(i: usize, n: usize, rows: usize) -> usize {
    if i + 1 == rows && !rows.is_multiple_of(n) {
        rows % n
    } else {
        n
    }
}
