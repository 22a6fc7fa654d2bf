//! `load`: reads `data/factors.json`, `data/graphs/*.json` and every row under `data/runs/`,
//! validates each row (errors name the file and the field) and joins it to its graph.

use super::scan::relative;
use super::{Dataset, ExclusionReason, GraphInfo, Row};
use crate::baselines;
use crate::error::{Error, Result};
use crate::factors::FactorsFile;
use crate::features::{self, Features, Precision};
use crate::graph::{self, Graph};
use crate::run::{RunRow, RunStatus, RUN_FORMAT};
use crate::time::parse_rfc3339;
use serde::Deserialize as _;
use sha2::Digest as _;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The marker of rows measured after the factors were fixed.
pub const AFTER_FIT: &str = "after-fit";

/// One line of [`rows_sha256`], `"{run_id}\t{file_sha256 in hex}\n"`, handed to `put` in parts
/// (to the hasher, or to a buffer hashed later).
fn hash_line(mut put: impl FnMut(&[u8]), id: &str, sha_hex: &[u8]) {
    put(id.as_bytes());
    put(b"\t");
    put(sha_hex);
    put(b"\n");
}

/// SHA-256 over the fitted rows: the hex digest of the lines `"{run_id}\t{file_sha256}\n"`,
/// one per row, sorted by run id (then by file hash).
pub fn rows_sha256(rows: &[(&str, &str)]) -> String {
    let mut v = rows.to_vec();
    v.sort();
    let mut h = sha2::Sha256::new();
    for (id, sha) in v {
        hash_line(|b| h.update(b), id, sha.as_bytes());
    }
    super::Digest(h.finalize().into()).hex()
}

/// [`rows_sha256`] of rows already in its order (by run id, then file hash), hashed as they
/// come: [`RowsHasher::add`] each row, then [`RowsHasher::finish`].
#[derive(Default)]
pub struct RowsHasher(sha2::Sha256);

impl RowsHasher {
    /// The next row (rows come in run-id order, then by file hash).
    pub fn add(&mut self, run_id: &str, file_sha256: &super::Digest) {
        hash_line(|b| self.0.update(b), run_id, &file_sha256.hex_bytes());
    }

    /// A row's line as [`RowsHasher::add`] hashes it, appended to `out` (for
    /// [`RowsHasher::add_lines`] to hash later).
    pub fn line_into(out: &mut Vec<u8>, run_id: &str, file_sha256: &super::Digest) {
        hash_line(
            |b| out.extend_from_slice(b),
            run_id,
            &file_sha256.hex_bytes(),
        );
    }

    /// Rows' lines made by [`RowsHasher::line_into`], in order.
    pub fn add_lines(&mut self, lines: &[u8]) {
        self.0.update(lines);
    }

    /// The hex digest of the rows added.
    pub fn finish(self) -> String {
        super::Digest(self.0.finalize().into()).hex()
    }
}

fn field(path: &Path, field: &str, message: impl Into<String>) -> Error {
    Error::Field {
        path: path.to_path_buf(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// A row as the loader reads it: [`RunRow`]'s fields, borrowed from the row's text where it
/// can be (a string with an escape is copied), and the parts the engine does not keep
/// (`phases`, `parameters`, the device's allocator ...) checked and dropped. It accepts exactly
/// what [`RunRow`] accepts (the same fields, types, defaults and `deny_unknown_fields`); a row
/// it rejects is parsed again as a [`RunRow`] to report the failing field.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RowRef<'a> {
    #[serde(borrow)]
    format: Cow<'a, str>,
    #[serde(borrow)]
    run_id: Cow<'a, str>,
    #[serde(borrow)]
    graph: GraphRefRef<'a>,
    batch: u64,
    #[serde(borrow)]
    precision: Cow<'a, str>,
    #[serde(borrow)]
    regime: Cow<'a, str>,
    #[serde(default, borrow)]
    marker: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    strategy: Option<Cow<'a, str>>,
    #[serde(default)]
    rank: Option<u64>,
    #[serde(default)]
    world: Option<u64>,
    #[serde(default, borrow)]
    backend: Option<Cow<'a, str>>,
    #[serde(borrow)]
    device: DeviceRef<'a>,
    #[serde(borrow)]
    host: Cow<'a, str>,
    #[serde(borrow)]
    timestamp: Cow<'a, str>,
    #[serde(borrow)]
    tool_version: Cow<'a, str>,
    #[serde(default)]
    implementation: Option<crate::run::Implementation>,
    parameters: crate::run::ParameterCounts,
    graph_mismatch: bool,
    status: RunStatus,
    #[serde(default, borrow)]
    oom: Option<FailureRef<'a>>,
    #[serde(default, borrow)]
    error: Option<FailureRef<'a>>,
    #[serde(borrow)]
    phases: Phases<'a>,
    #[serde(default, borrow)]
    peak: Option<PeakRef<'a>>,
}

/// [`crate::run::GraphRef`], borrowed.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphRefRef<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    sha256: Cow<'a, str>,
}

/// [`crate::run::DeviceInfo`], borrowed.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DeviceRef<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    capacity_bytes: u64,
    #[serde(default)]
    emulated_capacity_bytes: Option<u64>,
    #[serde(borrow)]
    allocator: Cow<'a, str>,
    #[serde(default, borrow)]
    allocator_settings: Option<Cow<'a, str>>,
    reserved_equals_allocated: bool,
    #[serde(borrow)]
    torch: Cow<'a, str>,
    #[serde(default, borrow)]
    cuda: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    driver: Option<Cow<'a, str>>,
    cores: u64,
}

