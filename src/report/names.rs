//! The names the site and its downloads print for the engine's values: methods, buckets,
//! exclusion reasons, run statuses, verdicts and devices.

use crate::engine::{Bucket, ExclusionReason, Method};
use crate::factors::FactorsFile;
use crate::plan::Verdict;
use crate::run::RunStatus;

/// The human name of a method.
pub fn method_name(m: Method) -> &'static str {
    m.label()
}

pub fn bucket_name(b: Bucket) -> &'static str {
    match b {
        Bucket::Fitted => "fitted",
        Bucket::HeldOutRegime => "held out by regime",
        Bucket::AfterFit => "after the fit",
    }
}

pub fn reason_name(r: ExclusionReason) -> &'static str {
    match r {
        ExclusionReason::DuplicateRunId => "duplicate run id",
        ExclusionReason::RankOutOfWorld => "rank not below its world",
        ExclusionReason::MissingRank => "a rank of its run has no row",
        ExclusionReason::Strategy => "a strategy run: calibrated in the strategies section",
        ExclusionReason::StatusError => "failed for a reason other than memory",
        ExclusionReason::GraphChanged => "graph changed since the run",
        ExclusionReason::GraphMismatch => "built model differs from the graph",
        ExclusionReason::NoBatchAxis => "graph has no batch axis",
        ExclusionReason::UnknownRegime => "regime not in the factors file",
        ExclusionReason::DeviceRegimeMismatch => "device differs from its regime's device",
        ExclusionReason::NoFactorsForPrecision => "no factors for the precision",
        ExclusionReason::AfterFitUnfixed => "after-fit row, factors never fixed",
        ExclusionReason::AfterFitNotLater => "after-fit row measured before the fit",
    }
}

pub fn status_name(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Completed => "completed",
        RunStatus::Oom => "out of memory",
        RunStatus::Error => "error",
    }
}

pub fn verdict_name(v: Verdict) -> &'static str {
    v.as_str()
}

/// `CPU` or `GPU` for a regime, from `data/factors.json`; a CPU regime is never labelled a GPU
/// result.
pub fn device_label(factors: &FactorsFile, regime: &str) -> &'static str {
    match factors.regimes.get(regime).map(|r| r.device.as_str()) {
        Some("cpu") => "CPU",
        Some("cuda") => "GPU",
        _ => "unknown device",
    }
}
