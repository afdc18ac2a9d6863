//! Every size limit and layout constant, with compile-time checks of how they relate.

/// Size of one page, in bytes. Voron 4+ uses 8 KiB: large enough for fat B+tree nodes,
/// small enough that a one-key update diffs to a few bytes.
pub const PAGE_SIZE_BYTES: usize = 8192;

/// Bytes at the start of every page (see `docs/format.md`, "Page header").
pub const PAGE_HEADER_SIZE_BYTES: usize = 32;

/// Longest key. A leaf must hold at least two entries for splits to terminate, and a branch
/// at least three; Voron's limit is 2,025 bytes with 8 KiB pages.
pub const KEY_SIZE_MAX_BYTES: usize = 2000;

/// Largest leaf entry (header + key + value + slot) kept inside a node; larger values go to
/// overflow pages. Two such entries must fit in one page so that any split succeeds.
pub const INLINE_ENTRY_MAX_BYTES: usize = 4000;

/// Largest value. Values live in contiguous overflow pages and journal records carry them
/// whole, so the limit keeps one record's size within what one process can buffer.
pub const VALUE_SIZE_MAX_BYTES: usize = (1 << 31) - 1;

/// Alignment of journal writes (offset, length and memory) required by `O_DIRECT`.
pub const JOURNAL_ALIGN_BYTES: usize = 4096;

/// Size of a sector the disk writes atomically; torn writes tear at this granularity.
pub const SECTOR_SIZE_BYTES: usize = 512;

/// Pages covered by one free-space bitmap page (one bit per page).
pub const PAGES_PER_BITMAP: u64 = ((PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES) * 8) as u64;

const _: () = assert!(PAGE_SIZE_BYTES.is_power_of_two());
const _: () = assert!(PAGE_SIZE_BYTES.is_multiple_of(JOURNAL_ALIGN_BYTES));
const _: () = assert!(JOURNAL_ALIGN_BYTES.is_multiple_of(SECTOR_SIZE_BYTES));
// Two maximal inline entries fit in one page, so a leaf split always succeeds.
const _: () = assert!(2 * INLINE_ENTRY_MAX_BYTES <= PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES);
// A maximal key plus the smallest value must be inline (leaf entry header 7, slot 2).
const _: () = assert!(KEY_SIZE_MAX_BYTES + 7 + 2 + 16 <= INLINE_ENTRY_MAX_BYTES);
// Branch entries (10-byte header + key + 2-byte slot): at least three per page.
const _: () = assert!(3 * (KEY_SIZE_MAX_BYTES + 12) <= PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES);
// Offsets inside a page fit in u16.
const _: () = assert!(PAGE_SIZE_BYTES <= u16::MAX as usize);
