//! Nested trees against an in-memory model: keys of a tree holding values, B+trees (which
//! nest again), fixed-size trees and multi-value trees; removing a key frees its whole
//! subtree (the integrity check finds any leaked page); kinds never mix; power loss at
//! every storage operation.

mod common;
mod crash_support;

use common::mix;
use hrafn::{Environment, Error, Options, Tree, TreeMut};
use std::collections::{BTreeMap, BTreeSet};

/// What a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    Value(Vec<u8>),
    Tree(Level),
    Fixed(BTreeMap<u64, Vec<u8>>),
    Multi(BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>),
}

type Level = BTreeMap<Vec<u8>, Entry>;

fn key(k: u64) -> Vec<u8> {
    format!("k{k:02}").into_bytes()
}

/// Mostly short values, some past the inline limit (overflow runs inside nested trees).
fn value(r: u64) -> Vec<u8> {
    let len = if r.is_multiple_of(23) {
        5_000
    } else {
        r as usize % 40
    };
    vec![(r >> 8) as u8; len]
}

/// Reads a level back into the model's shape, following nested trees.
fn read_level(tree: &Tree<'_>, shape: &Level) -> Level {
    let mut out = Level::new();
    for item in tree.iter().expect("iter") {
        let (k, v) = item.expect("entry");
        let entry = match shape.get(k) {
            Some(Entry::Tree(inner)) => {
                assert_eq!(v.len(), 24, "a nested tree reads as its stored header");
                Entry::Tree(read_level(&tree.open_tree(k).expect("open nested"), inner))
            }
            Some(Entry::Fixed(_)) => {
                let f = tree.open_fixed_tree(k).expect("open nested fixed");
                Entry::Fixed(
                    f.range(..)
                        .expect("range")
                        .map(|e| e.map(|(k, v)| (k, v.to_vec())).expect("entry"))
                        .collect(),
                )
            }
            Some(Entry::Multi(sets)) => {
                let m = tree.open_multi_tree(k).expect("open nested multi");
                Entry::Multi(
                    sets.keys()
                        .map(|sk| {
                            let values = m
                                .values(sk)
                                .expect("values")
                                .map(|v| v.expect("value").to_vec())
                                .collect();
                            (sk.clone(), values)
                        })
                        .collect(),
                )
            }
            _ => {
                assert!(
                    matches!(tree.open_tree(k), Err(Error::WrongTreeKind { .. })),
                    "a value is not a tree"
                );
                Entry::Value(v.to_vec())
            }
        };
        out.insert(k.to_vec(), entry);
    }
    out
}

fn assert_same(env: &Environment, model: &Level) {
    let rtx = env.begin_read().expect("read");
    let p = rtx.open_tree("p").expect("open");
    assert_eq!(p.len(), model.len() as u64);
    assert_eq!(&read_level(&p, model), model);
    drop(rtx);
    env.check().expect("check");
}