/// [`crate::run::Failure`], borrowed.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct FailureRef<'a> {
    #[serde(borrow)]
    phase: Cow<'a, str>,
    #[serde(borrow)]
    message: Cow<'a, str>,
}

/// [`crate::run::Peak`], borrowed.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PeakRef<'a> {
    allocated_bytes: u64,
    reserved_bytes: u64,
    #[serde(borrow)]
    phase: Cow<'a, str>,
}

/// [`crate::run::Phase`], borrowed.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PhaseRef<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    allocated_start: u64,
    reserved_start: u64,
    #[serde(default)]
    allocated_peak: Option<u64>,
    #[serde(default)]
    reserved_peak: Option<u64>,
    #[serde(default)]
    allocated_end: Option<u64>,
    #[serde(default)]
    reserved_end: Option<u64>,
    wall_seconds: f64,
}

/// A row's `phases`: each element is checked as a [`crate::run::Phase`]; what is kept is what
/// the peak is checked against (the highest allocated and reserved peaks, and each phase's
/// name with its allocated peak).
#[derive(Default)]
struct Phases<'a> {
    allocated: Option<u64>,
    reserved: Option<u64>,
    peaks: Vec<(Cow<'a, str>, Option<u64>)>,
    /// The first phase whose status is not `ok`, `oom` or `error` (its index and status).
    unknown_status: Option<(usize, Cow<'a, str>)>,
    /// The first phase whose status is not `ok` (its index and status).
    not_ok: Option<(usize, Cow<'a, str>)>,
    /// The first phase with a negative wall time (its index and the time).
    negative_wall: Option<(usize, f64)>,
}

/// A phase's statuses (`docs/run-format.md`).
const PHASE_STATUSES: [&str; 3] = ["ok", "oom", "error"];

impl<'de: 'a, 'a> serde::Deserialize<'de> for Phases<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Each<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Each<'a> {
            type Value = Phases<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Phases<'a>, A::Error> {
                let mut p = Phases::default();
                while let Some(ph) = seq.next_element::<PhaseRef<'de>>()? {
                    let k = p.peaks.len();
                    if p.unknown_status.is_none() && !PHASE_STATUSES.contains(&&*ph.status) {
                        p.unknown_status = Some((k, ph.status.clone()));
                    }
                    if p.not_ok.is_none() && ph.status != "ok" {
                        p.not_ok = Some((k, ph.status.clone()));
                    }
                    if p.negative_wall.is_none() && ph.wall_seconds < 0.0 {
                        p.negative_wall = Some((k, ph.wall_seconds));
                    }
                    p.allocated = p.allocated.max(ph.allocated_peak);
                    p.reserved = p.reserved.max(ph.reserved_peak);
                    p.peaks.push((ph.name, ph.allocated_peak));
                }
                Ok(p)
            }
        }
        d.deserialize_seq(Each(std::marker::PhantomData))
    }
}

/// No row is older than this: the `memcal-run/1` format and its harness were written on
/// 2026-11-29; the bound is set earlier, at 2025-01-01, so that the test fixtures' invented
/// dates (2025 and 2026) still load. A row dated before it was not measured by this harness.
pub const EARLIEST_ROW: &str = "2025-01-01T00:00:00Z";

/// How far a row's timestamp may be ahead of this machine's clock (the measuring machine's
/// clock may run a little ahead).
pub const FUTURE_SLACK_SECONDS: i64 = 600;

