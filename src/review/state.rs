//! What one state's engine computed, in a form another memcal binary reads back: `memcal diff`
//! runs the base ref's own memcal (built from the base's code, [`super::code`]) on the base's
//! data with the hidden command `memcal review-state`, reads this from its standard output, and
//! compares it with what the running binary computes on head. So a change of a simulator rule,
//! a feature or a baseline in `src/` moves the numbers, as a change of the rows does.
//!
//! Format `memcal-review-state/1`. Methods are named by their ids (`Method::as_str`), so a
//! base that has a method head does not know (or the other way round) still reads: the
//! method is compared where both have it and listed where one lacks it.

use super::diff::MetricSummary;
use crate::engine::{Calibration, Method, Truth};
use crate::features::{Precision, N_FEATURES};
use crate::run::RunStatus;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The format tag of `memcal review-state`.
pub const STATE_FORMAT: &str = "memcal-review-state/1";

/// Where the OpInfo samples the generic rule is checked on live, relative to the repository.
pub const OPINFO_SAMPLES: &str = "tests/fixtures/opinfo/cpu-fp32.json";

/// One state's engine output, as far as `memcal diff` compares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewState {
    pub format: String,
    /// The version of the memcal that computed it.
    pub tool_version: String,
    /// Per profile with rows and method that predicts them.
    pub methods: Vec<StateMethod>,
    /// The median |error| per family, profile and method.
    pub families: Vec<StateFamily>,
    /// Usable rows, by run id.
    pub rows: Vec<StateRow>,
    pub exclusions: Vec<StateExclusion>,
    /// The simulator's generic rule on torch's OpInfo samples ([`OPINFO_SAMPLES`]), per ATen
    /// op: absent where that file is not in the repository.
    #[serde(default)]
    pub rules: Option<Vec<StateRule>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateMethod {
    pub profile: Precision,
    pub method: String,
    pub summary: MetricSummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFamily {
    pub family: String,
    pub profile: Precision,
    pub method: String,
    pub median: Option<f64>,
}

/// One usable row: what every method predicted, and its card checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateRow {
    pub run_id: String,
    pub family: String,
    pub graph: String,
    pub regime: String,
    pub profile: Precision,
    pub batch: u64,
    /// The measured peak of a completed run.
    pub measured_bytes: Option<u64>,
    /// The six features, in `FEATURE_NAMES` order.
    pub features: [u64; N_FEATURES],
    /// Signed relative error (predicted / measured - 1) per method, on rows in the error's
    /// sample only (completed, at least the small-run threshold).
    pub errors: BTreeMap<String, f64>,
    /// Predicted bytes per method.
    pub predictions: BTreeMap<String, f64>,
    pub checks: Vec<StateCheck>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateCheck {
    pub card_bytes: u64,
    pub truth: Truth,
    /// `true` = "fits", per method that predicts the row.
    pub fits: BTreeMap<String, bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateExclusion {
    pub run_id: String,
    pub reason: String,
    pub detail: String,
}

/// The generic rule's predictions for one ATen op over its OpInfo samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateRule {
    pub op: String,
    pub samples: u64,
    /// Samples whose every phase the rule predicts within 64 bytes of the measurement.
    pub exact: u64,
    /// Samples the rule cannot be built for.
    pub refused: u64,
    /// SHA-256 over the rule's predictions for every sample, in order: another value is
    /// another rule.
    pub digest: String,
}

impl ReviewState {
    /// The state of one calibration. `threshold`: the small-run threshold the errors are over;
    /// `repo`: the repository whose OpInfo samples the rule is checked on (none: no rules).
    pub fn of(cal: &Calibration, threshold: u64, repo: Option<&Path>) -> ReviewState {
        let mut methods = Vec::new();
        for (p, fits) in &cal.fits {
            for (m, x) in &fits.methods {
                methods.push(StateMethod {
                    profile: *p,
                    method: m.as_str().to_string(),
                    summary: MetricSummary::of(Some(x)),
                });
            }
        }
        let mut families = Vec::new();
        for (f, r) in &cal.families {
            for (p, ms) in &r.by_profile {
                for (m, x) in ms {
                    families.push(StateFamily {
                        family: f.clone(),
                        profile: *p,
                        method: m.as_str().to_string(),
                        median: x.median_abs_rel_error,
                    });
                }
            }
        }
        let rows = cal.rows.iter().map(|r| row(r, threshold)).collect();
        let exclusions = cal
            .exclusions
            .iter()
            .map(|e| StateExclusion {
                run_id: e.run_id.clone(),
                reason: e.reason.as_str().to_string(),
                detail: e.detail.clone(),
            })
            .collect();
        ReviewState {
            format: STATE_FORMAT.to_string(),
            tool_version: cal.tool_version.to_string(),
            methods,
            families,
            rows,
            exclusions,
            rules: repo.and_then(rules),
        }
    }

    /// Reads a state another memcal printed; the error says why it cannot be compared.
    pub fn parse(bytes: &[u8]) -> Result<ReviewState, String> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("its output is not JSON ({e})"))?;
        match v.get("format").and_then(|f| f.as_str()) {
            Some(STATE_FORMAT) => {}
            Some(other) => {
                return Err(format!(
                    "it printed format `{other}`; this memcal reads `{STATE_FORMAT}`"
                ))
            }
            None => return Err("its output has no `format`".into()),
        }
        serde_json::from_value(v).map_err(|e| format!("its output does not parse: {e}"))
    }

    /// The summary of `method` over `profile`'s rows (empty where the state has none).
    pub fn summary(&self, profile: Precision, method: Method) -> MetricSummary {
        self.methods
            .iter()
            .find(|m| m.profile == profile && m.method == method.as_str())
            .map(|m| m.summary.clone())
            .unwrap_or_default()
    }

    /// The method ids this state has that this memcal does not know.
    pub fn unknown_methods(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .methods
            .iter()
            .filter(|m| Method::parse(&m.method).is_none())
            .map(|m| m.method.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn row(r: &crate::engine::RowResult, threshold: u64) -> StateRow {
    let measured = (r.status == RunStatus::Completed)
        .then_some(r.measured_bytes)
        .flatten();
    let in_sample = measured.filter(|m| *m >= threshold);
    let mut errors = BTreeMap::new();
    let mut predictions = BTreeMap::new();
    for (m, pred) in r.predictions.iter() {
        predictions.insert(m.as_str().to_string(), pred);
        if let Some(x) = in_sample {
            errors.insert(m.as_str().to_string(), pred / x as f64 - 1.0);
        }
    }
    StateRow {
        run_id: r.run_id.to_string(),
        family: r.family.to_string(),
        graph: r.graph.to_string(),
        regime: r.regime.to_string(),
        profile: r.precision,
        batch: r.batch,
        measured_bytes: measured,
        features: r.features,
        errors,
        predictions,
        checks: r
            .checks
            .iter()
            .map(|c| StateCheck {
                card_bytes: c.card_bytes,
                truth: c.truth,
                fits: Method::ALL
                    .iter()
                    .filter_map(|m| c.fits.get(m).map(|v| (m.as_str().to_string(), *v)))
                    .collect(),
            })
            .collect(),
    }
}

/// The generic rule on the repository's OpInfo samples, per ATen op (none: no samples file, or
/// one that does not read).
fn rules(repo: &Path) -> Option<Vec<StateRule>> {
    let bytes = std::fs::read(repo.join(OPINFO_SAMPLES)).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let checked = crate::opcheck::check(&v).ok()?;
    let mut by_op: BTreeMap<&str, (StateRule, Sha256)> = BTreeMap::new();
    for c in &checked {
        let (rule, hash) = by_op.entry(c.target.as_str()).or_insert_with(|| {
            (
                StateRule {
                    op: c.target.clone(),
                    samples: 0,
                    exact: 0,
                    refused: 0,
                    digest: String::new(),
                },
                Sha256::new(),
            )
        });
        rule.samples += 1;
        match &c.predicted {
            Ok(p) => {
                hash.update(format!("{}:{:?}\n", c.opinfo, p));
                if matches!(c.worst(), Some((crate::opcheck::Closeness::Exact, _))) {
                    rule.exact += 1;
                }
            }
            Err(e) => {
                rule.refused += 1;
                hash.update(format!("{}:refused:{e}\n", c.opinfo));
            }
        }
    }
    Some(
        by_op
            .into_values()
            .map(|(mut r, h)| {
                r.digest = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
                r
            })
            .collect(),
    )
}
