//! A fast hash for the maps keyed by a graph's value names (a million-node graph looks names
//! up several million times; SipHash was a large part of loading and simulating it).
//!
//! The engine's Fx-style [`crate::intern::FastHash`] (each 8-byte word folded in with a rotate,
//! xor and multiply), whose `finish` is then mixed with the 64-bit finaliser of MurmurHash3 so
//! that the low bits, which pick the bucket, depend on every input bit (names such as `r1234` differ only in their high bytes, and an
//! unmixed multiply leaves those out of the low bits: every name in one bucket). Not
//! DoS-resistant; the keys are the graph file's own names. Iteration order over these maps is
//! never used for output.

/// The `BuildHasher` of [`NameHasher`].
#[derive(Debug, Default, Clone, Copy)]
pub struct NameHash;

impl std::hash::BuildHasher for NameHash {
    type Hasher = NameHasher;
    fn build_hasher(&self) -> NameHasher {
        NameHasher(crate::intern::FastHash.build_hasher())
    }
}

/// The engine's [`crate::intern::FastHasher`] with a finaliser on `finish` (see the module).
pub struct NameHasher(crate::intern::FastHasher);

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    fn write_u8(&mut self, i: u8) {
        self.0.write_u8(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.0.write_usize(i);
    }
    fn finish(&self) -> u64 {
        let mut h = self.0.finish();
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// A map keyed by names, with [`NameHash`].
pub type NameMap<K, V> = std::collections::HashMap<K, V, NameHash>;
/// A set of names, with [`NameHash`].
pub type NameSet<K> = std::collections::HashSet<K, NameHash>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn names_that_differ_in_high_bytes_spread_over_the_low_bits() {
        let buckets: std::collections::BTreeSet<u64> = (0..4096)
            .map(|k| NameHash.hash_one(format!("r{k}")) & 1023)
            .collect();
        assert!(buckets.len() > 900, "{} of 1024 buckets", buckets.len());
    }
}
