//! The flusher: moves committed pages from scratch to the data file, syncs it, writes the
//! header and retires journals. Runs on its own thread, off the commit path.
//!
//! Flush rule: a page version of transaction `t` goes to the data file only if
//! `t <= oldest reader`. A reader older than `t` may read the page's previous version from
//! the data file; every newer reader sees version `t` (or newer) in its own PTT.
//!
//! Sync rule: the header may declare transaction `S` synced only when, for every page, the
//! data file holds its version as of `S` or the journal after `S` rebuilds it: `S` stays
//! below the oldest version still waiting in scratch (`first_unflushed_txn_id`).

use crate::env::{DataWritePhase, EnvInner, Options};
use crate::error::{Error, Result};
use crate::header::{self, Header};
use crate::journal::{JournalIndex, journal_file_name, spare};
use crate::limits::PAGE_SIZE_BYTES;
use crate::scratch::spill::{self, Spiller};
use crate::storage::{Storage, StorageEvent, write_all_at};
use crate::sync::StateCell;
use crate::txn::state::{DataView, State};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Largest single data-file write; contiguous pages are batched up to this. Small on
/// purpose: the page cache sizes its folios by the write, and every later one-page write
/// into a large folio walks all of its blocks (ext4), which made 4 MiB batches cost the
/// flusher a tenth of its time under random writes. 64 KiB keeps syscalls few.
const WRITE_BATCH_BYTES: usize = 64 << 10;
/// Journal files waiting for a sync that trigger one (they hold the only durable copy of
/// what is not yet synced, so their count bounds recovery time and journal disk use).
const JOURNALS_PENDING_MAX: usize = 8;
/// Growth step cap for the data file.
const GROWTH_STEP_MAX_BYTES: u64 = 1 << 30;
/// The data file's size is a whole number of these.
pub(crate) const GROWTH_GRANULARITY_BYTES: u64 = 1 << 20;

/// What the flusher remembers between passes (guarded by a mutex: one pass at a time).
pub(crate) struct FlushBook {
    /// The last durable header.
    pub header: Header,
    /// Allocated size of the data file.
    pub data_size_bytes: u64,
    pub last_sync: Instant,
    pub bytes_since_sync: u64,
    /// Writes page copies past the scratch memory budget into scratch files.
    pub spiller: Spiller,
}

impl FlushBook {
    pub fn new(header: Header, data_size_bytes: u64) -> FlushBook {
        FlushBook {
            header,
            data_size_bytes,
            last_sync: Instant::now(),
            bytes_since_sync: 0,
            spiller: Spiller::default(),
        }
    }
}

/// What the flusher thread has been asked to do.
#[derive(Default)]
struct Signal {
    kicked: bool,
    shutdown: bool,
    /// The writer moved to a new journal file or passed half of one.
    journals: bool,
    retired: bool,
}

/// What one wake of the flusher thread found.
struct Wake {
    stop: bool,
    /// A flush was asked for (scratch past the threshold, a writer waiting for room).
    kicked: bool,
    /// The timer's tick is due (whether or not a request woke the thread too).
    tick_due: bool,
}

/// Wake-ups for the flusher thread.
#[derive(Default)]
pub(crate) struct Flusher {
    signal: Mutex<Signal>,
    condvar: Condvar,
}

impl Flusher {
    /// Asks for a flush pass now.
    pub fn kick(&self) {
        self.signal.lock().kicked = true;
        self.condvar.notify_one();
    }

    /// Tells the flusher the writer moved to a new journal file or passed half of one:
    /// the pool of ready files may need a top-up, and the journals waiting for a sync may
    /// have reached their limit.
    pub fn journal_progressed(&self) {
        self.signal.lock().journals = true;
        self.condvar.notify_one();
    }

    /// Tells the flusher a page table waits in [`EnvInner::retired`] to be dropped.
    pub fn retired(&self) {
        self.signal.lock().retired = true;
        self.condvar.notify_one();
    }

