//! Each error kind users can provoke has its own variant.

mod common;

use hrafn::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES};
use hrafn::{Environment, Error, Options};
use std::time::{Duration, Instant};

#[test]
fn key_too_large() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    let mut t = wtx.open_tree("t").expect("tree");
    t.insert(vec![1u8; KEY_SIZE_MAX_BYTES], b"ok")
        .expect("longest key");
    let err = t
        .insert(vec![1u8; KEY_SIZE_MAX_BYTES + 1], b"v")
        .expect_err("too long");
    assert!(
        matches!(err, Error::KeyTooLarge { size_bytes, .. } if size_bytes == KEY_SIZE_MAX_BYTES + 1)
    );
    assert_eq!(
        t.get(vec![1u8; KEY_SIZE_MAX_BYTES]).expect("get"),
        Some(&b"ok"[..])
    );
}

/// Inserts 500-byte values under `prefix` until `count` or an error.
fn fill(wtx: &mut hrafn::WriteTxn<'_>, prefix: u8, count: u32) -> hrafn::Result<()> {
    let mut t = wtx.open_tree("t")?;
    for i in 0..count {
        let mut key = vec![prefix];
        key.extend_from_slice(&i.to_be_bytes());
        t.insert(key, [7u8; 500])?;
    }
    Ok(())
}

#[test]
fn a_transaction_larger_than_scratch_fails_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options()
        .scratch_limit_bytes(64 * PAGE_SIZE_BYTES as u64)
        .scratch_wait_ms(5_000);
    let env = Environment::open(dir.path(), options).expect("open");
    let mut wtx = env.begin_write().expect("write");
    let started = Instant::now();
    let failed = fill(&mut wtx, 0, 100_000).expect_err("cannot fit");
    assert!(
        matches!(failed, Error::TransactionTooLarge { size_bytes, scratch_limit_bytes }
            if size_bytes > scratch_limit_bytes),
        "{failed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?} for room that can never come",
        started.elapsed()
    );
    // The failing insert may have changed pages (a split half done): the transaction
    // cannot commit, even after later operations succeed.
    let refused = wtx
        .commit()
        .expect_err("a transaction that failed mid-operation");
    assert!(
        matches!(&refused, Error::TransactionFailed { cause } if cause.contains("scratch")),
        "{refused:?}"
    );
    let mut wtx = env.begin_write().expect("write after abort");
    fill(&mut wtx, 1, 10).expect("a small one fits");
    wtx.commit().expect("commit");
    env.check().expect("check");
}

#[test]
fn scratch_full_names_the_oldest_reader_and_clears_when_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options()
        .scratch_limit_bytes(64 * PAGE_SIZE_BYTES as u64)
        .scratch_wait_ms(50);
    let env = Environment::open(dir.path(), options).expect("open");
    // The reader pins every version committed after it: none can reach the data file.
    let reader = env.begin_read().expect("read");
    let mut wtx = env.begin_write().expect("write");
    fill(&mut wtx, 0, 600).expect("fits alone");
    wtx.commit().expect("commit");
    std::thread::sleep(Duration::from_millis(20));
    let mut wtx = env.begin_write().expect("write");
    let failed = fill(&mut wtx, 1, 600).expect_err("no room while the reader pins");
    match &failed {
        Error::ScratchFull {
            oldest_reader_age_ms: Some(age_ms),
            ..
        } => assert!(*age_ms >= 20, "{failed}"),
        _ => panic!("{failed:?}"),
    }
    assert!(
        failed.to_string().contains("oldest read transaction"),
        "{failed}"
    );
    drop(wtx);
    drop(reader);
    // The flusher may now write the pinned versions out (a write transaction begun
    // before that would hold them through its base state).
    env.flush_and_sync().expect("flush");
    assert_eq!(env.stats().scratch_used_bytes, 0);
    let mut wtx = env.begin_write().expect("write");
    fill(&mut wtx, 1, 600).expect("room once the reader ended");
    wtx.commit().expect("commit");
}

#[test]
fn readers_never_block_the_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options().readers_max(4);
    let env = Environment::open(dir.path(), options).expect("open");
    let readers: Vec<_> = (0..4).map(|_| env.begin_read().expect("read")).collect();
    assert!(matches!(
        env.begin_read(),
        Err(Error::ReadersFull { readers_max: 4 })
    ));
    let mut wtx = env.begin_write().expect("a writer needs no reader slot");
    fill(&mut wtx, 0, 10).expect("fill");
    wtx.commit().expect("commit");
    let mut batch = hrafn::WriteBatch::new();
    batch.insert("t", b"merged", b"too");
    env.write(batch)
        .expect("a merged write needs no reader slot");
    drop(readers);
    let rtx = env.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("t")
            .expect("tree")
            .get(b"merged")
            .expect("get"),
        Some(&b"too"[..])
    );
}

