//! Free space: sections of pages, a bitmap per section and a directory of sections.
//!
//! The data file is cut into *sections* of [`PAGES_PER_BITMAP`] pages (510 MiB). Section `s`
//! has one bitmap page, one bit per page (1 = free). Directory pages list the sections: entry
//! `s % SECTIONS_PER_DIRECTORY` of directory `s / SECTIONS_PER_DIRECTORY` holds the section's
//! bitmap page number and its free-page count, and the meta page lists the directory pages.
//! An allocation reads the directory's counts and opens only bitmaps of sections that hold
//! enough free pages, so it costs time in proportion to the sections it looks at, not to the
//! file; one directory page covers 254 TiB, and the meta page lists up to 1,015 of them
//! (`meta::DIRECTORIES_MAX`).
//!
//! Pure functions over page bytes; the writing transaction decides which pages to read and
//! change (`txn/alloc.rs`).

use crate::error::Result;
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES, PAGES_PER_BITMAP};
use crate::page::{corrupt, get_u32, get_u64, put_u32, put_u64};

/// Bytes of one directory entry: bitmap page number (u64), free pages (u32), reserved (u32).
pub const DIRECTORY_ENTRY_SIZE_BYTES: usize = 16;
/// Sections listed by one directory page.
pub const SECTIONS_PER_DIRECTORY: u64 =
    ((PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES) / DIRECTORY_ENTRY_SIZE_BYTES) as u64;

const _: () = assert!((PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES).is_multiple_of(8));
const _: () = assert!(PAGE_HEADER_SIZE_BYTES.is_multiple_of(8));

/// Which section holds `page_number`, and its bit in the section's bitmap.
pub fn locate(page_number: u64) -> (u64, usize) {
    (
        page_number / PAGES_PER_BITMAP,
        (page_number % PAGES_PER_BITMAP) as usize,
    )
}

/// Which directory page lists section `section`, and the entry in it.
pub fn locate_section(section: u64) -> (usize, usize) {
    (
        (section / SECTIONS_PER_DIRECTORY) as usize,
        (section % SECTIONS_PER_DIRECTORY) as usize,
    )
}

/// One section as its directory entry describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionEntry {
    pub bitmap_page: u64,
    pub free_pages: u32,
}

fn entry_offset(entry: usize) -> usize {
    PAGE_HEADER_SIZE_BYTES + entry * DIRECTORY_ENTRY_SIZE_BYTES
}

/// Reads entry `entry` of a directory page. A bitmap page outside `1..next_page_number`
/// or a count above a section's size is corruption (bytes from disk are never trusted).
///
/// # Errors
/// [`crate::Error::Corruption`] naming the directory page.
pub fn read_entry(
    directory: &[u8],
    directory_page: u64,
    entry: usize,
    next_page_number: u64,
) -> Result<SectionEntry> {
    assert!(
        (entry as u64) < SECTIONS_PER_DIRECTORY,
        "entry index in range"
    );
    let at = entry_offset(entry);
    let section = SectionEntry {
        bitmap_page: get_u64(directory, at),
        free_pages: get_u32(directory, at + 8),
    };
    if section.bitmap_page == 0
        || section.bitmap_page >= next_page_number
        || u64::from(section.free_pages) > PAGES_PER_BITMAP
    {
        return Err(corrupt(directory_page, "directory entry out of range"));
    }
    Ok(section)
}

/// Writes entry `entry` of a directory page.
pub fn write_entry(directory: &mut [u8], entry: usize, section: SectionEntry) {
    assert!(
        (entry as u64) < SECTIONS_PER_DIRECTORY,
        "entry index in range"
    );
    assert!(u64::from(section.free_pages) <= PAGES_PER_BITMAP);
    let at = entry_offset(entry);
    put_u64(directory, at, section.bitmap_page);
    put_u32(directory, at + 8, section.free_pages);
    put_u32(directory, at + 12, 0);
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
    assert!(
        bit + count <= PAGES_PER_BITMAP as usize,
        "bits inside the bitmap"
    );
    let mut b = bit;
    let end = bit + count;
    while b < end {
        // Whole bytes at once in the middle of a long run.
        if b.is_multiple_of(8) && end - b >= 8 {
            page[PAGE_HEADER_SIZE_BYTES + b / 8] = if free { 0xFF } else { 0 };
            b += 8;
            continue;
        }
        let (byte, mask) = byte_bit(b);
        if free {
            page[byte] |= mask;
        } else {
            page[byte] &= !mask;
        }
        b += 1;
    }
}

/// Number of set bits in a bitmap page.
pub fn count_free(page: &[u8]) -> u64 {
    page[PAGE_HEADER_SIZE_BYTES..PAGE_SIZE_BYTES]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum()
}

/// Word `w` of a bitmap's body: bit `k` of the word is page bit `64·w + k`.
#[inline]
fn word(page: &[u8], w: usize) -> u64 {
    let at = PAGE_HEADER_SIZE_BYTES + w * 8;
    u64::from_le_bytes(page[at..at + 8].try_into().expect("eight bytes"))
}

