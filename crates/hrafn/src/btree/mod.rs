//! B+trees over pages: point lookups, ordered iteration, inserts with splits, deletes with
//! merges, overflow runs for large values.
//!
//! Pages keep their numbers when they change (the page translation table maps a changed
//! page to its scratch copy), so a modification touches only the pages it edits, not the
//! path to the root. This module sees pages through [`PageSource`] (read) and
//! [`PageStore`] (copy-on-write edit, allocate, free); it must not depend on transactions,
//! the journal or files.

pub mod cursor;
#[cfg(test)]
pub(crate) mod mem_store;
pub mod node;
pub mod write;

pub use cursor::{Range, TreeCursor};

use crate::error::Result;
use crate::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
use crate::page::{OFFSET_AUX, PageKind, corrupt, get_u64};
use node::ValueRef;

/// Deepest tree walked before a page chain is declared corrupt (a cycle in a damaged file
/// must end in an error, not a hang). Fan-out is at least 3, so 48 levels is far beyond
/// any real file.
pub const DEPTH_MAX: usize = 48;

/// Deepest nesting of trees inside trees. A nested tree's header lives in its parent's
/// entry, so a damaged file could make a tree its own ancestor; the limit turns that into
/// an error instead of endless recursion, and keeps a write-through of headers short.
pub const NESTING_DEPTH_MAX: usize = 16;

/// Read access to pages for the lifetime `'a`.
pub trait PageSource<'a>: Copy {
    /// The bytes of `page_number`: exactly that page, or for the first page of an overflow
    /// run, exactly the run. Verified when read from the data file.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] for a bad page, I/O-free otherwise.
    fn page(self, page_number: u64) -> Result<&'a [u8]>;

    /// The first page-size bytes of `page_number`'s current version, unverified; `None`
    /// beyond the data. For probing a page an untrusted reference names (a table record
    /// id) before reading it through [`PageSource::page`]: any bytes may come back, so
    /// nothing read here may be trusted.
    fn page_unverified(self, page_number: u64) -> Option<&'a [u8]> {
        self.page(page_number).ok()
    }
}

/// Copy-on-write page access for a writing transaction.
pub trait PageStore {
    /// Current bytes of a page (the transaction's copy if it changed it).
    ///
    /// # Errors
    /// As [`PageSource::page`].
    fn page(&self, page_number: u64) -> Result<&[u8]>;
    /// As [`PageSource::page_unverified`].
    fn page_unverified(&self, page_number: u64) -> Option<&[u8]> {
        self.page(page_number).ok()
    }
    /// A writable copy of a page (copied into scratch on first use).
    ///
    /// # Errors
    /// [`crate::Error::ScratchFull`], or a bad page.
    fn page_mut(&mut self, page_number: u64) -> Result<&mut [u8]>;
    /// Allocates `page_count` contiguous pages, zeroed, with a header of `kind`; returns the
    /// first page's number. The run is writable through [`PageStore::page_mut`].
    ///
    /// # Errors
    /// [`crate::Error::ScratchFull`] or [`crate::Error::LimitExceeded`].
    fn allocate(&mut self, page_count: u64, kind: PageKind) -> Result<u64>;
    /// Releases `page_count` pages starting at `page_number` at commit.
    fn free(&mut self, page_number: u64, page_count: u64);
}

/// Reads through a [`PageStore`] as a [`PageSource`], for code that reads a tree it is
/// about to change.
pub(crate) struct Reading<'s, S: ?Sized>(pub(crate) &'s S);

impl<S: ?Sized> Clone for Reading<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for Reading<'_, S> {}

impl<'s, S: PageStore + ?Sized> PageSource<'s> for Reading<'s, S> {
    #[inline]
    fn page(self, page_number: u64) -> Result<&'s [u8]> {
        self.0.page(page_number)
    }

    #[inline]
    fn page_unverified(self, page_number: u64) -> Option<&'s [u8]> {
        self.0.page_unverified(page_number)
    }
}

