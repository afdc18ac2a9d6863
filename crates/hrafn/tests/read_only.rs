//! Read-only open: recovery in memory, nothing written, writes refused, and a snapshot that
//! stays put while a writer in another process (or another handle in this one) commits,
//! flushes, syncs and recycles journals.
//!
//! The cross-process test runs this binary again as the writer (`--exact writer_entry
//! --ignored`, directory in `HRAFN_READ_ONLY_CHILD_DIR`).

mod common;

use hrafn::{Environment, Error, Options, WriteBatch};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CHILD_DIR_VAR: &str = "HRAFN_READ_ONLY_CHILD_DIR";
/// Keys written together in each round: a snapshot must show them all at one round.
const KEYS: u64 = 50;

/// Files of the environment except `LOCK` (which holds the reader slots).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    common::dir_files(dir, &["LOCK"])
}

/// Options under which a writer flushes, syncs and recycles journals many times a second.
fn busy_options() -> Options {
    Options::default()
        .journal_file_size_bytes(64 * 1024)
        .flush_interval_ms(1)
        .flush_threshold_bytes(64 * 1024)
        .sync_interval_ms(5)
}

fn write_round(env: &Environment, round: u64) {
    let mut batch = WriteBatch::new();
    for k in 0..KEYS {
        // Values of several sizes so rounds change different pages, some overflow.
        let len = 16 + (k * 997 + round * 31) % 6000;
        let mut value = vec![(round % 251) as u8; len as usize];
        value[..8].copy_from_slice(&round.to_le_bytes());
        batch.insert("t", format!("k{k:03}"), value);
    }
    env.write(batch).expect("write");
}

/// The round every key shows, checked to be one round for all keys.
fn snapshot_round(env: &Environment) -> u64 {
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    let mut round = None;
    for k in 0..KEYS {
        let value = t.get(format!("k{k:03}")).expect("get").expect("present");
        let r = u64::from_le_bytes(value[..8].try_into().expect("eight bytes"));
        assert!(
            value[8..].iter().all(|&b| b == (r % 251) as u8),
            "torn value"
        );
        assert_eq!(
            *round.get_or_insert(r),
            r,
            "key k{k:03} is at another round"
        );
    }
    round.expect("keys")
}

#[test]
fn read_only_open_recovers_in_memory_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default()
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
        .journal_spare_files(0);
    // A writer that is still open: its commits are only in the journal.
    let writer = Environment::open(dir.path(), options.clone()).expect("open");
    for round in 1..=3 {
        write_round(&writer, round);
    }
    let before = files(dir.path());
    {
        let env = Environment::open_read_only(dir.path(), options.clone()).expect("read-only");
        assert_eq!(snapshot_round(&env), 3);
        assert!(env.stats().recovered_records >= 3);
        env.check().expect("check");
        assert!(matches!(env.begin_write(), Err(Error::ReadOnly)));
        assert!(matches!(env.flush_and_sync(), Err(Error::ReadOnly)));
        assert!(matches!(env.write(WriteBatch::new()), Err(Error::ReadOnly)));
        assert!(matches!(env.submit(|_| Ok(())), Err(Error::ReadOnly)));
        // Two at once are fine.
        let second = Environment::open_read_only(dir.path(), options.clone()).expect("second");
        assert_eq!(snapshot_round(&second), 3);
    }
    assert_eq!(files(dir.path()), before, "a read-only open changed files");
    drop(writer);
}

