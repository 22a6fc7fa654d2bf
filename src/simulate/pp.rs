//! Pipeline parallelism for one rank (`pp:stages=S,micro=M,schedule=gpipe|1f1b`), read from
//! torch 2.11's `torch.distributed.pipelining` (`PipelineStage`, `ScheduleGPipe`,
//! `Schedule1F1B`, `stage_backward`) and run the way `exporter/memcal_export/pipeline.py` cuts
//! the model:
//!
//! - **The stage** ([`stage_nodes`]): the blocks divided as evenly as can be, earlier stages
//!   taking the extra; the nodes before the first block (the embeddings) on stage 0, those
//!   after the last (the final norm, the head, the loss) on the last stage. One tensor crosses
//!   each cut (the hidden states).
//! - **Load**: every rank builds the whole model, keeps its stage's parameters and frees the
//!   rest. **Inputs**: every rank draws the whole batch; stage 0 reads micro-batch views of it.
//! - **The step** (`schedule.step`, one phase `pipeline`): at the first step the stage makes
//!   its receive buffers and keeps them (`_prepare_forward_infra`, `_prepare_backward_infra`:
//!   past the first stage one input activation a micro-batch, before the last one output
//!   gradient a micro-batch). Each micro-batch's forward runs the stage's nodes at batch / M and
//!   keeps what autograd saved and the stage's output (`fwd_cache`) to its backward; the last
//!   stage keeps every micro-batch's output (`output_chunks`, the logits) until the next step
//!   begins (`clear_runtime_states`) and returns them merged (`torch.cat`: a whole-batch copy,
//!   dropped by the caller). A backward starts from the loss (the last stage) or the received
//!   output gradient; parameter gradients accumulate over the micro-batches; the input's
//!   gradient is sent back (`stage_backward` drops the buffer's `.grad`).
//! - **Sends**: gloo's send work holds its tensor. GPipe keeps every send work of the step in a
//!   list until `_step_microbatches` returns: each micro-batch's output sent on and input
//!   gradient sent back live to the step's end. 1F1B waits each send before it makes the next:
//!   an output goes at its backward, an input gradient at the next one's send.
//! - **Order** ([`actions`]): GPipe runs every forward, then every backward; 1F1B runs
//!   `min(M, S - stage)` forwards, then one backward and one forward in turn, then the
//!   remaining backwards.
//! - **Optimizer**: torch's AdamW over the stage's parameters, every state made first.

use super::{rules, BufId, Kind, SavedSets, Scratch, Sim, Value, STEPS};
use crate::graph::Graph;
use crate::strategy::{Kind as SKind, Part};
use std::ops::Range;

/// One rank of a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pp {
    pub stages: u64,
    pub micro: u64,
    /// GPipe (every forward, then every backward); false: 1F1B.
    pub gpipe: bool,
    pub rank: u64,
}

impl Pp {
    /// The rule set's settings for `part` (rank 0), None for another part.
    pub fn of_part(part: &Part) -> Option<Pp> {
        (part.kind == SKind::Pp).then(|| Pp {
            stages: part.get("stages"),
            micro: part.get("micro").max(1),
            // `schedule`'s words: 0 1f1b, 1 gpipe.
            gpipe: part.get("schedule") == 1,
            rank: 0,
        })
    }
}

/// The nodes of stage `rank` of `stages` ([`stages`]).
pub fn stage_nodes(graph: &Graph, stages: u64, rank: u64) -> Result<Range<usize>, String> {
    let all = cut(graph, stages)?;
    all.get(rank as usize)
        .map(|s| s.0.clone())
        .ok_or_else(|| format!("pp: rank {rank} is not below stages {stages}"))
}

