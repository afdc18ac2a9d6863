//! Handles: several trees and tables open at once in one write transaction (and kept in a
//! struct next to a read transaction), each bound for one use. Random operations over a
//! B+tree, a fixed-size tree, a multi-value tree and a table, interleaved through their
//! handles, checked against a model; stale and wrong-kind handles are refused.

mod common;

use common::mix;
use hrafn::table::Schema;
use hrafn::{Environment, Error, Options, ReadTxn, TableHandle, TreeHandle, WriteTxn};
use std::collections::{BTreeMap, BTreeSet};

fn schema() -> Schema {
    Schema::new(2).primary_key(0).index("by-colour", &[1])
}

/// What a program would keep: the transaction and one handle per structure.
struct Writer<'env> {
    txn: WriteTxn<'env>,
    names: TreeHandle,
    readings: TreeHandle,
    tags: TreeHandle,
    things: TableHandle,
}

#[derive(Default, PartialEq, Debug)]
struct Model {
    names: BTreeMap<Vec<u8>, Vec<u8>>,
    readings: BTreeMap<u64, [u8; 8]>,
    tags: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>,
    things: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Writer<'_> {
    fn apply(&mut self, r: u64, model: &mut Model) -> hrafn::Result<()> {
        let key = format!("k{:03}", (r >> 8) % 300).into_bytes();
        let n = (r >> 8) % 500;
        match r % 8 {
            0 => {
                self.names
                    .tree_mut(&mut self.txn)?
                    .insert(&key, r.to_le_bytes())?;
                model.names.insert(key, r.to_le_bytes().to_vec());
            }
            1 => {
                self.names.tree_mut(&mut self.txn)?.remove(&key)?;
                model.names.remove(&key);
            }
            2 => {
                let value = r.to_be_bytes();
                self.readings
                    .fixed_tree_mut(&mut self.txn)?
                    .insert(n, &value)?;
                model.readings.insert(n, value);
            }
            3 => {
                self.readings.fixed_tree_mut(&mut self.txn)?.remove(n)?;
                model.readings.remove(&n);
            }
            4 => {
                let value = format!("v{}", r % 7).into_bytes();
                self.tags.multi_tree_mut(&mut self.txn)?.add(&key, &value)?;
                model.tags.entry(key).or_default().insert(value);
            }
            5 => {
                let value = format!("v{}", r % 7).into_bytes();
                self.tags
                    .multi_tree_mut(&mut self.txn)?
                    .remove(&key, &value)?;
                if let Some(set) = model.tags.get_mut(&key) {
                    set.remove(&value);
                    if set.is_empty() {
                        model.tags.remove(&key);
                    }
                }
            }
            6 => {
                let colour = format!("c{}", r % 5).into_bytes();
                let mut things = self.things.table_mut(&mut self.txn)?;
                match things.get_by_key(&key)? {
                    Some((id, _)) => {
                        things.update(id, &[&key, &colour])?;
                    }
                    None => {
                        things.insert(&[&key, &colour])?;
                    }
                }
                model.things.insert(key, colour);
            }
            _ => {
                let mut things = self.things.table_mut(&mut self.txn)?;
                if let Some((id, _)) = things.get_by_key(&key)? {
                    things.delete(id)?;
                }
                model.things.remove(&key);
            }
        }
        Ok(())
    }
}

/// Everything the read transaction sees, read through handles kept beside it.
fn read_back(
    rtx: &ReadTxn<'_>,
    handles: &[TreeHandle; 3],
    things: &TableHandle,
) -> hrafn::Result<Model> {
    let [names, readings, tags] = handles;
    let mut model = Model::default();
    for entry in names.tree(rtx)?.range::<&[u8], _>(..)? {
        let (k, v) = entry?;
        model.names.insert(k.to_vec(), v.to_vec());
    }
    for entry in readings.fixed_tree(rtx)?.range(..)? {
        let (k, v) = entry?;
        model
            .readings
            .insert(k, v.try_into().expect("8-byte values"));
    }
    let tags = tags.multi_tree(rtx)?;
    for key in tags.keys::<&[u8], _>(..)? {
        let key = key?.to_vec();
        let values = tags
            .values(&key)?
            .map(|v| v.map(<[u8]>::to_vec))
            .collect::<hrafn::Result<_>>()?;
        model.tags.insert(key, values);
    }
    for entry in things.table(rtx)?.scan()? {
        let (_, record) = entry?;
        let key = record.field(0).expect("two fields").to_vec();
        model
            .things
            .insert(key, record.field(1).expect("two fields").to_vec());
    }
    Ok(model)
}

