//! Tables at their edges: records just under and over what a record page holds, empty
//! fields and keys, the key limit, the largest field count, extreme fixed-index numbers,
//! updates that grow and shrink across the boundary with a reopen after each step,
//! delete-all then reuse, id-order cursors after deletes, global indexes shared by
//! tables, migrations, refused changes, old snapshots across record moves, and damaged
//! record pages.

mod common;

use common::mix;
use hrafn::limits::{KEY_SIZE_MAX_BYTES, PAGE_SIZE_BYTES};
use hrafn::table::{RECORD_INLINE_MAX_BYTES, Record, Schema, encode_record, index_key};
use hrafn::{Environment, Error, Options};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Fields = Vec<Vec<u8>>;

fn open(dir: &Path) -> Environment {
    Environment::open(dir, Options::default()).expect("open")
}

fn owned(record: Record<'_>) -> Fields {
    record.fields().iter().map(|f| f.to_vec()).collect()
}

fn refs(fields: &Fields) -> Vec<&[u8]> {
    fields.iter().map(Vec::as_slice).collect()
}

fn is_overflow(id: u64) -> bool {
    id.is_multiple_of(PAGE_SIZE_BYTES as u64)
}

/// Bytes of a last field that make a record of `head` and that field exactly `body`
/// bytes long.
fn payload_for_body(head: &[&[u8]], body: usize) -> usize {
    body - encode_record(&[head, &[&b""[..]]].concat()).len()
}

/// Checks table `name` (schema `(pk, ...)`) against `model` (pk → fields) in a fresh
/// read transaction: by key, by id, in id order, in key order; then the integrity check.
fn assert_table(env: &Environment, name: &str, schema: &Schema, model: &BTreeMap<Vec<u8>, Fields>) {
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table(name, schema).expect("open table");
    assert_eq!(t.len(), model.len() as u64, "record count");
    let mut ids = BTreeMap::new();
    for (pk, fields) in model {
        let (id, record) = t.get_by_key(pk).expect("by key").expect("present");
        assert_eq!(owned(record), *fields, "by key {pk:?}");
        assert_eq!(t.get(id).expect("get").map(owned).as_ref(), Some(fields));
        ids.insert(id, fields.clone());
    }
    assert_eq!(ids.len(), model.len(), "ids are unique");
    let scanned: Vec<(u64, Fields)> = t
        .scan()
        .expect("scan")
        .map(|e| e.map(|(id, r)| (id, owned(r))))
        .collect::<Result<_, _>>()
        .expect("scan");
    assert_eq!(scanned, ids.into_iter().collect::<Vec<_>>(), "id order");
    let by_key: Vec<Fields> = t
        .scan_by_key::<&[u8], _>(..)
        .expect("scan by key")
        .into_iter()
        .map(|(_, r)| owned(r))
        .collect();
    assert_eq!(by_key, model.values().cloned().collect::<Vec<_>>());
    drop(rtx);
    env.check().expect("check");
}

/// Records of every body size around the inline limit (and a few slot sizes): the largest
/// inline record stays in a record page, one byte more takes an overflow run; updates
/// cross the limit both ways, each step committed, reopened and checked.
#[test]
fn records_at_the_inline_limit_cross_it_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(3).primary_key(0).index("by-round", &[1]);
    let sizes = [
        0usize,
        1,
        4,
        5,
        RECORD_INLINE_MAX_BYTES - 8,
        RECORD_INLINE_MAX_BYTES - 1,
        RECORD_INLINE_MAX_BYTES,
        RECORD_INLINE_MAX_BYTES + 1,
        RECORD_INLINE_MAX_BYTES + 8,
        PAGE_SIZE_BYTES,
        3 * PAGE_SIZE_BYTES + 1,
    ];
    let min_body = encode_record(&[b"k00", b"r", b""]).len();
    let mut model: BTreeMap<Vec<u8>, Fields> = BTreeMap::new();
    let mut env = open(dir.path());
    // Round 0 inserts; each later round moves every record to the next size.
    for round in 0..sizes.len() {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_table("t", &schema).expect("open");
            for (i, _) in sizes.iter().enumerate() {
                let pk = format!("k{i:02}").into_bytes();
                let body = sizes[(i + round) % sizes.len()].max(min_body);
                let tag = vec![round as u8];
                let payload = vec![(i + round) as u8; payload_for_body(&[&pk, &tag], body)];
                let fields = vec![pk.clone(), tag, payload];
                assert_eq!(encode_record(&refs(&fields)).len(), body);
                let id = match t.get_by_key(&pk).expect("by key") {
                    Some((id, _)) => t.update(id, &refs(&fields)).expect("update"),
                    None => Some(t.insert(&refs(&fields)).expect("insert")),
                }
                .expect("a record");
                assert_eq!(
                    is_overflow(id),
                    body > RECORD_INLINE_MAX_BYTES,
                    "body of {body} bytes at id {id}"
                );
                assert_eq!(t.get(id).expect("get").map(owned), Some(fields.clone()));
                assert!(
                    t.index_ids("by-round", &fields[1])
                        .expect("index")
                        .contains(&id)
                );
                model.insert(pk, fields);
            }
        }
        wtx.commit().expect("commit");
        drop(env);
        env = open(dir.path());
        assert_table(&env, "t", &schema, &model);
    }
}