/// Every stage's nodes and how many blocks it holds: the blocks (`block_of`) divided as
/// `pipeline.py`'s `shares` divides them, earlier stages taking the extra; the nodes before
/// the first block on stage 0, those after the last on the last stage. An error where the
/// blocks are fewer than the stages or not contiguous, or where a cut carries more than one
/// tensor ([`check_cut`]).
fn cut(graph: &Graph, stages: u64) -> Result<Vec<(Range<usize>, u64)>, String> {
    // Each block's first and last node, in order.
    let mut blocks: Vec<(String, usize, usize)> = Vec::new();
    for (k, n) in graph.nodes.iter().enumerate() {
        let Some(b) = crate::strategy::memory::block_of(&n.id) else {
            continue;
        };
        let same = blocks.last().is_some_and(|x| x.0 == b);
        let contiguous = blocks.last().is_some_and(|x| x.2 + 1 == k);
        if (same && !contiguous) || (!same && blocks.iter().any(|x| x.0 == b)) {
            return Err(format!(
                "pp: block `{b}`'s nodes are not contiguous (node `{}`): a stage is a run of whole blocks",
                n.id
            ));
        }
        match blocks.last_mut() {
            Some(x) if same => x.2 = k,
            _ => blocks.push((b, k, k)),
        }
    }
    let n = blocks.len() as u64;
    if stages < 2 || stages > n {
        return Err(format!(
            "pp:stages={stages}: a pipeline has from 2 stages to one a block ({n} blocks)"
        ));
    }
    if blocks.windows(2).any(|w| w[0].2 + 1 != w[1].1) {
        return Err(
            "pp: nodes outside the blocks sit between two blocks: a stage is a run of whole blocks"
                .into(),
        );
    }
    let (q, r) = (n / stages, n % stages);
    let mut start = 0u64;
    let mut out = Vec::with_capacity(stages as usize);
    for s in 0..stages {
        let end = start + q + u64::from(s < r);
        let first = if s == 0 { 0 } else { blocks[start as usize].1 };
        let last = if s + 1 == stages {
            graph.nodes.len()
        } else {
            blocks[end as usize - 1].2 + 1
        };
        check_cut(graph, first..last)?;
        out.push((first..last, end - start));
        start = end;
    }
    Ok(out)
}

/// What a pipeline simulation of `graph` cuts, in words for a plan (None without `pp`, or
/// where the graph cannot be cut: the simulation says why).
pub fn stages_note(graph: &Graph, strategy: &crate::strategy::Strategy) -> Option<String> {
    let pp = strategy.parts.iter().find_map(Pp::of_part)?;
    let counts: Vec<String> = cut(graph, pp.stages)
        .ok()?
        .iter()
        .map(|(_, blocks)| blocks.to_string())
        .collect();
    Some(format!(
        "pp:stages={} cuts the blocks {} (stage 0 also the embeddings, the last the head and the loss), one micro-batch of batch / {} at a time; every rank builds the whole model before it keeps its stage (as memcal_export.pipeline does)",
        pp.stages,
        counts.join(" + "),
        pp.micro
    ))
}

/// One tensor crosses each cut: a stage reads, of the nodes before it, only the last one's
/// output (the graph inputs aside: stage 0's tokens, the last stage's targets), and nothing
/// after it reads its nodes but through its last one.
fn check_cut(graph: &Graph, nodes: Range<usize>) -> Result<(), String> {
    let n_inputs = graph.inputs.len();
    for k in 0..graph.nodes.len() {
        for &v in graph.input_positions(k).unwrap_or(&[]) {
            let Some(j) = (v as usize).checked_sub(n_inputs) else {
                continue;
            };
            let inside = |x: usize| nodes.contains(&x);
            let entering = inside(k) && !inside(j) && j + 1 != nodes.start;
            let leaving = !inside(k) && inside(j) && k >= nodes.end && j + 1 != nodes.end;
            if entering || leaving {
                return Err(format!(
                    "pp: node `{}` reads `{}` across a stage cut besides the hidden states (a skip connection): the rule set cuts where one tensor crosses",
                    graph.nodes[k].id, graph.nodes[j].id
                ));
            }
        }
    }
    Ok(())
}

