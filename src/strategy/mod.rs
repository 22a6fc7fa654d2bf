//! Memory-saving strategies: one table ([`STRATEGIES`]) with, per strategy, its spec syntax,
//! the memory terms it changes, its formula, its cost rank for `plan --recommend` and how it is
//! evidenced. A spec string (`checkpoint:every=2+zero3:world=8+lora:r=8`) parses into a
//! [`Strategy`] ([`parse`]); impossible combinations are refused with a message
//! ([`check_combination`]). Adding a strategy touches [`Kind`] and [`STRATEGIES`] alone (and
//! its formula in [`memory`]).

pub mod evidence;
pub mod memory;
pub mod render;
pub mod serve;
pub mod stages;

use serde::Serialize;
use std::fmt;

/// A strategy, as the table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Checkpoint,
    Adam8bit,
    Lora,
    Qlora,
    Ddp,
    Zero1,
    Zero2,
    Zero3,
    Fsdp,
    Tp,
    Pp,
}

/// How a strategy's numbers are backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backing {
    /// The harness has a protocol for it: rows measured on CPU (counted from the data folder).
    MeasuredCpu,
    /// Measured per rank with the implementation's own code, one process per rank on CPU
    /// with the gloo backend (`python3 -m memcal_export.ranks`).
    MeasuredGloo,
    /// No protocol: a formula only.
    Formula,
}

/// Why a strategy backed by a formula alone has no measured rows, in a few words.
pub fn unmeasured_why(kind: Kind) -> &'static str {
    match kind {
        // bitsandbytes' 8-bit optimizers run their blockwise kernels on CUDA only.
        Kind::Adam8bit => "bitsandbytes needs CUDA: no GPU row yet",
        _ => "no protocol measures it",
    }
}

impl Backing {
    /// How a strategy of this backing is known, in words.
    pub fn label(self) -> &'static str {
        match self {
            Backing::MeasuredCpu => "measured on CPU where the data folder has rows",
            Backing::MeasuredGloo => {
                "measured on CPU (gloo), one process per rank, where the data folder has rows"
            }
            Backing::Formula => "formulas, not measured",
        }
    }
}

/// The strategies of the table grouped by how each is known, in words computed from
/// [`STRATEGIES`]: "checkpoint, lora, ... (measured on CPU ...); zero1 (...); zero2, ...
/// (formulas, not measured)". Every message that names what is modelled reads this.
pub fn table_summary() -> String {
    [
        Backing::MeasuredCpu,
        Backing::MeasuredGloo,
        Backing::Formula,
    ]
    .iter()
    .filter_map(|&b| {
        let names: Vec<&str> = STRATEGIES
            .iter()
            .filter(|d| d.backing == b)
            .map(|d| d.name)
            .collect();
        (!names.is_empty()).then(|| format!("{} ({})", names.join(", "), b.label()))
    })
    .collect::<Vec<_>>()
    .join("; ")
}

/// One parameter of a spec (`every=2`, `r=8`, `world=8`).
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    /// None: required.
    pub default: Option<u64>,
    /// The smallest value allowed.
    pub min: u64,
    /// The largest value allowed.
    pub max: u64,
    /// A key whose values are words (`schedule=gpipe`): the value is the word's index here.
    pub words: &'static [&'static str],
    /// Left out of the canonical spec at its default (a knob added after rows were written
    /// without it: `zero1:world=4` stays `zero1:world=4`).
    pub quiet: bool,
}

impl Key {
    /// A value as the spec writes it (the word of a worded key).
    pub fn show(&self, v: u64) -> String {
        match self.words.get(v as usize) {
            Some(w) => w.to_string(),
            None => v.to_string(),
        }
    }
}

