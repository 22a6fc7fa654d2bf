//! The harness's strategy protocols (`memcal-measure run --strategy SPEC`):
//!
//! - `checkpoint[:every=K]`: torch.utils.checkpoint's semantics done by hand (tch has no
//!   custom autograd function): the graph is cut into stages; a checkpointed stage (K
//!   consecutive blocks) runs its forward under no_grad keeping only its boundary inputs; the
//!   backward re-runs it from those inputs with gradients and backpropagates through it.
//! - `lora[:r=R]`: base weights frozen (`requires_grad` false), adapters A `[R, in]` and B
//!   `[out, R]` on every linear, attention and MoE projection inside a block; AdamW over the
//!   adapters alone.
//! - `qlora[:r=R]`: as LoRA, the target base weights stored as packed 4-bit NF4 (two codes a
//!   byte) with an fp32 absmax per 64-element block, dequantized to fp32 on every use. Since
//!   tch has no custom autograd function, "dequantize again in backward" is done by making each
//!   node that holds a 4-bit target a recomputed stage (its forward under no_grad; its backward
//!   re-runs it from its input, dequantizing again), so no dequantized weight outlives its use.
//!   The paged optimizer (CUDA-only) is not used.
//! - `inference:prompt=P,decode=N`: no gradients; a prefill of P tokens, then N greedy decode
//!   steps of one token, each appending K and V (MLA: its compressed latent) to a cache tensor
//!   per attention layer, allocated for P + N tokens at the prefill.

use crate::builder::{Lin, Model, Module};
pub use crate::nf4::{Packed, BLOCK};
use memcal::graph::Graph;
use memcal::strategy::memory::block_of;
use memcal::strategy::{Kind as SKind, RowSpec};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use tch::nn::{self, Init};
use tch::{Kind, Tensor};

/// The strategies the harness can run, from a row spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol {
    /// Blocks a checkpointed segment (None: no checkpointing).
    pub checkpoint_every: Option<u64>,
    /// LoRA rank, and whether the base is 4-bit.
    pub low_rank: Option<(u64, bool)>,
    /// Inference (prompt, decode).
    pub inference: Option<(u64, u64)>,
    /// ZeRO-1 over this world: rank 0's layout, emulated in one process ([`ShardedAdamW`]).
    pub zero1_world: Option<u64>,
}

/// Which parts of a spec the harness has a protocol for; an error names the part that has none.
pub fn protocol(spec: &RowSpec) -> Result<Protocol, String> {
    let mut p = Protocol {
        checkpoint_every: None,
        low_rank: None,
        inference: None,
        zero1_world: None,
    };
    match spec {
        RowSpec::Inference { prompt, decode } => p.inference = Some((*prompt, *decode)),
        RowSpec::Generate { .. } => {
            return Err(format!(
                "`{}`: transformers' generate is measured in Python (python3 -m memcal_export.generate, exporter/README.md), not by the harness; its own inference protocol is `inference:prompt=P,decode=N`",
                spec.label()
            ))
        }
        RowSpec::Training(s) => {
            for part in &s.parts {
                match part.kind {
                    SKind::Checkpoint => p.checkpoint_every = Some(part.get("every")),
                    SKind::Lora => p.low_rank = Some((part.get("r"), false)),
                    SKind::Qlora => p.low_rank = Some((part.get("r"), true)),
                    SKind::Zero1 => p.zero1_world = Some(part.get("world")),
                    other => {
                        return Err(format!(
                            "`{part}`: the harness has no protocol for {other:?} (no distributed backend, no 8-bit optimizer): `memcal plan` gives its formula"
                        ))
                    }
                }
            }
        }
    }
    Ok(p)
}

/// ZeRO-1's optimizer on one rank, emulated in one process: full weights and full gradients
/// (every rank holds them), AdamW states for rank 0's shard alone (the first
/// ceil(numel / world) elements of each parameter, the largest shard), and the update of that
/// shard. torch's AdamW arithmetic (decoupled weight decay 0.01, bias correction), on a flat
/// view. No other rank exists: no all-gather of the updated shards is run (it writes into the
/// full weights in place, allocating nothing beyond a communication buffer not modelled here).
pub struct ShardedAdamW {
    world: u64,
    step: i32,
    states: Vec<(Tensor, Tensor)>,
}

