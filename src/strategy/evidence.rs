//! The strategies' evidence: each row with a `strategy` (excluded from the plain fit with
//! reason `strategy`) compared with the strategy's formula ([`super::memory`]), per strategy
//! and per family: rows, median and max |error|, and the q95 of measured / predicted.
//!
//! The prediction of a training row: the plain step's simulated peak at the row's graph,
//! batch and precision (the simulator, no fitted factor) gives `A = max(simulated - 16P, 0)`;
//! the strategy's formula transforms the terms. An inference row: [`super::memory::inference`]
//! at `prompt + decode` tokens. No constant of either is chosen on these rows, so every row is
//! held out.

use super::memory;
use super::{parse_row_spec, Kind, RowSpec};
use crate::engine::Dataset;
use crate::graph::Graph;
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Measured rows per strategy kind (from a data folder; empty without one).
pub type RowCounts = BTreeMap<Kind, usize>;

/// One strategy row, predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyRow {
    pub run_id: String,
    pub file: String,
    pub family: String,
    pub graph: String,
    pub batch: u64,
    pub spec: String,
    /// `checkpoint`, `lora`, `qlora`, `inference`, or the joined kinds of a combination; a
    /// multi-process strategy measured per rank names its settings and backend
    /// (`fsdp2 reshard (gloo)`, see [`group`]).
    pub strategy: String,
    /// A multi-process row: its rank and world.
    pub rank: Option<u64>,
    pub world: Option<u64>,
    pub status: RunStatus,
    /// How the row was measured: "measured on CPU", or for a multi-device strategy "one
    /// rank's layout, emulated in one process (CPU)".
    pub label: &'static str,
    pub measured_bytes: Option<u64>,
    /// Absent where the formula has no input (no plain simulation of the graph).
    pub predicted_bytes: Option<u64>,
    /// The plain step's simulated peak at the same graph and batch (for training rows).
    pub plain_simulated_bytes: Option<u64>,
    /// The simulator's peak under the row's strategy (its rule sets, `simulate_strategy`):
    /// absent where it has none (inference, ZeRO-1) or the graph is not there.
    pub simulated_bytes: Option<u64>,
}

impl StrategyRow {
    /// (measured - predicted) / measured.
    pub fn error(&self) -> Option<f64> {
        error(self.measured_bytes, self.predicted_bytes)
    }

    /// (measured - simulated) / measured.
    pub fn simulator_error(&self) -> Option<f64> {
        error(self.measured_bytes, self.simulated_bytes)
    }
}

fn error(measured: Option<u64>, predicted: Option<u64>) -> Option<f64> {
    let (m, p) = (measured?, predicted?);
    (m > 0).then(|| (m as f64 - p as f64) / m as f64)
}

/// Which of a row's predictions a record is over.
#[derive(Debug, Clone, Copy)]
enum By {
    Formula,
    Simulator,
}

impl By {
    fn of(self, r: &StrategyRow) -> Option<u64> {
        match self {
            By::Formula => r.predicted_bytes,
            By::Simulator => r.simulated_bytes,
        }
    }
}

/// A group's record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    pub rows: usize,
    pub completed: usize,
    pub families: usize,
    pub median_abs_error: Option<f64>,
    pub max_abs_error: Option<f64>,
    /// The 95th percentile of measured / predicted (nearest rank).
    pub q95: Option<f64>,
}

fn record(rows: &[&StrategyRow], by: By) -> Record {
    let mut errs: Vec<f64> = rows
        .iter()
        .filter_map(|r| error(r.measured_bytes, by.of(r)))
        .map(f64::abs)
        .collect();
    errs.sort_by(f64::total_cmp);
    let mut ratios: Vec<f64> = rows
        .iter()
        .filter_map(|r| Some(r.measured_bytes? as f64 / by.of(r).filter(|p| *p > 0)? as f64))
        .collect();
    ratios.sort_by(f64::total_cmp);
    let mut fams: Vec<&str> = rows.iter().map(|r| r.family.as_str()).collect();
    fams.sort_unstable();
    fams.dedup();
    // The engine's rules: the median of the |errors|, q95 by nearest rank.
    let median = crate::engine::median(&mut errs);
    let q95 = crate::engine::nearest_rank(&ratios, 95);
    Record {
        rows: rows.len(),
        completed: rows
            .iter()
            .filter(|r| r.status == RunStatus::Completed)
            .count(),
        families: fams.len(),
        median_abs_error: median,
        max_abs_error: errs.last().copied(),
        q95,
    }
}

