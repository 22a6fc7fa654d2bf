//! A second estimator: a static simulation of the training step the harness runs (three AdamW
//! steps), op by op, with no fitted factor. It knows what autograd saves for every op (the rule
//! table in [`rules`]), tracks every tensor by identity (a tensor saved by two ops, or a skip
//! used twice, is one buffer; a view shares its base's buffer) and frees each one when its last
//! holder lets go. The result is a liveness timeline with the peak, the phase and the op at
//! which it occurs, and what is alive there. `docs/simulator.md` describes the model, its rule
//! table with sources, and the measured comparisons.
//!
//! The protocol simulated is `memcal-measure`'s (`measurement/src/protocol.rs`): `model_load`
//! (parameters, 4 bytes each, and batch-norm running statistics), `inputs`, then for each of
//! three steps `forward`, `backward` (the loss is dropped after it), `optimizer` (libtorch's
//! AdamW step, then `zero_grad`, which sets gradients to None: gradients are allocated again by
//! every backward and freed by every optimizer phase; Adam's two states are allocated lazily,
//! parameter by parameter, in step 1's optimizer phase and kept from then on).

pub mod allocator;
pub mod cuda;
pub mod deepspeed;
pub mod device;
pub mod fsdp;
pub mod generate;
pub mod generic;
pub mod generic_overrides;
pub mod lowrank;
pub mod pp;
pub mod render;
pub mod rules;
pub mod staged;
pub mod tp;
pub mod zero3;

use crate::features::Precision;
use crate::graph::Graph;
use crate::ops::Op;
use rules::{Backend, Grad, Output, Saved};
use serde::Serialize;

pub use allocator::AllocatorSettings;
pub use render::render_timeline;

/// Number of training steps simulated (the harness's protocol).
pub const STEPS: u32 = 3;

/// What a live byte is, for the breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Trainable parameters and module buffers (batch-norm running statistics).
    Parameters,
    /// Graph inputs (synthetic data and labels).
    Inputs,
    /// Parameter gradients.
    Gradients,
    /// Adam's exp_avg and exp_avg_sq.
    OptimizerState,
    /// Forward activations still alive: saved for backward, or awaiting a later op.
    SavedActivations,
    /// Gradients of activations in backward.
    ActivationGradients,
    /// Temporaries inside one op (forward, backward or the optimizer update).
    Transients,
    /// Library workspaces kept by the process (cuBLAS and cuBLASLt, one pair per thread).
    Workspaces,
}

const KINDS: [Kind; 8] = [
    Kind::Parameters,
    Kind::Inputs,
    Kind::Gradients,
    Kind::OptimizerState,
    Kind::SavedActivations,
    Kind::ActivationGradients,
    Kind::Transients,
    Kind::Workspaces,
];

/// Live bytes by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    pub parameters: u64,
    pub inputs: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub saved_activations: u64,
    pub activation_gradients: u64,
    pub transients: u64,
    pub workspaces: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.parameters
            + self.inputs
            + self.gradients
            + self.optimizer_state
            + self.saved_activations
            + self.activation_gradients
            + self.transients
            + self.workspaces
    }

    fn slot(&mut self, k: Kind) -> &mut u64 {
        match k {
            Kind::Parameters => &mut self.parameters,
            Kind::Inputs => &mut self.inputs,
            Kind::Gradients => &mut self.gradients,
            Kind::OptimizerState => &mut self.optimizer_state,
            Kind::SavedActivations => &mut self.saved_activations,
            Kind::ActivationGradients => &mut self.activation_gradients,
            Kind::Transients => &mut self.transients,
            Kind::Workspaces => &mut self.workspaces,
        }
    }

    /// (name, bytes) pairs in a fixed order.
    pub fn entries(&self) -> [(&'static str, u64); 8] {
        [
            ("parameters", self.parameters),
            ("inputs", self.inputs),
            ("gradients", self.gradients),
            ("optimizer_state", self.optimizer_state),
            ("saved_activations", self.saved_activations),
            ("activation_gradients", self.activation_gradients),
            ("transients", self.transients),
            ("workspaces", self.workspaces),
        ]
    }
}

/// One point of the timeline: an op of the forward or backward pass, or one parameter's update
/// in the optimizer phase, or the end of a setup phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// 0 for `model_load` and `inputs`, 1..=3 for the steps.
    pub step: u32,
    /// `model_load`, `inputs`, `step2.backward`, ...
    pub phase: String,
    /// The node id (forward, backward), `<node>#<i>` (the i-th parameter tensor of a node, in
    /// the optimizer and at load), `zero_grad` (the end of an optimizer phase), or `-` for the
    /// end of `inputs`.
    pub node: String,
    /// Live bytes at the highest point of this event (with its transients).
    pub bytes: u64,
    /// Live bytes once it is done.
    pub after: u64,
}

/// One phase's simulated levels, comparable to a measured `memcal-run/1` phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseSummary {
    pub name: String,
    pub start: u64,
    pub peak: u64,
    pub end: u64,
    /// The event at which the phase peaks.
    pub peak_node: String,
}

/// Which rule a node used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeRule {
    pub id: String,
    pub op: &'static str,
    pub source: &'static str,
    pub note: &'static str,
}

/// The result of a simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulation {
    pub graph: String,
    pub batch: u64,
    pub precision: Precision,
    pub backend: &'static str,
    /// Trainable parameters.
    pub parameters: u64,
    /// The highest live bytes over the three steps.
    pub peak_bytes: u64,
    /// Step of the peak (0: setup).
    pub peak_step: u32,
    /// Phase of the peak, e.g. `step2.backward`.
    pub peak_phase: String,
    /// The op (or parameter) at which the peak occurs.
    pub peak_node: String,
    /// What is alive at the peak.
    pub breakdown: Breakdown,
    pub phases: Vec<PhaseSummary>,
    pub timeline: Vec<Event>,
    /// The rule each node used and its source.
    pub rules: Vec<NodeRule>,
    /// CUDA only: the trace replayed through the caching-allocator model with no cap: what
    /// the allocator's `allocated_bytes` and `reserved_bytes` read per phase.
    pub device: Option<device::Replay>,
    /// Every allocation and free in order, for the allocator replay.
    #[serde(skip)]
    pub trace: Vec<TraceOp>,
    /// The ops named by the trace.
    #[serde(skip)]
    pub labels: Vec<String>,
}

impl Simulation {
    fn with_device(mut self, backend: Backend) -> Simulation {
        if backend.is_cuda() {
            self.device = Some(device::replay(&self, None));
        }
        self
    }

    /// The allocator replay with reserved bytes capped at `limit` (a capped run's
    /// `setMemoryFraction`): where it runs out of memory, if it does.
    pub fn replay(&self, limit: Option<u64>) -> device::Replay {
        device::replay(self, limit)
    }

    /// The allocator replay under `settings` (a run's `PYTORCH_CUDA_ALLOC_CONF`), capped at
    /// `limit` as [`Simulation::replay`].
    pub fn replay_with(
        &self,
        limit: Option<u64>,
        settings: &allocator::AllocatorSettings,
    ) -> device::Replay {
        device::replay_with(self, limit, settings)
    }

    /// The simulation with its uncapped replay (`device`, CUDA only) redone under `settings`;
    /// unchanged under the defaults or where there is no replay.
    pub fn with_allocator_settings(
        mut self,
        settings: &allocator::AllocatorSettings,
    ) -> Simulation {
        if self.device.is_some() && !settings.is_default() {
            self.device = Some(device::replay_with(&self, None, settings));
        }
        self
    }

    /// The summary of a phase by name.
    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.phases.iter().find(|p| p.name == name)
    }
}

/// A buffer: bytes, kind, and how many holders it has.
struct Buf {
    bytes: u64,
    kind: Kind,
    refs: u32,
}

/// The live memory: every buffer by id, the running totals, and (on CUDA, where the allocator
/// replay reads it) the sequence of allocations and frees. The id of a freed buffer is used
/// again (a deep graph allocates millions over three steps; only the live ones are kept); the
/// replay binds an id anew at each allocation.
struct Mem {
    bufs: Vec<Buf>,
    live: Breakdown,
    free: Vec<BufId>,
    /// Whether `trace` and `labels` are kept (CUDA only: the CPU backend has no replay).
    tracing: bool,
    trace: Vec<TraceOp>,
    /// Index into `labels` of the op (or parameter) now running.
    at: u32,
    labels: Vec<String>,
}

type BufId = usize;

/// One step of the simulated program as the device allocator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceOp {
    /// A phase begins (phases in the order of `Simulation::phases`).
    Phase,
    /// A buffer of this many bytes is allocated by the op `at` (an index into the labels).
    Alloc { buf: u32, bytes: u64, at: u32 },
    /// The buffer is freed.
    Free { buf: u32 },
    /// A compound op's inner high point: this many bytes more for a moment (replayed as one
    /// block allocated and freed).
    Peak { bytes: u64, at: u32 },
}

