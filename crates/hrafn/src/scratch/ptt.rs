//! The page translation table: page number → newest committed scratch copy.
//!
//! It is a persistent ordered map (`imbl::OrdMap`): publishing a commit clones it in O(1)
//! and inserts only the changed pages, older states keep sharing the untouched nodes, and the
//! flusher walks it in page order for sequential data-file writes.

use super::PageBuf;
use std::sync::Arc;

/// One committed page version held in scratch.
#[derive(Debug, Clone)]
pub struct PttEntry {
    /// Transaction that wrote this version.
    pub txn_id: u64,
    /// Oldest transaction whose version of this page has not reached the data file. A sync
    /// point must stay below it: replaying from a later point would apply this page's newer
    /// diffs on top of a data-file page that is older than they assume.
    pub first_unflushed_txn_id: u64,
    /// The buffer holding the page (a run buffer for overflow values).
    pub buf: Arc<PageBuf>,
    /// Index of this page inside `buf`.
    pub index_in_buf: u32,
}

impl PttEntry {
    /// The page's bytes: the whole buffer for its first page (an overflow run is one
    /// buffer), exactly one page for any other.
    pub fn bytes(&self) -> &[u8] {
        use crate::limits::PAGE_SIZE_BYTES;
        let at = self.index_in_buf as usize * PAGE_SIZE_BYTES;
        if at == 0 {
            self.buf.bytes()
        } else {
            &self.buf.bytes()[at..at + PAGE_SIZE_BYTES]
        }
    }
}

/// The page translation table of one state.
pub type Ptt = imbl::OrdMap<u64, PttEntry>;
