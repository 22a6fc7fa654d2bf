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
    /// bytes). Loaded and calibrated as `memcal fit` does. Default: the folder of `--factors`
    /// when it holds `runs/` (so `--factors` alone plans as its data folder does), else `data`
    /// when it holds a factors.json; without a data folder the six-factor plan decides with
    /// the factors file's q95, and the real cards are not checked.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also print the legends: how the verdict, each card column and the usable bytes are
    /// decided (without it, one line says where they are).
    #[arg(long)]
    explain: bool,
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
    /// With --inference: the prompt's tokens (default: the whole context, the worst case of a
    /// prefill); the rest of the context is generated. The graph is planned at this length
    /// (a graph with the sequence axis "T" needs no --seq).
    #[arg(long, requires = "inference")]
    prompt: Option<u64>,
    /// With --inference: transformers' cache, `dynamic` (DynamicCache, grown by
    /// concatenation: the default) or `static` (StaticCache, allocated for the whole context
    /// up front). Used by the simulator's generate rule set.
    #[arg(long, requires = "inference", default_value = "dynamic")]
    cache: CacheArg,
    /// With --inference: a serving engine's KV budget per card by its documented arithmetic
    /// (vllm: card x --fraction - weights - activation peak - non-torch memory; sglang: card x
    /// --fraction - weights; trtllm: --fraction x the memory free after the engine loads),
    /// the KV tokens it gives, the sequences of --context tokens that fit at once and the
    /// longest context of one sequence. docs/strategies.md names each term's source.
    #[arg(long, requires = "inference")]
    serve: Option<memcal::strategy::serve::Engine>,
    /// With --serve: the engine's fraction flag (vLLM's --gpu-memory-utilization, default
    /// 0.9; SGLang's --mem-fraction-static, no default: SGLang picks one by the GPU; TensorRT-LLM's
    /// free_gpu_memory_fraction, default 0.9), in (0, 1].
    #[arg(long, requires = "serve")]
    fraction: Option<f64>,
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

