//! Cursors against an in-memory model: random walks of seek, first, last, next, prev and
//! current over B+trees and fixed-size trees (read cursors and write cursors), deletes at
//! the cursor, `delete_range` and `retain`, and tree handles kept next to a transaction.

mod common;

use common::mix;
use hrafn::{Environment, Error, Options};
use std::collections::BTreeMap;
use std::ops::Bound;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u64) -> Vec<u8> {
    format!("{k:05}").into_bytes()
}

/// Where the model's cursor is.
#[derive(Clone, Debug, PartialEq)]
enum At {
    Unpositioned,
    Key(Vec<u8>),
    Deleted(Vec<u8>),
    PastEnd,
    BeforeStart,
}

fn model_step(model: &Model, at: &At, forward: bool) -> Option<Vec<u8>> {
    use Bound::{Excluded, Unbounded};
    match (at, forward) {
        (At::Unpositioned | At::BeforeStart, true) => model.keys().next().cloned(),
        (At::Unpositioned | At::PastEnd, false) => model.keys().next_back().cloned(),
        (At::PastEnd, true) | (At::BeforeStart, false) => None,
        (At::Key(k) | At::Deleted(k), true) => model
            .range::<Vec<u8>, _>((Excluded(k), Unbounded))
            .next()
            .map(|(k, _)| k.clone()),
        (At::Key(k) | At::Deleted(k), false) => model
            .range::<Vec<u8>, _>((Unbounded, Excluded(k)))
            .next_back()
            .map(|(k, _)| k.clone()),
    }
}

fn land(found: Option<Vec<u8>>, off: At) -> At {
    found.map_or(off, At::Key)
}

