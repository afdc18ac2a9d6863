//! The flusher, its syncs, journal retirement and spare journals, on the simulated disk:
//! power lost at every operation of a short scenario that retires the journal still being
//! written; I/O errors in the flusher's data writes, data syncs and header writes; a full
//! disk while making spares; journals piled up behind a reader; closes racing the flusher.

use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::storage::{FileKind, Mapping, Storage, StorageEvent, StorageFile};
use hrafn::{Environment, Error, Options};
use std::any::Any;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TREE: &str = "t";
const COUNTER: &[u8] = b"~counter";

fn key(i: u64) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

/// Mostly small values; every seventh spans overflow pages (a multi-block record).
fn value(i: u64) -> Vec<u8> {
    let len = if i % 7 == 6 { 9_000 } else { 40 };
    (0..len)
        .map(|n| (i.wrapping_mul(31) ^ (n as u64).wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect()
}

/// Commit `i`: inserts its own key and rewrites the counter, so one page gets a new version
/// in every commit.
fn commit(env: &Environment, i: u64) -> hrafn::Result<()> {
    let mut wtx = env.begin_write()?;
    {
        let mut tree = wtx.open_tree(TREE)?;
        tree.insert(key(i), value(i))?;
        tree.insert(COUNTER, i.to_be_bytes())?;
    }
    wtx.commit()
}

/// Which commits a reopened disk holds: exactly `0..n` with the counter at `n - 1`, else
/// what is wrong.
fn surviving_prefix(env: &Environment, limit: u64) -> Result<u64, String> {
    let rtx = env.begin_read().map_err(|e| e.to_string())?;
    let tree = match rtx.open_tree(TREE) {
        Ok(tree) => tree,
        Err(Error::TreeNotFound { .. }) => return Ok(0),
        Err(e) => return Err(e.to_string()),
    };
    let mut n = 0;
    while n < limit && tree.get(key(n)).map_err(|e| e.to_string())?.is_some() {
        n += 1;
    }
    for i in n..limit {
        if tree.get(key(i)).map_err(|e| e.to_string())?.is_some() {
            return Err(format!("commit {i} survived but commit {n} did not"));
        }
    }
    for i in 0..n {
        let got = tree.get(key(i)).map_err(|e| e.to_string())?;
        if got != Some(&value(i)[..]) {
            return Err(format!("commit {i}: wrong value"));
        }
    }
    let counter = tree.get(COUNTER).map_err(|e| e.to_string())?;
    let want = n.checked_sub(1).map(u64::to_be_bytes);
    if counter != want.as_ref().map(|w| &w[..]) {
        return Err(format!(
            "{n} commits survived, the counter says {counter:?}"
        ));
    }
    Ok(n)
}

/// Opens `disk`, checks it and returns how many commits survived.
fn recover(disk: SimStorage, options: &Options, limit: u64) -> Result<u64, String> {
    let env = Environment::open_with_storage(Arc::new(disk), options.clone())
        .map_err(|e| format!("open: {e}"))?;
    let n = surviving_prefix(&env, limit)?;
    env.check().map_err(|e| format!("check: {e}"))?;
    env.close().map_err(|e| format!("close: {e}"))?;
    Ok(n)
}

/// No flush on its own (the flusher runs only when asked and at close), no spares, and the
/// smallest journals: every operation lands at the same index in every run.
fn deterministic_options() -> Options {
    Options::default()
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(0)
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
        .sync_interval_ms(3_600_000)
}

const SCENARIO_COMMITS: u64 = 80;

/// Sixteen one-block commits fill the first 64 KiB journal exactly, so the sync after them
/// retires the journal the writer is still on, and the next commit rotates into that very
/// file, recycled. Later syncs run with a reader holding an old snapshot and after it ends,
/// then the environment closes. Returns the commits acknowledged.
fn scenario(env: &Environment, check_shape: bool) -> u64 {
    let mut acked = 0;
    let mut reader = None;
    for i in 0..SCENARIO_COMMITS {
        if commit(env, i).is_err() {
            return acked;
        }
        acked += 1;
        if check_shape && i == 15 {
            assert_eq!(
                env.stats().journal_bytes_written,
                64 * 1024,
                "sixteen one-block records fill the first journal exactly"
            );
        }
        let step = match i {
            15 | 27 | 35 | 43 | 58 | 66 | 79 => env.flush_and_sync(),
            20 | 50 => env.begin_read().map(|r| reader = Some(r)),
            31 | 62 => {
                reader = None;
                Ok(())
            }
            _ => Ok(()),
        };
        if step.is_err() {
            return acked;
        }
        if check_shape && i == 15 {
            let stats = env.stats();
            assert_eq!(stats.synced_txn_id, stats.txn_id, "the sync covered all");
            assert_eq!(stats.journal_files_waiting, 0, "the full journal retired");
        }
    }
    drop(reader);
    acked
}

/// Power lost at every operation of [`scenario`] (every journal write, data write, data
/// sync, header write, rename and removal), with pending changes dropped, kept or torn:
/// every acknowledged commit survives, nothing else does but the one in flight, the
/// integrity check passes, and the write-ahead checker stays silent.
#[test]
fn power_loss_at_every_operation_of_a_flush_and_retire_scenario() {
    let options = deterministic_options();
    let sim = SimStorage::new(0xF1u64);
    let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
    assert_eq!(scenario(&env, true), SCENARIO_COMMITS);
    env.close().expect("close");
    assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    let ops = sim.ops_count();
    assert_eq!(
        recover(sim.power_cut(Damage::DropAll), &options, SCENARIO_COMMITS),
        Ok(SCENARIO_COMMITS)
    );

    assert!(ops > 200, "{ops} operations");
    let mut failures = Vec::new();
    for op in 0..ops {
        let sim = SimStorage::new(0xF1u64 ^ op);
        sim.crash_at(op);
        let acked = match Environment::open_with_storage(Arc::new(sim.clone()), options.clone()) {
            Ok(env) => {
                let acked = scenario(&env, false);
                drop(env);
                acked
            }
            Err(_) => 0,
        };
        for v in sim.violations() {
            failures.push(format!("op {op}: write-ahead violation: {v}"));
        }
        for (damage, salt) in [
            (Damage::DropAll, 0),
            (Damage::KeepAll, 0),
            (Damage::Random, 1),
            (Damage::Random, 2),
        ] {
            match recover(
                sim.power_cut_salted(damage, salt),
                &options,
                SCENARIO_COMMITS,
            ) {
                Ok(n) if n == acked || n == acked + 1 => {}
                Ok(n) => failures.push(format!(
                    "op {op} {damage:?}/{salt}: {acked} acknowledged, {n} survived"
                )),
                Err(e) => failures.push(format!("op {op} {damage:?}/{salt}: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ops} crash points failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Which operation a [`FaultyStorage`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    DataWrite,
    DataSync,
    HeaderWrite,
    HeaderSync,
    /// Writes and allocations of spare journals, with `ENOSPC`.
    SpareSpace,
}

/// A simulated disk that fails one kind of operation once armed, and counts the header
/// writes and journal removals and renames made after the first failure.
#[derive(Clone)]
struct FaultyStorage {
    sim: SimStorage,
    target: Target,
    armed: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
    headers_after: Arc<AtomicU64>,
    journal_changes_after: Arc<AtomicU64>,
}

impl FaultyStorage {
    fn new(sim: SimStorage, target: Target) -> FaultyStorage {
        FaultyStorage {
            sim,
            target,
            armed: Arc::new(AtomicBool::new(false)),
            failed: Arc::new(AtomicU64::new(0)),
            headers_after: Arc::new(AtomicU64::new(0)),
            journal_changes_after: Arc::new(AtomicU64::new(0)),
        }
    }

    fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    /// Whether this operation on `name` fails; the data and header faults fire once.
    fn fails(&self, name: &str, write: bool) -> Option<io::Error> {
        if !self.armed.load(Ordering::SeqCst) {
            return None;
        }
        let hit = match self.target {
            Target::DataWrite => name == hrafn::DATA_FILE && write,
            Target::DataSync => name == hrafn::DATA_FILE && !write,
            Target::HeaderWrite => name.starts_with("header.") && write,
            Target::HeaderSync => name.starts_with("header.") && !write,
            Target::SpareSpace => {
                return (name.ends_with(".spare") && write).then(|| {
                    self.failed.fetch_add(1, Ordering::SeqCst);
                    io::Error::from_raw_os_error(libc::ENOSPC)
                });
            }
        };
        if hit && self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
            return Some(io::Error::from_raw_os_error(libc::EIO));
        }
        None
    }

    fn after_failure(&self, counter: &AtomicU64) {
        if self.target != Target::SpareSpace && self.failed() > 0 {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Storage for FaultyStorage {
    fn open(&self, name: &str, kind: FileKind, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(FaultyFile {
            storage: self.clone(),
            name: name.to_owned(),
            inner: self.sim.open(name, kind, create)?,
        }))
    }
    fn exists(&self, name: &str) -> io::Result<bool> {
        self.sim.exists(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        if name.ends_with(".journal") {
            self.after_failure(&self.journal_changes_after);
        }
        self.sim.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        if from.ends_with(".journal") {
            self.after_failure(&self.journal_changes_after);
        }
        self.sim.rename(from, to)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.sim.list(dir)
    }
    fn create_dir(&self, dir: &str) -> io::Result<()> {
        self.sim.create_dir(dir)
    }
    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        self.sim.sync_dir(dir)
    }
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.sim.lock()
    }
    fn process_readers(&self) -> io::Result<Option<Arc<dyn hrafn::storage::ProcessReaders>>> {
        self.sim.process_readers()
    }
    fn note(&self, event: StorageEvent) {
        self.sim.note(event);
    }
}

struct FaultyFile {
    storage: FaultyStorage,
    name: String,
    inner: Arc<dyn StorageFile>,
}

impl StorageFile for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        if let Some(e) = self.storage.fails(&self.name, true) {
            return Err(e);
        }
        if self.name.starts_with("header.") {
            self.storage.after_failure(&self.storage.headers_after);
        }
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        if let Some(e) = self.storage.fails(&self.name, false) {
            return Err(e);
        }
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        if let Some(e) = self.storage.fails(&self.name, true) {
            return Err(e);
        }
        self.inner.allocate(len_bytes)
    }
    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        self.inner.truncate(len_bytes)
    }
    fn map(&self, len_bytes: u64) -> io::Result<Arc<dyn Mapping>> {
        self.inner.map(len_bytes)
    }
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A data write, data sync or header write of the flusher thread itself (on its own timer)
/// that fails: the environment refuses writes from then on, writes no header (a later one
/// would declare synced what the failed sync may have lost), retires no journal, and close
/// reports the failure. After a power cut every acknowledged commit is there.
#[test]
fn a_failed_write_or_sync_in_the_flusher_poisons_and_nothing_is_declared_synced_after() {
    for target in [
        Target::DataWrite,
        Target::DataSync,
        Target::HeaderWrite,
        Target::HeaderSync,
    ] {
        let sim = SimStorage::new(7);
        let storage = FaultyStorage::new(sim.clone(), target);
        let options = Options::default()
            .journal_file_size_bytes(64 * 1024)
            .journal_spare_files(0)
            .flush_interval_ms(1)
            .sync_interval_ms(0);
        let env = Environment::open_with_storage(Arc::new(storage.clone()), options.clone())
            .expect("open");
        let mut acked = 0;
        for i in 0..40 {
            commit(&env, i).expect("commit before the fault");
            acked += 1;
        }
        wait_for("a sync", Duration::from_secs(10), || {
            env.stats().synced_txn_id > 1
        });
        storage.armed.store(true, Ordering::SeqCst);
        let mut poisoned = false;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            match commit(&env, acked) {
                Ok(()) => acked += 1,
                Err(Error::Poisoned { .. }) => {
                    poisoned = true;
                    break;
                }
                Err(e) => panic!("{target:?}: unexpected {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(storage.failed(), 1, "{target:?}: the fault fired once");
        assert!(
            poisoned,
            "{target:?}: writes still accepted after the failure"
        );
        // Give a flusher that kept going time to show it.
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(env.flush_and_sync(), Err(Error::Poisoned { .. })));
        assert!(env.close().is_err(), "{target:?}: close hid the failure");
        assert_eq!(
            storage.headers_after.load(Ordering::SeqCst),
            0,
            "{target:?}: a header was written after the failure"
        );
        assert_eq!(
            storage.journal_changes_after.load(Ordering::SeqCst),
            0,
            "{target:?}: a journal was retired after the failure"
        );
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
        let n = recover(sim.power_cut(Damage::DropAll), &options, acked + 1)
            .unwrap_or_else(|e| panic!("{target:?}: {e}"));
        assert!(n >= acked, "{target:?}: {acked} acknowledged, {n} survived");
    }
}

/// A full disk while the flusher makes spare journals: no partial spare stays behind,
/// commits go on (the writer fills its next journal itself), the environment is not
/// poisoned, and a clean close leaves no spare.
#[test]
fn no_space_for_spares_costs_the_writer_only_its_own_zero_filling() {
    let sim = SimStorage::new(11);
    let storage = FaultyStorage::new(sim.clone(), Target::SpareSpace);
    storage.armed.store(true, Ordering::SeqCst);
    let options = Options::default()
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(2)
        .flush_interval_ms(1);
    let env =
        Environment::open_with_storage(Arc::new(storage.clone()), options.clone()).expect("open");
    let spares = |sim: &SimStorage| {
        sim.list("journal")
            .expect("list")
            .iter()
            .filter(|n| n.ends_with(".spare"))
            .count()
    };
    // At least 300 commits, and on until the flusher has tried (and failed) to make a
    // spare: on a busy machine the writer may fill its journals before the flusher runs.
    let mut commits = 0;
    let started = std::time::Instant::now();
    while commits < 300 || storage.failed() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no spare was attempted"
        );
        commit(&env, commits).expect("commit with no room for spares");
        commits += 1;
    }
    // A failed spare is removed at once (one may be in the making at any instant).
    wait_for("no partial spare", Duration::from_secs(5), || {
        spares(&sim) == 0
    });
    let stats = env.stats();
    assert!(storage.failed() > 0, "no spare was attempted");
    assert_eq!(stats.journal_spares_made, 0);
    assert!(stats.journals_filled_by_writer > 0);
    env.close().expect("close");
    assert_eq!(spares(&sim), 0);
    assert_eq!(
        recover(sim.power_cut(Damage::DropAll), &options, commits + 1),
        Ok(commits)
    );
}

/// Journals pile up while a reader pins the flusher; once it ends, the next passes sync,
/// and the flusher takes the files back to the steady count within a few ticks (removals
/// are paced, not skipped).
#[test]
fn journals_piled_up_behind_a_reader_go_soon_after_it_ends() {
    let sim = SimStorage::new(13);
    let options = Options::default()
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(2)
        .flush_interval_ms(5)
        .sync_interval_ms(20);
    let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
    let journals = || sim.list("journal").expect("list").len();
    commit(&env, 0).expect("commit");
    let reader = env.begin_read().expect("read");
    let commits = 400;
    for i in 1..commits {
        commit(&env, i).expect("commit");
    }
    let held = env.stats();
    assert!(held.synced_txn_id < held.txn_id, "the reader pins the sync");
    assert!(journals() > 20, "{} journals behind the reader", journals());
    drop(reader);
    wait_for("the sync after the reader", Duration::from_secs(10), || {
        let s = env.stats();
        s.synced_txn_id == s.txn_id
    });
    // Kept for reuse (8), spares, the current file and one just rotated into.
    wait_for("retired journals to go", Duration::from_secs(10), || {
        journals() <= 11
    });
    let tree_len = surviving_prefix(&env, commits + 1).expect("state");
    assert_eq!(tree_len, commits);
    env.close().expect("close");
    assert_eq!(
        recover(sim.power_cut(Damage::DropAll), &options, commits + 1),
        Ok(commits)
    );
}

/// Close right after commits, with the flusher anywhere in its pass or its wait: what a
/// clean close promises holds every time: the data file holds every commit, no journal or
/// spare is left, and a reopen after a power cut replays nothing.
#[test]
fn close_racing_the_flusher_leaves_only_the_data_file_and_headers() {
    let options = Options::default()
        .journal_file_size_bytes(64 * 1024)
        .flush_interval_ms(1)
        .sync_interval_ms(1)
        .flush_threshold_bytes(64 * 1024);
    for round in 0..24u64 {
        let sim = SimStorage::new(100 + round);
        let env =
            Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
        let commits = 10 + round * 7;
        for i in 0..commits {
            commit(&env, i).expect("commit");
        }
        std::thread::sleep(Duration::from_micros(round * 150));
        env.close().expect("close");
        let left = sim.list("journal").expect("list");
        assert!(left.is_empty(), "round {round}: {left:?} left after close");
        let disk = sim.power_cut(Damage::DropAll);
        let env = Environment::open_with_storage(Arc::new(disk.clone()), options.clone())
            .expect("reopen");
        assert_eq!(env.stats().recovered_records, 0, "round {round}: replayed");
        assert_eq!(surviving_prefix(&env, commits + 1), Ok(commits));
        env.check().expect("check");
        env.close().expect("close again");
    }
}
