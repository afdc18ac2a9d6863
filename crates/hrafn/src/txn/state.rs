//! The immutable state a transaction reads through: committed transaction id, page
//! translation table, and the data-file mapping. Commit and flush publish a new `State`
//! with one atomic pointer swap; a reader keeps the `Arc` it started with.

use crate::btree::PageSource;
use crate::error::Result;
use crate::limits::PAGE_SIZE_BYTES;
use crate::page::{corrupt, span_pages, verify};
use crate::scratch::Ptt;
use crate::storage::Mapping;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which data-file pages have passed their checksum since open (one bit each).
pub struct VerifiedBits {
    words: Box<[AtomicU64]>,
}

impl VerifiedBits {
    /// Bits for `page_count` pages, copying what `previous` already knows.
    pub fn new(page_count: u64, previous: Option<&VerifiedBits>) -> VerifiedBits {
        let words: Box<[AtomicU64]> = (0..page_count.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        if let Some(prev) = previous {
            for (w, p) in words.iter().zip(prev.words.iter()) {
                w.store(p.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        VerifiedBits { words }
    }

    #[inline]
    fn is_set(&self, page_number: u64) -> bool {
        self.words[(page_number / 64) as usize].load(Ordering::Relaxed) & (1 << (page_number % 64))
            != 0
    }

    #[inline]
    fn set(&self, page_number: u64) {
        self.words[(page_number / 64) as usize]
            .fetch_or(1 << (page_number % 64), Ordering::Relaxed);
    }
}

/// The data file as a state sees it.
#[derive(Clone)]
pub struct DataView {
    pub map: Arc<dyn Mapping>,
    /// Pages covered by the mapping.
    pub page_count: u64,
    pub verified: Arc<VerifiedBits>,
}

impl DataView {
    /// A view over `map` of `page_count` pages.
    pub fn new(
        map: Arc<dyn Mapping>,
        page_count: u64,
        previous: Option<&VerifiedBits>,
    ) -> DataView {
        assert!(
            map.bytes().len() as u64 >= page_count * PAGE_SIZE_BYTES as u64,
            "mapping covers the pages"
        );
        DataView {
            map,
            page_count,
            verified: Arc::new(VerifiedBits::new(page_count, previous)),
        }
    }
}

/// One published state.
pub struct State {
    /// Last committed transaction visible in this state.
    pub txn_id: u64,
    pub ptt: Ptt,
    pub data: DataView,
}

impl State {
    /// A page's bytes without checksum verification: the previous version of a page for
    /// diffing, exactly as replay will find it. `None` = beyond the file (all zeros).
    pub fn page_raw(&self, page_number: u64) -> Option<&[u8]> {
        if let Some(entry) = self.ptt.get(page_number) {
            return Some(&entry.bytes()[..PAGE_SIZE_BYTES]);
        }
        if page_number < self.data.page_count {
            let at = page_number as usize * PAGE_SIZE_BYTES;
            return Some(&self.data.map.bytes()[at..at + PAGE_SIZE_BYTES]);
        }
        None
    }
}

impl<'a> PageSource<'a> for &'a State {
    #[inline]
    fn page(self, page_number: u64) -> Result<&'a [u8]> {
        if let Some(entry) = self.ptt.get(page_number) {
            return Ok(entry.bytes());
        }
        if page_number >= self.data.page_count {
            return Err(corrupt(
                page_number,
                "reference to a page beyond the data file",
            ));
        }
        let bytes = &self.data.map.bytes()[page_number as usize * PAGE_SIZE_BYTES..];
        // Exactly the page, or its overflow run: a reader never holds bytes past it.
        let span = span_pages(bytes, page_number)?;
        let len = span
            .checked_mul(PAGE_SIZE_BYTES as u64)
            .filter(|&l| l <= bytes.len() as u64)
            .ok_or_else(|| corrupt(page_number, "page run past the end of the data file"))?;
        let run = &bytes[..len as usize];
        if !self.data.verified.is_set(page_number) {
            verify(run, page_number)?;
            self.data.verified.set(page_number);
        }
        Ok(run)
    }

    fn page_unverified(self, page_number: u64) -> Option<&'a [u8]> {
        self.page_raw(page_number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{PageKind, init, overflow_page_count, put_u64, seal};
    use crate::scratch::{PageBuf, PttEntry, ScratchUsage};

    struct Bytes(Vec<u8>);
    impl crate::storage::Mapping for Bytes {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
    }

    const P: usize = PAGE_SIZE_BYTES;

    /// Pages 0..2 are leaves, 2..5 one overflow run of three pages, 5 a leaf.
    fn pages() -> Vec<u8> {
        let mut file = vec![0u8; 6 * P];
        for n in [0u64, 1, 5] {
            let page = &mut file[n as usize * P..(n as usize + 1) * P];
            init(page, n, PageKind::Leaf);
            seal(page, n);
        }
        let value_len = 2 * P as u64;
        assert_eq!(overflow_page_count(value_len), 3);
        let run = &mut file[2 * P..5 * P];
        init(run, 2, PageKind::Overflow);
        put_u64(run, crate::page::OFFSET_AUX, value_len);
        seal(run, 2);
        file
    }

    #[test]
    fn a_page_from_the_data_file_ends_at_its_page_or_run() {
        let file = pages();
        let state = State {
            txn_id: 1,
            ptt: Ptt::new(),
            data: DataView::new(Arc::new(Bytes(file)), 6, None),
        };
        for _ in 0..2 {
            // Twice: verified pages take the same path to their length.
            assert_eq!((&state).page(0).map(<[u8]>::len).ok(), Some(P));
            assert_eq!((&state).page(1).map(<[u8]>::len).ok(), Some(P));
            assert_eq!((&state).page(2).map(<[u8]>::len).ok(), Some(3 * P));
            assert_eq!((&state).page(5).map(<[u8]>::len).ok(), Some(P));
        }
    }

    #[test]
    fn a_page_from_scratch_ends_at_its_page_or_run() {
        let usage = Arc::new(ScratchUsage::default());
        let file = pages();
        let run = Arc::new(PageBuf::copy_of(&file[2 * P..5 * P], &usage));
        let leaf = Arc::new(PageBuf::copy_of(&file[..P], &usage));
        let mut ptt = Ptt::new();
        for (number, buf, index_in_buf) in [(0, &leaf, 0), (2, &run, 0), (3, &run, 1)] {
            ptt.insert(
                number,
                PttEntry {
                    txn_id: 1,
                    first_unflushed_txn_id: 1,
                    buf: Arc::clone(buf),
                    index_in_buf,
                },
            );
        }
        let state = State {
            txn_id: 1,
            ptt,
            data: DataView::new(Arc::new(Bytes(file)), 6, None),
        };
        assert_eq!((&state).page(0).map(<[u8]>::len).ok(), Some(P));
        assert_eq!((&state).page(2).map(<[u8]>::len).ok(), Some(3 * P));
        assert_eq!((&state).page(3).map(<[u8]>::len).ok(), Some(P));
    }
}
