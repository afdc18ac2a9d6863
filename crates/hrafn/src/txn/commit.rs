//! Steps 3 and 4 of the commit protocol, split from preparation so they can overlap the
//! next transaction (pipelined commit): the record of transaction N is appended and N is
//! published while N+1 already runs on N's pending state. Records are appended strictly in
//! transaction order (each waits for its turn), so N+1 is never durable — nor acknowledged —
//! before N.

use super::state::State;
use crate::env::EnvInner;
use crate::error::{Error, Result};
use crate::journal::record::RecordHeader;
use crate::journal::writer::{RecordBuf, keep_buffer};
use crate::scratch::{PageBuf, Ptt, PttEntry};
use crate::sync::StateCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Largest record buffer always kept for the next commit (its capacity, reserved for
/// every page whole; the pages it keeps mapped are those the largest recent payload
/// reached). A larger one is kept while payloads stay large ([`keep_buffer`]).
const RECORD_SPARE_CAPACITY_MAX_BYTES: usize = 64 << 20;

/// A transaction sealed and diffed, waiting for its journal write.
pub(crate) struct Prepared<'env> {
    pub env: &'env EnvInner,
    pub txn_id: u64,
    pub header: RecordHeader,
    pub record: RecordBuf,
    pub pages: Vec<(u64, Arc<PageBuf>)>,
    /// The PTT this transaction was built on, and that PTT with its pages: publish reuses
    /// the latter when nothing (a flush) changed the published PTT meanwhile.
    pub base_ptt: Ptt,
    pub ptt: Ptt,
    pub dirty_bytes: u64,
    /// Whether `finish` returns only once the record is on disk.
    pub durable: bool,
    pub finished: bool,
}

/// `ptt` plus `pages` written by `txn_id`. An entry replacing an unflushed version keeps
/// that version's `first_unflushed_txn_id` (the sync rule in `flush.rs`).
pub(crate) fn with_pages(ptt: &Ptt, pages: &[(u64, Arc<PageBuf>)], txn_id: u64) -> Ptt {
    let mut out = ptt.clone();
    for (page_number, buf) in pages {
        for i in 0..buf.page_count() {
            out.upsert(page_number + i as u64, |old| PttEntry {
                txn_id,
                first_unflushed_txn_id: old.map_or(txn_id, |e| e.first_unflushed_txn_id),
                buf: Arc::clone(buf),
                index_in_buf: i as u32,
            });
        }
    }
    out
}

/// Publishes transaction `txn_id` (its `pages`, built on `base_ptt` into `ptt`) on top of
/// the current state, which the flusher (a flush pass, or a spill's swap) may have changed
/// since: `ptt` is reused only if it did not. Returns whether it did (then `base_ptt` may
/// hold the last references to entries the flusher dropped). The caller holds the
/// publish lock.
pub(crate) fn publish(
    cell: &StateCell<State>,
    txn_id: u64,
    base_ptt: &Ptt,
    ptt: &Ptt,
    pages: &[(u64, Arc<PageBuf>)],
) -> bool {
    let current = cell.load_full();
    let flushed_meanwhile = !current.ptt.ptr_eq(base_ptt);
    let ptt = if flushed_meanwhile {
        with_pages(&current.ptt, pages, txn_id)
    } else {
        ptt.clone()
    };
    cell.store(Arc::new(State {
        txn_id,
        ptt,
        data: current.data.clone(),
    }));
    flushed_meanwhile
}

