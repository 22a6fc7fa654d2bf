//! `data/factors.json`: the planner's shipped factors per precision profile, the headroom, the
//! upper-bound multipliers, the bound floor, the card lists and the fit's settings. Only
//! `memcal fit --write-factors` rewrites it.

use crate::error::{Error, Result};
use crate::features::{Precision, N_FEATURES};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The format tag of the factors file.
pub const FACTORS_FORMAT: &str = "memcal-factors/1";

/// One card: a capacity in bytes, with the name printed for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Card {
    pub name: String,
    pub bytes: u64,
}

/// A measurement regime: where its rows come from and which cards its checks use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regime {
    /// `cpu` or `cuda`: a CPU regime is labelled CPU everywhere.
    pub device: String,
    /// Human description.
    pub description: String,
    /// Cards (capacities) the regime's card checks use, ascending.
    pub cards: Vec<Card>,
}

/// The factors of one precision profile, in feature order, and (once the profile is fitted)
/// its own upper-bound multipliers and the time its factors were fixed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub factors: [f64; N_FEATURES],
    /// The profile's bound multipliers, from its own fitted rows; absent: the file's `upper`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<Upper>,
    /// RFC 3339 time this profile's factors and multipliers were last changed by a fit; its
    /// after-the-fit rows must be later. Absent: `provenance.fixed_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_at: Option<String>,
    /// The profile whose factors, multipliers and fixing time these are, copied by the fit that
    /// first met rows of this profile with none of them fitted ([`Precision::borrows_from`]);
    /// absent: fitted on this profile's own rows (or a seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed_from: Option<String>,
}

impl Profile {
    /// Factors alone (a seed profile: no multipliers or fixing time of its own).
    pub fn seed(factors: [f64; N_FEATURES]) -> Profile {
        Profile {
            factors,
            upper: None,
            fixed_at: None,
            borrowed_from: None,
        }
    }
}

/// Upper-bound multipliers (empirical quantiles of measured / held-out prediction).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upper {
    pub q90: f64,
    pub q95: f64,
}

/// How small runs are weighed in the fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmallRuns {
    pub threshold_bytes: u64,
    pub weight: f64,
}

/// Provenance of fitted factors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// RFC 3339 time the factors were fixed; rows measured later are "after the fit".
    pub fixed_at: String,
    /// SHA-256 over the fitted rows (see the engine for the definition).
    pub rows_sha256: String,
    /// Number of rows fitted on.
    pub rows: u64,
    /// memcal version that wrote the file.
    pub tool_version: String,
}

/// The whole factors file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactorsFile {
    pub format: String,
    /// Factors per precision profile name.
    pub profiles: BTreeMap<String, Profile>,
    /// Safety margin of a verdict: a plan fits a card iff estimate x (1 + headroom) <= card.
    pub headroom: f64,
    /// The bound multipliers of a profile without its own (`profiles.<p>.upper`).
    pub upper: Upper,
    /// The bound is never below this many bytes.
    pub bound_floor_bytes: u64,
    /// The planner's cards, ascending.
    pub cards: Vec<Card>,
    /// Regimes by label.
    pub regimes: BTreeMap<String, Regime>,
    /// Regimes whose rows the shipped factors and the held-out-by-architecture refits use;
    /// the others are predicted by the "held out by regime" split.
    pub training_regimes: Vec<String>,
    pub small_runs: SmallRuns,
    /// Weight of an out-of-memory inequality's shortfall in the fit.
    pub oom_penalty: f64,
    /// Absent until the factors are fitted. `fixed_at` is the time of the last fit; a profile
    /// that fit left unchanged keeps its own earlier `fixed_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// A bound's multipliers: q95 at least q90 (a higher quantile) and at least 1 (a bound below
/// the estimate is no bound).
fn check_upper(path: &Path, field: &str, u: &Upper) -> Result<()> {
    if u.q95 < u.q90 {
        return Err(Error::field(
            path,
            &format!("{field}.q95"),
            format!(
                "is {} but q90 is {}: the 95th percentile cannot be below the 90th",
                u.q95, u.q90
            ),
        ));
    }
    if u.q95 < 1.0 {
        return Err(Error::field(
            path,
            &format!("{field}.q95"),
            format!(
                "is {}, below 1: the bound would be under the estimate it bounds",
                u.q95
            ),
        ));
    }
    Ok(())
}