#[test]
fn freed_pages_are_reused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let fill = |round: u32| {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0..5000u32 {
                t.insert(i.to_be_bytes(), vec![round as u8; 300])
                    .expect("insert");
            }
        }
        wtx.commit().expect("commit");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0..5000u32 {
                t.remove(i.to_be_bytes()).expect("remove");
            }
            t.insert(b"big", vec![1u8; 100_000])
                .expect("overflow value");
            t.remove(b"big").expect("remove overflow");
        }
        wtx.commit().expect("commit");
        env.check().expect("integrity").next_page_number
    };
    let first = fill(0);
    for round in 1..5 {
        assert_eq!(
            fill(round),
            first,
            "round {round} grew the file instead of reusing pages"
        );
    }
    let report = env.check().expect("integrity");
    assert!(report.free_pages > 100, "{report:?}");
}

#[test]
fn scratch_drains_after_a_large_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..20_000u32 {
            t.insert(i.to_be_bytes(), [3u8; 200]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    env.flush_and_sync().expect("flush");
    let stats = env.stats();
    assert_eq!(stats.ptt_page_count, 0, "{stats:?}");
    assert_eq!(
        stats.scratch_used_bytes, 0,
        "nothing pins the committed pages: {stats:?}"
    );
    assert!(stats.scratch_peak_bytes > 1 << 20, "{stats:?}");
}

/// A flush threshold past the scratch limit would let a stream of commits fill scratch
/// before any flush (a write transaction keeps the pages of the state it began on, so
/// room comes only between transactions): the flusher starts at half the limit instead.
#[test]
fn a_stream_of_commits_past_the_scratch_limit_with_a_huge_flush_threshold() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default()
        .scratch_limit_bytes(8 << 20)
        .flush_threshold_bytes(1 << 40);
    let env = Environment::open(dir.path(), options)?;
    let value = [7u8; 1000];
    for t in 0..40u64 {
        let mut wtx = env.begin_write()?;
        {
            let mut tree = wtx.open_tree("t")?;
            for i in 0..1000u64 {
                tree.insert((t * 1000 + i).to_be_bytes(), value)?;
            }
        }
        wtx.commit()?;
    }
    assert_eq!(env.begin_read()?.open_tree("t")?.len(), 40_000);
    Ok(())
}

#[test]
fn a_file_is_not_an_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, b"x").expect("write");
    for opened in [
        hrafn::Environment::open(&file, hrafn::Options::default()),
        hrafn::Environment::open_read_only(&file, hrafn::Options::default()),
    ] {
        match opened {
            Err(hrafn::Error::InvalidArgument(message)) => {
                assert!(
                    message.contains("an environment is a directory"),
                    "{message}"
                )
            }
            Err(other) => panic!("wrong error: {other}"),
            Ok(_) => panic!("a file opened as an environment"),
        }
    }
    assert_eq!(
        std::fs::read(&file).expect("read"),
        b"x",
        "the file is untouched"
    );
}

#[test]
fn metrics_are_prometheus_text_and_move_with_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let value = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let before = env.metrics_text();
    // Every sample has its HELP and TYPE lines, and names follow Prometheus' rules.
    for line in before.lines().filter(|l| !l.starts_with('#')) {
        let (series, number) = line.rsplit_once(' ').expect("name value");
        let name = series.split('{').next().expect("a name");
        assert!(name.starts_with("hrafn_"));
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{name}"
        );
        number.parse::<f64>().expect("a number");
        // A histogram's samples share the family's HELP and TYPE.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|f| before.contains(&format!("# TYPE {f} histogram")))
            })
            .unwrap_or(name);
        assert!(
            before.contains(&format!("# TYPE {family} ")),
            "{name} has no TYPE"
        );
        assert!(
            before.contains(&format!("# HELP {family} ")),
            "{name} has no HELP"
        );
    }
    assert_eq!(env.stats().commit_p99_us, None);
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("open")
        .insert(b"k", [7u8; 100_000])
        .expect("insert");
    wtx.commit().expect("commit");
    env.flush_and_sync().expect("flush and sync");
    let after = env.metrics_text();
    assert_eq!(
        value(&after, "hrafn_commits_total"),
        value(&before, "hrafn_commits_total") + 1.0
    );
    assert!(
        value(&after, "hrafn_journal_written_bytes_total")
            > value(&before, "hrafn_journal_written_bytes_total")
    );
    for histogram in [
        "commit_seconds",
        "journal_write_seconds",
        "flush_seconds",
        "sync_seconds",
    ] {
        let count = value(&after, &format!("hrafn_{histogram}_count"));
        // One commit and its record; the flusher may have run a pass of its own too.
        assert!(count >= 1.0, "{histogram}: {count} observations");
        if histogram.starts_with("commit") || histogram.starts_with("journal") {
            assert_eq!(count, 1.0, "{histogram}");
        }
        assert_eq!(
            value(&after, &format!("hrafn_{histogram}_bucket{{le=\"+Inf\"}}")),
            count
        );
        // Buckets are cumulative.
        let buckets: Vec<f64> = after
            .lines()
            .filter(|l| l.starts_with(&format!("hrafn_{histogram}_bucket")))
            .map(|l| {
                l.rsplit_once(' ')
                    .expect("sample")
                    .1
                    .parse()
                    .expect("count")
            })
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert!(value(&after, &format!("hrafn_{histogram}_sum")) > 0.0);
    }
    // A run of one byte value compresses well: diff bytes over stored bytes.
    let ratio = value(&after, "hrafn_journal_compression_ratio");
    let stored = value(&after, "hrafn_journal_stored_bytes_total");
    let payload = value(&after, "hrafn_journal_payload_bytes_total");
    assert!(
        ratio > 10.0 && stored < payload / 10.0,
        "{ratio} {stored} {payload}"
    );
    let stats = env.stats();
    assert!(
        stats.commit_p99_us.is_some() && stats.sync_p99_us.is_some(),
        "{stats:?}"
    );
}