/// A row's time checked against [`EARLIEST_ROW`] and the clock.
fn check_time(t: (i64, u32), path: &Path) -> Result<()> {
    let earliest = parse_rfc3339(EARLIEST_ROW).expect("a valid constant");
    if t < earliest {
        return Err(field(
            path,
            "timestamp",
            format!(
                "is before {EARLIEST_ROW}, before memcal's harness existed: no row was \
                 measured then; fix the timestamp (the time the run started)"
            ),
        ));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if t.0 > now + FUTURE_SLACK_SECONDS {
        return Err(field(
            path,
            "timestamp",
            format!(
                "is in the future (more than {FUTURE_SLACK_SECONDS} s ahead of this machine's \
                 clock): a row records a run that happened; fix the timestamp or the measuring \
                 machine's clock"
            ),
        ));
    }
    Ok(())
}

/// A completed row's peak checked against its phases and its capacities.
fn check_peak(row: &RowRef, peak: &PeakRef, cap: u64, path: &Path) -> Result<()> {
    let bytes = |v: u64| format!("{v} bytes");
    if peak.allocated_bytes > cap {
        let which = if row.device.emulated_capacity_bytes.is_some() {
            "the emulated capacity (device.emulated_capacity_bytes) the run was capped at"
        } else {
            "the device's capacity (device.capacity_bytes)"
        };
        return Err(field(
            path,
            "peak.allocated_bytes",
            format!(
                "{} is more than {which}, {}: a run cannot complete above its capacity",
                bytes(peak.allocated_bytes),
                bytes(cap)
            ),
        ));
    }
    if peak.reserved_bytes > row.device.capacity_bytes {
        return Err(field(
            path,
            "peak.reserved_bytes",
            format!(
                "{} is more than the device's capacity (device.capacity_bytes), {}",
                bytes(peak.reserved_bytes),
                bytes(row.device.capacity_bytes)
            ),
        ));
    }
    let phases = &row.phases;
    if phases.peaks.is_empty() {
        return Err(field(
            path,
            "phases",
            "a completed run lists the phases it ran (model_load, inputs, step1.forward, ...), \
             and its peak is their highest; this row has none: add them or set the status",
        ));
    }
    if let Some((k, status)) = &phases.not_ok {
        return Err(field(
            path,
            &format!("phases[{k}].status"),
            format!(
                "is `{status}` in a completed run: every phase of a completed run is `ok`; \
                 fix the phase's status or the row's `status`"
            ),
        ));
    }
    if phases.allocated != Some(peak.allocated_bytes) {
        return Err(field(
            path,
            "peak.allocated_bytes",
            format!(
                "{} is not the highest of the phases' allocated_peak ({}); the peak is the \
                 phases' highest: fix one or the other",
                bytes(peak.allocated_bytes),
                phases.allocated.map_or("none".into(), bytes)
            ),
        ));
    }
    if phases.reserved.is_some_and(|r| r != peak.reserved_bytes) {
        return Err(field(
            path,
            "peak.reserved_bytes",
            format!(
                "{} is not the highest of the phases' reserved_peak ({})",
                bytes(peak.reserved_bytes),
                phases.reserved.map_or("none".into(), bytes)
            ),
        ));
    }
    let named = phases
        .peaks
        .iter()
        .any(|(n, v)| n == &peak.phase && *v == Some(peak.allocated_bytes));
    if !named {
        return Err(field(
            path,
            "peak.phase",
            format!(
                "`{}` is not a phase whose allocated_peak is the peak; name the phase it was \
                 reached in",
                peak.phase
            ),
        ));
    }
    Ok(())
}

/// Parses one row's text into a [`RowRef`] and checks it; `path` names it in errors.
fn parse_ref<'a>(text: &'a str, path: &Path) -> Result<RowRef<'a>> {
    // The borrowed rows first; only a row that fails is parsed again, as a `RunRow`, to find the
    // failing field's path (the same fields and types, so the same rows pass and the message
    // is the one the owned row type reports).
    let de = &mut serde_json::Deserializer::from_str(text);
    let row = match RowRef::deserialize(&mut *de) {
        Ok(row) => {
            de.end()
                .map_err(|e| graph::trailing_error(path, "run row JSON", &e))?;
            row
        }
        Err(_) => {
            let de = &mut serde_json::Deserializer::from_str(text);
            let e = match serde_path_to_error::deserialize::<_, RunRow>(de) {
                Err(e) => e,
                Ok(_) => {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        what: "run row",
                        message: "the row parses as a run row but not as the loader reads it \
                                  (a bug in memcal: please report it)"
                            .into(),
                    })
                }
            };
            return Err(graph::json_error(
                path,
                "run row JSON",
                "docs/run-format.md",
                text,
                e,
            ));
        }
    };
    check(&row, path)?;
    Ok(row)
}

fn utf8<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        what: "run row",
        message: format!("not UTF-8 text ({e})"),
    })
}

/// Parses and validates one row file's bytes; `path` names it in errors.
pub fn parse_row(bytes: &[u8], path: &Path) -> Result<RunRow> {
    let text = utf8(bytes, path)?;
    parse_ref(text, path)?;
    serde_json::from_str(text).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        what: "run row",
        message: format!(
            "the loader accepts the row but it is not a run row ({e}): a bug in memcal"
        ),
    })
}

/// The device kinds memcal knows (`device.kind`).
pub const DEVICE_KINDS: [&str; 2] = ["cpu", "cuda"];

/// A name holds no control character (a NUL, a newline ...): it is printed, used in file
/// names and compared, and such a character makes it unreadable or cut short.
fn no_control_characters(path: &Path, name: &str, value: &str) -> Result<()> {
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(field(
            path,
            name,
            format!(
                "holds the control character U+{:04X}{}; a name is printable text: remove it",
                c as u32,
                if c == '\0' { " (NUL)" } else { "" }
            ),
        ));
    }
    Ok(())
}

