//! Tables: records (tuples of byte fields) in raw record pages, addressed by their physical
//! location, with a primary key and secondary indexes kept in the same transaction.
//!
//! A record's id is `page_number × 8192 + offset`: reading it is one page lookup, no tree
//! descent. Small records live in **record pages** (page kind 9), bump-allocated at 8-byte
//! boundaries, each page's start bitmap saying where live records begin (so any id can be
//! checked in O(1)). A record larger than [`RECORD_INLINE_MAX_BYTES`] takes an overflow run
//! of its own (id offset 0), whose value is the table's tag followed by the record.
//!
//! A table is a named tree of kind [`crate::btree::TreeKind::Table`]: its root is a small
//! B+tree holding the table's state, its schema and its nested trees:
//! - `pages`: a fixed-size tree of the record pages (value 0) and overflow runs (value
//!   [`PAGES_OVERFLOW_RUN`]), so scans go in id order;
//! - `candidates`: pages between 15% and 50% full, reused (after compaction) when the
//!   active page is full; a page below 15% has its survivors moved out and is freed
//!   (Voron's section policy, with a section of one page). A full active page at most
//!   half live is compacted and kept: its deletes left room no later release reclaims;
//! - `pk` and one tree per local index. Global indexes are named trees of their own.
//!
//! Moving a record (an update that outgrows its slot, a page compacted or emptied) changes
//! its id; every index is updated in the same transaction. This module is the layout and
//! the read side; `write` changes tables through [`crate::btree::PageStore`].

pub mod schema;
pub(crate) mod write;

pub use schema::{IndexDef, IndexKind, Schema};

use crate::btree::{self, PageSource, TreeHeader, TreeKind};
use crate::error::Result;
use crate::fixed::{self, FixedRange};
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use std::ops::Bound;

use crate::page::{
    OFFSET_AUX, OFFSET_ENTRY_COUNT, OFFSET_FREE_LOWER, PageKind, corrupt, get_u16, get_u32, get_u64,
};

/// Where a record page's start bitmap begins.
pub const BITMAP_OFFSET: usize = PAGE_HEADER_SIZE_BYTES;
/// Bytes of the start bitmap: one bit per 8-byte unit of the record area.
pub const BITMAP_BYTES: usize = 128;
/// Where records begin in a record page.
pub const RECORDS_OFFSET: usize = BITMAP_OFFSET + BITMAP_BYTES;
/// Records start at multiples of this.
pub const RECORD_ALIGN_BYTES: usize = 8;
/// Record header: body length u16, allocated bytes (header included) u16.
pub const RECORD_HEADER_BYTES: usize = 4;
/// Bytes of a record page that hold records.
pub const RECORD_AREA_BYTES: usize = PAGE_SIZE_BYTES - RECORDS_OFFSET;
/// Largest record body kept in a record page (its slot is then a quarter page); larger
/// records take an overflow run.
pub const RECORD_INLINE_MAX_BYTES: usize = 2048 - RECORD_HEADER_BYTES;
/// Bytes of the table tag that starts a record overflow run's value.
pub const OVERFLOW_TAG_BYTES: usize = 8;
/// Below this many live bytes a page's survivors move out and the page is freed.
pub const FREE_BELOW_BYTES: usize = RECORD_AREA_BYTES * 15 / 100;
/// At or below this many live bytes (and not below [`FREE_BELOW_BYTES`]) a page is a
/// candidate for reuse.
pub const REUSE_AT_OR_BELOW_BYTES: usize = RECORD_AREA_BYTES / 2;
/// The `pages` tree value of an overflow run.
pub const PAGES_OVERFLOW_RUN: u32 = u32::MAX;

