//! Compaction (`Environment::compact_to`): every kind of structure copied entry by entry
//! from a database whose data file is mostly free pages, the copy much smaller and sound;
//! a copy made while another thread keeps committing is one snapshot; a target that holds
//! anything is refused; a global index holding entries its tables do not give is refused.

mod common;

use common::{mix, summary};
use hrafn::btree::TreeKind;
use hrafn::table::{Schema, index_key};
use hrafn::walk::{Item, Loader};
use hrafn::{Durability, Environment, Error, FixedTree, MultiTree, Options, ReadTxn, Tree};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn options() -> Options {
    Options::default().durability(Durability::None)
}

/// (email, city, sequence number as u64 big-endian, payload): primary key, a variable
/// index, a unique fixed index, and a global index shared with `offices`.
fn people() -> Schema {
    Schema::new(4)
        .primary_key(0)
        .index("by-city", &[1])
        .fixed_index("by-seq", 2)
        .global_index("everyone-by-city", &[1])
}

/// (name, city): no primary key, the same global index.
fn offices() -> Schema {
    Schema::new(2).global_index("everyone-by-city", &[1])
}

const DOCS: u64 = 40_000;
const SERIES: u64 = 200_000;
const PEOPLE: u64 = 20_000;
const TAGS: u64 = 2_000;

fn person(i: u64) -> Vec<Vec<u8>> {
    vec![
        format!("person{i:06}@example.com").into_bytes(),
        format!("city{}", mix(i) % 37).into_bytes(),
        i.to_be_bytes().to_vec(),
        vec![(i % 251) as u8; 200 + (mix(i) % 400) as usize],
    ]
}

fn refs(fields: &[Vec<u8>]) -> Vec<&[u8]> {
    fields.iter().map(Vec::as_slice).collect()
}

/// Every kind of structure, filled, then 99% of it deleted.
fn build(env: &Environment) -> hrafn::Result<()> {
    let mut wtx = env.begin_write()?;
    {
        let mut docs = wtx.open_tree("docs")?;
        for i in 0..DOCS {
            docs.insert(format!("doc{i:06}"), vec![(i % 256) as u8; 1_000])?;
        }
        docs.insert(b"big", vec![3u8; 20_000])?; // an overflow run
        docs.insert(b"empty-value", b"")?;
        // Nested trees of every kind, at several depths.
        let mut host = docs.open_tree(b"nested/host-a")?;
        host.insert(b"os", b"linux")?;
        {
            let mut cpu = host.open_fixed_tree(b"cpu", 8)?;
            for t in 0..5_000u64 {
                cpu.insert(t, &(t * 3).to_le_bytes())?; // in pages of its own
            }
        }
        {
            let mut small = host.open_fixed_tree(b"small", 4)?;
            small.insert(7, b"abcd")?; // embedded in its entry
            small.insert(9, b"efgh")?;
        }
        host.open_fixed_tree(b"empty-embedded", 2)?;
        {
            let mut deeper = host.open_tree(b"deeper")?;
            deeper.insert(b"k", b"v")?;
            let mut deepest = deeper.open_tree(b"deepest")?;
            deepest.insert(b"leaf", b"value")?;
            deepest
                .open_multi_tree(b"labels")?
                .add(b"colour", b"blue")?;
        }
        {
            let mut tags = host.open_multi_tree(b"tags")?;
            for v in 0..300u64 {
                tags.add(b"many", format!("value{v:04}"))?; // a set in its own tree
            }
            tags.add(b"env", b"prod")?;
            tags.add(b"env", b"eu")?;
        }
        host.open_tree(b"empty-tree")?;
    }
    {
        let mut series = wtx.open_fixed_tree("series", 16)?;
        for i in 0..SERIES {
            let mut value = [0u8; 16];
            value[..8].copy_from_slice(&mix(i).to_le_bytes());
            series.insert(i * 10, &value)?;
        }
    }
    {
        let mut tags = wtx.open_multi_tree("tags")?;
        for k in 0..TAGS {
            for v in 0..20u64 {
                tags.add(format!("tag{k:05}"), format!("item{:08}", mix(k * 20 + v)))?;
            }
        }
    }
    {
        let mut table = wtx.open_table("people", &people())?;
        for i in 0..PEOPLE {
            table.insert(&refs(&person(i)))?;
        }
    }
    {
        let mut table = wtx.open_table("offices", &offices())?;
        for (name, city) in [("hq", "city3"), ("lab", "city5"), ("depot", "nowhere")] {
            table.insert(&[name.as_bytes(), city.as_bytes()])?;
        }
    }
    wtx.open_tree("empty")?;
    wtx.commit()?;

    // Delete 99% of it.
    let mut wtx = env.begin_write()?;
    wtx.open_tree("docs")?
        .retain(|k, _| !k.starts_with(b"doc") || k.ends_with(b"00"))?;
    {
        let mut series = wtx.open_fixed_tree("series", 16)?;
        series.retain(|k, _| k % 1_000 == 0)?;
    }
    {
        let mut tags = wtx.open_multi_tree("tags")?;
        for k in (0..TAGS).filter(|k| k % 100 != 0) {
            tags.remove_key(format!("tag{k:05}"))?;
        }
    }
    {
        let mut table = wtx.open_table("people", &people())?;
        for i in (0..PEOPLE).filter(|i| i % 100 != 0) {
            let email = format!("person{i:06}@example.com");
            let (id, _) = table
                .get_by_key(email.as_bytes())?
                .expect("every person is there");
            assert!(table.delete(id)?);
        }
    }
    wtx.commit()?;
    Ok(())
}