/// A run id that names a batch (`<regime>/<graph>/b<batch>...`, the segment after the graph's
/// name) names the row's batch.
fn check_run_id_batch(row: &RowRef, path: &Path) -> Result<()> {
    let mut segments = row.run_id.split('/');
    if !segments.any(|s| s == row.graph.name) {
        return Ok(());
    }
    let Some(named) = segments
        .next()
        .and_then(|s| s.strip_prefix('b'))
        .filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
    else {
        return Ok(());
    };
    if named.parse::<u64>().ok() != Some(row.batch) {
        return Err(field(
            path,
            "run_id",
            format!(
                "`{}` names batch {named} but the row's batch is {}; fix the run id or the batch",
                row.run_id, row.batch
            ),
        ));
    }
    Ok(())
}

/// The checks serde's types do not make.
fn check(row: &RowRef, path: &Path) -> Result<()> {
    if row.format != RUN_FORMAT {
        return Err(field(
            path,
            "format",
            format!("expected \"{RUN_FORMAT}\", found \"{}\"", row.format),
        ));
    }
    if row.run_id.trim().is_empty() {
        return Err(field(path, "run_id", "must not be empty"));
    }
    for (name, value) in [
        ("run_id", &row.run_id),
        ("graph.name", &row.graph.name),
        ("regime", &row.regime),
        ("host", &row.host),
        ("device.kind", &row.device.kind),
        ("device.name", &row.device.name),
        ("tool_version", &row.tool_version),
    ] {
        no_control_characters(path, name, value)?;
    }
    if let Some(s) = &row.strategy {
        no_control_characters(path, "strategy", s)?;
    }
    if row.graph.name.trim().is_empty() {
        return Err(field(path, "graph.name", "must not be empty"));
    }
    if row.graph.sha256.len() != 64 || !row.graph.sha256.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(field(path, "graph.sha256", "must be 64 hex digits"));
    }
    if row.batch == 0 {
        return Err(field(path, "batch", "must be a positive integer"));
    }
    check_run_id_batch(row, path)?;
    if !DEVICE_KINDS.contains(&&*row.device.kind) {
        return Err(field(
            path,
            "device.kind",
            format!(
                "unknown device kind `{}` (known: {}); the harness writes one of these",
                row.device.kind,
                DEVICE_KINDS.join(", ")
            ),
        ));
    }
    if let Some(e) = row.device.emulated_capacity_bytes {
        if e > row.device.capacity_bytes {
            return Err(field(
                path,
                "device.emulated_capacity_bytes",
                format!(
                    "{e} bytes is more than the device's capacity (device.capacity_bytes), {} \
                     bytes: a run can be capped below its device's memory, not above it; fix \
                     one or the other",
                    row.device.capacity_bytes
                ),
            ));
        }
    }
    if let Some((k, status)) = &row.phases.unknown_status {
        return Err(field(
            path,
            &format!("phases[{k}].status"),
            format!(
                "unknown phase status `{status}` (known: {})",
                PHASE_STATUSES.join(", ")
            ),
        ));
    }
    if let Some((k, w)) = row.phases.negative_wall {
        return Err(field(
            path,
            &format!("phases[{k}].wall_seconds"),
            format!("is {w}: a phase's wall time cannot be negative; fix it"),
        ));
    }
    let p = row.parameters;
    // `built` is 0 when the model was never built (a run that failed in model_load), and
    // then there is no mismatch to record.
    let never_built = p.built == 0 && row.status != RunStatus::Completed;
    if !row.graph_mismatch && p.built != p.graph && !never_built {
        return Err(field(
            path,
            "graph_mismatch",
            format!(
                "is false, but parameters.built ({}) differs from parameters.graph ({}): the \
                 harness sets graph_mismatch exactly when they differ; fix one or the other",
                p.built, p.graph
            ),
        ));
    }
    row.precision
        .parse::<Precision>()
        .map_err(|m| field(path, "precision", m))?;
    if row.regime.trim().is_empty() {
        return Err(field(path, "regime", "must not be empty"));
    }
    allocator_settings(row, path)?;
    if let Some(m) = &row.marker {
        if m != AFTER_FIT {
            return Err(field(
                path,
                "marker",
                format!("the only marker is \"{AFTER_FIT}\", found \"{m}\""),
            ));
        }
    }
    if let Some(s) = &row.strategy {
        crate::strategy::parse_row_spec(s).map_err(|m| field(path, "strategy", m))?;
    }
    ranks(row, path)?;
    let t = parse_rfc3339(&row.timestamp).map_err(|m| field(path, "timestamp", m))?;
    check_time(t, path)?;
    let cap = row
        .device
        .emulated_capacity_bytes
        .unwrap_or(row.device.capacity_bytes);
    if cap == 0 {
        return Err(field(
            path,
            "device.capacity_bytes",
            "the capacity the run ran under must be positive",
        ));
    }
    match row.status {
        RunStatus::Completed => {
            let Some(peak) = &row.peak else {
                return Err(field(path, "peak", "a completed run must record its peak"));
            };
            if peak.allocated_bytes == 0 {
                return Err(field(
                    path,
                    "peak.allocated_bytes",
                    "a completed run's peak must be positive",
                ));
            }
            if row.oom.is_some() {
                return Err(field(
                    path,
                    "oom",
                    "a completed run has no out-of-memory failure",
                ));
            }
            check_peak(row, peak, cap, path)?;
            if row.error.is_some() {
                return Err(field(path, "error", "a completed run has no error"));
            }
        }
        RunStatus::Oom => {
            if row.peak.is_some() {
                return Err(field(
                    path,
                    "peak",
                    "an out-of-memory run cannot claim a peak (it never finished)",
                ));
            }
            if row.oom.is_none() {
                return Err(field(
                    path,
                    "oom",
                    "an out-of-memory run must say where it ran out",
                ));
            }
        }
        RunStatus::Error => {
            if row.peak.is_some() {
                return Err(field(path, "peak", "a failed run cannot claim a peak"));
            }
            if row.error.is_none() {
                return Err(field(path, "error", "a failed run must say what failed"));
            }
        }
    }
    Ok(())
}

