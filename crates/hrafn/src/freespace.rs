//! Free-space bitmaps: one bit per page, 1 = free. Bitmap `i` (listed in the meta page)
//! covers pages `i·PAGES_PER_BITMAP ..`. Pure functions over bitmap page bytes; the
//! writing transaction decides which pages to read and change.

use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES, PAGES_PER_BITMAP};

/// Which bitmap covers `page_number`, and the bit inside it.
pub fn locate(page_number: u64) -> (usize, usize) {
    (
        (page_number / PAGES_PER_BITMAP) as usize,
        (page_number % PAGES_PER_BITMAP) as usize,
    )
}

#[inline]
fn byte_bit(bit: usize) -> (usize, u8) {
    (PAGE_HEADER_SIZE_BYTES + bit / 8, 1 << (bit % 8))
}

/// Whether bit `bit` is set (page free).
pub fn is_free(page: &[u8], bit: usize) -> bool {
    let (byte, mask) = byte_bit(bit);
    page[byte] & mask != 0
}

/// Sets or clears `count` bits from `bit`.
pub fn set_range(page: &mut [u8], bit: usize, count: usize, free: bool) {
    for b in bit..bit + count {
        let (byte, mask) = byte_bit(b);
        if free {
            page[byte] |= mask;
        } else {
            page[byte] &= !mask;
        }
    }
}

/// Number of set bits in the bitmap page at the start of `page`. Page sources hand out
/// the bytes from a page to the end of its buffer or mapping, so only the first page is
/// counted.
pub fn count_free(page: &[u8]) -> u64 {
    page[PAGE_HEADER_SIZE_BYTES..PAGE_SIZE_BYTES]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum()
}

/// First run of `count` set bits, all below `limit_bit`; returns its first bit.
pub fn find_run(page: &[u8], count: usize, limit_bit: usize) -> Option<usize> {
    let body = &page[PAGE_HEADER_SIZE_BYTES..];
    let limit = limit_bit.min(PAGES_PER_BITMAP as usize);
    let mut run_start = 0;
    let mut run_len = 0;
    let mut bit = 0;
    while bit < limit {
        // Skip whole zero bytes quickly.
        if bit % 8 == 0 && body[bit / 8] == 0 {
            run_len = 0;
            bit += 8;
            continue;
        }
        if body[bit / 8] & (1 << (bit % 8)) != 0 {
            if run_len == 0 {
                run_start = bit;
            }
            run_len += 1;
            if run_len == count {
                return Some(run_start);
            }
        } else {
            run_len = 0;
        }
        bit += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_found_below_the_limit() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        set_range(&mut page, 3, 1, true);
        set_range(&mut page, 10, 4, true);
        assert_eq!(find_run(&page, 1, 100), Some(3));
        assert_eq!(find_run(&page, 2, 100), Some(10));
        assert_eq!(find_run(&page, 5, 100), None);
        assert_eq!(find_run(&page, 2, 11), None, "run must end below the limit");
        assert_eq!(count_free(&page), 5);
        set_range(&mut page, 10, 4, false);
        assert_eq!(count_free(&page), 1);
        assert!(is_free(&page, 3) && !is_free(&page, 10));
    }

    /// A bitmap read through the data-file mapping comes with every later page attached;
    /// their bytes are not free bits (they made every open count the whole file).
    #[test]
    fn count_free_counts_one_page_of_a_longer_slice() {
        let mut bytes = vec![0xFFu8; 3 * PAGE_SIZE_BYTES];
        bytes[..PAGE_SIZE_BYTES].fill(0);
        set_range(&mut bytes, 0, 7, true);
        assert_eq!(count_free(&bytes), 7);
    }
}
