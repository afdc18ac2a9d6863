//! Fixed-size trees: `u64` keys in numeric order, every value the same size (0 to
//! [`FIXED_VALUE_SIZE_MAX_BYTES`]) chosen when the tree is made.
//!
//! Entries have no lengths, so a leaf of 16-byte values holds 340 entries (313 slotted)
//! where a B+tree leaf holds about 200 of the same keys, and a lookup is a binary search
//! over an array. Pages (little-endian, after the 32-byte page header):
//! - packed leaf (kind 7): `count` entries of `key u64, value [value_size]`, keys
//!   ascending; the header's aux field holds the value size;
//! - slotted leaf (kind 10): the same entries in any order, and below the page's end a
//!   slot array of `count` u16 entry numbers in key order (slot `i` at `page size - 2(i+1)`);
//! - branch (kind 8): `child0 u64`, then `count` pairs `key u64, child u64`; keys ascending,
//!   child `i` holds the keys in `[key i, key i+1)` (child 0: below key 0).
//!
//! Why two leaf layouts: an insert into a packed leaf shifts every entry after it, so
//! half the leaf changes and the page's journal diff is kilobytes; in a slotted leaf it
//! moves 2-byte slots. Increasing keys shift nothing, so appends keep a leaf packed and
//! full (the append path of time series); the first insert before a leaf's end makes it
//! slotted, which only writes the slot array. Splits write packed halves.
//!
//! Inserts split full nodes (an insert past a leaf's last key splits it at that key, so
//! increasing keys fill leaves completely). Removes free a node that becomes empty and take
//! it out of its parent; a root branch with one child gives way to that child. Nodes are
//! not merged otherwise, so every leaf stays at one depth.

pub mod embedded;
pub(crate) mod write;

pub use embedded::Embedded;

use crate::btree::{DEPTH_MAX, PageSource};
use crate::error::Result;
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use crate::page::{
    OFFSET_AUX, OFFSET_ENTRY_COUNT, OFFSET_KIND, PageKind, corrupt, get_u16, get_u64,
};
use std::ops::{Bound, RangeBounds};

/// Largest value of a fixed-size tree (four entries still fit in a leaf).
pub const FIXED_VALUE_SIZE_MAX_BYTES: usize = 1024;

const BODY_BYTES: usize = PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES;
/// Separators a branch holds.
pub(crate) const BRANCH_CAPACITY: usize = (BODY_BYTES - 8) / 16;

/// Entries a packed leaf of `value_size`-byte values holds.
pub(crate) fn leaf_capacity(value_size: usize) -> usize {
    BODY_BYTES / (8 + value_size)
}

/// Entries a slotted leaf of `value_size`-byte values holds (each also takes a 2-byte slot).
pub(crate) fn slotted_capacity(value_size: usize) -> usize {
    BODY_BYTES / (8 + 2 + value_size)
}

/// Whether a leaf is slotted (kind 10) rather than packed (kind 7).
#[inline(always)]
pub(crate) fn is_slotted(page: &[u8]) -> bool {
    page[OFFSET_KIND] == PageKind::FixedLeafSlotted as u8
}

/// Entries the leaf `page` holds at most, by its layout.
#[inline]
pub(crate) fn capacity_of(page: &[u8], value_size: usize) -> usize {
    if is_slotted(page) {
        slotted_capacity(value_size)
    } else {
        leaf_capacity(value_size)
    }
}

/// Whether leaf `page` of `n` entries takes a key at place `i` without a split: a slotted
/// leaf below its capacity, a packed one at its end, or a packed one that can take a slot
/// array (slotted capacity is the smaller).
#[inline]
pub(crate) fn has_room(page: &[u8], n: usize, i: usize, value_size: usize) -> bool {
    n < slotted_capacity(value_size) || (i == n && n < capacity_of(page, value_size))
}

/// Whether the slots of slotted leaf `page` name each entry number `0..count` exactly once.
pub(crate) fn slots_name_each_entry_once(page: &[u8]) -> bool {
    let n = count(page);
    let mut named = vec![false; n];
    (0..n).all(|i| {
        let e = usize::from(get_u16(page, slot_at(i)));
        e < n && !std::mem::replace(&mut named[e], true)
    })
}

