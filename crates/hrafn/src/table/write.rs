//! Changing a table through a [`PageStore`]: placing records, keeping every index in step,
//! and the page policy (reuse sparse pages after compacting them, empty very sparse ones).
//!
//! Every operation first computes and checks everything that can refuse it (field count,
//! index key sizes, unique keys), then changes pages: a refused operation changes nothing.

use super::{
    FREE_BELOW_BYTES, IndexKind, OVERFLOW_TAG_BYTES, PAGES_OVERFLOW_RUN, RECORD_HEADER_BYTES,
    RECORD_INLINE_MAX_BYTES, RECORDS_OFFSET, REUSE_AT_OR_BELOW_BYTES, Record, TableView, bump,
    encode_record, index_key, live_count, live_offsets, make_id, set_start, slot_at, slot_bytes,
    split_id, validate_page,
};
use crate::btree::write::{self as tree_write};
use crate::btree::{self, PageStore, Reading, TreeHeader};
use crate::error::{Error, Result};
use crate::fixed;
use crate::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES, VALUE_SIZE_MAX_BYTES};
use crate::multi;
use crate::page::{
    OFFSET_AUX, OFFSET_ENTRY_COUNT, OFFSET_FREE_LOWER, OFFSET_FREE_UPPER, OFFSET_KIND, PageKind,
    corrupt, get_u16, overflow_page_count, put_u16, put_u64,
};

/// Live bytes of a record page (slots, headers included), kept in the page header's
/// `FREE_UPPER` field.
pub fn live_bytes(page: &[u8]) -> usize {
    usize::from(get_u16(page, OFFSET_FREE_UPPER))
}

/// One key a record puts in one index (`None` for the primary key slot when the schema has
/// none).
#[derive(Debug, Clone, PartialEq, Eq)]
enum IndexEntry {
    Variable(Vec<u8>),
    Fixed(u64),
}

/// The keys a record puts in the primary key and in each index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Keys {
    primary: Option<Vec<u8>>,
    indexes: Vec<IndexEntry>,
}

/// Refuses a record whose stored form (the table tag, the field count, a length per field,
/// the fields) would be longer than the largest value an overflow run holds, as a tree
/// refuses such a value: committed, it could not be read back, nor recovered.
fn check_record_size(field_lens: impl ExactSizeIterator<Item = usize>) -> Result<()> {
    let fixed_bytes = OVERFLOW_TAG_BYTES + 2 + 4 * field_lens.len();
    let size_bytes = field_lens.fold(fixed_bytes, usize::saturating_add);
    if size_bytes > VALUE_SIZE_MAX_BYTES {
        return Err(Error::ValueTooLarge {
            size_bytes,
            limit_bytes: VALUE_SIZE_MAX_BYTES,
        });
    }
    Ok(())
}

fn keys_of(view: &TableView, name: &str, fields: &[&[u8]]) -> Result<Keys> {
    let schema = &view.schema;
    if fields.len() != usize::from(schema.field_count) {
        return Err(Error::InvalidArgument(format!(
            "table {name:?} has {} fields, the record {}",
            schema.field_count,
            fields.len()
        )));
    }
    check_record_size(fields.iter().map(|f| f.len()))?;
    let too_large = |size_bytes| Error::KeyTooLarge {
        size_bytes,
        limit_bytes: KEY_SIZE_MAX_BYTES,
    };
    let primary = match schema.primary_key {
        Some(field) => {
            let key = fields[usize::from(field)];
            if key.len() > KEY_SIZE_MAX_BYTES {
                return Err(too_large(key.len()));
            }
            Some(key.to_vec())
        }
        None => None,
    };
    let mut indexes = Vec::with_capacity(schema.indexes.len());
    for index in &schema.indexes {
        let covered: Vec<&[u8]> = index
            .fields
            .iter()
            .map(|&f| fields[usize::from(f)])
            .collect();
        indexes.push(match index.kind {
            IndexKind::Variable => {
                let key = index_key(&covered);
                if key.len() > KEY_SIZE_MAX_BYTES {
                    return Err(too_large(key.len()));
                }
                IndexEntry::Variable(key)
            }
            IndexKind::Fixed => {
                let bytes: [u8; 8] = covered[0].try_into().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "fixed index {:?} of table {name:?} needs an 8-byte field, not {} bytes",
                        index.name,
                        covered[0].len()
                    ))
                })?;
                IndexEntry::Fixed(u64::from_be_bytes(bytes))
            }
        });
    }
    Ok(Keys { primary, indexes })
}