/// Empty fields everywhere: an empty primary key, an empty value in a variable index and
/// in a composite one, a record of empty fields only.
#[test]
fn empty_fields_and_empty_keys_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(3)
        .primary_key(0)
        .index("one", &[1])
        .index("pair", &[1, 2])
        .global_index("everyone", &[2]);
    let mut wtx = env.begin_write().expect("write");
    let (empty, other) = {
        let mut t = wtx.open_table("t", &schema).expect("open");
        let empty = t.insert(&[b"", b"", b""]).expect("all empty");
        let other = t.insert(&[b"x", b"", b"\x00"]).expect("insert");
        assert!(matches!(
            t.insert(&[b"", b"a", b"b"]),
            Err(Error::DuplicateKey { .. })
        ));
        (empty, other)
    };
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    let (id, r) = t.get_by_key(b"").expect("by key").expect("empty key");
    assert_eq!(id, empty);
    assert_eq!(r.fields(), vec![b"", b"", b""]);
    assert_eq!(t.index_ids("one", b"").expect("one"), {
        let mut v = vec![empty, other];
        v.sort_unstable();
        v
    });
    assert_eq!(
        t.index_ids("pair", &index_key(&[b"", b""])).expect("pair"),
        vec![empty]
    );
    assert_eq!(
        t.index_ids("pair", &index_key(&[b"", b"\x00"]))
            .expect("pair"),
        vec![other]
    );
    assert_eq!(t.index_ids("everyone", b"").expect("global"), vec![empty]);
    drop(rtx);
    env.check().expect("check");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        assert!(t.delete(empty).expect("delete"));
        assert!(t.get_by_key(b"").expect("by key").is_none());
        assert_eq!(t.index_ids("one", b"").expect("one"), vec![other]);
    }
    wtx.commit().expect("commit");
    env.check().expect("check");
}

/// Keys exactly at the key limit are taken by the primary key, a variable index and a
/// composite one (whose escaping makes it longer than its fields); one byte more is
/// refused before anything changes, and the transaction still commits.
#[test]
fn index_keys_at_the_key_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(3)
        .primary_key(0)
        .index("one", &[1])
        .index("pair", &[1, 2]);
    let max = KEY_SIZE_MAX_BYTES;
    let mut wtx = env.begin_write().expect("write");
    let mut model = BTreeMap::new();
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        let too_long = |e: Result<u64, Error>| matches!(e, Err(Error::KeyTooLarge { .. }));
        assert!(too_long(t.insert(&[&vec![1u8; max + 1], b"", b""])));
        assert!(too_long(t.insert(&[b"a", &vec![1u8; max + 1], b""])));
        // Composite: field bytes + 0x00 0x00 per field, each 0x00 doubled.
        assert!(too_long(t.insert(&[b"a", &vec![0u8; max / 2 - 1], b""])));
        assert_eq!(t.len(), 0, "refusals change nothing");
        for (i, fields) in [
            vec![vec![7u8; max], b"a".to_vec(), b"b".to_vec()],
            vec![b"k1".to_vec(), vec![8u8; max - 4], Vec::new()],
            vec![b"k2".to_vec(), vec![0u8; (max - 4) / 2], Vec::new()],
        ]
        .into_iter()
        .enumerate()
        {
            let id = t
                .insert(&refs(&fields))
                .unwrap_or_else(|e| panic!("{i}: {e}"));
            let key = index_key(&[&fields[1], &fields[2]]);
            assert!(key.len() <= max);
            assert!(t.index_ids("pair", &key).expect("pair").contains(&id));
            model.insert(fields[0].clone(), fields);
        }
        // An update to a key one byte too long is refused and leaves the record.
        let (id, _) = t.get_by_key(b"k1").expect("by key").expect("present");
        assert!(matches!(
            t.update(id, &[b"k1", &vec![8u8; max + 1], b""]),
            Err(Error::KeyTooLarge { .. })
        ));
    }
    wtx.commit()
        .expect("a refused change leaves the transaction usable");
    assert_table(&env, "t", &schema, &model);
}

/// The largest field count a schema accepts, every field empty (the field table alone
/// takes an overflow run); the next count is refused.
#[test]
fn the_largest_field_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    assert!(matches!(
        env.begin_write()
            .expect("write")
            .open_table("t", &Schema::new(u16::MAX)),
        Err(Error::InvalidArgument(_))
    ));
    let count = u16::MAX - 1;
    let last = count - 1;
    let schema = Schema::new(count).primary_key(last).index("first", &[0]);
    let mut fields: Fields = vec![Vec::new(); usize::from(count)];
    fields[usize::from(last)] = b"pk".to_vec();
    let mut wtx = env.begin_write().expect("write");
    let id = {
        let mut t = wtx.open_table("t", &schema).expect("open");
        assert!(matches!(
            t.insert(&refs(&fields)[1..]),
            Err(Error::InvalidArgument(_))
        ));
        let id = t.insert(&refs(&fields)).expect("insert");
        assert!(is_overflow(id));
        fields[0] = b"first".to_vec();
        t.update(id, &refs(&fields))
            .expect("update")
            .expect("found")
    };
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    let record = t.get(id).expect("get").expect("present");
    assert_eq!(record.len(), usize::from(count));
    assert_eq!(record.field(0), Some(&b"first"[..]));
    assert_eq!(record.field(usize::from(last)), Some(&b"pk"[..]));
    assert_eq!(record.field(usize::from(count)), None);
    assert_eq!(record.fields(), refs(&fields));
    assert_eq!(t.index_ids("first", b"first").expect("index"), vec![id]);
    drop(rtx);
    env.check().expect("check");
}

