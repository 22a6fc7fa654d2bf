//! How a staged strategy cuts the graph, shared by the harness (which runs the stages) and the
//! simulator (which replays them): under checkpointing, segments of `every` consecutive blocks
//! (a block is [`super::memory::block_of`]); under QLoRA, each node holding a 4-bit target; the
//! nodes between are kept (not recomputed) stages.

use super::memory::block_of;
use crate::graph::Graph;
use std::ops::Range;

/// Whether node `k` holds a 4-bit target under QLoRA (a linear map inside a block).
pub fn holds_target(graph: &Graph, k: usize) -> bool {
    let n = &graph.nodes[k];
    block_of(&n.id).is_some() && n.op.family().projection_width(&n.op).is_some()
}

/// The stages in node order, each with whether it is recomputed; None: no staging (neither
/// checkpointing nor a quantized low-rank base).
pub fn ranges(
    graph: &Graph,
    checkpoint_every: Option<u64>,
    quantized: bool,
) -> Option<Vec<(Range<usize>, bool)>> {
    let n = graph.nodes.len();
    let unit: Vec<Option<String>> = if let Some(every) = checkpoint_every {
        let mut seen: Vec<String> = Vec::new();
        graph
            .nodes
            .iter()
            .map(|node| {
                let b = block_of(&node.id)?;
                if seen.last() != Some(&b) {
                    seen.push(b);
                }
                Some(format!("segment{}", (seen.len() as u64 - 1) / every))
            })
            .collect()
    } else if quantized {
        (0..n)
            .map(|k| holds_target(graph, k).then(|| format!("node{k}")))
            .collect()
    } else {
        return None;
    };
    let mut out: Vec<(Range<usize>, bool)> = Vec::new();
    for k in 0..n {
        let same = k > 0 && unit[k] == unit[k - 1];
        match out.last_mut() {
            Some(s) if same => s.0.end = k + 1,
            _ => out.push((k..k + 1, unit[k].is_some())),
        }
    }
    Some(out)
}
