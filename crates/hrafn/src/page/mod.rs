//! Pages: the page header and typed views over page bytes. No I/O here.
//!
//! Every page starts with a 32-byte header (little-endian, see `docs/format.md`):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | checksum: xxh3-64 of bytes `8..span`, seeded with the page number |
//! | 8 | 8 | page number |
//! | 16 | 1 | kind ([`PageKind`]) |
//! | 17 | 1 | flags (reserved, 0) |
//! | 18 | 2 | entry count |
//! | 20 | 2 | free lower: end of the slot array |
//! | 22 | 2 | free upper: start of the entry bodies |
//! | 24 | 8 | aux: branch → leftmost child; overflow → value length in bytes; records → table tag |
//!
//! `span` is one page, or for an overflow run every page of the run, so one checksum covers
//! a whole large value.

use crate::error::{CorruptionSite, Error, Result};
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};

mod prefetch;
pub use prefetch::{next_probes, prefetch, prefetch_at};
pub(crate) use prefetch::HINTED_SEARCH_MIN_ENTRIES;

/// Offset of the checksum field.
pub const OFFSET_CHECKSUM: usize = 0;
/// Offset of the page number field.
pub const OFFSET_PAGE_NUMBER: usize = 8;
/// Offset of the kind byte.
pub const OFFSET_KIND: usize = 16;
/// Offset of the flags byte.
pub const OFFSET_FLAGS: usize = 17;
/// Offset of the entry count.
pub const OFFSET_ENTRY_COUNT: usize = 18;
/// Offset of the end of the slot array.
pub const OFFSET_FREE_LOWER: usize = 20;
/// Offset of the start of entry bodies.
pub const OFFSET_FREE_UPPER: usize = 22;
/// Offset of the kind-specific auxiliary word.
pub const OFFSET_AUX: usize = 24;
const _: () = assert!(OFFSET_AUX + 8 == PAGE_HEADER_SIZE_BYTES);

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PageKind {
    /// Never written, or freed.
    Free = 0,
    /// B+tree leaf: keys and values.
    Leaf = 1,
    /// B+tree branch: separator keys and child page numbers.
    Branch = 2,
    /// First page of a run holding one large value.
    Overflow = 3,
    /// Page 0: the environment's meta page.
    Meta = 4,
    /// A free-space bitmap page: one bit per page of its section.
    Bitmap = 5,
    /// A free-space directory page: the bitmap page and free count of each section.
    FreeDirectory = 6,
    /// Fixed-size tree leaf: `u64` keys and values of one size.
    FixedLeaf = 7,
    /// Fixed-size tree branch: `u64` separators and child page numbers.
    FixedBranch = 8,
    /// Table records: a start bitmap, then records at 8-byte boundaries.
    Records = 9,
    /// Fixed-size tree leaf whose entries are in any order, with a slot array in key order.
    FixedLeafSlotted = 10,
}

impl PageKind {
    /// Decodes a kind byte.
    pub fn from_u8(byte: u8) -> Option<PageKind> {
        Some(match byte {
            0 => PageKind::Free,
            1 => PageKind::Leaf,
            2 => PageKind::Branch,
            3 => PageKind::Overflow,
            4 => PageKind::Meta,
            5 => PageKind::Bitmap,
            6 => PageKind::FreeDirectory,
            7 => PageKind::FixedLeaf,
            8 => PageKind::FixedBranch,
            9 => PageKind::Records,
            10 => PageKind::FixedLeafSlotted,
            _ => return None,
        })
    }
}

/// Reads a little-endian u16 at `offset`. Panics if out of bounds: callers pass constant
/// offsets inside the header or offsets they have bounds-checked.
#[inline]
pub fn get_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

/// Reads a little-endian u32 at `offset`.
#[inline]
pub fn get_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(b)
}

/// Reads a little-endian u64 at `offset`.
#[inline]
pub fn get_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(b)
}

/// Writes a little-endian u16 at `offset`.
#[inline]
pub fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
    bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian u32 at `offset`.
#[inline]
pub fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian u64 at `offset`.
#[inline]
pub fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

/// Number of pages an overflow run for a value of `value_len` bytes occupies.
pub fn overflow_page_count(value_len: u64) -> u64 {
    (value_len + PAGE_HEADER_SIZE_BYTES as u64).div_ceil(PAGE_SIZE_BYTES as u64)
}