/// [`keys_of`] for a record read from a page: a stored record that does not fit the schema
/// is damage, not a refused argument (the change has started; it must fail the
/// transaction, not look like a clean refusal).
fn stored_keys_of(view: &TableView, body: &[u8], page_number: u64) -> Result<Keys> {
    let fields = fields_of(body, page_number)?;
    keys_of(view, "", &fields).map_err(|e| {
        corrupt(
            page_number,
            format!("a stored record does not fit its table's schema: {e}"),
        )
    })
}

/// Fails with [`Error::DuplicateKey`] if a unique index already maps one of `keys` to a
/// record other than `own_id`.
fn check_unique<S: PageStore>(
    store: &S,
    view: &TableView,
    name: &str,
    keys: &Keys,
    own_id: Option<u64>,
) -> Result<()> {
    let src = Reading(store);
    let taken = |found: Option<&[u8]>| {
        found.is_some_and(|id| own_id.is_none_or(|own| id != own.to_be_bytes()))
    };
    if let (Some(key), Some(tree)) = (&keys.primary, &view.primary_key)
        && taken(btree::get(src, tree.root_page, key)?)
    {
        return Err(Error::DuplicateKey {
            table: name.to_owned(),
            index: "primary key".into(),
            key: key.clone(),
        });
    }
    for (i, entry) in keys.indexes.iter().enumerate() {
        if let IndexEntry::Fixed(n) = entry
            && taken(fixed::get(src, view.indexes[i].root_page, 8, *n)?)
        {
            return Err(Error::DuplicateKey {
                table: name.to_owned(),
                index: view.schema.indexes[i].name.clone(),
                key: n.to_be_bytes().to_vec(),
            });
        }
    }
    Ok(())
}

/// Points every index entry of `keys` at `id`.
fn index_add<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    keys: &Keys,
    id: u64,
) -> Result<()> {
    let id_bytes = id.to_be_bytes();
    if let (Some(key), Some(tree)) = (&keys.primary, &mut view.primary_key) {
        tree_write::insert(store, tree, key, &id_bytes)?;
    }
    for (entry, tree) in keys.indexes.iter().zip(view.indexes.iter_mut()) {
        match entry {
            IndexEntry::Variable(key) => {
                multi::write::add(store, tree, key, &id_bytes)?;
            }
            &IndexEntry::Fixed(n) => {
                fixed::write::insert(store, tree, n, &id_bytes)?;
            }
        }
    }
    Ok(())
}

/// Removes every index entry of `keys` that points at `id`.
fn index_remove<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    keys: &Keys,
    id: u64,
) -> Result<()> {
    index_remove_some(store, view, keys, id, false)
}

/// [`index_remove`], of global indexes only when `global_only`.
fn index_remove_some<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    keys: &Keys,
    id: u64,
    global_only: bool,
) -> Result<()> {
    let id_bytes = id.to_be_bytes();
    let site = view.header.root_page;
    let missing = || corrupt(site, "a table index lacks a record's entry");
    if let (Some(key), Some(tree), false) = (&keys.primary, &mut view.primary_key, global_only)
        && !tree_write::remove(store, tree, key)?
    {
        return Err(missing());
    }
    let globals: Vec<bool> = view.schema.indexes.iter().map(|i| i.global).collect();
    for ((entry, tree), global) in keys
        .indexes
        .iter()
        .zip(view.indexes.iter_mut())
        .zip(globals)
    {
        if global_only && !global {
            continue;
        }
        let removed = match entry {
            IndexEntry::Variable(key) => multi::write::remove(store, tree, key, &id_bytes)?,
            &IndexEntry::Fixed(n) => fixed::write::remove(store, tree, n)?,
        };
        if !removed {
            return Err(missing());
        }
    }
    Ok(())
}

/// Moves the index entries of a record from `old_id` to `new_id`.
fn index_move<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    keys: &Keys,
    old_id: u64,
    new_id: u64,
) -> Result<()> {
    index_remove(store, view, keys, old_id)?;
    index_add(store, view, keys, new_id)
}