/// Per strategy: its record over all its rows and per family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyEvidence {
    pub strategy: String,
    pub all: Record,
    pub by_family: BTreeMap<String, Record>,
    /// The simulator's rule set on the same rows (None where it has none for this strategy):
    /// no constant of it is chosen on these rows, so it is held out too.
    pub simulator: Option<Record>,
    pub simulator_by_family: BTreeMap<String, Record>,
    /// Rows measured per rank: per (world, rank), the formula's and the simulator's records.
    pub by_rank: Vec<RankRecord>,
    /// Per run, its worst rank (the highest measured peak, the lowest such rank): the
    /// formula's and the simulator's records over those rows alone (None without ranks).
    pub worst_rank: Option<RankRecord>,
}

/// The records of one rank (or of each run's worst rank) of a strategy measured per rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankRecord {
    pub world: u64,
    /// None: each run's worst rank.
    pub rank: Option<u64>,
    pub formula: Record,
    pub simulator: Option<Record>,
}

/// The per-rank records of a strategy's rows (empty where none has a rank).
fn rank_records(rs: &[&StrategyRow]) -> (Vec<RankRecord>, Option<RankRecord>) {
    let simulated = |v: &[&StrategyRow]| v.iter().any(|r| r.simulated_bytes.is_some());
    let of = |world, rank, v: &[&StrategyRow]| RankRecord {
        world,
        rank,
        formula: record(v, By::Formula),
        simulator: simulated(v).then(|| record(v, By::Simulator)),
    };
    let mut at: BTreeMap<(u64, u64), Vec<&StrategyRow>> = BTreeMap::new();
    let mut runs: BTreeMap<&str, &StrategyRow> = BTreeMap::new();
    for r in rs {
        let (Some(rank), Some(world)) = (r.rank, r.world) else {
            continue;
        };
        at.entry((world, rank)).or_default().push(r);
        let run = crate::engine::run_of(&r.run_id);
        let worse = |w: &&StrategyRow| {
            r.measured_bytes > w.measured_bytes
                || (r.measured_bytes == w.measured_bytes && r.rank < w.rank)
        };
        if runs.get(run).is_none_or(worse) {
            runs.insert(run, r);
        }
    }
    let by_rank = at.iter().map(|((w, k), v)| of(*w, Some(*k), v)).collect();
    let worst: Vec<&StrategyRow> = runs.into_values().collect();
    let worst_world = worst.iter().filter_map(|r| r.world).max().unwrap_or(0);
    let worst = (!worst.is_empty()).then(|| of(worst_world, None, &worst));
    (by_rank, worst)
}

/// The format of `memcal fit --strategies --json`.
pub const STRATEGY_EVIDENCE_FORMAT: &str = "memcal-strategy-evidence/1";

/// Everything the strategies section shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    pub rows: Vec<StrategyRow>,
    pub strategies: Vec<StrategyEvidence>,
    /// The strategy kinds of the table with no rows: still formulas.
    pub formulas_only: Vec<String>,
}

impl Evidence {
    /// Completed rows per strategy kind (for `plan`'s evidence labels); a multi-process kind
    /// counts only the rows measured per rank (not a layout emulated in one process).
    pub fn counts(&self) -> RowCounts {
        let mut c = RowCounts::new();
        for r in self
            .rows
            .iter()
            .filter(|r| r.status == RunStatus::Completed)
        {
            let Ok(RowSpec::Training(s)) = parse_row_spec(&r.spec) else {
                continue;
            };
            if r.rank.is_none() && s.devices() > 1 {
                continue; // one rank's layout emulated in one process
            }
            for p in &s.parts {
                *c.entry(p.kind).or_default() += 1;
            }
        }
        c
    }

    /// The simulator's held-out record of a strategy group, where it has a rule set.
    pub fn simulator_of(&self, strategy: &str) -> Option<&Record> {
        self.strategies
            .iter()
            .find(|s| s.strategy == strategy)
            .and_then(|s| s.simulator.as_ref())
    }

    /// The held-out q95 of a strategy group (`checkpoint`, `lora`, ...), where it has rows.
    pub fn q95_of(&self, strategy: &str) -> Option<f64> {
        self.strategies
            .iter()
            .find(|s| s.strategy == strategy)
            .and_then(|s| s.all.q95)
    }
}

/// The group of one part: its name, and for FSDP its implementation and reshard setting,
/// which hold different things (`fsdp2 reshard`, `fsdp2 no-reshard`, `fsdp1 full-shard`,
/// `fsdp1 shard-grad-op`), for DeepSpeed's ZeRO its implementation (`deepspeed zero2`), for a
/// pipeline its schedule (`pp 1f1b`, `pp gpipe`).
pub fn part_group(p: &super::Part) -> String {
    match p.kind {
        _ if p.deepspeed() => format!("deepspeed {}", super::def(p.kind).name),
        Kind::Pp => format!("pp {}", p.word("schedule")),
        Kind::Fsdp => format!(
            "fsdp{} {}",
            p.get("version"),
            match (p.get("version"), p.get("reshard")) {
                (1, 1) => "full-shard",
                (1, _) => "shard-grad-op",
                (_, 1) => "reshard",
                _ => "no-reshard",
            }
        ),
        k => super::def(k).name.to_string(),
    }
}

