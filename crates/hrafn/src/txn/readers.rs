//! The active-reader table: one slot per live read transaction holding the id of
//! the state it reads. The flusher takes the minimum as the oldest reader and never writes
//! to the data file a page version newer than that, because such a reader may still read
//! the page's older version from the data file.

use super::state::State;
use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering, StateCell};
use std::time::Instant;

const FREE: u64 = u64::MAX;

/// A slot on its own cache line, so readers on different cores do not share one: the
/// state id its reader reads, and when the reader began (microseconds since the table was
/// made; for the oldest reader's age in stats and errors).
#[repr(align(64))]
struct Slot {
    txn_id: AtomicU64,
    began_us: AtomicU64,
}

/// The oldest open read transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldestReader {
    /// The state it reads.
    pub txn_id: u64,
    /// How long it has been open.
    pub age_ms: u64,
}

/// Fixed table of reader slots.
pub struct ReaderTable {
    slots: Box<[Slot]>,
    hint: AtomicUsize,
    epoch: Instant,
}

impl ReaderTable {
    /// A table of `readers_max` slots.
    pub fn new(readers_max: usize) -> ReaderTable {
        assert!(readers_max > 0, "at least one reader slot");
        ReaderTable {
            slots: (0..readers_max)
                .map(|_| Slot {
                    txn_id: AtomicU64::new(FREE),
                    began_us: AtomicU64::new(0),
                })
                .collect(),
            hint: AtomicUsize::new(0),
            epoch: Instant::now(),
        }
    }

    /// Registers a reader and returns its slot and the state it must read.
    ///
    /// The slot is published before the state is loaded, and the loaded state is at least
    /// as new as the published id, so the flusher (which reads slots after loading the
    /// current state) can never miss a reader it could harm. This rests on the single total
    /// order of `SeqCst` operations, which the state cell's loads and stores take part in.
    ///
    /// # Errors
    /// [`Error::ReadersFull`] when every slot is taken.
    pub fn register(&self, current: &StateCell<State>) -> Result<(usize, Arc<State>)> {
        let n = self.slots.len();
        let start = self.hint.fetch_add(1, Ordering::Relaxed) % n;
        let floor = current.load().txn_id;
        for i in 0..n {
            let slot = (start + i) % n;
            if self.slots[slot]
                .txn_id
                .compare_exchange(FREE, floor, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                self.slots[slot]
                    .began_us
                    .store(self.epoch.elapsed().as_micros() as u64, Ordering::Relaxed);
                loop {
                    let state = current.load_full();
                    if state.txn_id >= floor {
                        // Raising the slot to what it really reads only lets the flusher
                        // go further on pages this reader sees in its own PTT.
                        self.slots[slot]
                            .txn_id
                            .store(state.txn_id, Ordering::SeqCst);
                        return Ok((slot, state));
                    }
                }
            }
        }
        Err(Error::ReadersFull { readers_max: n })
    }

    /// Frees a slot.
    pub fn release(&self, slot: usize) {
        let old = self.slots[slot].txn_id.swap(FREE, Ordering::SeqCst);
        debug_assert_ne!(old, FREE, "released a free slot");
    }

    /// The oldest state id any registered reader may read, or `current` if none is older.
    pub fn oldest(&self, current: u64) -> u64 {
        self.slots
            .iter()
            .map(|s| s.txn_id.load(Ordering::SeqCst))
            .filter(|&v| v != FREE)
            .fold(current, u64::min)
    }

    /// The reader that began first, if any is open (for stats and errors: a scan of the
    /// table, not for hot paths).
    pub fn oldest_reader(&self) -> Option<OldestReader> {
        let now_us = self.epoch.elapsed().as_micros() as u64;
        self.slots
            .iter()
            .filter_map(|s| {
                let txn_id = s.txn_id.load(Ordering::Acquire);
                (txn_id != FREE).then(|| (s.began_us.load(Ordering::Relaxed), txn_id))
            })
            .min()
            .map(|(began_us, txn_id)| OldestReader {
                txn_id,
                age_ms: now_us.saturating_sub(began_us) / 1000,
            })
    }

    /// Registered readers.
    pub fn active_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.txn_id.load(Ordering::Relaxed) != FREE)
            .count()
    }
}
