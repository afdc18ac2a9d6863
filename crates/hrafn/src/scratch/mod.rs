//! Scratch: page copies of recent transactions, and the page translation table (PTT).
//!
//! A write transaction copies each page it changes into a [`PageBuf`]; at commit the buffers
//! become immutable (`Arc`) and enter the PTT of the new state. Readers that started earlier
//! keep their own state and so their own `Arc`s: a buffer is freed only when no state that
//! can see it is alive, which is exactly "no reader older than its release" without a
//! separate epoch scheme. [`ScratchUsage`] counts the bytes held, for the limit and stats.

mod ptt;

pub use ptt::{Ptt, PttEntry};

use crate::limits::PAGE_SIZE_BYTES;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of scratch in use, shared by every buffer of one environment.
#[derive(Debug, Default)]
pub struct ScratchUsage {
    used_bytes: AtomicU64,
    peak_bytes: AtomicU64,
}

impl ScratchUsage {
    /// Bytes currently held by page copies.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Highest `used_bytes` seen since open.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    fn add(&self, bytes: u64) {
        let now = self.used_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        let before = self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(before >= bytes, "scratch accounting underflow");
    }
}

/// A copy of one page, or of a run of pages holding one large value, in scratch memory.
pub struct PageBuf {
    bytes: Box<[u8]>,
    usage: Arc<ScratchUsage>,
}

impl PageBuf {
    /// A zeroed buffer of `page_count` pages, counted against `usage`.
    pub fn zeroed(page_count: usize, usage: &Arc<ScratchUsage>) -> PageBuf {
        assert!(page_count >= 1, "a page buffer holds at least one page");
        let len = page_count * PAGE_SIZE_BYTES;
        usage.add(len as u64);
        PageBuf {
            bytes: vec![0u8; len].into_boxed_slice(),
            usage: Arc::clone(usage),
        }
    }

    /// A buffer holding a copy of `bytes` (a whole number of pages).
    pub fn copy_of(bytes: &[u8], usage: &Arc<ScratchUsage>) -> PageBuf {
        assert!(
            !bytes.is_empty() && bytes.len() % PAGE_SIZE_BYTES == 0,
            "page copies are whole pages"
        );
        usage.add(bytes.len() as u64);
        PageBuf {
            bytes: bytes.into(),
            usage: Arc::clone(usage),
        }
    }

    /// Number of pages held.
    pub fn page_count(&self) -> usize {
        self.bytes.len() / PAGE_SIZE_BYTES
    }

    /// All bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// All bytes, mutable (only while owned by the writing transaction).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        self.usage.sub(self.bytes.len() as u64);
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({} pages)", self.page_count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_follows_buffers() {
        let usage = Arc::new(ScratchUsage::default());
        let a = PageBuf::zeroed(2, &usage);
        let b = PageBuf::copy_of(a.bytes(), &usage);
        assert_eq!(usage.used_bytes(), 4 * PAGE_SIZE_BYTES as u64);
        drop(a);
        drop(b);
        assert_eq!(usage.used_bytes(), 0);
        assert_eq!(usage.peak_bytes(), 4 * PAGE_SIZE_BYTES as u64);
    }
}
