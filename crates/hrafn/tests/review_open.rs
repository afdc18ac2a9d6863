//! Opening, options, limits and compaction at their edges: every option value is either
//! refused with an error naming it or works; limits fail typed, change nothing and leave
//! the transaction usable; compaction copies everything and leaves nothing half done.

mod common;

use hrafn::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES};
use hrafn::{Durability, Environment, Error, Options, WriteBatch};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` on its own thread; a panic or a run past `limit` is an error naming `what`.
/// A thread that hangs is left behind (the test fails either way).
fn within(limit: Duration, what: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(outcome.map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default()
        }));
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(message)) => Err(format!("{what}: panicked: {message}")),
        Err(_) => Err(format!("{what}: did not finish within {limit:?}")),
    }
}

/// A small workload touching every path an option steers: a write transaction, merged
/// writes from several threads, readers, a flush, a close and a reopen.
fn exercise(dir: &Path, options: Options) -> Result<(), String> {
    let env = match Environment::open(dir, options.clone()) {
        Ok(env) => Arc::new(env),
        // A refusal is fine if it is typed and names the option (checked by the caller).
        Err(e) => return Err(format!("refused: {e}")),
    };
    let mut wtx = env.begin_write().map_err(|e| format!("begin_write: {e}"))?;
    let mut t = wtx.open_tree("t").map_err(|e| format!("open_tree: {e}"))?;
    for i in 0u32..200 {
        t.insert(i.to_be_bytes(), [i as u8; 300])
            .map_err(|e| format!("insert: {e}"))?;
    }
    wtx.commit().map_err(|e| format!("commit: {e}"))?;
    let threads: Vec<_> = (0u32..4)
        .map(|n| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || -> Result<(), String> {
                for i in 0u32..20 {
                    let key = (1000 + n * 100 + i).to_be_bytes();
                    let mut batch = WriteBatch::new();
                    batch.insert("t", key, b"merged");
                    env.write(batch).map_err(|e| format!("write: {e}"))?;
                    env.submit(move |wtx| wtx.open_tree("u")?.insert(key, b"submitted"))
                        .map_err(|e| format!("submit: {e}"))?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| "writer thread panicked")??;
    }
    {
        let rtx = env.begin_read().map_err(|e| format!("begin_read: {e}"))?;
        let t = rtx.open_tree("t").map_err(|e| format!("read tree: {e}"))?;
        if t.len() != 280 {
            return Err(format!("t holds {} entries, not 280", t.len()));
        }
    }
    env.flush_and_sync()
        .map_err(|e| format!("flush_and_sync: {e}"))?;
    let env = Arc::into_inner(env).ok_or("environment still shared")?;
    env.close().map_err(|e| format!("close: {e}"))?;
    let env = Environment::open(dir, options).map_err(|e| format!("reopen: {e}"))?;
    let rtx = env.begin_read().map_err(|e| format!("begin_read: {e}"))?;
    let n = rtx
        .open_tree("u")
        .map_err(|e| format!("tree u: {e}"))?
        .len();
    if n != 80 {
        return Err(format!("u holds {n} entries after reopen, not 80"));
    }
    rtx.check().map_err(|e| format!("check: {e}"))?;
    Ok(())
}

/// Every option at 0, 1 and its maximum (and a few odd sizes) either works or is refused
/// with `InvalidArgument` naming it; none panics, hangs, or fails later.
#[test]
fn every_option_at_its_extremes_works_or_is_refused_by_name() {
    type Set = fn(Options, u64) -> Options;
    let base = || common::small_options();
    let cases: Vec<(&str, Set, Vec<u64>)> = vec![
        (
            "journal_file_size_bytes",
            |o, v| o.journal_file_size_bytes(v),
            vec![0, 1, 64 * 1024 - 1, 64 * 1024 + 1, 100_000, u64::MAX],
        ),
        (
            "journal_spare_files",
            |o, v| o.journal_spare_files(v as usize),
            vec![0, 1],
        ),
        (
            "flush_threshold_bytes",
            |o, v| o.flush_threshold_bytes(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "flush_interval_ms",
            |o, v| o.flush_interval_ms(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "sync_interval_ms",
            |o, v| o.sync_interval_ms(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "sync_threshold_bytes",
            |o, v| o.sync_threshold_bytes(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "scratch_limit_bytes",
            |o, v| o.scratch_limit_bytes(v),
            vec![u64::MAX],
        ),
        (
            "scratch_memory_bytes",
            |o, v| o.scratch_memory_bytes(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "scratch_wait_ms",
            |o, v| o.scratch_wait_ms(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "readers_max",
            |o, v| o.readers_max(v as usize),
            vec![0, 1, u64::MAX],
        ),
        (
            "merge_queue_max_requests",
            |o, v| o.merge_queue_max_requests(v as usize),
            vec![0, 1, u64::MAX],
        ),
        (
            "merge_batch_max_requests",
            |o, v| o.merge_batch_max_requests(v as usize),
            vec![0, 1, u64::MAX],
        ),
        (
            "merge_batch_max_bytes",
            |o, v| o.merge_batch_max_bytes(v as usize),
            vec![0, 1, u64::MAX],
        ),
        (
            "merge_wait_timeout_ms",
            |o, v| o.merge_wait_timeout_ms(v),
            vec![0, 1, u64::MAX],
        ),
        (
            "merge_linger_us",
            |o, v| o.merge_linger_us(v),
            vec![0, 1, u64::MAX],
        ),
    ];
    let mut failures = Vec::new();
    for (name, set, values) in cases {
        for value in values {
            for durability in [Durability::Immediate, Durability::None] {
                let what = format!("{name} = {value} ({durability:?})");
                let options = set(base().durability(durability), value);
                let name = name.to_owned();
                let outcome = within(Duration::from_secs(30), &what, move || {
                    let dir = tempfile::tempdir().expect("tempdir");
                    match exercise(dir.path(), options) {
                        Ok(()) => {}
                        Err(e) if e.starts_with("refused: invalid argument") => {
                            assert!(e.contains(&name), "the refusal names no option: {e}");
                        }
                        Err(e) => panic!("{e}"),
                    }
                });
                if let Err(e) = outcome {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Whether `result` failed with `KeyTooLarge` for `size` bytes.
fn key_too_large<T>(result: hrafn::Result<T>, size: usize) -> bool {
    matches!(result, Err(Error::KeyTooLarge { size_bytes, limit_bytes })
        if size_bytes == size && limit_bytes == KEY_SIZE_MAX_BYTES)
}

/// Names and keys at the limit work in every structure; one byte over fails typed, changes
/// nothing, and the transaction goes on to commit.
#[test]
fn names_and_keys_at_the_limit_work_and_one_over_is_refused_in_every_structure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let max = "n".repeat(KEY_SIZE_MAX_BYTES);
    let over = "n".repeat(KEY_SIZE_MAX_BYTES + 1);
    let fixed = "f".repeat(KEY_SIZE_MAX_BYTES);
    let key_max = vec![7u8; KEY_SIZE_MAX_BYTES];
    let key_over = vec![7u8; KEY_SIZE_MAX_BYTES + 1];
    let mut wtx = env.begin_write().expect("write");
    assert!(key_too_large(wtx.open_tree(&over), over.len()));
    assert!(key_too_large(wtx.open_fixed_tree(&over, 8), over.len()));
    assert!(key_too_large(wtx.open_multi_tree(&over), over.len()));
    {
        let mut t = wtx.open_tree(&max).expect("longest name");
        t.insert(&key_max, b"v").expect("longest key");
        t.insert(b"", b"empty key").expect("an empty key is a key");
        assert!(key_too_large(t.insert(&key_over, b"v"), key_over.len()));
        assert!(key_too_large(t.open_tree(&key_over), key_over.len()));
        let mut nested = t.open_tree(vec![8u8; KEY_SIZE_MAX_BYTES]).expect("nested");
        nested
            .insert(&key_max, b"deep")
            .expect("longest key, nested");
        assert!(key_too_large(
            nested.insert(&key_over, b"v"),
            key_over.len()
        ));
    }
    {
        let mut m = wtx.open_multi_tree("m").expect("multi");
        m.add(&key_max, &key_max).expect("longest key and value");
        let refused = m.add(&key_max, &key_over);
        assert!(
            matches!(
                refused,
                Err(Error::KeyTooLarge { .. } | Error::ValueTooLarge { .. })
            ),
            "{refused:?}"
        );
        assert!(key_too_large(m.add(&key_over, b"v"), key_over.len()));
    }
    {
        let mut f = wtx.open_fixed_tree(&fixed, 8).expect("longest fixed name");
        f.insert(1, &[1u8; 8]).expect("insert");
        let refused = f.insert(2, &[1u8; 9]);
        assert!(refused.is_err(), "a 9-byte value in an 8-byte fixed tree");
    }
    // Nothing the refused calls touched changed, and the transaction commits.
    wtx.commit().expect("commit after refused operations");
    let rtx = env.begin_read().expect("read");
    assert!(
        rtx.open_tree(&over).is_err(),
        "a read of an over-long name fails without panicking"
    );
    let t = rtx.open_tree(&max).expect("longest name");
    assert_eq!(t.len(), 3);
    assert_eq!(t.get(b"").expect("get"), Some(&b"empty key"[..]));
    assert_eq!(t.get(&key_over).expect("get of a long key"), None);
    assert_eq!(rtx.open_multi_tree("m").expect("multi").key_count(), 1);
    assert_eq!(rtx.open_fixed_tree(&fixed).expect("fixed").len(), 1);
    rtx.check().expect("check");
}

/// Values on both sides of the inline/overflow boundary, for the shortest and the longest
/// key, survive inserts, updates across the boundary, deletes, a reopen and a check.
#[test]
fn values_around_the_overflow_boundary_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sizes: Vec<usize> = (3_960..4_020)
        .chain([
            0,
            1,
            PAGE_SIZE_BYTES - 1,
            PAGE_SIZE_BYTES,
            3 * PAGE_SIZE_BYTES + 1,
        ])
        .collect();
    let value = |size: usize, round: u8| vec![round.wrapping_add(size as u8); size];
    {
        let env = Environment::open(dir.path(), common::small_options()).expect("open");
        for round in 0u8..3 {
            let mut wtx = env.begin_write().expect("write");
            let mut t = wtx.open_tree("t").expect("tree");
            for key_len in [1, KEY_SIZE_MAX_BYTES] {
                for i in 0..sizes.len() {
                    // Each round shifts sizes, so updates cross the boundary both ways.
                    let size = sizes[(i + round as usize * 7) % sizes.len()];
                    let mut key = vec![key_len as u8; key_len];
                    key[0] = i as u8;
                    t.insert(&key, value(size, round)).expect("insert");
                    assert_eq!(t.get(&key).expect("get"), Some(&value(size, round)[..]));
                }
            }
            wtx.commit().expect("commit");
        }
        env.check().expect("check");
    }
    let env = Environment::open(dir.path(), common::small_options()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), 2 * sizes.len() as u64);
    rtx.check().expect("check after reopen");
    drop(rtx);
    let mut wtx = env.begin_write().expect("write");
    let mut t = wtx.open_tree("t").expect("tree");
    for key_len in [1, KEY_SIZE_MAX_BYTES] {
        for i in 0..sizes.len() {
            let mut key = vec![key_len as u8; key_len];
            key[0] = i as u8;
            assert!(t.remove(&key).expect("remove"), "key {i} of {key_len}");
        }
    }
    assert!(t.is_empty());
    wtx.commit().expect("commit");
    env.check().expect("check after deleting everything");
}

/// Every file of `dir` with its bytes, to show that a refused open changed nothing.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("list") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path
                    .strip_prefix(dir)
                    .expect("inside")
                    .display()
                    .to_string();
                files.push((name, std::fs::read(&path).expect("read")));
            }
        }
    }
    files.sort();
    files
}

/// An environment holding 100 keys, closed.
fn populated(dir: &Path) {
    let env = Environment::open(dir, common::small_options()).expect("create");
    let mut wtx = env.begin_write().expect("write");
    let mut t = wtx.open_tree("t").expect("tree");
    for i in 0u32..100 {
        t.insert(i.to_be_bytes(), [1u8; 1000]).expect("insert");
    }
    wtx.commit().expect("commit");
    env.close().expect("close");
}

/// Headers of a newer format are refused by both kinds of open, naming both versions, and
/// the refusal changes no file.
#[test]
fn a_newer_format_is_refused_naming_both_versions_and_nothing_changes() {
    use hrafn::header::{FORMAT_VERSION, HEADER_FILES, offsets};
    let dir = tempfile::tempdir().expect("tempdir");
    populated(dir.path());
    let newer = FORMAT_VERSION + 1;
    for name in HEADER_FILES {
        let path = dir.path().join(name);
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        bytes[offsets::VERSION..offsets::VERSION + 4].copy_from_slice(&newer.to_le_bytes());
        let checksum = xxhash_rust::xxh3::xxh3_64(&bytes[..offsets::CHECKSUM]);
        bytes[offsets::CHECKSUM..offsets::CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
        std::fs::write(&path, bytes).expect("write");
    }
    let before = snapshot(dir.path());
    let refusals = [
        Environment::open(dir.path(), common::small_options()).err(),
        Environment::open_read_only(dir.path(), common::small_options()).err(),
    ];
    for refused in refusals {
        let refused = refused.expect("a newer format must be refused");
        assert!(
            matches!(refused, Error::UnsupportedVersion { found, supported }
                if found == newer && supported == FORMAT_VERSION),
            "{refused:?}"
        );
        let message = refused.to_string();
        assert!(
            message.contains(&newer.to_string()) && message.contains(&FORMAT_VERSION.to_string()),
            "{message}"
        );
    }
    // The LOCK file is the opener's own (its contents are locks, not data).
    let unchanged = |files: Vec<(String, Vec<u8>)>| -> Vec<_> {
        files.into_iter().filter(|(n, _)| n != "LOCK").collect()
    };
    assert_eq!(unchanged(snapshot(dir.path())), unchanged(before));
}

/// A data file cut short, or header files cut short, is corruption: never a panic, never a
/// fresh environment over the old files, and nothing is changed.
#[test]
fn truncated_data_or_header_files_are_refused_and_left_alone() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 6] = [
        ("data file emptied", |d| cut(&d.join("data.hrafn"), 0)),
        ("data file cut inside the meta page", |d| {
            cut(&d.join("data.hrafn"), 100)
        }),
        ("data file cut to the meta page", |d| {
            cut(&d.join("data.hrafn"), PAGE_SIZE_BYTES as u64)
        }),
        ("data file cut mid-page", |d| {
            cut(&d.join("data.hrafn"), 5 * PAGE_SIZE_BYTES as u64 + 17)
        }),
        ("both headers cut short", |d| {
            cut(&d.join("header.a"), 10);
            cut(&d.join("header.b"), 10);
        }),
        ("header.a gone, header.b emptied", |d| {
            std::fs::remove_file(d.join("header.a")).expect("remove");
            cut(&d.join("header.b"), 0);
        }),
    ];
    fn cut(path: &Path, len: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(len))
            .expect("cut");
    }
    for (what, damage) in damages {
        let dir = tempfile::tempdir().expect("tempdir");
        populated(dir.path());
        damage(dir.path());
        let before = snapshot(dir.path());
        for read_only in [false, true] {
            let opened = if read_only {
                Environment::open_read_only(dir.path(), common::small_options())
            } else {
                Environment::open(dir.path(), common::small_options())
            };
            match opened {
                Err(e) => assert!(e.is_corruption(), "{what}: {e:?}"),
                // Only a cut that loses nothing may open, and then every key is there.
                Ok(env) => {
                    let rtx = env.begin_read().expect("read");
                    let len = rtx.open_tree("t").map(|t| t.len());
                    assert!(matches!(len, Ok(100)), "{what}: opened, holding {len:?}");
                }
            }
            let after: Vec<_> = snapshot(dir.path())
                .into_iter()
                .filter(|(n, _)| n != "LOCK")
                .collect();
            let before: Vec<_> = before
                .iter()
                .filter(|(n, _)| n != "LOCK")
                .cloned()
                .collect();
            assert_eq!(after, before, "{what}: a refused open changed files");
        }
    }
}

/// A directory of another program's files: its files keep their bytes, whatever their
/// names, when an environment is created beside them.
#[test]
fn another_programs_files_keep_their_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Names another store (LevelDB, RocksDB) or a user might have there.
    let theirs: [(&str, &[u8]); 3] = [
        ("LOCK", b"pid 4242, do not remove\n"),
        ("CURRENT", b"MANIFEST-000001\n"),
        ("notes.txt", b"hello"),
    ];
    for (name, bytes) in theirs {
        std::fs::write(dir.path().join(name), bytes).expect("write");
    }
    match Environment::open(dir.path(), common::small_options()) {
        Ok(env) => {
            env.submit(|wtx| wtx.open_tree("t")?.insert(b"k", b"v"))
                .expect("write");
            env.close().expect("close");
        }
        Err(e) => assert!(
            matches!(e, Error::InvalidArgument(_)) || e.is_corruption(),
            "{e:?}"
        ),
    }
    for (name, bytes) in theirs {
        let now = std::fs::read(dir.path().join(name)).expect("still there");
        assert_eq!(now, bytes, "{name} was changed");
    }
}

/// The lock of an environment whose other files are gone is not taken for a new one's; an
/// empty `LOCK` (what an interrupted creation leaves) is.
#[test]
fn a_lock_file_with_content_and_no_environment_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    env.submit(|wtx| wtx.open_tree("t")?.insert(b"k", b"v"))
        .expect("write");
    env.close().expect("close");
    let lock = std::fs::read(dir.path().join("LOCK")).expect("LOCK");
    assert!(!lock.is_empty(), "the writer's generation is in LOCK");
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path.file_name() != Some(std::ffi::OsStr::new("LOCK")) {
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("remove");
            } else {
                std::fs::remove_file(&path).expect("remove");
            }
        }
    }
    match Environment::open(dir.path(), common::small_options()) {
        Err(e) => assert!(e.is_corruption() && e.to_string().contains("LOCK"), "{e}"),
        Ok(_) => panic!("created an environment over another's LOCK"),
    }
    assert_eq!(std::fs::read(dir.path().join("LOCK")).expect("LOCK"), lock);

    std::fs::write(dir.path().join("LOCK"), b"").expect("empty LOCK");
    let env = Environment::open(dir.path(), common::small_options()).expect("create");
    env.submit(|wtx| wtx.open_tree("t")?.insert(b"k", b"v"))
        .expect("write");
}

/// A progress callback that panics leaves no copy behind: a partial copy would open as an
/// environment missing trees.
#[test]
fn a_compaction_interrupted_by_a_panicking_callback_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("db"), common::small_options()).expect("open");
    env.submit(|wtx| {
        for name in ["a", "b", "c"] {
            wtx.open_tree(name)?.insert(b"k", b"v")?;
        }
        Ok(())
    })
    .expect("write");
    for existed in [false, true] {
        let target = dir.path().join(format!("copy-{existed}"));
        if existed {
            std::fs::create_dir(&target).expect("mkdir");
        }
        let interrupted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            env.compact_to_with_progress(&target, |at| {
                assert!(at.trees_done < 2, "interrupted");
            })
        }));
        assert!(interrupted.is_err(), "the callback's panic goes through");
        if existed {
            let left = std::fs::read_dir(&target).expect("still there").count();
            assert_eq!(left, 0, "the empty target directory is emptied again");
        } else {
            assert!(!target.exists(), "the unfinished copy is removed");
        }
        let beside = dir.path().join(format!("copy-{existed}.unfinished"));
        assert!(
            !beside.exists(),
            "the unfinished copy beside the target is removed"
        );
        let report = env.compact_to(&target).expect("a later compaction");
        assert_eq!(report.trees, 3);
    }
}

/// Compacting into the source's own directory (or its data file) is refused and leaves
/// the source intact; an empty environment compacts into an empty, valid copy; report,
/// stats and metrics of an empty environment are well formed.
#[test]
fn compaction_targets_and_an_empty_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("db");
    let env = Environment::open(&source, common::small_options()).expect("open");
    let report = env
        .storage_report()
        .expect("report of an empty environment");
    assert!(
        report
            .structures
            .iter()
            .all(|s| s.fill_factor().is_finite())
    );
    let text = env.metrics_text();
    assert!(!text.contains("NaN") && !text.contains("inf\n"), "{text}");
    assert_eq!(env.stats().commit_p99_us, None);
    for target in [source.clone(), source.join(hrafn::DATA_FILE)] {
        let refused = env.compact_to(&target).expect_err("the source itself");
        assert!(matches!(refused, Error::InvalidArgument(_)), "{refused:?}");
    }
    let copy = dir.path().join("copy");
    let report = env.compact_to(&copy).expect("compact an empty environment");
    assert_eq!((report.trees, report.entries, report.records), (0, 0, 0));
    assert!(
        report.ratio().is_finite() && report.ratio() > 0.0,
        "{report:?}"
    );
    env.check().expect("source intact");
    drop(env);
    let copy = Environment::open(&copy, Options::default()).expect("open the copy");
    assert!(
        copy.begin_read()
            .expect("read")
            .list_trees()
            .expect("list")
            .is_empty()
    );
    copy.check().expect("check the copy");
}

/// A source whose scratch limit is small (but enough for its own writes) still compacts:
/// the copy's transactions are sized from that limit.
#[test]
fn compaction_under_a_small_scratch_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options().scratch_limit_bytes(2 << 20);
    let env = Environment::open(dir.path().join("db"), options).expect("open");
    for round in 0u32..8 {
        let mut wtx = env.begin_write().expect("write");
        let mut t = wtx.open_tree("t").expect("tree");
        t.insert(round.to_be_bytes(), vec![round as u8; 300 << 10])
            .expect("a large value");
        for i in 0u32..200 {
            t.insert((round * 1000 + i + 100).to_be_bytes(), [3u8; 100])
                .expect("small");
        }
        wtx.commit().expect("commit");
    }
    let report = env
        .compact_to(dir.path().join("copy"))
        .expect("compact under the source's scratch limit");
    assert_eq!(report.entries, 8 * 201);
    let copy = Environment::open(dir.path().join("copy"), Options::default()).expect("open");
    let rtx = copy.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("t")
            .expect("tree")
            .get(7u32.to_be_bytes())
            .expect("get"),
        Some(&vec![7u8; 300 << 10][..])
    );
    rtx.check().expect("check");
}

/// A crash leaves journals to replay; reopening with quite other options (smaller journal
/// files, a small scratch limit, no durability) replays them and works on.
#[test]
fn reopening_after_a_crash_with_other_options_replays_and_works_on() {
    use hrafn::storage::sim::{Damage, SimStorage};
    let disk = SimStorage::new(11);
    let large = Options::default()
        .journal_file_size_bytes(8 << 20)
        .journal_spare_files(0);
    {
        let env = Environment::open_with_storage(Arc::new(disk.clone()), large).expect("open");
        for round in 0u32..20 {
            let mut wtx = env.begin_write().expect("write");
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0u32..50 {
                t.insert((round * 100 + i).to_be_bytes(), [round as u8; 700])
                    .expect("insert");
            }
            wtx.commit().expect("commit");
        }
        // The process dies here: nothing closes the environment.
        let after = disk.power_cut(Damage::KeepAll);
        drop(env);
        let small = common::small_options()
            .scratch_limit_bytes(1 << 20)
            .durability(Durability::None);
        let env = Environment::open_with_storage(Arc::new(after), small).expect("reopen");
        assert!(
            env.stats().recovered_records > 0,
            "the crash left records to replay"
        );
        let mut wtx = env.begin_write().expect("write");
        let mut t = wtx.open_tree("t").expect("tree");
        assert_eq!(t.len(), 1000);
        for i in 0u32..1000 {
            t.insert((5000 + i).to_be_bytes(), [9u8; 50])
                .expect("insert");
        }
        wtx.commit().expect("commit under the new options");
        env.check().expect("check");
    }
}

/// A scratch limit below one page: open works, every write fails at once with
/// `TransactionTooLarge` (no wait for room that cannot come), reads and close work.
#[test]
fn a_scratch_limit_below_one_page_fails_writes_at_once() {
    for limit in [0, 1, PAGE_SIZE_BYTES as u64 - 1] {
        let outcome = within(
            Duration::from_secs(30),
            &format!("limit {limit}"),
            move || {
                let dir = tempfile::tempdir().expect("tempdir");
                let options = common::small_options()
                    .scratch_limit_bytes(limit)
                    .scratch_wait_ms(60_000);
                let env = Environment::open(dir.path(), options).expect("open");
                let mut wtx = env.begin_write().expect("write");
                let failed = wtx.open_tree("t").and_then(|mut t| t.insert(b"k", b"v"));
                assert!(
                    matches!(failed, Err(Error::TransactionTooLarge { .. })),
                    "{failed:?}"
                );
                drop(wtx);
                let failed = env.submit(|wtx| wtx.open_tree("t")?.insert(b"k", b"v"));
                assert!(
                    matches!(failed, Err(Error::TransactionTooLarge { .. })),
                    "{failed:?}"
                );
                assert!(
                    env.begin_read()
                        .expect("read")
                        .list_trees()
                        .expect("list")
                        .is_empty()
                );
                env.close().expect("close");
            },
        );
        outcome.expect("no panic, no wait");
    }
}
