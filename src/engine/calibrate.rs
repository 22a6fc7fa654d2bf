//! `calibrate`: buckets, fits, held-out refits, the upper bound, card checks and metrics. Pure:
//! no I/O, and the same rows in any order give the same result to the last bit.

use super::fit::{fit, FitOutcome, Normal};
use super::intervals::{self, Interval};
use super::{Dataset, Row};
use crate::factors::FactorsFile;
use crate::features::{Precision, FEATURE_NAMES, N_FEATURES};
use crate::intern::Name;
use crate::plan::{self, Verdict};
use crate::run::RunStatus;
use crate::time::parse_rfc3339;
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

/// Relative error within which a prediction counts as "within 25%".
pub const WITHIN: f64 = 0.25;

/// The number of precision profiles (`Precision::ALL`), for arrays indexed by `precision as usize`.
const NP: usize = Precision::ALL.len();

/// Where a usable row goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bucket {
    /// A training-regime row: in the shipped fit and in every held-out-by-architecture refit
    /// except its own family's.
    Fitted,
    /// A row of a regime outside `training_regimes`: never fitted, predicted by the shipped
    /// (training-regime) factors.
    HeldOutRegime,
    /// Marker `after-fit`, measured after `provenance.fixed_at`: never fitted, predicted by the
    /// factors in `data/factors.json` as fixed then.
    AfterFit,
}

/// Why a row is excluded. Computed by code, first matching reason wins, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExclusionReason {
    /// Another row file earlier in path order has the same run id.
    DuplicateRunId,
    /// The run failed for a reason other than memory.
    StatusError,
    /// The graph file changed since the run (its SHA-256 differs from the recorded one).
    GraphChanged,
    /// The harness reported that the built model's parameter count differs from the graph's.
    GraphMismatch,
    /// The graph has no batch axis.
    NoBatchAxis,
    /// The row's regime is not listed in `data/factors.json`.
    UnknownRegime,
    /// The row's `device.kind` is not its regime's `device` (a CPU row under a CUDA regime):
    /// its label and its cards would be wrong, so it is never fitted nor shown as either.
    DeviceRegimeMismatch,
    /// `data/factors.json` has no factors for the row's precision profile.
    NoFactorsForPrecision,
    /// Marker `after-fit`, but the factors file has no `provenance` (never fixed).
    AfterFitUnfixed,
    /// Marker `after-fit`, but the run's timestamp is not later than `provenance.fixed_at`.
    AfterFitNotLater,
}

impl ExclusionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ExclusionReason::DuplicateRunId => "duplicate-run-id",
            ExclusionReason::StatusError => "status-error",
            ExclusionReason::GraphChanged => "graph-changed",
            ExclusionReason::GraphMismatch => "graph-mismatch",
            ExclusionReason::NoBatchAxis => "no-batch-axis",
            ExclusionReason::UnknownRegime => "unknown-regime",
            ExclusionReason::DeviceRegimeMismatch => "device-regime-mismatch",
            ExclusionReason::NoFactorsForPrecision => "no-factors-for-precision",
            ExclusionReason::AfterFitUnfixed => "after-fit-unfixed",
            ExclusionReason::AfterFitNotLater => "after-fit-not-later",
        }
    }
}

/// An excluded row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exclusion {
    pub run_id: String,
    pub file: String,
    pub reason: ExclusionReason,
    /// The numbers behind the reason, in words.
    pub detail: String,
}

/// A prediction method on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// accelerate's training estimate; fits iff estimate <= card (as printed, no headroom).
    Accelerate,
    /// The textbook formula, where it applies; fits iff total <= card.
    Textbook,
    /// `data/factors.json`'s factors, exactly as shipped, on every usable row (fitted, held out
    /// by regime, after the fit): what a user of the planner gets today. The only method that
    /// sees an edit of the factors file on every row.
    PlanAsShipped,
    /// The factors refitted on today's fitted rows, on those same rows (in-sample): what
    /// `memcal fit --write-factors` would ship now.
    PlanRefitInSample,
    /// Each fitted row predicted by factors refitted without its family.
    PlanHeldOutArchitecture,
    /// Each fitted row predicted by factors refitted without every family that shares an
    /// implementation block with its own (see [`ImplementationGroup`]): stricter than by
    /// architecture, since families built by one builder are not independent.
    PlanHeldOutImplementation,
    /// Non-training-regime rows predicted by the shipped (training-regime) factors.
    PlanHeldOutRegime,
    /// After-the-fit rows predicted by the factors as fixed in `data/factors.json`.
    PlanAfterFit,
    /// The training-step simulator (`memcal::simulate`): per-op saved tensors and a liveness
    /// timeline, no fitted factor; on every row whose precision has a rule table. It fits a
    /// card by the plan's rule (estimate x (1 + headroom) <= card).
    Simulated,
}

/// Number of methods.
pub const N_METHODS: usize = 9;

impl Method {
    pub const ALL: [Method; N_METHODS] = [
        Method::Accelerate,
        Method::Textbook,
        Method::PlanAsShipped,
        Method::PlanRefitInSample,
        Method::PlanHeldOutArchitecture,
        Method::PlanHeldOutImplementation,
        Method::PlanHeldOutRegime,
        Method::PlanAfterFit,
        Method::Simulated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Accelerate => "accelerate",
            Method::Textbook => "textbook",
            Method::PlanAsShipped => "plan-as-shipped",
            Method::PlanRefitInSample => "plan-refit-in-sample",
            Method::PlanHeldOutArchitecture => "plan-held-out-architecture",
            Method::PlanHeldOutImplementation => "plan-held-out-implementation",
            Method::PlanHeldOutRegime => "plan-held-out-regime",
            Method::PlanAfterFit => "plan-after-fit",
            Method::Simulated => "simulated",
        }
    }

    /// The method's name for people (the page, the pull-request comment).
    pub fn label(self) -> &'static str {
        match self {
            Method::Accelerate => "accelerate estimate-memory",
            Method::Textbook => "textbook formula",
            Method::PlanAsShipped => "plan, as shipped (data/factors.json)",
            Method::PlanRefitInSample => "plan, refit on today's rows (in-sample)",
            Method::PlanHeldOutArchitecture => "plan, held out by architecture",
            Method::PlanHeldOutImplementation => "plan, held out by implementation",
            Method::PlanHeldOutRegime => "plan, held out by regime",
            Method::PlanAfterFit => "plan, after the fit",
            Method::Simulated => "simulated training step (no fitted factor)",
        }
    }

    /// The six-factor plan's methods (every method but the baselines and the simulator).
    pub fn is_plan(self) -> bool {
        matches!(
            self,
            Method::PlanAsShipped
                | Method::PlanRefitInSample
                | Method::PlanHeldOutArchitecture
                | Method::PlanHeldOutImplementation
                | Method::PlanHeldOutRegime
                | Method::PlanAfterFit
        )
    }

    /// The method named `s` (its `as_str`).
    pub fn parse(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Out-of-sample plan methods (their missed OOMs are known misses).
    pub fn out_of_sample_plan(self) -> bool {
        matches!(
            self,
            Method::PlanHeldOutArchitecture
                | Method::PlanHeldOutImplementation
                | Method::PlanHeldOutRegime
                | Method::PlanAfterFit
        )
    }
}

/// One value per method, serialised as a map from method name to value (present ones only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PerMethod<T>(pub [Option<T>; N_METHODS]);

impl<T: Copy> PerMethod<T> {
    pub fn get(&self, m: &Method) -> Option<&T> {
        self.0[*m as usize].as_ref()
    }
    pub fn set(&mut self, m: Method, v: T) {
        self.0[m as usize] = Some(v);
    }
    pub fn contains_key(&self, m: &Method) -> bool {
        self.0[*m as usize].is_some()
    }
    /// Present entries in method order.
    pub fn iter(&self) -> impl Iterator<Item = (Method, T)> + '_ {
        Method::ALL
            .iter()
            .zip(self.0.iter())
            .filter_map(|(m, v)| v.map(|v| (*m, v)))
    }
}

