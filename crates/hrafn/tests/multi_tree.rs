//! Multi-value trees against an in-memory model: random adds (one by one and in runs) and
//! removes over keys whose sets stay small (embedded) or grow into their own trees and
//! shrink back, whole-key removes, commits and aborts, forward and backward iteration,
//! reopens, the integrity check after every commit, and power loss at every storage
//! operation.

mod common;
mod crash_support;

use common::mix;
use hrafn::multi::{EMBEDDED_SET_MAX_BYTES, MULTI_VALUE_SIZE_MAX_BYTES};
use hrafn::{Environment, Error, Options};
use std::collections::{BTreeMap, BTreeSet};

type Model = BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>;

fn key(k: u64) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

/// A value: mostly short, sometimes long enough that a few of them outgrow an embedded set.
fn value(r: u64) -> Vec<u8> {
    let len = match r % 16 {
        0 => (r >> 8) as usize % 600,
        1 => 0,
        _ => 1 + (r >> 8) as usize % 12,
    };
    let mut v: Vec<u8> = (0..len).map(|i| mix(r ^ i as u64) as u8 % 8).collect();
    v.truncate(len);
    v
}

fn assert_same(env: &Environment, model: &Model) {
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_multi_tree("m").expect("open");
    assert_eq!(t.key_count(), model.len() as u64);
    let keys: Vec<Vec<u8>> = t
        .keys::<&[u8], _>(..)
        .expect("keys")
        .map(|k| k.expect("key").to_vec())
        .collect();
    assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
    let keys_rev: Vec<Vec<u8>> = t
        .keys::<&[u8], _>(..)
        .expect("keys")
        .rev()
        .map(|k| k.expect("key").to_vec())
        .collect();
    assert_eq!(keys_rev, model.keys().rev().cloned().collect::<Vec<_>>());
    for (k, set) in model {
        let values: Vec<Vec<u8>> = t
            .values(k)
            .expect("values")
            .map(|v| v.expect("value").to_vec())
            .collect();
        assert_eq!(values, set.iter().cloned().collect::<Vec<_>>(), "values");
        let values_rev: Vec<Vec<u8>> = t
            .values(k)
            .expect("values")
            .rev()
            .map(|v| v.expect("value").to_vec())
            .collect();
        assert_eq!(
            values_rev,
            set.iter().rev().cloned().collect::<Vec<_>>(),
            "values backwards"
        );
        assert_eq!(t.count(k).expect("count"), set.len() as u64);
        let first = set.iter().next().expect("non-empty");
        assert!(t.contains(k, first).expect("contains"));
    }
    assert_eq!(t.count(b"absent").expect("count"), 0);
    assert_eq!(t.values(b"absent").expect("values").count(), 0);
    drop(rtx);
    env.check().expect("check");
}

#[test]
fn random_operations_match_the_model() {
    // Few keys, so sets grow large; some keys take many values.
    run_model(24, 0x3017, true);
}

/// Thousands of keys: the outer tree has several levels and its leaves split as embedded
/// sets grow, so a value's add or remove, which finds its key once and stores the set at
/// the place found, stores it through splits up the path.
#[test]
fn random_operations_over_many_keys_match_the_model() {
    run_model(6_000, 0x77, false);
}

