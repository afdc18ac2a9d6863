//! redb (pure Rust).

use std::path::Path;

use anyhow::{Context, Result};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{Engine, Reader, TABLE, Writer};

const DEF: TableDefinition<&[u8], &[u8]> = TableDefinition::new(TABLE);
const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new(super::TABLE_RECORDS);
const BY_NAME: TableDefinition<(&[u8], u64), ()> = TableDefinition::new(super::TABLE_BY_NAME);
const BY_SEQ: TableDefinition<u64, u64> = TableDefinition::new(super::TABLE_BY_SEQ);

pub struct Redb {
    db: Database,
    durability: Durability,
}

impl Redb {
    pub fn open(dir: &Path, durable: bool) -> Result<Self> {
        let db = Database::create(dir.join("bench.redb")).context("opening redb")?;
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        let this = Redb { db, durability };
        // Create the table so reads never see it missing.
        this.write(&mut |_| Ok(()))?;
        Ok(this)
    }
}

struct RedbWriter<'a, 't> {
    table: &'a mut redb::Table<'t, &'static [u8], &'static [u8]>,
}

impl Writer for RedbWriter<'_, '_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.table.insert(key, value)?;
        Ok(())
    }
}

struct RedbReader {
    table: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
}

impl Reader for RedbReader {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.table.get(key)?.map(|g| g.value().len()))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut n = 0;
        for item in self.table.range::<&[u8]>(start..)? {
            if limit.is_some_and(|l| n >= l) {
                break;
            }
            let (k, v) = item?;
            visit(k.value(), v.value());
            n += 1;
        }
        Ok(n)
    }
}

impl Engine for Redb {
    fn write(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(self.durability)?;
        {
            let mut table = txn.open_table(DEF)?;
            f(&mut RedbWriter { table: &mut table })?;
        }
        txn.commit()?;
        Ok(())
    }

    fn concurrent_write_path(&self) -> &'static str {
        "one write txn per commit; begin_write blocks until the previous one ends"
    }

    fn table_insert(&self, records: &[super::TableRecord]) -> Result<Vec<u64>> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(self.durability)?;
        let mut ids = Vec::with_capacity(records.len());
        {
            let mut table = txn.open_table(RECORDS)?;
            let mut by_name = txn.open_table(BY_NAME)?;
            let mut by_seq = txn.open_table(BY_SEQ)?;
            for record in records {
                table.insert(record.seq, record.encode().as_slice())?;
                by_name.insert((record.name.as_slice(), record.seq), ())?;
                by_seq.insert(record.seq, record.seq)?;
                ids.push(record.seq);
            }
        }
        txn.commit()?;
        Ok(ids)
    }

    fn table_get(&self, ids: &[u64]) -> Result<u64> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(RECORDS)?;
        let mut bytes = 0;
        for &id in ids {
            let record = table.get(id)?.context("a record the rows wrote")?;
            bytes += record.value().len() as u64;
        }
        Ok(bytes)
    }

    fn read(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DEF)?;
        f(&RedbReader { table })
    }
}
