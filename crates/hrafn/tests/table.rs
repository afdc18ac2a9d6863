//! Tables against an in-memory model: random inserts, updates (in place, moved, into and
//! out of overflow runs) and deletes, with a primary key, a variable index, a composite
//! index, a unique fixed index and a global index shared by two tables; every index and
//! every id checked after each commit, the integrity check (index ↔ table agreement, page
//! accounting), sparse pages freed, schemas enforced, and power loss at every storage
//! operation.

mod common;
mod crash_support;

use common::mix;
use hrafn::table::{Schema, index_key};
use hrafn::{Environment, Error, Options};
use std::collections::{BTreeMap, BTreeSet};

/// Fields: 0 primary key, 1 group (variable index, global index too, and with the
/// sequence number a composite index), 2 payload (any size), 3 sequence number (8 bytes,
/// unique fixed index).
fn schema() -> Schema {
    Schema::new(4)
        .primary_key(0)
        .index("by-group", &[1])
        .index("by-group-seq", &[1, 3])
        .fixed_index("by-seq", 3)
        .global_index("everyone-by-group", &[1])
}

type Fields = Vec<Vec<u8>>;
/// primary key → fields. Ids are locations and change when records move, so the model
/// finds records the way a user must: through a key.
type Model = BTreeMap<Vec<u8>, Fields>;

fn record(pk: u64, r: u64, seq: u64) -> Fields {
    let len = match r % 20 {
        0 => 2_100 + (r >> 8) as usize % 9_000, // an overflow run
        1..=3 => 300 + (r >> 8) as usize % 1_500,
        _ => (r >> 8) as usize % 60,
    };
    vec![
        format!("pk{pk:04}").into_bytes(),
        format!("g{}", r % 7).into_bytes(),
        vec![(r >> 16) as u8; len],
        seq.to_be_bytes().to_vec(),
    ]
}

fn refs(fields: &Fields) -> Vec<&[u8]> {
    fields.iter().map(Vec::as_slice).collect()
}

/// Checks every record, id and index against the model; returns primary key → id.
fn assert_same(env: &Environment, model: &Model, gone: &BTreeSet<u64>) -> BTreeMap<Vec<u8>, u64> {
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema()).expect("open");
    assert_eq!(t.len(), model.len() as u64);
    let mut ids = BTreeMap::new();
    for (pk, fields) in model {
        let (id, by_key) = t.get_by_key(pk).expect("by key").expect("pk");
        assert_eq!(by_key.fields(), refs(fields));
        assert_eq!(t.get(id).expect("get"), Some(by_key), "get by id");
        assert_eq!(t.index_ids("by-seq", &fields[3]).expect("seq"), vec![id]);
        ids.insert(pk.clone(), id);
    }
    let live: BTreeSet<u64> = ids.values().copied().collect();
    assert_eq!(live.len(), model.len(), "ids are unique");
    for id in gone.difference(&live) {
        assert!(
            t.get(*id).expect("get").is_none(),
            "a deleted id reads as no record"
        );
    }
    // Every index agrees with the model.
    let mut by_group: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for (pk, fields) in model {
        by_group.entry(fields[1].clone()).or_default().push(ids[pk]);
    }
    for (group, group_ids) in &mut by_group {
        group_ids.sort_unstable();
        assert_eq!(&t.index_ids("by-group", group).expect("index"), group_ids);
    }
    let composite = t
        .index_range::<&[u8], _>("by-group-seq", ..)
        .expect("range");
    let mut want: Vec<(Vec<u8>, u64)> = model
        .iter()
        .map(|(pk, f)| (index_key(&[&f[1], &f[3]]), ids[pk]))
        .collect();
    want.sort();
    assert_eq!(composite, want);
    let by_seq = t.fixed_index_range("by-seq", ..).expect("fixed range");
    let mut want: Vec<(u64, u64)> = model
        .iter()
        .map(|(pk, f)| {
            (
                u64::from_be_bytes(f[3].clone().try_into().expect("8")),
                ids[pk],
            )
        })
        .collect();
    want.sort();
    assert_eq!(by_seq, want);
    // Scans: id order and key order.
    let scanned: Vec<(u64, Fields)> = t
        .scan()
        .expect("scan")
        .map(|e| e.map(|(id, r)| (id, r.fields().iter().map(|f| f.to_vec()).collect())))
        .collect::<Result<_, _>>()
        .expect("scan");
    let mut want: Vec<(u64, Fields)> = model.iter().map(|(pk, f)| (ids[pk], f.clone())).collect();
    want.sort();
    assert_eq!(scanned, want, "scan in id order");
    let keys: Vec<Vec<u8>> = t
        .scan_by_key::<&[u8], _>(..)
        .expect("scan by key")
        .iter()
        .map(|(_, r)| r.field(0).expect("pk").to_vec())
        .collect();
    assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
    drop(rtx);
    env.check().expect("check");
    ids
}