#[test]
fn btree_cursors_walk_like_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut model = Model::new();
    let mut r = 0xC0_u64;
    let mut next = move || {
        r = mix(r);
        r
    };
    let mut cases = 0;
    for round in 0..6u64 {
        // Fill: sparse keys, values big enough that the tree has several levels.
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("open");
            for _ in 0..2_000 {
                let k = key(next() % 20_000);
                let v = vec![round as u8; 100];
                t.insert(&k, &v).expect("insert");
                model.insert(k, v);
            }
            // A write cursor: a random walk that deletes as it goes.
            let mut cursor = t.cursor();
            let mut at = At::Unpositioned;
            for _ in 0..2_000 {
                cases += 1;
                let (got, want) = match next() % 7 {
                    0 => {
                        let k = key(next() % 20_000);
                        let got = cursor.seek(k.clone()).expect("seek").map(|e| e.0.to_vec());
                        let want = model.range(k..).next().map(|(k, _)| k.clone());
                        at = land(want.clone(), At::PastEnd);
                        (got, want)
                    }
                    1 | 2 => {
                        let got = cursor.next().expect("next").map(|e| e.0.to_vec());
                        let want = model_step(&model, &at, true);
                        if !(matches!(at, At::PastEnd)) {
                            at = land(want.clone(), At::PastEnd);
                        }
                        (got, want)
                    }
                    3 | 4 => {
                        let got = cursor.prev().expect("prev").map(|e| e.0.to_vec());
                        let want = model_step(&model, &at, false);
                        if !(matches!(at, At::BeforeStart)) {
                            at = land(want.clone(), At::BeforeStart);
                        }
                        (got, want)
                    }
                    5 => {
                        let deleted = cursor.delete().expect("delete");
                        let want = match &at {
                            At::Key(k) => {
                                model.remove(k);
                                at = At::Deleted(k.clone());
                                true
                            }
                            _ => false,
                        };
                        assert_eq!(deleted, want);
                        (None, None)
                    }
                    _ => {
                        let got = cursor.current().expect("current").map(|e| e.0.to_vec());
                        let want = match &at {
                            At::Key(k) => Some(k.clone()),
                            _ => None,
                        };
                        (got, want)
                    }
                };
                assert_eq!(got, want, "write cursor at {at:?}");
            }
            assert_eq!(t.len(), model.len() as u64);
        }
        wtx.commit().expect("commit");

        // A read cursor over the committed tree.
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_tree("t").expect("open");
        let mut cursor = t.cursor();
        let mut at = At::Unpositioned;
        for _ in 0..2_000 {
            cases += 1;
            let (got, want) = match next() % 8 {
                0 => {
                    let k = key(next() % 20_000);
                    let got = cursor.seek(&k).expect("seek").map(|e| e.0.to_vec());
                    let want = model.range(k..).next().map(|(k, _)| k.clone());
                    at = land(want.clone(), At::PastEnd);
                    (got, want)
                }
                1 => {
                    let k = key(next() % 20_000);
                    let got = cursor
                        .seek_back(&k)
                        .expect("seek_back")
                        .map(|e| e.0.to_vec());
                    let want = model.range(..=k).next_back().map(|(k, _)| k.clone());
                    at = land(want.clone(), At::BeforeStart);
                    (got, want)
                }
                2 => {
                    let got = cursor.first().expect("first").map(|e| e.0.to_vec());
                    let want = model.keys().next().cloned();
                    at = land(want.clone(), At::PastEnd);
                    (got, want)
                }
                3 => {
                    let got = cursor.last().expect("last").map(|e| e.0.to_vec());
                    let want = model.keys().next_back().cloned();
                    at = land(want.clone(), At::BeforeStart);
                    (got, want)
                }
                4 | 5 => {
                    let got = cursor.next().expect("next").map(|e| e.0.to_vec());
                    let want = model_step(&model, &at, true);
                    if !(matches!(at, At::PastEnd)) {
                        at = land(want.clone(), At::PastEnd);
                    }
                    (got, want)
                }
                6 => {
                    let got = cursor.prev().expect("prev").map(|e| e.0.to_vec());
                    let want = model_step(&model, &at, false);
                    if !(matches!(at, At::BeforeStart)) {
                        at = land(want.clone(), At::BeforeStart);
                    }
                    (got, want)
                }
                _ => {
                    let got = cursor.current().expect("current").map(|e| e.0.to_vec());
                    let want = match &at {
                        At::Key(k) => Some(k.clone()),
                        _ => None,
                    };
                    (got, want)
                }
            };
            assert_eq!(got, want, "read cursor at {at:?}");
            if let Some(k) = &got {
                assert_eq!(
                    cursor.current().expect("current").map(|e| e.1),
                    model.get(k).map(Vec::as_slice)
                );
            }
        }
    }
    assert!(cases >= 10_000, "{cases} cases");
    env.check().expect("check");
}

