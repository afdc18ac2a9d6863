//! Open never destroys data: it creates only in a directory that holds nothing of an
//! environment, removes only files it can prove are its own, and an open that fails leaves
//! every file byte for byte as it was.

mod common;

use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{DATA_FILE, Environment, Error, Options};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    common::dir_files(dir, &[])
}

fn populate(dir: &Path, keys: u64) {
    let env = Environment::open(dir, Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..keys {
            t.insert(format!("key{i:06}"), [7u8; 2000]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
}

fn key_count(dir: &Path) -> u64 {
    let env = Environment::open(dir, Options::default()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    rtx.open_tree("t")
        .expect("tree")
        .iter()
        .expect("iter")
        .count() as u64
}

#[test]
fn missing_headers_are_refused_and_nothing_is_touched() {
    let dir = tempfile::tempdir().expect("tempdir");
    populate(dir.path(), 399);
    for header in ["header.a", "header.b"] {
        let _ = std::fs::remove_file(dir.path().join(header));
    }
    let before = files(dir.path());
    assert!(before.contains_key(DATA_FILE));
    match Environment::open(dir.path(), Options::default()) {
        Err(Error::Corruption { reason, .. }) => {
            assert!(
                reason.contains("header.a and header.b are missing"),
                "{reason}"
            );
            assert!(reason.contains("data file"), "{reason}");
        }
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("opened an environment without its headers"),
    }
    assert_eq!(files(dir.path()), before, "the failed open changed files");
}

#[test]
fn a_users_tmp_file_survives_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    populate(dir.path(), 10);
    std::fs::write(dir.path().join("notes.tmp"), b"mine").expect("write");
    std::fs::write(dir.path().join("header.a.tmp"), b"not a header").expect("write");
    assert_eq!(key_count(dir.path()), 10);
    assert_eq!(
        std::fs::read(dir.path().join("notes.tmp")).expect("kept"),
        b"mine"
    );
    assert!(dir.path().join("header.a.tmp").exists());
}

#[test]
fn a_directory_of_unrelated_files_gets_a_new_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("README"), b"hello").expect("write");
    populate(dir.path(), 3);
    assert_eq!(key_count(dir.path()), 3);
    assert_eq!(
        std::fs::read(dir.path().join("README")).expect("kept"),
        b"hello"
    );
}

/// A creation cut at every storage operation either left nothing that counts as an
/// environment (the next open creates one) or a finished environment; never a refusal.
#[test]
fn an_unfinished_creation_starts_over() {
    let options = Options::default();
    let dry = SimStorage::new(7);
    drop(Environment::open_with_storage(Arc::new(dry.clone()), options.clone()).expect("open"));
    let ops = dry.ops_count();
    assert!(ops > 5, "creation takes several operations");
    for op in 0..ops {
        let sim = SimStorage::new(7);
        sim.crash_at(op);
        let _ = Environment::open_with_storage(Arc::new(sim.clone()), options.clone());
        for damage in [Damage::KeepAll, Damage::DropAll, Damage::Random] {
            let disk = sim.power_cut(damage);
            let env = Environment::open_with_storage(Arc::new(disk), options.clone())
                .unwrap_or_else(|e| panic!("creation cut at op {op} ({damage:?}): {e}"));
            env.check().expect("check");
        }
    }
}

/// Damage that makes open fail, in each file an open reads: the failed open writes nothing.
#[test]
fn a_failed_open_changes_no_file() {
    // The flusher never runs on its own: the records stay in the journal to replay.
    let options = Options::default()
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
        .journal_spare_files(0);
    let sim = SimStorage::new(11);
    let base = {
        let env =
            Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
        for round in 0..3u64 {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_tree("t").expect("tree");
                for i in 0..200u64 {
                    t.insert(format!("k{round}-{i:04}"), [round as u8; 300])
                        .expect("insert");
                }
            }
            wtx.commit().expect("commit");
        }
        // A process crash: the disk as it is now, before the close flushes.
        let base = sim.power_cut(Damage::KeepAll);
        drop(env);
        base
    };
    let mut failed = 0;
    let mut damaged = 0;
    for name in base.file_names() {
        let len = base.read_file(&name).expect("read").len() as u64;
        // One flip in every 4 KiB: page headers, bodies, record headers and payloads.
        for at in (0..len).step_by(4096).map(|at| at + 40) {
            let disk = base.power_cut(Damage::KeepAll);
            if disk.flip_bit(&name, at * 8 + 5).is_err() {
                continue;
            }
            damaged += 1;
            let before = disk.files();
            if Environment::open_with_storage(Arc::new(disk.clone()), options.clone()).is_err() {
                failed += 1;
                assert!(
                    disk.files() == before,
                    "open failed on a flip at byte {at} of {name} and changed files"
                );
            }
        }
    }
    eprintln!("{failed} of {damaged} damaged opens failed, each changing nothing");
    assert!(
        failed >= 10,
        "only {failed} of {damaged} damaged opens failed"
    );
}

/// A header whose checksum holds but whose page count is below the meta page's (written
/// wrong, not torn) is refused as corruption, every file as it was: the open would
/// otherwise cut the data file there and empty live pages.
#[test]
fn a_header_counting_fewer_pages_than_the_meta_page_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    populate(dir.path(), 500);
    const NEXT_PAGE_NUMBER: usize = 72;
    const CHECKSUM: usize = 120;
    for name in ["header.a", "header.b"] {
        let path = dir.path().join(name);
        let Ok(mut bytes) = std::fs::read(&path) else {
            continue;
        };
        bytes[NEXT_PAGE_NUMBER..NEXT_PAGE_NUMBER + 8].copy_from_slice(&2u64.to_le_bytes());
        let checksum = xxhash_rust::xxh3::xxh3_64(&bytes[..CHECKSUM]);
        bytes[CHECKSUM..CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
        std::fs::write(&path, &bytes).expect("write back");
    }
    let before = files(dir.path());
    let opened = Environment::open(dir.path(), Options::default());
    assert!(
        matches!(opened, Err(Error::Corruption { .. })),
        "{:?}",
        opened.map(|_| ())
    );
    assert_eq!(files(dir.path()), before, "the failed open changed files");
}

/// Files in `journal/` under names the engine does not write are not journals: a number
/// past what a header holds made the open write a header no later open could read, and a
/// signed number was listed as a journal that opening by number then did not find.
#[test]
fn stray_journal_names_are_not_journals() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .insert(b"k", b"1")
            .expect("insert");
        wtx.commit().expect("commit");
    }
    for name in ["9999999999999999999.journal", "+000000000000000001.journal"] {
        std::fs::write(dir.path().join("journal").join(name), b"").expect("stray file");
    }
    for value in [b"2", b"3"] {
        let env = Environment::open(dir.path(), Options::default()).expect("reopen");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .insert(b"k", value)
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(common::value_of(&env, "t", b"k"), Some(b"3".to_vec()));
}