    /// Asks the thread to flush everything and stop.
    pub fn shutdown(&self) {
        self.signal.lock().shutdown = true;
        self.condvar.notify_one();
    }

    /// Waits for a request or the tick due at `tick`. The tick keeps its time however
    /// often requests come: waiting a whole interval from each wake would put it off for
    /// as long as commits keep waking the thread, and with it the timed sync.
    fn wait(&self, tick: Instant) -> Wake {
        let mut signal = self.signal.lock();
        if !signal.kicked && !signal.shutdown && !signal.journals && !signal.retired {
            self.condvar.wait_until(&mut signal, tick);
        }
        let tick_due = Instant::now() >= tick;
        signal.journals = false;
        signal.retired = false;
        Wake {
            stop: signal.shutdown,
            kicked: std::mem::take(&mut signal.kicked),
            tick_due,
        }
    }
}

/// Makes sure the data file has at least `needed_bytes` allocated and returns its
/// allocated size. Shared by the flusher and by transactions that take pages from the end
/// of the file, so both follow one growth policy: a quarter of the file (at least 1 MiB, at
/// most 1 GiB) keeps growth rare without doubling the file; on a nearly full disk, only what
/// is needed, after the spare journals are removed. `fallocate`, never `ftruncate`: a hole
/// under the mapping would turn ENOSPC into SIGBUS. The size is tracked in memory, so the
/// common case costs no system call.
pub(crate) fn grow_data_file(inner: &EnvInner, needed_bytes: u64) -> Result<u64> {
    let current = inner.data_allocated_bytes.load(Ordering::Acquire);
    if needed_bytes <= current {
        return Ok(current);
    }
    let step = (current / 4).clamp(GROWTH_GRANULARITY_BYTES, GROWTH_STEP_MAX_BYTES);
    let mut target = needed_bytes
        .max(current + step)
        .next_multiple_of(GROWTH_GRANULARITY_BYTES);
    if let Err(e) = inner.data_file.allocate(target) {
        if e.raw_os_error() != Some(libc::ENOSPC) {
            return Err(Error::io("growing the data file", e));
        }
        // Data comes before spare journals: give their space back, then ask for only what
        // is needed.
        if let Err(error) = spare::remove_ready(&*inner.storage, &inner.journal_index) {
            tracing::warn!(%error, "could not remove spare journals on a full disk");
        }
        target = needed_bytes;
        inner
            .data_file
            .allocate(target)
            .map_err(|e| Error::io("growing the data file", e))?;
    }
    Ok(inner
        .data_allocated_bytes
        .fetch_max(target, Ordering::AcqRel)
        .max(target))
}

/// Starts the flusher thread.
pub(crate) fn spawn(inner: Arc<EnvInner>) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("hrafn-flusher".into())
        .spawn(move || {
            // A panic here is a bug, but an environment left without its flusher would
            // keep committing while journals and scratch grow without bound and nothing
            // reaches the data file: it refuses writes instead, saying why.
            let run = std::panic::AssertUnwindSafe(|| run_flusher(&inner));
            if let Err(panic) = std::panic::catch_unwind(run) {
                let message = crate::error::panic_message(&*panic);
                inner.poison_with_cause(format!("the flusher thread panicked: {message}"));
                std::panic::resume_unwind(panic);
            }
        })
        .map_err(|e| Error::io("starting the flusher thread", e))
}