/// Features, accelerate's, the textbook's and the simulator's bytes of a (graph, batch,
/// precision).
/// Features, accelerate, textbook, and the simulator's (allocated, reserved) peaks (reserved
/// only on CUDA, from the caching-allocator replay).
type Computed = (Features, u64, Option<u64>, Option<(u64, Option<u64>)>);

/// (graph, batch, precision, the allocator settings' canonical string: None for torch's
/// defaults), so that rows under different settings are not mixed.
type Key<'g> = (&'g str, u64, Precision, Option<String>);

type Keyed<'g> = HashMap<Key<'g>, Computed, super::FastHash>;

/// [`Computed`] per (graph, batch, precision): each loading thread's own map in front of one
/// shared by the threads, so that each key is computed about once (the simulator dominates).
struct FeatureCache<'g, 's> {
    own: Keyed<'g>,
    shared: &'s std::sync::Mutex<Keyed<'g>>,
}

impl<'g> FeatureCache<'g, '_> {
    fn get(
        &mut self,
        key: Key<'g>,
        settings: &crate::simulate::AllocatorSettings,
        g: &Graph,
    ) -> Computed {
        if let Some(c) = self.own.get(&key) {
            return *c;
        }
        let lock = || self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let known = lock().get(&key).copied();
        let c = known.unwrap_or_else(|| {
            let (batch, precision) = (key.1, key.2);
            let c = (
                features::features(g, batch, precision),
                baselines::accelerate(g, precision).training_bytes,
                baselines::textbook(g, batch).ok().map(|t| t.total_bytes),
                crate::simulate::simulate_peak(g, batch, precision)
                    .ok()
                    .map(|s| s.with_allocator_settings(settings))
                    .map(|s| {
                        let p = crate::plan::SimulatedPeak::of(&s);
                        (p.bytes, p.reserved.map(|r| r.bytes))
                    }),
            );
            lock().insert(key.clone(), c);
            c
        });
        self.own.insert(key, c);
        c
    }
}

/// The row's `device.allocator_settings` (its `PYTORCH_CUDA_ALLOC_CONF`), parsed; absent:
/// torch's defaults.
/// A multi-process row's fields (`rank`, `world`, `backend`): all three or none; a world of
/// at least 2 that is the strategy's device count; a run id ending in `/rank<rank>` (what
/// joins a run's rows). A rank not below its world is no error here: the row is excluded
/// (`rank-out-of-world`, [`mark_rank_problems`]).
fn ranks(row: &RowRef, path: &Path) -> Result<()> {
    let (rank, world, backend) = (row.rank, row.world, row.backend.as_deref());
    if rank.is_none() && world.is_none() && backend.is_none() {
        return Ok(());
    }
    let (Some(rank), Some(world), Some(backend)) = (rank, world, backend) else {
        let name = [("rank", rank.is_none()), ("world", world.is_none())]
            .into_iter()
            .find_map(|(name, missing)| missing.then_some(name))
            .unwrap_or("backend");
        return Err(field(
            path,
            name,
            "a row of a multi-process run has `rank`, `world` and `backend`, all three (docs/run-format.md)",
        ));
    };
    if world < 2 {
        return Err(field(
            path,
            "world",
            format!("is {world}: a multi-process run has 2 processes or more (leave rank, world and backend out for one process)"),
        ));
    }
    if !matches!(backend, "gloo" | "nccl") {
        return Err(field(
            path,
            "backend",
            format!("is `{backend}`: the collective backends are `gloo` and `nccl`"),
        ));
    }
    let devices = match row.strategy.as_deref().map(crate::strategy::parse_row_spec) {
        Some(Ok(crate::strategy::RowSpec::Training(s))) => s.devices(),
        _ => {
            return Err(field(
                path,
                "strategy",
                "a multi-process row names its training strategy (ddp, zero1, fsdp, tp, ...)",
            ))
        }
    };
    if devices != world {
        return Err(field(
            path,
            "world",
            format!(
                "is {world} but strategy `{}` runs on {devices} processes",
                row.strategy.as_deref().unwrap_or("")
            ),
        ));
    }
    if !row.run_id.ends_with(&format!("/rank{rank}")) {
        return Err(field(
            path,
            "run_id",
            format!(
                "`{}` must end in `/rank{rank}`: the rows of one run share the run id up to it",
                row.run_id
            ),
        ));
    }
    Ok(())
}