fn same_fixed(a: &FixedTree<'_>, b: &FixedTree<'_>, path: &str) -> hrafn::Result<()> {
    assert_eq!(a.value_size(), b.value_size(), "{path}: value size");
    assert_eq!(a.len(), b.len(), "{path}: entry count");
    let (ea, eb) = (a.range(..)?, b.range(..)?);
    let ea: Vec<(u64, &[u8])> = ea.collect::<hrafn::Result<_>>()?;
    let eb: Vec<(u64, &[u8])> = eb.collect::<hrafn::Result<_>>()?;
    assert_eq!(ea, eb, "{path}: entries");
    Ok(())
}

fn same_multi(a: &MultiTree<'_>, b: &MultiTree<'_>, path: &str) -> hrafn::Result<()> {
    assert_eq!(a.key_count(), b.key_count(), "{path}: key count");
    let ka: Vec<&[u8]> = a.keys::<&[u8], _>(..)?.collect::<hrafn::Result<_>>()?;
    let kb: Vec<&[u8]> = b.keys::<&[u8], _>(..)?.collect::<hrafn::Result<_>>()?;
    assert_eq!(ka, kb, "{path}: keys");
    for key in ka {
        let va: Vec<&[u8]> = a.values(key)?.collect::<hrafn::Result<_>>()?;
        let vb: Vec<&[u8]> = b.values(key)?.collect::<hrafn::Result<_>>()?;
        assert_eq!(va, vb, "{path}: values of {key:?}");
    }
    Ok(())
}