impl ShardedAdamW {
    pub fn new(world: u64) -> ShardedAdamW {
        ShardedAdamW {
            world,
            step: 0,
            states: Vec::new(),
        }
    }

    /// One AdamW step over rank 0's shard of every parameter with a gradient.
    pub fn step(&mut self, params: &[Tensor], lr: f64) {
        let _g = tch::no_grad_guard();
        let (b1, b2, eps, wd) = (0.9f64, 0.999f64, 1e-8, 0.01);
        self.step += 1;
        let (c1, c2) = (1.0 - b1.powi(self.step), 1.0 - b2.powi(self.step));
        for (i, p) in params.iter().enumerate() {
            let grad = p.grad();
            if !grad.defined() {
                continue;
            }
            let n = p.numel() as i64;
            let len = (n + self.world as i64 - 1) / self.world as i64;
            if self.states.len() <= i {
                let z = || Tensor::zeros([len], (Kind::Float, p.device()));
                self.states.push((z(), z()));
            }
            let (m, v) = &mut self.states[i];
            let mut w = p.view([-1]).narrow(0, 0, len);
            let g = grad.view([-1]).narrow(0, 0, len);
            let _ = w.g_mul_scalar_(1.0 - lr * wd);
            let _ = m.g_mul_scalar_(b1).g_add_(&(&g * (1.0 - b1)));
            let _ = v.g_mul_scalar_(b2).g_add_(&(&g * &g * (1.0 - b2)));
            let denom = (&*v / c2).sqrt() + eps;
            let _ = w.g_sub_(&(&*m / &denom * (lr / c1)));
        }
    }
}

/// The linear maps of a module (the projections inside attention and MoE too).
fn lins_mut(m: &mut Module) -> Vec<&mut Lin> {
    match m {
        Module::Linear(l) => vec![l],
        Module::Mha { q, k, v, o, .. } | Module::Gqa { q, k, v, o, .. } => vec![q, k, v, o],
        Module::Mla {
            q_a,
            q,
            kv_a,
            kv_b,
            o,
            ..
        } => {
            let mut v: Vec<&mut Lin> = Vec::new();
            if let Some((a, _)) = q_a {
                v.push(a);
            }
            v.extend([q, kv_a, kv_b, o]);
            v
        }
        Module::Moe {
            router, experts, ..
        } => {
            let mut v: Vec<&mut Lin> = vec![router];
            for (a, b, c) in experts.iter_mut() {
                v.extend([a, b, c]);
            }
            v
        }
        _ => Vec::new(),
    }
}

/// LoRA (or QLoRA with `quantize`) at rank `r` on every linear map inside a block; freezes the
/// base. Returns the number of target matrices (an error when the graph has none).
pub fn apply_low_rank(model: &mut Model, r: u64, quantize: bool) -> anyhow::Result<usize> {
    model.vs.freeze();
    let adapters = nn::VarStore::new(model.device);
    let root = adapters.root();
    let mut targets = 0;
    for (k, n) in model.graph.nodes.iter().enumerate() {
        if block_of(&n.id).is_none() {
            continue;
        }
        let p = root.sub(n.id.replace('.', "_"));
        for (j, lin) in lins_mut(&mut model.modules[k]).into_iter().enumerate() {
            let (out, inp) = (lin.w.size()[0], lin.w.size()[1]);
            let a = p.var(
                &format!("lora_a{j}"),
                &[r as i64, inp],
                nn::init::DEFAULT_KAIMING_UNIFORM,
            );
            let b = p.var(&format!("lora_b{j}"), &[out, r as i64], Init::Const(0.));
            lin.lora = Some((a, b));
            if quantize {
                lin.packed = Some(Packed::quantize(&lin.w));
                let mut w = lin.w.shallow_clone();
                w.set_data(&Tensor::empty([0], (Kind::Float, model.device)));
            }
            targets += 1;
        }
    }
    if targets == 0 {
        anyhow::bail!(
            "graph `{}` has no linear, attention or MoE projection inside a block: LoRA has nothing to adapt",
            model.graph.name
        );
    }
    model.adapters = Some(adapters);
    Ok(targets)
}

/// A stage of the staged forward: a range of nodes, recomputed in backward or kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub nodes: Range<usize>,
    pub recompute: bool,
}