const _: () = assert!(RECORD_AREA_BYTES / RECORD_ALIGN_BYTES <= BITMAP_BYTES * 8);
const _: () = assert!(RECORDS_OFFSET.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(PAGE_SIZE_BYTES <= u16::MAX as usize + 1);

/// Keys of a table's own B+tree.
pub(crate) mod keys {
    /// The table's state: tag u64, active page u64.
    pub const STATE: &[u8] = b"\x00state";
    /// The encoded schema.
    pub const SCHEMA: &[u8] = b"\x00schema";
    /// Fixed-size tree: record page (or overflow run) → live bytes u32.
    pub const PAGES: &[u8] = b"\x01pages";
    /// Fixed-size tree (no values): pages that are candidates for reuse.
    pub const CANDIDATES: &[u8] = b"\x01candidates";
    /// B+tree: primary key → record id (u64 big-endian).
    pub const PRIMARY_KEY: &[u8] = b"\x01pk";
    /// Prefix of a local index's key; the index name follows.
    pub const INDEX_PREFIX: &[u8] = b"\x02";
}

/// Bytes of the state value.
pub(crate) const STATE_BYTES: usize = 16;

/// A record's id, split: (page number, offset in the page; 0 for an overflow run).
pub fn split_id(id: u64) -> (u64, usize) {
    (
        id / PAGE_SIZE_BYTES as u64,
        (id % PAGE_SIZE_BYTES as u64) as usize,
    )
}

/// The id of the record at `offset` of `page_number`.
pub fn make_id(page_number: u64, offset: usize) -> u64 {
    page_number * PAGE_SIZE_BYTES as u64 + offset as u64
}

/// The slot size of a record body of `len` bytes.
pub fn slot_bytes(len: usize) -> usize {
    (RECORD_HEADER_BYTES + len).next_multiple_of(RECORD_ALIGN_BYTES)
}

fn bit_of(offset: usize) -> (usize, u8) {
    let unit = (offset - RECORDS_OFFSET) / RECORD_ALIGN_BYTES;
    (BITMAP_OFFSET + unit / 8, 1 << (unit % 8))
}

/// Whether a live record starts at `offset` (any offset may be asked).
pub(crate) fn is_start(page: &[u8], offset: usize) -> bool {
    if !(RECORDS_OFFSET..PAGE_SIZE_BYTES).contains(&offset)
        || !offset.is_multiple_of(RECORD_ALIGN_BYTES)
    {
        return false;
    }
    let (byte, mask) = bit_of(offset);
    page[byte] & mask != 0
}

/// Sets or clears the start bit of `offset`.
pub(crate) fn set_start(page: &mut [u8], offset: usize, live: bool) {
    debug_assert!(offset >= RECORDS_OFFSET && offset.is_multiple_of(RECORD_ALIGN_BYTES));
    let (byte, mask) = bit_of(offset);
    if live {
        page[byte] |= mask;
    } else {
        page[byte] &= !mask;
    }
}

/// The table tag a record page belongs to.
pub(crate) fn page_tag(page: &[u8]) -> u64 {
    get_u64(page, OFFSET_AUX)
}

/// Live records in a record page.
pub(crate) fn live_count(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_ENTRY_COUNT))
}

/// End of the allocated area of a record page.
pub(crate) fn bump(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_FREE_LOWER))
}

/// (body length, slot bytes) of the record at `offset`, validated against the page.
///
/// # Errors
/// [`crate::Error::Corruption`] when the header does not fit the page.
pub(crate) fn slot_at(page: &[u8], page_number: u64, offset: usize) -> Result<(usize, usize)> {
    // A damaged allocation mark may lie past the page: bound by the page too.
    let end = bump(page).min(PAGE_SIZE_BYTES);
    if offset + RECORD_HEADER_BYTES > end {
        return Err(corrupt(
            page_number,
            "record header past the allocated area",
        ));
    }
    let len = usize::from(get_u16(page, offset));
    let slot = usize::from(get_u16(page, offset + 2));
    if slot < slot_bytes(len) || slot % RECORD_ALIGN_BYTES != 0 || offset + slot > end {
        return Err(corrupt(page_number, "record slot does not fit its page"));
    }
    Ok((len, slot))
}

/// Validates a record page's header against the table's tag.
///
/// # Errors
/// [`crate::Error::Corruption`] if it is not a record page of this table.
pub(crate) fn validate_page(page: &[u8], page_number: u64, tag: u64) -> Result<()> {
    if crate::page::kind(page, page_number)? != PageKind::Records || page_tag(page) != tag {
        return Err(corrupt(page_number, "not a record page of this table"));
    }
    let end = bump(page);
    if !(RECORDS_OFFSET..=PAGE_SIZE_BYTES).contains(&end) || !end.is_multiple_of(RECORD_ALIGN_BYTES)
    {
        return Err(corrupt(
            page_number,
            "record page allocation mark out of range",
        ));
    }
    Ok(())
}

