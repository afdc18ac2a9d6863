//! Whole-environment integrity check: page checksums, tree invariants (key order, separator
//! bounds, uniform depth, entry counts, overflow runs; the same for fixed-size trees, nested
//! trees and multi-value sets, embedded or not) and free-space accounting (every page below
//! the high-water mark is used exactly once or free, never both, never neither).
//!
//! The same walk feeds the storage report ([`crate::report`]) through an observer: every
//! page in use with its owner, every free page, every tree's depth.

use crate::btree::node::{self, ValueRef};
use crate::btree::{PageSource, TreeHeader, TreeKind, resolve_value};
use crate::error::{CorruptionSite, Error, Result};
use crate::fixed;
use crate::freespace::{count_free, is_free, locate, locate_section, read_entry};
use crate::meta::{META_PAGE_NUMBER, Meta};
use crate::page::{PageKind, corrupt, overflow_page_count};
use crate::table;

/// What [`crate::Environment::check`] found in a healthy environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Named trees.
    pub tree_count: u64,
    /// Entries over all named trees (a nested tree counts once in its parent).
    pub entry_count: u64,
    /// Trees nested under keys of other trees, in pages of their own (multi-value sets in
    /// their own tree included).
    pub nested_tree_count: u64,
    /// Fixed-size trees embedded in their parent's entry.
    pub embedded_tree_count: u64,
    /// Pages in use (meta, free-space map, nodes, overflow runs).
    pub used_pages: u64,
    /// Pages marked free.
    pub free_pages: u64,
    /// The high-water mark.
    pub next_page_number: u64,
}

/// Who a page in use belongs to, as the walk meets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The meta page.
    Meta,
    /// Free-space directory and bitmap pages.
    FreeSpaceMap,
    /// The root tree, which maps names to tree headers.
    RootTree,
    /// The named tree at this position in name order, with everything nested in it (for a
    /// table: its own trees, record pages and record overflow runs).
    Named(usize),
}

/// Sees what the walk meets besides checking it. Every method is told about a thing once,
/// as the walk meets it; an error ends the walk.
pub(crate) trait Observer {
    /// Pages `first..first + count` are in use by `owner`: one page, or an overflow run
    /// whose bytes `page` holds whole.
    ///
    /// # Errors
    /// Whatever the observer finds wrong, ending the walk.
    fn pages(&mut self, _owner: Owner, _first: u64, _count: u64, _page: &[u8]) -> Result<()> {
        Ok(())
    }
    /// `page_number` is free.
    ///
    /// # Errors
    /// As [`Observer::pages`].
    fn free(&mut self, _page_number: u64) -> Result<()> {
        Ok(())
    }
    /// A tree of `owner` was walked, `nesting` trees below its named tree: `levels` deep.
    fn tree(&mut self, _owner: Owner, _nesting: usize, _levels: usize) {}
    /// Named tree `index` is walked next.
    fn named(&mut self, _index: usize, _name: &[u8], _header: &TreeHeader) {}
    /// Named tree `index` was walked: the trees nested in it, in pages of their own and
    /// embedded.
    fn named_done(&mut self, _index: usize, _nested: u64, _embedded: u64) {}
}

/// The check alone.
struct Quiet;

impl Observer for Quiet {}

struct Walker<'o> {
    used: Vec<u64>,
    next_page_number: u64,
    report: CheckReport,
    owner: Owner,
    observer: &'o mut dyn Observer,
}

impl Walker<'_> {
    /// Marks `first..first + count` in use by the current owner; `page` is the first
    /// page's bytes (a run whole).
    fn mark(&mut self, first: u64, count: u64, page: &[u8]) -> Result<()> {
        for page_number in first..first.saturating_add(count) {
            if page_number >= self.next_page_number {
                return Err(corrupt(
                    page_number,
                    "page in use beyond the high-water mark",
                ));
            }
            let (word, bit) = ((page_number / 64) as usize, page_number % 64);
            if word >= self.used.len() {
                // Grown as pages are met (each was read first), not sized by the meta
                // page's high-water mark, which a damaged page may put at 2^62.
                self.used.resize(word + 1, 0);
            }
            if self.used[word] & (1 << bit) != 0 {
                return Err(corrupt(page_number, "page used twice"));
            }
            self.used[word] |= 1 << bit;
            self.report.used_pages += 1;
        }
        self.observer.pages(self.owner, first, count, page)
    }
}