/// Compares two B+trees entry by entry, nested trees recursively; returns how many nested
/// trees it met.
fn same_tree(a: &Tree<'_>, b: &Tree<'_>, path: &str) -> hrafn::Result<u64> {
    assert_eq!(a.len(), b.len(), "{path}: entry count");
    let (mut ia, mut ib) = (a.iter()?, b.iter()?);
    let mut nested = 0;
    loop {
        let (Some(ea), Some(eb)) = (ia.next().transpose()?, ib.next().transpose()?) else {
            assert!(
                ia.next().is_none() && ib.next().is_none(),
                "{path}: lengths"
            );
            return Ok(nested);
        };
        let ((ka, va), (kb, vb)) = (ea, eb);
        assert_eq!(ka, kb, "{path}: keys");
        let kind = a.nested_kind(ka)?;
        assert_eq!(kind, b.nested_kind(kb)?, "{path}: kind under {ka:?}");
        let inner = format!("{path}/{}", String::from_utf8_lossy(ka));
        match kind {
            None => assert_eq!(va, vb, "{inner}: value"),
            Some(TreeKind::BTree) => {
                nested += 1 + same_tree(&a.open_tree(ka)?, &b.open_tree(kb)?, &inner)?;
            }
            Some(TreeKind::Fixed { .. }) => {
                nested += 1;
                same_fixed(&a.open_fixed_tree(ka)?, &b.open_fixed_tree(kb)?, &inner)?;
            }
            Some(TreeKind::Multi) => {
                nested += 1;
                same_multi(&a.open_multi_tree(ka)?, &b.open_multi_tree(kb)?, &inner)?;
            }
            Some(TreeKind::Table) => panic!("{inner}: a nested table"),
        }
    }
}

/// Records by primary key (or, without one, as a sorted list) must be equal; every id and
/// index of the copy must lead to its records.
fn same_table(a: &ReadTxn<'_>, b: &ReadTxn<'_>, name: &str, schema: &Schema) -> hrafn::Result<()> {
    assert_eq!(&b.table_schema(name)?, schema, "{name}: schema");
    let (ta, tb) = (a.open_table(name, schema)?, b.open_table(name, schema)?);
    assert_eq!(ta.len(), tb.len(), "{name}: record count");
    let fields_of = |t: &hrafn::Table<'_>| -> hrafn::Result<Vec<Vec<Vec<u8>>>> {
        let mut all: Vec<Vec<Vec<u8>>> = t
            .scan()?
            .map(|e| e.map(|(_, r)| r.fields().iter().map(|f| f.to_vec()).collect()))
            .collect::<hrafn::Result<_>>()?;
        all.sort();
        Ok(all)
    };
    assert_eq!(fields_of(&ta)?, fields_of(&tb)?, "{name}: records");
    for entry in tb.scan()? {
        let (id, record) = entry?;
        assert_eq!(tb.get(id)?, Some(record), "{name}: get by id");
        let city = record.field(1).expect("a city");
        let by_city = index_key(&[city]);
        assert!(
            tb.index_ids("everyone-by-city", &by_city)?.contains(&id),
            "{name}: the global index holds every record"
        );
        if schema.primary_key_field().is_some() {
            let key = record.field(0).expect("a key");
            assert_eq!(tb.get_by_key(key)?, Some((id, record)), "{name}: by key");
            assert_eq!(ta.get_by_key(key)?.map(|(_, r)| r), Some(record));
            assert!(tb.index_ids("by-city", &by_city)?.contains(&id));
            let seq = record.field(2).expect("a sequence number");
            assert_eq!(
                tb.index_ids("by-seq", seq)?,
                vec![id],
                "{name}: fixed index"
            );
        }
    }
    Ok(())
}

