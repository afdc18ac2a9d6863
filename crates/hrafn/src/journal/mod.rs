//! The write-ahead journal: record format, page diffs, the writer and recovery.
//!
//! A commit is durable when its record is on disk; nothing else is written on the commit
//! path. Must not depend on transactions or trees: it sees pages only as bytes.

pub mod diff;
pub mod record;
pub mod recovery;
pub(crate) mod spare;
pub mod writer;

pub use writer::{JournalIndex, JournalWriter, RecordEnd, journal_file_name};