impl<T: Copy> std::ops::Index<&Method> for PerMethod<T> {
    type Output = T;
    fn index(&self, m: &Method) -> &T {
        self.0[*m as usize]
            .as_ref()
            .unwrap_or_else(|| panic!("no value for method {}", m.as_str()))
    }
}

impl<T: Copy + Serialize> Serialize for PerMethod<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.iter().count()))?;
        for (m, v) in self.iter() {
            map.serialize_entry(m.as_str(), &v)?;
        }
        map.end()
    }
}

/// Predicted bytes per method: [`PerMethod<f64>`] in 72 bytes instead of 128 (the values and a
/// bit per present method), for the million rows of a large calibration. Same reading API and
/// the same JSON.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Predictions {
    values: [f64; N_METHODS],
    present: u16,
}

impl Predictions {
    pub fn get(&self, m: &Method) -> Option<&f64> {
        let i = *m as usize;
        (self.present & (1 << i) != 0).then(|| &self.values[i])
    }
    pub fn set(&mut self, m: Method, v: f64) {
        self.values[m as usize] = v;
        self.present |= 1 << (m as usize);
    }
    pub fn contains_key(&self, m: &Method) -> bool {
        self.get(m).is_some()
    }
    /// Present entries in method order.
    pub fn iter(&self) -> impl Iterator<Item = (Method, f64)> + '_ {
        Method::ALL
            .iter()
            .filter_map(|m| self.get(m).map(|v| (*m, *v)))
    }
}

impl From<&PerMethod<f64>> for Predictions {
    fn from(p: &PerMethod<f64>) -> Self {
        let mut out = Predictions::default();
        for (m, v) in p.iter() {
            out.set(m, v);
        }
        out
    }
}

impl std::ops::Index<&Method> for Predictions {
    type Output = f64;
    fn index(&self, m: &Method) -> &f64 {
        self.get(m)
            .unwrap_or_else(|| panic!("no value for method {}", m.as_str()))
    }
}

impl Serialize for Predictions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.present.count_ones() as usize))?;
        for (m, v) in self.iter() {
            map.serialize_entry(m.as_str(), &v)?;
        }
        map.end()
    }
}

/// What a run says about one card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Truth {
    /// Completed with measured peak <= card.
    Fits,
    /// Completed with measured peak > card, or ran out of memory at a capacity >= card.
    DoesNotFit,
    /// Ran out of memory at a capacity below the card: says nothing about it (not counted).
    Unknown,
}

/// The truth rule. A completed run fits a card iff its peak <= card; a run that ran out of
/// memory at capacity C does not fit C nor any smaller card, and is unknown for larger ones.
pub fn truth(status: RunStatus, measured: Option<u64>, capacity: u64, card: u64) -> Truth {
    match (status, measured) {
        (RunStatus::Completed, Some(m)) => {
            if m <= card {
                Truth::Fits
            } else {
                Truth::DoesNotFit
            }
        }
        (RunStatus::Oom, _) if card <= capacity => Truth::DoesNotFit,
        _ => Truth::Unknown,
    }
}

/// One card check of one row: the truth and every applicable method's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Check {
    pub card_bytes: u64,
    pub truth: Truth,
    /// A fit check whose measured peak is within `headroom` (15%) of the card.
    pub edge: bool,
    /// Verdicts as "fits" (true) or "does not fit" (false), per method that predicts the row.
    pub fits: PerMethod<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_q90: Option<Verdict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_q95: Option<Verdict>,
}

/// One usable row's results. The names are shared with the input rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    pub run_id: Name,
    pub file: Name,
    pub graph: Name,
    pub family: Name,
    pub regime: Name,
    pub precision: Precision,
    pub batch: u64,
    pub status: RunStatus,
    pub bucket: Bucket,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_bytes: Option<u64>,
    /// For out-of-memory runs: the capacity they ran out at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom_capacity_bytes: Option<u64>,
    /// The capacity the run ran under (the emulated capacity if any, else the device's).
    pub capacity_bytes: u64,
    /// Weight in the fit (fitted completed rows): 1, or `small_runs.weight` below the threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    pub features: [u64; N_FEATURES],
    /// Predicted bytes per method that predicts this row.
    pub predictions: Predictions,
    /// The bound (bytes) at q90 and q95 on this row's out-of-sample plan estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_q90_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_q95_bytes: Option<f64>,
    pub checks: Checks,
}

/// A row's card checks, shared: rows with the same checks (most of a million rows have one of
/// a few thousand lists) hold one copy. Reads as a slice of [`Check`], serialised as a list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checks(Arc<[Check]>);

impl std::ops::Deref for Checks {
    type Target = [Check];
    fn deref(&self) -> &[Check] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Checks {
    type Item = &'a Check;
    type IntoIter = std::slice::Iter<'a, Check>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Serialize for Checks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

/// Hands out one shared copy of each distinct list of checks.
#[derive(Default)]
struct CheckLists(std::collections::HashSet<Checks, super::FastHash>);

impl std::borrow::Borrow<[Check]> for Checks {
    fn borrow(&self) -> &[Check] {
        &self.0
    }
}

impl CheckLists {
    fn share(&mut self, checks: &[Check]) -> Checks {
        if let Some(c) = self.0.get(checks) {
            return c.clone();
        }
        let c = Checks(Arc::from(checks));
        self.0.insert(c.clone());
        c
    }
}

// `calibrate` fills a vector of `Option<RowResult>` and unwraps it in place: same size.
const _: () = assert!(std::mem::size_of::<Option<RowResult>>() == std::mem::size_of::<RowResult>());

/// A card check, named.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CheckRef {
    pub run_id: Name,
    pub card_bytes: u64,
}

/// The facts of the measurement behind the page, over every row read: sorted and distinct.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Measured {
    /// `<kind>: <name>`, e.g. `cpu: Intel(R) Xeon(R) Processor`.
    pub devices: Vec<String>,
    pub first_run: Option<String>,
    pub last_run: Option<String>,
    pub harness_versions: Vec<String>,
    pub torch_versions: Vec<String>,
    /// Per precision profile, the devices of its rows (`<kind>: <name>`, sorted, distinct): the
    /// profiles are measured on different devices, and the page names each profile's.
    pub devices_by_profile: BTreeMap<Precision, Vec<String>>,
    /// Per regime, what its rows say about how it was measured (the page shows these beside the
    /// regime's number-free description).
    pub regimes: BTreeMap<String, RegimeRows>,
}

/// A regime's rows, apart: those measured with it and those marked `after-fit` (measured later,
/// to test the fixed factors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct RegimeRows {
    pub measured: RegimeFacts,
    pub after_fit: RegimeFacts,
}

/// The facts of one regime, over every row read under it: computed, never typed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct RegimeFacts {
    /// Row files read.
    pub rows: u64,
    /// Of those, completed runs and out-of-memory runs.
    pub completed: u64,
    pub oom: u64,
    /// Distinct graphs measured.
    pub graphs: u64,
    /// Distinct batches per graph: the fewest, the most, and the graphs with only one.
    pub min_batches_per_graph: u64,
    pub max_batches_per_graph: u64,
    pub graphs_with_one_batch: u64,
    /// The devices (`<kind>: <name>`), their own capacities, and the emulated capacities the
    /// capped rows ran under (empty: no row was capped), each sorted and distinct.
    pub devices: Vec<String>,
    pub device_capacities_bytes: Vec<u64>,
    pub caps_bytes: Vec<u64>,
    /// Rows run uncapped (at the device's capacity).
    pub uncapped_rows: u64,
    pub precisions: Vec<Precision>,
}