/// The run a multi-process row belongs to: its run id without the final `/rank<r>`.
pub fn run_of(run_id: &str) -> &str {
    run_id.rsplit_once("/rank").map_or(run_id, |(run, _)| run)
}

/// Marks the rows that are not counted for their rank: a rank not below its world, and every
/// row of a run whose ranks 0..world are not all there (the first row of a rank counts; a
/// repeated one is a duplicate run id already).
fn mark_rank_problems(rows: &mut [Row]) {
    let mut runs: BTreeMap<(&str, u64), std::collections::BTreeSet<u64>> = BTreeMap::new();
    for r in rows.iter() {
        if let (Some(rank), Some(world)) = (r.rank, r.world) {
            if rank < world {
                runs.entry((run_of(&r.run_id), world))
                    .or_default()
                    .insert(rank);
            }
        }
    }
    let missing: BTreeMap<(String, u64), Vec<u64>> = runs
        .iter()
        .filter(|((_, world), have)| have.len() as u64 != *world)
        .map(|((run, world), have)| {
            let absent = (0..*world).filter(|k| !have.contains(k)).collect();
            ((run.to_string(), *world), absent)
        })
        .collect();
    for r in rows.iter_mut() {
        let (Some(rank), Some(world)) = (r.rank, r.world) else {
            continue;
        };
        if rank >= world {
            r.rank_problem = Some((
                ExclusionReason::RankOutOfWorld,
                format!("rank {rank} is not below world {world}"),
            ));
        } else if let Some(absent) = missing.get(&(run_of(&r.run_id).to_string(), world)) {
            let list: Vec<String> = absent.iter().map(|k| k.to_string()).collect();
            r.rank_problem = Some((
                ExclusionReason::MissingRank,
                format!(
                    "run `{}` of world {world} has no row of rank {}: none of its rows is counted",
                    run_of(&r.run_id),
                    list.join(", ")
                ),
            ));
        }
    }
}

fn allocator_settings(row: &RowRef, path: &Path) -> Result<crate::simulate::AllocatorSettings> {
    match row.device.allocator_settings.as_deref() {
        None => Ok(Default::default()),
        Some(conf) => crate::simulate::AllocatorSettings::parse(conf)
            .map_err(|m| field(path, "device.allocator_settings", format!("`{conf}`: {m}"))),
    }
}

/// Turns a parsed row into an engine row, joined to its graph.
fn join<'g>(
    row: RowRef,
    rel: String,
    file_sha256: super::Digest,
    path: &Path,
    graphs: &'g BTreeMap<String, (Graph, GraphInfo)>,
    cache: &mut FeatureCache<'g, '_>,
    names: &mut super::Interner,
) -> Result<Row> {
    let Some((name, (g, info))) = graphs.get_key_value(row.graph.name.as_ref()) else {
        return Err(field(
            path,
            "graph.name",
            format!(
                "names graph `{}`, which is not in the data folder's graphs/ (no graphs/{}.json); add the graph or fix the name",
                row.graph.name, row.graph.name
            ),
        ));
    };
    let graph_changed = row.graph.sha256 != g.sha256
        && g.sha256_without_notes.as_deref() != Some(&*row.graph.sha256);
    if !graph_changed && !row.graph_mismatch && row.parameters.graph != info.parameters {
        return Err(field(
            path,
            "parameters.graph",
            format!(
                "is {} but graph `{}` (unchanged since the run) has {} parameters, and \
                 graph_mismatch is false; the harness records the graph's count: fix the count \
                 or graph_mismatch",
                row.parameters.graph, row.graph.name, info.parameters
            ),
        ));
    }
    let precision: Precision = row.precision.parse().expect("validated in parse_row");
    let settings = allocator_settings(&row, path)?;
    let (features, accelerate_bytes, textbook_bytes, simulated) = cache.get(
        (name.as_str(), row.batch, precision, settings.canonical()),
        &settings,
        g,
    );
    if features.as_array().contains(&u64::MAX) {
        return Err(field(
            path,
            "batch",
            format!(
                "at batch {} graph `{}` needs more than 2^64 bytes (its features overflow); check the batch",
                row.batch, row.graph.name
            ),
        ));
    }
    Ok(Row {
        file: rel.into(),
        file_sha256,
        graph_changed,
        run_id: row.run_id.as_ref().into(),
        family: names.name(&info.family),
        graph: names.name(name),
        regime: names.name(&row.regime),
        precision,
        batch: row.batch,
        status: row.status,
        measured_bytes: row.peak.as_ref().map(|p| p.allocated_bytes),
        after_load_bytes: row.peak.as_ref().and_then(|_| {
            row.phases
                .peaks
                .iter()
                .filter(|(n, _)| n != "model_load")
                .filter_map(|(_, v)| *v)
                .max()
        }),
        measured_reserved_bytes: row.peak.map(|p| p.reserved_bytes),
        capacity_bytes: row
            .device
            .emulated_capacity_bytes
            .unwrap_or(row.device.capacity_bytes),
        device_capacity_bytes: row.device.capacity_bytes,
        capped: row.device.emulated_capacity_bytes.is_some(),
        after_fit: row.marker.as_deref() == Some(AFTER_FIT),
        strategy: row.strategy.as_deref().map(|s| names.name(s)),
        rank: row.rank,
        world: row.world,
        backend: row.backend.as_deref().map(|s| names.name(s)),
        rank_problem: None,
        timestamp: names.mostly_distinct(&row.timestamp),
        graph_mismatch: row.graph_mismatch,
        has_batch_axis: info.has_batch_axis,
        features,
        accelerate_bytes,
        textbook_bytes,
        simulated_bytes: simulated.map(|s| s.0),
        simulated_reserved_bytes: simulated.and_then(|s| s.1),
        floor_bytes: info.floor_bytes[precision as usize],
        device: names.name(&row.device.name),
        device_kind: names.name(&row.device.kind),
        harness_version: names.name(&row.tool_version),
        implementation: row
            .implementation
            .as_ref()
            .map(|i| names.name(&format!("{} {}", i.library, i.class))),
        torch_version: names.name(&row.device.torch),
        allocator_settings: row
            .device
            .allocator_settings
            .as_deref()
            .map(|s| names.name(s)),
    })
}

