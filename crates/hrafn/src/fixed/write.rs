//! Changing a fixed-size tree through a [`PageStore`]: create, insert with splits, remove
//! with empty nodes taken out, drop.

use super::{
    BRANCH_CAPACITY, branch_child, branch_key, branch_search, count, leaf_at, leaf_capacity,
    leaf_key, leaf_search, validate,
};
use crate::btree::{DEPTH_MAX, PageStore, TreeHeader, TreeKind};
use crate::error::Result;
use crate::limits::PAGE_HEADER_SIZE_BYTES;
use crate::page::{OFFSET_AUX, OFFSET_ENTRY_COUNT, PageKind, corrupt, put_u16, put_u64};

fn value_size_of(tree: &TreeHeader) -> usize {
    tree.kind
        .fixed_value_size()
        .expect("a fixed-size tree operation on a fixed-size tree")
}

fn set_count(page: &mut [u8], n: usize) {
    put_u16(page, OFFSET_ENTRY_COUNT, n as u16);
}

fn new_leaf<S: PageStore>(store: &mut S, value_size: usize) -> Result<u64> {
    let page_number = store.allocate(1, PageKind::FixedLeaf)?;
    put_u64(store.page_mut(page_number)?, OFFSET_AUX, value_size as u64);
    Ok(page_number)
}

/// A new, empty fixed-size tree of `value_size`-byte values.
///
/// # Errors
/// Scratch full; allocation limits.
pub fn create<S: PageStore>(store: &mut S, value_size: u16) -> Result<TreeHeader> {
    let root_page = new_leaf(store, usize::from(value_size))?;
    Ok(TreeHeader {
        root_page,
        entry_count: 0,
        kind: TreeKind::Fixed { value_size },
    })
}

/// A path from the root to a leaf: (branch page, child index taken). Inline, not
/// allocated: every insert and remove makes one.
type Path = smallvec::SmallVec<[(u64, usize); 6]>;

/// The path from the root to the leaf for `key`.
fn descend<S: PageStore>(store: &S, tree: &TreeHeader, key: u64) -> Result<(Path, u64)> {
    let value_size = value_size_of(tree);
    let mut path = Path::new();
    let mut page_number = tree.root_page;
    for _ in 0..DEPTH_MAX {
        let page = store.page(page_number)?;
        if validate(page, page_number, value_size)? {
            return Ok((path, page_number));
        }
        let c = branch_search(page, key);
        path.push((page_number, c));
        page_number = branch_child(page, c);
    }
    Err(corrupt(
        tree.root_page,
        "tree deeper than any valid tree (cycle?)",
    ))
}

/// Where increasing keys go without a descent: the tree's rightmost leaf, after an insert
/// at its end. Any key above that leaf's last key belongs there. Dropped by any other
/// change.
pub struct AppendHint {
    leaf: u64,
}

/// Inserts or replaces `key`; returns true if it replaced a value. `value` must be the
/// tree's value size (the caller checks).
///
/// # Errors
/// Scratch full, corruption.
pub fn insert<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: u64,
    value: &[u8],
) -> Result<bool> {
    insert_hinted(store, tree, key, value, &mut None)
}

