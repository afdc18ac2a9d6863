//! Slotted B+tree node pages.
//!
//! After the 32-byte page header comes an array of `u16` slot offsets (sorted by key),
//! growing up; entry bodies grow down from the page end. Bytes between `free_lower` and
//! `free_upper` are free; deleted bodies leave holes that [`compact`] reclaims.
//!
//! Leaf entry: `key_len u16 | kind u8 | ...`
//! - kind 0 (inline): `value_len u32 | key | value`
//! - kind 1 (overflow): `value_len u64 | first_page u64 | key`
//! - kind 2 (nested tree): as kind 0, the value being the nested tree's 24-byte stored
//!   header (`TreeHeader`)
//! - kind 3 (embedded fixed-size tree): as kind 0, the value being the tree itself
//!   (`crate::fixed::embedded`)
//!
//! Branch entry: `key_len u16 | child u64 | key`; the page's `aux` word is the leftmost
//! child. Entry `i` holds the separator `key_i`: keys `>= key_i` (and below `key_{i+1}`) live
//! under its child; keys below `key_0` live under the leftmost child.
//!
//! Every accessor validates offsets against the page, so a corrupt (or hostile) page yields
//! `Err(Corruption)`, never a panic or an out-of-bounds read.

use crate::error::Result;
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use crate::page::{
    OFFSET_AUX, OFFSET_ENTRY_COUNT, OFFSET_FREE_LOWER, OFFSET_FREE_UPPER, PageKind, corrupt,
    get_u16, get_u32, get_u64, put_u16, put_u32, put_u64,
};
use std::cmp::Ordering;

/// Leaf entry kind: value stored in the node.
pub const VALUE_INLINE: u8 = 0;
/// Leaf entry kind: value stored in an overflow run.
pub const VALUE_OVERFLOW: u8 = 1;
/// Leaf entry kind: a nested tree, its stored header inline.
pub const VALUE_TREE: u8 = 2;
/// Leaf entry kind: a small fixed-size tree, inline whole.
pub const VALUE_EMBEDDED: u8 = 3;
/// Bytes of a slot.
pub const SLOT_BYTES: usize = 2;
/// Header bytes of an inline leaf entry.
pub const LEAF_INLINE_HEADER_BYTES: usize = 7;
/// Bytes of an overflow leaf entry besides the key.
pub const LEAF_OVERFLOW_HEADER_BYTES: usize = 19;
/// Header bytes of a branch entry.
pub const BRANCH_HEADER_BYTES: usize = 10;
/// Room for slots and bodies in one node.
pub const NODE_CAPACITY_BYTES: usize = PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES;

/// A leaf value as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    /// The bytes, inside the node.
    Inline(&'a [u8]),
    /// A run of pages starting at `first_page` holding `len_bytes` bytes.
    Overflow { first_page: u64, len_bytes: u64 },
    /// A nested tree: its stored header, inside the node.
    Tree(&'a [u8]),
    /// A nested fixed-size tree small enough to live inside the node.
    Embedded(&'a [u8]),
}

impl ValueRef<'_> {
    /// Whether the entry holds a nested tree (in pages or embedded) rather than a value.
    pub fn is_tree(&self) -> bool {
        matches!(self, ValueRef::Tree(_) | ValueRef::Embedded(_))
    }

    /// The leaf entry kind byte.
    fn kind(&self) -> u8 {
        match self {
            ValueRef::Inline(_) => VALUE_INLINE,
            ValueRef::Overflow { .. } => VALUE_OVERFLOW,
            ValueRef::Tree(_) => VALUE_TREE,
            ValueRef::Embedded(_) => VALUE_EMBEDDED,
        }
    }
}

/// Bytes a leaf entry takes in a node, slot included.
pub fn leaf_entry_size(key_len: usize, value: &ValueRef<'_>) -> usize {
    SLOT_BYTES
        + match value {
            ValueRef::Inline(v) | ValueRef::Tree(v) | ValueRef::Embedded(v) => {
                LEAF_INLINE_HEADER_BYTES + key_len + v.len()
            }
            ValueRef::Overflow { .. } => LEAF_OVERFLOW_HEADER_BYTES + key_len,
        }
}

/// Bytes a branch entry takes in a node, slot included.
pub fn branch_entry_size(key_len: usize) -> usize {
    SLOT_BYTES + BRANCH_HEADER_BYTES + key_len
}

/// Number of entries.
#[inline]
pub fn count(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_ENTRY_COUNT))
}

