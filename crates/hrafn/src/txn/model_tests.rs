//! Concurrency model of the MVCC core, checked with loom (build with `--cfg hrafn_loom`;
//! the command is in the README). Loom runs each scenario once for every schedule of its
//! threads, within a bound on preemptions, and over the orderings the memory model allows.
//!
//! What runs is the engine's own code: the reader table (`register`, `release`, `oldest`),
//! the publish of a commit (`commit::publish` over `with_pages`, pipelined: the next
//! transaction is prepared on the pending state), the flush rule (`flush::flushable`) and
//! the publish of a flush pass (`flush::publish_flushed`), all on the state cell. Only the
//! page bytes are reduced: the data file is one version number per page (a loom atomic
//! with no ordering of its own, as a file has none), and a PTT entry's version is its
//! `txn_id`.
//!
//! Every schedule checks snapshot isolation: whoever reads state `s` (a reader, or the
//! writer on its base) sees for every page exactly the version that the last transaction
//! at or before `s` wrote — from its PTT, or else from the data file, which must hold that
//! version for as long as the reader needs it. At the end, the last state reads the same,
//! and each PTT entry's `first_unflushed_txn_id` (the sync rule's bound) lies above the
//! version of its page in the data file and at or below the oldest version not there.
//!
//! The history: the initial state is transaction 1, whose version of page 0 waits in
//! scratch while the data file holds version 0 of both pages; transaction 2 writes page 1,
//! transaction 3 both pages.

use super::commit::{publish, with_pages};
use super::readers::ReaderTable;
use super::state::{DataView, State};
use crate::flush::{flushable, publish_flushed};
use crate::scratch::{PageBuf, Ptt, ScratchUsage};
use crate::storage::Mapping;
use crate::sync::{AtomicU64, Ordering, StateCell};
use loom::sync::Mutex;
use loom::thread;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize as Counter;
use std::time::Instant;

/// Transactions and the pages each wrote.
const HISTORY: [(u64, &[u64]); 3] = [(1, &[0]), (2, &[1]), (3, &[0, 1])];
const PAGES: u64 = 2;
const LAST_TXN_ID: u64 = 3;

/// The version of `page` a snapshot of state `txn_id` must see: the last write at or
/// before it, or 0 (the data file's initial content).
fn expected(page: u64, txn_id: u64) -> u64 {
    writers_of(page).filter(|&t| t <= txn_id).max().unwrap_or(0)
}

fn writers_of(page: u64) -> impl Iterator<Item = u64> {
    HISTORY
        .iter()
        .filter(move |(_, pages)| pages.contains(&page))
        .map(|&(txn_id, _)| txn_id)
}

/// The data file's mapping: never read here (a PTT miss reads the model data file).
struct NoFile;

impl Mapping for NoFile {
    fn bytes(&self) -> &[u8] {
        &[]
    }
}

/// A prepared commit, as `Prepared` holds it for its publish.
#[derive(Clone)]
struct Commit {
    txn_id: u64,
    base_ptt: Ptt,
    ptt: Ptt,
    pages: Vec<(u64, Arc<PageBuf>)>,
}

impl Commit {
    /// Transaction `txn_id` prepared on a state whose PTT is `base_ptt`.
    fn on(base_ptt: &Ptt, txn_id: u64, usage: &Arc<ScratchUsage>) -> Commit {
        let pages: Vec<(u64, Arc<PageBuf>)> = HISTORY
            .iter()
            .find(|&&(t, _)| t == txn_id)
            .expect("the transaction is in the history")
            .1
            .iter()
            .map(|&page| (page, Arc::new(PageBuf::zeroed(1, usage))))
            .collect();
        Commit {
            txn_id,
            base_ptt: base_ptt.clone(),
            ptt: with_pages(base_ptt, &pages, txn_id),
            pages,
        }
    }
}

/// The page versions, built once outside the model (the main thread of a loom model runs
/// on a stack too small for building PTTs): transaction 1 and, prepared in a pipeline, 2
/// on 1 and 3 on 2's pending state, both before either is published (so a flush between
/// the two publishes makes the second rebuild its PTT).
struct Fixture {
    usage: Arc<ScratchUsage>,
    first: Commit,
    second: Commit,
    third: Commit,
}

impl Fixture {
    fn new() -> Fixture {
        let usage = Arc::new(ScratchUsage::default());
        let first = Commit::on(&Ptt::new(), 1, &usage);
        let second = Commit::on(&first.ptt, 2, &usage);
        let third = Commit::on(&second.ptt, 3, &usage);
        Fixture {
            usage,
            first,
            second,
            third,
        }
    }
}

