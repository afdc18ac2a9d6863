//! Storage reports: where the pages of an environment go. Per named structure (tree,
//! fixed-size tree, multi-value tree, table) its entries, depth, pages by kind, fill factor
//! and overflow pages; free pages by free-space section; which owner holds each page below
//! the high-water mark; and, from [`crate::Environment::storage_report`], the files and
//! memory around the data file (journals, scratch, what is not yet synced, the oldest
//! reader).
//!
//! A report is made by the integrity check's walk ([`crate::check`]) with an observer that
//! records what each page holds: it reads every page in use and checks everything the
//! check does, so it costs as much as [`crate::Environment::check`] and fails where the
//! check fails. For numbers cheap enough to poll, use [`crate::Environment::stats`].
//!
//! ```
//! # let dir = tempfile::tempdir().expect("temporary directory");
//! let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
//! let mut wtx = env.begin_write()?;
//! wtx.open_tree("fruit")?.insert(b"apple", b"red")?;
//! wtx.commit()?;
//!
//! let report = env.storage_report()?;
//! let fruit = &report.structures[0];
//! assert_eq!((fruit.name.as_str(), fruit.entries, fruit.depth), ("fruit", 1, 1));
//! assert_eq!(fruit.pages.leaf, 1);
//! // Every page below the high-water mark has an owner: here the meta page, the root
//! // tree's leaf and the tree's leaf.
//! let counts = report.owners.counts();
//! assert_eq!(counts.iter().sum::<u64>(), report.next_page_number);
//! assert_eq!(counts[fruit.owner as usize], 1);
//! # Ok::<(), hrafn::Error>(())
//! ```

use crate::btree::{PageSource, TreeHeader, TreeKind, node};
use crate::check::{Observer, Owner, check_observed};
use crate::env::Environment;
use crate::error::{Error, Result};
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES, PAGES_PER_BITMAP};
use crate::page::{self, OFFSET_AUX, PageKind, corrupt, get_u64};
use crate::txn::ReadTxn;

/// Owner index of free pages in [`PageOwners`].
pub const OWNER_FREE: u32 = 0;
/// Owner index of the meta page.
pub const OWNER_META: u32 = 1;
/// Owner index of the free-space map (directory and bitmap pages).
pub const OWNER_FREE_SPACE_MAP: u32 = 2;
/// Owner index of the root tree (names → tree headers).
pub const OWNER_ROOT_TREE: u32 = 3;
/// Owner index of the first named structure; structure `i` of
/// [`StorageReport::structures`] is owner `OWNER_FIRST_STRUCTURE + i`.
pub const OWNER_FIRST_STRUCTURE: u32 = 4;

/// Owner names of the owners before the structures, in owner-index order. In parentheses,
/// so no tree name can be mistaken for one.
pub const SYSTEM_OWNER_NAMES: [&str; OWNER_FIRST_STRUCTURE as usize] =
    ["(free)", "(meta)", "(free-space map)", "(root tree)"];

/// Page owner not yet known while a report is made; never in a finished report.
const UNOWNED: u32 = u32::MAX;

/// Pages by page kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageCounts {
    /// B+tree branch pages.
    pub branch: u64,
    /// B+tree leaf pages.
    pub leaf: u64,
    /// Pages of overflow runs (large values and large table records), every page of a run.
    pub overflow: u64,
    /// Fixed-size tree branch pages.
    pub fixed_branch: u64,
    /// Fixed-size tree leaf pages.
    pub fixed_leaf: u64,
    /// Table record pages.
    pub records: u64,
}

impl PageCounts {
    /// All pages counted.
    pub fn total(&self) -> u64 {
        self.branch + self.leaf + self.overflow + self.fixed_branch + self.fixed_leaf + self.records
    }

    fn add(&mut self, kind: PageKind, count: u64, at: u64) -> Result<()> {
        let slot = match kind {
            PageKind::Branch => &mut self.branch,
            PageKind::Leaf => &mut self.leaf,
            PageKind::Overflow => &mut self.overflow,
            PageKind::FixedBranch => &mut self.fixed_branch,
            PageKind::FixedLeaf | PageKind::FixedLeafSlotted => &mut self.fixed_leaf,
            PageKind::Records => &mut self.records,
            PageKind::Free | PageKind::Meta | PageKind::Bitmap | PageKind::FreeDirectory => {
                return Err(corrupt(at, format!("a {kind:?} page inside a tree")));
            }
        };
        *slot += count;
        Ok(())
    }
}

