//! Edge cases of multi-value trees, nested and embedded trees and cursors: sets and fixed
//! trees at the embedded limit, one over and one under, crossing it back and forth in one
//! transaction (then aborted, or committed and reopened), the largest keys and values and
//! one byte more, empty keys and values, pages freed with a large nested tree, cursors at
//! both ends and after deletes, and typed codecs over bytes of the wrong shape.

mod common;

use common::mix;
use hrafn::multi::{EMBEDDED_SET_MAX_BYTES, MULTI_VALUE_SIZE_MAX_BYTES};
use hrafn::{Environment, Error, Options};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

type Sets = BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>;

fn open(dir: &std::path::Path) -> Environment {
    Environment::open(dir, Options::default()).expect("open")
}

/// Every key's values in the named multi-value tree, read forwards and backwards.
fn read_sets(env: &Environment, name: &str) -> Sets {
    let rtx = env.begin_read().expect("read");
    let m = rtx.open_multi_tree(name).expect("open");
    let mut out = Sets::new();
    for key in m.keys::<&[u8], _>(..).expect("keys") {
        let key = key.expect("key").to_vec();
        let up: Vec<Vec<u8>> = m
            .values(&key)
            .expect("values")
            .map(|v| v.expect("value").to_vec())
            .collect();
        let mut down: Vec<Vec<u8>> = m
            .values(&key)
            .expect("values")
            .rev()
            .map(|v| v.expect("value").to_vec())
            .collect();
        down.reverse();
        assert_eq!(up, down, "both directions of {key:?}");
        assert_eq!(m.count(&key).expect("count"), up.len() as u64);
        out.insert(key, up.into_iter().collect());
    }
    assert_eq!(m.key_count(), out.len() as u64);
    out
}

/// The pages in use once the free-space map exists (it is written with the first commit
/// that frees a page), so later counts compare like with like.
fn baseline(env: &Environment) -> u64 {
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("warm-up").expect("open");
        for i in 0..200u32 {
            t.insert(i.to_be_bytes(), [0u8; 100]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("warm-up").expect("delete_tree"));
    wtx.commit().expect("commit");
    env.check().expect("check").used_pages
}

/// A value of `len` bytes, distinct for each `tag`.
fn sized(tag: u8, len: usize) -> Vec<u8> {
    let mut v = vec![tag; len];
    if let Some(first) = v.first_mut() {
        *first = tag;
    }
    v
}

/// A set of exactly the embedded limit (8 values of 126 bytes) sits in its entry; one more
/// value, even an empty one, moves it into a tree; removing back to just over half the
/// limit keeps the tree, and at half it embeds again with every page returned.
#[test]
fn a_set_at_the_limit_one_over_and_back_under_half() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    wtx.open_multi_tree("m").expect("open");
    wtx.commit().expect("commit");
    let base = baseline(&env);

    let values: Vec<Vec<u8>> = (0..8u8).map(|t| sized(b'a' + t, 126)).collect();
    assert_eq!(values.len() * (2 + 126), EMBEDDED_SET_MAX_BYTES);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for v in &values {
            assert!(m.add(b"k", v).expect("add"));
        }
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 0, "exactly at the limit embeds");
    assert_eq!(report.used_pages, base);

    let mut wtx = env.begin_write().expect("write");
    assert!(
        wtx.open_multi_tree("m")
            .expect("open")
            .add(b"k", b"")
            .expect("add")
    );
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 1, "two bytes over makes a tree");
    let mut want: BTreeSet<Vec<u8>> = values.iter().cloned().collect();
    want.insert(Vec::new());
    assert_eq!(read_sets(&env, "m")[&b"k".to_vec()], want);

    // 1,026 then 1,024 then 640 bytes: still a tree (above half the limit).
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        assert!(m.remove(b"k", b"").expect("remove"));
        assert!(m.remove(b"k", &values[0]).expect("remove"));
        assert!(m.remove(b"k", &values[1]).expect("remove"));
        assert!(m.remove(b"k", &values[2]).expect("remove"));
        assert_eq!(m.count(b"k").expect("count"), 5);
    }
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").nested_tree_count, 1);
    // 512 bytes: half the limit, embedded again.
    let mut wtx = env.begin_write().expect("write");
    assert!(
        wtx.open_multi_tree("m")
            .expect("open")
            .remove(b"k", &values[3])
            .expect("remove")
    );
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.nested_tree_count, 0, "half the limit embeds");
    assert_eq!(report.used_pages, base, "the set tree's pages are free");
    assert_eq!(
        read_sets(&env, "m")[&b"k".to_vec()],
        values[4..].iter().cloned().collect::<BTreeSet<_>>()
    );
}