/// Checks everything reachable from the meta page of `src`.
///
/// # Errors
/// [`Error::Corruption`] describing the first problem found.
pub fn check<'a, S: PageSource<'a>>(src: S) -> Result<CheckReport> {
    check_observed(src, &mut Quiet)
}

/// [`check`], calling `progress(pages_checked, pages_total)` every few thousand pages and
/// at the end; `pages_total` is the high-water mark (pages in use and free), so the count
/// reaches it only when nothing is free.
///
/// # Errors
/// As [`check`].
pub(crate) fn check_with_progress<'a, S: PageSource<'a>>(
    src: S,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CheckReport> {
    let total = Meta::decode(src.page(META_PAGE_NUMBER)?)?.next_page_number;
    let mut observer = Progress {
        checked: 0,
        total,
        progress,
    };
    let report = check_observed(src, &mut observer)?;
    (observer.progress)(total, total);
    Ok(report)
}

/// Counts pages for [`check_with_progress`].
struct Progress<'p> {
    checked: u64,
    total: u64,
    progress: &'p mut dyn FnMut(u64, u64),
}

impl Observer for Progress<'_> {
    fn pages(&mut self, _owner: Owner, _first: u64, count: u64, _page: &[u8]) -> Result<()> {
        const EVERY_PAGES: u64 = 4096;
        let before = self.checked / EVERY_PAGES;
        self.checked += count;
        if self.checked / EVERY_PAGES != before {
            (self.progress)(self.checked.min(self.total), self.total);
        }
        Ok(())
    }
}

/// [`check`], telling `observer` what the walk meets.
///
/// # Errors
/// [`Error::Corruption`] describing the first problem found; an error of `observer`.
pub(crate) fn check_observed<'a, S: PageSource<'a>>(
    src: S,
    observer: &mut dyn Observer,
) -> Result<CheckReport> {
    let meta_page = src.page(META_PAGE_NUMBER)?;
    let meta = Meta::decode(meta_page)?;
    let mut walker = Walker {
        used: Vec::new(),
        next_page_number: meta.next_page_number,
        report: CheckReport {
            next_page_number: meta.next_page_number,
            ..CheckReport::default()
        },
        owner: Owner::Meta,
        observer,
    };
    walker.mark(META_PAGE_NUMBER, 1, meta_page)?;
    walker.owner = Owner::FreeSpaceMap;
    for &directory in &meta.directories {
        let page = src.page(directory)?;
        if crate::page::kind(page, directory)? != PageKind::FreeDirectory {
            return Err(corrupt(
                directory,
                "listed free-space directory is not a directory page",
            ));
        }
        walker.mark(directory, 1, page)?;
    }
    let mut bitmaps = Vec::new();
    let mut directory_free_pages = 0u64;
    for section in 0..meta.section_count {
        let (directory, entry) = locate_section(section);
        let directory_page = meta.directories[directory];
        let entry = read_entry(
            src.page(directory_page)?,
            directory_page,
            entry,
            meta.next_page_number,
        )?;
        let bitmap = src.page(entry.bitmap_page)?;
        if crate::page::kind(bitmap, entry.bitmap_page)? != PageKind::Bitmap {
            return Err(corrupt(
                entry.bitmap_page,
                "listed bitmap is not a bitmap page",
            ));
        }
        if count_free(bitmap) != u64::from(entry.free_pages) {
            return Err(corrupt(
                directory_page,
                format!(
                    "section {section} counts {} free pages, its bitmap {}",
                    entry.free_pages,
                    count_free(bitmap)
                ),
            ));
        }
        walker.mark(entry.bitmap_page, 1, bitmap)?;
        directory_free_pages += u64::from(entry.free_pages);
        bitmaps.push(bitmap);
    }
    if meta.root_page != 0 {
        let root = TreeHeader::btree(meta.root_page, meta.tree_count);
        let mut trees = Vec::new();
        // Records indexed in each global index, summed over the tables that share it.
        let mut global_records: Vec<(String, table::IndexKind, u64)> = Vec::new();
        walker.owner = Owner::RootTree;
        walk_tree(src, &root, 0, &mut walker, &mut |k, v, _| {
            trees.push((k.to_vec(), TreeHeader::decode(v, meta.root_page)?));
            Ok(())
        })?;
        for (index, (name, header)) in trees.iter().enumerate() {
            walker.report.tree_count += 1;
            walker.report.entry_count += header.entry_count;
            walker.owner = Owner::Named(index);
            walker.observer.named(index, name, header);
            let (nested, embedded) = (
                walker.report.nested_tree_count,
                walker.report.embedded_tree_count,
            );
            let walked = if header.kind == TreeKind::Table {
                walk_table(src, header, &trees, &mut global_records, &mut walker)
            } else {
                walk_any(src, header, Role::Tree, 0, &mut walker)
            };
            walked.map_err(|e| match e {
                Error::Corruption { site, reason } => Error::Corruption {
                    site,
                    reason: format!("{reason} (tree {:?})", String::from_utf8_lossy(name)),
                },
                other => other,
            })?;
            walker.observer.named_done(
                index,
                walker.report.nested_tree_count - nested,
                walker.report.embedded_tree_count - embedded,
            );
        }
        for (name, kind, records) in global_records {
            let Some((_, tree)) = trees.iter().find(|(n, _)| n == name.as_bytes()) else {
                return Err(corrupt(
                    meta.root_page,
                    format!("global index {name:?} missing"),
                ));
            };
            let entries = index_entries(src, kind, tree)?;
            if entries != records {
                return Err(corrupt(
                    tree.root_page,
                    format!(
                        "global index {name:?} holds {entries} entries for the {records} \
                         records of its tables"
                    ),
                ));
            }
        }
    }
    // Free-space accounting.
    for page_number in 1..meta.next_page_number {
        let (section, bit) = locate(page_number);
        let free = bitmaps
            .get(section as usize)
            .is_some_and(|bitmap| is_free(bitmap, bit));
        let used = walker
            .used
            .get((page_number / 64) as usize)
            .is_some_and(|w| w & (1 << (page_number % 64)) != 0);
        match (free, used) {
            (true, true) => return Err(corrupt(page_number, "page both free and in use")),
            (false, false) => {
                return Err(corrupt(
                    page_number,
                    "page neither free nor in use (leaked)",
                ));
            }
            (true, false) => {
                walker.report.free_pages += 1;
                walker.observer.free(page_number)?;
            }
            (false, true) => {}
        }
    }
    if directory_free_pages != walker.report.free_pages {
        return Err(corrupt(
            META_PAGE_NUMBER,
            format!(
                "the free-space directory counts {directory_free_pages} free pages, {} lie \
                 below the high-water mark",
                walker.report.free_pages
            ),
        ));
    }
    Ok(walker.report)
}

