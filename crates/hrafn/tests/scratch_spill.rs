//! A long-lived reader under heavy writes costs disk, not memory: past
//! `Options::scratch_memory_bytes` the flusher moves the page copies the reader keeps from
//! reaching the data file into scratch files, every reader keeps reading exactly its
//! snapshot through them, and the files go away once the reader ends.

mod common;

use hrafn::Environment;
use std::time::{Duration, Instant};

const KEYS: u32 = 20_000;

fn value(round: u32, key: u32) -> Vec<u8> {
    let mut v = vec![(round as u8).wrapping_mul(31) ^ key as u8; 200];
    v[..4].copy_from_slice(&round.to_le_bytes());
    v
}

fn write_round(env: &Environment, round: u32) {
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for key in 0..KEYS {
            t.insert(key.to_be_bytes(), value(round, key))
                .expect("insert");
        }
    }
    wtx.commit().expect("commit");
}

fn assert_round(env: &Environment, rtx: &hrafn::ReadTxn<'_>, round: u32) {
    let t = rtx.open_tree("t").expect("tree");
    for key in (0..KEYS).step_by(7) {
        assert_eq!(
            t.get(key.to_be_bytes()).expect("get"),
            Some(&value(round, key)[..]),
            "key {key} of round {round}; {:?}",
            env.stats()
        );
    }
}

#[test]
fn a_long_reader_spills_scratch_to_files_that_go_when_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options().scratch_memory_bytes(1 << 20);
    drop(Environment::open(dir.path(), options.clone()).expect("create"));
    // A user's file where scratch files live, and one a crashed process left.
    std::fs::create_dir_all(dir.path().join("scratch")).expect("mkdir");
    std::fs::write(dir.path().join("scratch/notes.txt"), b"mine").expect("write");
    std::fs::write(
        dir.path().join("scratch/0000000000000000009.scratch"),
        b"left by a crash",
    )
    .expect("write");
    let env = Environment::open(dir.path(), options).expect("open");
    assert!(
        !dir.path()
            .join("scratch/0000000000000000009.scratch")
            .exists(),
        "open removes scratch files of an earlier process"
    );
    assert!(dir.path().join("scratch/notes.txt").exists());

    write_round(&env, 0);
    env.flush_and_sync().expect("flush");
    let long_reader = env.begin_read().expect("read");
    for round in 1..=4 {
        write_round(&env, round);
    }
    // About 4 MiB of leaves changed since the reader began: past the 1 MiB budget.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        env.flush_and_sync().expect("flush");
        let stats = env.stats();
        if stats.scratch_files > 0 && stats.scratch_memory_bytes <= 1 << 20 {
            break stats;
        }
        assert!(Instant::now() < deadline, "nothing spilled: {stats:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        stats.scratch_used_bytes > 3 << 20,
        "the pinned versions are still held, on disk: {stats:?}"
    );
    assert!(stats.oldest_reader_age_ms.is_some(), "{stats:?}");
    let files: Vec<_> = std::fs::read_dir(dir.path().join("scratch"))
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".scratch"))
        .collect();
    assert_eq!(files.len() as u64, stats.scratch_files, "{stats:?}");

    // Both the old snapshot and the newest state read correctly, partly through files.
    assert_round(&env, &long_reader, 0);
    let newest = env.begin_read().expect("read");
    assert_round(&env, &newest, 4);
    env.check().expect("integrity through spilled pages");
    write_round(&env, 5);
    assert_round(&env, &long_reader, 0);
    drop(newest);

    drop(long_reader);
    env.flush_and_sync().expect("flush");
    let stats = env.stats();
    assert_eq!(stats.scratch_files, 0, "{stats:?}");
    assert_eq!(stats.scratch_used_bytes, 0, "{stats:?}");
    let rtx = env.begin_read().expect("read");
    assert_round(&env, &rtx, 5);
    drop(rtx);
    drop(env);
    let left: Vec<String> = std::fs::read_dir(dir.path().join("scratch"))
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["notes.txt".to_string()]);
}

