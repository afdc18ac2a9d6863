//! Cache prefetch hints: for pages a scan is about to read, and for the entries a binary
//! search may probe next.
#![allow(unsafe_code)] // the prefetch intrinsic takes a raw pointer; see the SAFETY note.

/// The cache-line size [`prefetch`] steps by.
const CACHE_LINE_BYTES: usize = 64;

/// Asks the CPU to start loading every cache line of `bytes`, without waiting for them.
///
/// A scan reads a leaf's entries in key order, which for a slotted node runs from the page
/// end downwards: a pattern the hardware prefetcher follows late, so each entry's first
/// load used to wait on memory. Hinting the whole page when the scan arrives (and its
/// sibling one leaf ahead) lets those loads overlap. A hint only: no effect on results.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(CACHE_LINE_BYTES) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch never faults and changes no memory or register state the
        // program can observe; the pointer comes from a live slice, so it is in bounds.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, CACHE_LINE_BYTES);
}

/// Asks the CPU to start loading the cache line holding `bytes[at]`; nothing when `at` is
/// past the end. A binary search hints the two entries it may probe next, so their loads
/// overlap the one it waits on now.
#[inline]
pub fn prefetch_at(bytes: &[u8], at: usize) {
    if let Some(line) = bytes.get(at..at + 1) {
        prefetch(line);
    }
}

/// Below this many candidates, a binary search stops hinting its next probes: their
/// entries are close by, and a search of a cached node pays little for the hints.
pub(crate) const HINTED_SEARCH_MIN_ENTRIES: usize = 8;

/// The two entries a binary search over `lo..hi` that is probing `mid` may probe next
/// (the middles of the halves below and above `mid`), for it to hint while it waits on
/// `mid`; `None` when few candidates are left.
#[inline]
pub fn next_probes(lo: usize, mid: usize, hi: usize) -> Option<(usize, usize)> {
    debug_assert!(lo <= mid && mid < hi);
    let below = lo + (mid - lo) / 2;
    let above = mid + 1 + (hi - mid - 1) / 2;
    (hi - lo > HINTED_SEARCH_MIN_ENTRIES).then_some((below, above))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetching_any_slice_leaves_it_unchanged() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(8192 + 7).collect();
        let copy = bytes.clone();
        prefetch(&bytes);
        prefetch(&bytes[3..70]);
        prefetch(&[]);
        prefetch_at(&bytes, 0);
        prefetch_at(&bytes, bytes.len());
        assert_eq!(bytes, copy);
    }

    #[test]
    fn next_probes_are_the_middles_of_both_halves() {
        // 0..100 probing 50: below is 0..50 (middle 25), above 51..100 (middle 75).
        assert_eq!(next_probes(0, 50, 100), Some((25, 75)));
        assert_eq!(next_probes(10, 15, 20), Some((12, 18)));
        // Few candidates left: no hints.
        assert_eq!(next_probes(0, 4, 8), None);
        assert_eq!(next_probes(3, 3, 4), None);
    }
}
