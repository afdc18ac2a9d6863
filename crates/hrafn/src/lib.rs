//! Hrafn: an embedded, fully ACID key-value storage engine in the design of RavenDB's Voron.
//!
//! One writer and any number of readers share an environment (a directory). A write
//! transaction copies the pages it changes into scratch memory; its commit appends one
//! journal record (page diffs, LZ4-compressed) with `O_DIRECT|O_DSYNC` and then publishes a
//! new page translation table with one atomic swap. Read transactions keep the snapshot
//! they started with. A background flusher later copies pages into the memory-mapped data
//! file, syncs it, and recycles journals. Opening replays the journal.
//!
//! ```
//! use hrafn::{Environment, Options};
//!
//! # fn main() -> hrafn::Result<()> {
//! let dir = tempfile::tempdir().expect("temporary directory");
//! let env = Environment::open(dir.path(), Options::default())?;
//!
//! let mut wtx = env.begin_write()?;
//! {
//!     let mut fruit = wtx.open_tree("fruit")?;
//!     fruit.insert(b"apple", b"red")?;
//!     fruit.insert(b"banana", b"yellow")?;
//!     fruit.insert(b"cherry", b"dark red")?;
//! }
//! wtx.commit()?; // durable when this returns
//!
//! let rtx = env.begin_read()?;
//! let fruit = rtx.open_tree("fruit")?;
//! assert_eq!(fruit.get(b"banana")?, Some(&b"yellow"[..]));
//! let keys: Vec<&[u8]> = fruit.range(&b"b"[..]..)?.map(|e| e.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(keys, vec![&b"banana"[..], &b"cherry"[..]]);
//! # Ok(())
//! # }
//! ```

/// Declares modules that are the engine's internals: crate-private, or public but hidden
/// with the `internals` feature, which only the crash suites, fuzz targets and benches use
/// (not a stable API).
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(feature = "internals")]
            #[doc(hidden)]
            pub mod $name;
            #[cfg(not(feature = "internals"))]
            #[allow(dead_code, unused_imports)]
            mod $name;
        )*
    };
}

internal_modules!(freespace, header, journal, meta, page, scratch);

pub mod backup;
pub mod btree;
pub mod check;
mod checksum;
pub mod compact;
mod env;
pub mod error;
pub mod fixed;
mod flush;
mod flush_log;
pub mod iter;
pub mod limits;
mod metrics;
pub mod multi;
pub mod report;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod steady;
pub mod storage;
mod sync;
pub mod table;
mod txn;
#[cfg(feature = "typed")]
pub mod typed;
pub mod walk;

pub use check::CheckReport;
pub use compact::{CompactProgress, CompactReport};
pub use env::{DATA_FILE, Durability, Environment, Options, Stats};
pub use error::{CorruptionSite, Error, Result};
pub use report::{EnvironmentReport, PageCounts, PageOwners, StorageReport, StructureReport};
pub use txn::cursor::{Removable, Seekable};
pub use txn::{
    FixedTree, FixedTreeMut, KeyCursor, MultiTree, MultiTreeMut, ReadTxn, Table, TableHandle,
    TableMut, Tree, TreeHandle, TreeMut, WriteBatch, WriteTxn,
};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