impl Mem {
    fn alloc(&mut self, bytes: u64, kind: Kind) -> BufId {
        *self.live.slot(kind) += bytes;
        let b = Buf {
            bytes,
            kind,
            refs: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.bufs[id] = b;
                id
            }
            None => {
                self.bufs.push(b);
                self.bufs.len() - 1
            }
        };
        if self.tracing {
            self.trace.push(TraceOp::Alloc {
                buf: id as u32,
                bytes,
                at: self.at,
            });
        }
        id
    }

    /// A compound op's inner high point, for the trace.
    fn peak(&mut self, bytes: u64) {
        if self.tracing {
            self.trace.push(TraceOp::Peak { bytes, at: self.at });
        }
    }

    /// Notes the op (or parameter) now running, for the trace.
    fn at(&mut self, label: &str) {
        if !self.tracing {
            return;
        }
        if self.labels.last().map(String::as_str) != Some(label) {
            self.labels.push(label.to_string());
        }
        self.at = (self.labels.len() - 1) as u32;
    }

    fn retain(&mut self, id: BufId) {
        debug_assert!(self.bufs[id].refs > 0, "retain of a freed buffer");
        self.bufs[id].refs += 1;
    }

    fn release(&mut self, id: BufId) {
        let b = &mut self.bufs[id];
        debug_assert!(b.refs > 0, "double release");
        b.refs -= 1;
        if b.refs == 0 {
            let (bytes, kind) = (b.bytes, b.kind);
            *self.live.slot(kind) -= bytes;
            if self.tracing {
                self.trace.push(TraceOp::Free { buf: id as u32 });
            }
            self.free.push(id);
        }
    }

    fn total(&self) -> u64 {
        self.live.total()
    }

    /// A live buffer's bytes.
    fn bytes(&self, id: BufId) -> u64 {
        self.bufs[id].bytes
    }
}

/// Where a reshape of a view split at axis `d` (contiguous within axes `..d` and within `d..`)
/// keeps the two groups apart: the output axis its second group starts at.
fn regrouped(input: &[u64], output: &[u64], d: usize) -> Option<usize> {
    let head: u64 = input[..d.min(input.len())].iter().product();
    let mut acc = 1u64;
    for (k, &n) in output.iter().enumerate() {
        if acc == head && k > 0 {
            return Some(k);
        }
        acc = acc.saturating_mul(n);
    }
    None
}

/// A graph value in the forward pass.
#[derive(Clone, Copy)]
struct Value {
    buf: BufId,
    contiguous: bool,
    /// Its axis order where it is a dense permuted view of a contiguous tensor (identity when
    /// contiguous), else None: whether `matmul` folds it without a copy, and whether permuting
    /// it back makes it contiguous.
    perm: Option<rules::Perm>,
    /// Where it is a slice of a contiguous tensor along an axis other than the first: that
    /// axis. The view is contiguous within the axes before it and within the axes from it on,
    /// so a reshape that keeps those two groups apart is a view (torch's `computeStride`).
    split: Option<usize>,
    requires_grad: bool,
}

/// A trainable parameter tensor, in the harness's creation order.
struct Param {
    label: String,
    bytes: u64,
    /// Rank of the tensor (autocast casts matrices and biases; only matrices are saved).
    rank: usize,
    /// Its first dimension (1 for a scalar): the dimension FSDP shards ([`fsdp`]).
    rows: u64,
    init_transient: u64,
}

/// The cuBLAS workspaces made so far: the forward (main) thread's, its cuBLASLt one, and
/// autograd's device thread's.
#[derive(Default)]
struct Workspaces {
    forward: bool,
    forward_lt: bool,
    backward: bool,
}

/// Whether the op's forward goes through cuBLASLt (`addmm` with a bias: torch's
/// `gemm_and_bias`); the others use cuBLAS's own workspace only.
fn uses_cublaslt(op: &Op) -> bool {
    op.family().uses_cublaslt(op)
}

/// Records events, phase summaries and the peak.
struct Recorder {
    step: u32,
    phase: String,
    phase_start: u64,
    phase_peak: u64,
    phase_peak_node: String,
    events: Vec<Event>,
    /// Whether `events` is kept (the timeline); the peak and the phases are kept either way.
    record: bool,
    phases: Vec<PhaseSummary>,
    peak: u64,
    peak_step: u32,
    peak_phase: String,
    peak_node: String,
    peak_breakdown: Breakdown,
}

impl Recorder {
    fn begin(&mut self, step: u32, phase: String, mem: &Mem) {
        self.step = step;
        self.phase = phase;
        self.phase_start = mem.total();
        self.phase_peak = mem.total();
        self.phase_peak_node = "-".into();
    }

    /// Notes the current level as a high point of `node`.
    fn high(&mut self, node: &str, mem: &Mem) -> u64 {
        self.high_plus(node, mem, 0)
    }

    /// Notes the current level plus `extra` transient bytes as a high point of `node`.
    fn high_plus(&mut self, node: &str, mem: &Mem, extra: u64) -> u64 {
        let now = mem.total() + extra;
        // The names are copied into the strings' own buffers (a deep chain peaks anew at
        // every node: no allocation each time).
        if now > self.phase_peak {
            self.phase_peak = now;
            self.phase_peak_node.clear();
            self.phase_peak_node.push_str(node);
        }
        if now > self.peak {
            self.peak = now;
            self.peak_step = self.step;
            self.peak_phase.clear();
            self.peak_phase.push_str(&self.phase);
            self.peak_node.clear();
            self.peak_node.push_str(node);
            self.peak_breakdown = mem.live;
            self.peak_breakdown.transients += extra;
        }
        now
    }

    fn event(&mut self, node: &str, bytes: u64, mem: &Mem) {
        if !self.record {
            return;
        }
        self.events.push(Event {
            step: self.step,
            phase: self.phase.clone(),
            node: node.to_string(),
            bytes,
            after: mem.total(),
        });
    }

    fn end(&mut self, mem: &Mem) {
        self.phases.push(PhaseSummary {
            name: self.phase.clone(),
            start: self.phase_start,
            peak: self.phase_peak,
            end: mem.total(),
            peak_node: self.phase_peak_node.clone(),
        });
    }
}

/// Simulates three training steps of `graph` at `batch` under `precision`'s rule table.
/// An error for a precision with no rule table (bf16-autocast is not yet derived) or a batch of 0.
pub fn simulate(graph: &Graph, batch: u64, precision: Precision) -> Result<Simulation, String> {
    simulate_with(graph, batch, precision, true, &staged::Plan::default())
}

/// [`simulate`] without the timeline and the rule of every node (`Simulation::timeline` and
/// `Simulation::rules` empty; the peak, its breakdown, the phases and the allocator replay are
/// the same): what the planner and the engine need, in memory that does not grow with events.
pub fn simulate_peak(
    graph: &Graph,
    batch: u64,
    precision: Precision,
) -> Result<Simulation, String> {
    simulate_with(graph, batch, precision, false, &staged::Plan::default())
}

/// Simulates three training steps under a strategy (`checkpoint`, `lora`, `qlora`, or
/// `checkpoint` with one of the other two): the rule sets of [`staged`] and [`lowrank`],
/// mirroring `memcal-measure run --strategy`; the per-rank rule sets (DDP, ZeRO-1, DeepSpeed's
/// stages 1, 2 and 3, FSDP, TP, PP) as rank 0 ([`simulate_rank`]). An error for a part with no
/// rule set (8-bit Adam), a combination no rule set covers, bf16-autocast or bf16, or
/// a graph the harness refuses (LoRA with no target).
pub fn simulate_strategy(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    strategy: &crate::strategy::Strategy,
    timeline: bool,
) -> Result<Simulation, String> {
    let plan = staged::Plan::from_strategy(strategy)?;
    simulate_with(graph, batch, precision, timeline, &plan)
}

/// [`simulate_strategy`] for one rank of a multi-process strategy (`ddp`, `zero1`: the
/// ranks of ZeRO-1 differ by their optimizer partition), on the given collective backend
/// (where the rule sets tell them apart: DeepSpeed's and FSDP's,
/// [`deepspeed::Collectives`]; the rows were measured with gloo). `rank` must be below the strategy's world.
pub fn simulate_rank(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    strategy: &crate::strategy::Strategy,
    rank: u64,
    timeline: bool,
    collectives: deepspeed::Collectives,
) -> Result<Simulation, String> {
    let mut plan = staged::Plan::from_strategy(strategy)?;
    let world = strategy.devices();
    if rank >= world {
        return Err(format!(
            "rank {rank} is not below the strategy's world {world}"
        ));
    }
    if let Some(z) = plan.zero1.as_mut() {
        z.0 = rank;
    }
    if let Some(d) = plan.deepspeed.as_mut() {
        d.rank = rank;
        d.collectives = collectives;
    }
    if let Some(f) = plan.fsdp.as_mut() {
        f.rank = rank;
        f.collectives = collectives;
    }
    if let Some(z) = plan.zero3.as_mut() {
        z.rank = rank;
        z.collectives = collectives;
    }
    if let Some(t) = plan.tp.as_mut() {
        t.rank = rank;
    }
    if let Some(p) = plan.pp.as_mut() {
        p.rank = rank;
    }
    simulate_with(graph, batch, precision, timeline, &plan)
}

