//! The store: series identity, merged appends, and the open/sealed chunk life cycle.

use crate::chunk::{self, Append, OPEN_CHUNK_BYTES, Sample};
use crate::error::{Error, Result};
use crate::keys::*;
use crate::labels::Labels;
use hrafn::{Environment, WriteTxn};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::Arc;

/// Longest `name` plus `value` of one label, in bytes: the label index keys by the pair.
pub const LABEL_PAIR_MAX_BYTES: usize = 1024;

/// A series' id: stable for the series' life, never reused for another label set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesId(pub u64);

/// How a [`Store`] behaves.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// How far behind its newest sample a series still accepts samples, in milliseconds.
    /// Older samples are counted in [`AppendReport::too_old`] and dropped.
    pub out_of_order_window_ms: i64,
    /// Options of the environment [`Store::open`] opens.
    pub environment: hrafn::Options,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            out_of_order_window_ms: 3_600_000,
            environment: hrafn::Options::default(),
        }
    }
}

/// What an append did with its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppendReport {
    /// Samples appended in order to their series' open chunk.
    pub appended: u64,
    /// Samples at or before their series' newest sample (within the window): kept aside
    /// and read back in their place; a sample at a stored timestamp replaces it.
    pub out_of_order: u64,
    /// Samples older than the out-of-order window: dropped.
    pub too_old: u64,
    /// Samples for a [`SeriesId`] the store does not know (deleted): dropped.
    pub unknown_series: u64,
    /// Series the append created.
    pub series_created: u64,
    /// Open chunks that filled up and were sealed.
    pub chunks_sealed: u64,
}

impl AppendReport {
    fn add(&mut self, other: &AppendReport) {
        self.appended += other.appended;
        self.out_of_order += other.out_of_order;
        self.too_old += other.too_old;
        self.unknown_series += other.unknown_series;
        self.series_created += other.series_created;
        self.chunks_sealed += other.chunks_sealed;
    }
}

/// A time-series store in one Hrafn environment. Share it between threads: appends from
/// many threads are merged into shared transactions and journal writes.
pub struct Store {
    env: Environment,
    options: StoreOptions,
    /// Label set → id, for series known to be committed. An entry can go stale only
    /// through a deletion, which appends notice (the series has no open chunk) and repair.
    cache: RwLock<IdCache>,
}

/// The cached ids, and how many times they were cleared: an id resolved before a clear
/// (by a transaction that may have run before the deletion committed) is not cached
/// after it, where it would stay stale for `series_id` to hand out.
#[derive(Default)]
struct IdCache {
    ids: HashMap<Labels, u64>,
    generation: u64,
}

impl IdCache {
    /// Caches `resolved` if no clear came since `generation` was read.
    fn insert_since(&mut self, generation: u64, resolved: impl IntoIterator<Item = (Labels, u64)>) {
        if self.generation == generation {
            self.ids.extend(resolved);
        }
    }
}

/// One row of an append: a series named by labels or by id, and a sample.
#[derive(Clone)]
enum Target {
    Labels(Labels, Option<u64>),
    Id(u64),
}