/// The group a part's rows measured per rank with `backend` are in: `ddp (gloo)`.
pub fn rank_group(p: &super::Part, backend: &str) -> String {
    with_backend(&part_group(p), backend)
}

/// A group measured per rank, named with its collective backend.
fn with_backend(group: &str, backend: &str) -> String {
    format!("{group} ({backend})")
}

/// The strategy group of a spec: its kinds joined by `+`, or `inference`.
fn group(spec: &RowSpec) -> String {
    match spec {
        RowSpec::Inference { .. } => "inference".into(),
        RowSpec::Generate { .. } => "generate".into(),
        RowSpec::Training(s) => {
            let v: Vec<String> = s.parts.iter().map(part_group).collect();
            v.join("+")
        }
    }
}

/// The formula's prediction of one row (a pipeline's row at its rank's stage, without a rank
/// its worst stage's).
fn predict(
    g: &Graph,
    batch: u64,
    spec: &RowSpec,
    simulated: Option<u64>,
    precision: crate::features::Precision,
    rank: Option<u64>,
) -> Option<u64> {
    match spec {
        RowSpec::Inference { prompt, decode } => {
            memory::inference(g, batch, *prompt, prompt + decode, 4)
                .ok()
                .map(|i| i.total_bytes)
        }
        RowSpec::Generate { prompt, new, .. } => {
            // A graph with the sequence axis, at the prompt (an encoder-decoder's cross-attention
            // cache is the encoder's length).
            let at;
            let g = if g.file_with_axis.is_some() {
                at = g.at_seq(*prompt).ok()?;
                &at
            } else {
                g
            };
            memory::inference(g, batch, *prompt, prompt + new, 4)
                .ok()
                .map(|i| i.total_bytes)
        }
        RowSpec::Training(s) => {
            let e = simulated? as f64;
            let state = precision.state_bytes_per_parameter() as f64;
            let a = (e - state * g.parameters() as f64).max(0.0);
            let terms = memory::graph_terms(g, batch);
            let t = match (rank, s.part(Kind::Pp)) {
                // Pipeline parallel alone: rank r runs stage r.
                (Some(r), Some(pp)) if s.devices() == pp.get("stages") => {
                    memory::strategy_terms_at(&terms, a, s, precision, r)
                }
                _ => memory::strategy_terms(&terms, a, s, precision),
            };
            Some(t.total().ceil() as u64)
        }
    }
}

/// The simulator's peak of a training row under its strategy, where it has a rule set.
fn simulate_row(
    g: &Graph,
    batch: u64,
    precision: crate::features::Precision,
    spec: &RowSpec,
    rank: Option<u64>,
) -> Option<u64> {
    match spec {
        RowSpec::Inference { .. } => None,
        RowSpec::Generate { prompt, new, cache } => {
            crate::simulate::generate::simulate_generate(g, batch, *prompt, *new, *cache)
                .ok()
                .map(|s| s.peak_bytes)
        }
        RowSpec::Training(s) => match rank {
            Some(rank) => crate::simulate::simulate_rank(
                g,
                batch,
                precision,
                s,
                rank,
                false,
                crate::simulate::deepspeed::Collectives::Gloo,
            ),
            // A multi-device layout emulated in one process (the harness's `cpu-zero1`): no
            // reducer and no other rank, which the rule sets model.
            None if s.devices() > 1 => return None,
            None => crate::simulate::simulate_strategy(g, batch, precision, s, false),
        }
        .ok()
        .map(|sim| sim.peak_bytes),
    }
}

/// The evidence of a dataset's strategy rows; graphs are read from `data_dir/graphs/`.
pub fn evidence(ds: &Dataset, data_dir: &Path) -> Evidence {
    // `evidence_with` asks for each graph once.
    evidence_with(ds, &mut |name: &str| {
        Graph::load_at(
            &data_dir.join("graphs").join(format!("{name}.json")),
            Some(1),
        )
        .ok()
    })
}

/// [`evidence`] over graphs already loaded (the site's build loads `data/graphs/` once).
pub fn evidence_from(ds: &Dataset, graphs: &[Graph]) -> Evidence {
    evidence_with(ds, &mut |name: &str| {
        graphs.iter().find(|g| g.name == name).cloned()
    })
}

