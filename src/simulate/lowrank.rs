//! LoRA and QLoRA in the simulator: which tensors exist, and for how long, when the base is
//! frozen and low-rank adapters train (`memcal-measure run --strategy lora[:r=R]` and
//! `qlora[:r=R]`, `measurement/src/strategies.rs`).
//!
//! - Targets: every linear map inside a block (`block_of`), the four projections of attention,
//!   MLA's projections, a MoE's router and every expert's w1, w3, w2 (`lins_mut`); a tied linear
//!   is not one here (its weight is an embedding's table).
//! - Parameters: the base as plain training builds it, then per target (node order, projection
//!   order) `A` `[r, in]` and `B` `[out, r]`; only the adapters train: no gradient and no AdamW
//!   state for the base.
//! - What autograd saves follows from which inputs require a gradient: torch's generated
//!   autograd code saves an input of a multi-input op only when a derivative that reads it is
//!   needed (`tools/autograd/gen_variable_type.py`, `guard_for`: `should_compute_output`), so a
//!   frozen linear does not save its input for its weight's gradient (`mm`'s `mat2` derivative
//!   reads `self`), and an op whose inputs and parameters all need no gradient saves nothing.
//! - A target linear runs `base + x.linear(A).linear(B)` (`Lin::fwd`): its input is saved by
//!   the adapter's first `mm` (for A's gradient), its `x·Aᵀ` (`tokens x r`) by the second (for
//!   B's); the base and adapter outputs exist with their sum for a moment. In backward the
//!   adapter path's input gradient is made first (higher sequence numbers run first), then the
//!   base path's, added into it in place (`InputBuffer::accumulate`).
//! - QLoRA: each target weight is packed (`Packed::quantize`: codes `numel / 2` bytes, fp32
//!   absmax a 64-element block, a 16-float table) at load, its fp32 weight freed; every use
//!   dequantizes it in chunks into a new fp32 weight that lives for the call, or, where `mm`
//!   saves it for its input's gradient, until that backward ([`Saved::Kept`]).

use super::rules::{OpRule, Saved, Sizes, Values};
use super::Param;
use crate::graph::Graph;
use crate::ops::family::LoraCall;
use crate::ops::Op;
use crate::strategy::memory::block_of;

/// Elements an absmax block (`strategies::BLOCK`).
pub const BLOCK: u64 = 64;

/// The adapters' rank and whether the base is 4-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LowRank {
    pub r: u64,
    pub quantize: bool,
}

/// One target matrix: its node, its base weight among the parameters, its shape and its
/// adapters' indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub node: usize,
    pub base: usize,
    pub out: u64,
    pub inp: u64,
    pub a: usize,
    pub b: usize,
}

/// The target matrices of node `k`: (index into `parameter_tensors()`, out, in), in the
/// harness's `lins_mut` order.
pub fn target_matrices(graph: &Graph, k: usize) -> Vec<(usize, u64, u64)> {
    let n = &graph.nodes[k];
    if block_of(&n.id).is_none() {
        return Vec::new();
    }
    let take = n.op.family().lora_targets(&n.op);
    n.op.parameter_tensors()
        .iter()
        .enumerate()
        .filter(|(_, d)| d.len() == 2)
        .take(take)
        .map(|(i, d)| (i, d[0], d[1]))
        .collect()
}

