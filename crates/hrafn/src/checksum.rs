//! The one checksum of the format: xxh3-64 (pages, journal records, headers, backup
//! manifests and files). Computed through `twox-hash`, which picks AVX2 or SSE2 at run time:
//! a page checksum is taken at every commit for every page it changed.

use std::hash::Hasher;
use twox_hash::XxHash3_64;

/// xxh3-64 of `bytes` (seed 0).
#[inline]
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot(bytes)
}

/// xxh3-64 of `bytes` with `seed`.
#[inline]
pub fn xxh3_64_with_seed(bytes: &[u8], seed: u64) -> u64 {
    XxHash3_64::oneshot_with_seed(seed, bytes)
}

/// xxh3-64 (seed 0) of bytes given in pieces.
#[derive(Default)]
pub struct Xxh3(XxHash3_64);

impl Xxh3 {
    /// A hasher over nothing yet.
    pub fn new() -> Xxh3 {
        Xxh3(XxHash3_64::with_seed(0))
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The checksum of everything added.
    pub fn digest(&self) -> u64 {
        self.0.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values are the format's: identical to the reference implementation for every
    /// length class (short, mid, long, many stripes) and seed.
    #[test]
    fn matches_the_reference_xxh3() {
        let bytes: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..300).chain([1_023, 1_024, 4_096, 8_176, 8_192, 16_384, 20_000]) {
            let b = &bytes[..len];
            assert_eq!(xxh3_64(b), xxhash_rust::xxh3::xxh3_64(b), "len {len}");
            for seed in [0, 1, 7, 1 << 40] {
                assert_eq!(
                    xxh3_64_with_seed(b, seed),
                    xxhash_rust::xxh3::xxh3_64_with_seed(b, seed),
                    "len {len} seed {seed}"
                );
            }
            let mut streamed = Xxh3::new();
            for piece in b.chunks(333) {
                streamed.update(piece);
            }
            assert_eq!(
                streamed.digest(),
                xxhash_rust::xxh3::xxh3_64(b),
                "len {len}"
            );
        }
    }
}
