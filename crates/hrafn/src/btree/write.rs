//! Tree edits: insert (with node splits), remove (with node merges), creation and drop.
//!
//! Splits of a node where the new entry lands at its very end put only the new entry in the
//! right node, so sequential inserts leave full pages behind (LMDB does the same). A split
//! of a leaf where the new entry lands right after the previous insert (an ascending run in
//! the middle of the tree, as when a range is rewritten in order) cuts just after the new
//! entry, so the run goes on into the left page's free end and then into fresh pages it
//! fills, as InnoDB does; other splits balance bytes. A node below a quarter full merges
//! with a sibling when both fit in one page; a branch root left with no separator is
//! replaced by its only child.
//!
//! Sequential inserts skip the descent: an insert that lands at the end of the rightmost
//! leaf leaves an append hint (`AppendHint`), and the next larger key goes straight to
//! that leaf.

use super::node::{self, ValueRef};
use super::{DEPTH_MAX, PageStore, TreeHeader, fits_inline};
use crate::error::Result;
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use crate::page::{OFFSET_AUX, PageKind, corrupt, overflow_page_count, put_u64};

/// Steps of a path kept inline: trees of this depth hold billions of small entries.
/// Deeper ones (possible only with long keys) spill to the heap.
const PATH_INLINE_STEPS: usize = 6;

/// The path from the root to a node: (branch page, child number taken). Small, because
/// locating a key hands it along with the leaf and the insert after copies it.
#[derive(Clone)]
pub struct Path {
    steps: smallvec::SmallVec<[(u64, usize); PATH_INLINE_STEPS]>,
}

impl Path {
    fn new() -> Path {
        Path {
            steps: smallvec::SmallVec::new(),
        }
    }

    fn push(&mut self, page_number: u64, child: usize, root: u64) -> Result<()> {
        if self.steps.len() == DEPTH_MAX {
            return Err(corrupt(root, "tree deeper than any valid tree (cycle?)"));
        }
        self.steps.push((page_number, child));
        Ok(())
    }

    fn pop(&mut self) -> Option<(u64, usize)> {
        self.steps.pop()
    }

    fn last(&self) -> Option<(u64, usize)> {
        self.steps.last().copied()
    }
}

/// Creates an empty tree (one empty leaf).
///
/// # Errors
/// Allocation failures.
pub fn create<S: PageStore>(store: &mut S) -> Result<TreeHeader> {
    let root_page = store.allocate(1, PageKind::Leaf)?;
    Ok(TreeHeader::btree(root_page, 0))
}

/// Descends to the leaf for `key`, recording the path.
fn descend<S: PageStore>(store: &S, root: u64, key: &[u8], path: &mut Path) -> Result<u64> {
    let mut page_number = root;
    loop {
        let page = store.page(page_number)?;
        node::validate_header(page, page_number)?;
        if node::is_leaf(page, page_number)? {
            return Ok(page_number);
        }
        let c = node::child_index_for(page, key, page_number)?;
        path.push(page_number, c, root)?;
        page_number = node::child_at(page, c, page_number)?;
    }
}

/// Where the last insert into a tree went when it landed at the end of the rightmost leaf
/// without a split: a larger key belongs there too, so sequential inserts skip the descent
/// and its binary searches. Valid only while inserts through [`insert_hinted`] are the only
/// changes to the tree; whoever changes it otherwise must drop the hint.
#[derive(Clone)]
struct AppendHint {
    leaf: u64,
    path: Path,
}

/// What the last insert into a tree leaves for the next one: where a larger key can go
/// without a descent ([`AppendHint`]), and where the new entry went, which tells an
/// ascending run. Only the first must be exact; a stale position only picks a worse split
/// point. Whoever changes the tree other than through [`insert_hinted`] drops the hint.
#[derive(Clone, Default)]
pub(crate) struct InsertHint {
    /// Boxed: the hint moves in and out of its tree's handle at every insert.
    append: Option<Box<AppendHint>>,
    /// Leaf page and slot of the last entry inserted.
    last: Option<(u64, usize)>,
    /// Whether the last insert changed only its leaf (no node split).
    in_place: bool,
}

impl InsertHint {
    /// Whether the last insert through this hint changed only its leaf: paths found
    /// before it still lead where they did.
    pub(crate) fn split_nothing(&self) -> bool {
        self.in_place
    }
}

/// Inserts or replaces `key`. Returns true if a value was replaced.
///
/// # Errors
/// Allocation failures or damaged pages. Key and value sizes are checked by the caller.
pub fn insert<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    value: &[u8],
) -> Result<bool> {
    insert_hinted(store, tree, key, value, &mut InsertHint::default())
}

/// [`insert`], using and updating an [`InsertHint`] for `tree`.
///
/// # Errors
/// As [`insert`].
pub(crate) fn insert_hinted<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    value: &[u8],
    hint: &mut InsertHint,
) -> Result<bool> {
    insert_entry(store, tree, key, NewEntry::Value(value), hint)
}