#[test]
fn read_only_open_needs_an_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing-here");
    assert!(Environment::open_read_only(&missing, Options::default()).is_err());
    assert!(!missing.exists(), "a read-only open created a directory");
    match Environment::open_read_only(dir.path(), Options::default()) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("no environment")),
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }
    // Nothing left behind either (the lock file a reader-process slot lives in).
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A writer commits rounds as fast as it can with a flusher that flushes, syncs and
/// recycles journals all the time; read-only handles open again and again, and each must
/// see one whole round that does not change while it is held.
#[test]
fn snapshots_hold_still_under_a_busy_writer_in_this_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Arc::new(Environment::open(dir.path(), busy_options()).expect("open"));
    write_round(&writer, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (writer, stop) = (Arc::clone(&writer), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut round = 1;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                write_round(&writer, round);
            }
            round
        })
    };
    let mut last_seen = 0;
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut opens = 0;
    while Instant::now() < deadline {
        let env = Environment::open_read_only(dir.path(), busy_options()).expect("read-only");
        let round = snapshot_round(&env);
        assert!(
            round >= last_seen,
            "went back from round {last_seen} to {round}"
        );
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(snapshot_round(&env), round, "the snapshot moved");
        env.check().expect("check");
        last_seen = round;
        opens += 1;
        drop(env);
        // A snapshot holds the writer's flusher back; between them it catches up.
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let written = thread.join().expect("writer");
    let stats = writer.stats();
    eprintln!(
        "read-only: {opens} snapshots up to round {last_seen} of {written}; writer made {} syncs",
        stats.syncs
    );
    assert!(opens >= 10 && last_seen > 1);
    assert!(
        stats.syncs > 2,
        "the writer synced while readers came and went"
    );
}

/// The same with the writer in a child process.
#[test]
fn snapshots_hold_still_under_a_writer_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Environment::open(dir.path(), busy_options()).expect("create"));
    let exe = std::env::current_exe().expect("exe");
    let mut child = Command::new(exe)
        .args(["--exact", "writer_entry", "--ignored", "--nocapture"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    let mut last_seen = 0;
    let mut opens = 0;
    while started.elapsed() < Duration::from_secs(4) {
        match Environment::open_read_only(dir.path(), busy_options()) {
            Ok(env) => {
                let round = env
                    .begin_read()
                    .and_then(|rtx| rtx.open_tree("t").map(|_| ()))
                    .is_ok()
                    .then(|| snapshot_round(&env));
                if let Some(round) = round {
                    assert!(round >= last_seen, "went back from {last_seen} to {round}");
                    std::thread::sleep(Duration::from_millis(20));
                    assert_eq!(snapshot_round(&env), round, "the snapshot moved");
                    env.check().expect("check");
                    last_seen = round;
                    opens += 1;
                }
            }
            Err(e) => panic!("read-only open failed: {e}"),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("read-only: {opens} snapshots of a writer process, up to round {last_seen}");
    assert!(
        opens >= 10 && last_seen > 1,
        "{opens} snapshots, round {last_seen}"
    );
}

/// The child's side: commits rounds until killed.
#[test]
#[ignore = "run by snapshots_hold_still_under_a_writer_process"]
fn writer_entry() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let env = Environment::open(dir, busy_options()).expect("child open");
    for round in 1.. {
        write_round(&env, round);
    }
}

/// A read-only open holds every replayed page of an overflow value, not only its first:
/// a full backup from it copies each page on its own, and took the rest of the value's
/// pages from the data file, where only an older version (or nothing) was.
#[test]
fn a_backup_from_a_read_only_open_copies_whole_overflow_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let env = Environment::open(&db, Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"a", b"1")
        .expect("insert");
    wtx.commit().expect("commit");
    env.flush_and_sync().expect("flush");
    // Keeps the flusher from writing the value's pages: they are only in the journal.
    let pin = env.begin_read().expect("read");
    let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"big", &big)
        .expect("insert");
    wtx.commit().expect("commit");
    let backup = dir.path().join("backup");
    {
        let ro = Environment::open_read_only(&db, Options::default()).expect("read-only open");
        assert_eq!(common::value_of(&ro, "t", b"big"), Some(big.clone()));
        ro.backup_to(&backup).expect("backup");
    }
    drop(pin);
    let restored = dir.path().join("restored");
    hrafn::backup::restore(&[&backup], &restored).expect("restore");
    let copy = Environment::open(&restored, Options::default()).expect("open the copy");
    assert_eq!(common::value_of(&copy, "t", b"big"), Some(big));
}
