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

    /// Forgets that a page was verified (after the flusher rewrote it).
    pub fn clear(&self, page_number: u64) {
        if let Some(w) = self.words.get((page_number / 64) as usize) {
            w.fetch_and(!(1 << (page_number % 64)), Ordering::Relaxed);
        }
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
        if let Some(entry) = self.ptt.get(&page_number) {
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
        if !self.ptt.is_empty()
            && let Some(entry) = self.ptt.get(&page_number)
        {
            return Ok(entry.bytes());
        }
        if page_number >= self.data.page_count {
            return Err(corrupt(
                page_number,
                "reference to a page beyond the data file",
            ));
        }
        let bytes = &self.data.map.bytes()[page_number as usize * PAGE_SIZE_BYTES..];
        if !self.data.verified.is_set(page_number) {
            let span = span_pages(bytes, page_number)?;
            let len = span
                .checked_mul(PAGE_SIZE_BYTES as u64)
                .filter(|&l| l <= bytes.len() as u64)
                .ok_or_else(|| corrupt(page_number, "page run past the end of the data file"))?;
            verify(&bytes[..len as usize], page_number)?;
            self.data.verified.set(page_number);
        }
        Ok(bytes)
    }
}
