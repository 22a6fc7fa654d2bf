//! The implementation groups "held out by implementation" holds out together.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Families held out together by "held out by implementation": the connected families of the
/// graph that links two families when their graphs use a common implementation block
/// (`Op::block`: an attention, mixture-of-experts, recurrent or convolution op). Computed from
/// the graphs under `data/graphs/`; a family without a graph there is a group of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImplementationGroup {
    /// The families joined by `+`, in name order.
    pub name: String,
    /// In name order.
    pub families: Vec<String>,
    /// The blocks that join them (each used by at least two of the group's families), in name
    /// order; empty for a group of one.
    pub shared_blocks: Vec<String>,
}

/// The implementation groups of `families` (sorted names), and each family's group index;
/// groups are numbered in the order of their first family.
pub fn implementation_groups(
    families: &[&str],
    graphs: &BTreeMap<String, super::GraphInfo>,
) -> (Vec<ImplementationGroup>, Vec<usize>) {
    let index: BTreeMap<&str, usize> = families.iter().enumerate().map(|(k, f)| (*f, k)).collect();
    // Per block, the families using it.
    let mut users: BTreeMap<&'static str, BTreeSet<usize>> = BTreeMap::new();
    for g in graphs.values() {
        if let Some(&k) = index.get(g.family.as_str()) {
            for b in &g.blocks {
                users.entry(b).or_default().insert(k);
            }
        }
    }
    // Union-find over family indices.
    let mut parent: Vec<usize> = (0..families.len()).collect();
    fn root(parent: &mut [usize], mut k: usize) -> usize {
        while parent[k] != k {
            parent[k] = parent[parent[k]];
            k = parent[k];
        }
        k
    }
    for fams in users.values() {
        let mut it = fams.iter();
        if let Some(&first) = it.next() {
            for &k in it {
                let (a, b) = (root(&mut parent, first), root(&mut parent, k));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut group_of = vec![0usize; families.len()];
    let mut number: BTreeMap<usize, usize> = BTreeMap::new();
    let mut groups: Vec<ImplementationGroup> = Vec::new();
    for k in 0..families.len() {
        let r = root(&mut parent, k);
        let next = number.len();
        let g = *number.entry(r).or_insert(next);
        if g == groups.len() {
            groups.push(ImplementationGroup {
                name: String::new(),
                families: Vec::new(),
                shared_blocks: Vec::new(),
            });
        }
        groups[g].families.push(families[k].to_string());
        group_of[k] = g;
    }
    for (b, fams) in &users {
        let mut gs = fams.iter().map(|&k| group_of[k]);
        if let Some(g) = gs.next() {
            if fams.len() > 1 {
                groups[g].shared_blocks.push(b.to_string());
            }
        }
    }
    for g in &mut groups {
        g.name = g.families.join("+");
    }
    (groups, group_of)
}