/// The flusher thread's loop, until shutdown.
fn run_flusher(inner: &EnvInner) {
    let interval = Duration::from_millis(inner.options.flush_interval_ms.max(1));
    let mut commits_seen = inner.counters.commits.load(Ordering::Relaxed);
    let mut spares = SpareMaker::default();
    let mut tick = Instant::now() + interval;
    loop {
        let wake = inner.flusher.wait(tick);
        if wake.tick_due {
            tick = Instant::now() + interval;
        }
        // Taken, then dropped once the lock is released: freeing a retired table can free
        // a pass's worth of copies and remove scratch files, and commits take this lock
        // while they hold the journal and publish locks.
        let retired = std::mem::take(&mut *inner.retired.lock());
        drop(retired);
        // Idle = no commit over a whole interval: judged on the timer's ticks
        // only, whatever woke the thread in between.
        let idle = wake.tick_due && {
            let commits = inner.counters.commits.load(Ordering::Relaxed);
            std::mem::replace(&mut commits_seen, commits) == commits
        };
        let plan = if wake.stop {
            Plan {
                flush: true,
                sync: true,
            }
        } else {
            Plan::decide(inner, &wake, idle)
        };
        if plan.flush
            && inner.check_poison().is_ok()
            && let Err(error) = flush(inner, plan.sync)
        {
            tracing::warn!(%error, "flush failed");
        }
        // Retired journals go a few per tick, and all of them at close.
        let removals = if wake.stop {
            usize::MAX
        } else if wake.tick_due {
            JOURNAL_REMOVALS_PER_TICK
        } else {
            0
        };
        if removals > 0
            && let Err(error) = remove_retired(&*inner.storage, &inner.journal_index, removals)
        {
            tracing::warn!(%error, "removing retired journals failed");
        }
        if wake.stop {
            return;
        }
        // After the flush: a writer waiting for scratch room must not also wait
        // for spares to be zero-filled.
        spares.top_up(inner);
    }
}

/// Scratch bytes waiting that start a flush: the option, but at most half the scratch
/// limit. A write transaction keeps the pages of the state it started from, so room in
/// scratch comes only between transactions: a flush must start well before the limit.
pub(crate) fn flush_threshold_bytes(options: &crate::env::Options) -> u64 {
    options
        .flush_threshold_bytes
        .min(options.scratch_limit_bytes / 2)
}

/// What a wake of the flusher does. The schedule holds however busy the writer is: a
/// stream of small commits delays neither the flush of what waits in scratch past the
/// threshold, nor the sync that `sync_interval_ms` promises, nor the one that journals
/// waiting past [`JOURNALS_PENDING_MAX`] call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    flush: bool,
    sync: bool,
}

impl Plan {
    /// The timer's rules run on every tick of `flush_interval_ms`; a request (a kick, a
    /// journal rotation) is answered by the rules it concerns, so that the flusher does
    /// nothing between ticks that nobody asked for.
    fn decide(inner: &EnvInner, wake: &Wake, idle: bool) -> Plan {
        let journals_waiting = inner.journal_index.lock().active.len() > JOURNALS_PENDING_MAX;
        if !wake.tick_due {
            return Plan {
                flush: wake.kicked || journals_waiting,
                sync: journals_waiting,
            };
        }
        let (since_sync, bytes_since_sync) = {
            let book = inner.flush_book.lock();
            (book.last_sync.elapsed(), book.bytes_since_sync)
        };
        let sync = journals_waiting
            || since_sync >= Duration::from_millis(inner.options.sync_interval_ms)
            || bytes_since_sync >= inner.options.sync_threshold_bytes;
        let waiting_bytes = inner.state.load().ptt.len() as u64 * PAGE_SIZE_BYTES as u64;
        // While commits stream in below the threshold, pages wait in scratch so the data
        // file is written in larger batches; once commits go quiet for an interval, they
        // are flushed.
        let flush = sync
            || wake.kicked
            || waiting_bytes >= flush_threshold_bytes(&inner.options)
            || (idle && waiting_bytes > 0);
        Plan { flush, sync }
    }
}

/// How long the flusher waits after a failure to make a spare before trying again: on a
/// full disk, retrying at every wake would keep taking space a rotation may need.
const SPARE_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The flusher's side of [`crate::journal::spare`].
#[derive(Default)]
struct SpareMaker {
    failed_at: Option<Instant>,
}

