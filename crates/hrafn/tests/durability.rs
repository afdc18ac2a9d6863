//! Durability per transaction: `WriteTxn::set_durability` and `WriteBatch::durability`
//! against the environment's default, on the simulated disk (what a power cut keeps) and on
//! real files (the buffered and direct handles of one journal file together).

use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Durability, Environment, Options, WriteBatch};
use std::sync::Arc;

/// No flush on its own: only commits decide what is durable.
fn options(durability: Durability) -> Options {
    Options::default()
        .durability(durability)
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(0)
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
}

fn commit(env: &Environment, key: &str, durability: Durability) {
    let mut wtx = env.begin_write().expect("begin");
    wtx.set_durability(durability);
    wtx.open_tree("t")
        .expect("tree")
        .insert(key, b"v")
        .expect("insert");
    wtx.commit().expect("commit");
}

/// Runs `work` on a fresh simulated disk, cuts power (keeping nothing pending) while the
/// environment is still open, and lists the keys a reopen finds.
fn keys_after_power_cut(default: Durability, work: impl FnOnce(&Environment)) -> Vec<String> {
    let sim = SimStorage::new(1);
    let env =
        Environment::open_with_storage(Arc::new(sim.clone()), options(default)).expect("open");
    work(&env);
    let disk = sim.power_cut(Damage::DropAll);
    drop(env);
    let env = Environment::open_with_storage(Arc::new(disk), options(default)).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let tree = match rtx.open_tree("t") {
        Ok(tree) => tree,
        Err(hrafn::Error::TreeNotFound { .. }) => return Vec::new(),
        Err(e) => panic!("{e}"),
    };
    tree.range::<&[u8], _>(..)
        .expect("range")
        .map(|e| String::from_utf8(e.expect("entry").0.to_vec()).expect("utf-8"))
        .collect()
}

const NONE: [&str; 0] = [];

#[test]
fn a_non_durable_commit_is_lost_at_a_power_cut_until_a_durable_one_follows() {
    use Durability::{Immediate, None};
    let keys = keys_after_power_cut(Immediate, |env| {
        commit(env, "a", Immediate);
        commit(env, "b", None);
        // Visible at once to readers of this process.
        let rtx = env.begin_read().expect("read");
        assert!(
            rtx.open_tree("t")
                .expect("t")
                .get(b"b")
                .expect("get")
                .is_some()
        );
    });
    assert_eq!(keys, ["a"]);
    let keys = keys_after_power_cut(Immediate, |env| {
        commit(env, "a", Immediate);
        commit(env, "b", None);
        commit(env, "c", None);
        commit(env, "d", Immediate);
    });
    assert_eq!(keys, ["a", "b", "c", "d"]);
}

#[test]
fn a_durable_commit_in_a_buffered_environment_syncs_what_came_before() {
    use Durability::{Immediate, None};
    assert_eq!(
        keys_after_power_cut(None, |env| commit(env, "a", None)),
        NONE
    );
    let keys = keys_after_power_cut(None, |env| {
        commit(env, "a", None);
        commit(env, "b", Immediate);
        commit(env, "c", None);
    });
    assert_eq!(keys, ["a", "b"]);
}

/// A durable transaction that changes nothing still returns only once what it read is
/// durable: an expectation confirmed "durably" must survive a power cut.
#[test]
fn a_durable_transaction_that_changes_nothing_makes_what_it_read_durable() {
    let keys = keys_after_power_cut(Durability::None, |env| {
        commit(env, "a", Durability::None);
        let mut wtx = env.begin_write().expect("begin");
        wtx.set_durability(Durability::Immediate);
        assert!(
            wtx.open_tree("t")
                .expect("t")
                .get(b"a")
                .expect("get")
                .is_some()
        );
        wtx.commit().expect("commit");
        let mut confirm = WriteBatch::new();
        confirm.expect("t", b"a", Some(b"v"));
        confirm.durability(Durability::Immediate);
        env.write(confirm).expect("confirmed");
    });
    assert_eq!(keys, ["a"]);
    // A batch alone, too.
    let keys = keys_after_power_cut(Durability::None, |env| {
        commit(env, "b", Durability::None);
        let mut confirm = WriteBatch::new();
        confirm.expect("t", b"b", Some(b"v"));
        confirm.durability(Durability::Immediate);
        env.write(confirm).expect("confirmed");
    });
    assert_eq!(keys, ["b"]);
}