/// Offset of slot `i` (the entry number of the `i`th key) in a slotted leaf.
#[inline(always)]
pub(crate) fn slot_at(i: usize) -> usize {
    PAGE_SIZE_BYTES - 2 * (i + 1)
}

const _: () = assert!(BODY_BYTES / (8 + FIXED_VALUE_SIZE_MAX_BYTES) >= 4);

/// Entries in a node (leaf entries or branch separators).
#[inline]
pub(crate) fn count(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_ENTRY_COUNT))
}

/// Checks a node's kind, count and (for a leaf) value size; returns whether it is a leaf.
///
/// # Errors
/// [`crate::Error::Corruption`] naming the page.
pub(crate) fn validate(page: &[u8], page_number: u64, value_size: usize) -> Result<bool> {
    let kind = crate::page::kind(page, page_number)?;
    let n = count(page);
    match kind {
        PageKind::FixedLeaf | PageKind::FixedLeafSlotted => {
            if get_u64(page, OFFSET_AUX) != value_size as u64 {
                return Err(corrupt(page_number, "leaf of another value size"));
            }
            if n > capacity_of(page, value_size) {
                return Err(corrupt(page_number, "leaf count beyond capacity"));
            }
            Ok(true)
        }
        PageKind::FixedBranch => {
            if n > BRANCH_CAPACITY {
                return Err(corrupt(page_number, "branch count beyond capacity"));
            }
            Ok(false)
        }
        _ => Err(corrupt(page_number, "expected a fixed-size tree node")),
    }
}

/// Offset of entry number `e` (its place in the page, not in key order).
#[inline(always)]
pub(crate) fn entry_at(e: usize, value_size: usize) -> usize {
    PAGE_HEADER_SIZE_BYTES + e * (8 + value_size)
}

/// Offset of the entry with the `i`th key of a leaf (`i` below its count).
#[inline(always)]
pub(crate) fn leaf_at(page: &[u8], i: usize, value_size: usize) -> usize {
    if is_slotted(page) {
        slotted_leaf_at(page, i, value_size)
    } else {
        entry_at(i, value_size)
    }
}

/// [`leaf_at`] for a leaf known to be slotted: the entry slot `i` names.
#[inline(always)]
fn slotted_leaf_at(page: &[u8], i: usize, value_size: usize) -> usize {
    let e = usize::from(get_u16(page, slot_at(i)));
    // A damaged slot reads inside the page, not past it; the integrity check names it.
    entry_at(e, value_size).min(PAGE_SIZE_BYTES - 8 - value_size)
}

/// Key `i` of a leaf.
#[inline]
pub(crate) fn leaf_key(page: &[u8], i: usize, value_size: usize) -> u64 {
    get_u64(page, leaf_at(page, i, value_size))
}

/// Value `i` of a leaf.
#[inline]
pub(crate) fn leaf_value(page: &[u8], i: usize, value_size: usize) -> &[u8] {
    let at = leaf_at(page, i, value_size) + 8;
    &page[at..at + value_size]
}

/// The entries of a leaf with the keys numbered `keys` (below its count), in key order,
/// packed back to back.
pub(crate) fn leaf_entries(
    page: &[u8],
    keys: std::ops::Range<usize>,
    value_size: usize,
) -> Vec<u8> {
    if !is_slotted(page) {
        return page[entry_at(keys.start, value_size)..entry_at(keys.end, value_size)].to_vec();
    }
    let mut out = Vec::with_capacity(keys.len() * (8 + value_size));
    for i in keys {
        let at = leaf_at(page, i, value_size);
        out.extend_from_slice(&page[at..at + 8 + value_size]);
    }
    out
}

/// Separator `i` of a branch.
#[inline]
pub(crate) fn branch_key(page: &[u8], i: usize) -> u64 {
    get_u64(page, PAGE_HEADER_SIZE_BYTES + 8 + 16 * i)
}

/// Child `c` (0..=count) of a branch.
#[inline]
pub(crate) fn branch_child(page: &[u8], c: usize) -> u64 {
    if c == 0 {
        get_u64(page, PAGE_HEADER_SIZE_BYTES)
    } else {
        get_u64(page, PAGE_HEADER_SIZE_BYTES + 16 * c)
    }
}