/// The schedule's order on this rank: (forward?, micro-batch).
pub fn actions(pp: Pp) -> Vec<(bool, u64)> {
    let m = pp.micro;
    if pp.gpipe {
        return (0..m)
            .map(|j| (true, j))
            .chain((0..m).map(|j| (false, j)))
            .collect();
    }
    let warmup = m.min(pp.stages - pp.rank);
    let mut out: Vec<(bool, u64)> = (0..warmup).map(|j| (true, j)).collect();
    let (mut f, mut b) = (warmup, 0);
    loop {
        out.push((false, b));
        b += 1;
        if f == m {
            break;
        }
        out.push((true, f));
        f += 1;
    }
    out.extend((b..m).map(|j| (false, j)));
    out
}

/// What the simulation is given: the settings and the stage's nodes.
pub(super) struct State {
    pub pp: Pp,
    pub nodes: Range<usize>,
}

/// One micro-batch in flight: its values, saved tensors, output and loss.
struct InFlight {
    env: Vec<Option<Value>>,
    saved: SavedSets,
    output: Option<BufId>,
    loss: Option<BufId>,
}

/// What a stage holds across its micro-batches and steps.
struct Stage {
    pp: Pp,
    nodes: Range<usize>,
    last: bool,
    /// The node whose output enters the stage (None on stage 0), the one whose output leaves
    /// it, and the last stage's output before the loss (the logits).
    input_node: Option<usize>,
    out_node: usize,
    logits_node: Option<usize>,
    inputs: Vec<Value>,
    /// Receive buffers, one a micro-batch: input activations, output gradients.
    recv: Vec<BufId>,
    recv_grad: Vec<BufId>,
    /// The last stage's outputs of the step (`output_chunks`).
    outputs: Vec<BufId>,
    /// Tensors held by send works: GPipe's every send of the step; 1F1B's latest input
    /// gradient.
    sends: Vec<BufId>,
    last_grad_send: Option<BufId>,
}