/// One named structure: a tree of any kind or a table, with everything nested in it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StructureReport {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: TreeKind,
    /// Its index in [`PageOwners::names`].
    pub owner: u32,
    /// Entries (a table: records; a multi-value tree: keys), as its header counts them.
    pub entries: u64,
    /// Levels of its tree, root to leaves (1: one leaf). A table: of the deepest of its own
    /// trees (the primary key, local indexes, the record page list). Trees nested under
    /// keys are not counted.
    pub depth: u64,
    /// Trees nested in it in pages of their own (a table: its own trees; a multi-value
    /// tree: sets too large to embed).
    pub nested_trees: u64,
    /// Fixed-size trees embedded whole in an entry of it.
    pub embedded_trees: u64,
    /// Its pages, nested trees' included.
    pub pages: PageCounts,
    /// Bytes its pages hold: page headers and live entries (B+tree slots and entries,
    /// fixed-size entries, record slots and the record page's start bitmap, the header
    /// and value of an overflow run).
    pub used_bytes: u64,
}

impl StructureReport {
    /// Bytes of its pages.
    pub fn page_bytes(&self) -> u64 {
        self.pages.total() * PAGE_SIZE_BYTES as u64
    }

    /// [`StructureReport::used_bytes`] over [`StructureReport::page_bytes`], 0 to 1 (0 for
    /// a structure without pages).
    pub fn fill_factor(&self) -> f64 {
        match self.page_bytes() {
            0 => 0.0,
            bytes => self.used_bytes as f64 / bytes as f64,
        }
    }

    /// Pages of its overflow runs.
    pub fn overflow_pages(&self) -> u64 {
        self.pages.overflow
    }
}

/// Pages that belong to no structure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SystemPages {
    /// The meta page (1).
    pub meta: u64,
    /// Free-space directory and bitmap pages.
    pub free_space_map: u64,
    /// Pages of the root tree (names → tree headers).
    pub root_tree: PageCounts,
}

impl SystemPages {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.meta + self.free_space_map + self.root_tree.total()
    }
}

/// Free pages of one free-space section (a section of the free-space map, `docs/format.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SectionFree {
    /// The section's number.
    pub section: u64,
    /// Its first page.
    pub first_page: u64,
    /// Its pages below the high-water mark.
    pub pages: u64,
    /// Those that are free.
    pub free_pages: u64,
}

/// Which owner holds each page below the high-water mark.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PageOwners {
    /// Owner names by owner index: [`SYSTEM_OWNER_NAMES`], then each structure's name.
    pub names: Vec<String>,
    /// The owner index of every page, by page number.
    pub pages: Vec<u32>,
}

impl PageOwners {
    /// Pages per owner, by owner index.
    pub fn counts(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.names.len()];
        for &owner in &self.pages {
            if let Some(count) = counts.get_mut(owner as usize) {
                *count += 1;
            }
        }
        counts
    }

    /// The owner index of `page_number`; `None` at or above the high-water mark.
    pub fn owner_of(&self, page_number: u64) -> Option<u32> {
        usize::try_from(page_number)
            .ok()
            .and_then(|p| self.pages.get(p).copied())
    }
}

/// Facts about the files and memory around the data file, from
/// [`crate::Environment::stats`] and the environment's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvironmentReport {
    /// Allocated size of the data file (it grows ahead of the high-water mark).
    pub data_file_size_bytes: u64,
    /// Journal files on disk (retired ones kept for reuse included).
    pub journal_files: u64,
    /// Their bytes.
    pub journal_bytes: u64,
    /// Spare journal files made ahead of rotation.
    pub spare_journal_files: u64,
    /// Their bytes.
    pub spare_journal_bytes: u64,
    /// Last committed transaction.
    pub txn_id: u64,
    /// Last transaction durable in the data file.
    pub synced_txn_id: u64,
    /// Committed page bytes not yet written to the data file (waiting in scratch).
    pub unflushed_bytes: u64,
    /// Committed page bytes the data file does not hold durably yet: the unflushed ones
    /// and those written since the last sync (this process's flusher's count). What
    /// the journal alone keeps until the next sync.
    pub unsynced_bytes: u64,
    /// Scratch bytes this process holds (page copies), in memory and in scratch files.
    pub scratch_used_bytes: u64,
    /// Of those, bytes in memory.
    pub scratch_memory_bytes: u64,
    /// Scratch files this process has on disk.
    pub scratch_files: u64,
    /// Scratch bytes kept only for open readers (older page versions).
    pub scratch_pinned_bytes: u64,
    /// Read transactions open in this process (the report's own not counted).
    pub readers_active: usize,
    /// How long the oldest of them has been open.
    pub oldest_reader_age_ms: Option<u64>,
    /// The snapshot the oldest of them reads.
    pub oldest_reader_txn_id: Option<u64>,
    /// The oldest snapshot a read-only process holds (known to the writer only).
    pub oldest_process_reader_txn_id: Option<u64>,
}