#[test]
fn random_operations_match_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options();
    let mut env = Environment::open(dir.path(), options.clone()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_table("t", &schema()).expect("create");
    wtx.commit().expect("commit");
    let mut model = Model::new();
    let mut gone = BTreeSet::new();
    let mut ids = BTreeMap::new();
    let mut r = 0x7AB1_u64;
    let mut next = move || {
        r = mix(r);
        r
    };
    let (mut cases, mut moved_by_update, mut moved_by_others, mut seq) = (0u64, 0u64, 0u64, 0u64);
    let mut peak_pages = 0;
    for txn in 0..100u64 {
        let mut wtx = env.begin_write().expect("write");
        let mut changed = model.clone();
        let mut changed_gone = gone.clone();
        {
            let mut t = wtx.open_table("t", &schema()).expect("open");
            // Grow early, shrink late, so pages fill, thin out and are freed.
            let insert_percent = if txn < 50 { 60 } else { 15 };
            for _ in 0..(40 + next() % 160) {
                cases += 1;
                let op = next() % 100;
                let pks: Vec<Vec<u8>> = changed.keys().cloned().collect();
                if op < insert_percent || pks.is_empty() {
                    seq += 1;
                    let fields = record(next() % 3_000, next(), seq);
                    let taken = changed.contains_key(&fields[0]);
                    match t.insert(&refs(&fields)) {
                        Ok(id) => {
                            assert!(!taken);
                            assert_eq!(
                                t.get(id).expect("get").map(|r| r.fields()),
                                Some(refs(&fields))
                            );
                            changed.insert(fields[0].clone(), fields);
                        }
                        Err(Error::DuplicateKey { .. }) => assert!(taken),
                        Err(e) => panic!("insert: {e}"),
                    }
                } else {
                    let pk = &pks[(next() % pks.len() as u64) as usize];
                    let (id, _) = t.get_by_key(pk).expect("key").expect("present");
                    if op < insert_percent + (100 - insert_percent) / 2 {
                        let mut fields = changed[pk].clone();
                        let fresh = record(0, next(), 0);
                        fields[1] = fresh[1].clone();
                        fields[2] = fresh[2].clone();
                        let new_id = t.update(id, &refs(&fields)).expect("update").expect("live");
                        // The id returned names the record, however the pages moved after.
                        assert_eq!(
                            t.get(new_id).expect("get").map(|r| r.fields()),
                            Some(refs(&fields)),
                            "update returned {new_id:#x}"
                        );
                        if new_id != id {
                            moved_by_update += 1;
                            changed_gone.insert(id);
                        }
                        changed.insert(pk.clone(), fields);
                    } else {
                        assert!(t.delete(id).expect("delete"));
                        assert!(
                            !t.delete(id).expect("delete again")
                                || t.get(id).expect("get").is_some()
                        );
                        changed.remove(pk);
                        changed_gone.insert(id);
                    }
                }
            }
            assert_eq!(t.len(), changed.len() as u64);
        }
        if next() % 6 == 0 {
            wtx.abort();
        } else {
            wtx.commit().expect("commit");
            model = changed;
            gone = changed_gone;
        }
        let now = assert_same(&env, &model, &gone);
        moved_by_others += now
            .iter()
            .filter(|(pk, id)| ids.get(*pk).is_some_and(|old| old != *id))
            .count() as u64;
        ids = now;
        peak_pages = peak_pages.max(env.check().expect("check").used_pages);
        if txn % 20 == 19 {
            drop(env);
            env = Environment::open(dir.path(), options.clone()).expect("reopen");
            assert_same(&env, &model, &gone);
        }
    }
    assert!(cases >= 10_000, "{cases} cases");
    assert!(moved_by_update > 0, "no update moved its record");
    assert!(moved_by_others > 0, "no record moved for compaction");
    common::summary(&format!(
        "table model: {cases} operations, {moved_by_update} records moved by their update, \
         {moved_by_others} by compaction or emptying, peak {peak_pages} pages"
    ));
    // Deleting every record frees the record pages; deleting the table frees the rest and
    // takes its entries out of the global index.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema()).expect("open");
        for pk in model.keys() {
            let (id, _) = t.get_by_key(pk).expect("key").expect("present");
            assert!(t.delete(id).expect("delete"));
        }
        assert!(t.is_empty());
    }
    wtx.commit().expect("commit");
    let emptied = env.check().expect("check").used_pages;
    assert!(
        emptied * 4 < peak_pages,
        "{emptied} pages left of {peak_pages}"
    );
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("t").expect("delete table"));
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.tree_count, 1, "only the global index is left");
    let rtx = env.begin_read().expect("read");
    assert!(
        rtx.open_multi_tree("everyone-by-group")
            .expect("global")
            .is_empty()
    );
}

