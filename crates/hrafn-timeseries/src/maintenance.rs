//! Retention, deletion and compaction.

use crate::chunk::{self, Sample};
use crate::error::{Error, Result};
use crate::keys::*;
use crate::labels::Labels;
use crate::query::{f64_from, overlay};
use crate::store::{Store, store_sealed};
use crate::text::Matcher;
use hrafn::WriteTxn;
use std::ops::Bound;

/// Most samples a chunk made by [`Store::compact`] holds: two hours of 15 s scrapes.
pub const COMPACTED_CHUNK_SAMPLES: usize = 480;

/// Series one maintenance transaction works on, so no transaction grows without bound.
const SERIES_PER_TXN: usize = 512;

/// Samples rewritten or removed after which a maintenance transaction commits before its
/// next series: series with long histories must not make one transaction past the
/// scratch limit (one series' own work still goes in one). A compaction every few hours
/// of 512 series scraped every 15 s stays under it.
const SAMPLES_PER_TXN: u64 = 1 << 18;

/// What [`Store::drop_before`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Sealed chunks whose newest sample was older than the cutoff.
    pub chunks_dropped: u64,
    /// Open chunks emptied because all their samples were older than the cutoff.
    pub open_chunks_emptied: u64,
    /// Out-of-order samples older than the cutoff and than every chunk kept of their
    /// series.
    pub out_of_order_dropped: u64,
    /// Series left without any sample, and so deleted.
    pub series_deleted: u64,
}

/// What [`Store::compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Series whose sealed chunks were rewritten.
    pub series_rewritten: u64,
    /// Sealed chunks rewritten: a series' run of full chunks (of
    /// [`COMPACTED_CHUNK_SAMPLES`]) that no out-of-order sample falls into stays as it is,
    /// so a compaction's work is in what came since the last one.
    pub chunks_before: u64,
    /// Sealed chunks the rewritten ones became.
    pub chunks_after: u64,
    /// Out-of-order samples folded into chunks.
    pub out_of_order_folded: u64,
}