impl SpareMaker {
    /// Keeps journal files ready for rotation. Failing is harmless (the writer then
    /// prepares its next file itself), so it is logged and retried later, not raised.
    fn top_up(&mut self, inner: &EnvInner) {
        let options = &inner.options;
        if !options.makes_spare_journals()
            || inner.check_poison().is_err()
            || self
                .failed_at
                .is_some_and(|at| at.elapsed() < SPARE_RETRY_DELAY)
        {
            return;
        }
        self.failed_at = None;
        // Sized for the writer's next rotation, which doubles its file size.
        let size_bytes = inner
            .journal_index
            .lock()
            .next_file_size_bytes(options.journal_file_size_bytes);
        if let Err(error) = spare::top_up(
            &*inner.storage,
            size_bytes,
            options.journal_spare_files,
            &inner.journal_index,
        ) {
            tracing::warn!(%error, "could not make a spare journal");
            self.failed_at = Some(Instant::now());
        }
    }
}

/// One flush pass: writes every page version no reader still needs from the data file;
/// with `then_sync` it also syncs whatever it can.
pub(crate) fn flush(inner: &EnvInner, then_sync: bool) -> Result<()> {
    inner.check_poison()?;
    let mut book = inner.flush_book.lock();
    // Reader processes wait for this phase to end before they read; later phases see them.
    let phase = DataWritePhase::begin(inner.process_readers())?;
    let state = inner.state.load_full();
    let mut bound = inner.readers.oldest(state.txn_id);
    if let Some(oldest) = phase.oldest_process_reader()? {
        bound = bound.min(oldest);
    }
    let (batch, examined, taken) = inner.flush_log.take_flushable(&state.ptt, bound);
    inner
        .counters
        .flush_pages_examined
        .fetch_add(examined, Ordering::Relaxed);
    if !batch.is_empty() {
        let writing = Instant::now();
        if let Err(error) = write_batch(inner, &mut book, &state, &batch) {
            // A failed pass (a full disk growing the file) leaves its pages to the next one.
            inner.flush_log.put_back(taken);
            return Err(error);
        }
        inner.counters.latencies.flush.record(writing.elapsed());
    }
    spill_past_budget(inner, &mut book);
    if then_sync {
        sync(inner, &mut book)?;
    }
    phase.end()
}

/// The page versions of `ptt` that may go to the data file while the oldest reader reads
/// state `bound` (the flush rule), in page order: `(page number, transaction)`. A scan of
/// the whole table: the flusher finds the same through its log (`flush_log.rs`); this is
/// the rule the log is tested against.
#[cfg(test)]
pub(crate) fn flushable(ptt: &crate::scratch::Ptt, bound: u64) -> Vec<(u64, u64)> {
    ptt.iter()
        .filter(|(_, e)| e.txn_id <= bound)
        .map(|(page_number, e)| (page_number, e.txn_id))
        .collect()
}

/// Publishes the current state without the page versions of `batch`, now in the data file
/// (with `data` as its view of the data file, if that grew). A newer version committed
/// meanwhile stays, its `first_unflushed_txn_id` moved past the flushed one. The caller
/// holds the publish lock.
pub(crate) fn publish_flushed(
    cell: &StateCell<State>,
    batch: &[(u64, u64)],
    data: Option<DataView>,
) {
    let current = cell.load_full();
    let mut ptt = current.ptt.clone();
    for &(page_number, txn_id) in batch {
        let replacement = match ptt.get(page_number) {
            Some(e) if e.txn_id == txn_id => None,
            Some(e) if e.first_unflushed_txn_id <= txn_id => {
                let mut newer = e.clone();
                newer.first_unflushed_txn_id = txn_id + 1;
                Some(newer)
            }
            _ => continue,
        };
        match replacement {
            None => {
                ptt.remove(page_number);
            }
            Some(e) => {
                ptt.insert(page_number, e);
            }
        }
    }
    cell.store(Arc::new(State {
        txn_id: current.txn_id,
        ptt,
        data: data.unwrap_or_else(|| current.data.clone()),
    }));
}