fn evidence_with(ds: &Dataset, graph_of: &mut dyn FnMut(&str) -> Option<Graph>) -> Evidence {
    let mut graphs: BTreeMap<&str, Option<Graph>> = BTreeMap::new();
    let mut rows = Vec::new();
    // A row not counted for its rank (`rank-out-of-world`, `missing-rank`) is in the
    // exclusions with its reason, never in a strategy's record.
    for r in ds
        .rows
        .iter()
        .filter(|r| r.strategy.is_some() && r.rank_problem.is_none())
    {
        let spec_text = r.strategy.as_ref().expect("filtered").as_str();
        let Ok(spec) = parse_row_spec(spec_text) else {
            continue; // the loader refused it already (exit 2)
        };
        let g = graphs
            .entry(r.graph.as_str())
            .or_insert_with(|| graph_of(r.graph.as_str()));
        // The plain step the formula transforms: the simulator's peak, else (a precision with
        // no rule table) the model state plus the six-factor plan's activation terms (its
        // shipped factors).
        let plain = r.simulated_bytes.or_else(|| {
            let g = g.as_ref()?;
            let f = ds.factors.factors(r.precision)?;
            let feats = crate::features::features(g, r.batch, r.precision);
            let state = g.parameters() * r.precision.state_bytes_per_parameter();
            Some(state + crate::plan::activation_terms(f, &feats).ceil() as u64)
        });
        let predicted = g
            .as_ref()
            .and_then(|g| predict(g, r.batch, &spec, plain, r.precision, r.rank));
        rows.push(StrategyRow {
            run_id: r.run_id.to_string(),
            file: r.file.to_string(),
            family: r.family.to_string(),
            graph: r.graph.to_string(),
            batch: r.batch,
            spec: spec.label(),
            strategy: match r.backend.as_deref() {
                Some(b) => with_backend(&group(&spec), b),
                // Another precision's rows (LoRA over a bf16 base) are a group of their own.
                None if r.precision != crate::features::Precision::Fp32 => {
                    format!("{} ({})", group(&spec), r.precision)
                }
                None => group(&spec),
            },
            rank: r.rank,
            world: r.world,
            status: r.status,
            label: match &spec {
                RowSpec::Training(_) if r.backend.as_deref() == Some("gloo") => {
                    "measured on CPU (gloo), one process per rank"
                }
                RowSpec::Training(_) if r.device_kind.as_str() == "cuda" => {
                    "measured on a GPU (CUDA caching allocator, allocated bytes)"
                }
                RowSpec::Training(s) if s.devices() > 1 => {
                    "one rank's layout, emulated in one process (CPU)"
                }
                RowSpec::Generate { .. } => "measured on CPU (transformers' generate)",
                _ => "measured on CPU",
            },
            // A generate row: the peak of generating, the model loaded (see `after_load_bytes`).
            measured_bytes: match spec {
                RowSpec::Generate { .. } => r.after_load_bytes,
                _ => r.measured_bytes,
            },
            predicted_bytes: predicted,
            plain_simulated_bytes: r.simulated_bytes,
            simulated_bytes: g
                .as_ref()
                .and_then(|g| simulate_row(g, r.batch, r.precision, &spec, r.rank)),
        });
    }
    let mut by: BTreeMap<&str, Vec<&StrategyRow>> = BTreeMap::new();
    for r in &rows {
        by.entry(r.strategy.as_str()).or_default().push(r);
    }
    let strategies = by
        .iter()
        .map(|(name, rs)| {
            let mut fam: BTreeMap<&str, Vec<&StrategyRow>> = BTreeMap::new();
            for r in rs {
                fam.entry(r.family.as_str()).or_default().push(r);
            }
            let simulated = |v: &[&StrategyRow]| v.iter().any(|r| r.simulated_bytes.is_some());
            let (by_rank, worst_rank) = rank_records(rs);
            StrategyEvidence {
                by_rank,
                worst_rank,
                strategy: name.to_string(),
                all: record(rs, By::Formula),
                by_family: fam
                    .iter()
                    .map(|(f, v)| (f.to_string(), record(v, By::Formula)))
                    .collect(),
                simulator: simulated(rs).then(|| record(rs, By::Simulator)),
                simulator_by_family: fam
                    .iter()
                    .filter(|(_, v)| simulated(v))
                    .map(|(f, v)| (f.to_string(), record(v, By::Simulator)))
                    .collect(),
            }
        })
        .collect();
    let measured: Vec<Kind> = rows
        .iter()
        .filter_map(|r| match parse_row_spec(&r.spec) {
            Ok(RowSpec::Training(s)) => Some(s.parts.iter().map(|p| p.kind).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    let formulas_only = super::STRATEGIES
        .iter()
        .filter(|d| !measured.contains(&d.kind))
        .map(|d| d.name.to_string())
        .collect();
    Evidence {
        strategies,
        formulas_only,
        rows,
    }
}
