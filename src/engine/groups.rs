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
    // A root is its component's smallest index (unions keep the smaller), so a family whose
    // root is itself starts a group and every other joins its root's, numbered in first-family
    // order.
    let mut group_of = vec![0usize; families.len()];
    let mut groups: Vec<ImplementationGroup> = Vec::new();
    for (k, family) in families.iter().enumerate() {
        let r = root(&mut parent, k);
        if r == k {
            group_of[k] = groups.len();
            groups.push(ImplementationGroup {
                name: String::new(),
                families: Vec::new(),
                shared_blocks: Vec::new(),
            });
        } else {
            group_of[k] = group_of[r];
        }
        groups[group_of[k]].families.push(family.to_string());
    }
    for (b, fams) in &users {
        // A block used by two or more families joins them: it is shared within their group.
        match fams.first() {
            Some(&first) if fams.len() > 1 => {
                groups[group_of[first]].shared_blocks.push(b.to_string())
            }
            _ => {}
        }
    }
    for g in &mut groups {
        g.name = g.families.join("+");
    }
    (groups, group_of)
}
