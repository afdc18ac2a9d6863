//! Page allocation for the write transaction: free pages of the free-space map first
//! (`freespace.rs`), near the pages the transaction last touched, then the end of the file.
//!
//! Reusing a page freed by an earlier transaction is safe at once: readers older than this
//! transaction still find the page's old version (in their PTT or in the data file, which
//! the flusher will not overwrite while they live).

use super::write::WriteTxn;
use crate::btree::PageStore;
use crate::error::{Error, Result};
use crate::freespace::{
    SECTIONS_PER_DIRECTORY, SectionEntry, find_run_near, is_free, locate, locate_section,
    read_entry, set_range, write_entry,
};
use crate::limits::{PAGE_SIZE_BYTES, PAGES_PER_BITMAP};
use crate::meta::SECTIONS_MAX;
use crate::page::{PageKind, corrupt, init};
use crate::scratch::PageBuf;

impl WriteTxn<'_> {
    /// Finds `count` contiguous free pages, or takes them from the end of the file.
    pub(crate) fn allocate_run(&mut self, count: u64) -> Result<u64> {
        if self.free_pages >= count
            && count <= PAGES_PER_BITMAP
            && let Some(first) = self.allocate_free_run(count)?
        {
            self.near_page = first + count - 1;
            return Ok(first);
        }
        let first = self.meta.next_page_number;
        let end = first + count;
        if end > SECTIONS_MAX * PAGES_PER_BITMAP {
            return Err(Error::LimitExceeded {
                what: "data file pages (free-space map is full)".into(),
            });
        }
        self.reserve_data_pages(end)?;
        self.meta.next_page_number = end;
        self.near_page = end - 1;
        Ok(first)
    }

    /// The section entry `section` as the directory says, with the directory page's number.
    fn section_entry(&self, section: u64) -> Result<(u64, usize, SectionEntry)> {
        debug_assert!(section < self.meta.section_count);
        let (directory, entry) = locate_section(section);
        let directory_page = *self
            .meta
            .directories
            .get(directory)
            .ok_or_else(|| corrupt(0, "section beyond the directories"))?;
        let page = PageStore::page(self, directory_page)?;
        let found = read_entry(page, directory_page, entry, self.meta.next_page_number)?;
        Ok((directory_page, entry, found))
    }

    /// Takes a run from the free-space map: sections are visited from the one holding the
    /// page last touched (so a tree's new pages land near its others), and a section's
    /// bitmap is read only when its free count can hold the run.
    fn allocate_free_run(&mut self, count: u64) -> Result<Option<u64>> {
        let sections = self.meta.section_count;
        if sections == 0 {
            return Ok(None);
        }
        let (mut near_section, mut near_bit) = locate(self.near_page);
        if near_section >= sections {
            (near_section, near_bit) = (0, 0);
        }
        for i in 0..sections {
            let section = (near_section + i) % sections;
            let (directory_page, entry_index, entry) = self.section_entry(section)?;
            if u64::from(entry.free_pages) < count {
                continue;
            }
            let covered_start = section * PAGES_PER_BITMAP;
            let limit_bit = self.meta.next_page_number.saturating_sub(covered_start) as usize;
            let from_bit = if i == 0 { near_bit } else { 0 };
            #[cfg(test)]
            {
                self.bitmaps_searched += 1;
            }
            let bitmap = PageStore::page(self, entry.bitmap_page)?;
            check_bitmap(bitmap, entry.bitmap_page)?;
            let Some(bit) = find_run_near(bitmap, count as usize, from_bit, limit_bit) else {
                continue; // enough free pages, but not in one run
            };
            let first = covered_start + bit as u64;
            // A bit that calls a page in use free (a damaged map whose checksum holds)
            // would hand out the meta page, the map's own pages, or a page this
            // transaction already wrote.
            if first == crate::meta::META_PAGE_NUMBER
                || (first..first + count).any(|p| {
                    p == entry.bitmap_page || p == directory_page || self.dirty.contains_key(&p)
                })
            {
                return Err(corrupt(
                    entry.bitmap_page,
                    "the free-space map calls a page in use free",
                ));
            }
            set_range(
                self.page_mut(entry.bitmap_page)?,
                bit,
                count as usize,
                false,
            );
            let entry = SectionEntry {
                free_pages: entry.free_pages - count as u32,
                ..entry
            };
            write_entry(self.page_mut(directory_page)?, entry_index, entry);
            self.free_pages -= count;
            return Ok(Some(first));
        }
        Ok(None)
    }

    /// Grows the data file now, if needed, so that pages below `end_page` have a place in
    /// it. A commit must not be acknowledged for pages the disk has no room for: the
    /// flusher could not write them, the journal would go on filling the disk, and
    /// reopening would need more free space than the pages themselves. Running out of
    /// space here fails only this transaction, with [`Error::NoSpace`].
    fn reserve_data_pages(&self, end_page: u64) -> Result<()> {
        crate::flush::grow_data_file(self.env, end_page * PAGE_SIZE_BYTES as u64).map(|_| ())
    }

    /// A new page of `kind` at the end of the file (for the free-space map itself, which
    /// never takes pages from the map, so growing it cannot recurse).
    fn append_page(&mut self, kind: PageKind) -> Result<u64> {
        let page_number = self.meta.next_page_number;
        self.reserve_data_pages(page_number + 1)?;
        self.meta.next_page_number += 1;
        let mut buf = PageBuf::zeroed(1, &self.env.usage);
        init(buf.bytes_mut(), page_number, kind);
        self.dirty.insert(page_number, buf);
        Ok(page_number)
    }

    /// Gives the map sections up to `section_count`, each with an empty bitmap (every page
    /// in use), and directory pages as they are needed.
    fn ensure_sections(&mut self, section_count: u64) -> Result<()> {
        while self.meta.section_count < section_count {
            let section = self.meta.section_count;
            if section >= SECTIONS_MAX {
                return Err(Error::LimitExceeded {
                    what: "free-space sections".into(),
                });
            }
            let (directory, entry_index) = locate_section(section);
            if directory == self.meta.directories.len() {
                let page = self.append_page(PageKind::FreeDirectory)?;
                self.meta.directories.push(page);
            }
            let bitmap_page = self.append_page(PageKind::Bitmap)?;
            let directory_page = self.meta.directories[directory];
            let entry = SectionEntry {
                bitmap_page,
                free_pages: 0,
            };
            write_entry(self.page_mut(directory_page)?, entry_index, entry);
            self.meta.section_count += 1;
        }
        debug_assert_eq!(
            self.meta.section_count.div_ceil(SECTIONS_PER_DIRECTORY),
            self.meta.directories.len() as u64
        );
        Ok(())
    }

    /// Marks `count` pages from `first` free (at commit), section by section.
    pub(crate) fn release_run(&mut self, first: u64, count: u64) -> Result<()> {
        let end = first
            .checked_add(count)
            .filter(|&end| first > 0 && end <= self.meta.next_page_number)
            .ok_or_else(|| corrupt(first, "freeing pages outside the file"))?;
        let mut page_number = first;
        while page_number < end {
            let (section, bit) = locate(page_number);
            let in_section = (end - page_number).min(PAGES_PER_BITMAP - bit as u64);
            self.ensure_sections(section + 1)?;
            let (directory_page, entry_index, entry) = self.section_entry(section)?;
            let bitmap = self.page_mut(entry.bitmap_page)?;
            check_bitmap(bitmap, entry.bitmap_page)?;
            if let Some(b) = (bit..bit + in_section as usize).find(|&b| is_free(bitmap, b)) {
                return Err(corrupt(
                    section * PAGES_PER_BITMAP + b as u64,
                    "page freed twice",
                ));
            }
            set_range(bitmap, bit, in_section as usize, true);
            let free_pages = u64::from(entry.free_pages) + in_section;
            if free_pages > PAGES_PER_BITMAP {
                return Err(corrupt(
                    directory_page,
                    "section free count beyond its size",
                ));
            }
            let entry = SectionEntry {
                free_pages: free_pages as u32,
                ..entry
            };
            write_entry(self.page_mut(directory_page)?, entry_index, entry);
            page_number += in_section;
        }
        self.free_pages += count;
        Ok(())
    }
}

