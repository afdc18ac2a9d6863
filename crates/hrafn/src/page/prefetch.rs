//! Cache prefetch hints for pages a scan is about to read.
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
}