/// The stages of a protocol: segments of `every` consecutive blocks (checkpointing), else each
/// node holding a 4-bit target (QLoRA); the nodes between are kept stages. None: no staging.
pub fn stages(graph: &Graph, p: &Protocol) -> Option<Vec<Stage>> {
    let quantized = p.low_rank.is_some_and(|(_, q)| q);
    let ranges = memcal::strategy::stages::ranges(graph, p.checkpoint_every, quantized)?;
    Some(
        ranges
            .into_iter()
            .map(|(nodes, recompute)| Stage { nodes, recompute })
            .collect(),
    )
}

/// What the staged forward keeps for the backward.
pub struct Tape {
    stages: Vec<Record>,
}

struct Record {
    stage: Stage,
    /// A recomputed stage's inputs (the boundary it is re-run from).
    inputs: Vec<(String, Tensor)>,
    /// Outputs used after the stage: the tensor with its graph (kept stages; None for
    /// recomputed ones) and the leaf the later stages read.
    outputs: Vec<(String, Option<Tensor>, Tensor)>,
}

/// Runs the nodes of `range` over `env` (values by name), releasing each value after its last
/// use inside the range unless it is in `keep`.
fn run_range(
    model: &Model,
    range: Range<usize>,
    env: &mut HashMap<String, Tensor>,
    keep: &HashSet<&str>,
    batch: u64,
) {
    let g = &model.graph;
    let mut last: HashMap<&str, usize> = HashMap::new();
    for k in range.clone() {
        for i in &g.nodes[k].inputs {
            last.insert(i.as_str(), k);
        }
    }
    for k in range {
        let n = &g.nodes[k];
        let args: Vec<&Tensor> = n
            .inputs
            .iter()
            .map(|name| {
                env.get(name)
                    .unwrap_or_else(|| panic!("node `{}`: value `{name}` is not available", n.id))
            })
            .collect();
        let y = model.node(k, &n.op, &args, batch);
        for i in &n.inputs {
            if last.get(i.as_str()) == Some(&k) && !keep.contains(i.as_str()) {
                env.remove(i);
            }
        }
        env.insert(n.id.clone(), y);
    }
}

/// A surrogate whose backward sends `grad` into `t`'s graph: Σ (t x grad), over the tensors
/// that have a graph.
fn surrogate(pairs: &[(&Tensor, Tensor)]) -> Option<Tensor> {
    pairs
        .iter()
        .filter(|(t, _)| t.requires_grad())
        .map(|(t, g)| (*t * g).sum(t.kind()))
        .reduce(|a, b| a + b)
}

impl Tape {
    /// The staged forward: returns the loss and the tape.
    pub fn forward(
        model: &Model,
        inputs: &HashMap<String, Tensor>,
        batch: u64,
        stages: &[Stage],
    ) -> (Tensor, Tape) {
        let g = &model.graph;
        let mut last_use: HashMap<&str, usize> = HashMap::new();
        for (k, n) in g.nodes.iter().enumerate() {
            for i in &n.inputs {
                last_use.insert(i.as_str(), k);
            }
        }
        let mut env: HashMap<String, Tensor> = inputs
            .iter()
            .map(|(k, v)| (k.clone(), v.shallow_clone()))
            .collect();
        let mut records = Vec::new();
        let mut loss = None;
        for st in stages {
            let r = st.nodes.clone();
            let produced: HashSet<&str> =
                g.nodes[r.clone()].iter().map(|n| n.id.as_str()).collect();
            let external: Vec<String> = {
                let mut v: Vec<String> = g.nodes[r.clone()]
                    .iter()
                    .flat_map(|n| n.inputs.iter())
                    .filter(|i| !produced.contains(i.as_str()))
                    .cloned()
                    .collect();
                v.sort();
                v.dedup();
                v
            };
            let live: Vec<String> = g.nodes[r.clone()]
                .iter()
                .map(|n| n.id.clone())
                .filter(|id| {
                    *id == g.loss || last_use.get(id.as_str()).is_some_and(|&k| k >= r.end)
                })
                .collect();
            let mut local: HashMap<String, Tensor> = external
                .iter()
                .map(|name| (name.clone(), env[name].shallow_clone()))
                .collect();
            let saved: Vec<(String, Tensor)> = if st.recompute {
                external
                    .iter()
                    .map(|n| (n.clone(), local[n].shallow_clone()))
                    .collect()
            } else {
                Vec::new()
            };
            let keep: HashSet<&str> = live.iter().map(String::as_str).collect();
            if st.recompute {
                tch::no_grad(|| run_range(model, r.clone(), &mut local, &keep, batch));
            } else {
                run_range(model, r.clone(), &mut local, &keep, batch);
            }
            let mut outputs = Vec::new();
            for name in &live {
                let t = local.remove(name).expect("a live output was computed");
                if *name == g.loss {
                    loss = Some(t);
                    continue;
                }
                // A recomputed stage ran under no_grad; its outputs need gradients (every block
                // holds trainable weights or adapters). A kept stage's do where its graph does.
                let grad = st.recompute || t.requires_grad();
                if t.is_floating_point() && grad {
                    let leaf = t.detach().set_requires_grad(true);
                    env.insert(name.clone(), leaf.shallow_clone());
                    outputs.push((name.clone(), (!st.recompute).then_some(t), leaf));
                } else {
                    env.insert(name.clone(), t);
                }
            }
            for name in &external {
                if last_use.get(name.as_str()).is_some_and(|&k| k < r.end) {
                    env.remove(name);
                }
            }
            records.push(Record {
                stage: st.clone(),
                inputs: saved,
                outputs,
            });
        }
        let loss = loss.unwrap_or_else(|| panic!("loss `{}` was not computed", g.loss));
        (loss, Tape { stages: records })
    }

