//! The dropouts transformers applies in training (`model.train()`, what a training job runs),
//! drawn as the graph's `dropout` nodes. Each `nn.Dropout(p)` with p > 0 keeps a float mask of
//! its input's size for backward (torch's `_dropout_impl` on CPU: a `bernoulli_` tensor of the
//! input's dtype, multiplied in); with p = 0 torch returns its input untouched and nothing is
//! drawn. The zoo builders draw no dropout; [`after`] inserts one after the nodes where the
//! model class applies it, and every later reader of such a node reads the dropped value (as
//! the Python's `hidden_states = self.dropout(...)` rebinds it).

use crate::graph::{GraphFile, NodeFile};
use serde_json::{json, Map};
use std::collections::HashMap;

/// Inserts `dropout(p)` after every node whose id `at` accepts (named `<id>.dropout`), and
/// points the later nodes that read it at the dropout. Returns how many were inserted (0 for
/// p = 0).
pub fn after(graph: &mut GraphFile, p: f64, at: impl Fn(&str) -> bool) -> usize {
    if p <= 0.0 {
        return 0;
    }
    let mut out: Vec<NodeFile> = Vec::with_capacity(graph.nodes.len() * 2);
    // Each dropped node's id -> its dropout's id.
    let mut renamed: HashMap<String, String> = HashMap::new();
    for mut n in std::mem::take(&mut graph.nodes) {
        for i in &mut n.inputs {
            if let Some(to) = renamed.get(i) {
                *i = to.clone();
            }
        }
        let hit = at(&n.id);
        let id = n.id.clone();
        out.push(n);
        if hit {
            let mut attributes = Map::new();
            attributes.insert("p".into(), json!(p));
            let drop_id = format!("{id}.dropout");
            out.push(NodeFile {
                id: drop_id.clone(),
                op: "dropout".into(),
                inputs: vec![id.clone()],
                attributes,
            });
            renamed.insert(id, drop_id);
        }
    }
    graph.nodes = out;
    renamed.len()
}

/// The `drawn:` line for a config's dropout field.
pub fn said(field: &str, p: f64, count: usize, where_: &str) -> String {
    if count == 0 {
        format!("dropout ({field} = {p}): none drawn (p = 0: torch returns its input)")
    } else {
        format!("dropout ({field} = {p}): {count} drawn, {where_} (model.train(): each keeps a float mask of its input)")
    }
}

/// The id of a block's node `<prefix><i><rest>` for any block index i.
pub fn in_block(id: &str, prefix: &str, rest: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|r| {
            let digits = r.bytes().take_while(u8::is_ascii_digit).count();
            (digits > 0).then(|| &r[digits..])
        })
        .is_some_and(|r| r == rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphFile;

    fn graph(nodes: &[(&str, &[&str])]) -> GraphFile {
        let mut g: GraphFile = serde_json::from_value(json!({
            "format": "memcal-graph/1", "name": "t", "family": "t", "variant": "full",
            "inputs": [], "nodes": [], "loss": "loss"
        }))
        .unwrap();
        g.nodes = nodes
            .iter()
            .map(|(id, ins)| NodeFile {
                id: id.to_string(),
                op: "add".into(),
                inputs: ins.iter().map(|s| s.to_string()).collect(),
                attributes: Map::new(),
            })
            .collect();
        g
    }

    #[test]
    fn later_readers_read_the_dropped_value() {
        let mut g = graph(&[("a", &["x"]), ("b", &["a"]), ("c", &["a", "b"])]);
        assert_eq!(after(&mut g, 0.1, |id| id == "a"), 1);
        let ids: Vec<(&str, Vec<&str>)> = g
            .nodes
            .iter()
            .map(|n| (n.id.as_str(), n.inputs.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("a", vec!["x"]),
                ("a.dropout", vec!["a"]),
                ("b", vec!["a.dropout"]),
                ("c", vec!["a.dropout", "b"]),
            ]
        );
        assert_eq!(g.nodes[1].attributes["p"], json!(0.1));
    }

    #[test]
    fn p_zero_draws_nothing() {
        let mut g = graph(&[("a", &["x"])]);
        assert_eq!(after(&mut g, 0.0, |_| true), 0);
        assert_eq!(g.nodes.len(), 1);
    }

    #[test]
    fn block_ids() {
        assert!(in_block("h12.attn", "h", ".attn"));
        assert!(!in_block("h.attn", "h", ".attn"));
        assert!(!in_block("h1.attn.x", "h", ".attn"));
    }
}