/// Contiguous free bytes.
pub fn free_bytes(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_FREE_UPPER))
        .saturating_sub(usize::from(get_u16(page, OFFSET_FREE_LOWER)))
}

/// The leftmost child of a branch.
#[inline]
pub fn leftmost_child(page: &[u8]) -> u64 {
    get_u64(page, OFFSET_AUX)
}

/// Sets the leftmost child of a branch.
pub fn set_leftmost_child(page: &mut [u8], child: u64) {
    put_u64(page, OFFSET_AUX, child);
}

/// Validates the header fields every accessor relies on.
pub fn validate_header(page: &[u8], page_number: u64) -> Result<()> {
    let n = count(page);
    let lower = usize::from(get_u16(page, OFFSET_FREE_LOWER));
    let upper = usize::from(get_u16(page, OFFSET_FREE_UPPER));
    if lower != PAGE_HEADER_SIZE_BYTES + n * SLOT_BYTES || upper < lower || upper > PAGE_SIZE_BYTES
    {
        return Err(corrupt(page_number, "node header inconsistent"));
    }
    Ok(())
}

// Always inlined, with `range` and `key`: the binary search calls them once per probe, and
// with more callers of `search` the compiler stopped inlining them on its own (point
// reads lost 12-15%).
#[inline(always)]
fn slot(page: &[u8], i: usize, page_number: u64) -> Result<usize> {
    let at = PAGE_HEADER_SIZE_BYTES + i * SLOT_BYTES;
    if i >= count(page) || at + SLOT_BYTES > PAGE_SIZE_BYTES {
        return Err(corrupt(page_number, "slot index out of range"));
    }
    let offset = usize::from(get_u16(page, at));
    if !(PAGE_HEADER_SIZE_BYTES..PAGE_SIZE_BYTES).contains(&offset) {
        return Err(corrupt(page_number, "slot points outside the node"));
    }
    Ok(offset)
}

#[inline(always)]
fn range(page_number: u64, start: usize, len: usize) -> Result<std::ops::Range<usize>> {
    match start.checked_add(len) {
        Some(end) if end <= PAGE_SIZE_BYTES => Ok(start..end),
        _ => Err(corrupt(page_number, "entry runs past the node")),
    }
}

/// The key of entry `i` (leaf or branch).
#[inline(always)]
pub fn key(page: &[u8], i: usize, leaf: bool, page_number: u64) -> Result<&[u8]> {
    let at = slot(page, i, page_number)?;
    let head = range(page_number, at, 2)?;
    let key_len = usize::from(get_u16(page, head.start));
    let key_at = if leaf {
        let kind_at = range(page_number, at + 2, 1)?.start;
        match page[kind_at] {
            VALUE_INLINE | VALUE_TREE | VALUE_EMBEDDED => at + LEAF_INLINE_HEADER_BYTES,
            VALUE_OVERFLOW => at + LEAF_OVERFLOW_HEADER_BYTES,
            _ => return Err(corrupt(page_number, "unknown leaf entry kind")),
        }
    } else {
        at + BRANCH_HEADER_BYTES
    };
    Ok(&page[range(page_number, key_at, key_len)?])
}

/// Key and value of leaf entry `i` when it holds an inline value and every offset is
/// within the node; `None` for anything else, which [`leaf_entry`] then reads (and
/// reports, if damaged). The scan's fast path: no `Result` to build or move.
#[inline]
pub(crate) fn leaf_inline_entry(page: &[u8], i: usize) -> Option<(&[u8], &[u8])> {
    let page = page.get(..PAGE_SIZE_BYTES)?;
    if i >= count(page) {
        return None;
    }
    let slot_at = PAGE_HEADER_SIZE_BYTES + i * SLOT_BYTES;
    let at = usize::from(get_u16(page.get(..slot_at + SLOT_BYTES)?, slot_at));
    if at < PAGE_HEADER_SIZE_BYTES {
        return None;
    }
    let header = page.get(at..at + LEAF_INLINE_HEADER_BYTES)?;
    if header[2] != VALUE_INLINE {
        return None;
    }
    let key_len = usize::from(get_u16(header, 0));
    let value_len = get_u32(header, 3) as usize;
    let key_at = at + LEAF_INLINE_HEADER_BYTES;
    let value_at = key_at + key_len;
    Some((
        page.get(key_at..value_at)?,
        page.get(value_at..value_at.checked_add(value_len)?)?,
    ))
}