/// What an insert stores under its key.
#[derive(Clone, Copy)]
pub(crate) enum NewEntry<'a> {
    /// A value (inline or in an overflow run, by size).
    Value(&'a [u8]),
    /// A nested tree's stored header.
    Tree(&'a [u8; super::TREE_HEADER_SIZE_BYTES]),
    /// A nested fixed-size tree, embedded whole.
    Embedded(&'a [u8]),
}

/// Inserts or replaces the entry of `key`. A value never replaces a nested tree, nor a
/// nested tree a value: either fails with [`crate::Error::WrongTreeKind`] (a nested tree
/// goes away only through [`remove`], which frees it).
///
/// # Errors
/// As [`insert`].
pub(crate) fn insert_entry<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    entry: NewEntry<'_>,
    hint: &mut InsertHint,
) -> Result<bool> {
    debug_assert!(key.len() <= crate::limits::KEY_SIZE_MAX_BYTES);
    let at_end = match &hint.append {
        Some(h) => appends_at(store.page(h.leaf)?, key, h.leaf)?,
        None => None,
    };
    if let (Some(index), NewEntry::Value(value), Some(h)) = (at_end, entry, &hint.append)
        && fits_inline(key.len(), value.len())
    {
        // The append path's common case, a new last entry that fits its leaf: the
        // hint stays as it is.
        let leaf = h.leaf;
        let stored = ValueRef::Inline(value);
        let page = store.page_mut(leaf)?;
        if node::free_bytes(page) >= node::leaf_entry_size(key.len(), &stored) {
            node::insert_leaf(page, index, key, &stored);
            tree.entry_count += 1;
            hint.last = Some((leaf, index));
            hint.in_place = true;
            return Ok(false);
        }
    }
    let at = match (at_end, hint.append.take()) {
        (Some(index), Some(h)) => Located {
            leaf: h.leaf,
            path: h.path,
            found: Err(index),
        },
        _ => locate_writable(store, tree.root_page, key)?,
    };
    insert_located(store, tree, key, entry, at, hint)
}

/// Where a key is, or would go, in a tree: its leaf, the path down to it and the leaf
/// search's result. Valid until the tree changes.
#[derive(Clone)]
pub(crate) struct Located {
    leaf: u64,
    path: Path,
    found: std::result::Result<usize, usize>,
}

impl Located {
    /// The entry stored under the key, if there is one.
    ///
    /// # Errors
    /// Corruption.
    pub(crate) fn entry<'a, S: PageStore>(&self, store: &'a S) -> Result<Option<ValueRef<'a>>> {
        match self.found {
            Ok(i) => Ok(Some(
                node::leaf_entry(store.page(self.leaf)?, i, self.leaf)?.1,
            )),
            Err(_) => Ok(None),
        }
    }

    /// The leaf the key is or would be in.
    pub(crate) fn leaf(&self) -> u64 {
        self.leaf
    }
}

/// Finds where `key` is or would go in the tree rooted at `root`, for a read followed by
/// [`insert_located`] with one descent.
///
/// # Errors
/// Corruption.
pub(crate) fn locate<S: PageStore>(store: &S, root: u64, key: &[u8]) -> Result<Located> {
    let mut path = Path::new();
    let leaf = descend(store, root, key, &mut path)?;
    let found = node::search(store.page(leaf)?, key, true, leaf)?;
    Ok(Located { leaf, path, found })
}

/// [`locate`] for an edit that changes the leaf: the leaf is made writable before it is
/// searched. The edit needs that copy anyway, and a random leaf is cold in the cache: one
/// sequential copy of it costs less than the binary search's scattered misses, which then
/// land in the copy.
///
/// # Errors
/// Scratch full, corruption.
fn locate_writable<S: PageStore>(store: &mut S, root: u64, key: &[u8]) -> Result<Located> {
    let mut path = Path::new();
    let leaf = descend(store, root, key, &mut path)?;
    store.page_mut(leaf)?;
    let found = node::search(store.page(leaf)?, key, true, leaf)?;
    Ok(Located { leaf, path, found })
}

/// The leaf of the last key an ascending run of edits located, with the path to it and
/// the leaf's upper bound: a later key of the run below that bound is in the same leaf,
/// so it needs no descent (nor the branch pages' binary searches). Valid while no edit
/// since split or merged a node; whoever makes such an edit clears it.
#[derive(Default)]
pub(crate) struct Finger {
    /// Off: [`Finger::locate`] is plain [`locate`], for a single edit.
    on: bool,
    at: Option<FingerAt>,
}

struct FingerAt {
    key: Vec<u8>,
    leaf: u64,
    path: Path,
    /// The separator above the leaf: every key of the leaf sorts below it (`None` for
    /// the rightmost leaf).
    upper: Option<Vec<u8>>,
}

impl Finger {
    /// A finger that follows a run of edits.
    pub(crate) fn following() -> Finger {
        Finger { on: true, at: None }
    }

    /// [`locate`], without a descent when `key` sorts no earlier than the last key
    /// located and before the upper bound of its leaf.
    ///
    /// # Errors
    /// Corruption.
    pub(crate) fn locate<S: PageStore>(
        &mut self,
        store: &S,
        root: u64,
        key: &[u8],
    ) -> Result<Located> {
        if let Some(at) = &mut self.at
            && node::compare_keys(key, &at.key).is_ge()
            && at
                .upper
                .as_deref()
                .is_none_or(|upper| node::compare_keys(key, upper).is_lt())
        {
            let found = node::search(store.page(at.leaf)?, key, true, at.leaf)?;
            at.key.clear();
            at.key.extend_from_slice(key);
            return Ok(Located {
                leaf: at.leaf,
                path: at.path.clone(),
                found,
            });
        }
        let located = locate(store, root, key)?;
        self.at = None;
        if self.on {
            // The bound is the separator right of the child taken at the lowest branch
            // that did not take its last child.
            let mut upper = None;
            for &(branch, child) in located.path.steps.iter().rev() {
                let page = store.page(branch)?;
                if child < node::count(page) {
                    upper = Some(node::key(page, child, false, branch)?.to_vec());
                    break;
                }
            }
            self.at = Some(FingerAt {
                key: key.to_vec(),
                leaf: located.leaf,
                path: located.path.clone(),
                upper,
            });
        }
        Ok(located)
    }