/// What a leaf entry holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// A value (inline or in an overflow run).
    Value,
    /// A nested tree's header.
    Tree,
    /// An embedded fixed-size tree.
    Embedded,
}

/// Called for every leaf entry (key, value bytes, what they are) of a walked tree.
type Visit<'v> = dyn FnMut(&[u8], &[u8], Held) -> Result<()> + 'v;

/// What a walked tree is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A user's tree, named or nested: it may hold nested trees.
    Tree,
    /// The tree of one key's set in a multi-value tree: values are keys, entries empty.
    Set,
}

/// Checks a tree of any kind and every tree nested in it.
fn walk_any<'a, S: PageSource<'a>>(
    src: S,
    header: &TreeHeader,
    role: Role,
    nesting: usize,
    walker: &mut Walker<'_>,
) -> Result<()> {
    // A set's tree holds no nested trees (checked below), so it is not a level of its own:
    // a multi-value tree at the deepest level may have one.
    if role == Role::Tree && nesting > crate::btree::NESTING_DEPTH_MAX {
        return Err(corrupt(
            header.root_page,
            "trees nested deeper than allowed",
        ));
    }
    if nesting > 0 {
        walker.report.nested_tree_count += 1;
    }
    let mut nested = Vec::new();
    let root_page = header.root_page;
    match (header.kind, role) {
        (TreeKind::Fixed { value_size }, Role::Tree) => {
            return walk_fixed(src, header, usize::from(value_size), nesting, walker);
        }
        (TreeKind::BTree, Role::Tree) => {
            let mut embedded = 0;
            walk_tree(src, header, nesting, walker, &mut |_, v, held| {
                match held {
                    Held::Tree => nested.push((TreeHeader::decode(v, root_page)?, Role::Tree)),
                    Held::Embedded => {
                        fixed::Embedded::decode(v, root_page)?.validate_order(root_page)?;
                        embedded += 1;
                    }
                    Held::Value => {}
                }
                Ok(())
            })?;
            walker.report.embedded_tree_count += embedded;
        }
        (TreeKind::Multi, Role::Tree) => {
            walk_tree(src, header, nesting, walker, &mut |_, v, held| {
                if held == Held::Embedded {
                    return Err(corrupt(root_page, "an embedded tree in a multi-value tree"));
                }
                if held == Held::Tree {
                    let set = TreeHeader::decode(v, root_page)?;
                    if set.kind != TreeKind::BTree || set.entry_count == 0 {
                        return Err(corrupt(root_page, "a set's tree is not a non-empty B+tree"));
                    }
                    nested.push((set, Role::Set));
                } else if v.len() > crate::multi::EMBEDDED_SET_MAX_BYTES {
                    return Err(corrupt(root_page, "embedded set over its limit"));
                } else {
                    crate::multi::decode_set(v, root_page)?;
                }
                Ok(())
            })?;
        }
        (TreeKind::BTree, Role::Set) => {
            walk_tree(src, header, nesting, walker, &mut |_, v, held| {
                if held != Held::Value || !v.is_empty() {
                    return Err(corrupt(root_page, "a set's tree holds more than values"));
                }
                Ok(())
            })?;
        }
        (_, Role::Set) => return Err(corrupt(root_page, "a set's tree is not a B+tree")),
        (TreeKind::Table, Role::Tree) => {
            return Err(corrupt(root_page, "a table nested in a tree"));
        }
    }
    for (header, role) in nested {
        walk_any(src, &header, role, nesting + 1, walker)?;
    }
    Ok(())
}