impl RegimeFacts {
    fn of<'a>(rows: impl Iterator<Item = &'a super::Row>) -> RegimeFacts {
        let mut f = RegimeFacts::default();
        let mut batches: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        let (mut devices, mut device_caps, mut caps, mut precisions) = (
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
            BTreeSet::new(),
        );
        for r in rows {
            f.rows += 1;
            match r.status {
                RunStatus::Completed => f.completed += 1,
                RunStatus::Oom => f.oom += 1,
                _ => {}
            }
            batches.entry(r.graph.as_str()).or_default().insert(r.batch);
            devices.insert(format!("{}: {}", r.device_kind.as_str(), r.device.as_str()));
            device_caps.insert(r.device_capacity_bytes);
            if r.capped {
                caps.insert(r.capacity_bytes);
            } else {
                f.uncapped_rows += 1;
            }
            precisions.insert(r.precision);
        }
        let counts = || batches.values().map(|b| b.len() as u64);
        f.graphs = batches.len() as u64;
        f.min_batches_per_graph = counts().min().unwrap_or(0);
        f.max_batches_per_graph = counts().max().unwrap_or(0);
        f.graphs_with_one_batch = counts().filter(|&n| n == 1).count() as u64;
        f.devices = devices.into_iter().collect();
        f.device_capacities_bytes = device_caps.into_iter().collect();
        f.caps_bytes = caps.into_iter().collect();
        f.precisions = precisions.into_iter().collect();
        f
    }
}

impl Measured {
    fn of(rows: &[super::Row]) -> Measured {
        let distinct = |f: &dyn Fn(&super::Row) -> &str| -> Vec<String> {
            let set: BTreeSet<&str> = rows.iter().map(f).collect();
            set.into_iter().map(str::to_string).collect()
        };
        let devices: BTreeSet<String> = rows
            .iter()
            .map(|r| (r.device_kind.as_str(), r.device.as_str()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|(k, d)| format!("{k}: {d}"))
            .collect();
        let mut by_profile: BTreeMap<Precision, BTreeSet<(&str, &str)>> = BTreeMap::new();
        let mut by_regime: BTreeMap<&str, [Vec<&super::Row>; 2]> = BTreeMap::new();
        for r in rows {
            by_profile
                .entry(r.precision)
                .or_default()
                .insert((r.device_kind.as_str(), r.device.as_str()));
            by_regime.entry(r.regime.as_str()).or_default()[usize::from(r.after_fit)].push(r);
        }
        Measured {
            devices_by_profile: by_profile
                .into_iter()
                .map(|(p, d)| (p, d.iter().map(|(k, n)| format!("{k}: {n}")).collect()))
                .collect(),
            regimes: by_regime
                .into_iter()
                .map(|(g, [before, after])| {
                    let rows = RegimeRows {
                        measured: RegimeFacts::of(before.into_iter()),
                        after_fit: RegimeFacts::of(after.into_iter()),
                    };
                    (g.to_string(), rows)
                })
                .collect(),
            devices: devices.into_iter().collect(),
            first_run: rows
                .iter()
                .map(|r| r.timestamp.as_str())
                .min()
                .map(str::to_string),
            last_run: rows
                .iter()
                .map(|r| r.timestamp.as_str())
                .max()
                .map(str::to_string),
            harness_versions: distinct(&|r| r.harness_version.as_str()),
            torch_versions: distinct(&|r| r.torch_version.as_str()),
        }
    }
}

/// One method's numbers over a set of rows.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct MethodMetrics {
    /// Rows the method predicts.
    pub rows: u64,
    /// Completed runs >= `small_runs.threshold_bytes` with a prediction: the error's rows.
    pub error_rows: u64,
    /// Median |pred / measured - 1| over those (the mean of the two middle values for even n).
    pub median_abs_rel_error: Option<f64>,
    /// Largest |pred / measured - 1| over those.
    pub max_abs_rel_error: Option<f64>,
    /// Share of those within 25%.
    pub within_25pct: Option<f64>,
    /// Checks whose truth is "does not fit".
    pub did_not_fit_checks: u64,
    /// Of those, the ones the method called "fits".
    pub missed_oom: Vec<CheckRef>,
    /// Checks whose truth is "fits".
    pub fit_checks: u64,
    /// Of those, called "does not fit" with the peak within 15% of the card.
    pub false_alarm_edge: Vec<CheckRef>,
    /// Of those, called "does not fit" with the peak further below the card: over-estimates.
    pub false_alarm_over: Vec<CheckRef>,
    /// Checks with a verdict equal to the truth, over fit + did-not-fit checks.
    pub correct_checks: u64,
    pub accuracy: Option<f64>,
    /// The 95% interval of the median |error| (order statistics; absent: too few runs).
    pub median_interval: Option<Interval>,
    /// The 95% interval of `within_25pct` (Wilson).
    pub within_25pct_interval: Option<Interval>,
    /// Missed checks over did-not-fit checks, and its 95% interval (Wilson).
    pub missed_oom_share: Option<f64>,
    pub missed_oom_interval: Option<Interval>,
    /// The median |error| rests on few runs: it has no interval, or one wider than
    /// `FEW_RUNS_MEDIAN_WIDTH`.
    pub few_runs: bool,
}

/// Counts of the bound's three verdicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct VerdictCounts {
    pub fits: u64,
    pub borderline: u64,
    pub does_not_fit: u64,
}

impl VerdictCounts {
    fn merge(&mut self, o: &VerdictCounts) {
        self.fits += o.fits;
        self.borderline += o.borderline;
        self.does_not_fit += o.does_not_fit;
    }

    fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Fits => self.fits += 1,
            Verdict::Borderline => self.borderline += 1,
            Verdict::DoesNotFit => self.does_not_fit += 1,
        }
    }
}

/// The bound's verdicts at one multiplier.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct BoundCounts {
    pub on_did_not_fit: VerdictCounts,
    pub on_fit: VerdictCounts,
    /// Did-not-fit checks the bound called "fits".
    pub missed_oom: Vec<CheckRef>,
}

/// The bound's verdict counts at q90 and q95.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct BoundMetrics {
    pub q90: BoundCounts,
    pub q95: BoundCounts,
}

/// One fit's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitReport {
    pub factors: [f64; N_FEATURES],
    /// `fit`, or `kept` (no fitted row: the current factors stay).
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<FitOutcome>,
}

/// Fits of one precision profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileFits {
    /// The factors currently in `data/factors.json` (used for after-the-fit rows).
    pub file_factors: [f64; N_FEATURES],
    /// Fitted on every fitted row of the profile (in-sample).
    pub shipped: FitReport,
    /// Per family: refitted without that family (absent when no other family has completed runs).
    pub held_out_architecture: BTreeMap<String, FitReport>,
    /// Per implementation group of more than one family (its [`ImplementationGroup::name`]):
    /// refitted without every family of the group. A group of one family uses that family's
    /// `held_out_architecture` fit.
    pub held_out_implementation: BTreeMap<String, FitReport>,
    /// The profile's upper bound, from its own fitted rows.
    pub upper: Upper,
    /// Each method's metrics over this profile's rows alone.
    pub methods: BTreeMap<Method, MethodMetrics>,
}

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

/// How the bound's quantiles are read off the sorted ratios.
pub const NEAREST_RANK_RULE: &str = "nearest rank: q_p = sorted[ceil(p * n) - 1]";

/// The upper-bound quantiles of one profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Upper {
    /// `nearest rank: q_p = sorted[ceil(p * n) - 1]`.
    pub rule: &'static str,
    /// (run id, measured / held-out-by-architecture prediction), ascending by ratio then id.
    pub ratios: Vec<(Name, f64)>,
    pub q90: Option<f64>,
    pub q95: Option<f64>,
    /// The 95% intervals of q90 and q95 (order statistics of the ratios; absent: too few).
    pub q90_interval: Option<Interval>,
    pub q95_interval: Option<Interval>,
    /// Fitted completed rows >= threshold without a positive held-out prediction (not in ratios).
    pub unpredicted: Vec<Name>,
    /// The multipliers the checks of held-out-by-regime rows used: these quantiles, or the
    /// file's where there are none.
    pub q90_used: f64,
    pub q95_used: f64,
    /// Per family: the quantiles of the other families' ratios alone, which the bound's
    /// verdicts on that family's fitted rows use (so no fitted row is covered by its own
    /// ratio). A family absent here (no other family has ratios) uses the file's multipliers.
    pub leave_family_out: BTreeMap<String, LeaveFamilyOut>,
}

/// The bound's multipliers for one family's fitted rows: quantiles of the other families'
/// ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LeaveFamilyOut {
    /// Ratios of the other families (the quantiles' sample).
    pub ratios: u64,
    pub q90: f64,
    pub q95: f64,
}

