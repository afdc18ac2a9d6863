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

/// Bytes compared at once when skipping unchanged stretches.
const BLOCK_BYTES: usize = 64;
const WORDS: usize = PAGE_SIZE_BYTES / WORD;

fn word_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(
        bytes[i * WORD..(i + 1) * WORD]
            .try_into()
            .expect("one word"),
    )
}

/// The runs of a page's diff, in order: (first word, end word, all new bytes zero). A run
/// is a maximal stretch of changed words that are all zero or all not zero, so zeroed
/// stretches cost no bytes. Yielded twice per page (once to cost, once to encode) rather
/// than stored, since storing them costs more than finding them.
struct Runs<'a> {
    new: &'a [u8],
    old: Option<&'a [u8]>,
    /// Next word to look at.
    i: usize,
}

impl Runs<'_> {
    fn old_word(&self, i: usize) -> u64 {
        self.old.map_or(0, |o| word_at(o, i))
    }

    /// Whether the 64-byte block at word `i` is unchanged: word XORs folded with OR, which
    /// the compiler vectorizes (a slice comparison would call `memcmp` per block).
    fn block_unchanged(&self, i: usize) -> bool {
        let range = i * WORD..i * WORD + BLOCK_BYTES;
        let new = self.new[range.clone()].chunks_exact(WORD);
        let diff = match self.old {
            Some(o) => new.zip(o[range].chunks_exact(WORD)).fold(0, |acc, (n, o)| {
                acc | (u64::from_ne_bytes(n.try_into().expect("word"))
                    ^ u64::from_ne_bytes(o.try_into().expect("word")))
            }),
            None => new.fold(0, |acc, n| {
                acc | u64::from_ne_bytes(n.try_into().expect("word"))
            }),
        };
        diff == 0
    }
}

impl Iterator for Runs<'_> {
    type Item = (usize, usize, bool);

    fn next(&mut self) -> Option<Self::Item> {
        const BLOCK_WORDS: usize = BLOCK_BYTES / WORD;
        let mut i = self.i;
        while i < WORDS {
            if i.is_multiple_of(BLOCK_WORDS) && self.block_unchanged(i) {
                i += BLOCK_WORDS;
                continue;
            }
            let new = word_at(self.new, i);
            if new == self.old_word(i) {
                i += 1;
                continue;
            }
            let zero = new == 0;
            let start = i;
            i += 1;
            while i < WORDS {
                let new = word_at(self.new, i);
                if new == self.old_word(i) || (new == 0) != zero {
                    break;
                }
                i += 1;
            }
            self.i = i;
            return Some((start, i, zero));
        }
        self.i = WORDS;
        None
    }
}

/// Appends the diff of `new` against `old` (`None` = all zeros) for `page_number` to `out`.
/// Returns false (and appends nothing) when the page did not change. Runs are found first
/// and bytes copied once, either as runs or as the whole page, whichever is smaller.
pub fn encode_page(out: &mut Vec<u8>, page_number: u64, new: &[u8], old: Option<&[u8]>) -> bool {
    assert_eq!(new.len(), PAGE_SIZE_BYTES, "diffs are per page");
    assert!(
        old.is_none_or(|o| o.len() == PAGE_SIZE_BYTES),
        "diffs are per page"
    );
    // The first runs are kept (most changed pages have a few); pages with more are
    // scanned again to encode.
    const KEPT_RUNS: usize = 32;
    let mut kept = [(0usize, 0usize, false); KEPT_RUNS];
    let mut run_count = 0usize;
    let mut cost = ENTRY_HEADER_BYTES;
    for run @ (start, end, zero) in (Runs { new, old, i: 0 }) {
        if let Some(slot) = kept.get_mut(run_count) {
            *slot = run;
        }
        run_count += 1;
        cost += RUN_HEADER_BYTES + if zero { 0 } else { (end - start) * WORD };
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
    // Fewer runs than the page has words, and a whole page is stored past that many.
    out.extend_from_slice(&(run_count as u16).to_le_bytes());
    let rescan = run_count > KEPT_RUNS;
    let kept = kept[..if rescan { 0 } else { run_count }].iter().copied();
    let rescanned = rescan.then_some(Runs { new, old, i: 0 });
    for (start, end, zero) in kept.chain(rescanned.into_iter().flatten()) {
        let (from, to) = (start * WORD, end * WORD);
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

    /// The encoding spelled out word by word, as `docs/format.md` describes it.
    fn reference_encoding(page_number: u64, new: &[u8], old: Option<&[u8]>) -> Vec<u8> {
        fn word(b: &[u8], i: usize) -> &[u8] {
            &b[i * WORD..(i + 1) * WORD]
        }
        let zero_word = [0u8; WORD];
        let old_word = |i: usize| old.map_or(&zero_word[..], |o| word(o, i));
        let mut runs = Vec::new();
        let mut i = 0;
        while i < WORDS {
            if word(new, i) == old_word(i) {
                i += 1;
                continue;
            }
            let zero = word(new, i) == zero_word;
            let start = i;
            while i < WORDS && word(new, i) != old_word(i) && (word(new, i) == zero_word) == zero {
                i += 1;
            }
            runs.push((start * WORD, i * WORD, zero));
        }
        let mut out = Vec::new();
        if runs.is_empty() {
            return out;
        }
        out.extend_from_slice(&page_number.to_le_bytes());
        let cost: usize = runs
            .iter()
            .map(|&(a, b, z)| RUN_HEADER_BYTES + if z { 0 } else { b - a })
            .sum();
        if ENTRY_HEADER_BYTES + cost >= ENTRY_HEADER_BYTES + PAGE_SIZE_BYTES {
            out.extend_from_slice(&FULL_PAGE_MARKER.to_le_bytes());
            out.extend_from_slice(new);
            return out;
        }
        out.extend_from_slice(&(runs.len() as u16).to_le_bytes());
        for (from, to, zero) in runs {
            let len = (to - from) as u16;
            out.extend_from_slice(&(from as u16).to_le_bytes());
            out.extend_from_slice(&(if zero { len | ZERO_RUN_FLAG } else { len }).to_le_bytes());
            if !zero {
                out.extend_from_slice(&new[from..to]);
            }
        }
        out
    }

    proptest! {
        /// Pages with few and many runs (past the ones kept while costing), zero stretches,
        /// and a fresh page diffed against zeros all encode exactly as the format says.
        #[test]
        fn encoding_matches_the_word_by_word_reference(
            spans in proptest::collection::vec(
                (0usize..PAGE_SIZE_BYTES, 1usize..300, prop_oneof![Just(0u8), any::<u8>()]),
                0..120,
            ),
            fresh in any::<bool>(),
        ) {
            let old: Vec<u8> = (0..PAGE_SIZE_BYTES).map(|i| (i % 251) as u8 | 1).collect();
            let mut new = if fresh { vec![0u8; PAGE_SIZE_BYTES] } else { old.clone() };
            for (at, len, byte) in spans {
                let end = (at + len).min(PAGE_SIZE_BYTES);
                new[at..end].fill(byte);
            }
            let base = (!fresh).then_some(&old[..]);
            let mut out = Vec::new();
            let changed = encode_page(&mut out, 42, &new, base);
            let expected = reference_encoding(42, &new, base);
            prop_assert_eq!(changed, !expected.is_empty());
            prop_assert_eq!(out, expected);
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