    /// Forgets the leaf: an edit split or merged a node.
    pub(crate) fn clear(&mut self) {
        self.at = None;
    }
}

/// [`insert_entry`] at the position `at` that [`locate`] found for `key` in `tree`, which
/// has not changed since.
///
/// # Errors
/// As [`insert`].
pub(crate) fn insert_located<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    entry: NewEntry<'_>,
    at: Located,
    hint: &mut InsertHint,
) -> Result<bool> {
    let last = hint.last.take();
    hint.in_place = false;
    let Located {
        leaf,
        mut path,
        found,
    } = at;
    let index = match found {
        Ok(i) => {
            // A value of the same length is written over the old one in place: the page
            // keeps its layout and the journal diff is only the bytes that changed.
            if let NewEntry::Value(value) = entry
                && fits_inline(key.len(), value.len())
                && node::overwrite_inline_value(store.page_mut(leaf)?, i, value, leaf)?
            {
                hint.in_place = true;
                return Ok(true);
            }
            let (_, old) = node::leaf_entry(store.page(leaf)?, i, leaf)?;
            let new_is_tree = matches!(entry, NewEntry::Tree(_) | NewEntry::Embedded(_));
            if old.is_tree() != new_is_tree {
                return Err(crate::Error::WrongTreeKind {
                    name: String::from_utf8_lossy(key).into_owned(),
                    found: if old.is_tree() {
                        "a nested tree"
                    } else {
                        "a value"
                    }
                    .into(),
                    wanted: if new_is_tree {
                        "a nested tree"
                    } else {
                        "a value"
                    }
                    .into(),
                });
            }
            if !new_is_tree {
                free_value_at(store, leaf, i, false)?;
            }
            node::remove(store.page_mut(leaf)?, i);
            i
        }
        Err(i) => i,
    };
    let stored = match entry {
        NewEntry::Tree(header) => ValueRef::Tree(header),
        NewEntry::Embedded(tree) => ValueRef::Embedded(tree),
        NewEntry::Value(value) if fits_inline(key.len(), value.len()) => ValueRef::Inline(value),
        NewEntry::Value(value) => {
            let first_page = write_overflow(store, value)?;
            ValueRef::Overflow {
                first_page,
                len_bytes: value.len() as u64,
            }
        }
    };
    let appended = index == node::count(store.page(leaf)?);
    let path_before = path.clone();
    let ascending = found.is_err() && last == Some((leaf, index.wrapping_sub(1)));
    let (placed, in_place) =
        insert_into_leaf(store, tree, &mut path, leaf, index, key, &stored, ascending)?;
    hint.last = Some(placed);
    hint.in_place = in_place;
    if found.is_err() {
        tree.entry_count += 1;
    }
    // Still the rightmost leaf, and the key is its last entry (a split would have moved it
    // to a new right node): the next larger key goes here too.
    if appended && is_rightmost(store, &path_before)? {
        let page = store.page(leaf)?;
        let n = node::count(page);
        if n > 0 && node::key(page, n - 1, true, leaf)? == key {
            hint.append = Some(Box::new(AppendHint {
                leaf,
                path: path_before,
            }));
        }
    }
    Ok(found.is_ok())
}

/// The end of leaf `page`, if `key` sorts after every key in it.
fn appends_at(page: &[u8], key: &[u8], page_number: u64) -> Result<Option<usize>> {
    let n = node::count(page);
    Ok(
        (n > 0 && node::compare_keys(key, node::key(page, n - 1, true, page_number)?).is_gt())
            .then_some(n),
    )
}

