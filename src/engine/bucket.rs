//! Where a row goes: fitted, held out by regime, after the fit, or excluded with its reason
//! (`classify`), and the path order rows are read in.

use super::results::*;
use super::{Dataset, Row};
use crate::run::RunStatus;
use crate::time::parse_rfc3339;
use std::cmp::Ordering;
use std::path::Path;

pub(super) fn cmp_path(a: &str, b: &str) -> Ordering {
    // A row of a bundle is `file.jsonl:line`: by the file's path, then by line number.
    pub(super) fn split(s: &str) -> (&str, u64) {
        s.rsplit_once(':')
            .filter(|(p, _)| p.ends_with(".jsonl"))
            .and_then(|(p, n)| n.parse().ok().map(|n| (p, n)))
            .unwrap_or((s, 0))
    }
    let (a, b) = (split(a), split(b));
    Path::new(a.0).cmp(Path::new(b.0)).then(a.1.cmp(&b.1))
}

pub(super) fn classify(
    ds: &Dataset,
    row: &Row,
    fixed_at: &[Option<(i64, u32)>; NP],
    regimes: &[(&str, bool, &str)],
    has_factors: &[bool; NP],
) -> Result<Bucket, (ExclusionReason, String)> {
    let f = &ds.factors;
    if row.status == RunStatus::Error {
        return Err((
            ExclusionReason::StatusError,
            "the run failed for a reason other than memory".into(),
        ));
    }
    if row.graph_changed {
        let now = ds
            .graphs
            .get(row.graph.as_str())
            .map_or("?", |g| g.sha256.as_str());
        return Err((
            ExclusionReason::GraphChanged,
            format!("graph `{}` is now {now}", row.graph),
        ));
    }
    if row.graph_mismatch {
        return Err((
            ExclusionReason::GraphMismatch,
            "the harness reported graph_mismatch".into(),
        ));
    }
    if !row.has_batch_axis {
        return Err((
            ExclusionReason::NoBatchAxis,
            format!("graph `{}` has no batch axis", row.graph),
        ));
    }
    let Some(&(_, training, device)) = regimes.iter().find(|(r, ..)| *r == row.regime.as_str())
    else {
        return Err((
            ExclusionReason::UnknownRegime,
            format!("regime `{}` is not in data/factors.json", row.regime),
        ));
    };
    if row.device_kind.as_str() != device {
        return Err((
            ExclusionReason::DeviceRegimeMismatch,
            format!(
                "device.kind is `{}` but regime `{}` is a `{device}` regime",
                row.device_kind, row.regime
            ),
        ));
    }
    if !has_factors[row.precision as usize] {
        return Err((
            ExclusionReason::NoFactorsForPrecision,
            format!("no factors for `{}`", row.precision),
        ));
    }
    if row.after_fit {
        let Some(fixed) = fixed_at[row.precision as usize] else {
            return Err((
                ExclusionReason::AfterFitUnfixed,
                "data/factors.json has no provenance.fixed_at".into(),
            ));
        };
        let later = parse_rfc3339(&row.timestamp).is_ok_and(|t| t > fixed);
        if !later {
            let at = f.fixed_at_for(row.precision).unwrap_or("");
            return Err((
                ExclusionReason::AfterFitNotLater,
                format!(
                    "timestamp {} is not later than fixed_at {at}",
                    row.timestamp
                ),
            ));
        }
        return Ok(Bucket::AfterFit);
    }
    if training {
        Ok(Bucket::Fitted)
    } else {
        Ok(Bucket::HeldOutRegime)
    }
}
