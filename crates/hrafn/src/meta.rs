//! Page 0, the meta page: the root tree's root, the file's high-water mark and the
//! free-space map's sections and directory pages (see [`crate::freespace`]). It changes
//! through the ordinary page path (scratch, journal, flush), so recovery needs nothing
//! beyond replaying diffs.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 32 | page header (kind = meta) |
//! | 32 | 8 | magic `HRAFNMET` |
//! | 40 | 8 | root tree's root page (0 = no tree yet) |
//! | 48 | 8 | number of named trees |
//! | 56 | 8 | next page number (high-water mark) |
//! | 64 | 4 | section count `s` (sections with a bitmap page) |
//! | 68 | 4 | directory page count `d` = ⌈`s` / 510⌉ |
//! | 72 | 8·d | directory page numbers; directory `i` lists sections `i·510 ..` |

use crate::error::Result;
use crate::freespace::SECTIONS_PER_DIRECTORY;
use crate::limits::PAGE_SIZE_BYTES;
use crate::page::{PageKind, corrupt, get_u32, get_u64, put_u32, put_u64};

/// The meta page's number.
pub const META_PAGE_NUMBER: u64 = 0;
/// Meta magic.
pub const META_MAGIC: [u8; 8] = *b"HRAFNMET";

/// Field offsets (documented in `docs/format.md`).
pub mod offsets {
    pub const MAGIC: usize = 32;
    pub const ROOT_PAGE: usize = 40;
    pub const TREE_COUNT: usize = 48;
    pub const NEXT_PAGE_NUMBER: usize = 56;
    pub const SECTION_COUNT: usize = 64;
    pub const DIRECTORY_COUNT: usize = 68;
    pub const DIRECTORIES: usize = 72;
}

/// Most directory pages the meta page can list: 1,015 × 510 sections × 510 MiB ≈ 252 PiB.
pub const DIRECTORIES_MAX: usize = (PAGE_SIZE_BYTES - offsets::DIRECTORIES) / 8;

/// Most sections: the directories' capacity.
pub const SECTIONS_MAX: u64 = DIRECTORIES_MAX as u64 * SECTIONS_PER_DIRECTORY;

/// Decoded meta page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub root_page: u64,
    pub tree_count: u64,
    pub next_page_number: u64,
    /// Sections that have a bitmap page.
    pub section_count: u64,
    /// Directory pages, in section order.
    pub directories: Vec<u64>,
}

impl Meta {
    /// The meta of a new environment: only page 0 exists.
    pub fn empty() -> Meta {
        Meta {
            root_page: 0,
            tree_count: 0,
            next_page_number: 1,
            section_count: 0,
            directories: Vec::new(),
        }
    }

    /// Decodes page 0, validating what later code relies on.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] naming page 0.
    pub fn decode(page: &[u8]) -> Result<Meta> {
        use offsets as o;
        if crate::page::kind(page, META_PAGE_NUMBER)? != PageKind::Meta
            || page[o::MAGIC..o::MAGIC + 8] != META_MAGIC
        {
            return Err(corrupt(META_PAGE_NUMBER, "not a meta page"));
        }
        let section_count = u64::from(get_u32(page, o::SECTION_COUNT));
        let count = get_u32(page, o::DIRECTORY_COUNT) as usize;
        if count > DIRECTORIES_MAX || section_count.div_ceil(SECTIONS_PER_DIRECTORY) != count as u64
        {
            return Err(corrupt(
                META_PAGE_NUMBER,
                "section and directory counts disagree",
            ));
        }
        let meta = Meta {
            root_page: get_u64(page, o::ROOT_PAGE),
            tree_count: get_u64(page, o::TREE_COUNT),
            next_page_number: get_u64(page, o::NEXT_PAGE_NUMBER),
            section_count,
            directories: (0..count)
                .map(|i| get_u64(page, o::DIRECTORIES + 8 * i))
                .collect(),
        };
        let in_file = |p: u64| p > 0 && p < meta.next_page_number;
        if meta.next_page_number == 0
            || (meta.root_page != 0 && !in_file(meta.root_page))
            || !meta.directories.iter().all(|&p| in_file(p))
        {
            return Err(corrupt(
                META_PAGE_NUMBER,
                "meta page refers outside the file",
            ));
        }
        Ok(meta)
    }

    /// Writes the meta fields into page 0 (header already initialized).
    pub fn encode(&self, page: &mut [u8]) {
        use offsets as o;
        assert!(
            self.directories.len() <= DIRECTORIES_MAX
                && self.section_count.div_ceil(SECTIONS_PER_DIRECTORY)
                    == self.directories.len() as u64,
            "the free-space map is checked when grown"
        );
        page[crate::limits::PAGE_HEADER_SIZE_BYTES..].fill(0);
        page[o::MAGIC..o::MAGIC + 8].copy_from_slice(&META_MAGIC);
        put_u64(page, o::ROOT_PAGE, self.root_page);
        put_u64(page, o::TREE_COUNT, self.tree_count);
        put_u64(page, o::NEXT_PAGE_NUMBER, self.next_page_number);
        put_u32(page, o::SECTION_COUNT, self.section_count as u32);
        put_u32(page, o::DIRECTORY_COUNT, self.directories.len() as u32);
        for (i, p) in self.directories.iter().enumerate() {
            put_u64(page, o::DIRECTORIES + 8 * i, *p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::init;

    #[test]
    fn roundtrip_and_rejects_out_of_file_refs() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        init(&mut page, 0, PageKind::Meta);
        let meta = Meta {
            root_page: 3,
            tree_count: 2,
            next_page_number: 10,
            section_count: 511,
            directories: vec![4, 9],
        };
        meta.encode(&mut page);
        assert_eq!(Meta::decode(&page).expect("valid"), meta);
        put_u32(&mut page, offsets::SECTION_COUNT, 1021);
        assert!(Meta::decode(&page).is_err(), "three directories needed");
        let bad = Meta {
            root_page: 10,
            ..meta
        };
        bad.encode(&mut page);
        assert!(Meta::decode(&page).is_err());
    }
}