/// Number of pages spanned by the page (run) starting with `header`: 1, or the overflow run.
/// Validated: a corrupt length yields `Err`.
pub fn span_pages(bytes: &[u8], page_number: u64) -> Result<u64> {
    if bytes.len() < PAGE_HEADER_SIZE_BYTES {
        return Err(corrupt(page_number, "page shorter than its header"));
    }
    if bytes[OFFSET_KIND] == PageKind::Overflow as u8 {
        let value_len = get_u64(bytes, OFFSET_AUX);
        if value_len > crate::limits::VALUE_SIZE_MAX_BYTES as u64 {
            return Err(corrupt(
                page_number,
                "overflow length beyond the value limit",
            ));
        }
        Ok(overflow_page_count(value_len))
    } else {
        Ok(1)
    }
}

/// The checksum of a page run: xxh3-64 over everything after the checksum field, seeded
/// with the page number so a page written to the wrong place fails its check.
#[inline]
pub fn compute_checksum(bytes: &[u8], page_number: u64) -> u64 {
    crate::checksum::xxh3_64_with_seed(&bytes[OFFSET_CHECKSUM + 8..], page_number)
}

/// Stores the checksum of a page run into its header.
pub fn seal(bytes: &mut [u8], page_number: u64) {
    debug_assert_eq!(get_u64(bytes, OFFSET_PAGE_NUMBER), page_number);
    let checksum = compute_checksum(bytes, page_number);
    put_u64(bytes, OFFSET_CHECKSUM, checksum);
}

/// Verifies the checksum and page number of a page run read from the data file.
///
/// # Errors
/// [`Error::Corruption`] naming the page when the bytes do not match.
pub fn verify(bytes: &[u8], page_number: u64) -> Result<()> {
    if bytes.len() < PAGE_HEADER_SIZE_BYTES {
        return Err(corrupt(page_number, "page shorter than its header"));
    }
    let stored_number = get_u64(bytes, OFFSET_PAGE_NUMBER);
    if stored_number != page_number {
        return Err(corrupt(
            page_number,
            format!("page header names page {stored_number} (misdirected write?)"),
        ));
    }
    if compute_checksum(bytes, page_number) != get_u64(bytes, OFFSET_CHECKSUM) {
        return Err(corrupt(page_number, "checksum mismatch"));
    }
    Ok(())
}

/// Starts a fresh page of `kind` in `bytes` (all other bytes zeroed by the caller).
pub fn init(bytes: &mut [u8], page_number: u64, kind: PageKind) {
    bytes[..PAGE_HEADER_SIZE_BYTES].fill(0);
    put_u64(bytes, OFFSET_PAGE_NUMBER, page_number);
    bytes[OFFSET_KIND] = kind as u8;
    put_u16(bytes, OFFSET_FREE_LOWER, PAGE_HEADER_SIZE_BYTES as u16);
    put_u16(bytes, OFFSET_FREE_UPPER, PAGE_SIZE_BYTES as u16);
}

/// The kind of a page, validated.
pub fn kind(bytes: &[u8], page_number: u64) -> Result<PageKind> {
    PageKind::from_u8(bytes[OFFSET_KIND]).ok_or_else(|| corrupt(page_number, "unknown page kind"))
}

/// A corruption error for `page_number`.
pub fn corrupt(page_number: u64, reason: impl Into<String>) -> Error {
    Error::corruption(CorruptionSite::Page { page_number }, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_detects_flip_and_misdirection() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        init(&mut page, 7, PageKind::Leaf);
        seal(&mut page, 7);
        verify(&page, 7).expect("sealed page verifies");
        assert!(
            verify(&page, 8).is_err(),
            "page read at the wrong number must fail"
        );
        page[4000] ^= 1;
        assert!(verify(&page, 7).expect_err("flip").is_corruption());
    }

    #[test]
    fn overflow_span() {
        assert_eq!(overflow_page_count(1), 1);
        assert_eq!(
            overflow_page_count((PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES) as u64),
            1
        );
        assert_eq!(
            overflow_page_count((PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES + 1) as u64),
            2
        );
    }
}