impl Sim<'_> {
    /// The pipeline's protocol: load, inputs, then per step `pipeline` and `optimizer`.
    pub(super) fn run_pp(&mut self, rules_: &[rules::OpRule]) {
        let Some(st) = self.pp.as_ref() else { return };
        let (pp, nodes) = (st.pp, st.nodes.clone());
        self.pp_load(&nodes);
        // The whole batch: the simulation's batch is a micro-batch's.
        let inputs = self.inputs_phase(pp.micro);
        let last = pp.rank + 1 == pp.stages;
        let logits_node = last
            .then_some(self.loss)
            .flatten()
            .and_then(|l| self.values.args(l).first().copied())
            .and_then(|v| self.values.as_node(v as usize));
        let mut stage = Stage {
            pp,
            input_node: nodes.start.checked_sub(1),
            out_node: nodes.end - 1,
            nodes,
            last,
            logits_node,
            inputs,
            recv: Vec::new(),
            recv_grad: Vec::new(),
            outputs: Vec::new(),
            sends: Vec::new(),
            last_grad_send: None,
        };
        let mut grads: Vec<Option<BufId>> = vec![None; self.params.len()];
        let mut states: Vec<Option<(BufId, BufId)>> = vec![None; self.params.len()];
        let mut scratch = Scratch::default();
        for step in 1..=STEPS {
            self.begin(step, format!("step{step}.pipeline"));
            if step == 1 {
                self.pp_receive_buffers(&mut stage);
            }
            // clear_runtime_states: the last step's outputs go.
            for b in std::mem::take(&mut stage.outputs) {
                self.mem.release(b);
            }
            let mut flight: Vec<Option<InFlight>> = (0..pp.micro).map(|_| None).collect();
            for (forward, j) in actions(pp) {
                let j = j as usize;
                if forward {
                    flight[j] = Some(self.pp_forward(&mut stage, j, rules_, &mut scratch));
                } else if let Some(f) = flight[j].take() {
                    self.pp_backward(&mut stage, j, f, &mut grads, rules_, &mut scratch);
                }
            }
            let sends = std::mem::take(&mut stage.sends);
            for b in sends.into_iter().chain(stage.last_grad_send.take()) {
                self.mem.release(b);
            }
            if !stage.outputs.is_empty() {
                // The merged output the step returns (dropped by the caller).
                let whole: u64 = stage.outputs.iter().map(|&b| self.mem.bytes(b)).sum();
                self.mem.at("pp merged output");
                let t = self.mem.alloc(whole, Kind::Transients);
                let high = self.rec.high("pp merged output", &self.mem);
                self.mem.release(t);
                self.rec.event("pp merged output", high, &self.mem);
            }
            self.rec.end(&self.mem);
            self.optimizer(step, &mut grads, &mut states);
        }
    }

    /// model_load: the whole model, then every parameter outside the stage freed.
    fn pp_load(&mut self, nodes: &Range<usize>) {
        self.begin(0, "model_load".into());
        let mut bufs = Vec::with_capacity(self.params.len());
        for p in 0..self.params.len() {
            self.mem.at(&self.params[p].label);
            bufs.push(self.mem.alloc(self.params[p].bytes, Kind::Parameters));
            let high = self.rec.high(&self.params[p].label, &self.mem);
            self.rec.event(&self.params[p].label, high, &self.mem);
        }
        let mut kept = vec![false; self.params.len()];
        for k in nodes.clone() {
            for &p in &self.node_params[k] {
                kept[p] = true;
            }
        }
        for (p, b) in bufs.into_iter().enumerate() {
            if !kept[p] {
                self.mem.release(b);
            }
        }
        self.rec.event("pp stage kept", self.mem.total(), &self.mem);
        self.rec.end(&self.mem);
    }

    /// The receive buffers, made at the first step and kept.
    fn pp_receive_buffers(&mut self, stage: &mut Stage) {
        let m = stage.pp.micro as usize;
        self.mem.at("pp receive buffers");
        if let Some(i) = stage.input_node {
            let b = self.value_bytes[self.values.node_value(i)];
            stage.recv = (0..m)
                .map(|_| self.mem.alloc(b, Kind::SavedActivations))
                .collect();
        }
        if !stage.last {
            let b = self.value_bytes[self.values.node_value(stage.out_node)];
            stage.recv_grad = (0..m)
                .map(|_| self.mem.alloc(b, Kind::ActivationGradients))
                .collect();
        }
        let high = self.rec.high("pp receive buffers", &self.mem);
        self.rec.event("pp receive buffers", high, &self.mem);
    }

    /// Micro-batch `j`'s forward over the stage: what it keeps to its backward.
    fn pp_forward(
        &mut self,
        stage: &mut Stage,
        j: usize,
        rules_: &[rules::OpRule],
        scratch: &mut Scratch,
    ) -> InFlight {
        let mut env: Vec<Option<Value>> = vec![None; self.values.len()];
        // Micro-batch views of the inputs: held by the view while the stage reads it.
        for (i, v) in stage.inputs.iter().enumerate() {
            self.mem.retain(v.buf);
            env[i] = Some(*v);
        }
        if let Some(i) = stage.input_node {
            let v = self.values.node_value(i);
            self.mem.retain(stage.recv[j]);
            env[v] = Some(Value {
                buf: stage.recv[j],
                contiguous: true,
                perm: rules::Perm::identity(self.values.shape(v).rank()),
                split: None,
                requires_grad: true,
            });
        }
        let nodes = stage.nodes.clone();
        let mut saved = SavedSets::new(nodes.start, nodes.len());
        let keep: Vec<usize> = stage.logits_node.into_iter().collect();
        self.run_range(
            nodes.clone(),
            &mut env,
            &keep,
            &mut saved,
            true,
            rules_,
            scratch,
        );
        let mut take = |k: usize| env[self.values.node_value(k)].take().map(|v| v.buf);
        let (output, loss) = if stage.last {
            if let Some(b) = stage.logits_node.and_then(&mut take) {
                stage.outputs.push(b);
            }
            (None, self.loss.and_then(&mut take))
        } else {
            let out = take(stage.out_node);
            if let (true, Some(b)) = (stage.pp.gpipe, out) {
                // The send work holds it to the step's end.
                self.mem.retain(b);
                stage.sends.push(b);
            }
            (out, None)
        };
        // Values nobody reads (a dead branch) go when the stage's forward returns, and the
        // input views it did not read.
        let left: Vec<BufId> = nodes
            .map(|k| self.values.node_value(k))
            .chain(0..stage.inputs.len())
            .filter_map(|v| env[v].take().map(|x| x.buf))
            .collect();
        for b in left {
            self.mem.release(b);
        }
        InFlight {
            env,
            saved,
            output,
            loss,
        }
    }

    /// Micro-batch `j`'s backward over the stage, from the loss or the received gradient; the
    /// input's gradient sent back.
    fn pp_backward(
        &mut self,
        stage: &mut Stage,
        j: usize,
        mut f: InFlight,
        grads: &mut [Option<BufId>],
        rules_: &[rules::OpRule],
        scratch: &mut Scratch,
    ) {
        let n = self.graph.nodes.len();
        let mut out_grad: Vec<Option<BufId>> = vec![None; n];
        let mut grad_contig = vec![true; n];
        self.mem.at("pp backward");
        let root = if stage.last {
            let root = self.mem.alloc(4, Kind::ActivationGradients);
            if let Some(l) = self.loss {
                self.mem.retain(root);
                out_grad[l] = Some(root);
            }
            Some(root)
        } else {
            self.mem.retain(stage.recv_grad[j]);
            out_grad[stage.out_node] = Some(stage.recv_grad[j]);
            None
        };
        self.backward_range(
            stage.nodes.clone(),
            &mut f.saved,
            grads,
            rules_,
            scratch,
            &mut out_grad,
            &mut grad_contig,
        );
        let sent = stage.input_node.and_then(|i| out_grad[i].take());
        let left = out_grad.into_iter().flatten().chain(root);
        let held = [f.output, f.loss].into_iter().flatten();
        let values: Vec<BufId> = left.chain(held).collect();
        for b in values {
            self.mem.release(b);
        }
        for k in 0..f.env.len() {
            if self.values.as_node(k).is_some() {
                if let Some(v) = f.env[k].take() {
                    self.mem.release(v.buf);
                }
            }
        }
        if let Some(g) = sent {
            if stage.pp.gpipe {
                stage.sends.push(g);
            } else if let Some(old) = stage.last_grad_send.replace(g) {
                self.mem.release(old);
            }
        }
        let high = self.rec.high("pp backward", &self.mem);
        self.rec.event("pp backward", high, &self.mem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_warms_up_by_the_stages_left() {
        let pp = |rank, micro, gpipe| Pp {
            stages: 2,
            micro,
            gpipe,
            rank,
        };
        let order = |v: Vec<(bool, u64)>| {
            v.into_iter()
                .map(|(f, j)| format!("{}{j}", if f { "F" } else { "B" }))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(order(actions(pp(0, 4, true))), "F0 F1 F2 F3 B0 B1 B2 B3");
        assert_eq!(order(actions(pp(0, 4, false))), "F0 F1 B0 F2 B1 F3 B2 B3");
        assert_eq!(order(actions(pp(1, 4, false))), "F0 B0 F1 B1 F2 B2 F3 B3");
        assert_eq!(order(actions(pp(0, 2, false))), "F0 F1 B0 B1");
    }
}
