//! Fixed-size trees against an in-memory model: random inserts, replacements and removes
//! (dense and sparse keys, runs of increasing keys), commits and aborts, range queries,
//! first/last and counts, reopens, and the integrity check after every commit.

mod common;

use common::mix;
use hrafn::{Environment, Error, Options};
use std::collections::BTreeMap;
use std::ops::Bound;

type Model = BTreeMap<u64, Vec<u8>>;

fn value(key: u64, salt: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| mix(key ^ salt ^ i as u64) as u8)
        .collect()
}

/// The page number of the first slotted fixed-size leaf in the bytes of a data file.
fn slotted_leaf(data: &[u8]) -> usize {
    use hrafn::limits::PAGE_SIZE_BYTES;
    use hrafn::page::{OFFSET_KIND, PageKind};
    (0..data.len() / PAGE_SIZE_BYTES)
        .find(|&p| data[p * PAGE_SIZE_BYTES + OFFSET_KIND] == PageKind::FixedLeafSlotted as u8)
        .expect("a slotted leaf in the data file")
}

fn assert_same(env: &Environment, name: &str, model: &Model, seed: u64) {
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_fixed_tree(name).expect("open");
    assert_eq!(t.len(), model.len() as u64);
    let all: Vec<(u64, Vec<u8>)> = t
        .range(..)
        .expect("range")
        .map(|e| e.map(|(k, v)| (k, v.to_vec())).expect("entry"))
        .collect();
    let want: Vec<(u64, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(all, want, "full scan");
    let all_rev: Vec<u64> = t
        .range_rev(..)
        .expect("range")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(
        all_rev,
        model.keys().rev().copied().collect::<Vec<_>>(),
        "full reverse scan"
    );
    assert_eq!(
        t.first().expect("first").map(|(k, _)| k),
        model.keys().next().copied()
    );
    assert_eq!(
        t.last().expect("last").map(|(k, _)| k),
        model.keys().next_back().copied()
    );
    for i in 0..20 {
        let a = mix(seed ^ i) % 5000;
        let b = a + mix(seed ^ i ^ 1) % 500;
        let got: Vec<u64> = t
            .range((Bound::Excluded(a), Bound::Included(b)))
            .expect("range")
            .map(|e| e.expect("entry").0)
            .collect();
        let want: Vec<u64> = model
            .range((Bound::Excluded(a), Bound::Included(b)))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(got, want, "range ({a}, {b}]");
        let got_rev: Vec<u64> = t
            .range_rev((Bound::Excluded(a), Bound::Included(b)))
            .expect("range")
            .map(|e| e.expect("entry").0)
            .collect();
        let want_rev: Vec<u64> = want.iter().rev().copied().collect();
        assert_eq!(got_rev, want_rev, "reverse range ({a}, {b}]");
        let got_rev: Vec<u64> = t
            .range_rev(a..b)
            .expect("range")
            .map(|e| e.expect("entry").0)
            .collect();
        let want_rev: Vec<u64> = model.range(a..b).rev().map(|(k, _)| *k).collect();
        assert_eq!(got_rev, want_rev, "reverse range [{a}, {b})");
        let probe = mix(seed ^ i ^ 2) % 6000;
        assert_eq!(
            t.get(probe).expect("get"),
            model.get(&probe).map(|v| &v[..])
        );
    }
    env.check().expect("check");
}

#[test]
fn random_operations_match_the_model() {
    let mut cases = 0u64;
    for (round, value_size) in [0usize, 8, 16, 100, 1024].into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = common::small_options();
        let mut env = Environment::open(dir.path(), options.clone()).expect("open");
        let mut model = Model::new();
        let seed = 0xF1_0000 + round as u64;
        let mut r = seed;
        let mut next = move || {
            r = mix(r);
            r
        };
        for txn in 0..40u64 {
            let mut wtx = env.begin_write().expect("write");
            let mut changed = model.clone();
            {
                let mut t = wtx.open_fixed_tree("f", value_size).expect("open");
                let ops = 20 + next() % 400;
                let mut append_at = changed.keys().next_back().map_or(0, |k| k + 1);
                for _ in 0..ops {
                    cases += 1;
                    let op = next() % 10;
                    // Dense keys early, then sparse ones, and runs of increasing keys.
                    let key = match op {
                        0..=1 => {
                            append_at += 1 + next() % 3;
                            append_at
                        }
                        _ => next() % if txn < 20 { 2000 } else { 5000 },
                    };
                    if op < 7 {
                        let v = value(key, next(), value_size);
                        let replaced = t.insert(key, &v).expect("insert");
                        assert_eq!(replaced, changed.insert(key, v).is_some());
                    } else {
                        let removed = t.remove(key).expect("remove");
                        assert_eq!(removed, changed.remove(&key).is_some());
                    }
                }
                assert_eq!(t.len(), changed.len() as u64);
            }
            if next() % 5 == 0 {
                wtx.abort();
            } else {
                wtx.commit().expect("commit");
                model = changed;
            }
            assert_same(&env, "f", &model, seed ^ txn);
            if txn % 10 == 9 {
                drop(env);
                env = Environment::open(dir.path(), options.clone()).expect("reopen");
                assert_same(&env, "f", &model, seed ^ txn ^ 7);
            }
        }
        // Empty it completely: pages go back to the free-space map.
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("f", value_size).expect("open");
            for key in model.keys() {
                assert!(t.remove(*key).expect("remove"));
            }
            assert!(t.is_empty());
        }
        wtx.commit().expect("commit");
        model.clear();
        assert_same(&env, "f", &model, seed);
    }
    assert!(cases >= 10_000, "{cases} cases");
}