#[test]
fn close_returns_what_drop_can_only_log() -> hrafn::Result<()> {
    use hrafn::storage::sim::{Fault, SimStorage};
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default())?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", b"v")?;
    wtx.commit()?;
    env.close()?;
    let env = Environment::open(dir.path(), Options::default())?;
    assert_eq!(env.begin_read()?.open_tree("t")?.len(), 1);
    drop(env);

    // A journal write that fails poisons the environment; closing says so.
    let sim = Arc::new(SimStorage::new(7));
    let env = Environment::open_with_storage(sim.clone(), Options::default())?;
    let next_op = sim.ops_count();
    sim.fail_at(next_op, Fault::Eio, true);
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", b"v")?;
    assert!(wtx.commit().is_err());
    sim.clear_faults();
    assert!(
        matches!(env.close(), Err(Error::Poisoned { .. })),
        "close reports the earlier failure"
    );
    Ok(())
}

/// A disk that makes the flusher thread panic at its next data write once armed (the
/// engine announces every data-file write through `Storage::note`).
#[derive(Clone)]
struct PanicOnFlush {
    inner: hrafn::storage::sim::SimStorage,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl hrafn::storage::Storage for PanicOnFlush {
    fn open(
        &self,
        name: &str,
        kind: hrafn::storage::FileKind,
        create: bool,
    ) -> std::io::Result<std::sync::Arc<dyn hrafn::storage::StorageFile>> {
        self.inner.open(name, kind, create)
    }
    fn exists(&self, name: &str) -> std::io::Result<bool> {
        self.inner.exists(name)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn list(&self, dir: &str) -> std::io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir(&self, dir: &str) -> std::io::Result<()> {
        self.inner.create_dir(dir)
    }
    fn sync_dir(&self, dir: &str) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock(&self) -> std::io::Result<Box<dyn std::any::Any + Send + Sync>> {
        self.inner.lock()
    }
    fn process_readers(
        &self,
    ) -> std::io::Result<Option<std::sync::Arc<dyn hrafn::storage::ProcessReaders>>> {
        self.inner.process_readers()
    }
    fn note(&self, event: hrafn::storage::StorageEvent) {
        let flusher = std::thread::current().name() == Some("hrafn-flusher");
        if flusher
            && matches!(event, hrafn::storage::StorageEvent::DataWrite { .. })
            && self.armed.load(std::sync::atomic::Ordering::SeqCst)
        {
            panic!("injected flusher bug");
        }
        self.inner.note(event);
    }
}

/// A flusher thread that dies must not leave an environment that keeps acknowledging
/// commits while nothing reaches the data file and its journals grow without bound.
#[test]
fn a_panic_in_the_flusher_poisons_the_environment() {
    let storage = PanicOnFlush {
        inner: hrafn::storage::sim::SimStorage::new(7),
        armed: Default::default(),
    };
    let env = Environment::open_with_storage(
        std::sync::Arc::new(storage.clone()),
        common::small_options().flush_threshold_bytes(64 << 10),
    )
    .expect("open");
    storage
        .armed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let start = Instant::now();
    let err = loop {
        let committed = env.begin_write().and_then(|mut wtx| {
            fill(&mut wtx, 1, 50)?;
            wtx.commit()
        });
        if let Err(err) = committed {
            break err;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "commits still succeed long after the flusher died"
        );
    };
    assert!(
        matches!(&err, Error::Poisoned { cause } if cause.contains("flusher thread panicked: injected flusher bug")),
        "{err:?}"
    );
    assert!(matches!(env.begin_write(), Err(Error::Poisoned { .. })));
    assert!(
        matches!(env.close(), Err(Error::Poisoned { .. })),
        "close reports the dead flusher"
    );
}