impl Store {
    /// Opens (creating if needed) a store in directory `path`.
    ///
    /// # Errors
    /// As [`Environment::open`]; [`Error::Corrupt`] for a store of another layout.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        let env = Environment::open(path, options.environment.clone())?;
        Store::with_environment(env, options)
    }

    /// Opens an existing store for reading only: another process may hold it open for
    /// writing, and nothing on disk changes. Appends and maintenance fail with the
    /// engine's read-only error.
    ///
    /// # Errors
    /// [`Error::NotAStore`] when the environment holds no time-series store; as
    /// [`Environment::open_read_only`].
    pub fn open_read_only(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        let env = Environment::open_read_only(path, options.environment.clone())?;
        {
            let rtx = env.begin_read()?;
            if !rtx.list_trees()?.iter().any(|t| t == TREE_META) {
                return Err(Error::NotAStore);
            }
            let version = rtx
                .open_tree(TREE_META)?
                .get(META_LAYOUT_VERSION)?
                .map(<[u8]>::to_vec);
            if version.as_deref() != Some(&LAYOUT_VERSION.to_be_bytes()[..]) {
                return Err(Error::Corrupt(format!(
                    "time-series layout {version:?}, this build reads {LAYOUT_VERSION}"
                )));
            }
        }
        Ok(Store {
            env,
            options,
            cache: RwLock::default(),
        })
    }

    /// Makes a store of an open environment (its trees are named `ts.*`).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn with_environment(env: Environment, options: StoreOptions) -> Result<Store> {
        let mut wtx = env.begin_write()?;
        {
            let mut meta = wtx.open_tree(TREE_META)?;
            match meta.get(META_LAYOUT_VERSION)? {
                None => {
                    meta.insert(META_LAYOUT_VERSION, LAYOUT_VERSION.to_be_bytes())?;
                    meta.insert(META_NEXT_SERIES_ID, 1u64.to_be_bytes())?;
                }
                Some(v) if v == LAYOUT_VERSION.to_be_bytes() => {}
                Some(v) => {
                    return Err(Error::Corrupt(format!(
                        "time-series layout {v:?}, this build reads {LAYOUT_VERSION}"
                    )));
                }
            }
        }
        for name in [
            TREE_SERIES,
            TREE_LABELS,
            TREE_HEAD,
            TREE_CHUNKS,
            TREE_BLOCKS,
            TREE_OOO,
        ] {
            wtx.open_tree(name)?;
        }
        wtx.open_multi_tree(TREE_POSTINGS)?;
        wtx.commit()?;
        Ok(Store {
            env,
            options,
            cache: RwLock::default(),
        })
    }

    /// The environment underneath (for stats, backups, checks).
    pub fn environment(&self) -> &Environment {
        &self.env
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Appends `samples` (in any order) to the series named by `labels`, creating it if
    /// needed. Durable when it returns (as the environment's durability says).
    ///
    /// A series' samples of one call are taken in time order, so which are in order, out
    /// of order or too old does not depend on their order in the call; of samples at one
    /// timestamp, the one later in the call wins.
    ///
    /// # Errors
    /// [`Error::InvalidLabels`] for a label pair over [`LABEL_PAIR_MAX_BYTES`]; engine
    /// errors.
    pub fn append(&self, labels: &Labels, samples: &[Sample]) -> Result<AppendReport> {
        self.append_batch(samples.iter().map(|s| (labels.clone(), *s)).collect())
    }

    /// Appends a batch of `(series, sample)` rows in one (merged) transaction: a scrape of
    /// many series at one timestamp, or any mix. A series' rows are taken in time order,
    /// as in [`Store::append`].
    ///
    /// # Errors
    /// As [`Store::append`].
    pub fn append_batch(&self, rows: Vec<(Labels, Sample)>) -> Result<AppendReport> {
        let rows = {
            let cache = self.cache.read();
            rows.into_iter()
                .map(|(labels, sample)| {
                    let cached = cache.ids.get(&labels).copied();
                    (Target::Labels(labels, cached), sample)
                })
                .collect::<Vec<_>>()
        };
        for (target, _) in &rows {
            if let Target::Labels(labels, None) = target {
                check_label_sizes(labels)?;
            }
        }
        self.run_append(rows)
    }

    /// Appends rows to series named by id (see [`Store::series_id`]): the cheapest path
    /// for a caller that appends to the same series again and again.
    ///
    /// # Errors
    /// Engine errors.
    pub fn append_ids(&self, rows: &[(SeriesId, Sample)]) -> Result<AppendReport> {
        self.run_append(rows.iter().map(|&(id, s)| (Target::Id(id.0), s)).collect())
    }

    /// The id of the series named by `labels`, creating the series if needed.
    ///
    /// # Errors
    /// As [`Store::append`].
    pub fn series_id(&self, labels: &Labels) -> Result<SeriesId> {
        let generation = {
            let cache = self.cache.read();
            if let Some(&id) = cache.ids.get(labels) {
                return Ok(SeriesId(id));
            }
            cache.generation
        };
        check_label_sizes(labels)?;
        let owned = labels.clone();
        let (id, _) = self.env.try_submit(move |wtx| -> Result<(u64, bool)> {
            let mut created = false;
            let id = lookup_or_create(wtx, &owned, &mut created)?;
            Ok((id, created))
        })?;
        self.cache
            .write()
            .insert_since(generation, [(labels.clone(), id)]);
        Ok(SeriesId(id))
    }

    /// The ids of the series named by `labels`, creating those that do not exist, in one
    /// transaction (a scrape target's series, resolved once).
    ///
    /// # Errors
    /// As [`Store::append`].
    pub fn series_ids(&self, labels: &[Labels]) -> Result<Vec<SeriesId>> {
        for l in labels {
            check_label_sizes(l)?;
        }
        let generation = self.cache.read().generation;
        let owned: Arc<Vec<Labels>> = Arc::new(labels.to_vec());
        let shared = Arc::clone(&owned);
        let ids = self.env.try_submit(move |wtx| -> Result<Vec<u64>> {
            let mut created = false;
            shared
                .iter()
                .map(|l| lookup_or_create(wtx, l, &mut created))
                .collect()
        })?;
        self.cache
            .write()
            .insert_since(generation, owned.iter().cloned().zip(ids.iter().copied()));
        Ok(ids.into_iter().map(SeriesId).collect())
    }

    fn run_append(&self, rows: Vec<(Target, Sample)>) -> Result<AppendReport> {
        let generation = self.cache.read().generation;
        let rows = Arc::new(rows);
        let window_ms = self.options.out_of_order_window_ms;
        let shared = Arc::clone(&rows);
        let (report, resolved) = self
            .env
            .try_submit(move |wtx| apply(wtx, &shared, window_ms))?;
        if !resolved.is_empty() {
            let resolved = resolved
                .into_iter()
                .filter_map(|(row, id)| match &rows[row] {
                    (Target::Labels(labels, _), _) => Some((labels.clone(), id)),
                    _ => None,
                });
            self.cache.write().insert_since(generation, resolved);
        }
        Ok(report)
    }

    /// Forgets cached ids (after a deletion).
    pub(crate) fn clear_cache(&self) {
        let mut cache = self.cache.write();
        cache.ids.clear();
        cache.generation += 1;
    }
}