/// The offsets of live records in a record page, ascending, validated: each starts inside
/// the allocated area, and slots do not overlap.
///
/// # Errors
/// [`crate::Error::Corruption`].
pub(crate) fn live_offsets(page: &[u8], page_number: u64) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(live_count(page));
    let mut next_free = RECORDS_OFFSET;
    for offset in (RECORDS_OFFSET..bump(page)).step_by(RECORD_ALIGN_BYTES) {
        if is_start(page, offset) {
            if offset < next_free {
                return Err(corrupt(page_number, "record slots overlap"));
            }
            next_free = offset + slot_at(page, page_number, offset)?.1;
            out.push(offset);
        }
    }
    for offset in (bump(page).max(RECORDS_OFFSET)..PAGE_SIZE_BYTES).step_by(RECORD_ALIGN_BYTES) {
        if is_start(page, offset) {
            return Err(corrupt(page_number, "record start past the allocated area"));
        }
    }
    if out.len() != live_count(page) {
        return Err(corrupt(
            page_number,
            "record page count disagrees with its bitmap",
        ));
    }
    Ok(out)
}

/// Encodes a record: field count u16, each field's length u32, then the fields' bytes.
pub fn encode_record(fields: &[&[u8]]) -> Vec<u8> {
    let total: usize = fields.iter().map(|f| f.len()).sum();
    let mut out = Vec::with_capacity(2 + 4 * fields.len() + total);
    out.extend_from_slice(&(fields.len() as u16).to_le_bytes());
    for field in fields {
        out.extend_from_slice(&(field.len() as u32).to_le_bytes());
    }
    for field in fields {
        out.extend_from_slice(field);
    }
    out
}

/// A record read from a table: its fields, borrowed from the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    bytes: &'a [u8],
    field_count: usize,
}