#[test]
fn every_structure_is_copied_and_the_copy_is_much_smaller() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let source_dir = dir.path().join("source");
    let copy_dir = dir.path().join("copy");
    let source = Environment::open(&source_dir, options())?;
    build(&source)?;
    source.flush_and_sync()?;

    let started = Instant::now();
    let mut calls = 0u64;
    let mut last = None;
    let report = source.compact_to_with_progress(&copy_dir, |p| {
        calls += 1;
        assert!(p.trees_done <= p.trees_total);
        last = Some((p.trees_done, p.trees_total, p.entries, p.done));
    })?;
    let elapsed = started.elapsed();
    assert_eq!(
        report.bytes_after,
        common::dir_bytes(&copy_dir),
        "the copy's size as closed"
    );
    let copy = Environment::open(&copy_dir, Options::default())?;

    let (a, b) = (source.begin_read()?, copy.begin_read()?);
    assert_eq!(b.list_trees()?, a.list_trees()?);
    for name in a.list_trees()? {
        let (ha, hb) = (a.tree_header(&name)?, b.tree_header(&name)?);
        assert_eq!(ha.kind, hb.kind, "{name}: kind");
        assert_eq!(ha.entry_count, hb.entry_count, "{name}: entry count");
    }
    let nested = same_tree(&a.open_tree("docs")?, &b.open_tree("docs")?, "docs")?;
    assert_eq!(nested, 9, "every nested tree was compared");
    same_tree(&a.open_tree("empty")?, &b.open_tree("empty")?, "empty")?;
    same_fixed(
        &a.open_fixed_tree("series")?,
        &b.open_fixed_tree("series")?,
        "series",
    )?;
    same_multi(
        &a.open_multi_tree("tags")?,
        &b.open_multi_tree("tags")?,
        "tags",
    )?;
    same_table(&a, &b, "people", &people())?;
    same_table(&a, &b, "offices", &offices())?;
    // The global index, rebuilt from both tables: the same keys, as many ids under each.
    let (ga, gb) = (
        a.open_multi_tree("everyone-by-city")?,
        b.open_multi_tree("everyone-by-city")?,
    );
    let keys: Vec<&[u8]> = ga.keys::<&[u8], _>(..)?.collect::<hrafn::Result<_>>()?;
    assert_eq!(
        keys,
        gb.keys::<&[u8], _>(..)?
            .collect::<hrafn::Result<Vec<_>>>()?
    );
    for key in keys {
        assert_eq!(ga.count(key)?, gb.count(key)?);
    }
    // Spot checks that do not lean on the comparison above.
    let docs = b.open_tree("docs")?;
    assert_eq!(docs.len(), DOCS / 100 + 3);
    assert_eq!(
        docs.get(b"doc039900")?,
        Some(&[(39_900 % 256) as u8; 1_000][..])
    );
    assert_eq!(docs.get(b"doc039901")?, None);
    assert_eq!(docs.get(b"big")?.map(<[u8]>::len), Some(20_000));
    let host = docs.open_tree(b"nested/host-a")?;
    assert_eq!(host.open_fixed_tree(b"small")?.get(9)?, Some(&b"efgh"[..]));
    assert_eq!(
        host.nested_kind(b"empty-embedded")?,
        Some(TreeKind::Fixed { value_size: 2 })
    );
    assert_eq!(
        host.open_tree(b"deeper")?
            .open_tree(b"deepest")?
            .open_multi_tree(b"labels")?
            .count(b"colour")?,
        1
    );
    let people_copy = b.open_table("people", &people())?;
    assert_eq!(people_copy.len(), PEOPLE / 100);
    let (_, ada) = people_copy
        .get_by_key(b"person000100@example.com")?
        .expect("kept");
    assert_eq!(ada.field(3), Some(&person(100)[3][..]));

    // The copy is sound, and has the same shape.
    let (check_a, check_b) = (a.check()?, b.check()?);
    assert_eq!(check_b.tree_count, check_a.tree_count);
    assert_eq!(check_b.entry_count, check_a.entry_count);
    assert_eq!(check_b.nested_tree_count, check_a.nested_tree_count);
    assert_eq!(check_b.embedded_tree_count, check_a.embedded_tree_count);

    // What the report says.
    assert_eq!(report.txn_id, a.txn_id());
    assert_eq!(
        (report.trees, report.tables, report.global_indexes),
        (4, 2, 1)
    );
    assert_eq!(report.nested_trees, nested);
    assert_eq!(report.records, PEOPLE / 100 + 3);
    let fixed_entries = 5_000 + 2 + SERIES / 100;
    let multi_values = 300 + 2 + 1 + (TAGS / 100) * 20;
    // Entries holding values (nested trees are not entries): docs' kept ones, "big" and
    // "empty-value", and one in each of host-a, deeper and deepest.
    let btree_entries = DOCS / 100 + 2 + 3;
    assert_eq!(report.entries, fixed_entries + multi_values + btree_entries);
    assert_eq!(last, Some((6, 6, report.entries + report.records, true)));
    assert!(calls >= 7, "one call per tree and one at the end: {calls}");
    drop((a, b));
    drop(copy);
    assert!(
        report.bytes_after * 10 < report.bytes_before,
        "compaction must shrink a 99%-deleted database: {} -> {} bytes",
        report.bytes_before,
        report.bytes_after
    );
    let data_before = source.stats().data_file_size_bytes;
    let data_after = std::fs::metadata(copy_dir.join(hrafn::DATA_FILE))
        .expect("data file")
        .len();
    summary(&format!(
        "compact: {} -> {} bytes on disk (data file {} -> {}), {} entries and {} records \
         in {} commits, {:.0} ms",
        report.bytes_before,
        report.bytes_after,
        data_before,
        data_after,
        report.entries,
        report.records,
        report.commits,
        elapsed.as_secs_f64() * 1e3
    ));
    assert!(data_after * 20 < data_before);
    Ok(())
}