/// Moves committed copies that must stay in scratch into scratch files while scratch
/// memory is past its budget, down to three quarters of it (so that it is not done again
/// at every pass). A failure (a full disk) keeps the copies in memory; it is logged, and
/// the scratch limit still applies.
fn spill_past_budget(inner: &EnvInner, book: &mut FlushBook) {
    let budget = inner.options.scratch_memory_bytes;
    let memory = inner.usage.memory_bytes();
    if memory <= budget {
        return;
    }
    let state = inner.state.load_full();
    let mut spilled = Vec::new();
    if let Err(error) = book.spiller.spill(
        &inner.storage,
        &inner.usage,
        &state.ptt,
        memory - budget / 4 * 3,
        inner.options.scratch_limit_bytes,
        &mut spilled,
    ) {
        tracing::warn!(%error, "could not move scratch pages into a scratch file");
    }
    if spilled.is_empty() {
        return;
    }
    let _publish = inner.publish.lock();
    let current = inner.state.load_full();
    inner.state.store(Arc::new(State {
        txn_id: current.txn_id,
        ptt: spill::swap_in(&current.ptt, &spilled),
        data: current.data.clone(),
    }));
}

/// Makes durable the journal records that commits without a sync left buffered, so that
/// everything through `txn_id` (a published state's) is on disk; a failed sync poisons
/// the environment. `what` names the caller's step in the error.
pub(crate) fn sync_buffered_journal(inner: &EnvInner, txn_id: u64, what: &str) -> Result<()> {
    // Read after the state of `txn_id` was loaded: a transaction of that state was marked
    // and its file named before it was published, and an older file was synced when the
    // writer rotated away from it. A mark newer than the state may lie in a file the
    // handle does not name yet, so only one this sync surely covers is cleared.
    let (buffered_txn_id, gate) = {
        let index = inner.journal_index.lock();
        (index.buffered_unsynced_txn_id, Arc::clone(&index.sync_gate))
    };
    if buffered_txn_id == 0 {
        return Ok(());
    }
    let file = inner.journal_file.lock().clone().ok_or(Error::ReadOnly)?;
    if let Err(e) = gate.sync(&*file) {
        let error = Error::io(what, e);
        inner.poison_with(&error);
        return Err(error);
    }
    // Every record up to this state's is durable now (the write-ahead checker in tests
    // learns it here; durable writes report it themselves).
    inner.storage.note(StorageEvent::JournalDurable { txn_id });
    let mut index = inner.journal_index.lock();
    if index.buffered_unsynced_txn_id == buffered_txn_id && buffered_txn_id <= txn_id {
        index.buffered_unsynced_txn_id = 0;
    }
    Ok(())
}

fn write_batch(
    inner: &EnvInner,
    book: &mut FlushBook,
    state: &State,
    batch: &[(u64, u64)],
) -> Result<()> {
    let fail = |error: Error| {
        inner.poison_with(&error);
        error
    };
    // Write-ahead rule: the records of these versions are durable before any data byte.
    sync_buffered_journal(inner, state.txn_id, "syncing the journal before a flush")?;
    // A journal write or sync that failed elsewhere since this pass began poisoned the
    // environment: no data byte may follow it.
    inner.check_poison()?;
    let txn_id_max = batch.iter().map(|&(_, t)| t).max().unwrap_or(0);
    inner.storage.note(StorageEvent::DataWrite { txn_id_max });

    let last_page = batch.last().map(|&(p, _)| p).unwrap_or(0);
    let needed_bytes = (last_page + 1) * PAGE_SIZE_BYTES as u64;
    let mut new_view = None;
    if needed_bytes > book.data_size_bytes {
        let new_size = grow_data_file(inner, needed_bytes)?;
        let map = crate::env::map_data_file(&*inner.data_file, new_size, &inner.options)?;
        let page_count = new_size / PAGE_SIZE_BYTES as u64;
        new_view = Some(DataView::new(map, page_count, Some(&state.data.verified)));
        book.data_size_bytes = new_size;
    }

    // Contiguous pages go out in one write through a buffer; a lone page (the common case
    // under random writes) goes straight from its scratch copy, with no copy of its own.
    let page_bytes = |page_number: u64| {
        &state
            .ptt
            .get(page_number)
            .expect("batch built from this PTT")
            .bytes()[..PAGE_SIZE_BYTES]
    };
    let write = |bytes: &[u8], page_number: u64| {
        write_all_at(
            &*inner.data_file,
            bytes,
            page_number * PAGE_SIZE_BYTES as u64,
        )
        .map_err(|e| fail(Error::io("writing the data file", e)))
    };
    let mut buf: Vec<u8> = Vec::new();
    let runs = batch.chunk_by(|a, b| b.0 == a.0 + 1);
    for part in runs.flat_map(|run| run.chunks(WRITE_BATCH_BYTES / PAGE_SIZE_BYTES)) {
        let first = part[0].0;
        if let [_] = part {
            write(page_bytes(first), first)?;
        } else {
            buf.clear();
            for &(page_number, _) in part {
                buf.extend_from_slice(page_bytes(page_number));
            }
            write(&buf, first)?;
        }
    }

    {
        let _publish = inner.publish.lock();
        publish_flushed(&inner.state, batch, new_view);
    }
    let bytes = (batch.len() * PAGE_SIZE_BYTES) as u64;
    book.bytes_since_sync += bytes;
    inner.counters.flushes.fetch_add(1, Ordering::Relaxed);
    inner
        .counters
        .pages_flushed
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    Ok(())
}