/// A fixed index takes 0 and `u64::MAX`, orders numerically, stays unique, and refuses a
/// field that is not 8 bytes.
#[test]
fn fixed_index_extremes_and_uniqueness() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).fixed_index("n", 1);
    let numbers = [u64::MAX, 0, 1 << 63, (1 << 63) - 1, 1, u64::MAX - 1];
    let mut wtx = env.begin_write().expect("write");
    let mut want = Vec::new();
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for (i, n) in numbers.into_iter().enumerate() {
            let id = t.insert(&[&[i as u8], &n.to_be_bytes()]).expect("insert");
            want.push((n, id));
        }
        assert!(matches!(
            t.insert(&[b"dup", &u64::MAX.to_be_bytes()]),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(matches!(
            t.insert(&[b"short", &[0u8; 7]]),
            Err(Error::InvalidArgument(_))
        ));
        // A record may keep its own number; taking another's is refused.
        let (_, zero_id) = want[1];
        assert_eq!(
            t.update(zero_id, &[b"z", &0u64.to_be_bytes()])
                .expect("keep own"),
            Some(zero_id)
        );
        assert!(matches!(
            t.update(zero_id, &[b"z", &1u64.to_be_bytes()]),
            Err(Error::DuplicateKey { .. })
        ));
    }
    wtx.commit().expect("commit");
    want.sort_unstable();
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    assert_eq!(t.fixed_index_range("n", ..).expect("range"), want);
    assert_eq!(
        t.fixed_index_range("n", u64::MAX..).expect("range"),
        vec![*want.last().expect("last")]
    );
    assert_eq!(
        t.index_ids("n", &u64::MAX.to_be_bytes()).expect("ids"),
        vec![want.last().expect("last").1]
    );
    // Not an empty answer, which would read as "no such record": no key of another
    // length can be in a fixed index.
    assert!(matches!(
        t.index_ids("n", b"short"),
        Err(Error::InvalidArgument(message)) if message.contains("8 bytes")
    ));
    assert!(matches!(
        t.index_range::<&[u8], _>("n", ..),
        Err(Error::InvalidArgument(_))
    ));
    drop(rtx);
    env.check().expect("check");
}

/// Every record deleted (through the primary key, as ids move), then the table filled
/// again; pages go back to the free space, and the table works after each reopen.
#[test]
fn delete_all_then_reuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(4)
        .primary_key(0)
        .index("group", &[1])
        .fixed_index("seq", 2);
    let mut env = open(dir.path());
    let empty_pages = {
        let mut wtx = env.begin_write().expect("write");
        wtx.open_table("t", &schema).expect("create");
        wtx.commit().expect("commit");
        env.check().expect("check").used_pages
    };
    for round in 0..3u64 {
        let mut model = BTreeMap::new();
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_table("t", &schema).expect("open");
            for i in 0..1_500u64 {
                let r = mix(round * 10_000 + i);
                let len = match r % 10 {
                    0 => 2_000 + (r >> 8) as usize % 3_000,
                    1 => 1_000 + (r >> 8) as usize % 1_000,
                    _ => (r >> 8) as usize % 200,
                };
                let fields = vec![
                    format!("k{i:05}").into_bytes(),
                    format!("g{}", r % 5).into_bytes(),
                    (round * 10_000 + i).to_be_bytes().to_vec(),
                    vec![b'.'; len],
                ];
                t.insert(&refs(&fields)).expect("insert");
                model.insert(fields[0].clone(), fields);
            }
        }
        wtx.commit().expect("commit");
        drop(env);
        env = open(dir.path());
        assert_table(&env, "t", &schema, &model);
        // Delete in an order unrelated to the layout, half in one transaction.
        let mut keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        keys.sort_by_key(|k| mix(k.iter().map(|&b| u64::from(b)).sum::<u64>() ^ round));
        for half in keys.chunks(keys.len() / 2 + 1) {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_table("t", &schema).expect("open");
                for key in half {
                    let (id, _) = t.get_by_key(key).expect("by key").expect("present");
                    assert!(t.delete(id).expect("delete"));
                    assert!(t.get_by_key(key).expect("by key").is_none());
                    model.remove(key);
                }
            }
            wtx.commit().expect("commit");
            drop(env);
            env = open(dir.path());
            assert_table(&env, "t", &schema, &model);
        }
        let used = env.check().expect("check").used_pages;
        assert!(
            used <= empty_pages + 8,
            "round {round}: {used} pages in use for an empty table, {empty_pages} when new"
        );
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_table("t", &schema).expect("open");
        assert!(t.scan().expect("scan").next().is_none());
        assert!(t.fixed_index_range("seq", ..).expect("range").is_empty());
        assert!(
            t.index_range::<&[u8], _>("group", ..)
                .expect("range")
                .is_empty()
        );
    }
}

/// A cursor walks the records in id order both ways after deletes; a seek to a deleted
/// id lands on the next record; a walk that deletes every other record leaves indexes
/// and counts that agree.
#[test]
fn id_order_cursors_after_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(3).primary_key(0).index("class", &[2]);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..600u32 {
            let len = if i % 50 == 7 {
                5_000
            } else {
                (i as usize * 37) % 300
            };
            t.insert(&[&i.to_be_bytes(), &vec![b'x'; len], &[(i % 3) as u8]])
                .expect("insert");
        }
        // Delete a fifth, spread out, inside the same transaction.
        for i in (0..600u32).filter(|i| i % 5 == 2) {
            let (id, _) = t
                .get_by_key(&i.to_be_bytes())
                .expect("by key")
                .expect("present");
            assert!(t.delete(id).expect("delete"));
        }
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    let ids: Vec<u64> = t
        .scan()
        .expect("scan")
        .map(|e| e.map(|(id, _)| id))
        .collect::<Result<_, _>>()
        .expect("scan");
    assert_eq!(ids.len(), 480);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ascending ids");
    let mut cursor = t.cursor();
    let mut forward = Vec::new();
    let mut at = cursor.first().expect("first").map(|(id, _)| id);
    while let Some(id) = at {
        forward.push(id);
        at = cursor.next().expect("next").map(|(id, _)| id);
    }
    assert_eq!(forward, ids);
    let mut backward = Vec::new();
    let mut at = cursor.last().expect("last").map(|(id, _)| id);
    while let Some(id) = at {
        backward.push(id);
        at = cursor.prev().expect("prev").map(|(id, _)| id);
    }
    backward.reverse();
    assert_eq!(backward, ids);
    // A seek between records (an id no record has) lands on the next one.
    for pair in ids.windows(2) {
        if pair[1] - pair[0] > 1 {
            let got = cursor.seek(pair[0] + 1).expect("seek").map(|(id, _)| id);
            assert_eq!(got, Some(pair[1]));
        }
    }
    assert!(
        cursor
            .seek(ids.last().expect("last") + 1)
            .expect("seek")
            .is_none()
    );
    drop(rtx);

    let mut wtx = env.begin_write().expect("write");
    let left = {
        let mut t = wtx.open_table("t", &schema).expect("open");
        let mut cursor = t.cursor();
        let mut n = 0u32;
        let mut at = cursor.first().expect("first").is_some();
        while at {
            if n.is_multiple_of(2) {
                assert!(cursor.delete().expect("delete"));
            }
            n += 1;
            at = cursor.next().expect("next").is_some();
        }
        let scanned = t.scan().expect("scan").count() as u64;
        assert_eq!(t.len(), scanned);
        scanned
    };
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    assert_eq!(t.len(), left);
    assert_eq!(
        t.scan_by_key::<&[u8], _>(..).expect("keys").len() as u64,
        left
    );
    assert_eq!(
        t.index_range::<&[u8], _>("class", ..).expect("range").len() as u64,
        left
    );
    drop(rtx);
    env.check().expect("check");
}