/// [`insert`], appending without a descent while keys increase (time series): `hint` is
/// used when the key lands past the end of the leaf it names, and left for the next
/// insert when this one ended the rightmost leaf.
///
/// # Errors
/// As [`insert`].
pub fn insert_hinted<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: u64,
    value: &[u8],
    hint: &mut Option<AppendHint>,
) -> Result<bool> {
    let value_size = value_size_of(tree);
    debug_assert_eq!(value.len(), value_size);
    if let Some(h) = hint.take() {
        let page = store.page(h.leaf)?;
        let n = count(page);
        if n > 0 && n < leaf_capacity(value_size) && key > leaf_key(page, n - 1, value_size) {
            put_entry(store.page_mut(h.leaf)?, n, n, key, value);
            tree.entry_count += 1;
            *hint = Some(h);
            return Ok(false);
        }
    }
    let (path, leaf) = descend(store, tree, key)?;
    // Copied before the search, as the B+tree's insert does (`locate_writable`): the
    // sequential copy of a cold leaf costs less than the search's misses on it.
    let page: &[u8] = store.page_mut(leaf)?;
    let n = count(page);
    match leaf_search(page, key, value_size) {
        Ok(i) => {
            let at = leaf_at(i, value_size) + 8;
            store.page_mut(leaf)?[at..at + value_size].copy_from_slice(value);
            return Ok(true);
        }
        Err(i) if n < leaf_capacity(value_size) => {
            put_entry(store.page_mut(leaf)?, n, i, key, value);
            if i == n && is_rightmost(store, &path)? {
                *hint = Some(AppendHint { leaf });
            }
        }
        Err(i) => {
            // Full: split. An insert past the last key keeps the left leaf full (sequential
            // keys fill leaves completely); otherwise half and half.
            let split = if i == n { n } else { n / 2 };
            let right = new_leaf(store, value_size)?;
            let moved =
                store.page(leaf)?[leaf_at(split, value_size)..leaf_at(n, value_size)].to_vec();
            {
                let page = store.page_mut(right)?;
                page[PAGE_HEADER_SIZE_BYTES..PAGE_HEADER_SIZE_BYTES + moved.len()]
                    .copy_from_slice(&moved);
                set_count(page, n - split);
            }
            set_count(store.page_mut(leaf)?, split);
            let (target, at_index) = if i >= split {
                (right, i - split)
            } else {
                (leaf, i)
            };
            let target_n = count(store.page(target)?);
            put_entry(store.page_mut(target)?, target_n, at_index, key, value);
            let separator = leaf_key(store.page(right)?, 0, value_size);
            insert_separator(store, tree, path, separator, right)?;
        }
    }
    tree.entry_count += 1;
    Ok(false)
}

