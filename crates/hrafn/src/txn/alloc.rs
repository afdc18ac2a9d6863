//! Page allocation for the write transaction: free-space bitmaps first, then the end of
//! the file.
//!
//! Reusing a page freed by an earlier transaction is safe at once: readers older than this
//! transaction still find the page's old version (in their PTT or in the data file, which
//! the flusher will not overwrite while they live).

use super::write::WriteTxn;
use crate::btree::PageStore;
use crate::error::{Error, Result};
use crate::freespace::{find_run, is_free, locate, set_range};
use crate::limits::{PAGE_SIZE_BYTES, PAGES_PER_BITMAP};
use crate::meta::BITMAPS_MAX;
use crate::page::{PageKind, corrupt, init};
use crate::scratch::PageBuf;

impl WriteTxn<'_> {
    /// Finds `count` contiguous free pages, or takes them from the end of the file.
    pub(crate) fn allocate_run(&mut self, count: u64) -> Result<u64> {
        if self.free_pages >= count {
            let mut i = self.free_hint;
            while i < self.meta.bitmaps.len() {
                let bitmap = self.meta.bitmaps[i];
                let covered_start = i as u64 * PAGES_PER_BITMAP;
                let limit_bit = self.meta.next_page_number.saturating_sub(covered_start) as usize;
                let found = find_run(PageStore::page(self, bitmap)?, count as usize, limit_bit);
                if let Some(bit) = found {
                    set_range(self.page_mut(bitmap)?, bit, count as usize, false);
                    self.free_pages -= count;
                    return Ok(covered_start + bit as u64);
                }
                if count == 1 && i == self.free_hint {
                    self.free_hint = i + 1; // no free page at all in this bitmap
                }
                i += 1;
            }
        }
        let first = self.meta.next_page_number;
        let end = first + count;
        if end > BITMAPS_MAX as u64 * PAGES_PER_BITMAP {
            return Err(Error::LimitExceeded {
                what: "data file pages (free-space map is full)".into(),
            });
        }
        self.reserve_data_pages(end)?;
        self.meta.next_page_number = end;
        Ok(first)
    }

    /// Grows the data file now, if needed, so that pages below `end_page` have a place in
    /// it. A commit must not be acknowledged for pages the disk has no room for: the
    /// flusher could not write them, the journal would go on filling the disk, and
    /// reopening would need more free space than the pages themselves. Running out of
    /// space here fails only this transaction, with [`Error::NoSpace`].
    fn reserve_data_pages(&self, end_page: u64) -> Result<()> {
        crate::flush::grow_data_file(self.env, end_page * PAGE_SIZE_BYTES as u64).map(|_| ())
    }

    /// Marks `count` pages from `first` free (at commit).
    pub(crate) fn release_run(&mut self, first: u64, count: u64) -> Result<()> {
        for page_number in first..first + count {
            if page_number == 0 || page_number >= self.meta.next_page_number {
                return Err(corrupt(page_number, "freeing a page outside the file"));
            }
            let (index, bit) = locate(page_number);
            while self.meta.bitmaps.len() <= index {
                if self.meta.bitmaps.len() == BITMAPS_MAX {
                    return Err(Error::LimitExceeded {
                        what: "free-space bitmaps".into(),
                    });
                }
                // Bitmap pages come from the end of the file, never from the bitmaps
                // themselves, so growing the map cannot recurse.
                let bitmap = self.meta.next_page_number;
                self.reserve_data_pages(bitmap + 1)?;
                self.meta.next_page_number += 1;
                let mut buf = PageBuf::zeroed(1, &self.env.usage);
                init(buf.bytes_mut(), bitmap, PageKind::Bitmap);
                self.dirty.insert(bitmap, buf);
                self.meta.bitmaps.push(bitmap);
            }
            let bitmap = self.meta.bitmaps[index];
            let page = self.page_mut(bitmap)?;
            if is_free(page, bit) {
                return Err(corrupt(page_number, "page freed twice"));
            }
            set_range(page, bit, 1, true);
            self.free_hint = self.free_hint.min(index);
        }
        self.free_pages += count;
        debug_assert!(self.meta.next_page_number as usize * PAGE_SIZE_BYTES > 0);
        Ok(())
    }
}