#[test]
fn delete_range_and_retain_match_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut model = Model::new();
    let mut fixed_model = BTreeMap::new();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("open");
        for k in 0..5_000u64 {
            t.insert(key(k), k.to_le_bytes()).expect("insert");
            model.insert(key(k), k.to_le_bytes().to_vec());
        }
        assert_eq!(
            t.delete_range(key(1_000)..key(2_000))
                .expect("delete_range"),
            1_000
        );
        model.retain(|k, _| !(key(1_000)..key(2_000)).contains(k));
        assert_eq!(t.delete_range(key(4_990)..).expect("delete_range"), 10);
        model.retain(|k, _| *k < key(4_990));
        let removed = t
            .retain(|k, _| k.last().is_some_and(|b| b % 3 != 0))
            .expect("retain");
        let before = model.len();
        model.retain(|k, _| k.last().is_some_and(|b| b % 3 != 0));
        assert_eq!(removed, (before - model.len()) as u64);
        assert_eq!(t.len(), model.len() as u64);
    }
    {
        let mut f = wtx.open_fixed_tree("f", 8).expect("open");
        for k in 0..5_000u64 {
            f.insert(k * 3, &k.to_le_bytes()).expect("insert");
            fixed_model.insert(k * 3, k);
        }
        assert_eq!(f.delete_range(300..=600).expect("delete_range"), 101);
        fixed_model.retain(|k, _| !(300..=600).contains(k));
        let removed = f.retain(|k, _| k % 2 == 0).expect("retain");
        let before = fixed_model.len();
        fixed_model.retain(|k, _| k % 2 == 0);
        assert_eq!(removed, (before - fixed_model.len()) as u64);
        // A fixed-size write cursor deletes too.
        let mut cursor = f.cursor();
        let first = cursor.seek(1_000u64).expect("seek").map(|e| e.0);
        let want = fixed_model.range(1_000..).next().map(|(k, _)| *k);
        assert_eq!(first, want);
        assert!(cursor.delete().expect("delete"));
        fixed_model.remove(&want.expect("an entry"));
        let after = cursor.next().expect("next").map(|e| e.0);
        assert_eq!(after, fixed_model.range(1_000..).next().map(|(k, _)| *k));
        assert_eq!(f.len(), fixed_model.len() as u64);
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("open");
    let all: Model = t
        .iter()
        .expect("iter")
        .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("entry"))
        .collect();
    assert_eq!(all, model);
    let f = rtx.open_fixed_tree("f").expect("open");
    let mut cursor = f.cursor();
    let mut keys = Vec::new();
    let mut entry = cursor.last().expect("last").map(|e| e.0);
    while let Some(k) = entry {
        keys.push(k);
        entry = cursor.prev().expect("prev").map(|e| e.0);
    }
    assert_eq!(keys, fixed_model.keys().rev().copied().collect::<Vec<_>>());
    drop(rtx);
    env.check().expect("check");
}

/// Runs `f` on a thread of its own: an endless loop fails the test instead of hanging it.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("finished within a minute")
}