/// A live record's encoded bytes (copied), or `None` if `id` is not one of this table's.
fn read_body<S: PageStore>(
    store: &S,
    view: &TableView,
    next_page: u64,
    id: u64,
) -> Result<Option<Vec<u8>>> {
    Ok(view
        .get(Reading(store), next_page, id)?
        .map(|r| r.as_bytes().to_vec()))
}

fn fields_of(body: &[u8], page_number: u64) -> Result<Vec<&[u8]>> {
    Ok(Record::decode(body, page_number)?.fields())
}

/// Takes a record's entries out of the indexes (only the global ones if `global_only`).
///
/// # Errors
/// Corruption (an entry missing); scratch full.
pub fn unindex<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    name: &str,
    fields: &[&[u8]],
    id: u64,
    global_only: bool,
) -> Result<()> {
    let keys = keys_of(view, name, fields)?;
    index_remove_some(store, view, &keys, id, global_only)
}

/// Puts a record's entries into every index.
///
/// # Errors
/// [`Error::DuplicateKey`]; scratch full; corruption.
pub fn reindex<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    name: &str,
    fields: &[&[u8]],
    id: u64,
) -> Result<()> {
    let keys = keys_of(view, name, fields)?;
    check_unique(store, view, name, &keys, Some(id))?;
    index_add(store, view, &keys, id)
}

/// Checks that every index holds a record's keys, pointing at `id`.
///
/// # Errors
/// [`Error::Corruption`] naming the index that disagrees.
pub fn check_indexed<'a, S: crate::btree::PageSource<'a>>(
    src: S,
    view: &TableView,
    fields: &[&[u8]],
    id: u64,
) -> Result<()> {
    let keys = keys_of(view, "", fields)
        .map_err(|e| corrupt(view.header.root_page, format!("record {id}: {e}")))?;
    let id_bytes = id.to_be_bytes();
    if let (Some(key), Some(tree)) = (&keys.primary, &view.primary_key)
        && btree::get(src, tree.root_page, key)? != Some(&id_bytes[..])
    {
        return Err(corrupt(
            tree.root_page,
            format!("primary key does not name record {id}"),
        ));
    }
    for ((entry, tree), index) in keys
        .indexes
        .iter()
        .zip(&view.indexes)
        .zip(&view.schema.indexes)
    {
        let present = match entry {
            IndexEntry::Variable(key) => multi::contains(src, tree.root_page, key, &id_bytes)?,
            &IndexEntry::Fixed(n) => fixed::get(src, tree.root_page, 8, n)? == Some(&id_bytes[..]),
        };
        if !present {
            return Err(corrupt(
                tree.root_page,
                format!("index {:?} lacks record {id}", index.name),
            ));
        }
    }
    Ok(())
}

/// Inserts a record; returns its id.
///
/// # Errors
/// [`Error::InvalidArgument`] for a record of the wrong shape; [`Error::KeyTooLarge`];
/// [`Error::DuplicateKey`]; scratch full; corruption.
pub fn insert<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    name: &str,
    fields: &[&[u8]],
) -> Result<u64> {
    let keys = keys_of(view, name, fields)?;
    check_unique(store, view, name, &keys, None)?;
    let id = place(store, view, &encode_record(fields), None, None)?;
    index_add(store, view, &keys, id)?;
    view.header.entry_count += 1;
    Ok(id)
}

/// Replaces record `id`; returns its id afterwards (the same, unless it had to move).
/// `None` if `id` is not a record of this table.
///
/// # Errors
/// As [`insert`].
pub fn update<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    name: &str,
    next_page: u64,
    id: u64,
    fields: &[&[u8]],
) -> Result<Option<u64>> {
    let new_keys = keys_of(view, name, fields)?;
    let Some(old_body) = read_body(store, view, next_page, id)? else {
        return Ok(None);
    };
    let (page_number, offset) = split_id(id);
    let old_keys = stored_keys_of(view, &old_body, page_number)?;
    check_unique(store, view, name, &new_keys, Some(id))?;
    let body = encode_record(fields);
    let fits_in_place = offset != 0 && body.len() <= RECORD_INLINE_MAX_BYTES && {
        let page = store.page(page_number)?;
        slot_bytes(body.len()) <= slot_at(page, page_number, offset)?.1
    };
    let new_id = if fits_in_place {
        let page = store.page_mut(page_number)?;
        put_u16(page, offset, body.len() as u16);
        let start = offset + RECORD_HEADER_BYTES;
        page[start..start + body.len()].copy_from_slice(&body);
        id
    } else {
        // Not into the record's own page: making room there could move the record itself.
        let new_id = place(store, view, &body, Some(page_number), None)?;
        release(store, view, id)?;
        new_id
    };
    if old_keys != new_keys || new_id != id {
        index_remove(store, view, &old_keys, id)?;
        index_add(store, view, &new_keys, new_id)?;
    }
    if new_id != id && offset != 0 {
        // The survivors moving out of the old page must not compact the new one: the
        // record would slide away from the id returned.
        let (new_page, _) = split_id(new_id);
        after_release(store, view, next_page, page_number, Some(new_page))?;
    }
    Ok(Some(new_id))
}