impl<'a> Record<'a> {
    /// Interprets encoded record bytes, validating the field table.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] naming `page_number` for malformed bytes.
    pub fn decode(bytes: &'a [u8], page_number: u64) -> Result<Record<'a>> {
        if bytes.len() < 2 {
            return Err(corrupt(page_number, "record shorter than its field count"));
        }
        let field_count = usize::from(get_u16(bytes, 0));
        let data_at = 2 + 4 * field_count;
        if data_at > bytes.len() {
            return Err(corrupt(page_number, "record field table past its end"));
        }
        let total: u64 = (0..field_count)
            .map(|i| u64::from(get_u32(bytes, 2 + 4 * i)))
            .sum();
        if total != (bytes.len() - data_at) as u64 {
            return Err(corrupt(
                page_number,
                "record fields do not add up to its size",
            ));
        }
        Ok(Record { bytes, field_count })
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.field_count
    }

    /// Whether the record has no fields.
    pub fn is_empty(&self) -> bool {
        self.field_count == 0
    }

    /// Field `i` (`None` past the last field).
    pub fn field(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.field_count {
            return None;
        }
        let mut at = 2 + 4 * self.field_count;
        for j in 0..i {
            at += get_u32(self.bytes, 2 + 4 * j) as usize;
        }
        let len = get_u32(self.bytes, 2 + 4 * i) as usize;
        Some(&self.bytes[at..at + len])
    }

    /// Every field, in order (one pass: `field` per index would be quadratic in the
    /// field count).
    pub fn fields(&self) -> Vec<&'a [u8]> {
        let mut at = 2 + 4 * self.field_count;
        (0..self.field_count)
            .map(|i| {
                let len = get_u32(self.bytes, 2 + 4 * i) as usize;
                at += len;
                &self.bytes[at - len..at]
            })
            .collect()
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The key of an index over `fields`: a single field as it is (so a one-field index orders
/// like its field); several fields each escaped (0x00 → 0x00 0xFF) and ended by 0x00 0x00,
/// which keeps tuple order (a field that is a prefix of another sorts first).
pub fn index_key(fields: &[&[u8]]) -> Vec<u8> {
    if let [only] = fields {
        return only.to_vec();
    }
    let mut out = Vec::new();
    for field in fields {
        for &b in *field {
            out.push(b);
            if b == 0 {
                out.push(0xFF);
            }
        }
        out.extend_from_slice(&[0, 0]);
    }
    out
}

/// What a table reader needs: the table's tag, its trees, and the high-water mark of the
/// snapshot (ids past it are no records).
#[derive(Debug, Clone)]
pub(crate) struct TableView {
    pub tag: u64,
    pub active_page: u64,
    pub header: TreeHeader,
    pub schema: Schema,
    pub pages: TreeHeader,
    pub candidates: TreeHeader,
    pub primary_key: Option<TreeHeader>,
    /// Every index's tree, by schema position (a global one's as its named tree is).
    pub indexes: Vec<TreeHeader>,
}

fn nested<'a, S: PageSource<'a>>(src: S, table: &TreeHeader, key: &[u8]) -> Result<TreeHeader> {
    match btree::get_stored(src, table.root_page, key)? {
        Some(btree::node::ValueRef::Tree(bytes)) => TreeHeader::decode(bytes, table.root_page),
        _ => Err(corrupt(table.root_page, "table tree missing")),
    }
}

/// The kind of tree an index lives in.
pub(crate) fn index_tree_kind(kind: IndexKind) -> TreeKind {
    match kind {
        IndexKind::Variable => TreeKind::Multi,
        IndexKind::Fixed => TreeKind::Fixed { value_size: 8 },
    }
}

/// The name of a local index's tree in the table's B+tree.
pub(crate) fn local_index_key(name: &str) -> Vec<u8> {
    [keys::INDEX_PREFIX, name.as_bytes()].concat()
}

/// The record held by the overflow run at `page_number`, which must carry table `tag`.
///
/// # Errors
/// Corruption when the run is not a record of that table.
pub(crate) fn overflow_record<'a, S: PageSource<'a>>(
    src: S,
    page_number: u64,
    tag: u64,
) -> Result<Record<'a>> {
    let value = btree::resolve_value(
        src,
        btree::node::ValueRef::Overflow {
            first_page: page_number,
            len_bytes: get_u64(src.page(page_number)?, OFFSET_AUX),
        },
    )?;
    if value.len() < OVERFLOW_TAG_BYTES || get_u64(value, 0) != tag {
        return Err(corrupt(
            page_number,
            "overflow run is not a record of this table",
        ));
    }
    Record::decode(&value[OVERFLOW_TAG_BYTES..], page_number)
}

impl TableView {
    /// Reads a table's state and trees; `global` finds a global index's tree by name (and
    /// checks its kind).
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] for a damaged table; what `global` returns.
    pub fn load<'a, S: PageSource<'a>>(
        src: S,
        header: TreeHeader,
        global: &mut dyn FnMut(&IndexDef) -> Result<TreeHeader>,
    ) -> Result<TableView> {
        debug_assert!(header.kind == TreeKind::Table);
        let root = header.root_page;
        let state = btree::get(src, root, keys::STATE)?
            .filter(|s| s.len() == STATE_BYTES)
            .ok_or_else(|| corrupt(root, "table state missing"))?;
        let schema = Schema::decode(
            btree::get(src, root, keys::SCHEMA)?
                .ok_or_else(|| corrupt(root, "table schema missing"))?,
            root,
        )?;
        let pages = nested(src, &header, keys::PAGES)?;
        let candidates = nested(src, &header, keys::CANDIDATES)?;
        if pages.kind != (TreeKind::Fixed { value_size: 4 })
            || candidates.kind != (TreeKind::Fixed { value_size: 0 })
        {
            return Err(corrupt(root, "table page trees of the wrong kind"));
        }
        let primary_key = match schema.primary_key {
            Some(_) => Some(nested(src, &header, keys::PRIMARY_KEY)?),
            None => None,
        };
        let mut indexes = Vec::new();
        for index in &schema.indexes {
            let tree = if index.global {
                global(index)?
            } else {
                nested(src, &header, &local_index_key(&index.name))?
            };
            if tree.kind != index_tree_kind(index.kind) {
                return Err(corrupt(
                    root,
                    format!("index {:?} of the wrong kind", index.name),
                ));
            }
            indexes.push(tree);
        }
        Ok(TableView {
            tag: get_u64(state, 0),
            active_page: get_u64(state, 8),
            header,
            schema,
            pages,
            candidates,
            primary_key,
            indexes,
        })
    }

    /// The record `id`, if it is a live record of this table. Small records cost one page
    /// lookup; an overflow record also one lookup in the `pages` tree (its run carries no
    /// bitmap). Ids are locations and locations are reused: the id of a deleted or moved
    /// record may name a later record; it never reads anything but a live record of this
    /// table.
    ///
    /// # Errors
    /// Corruption of the page it names.
    pub fn get<'a, S: PageSource<'a>>(
        &self,
        src: S,
        next_page_number: u64,
        id: u64,
    ) -> Result<Option<Record<'a>>> {
        let (page_number, offset) = split_id(id);
        if page_number == 0 || page_number >= next_page_number {
            return Ok(None);
        }
        if offset == 0 {
            if fixed::get(src, self.pages.root_page, 4, page_number)?
                != Some(&PAGES_OVERFLOW_RUN.to_le_bytes()[..])
            {
                return Ok(None);
            }
            return self.overflow_record(src, page_number).map(Some);
        }
        // An id may be stale (its page freed, even reused inside an overflow run, whose
        // inner pages have no header): probe the page before trusting it.
        let is_ours = |page: &[u8]| {
            page[crate::page::OFFSET_KIND] == PageKind::Records as u8
                && page_tag(page) == self.tag
                && is_start(page, offset)
        };
        if !src.page_unverified(page_number).is_some_and(is_ours) {
            return Ok(None);
        }
        let page = src.page(page_number)?;
        if !is_ours(page) {
            return Ok(None);
        }
        let (len, _) = slot_at(page, page_number, offset)?;
        let body = &page[offset + RECORD_HEADER_BYTES..offset + RECORD_HEADER_BYTES + len];
        Record::decode(body, page_number).map(Some)
    }