fn run_model(keys: u64, seed: u64, sets_outgrow_entries: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options();
    let mut env = Environment::open(dir.path(), options.clone()).expect("open");
    let mut model = Model::new();
    let mut wtx = env.begin_write().expect("write");
    wtx.open_multi_tree("m").expect("create");
    wtx.commit().expect("commit");
    let mut r = seed;
    let mut next = move || {
        r = mix(r);
        r
    };
    let (mut cases, mut nested_seen) = (0u64, 0u64);
    for txn in 0..60u64 {
        let mut wtx = env.begin_write().expect("write");
        let mut changed = model.clone();
        {
            let mut t = wtx.open_multi_tree("m").expect("open");
            // Early transactions grow sets past the embedded limit; later ones shrink
            // them back, so sets move both ways.
            let add_percent = if txn < 30 { 75 } else { 35 };
            // A run of pairs through `add_each`: ascending most of the time (its leaves
            // are found without descents), with repeated keys and values; in any order
            // otherwise.
            if next() % 2 == 0 {
                let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..(20 + next() % 400))
                    .map(|_| (key(next() % keys), value(next())))
                    .collect();
                if next() % 4 != 0 {
                    pairs.sort();
                }
                let mut want = 0;
                for (k, v) in &pairs {
                    want += u64::from(changed.entry(k.clone()).or_default().insert(v.clone()));
                }
                cases += pairs.len() as u64;
                assert_eq!(t.add_each(pairs).expect("add_each"), want);
            }
            for _ in 0..(50 + next() % 300) {
                cases += 1;
                let k = key(next() % keys);
                let op = next() % 100;
                if op < add_percent {
                    let v = value(next());
                    let added = t.add(&k, &v).expect("add");
                    assert_eq!(added, changed.entry(k.clone()).or_default().insert(v));
                } else if op < 98 {
                    // Remove a present value most of the time, an absent one otherwise.
                    let present = changed.get(&k).and_then(|s| {
                        let n = s.len() as u64;
                        s.iter().nth((next() % n.max(1)) as usize).cloned()
                    });
                    let v = match present {
                        Some(v) if next() % 4 != 0 => v,
                        _ => value(next()),
                    };
                    let removed = t.remove(&k, &v).expect("remove");
                    let in_model = changed.get_mut(&k).is_some_and(|s| s.remove(&v));
                    if changed.get(&k).is_some_and(BTreeSet::is_empty) {
                        changed.remove(&k);
                    }
                    assert_eq!(removed, in_model);
                } else {
                    let removed = t.remove_key(&k).expect("remove_key");
                    let want = changed.remove(&k).map_or(0, |s| s.len() as u64);
                    assert_eq!(removed, want);
                }
                let n = t.count(&k).expect("count");
                assert_eq!(n, changed.get(&k).map_or(0, |s| s.len() as u64));
            }
            assert_eq!(t.key_count(), changed.len() as u64);
        }
        nested_seen += changed
            .values()
            .filter(|s| s.iter().map(|v| v.len() + 2).sum::<usize>() > EMBEDDED_SET_MAX_BYTES)
            .count() as u64;
        if next() % 5 == 0 {
            wtx.abort();
        } else {
            wtx.commit().expect("commit");
            model = changed;
        }
        assert_same(&env, &model);
        if txn % 15 == 14 {
            drop(env);
            env = Environment::open(dir.path(), options.clone()).expect("reopen");
            assert_same(&env, &model);
        }
    }
    assert!(cases >= 10_000, "{cases} cases");
    if sets_outgrow_entries {
        assert!(nested_seen > 0, "no set outgrew its entry");
    } else {
        // Entries of 13 bytes and more, with their slots: past 600 they fill more than one
        // 8 KiB leaf, so the outer tree has branches.
        assert!(model.len() > 2_000, "{} keys", model.len());
    }
    // Empty it: every set's pages go back to the free-space map (the check counts them).
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        for (k, set) in &model {
            assert_eq!(t.remove_key(k).expect("remove_key"), set.len() as u64);
        }
        assert!(t.is_empty());
    }
    wtx.commit().expect("commit");
    assert_same(&env, &Model::new());
}

#[test]
fn a_set_moves_into_its_own_tree_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let pages = |env: &Environment| env.check().expect("check").used_pages;
    // A set that grows into a tree and is removed whole leaves the free-space map (two
    // pages) behind, and nothing else.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        for i in 0..5_000u64 {
            t.add(b"warm", i.to_be_bytes()).expect("add");
        }
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    assert_eq!(
        wtx.open_multi_tree("m")
            .expect("open")
            .remove_key(b"warm")
            .expect("remove_key"),
        5_000
    );
    wtx.commit().expect("commit");
    let empty_pages = pages(&env);
    assert_eq!(empty_pages, 5, "meta, free-space map, catalog, one leaf");

    // 100 values of 8 bytes embed (1,000 bytes); the 103rd does not.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        for i in 0..100u64 {
            assert!(t.add(b"k", i.to_be_bytes()).expect("add"));
        }
        assert!(!t.add(b"k", 5u64.to_be_bytes()).expect("add again"));
    }
    wtx.commit().expect("commit");
    assert_eq!(pages(&env), empty_pages, "an embedded set takes no page");
    assert_eq!(env.check().expect("check").nested_tree_count, 0);

    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        for i in 100..5_000u64 {
            t.add(b"k", i.to_be_bytes()).expect("add");
        }
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 1);
    assert!(report.used_pages > empty_pages + 5, "{report:?}");

    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        for i in 40..5_000u64 {
            assert!(t.remove(b"k", i.to_be_bytes()).expect("remove"));
        }
        assert_eq!(t.count(b"k").expect("count"), 40);
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 0, "a small set embeds again");
    assert_eq!(report.used_pages, empty_pages, "{report:?}");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_multi_tree("m").expect("open");
    let values: Vec<u64> = t
        .values(b"k")
        .expect("values")
        .map(|v| u64::from_be_bytes(v.expect("value").try_into().expect("8 bytes")))
        .collect();
    assert_eq!(values, (0..40).collect::<Vec<_>>());
}