/// Whether `path` is a row bundle (`.jsonl`: one row per line) rather than a row file.
fn is_bundle(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "jsonl")
}

/// The rows of a bundle's `bytes`: each line with its number (from 1) and its bytes including
/// its newline (the last line may have none). A file that ends with a newline has no empty
/// line after it. (`split_inclusive` with the same cut; the newlines are found by `memchr`,
/// not byte by byte.)
fn bundle_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |k| k + 1);
        let (line, after) = rest.split_at(end);
        rest = after;
        Some(line)
    })
    .enumerate()
    .map(|(k, line)| (k + 1, line))
}

/// Reads, parses, checks, hashes and joins the row files and bundles `paths` in order, stopping
/// at the first error.
fn load_rows<'g>(
    data_dir: &Path,
    paths: &[std::path::PathBuf],
    capacity: usize,
    graphs: &'g BTreeMap<String, (Graph, GraphInfo)>,
    shared: &std::sync::Mutex<Keyed<'g>>,
) -> Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(capacity);
    let mut cache = FeatureCache {
        own: HashMap::default(),
        shared,
    };
    let mut names = super::Interner::default();
    for path in paths {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let rel = relative(data_dir, path);
        if !is_bundle(path) {
            let row = parse_ref(utf8(&bytes, path)?, path)?;
            let digest = super::Digest::of(&bytes);
            rows.push(join(
                row, rel, digest, path, graphs, &mut cache, &mut names,
            )?);
            continue;
        }
        // A bundle: every line is a row, named `file:line` (in errors too); its digest is
        // over the line's bytes with its newline, as if the line were a row file.
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            Error::Parse {
                path: line_path(path, line),
                what: "run row",
                message: format!("not UTF-8 text ({e})"),
            }
        })?;
        if text.is_empty() {
            return Err(Error::Parse {
                path: path.clone(),
                what: "run row bundle",
                message: "the file is empty; a row bundle (.jsonl) holds one run row per line \
                          (docs/run-format.md): add its rows, or delete it"
                    .into(),
            });
        }
        for (n, line) in bundle_lines(text.as_bytes()) {
            let start = line.as_ptr() as usize - text.as_ptr() as usize;
            let line_text = &text[start..start + line.len()];
            if line_text.trim().is_empty() {
                return Err(Error::Parse {
                    path: line_path(path, n),
                    what: "run row bundle",
                    message: "an empty line; a row bundle (.jsonl) holds one run row per line \
                              and no empty lines: remove it"
                        .into(),
                });
            }
            // Errors are made with the bundle's path and then named by the line (`in_line`),
            // so that a row read without error makes no name of its line but `file`.
            let row = parse_ref(line_text, path).map_err(|e| in_line(e, path, n))?;
            let digest = super::Digest::of(line);
            let mut file = String::with_capacity(rel.len() + 8);
            file.push_str(&rel);
            file.push(':');
            file.push_str(itoa::Buffer::new().format(n));
            rows.push(
                join(row, file, digest, path, graphs, &mut cache, &mut names)
                    .map_err(|e| in_line(e, path, n))?,
            );
        }
    }
    Ok(rows)
}

/// How a line of a bundle is named: `file:line`.
fn line_path(path: &Path, line: usize) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(":{line}"));
    p.into()
}

