//! Text rendering of a [`Simulation`] for `memcal plan --timeline`: the peak and its breakdown,
//! a per-phase table, and an ASCII curve of live bytes over the timeline.

use super::Simulation;
use crate::units;
use std::fmt::Write;

/// Width of the curve's bars, in characters.
const BAR: usize = 50;
/// At most this many rows in the curve (events are bucketed, keeping each bucket's maximum).
const CURVE_ROWS: usize = 60;

/// Renders a simulation: peak, breakdown, phases, and a curve of live bytes.
pub fn render_timeline(sim: &Simulation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "simulated training step: {} at batch {} ({}, rules {}), {} parameters",
        sim.graph, sim.batch, sim.precision, sim.backend, sim.parameters
    );
    let _ = writeln!(
        s,
        "peak {} bytes = {} in {} at `{}`",
        sim.peak_bytes,
        units::both(sim.peak_bytes as f64),
        sim.peak_phase,
        sim.peak_node
    );
    let _ = writeln!(s, "\nalive at the peak:");
    for (name, bytes) in sim.breakdown.entries() {
        let share = if sim.peak_bytes > 0 {
            100.0 * bytes as f64 / sim.peak_bytes as f64
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "  {name:<22} {bytes:>16}  {:>22}  {share:5.1}%",
            units::gib(bytes as f64)
        );
    }
    let _ = writeln!(s, "\nphases:");
    let _ = writeln!(
        s,
        "  {:<18} {:>16} {:>16} {:>16}  peak at",
        "phase", "start", "peak", "end"
    );
    for p in &sim.phases {
        let _ = writeln!(
            s,
            "  {:<18} {:>16} {:>16} {:>16}  {}",
            p.name, p.start, p.peak, p.end, p.peak_node
        );
    }
    let _ = writeln!(
        s,
        "\nlive bytes over the steps (each row: the highest point of its events; # = of the peak):"
    );
    let events = &sim.timeline;
    if events.is_empty() || sim.peak_bytes == 0 {
        return s;
    }
    let per_row = events.len().div_ceil(CURVE_ROWS).max(1);
    for chunk in events.chunks(per_row) {
        let top = chunk
            .iter()
            .max_by_key(|e| e.bytes)
            .expect("non-empty chunk");
        let len = ((top.bytes as f64 / sim.peak_bytes as f64) * BAR as f64).round() as usize;
        let marker = if top.bytes == sim.peak_bytes {
            " <- peak"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  {:<16} {:<24} {:>12} |{}{}",
            top.phase,
            truncate(&top.node, 24),
            units::gib(top.bytes as f64),
            "#".repeat(len.min(BAR)),
            marker
        );
    }
    s
}

fn truncate(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        let mut t: String = text.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}