#[test]
fn a_global_index_is_shared_and_schemas_are_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let people = Schema::new(2).primary_key(0).global_index("by-city", &[1]);
    let offices = Schema::new(2).global_index("by-city", &[1]);
    let mut wtx = env.begin_write().expect("write");
    let ada = wtx
        .open_table("people", &people)
        .expect("people")
        .insert(&[b"ada", b"London"])
        .expect("insert");
    let hq = wtx
        .open_table("offices", &offices)
        .expect("offices")
        .insert(&[b"hq", b"London"])
        .expect("insert");
    assert_ne!(ada, hq, "ids are locations, unique across tables");
    {
        let mut t = wtx.open_table("people", &people).expect("people");
        assert!(matches!(
            t.insert(&[b"ada", b"Paris"]),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(matches!(
            t.insert(&[b"only one field"]),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(t.len(), 1, "a refused insert changes nothing");
        // Another table's id is no record of this one.
        assert!(t.get(hq).expect("get").is_none());
        assert!(!t.delete(hq).expect("delete"));
        assert!(t.update(hq, &[b"x", b"y"]).expect("update").is_none());
    }
    assert!(matches!(
        wtx.open_table("people", &Schema::new(2)),
        Err(Error::SchemaMismatch { .. })
    ));
    assert!(matches!(
        wtx.open_tree("people"),
        Err(Error::WrongTreeKind { .. })
    ));
    wtx.commit().expect("commit");
    // A global index goes only with the tables that use it.
    let mut wtx = env.begin_write().expect("write");
    assert!(matches!(
        wtx.delete_tree("by-city"),
        Err(Error::InvalidArgument(_))
    ));
    drop(wtx);
    let rtx = env.begin_read().expect("read");
    let by_city = rtx.open_multi_tree("by-city").expect("global index");
    assert_eq!(by_city.count(b"London").expect("count"), 2);
    assert!(matches!(
        rtx.open_table("people", &people.clone().index("extra", &[1])),
        Err(Error::SchemaMismatch { .. })
    ));
    drop(rtx);
    env.check().expect("check");

    // A migration adds an index and builds it from the records.
    let migrated = people.clone().index("by-name", &[0]);
    let mut wtx = env.begin_write().expect("write");
    {
        let t = wtx.migrate_table("people", &migrated).expect("migrate");
        assert_eq!(t.index_ids("by-name", b"ada").expect("ids"), vec![ada]);
    }
    assert!(matches!(
        wtx.migrate_table("people", &Schema::new(3)),
        Err(Error::SchemaMismatch { .. })
    ));
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("people", &migrated).expect("open migrated");
    assert_eq!(t.index_ids("by-name", b"ada").expect("ids"), vec![ada]);
    drop(rtx);
    env.check().expect("check");
}

#[test]
fn sparse_pages_are_compacted_or_freed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let schema = Schema::new(2).primary_key(0);
    let mut wtx = env.begin_write().expect("write");
    let mut ids = Vec::new();
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..4_000u32 {
            ids.push(t.insert(&[&i.to_be_bytes(), &[7u8; 100]]).expect("insert"));
        }
    }
    wtx.commit().expect("commit");
    let full = env.check().expect("check").used_pages;
    // Keep one record in ten: every page falls below 15% and is emptied into others.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for (i, id) in ids.iter().enumerate() {
            if i % 10 != 0 {
                // A survivor may have moved already; delete through the primary key.
                let key = (i as u32).to_be_bytes();
                let (id_now, _) = t.get_by_key(&key).expect("key").expect("present");
                let _ = id;
                assert!(t.delete(id_now).expect("delete"));
            }
        }
        assert_eq!(t.len(), 400);
    }
    wtx.commit().expect("commit");
    let sparse = env.check().expect("check").used_pages;
    assert!(
        sparse * 4 < full,
        "{sparse} pages in use after deleting 90% of {full}"
    );
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    for i in (0..4_000u32).step_by(10) {
        let (_, r) = t
            .get_by_key(&i.to_be_bytes())
            .expect("key")
            .expect("survivor");
        assert_eq!(r.field(1), Some(&[7u8; 100][..]));
    }
}

