//! The compact `memory-calibration.json` of a large site, written faster: the same bytes as
//! `serde_json::to_writer` of the download object, but each distinct list of card checks is
//! serialised once and copied after that. A million rows share a few thousand lists (the engine
//! shares them, [`Checks`]), and the checks are most of the file's bytes.

use crate::engine::{Calibration, Check, Checks, RowResult};
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;

/// The download object: `serde_json` writes it (pretty, for a small site); [`write_compact`]
/// writes the same bytes as its compact form.
#[derive(Serialize)]
pub(crate) struct Download<'a> {
    pub format: &'static str,
    pub tool_version: &'a str,
    pub settings: &'a crate::engine::Settings,
    pub totals: &'a crate::engine::Totals,
    pub rows: &'a [RowResult],
    pub exclusions: &'a [crate::engine::Exclusion],
}

impl<'a> Download<'a> {
    pub fn of(cal: &'a Calibration) -> Download<'a> {
        Download {
            format: "memcal-site-download/1",
            tool_version: cal.tool_version,
            settings: &cal.settings,
            totals: &cal.totals,
            rows: &cal.rows,
            exclusions: &cal.exclusions,
        }
    }
}

/// At most this many bytes of serialised check lists are kept for copying; lists beyond are
/// serialised where they occur.
const CACHE_BYTES: usize = 64 << 20;

/// [`RowResult`] without its checks: the same fields in the same order with the same
/// attributes, so that its compact JSON is the row's up to the checks, which come last.
#[derive(Serialize)]
struct Head<'a> {
    run_id: &'a crate::engine::Name,
    file: &'a crate::engine::Name,
    graph: &'a crate::engine::Name,
    family: &'a crate::engine::Name,
    regime: &'a crate::engine::Name,
    precision: crate::features::Precision,
    batch: u64,
    status: crate::run::RunStatus,
    bucket: crate::engine::Bucket,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    oom_capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<f64>,
    features: &'a [u64; crate::features::N_FEATURES],
    predictions: &'a crate::engine::Predictions,
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_q90_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_q95_bytes: Option<f64>,
}

fn head(r: &RowResult) -> Head<'_> {
    // Destructured so that a field added to `RowResult` fails to compile here.
    let RowResult {
        run_id,
        file,
        graph,
        family,
        regime,
        precision,
        batch,
        status,
        bucket,
        measured_bytes,
        oom_capacity_bytes,
        weight,
        features,
        predictions,
        bound_q90_bytes,
        bound_q95_bytes,
        checks: _,
    } = r;
    Head {
        run_id,
        file,
        graph,
        family,
        regime,
        precision: *precision,
        batch: *batch,
        status: *status,
        bucket: *bucket,
        measured_bytes: *measured_bytes,
        oom_capacity_bytes: *oom_capacity_bytes,
        weight: *weight,
        features,
        predictions,
        bound_q90_bytes: *bound_q90_bytes,
        bound_q95_bytes: *bound_q95_bytes,
    }
}

fn json<T: Serialize + ?Sized>(w: &mut impl Write, v: &T) -> std::io::Result<()> {
    serde_json::to_writer(w, v).map_err(std::io::Error::other)
}

/// One row's compact JSON, its checks copied from `cache` when they were written before.
fn row(
    w: &mut impl Write,
    r: &RowResult,
    cache: &mut HashMap<(usize, usize), Vec<u8>>,
    cached: &mut usize,
    limit: usize,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    json(&mut buf, &head(r))?;
    debug_assert_eq!(buf.last(), Some(&b'}'));
    buf.pop();
    w.write_all(&buf)?;
    w.write_all(if buf.len() > 1 {
        b",\"checks\":"
    } else {
        b"\"checks\":"
    })?;
    let checks: &Checks = &r.checks;
    let list: &[Check] = checks;
    let key = (list.as_ptr() as usize, list.len());
    match cache.get(&key) {
        Some(bytes) => w.write_all(bytes)?,
        None => {
            let mut bytes = Vec::new();
            json(&mut bytes, list)?;
            w.write_all(&bytes)?;
            if *cached + bytes.len() <= limit {
                *cached += bytes.len();
                cache.insert(key, bytes);
            }
        }
    }
    w.write_all(b"}")
}

/// The download object `{format, tool_version, settings, totals, rows, exclusions}` as compact
/// JSON into `w`, byte for byte what `serde_json::to_writer` makes of it (without the trailing
/// newline).
pub(crate) fn write_compact(
    cal: &Calibration,
    format: &str,
    w: &mut impl Write,
) -> std::io::Result<()> {
    write_compact_caching(cal, format, w, CACHE_BYTES)
}

/// [`write_compact`], keeping at most `limit` bytes of check lists.
fn write_compact_caching(
    cal: &Calibration,
    format: &str,
    w: &mut impl Write,
    limit: usize,
) -> std::io::Result<()> {
    w.write_all(b"{\"format\":")?;
    json(w, format)?;
    w.write_all(b",\"tool_version\":")?;
    json(w, cal.tool_version)?;
    w.write_all(b",\"settings\":")?;
    json(w, &cal.settings)?;
    w.write_all(b",\"totals\":")?;
    json(w, &cal.totals)?;
    w.write_all(b",\"rows\":[")?;
    // The lists stay alive (and at their addresses) as long as `cal`, so an address and length
    // name one list.
    let mut cache = HashMap::new();
    let mut cached = 0;
    for (k, r) in cal.rows.iter().enumerate() {
        if k > 0 {
            w.write_all(b",")?;
        }
        row(w, r, &mut cache, &mut cached, limit)?;
    }
    w.write_all(b"],\"exclusions\":")?;
    json(w, &cal.exclusions)?;
    w.write_all(b"}")
}

#[cfg(test)]
mod tests {
    use crate::engine::{calibrate, synthetic};

    #[test]
    fn the_same_bytes_as_serde() {
        let mut ds = synthetic::dataset(5_000, 12, [1.2, 0.9, 1.3, 3.6, 5.2, 2.0], 0.1, 11);
        // A duplicate run id, for an exclusion.
        let again = ds.rows[7].clone();
        ds.rows.push(again);
        let cal = calibrate(&ds);
        assert!(cal.rows.len() > 4_000 && !cal.exclusions.is_empty());
        // The download as serde writes it, for comparison.
        let want = serde_json::to_vec(&super::Download::of(&cal)).unwrap();
        let mut have = Vec::new();
        super::write_compact(&cal, "memcal-site-download/1", &mut have).unwrap();
        assert!(have == want, "the fast download differs from serde's");
        // With a full cache (nothing kept, or a few lists) the bytes are the same.
        for limit in [0, 2_000] {
            let mut have = Vec::new();
            super::write_compact_caching(&cal, "memcal-site-download/1", &mut have, limit).unwrap();
            assert!(have == want, "differs with a cache of {limit} bytes");
        }
    }
}