/// What the threads share: the parts of `EnvInner` the protocol touches.
struct World {
    state: StateCell<State>,
    readers: ReaderTable,
    /// `EnvInner::publish`.
    publish: Mutex<()>,
    /// `EnvInner::pending_state`.
    pending: Mutex<Option<Arc<State>>>,
    /// The version of each page in the data file.
    data_file: Vec<AtomicU64>,
    usage: Arc<ScratchUsage>,
}

impl World {
    /// The environment as transaction 1 left it.
    fn new(fixture: &Fixture, readers_max: usize) -> loom::sync::Arc<World> {
        loom::sync::Arc::new(World {
            state: StateCell::from_pointee(State {
                txn_id: fixture.first.txn_id,
                ptt: fixture.first.ptt.clone(),
                data: DataView::new(Arc::new(NoFile), 0, None),
            }),
            readers: ReaderTable::new(readers_max),
            publish: Mutex::new(()),
            pending: Mutex::new(None),
            data_file: (0..PAGES).map(|_| AtomicU64::new(0)).collect(),
            usage: Arc::clone(&fixture.usage),
        })
    }

    /// Marks `commit` prepared: the next write transaction builds on its pending state.
    fn set_pending(&self, commit: &Commit) {
        *self.pending.lock().expect("pending lock") = Some(Arc::new(State {
            txn_id: commit.txn_id,
            ptt: commit.ptt.clone(),
            data: self.state.load_full().data.clone(),
        }));
    }

    /// The version of `page` whoever reads `state` gets: from its PTT, else from the data
    /// file.
    fn read(&self, state: &State, page: u64) -> u64 {
        match state.ptt.get(page) {
            Some(entry) => entry.txn_id,
            None => self.data_file[page as usize].load(Ordering::Relaxed),
        }
    }

    fn check_snapshot(&self, state: &State, who: &str) {
        for page in 0..PAGES {
            let seen = self.read(state, page);
            let wanted = expected(page, state.txn_id);
            assert_eq!(
                seen, wanted,
                "{who} of state {} saw version {seen} of page {page}, not {wanted}",
                state.txn_id
            );
        }
    }

    /// A read transaction (`ReadTxn::begin`, reads, drop).
    fn read_txn(&self) {
        let (slot, state) = self
            .readers
            .register(&self.state)
            .expect("a free reader slot");
        self.check_snapshot(&state, "a reader");
        self.readers.release(slot);
    }

    /// One flush pass (`flush::flush`, `write_batch`).
    fn flush(&self) {
        let state = self.state.load_full();
        let batch = flushable(&state.ptt, self.readers.oldest(state.txn_id));
        if batch.is_empty() {
            return;
        }
        for &(page, txn_id) in &batch {
            self.data_file[page as usize].store(txn_id, Ordering::Relaxed);
        }
        let _publish = self.publish.lock().expect("publish lock");
        publish_flushed(&self.state, &batch, None);
    }

    /// The publish of a commit after its journal write (`Prepared::append_and_publish`).
    fn finish(&self, commit: &Commit) {
        {
            let _publish = self.publish.lock().expect("publish lock");
            publish(
                &self.state,
                commit.txn_id,
                &commit.base_ptt,
                &commit.ptt,
                &commit.pages,
            );
        }
        let mut pending = self.pending.lock().expect("pending lock");
        if pending.as_ref().is_some_and(|p| p.txn_id == commit.txn_id) {
            *pending = None;
        }
    }

    /// The base a new write transaction builds on (`WriteTxn::begin`): the pending state
    /// if it is newer than the published one.
    fn write_base(&self) -> Arc<State> {
        let pending = self.pending.lock().expect("pending lock");
        let published = self.state.load_full();
        match &*pending {
            Some(pending) if pending.txn_id > published.txn_id => Arc::clone(pending),
            _ => published,
        }
    }

    /// Once every thread is done: the last state is complete and consistent.
    fn check_end(&self) {
        let state = self.state.load_full();
        assert_eq!(state.txn_id, LAST_TXN_ID, "every commit is published");
        self.check_snapshot(&state, "the last state");
        for (page, entry) in state.ptt.iter() {
            let flushed = self.data_file[page as usize].load(Ordering::Relaxed);
            let oldest_unflushed = writers_of(page)
                .filter(|&t| t > flushed)
                .min()
                .expect("a page in the PTT has a version not in the data file");
            assert!(
                (flushed + 1..=oldest_unflushed).contains(&entry.first_unflushed_txn_id),
                "page {page}: first unflushed version {}, the data file holds version \
                 {flushed}, the oldest version not there is {oldest_unflushed}",
                entry.first_unflushed_txn_id
            );
        }
        assert_eq!(self.readers.active_count(), 0, "every reader released");
        assert_eq!(self.readers.oldest(state.txn_id), state.txn_id);
    }
}