/// One row of the strategy table.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    pub kind: Kind,
    /// The spec's head (`zero3`).
    pub name: &'static str,
    /// The spec syntax as `--help` prints it.
    pub syntax: &'static str,
    /// Parameters; the first may be given without its name (`tp:2`).
    pub keys: &'static [Key],
    /// Order of cost among the strategies on the same number of devices (0 = cheapest).
    pub cost: u8,
    /// Why it costs what it costs.
    pub cost_why: &'static str,
    /// The memory terms it changes, in words.
    pub effect: &'static str,
    /// The formula `plan` uses.
    pub formula: &'static str,
    pub backing: Backing,
    /// The harness protocol's folder of rows, where there is one.
    pub rows_folder: Option<&'static str>,
}

const fn key(name: &'static str, default: Option<u64>, min: u64) -> Key {
    Key {
        name,
        default,
        min,
        max: u64::MAX,
        words: &[],
        quiet: false,
    }
}

const fn key_in(name: &'static str, default: u64, min: u64, max: u64) -> Key {
    Key {
        name,
        default: Some(default),
        min,
        max,
        words: &[],
        quiet: false,
    }
}

/// A knob left out of the canonical spec at its default.
const fn knob(name: &'static str, default: u64, min: u64) -> Key {
    Key {
        name,
        default: Some(default),
        min,
        max: u64::MAX,
        words: &[],
        quiet: true,
    }
}