/// Applies one random change to `key` of `m` and the model, with value sizes chosen so
/// sets cross the embedded limit often.
fn churn(m: &mut hrafn::MultiTreeMut<'_, '_>, model: &mut Sets, r: u64) {
    let key = format!("k{}", r % 3).into_bytes();
    let len = [0, 1, 40, 126, 300, 1_023][(r >> 8) as usize % 6];
    let value = sized((r >> 16) as u8 % 24, len);
    let set = model.entry(key.clone()).or_default();
    if (r >> 24).is_multiple_of(3) && !set.is_empty() {
        // Remove an existing value so sets shrink as often as they grow.
        let victim = set
            .iter()
            .nth((r >> 32) as usize % set.len())
            .cloned()
            .expect("in set");
        assert!(m.remove(&key, &victim).expect("remove"));
        set.remove(&victim);
    } else {
        assert_eq!(m.add(&key, &value).expect("add"), set.insert(value));
    }
    if set.is_empty() {
        model.remove(&key);
    }
}

/// Sets crossing the embedded limit back and forth many times in one transaction: an
/// abort leaves the committed state and page count as they were; a commit is what the
/// model says, also after a reopen, and checks clean.
#[test]
fn crossing_the_limit_repeatedly_then_abort_then_commit_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Sets::new();
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for r in 0..200 {
            churn(&mut m, &mut model, mix(r));
        }
    }
    wtx.commit().expect("commit");
    let committed = env.check().expect("check");
    assert_eq!(read_sets(&env, "m"), model);

    let mut scratch = model.clone();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for r in 1_000..3_000 {
            churn(&mut m, &mut scratch, mix(r));
            // Reads in the transaction see every change.
            let key = format!("k{}", r % 3).into_bytes();
            let count = scratch.get(&key).map_or(0, |s| s.len() as u64);
            assert_eq!(m.count(&key).expect("count"), count, "step {r}");
        }
    }
    wtx.abort();
    assert_eq!(read_sets(&env, "m"), model, "an abort changes nothing");
    assert_eq!(env.check().expect("check").used_pages, committed.used_pages);

    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for r in 1_000..3_000 {
            churn(&mut m, &mut model, mix(r));
        }
    }
    wtx.commit().expect("commit");
    assert_eq!(read_sets(&env, "m"), model);
    env.check().expect("check");
    drop(env);
    let env = open(dir.path());
    assert_eq!(read_sets(&env, "m"), model, "after a reopen");
    env.check().expect("check");
}