#[test]
fn a_copy_made_while_commits_go_on_is_one_snapshot() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Environment::open(dir.path().join("source"), options())?;
    let mut wtx = source.begin_write()?;
    {
        let mut bulk = wtx.open_tree("bulk")?;
        for i in 0..20_000u64 {
            bulk.insert(i.to_be_bytes(), [1u8; 100])?;
        }
    }
    wtx.open_tree("log")?;
    wtx.open_tree("counter")?.insert(b"n", 0u64.to_be_bytes())?;
    wtx.commit()?;

    let stop = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    let report = std::thread::scope(|scope| -> hrafn::Result<_> {
        let writer = scope.spawn(|| -> hrafn::Result<u64> {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                let mut wtx = source.begin_write()?;
                wtx.open_tree("log")?
                    .insert(n.to_be_bytes(), format!("entry {n}"))?;
                wtx.open_tree("counter")?
                    .insert(b"n", (n + 1).to_be_bytes())?;
                // A tree made and a table filled while the copy runs.
                wtx.open_fixed_tree(&format!("made-{}", n % 3), 8)?
                    .insert(n, &n.to_le_bytes())?;
                wtx.commit()?;
                n += 1;
                commits.store(n, Ordering::Release);
            }
            Ok(n)
        });
        let mut waited = false;
        let copied = source.compact_to_with_progress(dir.path().join("copy"), |_| {
            // Inside the copy, after its snapshot: let the writer commit a few times.
            if !waited {
                waited = true;
                let start = commits.load(Ordering::Acquire);
                let deadline = Instant::now() + Duration::from_secs(30);
                while commits.load(Ordering::Acquire) < start + 3 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        stop.store(true, Ordering::Release);
        let written = writer.join().expect("the writer does not panic")?;
        let report = copied?;
        Ok((report, written))
    })?;
    let (report, written) = report;

    let copy = Environment::open(dir.path().join("copy"), Options::default())?;
    let rtx = copy.begin_read()?;
    let n = u64::from_be_bytes(
        rtx.open_tree("counter")?
            .get(b"n")?
            .expect("the counter")
            .try_into()
            .expect("8 bytes"),
    );
    assert!(
        n + 3 <= written,
        "the writer went on after the snapshot: {n} of {written}"
    );
    let log = rtx.open_tree("log")?;
    assert_eq!(log.len(), n, "exactly the log entries the counter says");
    for (i, entry) in log.iter()?.enumerate() {
        let (k, v) = entry?;
        assert_eq!(k, (i as u64).to_be_bytes());
        assert_eq!(v, format!("entry {i}").as_bytes());
    }
    let mut made = 0;
    for name in rtx.list_trees()?.iter().filter(|t| t.starts_with("made-")) {
        made += rtx.open_fixed_tree(name)?.len();
    }
    assert_eq!(made, n);
    assert_eq!(rtx.open_tree("bulk")?.len(), 20_000);
    rtx.check()?;
    assert!(report.txn_id < source.stats().txn_id);
    Ok(())
}

#[test]
fn a_target_holding_anything_is_refused() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("source"), options())?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", b"v")?;
    wtx.commit()?;

    let full = dir.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("keep-me"), b"precious").expect("write");
    let refused = env.compact_to(&full);
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("not empty")),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read(full.join("keep-me")).expect("kept"),
        b"precious"
    );

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    assert!(matches!(
        env.compact_to(&file),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        env.compact_to(dir.path().join("source")),
        Err(Error::InvalidArgument(_))
    ));

    // An empty directory will do, and so will an empty environment.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let report = env.compact_to(&empty)?;
    assert_eq!(report.entries, 1);
    let blank = Environment::open(dir.path().join("blank"), options())?;
    let report = blank.compact_to(dir.path().join("blank-copy"))?;
    assert_eq!((report.trees, report.entries), (0, 0));
    assert!(
        Environment::open(dir.path().join("blank-copy"), options())?
            .begin_read()?
            .list_trees()?
            .is_empty()
    );
    Ok(())
}