/// What a named tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    /// A B+tree of byte keys and values (`btree/`).
    BTree,
    /// A fixed-size tree: `u64` keys, values of `value_size` bytes (`fixed/`).
    Fixed { value_size: u16 },
    /// A multi-value tree: each key holds a sorted set of values (`multi/`).
    Multi,
    /// A table: records in record pages, a primary key and indexes (`table/`). The root
    /// is the table's own B+tree; the entry count is the number of records.
    Table,
}

/// The stored form of a tree (24 bytes, little-endian): root page u64, entry count u64,
/// kind u8 (0 B+tree, 1 fixed-size, 2 multi-value, 3 table), reserved u8, value size u16 (fixed-size trees),
/// reserved u32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeHeader {
    pub root_page: u64,
    pub entry_count: u64,
    pub kind: TreeKind,
}

/// Encoded size of a [`TreeHeader`].
pub const TREE_HEADER_SIZE_BYTES: usize = 24;

impl TreeKind {
    /// The value size of a fixed-size tree; `None` for other kinds.
    pub fn fixed_value_size(self) -> Option<usize> {
        match self {
            TreeKind::Fixed { value_size } => Some(usize::from(value_size)),
            TreeKind::BTree | TreeKind::Multi | TreeKind::Table => None,
        }
    }
}

impl std::fmt::Display for TreeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeKind::BTree => write!(f, "a B+tree"),
            TreeKind::Fixed { value_size } => {
                write!(f, "a fixed-size tree of {value_size}-byte values")
            }
            TreeKind::Multi => write!(f, "a multi-value tree"),
            TreeKind::Table => write!(f, "a table"),
        }
    }
}

impl TreeHeader {
    /// Fails with [`crate::Error::WrongTreeKind`] unless the tree is of `kind`.
    ///
    /// # Errors
    /// As said.
    pub fn expect_kind(&self, name: &str, kind: TreeKind) -> Result<()> {
        if self.kind == kind {
            return Ok(());
        }
        Err(crate::Error::WrongTreeKind {
            name: name.to_owned(),
            found: self.kind.to_string(),
            wanted: kind.to_string(),
        })
    }

    /// A B+tree's header.
    pub fn btree(root_page: u64, entry_count: u64) -> TreeHeader {
        TreeHeader {
            root_page,
            entry_count,
            kind: TreeKind::BTree,
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; TREE_HEADER_SIZE_BYTES] {
        let mut out = [0u8; TREE_HEADER_SIZE_BYTES];
        out[..8].copy_from_slice(&self.root_page.to_le_bytes());
        out[8..16].copy_from_slice(&self.entry_count.to_le_bytes());
        match self.kind {
            TreeKind::BTree => {}
            TreeKind::Fixed { value_size } => {
                out[16] = 1;
                out[18..20].copy_from_slice(&value_size.to_le_bytes());
            }
            TreeKind::Multi => out[16] = 2,
            TreeKind::Table => out[16] = 3,
        }
        out
    }

    /// Decodes a header stored as a value of the root tree.
    ///
    /// # Errors
    /// [`crate::Error::Corruption`] if the value has the wrong size or kind.
    pub fn decode(bytes: &[u8], where_page: u64) -> Result<TreeHeader> {
        if bytes.len() != TREE_HEADER_SIZE_BYTES {
            return Err(corrupt(where_page, "tree header of the wrong size"));
        }
        let value_size = u16::from_le_bytes([bytes[18], bytes[19]]);
        let kind = match bytes[16] {
            0 => TreeKind::BTree,
            1 if usize::from(value_size) <= crate::fixed::FIXED_VALUE_SIZE_MAX_BYTES => {
                TreeKind::Fixed { value_size }
            }
            2 => TreeKind::Multi,
            3 => TreeKind::Table,
            _ => return Err(corrupt(where_page, "tree header of an unknown kind")),
        };
        Ok(TreeHeader {
            root_page: get_u64(bytes, 0),
            entry_count: get_u64(bytes, 8),
            kind,
        })
    }
}

/// Looks `key` up in the tree rooted at `root_page`. An entry holding a nested tree yields
/// the tree's stored header.
///
/// # Errors
/// [`crate::Error::Corruption`] for damaged pages.
#[inline]
pub fn get<'a, S: PageSource<'a>>(src: S, root_page: u64, key: &[u8]) -> Result<Option<&'a [u8]>> {
    match get_stored(src, root_page, key)? {
        Some(value) => Ok(Some(resolve_value(src, value)?)),
        None => Ok(None),
    }
}