/// What a storage report found (see the [module documentation](self)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StorageReport {
    /// The snapshot's transaction (0 from [`storage_report`] over bare pages).
    pub txn_id: u64,
    /// Bytes of a page.
    pub page_size_bytes: u64,
    /// The high-water mark: pages `0..next_page_number` are in use or free.
    pub next_page_number: u64,
    /// Each named structure, in name order.
    pub structures: Vec<StructureReport>,
    /// Pages of no structure.
    pub system: SystemPages,
    /// Free pages below the high-water mark.
    pub free_pages: u64,
    /// Free pages by section.
    pub sections: Vec<SectionFree>,
    /// The owner of every page.
    pub owners: PageOwners,
    /// Environment-level facts (from [`crate::Environment::storage_report`] only).
    pub environment: Option<EnvironmentReport>,
}

/// Makes the storage report of everything reachable from the meta page of `src`.
///
/// # Errors
/// As [`crate::check::check`]: [`Error::Corruption`] for the first problem found.
pub fn storage_report<'a, S: PageSource<'a>>(src: S) -> Result<StorageReport> {
    let mut recorder = Recorder::default();
    let checked = check_observed(src, &mut recorder)?;
    recorder.finish(checked.next_page_number, checked.free_pages)
}

impl ReadTxn<'_> {
    /// The storage report of this snapshot (see [`crate::report`]). It reads every page
    /// in use and checks it as [`ReadTxn::check`] does, so it costs a full integrity
    /// check; [`crate::Environment::stats`] stays cheap enough to poll.
    ///
    /// # Errors
    /// [`Error::Corruption`] describing the first problem found.
    pub fn storage_report(&self) -> Result<StorageReport> {
        let mut report = storage_report(self.state())?;
        report.txn_id = self.txn_id();
        Ok(report)
    }
}

impl Environment {
    /// The storage report of the latest committed state with the environment-level facts
    /// ([`StorageReport::environment`]): journal files, scratch, unsynced bytes, the
    /// oldest reader. It walks every page in use (see [`ReadTxn::storage_report`]).
    ///
    /// # Errors
    /// [`Error::Corruption`]; I/O errors listing or sizing the journal files.
    pub fn storage_report(&self) -> Result<StorageReport> {
        // The counters first: the report's own read transaction is not a reader of note.
        let stats = self.stats();
        let inner = &self.inner;
        let bytes_since_sync = inner.flush_book.lock().bytes_since_sync;
        let oldest_process_reader_txn_id = match inner.process_readers() {
            Some(readers) => readers
                .oldest()
                .map_err(|e| Error::io("reading the reader-process table", e))?,
            None => None,
        };
        let unflushed_bytes = stats.ptt_page_count * PAGE_SIZE_BYTES as u64;
        let (journal_files, journal_bytes, spare_journal_files, spare_journal_bytes) =
            journal_files(&*inner.storage)?;
        let environment = EnvironmentReport {
            data_file_size_bytes: stats.data_file_size_bytes,
            journal_files,
            journal_bytes,
            spare_journal_files,
            spare_journal_bytes,
            txn_id: stats.txn_id,
            synced_txn_id: stats.synced_txn_id,
            unflushed_bytes,
            unsynced_bytes: unflushed_bytes + bytes_since_sync,
            scratch_used_bytes: stats.scratch_used_bytes,
            scratch_memory_bytes: stats.scratch_memory_bytes,
            scratch_files: stats.scratch_files,
            scratch_pinned_bytes: stats.scratch_pinned_bytes,
            readers_active: stats.readers_active,
            oldest_reader_age_ms: stats.oldest_reader_age_ms,
            oldest_reader_txn_id: stats.oldest_reader_txn_id,
            oldest_process_reader_txn_id,
        };
        let mut report = self.begin_read()?.storage_report()?;
        report.environment = Some(environment);
        Ok(report)
    }
}