/// The simulation of a multi-process strategy's worst rank (the highest peak among the ranks
/// whose layouts differ, [`distinct_ranks`]: at most 16 of ZeRO-1's and DeepSpeed's ranks,
/// the largest first, and every stage of a pipeline), with that rank, on the given collective backend ([`simulate_rank`]);
/// a one-process strategy is simulated as [`simulate_strategy`] (rank None).
pub fn simulate_worst_rank(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    strategy: &crate::strategy::Strategy,
    collectives: deepspeed::Collectives,
) -> Result<(Simulation, Option<u64>), String> {
    let (worst, rank, _) = simulate_ranks(graph, batch, precision, strategy, collectives)?;
    Ok((worst, rank))
}

/// One rank's simulated peak: where it is and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankPeak {
    pub rank: u64,
    pub bytes: u64,
    pub phase: String,
    pub node: String,
}

/// [`simulate_worst_rank`], with every simulated rank's peak, in rank order (empty for a
/// one-process strategy).
pub fn simulate_ranks(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    strategy: &crate::strategy::Strategy,
    collectives: deepspeed::Collectives,
) -> Result<(Simulation, Option<u64>, Vec<RankPeak>), String> {
    if strategy.devices() == 1 {
        return simulate_strategy(graph, batch, precision, strategy, false)
            .map(|s| (s, None, Vec::new()));
    }
    let mut worst: Option<(Simulation, Option<u64>)> = None;
    let mut peaks = Vec::new();
    for rank in distinct_ranks(graph, strategy, 16) {
        let sim = simulate_rank(graph, batch, precision, strategy, rank, false, collectives)?;
        peaks.push(RankPeak {
            rank,
            bytes: sim.peak_bytes,
            phase: sim.peak_phase.clone(),
            node: sim.peak_node.clone(),
        });
        if worst
            .as_ref()
            .is_none_or(|(w, _)| sim.peak_bytes > w.peak_bytes)
        {
            worst = Some((sim, Some(rank)));
        }
    }
    peaks.sort_by_key(|p| p.rank);
    let (sim, rank) = worst.ok_or_else(|| "no rank to simulate".to_string())?;
    Ok((sim, rank, peaks))
}

/// What a simulation of `strategy` on `collectives` assumes beyond the measured rows, for a
/// plan to print: the rule sets' notes ([`deepspeed::unmeasured_note`],
/// [`fsdp::unmeasured_note`]); None where it is what the rows measured (gloo).
pub fn unmeasured_note(
    strategy: &crate::strategy::Strategy,
    collectives: deepspeed::Collectives,
) -> Option<&'static str> {
    deepspeed::unmeasured_note(strategy, collectives)
        .or_else(|| fsdp::unmeasured_note(strategy, collectives))
        .or_else(|| zero3::unmeasured_note(strategy, collectives))
}

/// The ranks of a strategy whose simulations differ: for ZeRO-1 every rank, the largest
/// optimizer partitions first, for DeepSpeed's stages 1 and 2 every rank, the largest reduced
/// gradient buffers first, at most `limit`; for a pipeline every stage; else rank 0 alone.
pub fn distinct_ranks(
    graph: &Graph,
    strategy: &crate::strategy::Strategy,
    limit: usize,
) -> Vec<u64> {
    if let Some(pp) = strategy.parts.iter().find_map(pp::Pp::of_part) {
        // Every stage holds its own share, and the last (the logits) is often the worst: all
        // of them, whatever `limit` (each simulates its share of the nodes, so all together
        // cost about one whole simulation).
        return (0..pp.stages).collect();
    }
    let (params, _) = parameters(graph, Backend::CpuFp32);
    if let Some(ds) = strategy
        .parts
        .iter()
        .find_map(deepspeed::DeepSpeed::of_part)
    {
        return deepspeed::ranks_largest_first(&deepspeed::elements(&params), ds, limit);
    }
    let Some(world) = strategy
        .part(crate::strategy::Kind::Zero1)
        .map(|p| p.get("world"))
    else {
        return vec![0];
    };
    let bytes: Vec<u64> = params.iter().map(|p| p.bytes).collect();
    let owner = zero1_owners(&bytes, world);
    let mut per_rank = vec![0u64; world as usize];
    for (b, o) in bytes.iter().zip(&owner) {
        per_rank[*o as usize] += b;
    }
    let mut ranks: Vec<u64> = (0..world).collect();
    ranks.sort_by_key(|&r| std::cmp::Reverse(per_rank[r as usize]));
    ranks.truncate(limit.max(1));
    ranks
}

/// ZeroRedundancyOptimizer's partition (`_partition_parameters`, torch 2.11): the owner rank
/// of each parameter, given in module order by its bytes (one dtype: bytes order as elements).
pub fn zero1_owners(bytes: &[u64], world: u64) -> Vec<u64> {
    let mut order: Vec<usize> = (0..bytes.len()).collect();
    // `sorted(..., key=numel, reverse=True)`: stable, largest first.
    order.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
    let mut sizes = vec![0u64; world as usize];
    let mut owner = vec![0u64; bytes.len()];
    for i in order {
        // `_get_min_index`: the first rank with the fewest elements.
        let r = (0..sizes.len()).min_by_key(|&r| (sizes[r], r)).unwrap_or(0);
        owner[i] = r as u64;
        sizes[r] += bytes[i];
    }
    owner
}

fn simulate_with(
    graph: &Graph,
    batch: u64,
    precision: Precision,
    timeline: bool,
    plan: &staged::Plan,
) -> Result<Simulation, String> {
    let backend = Backend::for_precision(precision)?;
    if !plan.is_plain() && backend.is_cuda() {
        return Err(format!(
            "the simulator's strategy rule sets are derived for cpu-fp32 only, not {}",
            backend.as_str()
        ));
    }
    if batch == 0 {
        return Err("batch must be a positive integer".into());
    }
    // Tensor parallelism simulates the rank's own graph; the parameters are built whole.
    let local;
    let mut tp_state = None;
    let graph = match plan.tp {
        Some(t) => {
            let (g, roles) = tp::local_graph(graph, t.k)?;
            let whole = parameters(graph, backend)
                .0
                .iter()
                .map(|p| p.bytes)
                .collect();
            tp_state = Some(tp::State { roles, whole });
            local = g;
            &local
        }
        None => graph,
    };
    // A pipeline simulates a micro-batch's step on the rank's stage; the inputs are the batch's.
    let mut pp_state = None;
    let batch = match plan.pp {
        Some(p) => {
            if p.micro == 0 || !batch.is_multiple_of(p.micro) {
                return Err(format!(
                    "pp: micro = {} does not divide the batch {batch}",
                    p.micro
                ));
            }
            pp_state = Some(pp::State {
                pp: p,
                nodes: pp::stage_nodes(graph, p.stages, p.rank)?,
            });
            batch / p.micro
        }
        None => batch,
    };
    // The byte arithmetic below is plain u64: refuse sizes that could overflow it (no real
    // training step comes near 2^50 elements in one tensor).
    const LIMIT: u64 = 1 << 50;
    let too_big = |n: u64| n >= LIMIT;
    let shapes = graph
        .inputs
        .iter()
        .map(|i| &i.shape)
        .chain(graph.nodes.iter().map(|n| &n.output));
    for s in shapes {
        let n =
            s.0.iter()
                .try_fold(1u64, |acc, d| acc.checked_mul(d.at(batch)))
                .unwrap_or(u64::MAX);
        if too_big(n) {
            return Err(format!(
                "at batch {batch} a tensor of shape {s} has {n} elements or more: too large to simulate"
            ));
        }
    }
    if too_big(graph.parameters()) {
        return Err("the graph has too many parameters to simulate".into());
    }
    let values = rules::Values::new(graph, backend)?;
    let value_bytes: Vec<u64> = (0..values.len())
        .map(|v| values.shape(v).numel_at(batch) * values.elem(v))
        .collect();
    let mut sim = Sim::new(graph, &values, &value_bytes, batch, backend, plan)?;
    sim.tp = tp_state;
    sim.pp = pp_state;
    sim.rec.record = timeline;
    sim.run(precision)
}