    /// The record held by the overflow run at `page_number`.
    ///
    /// # Errors
    /// Corruption when the run is not one of this table's records.
    pub fn overflow_record<'a, S: PageSource<'a>>(
        &self,
        src: S,
        page_number: u64,
    ) -> Result<Record<'a>> {
        overflow_record(src, page_number, self.tag)
    }

    /// The first record after `bound` in id order, or with `reverse` the last one before
    /// it.
    ///
    /// # Errors
    /// Corruption.
    pub fn record_next<'a, S: PageSource<'a>>(
        &self,
        src: S,
        bound: Bound<u64>,
        reverse: bool,
    ) -> Result<Option<(u64, Record<'a>)>> {
        use std::ops::RangeBounds;
        let admits = |id: u64| {
            if reverse {
                (Bound::Unbounded, bound).contains(&id)
            } else {
                (bound, Bound::Unbounded).contains(&id)
            }
        };
        let page_bound = bound.map(|id| split_id(id).0);
        let pages = if reverse {
            FixedRange::new_rev(
                src,
                self.pages.root_page,
                4,
                (Bound::Unbounded, inclusive(page_bound)),
            )?
        } else {
            FixedRange::new(
                src,
                self.pages.root_page,
                4,
                (inclusive(page_bound), Bound::Unbounded),
            )?
        };
        for entry in pages {
            let (page_number, marker) = entry?;
            if marker == PAGES_OVERFLOW_RUN.to_le_bytes() {
                // Not read yet, so a damaged page number must not overflow its id.
                let id = page_number
                    .checked_mul(PAGE_SIZE_BYTES as u64)
                    .ok_or_else(|| corrupt(page_number, "record page number out of range"))?;
                if admits(id) {
                    return Ok(Some((id, self.overflow_record(src, page_number)?)));
                }
                continue;
            }
            let page = src.page(page_number)?;
            validate_page(page, page_number, self.tag)?;
            let mut offsets = live_offsets(page, page_number)?;
            if reverse {
                offsets.reverse();
            }
            for offset in offsets {
                let id = make_id(page_number, offset);
                if admits(id) {
                    let (len, _) = slot_at(page, page_number, offset)?;
                    let start = offset + RECORD_HEADER_BYTES;
                    return Ok(Some((
                        id,
                        Record::decode(&page[start..start + len], page_number)?,
                    )));
                }
            }
        }
        Ok(None)
    }

    /// Every record in id order.
    ///
    /// # Errors
    /// Corruption met while positioning.
    pub fn scan<'a, S: PageSource<'a>>(&self, src: S) -> Result<Scan<'a, S>> {
        Ok(Scan {
            view: self.clone(),
            src,
            pages: FixedRange::new(src, self.pages.root_page, 4, ..)?,
            page: None,
        })
    }
}

