//! The recurrent layers (`lstm`, `gru`): every fact of each.

use super::Family;
use super::{prod, Intermediates, TextbookRole};
use crate::graph::Graph;
use crate::ops::attributes::{rnn, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::cuda::*;
use crate::simulate::rules::*;

/// Attributes of `lstm`.
pub(super) fn parse_lstm(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Lstm(rnn(a)?))
}

/// Attributes of `gru`.
pub(super) fn parse_gru(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Gru(rnn(a)?))
}

/// The recurrent layers: `lstm` and `gru`.
pub(super) struct RnnFamily;

/// The layer's attributes and its gates (4 for an LSTM, 3 for a GRU).
fn rnn_of(op: &Op) -> (&Rnn, u64) {
    match op {
        Op::Lstm(r) => (r, 4),
        Op::Gru(r) => (r, 3),
        _ => unreachable!("not a recurrent layer"),
    }
}

impl Family for RnnFamily {
    /// The input's shape, its last axis the hidden size times the directions.
    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        let (r, _) = rnn_of(op);
        ck.expect_rank(&[3])?;
        ck.expect_last(r.input_size, "input_size")?;
        out.0[2] = Dim::fixed(r.hidden_size.saturating_mul(r.directions()));
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        let (r, gates) = rnn_of(op);
        let h = r.hidden_size;
        for layer in 0..r.num_layers {
            let input = if layer == 0 {
                r.input_size
            } else {
                h.saturating_mul(r.directions())
            };
            let gh = h.saturating_mul(gates);
            for _ in 0..r.directions() {
                p.push(vec![gh, input]);
                p.push(vec![gh, h]);
                p.push(vec![gh]);
                p.push(vec![gh]);
            }
        }
    }

    /// The gates of every step, layer and direction.
    fn intermediates(
        &self,
        op: &Op,
        x: &Shape,
        _memory: Option<&Shape>,
        batch: u64,
    ) -> Intermediates {
        let (r, gates) = rnn_of(op);
        let steps = x.numel_at(batch) / r.input_size.max(1);
        Intermediates {
            gates: prod(&[steps, gates, r.hidden_size, r.directions(), r.num_layers]),
            ..Default::default()
        }
    }

    fn textbook(&self, _op: &Op) -> TextbookRole {
        TextbookRole::NotTransformer
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        rnn_rule(s)
    }

    fn cuda_rule(&self, _op: &Op, _s: &Sizes, call: &CudaCall) -> OpRule {
        assumed_at_bf16(call, "assumed: the cpu-fp32 stages at bf16 (cuDNN's RNN reserve space and workspace are chosen by cuDNN at run time; not derived)")
    }

    /// Through `_cudnn_rnn`'s autocast wrapper.
    fn runs_in_bf16(&self, _op: &Op) -> bool {
        true
    }
}