/// Deletes record `id`. Returns false if it is not a record of this table.
///
/// # Errors
/// Scratch full; corruption.
pub fn delete<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    next_page: u64,
    id: u64,
) -> Result<bool> {
    let Some(body) = read_body(store, view, next_page, id)? else {
        return Ok(false);
    };
    let (page_number, offset) = split_id(id);
    let keys = stored_keys_of(view, &body, page_number)?;
    index_remove(store, view, &keys, id)?;
    release(store, view, id)?;
    view.header.entry_count = view.header.entry_count.saturating_sub(1);
    if offset != 0 {
        after_release(store, view, next_page, page_number, None)?;
    }
    Ok(true)
}

/// Writes a record body somewhere (never in `avoid`, and compacting neither it nor
/// `keep`); returns its id.
fn place<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    body: &[u8],
    avoid: Option<u64>,
    keep: Option<u64>,
) -> Result<u64> {
    if body.len() > RECORD_INLINE_MAX_BYTES {
        let value = [&view.tag.to_le_bytes()[..], body].concat();
        let first = tree_write::write_overflow(store, &value)?;
        fixed::write::insert(
            store,
            &mut view.pages,
            first,
            &PAGES_OVERFLOW_RUN.to_le_bytes(),
        )?;
        return Ok(make_id(first, 0));
    }
    let slot = slot_bytes(body.len());
    let page_number = page_with_room(store, view, slot, avoid, keep)?;
    let page = store.page_mut(page_number)?;
    let offset = bump(page);
    assert!(offset + slot <= PAGE_SIZE_BYTES, "the chosen page has room");
    put_u16(page, offset, body.len() as u16);
    put_u16(page, offset + 2, slot as u16);
    page[offset + RECORD_HEADER_BYTES..offset + RECORD_HEADER_BYTES + body.len()]
        .copy_from_slice(body);
    set_start(page, offset, true);
    put_u16(page, OFFSET_FREE_LOWER, (offset + slot) as u16);
    put_u16(page, OFFSET_ENTRY_COUNT, (live_count(page) + 1) as u16);
    put_u16(page, OFFSET_FREE_UPPER, (live_bytes(page) + slot) as u16);
    Ok(make_id(page_number, offset))
}

/// The active page if `slot` bytes fit at its end, or after compacting it when at most half
/// of it is live; else a reuse candidate, compacted; else a new page. The page chosen
/// becomes the active one. Never uses `avoid`; never compacts it or `keep` (whose records
/// must stay where they are).
fn page_with_room<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    slot: usize,
    avoid: Option<u64>,
    keep: Option<u64>,
) -> Result<u64> {
    let active = view.active_page;
    if active != 0 && Some(active) != avoid {
        // Records are written at the page's allocation mark: a damaged page (or state
        // naming another tree's page) must be an error, not a write out of place.
        let page = store.page(active)?;
        validate_page(page, active, view.tag)?;
        if bump(page) + slot <= PAGE_SIZE_BYTES {
            return Ok(active);
        }
        // Records deleted while the page was active left room no later release would
        // reclaim once it is left behind (a page at 1% live would stay so): compact it
        // and keep filling it.
        if live_bytes(page) <= REUSE_AT_OR_BELOW_BYTES && Some(active) != keep {
            compact(store, view, active)?;
            if bump(store.page(active)?) + slot <= PAGE_SIZE_BYTES {
                return Ok(active);
            }
        }
    }
    let candidate = fixed::FixedRange::new(Reading(store), view.candidates.root_page, 0, ..)?
        .find(
            |entry| !matches!(entry, Ok((page, _)) if Some(*page) == avoid || Some(*page) == keep),
        )
        .transpose()?
        .map(|(page, _)| page);
    if let Some(page_number) = candidate {
        validate_page(store.page(page_number)?, page_number, view.tag)?;
        fixed::write::remove(store, &mut view.candidates, page_number)?;
        compact(store, view, page_number)?;
        if bump(store.page(page_number)?) + slot <= PAGE_SIZE_BYTES {
            view.active_page = page_number;
            return Ok(page_number);
        }
    }
    let page_number = store.allocate(1, PageKind::Records)?;
    let page = store.page_mut(page_number)?;
    put_u64(page, OFFSET_AUX, view.tag);
    put_u16(page, OFFSET_FREE_LOWER, RECORDS_OFFSET as u16);
    put_u16(page, OFFSET_FREE_UPPER, 0);
    fixed::write::insert(store, &mut view.pages, page_number, &0u32.to_le_bytes())?;
    view.active_page = page_number;
    Ok(page_number)
}