/// A page bound that includes the page of an excluded id (its other records may qualify).
fn inclusive(bound: Bound<u64>) -> Bound<u64> {
    match bound {
        Bound::Excluded(page) => Bound::Included(page),
        other => other,
    }
}

/// Records of a table in id order: `(id, record)`.
pub struct Scan<'a, S: PageSource<'a>> {
    view: TableView,
    src: S,
    pages: FixedRange<'a, S>,
    /// The record page being read, and the offsets left in it.
    page: Option<(u64, std::vec::IntoIter<usize>)>,
}

impl<'a, S: PageSource<'a>> Scan<'a, S> {
    fn step(&mut self) -> Result<Option<(u64, Record<'a>)>> {
        loop {
            if let Some((page_number, offsets)) = &mut self.page {
                if let Some(offset) = offsets.next() {
                    let id = make_id(*page_number, offset);
                    let page = self.src.page(*page_number)?;
                    let (len, _) = slot_at(page, *page_number, offset)?;
                    let start = offset + RECORD_HEADER_BYTES;
                    let record = Record::decode(&page[start..start + len], *page_number)?;
                    return Ok(Some((id, record)));
                }
                self.page = None;
            }
            let Some(entry) = self.pages.next() else {
                return Ok(None);
            };
            let (page_number, live) = entry?;
            if live == PAGES_OVERFLOW_RUN.to_le_bytes() {
                let record = self.view.overflow_record(self.src, page_number)?;
                return Ok(Some((make_id(page_number, 0), record)));
            }
            let page = self.src.page(page_number)?;
            validate_page(page, page_number, self.view.tag)?;
            self.page = Some((page_number, live_offsets(page, page_number)?.into_iter()));
        }
    }
}

impl<'a, S: PageSource<'a>> Iterator for Scan<'a, S> {
    type Item = Result<(u64, Record<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_an_error() {
        let fields: Vec<&[u8]> = vec![b"alice", b"", b"\x00\x01"];
        let bytes = encode_record(&fields);
        let record = Record::decode(&bytes, 1).expect("decodes");
        assert_eq!(record.fields(), fields);
        assert_eq!(record.field(3), None);
        for cut in 0..bytes.len() {
            assert!(Record::decode(&bytes[..cut], 1).is_err());
        }
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x80;
            if let Ok(r) = Record::decode(&damaged, 1) {
                let _ = r.fields();
            }
        }
    }

    #[test]
    fn composite_index_keys_keep_tuple_order() {
        let tuples: Vec<Vec<&[u8]>> = vec![
            vec![b"", b"z"],
            vec![b"a", b""],
            vec![b"a", b"\x00"],
            vec![b"a", b"\x00\x00"],
            vec![b"a", b"\x01"],
            vec![b"a\x00", b""],
            vec![b"ab", b""],
            vec![b"b", b"a"],
        ];
        let keys: Vec<Vec<u8>> = tuples.iter().map(|t| index_key(t)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(index_key(&[b"x\x00"]), b"x\x00");
    }

    #[test]
    fn start_bits_cover_the_record_area() {
        let mut page = vec![0u8; PAGE_SIZE_BYTES];
        for offset in (RECORDS_OFFSET..PAGE_SIZE_BYTES).step_by(RECORD_ALIGN_BYTES) {
            assert!(!is_start(&page, offset));
            set_start(&mut page, offset, true);
            assert!(is_start(&page, offset));
        }
        assert!(
            page[RECORDS_OFFSET..].iter().all(|&b| b == 0),
            "bitmap stays in place"
        );
        assert!(!is_start(&page, RECORDS_OFFSET + 1));
        assert!(!is_start(&page, 0));
        assert!(!is_start(&page, PAGE_SIZE_BYTES));
    }
}