/// Two tables share a global variable index and a global fixed index, changed in turns
/// in one transaction through handles; the fixed one is unique across both; deleting one
/// table takes only its entries, migrating the other off the indexes empties them.
#[test]
fn global_indexes_shared_by_two_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let a_schema = Schema::new(4)
        .primary_key(0)
        .global_index("g", &[1])
        .global_fixed_index("n", 2);
    let b_schema = Schema::new(4)
        .global_index("g", &[1])
        .global_fixed_index("n", 2)
        .index("local", &[0]);
    let mut wtx = env.begin_write().expect("write");
    let a = wtx.table_handle("a", &a_schema).expect("a");
    let b = wtx.table_handle("b", &b_schema).expect("b");
    // (table, key field 0) → (group, number)
    let mut model: BTreeMap<(char, u64), (u64, u64)> = BTreeMap::new();
    for i in 0..400u64 {
        let (table, handle) = if i % 3 == 0 { ('b', &b) } else { ('a', &a) };
        let mut t = handle.table_mut(&mut wtx).expect("bind");
        let group = i % 4;
        let big = if i % 25 == 0 { 3_000 } else { 10 };
        let fields = vec![
            i.to_be_bytes().to_vec(),
            format!("g{group}").into_bytes(),
            (1_000 + i).to_be_bytes().to_vec(),
            vec![0u8; big],
        ];
        t.insert(&refs(&fields)).expect("insert");
        model.insert((table, i), (group, 1_000 + i));
        if i % 7 == 0 && i > 0 {
            // Another table's number is taken too.
            let other = if table == 'a' { &b } else { &a };
            let mut o = other.table_mut(&mut wtx).expect("bind");
            assert!(matches!(
                o.insert(&[b"dup", b"g0", &(1_000 + i).to_be_bytes(), b""]),
                Err(Error::DuplicateKey { .. })
            ));
        }
    }
    wtx.commit().expect("commit");
    env.check().expect("check");

    let global_counts = |env: &Environment| {
        let rtx = env.begin_read().expect("read");
        let g = rtx.open_multi_tree("g").expect("g");
        let groups: Vec<u64> = (0..4)
            .map(|k| g.count(format!("g{k}").as_bytes()).expect("count"))
            .collect();
        let n = rtx.open_fixed_tree("n").expect("n").len();
        (groups, n)
    };
    let want = |model: &BTreeMap<(char, u64), (u64, u64)>| {
        let mut groups = vec![0u64; 4];
        for (group, _) in model.values() {
            groups[*group as usize] += 1;
        }
        (groups, model.len() as u64)
    };
    assert_eq!(global_counts(&env), want(&model));

    // Every number and group id names a live record of one of the tables.
    {
        let rtx = env.begin_read().expect("read");
        let ta = rtx.open_table("a", &a_schema).expect("a");
        let tb = rtx.open_table("b", &b_schema).expect("b");
        let n = rtx.open_fixed_tree("n").expect("n");
        for entry in n.range(..).expect("range") {
            let (number, id) = entry.expect("entry");
            let id = u64::from_be_bytes(id.try_into().expect("8"));
            let record = ta
                .get(id)
                .expect("get")
                .or_else(|| tb.get(id).expect("get"))
                .expect("a live record");
            assert_eq!(record.field(2), Some(&number.to_be_bytes()[..]));
        }
    }

    // Deleting "a" takes exactly its entries out of both global indexes.
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("a").expect("delete a"));
    wtx.commit().expect("commit");
    model.retain(|(table, _), _| *table == 'b');
    assert_eq!(global_counts(&env), want(&model));
    env.check().expect("check");

    // Migrating "b" off the global indexes empties them; its local index is rebuilt.
    let plain = Schema::new(4).index("local", &[0]);
    let mut wtx = env.begin_write().expect("write");
    wtx.migrate_table("b", &plain).expect("migrate");
    wtx.commit().expect("commit");
    assert_eq!(global_counts(&env), (vec![0; 4], 0));
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("b", &plain).expect("b");
    assert_eq!(t.len(), model.len() as u64);
    assert_eq!(
        t.index_range::<&[u8], _>("local", ..).expect("local").len(),
        model.len()
    );
    drop(rtx);
    env.check().expect("check");
    let mut wtx = env.begin_write().expect("write");
    assert!(wtx.delete_tree("g").expect("no table uses it now"));
    wtx.commit().expect("commit");
    env.check().expect("check");
}

