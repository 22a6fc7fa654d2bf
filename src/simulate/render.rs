//! Text rendering of a [`Simulation`] for `memcal plan --timeline`: the peak and its breakdown,
//! a per-phase table, and an ASCII curve of live bytes over the timeline.

use super::Simulation;
use crate::units;
use std::fmt::Write;

/// Width of the curve's bars, in characters.
const BAR: usize = 50;
/// Rows for a forward or backward phase (its events are bucketed, keeping each bucket's
/// maximum); load, inputs and optimizer phases get one row each.
const PASS_ROWS: usize = 8;

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
    if let Some(d) = &sim.device {
        render_device(&mut s, d);
    }
    let _ = writeln!(
        s,
        "\nlive bytes over the steps (each row: the highest point of its events; # = of the peak):"
    );
    if sim.timeline.is_empty() || sim.peak_bytes == 0 {
        return s;
    }
    let same_as_step2 = |phase: &str| -> bool {
        let Some(rest) = phase.strip_prefix("step3.") else {
            return false;
        };
        let (a, b) = (sim.phase(phase), sim.phase(&format!("step2.{rest}")));
        matches!((a, b), (Some(a), Some(b)) if (a.start, a.peak, a.end) == (b.start, b.peak, b.end))
    };
    let mut skipped = false;
    for p in &sim.phases {
        if same_as_step2(&p.name) {
            skipped = true;
            continue;
        }
        let events: Vec<&super::Event> =
            sim.timeline.iter().filter(|e| e.phase == p.name).collect();
        if events.is_empty() {
            continue;
        }
        // Forward and backward get several rows; load, inputs and the optimizer one each.
        let rows = if p.name.ends_with("forward") || p.name.ends_with("backward") {
            PASS_ROWS
        } else {
            1
        };
        let per_row = events.len().div_ceil(rows).max(1);
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
    }
    if skipped {
        let _ = writeln!(s, "  (step 3 repeats step 2 exactly)");
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

/// The caching-allocator replay: per phase, allocated and reserved as the allocator's
/// statistics would read them.
fn render_device(s: &mut String, d: &super::device::Replay) {
    let _ = writeln!(
        s,
        "\nCUDA caching-allocator replay (torch 2.11 rules, {}): allocated peak {} in {} at `{}`, reserved peak {} in {} at `{}`",
        d.allocator_settings
            .as_deref()
            .map_or("default config".to_string(), |c| format!("PYTORCH_CUDA_ALLOC_CONF={c}")),
        units::both(d.allocated_peak as f64),
        d.allocated_peak_phase,
        d.allocated_peak_node,
        units::both(d.reserved_peak as f64),
        d.reserved_peak_phase,
        d.reserved_peak_node
    );
    let _ = writeln!(
        s,
        "  {:<18} {:>16} {:>16} {:>16} {:>16}  allocated peak at / reserved peak at",
        "phase", "allocated peak", "allocated end", "reserved peak", "reserved end"
    );
    for p in &d.phases {
        let _ = writeln!(
            s,
            "  {:<18} {:>16} {:>16} {:>16} {:>16}  {} / {}",
            p.name,
            p.allocated_peak,
            p.allocated_end,
            p.reserved_peak,
            p.reserved_end,
            p.allocated_peak_node,
            p.reserved_peak_node
        );
    }
    if let Some(o) = &d.oom {
        let _ = writeln!(
            s,
            "  out of memory in {} at `{}`: {} bytes requested with {} allocated and {} reserved",
            o.phase, o.node, o.requested, o.allocated, o.reserved
        );
    }
}
