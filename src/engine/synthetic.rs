//! Synthetic datasets generated from known factors, for the engine's tests and benchmark (no
//! file is read). Deterministic in the seed.

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
            .map(|p| (p.as_str().to_string(), Profile { factors }))
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
        after_fit: false,
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
        device: "synthetic".into(),
        device_kind: "cpu".into(),
        harness_version: "synthetic".into(),
        torch_version: "-".into(),
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