struct Sim<'a> {
    graph: &'a Graph,
    batch: u64,
    backend: Backend,
    /// The distinct rules (a deep graph repeats a few), and each node's among them.
    rules: Vec<rules::OpRule>,
    rule_of: Vec<u32>,
    /// Parameters in creation order, and for each node the indices of the parameter tensors its
    /// backward produces gradients for (a tie points at the owner's table).
    params: Vec<Param>,
    node_params: Vec<Vec<usize>>,
    /// Every value by position (graph inputs, then nodes) and each node's inputs as positions.
    values: &'a rules::Values<'a>,
    /// Bytes of every value at the batch (its gradient has the same dtype).
    value_bytes: &'a [u64],
    /// Does the node's output depend on a parameter (is it in the autograd graph)?
    requires_grad: Vec<bool>,
    /// Does the node's output reach the loss?
    reaches_loss: Vec<bool>,
    /// Last forward use (node index) of every value; `usize::MAX`: never used.
    last_use: Vec<usize>,
    /// The loss node's index.
    loss: Option<usize>,
    /// LoRA or QLoRA: the adapters' rank, and the target matrices (empty without).
    low_rank: Option<lowrank::LowRank>,
    targets: Vec<lowrank::Target>,
    /// A staged run's stages (checkpointing, QLoRA); None: the plain forward and backward.
    stages: Option<Vec<staged::StageInfo>>,
    /// Which threads have made their cuBLAS workspaces (CUDA).
    workspace: Workspaces,
    /// DDP's gradient buckets ([`staged::Plan::ddp_buckets`]).
    ddp_buckets: bool,
    /// ZeRO-1: whether this rank's optimizer owns each parameter (None: all of them).
    owned: Option<Vec<bool>>,
    /// DeepSpeed's ZeRO stage 1 or 2 ([`deepspeed`]).
    ds: Option<deepspeed::State>,
    /// FSDP1 or FSDP2 ([`fsdp`]).
    fsdp: Option<fsdp::State>,
    /// DeepSpeed's ZeRO-3 ([`zero3`]).
    zero3: Option<zero3::State>,
    /// Tensor parallelism ([`tp`]): the graph simulated is the rank's own.
    tp: Option<tp::State>,
    /// Pipeline parallelism ([`pp`]): the stage's nodes, run a micro-batch at a time.
    pp: Option<pp::State>,
    /// torch.optim's AdamW (`_init_group`): every state made before any update (the tch
    /// harness's C++ AdamW makes them parameter by parameter).
    states_first: bool,
    mem: Mem,
    rec: Recorder,
}

/// The buffers each node's backward holds (its saved tensors), for all nodes in one list:
/// node `k`'s are `bufs[starts[k - base]..starts[k - base + 1]]`; a released one is `NONE`. A
/// staged run ([`staged`]) keeps one per stage, whose first node is `base`.
struct SavedSets {
    base: usize,
    starts: Vec<u32>,
    bufs: Vec<BufId>,
}

impl SavedSets {
    const NONE: BufId = usize::MAX;

    /// Empty, for nodes from `base` on.
    fn new(base: usize, nodes: usize) -> SavedSets {
        let mut starts = Vec::with_capacity(nodes + 1);
        starts.push(0);
        SavedSets {
            base,
            starts,
            bufs: Vec::new(),
        }
    }

    /// Releases what node `k` saved (once: a second call releases nothing; nothing for a node
    /// outside the set).
    fn release(&mut self, k: usize, mem: &mut Mem) {
        let Some(i) = k
            .checked_sub(self.base)
            .filter(|i| i + 1 < self.starts.len())
        else {
            return;
        };
        for b in &mut self.bufs[self.starts[i] as usize..self.starts[i + 1] as usize] {
            if *b != SavedSets::NONE {
                mem.release(*b);
                *b = SavedSets::NONE;
            }
        }
    }
}

/// Buffers reused from node to node (no allocation per node per step).
#[derive(Default)]
struct Scratch {
    ins: Vec<Value>,
    transients: Vec<BufId>,
    /// (value index, gradient buffer, contiguous, the value's own gradient bytes)
    produced: Vec<(usize, BufId, bool, u64)>,
    casts: Vec<BufId>,
    bf16_param_grads: Vec<(usize, BufId)>,
    done_params: Vec<usize>,
}

impl<'a> Sim<'a> {
    fn new(
        graph: &'a Graph,
        values: &'a rules::Values<'a>,
        value_bytes: &'a [u64],
        batch: u64,
        backend: Backend,
        plan: &staged::Plan,
    ) -> Result<Sim<'a>, String> {
        let (mut params, mut node_params) = parameters(graph, backend);
        let targets = match plan.low_rank {
            Some(lr) => lowrank::adapt(graph, lr, &mut params, &mut node_params)?,
            None => Vec::new(),
        };
        let stages = staged::stages(graph, values, plan)?;
        let owned = plan.zero1.map(|(rank, world)| {
            let bytes: Vec<u64> = params.iter().map(|p| p.bytes).collect();
            zero1_owners(&bytes, world)
                .into_iter()
                .map(|o| o == rank)
                .collect()
        });
        let ds = plan
            .deepspeed
            .map(|d| deepspeed::State::new(d, &deepspeed::elements(&params), &node_params));
        let fsdp = plan
            .fsdp
            .map(|f| fsdp::State::new(f, graph, &params, &node_params));
        let zero3 = plan
            .zero3
            .map(|z| zero3::State::new(z, graph, values, &params, &node_params));
        let n = graph.nodes.len();
        // A recomputed stage's outputs are leaves that require a gradient (the harness's
        // `set_requires_grad(true)`), whatever their nodes hold.
        let mut leaf = vec![false; n];
        if let Some(st) = &stages {
            for s in st.iter().filter(|s| s.recompute) {
                for &j in &s.live {
                    leaf[j] = true;
                }
            }
        }
        let mut requires_grad = vec![false; n];
        for k in 0..n {
            let from_inputs = values
                .args(k)
                .iter()
                .any(|&v| values.as_node(v as usize).is_some_and(|j| requires_grad[j]));
            // A `constant` (rotary tables, masks) is made without autograd from its input's
            // batch alone.
            let constant = graph.nodes[k].op.is_constant();
            // A generic node autograd never differentiates (`new_ones`, a comparison).
            let never = graph.nodes[k]
                .op
                .as_generic()
                .is_some_and(|a| a.never_requires_grad());
            requires_grad[k] = (from_inputs && !constant && !never)
                || (!node_params[k].is_empty() && !never)
                || leaf[k];
        }
        let mut rules = Vec::new();
        let mut rule_of = Vec::with_capacity(n);
        let mut distinct: crate::name_hash::NameMap<rules::OpRule, u32> = Default::default();
        for k in 0..n {
            let mut r = rule(graph, k, batch, backend, values);
            if let Some(lr) = plan.low_rank {
                let x_grad = values
                    .args(k)
                    .first()
                    .is_some_and(|&v| values.as_node(v as usize).is_some_and(|j| requires_grad[j]));
                r = lowrank::rule(r, graph, k, batch, values, lr, x_grad);
            }
            let next = rules.len() as u32;
            let at = *distinct.entry(r).or_insert_with_key(|r| {
                rules.push(r.clone());
                next
            });
            rule_of.push(at);
        }