/// While a reader pins the flush bound, a flusher pass looks at nothing, however much
/// waits in scratch; once it ends, the passes look at what they flush.
#[test]
fn flusher_passes_cost_what_they_flush_not_what_scratch_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    write_round(&env, 0);
    env.flush_and_sync().expect("flush");
    let reader = env.begin_read().expect("read");
    for round in 1..=4 {
        write_round(&env, round);
    }
    let pinned = env.stats();
    let pinned_pages = pinned.scratch_used_bytes / 8192;
    assert!(pinned_pages > 500, "only {pinned_pages} pages in scratch");
    for _ in 0..50 {
        env.flush_and_sync().expect("flush");
    }
    let after = env.stats();
    assert_eq!(
        after.flush_pages_examined, pinned.flush_pages_examined,
        "passes under a pinned bound looked at pages"
    );
    drop(reader);
    env.flush_and_sync().expect("flush");
    let drained = env.stats();
    let examined = drained.flush_pages_examined - after.flush_pages_examined;
    let flushed = drained.pages_flushed - after.pages_flushed;
    assert!(flushed > 0 && examined >= flushed);
    // Pages looked at are pages the commits wrote, not a scan of scratch each pass.
    assert!(
        examined <= 4 * pinned_pages,
        "{examined} examined for {flushed} flushed"
    );
}

/// Bytes of the scratch files on disk now.
fn scratch_file_bytes_on_disk(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("scratch"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".scratch"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// `scratch_limit_bytes` bounds the disk scratch takes, not only the copies in it: while
/// a reader pins the data file, commits rewrite one key range at a time (their older
/// copies die, leaving holes in the files that hold them) and add keys (more copies that
/// must stay). Each file lives while any of its copies does. Writes then wait and fail
/// with `ScratchFull` instead of scratch files passing the limit, and everything drains
/// once the reader ends.
#[test]
fn scratch_files_stay_within_the_scratch_limit() {
    const LIMIT_BYTES: u64 = 8 << 20;
    const ADDED_PER_ROUND: u32 = 500;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options()
        .scratch_memory_bytes(1 << 20)
        .scratch_limit_bytes(LIMIT_BYTES)
        .scratch_wait_ms(50);
    let env = Environment::open(dir.path(), options).expect("open");
    write_round(&env, 0);
    env.flush_and_sync().expect("flush");
    let long_reader = env.begin_read().expect("read");

    let block = KEYS / 10;
    let mut full = 0;
    let mut written: std::collections::BTreeMap<u32, u32> = (0..KEYS).map(|k| (k, 0)).collect();
    for round in 1..=60u32 {
        let first = (round * 7 % 10) * block;
        let added = KEYS + round * ADDED_PER_ROUND;
        let keys: Vec<u32> = (first..first + block)
            .chain(added..added + ADDED_PER_ROUND)
            .collect();
        let result = (|| {
            let mut wtx = env.begin_write()?;
            {
                let mut t = wtx.open_tree("t")?;
                for &key in &keys {
                    t.insert(key.to_be_bytes(), value(round, key))?;
                }
            }
            wtx.commit()
        })();
        match result {
            Ok(()) => written.extend(keys.iter().map(|&k| (k, round))),
            Err(hrafn::Error::ScratchFull { .. }) => full += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        env.flush_and_sync().expect("flush");
        let stats = env.stats();
        let on_disk = scratch_file_bytes_on_disk(dir.path());
        // (The flusher may make or drop a file between the two readings.)
        assert!(
            on_disk <= LIMIT_BYTES && stats.scratch_file_bytes <= LIMIT_BYTES,
            "round {round}: {on_disk} bytes of scratch files: {stats:?}"
        );
    }
    assert!(full > 0, "the limit was never reached: {:?}", env.stats());
    assert_round(&env, &long_reader, 0);

    drop(long_reader);
    env.flush_and_sync().expect("flush");
    let stats = env.stats();
    assert_eq!(
        (stats.scratch_files, stats.scratch_file_bytes),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!(scratch_file_bytes_on_disk(dir.path()), 0);
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), written.len() as u64);
    for (&key, &round) in written.iter().step_by(13) {
        assert_eq!(
            t.get(key.to_be_bytes()).expect("get"),
            Some(&value(round, key)[..])
        );
    }
    drop(rtx);
    env.check().expect("check");
}