/// Power loss at every storage operation of a table workload with indexes: every damage
/// variant recovers to a committed state, and the check finds every index in agreement
/// with the records.
#[test]
fn power_loss_recovers_a_committed_state() {
    use hrafn::storage::sim::SimStorage;

    /// pk → (group, payload).
    type State = BTreeMap<Vec<u8>, (Vec<u8>, Vec<u8>)>;
    const COMMITS: u64 = 16;
    let schema = Schema::new(3).primary_key(0).index("by-group", &[1]);
    let options = crash_support::deterministic_options();
    let run = |sim: &SimStorage| {
        crash_support::run_commits(sim, &options, COMMITS, 5, &|wtx, txn, state: &mut State| {
            {
                let mut t = wtx.open_table("t", &schema)?;
                for i in 0..30 {
                    let r = mix(txn * 1000 + i);
                    let pk = format!("k{}", r % 60).into_bytes();
                    let group = format!("g{}", r % 3).into_bytes();
                    let payload = vec![r as u8; (r >> 8) as usize % 700];
                    match t.get_by_key(&pk)?.map(|(id, _)| id) {
                        Some(id) if r.is_multiple_of(3) => {
                            t.delete(id)?;
                            state.remove(&pk);
                        }
                        Some(id) => {
                            t.update(id, &[&pk, &group, &payload])?;
                            state.insert(pk, (group, payload));
                        }
                        None => {
                            t.insert(&[&pk, &group, &payload])?;
                            state.insert(pk, (group, payload));
                        }
                    }
                }
            }
            Ok(())
        })
    };
    let (states, ops) =
        crash_support::power_loss_at_every_operation(0x7AB1, &options, &run, &|env| {
            let rtx = env.begin_read().expect("read");
            match rtx.open_table("t", &schema) {
                Ok(t) => t
                    .scan()
                    .expect("scan")
                    .map(|e| {
                        let (_, r) = e.expect("record");
                        let f = r.fields();
                        (f[0].to_vec(), (f[1].to_vec(), f[2].to_vec()))
                    })
                    .collect(),
                Err(Error::TreeNotFound { .. }) => State::new(),
                Err(e) => panic!("{e}"),
            }
        });
    common::summary(&format!(
        "table power loss: {states} crash states over {ops} operations"
    ));
}

/// A migration that fails half way (a new unique index meets a duplicate) leaves a
/// transaction that refuses to commit, and nothing of it lands.
#[test]
fn a_failed_migration_cannot_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let before = Schema::new(2)
        .primary_key(0)
        .index("loc", &[0])
        .global_index("g", &[0]);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &before).expect("open");
        t.insert(&[b"a", &1u64.to_be_bytes()]).expect("insert");
        t.insert(&[b"b", &1u64.to_be_bytes()]).expect("insert");
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    assert!(matches!(
        wtx.migrate_table("t", &before.clone().fixed_index("n", 1)),
        Err(Error::DuplicateKey { .. })
    ));
    wtx.open_tree("other")
        .expect("open")
        .insert(b"k", b"v")
        .expect("insert");
    assert!(matches!(wtx.commit(), Err(Error::TransactionFailed { .. })));
    env.check().expect("check");
    let rtx = env.begin_read().expect("read");
    assert_eq!(rtx.open_table("t", &before).expect("open").len(), 2);
    assert!(matches!(
        rtx.open_tree("other"),
        Err(Error::TreeNotFound { .. })
    ));
}

/// A global index may not take its table's name, nor the name of a tree of another kind;
/// refused before anything is allocated.
#[test]
fn global_index_names_are_checked_before_anything_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("plain").expect("open");
    assert!(matches!(
        wtx.open_table("t", &Schema::new(2).global_index("t", &[0])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        wtx.open_table("u", &Schema::new(2).global_index("plain", &[0])),
        Err(Error::WrongTreeKind { .. })
    ));
    wtx.commit().expect("commit");
    let report = env.check().expect("check");
    assert_eq!(report.tree_count, 1, "only the plain tree");
}

/// A table deleted and made again under its name in one transaction: the old ids read as
/// no record (the new table's pages carry another tag).
#[test]
fn a_table_made_again_does_not_see_the_old_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let schema = Schema::new(1);
    let mut wtx = env.begin_write().expect("write");
    let id = wtx
        .open_table("t", &schema)
        .expect("open")
        .insert(&[b"secret"])
        .expect("insert");
    assert!(wtx.delete_tree("t").expect("delete"));
    assert!(
        wtx.open_table("t", &schema)
            .expect("open")
            .get(id)
            .expect("get")
            .is_none()
    );
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    assert!(t.get(id).expect("get").is_none());
    assert_eq!(t.len(), 0);
    drop(rtx);
    env.check().expect("check");
}