#[test]
fn a_batch_carries_its_own_durability() {
    let write = |env: &Environment, key: &str, durability: Option<Durability>| {
        let mut batch = WriteBatch::new();
        batch.insert("t", key, b"v");
        if let Some(d) = durability {
            batch.durability(d);
        }
        env.write(batch).expect("write");
    };
    let keys = keys_after_power_cut(Durability::Immediate, |env| {
        write(env, "a", Some(Durability::None));
    });
    assert_eq!(keys, NONE);
    let keys = keys_after_power_cut(Durability::Immediate, |env| {
        write(env, "a", Some(Durability::None));
        write(env, "b", None);
    });
    assert_eq!(keys, ["a", "b"]);
    let keys = keys_after_power_cut(Durability::None, |env| {
        write(env, "a", None);
        write(env, "b", Some(Durability::Immediate));
        write(env, "c", None);
    });
    assert_eq!(keys, ["a", "b"]);
}

/// Real files: non-durable records through the page cache and durable ones through
/// `O_DIRECT` into the same journal files, across rotations, reopened. A clean close
/// leaves nothing to replay, so a read-only open first replays the mixed journals while
/// the writer is still open (a reader held meanwhile keeps the flusher from declaring any
/// of them synced).
#[test]
fn mixed_commits_on_real_files_all_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (round, default) in [Durability::Immediate, Durability::None]
        .into_iter()
        .enumerate()
    {
        let env = Environment::open(dir.path(), options(default)).expect("open");
        let pin = env.begin_read().expect("read");
        for i in 0..300u32 {
            let mut wtx = env.begin_write().expect("begin");
            if i % 3 == 0 {
                wtx.set_durability(match default {
                    Durability::Immediate => Durability::None,
                    Durability::None => Durability::Immediate,
                });
            }
            // 2 KiB values: records of a page or more, rotating 64 KiB journals often.
            wtx.open_tree("t")
                .expect("tree")
                .insert(format!("{default:?}-{i:04}"), [i as u8; 2048])
                .expect("insert");
            wtx.commit().expect("commit");
        }
        {
            let replayed =
                Environment::open_read_only(dir.path(), options(default)).expect("read-only open");
            assert!(replayed.stats().recovered_records >= 300, "{default:?}");
            let rtx = replayed.begin_read().expect("read");
            assert_eq!(
                rtx.open_tree("t").expect("tree").len(),
                300 * (round as u64 + 1)
            );
        }
        drop(pin);
        drop(env);
    }
    let env = Environment::open(dir.path(), options(Durability::Immediate)).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let tree = rtx.open_tree("t").expect("tree");
    assert_eq!(tree.len(), 600);
    assert_eq!(
        tree.get(b"None-0299").expect("get"),
        Some(&[43u8; 2048][..])
    );
    drop(rtx);
    env.check().expect("check");
}

/// `flush_and_sync` makes every commit durable, also a non-durable one while a reader
/// pins older page versions (no page may then be written, and the pass that writes pages
/// was what synced the journal: the call returned with the commit still unsynced).
#[test]
fn flush_and_sync_makes_non_durable_commits_durable_under_a_reader() {
    use Durability::None;
    let keys = keys_after_power_cut(None, |env| {
        commit(env, "a", None);
        env.flush_and_sync().expect("flush");
        let pin = env.begin_read().expect("read");
        commit(env, "b", None);
        env.flush_and_sync().expect("flush");
        drop(pin);
    });
    assert_eq!(keys, ["a", "b"]);
}
