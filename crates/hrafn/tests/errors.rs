//! Each error kind users can provoke has its own variant.

mod common;

use hrafn::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES};
use hrafn::{Environment, Error, Options};

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

#[test]
fn scratch_full_is_reported_and_recoverable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        scratch_limit_bytes: 64 * PAGE_SIZE_BYTES as u64,
        scratch_wait_ms: 20,
        ..common::small_options()
    };
    let env = Environment::open(dir.path(), options).expect("open");
    let mut wtx = env.begin_write().expect("write");
    let mut failed = None;
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..100_000u32 {
            if let Err(e) = t.insert(i.to_be_bytes(), [7u8; 500]) {
                failed = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(failed, Some(Error::ScratchFull { .. })),
        "{failed:?}"
    );
    drop(wtx); // abort frees the scratch
    let mut wtx = env.begin_write().expect("write after abort");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"small", b"fits")
        .expect("insert");
    wtx.commit().expect("commit");
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