/// A migration that changes every index (primary key dropped and taken again on another
/// field, index fields changed, a fixed index added) over inline and overflow records;
/// the new indexes name every record, the old schema no longer opens it.
#[test]
fn migration_rebuilds_every_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = open(dir.path());
    // (name, number, key, payload)
    let before = Schema::new(4)
        .primary_key(0)
        .index("x", &[1])
        .index("gone", &[2]);
    let after = Schema::new(4)
        .primary_key(2)
        .index("x", &[2, 1])
        .fixed_index("num", 1);
    let record = |i: u64| {
        let len = if i.is_multiple_of(10) { 4_000 } else { 40 };
        vec![
            format!("p{i}").into_bytes(),
            i.to_be_bytes().to_vec(),
            format!("k{i:04}").into_bytes(),
            vec![b'.'; len],
        ]
    };
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &before).expect("open");
        for i in 0..150u64 {
            t.insert(&refs(&record(i))).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &before).expect("open");
        for i in 150..302u64 {
            t.insert(&refs(&record(i))).expect("insert");
        }
        for i in (0..302u64).step_by(7) {
            let (id, _) = t
                .get_by_key(&record(i)[0])
                .expect("by key")
                .expect("present");
            let mut grown = record(i);
            grown[3] = vec![b'+'; 2_500];
            t.update(id, &refs(&grown)).expect("update");
        }
    }
    // Migrating in the same transaction as changes.
    {
        let t = wtx.migrate_table("t", &after).expect("migrate");
        assert_eq!(t.len(), 302);
    }
    wtx.commit().expect("commit");
    drop(env);
    env = open(dir.path());
    let rtx = env.begin_read().expect("read");
    assert!(matches!(
        rtx.open_table("t", &before),
        Err(Error::SchemaMismatch { .. })
    ));
    let t = rtx.open_table("t", &after).expect("open");
    let mut seen = BTreeSet::new();
    for entry in t.scan().expect("scan") {
        let (id, r) = entry.expect("record");
        let (by_key, _) = t
            .get_by_key(r.field(2).expect("f"))
            .expect("by key")
            .expect("present");
        assert_eq!(by_key, id);
        assert_eq!(
            t.index_ids("num", r.field(1).expect("f")).expect("num"),
            vec![id]
        );
        let x = index_key(&[r.field(2).expect("f"), r.field(1).expect("f")]);
        assert_eq!(t.index_ids("x", &x).expect("x"), vec![id]);
        seen.insert(id);
    }
    assert_eq!(seen.len(), 302);
    assert!(matches!(
        t.index_ids("gone", b""),
        Err(Error::InvalidArgument(_))
    ));
    drop(rtx);
    env.check().expect("check");
}

/// Refused inserts and updates (duplicate key, wrong field count, a fixed field of the
/// wrong size, a key too large) change nothing, moved or not, and the transaction
/// commits what else it did.
#[test]
fn refused_changes_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(3)
        .primary_key(0)
        .index("v", &[1])
        .fixed_index("n", 2);
    let mut model = BTreeMap::new();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..50u64 {
            let fields = vec![
                format!("k{i:02}").into_bytes(),
                vec![b'v'; (i as usize * 97) % 1_900],
                i.to_be_bytes().to_vec(),
            ];
            t.insert(&refs(&fields)).expect("insert");
            model.insert(fields[0].clone(), fields);
        }
        let (id, _) = t.get_by_key(b"k10").expect("by key").expect("present");
        let big = vec![b'B'; 9_000];
        let (ten, eleven) = (10u64.to_be_bytes(), 11u64.to_be_bytes());
        let refused: Vec<Vec<&[u8]>> = vec![
            vec![b"k11", b"", &ten],
            vec![b"k10", &big, &eleven],
            vec![b"k10", &big],
            vec![b"k10", &big, b"seven!!"],
            vec![b"k10", &[1u8; KEY_SIZE_MAX_BYTES + 1], &ten],
        ];
        for fields in &refused {
            assert!(t.update(id, fields).is_err(), "{:?}", fields.len());
            assert!(t.insert(fields).is_err());
        }
        assert_eq!(t.len(), 50);
        assert_eq!(
            t.get(id).expect("get").map(owned).as_ref(),
            model.get(&b"k10"[..])
        );
        // Inside the record's slot: no record starts there.
        assert!(
            t.update(id + 8, &refs(&model[&b"k10"[..]]))
                .expect("update")
                .is_none()
        );
        assert!(!t.delete(id + 8).expect("delete"));
    }
    wtx.commit().expect("commit");
    assert_table(&env, "t", &schema, &model);
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    for (pk, fields) in &model {
        let (id, _) = t.get_by_key(pk).expect("by key").expect("present");
        assert!(t.index_ids("v", &fields[1]).expect("v").contains(&id));
        assert_eq!(t.index_ids("n", &fields[2]).expect("n"), vec![id]);
    }
}

/// A reader that began before records moved (pages emptied and freed, candidates
/// compacted) still reads every record of its snapshot, by id and in id order.
#[test]
fn old_snapshots_survive_record_moves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).primary_key(0);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..2_000u32 {
            t.insert(&[&i.to_be_bytes(), &vec![i as u8; 60 + i as usize % 90]])
                .expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let old = rtx.open_table("t", &schema).expect("open");
    let before: Vec<(u64, Fields)> = old
        .scan()
        .expect("scan")
        .map(|e| e.map(|(id, r)| (id, owned(r))))
        .collect::<Result<_, _>>()
        .expect("scan");
    for round in 0..4u32 {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_table("t", &schema).expect("open");
            for i in (0..2_000u32).filter(|i| i % 4 != round) {
                if let Some((id, _)) = t.get_by_key(&i.to_be_bytes()).expect("by key") {
                    if i % 3 == 0 {
                        t.update(id, &[&i.to_be_bytes(), &[round as u8; 300]])
                            .expect("update");
                    } else {
                        t.delete(id).expect("delete");
                    }
                }
            }
            for i in 0..200u32 {
                let key = (10_000 + round * 1_000 + i).to_be_bytes();
                t.insert(&[&key, &[0xEE; 40]]).expect("insert");
            }
        }
        wtx.commit().expect("commit");
        env.check().expect("check");
    }
    let again: Vec<(u64, Fields)> = old
        .scan()
        .expect("scan")
        .map(|e| e.map(|(id, r)| (id, owned(r))))
        .collect::<Result<_, _>>()
        .expect("scan");
    assert_eq!(again, before, "the snapshot's records, in its id order");
    for (id, fields) in &before {
        assert_eq!(old.get(*id).expect("get").map(owned).as_ref(), Some(fields));
    }
}

