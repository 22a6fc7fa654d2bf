//! The `embedding` op: every fact of it.

use super::Family;
use super::{Table, Tie};
use crate::graph::Graph;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
use crate::simulate::rules::*;
use serde_json::Value;

/// Attributes of `embedding`.
pub(super) fn parse_embedding(a: &mut Attrs) -> Result<Op, String> {
    Ok(Op::Embedding {
        num_embeddings: a.size("num_embeddings")?,
        embedding_dim: a.size("embedding_dim")?,
        tie: match a.get("tie") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(format!(
                    "attribute `tie` must name an embedding node, found {v}"
                ))
            }
        },
    })
}

/// `embedding`.
pub(super) struct EmbeddingFamily;

impl Family for EmbeddingFamily {
    fn takes_ids(&self, _op: &Op) -> bool {
        true
    }

    fn infer(
        &self,
        op: &Op,
        _inputs: &[&Shape],
        _ck: &Checks,
        out: &mut Shape,
    ) -> Result<(), String> {
        if let Op::Embedding { embedding_dim, .. } = op {
            out.0.push(Dim::fixed(*embedding_dim));
        }
        Ok(())
    }

    fn parameter_tensors(&self, op: &Op, p: &mut Vec<Vec<u64>>) {
        // A tied embedding reads another's table and owns none.
        if let Op::Embedding {
            num_embeddings,
            embedding_dim,
            tie: None,
        } = op
        {
            p.push(vec![*num_embeddings, *embedding_dim]);
        }
    }

    /// Its indices.
    fn wants_int_input(&self, _op: &Op, _k: usize) -> bool {
        true
    }

    fn tie<'o>(&self, op: &'o Op) -> Option<Tie<'o>> {
        match op {
            Op::Embedding {
                num_embeddings,
                embedding_dim,
                tie: Some(t),
            } => Some(Tie {
                target: t,
                num: *num_embeddings,
                dim: *embedding_dim,
                need: "a tied embedding needs num_embeddings = {num} and embedding_dim = {dim}",
                dim_first: false,
            }),
            _ => None,
        }
    }

    fn table(&self, op: &Op) -> Option<Table> {
        match op {
            Op::Embedding {
                num_embeddings,
                embedding_dim,
                tie,
            } => Some(Table {
                num_embeddings: *num_embeddings,
                embedding_dim: *embedding_dim,
                tied: tie.is_some(),
            }),
            _ => None,
        }
    }

    /// None: a table is no matrix of a linear map.
    fn matrices(&self, _op: &Op) -> Vec<(u64, u64)> {
        Vec::new()
    }

    fn cpu_rule(&self, _op: &Op, _graph: &Graph, s: &Sizes) -> OpRule {
        OpRule::new(Output::New(s.y()), vec![], vec![Grad::None], Source::Measured)
            .note("saves the (int64) indices, which are a graph input; backward builds a full table-size gradient")
    }

    /// An fp32 table: embedding is in no autocast list.
    fn autocast_output(&self, _op: &Op, _input: u64, _promoted: u64) -> u64 {
        F32
    }
}
