//! Names for the iterators the structures return, so a program can keep one in a struct
//! or write it in a signature. Read-side iterators borrow their read transaction (`'t`);
//! write-side ones borrow the handle they came from (`'s`), and those that read through
//! the write transaction also name its environment (`'env`; `TreeRangeMut` needs only
//! `'s`).
//!
//! ```
//! use hrafn::iter::TreeRange;
//! /// Pages through a tree, `n` entries at a time.
//! struct Pager<'t> {
//!     entries: TreeRange<'t>,
//! }
//! impl Pager<'_> {
//!     fn page(&mut self, n: usize) -> hrafn::Result<Vec<Vec<u8>>> {
//!         (&mut self.entries)
//!             .take(n)
//!             .map(|e| e.map(|(k, _)| k.to_vec()))
//!             .collect()
//!     }
//! }
//! # let dir = tempfile::tempdir().unwrap();
//! let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
//! let mut wtx = env.begin_write()?;
//! for k in [b"a", b"b", b"c"] {
//!     wtx.open_tree("t")?.insert(k, b"")?;
//! }
//! wtx.commit()?;
//! let rtx = env.begin_read()?;
//! let tree = rtx.open_tree("t")?;
//! let mut pager = Pager { entries: tree.range::<&[u8], _>(..)? };
//! assert_eq!(pager.page(2)?, vec![b"a".to_vec(), b"b".to_vec()]);
//! assert_eq!(pager.page(2)?, vec![b"c".to_vec()]);
//! # Ok::<(), hrafn::Error>(())
//! ```

use crate::txn::WriteTxn;
use crate::txn::state::State;

/// Entries of a B+tree in a read transaction ([`crate::Tree::range`], `prefix`).
pub type TreeRange<'t> = crate::btree::Range<'t, &'t State>;
/// Entries of a B+tree in a write transaction ([`crate::TreeMut::range`], `prefix`).
pub type TreeRangeMut<'s> = crate::btree::Range<'s, &'s WriteTxn<'s>>;
/// A cursor over a B+tree in a read transaction ([`crate::Tree::cursor`]).
pub type TreeCursor<'t> = crate::btree::cursor::TreeCursor<'t, &'t State>;
/// Entries of a fixed-size tree in a read transaction ([`crate::FixedTree::range`]).
pub type FixedRange<'t> = crate::fixed::FixedRange<'t, &'t State>;
/// Entries of a fixed-size tree in a write transaction ([`crate::FixedTreeMut::range`]).
pub type FixedRangeMut<'s, 'env> = crate::fixed::FixedRange<'s, &'s WriteTxn<'env>>;
/// The values of one key of a multi-value tree in a read transaction
/// ([`crate::MultiTree::values`]).
pub type Values<'t> = crate::multi::Values<'t, &'t State>;
/// The same in a write transaction ([`crate::MultiTreeMut::values`]).
pub type ValuesMut<'s, 'env> = crate::multi::Values<'s, &'s WriteTxn<'env>>;
/// A table's records in id order in a read transaction ([`crate::Table::scan`]).
pub type TableScan<'t> = crate::table::Scan<'t, &'t State>;
/// The same in a write transaction ([`crate::TableMut::scan`]).
pub type TableScanMut<'s, 'env> = crate::table::Scan<'s, &'s WriteTxn<'env>>;
