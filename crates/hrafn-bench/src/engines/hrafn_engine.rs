//! Hrafn, the engine this benchmark exists for.

use std::path::Path;

use anyhow::{Context, Result};
use hrafn::{Durability, Environment, Options};

use super::{Engine, Reader, TABLE, Writer};

pub struct Hrafn {
    env: Environment,
    /// Serializes `write_concurrent` callers when the merged-writer path is not compiled in.
    #[cfg(not(feature = "hrafn-submit"))]
    writers: std::sync::Mutex<()>,
}

impl Hrafn {
    pub fn open(dir: &Path, durable: bool) -> Result<Self> {
        let durability = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        Self::open_with(dir, Options::default().durability(durability))
    }

    /// Opens with `opts` as given (the sustained row passes `Options::default()`).
    pub fn open_with(dir: &Path, opts: Options) -> Result<Self> {
        let env = Environment::open(dir, opts).context("opening hrafn environment")?;
        let this = Hrafn {
            env,
            #[cfg(not(feature = "hrafn-submit"))]
            writers: std::sync::Mutex::new(()),
        };
        // Create the tree so reads never see it missing.
        this.write(&mut |_| Ok(()))?;
        Ok(this)
    }
}

struct HrafnWriter<'a, 't, 'e> {
    tree: &'a mut hrafn::TreeMut<'t, 'e>,
}

impl Writer for HrafnWriter<'_, '_, '_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.insert(key, value)?;
        Ok(())
    }
}

struct HrafnReader<'a, 't> {
    tree: &'a hrafn::Tree<'t>,
}

impl Reader for HrafnReader<'_, '_> {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.tree.get(key)?.map(<[u8]>::len))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut n = 0;
        for item in self.tree.range::<&[u8], _>(start..)? {
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

/// The fixed-size tree `write_u64` and `read_u64` use.
const U64_TREE: &str = "bench_u64";
const U64_VALUE_LEN: usize = 16;

fn u64_key(key: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        key.try_into().context("a u64 key is 8 bytes")?,
    ))
}

struct FixedWriter<'a, 't, 'e> {
    tree: &'a mut hrafn::FixedTreeMut<'t, 'e>,
}

impl Writer for FixedWriter<'_, '_, '_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.insert(u64_key(key)?, value)?;
        Ok(())
    }
}

struct FixedReader<'a, 't> {
    tree: &'a hrafn::FixedTree<'t>,
}

impl Reader for FixedReader<'_, '_> {
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.tree.get(u64_key(key)?)?.map(<[u8]>::len))
    }

    fn scan(
        &self,
        start: &[u8],
        limit: Option<usize>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let from = if start.is_empty() { 0 } else { u64_key(start)? };
        let mut n = 0;
        for item in self.tree.range(from..)? {
            if limit.is_some_and(|l| n >= l) {
                break;
            }
            let (k, v) = item?;
            visit(&k.to_be_bytes(), v);
            n += 1;
        }
        Ok(n)
    }
}

/// The table the table rows use: (name, sequence number, payload), indexed by name
/// (variable) and by sequence number (fixed, unique).
fn table_schema() -> hrafn::table::Schema {
    hrafn::table::Schema::new(3)
        .index("by-name", &[0])
        .fixed_index("by-seq", 1)
}

impl Engine for Hrafn {
    fn table_insert(&self, records: &[super::TableRecord]) -> Result<Vec<u64>> {
        let schema = table_schema();
        let mut wtx = self.env.begin_write()?;
        let mut ids = Vec::with_capacity(records.len());
        {
            let mut table = wtx.open_table(super::TABLE_RECORDS, &schema)?;
            for record in records {
                let seq = record.seq.to_be_bytes();
                ids.push(table.insert(&[&record.name, &seq, &record.payload])?);
            }
        }
        wtx.commit()?;
        Ok(ids)
    }

    fn table_get(&self, ids: &[u64]) -> Result<u64> {
        let rtx = self.env.begin_read()?;
        let table = rtx.open_table(super::TABLE_RECORDS, &table_schema())?;
        let mut bytes = 0;
        for &id in ids {
            let record = table.get(id)?.context("a record the rows wrote")?;
            bytes += record.as_bytes().len() as u64;
        }
        Ok(bytes)
    }

    fn write_u64(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        let mut wtx = self.env.begin_write()?;
        {
            let mut tree = wtx.open_fixed_tree(U64_TREE, U64_VALUE_LEN)?;
            f(&mut FixedWriter { tree: &mut tree })?;
        }
        wtx.commit()?;
        Ok(())
    }

    fn read_u64(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        let rtx = self.env.begin_read()?;
        let tree = rtx.open_fixed_tree(U64_TREE)?;
        f(&FixedReader { tree: &tree })
    }

    fn write(&self, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>) -> Result<()> {
        let mut wtx = self.env.begin_write()?;
        {
            let mut tree = wtx.open_tree(TABLE)?;
            f(&mut HrafnWriter { tree: &mut tree })?;
        }
        wtx.commit()?;
        Ok(())
    }

    #[cfg(feature = "hrafn-submit")]
    fn write_concurrent(&self, kvs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        self.env
            .submit(move |wtx: &mut hrafn::WriteTxn| -> hrafn::Result<()> {
                let mut tree = wtx.open_tree(TABLE)?;
                for (k, v) in &kvs {
                    tree.insert(k, v)?;
                }
                Ok(())
            })?;
        Ok(())
    }

    #[cfg(not(feature = "hrafn-submit"))]
    fn write_concurrent(&self, kvs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let _guard = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        self.write(&mut |w| {
            for (k, v) in &kvs {
                w.put(k, v)?;
            }
            Ok(())
        })
    }

    fn commit_stats(&self) -> Option<String> {
        let stats = self.env.stats();
        (stats.merged_transactions > 0).then(|| {
            format!(
                "{} requests in {} merged transactions ({:.1} per journal write)",
                stats.merged_requests,
                stats.merged_transactions,
                stats.merged_requests as f64 / stats.merged_transactions as f64
            )
        })
    }

    fn journal_counters(&self) -> Option<super::JournalCounters> {
        let stats = self.env.stats();
        Some(super::JournalCounters {
            commits: stats.commits,
            journal_bytes_written: stats.journal_bytes_written,
            journal_payload_bytes: stats.journal_payload_bytes,
            dirty_page_bytes: stats.dirty_page_bytes,
            journal_files_peak: stats.journal_files_peak,
        })
    }

    fn pages_in_use(&self) -> Result<Option<u64>> {
        Ok(Some(self.env.check()?.used_pages))
    }

    fn concurrent_write_path(&self) -> &'static str {
        if cfg!(feature = "hrafn-submit") {
            "Environment::submit (merged writes, returns when durable)"
        } else {
            "Mutex around begin_write/commit (Environment::submit not used)"
        }
    }

    fn read(&self, f: &mut dyn FnMut(&dyn Reader) -> Result<()>) -> Result<()> {
        let rtx = self.env.begin_read()?;
        let tree = rtx.open_tree(TABLE)?;
        f(&HrafnReader { tree: &tree })
    }
}
