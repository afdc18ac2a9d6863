//! Model test: random operations, transactions, aborts, long snapshots and reopens against
//! a `BTreeMap` model, on the simulated disk (fast, deterministic).

mod common;

use hrafn::storage::sim::SimStorage;
use hrafn::{Environment, Error};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<(u8, Vec<u8>), Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Insert {
        tree: u8,
        key: u8,
        len: usize,
        fill: u8,
    },
    Remove {
        tree: u8,
        key: u8,
    },
    Commit,
    Abort,
    Reopen,
    /// Open a snapshot now and verify it after the next few operations.
    Snapshot,
    DeleteTree {
        tree: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..3, any::<u8>(), prop_oneof![9 => 0usize..200, 1 => 5000usize..20000], any::<u8>())
            .prop_map(|(tree, key, len, fill)| Op::Insert { tree, key, len, fill }),
        3 => (0u8..3, any::<u8>()).prop_map(|(tree, key)| Op::Remove { tree, key }),
        3 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => Just(Op::Reopen),
        1 => Just(Op::Snapshot),
        1 => (0u8..3).prop_map(|tree| Op::DeleteTree { tree }),
    ]
}

fn tree_name(tree: u8) -> String {
    format!("tree-{tree}")
}

fn key_bytes(key: u8) -> Vec<u8> {
    // Long-ish keys so nodes split with few entries.
    let mut k = vec![key; 1 + (key as usize % 7) * 40];
    k[0] = key;
    k
}

fn read_all(env: &Environment) -> Model {
    read_snapshot(&env.begin_read().expect("read"))
}

fn read_snapshot(rtx: &hrafn::ReadTxn<'_>) -> Model {
    let mut out = Model::new();
    for tree in 0..3u8 {
        match rtx.open_tree(&tree_name(tree)) {
            Ok(t) => {
                for item in t.iter().expect("iter") {
                    let (k, v) = item.expect("entry");
                    out.insert((tree, k.to_vec()), v.to_vec());
                }
                assert_eq!(
                    t.len(),
                    out.keys().filter(|(t2, _)| *t2 == tree).count() as u64
                );
            }
            Err(Error::TreeNotFound { .. }) => {}
            Err(e) => panic!("open_tree: {e}"),
        }
    }
    out
}

fn apply(env: &Environment, batch: &[Op], commit: bool) {
    let mut wtx = env.begin_write().expect("write");
    for op in batch {
        match op {
            Op::Insert {
                tree,
                key,
                len,
                fill,
            } => {
                let mut t = wtx.open_tree(&tree_name(*tree)).expect("tree");
                t.insert(key_bytes(*key), vec![*fill; *len])
                    .expect("insert");
            }
            Op::Remove { tree, key } => {
                let mut t = wtx.open_tree(&tree_name(*tree)).expect("tree");
                t.remove(key_bytes(*key)).expect("remove");
            }
            Op::DeleteTree { tree } => {
                wtx.delete_tree(&tree_name(*tree)).expect("delete tree");
            }
            _ => unreachable!("only writes are batched"),
        }
    }
    if commit {
        wtx.commit().expect("commit")
    } else {
        wtx.abort()
    }
}

/// Runs `ops`; between reopens, an open snapshot must keep showing the state it started
/// with while later transactions commit.
fn run(ops: Vec<Op>, seed: u64) {
    let sim = SimStorage::new(seed);
    let storage: Arc<dyn hrafn::storage::Storage> = Arc::new(sim.clone());
    let open = || {
        Environment::open_with_storage(Arc::clone(&storage), common::small_options()).expect("open")
    };
    let mut committed = Model::new();
    let mut pending;
    // Writes are batched into one transaction per Commit/Abort.
    let mut batch: Vec<Op> = Vec::new();
    for segment in ops.split(|op| matches!(op, Op::Reopen)) {
        let env = open();
        assert_eq!(read_all(&env), committed, "after (re)open");
        pending = committed.clone();
        batch.clear();
        let mut snapshot: Option<(hrafn::ReadTxn<'_>, Model)> = None;
        for op in segment {
            match op {
                Op::Insert {
                    tree,
                    key,
                    len,
                    fill,
                } => {
                    pending.insert((*tree, key_bytes(*key)), vec![*fill; *len]);
                    batch.push(op.clone());
                }
                Op::Remove { tree, key } => {
                    pending.remove(&(*tree, key_bytes(*key)));
                    batch.push(op.clone());
                }
                Op::DeleteTree { tree } => {
                    pending.retain(|(t, _), _| t != tree);
                    batch.push(op.clone());
                }
                Op::Commit | Op::Abort => {
                    let commit = matches!(op, Op::Commit);
                    if !batch.is_empty() {
                        apply(&env, &batch, commit);
                    }
                    if commit {
                        committed = pending.clone();
                    } else {
                        pending = committed.clone();
                    }
                    batch.clear();
                }
                Op::Snapshot => {
                    snapshot = Some((env.begin_read().expect("read"), committed.clone()));
                }
                Op::Reopen => unreachable!("segments are split at reopens"),
            }
            if let Some((rtx, model)) = &snapshot {
                assert_eq!(&read_snapshot(rtx), model, "a snapshot changed");
            }
        }
        drop(snapshot);
        if !batch.is_empty() {
            apply(&env, &batch, true);
            committed = pending.clone();
            batch.clear();
        }
        assert_eq!(read_all(&env), committed, "end of segment");
        env.check().expect("integrity");
    }
    let env = open();
    assert_eq!(read_all(&env), committed, "after final reopen");
    env.check().expect("integrity after reopen");
    assert!(
        sim.violations().is_empty(),
        "write-ahead violations: {:?}",
        sim.violations()
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000 * common::scale() as u32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn model_matches_btreemap(ops in proptest::collection::vec(op(), 1..80), seed in any::<u64>()) {
        run(ops, seed);
    }
}

/// Every entry of `tree` as `reader` sees it.
fn entries(reader: &hrafn::ReadTxn<'_>, tree: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    reader
        .open_tree(tree)
        .expect("tree")
        .iter()
        .expect("iter")
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .expect("entries")
}

/// A long reader keeps its view while writers commit and the flusher runs.
#[test]
fn snapshot_isolation_with_concurrent_commits() {
    let sim = SimStorage::new(7);
    let env = Environment::open_with_storage(Arc::new(sim), common::small_options()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    for i in 0..500u32 {
        wtx.open_tree("t")
            .expect("tree")
            .insert(i.to_be_bytes(), b"v0")
            .expect("insert");
    }
    wtx.commit().expect("commit");
    let reader = env.begin_read().expect("read");
    let before: Vec<(Vec<u8>, Vec<u8>)> = entries(&reader, "t");
    for round in 0..50u32 {
        let mut wtx = env.begin_write().expect("write");
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..500u32 {
            if (i + round) % 3 == 0 {
                t.remove(i.to_be_bytes()).expect("remove");
            } else {
                t.insert(i.to_be_bytes(), format!("v{round}"))
                    .expect("insert");
            }
        }
        wtx.commit().expect("commit");
        env.flush_and_sync().expect("flush");
    }
    let after: Vec<(Vec<u8>, Vec<u8>)> = entries(&reader, "t");
    assert_eq!(before, after, "a reader's view never changes");
    assert!(
        env.stats().scratch_used_bytes > 0,
        "the old reader pins scratch"
    );
    drop(reader);
    env.flush_and_sync().expect("flush");
    assert_eq!(
        env.stats().ptt_page_count,
        0,
        "scratch drains once the reader ends"
    );
}