/// Position of `key` in a leaf: `Ok(i)` found, `Err(i)` where it would go.
pub(crate) fn leaf_search(
    page: &[u8],
    key: u64,
    value_size: usize,
) -> std::result::Result<usize, usize> {
    let n = count(page);
    if !is_slotted(page) {
        let key_at = |i| get_u64(page, entry_at(i, value_size));
        return search(n, key, key_at, |i| {
            crate::page::prefetch_at(page, entry_at(i, value_size));
        });
    }
    if n > 0 {
        // Every probe reads its slot first, and the slots are a few lines at the page's
        // end: asked for at once, the probes wait on their entries alone.
        crate::page::prefetch(&page[slot_at(n - 1)..]);
    }
    let at = |i| slotted_leaf_at(page, i, value_size);
    search(
        n,
        key,
        |i| get_u64(page, at(i)),
        |i| {
            crate::page::prefetch_at(page, at(i));
        },
    )
}

/// The child of a branch whose range holds `key`.
pub(crate) fn branch_search(page: &[u8], key: u64) -> usize {
    // Children: number of separators <= key.
    match search(count(page), key, |i| branch_key(page, i), |_| {}) {
        Ok(i) => i + 1,
        Err(i) => i,
    }
}

/// Binary search of `n` ascending keys read by `key_at`: `Ok(i)` where key `i` is `key`,
/// else `Err(i)` where it would go. Without a branch on the comparison: random keys make
/// each one a coin flip, and a mispredicted branch costs more than the select. While it
/// waits on a probe, `hint` is told the keys it may probe in its next two steps, so their
/// loads have started before they are needed (without the branch, nothing speculates
/// ahead).
#[inline(always)]
fn search(
    n: usize,
    key: u64,
    key_at: impl Fn(usize) -> u64,
    hint: impl Fn(usize),
) -> std::result::Result<usize, usize> {
    if n == 0 {
        return Err(0);
    }
    // The last key at or below `key` (if any is) is at `base..base + size`.
    let (mut base, mut size) = (0, n);
    while size > 1 {
        let half = size / 2;
        let mid = base + half;
        if size > crate::page::HINTED_SEARCH_MIN_ENTRIES {
            // The keys the next two steps may probe: the next step's were hinted by the
            // step before this one, except on the first.
            let next_size = size - half;
            let next_half = next_size / 2;
            let after_half = (next_size - next_half) / 2;
            for b in [base, mid] {
                if size == n {
                    hint(b + next_half);
                }
                hint(b + after_half);
                hint(b + next_half + after_half);
            }
        }
        base = std::hint::select_unpredictable(key_at(mid) <= key, mid, base);
        size -= half;
    }
    let found = key_at(base);
    if found == key {
        Ok(base)
    } else {
        Err(base + usize::from(found < key))
    }
}

/// The value of `key` in the tree rooted at `root_page`.
///
/// # Errors
/// [`crate::Error::Corruption`] for damaged pages.
pub fn get<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    value_size: usize,
    key: u64,
) -> Result<Option<&'a [u8]>> {
    let mut page_number = root_page;
    for _ in 0..DEPTH_MAX {
        let page = src.page(page_number)?;
        if validate(page, page_number, value_size)? {
            return Ok(leaf_search(page, key, value_size)
                .ok()
                .map(|i| leaf_value(page, i, value_size)));
        }
        page_number = branch_child(page, branch_search(page, key));
    }
    Err(corrupt(
        root_page,
        "tree deeper than any valid tree (cycle?)",
    ))
}

/// Where a fixed-size tree's entries are: in pages, or embedded in its parent's entry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FixedRoot<'a> {
    Pages { root_page: u64, value_size: usize },
    Embedded(Embedded<'a>),
}