#[test]
fn a_global_index_with_entries_of_its_own_is_refused() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path().join("source"), options())?;
    let mut wtx = env.begin_write()?;
    wtx.open_table("offices", &offices())?
        .insert(&[b"hq", b"London"])?;
    // Written past the table: compaction rebuilds the index from records and would lose it.
    wtx.open_multi_tree("everyone-by-city")?
        .add(b"Paris", 12_345u64.to_be_bytes())?;
    wtx.commit()?;
    let target = dir.path().join("copy");
    let refused = env.compact_to(&target);
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("global index")),
        "{refused:?}"
    );
    assert!(
        !target.exists(),
        "a failed compaction leaves nothing behind"
    );
    Ok(())
}

#[test]
fn a_loader_refuses_items_out_of_place() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), options())?;
    let entry = Item::Entry {
        key: b"k",
        value: b"v",
    };
    for items in [
        vec![entry],
        vec![Item::End],
        vec![Item::Nested {
            key: b"n",
            kind: TreeKind::BTree,
        }],
        vec![
            Item::Tree {
                name: "f",
                kind: TreeKind::Fixed { value_size: 4 },
            },
            Item::Fixed {
                key: 1,
                value: b"too long",
            },
        ],
        vec![
            Item::Tree {
                name: "m",
                kind: TreeKind::Multi,
            },
            Item::Nested {
                key: b"n",
                kind: TreeKind::BTree,
            },
        ],
        vec![Item::Record {
            fields: &[&b"x"[..]],
        }],
    ] {
        let mut loader = Loader::new(&env);
        let outcome = items.into_iter().try_for_each(|item| loader.push(item));
        assert!(
            matches!(outcome, Err(Error::InvalidArgument(_))),
            "{outcome:?}"
        );
    }
    let mut loader = Loader::new(&env);
    loader.push(Item::Tree {
        name: "t",
        kind: TreeKind::BTree,
    })?;
    assert!(matches!(loader.finish(), Err(Error::InvalidArgument(_))));
    assert!(
        env.begin_read()?.list_trees()?.is_empty(),
        "nothing was committed"
    );
    Ok(())
}

