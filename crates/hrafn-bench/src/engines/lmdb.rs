//! LMDB through `heed` (which builds LMDB's C source itself).

use std::ops::Bound;
use std::path::Path;

use anyhow::{Context, Result};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use super::{Engine, Reader, TABLE, Writer};

/// Address space reserved for the map; LMDB on Linux grows the file only as pages are used.
const MAP_SIZE: usize = 1 << 40;

pub struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
    /// The table rows' record table and index tables.
    records: Database<Bytes, Bytes>,
    by_name: Database<Bytes, Bytes>,
    by_seq: Database<Bytes, Bytes>,
}

impl Lmdb {
    pub fn open(dir: &Path, durable: bool) -> Result<Self> {
        let mut opts = EnvOpenOptions::new();
        opts.map_size(MAP_SIZE).max_dbs(8);
        if !durable {
            // SAFETY: MDB_NOSYNC only drops the fsync at commit; a crash may lose the last
            // commits, which is exactly the non-durable mode being measured. Nothing else in
            // this process relies on those commits surviving a crash.
            #[allow(unsafe_code)]
            unsafe {
                opts.flags(EnvFlags::NO_SYNC);
            }
        }
        // SAFETY: the directory is private to this benchmark run; no other process or mapping
        // modifies the LMDB files while this environment is open, and each environment is
        // opened once per process at a time.
        #[allow(unsafe_code)]
        let env = unsafe { opts.open(dir) }.context("opening LMDB environment")?;
        let mut wtxn = env.write_txn()?;
        let db = env.create_database(&mut wtxn, Some(TABLE))?;
        let records = env.create_database(&mut wtxn, Some(super::TABLE_RECORDS))?;
        let by_name = env.create_database(&mut wtxn, Some(super::TABLE_BY_NAME))?;
        let by_seq = env.create_database(&mut wtxn, Some(super::TABLE_BY_SEQ))?;
        wtxn.commit()?;
        Ok(Lmdb {
            env,
            db,
            records,
            by_name,
            by_seq,
        })
    }
}

struct LmdbWriter<'a, 'e> {
    db: Database<Bytes, Bytes>,
    txn: &'a mut heed::RwTxn<'e>,
}

impl Writer for LmdbWriter<'_, '_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.put(self.txn, key, value)?;
        Ok(())
    }
}

struct LmdbReader<'a, 'e> {
    db: Database<Bytes, Bytes>,
    txn: &'a heed::RoTxn<'e>,
}

impl Reader for LmdbReader<'_, '_> {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(self.txn, key)?.map(<[u8]>::len))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        // LMDB refuses an empty key as a range start (MDB_BAD_VALSIZE): start unbounded instead.
        let from = if start.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(start)
        };
        let iter = self.db.range(self.txn, &(from, Bound::Unbounded))?;
        let mut n = 0;
        for item in iter {
            if limit.is_some_and(|l| n >= l) {
                break;
            }
            let (k, v) = item?;
            visit(k, v);
            n += 1;
        }
        Ok(n)
    }
}

impl Engine for Lmdb {
    fn write(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        f(&mut LmdbWriter {
            db: self.db,
            txn: &mut txn,
        })?;
        txn.commit()?;
        Ok(())
    }

    fn concurrent_write_path(&self) -> &'static str {
        "one write txn per commit; LMDB's writer lock serializes them"
    }

    fn table_insert(&self, records: &[super::TableRecord]) -> Result<Vec<u64>> {
        let mut txn = self.env.write_txn()?;
        let mut ids = Vec::with_capacity(records.len());
        for record in records {
            let id = record.seq.to_be_bytes();
            self.records.put(&mut txn, &id, &record.encode())?;
            self.by_name
                .put(&mut txn, &[&record.name[..], &id].concat(), &[])?;
            self.by_seq.put(&mut txn, &id, &id)?;
            ids.push(record.seq);
        }
        txn.commit()?;
        Ok(ids)
    }

    fn table_get(&self, ids: &[u64]) -> Result<u64> {
        let txn = self.env.read_txn()?;
        let mut bytes = 0;
        for id in ids {
            let record = self.records.get(&txn, &id.to_be_bytes())?;
            bytes += record.context("a record the rows wrote")?.len() as u64;
        }
        Ok(bytes)
    }

    fn read(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        let txn = self.env.read_txn()?;
        f(&LmdbReader {
            db: self.db,
            txn: &txn,
        })
    }
}