/// The longest key holding a set at the embedded limit: such entries fill leaves two or
/// three at a time and split; one byte over the key or value limit is a typed error that
/// changes nothing. Empty keys and values are ordinary, embedded and in a tree.
#[test]
fn longest_keys_and_values_and_empty_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut model = Sets::new();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for k in 0..12u8 {
            let key = vec![k; hrafn::limits::KEY_SIZE_MAX_BYTES];
            for t in 0..8u8 {
                let value = sized(t, 126);
                assert!(m.add(&key, &value).expect("add"));
                model.entry(key.clone()).or_default().insert(value);
            }
        }
        let longest_key = vec![3u8; hrafn::limits::KEY_SIZE_MAX_BYTES];
        let before = (m.key_count(), m.count(&longest_key).expect("count"));
        assert!(matches!(
            m.add(&longest_key, vec![1u8; MULTI_VALUE_SIZE_MAX_BYTES + 1]),
            Err(Error::ValueTooLarge { .. })
        ));
        assert!(matches!(
            m.add(vec![3u8; hrafn::limits::KEY_SIZE_MAX_BYTES + 1], b"v"),
            Err(Error::KeyTooLarge { .. })
        ));
        assert_eq!(
            m.remove_key(vec![3u8; hrafn::limits::KEY_SIZE_MAX_BYTES + 1])
                .expect("remove_key"),
            0
        );
        assert_eq!(
            (m.key_count(), m.count(&longest_key).expect("count")),
            before
        );
        // The longest value moves a full embedded set into a tree.
        let longest = vec![0xEE; MULTI_VALUE_SIZE_MAX_BYTES];
        assert!(m.add(&longest_key, &longest).expect("add"));
        model.get_mut(&longest_key).expect("key").insert(longest);
        // Empty key, empty value.
        assert!(m.add(b"", b"").expect("add"));
        assert!(!m.add(b"", b"").expect("add again"));
        assert!(m.contains(b"", b"").expect("contains"));
        model.entry(Vec::new()).or_default().insert(Vec::new());
    }
    wtx.commit().expect("commit");
    assert_eq!(read_sets(&env, "m"), model);
    assert_eq!(env.check().expect("check").nested_tree_count, 1);

    // The empty key's set grows into a tree keeping its empty value, and shrinks back.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for i in 0..400u32 {
            m.add(b"", i.to_be_bytes()).expect("add");
        }
        assert!(m.contains(b"", b"").expect("contains"));
        assert_eq!(
            m.values(b"")
                .expect("values")
                .next()
                .transpose()
                .expect("value"),
            Some(&b""[..])
        );
        for i in 0..400u32 {
            assert!(m.remove(b"", i.to_be_bytes()).expect("remove"));
        }
        assert_eq!(m.count(b"").expect("count"), 1);
    }
    wtx.commit().expect("commit");
    assert_eq!(read_sets(&env, "m"), model);
    assert_eq!(env.check().expect("check").nested_tree_count, 1);

    // Removing the last value of the empty key removes the key.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        assert!(m.remove(b"", b"").expect("remove"));
        assert!(!m.remove(b"", b"").expect("remove again"));
        model.remove(&Vec::new());
    }
    wtx.commit().expect("commit");
    assert_eq!(read_sets(&env, "m"), model);
}

/// Removing a key whose nested trees are large (a multi-value tree with sets in trees of
/// their own, a fixed-size tree in pages, a B+tree with nested trees) frees every page:
/// by `remove`, by `delete_range`, by `retain` and by a cursor's `delete`.
#[test]
fn removing_a_key_with_a_large_nested_tree_frees_every_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("p").expect("open");
    wtx.commit().expect("commit");
    let base = baseline(&env);

    let fill = |env: &Environment| {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut p = wtx.open_tree("p").expect("open");
            for k in 0..4u8 {
                let key = [b'n', k];
                {
                    let mut m = p.open_multi_tree(key).expect("open");
                    for i in 0..3_000u64 {
                        m.add((i % 3).to_be_bytes(), mix(i).to_be_bytes())
                            .expect("add");
                    }
                }
                {
                    let mut f = p.open_fixed_tree([b'f', k], 24).expect("open");
                    for i in 0..2_000u64 {
                        f.insert(i, &[k; 24]).expect("insert");
                    }
                }
                let mut t = p.open_tree([b't', k]).expect("open");
                t.insert(b"big", vec![k; 20_000]).expect("insert");
                let mut inner = t.open_fixed_tree(b"inner", 8).expect("open");
                for i in 0..1_000u64 {
                    inner.insert(i, &i.to_le_bytes()).expect("insert");
                }
            }
        }
        wtx.commit().expect("commit");
        let report = env.check().expect("check");
        assert_eq!(report.nested_tree_count, 4 * (1 + 3 + 1 + 1 + 1));
        assert!(report.used_pages > base + 100, "{report:?}");
    };

    fill(&env);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        for k in 0..4u8 {
            for tag in [b'n', b'f', b't'] {
                assert!(p.remove([tag, k]).expect("remove"));
            }
        }
        assert!(p.is_empty());
    }
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").used_pages, base, "by remove");

    fill(&env);
    let mut wtx = env.begin_write().expect("write");
    assert_eq!(
        wtx.open_tree("p")
            .expect("open")
            .delete_range::<&[u8], _>(..)
            .expect("delete_range"),
        12
    );
    wtx.commit().expect("commit");
    assert_eq!(
        env.check().expect("check").used_pages,
        base,
        "by delete_range"
    );

    fill(&env);
    let mut wtx = env.begin_write().expect("write");
    assert_eq!(
        wtx.open_tree("p")
            .expect("open")
            .retain(|_, _| false)
            .expect("retain"),
        12
    );
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").used_pages, base, "by retain");

    fill(&env);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let mut cursor = p.cursor();
        let mut removed = 0;
        let mut at = cursor.last().expect("last").is_some();
        while at {
            assert!(cursor.delete().expect("delete"));
            removed += 1;
            at = cursor.prev().expect("prev").is_some();
        }
        assert_eq!(removed, 12);
    }
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").used_pages, base, "by cursor");
}