/// Key and value of leaf entry `i`.
pub fn leaf_entry(page: &[u8], i: usize, page_number: u64) -> Result<(&[u8], ValueRef<'_>)> {
    let at = slot(page, i, page_number)?;
    range(page_number, at, LEAF_INLINE_HEADER_BYTES)?;
    let key_len = usize::from(get_u16(page, at));
    match page[at + 2] {
        kind @ (VALUE_INLINE | VALUE_TREE | VALUE_EMBEDDED) => {
            let value_len = get_u32(page, at + 3) as usize;
            let k = range(page_number, at + LEAF_INLINE_HEADER_BYTES, key_len)?;
            let v = range(page_number, k.end, value_len)?;
            let value = &page[v];
            let value = match kind {
                VALUE_INLINE => ValueRef::Inline(value),
                VALUE_TREE => ValueRef::Tree(value),
                _ => ValueRef::Embedded(value),
            };
            Ok((&page[k], value))
        }
        VALUE_OVERFLOW => {
            range(page_number, at, LEAF_OVERFLOW_HEADER_BYTES)?;
            let len_bytes = get_u64(page, at + 3);
            let first_page = get_u64(page, at + 11);
            let k = range(page_number, at + LEAF_OVERFLOW_HEADER_BYTES, key_len)?;
            Ok((
                &page[k],
                ValueRef::Overflow {
                    first_page,
                    len_bytes,
                },
            ))
        }
        _ => Err(corrupt(page_number, "unknown leaf entry kind")),
    }
}

/// Key and child of branch entry `i`.
pub fn branch_entry(page: &[u8], i: usize, page_number: u64) -> Result<(&[u8], u64)> {
    let at = slot(page, i, page_number)?;
    range(page_number, at, BRANCH_HEADER_BYTES)?;
    let key_len = usize::from(get_u16(page, at));
    let child = get_u64(page, at + 2);
    let k = range(page_number, at + BRANCH_HEADER_BYTES, key_len)?;
    Ok((&page[k], child))
}

/// Child number `c` of a branch: 0 is the leftmost, `i + 1` is entry `i`'s.
pub fn child_at(page: &[u8], c: usize, page_number: u64) -> Result<u64> {
    if c == 0 {
        Ok(leftmost_child(page))
    } else {
        Ok(branch_entry(page, c - 1, page_number)?.1)
    }
}

/// Binary search: `Ok(i)` if entry `i` has `key`, else `Err(i)` where it would go.
#[inline]
pub fn search(
    page: &[u8],
    key_wanted: &[u8],
    leaf: bool,
    page_number: u64,
) -> Result<std::result::Result<usize, usize>> {
    let (mut lo, mut hi) = (0, count(page));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // Each probe waits on a cache miss for its entry; hinting both entries the next
        // probe may read lets that miss overlap this one. Only in leaves: branches are
        // few and stay cached.
        if leaf && let Some((below, above)) = crate::page::next_probes(lo, mid, hi) {
            prefetch_entry(page, below);
            prefetch_entry(page, above);
        }
        match compare_keys(key(page, mid, leaf, page_number)?, key_wanted) {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(Ok(mid)),
        }
    }
    Ok(Err(lo))
}

/// Hints the cache line where entry `i` starts (a hint only: a bad slot hints nothing).
/// Reads the slot itself rather than through [`slot`], whose checks cost point reads 3-7%
/// when tried here: a hint needs no validation, the probe that follows does its own.
#[inline]
fn prefetch_entry(page: &[u8], i: usize) {
    let at = PAGE_HEADER_SIZE_BYTES + i * SLOT_BYTES;
    if let Some(slot) = page.get(at..at + SLOT_BYTES) {
        crate::page::prefetch_at(page, usize::from(u16::from_le_bytes([slot[0], slot[1]])));
    }
}