/// Looks `key` up and returns its entry as stored (overflow runs not followed).
///
/// # Errors
/// [`crate::Error::Corruption`] for damaged pages.
#[inline]
pub fn get_stored<'a, S: PageSource<'a>>(
    src: S,
    root_page: u64,
    key: &[u8],
) -> Result<Option<ValueRef<'a>>> {
    let mut page_number = root_page;
    for _ in 0..DEPTH_MAX {
        let page = src.page(page_number)?;
        if node::is_leaf(page, page_number)? {
            return match node::search(page, key, true, page_number)? {
                Ok(i) => Ok(Some(node::leaf_entry(page, i, page_number)?.1)),
                Err(_) => Ok(None),
            };
        }
        let c = node::child_index_for(page, key, page_number)?;
        page_number = node::child_at(page, c, page_number)?;
    }
    Err(corrupt(
        root_page,
        "tree deeper than any valid tree (cycle?)",
    ))
}

/// Checks that `run` (from its first page on) is the overflow run that a reference of
/// `len_bytes` at `first_page` names: read through, or freed, only then.
///
/// # Errors
/// [`crate::Error::Corruption`] when it is not.
#[inline]
pub(crate) fn check_overflow_run(run: &[u8], first_page: u64, len_bytes: u64) -> Result<()> {
    if len_bytes > crate::limits::VALUE_SIZE_MAX_BYTES as u64
        || crate::page::kind(run, first_page)? != PageKind::Overflow
        || get_u64(run, OFFSET_AUX) != len_bytes
    {
        return Err(corrupt(
            first_page,
            "overflow run does not match its reference",
        ));
    }
    Ok(())
}

/// The bytes of a leaf value, following an overflow reference.
///
/// # Errors
/// [`crate::Error::Corruption`] when the overflow run does not match the reference.
#[inline]
pub fn resolve_value<'a, S: PageSource<'a>>(src: S, value: ValueRef<'a>) -> Result<&'a [u8]> {
    match value {
        ValueRef::Inline(bytes) | ValueRef::Tree(bytes) | ValueRef::Embedded(bytes) => Ok(bytes),
        ValueRef::Overflow {
            first_page,
            len_bytes,
        } => {
            let run = src.page(first_page)?;
            check_overflow_run(run, first_page, len_bytes)?;
            let end = usize::try_from(len_bytes)
                .ok()
                .and_then(|n| n.checked_add(PAGE_HEADER_SIZE_BYTES))
                .filter(|&end| end <= run.len())
                .ok_or_else(|| corrupt(first_page, "overflow run shorter than its value"))?;
            Ok(&run[PAGE_HEADER_SIZE_BYTES..end])
        }
    }
}

/// Whether a value of `value_len` bytes under a key of `key_len` bytes stays in the node.
pub fn fits_inline(key_len: usize, value_len: usize) -> bool {
    node::SLOT_BYTES + node::LEAF_INLINE_HEADER_BYTES + key_len + value_len
        <= crate::limits::INLINE_ENTRY_MAX_BYTES
}

const _: () = assert!(PAGE_HEADER_SIZE_BYTES < PAGE_SIZE_BYTES);
