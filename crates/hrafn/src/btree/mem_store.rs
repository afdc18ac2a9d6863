//! An in-memory [`PageStore`] for the trees' unit tests.

use super::{PageSource, PageStore};
use crate::error::Result;
use crate::limits::PAGE_SIZE_BYTES;
use crate::page::{PageKind, corrupt, init};
use std::collections::HashMap;

/// Pages in a map, numbered upwards; freed runs are recorded.
#[derive(Default)]
pub(crate) struct MemStore {
    pub(crate) pages: HashMap<u64, Vec<u8>>,
    next: u64,
    pub(crate) freed: Vec<(u64, u64)>,
}

impl PageStore for MemStore {
    fn page(&self, page_number: u64) -> Result<&[u8]> {
        self.pages
            .get(&page_number)
            .map(|p| p.as_slice())
            .ok_or_else(|| corrupt(page_number, "missing"))
    }
    fn page_mut(&mut self, page_number: u64) -> Result<&mut [u8]> {
        self.pages
            .get_mut(&page_number)
            .map(|p| p.as_mut_slice())
            .ok_or_else(|| corrupt(page_number, "missing"))
    }
    fn allocate(&mut self, page_count: u64, kind: PageKind) -> Result<u64> {
        self.next += 1;
        let first = self.next;
        self.next += page_count;
        let mut run = vec![0u8; page_count as usize * PAGE_SIZE_BYTES];
        init(&mut run, first, kind);
        self.pages.insert(first, run);
        Ok(first)
    }
    fn free(&mut self, page_number: u64, page_count: u64) {
        self.freed.push((page_number, page_count));
        self.pages.remove(&page_number);
    }
}

impl<'a> PageSource<'a> for &'a MemStore {
    fn page(self, page_number: u64) -> Result<&'a [u8]> {
        PageStore::page(self, page_number)
    }
}
