//! RocksDB (cargo feature `rocksdb`). A "transaction" is a `WriteBatch` written with one
//! `write_opt`; a read transaction is a snapshot.

use std::path::Path;

use anyhow::{Context, Result};
use rocksdb::{DB, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions};

use super::{Engine, Reader, Writer};

pub struct Rocks {
    db: DB,
    durable: bool,
}

impl Rocks {
    pub fn open(dir: &Path, durable: bool) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let db = DB::open(&opts, dir).context("opening RocksDB")?;
        Ok(Rocks { db, durable })
    }

    fn write_options(&self) -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.durable);
        wo
    }
}

struct RocksWriter<'a> {
    batch: &'a mut WriteBatch,
}

impl Writer for RocksWriter<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.put(key, value);
        Ok(())
    }
}

struct RocksReader<'a> {
    db: &'a DB,
    snapshot: rocksdb::Snapshot<'a>,
    /// Made once per reader: a point read that made its own would pay a create and a
    /// destroy through the C API that the other engines' reads do not.
    get_options: ReadOptions,
}

impl<'a> RocksReader<'a> {
    fn new(db: &'a DB) -> RocksReader<'a> {
        let snapshot = db.snapshot();
        let mut get_options = ReadOptions::default();
        get_options.set_snapshot(&snapshot);
        RocksReader {
            db,
            snapshot,
            get_options,
        }
    }

    fn read_options(&self) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_snapshot(&self.snapshot);
        ro
    }
}

impl Reader for RocksReader<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .db
            .get_pinned_opt(key, &self.get_options)?
            .map(|v| v.len()))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mode = IteratorMode::From(start, rocksdb::Direction::Forward);
        let mut n = 0;
        for item in self.db.iterator_opt(mode, self.read_options()) {
            if limit.is_some_and(|l| n >= l) {
                break;
            }
            let (k, v) = item?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }
}

impl Engine for Rocks {
    fn write(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        let mut batch = WriteBatch::default();
        f(&mut RocksWriter { batch: &mut batch })?;
        self.db.write_opt(batch, &self.write_options())?;
        Ok(())
    }

    fn concurrent_write_path(&self) -> &'static str {
        "one WriteBatch per commit from each thread; RocksDB groups concurrent commits"
    }

    fn read(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        let reader = RocksReader::new(&self.db);
        f(&reader)
    }
}