#[test]
fn sequential_keys_fill_pages_and_delete_frees_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let count = 200_000u64;
    let mut wtx = env.begin_write().expect("write");
    {
        let mut fixed = wtx.open_fixed_tree("fixed", 16).expect("fixed");
        for k in 0..count {
            fixed.insert(k, &[k as u8; 16]).expect("insert");
        }
    }
    {
        let mut btree = wtx.open_tree("btree").expect("btree");
        for k in 0..count {
            btree
                .insert(k.to_be_bytes(), [k as u8; 16])
                .expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let before = env.check().expect("check");
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("fixed").expect("delete"));
    wtx.commit().expect("commit");
    let without_fixed = env.check().expect("check");
    let fixed_pages = before.used_pages - without_fixed.used_pages;
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("btree").expect("delete"));
    wtx.commit().expect("commit");
    let empty = env.check().expect("check");
    let btree_pages = without_fixed.used_pages - empty.used_pages;
    // 340 entries per leaf, filled completely by increasing keys.
    let leaves = count.div_ceil(340);
    assert!(
        fixed_pages <= leaves + leaves / 100 + 2,
        "{fixed_pages} pages for {leaves} full leaves"
    );
    // 24 bytes an entry against the B+tree's 30 (slot, lengths): about 0.73 of its pages.
    assert!(
        fixed_pages * 4 <= btree_pages * 3,
        "fixed-size tree {fixed_pages} pages, B+tree {btree_pages}"
    );
    eprintln!("200,000 u64 → 16 bytes: fixed-size tree {fixed_pages} pages, B+tree {btree_pages}");
}

#[test]
fn kinds_and_sizes_do_not_mix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_fixed_tree("f", 8).expect("fixed");
    wtx.open_tree("b").expect("btree");
    assert!(matches!(
        wtx.open_tree("f"),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        wtx.open_fixed_tree("f", 16),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        wtx.open_fixed_tree("b", 8),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        wtx.open_fixed_tree("big", 1025),
        Err(Error::ValueTooLarge { .. })
    ));
    {
        let mut f = wtx.open_fixed_tree("f", 8).expect("fixed");
        assert!(matches!(
            f.insert(1, &[0; 7]),
            Err(Error::InvalidArgument(_))
        ));
        f.insert(1, &[1; 8]).expect("insert");
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    assert!(matches!(
        rtx.open_tree("f"),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        rtx.open_fixed_tree("b"),
        Err(Error::WrongTreeKind { .. })
    ));
    assert_eq!(
        rtx.open_fixed_tree("f").expect("f").get(1).expect("get"),
        Some(&[1u8; 8][..])
    );
}

/// Random inserts into a grown tree journal about 200 bytes each: an insert before a
/// leaf's end moves 2-byte slots, where a packed leaf moved every entry after it (this test
/// measured 1,906 bytes an insert on packed leaves).
#[test]
fn random_inserts_journal_slots_not_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let insert_all = |keys: &mut dyn Iterator<Item = u64>| {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("f", 16).expect("open");
            for k in keys {
                t.insert(k, &[k as u8; 16]).expect("insert");
            }
        }
        wtx.commit().expect("commit");
    };
    insert_all(&mut (0..100_000u64).map(mix));
    let inserts = 500u64;
    let before = env.stats().journal_payload_bytes;
    // Keys not in the tree yet.
    insert_all(&mut (1_000_000..1_000_000 + inserts).map(mix));
    let per_insert = (env.stats().journal_payload_bytes - before) / inserts;
    eprintln!("{per_insert} journal bytes per random insert");
    assert!(per_insert < 1_200, "{per_insert} journal bytes per insert");
    env.check().expect("check");
}