fn sync(inner: &EnvInner, book: &mut FlushBook) -> Result<()> {
    let state = inner.state.load_full();
    // Non-durable records become durable here at the latest, also when no page may be
    // written (a reader pins older versions, so no pass wrote pages and synced them first):
    // `flush_and_sync` and `close` promise every commit durable.
    sync_buffered_journal(inner, state.txn_id, "syncing the journal")?;
    // The log is read after the state is loaded: a commit published since is in it.
    let min_unflushed = inner.flush_log.oldest_unflushed();
    let wanted = min_unflushed.map_or(state.txn_id, |m| state.txn_id.min(m - 1));
    let point = inner
        .journal_index
        .lock()
        .sync_point_at_or_before(wanted)
        .filter(|end| end.txn_id > book.header.synced_txn_id);
    let Some(end) = point else {
        // Nothing new can be declared synced. With nothing committed since the last sync,
        // the schedule starts over; while a reader pins older versions it stays due, so
        // the sync follows within one interval of the reader's end.
        if state.txn_id == book.header.synced_txn_id {
            book.last_sync = Instant::now();
        }
        return Ok(());
    };
    let target = end.txn_id;
    let fail = |error: Error| {
        inner.poison_with(&error);
        error
    };
    let syncing = Instant::now();
    inner
        .data_file
        .sync_data()
        .map_err(|e| fail(Error::io("syncing the data file", e)))?;
    let header = Header {
        revision: book.header.revision + 1,
        env_id: book.header.env_id,
        synced_txn_id: target,
        journal_number: end.journal_number,
        journal_offset_bytes: end.end_offset_bytes,
        chain_checksum: end.checksum,
        next_page_number: end.next_page_number,
        backup: book.header.backup,
    };
    header::write(&*inner.storage, &header).map_err(fail)?;
    inner.counters.latencies.sync.record(syncing.elapsed());
    inner.storage.note(StorageEvent::HeaderDurable {
        synced_txn_id: target,
    });
    book.header = header;
    inner
        .counters
        .synced_txn_id
        .store(target, Ordering::Relaxed);
    book.last_sync = Instant::now();
    book.bytes_since_sync = 0;
    inner.counters.syncs.fetch_add(1, Ordering::Relaxed);
    let current = inner.current_journal.load(Ordering::SeqCst);
    let backed_up = header.backup.enabled.then_some(header.backup.txn_id);
    let retired = inner
        .journal_index
        .lock()
        .retire_through(target, current, backed_up);
    for number in retired {
        inner.storage.note(StorageEvent::JournalRetire {
            journal_number: number,
            last_txn_id: target,
        });
        recycle_or_remove(
            &*inner.storage,
            &inner.options,
            &inner.journal_index,
            number,
        );
    }
    Ok(())
}