        let loss = graph.loss_index();
        let mut reaches_loss = vec![false; n];
        if let Some(l) = loss {
            reaches_loss[l] = true;
        }
        for k in (0..n).rev() {
            if reaches_loss[k] {
                for &v in values.args(k) {
                    if let Some(j) = values.as_node(v as usize) {
                        reaches_loss[j] = true;
                    }
                }
            }
        }
        let mut last_use = vec![usize::MAX; values.len()];
        for k in 0..n {
            for &v in values.args(k) {
                last_use[v as usize] = k;
            }
        }
        Ok(Sim {
            graph,
            batch,
            backend,
            rules,
            rule_of,
            params,
            node_params,
            values,
            value_bytes,
            requires_grad,
            reaches_loss,
            last_use,
            loss,
            low_rank: plan.low_rank,
            targets,
            stages,
            workspace: Workspaces::default(),
            ddp_buckets: plan.ddp_buckets,
            owned,
            ds,
            fsdp,
            zero3,
            tp: None,
            pp: None,
            states_first: plan.tp.is_some() || plan.pp.is_some(),
            mem: Mem {
                bufs: Vec::new(),
                live: Breakdown::default(),
                free: Vec::new(),
                tracing: backend.is_cuda(),
                trace: Vec::new(),
                at: 0,
                labels: vec!["-".to_string()],
            },
            rec: Recorder {
                step: 0,
                phase: String::new(),
                phase_start: 0,
                phase_peak: 0,
                phase_peak_node: String::new(),
                events: Vec::new(),
                record: true,
                phases: Vec::new(),
                peak: 0,
                peak_step: 0,
                peak_phase: String::new(),
                peak_node: String::new(),
                peak_breakdown: Breakdown::default(),
            },
        })
    }

    /// Begins a phase (in the recorder and the allocator trace).
    fn begin(&mut self, step: u32, phase: String) {
        if self.mem.tracing {
            self.mem.trace.push(TraceOp::Phase);
        }
        self.mem.at("-");
        self.rec.begin(step, phase, &self.mem);
    }

    fn run(mut self, precision: Precision) -> Result<Simulation, String> {
        if self.pp.is_some() {
            let rules = std::mem::take(&mut self.rules);
            self.run_pp(&rules);
            return Ok(self.finish(&rules, precision));
        }
        // model_load: parameters (and batch-norm running statistics) in creation order.
        self.begin(0, "model_load".into());
        for n in &self.graph.nodes {
            // Batch norm's running_mean and running_var (the harness registers no batch
            // counter).
            if let Some(bytes) = n.op.family().running_stats_bytes(&n.op) {
                self.mem.alloc(bytes, Kind::Parameters);
            }
        }
        // The base; adapters (LoRA, QLoRA) come after it, made by `load_adapters`.
        let base = self.targets.first().map_or(self.params.len(), |t| t.a);
        let mut param_bufs = Vec::with_capacity(base);
        for i in 0..base {
            let built = self.tp_built_bytes(i);
            let p = &self.params[i];
            self.mem.at(&p.label);
            let t = self.mem.alloc(p.init_transient, Kind::Transients);
            param_bufs.push(self.mem.alloc(built, Kind::Parameters));
            let high = self.rec.high(&p.label, &self.mem);
            self.mem.release(t);
            self.rec.event(&self.params[i].label, high, &self.mem);
        }
        self.load_adapters(&param_bufs);
        self.ds_load(&param_bufs);
        self.fsdp_load(&param_bufs);
        self.zero3_load(&param_bufs);
        self.tp_load(&param_bufs);
        if self.ddp_buckets {
            // The reducer's buckets: every parameter that gets a gradient (the adapters,
            // from `base` on, alone under LoRA).
            let frozen = if self.targets.is_empty() { 0 } else { base };
            let trainable: u64 = self.params[frozen..].iter().map(|p| p.bytes).sum();
            self.mem.at("ddp buckets");
            self.mem.alloc(trainable, Kind::Gradients);
            let high = self.rec.high("ddp buckets", &self.mem);
            self.rec.event("ddp buckets", high, &self.mem);
        }
        self.rec.end(&self.mem);

        let inputs = self.inputs_phase(1);

        let mut grads: Vec<Option<BufId>> = vec![None; self.params.len()];
        let mut states: Vec<Option<(BufId, BufId)>> = vec![None; self.params.len()];
        let rules = std::mem::take(&mut self.rules);
        let mut scratch = Scratch::default();
        let stages = self.stages.take();
        for step in 1..=STEPS {
            match &stages {
                None => {
                    let (saved, loss_buf) = self.forward(step, &inputs, &rules, &mut scratch);
                    self.backward(step, saved, &mut grads, &rules, &mut scratch);
                    if let Some(l) = loss_buf {
                        self.mem.release(l);
                    }
                }
                Some(st) => {
                    let tape = self.forward_staged(step, st, &inputs, &rules, &mut scratch);
                    self.backward_staged(step, st, tape, &mut grads, &rules, &mut scratch);
                }
            }
            self.optimizer(step, &mut grads, &mut states);
        }
        Ok(self.finish(&rules, precision))
    }

    /// The inputs phase: every graph input at the simulation's batch, `copies` times over (a
    /// pipeline simulates a micro-batch, its inputs are the whole batch's).
    fn inputs_phase(&mut self, copies: u64) -> Vec<Value> {
        self.begin(0, "inputs".into());
        let mut inputs: Vec<Value> = Vec::with_capacity(self.graph.inputs.len());
        for i in &self.graph.inputs {
            let bytes = i.shape.numel_at(self.batch)
                * rules::input_element_bytes(i.dtype, self.backend)
                * copies;
            let buf = self.mem.alloc(bytes, Kind::Inputs);
            inputs.push(Value {
                buf,
                contiguous: true,
                perm: rules::Perm::identity(i.shape.rank()),
                split: None,
                requires_grad: false,
            });
        }
        let high = self.rec.high("-", &self.mem);
        self.rec.event("-", high, &self.mem);
        self.rec.end(&self.mem);
        inputs
    }

    /// The simulation's result.
    fn finish(self, rules: &[rules::OpRule], precision: Precision) -> Simulation {
        let rules: Vec<NodeRule> = if self.rec.record {
            self.graph
                .nodes
                .iter()
                .zip(&self.rule_of)
                .map(|(n, &r)| (n, &rules[r as usize]))
                .map(|(n, r)| NodeRule {
                    id: n.id.clone(),
                    op: n.op.name(),
                    source: r.source.as_str(),
                    note: r.note,
                })
                .collect()
        } else {
            Vec::new()
        };
        Simulation {
            graph: self.graph.name.clone(),
            batch: self.batch,
            precision,
            backend: self.backend.as_str(),
            parameters: self.graph.parameters(),
            peak_bytes: self.rec.peak,
            peak_step: self.rec.peak_step,
            peak_phase: self.rec.peak_phase,
            peak_node: self.rec.peak_node,
            breakdown: self.rec.peak_breakdown,
            phases: self.rec.phases,
            timeline: self.rec.events,
            rules,
            device: None,
            trace: self.mem.trace,
            labels: self.mem.labels,
        }
        .with_device(self.backend)
    }

    /// The forward pass. Returns what each node's backward holds (saved tensors), and the
    /// loss value's buffer (held until the loss is dropped after backward).
    fn forward(
        &mut self,
        step: u32,
        inputs: &[Value],
        rules: &[rules::OpRule],
        scratch: &mut Scratch,
    ) -> (SavedSets, Option<BufId>) {
        self.begin(step, format!("step{step}.forward"));
        let graph = self.graph;
        let values = self.values;
        let n = graph.nodes.len();
        // Every value by position: the graph inputs, then each node's output once it ran
        // (taken out at its last use).
        let mut env: Vec<Option<Value>> = inputs.iter().copied().map(Some).collect();
        env.resize(self.values.len(), None);
        let mut saved = SavedSets::new(0, n);
        // The autocast cache: parameter index -> its bf16 copy (cleared when forward ends).
        let mut cache: Vec<Option<BufId>> = vec![None; self.params.len()];
        for k in 0..n {
            let rule = &rules[self.rule_of[k] as usize];
            self.fsdp_pre_forward(k);
            self.zero3_pre_forward(k);
            let high = self
                .forward_node(k, rule, &mut env, &mut saved, &mut cache, scratch, true)
                .max(self.tp_post_forward(k));
            // Release node values whose last use is this node (never graph inputs, never the
            // loss).
            for &v in values.args(k) {
                let v = v as usize;
                let is_node = self.values.as_node(v);
                if self.last_use[v] == k && is_node.is_some() && is_node != self.loss {
                    if let Some(x) = env[v].take() {
                        self.mem.release(x.buf);
                    }
                }
            }
            self.rec.event(&graph.nodes[k].id, high, &self.mem);
            self.fsdp_post_forward(k);
            self.zero3_post_forward(k);
        }
        // autocast's clear_cache() when the harness turns autocast off: copies nobody saved go.
        let mut copies: Vec<BufId> = cache.into_iter().flatten().collect();
        copies.sort_unstable();
        for b in copies {
            self.mem.release(b);
        }
        // Values never used by a later op are dropped when the forward returns, in node order;
        // the loss is handed back to the caller.
        let mut loss_buf = None;
        for k in 0..n {
            if let Some(x) = env[self.values.node_value(k)].take() {
                if Some(k) == self.loss {
                    loss_buf = Some(x.buf);
                } else {
                    self.mem.release(x.buf);
                }
            }
        }
        self.rec.end(&self.mem);
        (saved, loss_buf)
    }

    /// Node `k`'s forward: its output into `env`, what it saves into `saved` (with `grad_mode`
    /// off, under no_grad, nothing: internal tensors are transients), its transients made and
    /// freed. Returns the highest level it reached. The caller releases its inputs.
    #[allow(clippy::too_many_arguments)]
    fn forward_node(
        &mut self,
        k: usize,
        rule: &rules::OpRule,
        env: &mut [Option<Value>],
        saved: &mut SavedSets,
        cache: &mut [Option<BufId>],
        scratch: &mut Scratch,
        grad_mode: bool,
    ) -> u64 {
        let node = &self.graph.nodes[k];
        let values = self.values;
        let args = values.args(k);
        scratch.ins.clear();
        for &v in args {
            // Every input is an earlier value (checked by `Values::new`), alive until its
            // last use, which is this node or later.
            scratch
                .ins
                .push(env[v as usize].expect("an input is alive at its use"));
        }
        let x0 = scratch.ins[0];
        let value_bytes = self.value_bytes;
        let in_bytes = |i: usize| -> u64 { value_bytes[args[i] as usize] };
        let autograd = grad_mode && self.requires_grad[k] && self.reaches_loss[k];
        self.mem.at(&node.id);
        if self.backend.is_cuda() && rule.cublas {
            self.forward_workspaces(&node.op);
        }
        if let Some(when) = rule.autocast {
            let held = self.autocast_copies(k, when, autograd && x0.requires_grad, autograd, cache);
            saved.bufs.extend(held);
        }
        let early = rule.forward_peak.map_or(0, |extra| {
            self.mem.peak(extra);
            self.rec.high_plus(&node.id, &self.mem, extra)
        });
        scratch.transients.clear();
        // A reshape of a slice is a view where it keeps the slice's two groups of axes apart.
        let batch = self.batch;
        let dims =
            |sh: &crate::shape::Shape| -> Vec<u64> { sh.0.iter().map(|d| d.at(batch)).collect() };
        let family = node.op.family();
        let out_split = if x0.contiguous {
            family.splits_at(&node.op, node.output.rank())
        } else if family.regroups(&node.op) {
            x0.split.and_then(|d| {
                regrouped(
                    &dims(self.values.shape(args[0] as usize)),
                    &dims(&node.output),
                    d,
                )
            })
        } else {
            None
        };
        // The output.
        let (out_buf, out_contig) = match rule.output {
            Output::New(bytes) => (
                self.mem.alloc(bytes, Kind::SavedActivations),
                rule.output_contiguous.unwrap_or(x0.contiguous),
            ),
            Output::View => {
                self.mem.retain(x0.buf);
                (x0.buf, rule.output_contiguous.unwrap_or(x0.contiguous))
            }
            Output::ReshapeView => {
                if x0.contiguous || out_split.is_some() {
                    self.mem.retain(x0.buf);
                    (x0.buf, x0.contiguous)
                } else {
                    (self.mem.alloc(in_bytes(0), Kind::SavedActivations), true)
                }
            }
        };
        let (out_contig, out_perm) = match (family.permutation(&node.op), rule.output_contiguous) {
            (Some(dims), _) => match x0.perm.and_then(|p| p.then(dims)) {
                Some(p) => (p.is_identity(), Some(p)),
                None => (out_contig, None),
            },
            _ if rule.output_like_input && x0.contiguous => {
                (true, rules::Perm::identity(node.output.rank()))
            }
            _ if rule.output_like_input && x0.perm.is_some_and(|p| p.last_innermost()) => {
                (x0.perm.is_some_and(|p| p.is_identity()), x0.perm)
            }
            _ if out_contig => (true, rules::Perm::identity(node.output.rank())),
            (_, None) => (out_contig, x0.perm),
            _ => (false, rule.output_perm),
        };
        // A contiguous working copy of a non-contiguous input, for ops that need one.
        if rule.needs_contiguous_input && !x0.contiguous {
            scratch
                .transients
                .push(self.mem.alloc(in_bytes(0), Kind::Transients));
        }
        // linear on a non-contiguous input goes through matmul: 12 bytes of scalars (calibrated
        // on the CPU single-op fixtures; CUDA scalars are CPU wrapped numbers).
        if family.matmul_on_strided_input(&node.op) && !x0.contiguous && !self.backend.is_cuda() {
            scratch
                .transients
                .push(self.mem.alloc(12, Kind::Transients));
        }
        let transient = match rule.forward_transient_no_grad {
            Some(b) if !autograd => b,
            _ => rule.forward_transient,
        };
        scratch
            .transients
            .push(self.mem.alloc(transient, Kind::Transients));
        // Saved tensors (only when the node is part of the autograd graph).
        self.save_tensors(k, rule, out_buf, autograd, saved, scratch);
        let high = self.rec.high(&node.id, &self.mem).max(early);
        for &t in &scratch.transients {
            self.mem.release(t);
        }
        saved.starts.push(saved.bufs.len() as u32);
        env[self.values.node_value(k)] = Some(Value {
            buf: out_buf,
            contiguous: out_contig,
            perm: out_perm,
            split: out_split,
            requires_grad: grad_mode && self.requires_grad[k],
        });
        high
    }

    /// CUDA: the forward thread's cuBLAS (and, for a biased linear, cuBLASLt) workspace at the
    /// first call; kept for the process.
    fn forward_workspaces(&mut self, op: &Op) {
        if !self.workspace.forward {
            self.workspace.forward = true;
            self.mem.alloc(cuda::CUBLAS_WORKSPACE, Kind::Workspaces);
        }
        if !self.workspace.forward_lt && uses_cublaslt(op) {
            self.workspace.forward_lt = true;
            self.mem.alloc(cuda::CUBLASLT_WORKSPACE, Kind::Workspaces);
        }
    }

    /// What node `k` saves for backward (its inputs, its output `out_buf`, the tensors it makes)
    /// into `saved`; outside autograd (`autograd` false), its internal tensors as transients
    /// instead, in `scratch.transients`.
    fn save_tensors(
        &mut self,
        k: usize,
        rule: &rules::OpRule,
        out_buf: BufId,
        autograd: bool,
        saved: &mut SavedSets,
        scratch: &mut Scratch,
    ) {
        let args = self.values.args(k);
        let value_bytes = self.value_bytes;
        let in_bytes = |i: usize| -> u64 { value_bytes[args[i] as usize] };
        let ins = &scratch.ins;
        if autograd {
            for s in &rule.saved {
                match s {
                    Saved::Input(i) => {
                        self.mem.retain(ins[*i].buf);
                        saved.bufs.push(ins[*i].buf);
                    }
                    Saved::InputFor(i, j) => {
                        if ins[*j].requires_grad {
                            self.mem.retain(ins[*i].buf);
                            saved.bufs.push(ins[*i].buf);
                        }
                    }
                    Saved::InputContiguous(i) => {
                        if ins[*i].contiguous {
                            self.mem.retain(ins[*i].buf);
                            saved.bufs.push(ins[*i].buf);
                        } else {
                            saved
                                .bufs
                                .push(self.mem.alloc(in_bytes(*i), Kind::SavedActivations));
                        }
                    }
                    Saved::InputFolded(i, j) if ins[*j].requires_grad => {
                        if ins[*i].perm.is_some_and(|p| p.folds()) {
                            self.mem.retain(ins[*i].buf);
                            saved.bufs.push(ins[*i].buf);
                        } else {
                            saved
                                .bufs
                                .push(self.mem.alloc(in_bytes(*i), Kind::SavedActivations));
                        }
                    }
                    Saved::InputFolded(..) => {}
                    Saved::Out => {
                        self.mem.retain(out_buf);
                        saved.bufs.push(out_buf);
                    }
                    Saved::Internal { bytes, .. } | Saved::Kept { bytes, .. } => {
                        saved
                            .bufs
                            .push(self.mem.alloc(*bytes, Kind::SavedActivations));
                    }
                    Saved::InternalFor { bytes, j, .. } => {
                        if ins.get(*j).is_some_and(|x| x.requires_grad) {
                            saved
                                .bufs
                                .push(self.mem.alloc(*bytes, Kind::SavedActivations));
                        }
                    }
                }
            }
        } else {
            // Outside autograd, internal tensors still exist while the op runs.
            for s in &rule.saved {
                if let Saved::Internal { bytes, .. } = s {
                    scratch
                        .transients
                        .push(self.mem.alloc(*bytes, Kind::Transients));
                }
            }
        }
    }

    /// CUDA autocast: bf16 copies of node `k`'s fp32 parameters through the cache (one per
    /// parameter per forward); the matrices its backward needs are saved (returned, retained).
    fn autocast_copies(
        &mut self,
        k: usize,
        when: rules::CopySaved,
        input_requires_grad: bool,
        autograd: bool,
        cache: &mut [Option<BufId>],
    ) -> Vec<BufId> {
        let mut held = Vec::new();
        for i in 0..self.node_params[k].len() {
            let p = self.node_params[k][i];
            let copy = match cache[p] {
                Some(b) => b,
                None => {
                    let b = self
                        .mem
                        .alloc(self.params[p].bytes / 2, Kind::SavedActivations);
                    cache[p] = Some(b);
                    b
                }
            };
            let needed = match when {
                rules::CopySaved::Always => true,
                rules::CopySaved::IfInputRequiresGrad => input_requires_grad,
            };
            if autograd && needed && self.params[p].rank >= 2 {
                self.mem.retain(copy);
                held.push(copy);
            }
        }
        held
    }

    fn backward(
        &mut self,
        step: u32,
        mut saved: SavedSets,
        grads: &mut [Option<BufId>],
        rules: &[rules::OpRule],
        scratch: &mut Scratch,
    ) {
        self.begin(step, format!("step{step}.backward"));
        let graph = self.graph;
        // Gradient buffer of each node's output.
        let mut out_grad: Vec<Option<BufId>> = vec![None; graph.nodes.len()];
        // Whether each pending gradient is contiguous (a slice of a concat's gradient, or a
        // permuted one, is not).
        let mut grad_contig: Vec<bool> = vec![true; graph.nodes.len()];
        // The root gradient (ones, 4 bytes) is held by the engine until backward ends.
        let root = self.mem.alloc(4, Kind::ActivationGradients);
        if let Some(l) = self.loss {
            self.mem.retain(root);
            out_grad[l] = Some(root);
        }
        self.backward_range(
            0..graph.nodes.len(),
            &mut saved,
            grads,
            rules,
            scratch,
            &mut out_grad,
            &mut grad_contig,
        );
        for g in out_grad.into_iter().flatten() {
            self.mem.release(g);
        }
        self.mem.release(root);
        self.ds_after_backward(grads);
        self.fsdp_after_backward(grads);
        self.zero3_after_backward();
        self.rec.end(&self.mem);
    }

    /// The backward of the nodes of `range`, last to first, from the gradients in `out_grad`
    /// (gradients for values before the range are left there).
    #[allow(clippy::too_many_arguments)]
    fn backward_range(
        &mut self,
        range: std::ops::Range<usize>,
        saved: &mut SavedSets,
        grads: &mut [Option<BufId>],
        rules: &[rules::OpRule],
        scratch: &mut Scratch,
        out_grad: &mut [Option<BufId>],
        grad_contig: &mut [bool],
    ) {
        let graph = self.graph;
        for k in range.rev() {
            self.fsdp_pre_backward(k);
            self.zero3_pre_backward(k);
            let Some(g_out) = out_grad[k].take() else {
                self.fsdp_post_backward(k, grads);
                self.zero3_post_backward(k, grads);
                // Not on a path to the loss, or no gradient flows here.
                saved.release(k, &mut self.mem);
                continue;
            };
            let contig = grad_contig[k];
            let rule = &rules[self.rule_of[k] as usize];
            let high = self
                .backward_node(k, g_out, contig, saved, grads, rule, scratch)
                .max(self.tp_post_backward(k));
            let summed = self.accumulate(
                &graph.nodes[k].id,
                &mut scratch.produced,
                out_grad,
                grad_contig,
            );
            self.rec
                .event(&graph.nodes[k].id, high.max(summed), &self.mem);
            self.ds_hooks(k, grads);
            self.fsdp_post_backward(k, grads);
            self.zero3_post_backward(k, grads);
        }
    }

    /// Node `k`'s backward, given its incoming gradient: its parameters' gradients, and its
    /// inputs' gradients left in `scratch.produced` for [`Sim::accumulate`]. Returns the
    /// highest level it reached.
    #[allow(clippy::too_many_arguments)]
    fn backward_node(
        &mut self,
        k: usize,
        mut g_out: BufId,
        mut contig: bool,
        saved: &mut SavedSets,
        grads: &mut [Option<BufId>],
        rule: &rules::OpRule,
        scratch: &mut Scratch,
    ) -> u64 {
        let node = &self.graph.nodes[k];
        let values = self.values;
        let args = values.args(k);
        self.mem.at(&node.id);
        // CUDA: autograd's device thread has its own cuBLAS handle and workspace.
        if self.backend.is_cuda() && rule.cublas && !self.workspace.backward {
            self.workspace.backward = true;
            self.mem.alloc(cuda::CUBLAS_WORKSPACE, Kind::Workspaces);
        }
        // An op that reads its gradient as a contiguous matrix (a linear on a 3-d input, a
        // conv, a norm) copies a non-contiguous one first; the original goes if unshared.
        let input_rank = self.values.shape(args[0] as usize).rank();
        let copies = !contig
            && (rule.needs_contiguous_input
                || node
                    .op
                    .family()
                    .copies_strided_gradient(&node.op, input_rank));
        let mut early_high = 0;
        if copies {
            let bytes = self.value_bytes[self.values.node_value(k)];
            let copy = self.mem.alloc(bytes, Kind::ActivationGradients);
            early_high = self.rec.high(&node.id, &self.mem);
            self.mem.release(g_out);
            g_out = copy;
            contig = true;
        }
        scratch.transients.clear();
        scratch.done_params.clear();
        if let Some(peak) = &rule.backward_peak {
            let peak_extra = if self.mem.bufs[g_out].refs > 1 {
                peak.held
            } else {
                peak.freed
            };
            // A compound op: its inner peak, with the gradients of the parameters used last
            // in forward already made; then what it saved and its incoming gradient go.
            let mut t = Vec::new();
            for &i in &peak.params {
                if let Some(&p) = self.node_params[k].get(i) {
                    t.extend(self.param_grad(p, grads));
                    scratch.done_params.push(p);
                }
            }
            self.mem.peak(peak_extra);
            early_high = early_high.max(self.rec.high_plus(&node.id, &self.mem, peak_extra));
            for b in t {
                self.mem.release(b);
            }
            saved.release(k, &mut self.mem);
        } else {
            scratch
                .transients
                .push(self.mem.alloc(rule.backward_transient, Kind::Transients));
        }
        self.input_grads(k, rule, g_out, contig, scratch);
        // Parameter gradients: the first contribution becomes `.grad`; a later one (a tied
        // table used twice) is added in place and its buffer freed.
        // Under autocast the op makes bf16 gradients of its bf16 weight copies; each cast's
        // ToCopyBackward then makes the fp32 `.grad` (below).
        scratch.bf16_param_grads.clear();
        for i in 0..self.node_params[k].len() {
            let p = self.node_params[k][i];
            if !scratch.done_params.contains(&p) {
                if rule.bf16_param_grads {
                    let b = self.mem.alloc(self.params[p].bytes / 2, Kind::Transients);
                    scratch.bf16_param_grads.push((p, b));
                } else {
                    let t = self.param_grad(p, grads);
                    scratch.transients.extend(t);
                }
            }
        }
        let mut high = self.rec.high(&node.id, &self.mem).max(early_high);
        for &t in &scratch.transients {
            self.mem.release(t);
        }
        self.mem.release(g_out);
        saved.release(k, &mut self.mem);
        // The casts' backward: fp32 parameter gradients, then the inputs' gradients in their
        // own dtype; each op-side gradient goes once converted.
        for &(p, b) in &scratch.bf16_param_grads {
            let extra = self.param_grad(p, grads);
            high = high.max(self.rec.high(&node.id, &self.mem));
            if let Some(t) = extra {
                self.mem.release(t);
            }
            self.mem.release(b);
        }
        for item in scratch.produced.iter_mut() {
            if scratch.casts.contains(&item.1) {
                let converted = self.mem.alloc(item.3, Kind::ActivationGradients);
                high = high.max(self.rec.high(&node.id, &self.mem));
                self.mem.release(item.1);
                item.1 = converted;
            }
        }
        high
    }

    /// Node `k`'s inputs' gradients from its incoming gradient `g_out` (`contig`: whether it is
    /// contiguous), left in `scratch.produced`, those made at an autocast cast's dtype also in
    /// `scratch.casts`.
    fn input_grads(
        &mut self,
        k: usize,
        rule: &rules::OpRule,
        g_out: BufId,
        contig: bool,
        scratch: &mut Scratch,
    ) {
        let node = &self.graph.nodes[k];
        let args = self.values.args(k);
        // Gradients for the inputs.
        scratch.produced.clear();
        // Gradients made at an autocast cast's dtype, converted once the op is done.
        scratch.casts.clear();
        for (i, &v) in args.iter().enumerate() {
            let v = v as usize;
            let Some(j) = self.values.as_node(v) else {
                continue; // graph inputs never require grad
            };
            if !self.requires_grad[j] {
                continue;
            }
            let bytes = self.value_bytes[v];
            let (g, c) = match rule.grads.get(i).copied().unwrap_or(Grad::New) {
                Grad::None => continue,
                Grad::New => (self.mem.alloc(bytes, Kind::ActivationGradients), true),
                Grad::ViaCast(op_bytes) => {
                    // The op's gradient at its cast copy's dtype; converted below.
                    let g = self.mem.alloc(op_bytes, Kind::ActivationGradients);
                    scratch.casts.push(g);
                    (g, true)
                }
                Grad::OfOutput => match &node.op {
                    // Reshaping a non-contiguous gradient copies it.
                    op if op.family().regroups(op) && !contig => {
                        (self.mem.alloc(bytes, Kind::ActivationGradients), true)
                    }
                    _ if rule.grad_reshapes && !contig => {
                        (self.mem.alloc(bytes, Kind::ActivationGradients), true)
                    }
                    _ => {
                        self.mem.retain(g_out);
                        // A permute's, a concat's slices', a prepended token's: the family's.
                        let c = node.op.family().gradient_contiguous(
                            &node.op,
                            rule.output_contiguous,
                            contig,
                            node.output.rank(),
                        );
                        (g_out, c)
                    }
                },
            };
            scratch.produced.push((j, g, c, bytes));
        }
    }

    /// Accumulates the gradients a node produced into its inputs' gradient buffers, as torch's
    /// `InputBuffer::accumulate` (torch/csrc/autograd/input_buffer.cpp) does: in place into the
    /// old gradient when this is its only holder and it is dense (`old_var.add_(var)`), else in
    /// place into the new one under the same condition (`var.add_(old_var)`), else
    /// `old_var + var`: a new tensor of the value's own shape (not of the buffer a slice came
    /// from: a concat's gradient slice keeps the whole concat gradient alive, but the sum is the
    /// value's size). Returns the highest level it reached (0 if it made no sum).
    fn accumulate(
        &mut self,
        node: &str,
        produced: &mut Vec<(usize, BufId, bool, u64)>,
        out_grad: &mut [Option<BufId>],
        grad_contig: &mut [bool],
    ) -> u64 {
        let mut high = 0;
        for (j, g, c, value_bytes) in produced.drain(..) {
            match out_grad[j] {
                None => {
                    out_grad[j] = Some(g);
                    grad_contig[j] = c;
                }
                Some(old) => {
                    if self.mem.bufs[old].refs == 1 && old != g && grad_contig[j] {
                        // In place into the existing buffer; the new one is freed.
                        self.mem.release(g);
                    } else if self.mem.bufs[g].refs == 1 && old != g && c {
                        // In place into the new buffer; the old one goes.
                        self.mem.release(old);
                        out_grad[j] = Some(g);
                        grad_contig[j] = true;
                    } else {
                        let sum = self.mem.alloc(value_bytes, Kind::ActivationGradients);
                        high = high.max(self.rec.high(node, &self.mem));
                        self.mem.release(old);
                        self.mem.release(g);
                        out_grad[j] = Some(sum);
                        grad_contig[j] = true;
                    }
                }
            }
        }
        high
    }

    /// Makes parameter `p`'s gradient: the first contribution becomes `.grad`; a later one (a
    /// tied table used twice) is a transient added in place, returned to be freed.
    fn param_grad(&mut self, p: usize, grads: &mut [Option<BufId>]) -> Option<BufId> {
        let bytes = self.params[p].bytes;
        match grads[p] {
            None => {
                grads[p] = Some(self.mem.alloc(bytes, Kind::Gradients));
                None
            }
            Some(_) => Some(self.mem.alloc(bytes, Kind::Transients)),
        }
    }

    fn optimizer(
        &mut self,
        step: u32,
        grads: &mut [Option<BufId>],
        states: &mut [Option<(BufId, BufId)>],
    ) {
        if self.ds.is_some() {
            return self.ds_step(step);
        }
        if self.fsdp.is_some() {
            return self.fsdp_step(step);
        }
        if self.zero3.is_some() {
            return self.zero3_step(step);
        }
        self.begin(step, format!("step{step}.optimizer"));
        if self.states_first {
            for p in 0..self.params.len() {
                if grads[p].is_some() && states[p].is_none() {
                    self.mem.at(&self.params[p].label);
                    let bytes = self.params[p].bytes;
                    let a = self.mem.alloc(bytes, Kind::OptimizerState);
                    let b = self.mem.alloc(bytes, Kind::OptimizerState);
                    states[p] = Some((a, b));
                }
            }
        }
        for p in 0..self.params.len() {
            if grads[p].is_none() {
                continue; // libtorch's AdamW skips a parameter without a gradient
            }
            if self.owned.as_ref().is_some_and(|o| !o[p]) {
                continue; // ZeRO-1: another rank's optimizer steps it
            }
            let bytes = self.params[p].bytes;
            self.mem.at(&self.params[p].label);
            if states[p].is_none() {
                let a = self.mem.alloc(bytes, Kind::OptimizerState);
                let b = self.mem.alloc(bytes, Kind::OptimizerState);
                states[p] = Some((a, b));
            }
            // `exp_avg_sq.sqrt()` and its quotient by the bias correction: two tensors (on
            // CPU also three float32 scalars; on CUDA scalars are CPU wrapped numbers).
            let t: [Option<BufId>; 2] = if self.backend.is_cuda() {
                [
                    Some(self.mem.alloc(bytes, Kind::Transients)),
                    Some(self.mem.alloc(bytes, Kind::Transients)),
                ]
            } else {
                [
                    Some(
                        self.mem
                            .alloc(rules::adamw_transient(bytes), Kind::Transients),
                    ),
                    None,
                ]
            };
            let high = self.rec.high(&self.params[p].label, &self.mem);
            for b in t.into_iter().flatten() {
                self.mem.release(b);
            }
            self.rec.event(&self.params[p].label, high, &self.mem);
        }
        // zero_grad(): gradients set to None.
        for g in grads.iter_mut() {
            if let Some(b) = g.take() {
                self.mem.release(b);
            }
        }
        self.rec.event("zero_grad", self.mem.total(), &self.mem);
        self.rec.end(&self.mem);
    }
}