/// Applies `ops` random operations under one nested B+tree level, recursing one level.
fn work(
    t: &mut TreeMut<'_, '_>,
    model: &mut Level,
    next: &mut dyn FnMut() -> u64,
    depth: u32,
) -> u64 {
    let mut cases = 0;
    let ops = 1 + next() % if depth == 0 { 12 } else { 6 };
    for _ in 0..ops {
        cases += 1;
        let k = key(next() % if depth == 0 { 30 } else { 10 });
        match next() % 10 {
            0..=2 => {
                let v = value(next());
                match t.insert(&k, &v) {
                    Ok(replaced) => {
                        let old = model.insert(k, Entry::Value(v));
                        assert!(matches!(old, None | Some(Entry::Value(_))));
                        assert_eq!(replaced, old.is_some());
                    }
                    Err(Error::WrongTreeKind { .. }) => {
                        assert!(!matches!(model.get(&k), None | Some(Entry::Value(_))));
                    }
                    Err(e) => panic!("insert: {e}"),
                }
            }
            3 => {
                let removed = t.remove(&k).expect("remove");
                assert_eq!(removed, model.remove(&k).is_some());
            }
            4..=5 if depth < 2 => match t.open_tree(&k) {
                Ok(mut inner) => {
                    let entry = model.entry(k).or_insert_with(|| Entry::Tree(Level::new()));
                    let Entry::Tree(level) = entry else {
                        panic!("opened a nested B+tree over {entry:?}")
                    };
                    cases += work(&mut inner, level, next, depth + 1);
                    assert_eq!(inner.len(), level.len() as u64);
                }
                Err(Error::WrongTreeKind { .. }) => {
                    assert!(!matches!(model.get(&k), None | Some(Entry::Tree(_))));
                }
                Err(e) => panic!("open nested: {e}"),
            },
            6..=7 => match t.open_fixed_tree(&k, 8) {
                Ok(mut f) => {
                    let entry = model
                        .entry(k)
                        .or_insert_with(|| Entry::Fixed(BTreeMap::new()));
                    let Entry::Fixed(map) = entry else {
                        panic!("opened a nested fixed-size tree over {entry:?}")
                    };
                    for _ in 0..1 + next() % 40 {
                        cases += 1;
                        let fk = next() % 200;
                        if next().is_multiple_of(4) {
                            assert_eq!(f.remove(fk).expect("remove"), map.remove(&fk).is_some());
                        } else {
                            let v = next().to_le_bytes().to_vec();
                            let replaced = f.insert(fk, &v).expect("insert");
                            assert_eq!(replaced, map.insert(fk, v).is_some());
                        }
                    }
                    assert_eq!(f.len(), map.len() as u64);
                }
                Err(Error::WrongTreeKind { .. }) => {
                    assert!(!matches!(model.get(&k), None | Some(Entry::Fixed(_))));
                }
                Err(e) => panic!("open nested fixed: {e}"),
            },
            _ => match t.open_multi_tree(&k) {
                Ok(mut m) => {
                    let entry = model
                        .entry(k)
                        .or_insert_with(|| Entry::Multi(BTreeMap::new()));
                    let Entry::Multi(sets) = entry else {
                        panic!("opened a nested multi-value tree over {entry:?}")
                    };
                    for _ in 0..1 + next() % 60 {
                        cases += 1;
                        let sk = key(next() % 3);
                        let v = (next() % 400).to_be_bytes().to_vec();
                        if next().is_multiple_of(3) {
                            let in_model = sets.get_mut(&sk).is_some_and(|s| s.remove(&v));
                            if sets.get(&sk).is_some_and(BTreeSet::is_empty) {
                                sets.remove(&sk);
                            }
                            assert_eq!(m.remove(&sk, &v).expect("remove"), in_model);
                        } else {
                            let added = m.add(&sk, &v).expect("add");
                            assert_eq!(added, sets.entry(sk).or_default().insert(v));
                        }
                    }
                    assert_eq!(m.key_count(), sets.len() as u64);
                }
                Err(Error::WrongTreeKind { .. }) => {
                    assert!(!matches!(model.get(&k), None | Some(Entry::Multi(_))));
                }
                Err(e) => panic!("open nested multi: {e}"),
            },
        }
    }
    cases
}

#[test]
fn random_operations_match_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options();
    let mut env = Environment::open(dir.path(), options.clone()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("p").expect("create");
    wtx.commit().expect("commit");
    let mut model = Level::new();
    let mut r = 0x4E57_u64;
    let mut next = move || {
        r = mix(r);
        r
    };
    let mut cases = 0;
    for txn in 0..120u64 {
        let mut wtx = env.begin_write().expect("write");
        let mut changed = model.clone();
        {
            let mut p = wtx.open_tree("p").expect("open");
            for _ in 0..8 {
                cases += work(&mut p, &mut changed, &mut next, 0);
            }
            assert_eq!(p.len(), changed.len() as u64);
        }
        if next() % 6 == 0 {
            wtx.abort();
        } else {
            wtx.commit().expect("commit");
            model = changed;
        }
        assert_same(&env, &model);
        if txn % 30 == 29 {
            drop(env);
            env = Environment::open(dir.path(), options.clone()).expect("reopen");
            assert_same(&env, &model);
        }
    }
    assert!(cases >= 10_000, "{cases} cases");
    // Deleting the named tree frees everything nested in it.
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("p").expect("delete"));
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 0);
    assert!(report.used_pages <= 4, "{report:?}");
}