impl<'a> FixedRoot<'a> {
    /// The value of `key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn get<S: PageSource<'a>>(self, src: S, key: u64) -> Result<Option<&'a [u8]>> {
        match self {
            FixedRoot::Pages {
                root_page,
                value_size,
            } => get(src, root_page, value_size, key),
            FixedRoot::Embedded(tree) => Ok(tree.get(key)),
        }
    }

    /// Entries in `range`, upwards or (`reverse`) downwards.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn range<S: PageSource<'a>>(
        self,
        src: S,
        range: impl RangeBounds<u64>,
        reverse: bool,
    ) -> Result<FixedRange<'a, S>> {
        match self {
            FixedRoot::Pages {
                root_page,
                value_size,
            } if reverse => FixedRange::new_rev(src, root_page, value_size, range),
            FixedRoot::Pages {
                root_page,
                value_size,
            } => FixedRange::new(src, root_page, value_size, range),
            FixedRoot::Embedded(tree) => Ok(FixedRange::embedded(src, tree, range, reverse)),
        }
    }

    /// The entry with the largest key.
    ///
    /// # Errors
    /// Corruption.
    pub fn last<S: PageSource<'a>>(self, src: S) -> Result<Option<(u64, &'a [u8])>> {
        match self {
            FixedRoot::Pages {
                root_page,
                value_size,
            } => last(src, root_page, value_size),
            FixedRoot::Embedded(tree) => Ok(tree
                .len()
                .checked_sub(1)
                .map(|i| (tree.key(i), tree.value(i)))),
        }
    }
}

/// Entries of a fixed-size tree in a key range, in order (or in reverse order, from
/// [`FixedRange::new_rev`]).
pub struct FixedRange<'a, S: PageSource<'a>> {
    src: S,
    value_size: usize,
    /// Path from the root: (page, whether a leaf, position). Forward: the next child or
    /// entry index. Reverse: one past it (0 = this node is done).
    stack: Vec<(&'a [u8], bool, usize)>,
    /// The bound iteration stops at (the end forward, the start in reverse).
    stop: Bound<u64>,
    reverse: bool,
    done: bool,
    /// An embedded tree iterated instead of pages, and the position in it (forward: the
    /// next entry; reverse: one past it).
    embedded: Option<(Embedded<'a>, usize)>,
}

impl<'a, S: PageSource<'a>> FixedRange<'a, S> {
    /// Positions at the first key in `range`.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn new(
        src: S,
        root_page: u64,
        value_size: usize,
        range: impl RangeBounds<u64>,
    ) -> Result<FixedRange<'a, S>> {
        let start = match range.start_bound() {
            Bound::Included(&k) => Some(k),
            Bound::Excluded(&k) => k.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        Self::positioned(
            src,
            root_page,
            value_size,
            start,
            range.end_bound().cloned(),
            false,
        )
    }