/// The rule for `node` at `batch` on `backend`, with the element size of every value: the
/// `cuda-bf16-autocast` table's ([`cuda::rule`]) or the cpu-fp32 table's.
fn rule(
    graph: &Graph,
    k: usize,
    batch: u64,
    backend: Backend,
    values: &rules::Values,
) -> rules::OpRule {
    if backend.is_cuda() {
        return cuda::rule(graph, k, batch, values);
    }
    rules::cpu_rule(graph, k, batch, values)
}

/// The trainable parameters in the harness's creation order (owning embedding tables first, in
/// node order, then every other node's tensors in node order), and for each node the indices
/// of the parameter tensors its backward produces gradients for (a tie points at the owner's
/// table).
fn parameters(graph: &Graph, backend: Backend) -> (Vec<Param>, Vec<Vec<usize>>) {
    let mut params = Vec::new();
    let mut node_params = vec![Vec::new(); graph.nodes.len()];
    let mut table_of: crate::name_hash::NameMap<&str, usize> = Default::default();
    let owns_table = |op: &Op| op.family().table(op).is_some_and(|t| !t.tied);
    for (k, n) in graph.nodes.iter().enumerate() {
        if owns_table(&n.op) {
            for (i, shape) in n.op.parameter_tensors().iter().enumerate() {
                let bytes = shape.iter().product::<u64>() * 4;
                table_of.insert(n.id.as_str(), params.len());
                node_params[k].push(params.len());
                params.push(Param {
                    label: format!("{}#{i}", n.id),
                    bytes,
                    rank: shape.len(),
                    rows: shape.first().copied().unwrap_or(1),
                    init_transient: 0,
                });
            }
        }
    }
    // A generic node's parameters by name: a later node naming one shares it.
    let mut named: std::collections::HashMap<&str, usize> = Default::default();
    for (k, n) in graph.nodes.iter().enumerate() {
        if owns_table(&n.op) {
            continue;
        }
        if let Some(a) = n.op.as_generic() {
            for p in &a.params {
                let at = *named.entry(p.name.as_str()).or_insert_with(|| {
                    params.push(Param {
                        label: format!("{}#{}", n.id, p.name),
                        bytes: p.shape.iter().product::<u64>() * 4,
                        rank: p.shape.len(),
                        rows: p.shape.first().copied().unwrap_or(1),
                        init_transient: 0,
                    });
                    params.len() - 1
                });
                node_params[k].push(at);
            }
            continue;
        }
        let tensors = n.op.parameter_tensors();
        let count = tensors.len();
        for (i, shape) in tensors.iter().enumerate() {
            let bytes = shape.iter().product::<u64>() * 4;
            // tch's `randn * std + mean` init holds a second copy while it runs, and 12 bytes
            // of scalars (calibrated on the single-op fixtures: chosen to match, not derived).
            let randn_scaled = n.op.family().randn_init(&n.op, i, count);
            node_params[k].push(params.len());
            // On CUDA the scalars are CPU wrapped numbers: no device memory.
            let scalars = if backend.is_cuda() { 0 } else { 12 };
            params.push(Param {
                label: format!("{}#{i}", n.id),
                bytes,
                rank: shape.len(),
                rows: shape.first().copied().unwrap_or(1),
                init_transient: if randn_scaled { bytes + scalars } else { 0 },
            });
        }
        let tie = n.op.family().tie(&n.op).map(|t| t.target);
        if let Some(&p) = tie.and_then(|t| table_of.get(t)) {
            node_params[k].push(p);
        }
    }
    (params, node_params)
}

/// The kinds, in breakdown order (for renderers).
pub fn kinds() -> &'static [Kind] {
    &KINDS
}
