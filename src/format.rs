//! Number formatting for everything memcal prints (the site, `memcal fit`, `plan`, `diff` and
//! `audit`): numbers in, strings out, and one spelling of a missing value. Nothing here
//! computes a metric; each function prints one value the engine computed.

use crate::engine::intervals::Interval;
use crate::units;

/// How memcal prints a value that is not there (the site, the terminal and Markdown alike).
pub const MISSING: &str = "—";

/// [`pct`], or [`MISSING`].
pub fn opt_pct(share: Option<f64>) -> String {
    share.map_or_else(|| MISSING.to_string(), pct)
}

/// [`ratio`], or [`MISSING`].
pub fn opt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| MISSING.to_string(), ratio)
}

/// `12.35 GB` (GB = 10^9 bytes).
pub fn bytes(b: f64) -> String {
    units::gb(b)
}

/// A plain integer key for sorting by bytes.
pub fn bytes_key(b: f64) -> String {
    format!("{b:.0}")
}

/// `x` with `decimals` digits after the point, as `{x:.decimals$}` prints it, except that a
/// negative value that rounds to zero prints as zero (`0.0`, never `-0.0`).
pub fn fixed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_string(),
        _ => s,
    }
}

/// A share printed as a percentage with one decimal: `12.5%` (`0.0%` for a negative share
/// that rounds to zero).
pub fn pct(share: f64) -> String {
    format!("{}%", fixed(share * 100.0, 1))
}

/// A signed share with one decimal: `+12.5%`, `-3.0%`; a share that rounds to zero either
/// way prints as `0.0%`.
pub fn signed_pct(share: f64) -> String {
    let s = fixed(share * 100.0, 1);
    if s.starts_with('-') || s.bytes().all(|b| b == b'0' || b == b'.') {
        format!("{s}%")
    } else {
        format!("+{s}%")
    }
}

/// The engine's band of "close" predictions as the page prints it: `±25%`, from
/// [`WITHIN`](crate::engine::WITHIN).
pub fn within_band() -> String {
    format!("±{:.0}%", crate::engine::WITHIN * 100.0)
}

/// A small count in words (`six`), as prose says it; digits from twenty-one up.
pub fn number_word(n: usize) -> String {
    const WORDS: [&str; 21] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    WORDS
        .get(n)
        .map_or_else(|| count(n as u64), |w| w.to_string())
}

/// A list of values, or [`MISSING`] when it is empty.
pub fn list(v: &[String], sep: &str) -> String {
    if v.is_empty() {
        MISSING.to_string()
    } else {
        v.join(sep)
    }
}

/// A share as a sort key.
pub fn pct_key(share: f64) -> String {
    format!("{:.6}", share)
}

/// A multiplier or ratio: `1.432`.
pub fn ratio(r: f64) -> String {
    fixed(r, 3)
}

/// A factor: `1.2000`.
pub fn factor(f: f64) -> String {
    fixed(f, 4)
}

/// A count with thousands separators: `12,345`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1 run` / `3 runs`.
pub fn runs(n: u64) -> String {
    if n == 1 {
        "1 run".to_string()
    } else {
        format!("{} runs", count(n))
    }
}

/// `1 false alarm` / `3 false alarms`: a count and a noun that takes an `s` in the plural.
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{} {noun}s", count(n))
    }
}

/// An optional value, or a dash.
pub fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| MISSING.to_string())
}

/// A field of a CSV line, quoted when it has to be.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A file-name-safe slug: lowercase ASCII letters and digits, other runs of characters as `-`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-').to_string();
    if out.is_empty() {
        "x".to_string()
    } else {
        out
    }
}

/// A share with its 95% interval: `9.1% (95%: 8.2–10.3%)`; without one, why:
/// `59.7% (1 run: no interval)`; `few` adds "few runs" (the engine's flag).
pub fn pct_interval(share: f64, interval: Option<Interval>, n: u64, few: bool) -> String {
    match interval {
        Some(i) => format!(
            "{} ({}: {}–{}{})",
            pct(share),
            confidence(),
            pct_bare(i.low),
            pct(i.high),
            if few { "; few runs" } else { "" }
        ),
        None => format!("{} ({}: no interval)", pct(share), plural(n, "run")),
    }
}

/// A ratio with its 95% interval: `1.211 (95%: 1.17–1.31)`.
pub fn ratio_interval(r: f64, interval: Option<Interval>, n: u64) -> String {
    match interval {
        Some(i) => format!(
            "{} ({}: {}–{})",
            ratio(r),
            confidence(),
            ratio(i.low),
            ratio(i.high)
        ),
        None => format!("{} ({}: no interval)", ratio(r), plural(n, "ratio")),
    }
}

/// The intervals' confidence, `95%`, from
/// [`CONFIDENCE`](crate::engine::intervals::CONFIDENCE).
fn confidence() -> String {
    format!("{:.0}%", crate::engine::intervals::CONFIDENCE * 100.0)
}

/// A percentage without its sign: `8.2`.
fn pct_bare(share: f64) -> String {
    fixed(share * 100.0, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(pct(0.125), "12.5%");
        assert_eq!(bytes(12.345e9), "12.35 GB");
        assert_eq!(slug("<script>alert(1)</script>"), "script-alert-1-script");
        assert_eq!(slug("../.."), "x");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn no_negative_zero() {
        // A negative value that rounds to zero prints as zero, with no sign.
        assert_eq!(pct(-0.000067), "0.0%");
        assert_eq!(pct(-0.0), "0.0%");
        assert_eq!(pct(-0.0006), "-0.1%");
        assert_eq!(pct(-0.266021), "-26.6%");
        assert_eq!(signed_pct(-0.000067), "0.0%");
        assert_eq!(signed_pct(0.000046), "0.0%");
        assert_eq!(signed_pct(0.0), "0.0%");
        assert_eq!(signed_pct(0.179147), "+17.9%");
        assert_eq!(signed_pct(-0.266021), "-26.6%");
        assert_eq!(ratio(-0.0001), "0.000");
        assert_eq!(factor(-0.00001), "0.0000");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(-0.05000001, 1), "-0.1");
        assert_eq!(fixed(-12.0, 0), "-12");
        assert_eq!(fixed(f64::NEG_INFINITY, 1), "-inf");
        assert_eq!(fixed(f64::NAN, 1), "NaN");
        assert_eq!(
            pct_interval(
                -0.0001,
                Some(Interval {
                    low: -0.0002,
                    high: -0.00001
                }),
                3,
                false
            ),
            "0.0% (95%: 0.0–0.0%)"
        );
    }
}