/// Stack of each modelled thread, in words (loom's default is too small for PTT updates).
const STACK_WORDS: usize = 1 << 15;

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new()
        .stack_size(STACK_WORDS)
        .spawn(f)
        .expect("spawning a modelled thread")
}

/// Explores the schedules of `scenario` and reports how many there were.
/// `preemption_bound` is `None` for every schedule; `LOOM_MAX_PREEMPTIONS` overrides it.
fn explore(name: &str, preemption_bound: Option<usize>, scenario: fn(&Fixture)) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemption_bound;
    }
    let bound = builder
        .preemption_bound
        .map_or("none".to_owned(), |b| b.to_string());
    let fixture = Fixture::new();
    let schedules = Arc::new(Counter::new(0));
    let counted = Arc::clone(&schedules);
    let started = Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        scenario(&fixture);
    });
    eprintln!(
        "{name}: {} schedules, preemption bound {bound}, {:.1} s",
        schedules.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// A publisher of transactions 2 and 3.
fn publisher(world: &loom::sync::Arc<World>, fixture: &Fixture) -> thread::JoinHandle<()> {
    let w = loom::sync::Arc::clone(world);
    let (second, third) = (fixture.second.clone(), fixture.third.clone());
    spawn(move || {
        w.finish(&second);
        w.finish(&third);
    })
}

/// A flusher making `passes` flush passes.
fn flusher(world: &loom::sync::Arc<World>, passes: usize) -> thread::JoinHandle<()> {
    let w = loom::sync::Arc::clone(world);
    spawn(move || {
        for _ in 0..passes {
            w.flush();
        }
    })
}

fn reader(world: &loom::sync::Arc<World>) -> thread::JoinHandle<()> {
    let w = loom::sync::Arc::clone(world);
    spawn(move || w.read_txn())
}

/// Publisher, flusher and two readers: no reader ever loses its version of a page.
#[test]
fn loom_readers_flusher_publisher() {
    explore("readers, flusher, publisher", Some(3), |fixture| {
        let world = World::new(fixture, 2);
        let threads = [
            publisher(&world, fixture),
            flusher(&world, 1),
            reader(&world),
            reader(&world),
        ];
        for t in threads {
            t.join().expect("modelled thread");
        }
        world.check_end();
    });
}

/// Publisher, a flusher making two passes, and two readers: later passes flush what
/// earlier ones had to leave, and commits published between passes keep the sync bound
/// right.
#[test]
fn loom_flush_passes() {
    explore("flush passes", Some(4), |fixture| {
        let world = World::new(fixture, 2);
        let threads = [
            publisher(&world, fixture),
            flusher(&world, 2),
            reader(&world),
        ];
        world.read_txn();
        for t in threads {
            t.join().expect("modelled thread");
        }
        world.check_end();
    });
}

/// A write transaction begins while the commit before it is being published (pipelined
/// commit). The writer takes no reader slot: it relies on its base holding in its PTT
/// every version the flusher may still overwrite in the data file.
#[test]
fn loom_writer_on_pending_state() {
    explore("writer on the pending state", Some(4), |fixture| {
        let world = World::new(fixture, 1);
        world.set_pending(&fixture.second);
        let w = loom::sync::Arc::clone(&world);
        let second = fixture.second.clone();
        let publisher = spawn(move || w.finish(&second));
        let w = loom::sync::Arc::clone(&world);
        let writer = spawn(move || {
            let base = w.write_base();
            assert_eq!(base.txn_id, 2, "the writer sees the last commit");
            w.check_snapshot(&base, "the writer");
            let third = Commit::on(&base.ptt, 3, &w.usage);
            // Records are appended, and so published, in transaction order.
            publisher.join().expect("publisher");
            // Until its commit is published, everything the writer read stays what it read.
            w.check_snapshot(&base, "the writer, at its commit");
            w.finish(&third);
        });
        let threads = [writer, flusher(&world, 1)];
        world.read_txn();
        for t in threads {
            t.join().expect("modelled thread");
        }
        world.check_end();
    });
}
