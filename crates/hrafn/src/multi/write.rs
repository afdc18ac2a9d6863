//! Changing a multi-value tree through a [`PageStore`]: add and remove values, moving a
//! set between its embedded form and its own tree as it grows and shrinks.

use super::{EMBEDDED_SET_MAX_BYTES, decode_set, encode_set, encoded_size, position_in_set};
use crate::btree::node::{self, ValueRef};
use crate::btree::write::{self as tree_write, Finger, Located, NewEntry};
use crate::btree::{PageStore, TreeHeader, TreeKind};
use crate::error::Result;
use crate::page::corrupt;

/// A key's set, copied out of its page so the tree can change under it.
enum OwnedSet {
    /// The encoded embedded set.
    Embedded(Vec<u8>),
    Tree(TreeHeader),
}

/// Where `key` is in the tree, and its set copied out, if it has one.
fn load<S: PageStore>(
    store: &S,
    tree: &TreeHeader,
    key: &[u8],
    finger: &mut Finger,
) -> Result<(Located, Option<OwnedSet>)> {
    let at = finger.locate(store, tree.root_page, key)?;
    let set = match at.entry(store)? {
        None => None,
        // An embedded set is validated where it is decoded.
        Some(ValueRef::Inline(bytes)) => Some(OwnedSet::Embedded(bytes.to_vec())),
        Some(stored) => match super::set_of(stored, at.leaf())? {
            super::Set::Tree(header) => Some(OwnedSet::Tree(header)),
            super::Set::Embedded(_) => unreachable!("only inline values are embedded sets"),
        },
    };
    Ok((at, set))
}

/// Stores `entry` under `key`: at `at` when the tree has not changed since
/// [`tree_write::locate`] found it (one descent for a read and its write), else anew.
/// Returns whether no node split.
fn put<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    entry: NewEntry<'_>,
    at: Option<Located>,
) -> Result<bool> {
    let hint = &mut tree_write::InsertHint::default();
    match at {
        Some(at) => tree_write::insert_located(store, tree, key, entry, at, hint)?,
        None => tree_write::insert_entry(store, tree, key, entry, hint)?,
    };
    Ok(hint.split_nothing())
}

fn store_embedded<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    values: &[&[u8]],
    at: Option<Located>,
) -> Result<bool> {
    store_encoded(store, tree, key, &encode_set(values.iter().copied()), at)
}

/// Stores an encoded embedded set as `key`'s entry.
fn store_encoded<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    bytes: &[u8],
    at: Option<Located>,
) -> Result<bool> {
    assert!(
        bytes.len() <= EMBEDDED_SET_MAX_BYTES,
        "an embedded set within its limit"
    );
    put(store, tree, key, NewEntry::Value(bytes), at)
}

fn store_tree<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    set: &TreeHeader,
    at: Option<Located>,
) -> Result<bool> {
    put(store, tree, key, NewEntry::Tree(&set.encode()), at)
}

/// A new set tree holding `values` (ascending).
fn new_set_tree<S: PageStore>(store: &mut S, values: &[&[u8]]) -> Result<TreeHeader> {
    let mut set = tree_write::create(store)?;
    let mut hint = tree_write::InsertHint::default();
    for value in values {
        tree_write::insert_hinted(store, &mut set, value, &[], &mut hint)?;
    }
    Ok(set)
}

/// Adds `value` to `key`'s set. Returns false if it was already there.
///
/// # Errors
/// Scratch full; corruption. Sizes are checked by the caller.
pub fn add<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    value: &[u8],
) -> Result<bool> {
    add_following(store, tree, key, &[value], &mut Finger::default()).map(|added| added == 1)
}

/// Adds `values` (any order, repeats allowed) to `key`'s set, one of a run of adds
/// through `finger` (see [`Finger`]): keys in ascending order skip most descents, and the
/// set is found and stored once for all of `values`, not once per value. Returns how many
/// were not already there.
///
/// # Errors
/// As [`add`].
pub(crate) fn add_following<S: PageStore, V: AsRef<[u8]>>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    values: &[V],
    finger: &mut Finger,
) -> Result<u64> {
    debug_assert!(tree.kind == TreeKind::Multi);
    debug_assert!(
        values
            .iter()
            .all(|v| v.as_ref().len() <= super::MULTI_VALUE_SIZE_MAX_BYTES)
    );
    // The outer tree does not change between `load` and the store that ends each case
    // (new pages for a set tree, or a change inside one, leave it as it was), except where
    // an entry is removed first.
    let (at, set) = load(store, tree, key, finger)?;
    let mut added = 0;
    let split_nothing = match set {
        Some(OwnedSet::Tree(mut set)) => {
            for value in values {
                let in_set = tree_write::locate(store, set.root_page, value.as_ref())?;
                if in_set.entry(store)?.is_none() {
                    put(
                        store,
                        &mut set,
                        value.as_ref(),
                        NewEntry::Value(&[]),
                        Some(in_set),
                    )?;
                    added += 1;
                }
            }
            if added == 0 {
                return Ok(0);
            }
            store_tree(store, tree, key, &set, Some(at))?
        }
        embedded => {
            let existed = embedded.is_some();
            let mut bytes = match embedded {
                Some(OwnedSet::Embedded(bytes)) => bytes,
                _ => Vec::new(),
            };
            // Spliced into the encoded set while it fits: no decoding into a list and back.
            let mut rest = values.iter().map(AsRef::as_ref);
            let mut outgrown = None;
            for value in rest.by_ref() {
                // A stored set is never empty (its check says so); a new key's starts so.
                let position = if !existed && bytes.is_empty() {
                    Some(0)
                } else {
                    position_in_set(&bytes, value, at.leaf())?
                };
                let Some(position) = position else {
                    continue;
                };
                if bytes.len() + encoded_size([value]) > EMBEDDED_SET_MAX_BYTES {
                    outgrown = Some(value);
                    break;
                }
                let len = (value.len() as u16).to_le_bytes();
                bytes.splice(position..position, len.iter().chain(value).copied());
                added += 1;
            }
            match outgrown {
                None if added == 0 => return Ok(0),
                None => store_encoded(store, tree, key, &bytes, Some(at))?,
                Some(first) => {
                    let mut all = if bytes.is_empty() {
                        Vec::new()
                    } else {
                        decode_set(&bytes, at.leaf())?
                    };
                    let before = all.len();
                    all.extend(std::iter::once(first).chain(rest));
                    all.sort_unstable();
                    all.dedup();
                    added += (all.len() - before) as u64;
                    let set = new_set_tree(store, &all)?;
                    if existed {
                        // The entry changes from a value to a tree: replace it whole.
                        tree_write::remove(store, tree, key)?;
                        store_tree(store, tree, key, &set, None)?;
                        false
                    } else {
                        store_tree(store, tree, key, &set, Some(at))?
                    }
                }
            }
        }
    };
    if !split_nothing {
        finger.clear();
    }
    Ok(added)
}

