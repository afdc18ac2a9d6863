//! The one small interface every engine is driven through, so that each workload is written
//! once. Writes and reads are closure-scoped: the engine opens a transaction (and its table or
//! tree), hands the closure a [`Writer`] or [`Reader`], and commits or drops the transaction
//! when the closure returns.

use std::path::Path;

use anyhow::{Result, bail};

#[cfg(feature = "hrafn")]
mod hrafn_engine;
mod lmdb;
mod redb_engine;
#[cfg(feature = "rocksdb")]
mod rocks;

/// Name of the table / tree / database every engine stores the benchmark data in.
pub const TABLE: &str = "bench";

/// A storage engine under test.
pub trait Engine: Send + Sync {
    /// Runs `f` inside one write transaction and commits it (synced if the engine was opened
    /// durable). If `f` fails, the transaction is abandoned and the error returned.
    fn write(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()>;

    /// Commits `kvs` as one transaction; may be called from many threads at once. Engines with
    /// a path for merging concurrent writers use it here; the default is [`Engine::write`].
    fn write_concurrent(&self, kvs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.write(&mut |w| {
            for (k, v) in &kvs {
                w.put(k, v)?;
            }
            Ok(())
        })
    }

    /// How [`Engine::write_concurrent`] gets its transactions, for the output notes.
    fn concurrent_write_path(&self) -> &'static str;

    /// What the engine reports about its commits so far (for the output notes), if it
    /// reports anything.
    fn commit_stats(&self) -> Option<String> {
        None
    }

    /// The engine's own journal counters, for engines that report them (Hrafn).
    fn journal_counters(&self) -> Option<JournalCounters> {
        None
    }

    /// Pages the engine's data holds, for engines that count them (Hrafn: the integrity
    /// check's pages in use, so free pages are not counted).
    fn pages_in_use(&self) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Runs `f` inside one read transaction (a consistent snapshot).
    fn read(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()>;

    /// [`Engine::write`] on the engine's structure for `u64` keys (given to `put` as 8
    /// big-endian bytes) and 16-byte values. Hrafn has a fixed-size tree for them; the
    /// others keep their usual table, whose order on big-endian keys is the numeric one
    /// (heed's `U64<BE>` is those bytes).
    fn write_u64(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        self.write(f)
    }

    /// [`Engine::read`] on the structure [`Engine::write_u64`] writes.
    fn read_u64(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        self.read(f)
    }

    /// Inserts `records` in one transaction into a table with two secondary indexes (name
    /// → ids, not unique; sequence number → id, unique); returns each record's id. Hrafn
    /// uses a table; the others keep a record table keyed by id (the sequence number)
    /// and one table per index, by hand.
    fn table_insert(&self, records: &[TableRecord]) -> Result<Vec<u64>> {
        let _ = records;
        bail!("the table rows are not written for this engine")
    }

    /// Reads the records `ids` in one read transaction; returns the bytes read.
    fn table_get(&self, ids: &[u64]) -> Result<u64> {
        let _ = ids;
        bail!("the table rows are not written for this engine")
    }
}

/// Cumulative counters of an engine's journal since it was opened (Hrafn: from
/// `Environment::stats()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalCounters {
    /// Commits that wrote a journal record (`Stats::commits`).
    pub commits: u64,
    /// Bytes written to journals, record headers and padding included
    /// (`Stats::journal_bytes_written`).
    pub journal_bytes_written: u64,
    /// Page diff bytes before compression (`Stats::journal_payload_bytes`).
    pub journal_payload_bytes: u64,
    /// Whole pages changed by commits, in bytes, before diffing (`Stats::dirty_page_bytes`).
    pub dirty_page_bytes: u64,
    /// Most files the journal directory held at once (`Stats::journal_files_peak`).
    pub journal_files_peak: u64,
}

/// Files of an engine's directory that show how it keeps up over time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileSample {
    /// Hrafn: files in `journal/`; RocksDB: WAL files (`*.log`); `None` for the others.
    pub journal_files: Option<u64>,
    /// Hrafn: `data.hrafn`; LMDB: `data.mdb`; redb: `bench.redb`; `None` for RocksDB.
    pub data_file_bytes: Option<u64>,
    /// All files in the directory.
    pub disk_bytes: u64,
}

/// Looks at engine `name`'s directory `dir` (see [`FileSample`]).
pub fn file_sample(name: &str, dir: &Path) -> Result<FileSample> {
    let count = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> Result<u64> {
        let mut n = 0;
        if dir.exists() {
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                if entry.file_type()?.is_file() && keep(&entry.file_name().to_string_lossy()) {
                    n += 1;
                }
            }
        }
        Ok(n)
    };
    let len = |file: &str| std::fs::metadata(dir.join(file)).ok().map(|m| m.len());
    let (journal_files, data_file_bytes) = match name {
        "hrafn" => (
            Some(count(&dir.join("journal"), &|_| true)?),
            len("data.hrafn"),
        ),
        "rocksdb" => (Some(count(dir, &|f| f.ends_with(".log"))?), None),
        "lmdb" => (None, len("data.mdb")),
        "redb" => (None, len("bench.redb")),
        _ => (None, None),
    };
    Ok(FileSample {
        journal_files,
        data_file_bytes,
        disk_bytes: crate::sys::dir_bytes(dir)?,
    })
}

/// One record of the table rows.
pub struct TableRecord {
    /// 16 bytes, about a thousand records share each.
    pub name: Vec<u8>,
    /// Unique.
    pub seq: u64,
    pub payload: Vec<u8>,
}

impl TableRecord {
    /// The record as the peers store it: name, sequence number (big-endian), payload.
    pub fn encode(&self) -> Vec<u8> {
        [&self.name[..], &self.seq.to_be_bytes(), &self.payload].concat()
    }
}