/// Commits what `build` writes, then changes the one page of the data file that `find`
/// picks with `damage` and reseals it: the page reads as sound, only its content is wrong.
fn damage_one_page(
    dir: &std::path::Path,
    build: impl FnOnce(&mut hrafn::WriteTxn<'_>),
    find: impl Fn(&[u8]) -> bool,
    damage: impl FnOnce(&mut [u8]),
) {
    use hrafn::limits::PAGE_SIZE_BYTES;
    {
        let env = Environment::open(dir, Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        build(&mut wtx);
        wtx.commit().expect("commit");
        env.check().expect("check before the damage");
    }
    let path = dir.join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let found: Vec<usize> = (0..data.len() / PAGE_SIZE_BYTES)
        .filter(|&p| find(&data[p * PAGE_SIZE_BYTES..(p + 1) * PAGE_SIZE_BYTES]))
        .collect();
    assert_eq!(found.len(), 1, "one page to damage");
    let bytes = &mut data[found[0] * PAGE_SIZE_BYTES..(found[0] + 1) * PAGE_SIZE_BYTES];
    damage(bytes);
    hrafn::page::seal(bytes, found[0] as u64);
    std::fs::write(&path, &data).expect("write back");
}

/// Whether `page` is a page of `kind` holding `count` entries.
fn is_page(page: &[u8], kind: hrafn::page::PageKind, count: u16) -> bool {
    use hrafn::page::{OFFSET_ENTRY_COUNT, OFFSET_KIND, get_u16};
    page[OFFSET_KIND] == kind as u8 && get_u16(page, OFFSET_ENTRY_COUNT) == count
}

/// A leaf whose two keys were swapped: the search misses the first key the range yields,
/// so `delete_range` reports the damage instead of trying that key forever, and `retain`
/// counts only what it removed.
#[test]
fn delete_range_over_keys_out_of_order_is_corruption() {
    use hrafn::limits::PAGE_HEADER_SIZE_BYTES as SLOTS;
    use hrafn::page::{PageKind, get_u16, put_u16};
    let dir = tempfile::tempdir().expect("tempdir");
    damage_one_page(
        dir.path(),
        |wtx| {
            let mut t = wtx.open_tree("t").expect("open");
            t.insert(b"a", b"1").expect("insert");
            t.insert(b"b", b"2").expect("insert");
        },
        |page| is_page(page, PageKind::Leaf, 2),
        |page| {
            let (first, second) = (get_u16(page, SLOTS), get_u16(page, SLOTS + 2));
            put_u16(page, SLOTS, second);
            put_u16(page, SLOTS + 2, first);
        },
    );
    let path = dir.path().to_owned();
    let (deleted, retained) = within_a_minute(move || {
        let env = Environment::open(&path, Options::default()).expect("reopen");
        let mut wtx = env.begin_write().expect("write");
        let mut t = wtx.open_tree("t").expect("open");
        let deleted = t.delete_range::<&[u8], _>(..);
        let before = t.len();
        let retained = t.retain(|_, _| false).expect("retain");
        (deleted, (retained, before - t.len()))
    });
    assert!(
        matches!(&deleted, Err(e @ Error::Corruption { .. }) if e.to_string().contains("remove")),
        "{deleted:?}"
    );
    assert_eq!(retained.0, retained.1, "retain counts what it removed");
}

/// The same for a fixed-size tree in pages and one embedded in its parent's entry.
#[test]
fn fixed_delete_range_over_keys_out_of_order_is_corruption() {
    use hrafn::limits::PAGE_HEADER_SIZE_BYTES as ENTRIES;
    use hrafn::page::PageKind;
    let entry = |k: u64| [&k.to_le_bytes()[..], &[k as u8; 8]].concat();
    let both = [entry(1), entry(2)].concat();
    let run = |path: std::path::PathBuf, embedded: bool| {
        within_a_minute(move || {
            let env = Environment::open(&path, Options::default()).expect("reopen");
            let mut wtx = env.begin_write().expect("write");
            let outcome = |f: &mut hrafn::FixedTreeMut<'_, '_>| {
                let deleted = f.delete_range(..);
                let before = f.len();
                let retained = f.retain(|_, _| false).expect("retain");
                (deleted, (retained, before - f.len()))
            };
            if embedded {
                let mut t = wtx.open_tree("t").expect("open");
                outcome(&mut t.open_fixed_tree(b"e", 8).expect("open"))
            } else {
                outcome(&mut wtx.open_fixed_tree("f", 8).expect("open"))
            }
        })
    };
    // In pages: a packed leaf whose two entries were swapped.
    let dir = tempfile::tempdir().expect("tempdir");
    damage_one_page(
        dir.path(),
        |wtx| {
            let mut f = wtx.open_fixed_tree("f", 8).expect("open");
            f.insert(1, &[1; 8]).expect("insert");
            f.insert(2, &[2; 8]).expect("insert");
        },
        |page| is_page(page, PageKind::FixedLeaf, 2),
        |page| {
            assert_eq!(page[ENTRIES..ENTRIES + 32], both);
            page[ENTRIES..ENTRIES + 32].rotate_left(16);
        },
    );
    let (deleted, retained) = run(dir.path().to_owned(), false);
    assert!(
        matches!(&deleted, Err(e @ Error::Corruption { .. }) if e.to_string().contains("remove")),
        "{deleted:?}"
    );
    assert_eq!(retained.0, retained.1, "retain counts what it removed");
    // Embedded: the entries swapped inside the parent's leaf.
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |page: &[u8]| page.windows(both.len()).position(|w| w == both);
    damage_one_page(
        dir.path(),
        |wtx| {
            let mut t = wtx.open_tree("t").expect("open");
            let mut f = t.open_fixed_tree(b"e", 8).expect("open");
            f.insert(1, &[1; 8]).expect("insert");
            f.insert(2, &[2; 8]).expect("insert");
        },
        |page| at(page).is_some(),
        |page| {
            let start = at(page).expect("the entries");
            page[start..start + 32].rotate_left(16);
        },
    );
    let (deleted, retained) = run(dir.path().to_owned(), true);
    assert!(
        matches!(&deleted, Err(e @ Error::Corruption { .. }) if e.to_string().contains("remove")),
        "{deleted:?}"
    );
    assert_eq!(retained.0, retained.1, "retain counts what it removed");
}

#[test]
fn tree_handles_bind_to_any_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("open")
        .insert(b"k", b"1")
        .expect("insert");
    wtx.open_fixed_tree("f", 8)
        .expect("open")
        .insert(7, &[1; 8])
        .expect("insert");
    wtx.commit().expect("commit");
    let old = env.begin_read().expect("read");
    let handle = old.tree_handle("t").expect("handle");
    let fixed = old.tree_handle("f").expect("handle");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("open")
        .insert(b"k", b"2")
        .expect("insert");
    wtx.commit().expect("commit");
    let new = env.begin_read().expect("read");
    // The handle reads each transaction's own snapshot.
    assert_eq!(
        handle.tree(&old).expect("bind").get(b"k").expect("get"),
        Some(&b"1"[..])
    );
    assert_eq!(
        handle.tree(&new).expect("bind").get(b"k").expect("get"),
        Some(&b"2"[..])
    );
    assert_eq!(fixed.fixed_tree(&new).expect("bind").len(), 1);
    assert!(matches!(fixed.tree(&new), Err(Error::WrongTreeKind { .. })));
    assert!(matches!(
        old.tree_handle("none"),
        Err(Error::TreeNotFound { .. })
    ));
    // A handle from another environment binds by name, never by its snapshot.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let other = Environment::open(other_dir.path(), Options::default()).expect("open");
    let other_txn = other.begin_read().expect("read");
    assert!(matches!(
        handle.tree(&other_txn),
        Err(Error::TreeNotFound { .. })
    ));
}

/// Walks `cursor` randomly against the sorted `model` of its keys: seek, first, last, next,
/// prev and current all land where the model says. `pick` makes a key to seek.
fn walk<T: hrafn::Seekable>(
    cursor: &mut hrafn::KeyCursor<T>,
    model: &std::collections::BTreeSet<T::Key>,
    steps: u64,
    seed: u64,
    pick: &dyn Fn(u64) -> T::Key,
) -> u64
where
    T::Key: Ord + Clone + std::fmt::Debug,
{
    use std::collections::BTreeSet;
    #[derive(Clone, Debug)]
    enum Place<K> {
        Unpositioned,
        At(K),
        PastEnd,
        BeforeStart,
    }
    fn after<K: Ord + Clone>(m: &BTreeSet<K>, p: &Place<K>) -> Option<K> {
        match p {
            Place::Unpositioned | Place::BeforeStart => m.iter().next().cloned(),
            Place::At(k) => m
                .range((Bound::Excluded(k), Bound::Unbounded))
                .next()
                .cloned(),
            Place::PastEnd => None,
        }
    }
    fn before<K: Ord + Clone>(m: &BTreeSet<K>, p: &Place<K>) -> Option<K> {
        match p {
            Place::Unpositioned | Place::PastEnd => m.iter().next_back().cloned(),
            Place::At(k) => m
                .range((Bound::Unbounded, Bound::Excluded(k)))
                .next_back()
                .cloned(),
            Place::BeforeStart => None,
        }
    }
    let key = |e: Option<T::Entry<'_>>| e.map(|e| T::key_of(&e));
    let mut place = Place::Unpositioned;
    for step in 0..steps {
        let r = mix(seed ^ step);
        let (got, want, off) = match r % 6 {
            0 => {
                let k = pick(r >> 8);
                let want = model.range(k.clone()..).next().cloned();
                (key(cursor.seek(k).expect("seek")), want, Place::PastEnd)
            }
            1 => (
                key(cursor.first().expect("first")),
                model.iter().next().cloned(),
                Place::PastEnd,
            ),
            2 => (
                key(cursor.last().expect("last")),
                model.iter().next_back().cloned(),
                Place::BeforeStart,
            ),
            3 => {
                let want = after(model, &place);
                (key(cursor.next().expect("next")), want, Place::PastEnd)
            }
            4 => {
                let want = before(model, &place);
                (key(cursor.prev().expect("prev")), want, Place::BeforeStart)
            }
            _ => {
                let want = match &place {
                    Place::At(k) => Some(k.clone()),
                    _ => None,
                };
                assert_eq!(key(cursor.current().expect("current")), want);
                continue;
            }
        };
        assert_eq!(got, want, "step {step} from {place:?}");
        let stays = matches!(
            (&place, r % 6),
            (Place::PastEnd, 3) | (Place::BeforeStart, 4)
        );
        if !stays {
            place = want.map_or(off, Place::At);
        }
    }
    steps
}

#[test]
fn multi_value_and_table_cursors_walk_like_the_model() {
    use hrafn::table::Schema;
    use std::collections::BTreeSet;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let schema = Schema::new(2).primary_key(0);
    let mut pairs: BTreeSet<(Vec<u8>, Vec<u8>)> = BTreeSet::new();
    let mut ids = BTreeSet::new();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for i in 0..3_000u64 {
            // A few keys with large sets (their own trees), many with small ones.
            let k = key(if i % 2 == 0 { i % 5 } else { i % 400 });
            let v = format!("v{:04}", mix(i) % 5_000).into_bytes();
            m.add(&k, &v).expect("add");
            pairs.insert((k, v));
        }
    }
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..3_000u64 {
            let payload = vec![1u8; (mix(i) % 3_000) as usize];
            ids.insert(t.insert(&[&i.to_be_bytes(), &payload]).expect("insert"));
        }
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let m = rtx.open_multi_tree("m").expect("open");
    let pick_pair = |r: u64| {
        (
            key(r % 420),
            format!("v{:04}", (r >> 16) % 5_100).into_bytes(),
        )
    };
    let mut cases = walk(&mut m.cursor(), &pairs, 5_000, 1, &pick_pair);
    let t = rtx.open_table("t", &schema).expect("open");
    let max_id = *ids.iter().next_back().expect("ids") + 8192;
    cases += walk(&mut t.cursor(), &ids, 5_000, 2, &|r| r % max_id);
    drop(rtx);
    // Deleting at the cursor.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        let mut cursor = m.cursor();
        let mut entry = cursor
            .first()
            .expect("first")
            .map(|(k, v)| (k.to_vec(), v.to_vec()));
        while let Some(pair) = entry {
            if pair.1.last().is_some_and(|b| b % 2 == 0) {
                assert!(cursor.delete().expect("delete"));
                pairs.remove(&pair);
            }
            entry = cursor
                .next()
                .expect("next")
                .map(|(k, v)| (k.to_vec(), v.to_vec()));
        }
    }
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        let mut cursor = t.cursor();
        let mut deleted = 0;
        let mut entry = cursor.first().expect("first").map(|(id, _)| id);
        while entry.is_some() {
            if deleted < 100 {
                assert!(cursor.delete().expect("delete"));
                deleted += 1;
            }
            entry = cursor.next().expect("next").map(|(id, _)| id);
        }
        assert_eq!(t.len(), 2_900);
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let m = rtx.open_multi_tree("m").expect("open");
    let mut left = BTreeSet::new();
    let mut cursor = m.cursor();
    let mut entry = cursor.first().expect("first");
    while let Some((k, v)) = entry {
        left.insert((k.to_vec(), v.to_vec()));
        entry = cursor.next().expect("next");
    }
    assert_eq!(left, pairs);
    drop(rtx);
    env.check().expect("check");
    assert!(cases >= 10_000, "{cases} cases");
}