/// A worded key (its first word the default), left out of the canonical spec at its default.
const fn choice(name: &'static str, words: &'static [&'static str]) -> Key {
    Key {
        name,
        default: Some(0),
        min: 0,
        max: words.len() as u64 - 1,
        words,
        quiet: true,
    }
}

/// DeepSpeed's default `reduce_bucket_size` (elements), `deepspeed/runtime/zero/config.py`.
pub const DEEPSPEED_BUCKET: u64 = 500_000_000;

/// The strategy table. `cost` orders strategies on the same number of devices; a strategy
/// over more devices always costs more (see [`cost_key`]).
pub const STRATEGIES: &[Def] = &[
    Def {
        kind: Kind::Checkpoint,
        name: "checkpoint",
        syntax: "checkpoint[:every=K]",
        keys: &[key("every", Some(1), 1)],
        cost: 1,
        cost_why: "exact training; the backward recomputes each segment's forward (about 1/3 more compute)",
        effect: "saved activations: only each segment's boundary input is kept through the forward; the backward re-creates one segment's activations at a time",
        formula: "A' = A x (outside share + inside share x K/L) + ceil(L/K) boundary inputs (L blocks, K blocks a segment)",
        backing: Backing::MeasuredCpu,
        rows_folder: Some("cpu-checkpoint"),
    },
    Def {
        kind: Kind::Adam8bit,
        name: "adam8bit",
        syntax: "adam8bit",
        keys: &[],
        cost: 2,
        cost_why: "changes the optimizer's numerics (8-bit blockwise states), not what is trained",
        effect: "optimizer state: two 8-bit states a parameter with an fp32 absmax per 2048-element block (bitsandbytes blockwise)",
        formula: "optimizer = trainable x 2 x (1 + 4/2048) bytes instead of trainable x 8",
        backing: Backing::Formula,
        rows_folder: None,
    },
    Def {
        kind: Kind::Lora,
        name: "lora",
        syntax: "lora[:r=R]",
        keys: &[key("r", Some(8), 1)],
        cost: 3,
        cost_why: "changes what is trained (rank-R adapters on a frozen base)",
        effect: "gradients and optimizer state only for the adapters (R x (in + out) a target matrix); base weights frozen; adapter activations added",
        formula: "weights = 4P + 4Pa, gradients = 4Pa, optimizer = 8Pa, A' = A + adapter outputs (tokens x R per target)",
        backing: Backing::MeasuredCpu,
        rows_folder: Some("cpu-lora"),
    },
    Def {
        kind: Kind::Qlora,
        name: "qlora",
        syntax: "qlora[:r=R]",
        keys: &[key("r", Some(8), 1)],
        cost: 4,
        cost_why: "LoRA's change plus a 4-bit NF4 base (quantization error); the paged optimizer is CUDA-only and not modelled",
        effect: "target base weights stored as packed 4-bit NF4 (0.5 byte) plus an fp32 absmax per 64-element block; one target dequantized at a time (forward and again in backward); LoRA adapters trained",
        formula: "weights = 4(P - Pt) + Pt x (0.5 + 4/64) + 4Pa, gradients = 4Pa, optimizer = 8Pa, transient + the largest target dequantized",
        backing: Backing::MeasuredCpu,
        rows_folder: Some("cpu-qlora"),
    },
    Def {
        kind: Kind::Ddp,
        name: "ddp",
        syntax: "ddp:world=N",
        keys: &[key("world", None, 2)],
        cost: 5,
        cost_why: "N data-parallel devices, each with the whole model; gradients all-reduced in buckets",
        effect: "every rank holds the plain step, plus the reducer's flat gradient buckets (4 bytes a trainable parameter) from construction on",
        formula: "plain step + 4P (torch DistributedDataParallel's buckets, gradient_as_bucket_view off)",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Zero1,
        name: "zero1",
        syntax: "zero1:world=N[,impl=torch|deepspeed][,bucket=E]",
        keys: &[
            key("world", None, 2),
            choice("impl", &["torch", "deepspeed"]),
            knob("bucket", DEEPSPEED_BUCKET, 1),
        ],
        cost: 5,
        cost_why: "N data-parallel devices; optimizer states partitioned",
        effect: "optimizer state / N; impl=torch (DDP + ZeroRedundancyOptimizer) keeps DDP's 4P of buckets, impl=deepspeed (DeepSpeed's ZeRO stage 1) a 4P/N fp32 master copy, the gradients reduced into its partition (4P/N) and its contiguous reduce buffer (reduce_bucket_size = bucket elements, 4 bytes each)",
        formula: "torch: 4P + 4P + 8P/N + 4P of DDP buckets; deepspeed: 4P + 4P/N (gradients) + 12P/N (master + Adam) + 4 x bucket",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Zero2,
        name: "zero2",
        syntax: "zero2:world=N[,bucket=E]",
        keys: &[key("world", None, 2), knob("bucket", DEEPSPEED_BUCKET, 1)],
        cost: 6,
        cost_why: "N data-parallel devices; gradients reduce-scattered as they are produced",
        effect: "DeepSpeed's ZeRO stage 2: gradients and optimizer state / N, a 4P/N fp32 master copy, and the contiguous reduce buffer (reduce_bucket_size = bucket elements, 4 bytes each, allocated whole in the backward)",
        formula: "4P + 4P/N (gradients) + 12P/N (master + Adam) + 4 x bucket",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Zero3,
        name: "zero3",
        syntax: "zero3:world=N[,bucket=E]",
        keys: &[key("world", None, 2), knob("bucket", DEEPSPEED_BUCKET, 1)],
        cost: 7,
        cost_why: "N data-parallel devices; parameters all-gathered per layer in forward and backward (most communication)",
        effect: "DeepSpeed's ZeRO stage 3: weights, gradients and optimizer state / N with a 4P/N fp32 master copy, the reduce bucket (bucket elements, 4 bytes each, allocated at initialization), plus two gathered copies of the largest layer (in use and prefetched) and its full gradient",
        formula: "20P/N + 4 x bucket + 3 x 4 x largest layer",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Fsdp,
        name: "fsdp",
        syntax: "fsdp:world=N[,version=1|2][,reshard=0|1]",
        keys: &[
            key("world", None, 2),
            key_in("version", 2, 1, 2),
            key_in("reshard", 1, 0, 1),
        ],
        cost: 7,
        cost_why: "as ZeRO-3 (FULL_SHARD), the unit gathered being one block",
        effect: "weights, gradients and optimizer state / N, plus two gathered blocks (in use and prefetched) and one block's full gradient; reshard=0 (FSDP2 reshard_after_forward off, FSDP1 SHARD_GRAD_OP) keeps every gathered block from its forward to its backward; version 1 is FSDP1 (FullyShardedDataParallel), 2 FSDP2 (fully_shard)",
        formula: "16P/N + 3 x 4 x largest block; reshard=0: 4P of weights (all gathered) + 12P/N",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Tp,
        name: "tp",
        syntax: "tp:K",
        keys: &[key("k", None, 2)],
        cost: 8,
        cost_why: "K devices in lock-step with an all-reduce in every block (needs a fast interconnect)",
        effect: "2-D weight matrices / K (with their gradients and states); block activations: the 24/34 that Megatron shards / K, the 10/34 replicated",
        formula: "model states: 16 x (P2d/K + P_rest); A' = A x (outside + inside x (10 + 24/K)/34) (Korthikanti et al. 2022, no sequence parallelism)",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
    Def {
        kind: Kind::Pp,
        name: "pp",
        syntax: "pp:stages=S[,micro=M][,schedule=1f1b|gpipe]",
        keys: &[
            key("stages", None, 2),
            key("micro", Some(1), 1),
            choice("schedule", &["1f1b", "gpipe"]),
        ],
        cost: 9,
        cost_why: "S devices, each idle in the pipeline bubble ((S-1)/(M+S-1) of the step)",
        effect: "per stage (its contiguous share of the blocks; the embeddings on the first, the head on the last): its model states; its share of the activations for every micro-batch under schedule=gpipe (torch's ScheduleGPipe: every forward before the backwards) or min(S - r, M) of M under 1f1b (Schedule1F1B, which needs M >= S); receive buffers of a block boundary each way; on the last stage every micro-batch's logits, kept until the next step; the plan is the worst stage's",
        formula: "stage r: 16 x P_r + A x e_r x (1 or min(S - r, M)/M) + boundary x ((r > 0) + (r < S-1)) + (last stage) logits",
        backing: Backing::MeasuredGloo,
        rows_folder: Some("cpu-ranks"),
    },
];

/// The table row of a kind.
pub fn def(kind: Kind) -> &'static Def {
    STRATEGIES
        .iter()
        .find(|d| d.kind == kind)
        .expect("every kind has a row in STRATEGIES")
}

/// One parsed part of a spec: a kind and its parameter values (in the order of its keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Part {
    pub kind: Kind,
    pub values: Vec<(String, u64)>,
}

