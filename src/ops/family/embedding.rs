//! The `embedding` op: every fact of it.

use super::Family;
use crate::ops::attributes::Attrs;
use crate::ops::shape::Checks;
use crate::ops::*;
use crate::shape::{Dim, Shape};
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
}