/// A node to check: page, depth, inclusive lower and exclusive upper key bounds.
type Pending = (u64, usize, Option<Vec<u8>>, Option<Vec<u8>>);

/// Walks one tree depth-first, checking order and bounds, calling `visit` per leaf entry.
fn walk_tree<'a, S: PageSource<'a>>(
    src: S,
    tree: &TreeHeader,
    nesting: usize,
    walker: &mut Walker<'_>,
    visit: &mut Visit<'_>,
) -> Result<()> {
    // (page, depth, lower bound inclusive, upper bound exclusive)
    let mut stack: Vec<Pending> = vec![(tree.root_page, 0, None, None)];
    let mut leaf_depth = None;
    let mut entries = 0u64;
    while let Some((page_number, depth, low, high)) = stack.pop() {
        if depth > crate::btree::DEPTH_MAX {
            return Err(corrupt(page_number, "tree deeper than any valid tree"));
        }
        let page = src.page(page_number)?;
        walker.mark(page_number, 1, page)?;
        node::validate_header(page, page_number)?;
        let leaf = node::is_leaf(page, page_number)?;
        let n = node::count(page);
        let mut previous: Option<&[u8]> = None;
        for i in 0..n {
            let key = node::key(page, i, leaf, page_number)?;
            if previous.is_some_and(|p| p >= key) {
                return Err(corrupt(page_number, "keys out of order"));
            }
            if low.as_deref().is_some_and(|l| key < l) || high.as_deref().is_some_and(|h| key >= h)
            {
                return Err(corrupt(page_number, "key outside its parent's separators"));
            }
            previous = Some(key);
        }
        if leaf {
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err(corrupt(page_number, "leaves at different depths"));
            }
            for i in 0..n {
                let (key, value) = node::leaf_entry(page, i, page_number)?;
                // Resolved (so validated) before its pages are counted.
                let bytes = resolve_value(src, value)?;
                let held = match value {
                    ValueRef::Inline(_) | ValueRef::Overflow { .. } => Held::Value,
                    ValueRef::Tree(_) => Held::Tree,
                    ValueRef::Embedded(_) => Held::Embedded,
                };
                if let ValueRef::Overflow {
                    first_page,
                    len_bytes,
                } = value
                {
                    walker.mark(
                        first_page,
                        overflow_page_count(len_bytes),
                        src.page(first_page)?,
                    )?;
                }
                visit(key, bytes, held)?;
            }
            entries += n as u64;
        } else {
            for c in 0..=n {
                let child = node::child_at(page, c, page_number)?;
                let child_low = if c == 0 {
                    low.clone()
                } else {
                    Some(node::key(page, c - 1, false, page_number)?.to_vec())
                };
                let child_high = if c == n {
                    high.clone()
                } else {
                    Some(node::key(page, c, false, page_number)?.to_vec())
                };
                stack.push((child, depth + 1, child_low, child_high));
            }
        }
    }
    walker
        .observer
        .tree(walker.owner, nesting, leaf_depth.unwrap_or(0) + 1);
    if entries != tree.entry_count {
        return Err(Error::corruption(
            CorruptionSite::Page {
                page_number: tree.root_page,
            },
            format!(
                "tree holds {entries} entries, its header says {}",
                tree.entry_count
            ),
        ));
    }
    Ok(())
}