impl Part {
    /// A worded key's word (`impl` -> `deepspeed`); a number as text for another key.
    pub fn word(&self, name: &str) -> String {
        let d = def(self.kind);
        d.keys
            .iter()
            .find(|k| k.name == name)
            .map_or_else(String::new, |k| k.show(self.get(name)))
    }

    /// Whether the part runs DeepSpeed's ZeRO (zero1 impl=deepspeed, zero2, zero3).
    pub fn deepspeed(&self) -> bool {
        matches!(self.kind, Kind::Zero2 | Kind::Zero3)
            || (self.kind == Kind::Zero1 && self.word("impl") == "deepspeed")
    }

    /// The value of a key (parsed specs have every key).
    pub fn get(&self, name: &str) -> u64 {
        self.values
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = def(self.kind);
        f.write_str(d.name)?;
        let v: Vec<String> = self
            .values
            .iter()
            .zip(d.keys)
            .filter(|((_, v), key)| !(key.quiet && key.default == Some(*v)))
            .map(|((k, v), key)| format!("{k}={}", key.show(*v)))
            .collect();
        if !v.is_empty() {
            write!(f, ":{}", v.join(","))?;
        }
        Ok(())
    }
}

/// A combination of strategies (empty: plain training), parts in table order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Strategy {
    pub parts: Vec<Part>,
}

impl Strategy {
    pub fn plain() -> Strategy {
        Strategy::default()
    }

