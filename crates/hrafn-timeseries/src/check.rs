//! The integrity check: every structure of the store agrees with every other.

use crate::chunk;
use crate::error::Result;
use crate::keys::*;
use crate::labels::Labels;
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};

/// What [`Store::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TsCheckReport {
    /// Series checked.
    pub series: u64,
    /// Sealed chunks decoded.
    pub sealed_chunks: u64,
    /// Samples in sealed and open chunks.
    pub samples: u64,
    /// Out-of-order samples kept aside.
    pub out_of_order_samples: u64,
    /// Every disagreement, in words; empty when the store is sound.
    pub problems: Vec<String>,
}

impl TsCheckReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Store {
    /// Checks the engine's pages (as [`hrafn::ReadTxn::check`]) and then that the store's
    /// trees agree: every series has its labels, hash entry, index entries and open chunk;
    /// every index entry names a series carrying that label; every sealed chunk decodes,
    /// starts at its key's time, does not overlap its neighbours or the open chunk, and is
    /// in the age index, which holds nothing else; out-of-order samples belong to a series;
    /// the next series id is above every series' id.
    ///
    /// # Errors
    /// Engine errors reading the trees (a damaged page, a malformed key or entry is a
    /// reported problem instead).
    pub fn check(&self) -> Result<TsCheckReport> {
        let rtx = self.environment().begin_read()?;
        let mut r = TsCheckReport::default();
        if let Err(e) = rtx.check() {
            r.problems.push(format!("engine check: {e}"));
            return Ok(r);
        }
        let problem = |r: &mut TsCheckReport, p: String| r.problems.push(p);
        // Series and their labels.
        let mut series: BTreeMap<u64, Labels> = BTreeMap::new();
        let mut largest_id = None;
        for item in rtx.open_tree(TREE_LABELS)?.iter()? {
            let (k, v) = item?;
            let Some(id) = noted(&mut r, "labels key", id_from(k)) else {
                continue;
            };
            largest_id = largest_id.max(Some(id));
            match Labels::decode(v) {
                Ok(l) => {
                    series.insert(id, l);
                }
                Err(e) => problem(&mut r, format!("series {id}: {e}")),
            }
        }
        r.series = series.len() as u64;
        // A counter at or below a stored id would hand that id to a new label set.
        match rtx.open_tree(TREE_META)?.get(META_NEXT_SERIES_ID)? {
            None => problem(&mut r, "no next series id".into()),
            Some(bytes) => {
                if let Some(next) = noted(&mut r, "next series id", id_from(bytes))
                    && let Some(largest) = largest_id.filter(|&l| next <= l)
                {
                    problem(
                        &mut r,
                        format!("next series id {next} is not above series {largest}"),
                    );
                }
            }
        }
        let mut hashed = BTreeSet::new();
        for item in rtx.open_tree(TREE_SERIES)?.iter()? {
            let Some((hash, id)) = noted(&mut r, "hash key", pair_from(item?.0)) else {
                continue;
            };
            match series.get(&id) {
                Some(l) if labels_hash(&l.encode()) == hash => {
                    hashed.insert(id);
                }
                Some(_) => problem(&mut r, format!("series {id} filed under a wrong hash")),
                None => problem(&mut r, format!("hash entry for unknown series {id}")),
            }
        }
        let postings = rtx.open_multi_tree(TREE_POSTINGS)?;
        let mut indexed = 0u64;
        for key in postings.keys::<&[u8], _>(..)? {
            let key = key?;
            let Some((name, value)) = noted(&mut r, "index key", posting_from(key)) else {
                continue;
            };
            for v in postings.values(key)? {
                let what = format!("index {name}={value}");
                let Some(id) = noted(&mut r, &what, id_from(v?)) else {
                    continue;
                };
                indexed += 1;
                if series.get(&id).and_then(|l| l.get(name)) != Some(value) {
                    problem(
                        &mut r,
                        format!("index {name}={value} names series {id}, which lacks it"),
                    );
                }
            }
        }
        let pairs: u64 = series.values().map(|l| l.len() as u64).sum();
        if pairs != indexed {
            problem(
                &mut r,
                format!("{pairs} label pairs but {indexed} index entries"),
            );
        }
        // Open chunks.
        let head = rtx.open_tree(TREE_HEAD)?;
        let mut head_first: BTreeMap<u64, i64> = BTreeMap::new();
        for &id in series.keys() {
            if !hashed.contains(&id) {
                problem(&mut r, format!("series {id} has no hash entry"));
            }
            match head.get(id_key(id))? {
                None => problem(&mut r, format!("series {id} has no open chunk")),
                Some(open) => match chunk::open_samples(open) {
                    Ok(samples) => {
                        if samples
                            .windows(2)
                            .any(|w| w[0].timestamp_ms >= w[1].timestamp_ms)
                        {
                            problem(&mut r, format!("series {id}: open chunk out of order"));
                        }
                        if let Some(first) = samples.first() {
                            head_first.insert(id, first.timestamp_ms);
                        }
                        r.samples += samples.len() as u64;
                    }
                    Err(e) => problem(&mut r, format!("series {id}: open chunk: {e}")),
                },
            }
        }
        if head.len() != series.len() as u64 {
            problem(
                &mut r,
                format!("{} open chunks for {} series", head.len(), series.len()),
            );
        }
        // Sealed chunks and the age index.
        let mut spans: BTreeSet<(i64, u64, i64)> = BTreeSet::new();
        let mut previous: Option<(u64, i64)> = None;
        for item in rtx.open_tree(TREE_CHUNKS)?.iter()? {
            let (k, bytes) = item?;
            let Some((id, first_key)) = noted(&mut r, "chunk key", pair_from(k)) else {
                continue;
            };
            let first = time_from_key(first_key);
            r.sealed_chunks += 1;
            if !series.contains_key(&id) {
                problem(&mut r, format!("chunk of unknown series {id}"));
            }
            let samples = match chunk::decode(bytes) {
                Ok(s) => s,
                Err(e) => {
                    problem(&mut r, format!("series {id} chunk at {first}: {e}"));
                    continue;
                }
            };
            let (Some(a), Some(b)) = (samples.first(), samples.last()) else {
                problem(&mut r, format!("series {id} chunk at {first} is empty"));
                continue;
            };
            if a.timestamp_ms != first {
                problem(
                    &mut r,
                    format!(
                        "series {id} chunk keyed {first} starts at {}",
                        a.timestamp_ms
                    ),
                );
            }
            if let Some((pid, plast)) = previous
                && pid == id
                && plast >= first
            {
                problem(&mut r, format!("series {id}: chunks overlap at {first}"));
            }
            if head_first.get(&id).is_some_and(|&h| b.timestamp_ms >= h) {
                problem(
                    &mut r,
                    format!("series {id}: chunk at {first} reaches the open chunk"),
                );
            }
            previous = Some((id, b.timestamp_ms));
            spans.insert((b.timestamp_ms, id, first));
            r.samples += samples.len() as u64;
        }
        let mut blocks = BTreeSet::new();
        for item in rtx.open_tree(TREE_BLOCKS)?.iter()? {
            if let Some(block) = noted(&mut r, "age index key", block_from(item?.0)) {
                blocks.insert(block);
            }
        }
        for missing in spans.difference(&blocks) {
            problem(
                &mut r,
                format!("chunk {missing:?} (last, series, first) missing from the age index"),
            );
        }
        for extra in blocks.difference(&spans) {
            problem(&mut r, format!("age index entry {extra:?} names no chunk"));
        }
        // Out-of-order samples.
        let ooo = rtx.open_tree(TREE_OOO)?;
        for item in ooo.iter()? {
            let (k, _) = item?;
            let Some(id) = noted(&mut r, "out-of-order key", id_from(k)) else {
                continue;
            };
            if !series.contains_key(&id) {
                problem(
                    &mut r,
                    format!("out-of-order samples of unknown series {id}"),
                );
                continue;
            }
            // A plain value where the nested tree belongs is damage, not a read failure.
            let what = format!("out-of-order samples of series {id}");
            if let Some(tree) = noted(&mut r, &what, ooo.open_fixed_tree(k).map_err(Into::into)) {
                r.out_of_order_samples += tree.len();
            }
        }
        Ok(r)
    }
}

/// `result`'s value, or `None` with its error recorded as a problem of `what`.
fn noted<T>(r: &mut TsCheckReport, what: &str, result: Result<T>) -> Option<T> {
    result
        .map_err(|e| r.problems.push(format!("{what}: {e}")))
        .ok()
}