/// `--cache`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CacheArg {
    Dynamic,
    Static,
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
        explain,
        timeline,
        max_batch,
        seq,
        strategy,
        recommend,
        inference,
        context,
        prompt,
        cache,
        serve,
        fraction,
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
    if let (Some(p), Some(c)) = (prompt, context) {
        if p == 0 || p > c {
            return Err(memcal::Error::Invalid(format!(
                "--prompt {p}: must be at least 1 and at most --context ({c})"
            ))
            .into());
        }
    }
    if inference && seq.is_some() {
        return Err(memcal::Error::Invalid(
            "--seq does not apply with --inference: give the prompt's length with --prompt (default: the whole --context)".into(),
        )
        .into());
    }
    let fraction = match (serve, fraction) {
        (Some(e), None) => Some(e.default_fraction().ok_or_else(|| {
            memcal::Error::Invalid(format!(
                "--serve {}: give --fraction ({}'s {} has no fixed default: it is chosen by the GPU's memory)",
                e.name().to_lowercase(),
                e.name(),
                e.flag()
            ))
        })?),
        (_, Some(x)) if !(x > 0.0 && x <= 1.0) => {
            return Err(memcal::Error::Invalid(format!(
                "--fraction {x}: must be in (0, 1] (the engine's share of the card)"
            ))
            .into())
        }
        (_, x) => x,
    };
    // An inference plan binds a graph with the sequence axis at the prompt.
    let bind = seq.or(inference.then(|| prompt.or(context)).flatten());
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
    let needs_strategies = strategy.is_some() || recommend || inference;
    let (g, f, evidence, strategy_evidence) = load(&graph, bind, &factors, data, needs_strategies)?;
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
    let real: &[memcal::plan::cards::RealCard] = match (&regime, &evidence) {
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
        prompt,
        cache: match cache {
            CacheArg::Dynamic => memcal::strategy::CacheImpl::Dynamic,
            CacheArg::Static => memcal::strategy::CacheImpl::Static,
        },
        serve: serve.zip(fraction),
        // A serving engine takes its fraction of what CUDA reports (vLLM's total_gpu_memory),
        // not of the planner's usable bytes.
        serve_cards: cards
            .seed
            .iter()
            .cloned()
            .chain(cards.real.iter().map(|r| memcal::factors::Card {
                name: r.name.clone(),
                bytes: r.reported_bytes,
            }))
            .collect(),
        json,
    };
    if job.strategy.is_some() || job.recommend || job.context.is_some() {
        let all = cards.all();
        let backing = memcal::plan::strategies::Backing::of(strategy_evidence);
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
            None => p.to_json(),
            Some(s) => serde_json::json!({
                "format": memcal::plan::PLAN_TIMELINE_FORMAT,
                "plan": p.to_json(),
                "simulation": s
            }),
        };
        if let Some(m) = &largest {
            value["max_batch"] = serde_json::to_value(m)?;
        }
        print(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
    } else {
        let mut text = memcal::plan::render::render(&p, explain);
        if let Some(m) = &largest {
            text.push_str(&format!("\n{}", memcal::plan::render::render_max_batch(m)));
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
    prompt: Option<u64>,
    cache: memcal::strategy::CacheImpl,
    serve: Option<(memcal::strategy::serve::Engine, f64)>,
    /// The cards at the memory CUDA reports, for `--serve`.
    serve_cards: Vec<memcal::factors::Card>,
    json: bool,
}

/// `plan --strategy`, `--recommend` or `--inference`, from the plain plan.
fn strategies(
    g: &Graph,
    p: &memcal::plan::Plan,
    f: &FactorsFile,
    cards: &[memcal::factors::Card],
    backing: &memcal::plan::strategies::Backing,
    job: &StrategyJob,
) -> anyhow::Result<()> {
    use memcal::plan::strategies as planner;
    use memcal::strategy::render;
    let base = planner::base(g, p);
    let (text, value) = if let Some(context) = job.context {
        inference_plan(g, p, f, cards, backing, job, context)?
    } else if job.recommend {
        let recs = planner::recommend(&base, cards, backing, f.bound_floor_bytes);
        // The answer first: the cheapest option on the smallest card, then plain training's
        // verdict, word for word the first line of `memcal plan`.
        let answer = format!(
            "{}plain training, {}\n",
            render::recommend_answer(&recs, &memcal::plan::render::real_cards(p)),
            memcal::plan::render::answer_line(p)
        );
        (
            format!("{answer}\n{}", render::render_recommend(&base, &recs)),
            serde_json::json!({"format": planner::STRATEGY_PLAN_FORMAT, "mode": "recommend", "answer": answer.trim_end(), "base": base, "order_of_cost": planner::COST_ORDER, "recommendations": recs}),
        )
    } else {
        let s = job.strategy.as_ref().expect("a strategy was asked for");
        planner::check_job(s, &base).map_err(memcal::Error::Invalid)?;
        let mut sp = planner::plan_strategy(&base, s, cards, backing, f.bound_floor_bytes);
        // Where the simulator's rule set is clearly the better one on the rows, its peak too.
        if let Some(evidence) = planner::simulator_preferred(s, backing, p.precision) {
            // A card's job runs NCCL: where the rule sets tell the backends apart (DeepSpeed's
            // and FSDP's collectives), NCCL's rule, read from source and said so.
            use memcal::simulate::{deepspeed::Collectives, unmeasured_note};
            let collectives = Collectives::Nccl;
            let notes: Vec<String> = unmeasured_note(s, collectives)
                .map(str::to_string)
                .into_iter()
                .chain(memcal::simulate::zero3::protocol_note(s).map(str::to_string))
                .chain(memcal::simulate::fsdp::units_note(g, s))
                .chain(memcal::simulate::tp::split_note(g, s))
                .chain(memcal::simulate::pp::stages_note(g, s))
                .collect();
            let note = (!notes.is_empty()).then(|| notes.join("; "));
            match memcal::simulate::simulate_ranks(g, p.batch, p.precision, s, collectives) {
                Ok((sim, rank, peaks)) => {
                    let pipeline = s.has(memcal::strategy::Kind::Pp);
                    sp.simulated = Some(planner::SimulatedPeak {
                        bytes: sim.peak_bytes,
                        phase: sim.peak_phase,
                        node: sim.peak_node,
                        rank,
                        stages: if pipeline { peaks } else { Vec::new() },
                        evidence,
                        note,
                    })
                }
                Err(why) => sp.simulated_unavailable = Some(why),
            }
        }
        let answer = render::strategy_answer(&sp, &memcal::plan::render::real_cards(p));
        (
            format!("{answer}\n{}", render::render_strategy(&base, &sp)),
            serde_json::json!({"format": planner::STRATEGY_PLAN_FORMAT, "mode": "strategy", "answer": answer.trim_end(), "base": base, "plan": sp}),
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
    strategies: bool,
) -> anyhow::Result<(
    Graph,
    FactorsFile,
    Option<memcal::plan::evidence::Evidence>,
    Option<memcal::strategy::evidence::Evidence>,
)> {
    // The data folder: `--data`; else the folder of the factors file when it is one (it holds
    // the rows, `runs/`), so `--factors` alone plans as the data folder it belongs to does;
    // else `./data` when it holds a factors.json.
    let data = data
        .or_else(|| {
            let d = factors.parent().filter(|d| d.join("runs").is_dir())?;
            Some(d.to_path_buf())
        })
        .or_else(|| {
            let d = PathBuf::from("data");
            d.join("factors.json").is_file().then_some(d)
        });
    // The data folder is calibrated on a thread of its own while the graph loads; a graph or
    // factors file that does not load exits at once (the thread ends with the process). The
    // strategies' evidence (their rows simulated) only for the modes that print it.
    let evidence = std::thread::spawn(move || -> memcal::Result<_> {
        match &data {
            Some(d) => {
                let ds = memcal::engine::load(d)?;
                let plain = memcal::plan::evidence::evidence(&ds, &memcal::engine::calibrate(&ds));
                let strategies = strategies.then(|| memcal::strategy::evidence::evidence(&ds, d));
                Ok((Some(plain), strategies))
            }
            None => Ok((None, None)),
        }
    });
    let g = Graph::load_at(graph, seq)?;
    let dead = g.dead_nodes();
    if !dead.is_empty() {
        let ids: Vec<String> = dead
            .iter()
            .map(|&k| format!("`{}`", g.nodes[k].id))
            .collect();
        eprintln!(
            "warning: {}: {} {} read by no node and not the loss (a dead branch): planned as \
             PyTorch runs it, computed in forward and freed when forward returns; remove it if \
             it is a leftover",
            graph.display(),
            memcal::format::list(&ids, ", "),
            if ids.len() == 1 { "is" } else { "are" }
        );
    }
    let f = FactorsFile::load(factors)?;
    let evidence = evidence.join().map_err(|_| {
        anyhow::anyhow!("calibrating the data folder failed (a bug in memcal: please report it)")
    })?;
    let (evidence, strategies) = evidence?;
    Ok((g, f, evidence, strategies))
}

/// `plan --inference`: the formula's terms, the simulator's generate rule set where it applies
/// (fp32: the precision its rows were measured in), the verdict per card by the deciding
/// figure, and the serving engine's budget with `--serve`.
fn inference_plan(
    g: &Graph,
    p: &memcal::plan::Plan,
    f: &FactorsFile,
    cards: &[memcal::factors::Card],
    backing: &memcal::plan::strategies::Backing,
    job: &StrategyJob,
    context: u64,
) -> anyhow::Result<(String, serde_json::Value)> {
    use memcal::strategy::{memory, render, serve};
    let bytes = p.precision.activation_bytes();
    let prompt = job.prompt.unwrap_or(context);
    let inf = memory::inference(g, p.batch, prompt, context, bytes)
        .map_err(|why| memcal::Error::Invalid(format!("--inference: {why}")))?;
    // The simulator's rule set was derived and measured in fp32 on the CPU.
    let simulated = (p.precision == Precision::Fp32)
        .then(|| {
            memcal::simulate::generate::simulate_generate(
                g,
                p.batch,
                prompt,
                (context - prompt).max(1),
                job.cache,
            )
        })
        .map(|r| r.map_err(|why| why.to_string()));
    let record = backing
        .evidence
        .as_ref()
        .and_then(|e| e.simulator_of("generate"))
        .cloned();
    let h = 1.0 + f.headroom;
    let decided = match &simulated {
        Some(Ok(s)) => (s.peak_bytes, "simulated (generate rule set)"),
        _ => (inf.total_bytes, "formula"),
    };
    let per_card: Vec<_> = cards
        .iter()
        .map(|c| {
            let room = c.bytes as f64 / h;
            let longest = memory::longest_context(g, p.batch, bytes, room);
            (c.clone(), longest, decided.0 as f64 * h <= c.bytes as f64)
        })
        .collect();
    let per_token = memory::bytes_per_token(&inf.layers, bytes);
    let budgets: Vec<(memcal::factors::Card, serve::Budget)> = job
        .serve
        .map(|(engine, fraction)| {
            job.serve_cards
                .iter()
                .map(|c| {
                    let b = serve::budget(
                        engine,
                        serve::Inputs {
                            card_bytes: c.bytes,
                            fraction,
                            weights: inf.weight_bytes,
                            activation: inf.prefill_bytes + inf.logits_bytes,
                            non_torch: serve::NON_TORCH_ESTIMATE,
                            bytes_per_token: per_token,
                        },
                    );
                    (c.clone(), b)
                })
                .collect()
        })
        .unwrap_or_default();
    let limit = memory::position_limit(g);
    let view = render::InferenceView {
        graph: &g.name,
        inf: &inf,
        cards: &per_card,
        bytes,
        decided,
        simulated: simulated.as_ref(),
        record: record.as_ref(),
        budgets: &budgets,
        position_limit: limit,
    };
    let cards_json: Vec<_> = per_card
        .iter()
        .map(|(c, l, fits)| serde_json::json!({"card": c, "fits": fits, "longest_context": l}))
        .collect();
    let serve_json: Vec<_> = budgets
        .iter()
        .map(|(c, b)| {
            serde_json::json!({
                "card": c.name,
                "budget": b,
                "concurrent_sequences": b.concurrency(context),
                "longest_context": b.longest_context(limit),
            })
        })
        .collect();
    Ok((
        render::render_inference(&view),
        serde_json::json!({
            "format": memcal::plan::strategies::STRATEGY_PLAN_FORMAT,
            "mode": "inference",
            "graph": g.name,
            "verdict_bytes": decided.0,
            "decided_by": decided.1,
            "evidence": "formula, not measured",
            "inference": inf,
            "simulated": simulated.as_ref().map(|r| match r {
                Ok(s) => serde_json::to_value(s).unwrap_or_default(),
                Err(why) => serde_json::json!({ "not_simulated": why }),
            }),
            "simulator_record": record,
            "cards": cards_json,
            "serve": job.serve.map(|(e, fr)| serde_json::json!({
                "engine": e,
                "fraction": fr,
                "non_torch_source": serve::NON_TORCH_SOURCE,
                "cards": serve_json,
            })),
        }),
    ))
}