#[test]
fn sizes_and_kinds_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_multi_tree("m").expect("open");
        let long = vec![7u8; MULTI_VALUE_SIZE_MAX_BYTES + 1];
        assert!(matches!(
            t.add(b"k", &long),
            Err(Error::ValueTooLarge { .. })
        ));
        assert!(
            !t.remove(b"k", &long)
                .expect("remove of an impossible value")
        );
        // The longest value starts its set in a tree of its own.
        let longest = vec![7u8; MULTI_VALUE_SIZE_MAX_BYTES];
        assert!(t.add(b"k", &longest).expect("add"));
        assert!(t.contains(b"k", &longest).expect("contains"));
        assert!(matches!(
            t.add(vec![1u8; 2001], b"v"),
            Err(Error::KeyTooLarge { .. })
        ));
        // The pairs before a wrongly sized one are added, the run it cuts short too.
        let pairs: [(&[u8], &[u8]); 4] = [(b"a", b"1"), (b"b", b"1"), (b"b", b"2"), (b"b", &long)];
        assert!(matches!(
            t.add_each(pairs),
            Err(Error::ValueTooLarge { .. })
        ));
        assert_eq!(
            (t.count(b"a").expect("count"), t.count(b"b").expect("count")),
            (1, 2)
        );
    }
    assert!(matches!(
        wtx.open_tree("m"),
        Err(Error::WrongTreeKind { .. })
    ));
    wtx.open_tree("plain").expect("open");
    assert!(matches!(
        wtx.open_multi_tree("plain"),
        Err(Error::WrongTreeKind { .. })
    ));
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    assert!(matches!(
        rtx.open_multi_tree("plain"),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        rtx.open_multi_tree("none"),
        Err(Error::TreeNotFound { .. })
    ));
    assert_eq!(env.check().expect("check").nested_tree_count, 1);
}

/// Power loss at every storage operation of a workload of adds and removes across the
/// embedded/tree boundary: every damage variant recovers to a committed state and checks
/// clean (every set decodes, every set tree is sound, no page leaks).
#[test]
fn power_loss_recovers_a_committed_state() {
    use hrafn::storage::sim::SimStorage;

    const COMMITS: u64 = 16;
    let options = crash_support::deterministic_options();
    let run = |sim: &SimStorage| {
        crash_support::run_commits(sim, &options, COMMITS, 5, &|wtx, txn, model: &mut Model| {
            {
                let mut t = wtx.open_multi_tree("m")?;
                for i in 0..60 {
                    let r = mix(txn * 1000 + i);
                    let k = key(r % 3);
                    let v = (r >> 8).to_be_bytes()[..4 + (r % 5) as usize].to_vec();
                    if txn >= 10 && !r.is_multiple_of(3) {
                        let first = model.get(&k).and_then(|s| s.iter().next().cloned());
                        if let Some(v) = first {
                            t.remove(&k, &v)?;
                            let set = model.get_mut(&k).expect("present");
                            set.remove(&v);
                            if set.is_empty() {
                                model.remove(&k);
                            }
                        }
                    } else {
                        t.add(&k, &v)?;
                        model.entry(k).or_default().insert(v);
                    }
                }
            }
            Ok(())
        })
    };
    let (models, _) = run(&SimStorage::new(0x3017));
    let big = models
        .iter()
        .flat_map(|m| m.values())
        .any(|s| s.iter().map(|v| v.len() + 2).sum::<usize>() > EMBEDDED_SET_MAX_BYTES);
    assert!(big, "the workload never moves a set into its own tree");
    let (states, ops) =
        crash_support::power_loss_at_every_operation(0x3017, &options, &run, &|env| {
            let rtx = env.begin_read().expect("read");
            match rtx.open_multi_tree("m") {
                Ok(t) => {
                    let keys: Vec<Vec<u8>> = t
                        .keys::<&[u8], _>(..)
                        .expect("keys")
                        .map(|k| k.expect("key").to_vec())
                        .collect();
                    keys.into_iter()
                        .map(|k| {
                            let set = t
                                .values(&k)
                                .expect("values")
                                .map(|v| v.expect("value").to_vec())
                                .collect();
                            (k, set)
                        })
                        .collect()
                }
                Err(Error::TreeNotFound { .. }) => Model::new(),
                Err(e) => panic!("{e}"),
            }
        });
    common::summary(&format!(
        "multi-value tree power loss: {states} crash states over {ops} operations"
    ));
}