/// A slot naming an entry number at or past its leaf's count is found by the integrity
/// check. The damage is a stale copy that a remove leaves behind, so every key still reads
/// in order and only the check of the slots can see it.
#[test]
fn the_check_finds_a_slot_naming_no_live_entry() {
    use hrafn::limits::PAGE_SIZE_BYTES;
    use hrafn::page;
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("f", 16).expect("open");
            // Descending keys: entry number e holds key 500 - 10e, slot i names 49 - i.
            for k in (1..=50u64).rev() {
                t.insert(k * 10, &[k as u8; 16]).expect("insert");
            }
            // Key 500 (entry 0) goes; entry 49 (key 10) moves into number 0, and its old
            // bytes stay behind at number 49.
            assert!(t.remove(500).expect("remove"));
        }
        wtx.commit().expect("commit");
        env.check().expect("check before the damage");
    }
    let path = dir.path().join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let leaf = slotted_leaf(&data);
    let bytes = &mut data[leaf * PAGE_SIZE_BYTES..(leaf + 1) * PAGE_SIZE_BYTES];
    assert_eq!(page::get_u16(bytes, page::OFFSET_ENTRY_COUNT), 49);
    let first_slot = PAGE_SIZE_BYTES - 2;
    assert_eq!(page::get_u16(bytes, first_slot), 0, "key 10 is entry 0");
    page::put_u16(bytes, first_slot, 49);
    page::seal(bytes, leaf as u64);
    std::fs::write(&path, &data).expect("write back");

    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let keys: Vec<u64> = rtx
        .open_fixed_tree("f")
        .expect("f")
        .range(..)
        .expect("range")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(
        keys,
        (1..50).map(|k| k * 10).collect::<Vec<_>>(),
        "keys read in order"
    );
    match env.check() {
        Err(e @ Error::Corruption { .. }) => {
            assert!(e.to_string().contains("slots"), "{e}");
        }
        other => panic!("the check passed a damaged slot: {other:?}"),
    }
}

/// Large values make many small leaves: branches split into three levels, then shrink
/// back to one leaf as random removes empty nodes.
#[test]
fn deep_trees_split_and_shrink() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut model = Model::new();
    let mut keys: Vec<u64> = (0..20_000u64).map(|i| mix(i ^ 0xDEE9)).collect();
    for chunk in keys.chunks(5_000) {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("deep", 1024).expect("open");
            for &k in chunk {
                let v = value(k, 3, 1024);
                t.insert(k, &v).expect("insert");
                model.insert(k, v);
            }
        }
        wtx.commit().expect("commit");
        assert_same(&env, "deep", &model, chunk[0]);
    }
    let grown = env.check().expect("check").used_pages;
    assert!(grown > 20_000 / 7, "{grown} pages");
    keys.sort_by_key(|&k| mix(k));
    for chunk in keys.chunks(4_000) {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("deep", 1024).expect("open");
            for &k in chunk {
                assert!(t.remove(k).expect("remove"));
                model.remove(&k);
            }
        }
        wtx.commit().expect("commit");
        assert_same(&env, "deep", &model, chunk[0]);
    }
    let report = env.check().expect("check");
    assert_eq!(report.entry_count, 0);
    // Meta, the free-space map, the root tree and one empty leaf.
    assert!(report.used_pages <= 6, "{} pages in use", report.used_pages);
}

mod crash_support;

/// Power loss at every storage operation of a workload of fixed-size tree commits (with
/// flushes and syncs between): every damage variant recovers to the state after one
/// transaction between the last acknowledged and the last submitted, and checks clean.
#[test]
fn power_loss_recovers_a_committed_state() {
    use hrafn::storage::sim::SimStorage;

    const COMMITS: u64 = 30;
    let options = crash_support::deterministic_options();
    // Runs the workload; returns the models after each commit and how many were acked.
    let run = |sim: &SimStorage| {
        crash_support::run_commits(sim, &options, COMMITS, 7, &|wtx, txn, model: &mut Model| {
            {
                let mut t = wtx.open_fixed_tree("f", 16)?;
                for i in 0..200 {
                    let key = mix(txn * 1000 + i) % 3000;
                    if mix(key ^ txn).is_multiple_of(4) {
                        t.remove(key)?;
                        model.remove(&key);
                    } else {
                        let v = value(key, txn, 16);
                        t.insert(key, &v)?;
                        model.insert(key, v);
                    }
                }
            }
            Ok(())
        })
    };
    let (states, ops) =
        crash_support::power_loss_at_every_operation(0xF1ED, &options, &run, &|env| {
            let rtx = env.begin_read().expect("read");
            match rtx.open_fixed_tree("f") {
                Ok(t) => t
                    .range(..)
                    .expect("range")
                    .map(|e| e.map(|(k, v)| (k, v.to_vec())).expect("entry"))
                    .collect(),
                Err(Error::TreeNotFound { .. }) => Model::new(),
                Err(e) => panic!("{e}"),
            }
        });
    crash_support::summary(&format!(
        "fixed-size tree power loss: {states} crash states over {ops} operations"
    ));
}