/// Adds the adapters to the parameters (after the base, as `apply_low_rank` creates them) and
/// leaves in `node_params` only what trains: each node's adapters. An error when the graph
/// has no target (the harness refuses it too).
pub(super) fn adapt(
    graph: &Graph,
    lr: LowRank,
    params: &mut Vec<Param>,
    node_params: &mut [Vec<usize>],
) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for (k, trainable) in node_params.iter_mut().enumerate() {
        let base = std::mem::take(trainable);
        let id = &graph.nodes[k].id;
        for (j, (i, out, inp)) in target_matrices(graph, k).into_iter().enumerate() {
            let Some(&w) = base.get(i) else { continue };
            let a = params.len();
            for (name, bytes, rows) in [("a", lr.r * inp * 4, lr.r), ("b", out * lr.r * 4, out)] {
                params.push(Param {
                    label: format!("{id}#lora_{name}{j}"),
                    bytes,
                    rank: 2,
                    rows,
                    init_transient: 0,
                });
            }
            trainable.extend([a, a + 1]);
            targets.push(Target {
                node: k,
                base: w,
                out,
                inp,
                a,
                b: a + 1,
            });
        }
    }
    if targets.is_empty() {
        return Err(format!(
            "graph `{}` has no linear, attention or MoE projection inside a block: LoRA has nothing to adapt",
            graph.name
        ));
    }
    Ok(targets)
}

/// Blocks of a packed `[out, in]` weight.
pub fn blocks(out: u64, inp: u64) -> u64 {
    (out * inp).div_ceil(BLOCK)
}

/// Bytes a packed weight keeps: codes (two a byte), fp32 absmax a block, the 16-float table.
pub fn packed_bytes(out: u64, inp: u64) -> (u64, u64, u64) {
    let nb = blocks(out, inp);
    (nb * BLOCK / 2, nb * 4, 16 * 4)
}

/// `Packed::quantize`'s highest point over its own kept tensors: the statement computing
/// absmax holds `|blocks|` (fp32, padded) and the unclamped amax; each chunk of up to 1024
/// blocks holds its scaled blocks (`len x 64` fp32), the `len x 64 x 16` difference to the
/// table and its absolute value (fp32), the int64 argmin and its uint8 cast (temporaries of
/// one statement, freed at its end). A weight whose size is not a multiple of 64 is first
/// copied, padded (that copy is counted here too).
pub fn quantize_transient(out: u64, inp: u64) -> u64 {
    let nb = blocks(out, inp);
    let padded = if !(out * inp).is_multiple_of(BLOCK) {
        nb * BLOCK * 4
    } else {
        0
    };
    let absmax = nb * BLOCK * 4 + nb * 4;
    let len = nb.min(1024);
    let chunk = len * (BLOCK * 4 + 2 * BLOCK * 16 * 4 + BLOCK * 8 + BLOCK);
    padded + absmax.max(chunk)
}

/// Bytes of a dequantized weight (`[blocks, 64]` fp32, narrowed to the weight).
pub fn dequantized_bytes(out: u64, inp: u64) -> u64 {
    blocks(out, inp) * BLOCK * 4
}

/// `Packed::dequantize`'s chunk temporaries beside the output weight: chunks of
/// `max(blocks / 8, 256)` blocks; the codes' two nibbles (uint8), their stack and its int32
/// cast (one statement), then the int32 indices with the looked-up values and their product
/// with absmax (fp32): 768 bytes a block at the second statement, the larger.
pub fn dequantize_transient(out: u64, inp: u64) -> u64 {
    let nb = blocks(out, inp);
    let len = (nb / 8).max(256).min(nb);
    len * (BLOCK * 4 * 3)
}

/// Tokens each target of node `k` is applied to, with its (out, in), in target order.
fn target_tokens(s: &Sizes, graph: &Graph, k: usize) -> Vec<(u64, u64, u64)> {
    let mats = target_matrices(graph, k);
    let node = &graph.nodes[k];
    mats.iter()
        .enumerate()
        .map(|(j, &(_, out, inp))| (node.op.family().lora_tokens(&node.op, s, j, inp), out, inp))
        .collect()
}

/// The rule of a node holding no target under LoRA: its parameters (if any) are frozen.
fn frozen(mut r: OpRule, op: &Op) -> OpRule {
    op.family().lora_frozen(op, &mut r);
    r
}

