//! Checking a tie: a tied linear or embedding against the embedding whose table it names,
//! asked of the ops' families ([`super::family`]) when a graph is loaded.

use super::family::Table;
use super::Op;

impl Op {
    /// A tied linear or embedding must name an embedding that owns its table (is not tied itself)
    /// and whose table matches it. `node_op` gives a node's op by id. The error text is the
    /// node's (the caller names the node).
    pub(crate) fn check_tie<'o>(
        &self,
        node_op: &dyn Fn(&str) -> Option<&'o Op>,
    ) -> Result<(), String> {
        let Some(tie) = self.family().tie(self) else {
            return Ok(());
        };
        let (t, want_num, want_dim, what) = (tie.target, tie.num, tie.dim, tie.need);
        match node_op(t).and_then(|o| o.family().table(o)) {
            Some(Table {
                num_embeddings,
                embedding_dim,
                tied: false,
            }) => {
                if embedding_dim != want_dim || num_embeddings != want_num {
                    let need = what
                        .replace("{dim}", &embedding_dim.to_string())
                        .replace("{num}", &num_embeddings.to_string());
                    let found = if tie.dim_first {
                        format!("{want_dim} and {want_num}")
                    } else {
                        format!("{want_num} and {want_dim}")
                    };
                    return Err(format!(
                        "tied to `{t}` of [{num_embeddings}, {embedding_dim}], but {need}, found {found}"
                    ));
                }
                Ok(())
            }
            Some(Table { tied: true, .. }) => Err(format!(
                "`tie` names `{t}`, which is itself tied; name the embedding that owns the table"
            )),
            _ => Err(format!("`tie` names `{t}`, which is not an embedding node")),
        }
    }
}