#[test]
fn kinds_and_nesting_depth_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        p.insert(b"value", b"v").expect("insert");
        assert!(matches!(
            p.open_tree(b"value"),
            Err(Error::WrongTreeKind { .. })
        ));
        p.open_fixed_tree(b"fixed", 8).expect("open fixed");
        assert!(matches!(
            p.open_fixed_tree(b"fixed", 16),
            Err(Error::WrongTreeKind { .. })
        ));
        assert!(matches!(
            p.open_tree(b"fixed"),
            Err(Error::WrongTreeKind { .. })
        ));
        assert!(matches!(
            p.insert(b"fixed", b"over a tree"),
            Err(Error::WrongTreeKind { .. })
        ));
        assert!(matches!(
            p.open_tree(vec![0u8; 2001]),
            Err(Error::KeyTooLarge { .. })
        ));
        // Sixteen levels below the named tree are allowed, the seventeenth is not.
        fn descend(t: &mut TreeMut<'_, '_>, level: usize) {
            let mut inner = t.open_tree(b"down").expect("nest");
            inner.insert(b"at", level.to_le_bytes()).expect("insert");
            if level < hrafn::btree::NESTING_DEPTH_MAX {
                descend(&mut inner, level + 1);
            } else {
                assert!(matches!(
                    inner.open_tree(b"down"),
                    Err(Error::LimitExceeded { .. })
                ));
            }
        }
        descend(&mut p, 1);
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 16);
    assert_eq!(
        report.embedded_tree_count, 1,
        "the small fixed-size tree is embedded"
    );
    let rtx = env.begin_read().expect("read");
    let p = rtx.open_tree("p").expect("open");
    let mut t = p.open_tree(b"down").expect("level 1");
    for level in 2..=hrafn::btree::NESTING_DEPTH_MAX {
        t = t.open_tree(b"down").expect("level");
        assert_eq!(t.get(b"at").expect("get"), Some(&level.to_le_bytes()[..]));
    }
    assert!(matches!(
        p.open_tree(b"absent"),
        Err(Error::TreeNotFound { .. })
    ));
    assert!(matches!(
        p.open_multi_tree(b"fixed"),
        Err(Error::WrongTreeKind { .. })
    ));
    drop(rtx);
    // Removing the top key frees all seventeen levels.
    remove_top(&env);
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 0);
    assert_eq!(
        report.embedded_tree_count, 1,
        "the small fixed-size tree stays"
    );
}

/// Removes the top of the nesting (key `down` of tree `p`) and commits.
fn remove_top(env: &Environment) {
    let mut wtx = env.begin_write().expect("write");
    assert!(
        wtx.open_tree("p")
            .expect("open")
            .remove(b"down")
            .expect("remove")
    );
    wtx.commit().expect("commit");
}

/// A multi-value tree at the deepest nesting level holds a set grown into its own tree.
/// That tree holds no nested trees, so it is no level of its own: the file checks, and
/// removing the top key or deleting the named tree frees everything.
#[test]
fn a_set_tree_at_the_deepest_level_checks_and_frees() {
    fn down(t: &mut TreeMut<'_, '_>, level: usize) {
        if level < hrafn::btree::NESTING_DEPTH_MAX {
            down(&mut t.open_tree(b"down").expect("nest"), level + 1);
        } else {
            let mut m = t.open_multi_tree(b"m").expect("multi at the deepest level");
            // 200 values of 4 bytes: 1,200 bytes, past an embedded set.
            for i in 0..200u32 {
                m.add(b"k", i.to_be_bytes()).expect("add");
            }
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("other").expect("open");
    down(&mut wtx.open_tree("p").expect("open"), 1);
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 17, "16 levels and the set's tree");
    // Removing the top key frees every level.
    remove_top(&env);
    assert_eq!(env.check().expect("check").nested_tree_count, 0);
    // So does deleting the named tree.
    let mut wtx = env.begin_write().expect("write");
    down(&mut wtx.open_tree("p").expect("open"), 1);
    wtx.commit().expect("commit");
    env.check().expect("check");
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("p").expect("delete"));
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!((report.tree_count, report.nested_tree_count), (1, 0));
}

/// A remove that fails after freeing part of a nested tree (here a damaged page in its
/// second subtree) leaves a transaction that cannot commit: committing it would free
/// pages the tree still uses.
#[test]
fn a_remove_that_fails_half_way_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = b"the second subtree's value";
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut p = wtx.open_tree("p").expect("open");
            let mut a = p.open_tree(b"a").expect("nest");
            a.open_tree(b"x")
                .expect("nest")
                .insert(b"k", b"v")
                .expect("insert");
            a.open_tree(b"y")
                .expect("nest")
                .insert(b"k", marker)
                .expect("insert");
        }
        wtx.commit().expect("commit");
        env.check().expect("check");
    }
    // No reseal: the page fails its checksum.
    common::damage_page_holding(dir.path(), marker);

    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    let removed = wtx.open_tree("p").expect("open").remove(b"a");
    assert!(
        matches!(removed, Err(Error::Corruption { .. })),
        "{removed:?}"
    );
    assert!(wtx.commit().is_err(), "the half-freed tree cannot commit");
}