    pub fn part(&self, kind: Kind) -> Option<&Part> {
        self.parts.iter().find(|p| p.kind == kind)
    }

    pub fn has(&self, kind: Kind) -> bool {
        self.part(kind).is_some()
    }

    /// The data-parallel degree (ZeRO or FSDP world; 1 without).
    pub fn data_parallel(&self) -> u64 {
        [Kind::Ddp, Kind::Zero1, Kind::Zero2, Kind::Zero3, Kind::Fsdp]
            .iter()
            .find_map(|k| self.part(*k).map(|p| p.get("world")))
            .unwrap_or(1)
    }

    /// Devices the job needs: data parallel x tensor parallel x pipeline stages.
    pub fn devices(&self) -> u64 {
        let tp = self.part(Kind::Tp).map_or(1, |p| p.get("k"));
        let pp = self.part(Kind::Pp).map_or(1, |p| p.get("stages"));
        self.data_parallel() * tp * pp
    }

    /// The canonical spec (`plain` when empty).
    pub fn spec(&self) -> String {
        if self.parts.is_empty() {
            return "plain".to_string();
        }
        let p: Vec<String> = self.parts.iter().map(|p| p.to_string()).collect();
        p.join("+")
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec())
    }
}

/// The order of cost of a strategy: devices first (a strategy over N devices costs N of them),
/// then the costliest part's rank, then the number of parts.
pub fn cost_key(s: &Strategy) -> (u64, u8, usize) {
    let rank = s.parts.iter().map(|p| def(p.kind).cost).max().unwrap_or(0);
    (s.devices(), rank, s.parts.len())
}

/// The known spec heads, for messages.
fn known() -> String {
    let v: Vec<&str> = STRATEGIES.iter().map(|d| d.syntax).collect();
    v.join(", ")
}

/// Parses one part (`zero3:world=8`, `tp:2`, `checkpoint`).
fn parse_part(text: &str) -> Result<Part, String> {
    let (head, args) = match text.split_once(':') {
        Some((h, a)) => (h, Some(a)),
        None => (text, None),
    };
    let d = STRATEGIES
        .iter()
        .find(|d| d.name == head)
        .ok_or_else(|| format!("unknown strategy `{head}` (known: {})", known()))?;
    let mut given: Vec<(String, u64)> = Vec::new();
    for (i, item) in args
        .into_iter()
        .flat_map(|a| a.split(','))
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
    {
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (n, v),
            None if i == 0 && !d.keys.is_empty() => (d.keys[0].name, item),
            None => {
                return Err(format!(
                    "`{text}`: `{item}` is not NAME=VALUE (syntax: {})",
                    d.syntax
                ))
            }
        };
        let k = d.keys.iter().find(|k| k.name == name).ok_or_else(|| {
            format!(
                "`{text}`: {} has no parameter `{name}` (syntax: {})",
                d.name, d.syntax
            )
        })?;
        let v: u64 = if k.words.is_empty() {
            value.parse().map_err(|_| {
                format!(
                    "`{text}`: {name}={value} is not a whole number (syntax: {})",
                    d.syntax
                )
            })?
        } else {
            k.words.iter().position(|w| *w == value).ok_or_else(|| {
                format!(
                    "`{text}`: {name}={value}: expected {} (syntax: {})",
                    k.words.join(" or "),
                    d.syntax
                )
            })? as u64
        };
        if v < k.min {
            return Err(format!("`{text}`: {name} must be at least {}", k.min));
        }
        if v > k.max {
            return Err(format!(
                "`{text}`: {name} must be between {} and {} (syntax: {})",
                k.min, k.max, d.syntax
            ));
        }
        if given.iter().any(|(n, _)| n == name) {
            return Err(format!("`{text}`: {name} given twice"));
        }
        given.push((name.to_string(), v));
    }
    let mut values = Vec::new();
    for k in d.keys {
        let v = match given.iter().find(|(n, _)| n == k.name) {
            Some((_, v)) => *v,
            None => k.default.ok_or_else(|| {
                format!(
                    "`{text}`: {} needs {} (syntax: {})",
                    d.name, k.name, d.syntax
                )
            })?,
        };
        values.push((k.name.to_string(), v));
    }
    Ok(Part {
        kind: d.kind,
        values,
    })
}