/// Row totals. inputs = fitted + held_out_regime + after_fit + excluded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub inputs: u64,
    pub fitted: u64,
    pub held_out_regime: u64,
    pub after_fit: u64,
    pub excluded: u64,
    pub balanced: bool,
}

/// A family's known miss.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnownMiss {
    pub family: String,
    /// Misses are found per precision profile, so that one profile's good runs never hide the
    /// other's misses.
    pub precision: Precision,
    pub method: Method,
    /// The numbers, in words.
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_abs_rel_error: Option<f64>,
    pub missed_oom: Vec<CheckRef>,
}

/// A family's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyReport {
    pub graphs: Vec<String>,
    pub rows: u64,
    pub methods: BTreeMap<Method, MethodMetrics>,
    /// The same over each precision profile's rows of the family alone (profiles with rows).
    pub by_profile: BTreeMap<Precision, BTreeMap<Method, MethodMetrics>>,
}

/// The settings the calibration ran with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub headroom: f64,
    pub small_runs_threshold_bytes: u64,
    pub small_runs_weight: f64,
    pub oom_penalty: f64,
    pub bound_floor_bytes: u64,
    pub training_regimes: Vec<String>,
    pub fixed_at: Option<String>,
    pub feature_names: [&'static str; N_FEATURES],
    /// The level and rule of every interval, and the width beyond which a median is "few runs".
    pub confidence: f64,
    pub interval_rule: &'static str,
    pub few_runs_median_width: f64,
}

/// Everything `memcal fit` and the page show, with the row ids behind each number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub tool_version: &'static str,
    pub settings: Settings,
    pub totals: Totals,
    pub excluded_by_reason: BTreeMap<ExclusionReason, u64>,
    /// Sorted by file.
    pub exclusions: Vec<Exclusion>,
    pub fits: BTreeMap<Precision, ProfileFits>,
    /// The families "held out by implementation" holds out together, in order of their first
    /// family.
    pub implementation_groups: Vec<ImplementationGroup>,
    pub methods: BTreeMap<Method, MethodMetrics>,
    pub bound: BoundMetrics,
    pub families: BTreeMap<String, FamilyReport>,
    pub known_misses: Vec<KnownMiss>,
    /// Whether `provenance.rows_sha256` of the factors file equals that of today's fitted rows.
    pub factors_file_rows_match: bool,
    /// SHA-256 over today's fitted rows (see `rows_sha256`).
    pub fitted_rows_sha256: String,
    /// Graphs the textbook formula does not apply to, with the reason (its rows show "n/a").
    pub textbook_not_applicable: BTreeMap<String, String>,
    /// What was measured, over every row read (excluded ones too): sorted, distinct.
    pub measured: Measured,
    /// Usable rows, sorted by run id.
    pub rows: Vec<RowResult>,
    /// The simulator's reserved peak (CUDA allocator replay) against measured reserved, per
    /// profile; apart from the methods, which predict the allocated peak.
    pub simulated_reserved: BTreeMap<Precision, super::reserved::ReservedSummary>,
}

/// A prediction's |predicted / measured - 1|, on a completed run of at least `threshold`
/// bytes (`measured` is absent for the others): the error every median and share is over.
pub fn abs_rel_error(pred: f64, measured: Option<u64>, threshold: u64) -> Option<f64> {
    measured
        .filter(|m| *m >= threshold)
        .map(|m| (pred / m as f64 - 1.0).abs())
}

/// A row result's error under `method` (see [`abs_rel_error`]).
pub fn row_abs_rel_error(r: &RowResult, method: Method, threshold: u64) -> Option<f64> {
    let pred = *r.predictions.get(&method)?;
    let measured = if r.status == RunStatus::Completed {
        r.measured_bytes
    } else {
        None
    };
    abs_rel_error(pred, measured, threshold)
}

/// Nearest-rank empirical quantile of an ascending slice: sorted[ceil(percent * n / 100) - 1].
pub fn nearest_rank(sorted: &[f64], percent: u32) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let rank = (percent as u64 * n).div_ceil(100).clamp(1, n);
    Some(sorted[(rank - 1) as usize])
}