/// First run of `count` set bits starting at or after `from_bit` and ending at or below
/// `limit_bit`; returns its first bit. Scans 64 bits at a time: a run of zeros or ones
/// costs one step per word.
pub fn find_run(page: &[u8], count: usize, from_bit: usize, limit_bit: usize) -> Option<usize> {
    assert!(count >= 1, "a run holds at least one page");
    let limit = limit_bit.min(PAGES_PER_BITMAP as usize);
    let mut bit = from_bit;
    let mut run_start = bit;
    let mut run_len = 0usize;
    while bit < limit {
        let shift = bit % 64;
        let bits = word(page, bit / 64) >> shift;
        let left_in_word = 64 - shift;
        if run_len == 0 {
            // Skip the zeros before the next free page.
            let zeros = (bits.trailing_zeros() as usize).min(left_in_word);
            if zeros > 0 {
                bit += zeros;
                continue;
            }
            run_start = bit;
        }
        let ones = ((!bits).trailing_zeros() as usize).min(left_in_word);
        run_len += ones;
        bit += ones;
        if run_len >= count {
            // Any later run starts later still.
            return (run_start + count <= limit).then_some(run_start);
        }
        if ones < left_in_word {
            run_len = 0; // a zero ends the run
        }
    }
    None
}

/// As [`find_run`], but the run may start anywhere below `limit_bit`: first at or after
/// `near_bit` (keeping new pages near those a tree already has), then from the start.
pub fn find_run_near(
    page: &[u8],
    count: usize,
    near_bit: usize,
    limit_bit: usize,
) -> Option<usize> {
    find_run(page, count, near_bit, limit_bit)
        .or_else(|| find_run(page, count, 0, (near_bit + count - 1).min(limit_bit)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(page: &[u8], count: usize, from: usize, limit: usize) -> Option<usize> {
        (from..limit.min(PAGES_PER_BITMAP as usize))
            .find(|&s| s + count <= limit && (s..s + count).all(|b| is_free(page, b)))
    }

    #[test]
    fn runs_are_found_below_the_limit() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        set_range(&mut page, 3, 1, true);
        set_range(&mut page, 10, 4, true);
        assert_eq!(find_run(&page, 1, 0, 100), Some(3));
        assert_eq!(find_run(&page, 2, 0, 100), Some(10));
        assert_eq!(find_run(&page, 5, 0, 100), None);
        assert_eq!(
            find_run(&page, 2, 0, 11),
            None,
            "run must end below the limit"
        );
        assert_eq!(find_run(&page, 1, 4, 100), Some(10), "from a later bit");
        assert_eq!(find_run_near(&page, 1, 12, 100), Some(12));
        assert_eq!(
            find_run_near(&page, 4, 12, 100),
            Some(10),
            "wraps to the start"
        );
        assert_eq!(count_free(&page), 5);
        set_range(&mut page, 10, 4, false);
        assert_eq!(count_free(&page), 1);
        assert!(is_free(&page, 3) && !is_free(&page, 10));
    }

    #[test]
    fn word_scan_matches_a_bit_by_bit_search() {
        let mut seed = 0x5EC7_1015u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for _ in 0..300 {
            let mut page = vec![0u8; PAGE_SIZE_BYTES];
            // Random runs of free pages, some crossing words.
            for _ in 0..next() % 40 {
                let start = (next() % 2000) as usize;
                let len = (next() % 150) as usize + 1;
                set_range(&mut page, start, len, true);
            }
            for _ in 0..20 {
                let count = (next() % 130) as usize + 1;
                let from = (next() % 2100) as usize;
                let limit = (next() % 2200) as usize;
                assert_eq!(
                    find_run(&page, count, from, limit),
                    naive(&page, count, from, limit),
                    "count {count} from {from} limit {limit}"
                );
            }
        }
    }

    #[test]
    fn long_ranges_set_and_clear_whole_bytes() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        set_range(&mut page, 5, 1000, true);
        assert_eq!(count_free(&page), 1000);
        assert!(!is_free(&page, 4) && is_free(&page, 5) && is_free(&page, 1004));
        assert!(!is_free(&page, 1005));
        set_range(&mut page, 7, 990, false);
        assert_eq!(count_free(&page), 10);
        let last = PAGES_PER_BITMAP as usize - 1;
        set_range(&mut page, last, 1, true);
        assert_eq!(find_run(&page, 1, 1000, usize::MAX), Some(1000));
        assert_eq!(find_run(&page, 1, 1005, usize::MAX), Some(last));
    }

    #[test]
    fn directory_entries_roundtrip_and_reject_bad_bytes() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        let entry = SectionEntry {
            bitmap_page: 7,
            free_pages: 100,
        };
        write_entry(&mut page, 509, entry);
        assert_eq!(read_entry(&page, 3, 509, 10).ok(), Some(entry));
        assert!(
            read_entry(&page, 3, 509, 7).is_err(),
            "bitmap past the file"
        );
        assert!(read_entry(&page, 3, 0, 10).is_err(), "no bitmap page");
        put_u32(
            &mut page,
            entry_offset(509) + 8,
            PAGES_PER_BITMAP as u32 + 1,
        );
        assert!(
            read_entry(&page, 3, 509, 10).is_err(),
            "count beyond a section"
        );
        assert_eq!(SECTIONS_PER_DIRECTORY, 510);
    }
}