#[test]
fn several_trees_and_tables_open_at_once_in_one_write_transaction() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options())?;
    let mut txn = env.begin_write()?;
    txn.open_tree("names")?;
    txn.open_fixed_tree("readings", 8)?;
    txn.open_multi_tree("tags")?;
    let mut writer = Writer {
        names: txn.tree_handle("names")?,
        readings: txn.tree_handle("readings")?,
        tags: txn.tree_handle("tags")?,
        things: txn.table_handle("things", &schema())?,
        txn,
    };
    let mut model = Model::default();
    let mut r = 1;
    let mut operations = 0;
    for round in 0..40 {
        for _ in 0..300 {
            r = mix(r);
            writer.apply(r, &mut model)?;
            operations += 1;
        }
        let Writer {
            txn,
            names,
            readings,
            tags,
            things,
        } = writer;
        txn.commit()?;
        let rtx = env.begin_read()?;
        let handles = [names, readings, tags];
        assert_eq!(read_back(&rtx, &handles, &things)?, model, "round {round}");
        drop(rtx);
        let [names, readings, tags] = handles;
        writer = Writer {
            txn: env.begin_write()?,
            names,
            readings,
            tags,
            things,
        };
    }
    drop(writer);
    common::summary(&format!(
        "handles: {operations} operations over 4 structures through handles, 40 commits"
    ));
    let report = env.begin_read()?.check()?;
    assert_eq!(report.tree_count, 4, "the four named structures");
    Ok(())
}

#[test]
fn a_read_handle_kept_across_transactions_sees_each_ones_snapshot() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default())?;
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"a", b"1")?;
    wtx.commit()?;
    let first = env.begin_read()?;
    let handle = first.tree_handle("t")?;
    let mut wtx = env.begin_write()?;
    handle.tree_mut(&mut wtx)?.insert(b"b", b"2")?;
    wtx.commit()?;
    let second = env.begin_read()?;
    assert_eq!(handle.tree(&first)?.len(), 1);
    assert_eq!(handle.tree(&second)?.len(), 2);
    Ok(())
}

#[test]
fn stale_and_wrong_kind_handles_are_refused() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default())?;
    let mut wtx = env.begin_write()?;
    assert!(matches!(
        wtx.tree_handle("missing"),
        Err(Error::TreeNotFound { .. })
    ));
    wtx.open_fixed_tree("fixed", 8)?;
    let fixed = wtx.tree_handle("fixed")?;
    assert!(matches!(
        fixed.tree_mut(&mut wtx),
        Err(Error::WrongTreeKind { .. })
    ));
    assert!(matches!(
        fixed.multi_tree_mut(&mut wtx),
        Err(Error::WrongTreeKind { .. })
    ));
    fixed.fixed_tree_mut(&mut wtx)?.insert(1, &[0; 8])?;
    assert!(wtx.delete_tree("fixed")?);
    assert!(matches!(
        fixed.fixed_tree_mut(&mut wtx),
        Err(Error::TreeNotFound { .. })
    ));
    let things = wtx.table_handle("things", &schema())?;
    wtx.migrate_table("things", &Schema::new(2).primary_key(0))?;
    assert!(matches!(
        things.table_mut(&mut wtx),
        Err(Error::SchemaMismatch { .. })
    ));
    wtx.commit()?;
    let rtx = env.begin_read()?;
    assert!(matches!(
        things.table(&rtx),
        Err(Error::SchemaMismatch { .. })
    ));
    assert!(matches!(
        fixed.fixed_tree(&rtx),
        Err(Error::TreeNotFound { .. })
    ));
    Ok(())
}