impl Prepared<'_> {
    /// Appends the record (durable on return if `durable`), then publishes the new state.
    ///
    /// # Errors
    /// A failed journal write poisons the environment; a transaction prepared on top of a
    /// failed one fails with [`Error::Poisoned`].
    pub fn finish(mut self) -> Result<()> {
        self.finished = true;
        let env = self.env;
        let result = self.append_and_publish();
        if result.is_err() {
            self.release(env);
        }
        result
    }

    /// Counts this transaction out of the pipeline and wakes whoever waits on it.
    fn release(&self, env: &EnvInner) {
        env.commits_in_flight.fetch_sub(1, Ordering::SeqCst);
        env.journal_turn.notify_all();
        env.merger.wake();
    }

    fn append_and_publish(&mut self) -> Result<()> {
        let env = self.env;
        let mut guard = env.journal.lock();
        while guard.as_ref().ok_or(Error::ReadOnly)?.last_txn_id() + 1 != self.txn_id {
            env.check_poison()?;
            env.journal_turn.wait(&mut guard);
        }
        env.check_poison()?;
        let journal = guard.as_mut().expect("checked in the loop");
        let (bytes_before, stored_before, number_before, past_half_before) = (
            journal.bytes_written,
            journal.stored_bytes,
            journal.journal_number(),
            journal.past_half(),
        );
        let payload_bytes = self.record.payload().len() as u64;
        let writing = std::time::Instant::now();
        let appended = journal.append(
            self.header,
            &mut self.record,
            self.durable,
            &env.journal_index,
        );
        env.counters
            .latencies
            .journal_write
            .record(writing.elapsed());
        if let Err(error) = appended {
            env.poison_with(&error);
            return Err(error);
        }
        let buf = self.record.take_buf();
        if buf.capacity() <= RECORD_SPARE_CAPACITY_MAX_BYTES
            || keep_buffer(buf.capacity(), buf.len())
        {
            *env.record_spare.lock() = Some(buf);
        }
        let rotated = journal.journal_number() != number_before;
        if rotated {
            *env.journal_file.lock() = Some(journal.current_file());
            env.current_journal
                .store(journal.journal_number(), Ordering::SeqCst);
        }
        // Passing half full (once per file): spares are made between flush passes, and the
        // timer alone may come after a young environment's small first journal fills.
        if rotated || (!past_half_before && journal.past_half()) {
            env.flusher.journal_progressed();
        }
        let c = &env.counters;
        c.commits.fetch_add(1, Ordering::Relaxed);
        c.journal_writes.fetch_add(1, Ordering::Relaxed);
        c.journal_bytes_written
            .fetch_add(journal.bytes_written - bytes_before, Ordering::Relaxed);
        c.journal_payload_bytes
            .fetch_add(payload_bytes, Ordering::Relaxed);
        c.journal_stored_bytes
            .fetch_add(journal.stored_bytes - stored_before, Ordering::Relaxed);
        c.dirty_page_bytes
            .fetch_add(self.dirty_bytes, Ordering::Relaxed);

        {
            let _publish = env.publish.lock();
            // Logged before it is published: a flusher that sees the state sees its pages.
            let written = self
                .pages
                .iter()
                .flat_map(|(first, buf)| *first..*first + buf.page_count() as u64)
                .collect();
            if env.flush_log.record(self.txn_id, written) {
                // A reader pins the flusher's bound; a pass keeps the log small meanwhile.
                env.flusher.kick();
            }
            let flushed_meanwhile = publish(
                &env.state,
                self.txn_id,
                &self.base_ptt,
                &self.ptt,
                &self.pages,
            );
            if flushed_meanwhile {
                // The base table may now hold the last references to what the flush
                // wrote: freeing those copies is the flusher's work, not this commit's.
                env.retired.lock().push(std::mem::take(&mut self.base_ptt));
                env.flusher.retired();
            }
        }
        // Still under the journal lock: publishes happen in transaction order too.
        drop(guard);
        // Once published, the pending copy would only pin scratch the flusher could free.
        let mut pending = env.pending_state.lock();
        if pending.as_ref().is_some_and(|p| p.txn_id == self.txn_id) {
            *pending = None;
        }
        drop(pending);
        self.release(env);
        if env.usage.used_bytes() >= crate::flush::flush_threshold_bytes(&env.options) {
            env.flusher.kick();
        }
        Ok(())
    }
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // A prepared transaction that never reaches the journal would block every later
            // one; refuse further writes instead.
            self.env.poison_with(&Error::InvalidArgument(format!(
                "prepared transaction {} was dropped before its journal write",
                self.txn_id
            )));
            self.release(self.env);
        }
    }
}