/// Removes `value` from `key`'s set; the key goes when its set empties. Returns false if
/// the value was not there.
///
/// # Errors
/// Scratch full; corruption.
pub fn remove<S: PageStore>(
    store: &mut S,
    tree: &mut TreeHeader,
    key: &[u8],
    value: &[u8],
) -> Result<bool> {
    debug_assert!(tree.kind == TreeKind::Multi);
    let (at, set) = load(store, tree, key, &mut Finger::default())?;
    match set {
        None => Ok(false),
        Some(OwnedSet::Embedded(bytes)) => {
            let mut values = decode_set(&bytes, at.leaf())?;
            let Ok(i) = values.binary_search(&value) else {
                return Ok(false);
            };
            values.remove(i);
            if values.is_empty() {
                tree_write::remove(store, tree, key)?;
            } else {
                store_embedded(store, tree, key, &values, Some(at))?;
            }
            Ok(true)
        }
        Some(OwnedSet::Tree(mut set)) => {
            if !tree_write::remove(store, &mut set, value)? {
                return Ok(false);
            }
            // The removal may have freed the set tree's old root: store the new header
            // first, so that removing the key below frees the tree as it is now.
            store_tree(store, tree, key, &set, Some(at))?;
            if set.entry_count == 0 {
                tree_write::remove(store, tree, key)?; // frees the set's tree
            } else if let Some(values) = small_enough_to_embed(store, &set)? {
                let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
                tree_write::remove(store, tree, key)?;
                store_embedded(store, tree, key, &values, None)?;
            }
            Ok(true)
        }
    }
}

/// Removes `key` and its whole set. Returns how many values it held.
///
/// # Errors
/// Scratch full; corruption.
pub fn remove_key<S: PageStore>(store: &mut S, tree: &mut TreeHeader, key: &[u8]) -> Result<u64> {
    let (at, set) = load(store, tree, key, &mut Finger::default())?;
    let removed = match set {
        None => return Ok(0),
        Some(OwnedSet::Embedded(bytes)) => decode_set(&bytes, at.leaf())?.len() as u64,
        Some(OwnedSet::Tree(set)) => set.entry_count,
    };
    tree_write::remove(store, tree, key)?;
    Ok(removed)
}

/// The values of a set tree that is one leaf and would embed in half the embedded limit.
fn small_enough_to_embed<S: PageStore>(
    store: &S,
    set: &TreeHeader,
) -> Result<Option<Vec<Vec<u8>>>> {
    let page = store.page(set.root_page)?;
    if !node::is_leaf(page, set.root_page)? {
        return Ok(None);
    }
    let mut size_bytes = 0;
    let mut values = Vec::new();
    for i in 0..node::count(page) {
        let value = node::key(page, i, true, set.root_page)?;
        size_bytes += super::EMBEDDED_LEN_BYTES + value.len();
        if size_bytes > EMBEDDED_SET_MAX_BYTES / 2 {
            return Ok(None);
        }
        values.push(value.to_vec());
    }
    if values.is_empty() {
        return Err(corrupt(set.root_page, "a set's tree is empty"));
    }
    Ok(Some(values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::mem_store::MemStore;

    /// A stored embedded set over its limit (well formed otherwise) is damage: removing
    /// from it, adding to it and reading it fail with corruption, and nothing panics.
    #[test]
    fn an_embedded_set_over_its_limit_is_corruption() {
        let mut store = MemStore::default();
        let mut tree = TreeHeader {
            kind: TreeKind::Multi,
            ..tree_write::create(&mut store).expect("create")
        };
        let values: Vec<[u8; 8]> = (0..110u64).map(u64::to_be_bytes).collect();
        let bytes = encode_set(values.iter().map(|v| &v[..]));
        assert_eq!(bytes.len(), 1_100);
        tree_write::insert(&mut store, &mut tree, b"k", &bytes).expect("insert");
        fn corrupt<T>(r: Result<T>) -> bool {
            matches!(r, Err(crate::Error::Corruption { .. }))
        }
        assert!(corrupt(remove(&mut store, &mut tree, b"k", &values[5])));
        assert!(corrupt(add(&mut store, &mut tree, b"k", b"new")));
        assert!(corrupt(super::super::contains(
            &store,
            tree.root_page,
            b"k",
            b"x"
        )));
        assert!(corrupt(remove_key(&mut store, &mut tree, b"k")));
    }
}