/// On a clean close, gives the data file's growth slack back: once a durable header
/// declares the last transaction synced, no page at or past that header's
/// `next_page_number` holds anything. The next open grows the file again as needed.
pub(crate) fn trim_data_file(inner: &EnvInner) -> Result<()> {
    inner.check_poison()?;
    let book = inner.flush_book.lock();
    if book.header.synced_txn_id != inner.state.load().txn_id {
        return Ok(()); // not everything reached the data file
    }
    let used_bytes = book.header.next_page_number * PAGE_SIZE_BYTES as u64;
    if inner.data_allocated_bytes.load(Ordering::SeqCst) <= used_bytes {
        return Ok(());
    }
    inner
        .data_file
        .truncate(used_bytes)
        .map_err(|e| Error::io("trimming the data file", e))?;
    inner
        .data_allocated_bytes
        .store(used_bytes, Ordering::SeqCst);
    Ok(())
}

/// Retired journal files the flusher removes per tick of `flush_interval_ms` (40 a second
/// at the default 100 ms). A sync after a long reader retires hundreds at once; on a
/// filesystem that discards freed blocks (`-o discard`), removing 200 files of 16 MiB in
/// one go took 1 s, during which synced 4 KiB writes beside it fell from about 5,200 a
/// second to about 180; removed 4 every 100 ms, they stayed above 4,600
/// (`examples/journal_removal.rs`).
pub(crate) const JOURNAL_REMOVALS_PER_TICK: usize = 4;