/// Random inserts, updates (sizes around the slot and inline limits) and deletes with a
/// reopen every few transactions, against a model; every index and id checked.
#[test]
fn random_sizes_around_the_limits_match_a_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(3)
        .primary_key(0)
        .index("g", &[1])
        .index("pair", &[1, 0]);
    let sizes = [
        0usize,
        3,
        4,
        11,
        12,
        500,
        1_200,
        1_205,
        RECORD_INLINE_MAX_BYTES - 20,
        RECORD_INLINE_MAX_BYTES - 13,
        RECORD_INLINE_MAX_BYTES - 12,
        RECORD_INLINE_MAX_BYTES,
        RECORD_INLINE_MAX_BYTES + 3,
        9_000,
    ];
    let mut env = open(dir.path());
    let mut model: BTreeMap<Vec<u8>, Fields> = BTreeMap::new();
    let txns = 30 * common::scale();
    for txn in 0..txns {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_table("t", &schema).expect("open");
            for op in 0..120u64 {
                let r = mix(txn * 1_000 + op);
                let pk = format!("k{:03}", r % 300).into_bytes();
                let group = format!("g{}", (r >> 9) % 3).into_bytes();
                let payload = vec![(r >> 20) as u8; sizes[(r >> 12) as usize % sizes.len()]];
                let fields = vec![pk.clone(), group, payload];
                match t.get_by_key(&pk).expect("by key") {
                    Some((id, _)) if r.is_multiple_of(3) => {
                        assert!(t.delete(id).expect("delete"));
                        model.remove(&pk);
                    }
                    Some((id, _)) => {
                        let new_id = t
                            .update(id, &refs(&fields))
                            .expect("update")
                            .expect("found");
                        assert_eq!(t.get(new_id).expect("get").map(owned), Some(fields.clone()));
                        model.insert(pk, fields);
                    }
                    None => {
                        t.insert(&refs(&fields)).expect("insert");
                        model.insert(pk, fields);
                    }
                }
            }
            assert_eq!(t.len(), model.len() as u64);
        }
        wtx.commit().expect("commit");
        if txn % 5 == 4 {
            drop(env);
            env = open(dir.path());
        }
        assert_table(&env, "t", &schema, &model);
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_table("t", &schema).expect("open");
        let mut want: Vec<(Vec<u8>, u64)> = Vec::new();
        for (pk, fields) in &model {
            let (id, _) = t.get_by_key(pk).expect("by key").expect("present");
            want.push((fields[1].clone(), id));
        }
        want.sort();
        assert_eq!(t.index_range::<&[u8], _>("g", ..).expect("g"), want);
    }
}

/// Rewrites page `page_number` of a closed environment's data file with `damage`, its
/// checksum made valid again (what a bug writing a bad page would leave).
fn damage_page(dir: &Path, page_number: u64, damage: impl FnOnce(&mut [u8])) {
    let path = dir.join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("read");
    let at = page_number as usize * PAGE_SIZE_BYTES;
    let page = &mut data[at..at + PAGE_SIZE_BYTES];
    damage(page);
    hrafn::page::seal(page, page_number);
    std::fs::write(&path, &data).expect("write");
}

/// A table of one-field records of `sizes` bytes, committed and closed; their ids.
fn closed_table(dir: &Path, schema: &Schema, sizes: &[usize]) -> Vec<u64> {
    let env = open(dir);
    let mut wtx = env.begin_write().expect("write");
    let ids = {
        let mut t = wtx.open_table("t", schema).expect("open");
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| t.insert(&[&vec![i as u8; len]]).expect("insert"))
            .collect()
    };
    wtx.commit().expect("commit");
    ids
}

fn put_u16_at(page: &mut [u8], at: usize, value: u16) {
    page[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

/// A record page whose allocation mark is damaged (checksum made valid again) is an
/// error or no record when read by id, never a panic.
#[test]
fn a_damaged_record_page_is_an_error_not_a_panic() {
    use hrafn::page::OFFSET_FREE_LOWER;
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(1);
    // The last record starts near the page's end: its slot would reach past it if the
    // allocation mark were larger than the page.
    let id = *closed_table(dir.path(), &schema, &[100, 2_000, 2_000, 2_000])
        .last()
        .expect("ids");
    let offset = (id % PAGE_SIZE_BYTES as u64) as usize;
    damage_page(dir.path(), id / PAGE_SIZE_BYTES as u64, |page| {
        // The record claims a slot past the page's end, and the mark lets it.
        put_u16_at(page, offset, PAGE_SIZE_BYTES as u16 - 8);
        put_u16_at(page, offset + 2, PAGE_SIZE_BYTES as u16);
        put_u16_at(page, OFFSET_FREE_LOWER, u16::MAX);
    });
    let env = open(dir.path());
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    assert!(matches!(t.get(id), Err(Error::Corruption { .. })));
    assert!(t.scan().expect("scan").any(|e| e.is_err()));
    drop(rtx);
    assert!(env.check().is_err());
}

/// Damage to the active record page's allocation mark or live counts makes changes fail
/// with `Corruption` (the transaction then refuses to commit), never a panic nor a record
/// written over the page header.
#[test]
fn a_damaged_active_page_fails_changes_not_panics() {
    use hrafn::page::{OFFSET_ENTRY_COUNT, OFFSET_FREE_LOWER, OFFSET_FREE_UPPER};
    let schema = Schema::new(1);
    type Damage = fn(&mut [u8]);
    let damages: [(&str, Damage); 3] = [
        ("mark below the records", |p| {
            put_u16_at(p, OFFSET_FREE_LOWER, 0)
        }),
        ("no live bytes", |p| put_u16_at(p, OFFSET_FREE_UPPER, 0)),
        ("no live records", |p| put_u16_at(p, OFFSET_ENTRY_COUNT, 0)),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = closed_table(dir.path(), &schema, &[40, 40, 40]);
        damage_page(dir.path(), ids[0] / PAGE_SIZE_BYTES as u64, damage);
        let env = open(dir.path());
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_table("t", &schema).expect("open");
            let deleted = t.delete(ids[1]);
            let inserted = t.insert(&[b"new"]);
            assert!(
                matches!(inserted, Err(Error::Corruption { .. }))
                    || matches!(deleted, Err(Error::Corruption { .. })),
                "{what}: {inserted:?} {deleted:?}"
            );
        }
        assert!(
            matches!(wtx.commit(), Err(Error::TransactionFailed { .. })),
            "{what}"
        );
        assert!(env.check().is_err(), "{what}: the check sees it too");
    }
}

/// A migration to a global index whose name holds another kind of tree, or is the
/// table's own, is refused before anything changes, as at creation: the transaction
/// still commits.
#[test]
fn a_migration_to_a_bad_global_name_is_refused_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).primary_key(0).global_index("g", &[1]);
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("plain").expect("plain");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..20u32 {
            t.insert(&[&i.to_be_bytes(), b"x"]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    assert!(matches!(
        wtx.migrate_table(
            "t",
            &Schema::new(2).primary_key(0).global_index("plain", &[1])
        ),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        wtx.migrate_table("t", &Schema::new(2).primary_key(0).global_index("t", &[1])),
        Err(Error::InvalidArgument(_))
    ));
    wtx.open_table("t", &schema)
        .expect("the stored schema still opens")
        .insert(&[b"new", b"y"])
        .expect("insert");
    wtx.commit()
        .expect("a refused migration leaves the transaction usable");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    assert_eq!(t.len(), 21);
    assert_eq!(t.index_ids("g", b"x").expect("g").len(), 20);
    drop(rtx);
    env.check().expect("check");
}

/// The check finds a global index entry that names no record of the tables sharing it
/// (written through the index's own tree), as it does for a local index.
#[test]
fn the_check_sees_a_dangling_global_index_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).global_index("g", &[1]);
    let mut wtx = env.begin_write().expect("write");
    let id = wtx
        .open_table("t", &schema)
        .expect("open")
        .insert(&[b"a", b"x"])
        .expect("insert");
    wtx.open_multi_tree("g")
        .expect("g")
        .add(b"x", (id + 8).to_be_bytes())
        .expect("add");
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_table("t", &schema).expect("open");
    let ids = t.index_ids("g", b"x").expect("g");
    assert_eq!(ids.len(), 2);
    assert!(t.get(id + 8).expect("get").is_none(), "names no record");
    drop(rtx);
    assert!(
        matches!(env.check(), Err(hrafn::Error::Corruption { .. })),
        "an index entry that names no record is damage"
    );
}

