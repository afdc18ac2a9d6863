//! Page diffs: the payload of a journal record.
//!
//! For each changed page the payload holds its number and the runs of bytes that differ from
//! the page's previous version, at 8-byte-word granularity. A run whose new bytes are all
//! zero carries no bytes. If the runs would cost more than the page, the page is stored
//! whole. Diffs carry only *new* bytes, so applying the diffs of transactions `a..=b` in
//! order onto a page that holds any mix of versions `a-1..=b` (a torn data-file page)
//! yields version `b`: replay is idempotent.
//!
//! Entry layout (little-endian):
//!
//! | size | field |
//! |---|---|
//! | 8 | page number |
//! | 2 | run count, or `0xFFFF`: the whole page follows (8,192 bytes) |
//! | per run: 2 | offset in the page |
//! | per run: 2 | length; bit 15 set = zero run (no bytes follow) |
//! | per run: length | new bytes (absent for a zero run) |

use crate::error::{CorruptionSite, Error, Result};
use crate::limits::PAGE_SIZE_BYTES;

/// Run count marking a whole page.
pub const FULL_PAGE_MARKER: u16 = 0xFFFF;
/// Bit of a run's length marking a zero run.
pub const ZERO_RUN_FLAG: u16 = 0x8000;
const WORD: usize = 8;
const ENTRY_HEADER_BYTES: usize = 10;
const RUN_HEADER_BYTES: usize = 4;

/// Words compared at once when skipping unchanged stretches (64 bytes).
const BLOCK_WORDS: usize = 8;

/// Most runs a page can have (alternating changed and unchanged words).
const RUNS_MAX: usize = PAGE_SIZE_BYTES / WORD / 2 + 1;

/// Appends the diff of `new` against `old` (`None` = all zeros) for `page_number` to `out`.
/// Returns false (and appends nothing) when the page did not change. Runs are found first
/// and bytes copied once, either as runs or as the whole page, whichever is smaller.
pub fn encode_page(out: &mut Vec<u8>, page_number: u64, new: &[u8], old: Option<&[u8]>) -> bool {
    assert_eq!(new.len(), PAGE_SIZE_BYTES, "diffs are per page");
    const ZERO: [u8; WORD] = [0u8; WORD];
    let word = |bytes: &[u8], i: usize| -> [u8; WORD] {
        bytes[i * WORD..(i + 1) * WORD]
            .try_into()
            .expect("one word")
    };
    let words = PAGE_SIZE_BYTES / WORD;
    let changed_at = |i: usize| match old {
        Some(o) => word(new, i) != word(o, i),
        None => word(new, i) != ZERO,
    };
    // (first word, end word, all new bytes zero)
    let mut runs = [(0u16, 0u16, false); RUNS_MAX];
    let mut run_count = 0;
    let mut cost = ENTRY_HEADER_BYTES;
    let mut i = 0;
    while i < words {
        // Skip unchanged 64-byte blocks with one (vectorized) comparison each: most of a
        // changed page is unchanged.
        if i % BLOCK_WORDS == 0 && i + BLOCK_WORDS <= words {
            let block = i * WORD..(i + BLOCK_WORDS) * WORD;
            let same = match old {
                Some(o) => new[block.clone()] == o[block],
                None => new[block].iter().all(|&b| b == 0),
            };
            if same {
                i += BLOCK_WORDS;
                continue;
            }
        }
        if !changed_at(i) {
            i += 1;
            continue;
        }
        // A run is a maximal stretch of changed words that are all zero or all not zero,
        // so zeroed stretches cost no bytes.
        let zero = word(new, i) == ZERO;
        let start = i;
        while i < words && changed_at(i) && (word(new, i) == ZERO) == zero {
            i += 1;
        }
        if run_count == RUNS_MAX {
            cost = usize::MAX; // cannot happen with alternating runs; store the page whole
            break;
        }
        runs[run_count] = (start as u16, i as u16, zero);
        run_count += 1;
        cost += RUN_HEADER_BYTES + if zero { 0 } else { (i - start) * WORD };
    }
    if run_count == 0 {
        return false;
    }
    out.extend_from_slice(&page_number.to_le_bytes());
    if cost >= ENTRY_HEADER_BYTES + PAGE_SIZE_BYTES {
        out.extend_from_slice(&FULL_PAGE_MARKER.to_le_bytes());
        out.extend_from_slice(new);
        return true;
    }
    out.extend_from_slice(&(run_count as u16).to_le_bytes());
    for &(start, end, zero) in &runs[..run_count] {
        let (from, to) = (usize::from(start) * WORD, usize::from(end) * WORD);
        let len = (to - from) as u16;
        out.extend_from_slice(&(from as u16).to_le_bytes());
        out.extend_from_slice(&(if zero { len | ZERO_RUN_FLAG } else { len }).to_le_bytes());
        if !zero {
            out.extend_from_slice(&new[from..to]);
        }
    }
    true
}

/// One page's diff inside a payload, validated.
#[derive(Debug, Clone, Copy)]
pub struct DiffEntry<'a> {
    /// The page the diff applies to.
    pub page_number: u64,
    run_count: u16,
    body: &'a [u8],
}