/// Parses a spec: parts joined by `+`; `plain` alone is plain training.
pub fn parse(spec: &str) -> Result<Strategy, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty strategy (e.g. checkpoint, lora:r=8, zero3:world=8, checkpoint+zero3:world=8+lora:r=8)".to_string());
    }
    if spec == "plain" {
        return Ok(Strategy::plain());
    }
    let mut parts = Vec::new();
    for t in spec.split('+') {
        let p = parse_part(t.trim())?;
        if parts.iter().any(|q: &Part| q.kind == p.kind) {
            return Err(format!("`{spec}`: {} given twice", def(p.kind).name));
        }
        parts.push(p);
    }
    parts.sort_by_key(|p| p.kind);
    let s = Strategy { parts };
    check_combination(&s)?;
    Ok(s)
}

/// Pairs that cannot be combined, and why.
const EXCLUSIVE: &[(&[Kind], &str)] = &[
    (
        &[Kind::Ddp, Kind::Zero1, Kind::Zero2, Kind::Zero3, Kind::Fsdp],
        "one data-parallel scheme at a time (DDP replicates; ZeRO-1, -2, -3 and FSDP are stages of sharding it)",
    ),
    (
        &[Kind::Lora, Kind::Qlora],
        "QLoRA is LoRA on a 4-bit base: give one of them",
    ),
];

/// Refuses impossible combinations.
pub fn check_combination(s: &Strategy) -> Result<(), String> {
    for (group, why) in EXCLUSIVE {
        let hit: Vec<&str> = s
            .parts
            .iter()
            .filter(|p| group.contains(&p.kind))
            .map(|p| def(p.kind).name)
            .collect();
        if hit.len() > 1 {
            return Err(format!(
                "`{}`: {} together: {why}",
                s.spec(),
                hit.join(" and ")
            ));
        }
    }
    let pp = s.has(Kind::Pp);
    for k in [Kind::Zero2, Kind::Zero3, Kind::Fsdp] {
        if pp && s.has(k) {
            return Err(format!(
                "`{}`: pp with {}: pipeline parallelism shards gradients and parameters per stage already (DeepSpeed's pipeline engine allows ZeRO-1 only); use pp with zero1",
                s.spec(),
                def(k).name
            ));
        }
    }
    if let Some(z) = s.part(Kind::Zero1) {
        if !z.deepspeed() && z.get("bucket") != DEEPSPEED_BUCKET {
            return Err(format!(
                "`{}`: bucket is DeepSpeed's reduce_bucket_size: give impl=deepspeed with it (torch's ZeroRedundancyOptimizer runs under DDP, whose buckets are not a spec parameter)",
                s.spec()
            ));
        }
    }
    if s.has(Kind::Qlora) && (s.has(Kind::Zero3) || s.has(Kind::Fsdp) || s.has(Kind::Tp)) {
        return Err(format!(
            "`{}`: sharding or splitting packed 4-bit weights is not modelled; use qlora on one device, or lora with zero3/fsdp/tp",
            s.spec()
        ));
    }
    Ok(())
}

/// A row's `strategy` field: a training strategy, or inference with a KV cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowSpec {
    Training(Strategy),
    /// `inference:prompt=P,decode=N`: the harness's protocol (`memcal-measure`): no gradients;
    /// a prefill of P tokens, then N decode steps appending to a K/V cache per attention layer
    /// allocated for P + N tokens at the prefill.
    Inference {
        prompt: u64,
        decode: u64,
    },
    /// `generate:prompt=P,new=N,cache=dynamic|static`: transformers' `model.generate` (greedy,
    /// `max_new_tokens=N`) over a prompt of P tokens, with its `DynamicCache` (grown by
    /// concatenation) or a `StaticCache` (allocated for P + N tokens up front).
    Generate {
        prompt: u64,
        new: u64,
        cache: CacheImpl,
    },
}