impl Store {
    /// Drops data older than `cutoff_ms`: every sealed chunk whose newest sample is older
    /// (found through the age index, so the cost is in the chunks dropped, not the chunks
    /// kept), open chunks and out-of-order samples older than it (checked per series),
    /// and series it leaves empty (a series never given a sample is kept). A chunk that
    /// straddles the cutoff stays whole, and so do the out-of-order samples at or after
    /// the first sample a kept chunk of their series holds: one of them may overwrite a
    /// kept sample, whose old value must not show again.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn drop_before(&self, cutoff_ms: i64) -> Result<RetentionReport> {
        let mut report = RetentionReport::default();
        let outcome = self.drop_before_into(cutoff_ms, &mut report);
        // Deletions committed before a failure count too: cached ids of deleted series
        // must not be handed out.
        if report.series_deleted > 0 {
            self.clear_cache();
        }
        outcome.map(|()| report)
    }

    /// [`Store::drop_before`], counting into `report` as its transactions commit.
    fn drop_before_into(&self, cutoff_ms: i64, report: &mut RetentionReport) -> Result<()> {
        // Series that lost sealed chunks: with the pass below, the only ones it can leave
        // empty.
        let mut dropped_from = std::collections::HashSet::new();
        // Sealed chunks, oldest first, a bounded number per transaction.
        loop {
            let mut wtx = self.environment().begin_write()?;
            let doomed: Vec<(i64, u64, i64)> = {
                let blocks = wtx.open_tree(TREE_BLOCKS)?;
                let end = time_key(cutoff_ms).to_be_bytes();
                let mut v = Vec::new();
                for item in
                    blocks.range::<&[u8], _>((Bound::Unbounded, Bound::Excluded(&end[..])))?
                {
                    v.push(block_from(item?.0)?);
                    if v.len() == SERIES_PER_TXN * 8 {
                        break;
                    }
                }
                v
            };
            if doomed.is_empty() {
                break;
            }
            {
                let mut blocks = wtx.open_tree(TREE_BLOCKS)?;
                for &(last, id, first) in &doomed {
                    blocks.remove(block_key(last, id, first))?;
                }
            }
            {
                let mut chunks = wtx.open_tree(TREE_CHUNKS)?;
                for &(_, id, first) in &doomed {
                    chunks.remove(chunk_key(id, first))?;
                }
            }
            report.chunks_dropped += doomed.len() as u64;
            wtx.commit()?;
            dropped_from.extend(doomed.iter().map(|&(_, id, _)| id));
        }
        // Open chunks and out-of-order samples, per series.
        let ids = self.all_ids()?;
        for batch in ids.chunks(SERIES_PER_TXN) {
            let mut wtx = self.environment().begin_write()?;
            // Only a series this call took samples from can be left empty by it: one that
            // was never given a sample (ids resolved ahead of the first scrape) stays.
            let mut touched: Vec<u64> = batch
                .iter()
                .copied()
                .filter(|id| dropped_from.contains(id))
                .collect();
            {
                let mut head = wtx.open_tree(TREE_HEAD)?;
                for &id in batch {
                    let Some(open) = head.get(id_key(id))? else {
                        continue;
                    };
                    if chunk::open_header(open)?.is_some_and(|h| h.last_timestamp_ms < cutoff_ms) {
                        head.insert(id_key(id), chunk::open_empty())?;
                        report.open_chunks_emptied += 1;
                        touched.push(id);
                    }
                }
            }
            for &id in batch {
                if !has_nested(&wtx.open_tree(TREE_OOO)?, id)? {
                    continue;
                }
                // An out-of-order sample may overwrite a sample of a chunk that stays: it
                // goes only with the chunks before it, or the old value would show again.
                let drop_to_ms =
                    earliest_held(&mut wtx, id)?.map_or(cutoff_ms, |t| t.min(cutoff_ms));
                let mut ooo = wtx.open_tree(TREE_OOO)?;
                let (dropped, left) = {
                    let mut tree = ooo.open_fixed_tree(id_key(id), OOO_VALUE_BYTES)?;
                    let dropped = tree.delete_range(..time_key(drop_to_ms))?;
                    (dropped, tree.len())
                };
                report.out_of_order_dropped += dropped;
                if dropped > 0 {
                    touched.push(id);
                }
                if left == 0 {
                    ooo.remove(id_key(id))?;
                }
            }
            touched.sort_unstable();
            touched.dedup();
            let mut empty = Vec::new();
            for &id in &touched {
                if series_is_empty(&mut wtx, id)? {
                    empty.push(id);
                }
            }
            report.series_deleted += delete_ids(&mut wtx, &empty)?;
            wtx.commit()?;
        }
        Ok(())
    }

    /// Deletes every series `matchers` select, with all their samples and index entries.
    /// Returns how many were deleted.
    ///
    /// # Errors
    /// As [`Store::select`].
    pub fn delete_series(&self, matchers: &[Matcher]) -> Result<u64> {
        let ids: Vec<u64> = self
            .series(matchers)?
            .into_iter()
            .map(|(id, _)| id.0)
            .collect();
        let mut deleted = 0;
        let outcome = in_bounded_txns(self, &ids, |wtx, id| {
            let (existed, samples) = delete_id(wtx, id)?;
            deleted += u64::from(existed);
            Ok(samples)
        });
        // Cached ids of deleted series must not be trusted, also after a failure with
        // earlier transactions committed; appends also repair them.
        self.clear_cache();
        outcome.map(|()| deleted)
    }

    /// Rewrites each series' sealed chunks into chunks of up to [`COMPACTED_CHUNK_SAMPLES`]
    /// samples and folds in its out-of-order samples older than its open chunk: fewer,
    /// fuller chunks take fewer bytes per sample. Series already compact are skipped, and
    /// a series' leading full chunks stay as they are (see [`CompactReport::chunks_before`]).
    ///
    /// # Errors
    /// Engine and corruption errors, among them [`Error::Corrupt`] for sealed chunks of
    /// one series that overlap.
    pub fn compact(&self) -> Result<CompactReport> {
        let mut report = CompactReport::default();
        let ids = self.all_ids()?;
        in_bounded_txns(self, &ids, |wtx, id| compact_series(wtx, id, &mut report))?;
        Ok(report)
    }

    /// Every series id, in order.
    pub(crate) fn all_ids(&self) -> Result<Vec<u64>> {
        let rtx = self.environment().begin_read()?;
        let labels = rtx.open_tree(TREE_LABELS)?;
        labels
            .iter()?
            .map(|item| item.map_err(Error::from).and_then(|(k, _)| id_from(k)))
            .collect()
    }
}