/// Records deleted from the active page while it fills (a few long-lived records among
/// many short-lived ones) leave sparse pages behind once it is full: the page policy
/// still reclaims them, so the table keeps near the pages its live records need.
#[test]
fn pages_left_sparse_while_active_are_reclaimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).primary_key(0);
    let empty = {
        let mut wtx = env.begin_write().expect("write");
        wtx.open_table("t", &schema).expect("create");
        wtx.commit().expect("commit");
        env.check().expect("check").used_pages
    };
    const KEPT: u32 = 2_000;
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_table("t", &schema).expect("open");
        for i in 0..KEPT {
            t.insert(&[&i.to_be_bytes(), &[1u8; 100]]).expect("keep");
            let short: Vec<[u8; 4]> = (0..20u32)
                .map(|j| (1_000_000 + i * 100 + j).to_be_bytes())
                .collect();
            for key in &short {
                t.insert(&[key, &[2u8; 100]]).expect("short");
            }
            // By key: a delete may move other records (a page emptied below 15%).
            for key in &short {
                let (id, _) = t.get_by_key(key).expect("by key").expect("present");
                assert!(t.delete(id).expect("delete"));
            }
        }
        assert_eq!(t.len(), u64::from(KEPT));
    }
    wtx.commit().expect("commit");
    let used = env.check().expect("check").used_pages - empty;
    // 2,000 slots of 112 bytes fill 28 record pages; the pk tree takes a few more.
    let dense = u64::from(KEPT) * 112 / 8_032 + 1;
    assert!(
        used <= 3 * dense + 10,
        "{used} pages for {KEPT} records that fill {dense}"
    );
}

/// A stored record that no longer fits its schema (here, damage that leaves a well-formed
/// record of one field in a table of two) is corruption when a change meets it: the
/// change may be half done, so the transaction refuses to commit, instead of the error
/// passing for a refused argument that leaves the transaction free to commit.
#[test]
fn a_stored_record_that_does_not_fit_the_schema_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(2);
    let id = {
        let env = open(dir.path());
        let mut wtx = env.begin_write().expect("write");
        let id = wtx
            .open_table("t", &schema)
            .expect("open")
            .insert(&[b"ab", b"cd"])
            .expect("insert");
        wtx.commit().expect("commit");
        id
    };
    let offset = (id % PAGE_SIZE_BYTES as u64) as usize;
    damage_page(dir.path(), id / PAGE_SIZE_BYTES as u64, |page| {
        // Body: count 2, lengths 2 and 2, "abcd" (14 bytes) becomes count 1, one field of
        // the 8 bytes after its length.
        let body = offset + 4;
        put_u16_at(page, body, 1);
        page[body + 2..body + 6].copy_from_slice(&8u32.to_le_bytes());
    });
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    let deleted = wtx.open_table("t", &schema).expect("open").delete(id);
    assert!(
        matches!(deleted, Err(Error::Corruption { .. })),
        "{deleted:?}"
    );
    assert!(matches!(wtx.commit(), Err(Error::TransactionFailed { .. })));
}