/// A key's values read from both ends at once meet in the middle, each value once, for
/// an embedded set, a set in a tree of several leaves, and after deletes that emptied
/// whole leaves of it.
#[test]
fn values_from_both_ends_meet_in_the_middle() {
    fn meet(values: hrafn::iter::ValuesMut<'_, '_>, want: &[Vec<u8>], seed: u64) {
        let mut values = values;
        let (mut front, mut back) = (Vec::new(), Vec::new());
        for step in 0.. {
            let item = if mix(seed ^ step).is_multiple_of(2) {
                values
                    .next()
                    .map(|v| front.push(v.expect("value").to_vec()))
            } else {
                values
                    .next_back()
                    .map(|v| back.push(v.expect("value").to_vec()))
            };
            if item.is_none() {
                break;
            }
        }
        assert!(values.next().is_none() && values.next_back().is_none());
        back.reverse();
        front.extend(back);
        assert_eq!(front, want, "seed {seed}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        let mut small: Vec<Vec<u8>> = Vec::new();
        let mut large: Vec<Vec<u8>> = Vec::new();
        for i in 0..5u32 {
            m.add(b"small", i.to_be_bytes()).expect("add");
            small.push(i.to_be_bytes().to_vec());
        }
        for i in 0..6_000u32 {
            // Long values: a few dozen per leaf.
            let v = [&i.to_be_bytes()[..], &[7u8; 150]].concat();
            m.add(b"large", &v).expect("add");
            large.push(v);
        }
        for seed in 0..4 {
            meet(m.values(b"small").expect("values"), &small, seed);
            meet(m.values(b"large").expect("values"), &large, seed);
        }
        // Holes of whole leaves, and the ends removed.
        let mut kept = Vec::new();
        for (i, v) in large.iter().enumerate() {
            if (500..2_500).contains(&i) || !(10..5_990).contains(&i) || i % 7 == 0 {
                assert!(m.remove(b"large", v).expect("remove"));
            } else {
                kept.push(v.clone());
            }
        }
        for seed in 4..8 {
            meet(m.values(b"large").expect("values"), &kept, seed);
        }
        meet(m.values(b"absent").expect("values"), &[], 9);
    }
    wtx.commit().expect("commit");
    env.check().expect("check");
}

/// A multi-value cursor at both ends and past them, and deleting every pair from the back
/// of a key whose set shrinks from a tree to an embedded set to nothing.
#[test]
fn multi_cursor_ends_and_deletes_across_the_boundary() {
    type Pair = (Vec<u8>, Vec<u8>);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    wtx.open_multi_tree("m").expect("open");
    wtx.commit().expect("commit");
    let base = baseline(&env);
    let pair = |e: Option<(&[u8], &[u8])>| e.map(|(k, v)| (k.to_vec(), v.to_vec()));
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        // An empty tree: every move finds nothing.
        let mut cursor = m.cursor();
        assert_eq!(pair(cursor.first().expect("first")), None);
        assert_eq!(pair(cursor.prev().expect("prev")), None);
        assert_eq!(pair(cursor.next().expect("next")), None);
        assert!(!cursor.delete().expect("delete"));
    }
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for i in 0..2_000u32 {
            m.add(b"b", i.to_be_bytes()).expect("add");
        }
        m.add(b"a", b"x").expect("add");
        m.add(b"c", b"y").expect("add");
        let mut cursor = m.cursor();
        let last: Pair = (b"c".to_vec(), b"y".to_vec());
        let first: Pair = (b"a".to_vec(), b"x".to_vec());
        assert_eq!(
            pair(cursor.seek((b"c".to_vec(), b"z".to_vec())).expect("seek")),
            None
        );
        assert_eq!(pair(cursor.prev().expect("prev")), Some(last.clone()));
        assert_eq!(pair(cursor.next().expect("next")), None);
        assert_eq!(pair(cursor.next().expect("next")), None);
        assert_eq!(pair(cursor.prev().expect("prev")), Some(last.clone()));
        assert_eq!(pair(cursor.first().expect("first")), Some(first.clone()));
        assert_eq!(pair(cursor.prev().expect("prev")), None);
        assert_eq!(pair(cursor.prev().expect("prev")), None);
        assert_eq!(pair(cursor.next().expect("next")), Some(first));
        assert_eq!(
            pair(cursor.next().expect("next")),
            Some((b"b".to_vec(), 0u32.to_be_bytes().to_vec()))
        );
        // A seek between keys lands on the next key's first value.
        assert_eq!(
            pair(cursor.seek((b"bb".to_vec(), Vec::new())).expect("seek")),
            Some(last)
        );
        // Delete the whole of "b" from its last value down, through the set's move from
        // a tree to its entry; the cursor always lands on the value below.
        assert_eq!(
            pair(cursor.seek((b"b".to_vec(), vec![0xFF])).expect("seek")),
            Some((b"c".to_vec(), b"y".to_vec()))
        );
        let mut want = 2_000u32;
        while let Some((k, v)) = pair(cursor.prev().expect("prev")) {
            if k != b"b" {
                assert_eq!((k, v), (b"a".to_vec(), b"x".to_vec()));
                break;
            }
            want -= 1;
            assert_eq!(v, want.to_be_bytes());
            assert!(cursor.delete().expect("delete"));
            assert_eq!(pair(cursor.current().expect("current")), None);
        }
        assert_eq!(want, 0);
        assert_eq!(m.count(b"b").expect("count"), 0);
        assert_eq!(m.key_count(), 2);
        // Delete the rest moving forwards.
        let mut cursor = m.cursor();
        let mut n = 0;
        let mut at = cursor.first().expect("first").is_some();
        while at {
            assert!(cursor.delete().expect("delete"));
            n += 1;
            at = cursor.next().expect("next").is_some();
        }
        assert_eq!(n, 2);
        assert!(m.is_empty());
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!((report.used_pages, report.nested_tree_count), (base, 0));
}