#[test]
fn a_large_copy_commits_in_bounded_transactions() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let source_dir = dir.path().join("source");
    {
        let env = Environment::open(&source_dir, options())?;
        let mut wtx = env.begin_write()?;
        {
            let mut outer = wtx.open_tree("outer")?;
            for i in 0..2_000u64 {
                outer.insert(format!("a{i:05}"), [1u8; 500])?;
            }
            let mut inner = outer.open_tree(b"m-nested")?;
            for i in 0..20_000u64 {
                inner.insert(i.to_be_bytes(), [2u8; 400])?;
            }
            let mut fixed = inner.open_fixed_tree(b"zz-fixed", 64)?;
            for i in 0..50_000u64 {
                fixed.insert(i, &[3u8; 64])?;
            }
        }
        let mut table = wtx.open_table("people", &people())?;
        for i in 0..5_000 {
            table.insert(&refs(&person(i)))?;
        }
        wtx.commit()?;
    }
    // A small scratch limit, which the copy inherits: its transactions must stay small.
    let small = options().scratch_limit_bytes(8 << 20);
    let source = Environment::open(&source_dir, small)?;
    let report = source.compact_to(dir.path().join("copy"))?;
    assert!(report.commits >= 10, "{report:?}");
    let copy = Environment::open(dir.path().join("copy"), Options::default())?;
    let (a, b) = (source.begin_read()?, copy.begin_read()?);
    assert_eq!(
        same_tree(&a.open_tree("outer")?, &b.open_tree("outer")?, "outer")?,
        2
    );
    same_table(&a, &b, "people", &people())?;
    b.check()?;
    Ok(())
}

/// An environment created with incremental backups, opened later with default options (an
/// existing environment keeps what it was created with), compacts into a copy that keeps
/// them: a new chain (full, then incremental) can be taken from the copy.
#[test]
fn a_copy_keeps_incremental_backups_from_its_source() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let db = dir.path().join("db");
    {
        let env = Environment::open(&db, options().incremental_backups(true)).expect("create");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .insert(b"k", b"v")
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let env = Environment::open(&db, options()).expect("reopen without the option");
    let copy_dir = dir.path().join("copy");
    env.compact_to(&copy_dir).expect("compact");
    let copy = Environment::open(&copy_dir, options()).expect("open the copy");
    copy.backup_to(dir.path().join("full"))
        .expect("full backup");
    let mut wtx = copy.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"k2", b"v")
        .expect("insert");
    wtx.commit().expect("commit");
    copy.incremental_backup_to(dir.path().join("incremental"))
        .expect("the copy takes incremental backups as its source did");

    // Without the option at creation, the copy has none either.
    let plain = dir.path().join("plain");
    drop(Environment::open(&plain, options()).expect("create"));
    let plain_env = Environment::open(&plain, options().incremental_backups(true)).expect("open");
    let plain_copy = dir.path().join("plain-copy");
    plain_env.compact_to(&plain_copy).expect("compact");
    drop(plain_env);
    let copy = Environment::open(&plain_copy, options()).expect("open");
    copy.backup_to(dir.path().join("plain-full"))
        .expect("full backup");
    assert!(matches!(
        copy.incremental_backup_to(dir.path().join("plain-incremental")),
        Err(Error::InvalidArgument(_))
    ));
}

/// The copy's transactions are sized by the pages they change, not only by the bytes
/// they load: thousands of small nested trees, each a page of its own, under a small
/// scratch limit, copy in many transactions instead of failing as one too large.
#[test]
fn many_small_nested_trees_copy_under_a_small_scratch_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default().scratch_limit_bytes(8 << 20);
    let env = Environment::open(dir.path().join("src"), options.clone()).expect("open");
    const TREES: u32 = 3_000;
    for first in (0..TREES).step_by(300) {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut parent = wtx.open_tree("parent").expect("tree");
            for i in first..first + 300 {
                let mut nested = parent.open_tree(i.to_be_bytes()).expect("nested");
                nested.insert(b"k", i.to_le_bytes()).expect("insert");
            }
        }
        wtx.commit().expect("commit");
    }
    let report = env.compact_to(dir.path().join("copy")).expect("compact");
    assert!(report.bytes_after > 0);
    drop(env);
    let copy = Environment::open(dir.path().join("copy"), options).expect("open copy");
    let rtx = copy.begin_read().expect("read");
    let parent = rtx.open_tree("parent").expect("tree");
    for i in (0..TREES).step_by(97) {
        let nested = parent.open_tree(i.to_be_bytes()).expect("nested");
        assert_eq!(nested.get(b"k").expect("get"), Some(&i.to_le_bytes()[..]));
    }
    drop(rtx);
    copy.check().expect("check");
}