/// Power loss at every storage operation of a workload of per-series nested fixed-size
/// trees (the time-series shape): every damage variant recovers to a committed state, and
/// the check finds every nested tree sound and no page leaked.
#[test]
fn power_loss_recovers_a_committed_state() {
    use hrafn::storage::sim::SimStorage;

    type Model = BTreeMap<u64, BTreeMap<u64, u64>>;
    const COMMITS: u64 = 20;
    let options = crash_support::deterministic_options();
    let run = |sim: &SimStorage| {
        crash_support::run_commits(sim, &options, COMMITS, 6, &|wtx, txn, model: &mut Model| {
            {
                let mut series = wtx.open_tree("series")?;
                for s in 0..6u64 {
                    if mix(txn ^ s).is_multiple_of(9) {
                        series.remove(s.to_be_bytes())?;
                        model.remove(&s);
                        continue;
                    }
                    let mut samples = series.open_fixed_tree(s.to_be_bytes(), 8)?;
                    let map = model.entry(s).or_default();
                    for i in 0..40 {
                        let t = txn * 40 + i;
                        samples.insert(t, &(t ^ s).to_le_bytes())?;
                        map.insert(t, t ^ s);
                    }
                }
            }
            Ok(())
        })
    };
    let (states, ops) =
        crash_support::power_loss_at_every_operation(0x4E57, &options, &run, &|env| {
            let rtx = env.begin_read().expect("read");
            match rtx.open_tree("series") {
                Ok(series) => series
                    .iter()
                    .expect("iter")
                    .map(|e| {
                        let (k, _) = e.expect("entry");
                        let id = u64::from_be_bytes(k.try_into().expect("8-byte key"));
                        let samples = series.open_fixed_tree(k).expect("nested");
                        let map = samples
                            .range(..)
                            .expect("range")
                            .map(|e| {
                                let (t, v) = e.expect("sample");
                                (t, u64::from_le_bytes(v.try_into().expect("8 bytes")))
                            })
                            .collect();
                        (id, map)
                    })
                    .collect(),
                Err(Error::TreeNotFound { .. }) => Model::new(),
                Err(e) => panic!("{e}"),
            }
        });
    common::summary(&format!(
        "nested tree power loss: {states} crash states over {ops} operations"
    ));
}

#[test]
fn a_small_fixed_tree_lives_in_its_entry_and_moves_out_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let pages = |env: &Environment| env.check().expect("check");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("p").expect("open");
    wtx.commit().expect("commit");
    let base = pages(&env).used_pages;
    // 16-byte entries: 64 embed in 1 KiB.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(b"series", 8).expect("open");
        for t in 0..64u64 {
            f.insert(t * 10, &t.to_le_bytes()).expect("insert");
        }
        assert_eq!(f.len(), 64);
    }
    wtx.commit().expect("commit");
    let report = pages(&env);
    assert_eq!(
        (report.embedded_tree_count, report.nested_tree_count),
        (1, 0)
    );
    assert_eq!(report.used_pages, base, "an embedded tree takes no page");
    let check_reads = |env: &Environment, n: u64| {
        let rtx = env.begin_read().expect("read");
        let p = rtx.open_tree("p").expect("open");
        let f = p.open_fixed_tree(b"series").expect("open");
        assert_eq!(f.len(), n);
        assert_eq!(f.get(30).expect("get"), Some(&3u64.to_le_bytes()[..]));
        assert_eq!(f.get(31).expect("get"), None);
        let up: Vec<u64> = f
            .range(15..=55)
            .expect("range")
            .map(|e| e.expect("e").0)
            .collect();
        assert_eq!(up, [20, 30, 40, 50]);
        let down: Vec<u64> = f
            .range_rev(15..55)
            .expect("range")
            .map(|e| e.expect("e").0)
            .collect();
        assert_eq!(down, [50, 40, 30, 20]);
        assert_eq!(f.first().expect("first").map(|e| e.0), Some(0));
        assert_eq!(f.last().expect("last").map(|e| e.0), Some((n - 1) * 10));
        let mut cursor = f.cursor();
        assert_eq!(cursor.seek(41u64).expect("seek").map(|e| e.0), Some(50));
        assert_eq!(cursor.prev().expect("prev").map(|e| e.0), Some(40));
    };
    check_reads(&env, 64);
    // The 65th entry moves it into a page of its own.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(b"series", 8).expect("open");
        for t in 64..1_000u64 {
            f.insert(t * 10, &t.to_le_bytes()).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let report = pages(&env);
    assert_eq!(
        (report.embedded_tree_count, report.nested_tree_count),
        (0, 1)
    );
    assert!(report.used_pages > base + 1);
    check_reads(&env, 1_000);
    // Back to 32 entries (512 bytes, one leaf): it embeds again and its pages are free.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(b"series", 8).expect("open");
        assert_eq!(f.delete_range(32 * 10..).expect("delete_range"), 968);
        assert_eq!(f.len(), 32);
        assert_eq!(f.get(310).expect("get"), Some(&31u64.to_le_bytes()[..]));
    }
    wtx.commit().expect("commit");
    let report = pages(&env);
    assert_eq!(
        (report.embedded_tree_count, report.nested_tree_count),
        (1, 0)
    );
    check_reads(&env, 32);
    // Removing the key drops it whole.
    let mut wtx = env.begin_write().expect("write");
    assert!(
        wtx.open_tree("p")
            .expect("open")
            .remove(b"series")
            .expect("remove")
    );
    wtx.commit().expect("commit");
    assert_eq!(pages(&env).embedded_tree_count, 0);
}