fn check_label_sizes(labels: &Labels) -> Result<()> {
    match labels
        .iter()
        .find(|(n, v)| n.len() + v.len() > LABEL_PAIR_MAX_BYTES)
    {
        Some((n, v)) => Err(Error::InvalidLabels(format!(
            "label {n} has {} bytes of name and value, over {LABEL_PAIR_MAX_BYTES}",
            n.len() + v.len()
        ))),
        None => Ok(()),
    }
}

/// Rows whose series got an id in this transaction: `(row index, id)`, for the cache.
type Resolved = Vec<(usize, u64)>;

/// The body of an append transaction. Runs again if a merged transaction is retried, so
/// it changes nothing outside `wtx`.
fn apply(
    wtx: &mut WriteTxn<'_>,
    rows: &[(Target, Sample)],
    window_ms: i64,
) -> Result<(AppendReport, Resolved)> {
    let mut report = AppendReport::default();
    let mut resolved: Resolved = Vec::new();
    // 1. An id for every row; label sets not cached are looked up (or created) once.
    let mut ids: Vec<Option<u64>> = Vec::with_capacity(rows.len());
    let mut local: HashMap<&Labels, u64> = HashMap::new();
    for (row, (target, _)) in rows.iter().enumerate() {
        ids.push(match target {
            Target::Id(id) => Some(*id),
            Target::Labels(_, Some(id)) => Some(*id),
            Target::Labels(labels, None) => {
                let id = match local.get(labels) {
                    Some(&id) => id,
                    None => {
                        let mut created = false;
                        let id = lookup_or_create(wtx, labels, &mut created)?;
                        report.series_created += u64::from(created);
                        local.insert(labels, id);
                        id
                    }
                };
                resolved.push((row, id));
                Some(id)
            }
        });
    }
    // 2. Samples into open chunks; a cached id whose series was deleted is resolved again.
    let mut pending: Vec<usize> = (0..rows.len()).collect();
    for _attempt in 0..2 {
        let mut out = HeadOutput::default();
        let stale = append_to_heads(wtx, rows, &ids, &pending, window_ms, &mut out)?;
        report.add(&out.report);
        store_sealed(wtx, &out.sealed)?;
        store_out_of_order(wtx, &out.out_of_order)?;
        if stale.is_empty() {
            break;
        }
        let mut again = Vec::new();
        for row in stale {
            match &rows[row].0 {
                Target::Labels(labels, _) => {
                    let mut created = false;
                    let id = lookup_or_create(wtx, labels, &mut created)?;
                    report.series_created += u64::from(created);
                    ids[row] = Some(id);
                    resolved.push((row, id));
                    again.push(row);
                }
                Target::Id(_) => report.unknown_series += 1,
            }
        }
        pending = again;
    }
    Ok((report, resolved))
}