/// An update that moves its record onto the active page, whose old page then empties out
/// and moves its last survivor, which compacts that active page: the id the update returns
/// is where the record is after all of it. (Sizes are chosen for the layout: a one-field
/// body of `n` bytes takes a slot of `n + 10` bytes, rounded up to 8.)
#[test]
fn an_update_returns_the_id_its_record_ends_at() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    let mut t = wtx.open_table("t", &Schema::new(1)).expect("open");
    let bytes = |fill: u8, len: usize| vec![fill; len];
    // Page P: R, S and six fillers (7,512 of its 8,032 bytes); the next one opens page A.
    let r = t.insert(&[&bytes(1, 1006)]).expect("insert");
    let s = t.insert(&[&bytes(2, 390)]).expect("insert");
    let fillers: Vec<u64> = (0..6)
        .map(|_| t.insert(&[&bytes(3, 1006)]).expect("insert"))
        .collect();
    // Page A, the active one: six records (1,936 bytes left at its end), four deleted.
    let on_a: Vec<u64> = (0..6)
        .map(|_| t.insert(&[&bytes(4, 1006)]).expect("insert"))
        .collect();
    assert_ne!(on_a[0] >> 13, r >> 13, "A is another page than P");
    for &id in &on_a[..4] {
        assert!(t.delete(id).expect("delete"));
    }
    // P keeps R and S: 1,416 live bytes, above the 15% at which its survivors move.
    for &id in &fillers {
        assert!(t.delete(id).expect("delete"));
    }
    assert!(t.get(s).expect("get").is_some(), "S is still where it was");
    // R grows past its slot: it goes to A's end; P falls below 15%, and S, moving out,
    // finds no room at A's end, so A is compacted.
    let grown = bytes(5, 1590);
    let new_id = t.update(r, &[&grown]).expect("update").expect("live");
    let found = t
        .get(new_id)
        .expect("get")
        .map(|rec| rec.fields() == [grown.as_slice()]);
    assert_eq!(
        found,
        Some(true),
        "the id returned names the updated record"
    );
    wtx.commit().expect("commit");
    assert!(env.check().is_ok());
}

#[test]
fn a_transaction_that_only_reads_a_table_writes_no_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let fields = record(1, 2, 3);
    let mut wtx = env.begin_write().expect("step");
    wtx.open_table("t", &schema())
        .expect("step")
        .insert(&refs(&fields))
        .expect("step");
    wtx.commit().expect("step");
    let committed = env.stats().txn_id;

    // Opened as stored and read, through both kinds of handle: nothing to journal.
    let mut wtx = env.begin_write().expect("step");
    let table = wtx.open_table("t", &schema()).expect("step");
    assert_eq!(table.len(), 1);
    assert!(table.get_by_key(&fields[0]).expect("step").is_some());
    let handle = wtx.table_handle("t", &schema()).expect("step");
    assert_eq!(handle.table_mut(&mut wtx).expect("step").len(), 1);
    wtx.commit().expect("step");
    assert_eq!(
        env.stats().txn_id,
        committed,
        "a read-only use committed a record"
    );

    // A change after the same open is still written back.
    let mut wtx = env.begin_write().expect("step");
    let mut table = wtx.open_table("t", &schema()).expect("step");
    table.insert(&refs(&record(4, 5, 6))).expect("step");
    wtx.commit().expect("step");
    assert_eq!(env.stats().txn_id, committed + 1);
    let rtx = env.begin_read().expect("step");
    assert_eq!(rtx.open_table("t", &schema()).expect("step").len(), 2);
    assert!(env.check().is_ok());
}

/// A global index stays undeletable while a table of this transaction names it, also after
/// a migration of that table was refused (the refusal set the open table aside).
#[test]
fn a_refused_migration_keeps_the_global_index_protected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("begin");
    let with_g = Schema::new(2).primary_key(0).global_index("g", &[1]);
    wtx.open_table("t", &with_g)
        .expect("table")
        .insert(&[b"k", b"v"])
        .expect("insert");
    // An index may not take a table's name: refused before anything changes.
    let clash = Schema::new(2).primary_key(0).global_index("t", &[1]);
    assert!(matches!(
        wtx.migrate_table("t", &clash),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        matches!(wtx.delete_tree("g"), Err(Error::InvalidArgument(_))),
        "the index of table t was deleted"
    );
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &with_g).expect("open");
    assert_eq!(t.len(), 1);
    drop(rtx);
    env.check().expect("check");
}
