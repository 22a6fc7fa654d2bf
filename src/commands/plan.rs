//! `memcal plan`: a job's peak memory from its graph, the verdict per card and why.

use memcal::cli_io::print;
use memcal::factors::FactorsFile;
use memcal::features::Precision;
use memcal::graph::Graph;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// A graph file in the memcal-graph/1 format (e.g. data/graphs/gpt2-small.json).
    graph: PathBuf,
    /// Batch size.
    #[arg(long)]
    batch: u64,
    /// Precision profile: bf16-autocast (CUDA default) or fp32 (CPU default).
    #[arg(long, default_value = "bf16-autocast")]
    precision: Precision,
    /// The factors file. Default: the data folder's `factors.json` (`--data`, else `./data`),
    /// so `memcal plan --data /path/to/data` works from any folder.
    #[arg(long)]
    factors: Option<PathBuf>,
    /// Check against this regime's cards instead of the planner's card list and the real
    /// products.
    #[arg(long)]
    regime: Option<String>,
    /// The data folder the verdict's evidence comes from: each method's held-out record
    /// (which method decides, and its own q95 bound), the range of the rows each profile
    /// was fitted on, and the allocator overhead of the GPU rows (the real cards' usable
    /// bytes). Loaded and calibrated as `memcal fit` does. Default: `data` when it holds a
    /// factors.json; without a data folder the six-factor plan decides with the factors
    /// file's q95, and the real cards are not checked.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also print the simulated memory curve over the three training steps (plain training
    /// only: not with --strategy, --recommend or --inference).
    #[arg(long, conflicts_with_all = ["strategy", "recommend", "inference"])]
    timeline: bool,
    /// Also print, per card, the largest batch that fits by the verdict (the deciding
    /// method, planned at each batch), by the six-factor plan and by its bound (the
    /// estimate floored at the phase floor; searched up to 2^24). Plain training only: not
    /// with --strategy, --recommend or --inference.
    #[arg(long, conflicts_with_all = ["strategy", "recommend", "inference"])]
    max_batch: bool,
    /// Sequence length for a graph whose inputs have the sequence axis "T" (a graph of fixed
    /// lengths exits 2 when given one).
    #[arg(long)]
    seq: Option<u64>,
    /// Plan under a memory-saving strategy: parts joined by `+`, e.g. `checkpoint`,
    /// `checkpoint:every=2`, `lora:r=8`, `qlora:r=16`, `adam8bit`, `zero1|zero2|zero3:world=8`,
    /// `fsdp:world=8`, `tp:2`, `pp:stages=4,micro=8`, `checkpoint+zero3:world=8+lora:r=8`.
    /// Prints the per-device peak, the devices, each part's formula and whether it is measured
    /// ("measured on CPU: N rows") or a formula ("formula, not measured"), and the assumptions.
    /// Impossible combinations exit 2. docs/strategies.md has the table and the JSON schema.
    #[arg(long, conflicts_with_all = ["recommend", "inference"])]
    strategy: Option<String>,
    /// Per card, the cheapest strategy that fits and its per-device peak. Order of cost:
    /// fewer devices first; on the same devices plain < checkpoint (about 1/3 more compute)
    /// < adam8bit (approximate optimizer) < lora (changes what is trained) < qlora (4-bit
    /// base) < zero1 < zero2 < zero3 = fsdp (more communication) < tp < pp (pipeline bubble).
    #[arg(long, conflicts_with = "inference")]
    recommend: bool,
    /// Plan inference with a KV cache instead of training (needs --context): weights, the
    /// cache (2 x layers x kv_heads x head_dim x context x batch x bytes, GQA-aware, read from
    /// the graph's attention ops) and the prefill's transient; and per card the longest
    /// context that fits. Bytes an element: 4 under --precision fp32, 2 under bf16-autocast.
    #[arg(long, requires = "context")]
    inference: bool,
    /// Context length (prompt plus generated tokens) for --inference.
    #[arg(long, requires = "inference")]
    context: Option<u64>,
    /// The CUDA caching allocator's settings the simulator's reserved peak is replayed under,
    /// as PYTORCH_CUDA_ALLOC_CONF writes them: comma-separated `expandable_segments:True|False`,
    /// `max_split_size_mb:N` (N >= 20), `max_non_split_rounding_mb:N` (N >= 20),
    /// `garbage_collection_threshold:F` (0 < F < 1; acts only under a memory fraction, so not
    /// on an uncapped plan), e.g. `expandable_segments:True`. Default: torch's defaults. Printed
    /// with the reserved estimate and in --json (`simulated.reserved.allocator_settings`). An
    /// unknown key, a malformed value, or a setting the replay does not model
    /// (`roundup_power2_divisions`, `backend:cudaMallocAsync`) exits 2.
    #[arg(long, value_name = "STRING")]
    allocator_settings: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Args {
        graph,
        batch,
        precision,
        factors,
        regime,
        data,
        json,
        timeline,
        max_batch,
        seq,
        strategy,
        recommend,
        inference,
        context,
        allocator_settings,
    } = args;
    if batch == 0 {
        return Err(memcal::Error::Invalid("--batch must be at least 1".into()).into());
    }
    if seq == Some(0) {
        return Err(memcal::Error::Invalid("--seq must be at least 1".into()).into());
    }
    let strategy = match &strategy {
        Some(spec) => Some(memcal::strategy::parse(spec).map_err(|m| {
            memcal::Error::Invalid(format!(
                "--strategy {m}; `memcal plan --help` lists the syntax"
            ))
        })?),
        None => None,
    };
    if context == Some(0) {
        return Err(memcal::Error::Invalid("--context must be at least 1".into()).into());
    }
    let settings = match &allocator_settings {
        Some(conf) => memcal::simulate::AllocatorSettings::parse(conf)
            .map_err(|m| memcal::Error::Invalid(format!("--allocator-settings `{conf}`: {m}")))?,
        None => memcal::simulate::AllocatorSettings::default(),
    };
    let factors = factors.unwrap_or_else(|| {
        data.clone()
            .unwrap_or_else(|| PathBuf::from("data"))
            .join("factors.json")
    });
    let (g, f, evidence, strategy_evidence) = load(&graph, seq, &factors, data)?;
    if let (Some(n), None) = (seq, g.seq) {
        return Err(memcal::Error::Invalid(format!(
            "{}: --seq {n}: the graph's inputs have no sequence axis \"T\" (their lengths are fixed); \
             leave --seq out, or draw the graph with one (`memcal import hf --seq-axis`)",
            graph.display()
        ))
        .into());
    }
    let cards = match &regime {
        None => f.cards.clone(),
        Some(r) => f
            .regimes
            .get(r)
            .ok_or_else(|| {
                memcal::Error::Invalid(format!(
                    "--regime {r}: no such regime in {} (it has: {})",
                    factors.display(),
                    f.regimes.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })?
            .cards
            .clone(),
    };
    let real: &[memcal::cards::RealCard] = match (&regime, &evidence) {
        (None, Some(e)) => &e.real_cards,
        _ => &[],
    };
    // The timeline's events only when asked for (a deep graph makes millions).
    let simulation = if timeline {
        memcal::simulate::simulate(&g, batch, precision)
    } else {
        memcal::simulate::simulate_peak(&g, batch, precision)
    }
    .map(|s| s.with_allocator_settings(&settings));
    let cards = memcal::plan::Cards { seed: &cards, real };
    let p = memcal::plan::plan_with_simulation(
        &g,
        batch,
        precision,
        &f,
        cards,
        &simulation,
        evidence.as_ref(),
    )
    .map_err(|m| memcal::Error::Invalid(format!("{}: {m}", factors.display())))?;
    memcal::plan::check_features(&g, &p).map_err(memcal::Error::Invalid)?;
    let job = StrategyJob {
        strategy,
        recommend,
        context: context.filter(|_| inference),
        json,
    };
    if job.strategy.is_some() || job.recommend || job.context.is_some() {
        let all = cards.all();
        let backing = memcal::strategy::planner::Backing::of(strategy_evidence);
        strategies(&g, &p, &f, &all, &backing, &job)?;
        std::mem::forget(g);
        return Ok(ExitCode::SUCCESS);
    }
    let sim = if timeline {
        Some(simulation.map_err(memcal::Error::Invalid)?)
    } else {
        None
    };
    let largest = if max_batch {
        Some(
            memcal::plan::max_batch(&g, precision, &f, &cards.all())
                .map_err(memcal::Error::Invalid)?
                .into_iter()
                .zip(memcal::plan::max_batch_verdict_with(
                    &g,
                    precision,
                    &f,
                    cards,
                    evidence.as_ref(),
                    &settings,
                ))
                .map(|(m, v)| memcal::plan::MaxBatch {
                    verdict: Some(v),
                    ..m
                })
                .collect::<Vec<_>>(),
        )
    } else {
        None
    };
    if json {
        let mut value = match &sim {
            None => serde_json::to_value(&p)?,
            Some(s) => serde_json::json!({ "plan": p, "simulation": s }),
        };
        if let Some(m) = &largest {
            value["max_batch"] = serde_json::to_value(m)?;
        }
        print(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
    } else {
        let mut text = memcal::cli_plan::render(&p);
        if let Some(m) = &largest {
            text.push_str(&format!("\n{}", memcal::cli_plan::render_max_batch(m)));
        }
        if let Some(s) = &sim {
            text.push_str(&format!("\n{}", memcal::simulate::render_timeline(s)));
        }
        print(&text)?;
    }
    // The process ends next: freeing a large graph name by name (a million strings)
    // takes longer than the exit returning its memory at once.
    std::mem::forget(g);
    Ok(ExitCode::SUCCESS)
}

/// What `--strategy`, `--recommend` and `--inference` ask for.
struct StrategyJob {
    strategy: Option<memcal::strategy::Strategy>,
    recommend: bool,
    context: Option<u64>,
    json: bool,
}

/// `plan --strategy`, `--recommend` or `--inference`, from the plain plan.
fn strategies(
    g: &Graph,
    p: &memcal::plan::Plan,
    f: &FactorsFile,
    cards: &[memcal::factors::Card],
    backing: &memcal::strategy::planner::Backing,
    job: &StrategyJob,
) -> anyhow::Result<()> {
    use memcal::strategy::{planner, render};
    let base = planner::base(g, p);
    let (text, value) = if let Some(context) = job.context {
        let bytes = p.precision.activation_bytes();
        // The worst case of a context: a prompt that fills it, all prefilled at once.
        let inf = memcal::strategy::memory::inference(g, p.batch, context, context, bytes)
            .map_err(|why| memcal::Error::Invalid(format!("--inference: {why}")))?;
        let h = 1.0 + f.headroom;
        let per_card: Vec<_> = cards
            .iter()
            .map(|c| {
                let room = c.bytes as f64 / h;
                let longest = memcal::strategy::memory::longest_context(g, p.batch, bytes, room);
                (
                    c.clone(),
                    longest,
                    inf.total_bytes as f64 * h <= c.bytes as f64,
                )
            })
            .collect();
        let cards_json: Vec<_> = per_card
            .iter()
            .map(|(c, l, fits)| serde_json::json!({"card": c, "fits": fits, "longest_context": l}))
            .collect();
        (
            render::render_inference(&g.name, &inf, &per_card, bytes),
            serde_json::json!({
                "format": planner::STRATEGY_PLAN_FORMAT,
                "mode": "inference",
                "graph": g.name,
                "evidence": "formula, not measured",
                "inference": inf,
                "cards": cards_json,
            }),
        )
    } else if job.recommend {
        let recs = planner::recommend(&base, cards, backing, f.bound_floor_bytes);
        (
            render::render_recommend(&base, &recs),
            serde_json::json!({"mode": "recommend", "base": base, "order_of_cost": planner::COST_ORDER, "recommendations": recs}),
        )
    } else {
        let s = job.strategy.as_ref().expect("a strategy was asked for");
        planner::check_job(s, &base).map_err(memcal::Error::Invalid)?;
        let mut sp = planner::plan_strategy(&base, s, cards, backing, f.bound_floor_bytes);
        // Where the simulator's rule set is clearly the better one on the rows, its peak too.
        if let Some(evidence) = planner::simulator_preferred(s, backing) {
            match memcal::simulate::simulate_strategy(g, p.batch, p.precision, s, false) {
                Ok(sim) => {
                    sp.simulated = Some(planner::SimulatedPeak {
                        bytes: sim.peak_bytes,
                        phase: sim.peak_phase,
                        node: sim.peak_node,
                        evidence,
                    })
                }
                Err(why) => sp.simulated_unavailable = Some(why),
            }
        }
        (
            render::render_strategy(&base, &sp),
            serde_json::json!({"mode": "strategy", "base": base, "plan": sp}),
        )
    };
    if job.json {
        print(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
    } else {
        print(&text)?;
    }
    Ok(())
}

/// The graph (at `seq`), the factors and, on a second thread while the graph loads (for a
/// large graph each takes about as long as the other), the evidence of the data folder:
/// `data`, else `data/` when it holds a factors.json, else none.
fn load(
    graph: &Path,
    seq: Option<u64>,
    factors: &Path,
    data: Option<PathBuf>,
) -> anyhow::Result<(
    Graph,
    FactorsFile,
    Option<memcal::plan_evidence::Evidence>,
    Option<memcal::strategy::evidence::Evidence>,
)> {
    let data = data.or_else(|| {
        let d = PathBuf::from("data");
        d.join("factors.json").is_file().then_some(d)
    });
    std::thread::scope(|s| -> anyhow::Result<_> {
        let evidence = s.spawn(|| -> memcal::Result<_> {
            match &data {
                Some(d) => {
                    let ds = memcal::engine::load(d)?;
                    let plain =
                        memcal::plan_evidence::evidence(&ds, &memcal::engine::calibrate(&ds));
                    Ok((
                        Some(plain),
                        Some(memcal::strategy::evidence::evidence(&ds, d)),
                    ))
                }
                None => Ok((None, None)),
            }
        });
        let g = Graph::load_at(graph, seq);
        let f = FactorsFile::load(factors);
        let evidence = evidence.join().map_err(|_| {
            anyhow::anyhow!(
                "calibrating the data folder failed (a bug in memcal: please report it)"
            )
        })?;
        let (evidence, strategies) = evidence?;
        Ok((g?, f?, evidence, strategies))
    })
}