fn cmp_path(a: &str, b: &str) -> Ordering {
    // A row of a bundle is `file.jsonl:line`: by the file's path, then by line number.
    fn split(s: &str) -> (&str, u64) {
        s.rsplit_once(':')
            .filter(|(p, _)| p.ends_with(".jsonl"))
            .and_then(|(p, n)| n.parse().ok().map(|n| (p, n)))
            .unwrap_or((s, 0))
    }
    let (a, b) = (split(a), split(b));
    Path::new(a.0).cmp(Path::new(b.0)).then(a.1.cmp(&b.1))
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Running tallies of one method over a set of rows.
#[derive(Default, Clone)]
struct Acc {
    rows: u64,
    errors: Vec<f64>,
    m: MethodMetrics,
}

impl Acc {
    fn merge(&mut self, o: Acc) {
        self.rows += o.rows;
        self.errors.extend(o.errors);
        let (m, n) = (&mut self.m, o.m);
        m.did_not_fit_checks += n.did_not_fit_checks;
        m.fit_checks += n.fit_checks;
        m.correct_checks += n.correct_checks;
        m.missed_oom.extend(n.missed_oom);
        m.false_alarm_edge.extend(n.false_alarm_edge);
        m.false_alarm_over.extend(n.false_alarm_over);
    }

    fn finish(mut self) -> MethodMetrics {
        let mut m = self.m;
        m.rows = self.rows;
        let n = self.errors.len() as u64;
        m.error_rows = n;
        if n > 0 {
            let within = self.errors.iter().filter(|e| **e <= WITHIN).count() as u64;
            m.within_25pct = Some(within as f64 / n as f64);
            m.within_25pct_interval = intervals::share_interval(within, n);
        }
        m.median_abs_rel_error = median(&mut self.errors);
        m.max_abs_rel_error = self.errors.iter().copied().reduce(f64::max);
        let counted = m.fit_checks + m.did_not_fit_checks;
        if counted > 0 {
            m.accuracy = Some(m.correct_checks as f64 / counted as f64);
        }
        // `median` sorted the errors.
        m.median_interval = intervals::median_interval(&self.errors);
        let missed = m.missed_oom.len() as u64;
        if m.did_not_fit_checks > 0 {
            m.missed_oom_share = Some(missed as f64 / m.did_not_fit_checks as f64);
            m.missed_oom_interval = intervals::share_interval(missed, m.did_not_fit_checks);
        }
        m.few_runs = m.median_abs_rel_error.is_some()
            && m.median_interval
                .is_none_or(|i| i.width() > intervals::FEW_RUNS_MEDIAN_WIDTH);
        for list in [
            &mut m.missed_oom,
            &mut m.false_alarm_edge,
            &mut m.false_alarm_over,
        ] {
            list.sort();
            list.shrink_to_fit();
        }
        m
    }
}

fn classify(
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

/// Sorts `v` by `cmp` on two threads (each half alone, then merged): the same order as
/// `sort_by` for a total order.
fn sort_on_two_threads<T, F>(v: &mut Vec<T>, cmp: F)
where
    T: Send + Copy,
    F: Fn(&T, &T) -> Ordering + Sync,
{
    if v.len() < 1 << 14 {
        v.sort_by(&cmp);
        return;
    }
    let mid = v.len() / 2;
    let (a, b) = v.split_at_mut(mid);
    std::thread::scope(|sc| {
        let other = sc.spawn(|| b.sort_by(&cmp));
        a.sort_by(&cmp);
        other.join().expect("the sorting thread does not panic");
    });
    let (a, b) = v.split_at(mid);
    let mut out = Vec::with_capacity(v.len());
    let (mut x, mut y) = (0, 0);
    while x < a.len() && y < b.len() {
        if cmp(&b[y], &a[x]) == Ordering::Less {
            out.push(b[y]);
            y += 1;
        } else {
            out.push(a[x]);
            x += 1;
        }
    }
    out.extend_from_slice(&a[x..]);
    out.extend_from_slice(&b[y..]);
    *v = out;
}

/// Runs the whole calibration on a dataset. Pure and deterministic.
pub fn calibrate(ds: &Dataset) -> Calibration {
    // The facts of the measurement read every row and nothing else: on a thread of their own.
    std::thread::scope(|sc| {
        let measured = sc.spawn(|| Measured::of(&ds.rows));
        let mut c = calibrate_rows(ds);
        c.measured = measured
            .join()
            .expect("the thread of the facts does not panic");
        c
    })
}

/// [`calibrate`] but for `measured`.
fn calibrate_rows(ds: &Dataset) -> Calibration {
    let f = &ds.factors;
    let threshold = f.small_runs.threshold_bytes;
    // When each profile's factors were fixed (its after-the-fit rows must be later).
    let fixed_at = Precision::ALL.map(|p| f.fixed_at_for(p).and_then(|t| parse_rfc3339(t).ok()));
    // Order by (run id, path): duplicates become neighbours, the first by path first.
    let mut keys: Vec<(&str, u32)> = ds
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.run_id.as_str(), i as u32))
        .collect();
    let by_id_then_path = |a: &(&str, u32), b: &(&str, u32)| {
        a.0.cmp(b.0)
            .then_with(|| cmp_path(&ds.rows[a.1 as usize].file, &ds.rows[b.1 as usize].file))
    };
    if keys
        .windows(2)
        .any(|w| by_id_then_path(&w[0], &w[1]) == Ordering::Greater)
    {
        sort_on_two_threads(&mut keys, by_id_then_path);
    }
    let order: Vec<u32> = keys.iter().map(|k| k.1).collect();
    drop(keys);
    let regimes: Vec<(&str, bool, &str)> = f
        .regimes
        .iter()
        .map(|(k, r)| {
            (
                k.as_str(),
                f.training_regimes.contains(k),
                r.device.as_str(),
            )
        })
        .collect();
    let has_factors = Precision::ALL.map(|p| f.factors(p).is_some());
    let h = f.headroom;
    let weight_of = |m: u64| {
        if m < threshold {
            f.small_runs.weight
        } else {
            1.0
        }
    };

    // One pass over the rows in run-id order (each row read once, while it is in the cache),
    // in two halves on two threads: bucket or exclusion; for a usable row its family
    // (numbered as first seen; by the name's shared allocation first, then by the name); for a
    // fitted row its line of the fitted rows' SHA-256 (usable rows are in run-id order and
    // their run ids distinct: duplicates are excluded, so this is rows_sha256's order) and its
    // part of the fit, per profile and family: normal equations of the completed runs,
    // constraint vectors of the out-of-memory runs, both in run-id order. The first half
    // hashes and adds its fitted rows as it goes; the second keeps its fitted rows' lines of
    // the SHA-256, hashed after the first's, and its fitted rows are added to the blocks after
    // the first's: the same order, so the same bytes and the same floats as one pass.
    type Block = (Normal, Vec<[f64; N_FEATURES]>);
    type Blocks = Vec<Option<Block>>;
    // A fitted row's part of its profile's and family's block.
    let add_fitted = |blocks: &mut BTreeMap<Precision, Blocks>, row: &Row, fam: usize| {
        let list = blocks.entry(row.precision).or_default();
        if list.len() <= fam {
            list.resize(fam + 1, None);
        }
        let e = list[fam].get_or_insert_with(Default::default);
        match (row.status, row.measured_bytes) {
            (RunStatus::Completed, Some(m)) => {
                e.0.add_run(&row.features.as_f64(), m as f64, weight_of(m))
            }
            (RunStatus::Oom, _) => {
                let c = row.capacity_bytes as f64;
                e.1.push(row.features.as_f64().map(|v| (1.0 + h) * v / c));
            }
            _ => {}
        }
    };
    /// What a half of the rows gives.
    #[derive(Default)]
    struct Half<'a> {
        /// (row, bucket, family as an index into `families`).
        usable: Vec<(usize, Bucket, usize)>,
        exclusions: Vec<Exclusion>,
        /// Family names in the order first seen.
        families: Vec<&'a str>,
        /// The second half's fitted rows' lines of the SHA-256, hashed after the first's.
        lines: Vec<u8>,
        /// The first half's fitted rows, hashed and added as it goes.
        hash: super::load::RowsHasher,
        blocks: BTreeMap<Precision, Blocks>,
    }
    // `prev`: the row before the half that is not a duplicate (the first of its run id).
    let half = |part: &[u32], mut prev: Option<usize>, direct: bool| -> Half {
        let mut out = Half {
            // The first half's usable rows take the second's after them.
            usable: Vec::with_capacity(if direct { order.len() } else { part.len() }),
            ..Half::default()
        };
        let mut fam_by_alloc: HashMap<usize, usize, super::FastHash> = HashMap::default();
        let mut fam_by_name: HashMap<&str, usize> = HashMap::new();
        for i in part.iter().map(|&i| i as usize) {
            let row = &ds.rows[i];
            let dup = prev.filter(|&p| ds.rows[p].run_id == row.run_id);
            let result = match dup {
                Some(p) => Err((
                    ExclusionReason::DuplicateRunId,
                    format!("run id also in {}, which comes first", ds.rows[p].file),
                )),
                None => {
                    prev = Some(i);
                    classify(ds, row, &fixed_at, &regimes, &has_factors)
                }
            };
            let b = match result {
                Ok(b) => b,
                Err((reason, detail)) => {
                    out.exclusions.push(Exclusion {
                        run_id: row.run_id.to_string(),
                        file: row.file.to_string(),
                        reason,
                        detail,
                    });
                    continue;
                }
            };
            let alloc = Arc::as_ptr(&row.family.0) as usize;
            let fam = match fam_by_alloc.get(&alloc) {
                Some(&k) => k,
                None => {
                    let n = out.families.len();
                    let k = *fam_by_name.entry(row.family.as_str()).or_insert(n);
                    if k == n {
                        out.families.push(row.family.as_str());
                    }
                    fam_by_alloc.insert(alloc, k);
                    k
                }
            };
            out.usable.push((i, b, fam));
            if b == Bucket::Fitted {
                if direct {
                    out.hash.add(&row.run_id, &row.file_sha256);
                    add_fitted(&mut out.blocks, row, fam);
                } else {
                    super::load::RowsHasher::line_into(
                        &mut out.lines,
                        &row.run_id,
                        &row.file_sha256,
                    );
                }
            }
        }
        out
    };
    let mid = order.len() / 2;
    let (first, second) = order.split_at(mid);
    let prev_second = mid.checked_sub(1).map(|mut j| {
        while j > 0 && ds.rows[order[j - 1] as usize].run_id == ds.rows[order[j] as usize].run_id {
            j -= 1;
        }
        order[j] as usize
    });
    let (a, b) = std::thread::scope(|sc| {
        let hb = sc.spawn(|| half(second, prev_second, false));
        let a = half(first, None, true);
        (a, hb.join().expect("the row thread does not panic"))
    });
    drop(order);
    let Half {
        mut usable,
        mut exclusions,
        families: mut first_seen,
        hash: mut fitted_hash,
        mut blocks,
        ..
    } = a;
    // The second half's families as the first's numbers (new ones after them).
    let second_fam: Vec<usize> = b
        .families
        .iter()
        .map(|n| match first_seen.iter().position(|x| x == n) {
            Some(k) => k,
            None => {
                first_seen.push(n);
                first_seen.len() - 1
            }
        })
        .collect();
    fitted_hash.add_lines(&b.lines);
    drop(b.lines);
    for &(i, bk, fam) in &b.usable {
        let fam = second_fam[fam];
        if bk == Bucket::Fitted {
            add_fitted(&mut blocks, &ds.rows[i], fam);
        }
        usable.push((i, bk, fam));
    }
    exclusions.extend(b.exclusions);
    drop(b.usable);
    let fitted_rows_sha256 = fitted_hash.finish();
    exclusions.sort_by(|a, b| cmp_path(&a.file, &b.file));
    let mut excluded_by_reason = BTreeMap::new();
    for e in &exclusions {
        *excluded_by_reason.entry(e.reason).or_insert(0u64) += 1;
    }
    let count = |b: Bucket| usable.iter().filter(|(_, x, _)| *x == b).count() as u64;
    let totals = {
        let (fitted, regime, after) = (
            count(Bucket::Fitted),
            count(Bucket::HeldOutRegime),
            count(Bucket::AfterFit),
        );
        let excluded = exclusions.len() as u64;
        let inputs = ds.rows.len() as u64;
        Totals {
            inputs,
            fitted,
            held_out_regime: regime,
            after_fit: after,
            excluded,
            balanced: inputs == fitted + regime + after + excluded,
        }
    };

    // Families by index in name order.
    let mut fam_names = first_seen.clone();
    fam_names.sort_unstable();
    let mut rank = vec![0usize; fam_names.len()];
    for (k, n) in first_seen.iter().enumerate() {
        rank[k] = fam_names
            .binary_search(n)
            .expect("every family seen is in the sorted list");
    }
    for u in &mut usable {
        u.2 = rank[u.2];
    }
    for list in blocks.values_mut() {
        let mut by_rank: Blocks = vec![None; fam_names.len()];
        for (k, b) in list.drain(..).enumerate() {
            by_rank[rank[k]] = b;
        }
        *list = by_rank;
    }
    drop(first_seen);

    let (groups, group_of) = implementation_groups(&fam_names, &ds.graphs);
    let mut fits: BTreeMap<Precision, ProfileFits> = BTreeMap::new();
    // Per profile, per family index: the held-out-by-architecture factors.
    let mut held_factors: BTreeMap<Precision, Vec<Option<[f64; N_FEATURES]>>> = BTreeMap::new();
    // Per profile, per family index: the held-out-by-implementation factors (its group's).
    let mut group_factors: BTreeMap<Precision, Vec<Option<[f64; N_FEATURES]>>> = BTreeMap::new();
    for p in Precision::ALL {
        let Some(file_factors) = f.factors(p).copied() else {
            continue;
        };
        let fam = blocks.get(&p);
        let present: Vec<(usize, &Block)> = fam
            .map(|v| {
                v.iter()
                    .enumerate()
                    .filter_map(|(k, b)| b.as_ref().map(|b| (k, b)))
                    .collect()
            })
            .unwrap_or_default();
        let shipped = if present.is_empty() {
            FitReport {
                factors: file_factors,
                source: "kept",
                outcome: None,
            }
        } else {
            let mut n = Normal::default();
            let mut ooms = Vec::new();
            for (_, (nb, ob)) in &present {
                n.add(nb);
                ooms.extend_from_slice(ob);
            }
            let out = fit(&n, &ooms, f.oom_penalty, &file_factors);
            FitReport {
                factors: out.factors,
                source: "fit",
                outcome: Some(out),
            }
        };
        let mut held = BTreeMap::new();
        let mut hf = vec![None; fam_names.len()];
        for &(left, _) in &present {
            let mut n = Normal::default();
            let mut ooms = Vec::new();
            for (k, (nb, ob)) in &present {
                if *k != left {
                    n.add(nb);
                    ooms.extend_from_slice(ob);
                }
            }
            if n.n == 0 {
                continue;
            }
            let out = fit(&n, &ooms, f.oom_penalty, &[0.0; N_FEATURES]);
            hf[left] = Some(out.factors);
            held.insert(
                fam_names[left].to_string(),
                FitReport {
                    factors: out.factors,
                    source: "fit",
                    outcome: Some(out),
                },
            );
        }
        // Each group of several families refitted without all of them; a group of one is its
        // family's fit above.
        let mut held_impl = BTreeMap::new();
        let mut gf = vec![None; fam_names.len()];
        for (g, group) in groups.iter().enumerate() {
            let members: Vec<usize> = (0..fam_names.len()).filter(|&k| group_of[k] == g).collect();
            let factors = if members.len() == 1 {
                hf[members[0]]
            } else {
                let mut n = Normal::default();
                let mut ooms = Vec::new();
                for (k, (nb, ob)) in &present {
                    if group_of[*k] != g {
                        n.add(nb);
                        ooms.extend_from_slice(ob);
                    }
                }
                (n.n > 0).then(|| {
                    let out = fit(&n, &ooms, f.oom_penalty, &[0.0; N_FEATURES]);
                    let factors = out.factors;
                    held_impl.insert(
                        group.name.clone(),
                        FitReport {
                            factors,
                            source: "fit",
                            outcome: Some(out),
                        },
                    );
                    factors
                })
            };
            for &k in &members {
                gf[k] = factors;
            }
        }
        held_factors.insert(p, hf);
        group_factors.insert(p, gf);
        fits.insert(
            p,
            ProfileFits {
                file_factors,
                shipped,
                held_out_architecture: held,
                held_out_implementation: held_impl,
                // Set once the held-out predictions and the checks exist (below).
                upper: Upper::default(),
                methods: BTreeMap::new(),
            },
        );
    }

    // Predictions, per usable row in run-id order: computed where they are used (here for the
    // bound's ratios, again in the checks) rather than kept for every row.
    let predict = |i: usize, bucket: Bucket, fam: usize| -> (PerMethod<f64>, Option<f64>) {
        let r = &ds.rows[i];
        let pf = &fits[&r.precision];
        let mut m = PerMethod::default();
        m.set(Method::Accelerate, r.accelerate_bytes as f64);
        if let Some(t) = r.textbook_bytes {
            m.set(Method::Textbook, t as f64);
        }
        if let Some(t) = r.simulated_bytes {
            m.set(Method::Simulated, t as f64);
        }
        m.set(
            Method::PlanAsShipped,
            plan::estimate_floored(&pf.file_factors, &r.features, r.floor_bytes),
        );
        let oos;
        match bucket {
            Bucket::Fitted => {
                m.set(
                    Method::PlanRefitInSample,
                    plan::estimate_floored(&pf.shipped.factors, &r.features, r.floor_bytes),
                );
                oos = held_factors[&r.precision][fam]
                    .map(|a| plan::estimate_floored(&a, &r.features, r.floor_bytes));
                if let Some(e) = oos {
                    m.set(Method::PlanHeldOutArchitecture, e);
                }
                if let Some(a) = group_factors[&r.precision][fam] {
                    m.set(
                        Method::PlanHeldOutImplementation,
                        plan::estimate_floored(&a, &r.features, r.floor_bytes),
                    );
                }
            }
            Bucket::HeldOutRegime => {
                let e = plan::estimate_floored(&pf.shipped.factors, &r.features, r.floor_bytes);
                m.set(Method::PlanHeldOutRegime, e);
                oos = Some(e);
            }
            Bucket::AfterFit => {
                let e = plan::estimate_floored(&pf.file_factors, &r.features, r.floor_bytes);
                m.set(Method::PlanAfterFit, e);
                oos = Some(e);
            }
        }
        (m, oos)
    };

    // The upper bound of each profile: measured / held-out-by-architecture over its fitted
    // completed runs >= threshold.
    let mut ratios: BTreeMap<Precision, Vec<(Name, f64, usize)>> = BTreeMap::new();
    let mut unpredicted: BTreeMap<Precision, Vec<Name>> = BTreeMap::new();
    for &(i, bucket, fam) in &usable {
        let r = &ds.rows[i];
        if bucket != Bucket::Fitted || r.status != RunStatus::Completed {
            continue;
        }
        let Some(m) = r.measured_bytes.filter(|m| *m >= threshold) else {
            continue;
        };
        match predict(i, bucket, fam).1 {
            Some(e) if e > 0.0 => {
                ratios
                    .entry(r.precision)
                    .or_default()
                    .push((r.run_id.clone(), m as f64 / e, fam))
            }
            _ => unpredicted
                .entry(r.precision)
                .or_default()
                .push(r.run_id.clone()),
        }
    }
    let mut uppers: BTreeMap<Precision, Upper> = BTreeMap::new();
    // Per profile, per family index: the leave-family-out multipliers of its fitted rows.
    let mut lfo: BTreeMap<Precision, Vec<Option<(f64, f64)>>> = BTreeMap::new();
    for &p in fits.keys() {
        let mut ratios = ratios.remove(&p).unwrap_or_default();
        ratios.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let sorted: Vec<f64> = ratios.iter().map(|r| r.1).collect();
        let (q90, q95) = (nearest_rank(&sorted, 90), nearest_rank(&sorted, 95));
        let file = f.upper_for(p);
        let mut by_fam = vec![None; fam_names.len()];
        let mut leave_family_out = BTreeMap::new();
        for (k, slot) in by_fam.iter_mut().enumerate() {
            let others: Vec<f64> = ratios.iter().filter(|r| r.2 != k).map(|r| r.1).collect();
            if let (Some(a), Some(b)) = (nearest_rank(&others, 90), nearest_rank(&others, 95)) {
                *slot = Some((a, b));
                leave_family_out.insert(
                    fam_names[k].to_string(),
                    LeaveFamilyOut {
                        ratios: others.len() as u64,
                        q90: a,
                        q95: b,
                    },
                );
            }
        }
        lfo.insert(p, by_fam);
        uppers.insert(
            p,
            Upper {
                rule: NEAREST_RANK_RULE,
                q90,
                q95,
                q90_interval: intervals::quantile_interval(&sorted, 0.90),
                q95_interval: intervals::quantile_interval(&sorted, 0.95),
                q90_used: q90.unwrap_or(file.q90),
                q95_used: q95.unwrap_or(file.q95),
                ratios: ratios.into_iter().map(|(id, r, _)| (id, r)).collect(),
                unpredicted: unpredicted.remove(&p).unwrap_or_default(),
                leave_family_out,
            },
        );
    }

    /// One row's predictions, in the checks.
    struct Pred {
        fam: usize,
        bucket: Bucket,
        preds: PerMethod<f64>,
        /// The row's out-of-sample plan estimate (for the bound).
        oos: Option<f64>,
    }

    // Checks and metrics, over two halves of the rows on two threads, merged in order (the
    // result does not depend on the split).
    struct Part<'a> {
        overall: Vec<Acc>,
        /// Per family and precision profile: index `family * NP + precision as usize`.
        fam_accs: Vec<Vec<Acc>>,
        /// Per precision profile (by `Precision as usize`); its errors are the families' put
        /// together at the end.
        prof_accs: Vec<Vec<Acc>>,
        fam_graphs: Vec<BTreeSet<&'a str>>,
        fam_rows: Vec<u64>,
        bound: BoundMetrics,
    }
    // Each half writes its rows' results into its half of one vector of slots (no second copy
    // of the results while they are merged).
    let run_part = |part: &[(usize, Bucket, usize)], out: &mut [Option<RowResult>]| {
        let nm = Method::ALL.len();
        let new_accs = || (0..nm).map(|_| Acc::default()).collect::<Vec<Acc>>();
        let mut overall = new_accs();
        let mut fam_accs: Vec<Vec<Acc>> = (0..fam_names.len() * NP).map(|_| new_accs()).collect();
        let mut prof_accs: Vec<Vec<Acc>> = Precision::ALL.iter().map(|_| new_accs()).collect();
        let mut fam_graphs: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); fam_names.len()];
        let mut fam_rows = vec![0u64; fam_names.len()];
        let mut last_graph: Vec<&str> = vec![""; fam_names.len()];
        let mut bound = BoundMetrics::default();
        let mut lists = CheckLists::default();
        let mut checks: Vec<Check> = Vec::new();
        for (&(i, bucket, fam), slot) in part.iter().zip(out.iter_mut()) {
            let r = &ds.rows[i];
            let id = &r.run_id;
            let (preds, oos) = predict(i, bucket, fam);
            let p = Pred {
                fam,
                bucket,
                preds,
                oos,
            };
            if last_graph[p.fam] != r.graph.as_str() {
                fam_graphs[p.fam].insert(r.graph.as_str());
                last_graph[p.fam] = r.graph.as_str();
            }
            fam_rows[p.fam] += 1;
            let measured = match r.status {
                RunStatus::Completed => r.measured_bytes,
                _ => None,
            };
            for (method, pred) in p.preds.iter() {
                let mi = method as usize;
                let err = abs_rel_error(pred, measured, threshold);
                // The errors go to the family only; the overall list is the families' put
                // together once (one copy of a million errors fewer while the checks run).
                overall[mi].rows += 1;
                prof_accs[r.precision as usize][mi].rows += 1;
                let acc = &mut fam_accs[p.fam * NP + r.precision as usize][mi];
                acc.rows += 1;
                if let Some(e) = err {
                    acc.errors.push(e);
                }
            }
            let (q90m, q95m) = match p.bucket {
                Bucket::AfterFit => {
                    let u = f.upper_for(r.precision);
                    (u.q90, u.q95)
                }
                // A fitted row's bound comes from the other families' ratios alone.
                Bucket::Fitted => lfo[&r.precision][p.fam].unwrap_or_else(|| {
                    let u = f.upper_for(r.precision);
                    (u.q90, u.q95)
                }),
                Bucket::HeldOutRegime => {
                    let u = &uppers[&r.precision];
                    (u.q90_used, u.q95_used)
                }
            };
            let b90 = p.oos.map(|e| plan::bound(e, q90m, f.bound_floor_bytes));
            let b95 = p.oos.map(|e| plan::bound(e, q95m, f.bound_floor_bytes));
            let cards = &f.regimes[r.regime.as_str()].cards;
            checks.clear();
            for card in cards {
                let t = truth(r.status, measured, r.capacity_bytes, card.bytes);
                let edge = t == Truth::Fits
                    && measured.is_some_and(|m| m as f64 >= card.bytes as f64 * (1.0 - h));
                let mut fits_by = PerMethod::default();
                for (method, pred) in p.preds.iter() {
                    let says_fits = match method {
                        Method::Accelerate | Method::Textbook => pred <= card.bytes as f64,
                        _ => plan::plan_fits(pred, h, card.bytes),
                    };
                    fits_by.set(method, says_fits);
                    if t == Truth::Unknown {
                        continue;
                    }
                    let cref = || CheckRef {
                        run_id: id.clone(),
                        card_bytes: card.bytes,
                    };
                    let mi = method as usize;
                    for acc in [
                        &mut overall[mi],
                        &mut fam_accs[p.fam * NP + r.precision as usize][mi],
                        &mut prof_accs[r.precision as usize][mi],
                    ] {
                        let m = &mut acc.m;
                        match t {
                            Truth::DoesNotFit => {
                                m.did_not_fit_checks += 1;
                                if says_fits {
                                    m.missed_oom.push(cref());
                                } else {
                                    m.correct_checks += 1;
                                }
                            }
                            _ => {
                                m.fit_checks += 1;
                                if says_fits {
                                    m.correct_checks += 1;
                                } else if edge {
                                    m.false_alarm_edge.push(cref());
                                } else {
                                    m.false_alarm_over.push(cref());
                                }
                            }
                        }
                    }
                }
                let v90 = p
                    .oos
                    .zip(b90)
                    .map(|(e, b)| plan::bound_verdict(e, b, h, card.bytes));
                let v95 = p
                    .oos
                    .zip(b95)
                    .map(|(e, b)| plan::bound_verdict(e, b, h, card.bytes));
                for (v, counts) in [(v90, &mut bound.q90), (v95, &mut bound.q95)] {
                    let Some(v) = v else { continue };
                    match t {
                        Truth::DoesNotFit => {
                            counts.on_did_not_fit.add(v);
                            if v == Verdict::Fits {
                                counts.missed_oom.push(CheckRef {
                                    run_id: id.clone(),
                                    card_bytes: card.bytes,
                                });
                            }
                        }
                        Truth::Fits => counts.on_fit.add(v),
                        Truth::Unknown => {}
                    }
                }
                checks.push(Check {
                    card_bytes: card.bytes,
                    truth: t,
                    edge,
                    fits: fits_by,
                    bound_q90: v90,
                    bound_q95: v95,
                });
            }
            *slot = Some(RowResult {
                run_id: id.clone(),
                file: r.file.clone(),
                graph: r.graph.clone(),
                family: r.family.clone(),
                regime: r.regime.clone(),
                precision: r.precision,
                batch: r.batch,
                status: r.status,
                bucket: p.bucket,
                measured_bytes: measured,
                oom_capacity_bytes: (r.status == RunStatus::Oom).then_some(r.capacity_bytes),
                capacity_bytes: r.capacity_bytes,
                weight: (p.bucket == Bucket::Fitted)
                    .then_some(())
                    .and(measured)
                    .map(weight_of),
                features: r.features.as_array(),
                predictions: Predictions::from(&p.preds),
                bound_q90_bytes: b90,
                bound_q95_bytes: b95,
                checks: lists.share(&checks),
            });
        }
        Part {
            overall,
            fam_accs,
            prof_accs,
            fam_graphs,
            fam_rows,
            bound,
        }
    };
    let (first, second) = usable.split_at(usable.len() / 2);
    let mut slots: Vec<Option<RowResult>> = Vec::with_capacity(usable.len());
    slots.resize_with(usable.len(), || None);
    let (out_a, out_b) = slots.split_at_mut(first.len());
    let rp = &run_part;
    let (pa, pb) = std::thread::scope(|sc| {
        let hb = sc.spawn(move || rp(second, out_b));
        let pa = rp(first, out_a);
        (pa, hb.join().expect("the check thread does not panic"))
    });
    // In place: an Option<RowResult> is a RowResult's size (its names are never null).
    let rows_out: Vec<RowResult> = slots
        .into_iter()
        .map(|r| r.expect("every usable row has its result"))
        .collect();
    let Part {
        mut overall,
        mut fam_accs,
        mut prof_accs,
        mut fam_graphs,
        mut fam_rows,
        mut bound,
    } = pa;
    for (a, b) in overall.iter_mut().zip(pb.overall) {
        a.merge(b);
    }
    for (fa, fb) in fam_accs.iter_mut().zip(pb.fam_accs) {
        for (a, b) in fa.iter_mut().zip(fb) {
            a.merge(b);
        }
    }
    for (pa, pb) in prof_accs.iter_mut().zip(pb.prof_accs) {
        for (a, b) in pa.iter_mut().zip(pb) {
            a.merge(b);
        }
    }
    for (ga, gb) in fam_graphs.iter_mut().zip(pb.fam_graphs) {
        ga.extend(gb);
    }
    for (ra, rb) in fam_rows.iter_mut().zip(pb.fam_rows) {
        *ra += rb;
    }
    for (ba, bb) in [
        (&mut bound.q90, pb.bound.q90),
        (&mut bound.q95, pb.bound.q95),
    ] {
        ba.on_did_not_fit.merge(&bb.on_did_not_fit);
        ba.on_fit.merge(&bb.on_fit);
        ba.missed_oom.extend(bb.missed_oom);
    }
    bound.q90.missed_oom.sort();
    bound.q95.missed_oom.sort();

    let finish = |accs: Vec<Acc>| -> BTreeMap<Method, MethodMetrics> {
        Method::ALL
            .iter()
            .zip(accs)
            .filter(|(_, a)| a.rows > 0)
            .map(|(m, a)| (*m, a.finish()))
            .collect()
    };
    for (mi, acc) in overall.iter_mut().enumerate() {
        let n = fam_accs.iter().map(|f| f[mi].errors.len()).sum();
        acc.errors.reserve_exact(n);
        for f in &fam_accs {
            acc.errors.extend_from_slice(&f[mi].errors);
        }
    }
    let methods = finish(overall);
    for (pi, accs) in prof_accs.iter_mut().enumerate() {
        for (mi, acc) in accs.iter_mut().enumerate() {
            for f in fam_accs.iter().skip(pi).step_by(NP) {
                acc.errors.extend_from_slice(&f[mi].errors);
            }
        }
    }
    let mut families = BTreeMap::new();
    let mut known_misses = Vec::new();
    let mut cells = fam_accs.into_iter();
    for k in 0..fam_names.len() {
        let name = fam_names[k].to_string();
        // The family's cells, one per profile: each finished alone, then all merged.
        let mut by_profile = BTreeMap::new();
        let mut accs: Option<Vec<Acc>> = None;
        for p in Precision::ALL {
            let cell = cells.next().expect("a cell per family and profile");
            if cell.iter().any(|a| a.rows > 0) {
                by_profile.insert(p, finish(cell.clone()));
            }
            match &mut accs {
                None => accs = Some(cell),
                Some(all) => {
                    for (a, b) in all.iter_mut().zip(cell) {
                        a.merge(b);
                    }
                }
            }
        }
        let ms = finish(accs.expect("at least one profile"));
        for (&precision, pms) in &by_profile {
            for (&method, m) in pms {
                if method == Method::PlanHeldOutArchitecture {
                    if let Some(e) = m.median_abs_rel_error.filter(|e| *e > WITHIN) {
                        known_misses.push(KnownMiss {
                            family: name.clone(),
                            precision,
                            method,
                            text: format!(
                                "{}: held-out median |error| {:.1}% over {} runs (beyond {:.0}%)",
                                precision.as_str(),
                                e * 100.0,
                                m.error_rows,
                                WITHIN * 100.0
                            ),
                            median_abs_rel_error: Some(e),
                            missed_oom: Vec::new(),
                        });
                    }
                }
                if method.out_of_sample_plan() && !m.missed_oom.is_empty() {
                    known_misses.push(KnownMiss {
                        family: name.clone(),
                        precision,
                        method,
                        text: format!(
                            "{}: {} of {} did-not-fit checks called \"fits\" by {}",
                            precision.as_str(),
                            m.missed_oom.len(),
                            m.did_not_fit_checks,
                            method.as_str()
                        ),
                        median_abs_rel_error: m.median_abs_rel_error,
                        missed_oom: m.missed_oom.clone(),
                    });
                }
            }
        }
        families.insert(
            name,
            FamilyReport {
                graphs: fam_graphs[k].iter().map(|g| g.to_string()).collect(),
                rows: fam_rows[k],
                methods: ms,
                by_profile,
            },
        );
    }

    let factors_file_rows_match = f
        .provenance
        .as_ref()
        .is_some_and(|p| p.rows_sha256 == fitted_rows_sha256);

    for (p, u) in uppers {
        if let Some(pf) = fits.get_mut(&p) {
            pf.upper = u;
        }
    }
    for (p, accs) in Precision::ALL.into_iter().zip(prof_accs) {
        if let Some(pf) = fits.get_mut(&p) {
            pf.methods = finish(accs);
        }
    }
    Calibration {
        tool_version: env!("CARGO_PKG_VERSION"),
        settings: settings(f),
        totals,
        excluded_by_reason,
        exclusions,
        fits,
        implementation_groups: groups,
        methods,
        bound,
        families,
        known_misses,
        factors_file_rows_match,
        fitted_rows_sha256,
        textbook_not_applicable: ds
            .graphs
            .iter()
            .filter_map(|(g, i)| i.textbook_not_applicable.clone().map(|r| (g.clone(), r)))
            .collect(),
        // Set by `calibrate`.
        measured: Measured::default(),
        rows: rows_out,
        simulated_reserved: super::reserved::simulated_reserved(ds),
    }
}

fn settings(f: &FactorsFile) -> Settings {
    Settings {
        headroom: f.headroom,
        small_runs_threshold_bytes: f.small_runs.threshold_bytes,
        small_runs_weight: f.small_runs.weight,
        oom_penalty: f.oom_penalty,
        bound_floor_bytes: f.bound_floor_bytes,
        training_regimes: f.training_regimes.clone(),
        fixed_at: f.provenance.as_ref().map(|p| p.fixed_at.clone()),
        feature_names: FEATURE_NAMES,
        confidence: intervals::CONFIDENCE,
        interval_rule: intervals::INTERVAL_RULE,
        few_runs_median_width: intervals::FEW_RUNS_MEDIAN_WIDTH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_by_hand() {
        let v: Vec<f64> = (1..=10).map(|i| i as f64).collect();
        // ceil(0.9 * 10) = 9 -> 9th value; ceil(0.95 * 10) = 10 -> 10th.
        assert_eq!(nearest_rank(&v, 90), Some(9.0));
        assert_eq!(nearest_rank(&v, 95), Some(10.0));
        assert_eq!(nearest_rank(&[], 95), None);
        assert_eq!(nearest_rank(&[3.0], 90), Some(3.0));
    }
}