/// A nested fixed-size tree at the embedded limit and one over, with the largest value
/// size, with empty values, and crossing the limit many times in one transaction that is
/// aborted, then committed and reopened.
#[test]
fn embedded_fixed_tree_at_the_limit_and_crossing_it() {
    type Model = BTreeMap<u64, Vec<u8>>;
    fn read_fixed(env: &Environment, key: &[u8]) -> Model {
        let rtx = env.begin_read().expect("read");
        let p = rtx.open_tree("p").expect("open");
        let f = p.open_fixed_tree(key).expect("open");
        let up: Model = f
            .range(..)
            .expect("range")
            .map(|e| e.map(|(k, v)| (k, v.to_vec())).expect("entry"))
            .collect();
        let down: Vec<u64> = f
            .range_rev(..)
            .expect("range")
            .map(|e| e.expect("entry").0)
            .collect();
        assert!(down.iter().rev().eq(up.keys()));
        assert_eq!(f.len(), up.len() as u64);
        up
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("p").expect("open");
    wtx.commit().expect("commit");
    let base = baseline(&env);

    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        assert!(matches!(
            p.open_fixed_tree(b"too-wide", hrafn::fixed::FIXED_VALUE_SIZE_MAX_BYTES + 1),
            Err(Error::ValueTooLarge { .. })
        ));
        // The widest values: no entry fits the embedded limit, so the first goes to a page,
        // and removing it embeds the empty tree again.
        let widest = hrafn::fixed::FIXED_VALUE_SIZE_MAX_BYTES;
        let mut f = p.open_fixed_tree(b"wide", widest).expect("open");
        f.insert(u64::MAX, &vec![9u8; widest]).expect("insert");
        assert!(matches!(
            f.insert(1, &vec![9u8; widest + 1]),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(f.len(), 1);
        assert_eq!(f.last().expect("last").map(|e| e.0), Some(u64::MAX));
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(
        (report.nested_tree_count, report.embedded_tree_count),
        (1, 0)
    );
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let widest = hrafn::fixed::FIXED_VALUE_SIZE_MAX_BYTES;
        let mut f = p.open_fixed_tree(b"wide", widest).expect("open");
        assert!(f.remove(u64::MAX).expect("remove"));
        assert!(f.is_empty());
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(
        (report.nested_tree_count, report.embedded_tree_count),
        (0, 1)
    );
    assert_eq!(report.used_pages, base);

    // Empty values: 8-byte entries, 128 embed exactly, the 129th spills.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(b"empty", 0).expect("open");
        for k in 0..128u64 {
            f.insert(k * 3, &[]).expect("insert");
        }
        assert!(f.insert(0, &[]).expect("replace"));
    }
    wtx.commit().expect("commit");
    assert_eq!(env.check().expect("check").embedded_tree_count, 2);
    assert_eq!(env.check().expect("check").used_pages, base);
    let mut wtx = env.begin_write().expect("write");
    p_insert(&mut wtx, b"empty", 0, 1, &[]);
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(
        (report.nested_tree_count, report.embedded_tree_count),
        (1, 1)
    );
    assert_eq!(read_fixed(&env, b"empty").len(), 129);

    // Crossing back and forth in one transaction, aborted then committed.
    let committed = read_fixed(&env, b"empty");
    let pages = env.check().expect("check").used_pages;
    let run = |wtx: &mut hrafn::WriteTxn<'_>, model: &mut Model| {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(b"empty", 0).expect("open");
        for r in 0..3_000u64 {
            let x = mix(r);
            // Phases of mostly inserts then mostly removes: the tree passes the spill point
            // (128 entries) and the embed point (64) again and again.
            let key = x % 200;
            let growing = (r / 150) % 2 == 0;
            if (x >> 40).is_multiple_of(4) != growing {
                assert_eq!(
                    f.insert(key, &[]).expect("insert"),
                    model.insert(key, Vec::new()).is_some()
                );
            } else {
                assert_eq!(f.remove(key).expect("remove"), model.remove(&key).is_some());
            }
            assert_eq!(f.len(), model.len() as u64);
            if r % 97 == 0 {
                let got: Vec<u64> = f
                    .range(..)
                    .expect("range")
                    .map(|e| e.expect("e").0)
                    .collect();
                assert!(got.iter().eq(model.keys()), "step {r}");
            }
        }
    };
    let mut scratch = committed.clone();
    let mut wtx = env.begin_write().expect("write");
    run(&mut wtx, &mut scratch);
    drop(wtx);
    assert_eq!(read_fixed(&env, b"empty"), committed);
    assert_eq!(env.check().expect("check").used_pages, pages);
    let mut model = committed;
    let mut wtx = env.begin_write().expect("write");
    run(&mut wtx, &mut model);
    wtx.commit().expect("commit");
    assert_eq!(read_fixed(&env, b"empty"), model);
    env.check().expect("check");
    drop(env);
    let env = open(dir.path());
    assert_eq!(read_fixed(&env, b"empty"), model);
    env.check().expect("check");
}

fn p_insert(wtx: &mut hrafn::WriteTxn<'_>, key: &[u8], value_size: usize, k: u64, v: &[u8]) {
    let mut p = wtx.open_tree("p").expect("open");
    let mut f = p.open_fixed_tree(key, value_size).expect("open");
    f.insert(k, v).expect("insert");
}

/// Fixed-size write cursors at the ends of the key space (0 and `u64::MAX`), and
/// `delete_range` / `retain` with empty and full ranges, embedded and in pages.
#[test]
fn fixed_cursor_ends_and_empty_and_full_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    for (name, n) in [(&b"small"[..], 10u64), (&b"large"[..], 3_000)] {
        let mut p = wtx.open_tree("p").expect("open");
        let mut f = p.open_fixed_tree(name, 8).expect("open");
        let keys: Vec<u64> = (0..n - 2)
            .map(|i| i * 1_000 + 1)
            .chain([0, u64::MAX])
            .collect();
        for k in &keys {
            f.insert(*k, &k.to_le_bytes()).expect("insert");
        }
        let mut cursor = f.cursor();
        assert_eq!(cursor.last().expect("last").map(|e| e.0), Some(u64::MAX));
        assert_eq!(cursor.next().expect("next").map(|e| e.0), None);
        assert_eq!(cursor.prev().expect("prev").map(|e| e.0), Some(u64::MAX));
        assert_eq!(
            cursor.seek(u64::MAX).expect("seek").map(|e| e.0),
            Some(u64::MAX)
        );
        assert!(cursor.delete().expect("delete"));
        assert_eq!(cursor.next().expect("next").map(|e| e.0), None);
        assert_eq!(cursor.first().expect("first").map(|e| e.0), Some(0));
        assert!(cursor.delete().expect("delete"));
        assert_eq!(cursor.prev().expect("prev").map(|e| e.0), None);
        assert_eq!(cursor.next().expect("next").map(|e| e.0), Some(1));
        // Empty ranges remove nothing.
        let len = f.len();
        for range in [
            (Bound::Included(5), Bound::Excluded(5)),
            (Bound::Excluded(5), Bound::Included(5)),
            (Bound::Included(10), Bound::Included(3)),
            (Bound::Excluded(u64::MAX), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(0)),
            (Bound::Included(2), Bound::Excluded(1_001)),
        ] {
            assert_eq!(f.delete_range(range).expect("delete_range"), 0, "{range:?}");
        }
        assert_eq!(f.retain(|_, _| true).expect("retain"), 0);
        assert_eq!(f.len(), len);
        assert_eq!(f.delete_range(..=1_001).expect("delete_range"), 2);
        assert_eq!(
            f.retain(|k, _| k % 2_000 == 1).expect("retain"),
            (len - 2) / 2
        );
        let remaining = f.len();
        assert_eq!(f.delete_range(..).expect("delete_range"), remaining);
        assert!(f.is_empty());
        assert_eq!(f.first().expect("first"), None);
    }
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(
        (report.nested_tree_count, report.embedded_tree_count),
        (0, 2),
        "emptied trees embed again"
    );
}