/// Removes up to `limit` retired journal files queued in `index.removable`.
///
/// # Errors
/// A failed removal (the file stays queued).
pub(crate) fn remove_retired(
    storage: &dyn Storage,
    index: &Mutex<JournalIndex>,
    limit: usize,
) -> Result<()> {
    // Each queued file is tried once per call: one that cannot be removed goes to the back
    // of the queue, for a later call, and the files behind it still go now.
    let queued = index.lock().removable.len();
    let mut first_error = None;
    for _ in 0..limit.min(queued) {
        let Some(number) = index.lock().removable.pop_front() else {
            break;
        };
        let name = journal_file_name(number);
        match storage.remove(&name) {
            Ok(()) => {}
            // Gone already (removed by hand): done.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                index.lock().removable.push_back(number);
                first_error.get_or_insert(Error::io(format!("removing {name}"), e));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Keeps a retired journal for reuse or queues it for removal. Kept: files of the size the
/// writer now makes, as many as it may fill before a sync is forced
/// ([`JOURNALS_PENDING_MAX`]). A sync retires about that many at once, and every one
/// removed would come back as a spare the flusher zero-fills: under steady durable writes,
/// keeping only two had it writing zeros at more than half the journal's own rate. The
/// others go a few per tick ([`JOURNAL_REMOVALS_PER_TICK`]). A file whose size cannot be
/// read is queued for removal, which reports its own failure: an error here would leave
/// it, and the rest of its batch, in no list at all until the next open.
pub(crate) fn recycle_or_remove(
    storage: &dyn Storage,
    options: &Options,
    index: &Mutex<JournalIndex>,
    number: u64,
) {
    let name = journal_file_name(number);
    let size = storage
        .open(&name, crate::storage::FileKind::JournalBuffered, false)
        .and_then(|f| f.len())
        .ok();
    let mut index = index.lock();
    // Files smaller than what the writer now makes go: reusing them would keep journals
    // small under load.
    match size {
        Some(size)
            if size <= options.journal_file_size_bytes
                && size >= index.file_size_bytes
                && index.recyclable.len() < JOURNALS_PENDING_MAX =>
        {
            index.recyclable.push(number);
        }
        _ => index.removable.push_back(number),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FileKind;
    use crate::storage::sim::SimStorage;

    /// Retired journals beyond those kept for reuse wait in a queue, and each call takes
    /// at most its limit of them off the disk, oldest first.
    #[test]
    fn retired_journals_are_removed_a_few_at_a_time() {
        let storage = SimStorage::new(7);
        storage.create_dir("journal").expect("dir");
        let options = Options::default();
        let index = Mutex::new(JournalIndex {
            file_size_bytes: options.journal_file_size_bytes,
            ..JournalIndex::default()
        });
        let files = 30u64;
        for number in 1..=files {
            let file = storage
                .open(&journal_file_name(number), FileKind::JournalBuffered, true)
                .expect("create");
            file.allocate(options.journal_file_size_bytes)
                .expect("size");
            recycle_or_remove(&storage, &options, &index, number);
        }
        let on_disk = || storage.list("journal").expect("list").len();
        let kept = JOURNALS_PENDING_MAX;
        assert_eq!(index.lock().recyclable.len(), kept);
        assert_eq!(on_disk(), files as usize, "nothing removed at retirement");
        remove_retired(&storage, &index, JOURNAL_REMOVALS_PER_TICK).expect("remove");
        assert_eq!(on_disk(), files as usize - JOURNAL_REMOVALS_PER_TICK);
        assert_eq!(
            index.lock().removable.front().copied(),
            Some(kept as u64 + JOURNAL_REMOVALS_PER_TICK as u64 + 1),
            "oldest first"
        );
        remove_retired(&storage, &index, usize::MAX).expect("remove all");
        assert_eq!(on_disk(), kept);
        assert!(index.lock().removable.is_empty());
    }

    /// A retired journal whose size cannot be read is queued for removal, not lost from
    /// every list (it would stay on disk until the next open), and the next one of the
    /// same sync is kept as usual.
    #[test]
    fn a_retired_journal_that_cannot_be_sized_is_queued_for_removal() {
        let storage = SimStorage::new(8);
        storage.create_dir("journal").expect("dir");
        let options = Options::default();
        let index = Mutex::new(JournalIndex {
            file_size_bytes: options.journal_file_size_bytes,
            ..JournalIndex::default()
        });
        for number in 1..=2 {
            storage
                .open(&journal_file_name(number), FileKind::JournalBuffered, true)
                .expect("create")
                .allocate(options.journal_file_size_bytes)
                .expect("size");
        }
        // The next operation, the open that sizes journal 1, fails.
        storage.fail_at(storage.ops_count(), crate::storage::sim::Fault::Eio, false);
        recycle_or_remove(&storage, &options, &index, 1);
        recycle_or_remove(&storage, &options, &index, 2);
        assert_eq!(index.lock().removable, [1]);
        assert_eq!(index.lock().recyclable, [2]);
        remove_retired(&storage, &index, usize::MAX).expect("remove");
        assert_eq!(storage.list("journal").expect("list").len(), 1);
    }

    /// A retired journal removed by hand does not stop the removal of later ones, nor does
    /// one whose removal fails: the others go in the same call, it stays queued for a later
    /// one, and its error is told.
    #[test]
    fn one_journal_that_cannot_be_removed_does_not_keep_the_others() {
        let storage = SimStorage::new(9);
        storage.create_dir("journal").expect("dir");
        for number in [2, 3, 4] {
            storage
                .open(&journal_file_name(number), FileKind::JournalBuffered, true)
                .expect("create");
        }
        let index = Mutex::new(JournalIndex {
            removable: [1, 2, 3, 4].into(),
            ..JournalIndex::default()
        });
        // Journal 1 is gone already; removing journal 2 fails once.
        let sim = &storage;
        remove_retired(sim, &index, 1).expect("a missing file counts as removed");
        sim.fail_at(sim.ops_count(), crate::storage::sim::Fault::Eio, false);
        assert!(remove_retired(sim, &index, usize::MAX).is_err());
        assert_eq!(index.lock().removable, [2]);
        assert_eq!(
            sim.list("journal").expect("list"),
            [journal_file_name(2).trim_start_matches("journal/")]
        );
        remove_retired(sim, &index, usize::MAX).expect("remove the rest");
        assert!(index.lock().removable.is_empty());
        assert_eq!(sim.list("journal").expect("list"), Vec::<String>::new());
    }
}