impl DiffEntry<'_> {
    /// Applies the diff onto `page` (one page of bytes). The entry was validated when read,
    /// so this cannot fail.
    pub fn apply(&self, page: &mut [u8]) {
        assert_eq!(page.len(), PAGE_SIZE_BYTES, "diffs apply to one page");
        if self.run_count == FULL_PAGE_MARKER {
            page.copy_from_slice(self.body);
            return;
        }
        let mut pos = 0;
        for _ in 0..self.run_count {
            let offset = usize::from(u16::from_le_bytes([self.body[pos], self.body[pos + 1]]));
            let raw_len = u16::from_le_bytes([self.body[pos + 2], self.body[pos + 3]]);
            let len = usize::from(raw_len & !ZERO_RUN_FLAG);
            pos += RUN_HEADER_BYTES;
            if raw_len & ZERO_RUN_FLAG != 0 {
                page[offset..offset + len].fill(0);
            } else {
                page[offset..offset + len].copy_from_slice(&self.body[pos..pos + len]);
                pos += len;
            }
        }
    }
}

/// A cursor over the entries of a decompressed payload; every length is validated.
pub struct DiffReader<'a> {
    payload: &'a [u8],
    pos: usize,
    site: CorruptionSite,
}

impl<'a> DiffReader<'a> {
    /// Reads `payload`; errors name `site`.
    pub fn new(payload: &'a [u8], site: CorruptionSite) -> DiffReader<'a> {
        DiffReader {
            payload,
            pos: 0,
            site,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.payload.len());
        let Some(end) = end else {
            return Err(Error::corruption(
                self.site.clone(),
                "diff entry runs past the payload",
            ));
        };
        let bytes = &self.payload[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next entry, or `None` at the end of the payload.
    ///
    /// # Errors
    /// [`Error::Corruption`] if the entry's runs do not fit the payload or the page.
    pub fn next_entry(&mut self) -> Result<Option<DiffEntry<'a>>> {
        if self.pos == self.payload.len() {
            return Ok(None);
        }
        let header = self.take(ENTRY_HEADER_BYTES)?;
        let page_number = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let run_count = u16::from_le_bytes([header[8], header[9]]);
        let body_start = self.pos;
        if run_count == FULL_PAGE_MARKER {
            let body = self.take(PAGE_SIZE_BYTES)?;
            return Ok(Some(DiffEntry {
                page_number,
                run_count,
                body,
            }));
        }
        if run_count == 0 {
            return Err(Error::corruption(
                self.site.clone(),
                "diff entry without runs",
            ));
        }
        for _ in 0..run_count {
            let run = self.take(RUN_HEADER_BYTES)?;
            let offset = usize::from(u16::from_le_bytes([run[0], run[1]]));
            let raw_len = u16::from_le_bytes([run[2], run[3]]);
            let len = usize::from(raw_len & !ZERO_RUN_FLAG);
            if offset + len > PAGE_SIZE_BYTES {
                return Err(Error::corruption(
                    self.site.clone(),
                    "diff run past the page end",
                ));
            }
            if raw_len & ZERO_RUN_FLAG == 0 {
                self.take(len)?;
            }
        }
        let body = &self.payload[body_start..self.pos];
        Ok(Some(DiffEntry {
            page_number,
            run_count,
            body,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CorruptionSite;
    use proptest::prelude::*;

    #[test]
    fn unchanged_page_costs_nothing() {
        let page = vec![5u8; PAGE_SIZE_BYTES];
        let mut out = Vec::new();
        assert!(!encode_page(&mut out, 3, &page, Some(&page)));
        assert!(out.is_empty());
    }

    fn roundtrip(old: &[u8], new: &[u8], base: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_page(&mut out, 9, new, Some(old));
        let mut page = base.to_vec();
        let mut reader = DiffReader::new(&out, CorruptionSite::Environment);
        while let Some(entry) = reader.next_entry().expect("valid") {
            assert_eq!(entry.page_number, 9);
            entry.apply(&mut page);
        }
        page
    }

    #[test]
    fn small_change_is_small_and_zero_runs_are_free() {
        let old = vec![1u8; PAGE_SIZE_BYTES];
        let mut new = old.clone();
        new[100] = 2;
        new[4000..4100].fill(0);
        let mut out = Vec::new();
        assert!(encode_page(&mut out, 1, &new, Some(&old)));
        assert!(
            out.len() < 64,
            "diff of a few bytes was {} bytes",
            out.len()
        );
        assert_eq!(roundtrip(&old, &new, &old), new);
    }

    proptest! {
        #[test]
        fn diff_applies_onto_torn_mix(
            changes in proptest::collection::vec((0usize..PAGE_SIZE_BYTES, any::<u8>()), 0..200),
            tear in proptest::collection::vec(any::<bool>(), PAGE_SIZE_BYTES / 512),
        ) {
            let old: Vec<u8> = (0..PAGE_SIZE_BYTES).map(|i| (i * 7) as u8).collect();
            let mut new = old.clone();
            for (i, b) in changes { new[i] = b; }
            // A torn page: each sector from old or new.
            let mut torn = old.clone();
            for (s, take_new) in tear.iter().enumerate() {
                if *take_new { torn[s * 512..(s + 1) * 512].copy_from_slice(&new[s * 512..(s + 1) * 512]); }
            }
            prop_assert_eq!(roundtrip(&old, &new, &torn), new);
        }
    }

    #[test]
    fn corrupt_payload_is_an_error_not_a_panic() {
        let old = vec![0u8; PAGE_SIZE_BYTES];
        let mut new = old.clone();
        new[10] = 1;
        let mut out = Vec::new();
        encode_page(&mut out, 1, &new, Some(&old));
        for cut in 1..out.len() {
            let mut reader = DiffReader::new(&out[..cut], CorruptionSite::Environment);
            assert!(reader.next_entry().is_err(), "truncated at {cut} must fail");
        }
        // An out-of-page offset.
        let mut bad = out.clone();
        bad[10] = 0xFF;
        bad[11] = 0x1F;
        let mut reader = DiffReader::new(&bad, CorruptionSite::Environment);
        assert!(reader.next_entry().is_err());
    }
}