#[derive(Default)]
struct HeadOutput {
    report: AppendReport,
    sealed: Vec<(u64, Vec<u8>)>,
    out_of_order: Vec<(u64, Sample)>,
}

/// Appends the `pending` rows to their open chunks. Returns the rows whose series has no
/// open chunk (it was deleted).
fn append_to_heads(
    wtx: &mut WriteTxn<'_>,
    rows: &[(Target, Sample)],
    ids: &[Option<u64>],
    pending: &[usize],
    window_ms: i64,
    out: &mut HeadOutput,
) -> Result<Vec<usize>> {
    // In series order, so that series whose open chunks share a leaf share one descent;
    // within a series in time order, so that what is in order or too old does not depend
    // on the order of the rows (stable: at one timestamp the later row wins).
    let mut order: Vec<SeriesRow> = pending
        .iter()
        .filter_map(|&row| ids[row].map(|id| (id, row)))
        .collect();
    order.sort_by_key(|&(id, row)| (id, rows[row].1.timestamp_ms));
    let mut sealed_ends = SealedEnds::new();
    let (mut absent, waiting) = heads_pass(wtx, rows, &order, &sealed_ends, window_ms, out)?;
    if !waiting.is_empty() {
        {
            let chunks = wtx.open_tree(TREE_CHUNKS)?;
            for &(id, _) in &waiting {
                if let Entry::Vacant(slot) = sealed_ends.entry(id) {
                    let newest = chunks.prefix(id_key(id))?.next_back().transpose()?;
                    slot.insert(match newest {
                        Some((_, bytes)) => Some(chunk::header(bytes)?.last_timestamp_ms),
                        None => None,
                    });
                }
            }
        }
        // Every waiting series' end is known now: nothing waits again.
        let (more, _) = heads_pass(wtx, rows, &waiting, &sealed_ends, window_ms, out)?;
        absent.extend(more);
    }
    Ok(absent)
}

/// The end of a series' newest sealed chunk (`None`: it has none), by series id.
type SealedEnds = HashMap<u64, Option<i64>>;

/// A row to append and its series: `(series id, row index)`.
type SeriesRow = (u64, usize);