/// Checks a table: its own trees, every record page and overflow run (marked in use, each
/// record decoded), the record count, and that every index holds exactly each record's
/// keys (global indexes: each record's keys; they may hold other tables' too).
fn walk_table<'a, S: PageSource<'a>>(
    src: S,
    header: &TreeHeader,
    named: &[(Vec<u8>, TreeHeader)],
    global_records: &mut Vec<(String, table::IndexKind, u64)>,
    walker: &mut Walker<'_>,
) -> Result<()> {
    use crate::table::{PAGES_OVERFLOW_RUN, TableView};
    let root_page = header.root_page;
    let view = TableView::load(src, *header, &mut |index| {
        named
            .iter()
            .find(|(n, _)| n == index.name.as_bytes())
            .map(|(_, h)| *h)
            .ok_or_else(|| corrupt(root_page, format!("global index {:?} missing", index.name)))
    })?;
    // The table's own B+tree: state, schema, pages, candidates, primary key, local indexes.
    let own_entries = 4
        + u64::from(view.primary_key.is_some())
        + view.schema.indexes.iter().filter(|i| !i.global).count() as u64;
    let own = TreeHeader {
        root_page,
        entry_count: own_entries,
        kind: TreeKind::BTree,
    };
    walk_any(src, &own, Role::Tree, 0, walker)?;
    let mut records = 0u64;
    let mut pages = Vec::new();
    for entry in fixed::FixedRange::new(src, view.pages.root_page, 4, ..)? {
        let (page_number, marker) = entry?;
        pages.push((page_number, marker == PAGES_OVERFLOW_RUN.to_le_bytes()));
    }
    for &(page_number, overflow) in &pages {
        if overflow {
            // Validated first: the run's length, read from the page, is what gets marked.
            let record = view.overflow_record(src, page_number)?;
            let run = src.page(page_number)?;
            walker.mark(
                page_number,
                overflow_page_count(crate::page::get_u64(run, crate::page::OFFSET_AUX)),
                run,
            )?;
            table::write::check_indexed(
                src,
                &view,
                &record.fields(),
                table::make_id(page_number, 0),
            )?;
            records += 1;
            continue;
        }
        let page = src.page(page_number)?;
        walker.mark(page_number, 1, page)?;
        table::validate_page(page, page_number, view.tag)?;
        let mut live = 0;
        for offset in table::live_offsets(page, page_number)? {
            let id = table::make_id(page_number, offset);
            live += table::slot_at(page, page_number, offset)?.1;
            let record = view
                .get(src, walker.next_page_number, id)?
                .ok_or_else(|| corrupt(page_number, "live record unreadable"))?;
            // Checked as found, so the check holds no table's records in memory.
            table::write::check_indexed(src, &view, &record.fields(), id)?;
            records += 1;
        }
        if live != table::write::live_bytes(page) {
            return Err(corrupt(page_number, "record page live bytes disagree"));
        }
    }
    // The page list comes in page order, so a page is found by a binary search.
    let is_record_page = |page_number: u64| {
        pages
            .binary_search_by_key(&page_number, |&(p, _)| p)
            .is_ok_and(|i| !pages[i].1)
    };
    if view.active_page != 0 && !is_record_page(view.active_page) {
        return Err(corrupt(
            view.active_page,
            "a table's active page is not one of its record pages",
        ));
    }
    for entry in fixed::FixedRange::new(src, view.candidates.root_page, 0, ..)? {
        let (page_number, _) = entry?;
        if page_number == view.active_page || !is_record_page(page_number) {
            return Err(corrupt(
                page_number,
                "reuse candidate is not an inactive record page",
            ));
        }
    }
    if records != header.entry_count {
        return Err(corrupt(
            root_page,
            format!(
                "table holds {records} records, its header says {}",
                header.entry_count
            ),
        ));
    }
    if let Some(pk) = view.primary_key
        && pk.entry_count != records
    {
        return Err(corrupt(
            pk.root_page,
            "primary key count differs from the records",
        ));
    }
    for (index, tree) in view.schema.indexes.iter().zip(&view.indexes) {
        if index.global {
            // Checked once every table sharing it is walked: each record of these tables
            // is in it (above), and nothing else may be.
            match global_records.iter_mut().find(|(n, ..)| *n == index.name) {
                Some((_, _, total)) => *total += records,
                None => global_records.push((index.name.clone(), index.kind, records)),
            }
            continue;
        }
        let entries = index_entries(src, index.kind, tree)?;
        if entries != records {
            return Err(corrupt(
                tree.root_page,
                format!(
                    "index {:?} holds {entries} entries for {records} records",
                    index.name
                ),
            ));
        }
    }
    Ok(())
}

