//! The SHA-256 digests of row files, kept as 32 bytes and printed as lowercase hex.

use serde::Serialize;

/// A SHA-256 digest, kept as its 32 bytes; printed and serialised as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest(sha2::Sha256::digest(bytes).into())
    }

    /// Lowercase hex, 64 characters.
    pub fn hex(&self) -> String {
        self.to_string()
    }
}

impl Digest {
    /// The 64 lowercase hex digits, without allocating.
    pub fn hex_bytes(&self) -> [u8; 64] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (k, b) in self.0.iter().enumerate() {
            out[2 * k] = DIGITS[(b >> 4) as usize];
            out[2 * k + 1] = DIGITS[(b & 15) as usize];
        }
        out
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = self.hex_bytes();
        f.write_str(std::str::from_utf8(&hex).expect("hex digits are ASCII"))
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