/// Names of the peers' tables for the table rows.
pub const TABLE_RECORDS: &str = "bench_records";
pub const TABLE_BY_NAME: &str = "bench_by_name";
pub const TABLE_BY_SEQ: &str = "bench_by_seq";

/// Writes inside one transaction.
pub trait Writer {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
}

/// Reads inside one transaction.
pub trait Reader {
    /// Point read; returns the value's length so the caller can check it without a copy.
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;

    /// Visits entries in key order from the first key `>= start`, at most `limit` of them
    /// (`None` = to the end). Returns how many were visited.
    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
}

/// The engines this binary knows, in the column order of the output table.
pub const ALL_ENGINES: &[&str] = &["hrafn", "lmdb", "redb", "rocksdb"];

/// Whether `name` was compiled into this binary (hrafn and rocksdb are cargo features).
pub fn compiled_in(name: &str) -> bool {
    matches!(name, "lmdb" | "redb")
        || (name == "hrafn" && cfg!(feature = "hrafn"))
        || (name == "rocksdb" && cfg!(feature = "rocksdb"))
}

/// The durability setting each engine is opened with, as stated in the docs.
pub fn durability_setting(name: &str, durable: bool) -> &'static str {
    match (name, durable) {
        ("hrafn", true) => "Options::durability = Durability::Immediate",
        ("hrafn", false) => "Options::durability = Durability::None",
        ("lmdb", true) => "default env flags (commit calls fdatasync)",
        ("lmdb", false) => "EnvFlags::NO_SYNC (MDB_NOSYNC)",
        ("redb", true) => "WriteTransaction::set_durability(Durability::Immediate)",
        ("redb", false) => "WriteTransaction::set_durability(Durability::None)",
        ("rocksdb", true) => "WriteOptions::set_sync(true)",
        ("rocksdb", false) => "WriteOptions::set_sync(false)",
        _ => "",
    }
}

/// Opens engine `name` in `dir` with the engine's default settings for a user who wants
/// durable commits: Hrafn with `Options::default()` unchanged (durable, its flusher and
/// syncs at their defaults), the peers as [`open`] with `durable` set.
pub fn open_default(name: &str, dir: &Path) -> Result<Box<dyn Engine>> {
    #[cfg(feature = "hrafn")]
    if name == "hrafn" {
        std::fs::create_dir_all(dir)?;
        return Ok(Box::new(hrafn_engine::Hrafn::open_with(
            dir,
            hrafn::Options::default(),
        )?));
    }
    open(name, dir, true)
}

/// Opens (creating if needed) engine `name` in `dir`. `durable` selects an fsync per commit.
pub fn open(name: &str, dir: &Path, durable: bool) -> Result<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match name {
        "lmdb" => Box::new(lmdb::Lmdb::open(dir, durable)?),
        "redb" => Box::new(redb_engine::Redb::open(dir, durable)?),
        #[cfg(feature = "hrafn")]
        "hrafn" => Box::new(hrafn_engine::Hrafn::open(dir, durable)?),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Box::new(rocks::Rocks::open(dir, durable)?),
        other if ALL_ENGINES.contains(&other) => {
            bail!("engine {other} is not compiled in (enable the cargo feature `{other}`)")
        }
        other => bail!("unknown engine {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sustained row's look at each engine's directory finds its files.
    #[test]
    fn file_samples_see_each_engines_files() {
        #[cfg(feature = "hrafn")]
        assert_eq!(hrafn::DATA_FILE, "data.hrafn", "file_sample names it");
        for name in ALL_ENGINES.iter().copied().filter(|n| compiled_in(n)) {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = open_default(name, dir.path()).expect("open");
            engine
                .write(&mut |w| w.put(b"key", &[7; 100]))
                .expect("write");
            let sample = file_sample(name, dir.path()).expect("sample");
            assert!(sample.disk_bytes > 0, "{name}: {sample:?}");
            match name {
                "hrafn" => assert!(sample.journal_files.is_some_and(|n| n > 0), "{sample:?}"),
                "rocksdb" => assert!(sample.journal_files.is_some(), "{sample:?}"),
                _ => assert_eq!(sample.journal_files, None, "{name}"),
            }
            assert_eq!(
                sample.data_file_bytes.is_some_and(|b| b > 0),
                name != "rocksdb",
                "{name}: {sample:?}"
            );
        }
    }

    /// Every compiled-in engine round-trips the same small data set through the trait.
    #[test]
    fn engines_round_trip() {
        for name in ALL_ENGINES.iter().copied().filter(|n| compiled_in(n)) {
            let dir = tempfile::tempdir().expect("tempdir");
            let engine = open(name, dir.path(), false).expect("open");
            engine
                .write(&mut |w| {
                    for i in (0u32..50).rev() {
                        w.put(format!("k{i:03}").as_bytes(), &[i as u8; 10])?;
                    }
                    Ok(())
                })
                .expect("write");
            engine
                .write_concurrent(vec![(b"k050".to_vec(), vec![1; 3])])
                .expect("write_concurrent");
            engine
                .read(&mut |r| {
                    assert_eq!(r.get(b"k007")?, Some(10), "{name}");
                    assert_eq!(r.get(b"k050")?, Some(3), "{name}");
                    assert_eq!(r.get(b"nope")?, None, "{name}");
                    let mut keys = Vec::new();
                    let n = r.scan(b"k010", Some(3), &mut |k, _| keys.push(k.to_vec()))?;
                    assert_eq!(n, 3, "{name}");
                    assert_eq!(keys, [b"k010", b"k011", b"k012"], "{name}");
                    assert_eq!(r.scan(b"", None, &mut |_, _| {})?, 51, "{name}");
                    Ok(())
                })
                .expect("read");
        }
    }
}