/// How far a `fixed_at` may be ahead of this machine's clock (as a row's timestamp:
/// [`crate::engine::load::FUTURE_SLACK_SECONDS`]).
const FIXED_AT_SLACK_SECONDS: i64 = 600;

/// A `fixed_at` is an RFC 3339 time and not in the future: a fit records when it ran. The
/// clock is read only to refuse, never to change what is built from the file.
pub(crate) fn check_fixed_at(path: &Path, field: &str, value: &str) -> Result<()> {
    let t = crate::time::parse_rfc3339(value).map_err(|m| Error::field(path, field, m))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if t.0 > now + FIXED_AT_SLACK_SECONDS {
        return Err(Error::field(
            path,
            field,
            format!(
                "`{value}` is in the future (more than {FIXED_AT_SLACK_SECONDS} s ahead of this \
                 machine's clock): a fit records the time it ran; fix the time (or the clock of \
                 the machine that wrote it)"
            ),
        ));
    }
    Ok(())
}

impl FactorsFile {
    /// Reads and checks the factors file.
    pub fn load(path: &Path) -> Result<FactorsFile> {
        if !path.exists() {
            return Err(Error::Invalid(format!(
                "{}: no such file; a data folder needs its factors.json (start from a copy of data/factors.json)",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks factors JSON; `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<FactorsFile> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let f: FactorsFile = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
            crate::graph::json_error(
                path,
                "factors JSON",
                "the format of the shipped data/factors.json",
                text,
                e,
            )
        })?;
        de.end()
            .map_err(|e| crate::graph::trailing_error(path, "factors JSON", &e))?;
        if f.format != FACTORS_FORMAT {
            return Err(Error::field(
                path,
                "format",
                format!("expected \"{FACTORS_FORMAT}\", found \"{}\"", f.format),
            ));
        }
        for (name, p) in &f.profiles {
            name.parse::<Precision>()
                .map_err(|m| Error::field(path, &format!("profiles.{name}"), m))?;
            if p.factors.iter().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(Error::field(
                    path,
                    &format!("profiles.{name}.factors"),
                    "factors must be finite and non-negative",
                ));
            }
            if let Some(u) = &p.upper {
                for (q, v) in [("q90", u.q90), ("q95", u.q95)] {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(Error::field(
                            path,
                            &format!("profiles.{name}.upper.{q}"),
                            format!("must be a positive number, found {v}"),
                        ));
                    }
                }
                check_upper(path, &format!("profiles.{name}.upper"), u)?;
            }
            if let Some(t) = &p.fixed_at {
                check_fixed_at(path, &format!("profiles.{name}.fixed_at"), t)?;
            }
        }
        let positive = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::field(
                    path,
                    field,
                    format!("must be a positive number, found {v}"),
                ))
            }
        };
        positive("upper.q90", f.upper.q90)?;
        positive("upper.q95", f.upper.q95)?;
        check_upper(path, "upper", &f.upper)?;
        positive("oom_penalty", f.oom_penalty)?;
        positive("small_runs.weight", f.small_runs.weight)?;
        if !(f.headroom.is_finite() && f.headroom >= 0.0) {
            return Err(Error::field(
                path,
                "headroom",
                "must be a non-negative number",
            ));
        }
        if f.headroom > 1.0 {
            return Err(Error::field(
                path,
                "headroom",
                format!(
                    "is {} ({}): the headroom is a fraction of the estimate (0.15 for 15%), at \
                     most 1 (100%); write it as a fraction",
                    f.headroom,
                    crate::format::pct(f.headroom)
                ),
            ));
        }
        let check_cards = |field: &str, cards: &[Card]| {
            if let Some(k) = cards.iter().position(|c| c.bytes == 0) {
                return Err(Error::field(
                    path,
                    &format!("{field}[{k}].bytes"),
                    "a card's capacity must be positive",
                ));
            }
            if cards.is_empty() || cards.windows(2).any(|w| w[0].bytes >= w[1].bytes) {
                Err(Error::field(
                    path,
                    field,
                    "must list at least one card, in ascending order of bytes",
                ))
            } else {
                Ok(())
            }
        };
        check_cards("cards", &f.cards)?;
        for (name, r) in &f.regimes {
            check_cards(&format!("regimes.{name}.cards"), &r.cards)?;
        }
        if f.training_regimes.is_empty() {
            return Err(Error::field(
                path,
                "training_regimes",
                "names no regime, so nothing could be fitted; list the regimes whose rows the \
                 factors are fitted on (e.g. [\"cpu-free\"])",
            ));
        }
        if let Some(p) = &f.provenance {
            check_fixed_at(path, "provenance.fixed_at", &p.fixed_at)?;
            let h = &p.rows_sha256;
            // Empty: not recorded (the synthetic data sets' factors).
            if !h.is_empty() && (h.len() != 64 || !h.bytes().all(|c| c.is_ascii_hexdigit())) {
                return Err(Error::field(
                    path,
                    "provenance.rows_sha256",
                    "must be 64 hex digits (the SHA-256 memcal fit --write-factors records)",
                ));
            }
        }
        for t in &f.training_regimes {
            if !f.regimes.contains_key(t) {
                return Err(Error::field(
                    path,
                    "training_regimes",
                    format!("names `{t}`, which is not in `regimes`"),
                ));
            }
        }
        Ok(f)
    }

    /// The factors of a precision profile, if the file has them.
    pub fn factors(&self, precision: Precision) -> Option<&[f64; N_FEATURES]> {
        self.profiles.get(precision.as_str()).map(|p| &p.factors)
    }

    /// The bound multipliers for a precision profile: its own, else the file's `upper`.
    pub fn upper_for(&self, precision: Precision) -> &Upper {
        self.upper_of(precision.as_str())
    }

    /// [`FactorsFile::upper_for`] by profile name.
    pub fn upper_of(&self, profile: &str) -> &Upper {
        self.profiles
            .get(profile)
            .and_then(|p| p.upper.as_ref())
            .unwrap_or(&self.upper)
    }

    /// When a precision profile's factors were fixed: its own `fixed_at`, else
    /// `provenance.fixed_at`; `None` before any fit.
    pub fn fixed_at_for(&self, precision: Precision) -> Option<&str> {
        self.profiles
            .get(precision.as_str())
            .and_then(|p| p.fixed_at.as_deref())
            .or(self.provenance.as_ref().map(|p| p.fixed_at.as_str()))
    }

    /// Pretty JSON with a trailing newline: the only way the file is written.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("factors serialise");
        s.push('\n');
        s
    }
}

/// The format tag of `data/factors-history.json`.
pub const HISTORY_FORMAT: &str = "memcal-factor-history/1";

/// One fixing of the factors, as `memcal fit --write-factors` recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub fixed_at: String,
    pub tool_version: String,
    /// Rows fitted on, and their SHA-256 (as in the factors file's provenance).
    pub rows: u64,
    pub rows_sha256: String,
    /// Factors per precision profile.
    pub profiles: BTreeMap<String, [f64; N_FEATURES]>,
    /// The file's `upper` (the multipliers of a profile without its own).
    pub q90: f64,
    pub q95: f64,
    /// A profile's own multipliers, where it has them (entries before they existed have none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upper: BTreeMap<String, Upper>,
    /// When each profile's factors were fixed, where it has its own time.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profile_fixed_at: BTreeMap<String, String>,
    /// The plan's held-out-by-architecture median |relative error| when the factors were fixed.
    pub held_out_median: Option<f64>,
    /// The shipped factors' in-sample median |relative error| when they were fixed.
    pub in_sample_median: Option<f64>,
}

/// `data/factors-history.json`: every fixing of the factors, oldest first. Appended only by
/// `memcal fit --write-factors`; `memcal audit` checks it against the git history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FactorHistory {
    pub format: String,
    pub entries: Vec<HistoryEntry>,
}

impl FactorHistory {
    /// Reads the history, or an empty one if the file does not exist.
    pub fn load_or_empty(path: &Path) -> Result<FactorHistory> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(FactorHistory {
                    format: HISTORY_FORMAT.into(),
                    entries: Vec::new(),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let h: FactorHistory = serde_json::from_str(&text).map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            what: "factor history JSON",
            message: e.to_string(),
        })?;
        if h.format != HISTORY_FORMAT {
            return Err(Error::field(
                path,
                "format",
                format!("expected \"{HISTORY_FORMAT}\", found \"{}\"", h.format),
            ));
        }
        for (k, e) in h.entries.iter().enumerate() {
            check_fixed_at(path, &format!("entries[{k}].fixed_at"), &e.fixed_at)?;
            for (p, t) in &e.profile_fixed_at {
                check_fixed_at(path, &format!("entries[{k}].profile_fixed_at.{p}"), t)?;
            }
        }
        Ok(h)
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("history serialises");
        s.push('\n');
        s
    }
}