/// Two named trees, each with nested fixed-size trees, bound through handles in turn in
/// one write transaction while one nested tree after another moves out of its entry and
/// back: every tree reads as its model at every step, and after the commit.
#[test]
fn several_trees_in_one_transaction_while_one_changes_form() {
    type Model = BTreeMap<(u8, u8), BTreeMap<u64, u64>>;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("a").expect("open");
    wtx.open_tree("b").expect("open");
    wtx.open_multi_tree("m").expect("open");
    let handles = [
        wtx.tree_handle("a").expect("handle"),
        wtx.tree_handle("b").expect("handle"),
    ];
    let multi = wtx.tree_handle("m").expect("handle");
    let mut model = Model::new();
    let mut sets = Sets::new();
    let verify = |wtx: &mut hrafn::WriteTxn<'_>, model: &Model, step: u64| {
        for ((t, k), entries) in model {
            let mut tree = handles[usize::from(*t)].tree_mut(wtx).expect("bind");
            let f = tree.open_fixed_tree([*k], 8).expect("open");
            let got: BTreeMap<u64, u64> = f
                .range(..)
                .expect("range")
                .map(|e| {
                    let (k, v) = e.expect("entry");
                    (k, u64::from_le_bytes(v.try_into().expect("8 bytes")))
                })
                .collect();
            assert_eq!(&got, entries, "step {step} tree {t} key {k}");
        }
    };
    for step in 0..4_000u64 {
        let r = mix(step);
        let t = (r % 2) as u8;
        let k = ((r >> 8) % 3) as u8;
        let key = (r >> 16) % 100;
        let entries = model.entry((t, k)).or_default();
        {
            let mut tree = handles[usize::from(t)].tree_mut(&mut wtx).expect("bind");
            // A plain value next to the nested trees, in the same leaf.
            tree.insert([b'v', k], step.to_le_bytes()).expect("insert");
            let mut f = tree.open_fixed_tree([k], 8).expect("open");
            if (r >> 40).is_multiple_of(3) {
                assert_eq!(
                    f.remove(key).expect("remove"),
                    entries.remove(&key).is_some()
                );
            } else {
                f.insert(key, &step.to_le_bytes()).expect("insert");
                entries.insert(key, step);
            }
            assert_eq!(f.len(), entries.len() as u64);
        }
        {
            let mut m = multi.multi_tree_mut(&mut wtx).expect("bind");
            let mk = vec![t, k];
            let v = sized((r >> 24) as u8 % 20, 70);
            if (r >> 48).is_multiple_of(3) {
                let removed = sets.get_mut(&mk).is_some_and(|s| s.remove(&v));
                assert_eq!(m.remove(&mk, &v).expect("remove"), removed);
            } else {
                assert_eq!(
                    m.add(&mk, &v).expect("add"),
                    sets.entry(mk.clone()).or_default().insert(v)
                );
            }
            sets.retain(|_, s| !s.is_empty());
        }
        if step % 250 == 0 {
            verify(&mut wtx, &model, step);
        }
    }
    verify(&mut wtx, &model, u64::MAX);
    wtx.commit().expect("commit");
    env.check().expect("check");
    assert_eq!(read_sets(&env, "m"), sets);
    let rtx = env.begin_read().expect("read");
    for ((t, k), entries) in &model {
        let tree = rtx.open_tree(["a", "b"][usize::from(*t)]).expect("open");
        let f = tree.open_fixed_tree([*k]).expect("open");
        assert_eq!(f.len(), entries.len() as u64);
        for (key, v) in entries {
            assert_eq!(f.get(*key).expect("get"), Some(&v.to_le_bytes()[..]));
        }
    }
}

