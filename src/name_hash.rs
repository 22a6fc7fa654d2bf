//! A fast hash for the maps keyed by a graph's value names (a million-node graph looks names
//! up several million times; SipHash was a large part of loading and simulating it).
//!
//! Fx-style: each 8-byte word is folded in with a rotate, xor and multiply; `finish` mixes the
//! state with the 64-bit finaliser of MurmurHash3 so that the low bits, which pick the bucket,
//! depend on every input bit (names such as `r1234` differ only in their high bytes, and an
//! unmixed multiply leaves those out of the low bits: every name in one bucket). Not
//! DoS-resistant; the keys are the graph file's own names. Iteration order over these maps is
//! never used for output.

/// The `BuildHasher` of [`NameHasher`].
#[derive(Debug, Default, Clone, Copy)]
pub struct NameHash;

impl std::hash::BuildHasher for NameHash {
    type Hasher = NameHasher;
    fn build_hasher(&self) -> NameHasher {
        NameHasher(0)
    }
}

/// See the module.
pub struct NameHasher(u64);

impl NameHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        let mut h = self.0;
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
