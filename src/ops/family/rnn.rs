//! The recurrent layers (`lstm`, `gru`): every fact of each.

use super::Family;
use crate::ops::attributes::{rnn, Attrs};
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};

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
}