/// transformers' cache implementation in a `generate` row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheImpl {
    Dynamic,
    Static,
}

impl CacheImpl {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheImpl::Dynamic => "dynamic",
            CacheImpl::Static => "static",
        }
    }
}

impl RowSpec {
    /// The canonical spec text.
    pub fn label(&self) -> String {
        match self {
            RowSpec::Training(s) => s.spec(),
            RowSpec::Inference { prompt, decode } => {
                format!("inference:prompt={prompt},decode={decode}")
            }
            RowSpec::Generate { prompt, new, cache } => {
                format!(
                    "generate:prompt={prompt},new={new},cache={}",
                    cache.as_str()
                )
            }
        }
    }
}

/// Parses a row's `strategy` field (the spec grammar of [`parse`],
/// `inference:prompt=P,decode=N` or `generate:prompt=P,new=N,cache=dynamic|static`).
pub fn parse_row_spec(spec: &str) -> Result<RowSpec, String> {
    if let Some(args) = spec.strip_prefix("generate:") {
        return parse_generate(spec, args);
    }
    let Some(args) = spec.strip_prefix("inference:") else {
        if spec == "plain" {
            return Err("`plain` is no strategy: leave the field out for plain training".into());
        }
        return parse(spec).map(RowSpec::Training);
    };
    let (mut prompt, mut decode) = (None, None);
    for item in args.split(',') {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            format!("`{spec}`: `{item}` is not NAME=VALUE (inference:prompt=P,decode=N)")
        })?;
        let v: u64 = v
            .parse()
            .map_err(|_| format!("`{spec}`: {k}={v} is not a whole number"))?;
        match k {
            "prompt" if prompt.is_none() && v >= 1 => prompt = Some(v),
            "decode" if decode.is_none() => decode = Some(v),
            _ => {
                return Err(format!(
                    "`{spec}`: `{item}`: expected prompt=P (at least 1) and decode=N, once each"
                ))
            }
        }
    }
    match (prompt, decode) {
        (Some(prompt), Some(decode)) => Ok(RowSpec::Inference { prompt, decode }),
        _ => Err(format!("`{spec}`: needs prompt=P and decode=N")),
    }
}

fn parse_generate(spec: &str, args: &str) -> Result<RowSpec, String> {
    const GRAMMAR: &str = "generate:prompt=P,new=N,cache=dynamic|static";
    let (mut prompt, mut new, mut cache) = (None, None, None);
    for item in args.split(',') {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("`{spec}`: `{item}` is not NAME=VALUE ({GRAMMAR})"))?;
        let whole = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("`{spec}`: {k}={v} is not a whole number of at least 1"))
        };
        match k {
            "prompt" if prompt.is_none() => prompt = Some(whole(v)?),
            "new" if new.is_none() => new = Some(whole(v)?),
            "cache" if cache.is_none() => {
                cache = Some(match v {
                    "dynamic" => CacheImpl::Dynamic,
                    "static" => CacheImpl::Static,
                    _ => return Err(format!("`{spec}`: cache={v}: expected dynamic or static")),
                })
            }
            _ => {
                return Err(format!(
                "`{spec}`: `{item}`: expected prompt=P, new=N and cache=..., once each ({GRAMMAR})"
            ))
            }
        }
    }
    match (prompt, new, cache) {
        (Some(prompt), Some(new), Some(cache)) => Ok(RowSpec::Generate { prompt, new, cache }),
        _ => Err(format!("`{spec}`: needs prompt, new and cache ({GRAMMAR})")),
    }
}