/// The rule of node `k` under LoRA (QLoRA with `lr.quantize`), from its plain rule: a target's
/// adapters, a frozen linear's unsaved input, a frozen RMSNorm's unsaved `x * rstd`. `x_grad`:
/// whether its input requires a gradient.
pub(super) fn rule(
    mut r: OpRule,
    graph: &Graph,
    k: usize,
    batch: u64,
    values: &Values,
    lr: LowRank,
    x_grad: bool,
) -> OpRule {
    let node = &graph.nodes[k];
    let s = Sizes {
        node,
        k,
        batch,
        e: 4,
        values,
    };
    let targets = target_tokens(&s, graph, k);
    if targets.is_empty() {
        return frozen(r, &node.op);
    }
    let rank = lr.r;
    let family = node.op.family();
    let u_total: u64 = family
        .lora_adapter_bytes(&node.op, &s, rank)
        .unwrap_or_else(|| targets.iter().map(|(t, _, _)| t * rank * 4).sum());
    let eager = family.is_eager_attention(&node.op);
    if eager {
        // Eager attention's output projection runs last: its base and adapter outputs exist
        // with their sum (the op's output) and its `x·Aᵀ`, beside everything else the op holds
        // then; under no_grad the other projections' `x·Aᵀ` are gone by then.
        let (t, o, _) = targets[targets.len() - 1];
        let last = 2 * t * o * 4 + t * rank * 4;
        r.forward_transient += 2 * t * o * 4;
        r.forward_transient_no_grad = Some(r.forward_transient_no_grad.unwrap_or(0) + last);
        // In backward the output projection runs first and releases what it saved (its
        // `x·Aᵀ`, under QLoRA its dequantized weight) before the op's inner peak.
        let (_, _, i) = targets[targets.len() - 1];
        let released = t * rank * 4
            + if lr.quantize {
                dequantized_bytes(o, i)
            } else {
                0
            };
        if let Some(p) = r.backward_peak.as_mut() {
            p.freed = p.freed.saturating_sub(released);
            p.held = p.held.saturating_sub(released);
        }
        r.saved.push(Saved::Kept {
            what: "adapters' x·Aᵀ (tokens x r each, saved for B's gradient)",
            bytes: u_total,
        });
    } else {
        r.saved.push(Saved::Internal {
            what: "adapters' x·Aᵀ (tokens x r each, saved for B's gradient)",
            bytes: u_total,
        });
    }
    family.lora_frozen_inner(&node.op, &s, &mut r);
    // The relative-position table is frozen: its `index_select` saves no indices.
    r.saved
        .retain(|x| !matches!(x, Saved::Kept { what, .. } if what.starts_with("bucket indices")));
    if lr.quantize {
        let w: u64 = targets
            .iter()
            .map(|&(_, o, i)| dequantized_bytes(o, i))
            .sum();
        r.saved.push(Saved::Kept {
            what: "dequantized fp32 weights (saved by mm for the input's gradient)",
            bytes: w,
        });
        // One dequantized weight, its chunk temporaries, then with the base output.
        let deq = targets
            .iter()
            .map(|&(t, o, i)| dequantized_bytes(o, i) + dequantize_transient(o, i).max(t * o * 4))
            .max()
            .unwrap_or(0);
        r.forward_peak = Some(r.forward_peak.unwrap_or(0).max(deq));
    }
    let lora = LoraCall {
        targets,
        rank,
        x_grad,
        quantize: lr.quantize,
    };
    if !family.lora_single(&node.op, &mut r, &lora) {
        let targets = &lora.targets;
        // A compound op: the output projection's adapters (the last pair) have their
        // gradients by the inner peak (its base weight is frozen).
        if let Some(p) = r.backward_peak.as_mut() {
            let last = 2 * (targets.len() - 1);
            p.params = if p.params.is_empty() {
                Vec::new()
            } else {
                vec![last, last + 1]
            };
        }
        r.note = "adapted compound op: as plain (the adapters' first mm saves each projection's input, which the op saved already), plus every projection's x·Aᵀ";
    }
    r
}
