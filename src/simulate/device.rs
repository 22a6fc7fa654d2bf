//! The allocator replay: a simulation's sequence of allocations and frees (its trace) run
//! through the model of torch 2.11's CUDA caching allocator ([`super::allocator`]), phase by
//! phase as the harness reads it (`resetPeakStats` at each phase's start, then the peaks and
//! end levels of `allocated_bytes` and `reserved_bytes`). Comparable to a GPU row's
//! `allocated_*` and `reserved_*`.

use super::allocator::{AllocatorSettings, CachingAllocator};
use super::{Simulation, TraceOp};
use serde::Serialize;
use std::collections::HashMap;

/// One phase as the allocator's statistics read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DevicePhase {
    pub name: String,
    pub allocated_start: u64,
    pub allocated_peak: u64,
    pub allocated_end: u64,
    pub reserved_start: u64,
    pub reserved_peak: u64,
    pub reserved_end: u64,
    /// The op (or parameter) whose allocation set each peak.
    pub allocated_peak_node: String,
    pub reserved_peak_node: String,
}

/// An allocation the replay could not make under its limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayOom {
    pub phase: String,
    pub node: String,
    pub requested: u64,
    pub allocated: u64,
    pub reserved: u64,
}

/// The replay's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replay {
    /// The cap on reserved bytes (`setMemoryFraction` x the device's memory), if any.
    pub limit: Option<u64>,
    /// The allocator settings replayed (`PYTORCH_CUDA_ALLOC_CONF`, canonical); absent: torch's
    /// defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocator_settings: Option<String>,
    pub allocated_peak: u64,
    pub allocated_peak_phase: String,
    pub allocated_peak_node: String,
    pub reserved_peak: u64,
    pub reserved_peak_phase: String,
    pub reserved_peak_node: String,
    /// Phases up to the end, or up to the one that ran out of memory (included, without its
    /// end levels: they repeat its start).
    pub phases: Vec<DevicePhase>,
    /// Where the cap is hit, if it is.
    pub oom: Option<ReplayOom>,
    /// Segments (cudaMalloc'd blocks) held at the end.
    pub segments: usize,
}

impl Replay {
    pub fn phase(&self, name: &str) -> Option<&DevicePhase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

struct Open {
    phase: DevicePhase,
}

/// One allocation, noting which op set a new peak; an out-of-memory names the op.
fn malloc(
    a: &mut CachingAllocator,
    bytes: u64,
    node: &str,
    open: &mut Option<Open>,
) -> Result<Option<u64>, ReplayOom> {
    let (before_a, before_r) = (a.peak_allocated(), a.peak_reserved());
    match a.malloc(bytes) {
        Ok(got) => {
            if let Some(o) = open.as_mut() {
                if a.peak_allocated() > before_a {
                    o.phase.allocated_peak_node = node.to_string();
                }
                if a.peak_reserved() > before_r {
                    o.phase.reserved_peak_node = node.to_string();
                }
            }
            Ok(got)
        }
        Err(e) => Err(ReplayOom {
            phase: open
                .as_ref()
                .map(|o| o.phase.name.clone())
                .unwrap_or_default(),
            node: node.to_string(),
            requested: e.requested,
            allocated: e.allocated,
            reserved: e.reserved,
        }),
    }
}

/// Replays `sim`'s trace with reserved bytes capped at `limit` (None: no cap), under torch's
/// default allocator settings.
pub fn replay(sim: &Simulation, limit: Option<u64>) -> Replay {
    replay_with(sim, limit, &AllocatorSettings::default())
}

/// Replays `sim`'s trace with reserved bytes capped at `limit` (None: no cap; a cap is a
/// memory fraction's, which garbage collection needs) under `settings`.
pub fn replay_with(sim: &Simulation, limit: Option<u64>, settings: &AllocatorSettings) -> Replay {
    let mut a = CachingAllocator::with_settings(limit, settings);
    let mut addr: HashMap<u32, u64> = HashMap::new();
    let mut phases: Vec<DevicePhase> = Vec::new();
    let mut open: Option<Open> = None;
    let mut names = sim.phases.iter().map(|p| p.name.clone());
    let mut oom = None;
    let label = |at: u32| sim.labels.get(at as usize).cloned().unwrap_or_default();
    let close = |o: Open, a: &CachingAllocator, phases: &mut Vec<DevicePhase>| {
        let mut p = o.phase;
        p.allocated_peak = p.allocated_peak.max(a.peak_allocated());
        p.reserved_peak = p.reserved_peak.max(a.peak_reserved());
        p.allocated_end = a.allocated();
        p.reserved_end = a.reserved();
        phases.push(p);
    };
    for op in &sim.trace {
        match *op {
            TraceOp::Phase => {
                if let Some(o) = open.take() {
                    close(o, &a, &mut phases);
                }
                a.reset_peaks();
                let name = names.next().unwrap_or_default();
                open = Some(Open {
                    phase: DevicePhase {
                        name,
                        allocated_start: a.allocated(),
                        allocated_peak: a.allocated(),
                        allocated_end: a.allocated(),
                        reserved_start: a.reserved(),
                        reserved_peak: a.reserved(),
                        reserved_end: a.reserved(),
                        allocated_peak_node: "-".into(),
                        reserved_peak_node: "-".into(),
                    },
                });
            }
            TraceOp::Alloc { buf, bytes, at } => match malloc(&mut a, bytes, &label(at), &mut open)
            {
                Ok(Some(p)) => {
                    addr.insert(buf, p);
                }
                Ok(None) => {}
                Err(e) => {
                    oom = Some(e);
                    break;
                }
            },
            TraceOp::Peak { bytes, at } => match malloc(&mut a, bytes, &label(at), &mut open) {
                Ok(Some(p)) => a.free(p),
                Ok(None) => {}
                Err(e) => {
                    oom = Some(e);
                    break;
                }
            },
            TraceOp::Free { buf } => {
                if let Some(p) = addr.remove(&buf) {
                    a.free(p);
                }
            }
        }
    }
    if let Some(o) = open.take() {
        close(o, &a, &mut phases);
    }
    let top = |f: fn(&DevicePhase) -> u64, node: fn(&DevicePhase) -> &String| {
        phases
            .iter()
            .fold(None::<&DevicePhase>, |best, p| match best {
                Some(b) if f(b) >= f(p) => Some(b),
                _ => Some(p),
            })
            .map(|p| (f(p), p.name.clone(), node(p).clone()))
            .unwrap_or((0, String::new(), String::new()))
    };
    let (allocated_peak, allocated_peak_phase, allocated_peak_node) =
        top(|p| p.allocated_peak, |p| &p.allocated_peak_node);
    let (reserved_peak, reserved_peak_phase, reserved_peak_node) =
        top(|p| p.reserved_peak, |p| &p.reserved_peak_node);
    Replay {
        limit,
        allocator_settings: settings.canonical(),
        allocated_peak,
        allocated_peak_phase,
        allocated_peak_node,
        reserved_peak,
        reserved_peak_phase,
        reserved_peak_node,
        phases,
        oom,
        segments: a.segments(),
    }
}