/// Entries of a table index: one per indexed record (a fixed index's keys, or the values
/// under every key of a variable one).
fn index_entries<'a, S: PageSource<'a>>(
    src: S,
    kind: table::IndexKind,
    tree: &TreeHeader,
) -> Result<u64> {
    Ok(match kind {
        table::IndexKind::Fixed => tree.entry_count,
        table::IndexKind::Variable => {
            let mut values = 0;
            for key in crate::btree::Range::new(
                src,
                tree.root_page,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
            )? {
                values += crate::multi::count(src, tree.root_page, key?.0)?;
            }
            values
        }
    })
}

/// Checks a fixed-size tree: node kinds and value size, keys ascending and inside their
/// parent's separators, every leaf at one depth, no empty node below the root, the count.
fn walk_fixed<'a, S: PageSource<'a>>(
    src: S,
    tree: &TreeHeader,
    value_size: usize,
    nesting: usize,
    walker: &mut Walker<'_>,
) -> Result<()> {
    // (page, depth, lower bound inclusive, upper bound exclusive)
    let mut stack: Vec<(u64, usize, Option<u64>, Option<u64>)> =
        vec![(tree.root_page, 0, None, None)];
    let mut leaf_depth = None;
    let mut entries = 0u64;
    while let Some((page_number, depth, low, high)) = stack.pop() {
        if depth > crate::btree::DEPTH_MAX {
            return Err(corrupt(page_number, "tree deeper than any valid tree"));
        }
        let page = src.page(page_number)?;
        walker.mark(page_number, 1, page)?;
        let leaf = fixed::validate(page, page_number, value_size)?;
        let n = fixed::count(page);
        if depth > 0 && leaf && n == 0 {
            return Err(corrupt(page_number, "empty node below the root"));
        }
        let key = |i| {
            if leaf {
                fixed::leaf_key(page, i, value_size)
            } else {
                fixed::branch_key(page, i)
            }
        };
        for i in 0..n {
            let k = key(i);
            if (i > 0 && key(i - 1) >= k)
                || low.is_some_and(|l| k < l)
                || high.is_some_and(|h| k >= h)
            {
                return Err(corrupt(
                    page_number,
                    "keys out of order or outside their range",
                ));
            }
        }
        if leaf && fixed::is_slotted(page) && !fixed::slots_name_each_entry_once(page) {
            return Err(corrupt(page_number, "slots do not name each entry once"));
        }
        if leaf {
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err(corrupt(page_number, "leaves at different depths"));
            }
            entries += n as u64;
        } else {
            for c in 0..=n {
                let child_low = if c == 0 { low } else { Some(key(c - 1)) };
                let child_high = if c == n { high } else { Some(key(c)) };
                stack.push((
                    fixed::branch_child(page, c),
                    depth + 1,
                    child_low,
                    child_high,
                ));
            }
        }
    }
    walker
        .observer
        .tree(walker.owner, nesting, leaf_depth.unwrap_or(0) + 1);
    if entries != tree.entry_count {
        return Err(corrupt(
            tree.root_page,
            format!(
                "tree holds {entries} entries, its header says {}",
                tree.entry_count
            ),
        ));
    }
    Ok(())
}