/// Whether `path` took the last child at every branch.
fn is_rightmost<S: PageStore>(store: &S, path: &Path) -> Result<bool> {
    for &(page_number, child) in &path.steps {
        if child != node::count(store.page(page_number)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What [`update_in_place`] found at the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InPlace {
    /// The inline value was handed to the closure.
    Updated,
    /// No entry has the key.
    Absent,
    /// The entry holds an overflow value: nothing was changed.
    Overflow,
    /// The entry holds a nested tree: nothing was changed.
    Tree,
}

/// Hands the inline value of `key` to `f` to change in place (its length stays), in the
/// transaction's copy of the leaf: one descent, and only the bytes `f` changes differ.
///
/// `leaf_hint` is the leaf the previous call found (kept in it on return): when `key` lies
/// between that leaf's first and last keys it belongs to that leaf (leaves partition the
/// key space in order), so ascending keys skip the descent while they stay in one leaf.
/// Valid while no page of the tree is freed: whoever removes entries must drop it.
///
/// # Errors
/// Damaged pages.
pub(crate) fn update_in_place<S: PageStore>(
    store: &mut S,
    tree: &TreeHeader,
    key: &[u8],
    f: &mut dyn FnMut(&mut [u8]),
    leaf_hint: &mut Option<u64>,
) -> Result<InPlace> {
    let hinted = match *leaf_hint {
        Some(leaf) if leaf_covers(store.page(leaf)?, key, leaf)? => Some(leaf),
        _ => None,
    };
    let leaf = match hinted {
        Some(leaf) => leaf,
        None => descend(store, tree.root_page, key, &mut Path::new())?,
    };
    *leaf_hint = Some(leaf);
    let Ok(i) = node::search(store.page(leaf)?, key, true, leaf)? else {
        return Ok(InPlace::Absent);
    };
    let page = store.page(leaf)?;
    let Some(range) = node::inline_value_range(page, i, leaf)? else {
        return Ok(if node::leaf_entry(page, i, leaf)?.1.is_tree() {
            InPlace::Tree
        } else {
            InPlace::Overflow
        });
    };
    f(&mut store.page_mut(leaf)?[range]);
    Ok(InPlace::Updated)
}

/// Whether `page` is a leaf whose first and last keys enclose `key`.
fn leaf_covers(page: &[u8], key: &[u8], page_number: u64) -> Result<bool> {
    node::validate_header(page, page_number)?;
    if !node::is_leaf(page, page_number)? {
        return Ok(false);
    }
    let n = node::count(page);
    Ok(n > 0
        && node::key(page, 0, true, page_number)? <= key
        && key <= node::key(page, n - 1, true, page_number)?)
}

/// Removes `key`. Returns true if it was present.
///
/// # Errors
/// Damaged pages.
pub fn remove<S: PageStore>(store: &mut S, tree: &mut TreeHeader, key: &[u8]) -> Result<bool> {
    let mut path = Path::new();
    let leaf = descend(store, tree.root_page, key, &mut path)?;
    let Ok(i) = node::search(store.page(leaf)?, key, true, leaf)? else {
        return Ok(false);
    };
    free_value_at(store, leaf, i, tree.kind == super::TreeKind::Multi)?;
    node::remove(store.page_mut(leaf)?, i);
    tree.entry_count = tree.entry_count.saturating_sub(1);
    rebalance(store, tree, &mut path, leaf)?;
    Ok(true)
}

/// Frees every page of the tree, nested trees included.
///
/// # Errors
/// Damaged pages.
pub fn drop_tree<S: PageStore>(store: &mut S, tree: &TreeHeader) -> Result<()> {
    drop_nested(store, tree, 0, false)
}

/// Frees a tree of any kind, `nesting` levels below a named tree. A multi-value set's own
/// tree (`set`) holds no nested trees, so it is not a level of its own: a multi-value tree
/// at the deepest level may have one.
fn drop_nested<S: PageStore>(
    store: &mut S,
    tree: &TreeHeader,
    nesting: usize,
    set: bool,
) -> Result<()> {
    // Uncounted, so it must be a tree that cannot nest (else a damaged file could recurse
    // without end).
    if set && tree.kind != super::TreeKind::BTree {
        return Err(corrupt(tree.root_page, "a set's tree is not a B+tree"));
    }
    if !set && nesting > super::NESTING_DEPTH_MAX {
        return Err(corrupt(tree.root_page, "trees nested deeper than allowed"));
    }
    match tree.kind {
        super::TreeKind::Fixed { .. } => return crate::fixed::write::drop_tree(store, tree),
        super::TreeKind::Table => {
            // Record pages hang off the table's page list, not off its trees.
            crate::table::write::drop_records(store, tree.root_page)?;
        }
        super::TreeKind::BTree | super::TreeKind::Multi => {}
    }
    let mut stack = vec![(tree.root_page, 0usize)];
    while let Some((page_number, depth)) = stack.pop() {
        if depth > DEPTH_MAX {
            return Err(corrupt(
                page_number,
                "tree deeper than any valid tree (cycle?)",
            ));
        }
        let page = store.page(page_number)?;
        node::validate_header(page, page_number)?;
        let n = node::count(page);
        if node::is_leaf(page, page_number)? {
            let mut runs = Vec::new();
            let mut nested = Vec::new();
            for i in 0..n {
                match node::leaf_entry(page, i, page_number)?.1 {
                    ValueRef::Overflow {
                        first_page,
                        len_bytes,
                    } => runs.push((first_page, len_bytes)),
                    ValueRef::Tree(bytes) => nested.push(TreeHeader::decode(bytes, page_number)?),
                    ValueRef::Inline(_) | ValueRef::Embedded(_) => {}
                }
            }
            if set && !nested.is_empty() {
                return Err(corrupt(page_number, "a set's tree holds a nested tree"));
            }
            for (first_page, len_bytes) in runs {
                free_overflow(store, first_page, len_bytes)?;
            }
            let sets = tree.kind == super::TreeKind::Multi;
            for header in nested {
                drop_nested(store, &header, nesting + 1, sets)?;
            }
        } else {
            for c in 0..=n {
                stack.push((node::child_at(page, c, page_number)?, depth + 1));
            }
        }
        store.free(page_number, 1);
    }
    Ok(())
}

/// Frees what entry `i` of `leaf` owns outside the node: an overflow run, a nested tree
/// (a set's tree when the leaf is a multi-value tree's: `set`).
fn free_value_at<S: PageStore>(store: &mut S, leaf: u64, i: usize, set: bool) -> Result<()> {
    match node::leaf_entry(store.page(leaf)?, i, leaf)?.1 {
        ValueRef::Overflow {
            first_page,
            len_bytes,
        } => free_overflow(store, first_page, len_bytes)?,
        ValueRef::Tree(bytes) => {
            let header = TreeHeader::decode(bytes, leaf)?;
            drop_nested(store, &header, 1, set)?;
        }
        ValueRef::Inline(_) | ValueRef::Embedded(_) => {}
    }
    Ok(())
}

/// Frees the overflow run an entry names, once its first page shows it is that run: a
/// damaged reference must not free live pages, which a later transaction would reuse.
fn free_overflow<S: PageStore>(store: &mut S, first_page: u64, len_bytes: u64) -> Result<()> {
    super::check_overflow_run(store.page(first_page)?, first_page, len_bytes)?;
    store.free(first_page, overflow_page_count(len_bytes));
    Ok(())
}

/// Writes `value` into a new overflow run; returns its first page.
///
/// # Errors
/// Allocation failures.
pub(crate) fn write_overflow<S: PageStore>(store: &mut S, value: &[u8]) -> Result<u64> {
    let count = overflow_page_count(value.len() as u64);
    let first = store.allocate(count, PageKind::Overflow)?;
    let run = store.page_mut(first)?;
    assert!(
        run.len() >= PAGE_HEADER_SIZE_BYTES + value.len(),
        "run sized for the value"
    );
    put_u64(run, OFFSET_AUX, value.len() as u64);
    run[PAGE_HEADER_SIZE_BYTES..PAGE_HEADER_SIZE_BYTES + value.len()].copy_from_slice(value);
    Ok(first)
}

/// Makes room for `need` bytes in a node by compacting if that suffices.
fn make_room(page: &mut [u8], need: usize, leaf: bool, page_number: u64) -> Result<bool> {
    if node::free_bytes(page) >= need {
        return Ok(true);
    }
    let used = node::used_bytes(page, leaf, page_number)?;
    // More used than a node holds: entries overlap, which only damage does.
    let unused = node::NODE_CAPACITY_BYTES
        .checked_sub(used)
        .ok_or_else(|| corrupt(page_number, "entries larger than the node"))?;
    if unused >= need {
        node::compact(page, leaf, page_number)?;
        return Ok(true);
    }
    Ok(false)
}

/// One entry of a node being split: an existing one or the new one.
#[derive(Clone, Copy)]
enum Pending {
    Existing(usize),
    New,
}

/// Picks the split point of `sizes` (entry sizes in order, the new one included): the index
/// of the first entry that moves right. `ascending`: the new entry continues a run of
/// inserts, so it ends the left node when both sides fit.
fn split_point(sizes: &[usize], new_index: usize, ascending: bool) -> usize {
    let n = sizes.len();
    assert!(n >= 2, "a split needs two entries");
    if new_index == n - 1 {
        return n - 1; // appending: keep the left node full
    }
    let total: usize = sizes.iter().sum();
    if ascending {
        let left: usize = sizes[..=new_index].iter().sum();
        if left <= node::NODE_CAPACITY_BYTES && total - left <= node::NODE_CAPACITY_BYTES {
            return new_index + 1;
        }
    }
    let (mut best, mut best_cost, mut left) = (1, usize::MAX, 0);
    for (k, size) in sizes.iter().enumerate().take(n - 1) {
        left += size;
        let cost = left.max(total - left);
        if cost < best_cost {
            best_cost = cost;
            best = k + 1;
        }
    }
    best
}

/// Inserts the entry at slot `index` of `leaf`, splitting it if it is full (see
/// [`split_point`] for `ascending`). Returns the leaf and slot the entry went to, and
/// whether it went in without a split.
#[allow(clippy::too_many_arguments)]
fn insert_into_leaf<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    path: &mut Path,
    leaf: u64,
    index: usize,
    key: &[u8],
    value: &ValueRef<'_>,
    ascending: bool,
) -> Result<((u64, usize), bool)> {
    let need = node::leaf_entry_size(key.len(), value);
    {
        let page = store.page_mut(leaf)?;
        if make_room(page, need, true, leaf)? {
            node::insert_leaf(page, index, key, value);
            return Ok(((leaf, index), true));
        }
    }
    if index > 0 && index == node::count(store.page(leaf)?) {
        // Appending to a full leaf: the new entry alone starts the right node (as
        // `split_point` would cut), and the left keeps its entries as they lie.
        let right = store.allocate(1, PageKind::Leaf)?;
        let page = store.page_mut(right)?;
        node::init_node(page);
        if node::free_bytes(page) < need {
            return Err(corrupt(leaf, "an entry larger than a node"));
        }
        node::insert_leaf(page, 0, key, value);
        insert_into_parent(store, tree, path, leaf, key, right)?;
        return Ok(((right, 0), false));
    }
    // Split: lay the entries out as if inserted, then cut.
    let old = store.page(leaf)?[..PAGE_SIZE_BYTES].to_vec();
    let n_old = node::count(&old);
    let order: Vec<Pending> = (0..=n_old)
        .map(|j| match j.cmp(&index) {
            std::cmp::Ordering::Less => Pending::Existing(j),
            std::cmp::Ordering::Equal => Pending::New,
            std::cmp::Ordering::Greater => Pending::Existing(j - 1),
        })
        .collect();
    let mut sizes = Vec::with_capacity(order.len());
    for p in &order {
        sizes.push(match p {
            Pending::Existing(j) => node::entry_size_at(&old, *j, true, leaf)?,
            Pending::New => need,
        });
    }
    let cut = split_point(&sizes, index, ascending);
    let right = store.allocate(1, PageKind::Leaf)?;
    let separator: Vec<u8> = match order[cut] {
        Pending::Existing(j) => node::key(&old, j, true, leaf)?.to_vec(),
        Pending::New => key.to_vec(),
    };
    let fill = |dst: &mut [u8], part: &[Pending]| -> Result<()> {
        node::init_node(dst);
        for (slot, p) in part.iter().enumerate() {
            match p {
                Pending::Existing(j) => node::copy_entry(&old, *j, dst, slot, true, leaf)?,
                Pending::New => {
                    if node::free_bytes(dst) < need {
                        return Err(corrupt(leaf, "split halves do not fit"));
                    }
                    node::insert_leaf(dst, slot, key, value);
                }
            }
        }
        Ok(())
    };
    fill(store.page_mut(leaf)?, &order[..cut])?;
    fill(store.page_mut(right)?, &order[cut..])?;
    insert_into_parent(store, tree, path, leaf, &separator, right)?;
    let placed = if index < cut {
        (leaf, index)
    } else {
        (right, index - cut)
    };
    Ok((placed, false))
}

fn insert_into_parent<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    path: &mut Path,
    left: u64,
    separator: &[u8],
    right: u64,
) -> Result<()> {
    let Some((parent, child)) = path.pop() else {
        // The root split: a new root above it.
        let root = store.allocate(1, PageKind::Branch)?;
        let page = store.page_mut(root)?;
        node::set_leftmost_child(page, left);
        node::insert_branch(page, 0, separator, right);
        tree.root_page = root;
        return Ok(());
    };
    let need = node::branch_entry_size(separator.len());
    {
        let page = store.page_mut(parent)?;
        if make_room(page, need, false, parent)? {
            node::insert_branch(page, child, separator, right);
            return Ok(());
        }
    }
    let old = store.page(parent)?[..PAGE_SIZE_BYTES].to_vec();
    let n_old = node::count(&old);
    // Entries of the combined node: (key, child) with the new separator at `child`.
    let mut entries: Vec<(Vec<u8>, u64)> = Vec::with_capacity(n_old + 1);
    for j in 0..n_old {
        let (k, c) = node::branch_entry(&old, j, parent)?;
        entries.push((k.to_vec(), c));
    }
    entries.insert(child, (separator.to_vec(), right));
    let sizes: Vec<usize> = entries
        .iter()
        .map(|(k, _)| node::branch_entry_size(k.len()))
        .collect();
    // The entry at `cut` moves up; its child becomes the right node's leftmost.
    let cut = split_point(&sizes, child, false).min(entries.len() - 1);
    let new_right = store.allocate(1, PageKind::Branch)?;
    {
        let page = store.page_mut(parent)?;
        node::init_node(page);
        for (slot, (k, c)) in entries[..cut].iter().enumerate() {
            node::insert_branch(page, slot, k, *c);
        }
    }
    {
        let page = store.page_mut(new_right)?;
        node::set_leftmost_child(page, entries[cut].1);
        for (slot, (k, c)) in entries[cut + 1..].iter().enumerate() {
            if node::free_bytes(page) < node::branch_entry_size(k.len()) {
                return Err(corrupt(parent, "branch split halves do not fit"));
            }
            node::insert_branch(page, slot, k, *c);
        }
    }
    let promoted = entries[cut].0.clone();
    insert_into_parent(store, tree, path, parent, &promoted, new_right)
}

/// Merges underfull nodes upward from `page_number` after a removal.
fn rebalance<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    path: &mut Path,
    mut page_number: u64,
) -> Result<()> {
    loop {
        let page = store.page(page_number)?;
        let leaf = node::is_leaf(page, page_number)?;
        let Some((parent, child)) = path.last() else {
            // The root: a branch with no separator hands over to its only child.
            if !leaf && node::count(page) == 0 {
                tree.root_page = node::leftmost_child(page);
                store.free(page_number, 1);
            }
            return Ok(());
        };
        if node::used_bytes(page, leaf, page_number)? >= node::NODE_CAPACITY_BYTES / 4 {
            return Ok(());
        }
        let parent_page = store.page(parent)?;
        let parent_count = node::count(parent_page);
        let (left, right, separator_index) = if child > 0 {
            (
                node::child_at(parent_page, child - 1, parent)?,
                page_number,
                child - 1,
            )
        } else if parent_count >= 1 {
            (page_number, node::child_at(parent_page, 1, parent)?, 0)
        } else {
            return Ok(());
        };
        let separator = node::branch_entry(parent_page, separator_index, parent)?
            .0
            .to_vec();
        // The sibling comes from the parent alone: only a node of the same kind, sound as
        // far as its header goes, may be merged with this one.
        let sibling = if left == page_number { right } else { left };
        let sibling_page = store.page(sibling)?;
        node::validate_header(sibling_page, sibling)?;
        if node::is_leaf(sibling_page, sibling)? != leaf {
            return Err(corrupt(
                sibling,
                "siblings of different kinds (leaves at two depths)",
            ));
        }
        let right_bytes = store.page(right)?[..PAGE_SIZE_BYTES].to_vec();
        let left_used = node::used_bytes(store.page(left)?, leaf, left)?;
        let right_used = node::used_bytes(&right_bytes, leaf, right)?;
        let extra = if leaf {
            0
        } else {
            node::branch_entry_size(separator.len())
        };
        if left_used + right_used + extra > node::NODE_CAPACITY_BYTES {
            return Ok(());
        }
        {
            let left_page = store.page_mut(left)?;
            node::compact(left_page, leaf, left)?;
            let mut slot = node::count(left_page);
            if !leaf {
                node::insert_branch(
                    left_page,
                    slot,
                    &separator,
                    node::leftmost_child(&right_bytes),
                );
                slot += 1;
            }
            for j in 0..node::count(&right_bytes) {
                node::copy_entry(&right_bytes, j, left_page, slot + j, leaf, right)?;
            }
        }
        node::remove(store.page_mut(parent)?, separator_index);
        store.free(right, 1);
        path.pop();
        page_number = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::get;
    use crate::btree::mem_store::MemStore;
    use std::collections::BTreeMap;

    fn key(i: u64) -> Vec<u8> {
        format!("{:016}", i).into_bytes()
    }

    #[test]
    fn sequential_inserts_fill_pages_and_read_back() {
        let mut store = MemStore::default();
        let mut tree = create(&mut store).expect("create");
        for i in 0..20_000u64 {
            assert!(!insert(&mut store, &mut tree, &key(i), &[i as u8; 100]).expect("insert"));
        }
        assert_eq!(tree.entry_count, 20_000);
        for i in 0..20_000u64 {
            assert_eq!(
                get(&store, tree.root_page, &key(i)).expect("get"),
                Some(&[i as u8; 100][..])
            );
        }
        // 125 bytes per entry with slot: about 65 per page when pages are full.
        let leaves = store.pages.len();
        assert!(
            leaves < 20_000 / 60 + 10,
            "{leaves} pages: sequential splits should fill pages"
        );
    }

    #[test]
    fn an_ascending_run_in_the_middle_fills_pages() {
        // Keys "a…" and "c…" first, then a run of "b…" between them, in order: the run's
        // splits cut after its newest entry, so the run's pages end up full, not half full.
        let prefixed = |prefix: char, i: u64| format!("{prefix}{i:015}").into_bytes();
        let run_leaves = |ascending_splits: bool| {
            let mut store = MemStore::default();
            let mut tree = create(&mut store).expect("create");
            for i in 0..2_000u64 {
                insert(&mut store, &mut tree, &prefixed('a', i), &[1; 100]).expect("insert");
                insert(&mut store, &mut tree, &prefixed('c', i), &[3; 100]).expect("insert");
            }
            let before = store.pages.len();
            let mut hint = InsertHint::default();
            for i in 0..20_000u64 {
                if !ascending_splits {
                    hint = InsertHint::default();
                }
                let k = prefixed('b', i);
                insert_hinted(&mut store, &mut tree, &k, &[2; 100], &mut hint).expect("insert");
            }
            for i in (0..20_000u64).step_by(97) {
                assert_eq!(
                    get(&store, tree.root_page, &prefixed('b', i)).expect("get"),
                    Some(&[2; 100][..])
                );
            }
            assert_eq!(tree.entry_count, 24_000);
            store.pages.len() - before
        };
        let (with, without) = (run_leaves(true), run_leaves(false));
        // 125 bytes an entry: 65 to a full page, so 20,000 take about 308 pages.
        assert!(with < 20_000 / 60, "{with} pages for the run");
        assert!(
            without > 20_000 / 40,
            "{without} pages without the hint: half full"
        );
    }

    #[test]
    fn a_value_of_the_same_length_is_overwritten_in_place() {
        let mut store = MemStore::default();
        let mut tree = create(&mut store).expect("create");
        for i in 0..50u64 {
            insert(&mut store, &mut tree, &key(i), &[1u8; 40]).expect("insert");
        }
        let root = tree.root_page;
        let before = store.pages[&root].clone();
        let mut new_value = [1u8; 40];
        new_value[7] = 9;
        assert!(insert(&mut store, &mut tree, &key(20), &new_value).expect("replace"));
        let after = &store.pages[&root];
        let changed: Vec<usize> = (0..PAGE_SIZE_BYTES)
            .filter(|&b| before[b] != after[b])
            .collect();
        assert_eq!(
            changed.len(),
            1,
            "only the changed value byte moves: {changed:?}"
        );
        assert_eq!(
            get(&store, root, &key(20)).expect("get"),
            Some(&new_value[..])
        );
        assert_eq!(tree.entry_count, 50);
        // A longer value still takes the general path and reads back.
        assert!(insert(&mut store, &mut tree, &key(20), &[2u8; 41]).expect("replace"));
        assert_eq!(
            get(&store, root, &key(20)).expect("get"),
            Some(&[2u8; 41][..])
        );
    }

    #[test]
    fn random_ops_match_a_btreemap_and_merges_free_pages() {
        let mut store = MemStore::default();
        let mut tree = create(&mut store).expect("create");
        let mut model = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..30_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key(x % 3000);
            if x.is_multiple_of(3) {
                assert_eq!(
                    remove(&mut store, &mut tree, &k).expect("remove"),
                    model.remove(&k).is_some()
                );
            } else {
                let len = if step % 97 == 0 {
                    9000
                } else {
                    (x % 300) as usize
                };
                let v = vec![(x >> 8) as u8; len];
                let replaced = insert(&mut store, &mut tree, &k, &v).expect("insert");
                assert_eq!(replaced, model.insert(k, v).is_some());
            }
        }
        assert_eq!(tree.entry_count, model.len() as u64);
        for (k, v) in &model {
            assert_eq!(
                get(&store, tree.root_page, k).expect("get"),
                Some(v.as_slice())
            );
        }
        for k in model.keys().cloned().collect::<Vec<_>>() {
            assert!(remove(&mut store, &mut tree, &k).expect("remove"));
        }
        assert_eq!(tree.entry_count, 0);
        assert_eq!(
            store.pages.len(),
            1,
            "all but the root leaf merged away and freed"
        );
    }

    #[test]
    fn hinted_inserts_match_a_btreemap_through_splits_and_removes() {
        // Mostly rising keys (the hint's case) mixed with lower ones, replacements and
        // removes (which drop the hint), across many splits of the rightmost path.
        let mut store = MemStore::default();
        let mut tree = create(&mut store).expect("create");
        let mut hint = InsertHint::default();
        let mut model = BTreeMap::new();
        let (mut hinted, mut next) = (0u32, 0u64);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..40_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = match x % 10 {
                0 => key(x % (next + 1)), // somewhere below
                _ => {
                    next += 1 + x % 3;
                    key(next)
                }
            };
            if x % 50 == 1 {
                hint = InsertHint::default();
                assert_eq!(
                    remove(&mut store, &mut tree, &k).expect("remove"),
                    model.remove(&k).is_some()
                );
                continue;
            }
            let v = vec![step as u8; (x % 200) as usize];
            let had_hint = hint.append.is_some();
            let replaced = insert_hinted(&mut store, &mut tree, &k, &v, &mut hint).expect("insert");
            hinted += u32::from(had_hint);
            assert_eq!(replaced, model.insert(k, v).is_some());
        }
        assert!(hinted > 20_000, "the hint served most inserts ({hinted})");
        assert_eq!(tree.entry_count, model.len() as u64);
        use crate::btree::Range;
        use std::ops::Bound;
        let mut range =
            Range::new(&store, tree.root_page, Bound::Unbounded, Bound::Unbounded).expect("range");
        for (k, v) in &model {
            let (rk, rv) = range.next().expect("entry").expect("read");
            assert_eq!((rk, rv), (k.as_slice(), v.as_slice()));
        }
        assert!(range.next().is_none());
    }

    fn as_ref(b: &std::ops::Bound<Vec<u8>>) -> std::ops::Bound<&[u8]> {
        b.as_ref().map(|v| v.as_slice())
    }

    #[test]
    fn ranges_match_the_model_from_both_ends() {
        use crate::btree::Range;
        use std::ops::{Bound, RangeBounds};
        let mut store = MemStore::default();
        let mut tree = create(&mut store).expect("create");
        let keys: Vec<u64> = (0..3000).map(|i| i * 3).collect();
        for &k in &keys {
            insert(&mut store, &mut tree, &key(k), b"v").expect("insert");
        }
        let bounds = |k: u64, kind: u8| match kind {
            0 => Bound::Unbounded,
            1 => Bound::Included(key(k)),
            _ => Bound::Excluded(key(k)),
        };
        let mut x = 7u64;
        for _ in 0..300 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (a, b) = ((x >> 10) % 9100, (x >> 30) % 9100);
            let (sk, ek) = ((x >> 50) % 3, (x >> 55) % 3);
            let (start, end) = (bounds(a, sk as u8), bounds(b, ek as u8));
            let expected: Vec<Vec<u8>> = keys
                .iter()
                .map(|&k| key(k))
                .filter(|k| {
                    (
                        start.as_ref().map(|v| v.as_slice()),
                        end.as_ref().map(|v| v.as_slice()),
                    )
                        .contains(&k.as_slice())
                })
                .collect();
            let forward: Vec<Vec<u8>> =
                Range::new(&store, tree.root_page, as_ref(&start), as_ref(&end))
                    .expect("range")
                    .map(|e| e.expect("entry").0.to_vec())
                    .collect();
            assert_eq!(forward, expected);
            let backward: Vec<Vec<u8>> =
                Range::new(&store, tree.root_page, as_ref(&start), as_ref(&end))
                    .expect("range")
                    .rev()
                    .map(|e| e.expect("entry").0.to_vec())
                    .collect();
            assert!(backward.iter().rev().eq(expected.iter()));
            // Alternate ends: every entry exactly once.
            let mut range =
                Range::new(&store, tree.root_page, as_ref(&start), as_ref(&end)).expect("range");
            let (mut front, mut back) = (Vec::new(), Vec::new());
            let mut turn = x;
            loop {
                turn = turn.rotate_left(1);
                let item = if turn & 1 == 0 {
                    range.next()
                } else {
                    range.next_back()
                };
                match item {
                    Some(e) => {
                        let k = e.expect("entry").0.to_vec();
                        if turn & 1 == 0 {
                            front.push(k)
                        } else {
                            back.push(k)
                        }
                    }
                    None => break,
                }
            }
            back.reverse();
            front.extend(back);
            assert_eq!(front, expected);
        }
    }
}