/// One pass of [`append_to_heads`] over `order`'s `(series id, row)`s. Returns the rows
/// whose series has no open chunk, and those left waiting for their series' entry in
/// `sealed_ends` because its open chunk is empty.
fn heads_pass(
    wtx: &mut WriteTxn<'_>,
    rows: &[(Target, Sample)],
    order: &[SeriesRow],
    sealed_ends: &SealedEnds,
    window_ms: i64,
    out: &mut HeadOutput,
) -> Result<(Vec<usize>, Vec<SeriesRow>)> {
    let mut head = wtx.open_tree(TREE_HEAD)?;
    let keys: Vec<[u8; 8]> = order.iter().map(|&(id, _)| id_key(id)).collect();
    let mut waiting: Vec<SeriesRow> = Vec::new();
    // The open chunk is changed where it lies in the page: the journal records only the
    // bytes the append touched.
    let mut outcome: Result<()> = Ok(());
    let absent = head.update_in_place_each(&keys, |i, open| {
        let (id, row) = order[i];
        if outcome.is_err() {
            return;
        }
        // The rows of a series that waits all wait, to keep their order.
        if waiting.last().is_some_and(|&(w, _)| w == id) {
            waiting.push(order[i]);
            return;
        }
        let sealed_end = sealed_ends.get(&id).copied();
        match append_one(open, id, rows[row].1, sealed_end, window_ms, out) {
            Ok(true) => {}
            Ok(false) => waiting.push(order[i]),
            Err(e) => outcome = Err(e),
        }
    })?;
    outcome?;
    Ok((absent.into_iter().map(|i| order[i].1).collect(), waiting))
}

/// Appends `sample` to series `id`'s open chunk `open` (sealing it when full), or sets it
/// aside as out of order, or counts it too old. `sealed_end` is the end of the series'
/// newest sealed chunk, when looked up: an empty open chunk does not tell what is in
/// order, since retention may empty it beside a sealed chunk an append made meanwhile.
/// Returns `false`, changing nothing, when the open chunk is empty and `sealed_end` was
/// not looked up.
fn append_one(
    open: &mut [u8],
    id: u64,
    sample: Sample,
    sealed_end: Option<Option<i64>>,
    window_ms: i64,
    out: &mut HeadOutput,
) -> Result<bool> {
    if open.len() != OPEN_CHUNK_BYTES {
        return Err(Error::Corrupt(format!(
            "open chunk of series {id} has {} bytes",
            open.len()
        )));
    }
    let newest_ms = match (chunk::open_header(open)?, sealed_end) {
        (Some(h), _) => Some(h.last_timestamp_ms),
        (None, Some(end)) => end,
        (None, None) => return Ok(false),
    };
    if let Some(newest_ms) = newest_ms
        && sample.timestamp_ms <= newest_ms
    {
        if sample.timestamp_ms < newest_ms.saturating_sub(window_ms) {
            out.report.too_old += 1;
        } else {
            out.report.out_of_order += 1;
            out.out_of_order.push((id, sample));
        }
        return Ok(true);
    }
    if chunk::open_append(open, sample)? == Append::Full {
        let sealed = chunk::seal(open)?
            .ok_or_else(|| Error::Corrupt(format!("series {id}: a full open chunk is empty")))?;
        out.sealed.push((id, sealed));
        out.report.chunks_sealed += 1;
        open.copy_from_slice(&chunk::open_empty());
        if chunk::open_append(open, sample)? == Append::Full {
            return Err(Error::Corrupt("an empty open chunk is full".into()));
        }
    }
    out.report.appended += 1;
    Ok(true)
}

/// Files sealed chunks under their series and in the age index.
pub(crate) fn store_sealed(wtx: &mut WriteTxn<'_>, sealed: &[(u64, Vec<u8>)]) -> Result<()> {
    if sealed.is_empty() {
        return Ok(());
    }
    let mut spans = Vec::with_capacity(sealed.len());
    {
        let mut chunks = wtx.open_tree(TREE_CHUNKS)?;
        for (id, bytes) in sealed {
            let h = chunk::header(bytes)?;
            chunks.insert(chunk_key(*id, h.first_timestamp_ms), bytes)?;
            spans.push((*id, h.first_timestamp_ms, h.last_timestamp_ms));
        }
    }
    let mut blocks = wtx.open_tree(TREE_BLOCKS)?;
    for (id, first, last) in spans {
        blocks.insert(block_key(last, id, first), [])?;
    }
    Ok(())
}