/// Runs `work` on each of `ids` in transactions of up to [`SERIES_PER_TXN`] series, each
/// committed once the samples `work` counts pass [`SAMPLES_PER_TXN`].
fn in_bounded_txns(
    store: &Store,
    ids: &[u64],
    mut work: impl FnMut(&mut WriteTxn<'_>, u64) -> Result<u64>,
) -> Result<()> {
    let mut ids = ids.iter().copied().peekable();
    while ids.peek().is_some() {
        let mut wtx = store.environment().begin_write()?;
        let (mut series, mut samples) = (0, 0);
        while series < SERIES_PER_TXN && samples < SAMPLES_PER_TXN {
            let Some(id) = ids.next() else { break };
            samples += work(&mut wtx, id)?;
            series += 1;
        }
        wtx.commit()?;
    }
    Ok(())
}

fn has_nested(tree: &hrafn::TreeMut<'_, '_>, id: u64) -> Result<bool> {
    // The write handle has no `nested_kind`: a one-key range tells presence.
    let key = id_key(id);
    Ok(tree
        .range::<&[u8], _>(&key[..]..=&key[..])?
        .next()
        .is_some())
}

/// The earliest time series `id` holds in a chunk, sealed or open (`None`: neither holds
/// a sample).
fn earliest_held(wtx: &mut WriteTxn<'_>, id: u64) -> Result<Option<i64>> {
    let open = match wtx.open_tree(TREE_HEAD)?.get(id_key(id))? {
        Some(open) => chunk::open_header(open)?.map(|h| h.first_timestamp_ms),
        None => None,
    };
    let chunks = wtx.open_tree(TREE_CHUNKS)?;
    let sealed = match chunks.prefix(id_key(id))?.next().transpose()? {
        Some((key, _)) => Some(time_from_key(pair_from(key)?.1)),
        None => None,
    };
    Ok(open.into_iter().chain(sealed).min())
}

/// Whether series `id` holds no sample at all.
fn series_is_empty(wtx: &mut WriteTxn<'_>, id: u64) -> Result<bool> {
    if let Some(open) = wtx.open_tree(TREE_HEAD)?.get(id_key(id))?
        && chunk::open_header(open)?.is_some()
    {
        return Ok(false);
    }
    if has_nested(&wtx.open_tree(TREE_OOO)?, id)? {
        return Ok(false);
    }
    let chunks = wtx.open_tree(TREE_CHUNKS)?;
    let none = chunks.prefix(id_key(id))?.next().is_none();
    Ok(none)
}

/// Deletes series `ids` entirely. Returns how many existed.
fn delete_ids(wtx: &mut WriteTxn<'_>, ids: &[u64]) -> Result<u64> {
    let mut deleted = 0;
    for &id in ids {
        deleted += u64::from(delete_id(wtx, id)?.0);
    }
    Ok(deleted)
}

/// Deletes series `id` entirely. Returns whether it existed and how many samples its
/// sealed chunks held.
fn delete_id(wtx: &mut WriteTxn<'_>, id: u64) -> Result<(bool, u64)> {
    let Some(bytes) = wtx
        .open_tree(TREE_LABELS)?
        .get(id_key(id))?
        .map(<[u8]>::to_vec)
    else {
        return Ok((false, 0));
    };
    let labels = Labels::decode(&bytes)?;
    {
        let mut postings = wtx.open_multi_tree(TREE_POSTINGS)?;
        for (name, value) in labels.iter() {
            postings.remove(posting_key(name, value), id_key(id))?;
        }
    }
    wtx.open_tree(TREE_SERIES)?
        .remove(pair_key(labels_hash(&bytes), id))?;
    wtx.open_tree(TREE_LABELS)?.remove(id_key(id))?;
    wtx.open_tree(TREE_HEAD)?.remove(id_key(id))?;
    {
        let mut ooo = wtx.open_tree(TREE_OOO)?;
        if has_nested(&ooo, id)? {
            ooo.remove(id_key(id))?;
        }
    }
    let spans = chunk_spans(wtx, id)?;
    remove_chunks(wtx, id, &spans)?;
    Ok((true, spans.iter().map(|&(_, _, count)| count as u64).sum()))
}

/// Removes the sealed chunks of series `id` whose spans are `spans`, and their age-index
/// entries. Returns how many.
fn remove_chunks(wtx: &mut WriteTxn<'_>, id: u64, spans: &[(i64, i64, usize)]) -> Result<u64> {
    {
        let mut chunks = wtx.open_tree(TREE_CHUNKS)?;
        for &(first, _, _) in spans {
            chunks.remove(chunk_key(id, first))?;
        }
    }
    let mut blocks = wtx.open_tree(TREE_BLOCKS)?;
    for &(first, last, _) in spans {
        blocks.remove(block_key(last, id, first))?;
    }
    Ok(spans.len() as u64)
}

/// `(first, last)` timestamps and sample counts of series `id`'s sealed chunks, in time
/// order, read from their headers.
fn chunk_spans(wtx: &mut WriteTxn<'_>, id: u64) -> Result<Vec<(i64, i64, usize)>> {
    let chunks = wtx.open_tree(TREE_CHUNKS)?;
    let mut spans = Vec::new();
    for item in chunks.prefix(id_key(id))? {
        let (_, bytes) = item?;
        let h = chunk::header(bytes)?;
        spans.push((
            h.first_timestamp_ms,
            h.last_timestamp_ms,
            h.sample_count as usize,
        ));
    }
    Ok(spans)
}

/// Compacts series `id` (see [`Store::compact`]). Returns the samples it rewrote.
fn compact_series(wtx: &mut WriteTxn<'_>, id: u64, report: &mut CompactReport) -> Result<u64> {
    let head_first = match wtx.open_tree(TREE_HEAD)?.get(id_key(id))? {
        Some(open) => chunk::open_header(open)?.map(|h| h.first_timestamp_ms),
        None => return Ok(0),
    };
    let limit = head_first.unwrap_or(i64::MAX);
    let mut extra = Vec::new();
    {
        let mut ooo = wtx.open_tree(TREE_OOO)?;
        if has_nested(&ooo, id)? {
            let tree = ooo.open_fixed_tree(id_key(id), OOO_VALUE_BYTES)?;
            for item in tree.range(..time_key(limit))? {
                let (t, v) = item?;
                extra.push(Sample {
                    timestamp_ms: time_from_key(t),
                    value: f64_from(v)?,
                });
            }
        }
    }
    let spans = chunk_spans(wtx, id)?;
    // Chunks that overlap cannot be rewritten as one run (`chunk::encode` needs strictly
    // increasing times); the check reports them.
    if let Some(w) = spans.windows(2).find(|w| w[0].1 >= w[1].0) {
        return Err(Error::Corrupt(format!(
            "series {id}: sealed chunks overlap at {}",
            w[1].0
        )));
    }
    // Leading full chunks that no out-of-order sample falls into stay as they are.
    let earliest_extra = extra.first().map_or(i64::MAX, |s| s.timestamp_ms);
    let kept = spans
        .iter()
        .take_while(|&&(_, last, count)| count >= COMPACTED_CHUNK_SAMPLES && last < earliest_extra)
        .count();
    let rewritten = &spans[kept..];
    let mergeable = rewritten
        .windows(2)
        .any(|w| w[0].2 + w[1].2 <= COMPACTED_CHUNK_SAMPLES);
    if extra.is_empty() && !mergeable {
        return Ok(0);
    }
    let mut samples = Vec::new();
    if let Some(&(first, _, _)) = rewritten.first() {
        // One scan from the first rewritten chunk: the rest of the series' chunks.
        let chunks = wtx.open_tree(TREE_CHUNKS)?;
        let from = chunk_key(id, first);
        for item in chunks.range::<&[u8], _>(&from[..]..)?.take(rewritten.len()) {
            samples.extend(chunk::decode(item?.1)?);
        }
    }
    if let Some(w) = samples
        .windows(2)
        .find(|w| w[0].timestamp_ms >= w[1].timestamp_ms)
    {
        return Err(Error::Corrupt(format!(
            "series {id}: sealed chunks overlap at {}",
            w[1].timestamp_ms
        )));
    }
    let chunks_before = remove_chunks(wtx, id, rewritten)?;
    report.out_of_order_folded += extra.len() as u64;
    if !extra.is_empty() {
        let mut ooo = wtx.open_tree(TREE_OOO)?;
        let left = {
            let mut tree = ooo.open_fixed_tree(id_key(id), OOO_VALUE_BYTES)?;
            tree.delete_range(..time_key(limit))?;
            tree.len()
        };
        if left == 0 {
            ooo.remove(id_key(id))?;
        }
    }
    let samples = overlay(samples, extra);
    let sealed: Vec<(u64, Vec<u8>)> = samples
        .chunks(COMPACTED_CHUNK_SAMPLES)
        .map(|part| (id, chunk::encode(part)))
        .collect();
    report.series_rewritten += 1;
    report.chunks_before += chunks_before;
    report.chunks_after += sealed.len() as u64;
    store_sealed(wtx, &sealed)?;
    Ok(samples.len() as u64)
}
