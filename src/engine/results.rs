//! What the calibration returns: the buckets and exclusions, the methods and their per-method
//! values, a row's result and card checks, the metrics, the fits and the bound, and the
//! [`Calibration`] that holds them all. Types only (and their small accessors).

use super::fit::FitOutcome;
use super::groups::ImplementationGroup;
use super::intervals::Interval;
use crate::features::{Precision, N_FEATURES};
use crate::intern::Name;
use crate::plan::Verdict;
use crate::run::RunStatus;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Relative error within which a prediction counts as "within 25%".
pub const WITHIN: f64 = 0.25;

/// The number of precision profiles (`Precision::ALL`), for arrays indexed by `precision as usize`.
pub(super) const NP: usize = Precision::ALL.len();

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
    /// A multi-process row whose `rank` is not below its `world`.
    RankOutOfWorld,
    /// A multi-process run some of whose ranks have no row in the data folder: none of its
    /// rows is counted (never half a run).
    MissingRank,
    /// The run used a memory-saving strategy (field `strategy`): calibrated in the strategies
    /// section (`crate::strategy::evidence`), never in the plain fit.
    Strategy,
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
            ExclusionReason::RankOutOfWorld => "rank-out-of-world",
            ExclusionReason::MissingRank => "missing-rank",
            ExclusionReason::Strategy => "strategy",
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
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
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
pub(super) struct CheckLists(std::collections::HashSet<Checks, super::FastHash>);

impl std::borrow::Borrow<[Check]> for Checks {
    fn borrow(&self) -> &[Check] {
        &self.0
    }
}

impl CheckLists {
    pub(super) fn share(&mut self, checks: &[Check]) -> Checks {
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
    pub(super) fn of<'a>(rows: impl Iterator<Item = &'a super::Row>) -> RegimeFacts {
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
    pub(super) fn of(rows: &[super::Row]) -> Measured {
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
    pub(super) fn merge(&mut self, o: &VerdictCounts) {
        self.fits += o.fits;
        self.borderline += o.borderline;
        self.does_not_fit += o.does_not_fit;
    }

    pub(super) fn add(&mut self, v: Verdict) {
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
    /// Graphs that approximate (an exporter's notes, generic nodes whose rule approximates),
    /// with what; only those that do.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub approximate_graphs: BTreeMap<String, Vec<crate::graph::GraphNote>>,
    /// What was measured, over every row read (excluded ones too): sorted, distinct.
    pub measured: Measured,
    /// Usable rows, sorted by run id.
    pub rows: Vec<RowResult>,
    /// The simulator's reserved peak (CUDA allocator replay) against measured reserved, per
    /// profile; apart from the methods, which predict the allocated peak.
    pub simulated_reserved: BTreeMap<Precision, super::reserved::ReservedSummary>,
}
