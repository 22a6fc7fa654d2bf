//! Numbers written straight into a page or a download line: the same text as `format!` gives
//! (`{n}`, `{x}`, `{x:.0}`, `{x:.2}`), without a `String` per number or the formatting
//! machinery. The large tables (a million rows) print a dozen numbers a row. Each function takes
//! the common case fast (itoa, zmij, integer rounding far from a tie) and hands anything else
//! (ties, negative numbers, huge or tiny values, NaN) to `std::fmt`, so the text is always
//! std's; the tests compare both on millions of values.

use std::fmt::Write as _;

/// `{n}` of an unsigned integer.
pub fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// `{x}` of an `f64` (the shortest text that reads back as `x`, never in exponent notation).
pub fn push_f64(out: &mut String, x: f64) {
    // Integers below 2^53 print as integers; -0.0 prints as "-0" (std's path).
    if x.is_finite() && x.is_sign_positive() && x < 9_007_199_254_740_992.0 && x.fract() == 0.0 {
        push_u64(out, x as u64);
        return;
    }
    // Other values between 1e-4 and 1e15 whose exact decimal expansion is long: zmij's digits
    // (shortest, and of those the closest). std's are the same unless two closest shortest
    // candidates tie, and a tie puts `x` exactly halfway between two decimals of at most 17
    // digits: an exact expansion of at most 18 significant digits. zmij writes no exponent in
    // this range; the check stays for safety.
    if x.is_finite() && (1e-4..1e15).contains(&x.abs()) && exact_digits(x.abs()) >= 19 {
        let mut b = zmij::Buffer::new();
        let s = b.format_finite(x);
        if !s.contains(['e', 'E']) {
            out.push_str(s);
            return;
        }
    }
    let _ = write!(out, "{x}");
}

/// At least how many significant digits the exact decimal expansion of `a` has (a finite,
/// normal, 1e-4 <= a < 1e15); 0 for an integer. A value with f > 0 binary digits after the point
/// has exactly f decimal digits after it (the last a 5): with its integer digits, or less at
/// most 3 leading zeros below 1.
fn exact_digits(a: f64) -> i64 {
    let bits = a.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    let f = -(exp + i64::from(mantissa.trailing_zeros()));
    if f <= 0 {
        0
    } else if a >= 1.0 {
        f + i64::from((a as u64).ilog10()) + 1
    } else {
        f - 3
    }
}

/// `{x:.0}` (`decimals` 0) or `{x:.2}` (`decimals` 2) of an `f64`; other `decimals` go to std.
pub fn push_fixed(out: &mut String, x: f64, decimals: u32) {
    let scale = match decimals {
        0 => 1.0,
        2 => 100.0,
        _ => return std_fixed(out, x, decimals),
    };
    // t = x·10^d carries a rounding error of at most t·2^-52 (none when d = 0); where the
    // nearest half-integer is farther than that, t.round() is the exactly rounded x·10^d.
    let t = x * scale;
    if !(x.is_sign_positive() && t < 4_503_599_627_370_496.0) {
        return std_fixed(out, x, decimals);
    }
    let err = if decimals == 0 { 0.0 } else { t * f64::EPSILON };
    if ((t - t.floor()) - 0.5).abs() <= err {
        return std_fixed(out, x, decimals);
    }
    let n = t.round() as u64;
    if decimals == 0 {
        push_u64(out, n);
        return;
    }
    push_u64(out, n / 100);
    let f = (n % 100) as u8;
    out.push('.');
    out.push((b'0' + f / 10) as char);
    out.push((b'0' + f % 10) as char);
}

fn std_fixed(out: &mut String, x: f64, decimals: u32) {
    let _ = write!(out, "{x:.prec$}", prec = decimals as usize);
}

/// `12.35 GB`: [`crate::units::gb`], written into `out`.
pub fn push_gb(out: &mut String, bytes: f64) {
    push_fixed(out, bytes / crate::units::GB, 2);
    out.push_str(" GB");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed-seed generator (splitmix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        /// Values as the tables hold them: byte counts, scaled bytes, fractions, ties, any bits.
        fn value(&mut self) -> f64 {
            let u = self.next();
            match u % 8 {
                0 => f64::from_bits(self.next()),
                1 => (self.next() >> ((u >> 8) % 64)) as f64,
                2 => (self.next() >> 11) as f64 / (1u64 << ((u >> 8) % 60)) as f64,
                3 => (self.next() % 100_000_000_000_000) as f64 / 100.0 + 0.005,
                4 => (self.next() % 1_000_000) as f64 + 0.5,
                5 => (self.next() % 10_000_000_000_000) as f64 * 1e-3,
                6 => (self.next() >> 11) as f64 * 1e-9 * ((u >> 8) % 1000) as f64,
                _ => -((self.next() >> 20) as f64) / 7.0,
            }
        }
    }

    fn fast(f: impl Fn(&mut String, f64), x: f64) -> String {
        let mut s = String::new();
        f(&mut s, x);
        s
    }

    #[test]
    fn same_text_as_std_on_edge_cases() {
        let edges = [
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            0.005,
            0.015,
            0.125,
            1.005,
            1e-5,
            1e-4,
            0.1,
            123456789.5,
            4503599627370495.5,
            4503599627370496.0,
            9007199254740992.0,
            9007199254740993.0,
            1e15,
            1e16,
            1e21,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e9,
            12.345e9,
            2147483648.0,
        ];
        for x in edges {
            assert_eq!(fast(push_f64, x), format!("{x}"), "{{x}} of {x:e}");
            assert_eq!(fast(|o, x| push_fixed(o, x, 0), x), format!("{x:.0}"));
            assert_eq!(fast(|o, x| push_fixed(o, x, 2), x), format!("{x:.2}"));
            assert_eq!(fast(|o, x| push_fixed(o, x, 3), x), format!("{x:.3}"));
            assert_eq!(fast(push_gb, x), crate::units::gb(x));
        }
        for n in [0, 1, 9, 10, 999, 1000, u64::MAX] {
            let mut s = String::new();
            push_u64(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn same_text_as_std_on_a_million_values() {
        let mut rng = Rng(7);
        let mut by_zmij = 0;
        for _ in 0..1_000_000 {
            let x = rng.value();
            if (1e-4..1e15).contains(&x.abs()) && exact_digits(x.abs()) >= 19 {
                by_zmij += 1;
            }
            assert_eq!(
                fast(push_f64, x),
                format!("{x}"),
                "{{x}} of {:?}",
                x.to_bits()
            );
            assert_eq!(
                fast(|o, x| push_fixed(o, x, 0), x),
                format!("{x:.0}"),
                "{{x:.0}} of {:?}",
                x.to_bits()
            );
            assert_eq!(
                fast(|o, x| push_fixed(o, x, 2), x),
                format!("{x:.2}"),
                "{{x:.2}} of {:?}",
                x.to_bits()
            );
        }
        // The fast paths were taken, not only std's.
        assert!(by_zmij > 100_000, "{by_zmij} values through zmij");
    }
}