/// The write handles read as the read handles do: `first`/`last` of a fixed-size tree and
/// `iter` of a B+tree see the transaction's own changes.
#[test]
fn write_handles_have_first_last_and_iter() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = hrafn::Environment::open(dir.path(), hrafn::Options::default())?;
    let mut wtx = env.begin_write()?;
    {
        let mut series = wtx.open_fixed_tree("series", 8)?;
        assert_eq!(series.first()?, None);
        for t in [30u64, 10, 20] {
            series.insert(t, &t.to_le_bytes())?;
        }
        assert_eq!(series.first()?, Some((10, &10u64.to_le_bytes()[..])));
        assert_eq!(series.last()?, Some((30, &30u64.to_le_bytes()[..])));
    }
    {
        let mut tree = wtx.open_tree("t")?;
        for k in [b"b", b"c", b"a"] {
            tree.insert(k, b"")?;
        }
        let keys: Vec<Vec<u8>> = tree
            .iter()?
            .map(|e| e.map(|(k, _)| k.to_vec()))
            .collect::<hrafn::Result<_>>()?;
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }
    wtx.commit()
}

/// A remove that fails part way (here on a damaged leaf met while the tree shrinks) fails
/// its transaction, as a B+tree's does: pages it freed must not commit free while the tree
/// still names them.
#[test]
fn a_remove_that_fails_part_way_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = *b"first leaf value";
    const KEYS: u64 = 1_000;
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        let mut t = wtx.open_fixed_tree("f", 16).expect("open");
        t.insert(0, &marker).expect("insert");
        for key in 1..KEYS {
            t.insert(key, &key.to_le_bytes().repeat(2)).expect("insert");
        }
        wtx.commit().expect("commit");
    }
    // No reseal: the first leaf fails its checksum.
    common::damage_page_holding(dir.path(), &marker);

    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    let mut t = wtx.open_fixed_tree("f", 16).expect("open");
    // From the end: leaves empty and are freed until the tree, shrinking to its first
    // leaf, reads it.
    let failed = (1..KEYS).rev().find_map(|key| t.remove(key).err());
    assert!(
        matches!(failed, Some(Error::Corruption { .. })),
        "{failed:?}"
    );
    assert!(wtx.commit().is_err(), "a half-done remove cannot commit");
}

#[test]
fn an_insert_that_meets_damage_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = *b"the last value!!";
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("f", 16).expect("open");
            for k in 0..5_000u64 {
                t.insert(k, &value(k, 1, 16)).expect("insert");
            }
            t.insert(5_000, &marker).expect("insert");
        }
        wtx.commit().expect("commit");
    }
    common::damage_page_holding(dir.path(), &marker);
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    let outcome = wtx
        .open_fixed_tree("f", 16)
        .expect("open")
        .insert(5_001, &[7; 16]);
    assert!(
        matches!(outcome, Err(Error::Corruption { .. })),
        "{outcome:?}"
    );
    assert!(
        matches!(wtx.commit(), Err(Error::TransactionFailed { .. })),
        "a failed insert cannot commit"
    );
}

/// A full slotted leaf whose slots name one entry twice (its checksum made valid again)
/// is corruption when an insert splits it, not halves that repeat one entry and lose
/// another.
#[test]
fn a_split_of_a_leaf_with_damaged_slots_is_corruption() {
    use hrafn::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
    use hrafn::page;
    // What a slotted leaf of 16-byte values holds: key, value and a 2-byte slot each.
    let capacity = (PAGE_SIZE_BYTES - PAGE_HEADER_SIZE_BYTES) / (8 + 2 + 16);
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_fixed_tree("f", 16).expect("open");
            // Descending keys make the one leaf slotted and fill it.
            for k in (1..=capacity as u64).rev() {
                t.insert(k * 10, &[k as u8; 16]).expect("insert");
            }
        }
        wtx.commit().expect("commit");
    }
    let path = dir.path().join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let leaf = slotted_leaf(&data);
    let bytes = &mut data[leaf * PAGE_SIZE_BYTES..(leaf + 1) * PAGE_SIZE_BYTES];
    assert_eq!(
        usize::from(page::get_u16(bytes, page::OFFSET_ENTRY_COUNT)),
        capacity,
        "the leaf is full"
    );
    let second = page::get_u16(bytes, PAGE_SIZE_BYTES - 4);
    page::put_u16(bytes, PAGE_SIZE_BYTES - 2, second);
    page::seal(bytes, leaf as u64);
    std::fs::write(&path, &data).expect("write back");

    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    let outcome = wtx
        .open_fixed_tree("f", 16)
        .expect("open")
        .insert(15, &[0; 16]);
    assert!(
        matches!(outcome, Err(Error::Corruption { .. })),
        "{outcome:?}"
    );
    assert!(matches!(wtx.commit(), Err(Error::TransactionFailed { .. })));
}