/// Slides a page's records to its start (each moved record's indexes follow).
fn compact<S: PageStore>(store: &mut S, view: &mut TableView, page_number: u64) -> Result<()> {
    let page = store.page(page_number)?;
    let offsets = live_offsets(page, page_number)?;
    let mut records = Vec::with_capacity(offsets.len());
    for &offset in &offsets {
        let (len, _) = slot_at(page, page_number, offset)?;
        let start = offset + RECORD_HEADER_BYTES;
        records.push((offset, page[start..start + len].to_vec()));
    }
    let page = store.page_mut(page_number)?;
    page[super::BITMAP_OFFSET..PAGE_SIZE_BYTES].fill(0);
    let mut at = RECORDS_OFFSET;
    let mut moves = Vec::new();
    for (offset, body) in &records {
        let slot = slot_bytes(body.len());
        put_u16(page, at, body.len() as u16);
        put_u16(page, at + 2, slot as u16);
        page[at + RECORD_HEADER_BYTES..at + RECORD_HEADER_BYTES + body.len()].copy_from_slice(body);
        set_start(page, at, true);
        if at != *offset {
            moves.push((*offset, at, body));
        }
        at += slot;
    }
    put_u16(page, OFFSET_FREE_LOWER, at as u16);
    put_u16(page, OFFSET_FREE_UPPER, (at - RECORDS_OFFSET) as u16);
    for (old, new, body) in moves {
        let keys = stored_keys_of(view, body, page_number)?;
        index_move(
            store,
            view,
            &keys,
            make_id(page_number, old),
            make_id(page_number, new),
        )?;
    }
    Ok(())
}

/// Frees a record's slot or overflow run; indexes and the page policy are the caller's.
fn release<S: PageStore>(store: &mut S, view: &mut TableView, id: u64) -> Result<()> {
    let (page_number, offset) = split_id(id);
    if offset == 0 {
        let length = crate::page::get_u64(store.page(page_number)?, OFFSET_AUX);
        fixed::write::remove(store, &mut view.pages, page_number)?;
        store.free(page_number, overflow_page_count(length));
        return Ok(());
    }
    let page = store.page_mut(page_number)?;
    let (_, slot) = slot_at(page, page_number, offset)?;
    let (Some(count), Some(live)) = (
        live_count(page).checked_sub(1),
        live_bytes(page).checked_sub(slot),
    ) else {
        return Err(corrupt(page_number, "record page counts below its records"));
    };
    set_start(page, offset, false);
    put_u16(page, OFFSET_ENTRY_COUNT, count as u16);
    put_u16(page, OFFSET_FREE_UPPER, live as u16);
    if offset + slot == bump(page) {
        put_u16(page, OFFSET_FREE_LOWER, offset as u16); // the last slot: reuse its room
    }
    Ok(())
}