/// Byte-wise order of two keys, 8 bytes at a time as big-endian integers (one compare per
/// word instead of a `memcmp` call, which dominated the binary search of short keys).
#[inline]
pub(crate) fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    let common = a.len().min(b.len());
    let (mut a_rest, mut b_rest) = (&a[..common], &b[..common]);
    while let (Some((x, a_next)), Some((y, b_next))) = (
        a_rest.split_first_chunk::<8>(),
        b_rest.split_first_chunk::<8>(),
    ) {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a_rest, b_rest) = (a_next, b_next);
    }
    // Under 8 bytes left of the common part: the same count from each, so zero-padded
    // words order as the bytes do.
    let word = |bytes: &[u8]| {
        let mut w = [0u8; 8];
        w[..bytes.len()].copy_from_slice(bytes);
        u64::from_be_bytes(w)
    };
    word(a_rest).cmp(&word(b_rest)).then(a.len().cmp(&b.len()))
}

/// The child number of a branch to descend into for `key_wanted`.
#[inline]
pub fn child_index_for(page: &[u8], key_wanted: &[u8], page_number: u64) -> Result<usize> {
    Ok(match search(page, key_wanted, false, page_number)? {
        Ok(i) => i + 1,
        Err(i) => i, // entries 0..i are < key: child of entry i-1, i.e. child number i
    })
}

/// Live bytes (slots + bodies) of a node.
pub fn used_bytes(page: &[u8], leaf: bool, page_number: u64) -> Result<usize> {
    let mut total = 0;
    for i in 0..count(page) {
        total += entry_size_at(page, i, leaf, page_number)?;
    }
    Ok(total)
}

/// Size of entry `i` including its slot.
pub fn entry_size_at(page: &[u8], i: usize, leaf: bool, page_number: u64) -> Result<usize> {
    if leaf {
        let (k, v) = leaf_entry(page, i, page_number)?;
        Ok(leaf_entry_size(k.len(), &v))
    } else {
        let (k, _) = branch_entry(page, i, page_number)?;
        Ok(branch_entry_size(k.len()))
    }
}

/// Starts an empty node of `kind` (leaf or branch) in a page whose header is initialized.
pub fn init_node(page: &mut [u8]) {
    put_u16(page, OFFSET_ENTRY_COUNT, 0);
    put_u16(page, OFFSET_FREE_LOWER, PAGE_HEADER_SIZE_BYTES as u16);
    put_u16(page, OFFSET_FREE_UPPER, PAGE_SIZE_BYTES as u16);
}

/// Reserves `body_len` bytes for a new entry at slot `i`; returns the body offset.
/// The caller checked that `free_bytes >= body_len + SLOT_BYTES`.
fn reserve(page: &mut [u8], i: usize, body_len: usize) -> usize {
    let n = count(page);
    assert!(i <= n, "slot index beyond the end");
    assert!(
        free_bytes(page) >= body_len + SLOT_BYTES,
        "caller checks room first"
    );
    let upper = usize::from(get_u16(page, OFFSET_FREE_UPPER)) - body_len;
    let slots = PAGE_HEADER_SIZE_BYTES;
    page.copy_within(
        slots + i * SLOT_BYTES..slots + n * SLOT_BYTES,
        slots + (i + 1) * SLOT_BYTES,
    );
    put_u16(page, slots + i * SLOT_BYTES, upper as u16);
    put_u16(page, OFFSET_ENTRY_COUNT, (n + 1) as u16);
    put_u16(
        page,
        OFFSET_FREE_LOWER,
        (slots + (n + 1) * SLOT_BYTES) as u16,
    );
    put_u16(page, OFFSET_FREE_UPPER, upper as u16);
    upper
}

/// Where the inline value of leaf entry `i` lies in the page; `None` when the entry holds
/// an overflow value or a nested tree.
///
/// # Errors
/// [`crate::Error::Corruption`] for a damaged entry.
pub fn inline_value_range(
    page: &[u8],
    i: usize,
    page_number: u64,
) -> Result<Option<std::ops::Range<usize>>> {
    let (key, value) = leaf_entry(page, i, page_number)?;
    let ValueRef::Inline(value) = value else {
        return Ok(None);
    };
    let at = slot(page, i, page_number)? + LEAF_INLINE_HEADER_BYTES + key.len();
    Ok(Some(at..at + value.len()))
}