/// Deleting a table takes its records out of the global indexes it shares; when that
/// fails half way (an entry was removed from the index directly), the transaction can no
/// longer commit, rather than committing a half-cleaned index.
#[test]
fn a_table_deletion_that_fails_half_way_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).global_index("g", &[1]);
    let mut wtx = env.begin_write().expect("write");
    let ids: Vec<u64> = {
        let mut t = wtx.open_table("t", &schema).expect("open");
        (0..3u8)
            .map(|i| t.insert(&[&[i], b"shared"]).expect("insert"))
            .collect()
    };
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    assert!(
        wtx.open_multi_tree("g")
            .expect("the index")
            .remove(b"shared", ids[2].to_be_bytes())
            .expect("remove"),
        "the entry was there"
    );
    assert!(wtx.delete_tree("t").is_err());
    assert!(matches!(wtx.commit(), Err(Error::TransactionFailed { .. })));
    // Nothing of it was kept.
    let rtx = env.begin_read().expect("read");
    assert_eq!(rtx.open_table("t", &schema).expect("open").len(), 3);
}

/// A global fixed index written both directly and through its table in one transaction:
/// the table's inserts split the leaf the direct inserts appended to, and the next direct
/// insert still goes where its key belongs (not after the first half's keys).
#[test]
fn direct_appends_to_a_global_fixed_index_after_table_inserts_stay_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = open(dir.path());
    let schema = Schema::new(2).global_fixed_index("f", 1);
    let mut wtx = env.begin_write().expect("write");
    wtx.open_table("t", &schema).expect("create");
    {
        let mut f = wtx.open_fixed_tree("f", 8).expect("the index");
        for k in 1_000_000..1_000_010u64 {
            f.insert(k, &[0; 8]).expect("append");
        }
    }
    {
        // Smaller keys: the leaf the appends left their hint on fills and splits in two,
        // and no longer ends the tree.
        let mut t = wtx.open_table("t", &schema).expect("open");
        for k in 0..2_000u64 {
            t.insert(&[b"r", &k.to_be_bytes()]).expect("insert");
        }
    }
    wtx.open_fixed_tree("f", 8)
        .expect("the index")
        .insert(u64::MAX, &[0; 8])
        .expect("append");
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let keys: Vec<u64> = rtx
        .open_fixed_tree("f")
        .expect("the index")
        .range(..)
        .expect("range")
        .map(|e| e.expect("entry").0)
        .collect();
    assert!(keys.is_sorted(), "keys out of order");
    assert_eq!(keys.len(), 10 + 2_000 + 1);
    assert_eq!(keys.last(), Some(&u64::MAX));
    // (The integrity check would name the direct entries: no record gives them.)
}

/// Deleting a table whose overflow run claims more pages than its record fills (its
/// checksum made valid again) fails with `Corruption`: freeing the run's claimed length
/// would free pages of another tree.
#[test]
fn deleting_a_table_checks_its_runs_before_freeing_them() {
    use hrafn::page::{OFFSET_AUX, get_u64, put_u64};
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(1);
    let id = {
        let env = open(dir.path());
        let mut wtx = env.begin_write().expect("write");
        let id = wtx
            .open_table("t", &schema)
            .expect("open")
            .insert(&[&vec![7u8; 20_000]])
            .expect("insert");
        // Pages allocated after the run, which a longer run would take in.
        let mut other = wtx.open_tree("other").expect("tree");
        for i in 0..50u32 {
            other.insert(i.to_be_bytes(), [1u8; 1_000]).expect("insert");
        }
        wtx.commit().expect("commit");
        id
    };
    assert!(is_overflow(id));
    // The run's length grows by two pages, and its checksum, which covers the whole run,
    // is made valid over the longer run.
    let path = dir.path().join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("read");
    let at = id as usize;
    let len = get_u64(&data[at..], OFFSET_AUX) + 2 * PAGE_SIZE_BYTES as u64;
    put_u64(&mut data[at..], OFFSET_AUX, len);
    let run_bytes = hrafn::page::overflow_page_count(len) as usize * PAGE_SIZE_BYTES;
    hrafn::page::seal(&mut data[at..at + run_bytes], id / PAGE_SIZE_BYTES as u64);
    std::fs::write(&path, &data).expect("write");
    let env = open(dir.path());
    let mut wtx = env.begin_write().expect("write");
    let deleted = wtx.delete_tree("t");
    assert!(
        matches!(deleted, Err(Error::Corruption { .. })),
        "{deleted:?}"
    );
    assert!(matches!(wtx.commit(), Err(Error::TransactionFailed { .. })));
    assert_eq!(
        common::value_of(&env, "other", &7u32.to_be_bytes()),
        Some(vec![1u8; 1_000])
    );
}

/// A table state whose active page names a page that is not one of the table's record
/// pages (its checksum made valid again) is damage the check reports: every later insert
/// would fail on it.
#[test]
fn the_check_sees_an_active_page_that_is_not_a_record_page() {
    use hrafn::page::{OFFSET_AUX, get_u64};
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Schema::new(1);
    let ids = closed_table(dir.path(), &schema, &[40, 40]);
    let active = ids[0] / PAGE_SIZE_BYTES as u64;
    {
        let env = open(dir.path());
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("other")
            .expect("tree")
            .insert(b"k", b"v")
            .expect("insert");
        wtx.commit().expect("commit");
        env.check().expect("check before the damage");
    }
    let data = std::fs::read(dir.path().join(hrafn::DATA_FILE)).expect("read");
    let at = active as usize * PAGE_SIZE_BYTES;
    let tag = get_u64(&data[at..at + PAGE_SIZE_BYTES], OFFSET_AUX);
    // The state: the table's tag, then its active page.
    let state = [tag.to_le_bytes(), active.to_le_bytes()].concat();
    let found = data
        .windows(state.len())
        .position(|w| w == state.as_slice())
        .expect("the table's state in the data file");
    let (state_page, in_page) = (found / PAGE_SIZE_BYTES, found % PAGE_SIZE_BYTES);
    // Another page in use: the last one, which the later commit allocated.
    let other = (data.len() / PAGE_SIZE_BYTES - 1) as u64;
    assert_ne!(other, active);
    damage_page(dir.path(), state_page as u64, |page| {
        page[in_page + 8..in_page + 16].copy_from_slice(&other.to_le_bytes());
    });
    let env = open(dir.path());
    let checked = env.check();
    assert!(
        matches!(checked, Err(Error::Corruption { .. })),
        "{checked:?}"
    );
}