/// A page a directory names as a section's bitmap must be one: a damaged directory (its
/// checksum holding) would have other pages' bytes read and written as bits.
fn check_bitmap(bytes: &[u8], page_number: u64) -> Result<()> {
    if crate::page::kind(bytes, page_number)? != PageKind::Bitmap {
        return Err(corrupt(page_number, "listed bitmap is not a bitmap page"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::freespace::SECTIONS_PER_DIRECTORY;
    use crate::limits::{PAGE_SIZE_BYTES, PAGES_PER_BITMAP};
    use crate::meta::SECTIONS_MAX;
    use crate::{Environment, Options};

    #[test]
    fn the_map_addresses_at_least_16_tib() {
        let addressable_bytes = SECTIONS_MAX * PAGES_PER_BITMAP * PAGE_SIZE_BYTES as u64;
        assert!(addressable_bytes >= 16 << 40, "{addressable_bytes} bytes");
    }

    /// Frees runs in two sections, then checks that an allocation takes pages from the
    /// section of the page it was near, and reads no bitmap whose section is too empty.
    #[test]
    fn allocation_stays_near_and_skips_sections_by_their_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let section_1_run = PAGES_PER_BITMAP + 1_000;
        {
            let mut wtx = env.begin_write().expect("write");
            // Past the first section; the pages stay zero, only the map tracks them.
            let end = wtx.meta.next_page_number;
            wtx.allocate_run(section_1_run + 100 - end).expect("append");
            wtx.freed.push((100, 50));
            wtx.freed.push((section_1_run, 50));
            wtx.commit().expect("commit");
        }
        let mut wtx = env.begin_write().expect("write");
        assert_eq!(wtx.meta.section_count, 2);
        assert_eq!(wtx.free_pages, 100);

        wtx.near_page = section_1_run;
        assert_eq!(wtx.allocate_run(10).expect("near section 1"), section_1_run);
        wtx.near_page = 99;
        assert_eq!(wtx.allocate_run(10).expect("near section 0"), 100);

        // Both sections now count 40 free pages: a 45-page run opens neither bitmap.
        wtx.bitmaps_searched = 0;
        let end = wtx.meta.next_page_number;
        assert_eq!(wtx.allocate_run(45).expect("append"), end);
        assert_eq!(wtx.bitmaps_searched, 0);

        // A 40-page run opens one bitmap, the first section looked at that can hold it.
        wtx.near_page = section_1_run;
        assert_eq!(wtx.allocate_run(40).expect("section 1"), section_1_run + 10);
        assert_eq!(wtx.bitmaps_searched, 1);
        assert_eq!(wtx.free_pages, 40);
    }

    /// The map grows past one directory page; the second one is listed in the meta page
    /// and survives a reopen and the integrity check.
    #[test]
    fn sections_spill_into_a_second_directory_page() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sections = SECTIONS_PER_DIRECTORY + 2;
        {
            let env = Environment::open(dir.path(), Options::default()).expect("open");
            let mut wtx = env.begin_write().expect("write");
            wtx.ensure_sections(sections).expect("sections");
            assert_eq!(wtx.meta.directories.len(), 2);
            wtx.commit().expect("commit");
        }
        let env = Environment::open(dir.path(), Options::default()).expect("reopen");
        env.check().expect("check");
        let wtx = env.begin_write().expect("write");
        assert_eq!(wtx.meta.section_count, sections);
        assert_eq!(wtx.meta.directories.len(), 2);
    }
}