/// Journal files and bytes, spare files and bytes, in the journal directory. A file the
/// writer retires while it is listed is skipped.
fn journal_files(storage: &dyn crate::storage::Storage) -> Result<(u64, u64, u64, u64)> {
    use crate::storage::FileKind;
    let io = |what: &str| {
        let what = what.to_owned();
        move |e| Error::io(what, e)
    };
    let mut totals = (0, 0, 0, 0);
    for name in storage.list("journal").map_err(io("listing journals"))? {
        let spare = name.ends_with(".spare");
        if !spare && !name.ends_with(".journal") {
            continue;
        }
        let path = format!("journal/{name}");
        let len = match storage.open(&path, FileKind::JournalBuffered, false) {
            Ok(file) => file.len().map_err(io(&format!("sizing {path}")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(format!("opening {path}"), e)),
        };
        if spare {
            totals.2 += 1;
            totals.3 += len;
        } else {
            totals.0 += 1;
            totals.1 += len;
        }
    }
    Ok(totals)
}

/// The observer that makes a report.
#[derive(Default)]
struct Recorder {
    structures: Vec<StructureReport>,
    system: SystemPages,
    /// Owner of every page met so far ([`UNOWNED`] for pages not met yet).
    owners: Vec<u32>,
}

impl Recorder {
    fn owner_index(owner: Owner) -> u32 {
        match owner {
            Owner::Meta => OWNER_META,
            Owner::FreeSpaceMap => OWNER_FREE_SPACE_MAP,
            Owner::RootTree => OWNER_ROOT_TREE,
            Owner::Named(i) => {
                OWNER_FIRST_STRUCTURE.saturating_add(u32::try_from(i).unwrap_or(u32::MAX))
            }
        }
    }

    /// Gives pages `first..first + count` to `owner`; a page given twice is an error.
    fn own(&mut self, first: u64, count: u64, owner: u32) -> Result<()> {
        if owner == UNOWNED {
            return Err(Error::LimitExceeded {
                what: "more named trees than a storage report can number".into(),
            });
        }
        for page_number in first..first.saturating_add(count) {
            let at = usize::try_from(page_number)
                .map_err(|_| corrupt(page_number, "page number beyond this machine's memory"))?;
            if at >= self.owners.len() {
                // Grown as pages are met, as the check's own map is.
                self.owners.resize(at + 1, UNOWNED);
            }
            if self.owners[at] != UNOWNED {
                return Err(corrupt(page_number, "page has two owners"));
            }
            self.owners[at] = owner;
        }
        Ok(())
    }

    fn finish(self, next_page_number: u64, free_pages: u64) -> Result<StorageReport> {
        let Recorder {
            structures,
            system,
            mut owners,
        } = self;
        let pages = usize::try_from(next_page_number)
            .map_err(|_| corrupt(0, "high-water mark beyond this machine's memory"))?;
        owners.resize(pages, UNOWNED);
        if let Some(page_number) = owners.iter().position(|&o| o == UNOWNED) {
            return Err(corrupt(page_number as u64, "page with no owner"));
        }
        let mut sections: Vec<SectionFree> = Vec::new();
        for (page_number, &owner) in owners.iter().enumerate() {
            let page_number = page_number as u64;
            let section = page_number / PAGES_PER_BITMAP;
            if sections.last().is_none_or(|s| s.section != section) {
                sections.push(SectionFree {
                    section,
                    first_page: section * PAGES_PER_BITMAP,
                    pages: 0,
                    free_pages: 0,
                });
            }
            if let Some(s) = sections.last_mut() {
                s.pages += 1;
                s.free_pages += u64::from(owner == OWNER_FREE);
            }
        }
        let mut names: Vec<String> = SYSTEM_OWNER_NAMES.iter().map(|&n| n.to_owned()).collect();
        names.extend(structures.iter().map(|s| s.name.clone()));
        Ok(StorageReport {
            txn_id: 0,
            page_size_bytes: PAGE_SIZE_BYTES as u64,
            next_page_number,
            structures,
            system,
            free_pages,
            sections,
            owners: PageOwners {
                names,
                pages: owners,
            },
            environment: None,
        })
    }
}

/// Bytes a page in use holds, read from its header (and, for a B+tree node, its slots).
fn used_bytes(kind: PageKind, page: &[u8], page_number: u64) -> Result<u64> {
    const PAGE: u64 = PAGE_SIZE_BYTES as u64;
    let header = PAGE_HEADER_SIZE_BYTES as u64;
    let count = u64::from(page::get_u16(page, page::OFFSET_ENTRY_COUNT));
    Ok(match kind {
        PageKind::Leaf | PageKind::Branch => {
            header + node::used_bytes(page, kind == PageKind::Leaf, page_number)? as u64
        }
        PageKind::Overflow => header + get_u64(page, OFFSET_AUX),
        // The value size as the page says, bounded: the walk counts a page before the
        // tree's check of it, so a damaged one must not overflow here.
        PageKind::FixedLeaf => header + count * (8 + get_u64(page, OFFSET_AUX).min(PAGE)),
        PageKind::FixedLeafSlotted => {
            header + count * (8 + 2 + get_u64(page, OFFSET_AUX).min(PAGE))
        }
        PageKind::FixedBranch => header + 8 + count * 16,
        PageKind::Records => {
            crate::table::RECORDS_OFFSET as u64 + crate::table::write::live_bytes(page) as u64
        }
        PageKind::Free | PageKind::Meta | PageKind::Bitmap | PageKind::FreeDirectory => {
            PAGE_SIZE_BYTES as u64
        }
    })
}

impl Observer for Recorder {
    fn pages(&mut self, owner: Owner, first: u64, count: u64, page: &[u8]) -> Result<()> {
        self.own(first, count, Self::owner_index(owner))?;
        let kind = page::kind(page, first)?;
        match owner {
            Owner::Meta => self.system.meta += count,
            Owner::FreeSpaceMap => self.system.free_space_map += count,
            Owner::RootTree => self.system.root_tree.add(kind, count, first)?,
            Owner::Named(i) => {
                let used = used_bytes(kind, page, first)?;
                let structure = self
                    .structures
                    .get_mut(i)
                    .ok_or_else(|| corrupt(first, "page of a tree not yet named"))?;
                structure.pages.add(kind, count, first)?;
                structure.used_bytes += used;
            }
        }
        Ok(())
    }

    fn free(&mut self, page_number: u64) -> Result<()> {
        self.own(page_number, 1, OWNER_FREE)
    }

    fn tree(&mut self, owner: Owner, nesting: usize, levels: usize) {
        if let Owner::Named(i) = owner
            && let Some(structure) = self.structures.get_mut(i)
        {
            let counted = match structure.kind {
                TreeKind::Table => nesting <= 1,
                _ => nesting == 0,
            };
            if counted {
                structure.depth = structure.depth.max(levels as u64);
            }
        }
    }

    fn named(&mut self, index: usize, name: &[u8], header: &TreeHeader) {
        debug_assert_eq!(index, self.structures.len(), "named trees in order");
        self.structures.push(StructureReport {
            name: String::from_utf8_lossy(name).into_owned(),
            kind: header.kind,
            owner: Self::owner_index(Owner::Named(index)),
            entries: header.entry_count,
            depth: 0,
            nested_trees: 0,
            embedded_trees: 0,
            pages: PageCounts::default(),
            used_bytes: 0,
        });
    }

    fn named_done(&mut self, index: usize, nested: u64, embedded: u64) {
        if let Some(structure) = self.structures.get_mut(index) {
            structure.nested_trees = nested;
            structure.embedded_trees = embedded;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_given_twice_is_refused() {
        let mut recorder = Recorder::default();
        recorder.own(3, 2, OWNER_META).expect("pages 3 and 4");
        assert!(recorder.own(4, 1, OWNER_FREE).is_err(), "page 4 again");
        recorder.own(0, 3, OWNER_FREE).expect("pages 0 to 2");
        let report = recorder.finish(5, 3).expect("every page owned");
        assert_eq!(report.owners.pages, vec![0, 0, 0, 1, 1]);
        assert_eq!(report.owners.counts()[..2], [3, 2]);
    }

    #[test]
    fn a_page_without_owner_is_refused() {
        let mut recorder = Recorder::default();
        recorder.own(0, 1, OWNER_META).expect("page 0");
        recorder.own(2, 1, OWNER_FREE).expect("page 2");
        assert!(recorder.finish(3, 1).is_err(), "page 1 has no owner");
        let mut recorder = Recorder::default();
        recorder.own(0, 1, OWNER_META).expect("page 0");
        assert!(
            recorder.finish(2, 0).is_err(),
            "page 1 below the mark, never met"
        );
    }
}