/// Typed codecs over stored bytes of the wrong shape: each read is a decode error, not a
/// panic, for values, multi-value sets and keys holding a nested tree.
#[cfg(feature = "typed")]
#[test]
fn typed_reads_of_malformed_bytes_are_decode_errors() {
    use hrafn::typed::{Serde, Str, TypedMultiTree, TypedTree, U64Be};
    const NUMS: TypedTree<U64Be, U64Be> = TypedTree::new("nums");
    const LISTS: TypedTree<Str, Serde<Vec<String>>> = TypedTree::new("lists");
    const TAGS: TypedMultiTree<Str, U64Be> = TypedMultiTree::new("tags");
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    {
        let mut raw = wtx.open_tree("nums").expect("open");
        raw.insert(1u64.to_be_bytes(), b"abc").expect("insert");
        raw.insert(2u64.to_be_bytes(), 7u64.to_be_bytes())
            .expect("insert");
        raw.insert(b"short", 7u64.to_be_bytes()).expect("insert");
        raw.open_fixed_tree(3u64.to_be_bytes(), 8).expect("nested");
    }
    {
        let mut raw = wtx.open_tree("lists").expect("open");
        // A length prefix far beyond the bytes there.
        raw.insert(b"huge", u64::MAX.to_le_bytes()).expect("insert");
        raw.insert(b"cut", [2, 0, 0, 0, 0, 0, 0, 0, 5])
            .expect("insert");
        raw.insert([0xFF], b"").expect("insert");
    }
    {
        let mut raw = wtx.open_multi_tree("tags").expect("open");
        raw.add(b"t", 5u64.to_be_bytes()).expect("add");
        raw.add(b"t", b"odd").expect("add");
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let nums = NUMS.open(&rtx).expect("open");
    assert!(matches!(nums.get(&1), Err(Error::Decode { .. })));
    assert_eq!(nums.get(&2).expect("get"), Some(7));
    assert!(matches!(nums.get(&3), Err(Error::Decode { .. })));
    let all: Vec<_> = nums
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect();
    assert_eq!(all.len(), 4);
    assert!(
        all.iter()
            .filter(|e| matches!(e, Err(Error::Decode { .. })))
            .count()
            == 3
    );
    let lists = LISTS.open(&rtx).expect("open");
    assert!(matches!(lists.get("huge"), Err(Error::Decode { .. })));
    assert!(matches!(lists.get("cut"), Err(Error::Decode { .. })));
    let keys: Vec<_> = lists
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .collect();
    assert!(keys.iter().all(|e| matches!(e, Err(Error::Decode { .. }))));
    let tags = TAGS.open(&rtx).expect("open");
    let values: Vec<_> = tags.values("t").expect("values").collect();
    assert_eq!(values.len(), 2);
    assert_eq!(values[0].as_ref().ok(), Some(&5));
    assert!(matches!(values[1], Err(Error::Decode { .. })));
    assert!(matches!(
        tags.values("t").expect("values").next_back(),
        Some(Err(Error::Decode { .. }))
    ));
}

/// A bounded range read from both ends yields each key once, also when one end has
/// passed the other's bound before the other end starts.
#[test]
fn bounded_ranges_from_both_ends_yield_each_key_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    {
        let mut m = wtx.open_multi_tree("m").expect("open");
        for k in [b"a", b"b", b"c"] {
            m.add(k, b"v").expect("add");
        }
        let mut keys = m.keys(..=&b"b"[..]).expect("keys");
        assert_eq!(keys.next().transpose().expect("key"), Some(&b"a"[..]));
        assert_eq!(keys.next().transpose().expect("key"), Some(&b"b"[..]));
        assert_eq!(keys.next_back().transpose().expect("key"), None, "b twice");
        let mut keys = m.keys(&b"b"[..]..).expect("keys");
        assert_eq!(keys.next_back().transpose().expect("key"), Some(&b"c"[..]));
        assert_eq!(keys.next_back().transpose().expect("key"), Some(&b"b"[..]));
        assert_eq!(keys.next().transpose().expect("key"), None, "b twice");
    }
    wtx.commit().expect("commit");
}