    /// The staged backward: the loss's backward, then stage by stage in reverse, each stage's
    /// outputs' gradients sent into it (re-running a recomputed stage from its inputs first).
    pub fn backward(mut self, model: &Model, loss: Tensor, batch: u64) -> anyhow::Result<()> {
        loss.f_backward()?;
        drop(loss);
        while let Some(rec) = self.stages.pop() {
            let with_grad: Vec<(String, Tensor)> = rec
                .outputs
                .iter()
                .filter_map(|(n, _, leaf)| {
                    let g = leaf.grad();
                    g.defined().then(|| (n.clone(), g))
                })
                .collect();
            if with_grad.is_empty() {
                continue;
            }
            if rec.stage.recompute {
                let mut local: HashMap<String, Tensor> = rec
                    .inputs
                    .iter()
                    .map(|(n, t)| (n.clone(), t.shallow_clone()))
                    .collect();
                let keep: HashSet<&str> = with_grad.iter().map(|(n, _)| n.as_str()).collect();
                run_range(model, rec.stage.nodes.clone(), &mut local, &keep, batch);
                let pairs: Vec<(&Tensor, Tensor)> = with_grad
                    .iter()
                    .map(|(n, g)| (&local[n], g.shallow_clone()))
                    .collect();
                if let Some(s) = surrogate(&pairs) {
                    s.f_backward()?;
                }
            } else {
                let pairs: Vec<(&Tensor, Tensor)> = rec
                    .outputs
                    .iter()
                    .filter_map(|(n, t, _)| {
                        let g = with_grad.iter().find(|(m, _)| m == n)?;
                        Some((t.as_ref()?, g.1.shallow_clone()))
                    })
                    .collect();
                if let Some(s) = surrogate(&pairs) {
                    s.f_backward()?;
                }
            }
        }
        Ok(())
    }
}

/// Bytes of a protocol's packed weights (QLoRA), for tests.
pub fn packed_bytes(model: &Model) -> u64 {
    let mut total = 0;
    for m in &model.modules {
        let mut v = Vec::new();
        collect_packed(m, &mut v);
        total += v.iter().sum::<u64>();
    }
    total
}

fn collect_packed(m: &Module, out: &mut Vec<u64>) {
    let one = |l: &Lin, out: &mut Vec<u64>| {
        if let Some(p) = &l.packed {
            out.push(p.bytes());
        }
    };
    match m {
        Module::Linear(l) => one(l, out),
        Module::Mha { q, k, v, o, .. } | Module::Gqa { q, k, v, o, .. } => {
            for l in [q, k, v, o] {
                one(l, out);
            }
        }
        Module::Mla {
            q_a,
            q,
            kv_a,
            kv_b,
            o,
            ..
        } => {
            if let Some((a, _)) = q_a {
                one(a, out);
            }
            for l in [q, kv_a, kv_b, o] {
                one(l, out);
            }
        }
        Module::Moe {
            router, experts, ..
        } => {
            one(router, out);
            for (a, b, c) in experts {
                for l in [a, b, c] {
                    one(l, out);
                }
            }
        }
        _ => {}
    }
}
