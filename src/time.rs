//! A small RFC 3339 reader: enough to order run timestamps against `provenance.fixed_at`
//! without a date-time dependency.

/// An instant as (seconds since 1970-01-01T00:00:00Z, nanoseconds), totally ordered.
pub type Instant = (i64, u32);

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// Parses an RFC 3339 date-time (`2026-11-29T17:09:34Z`, `...34.5+01:00`, `t`/`z` accepted).
pub fn parse_rfc3339(s: &str) -> Result<Instant, String> {
    let bad = |why: &str| format!("`{s}` is not an RFC 3339 date-time ({why})");
    if !s.is_ascii() {
        return Err(bad(
            "not ASCII: an RFC 3339 date-time is digits, `-`, `:`, `T` and `Z`",
        ));
    }
    let b = s.as_bytes();
    if b.len() < 20 {
        return Err(bad("too short"));
    }
    let num = |r: std::ops::Range<usize>| -> Result<u32, String> {
        let t = &s[r];
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse::<u32>().map_err(|_| bad("bad number"))
        } else {
            Err(bad("expected digits"))
        }
    };
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad("expected YYYY-MM-DDTHH:MM:SS"));
    }
    if b[13] != b':' || b[16] != b':' {
        return Err(bad("expected HH:MM:SS"));
    }
    let (y, mo, d) = (num(0..4)? as i64, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) {
        return Err(bad("no such date"));
    }
    if h > 23 || mi > 59 || sec > 60 {
        return Err(bad("no such time"));
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() {
            return Err(bad("empty fraction"));
        }
        let mut digits: String = frac.chars().take(9).collect();
        while digits.len() < 9 {
            digits.push('0');
        }
        nanos = digits.parse().map_err(|_| bad("bad fraction"))?;
    }
    let offset_s: i64 = match &s[i..] {
        "Z" | "z" => 0,
        off if off.len() == 6
            && (off.starts_with('+') || off.starts_with('-'))
            && off.as_bytes()[3] == b':' =>
        {
            let oh = num(i + 1..i + 3)? as i64;
            let om = num(i + 4..i + 6)? as i64;
            if oh > 23 || om > 59 {
                return Err(bad("bad offset"));
            }
            let v = oh * 3600 + om * 60;
            if off.starts_with('-') {
                -v
            } else {
                v
            }
        }
        _ => return Err(bad("expected `Z` or a `+HH:MM` offset")),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + (h * 3600 + mi * 60 + sec) as i64 - offset_s;
    Ok((secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_offsets() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), (0, 0));
        assert_eq!(
            parse_rfc3339("2026-11-29T17:09:34Z").unwrap(),
            parse_rfc3339("2026-11-29T18:09:34+01:00").unwrap()
        );
        assert_eq!(
            parse_rfc3339("2000-03-01T00:00:00.25Z").unwrap(),
            (951_868_800, 250_000_000)
        );
        assert!(parse_rfc3339("2026-02-30T00:00:00Z").is_err());
        assert!(parse_rfc3339("yesterday").is_err());
        assert!(parse_rfc3339("2026-11-29T17:09:34").is_err());
        // Multi-byte characters where digits go are an error, not a panic.
        assert!(parse_rfc3339("2026-11-29T17:09:3\u{e9}Z").is_err());
        assert!(parse_rfc3339("2026-11-2\u{e9}T17:09:34ZZ").is_err());
    }
}