/// Keeps out-of-order samples in their series' nested fixed-size tree.
fn store_out_of_order(wtx: &mut WriteTxn<'_>, samples: &[(u64, Sample)]) -> Result<()> {
    if samples.is_empty() {
        return Ok(());
    }
    let mut ooo = wtx.open_tree(TREE_OOO)?;
    for (id, sample) in samples {
        let mut tree = ooo.open_fixed_tree(id_key(*id), OOO_VALUE_BYTES)?;
        tree.insert(
            time_key(sample.timestamp_ms),
            &sample.value.to_bits().to_le_bytes(),
        )?;
    }
    Ok(())
}

/// The id of `labels`' series, found through its hash, or a new series.
fn lookup_or_create(wtx: &mut WriteTxn<'_>, labels: &Labels, created: &mut bool) -> Result<u64> {
    let canonical = labels.encode();
    let hash = labels_hash(&canonical);
    let candidates: Vec<u64> = {
        let series = wtx.open_tree(TREE_SERIES)?;
        series
            .prefix(hash.to_be_bytes())?
            .map(|item| {
                item.map_err(Error::from)
                    .and_then(|(k, _)| Ok(pair_from(k)?.1))
            })
            .collect::<Result<_>>()?
    };
    {
        let by_id = wtx.open_tree(TREE_LABELS)?;
        for id in &candidates {
            if by_id.get(id_key(*id))? == Some(canonical.as_slice()) {
                return Ok(*id);
            }
        }
    }
    let id = {
        let mut meta = wtx.open_tree(TREE_META)?;
        let next = meta
            .get(META_NEXT_SERIES_ID)?
            .ok_or_else(|| Error::Corrupt("no next series id".into()))
            .and_then(id_from)?;
        let after = next
            .checked_add(1)
            .ok_or_else(|| Error::Corrupt("series ids are used up".into()))?;
        meta.insert(META_NEXT_SERIES_ID, after.to_be_bytes())?;
        next
    };
    // A counter set back must not hand an existing series' id, and so its samples, to
    // another label set.
    if wtx.open_tree(TREE_LABELS)?.get(id_key(id))?.is_some()
        || wtx.open_tree(TREE_HEAD)?.get(id_key(id))?.is_some()
    {
        return Err(Error::Corrupt(format!(
            "the next series id {id} is taken by a stored series"
        )));
    }
    wtx.open_tree(TREE_SERIES)?.insert(pair_key(hash, id), [])?;
    wtx.open_tree(TREE_LABELS)?.insert(id_key(id), &canonical)?;
    {
        let mut postings = wtx.open_multi_tree(TREE_POSTINGS)?;
        for (name, value) in labels.iter() {
            postings.add(posting_key(name, value), id_key(id))?;
        }
    }
    wtx.open_tree(TREE_HEAD)?
        .insert(id_key(id), chunk::open_empty())?;
    *created = true;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id resolved before a deletion cleared the cache (its transaction may have run
    /// before the deletion committed) is not cached after the clear: `series_id` would
    /// hand out the deleted series' id until an append by labels repaired it.
    #[test]
    fn an_id_resolved_before_a_clear_is_not_cached_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        let labels = Labels::new([("__name__", "up")]).expect("labels");
        let before = store.cache.read().generation;
        store.clear_cache();
        store
            .cache
            .write()
            .insert_since(before, [(labels.clone(), 7)]);
        assert!(store.cache.read().ids.is_empty());
        let now = store.cache.read().generation;
        store.cache.write().insert_since(now, [(labels.clone(), 7)]);
        assert_eq!(store.cache.read().ids.get(&labels), Some(&7));
        // Through the API: a fresh id after a deletion is cached and appends land.
        let sample = crate::chunk::Sample {
            timestamp_ms: 1,
            value: 1.0,
        };
        store.append(&labels, &[sample]).expect("append");
        let id = store.series_id(&labels).expect("id");
        let sel = crate::text::parse_selector("up").expect("selector");
        assert_eq!(store.delete_series(&sel).expect("delete"), 1);
        let again = store.series_id(&labels).expect("id");
        assert_ne!(again, id);
        let r = store.append_ids(&[(again, sample)]).expect("append");
        assert_eq!(r.unknown_series, 0, "{r:?}");
    }
}