/// Whether `path` took the last child at every branch.
fn is_rightmost<S: PageStore>(store: &S, path: &[(u64, usize)]) -> Result<bool> {
    for &(branch, c) in path {
        if c != count(store.page(branch)?) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Puts `(key, value)` at entry `i` of a leaf of `n` entries that has room.
fn put_entry(page: &mut [u8], n: usize, i: usize, key: u64, value: &[u8]) {
    let value_size = value.len();
    let at = leaf_at(i, value_size);
    page.copy_within(at..leaf_at(n, value_size), at + 8 + value_size);
    put_u64(page, at, key);
    page[at + 8..at + 8 + value_size].copy_from_slice(value);
    set_count(page, n + 1);
}

/// Inserts `(separator, right)` after the child taken at the end of `path`, splitting
/// branches up to a new root as needed.
fn insert_separator<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    mut path: Path,
    mut separator: u64,
    mut right: u64,
) -> Result<()> {
    while let Some((branch, c)) = path.pop() {
        let n = count(store.page(branch)?);
        // Pairs (key, child) after child 0; the new pair goes at pair index c.
        let mut pairs: Vec<(u64, u64)> = {
            let page = store.page(branch)?;
            (0..n)
                .map(|i| (branch_key(page, i), branch_child(page, i + 1)))
                .collect()
        };
        pairs.insert(c, (separator, right));
        if pairs.len() <= BRANCH_CAPACITY {
            write_pairs(store.page_mut(branch)?, &pairs);
            return Ok(());
        }
        // Split: the middle key moves up; its child becomes the new branch's child 0.
        let mid = pairs.len() / 2;
        let (up_key, up_child) = pairs[mid];
        let new_branch = store.allocate(1, PageKind::FixedBranch)?;
        {
            let page = store.page_mut(new_branch)?;
            put_u64(page, PAGE_HEADER_SIZE_BYTES, up_child);
            write_pairs(page, &pairs[mid + 1..]);
        }
        write_pairs(store.page_mut(branch)?, &pairs[..mid]);
        separator = up_key;
        right = new_branch;
    }
    // The root split: a new root above it.
    let root = store.allocate(1, PageKind::FixedBranch)?;
    let page = store.page_mut(root)?;
    put_u64(page, PAGE_HEADER_SIZE_BYTES, tree.root_page);
    write_pairs(page, &[(separator, right)]);
    tree.root_page = root;
    Ok(())
}

fn write_pairs(page: &mut [u8], pairs: &[(u64, u64)]) {
    for (i, &(key, child)) in pairs.iter().enumerate() {
        let at = PAGE_HEADER_SIZE_BYTES + 8 + 16 * i;
        put_u64(page, at, key);
        put_u64(page, at + 8, child);
    }
    set_count(page, pairs.len());
}

/// Removes `key`; returns true if it was there.
///
/// # Errors
/// Scratch full, corruption.
pub fn remove<S: PageStore>(store: &mut S, tree: &mut TreeHeader, key: u64) -> Result<bool> {
    let value_size = value_size_of(tree);
    let entry_size = 8 + value_size;
    let (mut path, leaf) = descend(store, tree, key)?;
    let page = store.page(leaf)?;
    let n = count(page);
    let Ok(i) = leaf_search(page, key, value_size) else {
        return Ok(false);
    };
    let page = store.page_mut(leaf)?;
    let at = leaf_at(i, value_size);
    page.copy_within(at + entry_size..leaf_at(n, value_size), at);
    set_count(page, n - 1);
    tree.entry_count -= 1;
    // An emptied node leaves its parent (which may empty in turn); the root stays.
    let mut emptied = (n == 1).then_some(leaf);
    while let Some(node) = emptied.take() {
        let Some((branch, c)) = path.pop() else {
            // The root: an empty leaf is an empty tree; an emptied branch gives way to one.
            if node != leaf {
                store.free(node, 1);
                tree.root_page = new_leaf(store, value_size)?;
            }
            break;
        };
        store.free(node, 1);
        let bn = count(store.page(branch)?);
        if bn == 0 {
            emptied = Some(branch); // its only child went
            continue;
        }
        let page = store.page(branch)?;
        let mut children: Vec<u64> = (0..=bn).map(|k| branch_child(page, k)).collect();
        let mut keys: Vec<u64> = (0..bn).map(|k| branch_key(page, k)).collect();
        children.remove(c);
        keys.remove(c.saturating_sub(1));
        let page = store.page_mut(branch)?;
        put_u64(page, PAGE_HEADER_SIZE_BYTES, children[0]);
        let pairs: Vec<(u64, u64)> = keys
            .into_iter()
            .zip(children[1..].iter().copied())
            .collect();
        write_pairs(page, &pairs);
    }
    // A root branch with one child gives way to it.
    loop {
        let page = store.page(tree.root_page)?;
        if validate(page, tree.root_page, value_size)? || count(page) > 0 {
            break;
        }
        let child = branch_child(page, 0);
        store.free(tree.root_page, 1);
        tree.root_page = child;
    }
    Ok(true)
}

/// Frees every page of the tree.
///
/// # Errors
/// Corruption.
pub fn drop_tree<S: PageStore>(store: &mut S, tree: &TreeHeader) -> Result<()> {
    let value_size = value_size_of(tree);
    let mut stack = vec![(tree.root_page, 0usize)];
    while let Some((page_number, depth)) = stack.pop() {
        if depth > DEPTH_MAX {
            return Err(corrupt(
                page_number,
                "tree deeper than any valid tree (cycle?)",
            ));
        }
        let page = store.page(page_number)?;
        if !validate(page, page_number, value_size)? {
            for c in 0..=count(page) {
                stack.push((branch_child(page, c), depth + 1));
            }
        }
        store.free(page_number, 1);
    }
    Ok(())
}