/// A value of about 2 KB, so few fit in a set tree's leaf and removals collapse its root.
fn big(tag: u8, n: u8) -> Vec<u8> {
    let mut v = vec![tag, n];
    v.resize(1_990, b'.');
    v
}

/// Values of mixed sizes make a set's tree several levels deep with small values left over:
/// removing the large ones collapses the tree's root and embeds the set again, in one
/// change. The tree must be freed as it is after the collapse, not as it was (a page freed
/// twice fails the commit).
#[test]
fn a_set_tree_that_collapses_and_embeds_frees_each_page_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for i in 0..2u8 {
            m.add(b"k", [b'a', i]).expect("add");
        }
        for i in 0..4u8 {
            m.add(b"k", big(b'b', i)).expect("add");
        }
        for i in 0..3u8 {
            m.add(b"k", big(b'm', i)).expect("add");
        }
        m.add(b"k", big(b'n', 0)).expect("add");
        for i in 0..14u8 {
            m.add(b"k", [b'p', i]).expect("add");
        }
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for i in 0..4u8 {
            assert!(m.remove(b"k", big(b'b', i)).expect("remove"));
        }
        for i in 0..3u8 {
            assert!(m.remove(b"k", big(b'm', i)).expect("remove"));
        }
        assert!(m.remove(b"k", big(b'n', 0)).expect("remove"));
        assert_eq!(m.count(b"k").expect("count"), 16);
    }
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").nested_tree_count, 0);

    // The same at random: sizes from 4 bytes to nearly the key limit.
    let sizes = [4usize, 4, 4, 40, 300, 1_000, 1_990, 1_990];
    let pool: Vec<Vec<u8>> = (0..40u32)
        .map(|i| {
            let mut v = format!("{:03}", (i * 37) % 40).into_bytes();
            v.resize(sizes[(i % 8) as usize], b'.');
            v
        })
        .collect();
    let mut r = 0x4D49_u64;
    for round in 0..200 {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut m = wtx.open_multi_tree("mixed").expect("open");
            for _ in 0..4 {
                r = mix(r);
                let v = &pool[(r % pool.len() as u64) as usize];
                if (r >> 32) % 100 < 55 {
                    m.add(b"k", v).expect("add");
                } else {
                    m.remove(b"k", v).expect("remove");
                }
            }
        }
        wtx.commit()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        env.check().unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
}

/// `MultiTreeMut::keys` lists the keys as the write transaction sees them, both ways.
#[test]
fn write_handle_lists_its_keys() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    let mut wtx = env.begin_write()?;
    let mut tags = wtx.open_multi_tree("tags")?;
    for (k, v) in [("rust", "a"), ("db", "b"), ("rust", "c"), ("zig", "d")] {
        tags.add(k, v)?;
    }
    tags.remove_key("zig")?;
    let keys: Vec<&[u8]> = tags.keys::<&[u8], _>(..)?.collect::<hrafn::Result<_>>()?;
    assert_eq!(keys, [&b"db"[..], b"rust"]);
    let back: Vec<&[u8]> = tags
        .keys(&b"e"[..]..)?
        .rev()
        .collect::<hrafn::Result<_>>()?;
    assert_eq!(back, [&b"rust"[..]]);
    Ok(())
}

/// A change to a multi-value tree that meets a damaged page part way fails its
/// transaction: `remove_key` frees the set's tree page by page, and a commit after its
/// error would leave the freed pages named by the key, for later writes to reuse.
#[test]
fn a_multi_tree_change_that_meets_damage_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = *b"the first value!";
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        let mut m = wtx.open_multi_tree("m").expect("tree");
        m.add(b"k", marker).expect("add");
        for i in 0..5_000u64 {
            m.add(b"k", format!("value {i:010}").as_bytes())
                .expect("add");
        }
        wtx.commit().expect("commit");
    }
    // The set's first leaf: its tree is freed from the right, so the root and the other
    // leaves are freed before the damage is met.
    common::damage_page_holding(dir.path(), &marker);
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    for change in ["remove_key", "add"] {
        let mut wtx = env.begin_write().expect("write");
        let mut m = wtx.open_multi_tree("m").expect("tree");
        let outcome = match change {
            "remove_key" => m.remove_key(b"k").map(|_| ()),
            _ => m.add(b"k", b"a").map(|_| ()),
        };
        assert!(
            matches!(outcome, Err(Error::Corruption { .. })),
            "{change}: {outcome:?}"
        );
        assert!(
            matches!(wtx.commit(), Err(Error::TransactionFailed { .. })),
            "{change}: a failed change cannot commit"
        );
    }
}