/// Applies the page policy to a record page (not an overflow run) that lost a record: an
/// empty page is freed; a very sparse one has its survivors moved out, then is freed; a
/// sparse one becomes a candidate for reuse. The active page is left alone (it fills from
/// its end). `keep` is a page the moves must not compact (it holds a record whose id the
/// caller returns).
fn after_release<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    next_page: u64,
    page_number: u64,
    keep: Option<u64>,
) -> Result<()> {
    let page = store.page(page_number)?;
    let live = live_bytes(page);
    if page_number == view.active_page {
        if live == 0 {
            let page = store.page_mut(page_number)?;
            put_u16(page, OFFSET_FREE_LOWER, RECORDS_OFFSET as u16);
        }
        return Ok(());
    }
    if live >= FREE_BELOW_BYTES {
        if live <= REUSE_AT_OR_BELOW_BYTES {
            fixed::write::insert(store, &mut view.candidates, page_number, &[])?;
        }
        return Ok(());
    }
    // Move the survivors elsewhere (never back here), then free the page.
    for offset in live_offsets(page, page_number)? {
        let old_id = make_id(page_number, offset);
        let body = read_body(store, view, next_page, old_id)?
            .ok_or_else(|| corrupt(page_number, "live record unreadable"))?;
        let keys = stored_keys_of(view, &body, page_number)?;
        let new_id = place(store, view, &body, Some(page_number), keep)?;
        index_move(store, view, &keys, old_id, new_id)?;
    }
    fixed::write::remove(store, &mut view.candidates, page_number)?;
    free_record_page(store, view, page_number)
}

/// Takes a record page out of the table and frees it, marking it free so that an old id
/// pointing into it reads as no record.
fn free_record_page<S: PageStore>(
    store: &mut S,
    view: &mut TableView,
    page_number: u64,
) -> Result<()> {
    if !fixed::write::remove(store, &mut view.pages, page_number)? {
        return Err(corrupt(
            page_number,
            "record page missing from its table's list",
        ));
    }
    let page = store.page_mut(page_number)?;
    page[OFFSET_KIND] = PageKind::Free as u8;
    store.free(page_number, 1);
    Ok(())
}

/// Frees every record page and overflow run of the table rooted at `table_root` (its
/// trees are the caller's). Each page is checked to be one of the table's records just
/// before it is freed: a damaged page list, or a run's damaged length, would otherwise free
/// pages that other trees still use. An error leaves earlier pages freed, so every caller
/// must fail its transaction on one (as deleting a tree does).
///
/// # Errors
/// Corruption.
pub fn drop_records<S: PageStore>(store: &mut S, table_root: u64) -> Result<()> {
    let tag = btree::get(Reading(&*store), table_root, super::keys::STATE)?
        .filter(|state| state.len() == super::STATE_BYTES)
        .map(|state| crate::page::get_u64(state, 0))
        .ok_or_else(|| corrupt(table_root, "table state missing"))?;
    let pages = match btree::get_stored(Reading(&*store), table_root, super::keys::PAGES)? {
        Some(btree::node::ValueRef::Tree(bytes)) => TreeHeader::decode(bytes, table_root)?,
        _ => return Err(corrupt(table_root, "table without its page list")),
    };
    let mut runs = Vec::new();
    for entry in fixed::FixedRange::new(Reading(store), pages.root_page, 4, ..)? {
        let (page_number, marker) = entry?;
        runs.push((page_number, marker == PAGES_OVERFLOW_RUN.to_le_bytes()));
    }
    for (page_number, overflow) in runs {
        let count = if overflow {
            // The record fills its run exactly, so the run's length is checked too.
            super::overflow_record(Reading(&*store), page_number, tag)?;
            overflow_page_count(crate::page::get_u64(store.page(page_number)?, OFFSET_AUX))
        } else {
            validate_page(store.page(page_number)?, page_number, tag)?;
            1
        };
        store.free(page_number, count);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_longer_than_the_largest_value_is_refused() {
        // Lengths alone: nothing of that size is allocated.
        let fixed_bytes = OVERFLOW_TAG_BYTES + 2 + 4 * 2;
        let largest = VALUE_SIZE_MAX_BYTES - fixed_bytes;
        check_record_size([largest - 10, 10].into_iter()).expect("the largest record");
        assert!(matches!(
            check_record_size([largest - 10, 11].into_iter()),
            Err(Error::ValueTooLarge { size_bytes, limit_bytes: VALUE_SIZE_MAX_BYTES })
                if size_bytes == VALUE_SIZE_MAX_BYTES + 1
        ));
        // A field past a u32 length (its length field would wrap) is refused, not wrapped.
        assert!(check_record_size([usize::MAX, 1].into_iter()).is_err());
    }
}