/// Writes `value` over the inline value of leaf entry `i` when both have the same length,
/// leaving every other byte of the page as it was (so a journal diff of the change is just
/// the value's changed bytes). Returns false, changing nothing, when entry `i` is not an
/// inline value of that length.
///
/// # Errors
/// [`crate::Error::Corruption`] for a damaged entry.
pub fn overwrite_inline_value(
    page: &mut [u8],
    i: usize,
    value: &[u8],
    page_number: u64,
) -> Result<bool> {
    match inline_value_range(page, i, page_number)? {
        Some(range) if range.len() == value.len() => {
            page[range].copy_from_slice(value);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Inserts a leaf entry at slot `i` (room checked by the caller).
pub fn insert_leaf(page: &mut [u8], i: usize, key_bytes: &[u8], value: &ValueRef<'_>) {
    let body_len = leaf_entry_size(key_bytes.len(), value) - SLOT_BYTES;
    let at = reserve(page, i, body_len);
    put_u16(page, at, key_bytes.len() as u16);
    match value {
        ValueRef::Inline(v) | ValueRef::Tree(v) | ValueRef::Embedded(v) => {
            page[at + 2] = value.kind();
            put_u32(page, at + 3, v.len() as u32);
            let k = at + LEAF_INLINE_HEADER_BYTES;
            page[k..k + key_bytes.len()].copy_from_slice(key_bytes);
            page[k + key_bytes.len()..k + key_bytes.len() + v.len()].copy_from_slice(v);
        }
        ValueRef::Overflow {
            first_page,
            len_bytes,
        } => {
            page[at + 2] = VALUE_OVERFLOW;
            put_u64(page, at + 3, *len_bytes);
            put_u64(page, at + 11, *first_page);
            let k = at + LEAF_OVERFLOW_HEADER_BYTES;
            page[k..k + key_bytes.len()].copy_from_slice(key_bytes);
        }
    }
}

/// Inserts a branch entry at slot `i` (room checked by the caller).
pub fn insert_branch(page: &mut [u8], i: usize, key_bytes: &[u8], child: u64) {
    let at = reserve(page, i, BRANCH_HEADER_BYTES + key_bytes.len());
    put_u16(page, at, key_bytes.len() as u16);
    put_u64(page, at + 2, child);
    page[at + BRANCH_HEADER_BYTES..at + BRANCH_HEADER_BYTES + key_bytes.len()]
        .copy_from_slice(key_bytes);
}

/// Sets the child of branch entry `i`.
pub fn set_branch_child(page: &mut [u8], i: usize, child: u64, page_number: u64) -> Result<()> {
    let at = slot(page, i, page_number)?;
    range(page_number, at, BRANCH_HEADER_BYTES)?;
    put_u64(page, at + 2, child);
    Ok(())
}

/// Removes entry `i`; its body becomes a hole until the next [`compact`].
pub fn remove(page: &mut [u8], i: usize) {
    let n = count(page);
    assert!(i < n, "removing a missing slot");
    let slots = PAGE_HEADER_SIZE_BYTES;
    page.copy_within(
        slots + (i + 1) * SLOT_BYTES..slots + n * SLOT_BYTES,
        slots + i * SLOT_BYTES,
    );
    put_u16(page, OFFSET_ENTRY_COUNT, (n - 1) as u16);
    put_u16(
        page,
        OFFSET_FREE_LOWER,
        (slots + (n - 1) * SLOT_BYTES) as u16,
    );
    if n == 1 {
        put_u16(page, OFFSET_FREE_UPPER, PAGE_SIZE_BYTES as u16);
    }
}

/// Rewrites the node so all free space is contiguous, entries keeping their slots.
pub fn compact(page: &mut [u8], leaf: bool, page_number: u64) -> Result<()> {
    // Bodies are copied as they are (validated by `entry_size_at`), from a copy on the
    // stack: no allocation and no re-encoding, since this runs whenever a growing value
    // finds its node fragmented.
    let mut old = [0u8; PAGE_SIZE_BYTES];
    old.copy_from_slice(&page[..PAGE_SIZE_BYTES]);
    let n = count(&old);
    let lower = PAGE_HEADER_SIZE_BYTES + n * SLOT_BYTES;
    let mut upper = PAGE_SIZE_BYTES;
    for i in 0..n {
        let body_len = entry_size_at(&old, i, leaf, page_number)? - SLOT_BYTES;
        let from = slot(&old, i, page_number)?;
        upper = upper
            .checked_sub(body_len)
            .filter(|&u| u >= lower)
            .ok_or_else(|| corrupt(page_number, "entries do not fit a node"))?;
        page[upper..upper + body_len].copy_from_slice(&old[from..from + body_len]);
        put_u16(page, PAGE_HEADER_SIZE_BYTES + i * SLOT_BYTES, upper as u16);
    }
    put_u16(page, OFFSET_FREE_UPPER, upper as u16);
    Ok(())
}

/// Copies entry `from_i` of `from` to slot `to_i` of `to` (room checked by the caller).
pub fn copy_entry(
    from: &[u8],
    from_i: usize,
    to: &mut [u8],
    to_i: usize,
    leaf: bool,
    page_number: u64,
) -> Result<()> {
    if leaf {
        let (k, v) = leaf_entry(from, from_i, page_number)?;
        if free_bytes(to) < leaf_entry_size(k.len(), &v) {
            return Err(corrupt(page_number, "entries do not fit a node"));
        }
        insert_leaf(to, to_i, k, &v);
    } else {
        let (k, child) = branch_entry(from, from_i, page_number)?;
        if free_bytes(to) < branch_entry_size(k.len()) {
            return Err(corrupt(page_number, "entries do not fit a node"));
        }
        insert_branch(to, to_i, k, child);
    }
    Ok(())
}

/// Whether `page` is a leaf (validated kind).
pub fn is_leaf(page: &[u8], page_number: u64) -> Result<bool> {
    match crate::page::kind(page, page_number)? {
        PageKind::Leaf => Ok(true),
        PageKind::Branch => Ok(false),
        _ => Err(corrupt(page_number, "expected a B+tree node")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{PageKind, init};

    fn leaf() -> Vec<u8> {
        let mut p = vec![0u8; PAGE_SIZE_BYTES];
        init(&mut p, 1, PageKind::Leaf);
        p
    }

    #[test]
    fn compare_keys_is_byte_order() {
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"abcdefh",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"0000000000001234",
            b"0000000000001235",
            b"00000000000012345",
            b"000000000000123",
            b"00000000000012\xff",
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(compare_keys(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
        // Random keys over three byte values, so prefixes, equal words and ties abound.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut random_key = || -> Vec<u8> {
            let len = (next() % 24) as usize;
            (0..len)
                .map(|_| [0u8, 1, 0xff][(next() % 3) as usize])
                .collect()
        };
        for _ in 0..100_000 {
            let (a, b) = (random_key(), random_key());
            assert_eq!(compare_keys(&a, &b), a.cmp(&b), "{a:?} {b:?}");
        }
    }

    #[test]
    fn insert_search_remove_compact() {
        let mut p = leaf();
        for (i, k) in [b"b", b"d", b"a", b"c"].iter().enumerate() {
            let pos = search(&p, *k, true, 1).expect("ok").expect_err("absent");
            insert_leaf(&mut p, pos, *k, &ValueRef::Inline(&[i as u8; 10]));
        }
        let keys: Vec<&[u8]> = (0..4).map(|i| key(&p, i, true, 1).expect("key")).collect();
        assert_eq!(keys, vec![b"a" as &[u8], b"b", b"c", b"d"]);
        assert_eq!(search(&p, b"c", true, 1).expect("ok"), Ok(2));
        let before = free_bytes(&p);
        remove(&mut p, 1);
        assert_eq!(count(&p), 3);
        assert_eq!(
            free_bytes(&p),
            before + SLOT_BYTES,
            "body stays until compaction"
        );
        compact(&mut p, true, 1).expect("compact");
        assert_eq!(
            NODE_CAPACITY_BYTES - free_bytes(&p),
            used_bytes(&p, true, 1).expect("used")
        );
        assert_eq!(leaf_entry(&p, 1, 1).expect("entry").0, b"c");
    }

    #[test]
    fn garbage_pages_never_panic() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let mut p = leaf();
            for b in p.iter_mut().skip(16) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            if validate_header(&p, 1).is_ok() {
                let _ = search(&p, b"key", true, 1);
                let _ = used_bytes(&p, true, 1);
            }
            let _ = leaf_entry(&p, 0, 1);
            let _ = branch_entry(&p, 0, 1);
        }
    }
}
