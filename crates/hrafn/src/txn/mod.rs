//! Transactions: the published state, the reader table, read transactions and the single
//! write transaction with its commit protocol.
//!
//! Commit protocol (see `docs/design.md`): (1) write tree headers and the meta page into
//! the dirty set; (2) seal page checksums and diff each page against the version the
//! transaction started from; (3) append one journal record — durable on return; (4) publish
//! the new state (PTT + dirty pages) with one atomic swap. A crash before (3) completes
//! loses only this unacknowledged transaction; after it, replay rebuilds it.

mod alloc;
mod commit;
pub mod cursor;
pub mod fixed;
pub mod handle;
pub mod merge;
#[cfg(all(test, hrafn_loom))]
mod model_tests;
pub mod multi;
pub mod read;
pub mod readers;
pub mod state;
pub mod table;
pub mod write;

pub use cursor::KeyCursor;
pub use fixed::{FixedTree, FixedTreeMut};
pub use handle::{TableHandle, TreeHandle};
pub use merge::WriteBatch;
pub use multi::{MultiTree, MultiTreeMut};
pub use read::{ReadTxn, Tree};
pub use table::{Table, TableMut};
pub use write::{TreeMut, WriteTxn, WriterCore};