/// Recurrent layers: oneDNN LSTM and torch's generic GRU cell loop.
fn rnn_rule(s: &Sizes) -> OpRule {
    let node = s.node;
    let e = s.e;
    let (x, y) = (s.x(0), s.y());
    let one = vec![Grad::New];
    use Saved::*;
    use Source::*;
    let (Op::Lstm(r) | Op::Gru(r)) = &s.node.op else {
        unreachable!("rnn_rule: not a recurrent layer")
    };
    let lstm = matches!(node.op, Op::Lstm(_));
    let (b, t) = (s.dim(0), s.dim(1));
    let h = r.hidden_size;
    let dirs = r.directions();
    let bth = b * t * h * e;
    let layers = r.num_layers;
    let mut saved = vec![Out];
    saved.push(Internal {
        what: "time-major copy of the input",
        bytes: x,
    });
    if layers > 1 {
        saved.push(Internal {
            what: "inner layers' outputs",
            bytes: (layers - 1) * bth * dirs,
        });
    }
    let states = layers * dirs * b * h * e;
    // The extra B x T x H a multi-layer GRU holds (see the GRU workspace below).
    let multi = if layers > 1 { bth } else { 0 };
    if lstm {
        // 15.5 x B x T x H x 4 bytes per layer (measured, unidirectional, 1 and 2
        // layers); a bidirectional layer holds 19.625 per direction (measured on one
        // configuration: 2 layers, H = 128).
        let per = if dirs > 1 { 157 } else { 124 };
        saved.push(Internal {
            what: "oneDNN workspace (15.5 BTH per layer and direction; 19.6 bidirectional)",
            bytes: layers * dirs * bth * per / 8,
        });
        saved.push(Internal {
            what: "zero initial state (h0 = c0)",
            bytes: states,
        });
    } else {
        // Per layer and direction, the cell loop's per-step tensors: 7 x B x T x H; plus
        // one B x T x H per inner layer (measured on two 2-layer bidirectional GRUs).
        // One more B x T x H for a multi-layer GRU, however many layers: it was
        // `(layers - 1) x B x T x H`, which fitted the 2-layer fixtures and counted
        // (layers - 2) x B x T x H too much from 3 layers on (measured on sim-gru3bi and
        // sim-gru4bi: their forwards ended one and two B x T x H high).
        let ws = layers * dirs * 7 * bth + multi;
        saved.push(Internal {
            what: "per-step gate tensors (7 BTH per layer and direction)",
            bytes: ws,
        });
    }
    // The largest layer's weights (oneDNN reorders them in both passes).
    let gates = if lstm { 4 } else { 3 };
    // The largest layer's weights W_ih and W_hh, which oneDNN reorders (calibrated on the
    // recurrent fixtures, with ~19 KB of fixed scratch not counted).
    let widest_input = if layers > 1 {
        r.input_size.max(h * dirs)
    } else {
        r.input_size
    };
    let w_hh = gates * h * (widest_input + h) * 4;
    let (fwd, bwd) = if lstm && dirs > 1 {
        // Bidirectional: calibrated on one configuration (sim-lstm2bi: 2 layers, H = 128).
        (2 * states + bth * dirs + w_hh, bth * dirs * 13 / 8 + w_hh)
    } else if lstm {
        // From H = 256 on, backward holds one more W_hh and a quarter W_ih per layer
        // (calibrated on sim-lstm-h256-t32 and sim-lstm-h512-t16, flat in B and T; absent
        // at H = 128).
        let big = if h >= 256 {
            layers * dirs * (4 * h * h * 4 + 4 * h * r.input_size)
        } else {
            0
        };
        (
            2 * states + bth * dirs * 33 / 8 + w_hh,
            bth * dirs * 171 / 32 + w_hh + big,
        )
    } else {
        {
            // The inner layers' extra B x T x H appears after the forward's peak and is
            // gone by the backward's (calibrated on sim-gru2bi, sim-gru3bi, sim-gru4bi).
            let inner = multi;
            (
                (states + bth * dirs * 3).saturating_sub(inner),
                bth * dirs / 2,
            )
        }
    };
    let calibrated = if lstm {
        Calibrated(
            "calibrated on sim-lstm, sim-lstm2, sim-lstm2bi, sim-lstm-h256-t32, sim-lstm-h512-t16",
        )
    } else {
        Calibrated("calibrated on sim-gru, sim-gru2bi, sim-gru3bi, sim-gru4bi")
    };
    let mut rule = OpRule::new(Output::New(y), saved, one, calibrated).fwd(fwd);
    if !lstm {
        // GRU on CPU is torch's generic cell loop: backward walks the steps back,
        // freeing each step's saved tensors, while W_hh's gradient accumulates over the
        // steps (the running sum, a step's contribution and its transposed product:
        // three W_hh-sized buffers). Measured: flat in B and T, 3 W_hh within 1-2%.
        // Less the output's gradient, which the runs show is gone by then.
        let w_hh = 3 * h * h * 4 * dirs;
        let g = (3 * w_hh).saturating_sub(y + multi);
        rule.backward_peak = Some(BackwardPeak {
            freed: g,
            held: g,
            params: vec![],
        });
    }
    if lstm && layers > 1 {
        // Layers run backward last to first, each freeing its workspace when done: the
        // peak is in the last layer's backward, with its input's gradient and its own
        // weight gradients.
        let per_layer = 4 * dirs as usize;
        let last: Vec<usize> =
            ((layers as usize - 1) * per_layer..layers as usize * per_layer).collect();
        let g = bwd + bth * dirs;
        rule.backward_peak = Some(BackwardPeak {
            freed: g,
            held: g,
            params: last,
        });
    } else {
        rule = rule.bwd(bwd);
    }
    let rule = rule
        .note(if lstm {
            "oneDNN LSTM: saves 15.5 x B x T x H float32 workspace per layer, its output and a time-major copy of its input; the output is a transposed (non-contiguous) view"
        } else {
            "GRU (torch's generic cell loop on CPU): saves 7 x B x T x H + B x T x E per layer, its output and a time-major copy of its input; the output is a transposed view; backward frees per-step tensors as it walks back in time while W_hh's gradient accumulates: its peak is three W_hh-sized buffers over the level before it"
        });
    let mut rule = rule;
    rule.output_contiguous = Some(false);
    rule
}