    /// Positions at the last key in `range`, to iterate downwards.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn new_rev(
        src: S,
        root_page: u64,
        value_size: usize,
        range: impl RangeBounds<u64>,
    ) -> Result<FixedRange<'a, S>> {
        let end = match range.end_bound() {
            Bound::Included(&k) => Some(k),
            Bound::Excluded(&k) => k.checked_sub(1),
            Bound::Unbounded => Some(u64::MAX),
        };
        Self::positioned(
            src,
            root_page,
            value_size,
            end,
            range.start_bound().cloned(),
            true,
        )
    }

    fn positioned(
        src: S,
        root_page: u64,
        value_size: usize,
        from: Option<u64>,
        stop: Bound<u64>,
        reverse: bool,
    ) -> Result<FixedRange<'a, S>> {
        let mut out = FixedRange {
            src,
            value_size,
            stack: Vec::new(),
            stop,
            reverse,
            done: from.is_none(),
            embedded: None,
        };
        let Some(from) = from else {
            return Ok(out);
        };
        let mut page_number = root_page;
        for _ in 0..DEPTH_MAX {
            let page = src.page(page_number)?;
            if validate(page, page_number, value_size)? {
                let i = match leaf_search(page, from, value_size) {
                    Ok(i) if reverse => i + 1,
                    Ok(i) | Err(i) => i,
                };
                out.stack.push((page, true, i));
                return Ok(out);
            }
            let c = branch_search(page, from);
            // Forward: the next child to visit is c + 1; reverse: c (one past c - 1).
            out.stack
                .push((page, false, if reverse { c } else { c + 1 }));
            page_number = branch_child(page, c);
        }
        Err(corrupt(
            root_page,
            "tree deeper than any valid tree (cycle?)",
        ))
    }

    /// The entries of an embedded tree in `range`, upwards or (`reverse`) downwards.
    pub fn embedded(
        src: S,
        tree: Embedded<'a>,
        range: impl RangeBounds<u64>,
        reverse: bool,
    ) -> FixedRange<'a, S> {
        let (from, stop) = if reverse {
            let end = match range.end_bound() {
                Bound::Included(&k) => tree.search(k).map_or_else(|i| i, |i| i + 1),
                Bound::Excluded(&k) => tree.search(k).unwrap_or_else(|i| i),
                Bound::Unbounded => tree.len(),
            };
            (end, range.start_bound().cloned())
        } else {
            let start = match range.start_bound() {
                Bound::Included(&k) => tree.search(k).unwrap_or_else(|i| i),
                Bound::Excluded(&k) => tree.search(k).map_or_else(|i| i, |i| i + 1),
                Bound::Unbounded => 0,
            };
            (start, range.end_bound().cloned())
        };
        FixedRange {
            src,
            value_size: tree.value_size(),
            stack: Vec::new(),
            stop,
            reverse,
            done: false,
            embedded: Some((tree, from)),
        }
    }

    fn advance(&mut self) -> Result<Option<(u64, &'a [u8])>> {
        if let Some((tree, at)) = &mut self.embedded {
            let next = if self.reverse {
                (*at > 0).then(|| {
                    *at -= 1;
                    *at
                })
            } else if *at < tree.len() {
                *at += 1;
                Some(*at - 1)
            } else {
                None
            };
            return Ok(next.map(|i| (tree.key(i), tree.value(i))));
        }
        loop {
            let Some(&mut (page, leaf, ref mut i)) = self.stack.last_mut() else {
                return Ok(None);
            };
            let n = count(page);
            let next = if self.reverse {
                (*i > 0).then(|| {
                    *i -= 1;
                    *i
                })
            } else if *i < n + usize::from(!leaf) {
                *i += 1;
                Some(*i - 1)
            } else {
                None
            };
            let Some(at) = next else {
                self.stack.pop();
                continue;
            };
            if leaf {
                return Ok(Some((
                    leaf_key(page, at, self.value_size),
                    leaf_value(page, at, self.value_size),
                )));
            }
            let child = branch_child(page, at);
            if self.stack.len() > DEPTH_MAX {
                return Err(corrupt(child, "tree deeper than any valid tree (cycle?)"));
            }
            let child_page = self.src.page(child)?;
            let child_leaf = validate(child_page, child, self.value_size)?;
            let start = if self.reverse {
                count(child_page) + usize::from(!child_leaf)
            } else {
                0
            };
            self.stack.push((child_page, child_leaf, start));
        }
    }
}

impl<'a, S: PageSource<'a>> Iterator for FixedRange<'a, S> {
    type Item = Result<(u64, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some((key, value))) => {
                let inside = match (self.stop, self.reverse) {
                    (Bound::Included(stop), false) => key <= stop,
                    (Bound::Excluded(stop), false) => key < stop,
                    (Bound::Included(stop), true) => key >= stop,
                    (Bound::Excluded(stop), true) => key > stop,
                    (Bound::Unbounded, _) => true,
                };
                if inside {
                    Some(Ok((key, value)))
                } else {
                    self.done = true;
                    None
                }
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The entry with the largest key.
///
/// # Errors
/// Corruption.
pub fn last<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    value_size: usize,
) -> Result<Option<(u64, &'a [u8])>> {
    let mut page_number = root_page;
    for _ in 0..DEPTH_MAX {
        let page = src.page(page_number)?;
        if validate(page, page_number, value_size)? {
            let n = count(page);
            return Ok((n > 0).then(|| {
                (
                    leaf_key(page, n - 1, value_size),
                    leaf_value(page, n - 1, value_size),
                )
            }));
        }
        page_number = branch_child(page, count(page));
    }
    Err(corrupt(
        root_page,
        "tree deeper than any valid tree (cycle?)",
    ))
}

#[cfg(test)]
mod tests {
    use super::search;
    use proptest::prelude::*;

    proptest! {
        /// The branchless search agrees with the standard library's on every key: present,
        /// between two, below the first and above the last.
        #[test]
        fn search_agrees_with_the_slice_binary_search(
            keys in proptest::collection::btree_set(0u64..1_000, 0..400),
            probe in 0u64..1_001,
        ) {
            let keys: Vec<u64> = keys.into_iter().collect();
            let found = search(keys.len(), probe, |i| keys[i], |i| assert!(i < keys.len()));
            prop_assert_eq!(found, keys.binary_search(&probe));
        }
    }
}