/// An error in line `line` of the bundle `bundle` names the line (`file:line`), and a parse
/// error speaks of the line, not of a file (serde_json counts the line as line 1 of its text).
fn in_line(e: Error, bundle: &Path, line: usize) -> Error {
    let at = line_path(bundle, line);
    match e {
        Error::Parse { what, message, .. } => Error::Parse {
            path: at,
            what,
            message: message
                .replace(" at line 1 column ", " at column ")
                .replace("the file is cut short", "the line is cut short")
                .replace(
                    "a file holds one JSON document (several rows go in a .jsonl row bundle, \
                     one row per line)",
                    "a line of a row bundle holds one row",
                ),
        },
        Error::Field { field, message, .. } => Error::Field {
            path: at,
            field,
            message: message.replace(" at line 1 column ", " at column "),
        },
        Error::Node { node, message, .. } => Error::Node {
            path: at,
            node,
            message,
        },
        Error::Io { source, .. } => Error::Io { path: at, source },
        e => e,
    }
}

/// Reads `data_dir/factors.json`, `data_dir/graphs/*.json`, every row file
/// `data_dir/runs/**/*.json` and every row bundle `data_dir/runs/**/*.jsonl` (one row per
/// line), in sorted path order. A missing `graphs/` folder counts as empty; a missing `runs/`
/// is an error. Files under `runs/` that are not rows are skipped: see [`load_reporting`].
pub fn load(data_dir: &Path) -> Result<Dataset> {
    load_reporting(data_dir).map(|(ds, _)| ds)
}

/// [`load`], and the files under `runs/` it did not read, with why (`engine::scan`).
pub fn load_reporting(data_dir: &Path) -> Result<(Dataset, Vec<super::scan::Skipped>)> {
    let factors_path = data_dir.join("factors.json");
    let factors = FactorsFile::load(&factors_path)?;
    if let Some(p) = &factors.provenance {
        parse_rfc3339(&p.fixed_at).map_err(|m| field(&factors_path, "provenance.fixed_at", m))?;
    }
    let graphs_dir = data_dir.join("graphs");
    let loaded = if graphs_dir.is_dir() {
        graph::load_dir(&graphs_dir)?
    } else {
        Vec::new()
    };
    let mut graphs = BTreeMap::new();
    for g in loaded {
        let info = GraphInfo {
            family: g.family.clone(),
            sha256: g.sha256.clone(),
            parameters: g.parameters(),
            has_batch_axis: g.has_batch_axis(),
            textbook_not_applicable: baselines::textbook(&g, 1).err(),
            floor_bytes: crate::features::Precision::ALL
                .map(|p| crate::plan::phase_floor(&g, p).bytes),
            blocks: g.blocks(),
            approximations: crate::plan::approximations(&g),
        };
        graphs.insert(g.name.clone(), (g, info));
    }

    let super::scan::RunFiles {
        paths,
        weights,
        skipped,
    } = super::scan::scan_runs(data_dir)?;
    // Read, parse, check, hash and join the rows on up to `threads` threads, each a contiguous
    // run of the sorted paths (about as many rows each: a bundle weighs as its rows) with its
    // own interner (equal names compare equal whichever interner made them) and its own
    // feature cache in front of a shared one (each graph, batch and precision simulated once).
    // Each run stops at its first error; the runs are joined in path order, so the rows keep
    // path order (a bundle's in line order) and the error reported is the first in path order,
    // as if read one by one.
    let total: usize = weights.iter().sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(total.div_ceil(1_000).max(1));
    let graphs_ref = &graphs;
    let paths = &paths;
    let shared = &std::sync::Mutex::new(HashMap::default());
    let chunks = super::split::weighted_runs(&weights, threads);
    // The first run's vector is made for every row (its unused part is never touched), so
    // joining copies only the others.
    let runs: Vec<Result<Vec<Row>>> = super::split::on_threads_in_order(chunks, |k, run| {
        let capacity = if k == 0 { total } else { run.weight };
        load_rows(data_dir, &paths[run.items], capacity, graphs_ref, shared)
    });
    let mut rows: Vec<Row> = Vec::new();
    for run in runs {
        let run = run?;
        if rows.is_empty() {
            rows = run;
        } else {
            rows.extend(run);
        }
    }
    mark_rank_problems(&mut rows);
    let ds = Dataset {
        factors,
        rows,
        graphs: graphs.into_iter().map(|(k, (_, i))| (k, i)).collect(),
    };
    Ok((ds, skipped))
}

#[cfg(test)]
mod tests {
    use super::bundle_lines;

    #[test]
    fn bundle_lines_cut_as_split_inclusive() {
        for text in [
            "",
            "\n",
            "\n\n",
            "a",
            "a\n",
            "a\nb",
            "a\nb\n",
            "a\n\nb\n\n",
            "{\"x\":1}\r\n{\"y\":2}",
        ] {
            let b = text.as_bytes();
            let want: Vec<(usize, &[u8])> = b
                .split_inclusive(|&c| c == b'\n')
                .enumerate()
                .map(|(k, l)| (k + 1, l))
                .collect();
            assert_eq!(bundle_lines(b).collect::<Vec<_>>(), want, "{text:?}");
        }
    }
}
