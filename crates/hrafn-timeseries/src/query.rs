//! Reading: series by label matchers, samples by time range, aggregations over steps.
//!
//! A query runs in one read transaction. It finds series through the label index (the
//! smallest equality posting list first, the others checked by membership), then reads
//! only the chunks whose time span meets the range: the one sealed chunk starting at or
//! before the range start, those starting inside it, the open chunk, and the series'
//! out-of-order samples, which win over stored samples at the same timestamp.

use crate::chunk::{self, Sample};
use crate::error::{Error, Result};
use crate::keys::*;
use crate::labels::Labels;
use crate::store::{SeriesId, Store};
use crate::text::{MatchOp, Matcher, parse_selector};
use hrafn::{ReadTxn, Tree};
use std::collections::BTreeMap;
use std::ops::Bound;

/// How far back an instant value looks for the latest sample, as in Prometheus.
pub const LOOKBACK_MS: i64 = 300_000;

/// An aggregation across the series of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregation {
    /// Sum of the values.
    Sum,
    /// Mean of the values.
    Avg,
    /// Smallest value; NaN values are ignored unless every value is NaN.
    Min,
    /// Largest value; NaN values are ignored unless every value is NaN.
    Max,
    /// Number of series with a value.
    Count,
}

impl std::str::FromStr for Aggregation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Aggregation> {
        Ok(match s {
            "sum" => Aggregation::Sum,
            "avg" => Aggregation::Avg,
            "min" => Aggregation::Min,
            "max" => Aggregation::Max,
            "count" => Aggregation::Count,
            _ => return Err(Error::InvalidQuery(format!("unknown aggregation {s:?}"))),
        })
    }
}

/// A range query: for each step from `start_ms` to `end_ms`, each selected series' value
/// (its latest sample within [`LOOKBACK_MS`], or its per-second rate over `rate_window_ms`),
/// optionally aggregated across series grouped by the `by` labels.
#[derive(Clone, Debug)]
pub struct RangeQuery {
    /// Which series (see [`crate::text::parse_selector`]).
    pub matchers: Vec<Matcher>,
    /// First step, in ms.
    pub start_ms: i64,
    /// Last step at most, in ms.
    pub end_ms: i64,
    /// Distance between steps, in ms (> 0).
    pub step_ms: i64,
    /// `Some(w)`: each series' value at a step is its counter rate over the `w` ms before
    /// it (increase corrected for counter resets, divided by the seconds between the first
    /// and last sample in the window; no extrapolation to the window's edges).
    pub rate_window_ms: Option<i64>,
    /// `Some(a)`: combine the series of each group with `a`.
    pub aggregation: Option<Aggregation>,
    /// Labels that form the groups (all series form one group when empty).
    pub by: Vec<String>,
    /// Most points the result may hold ([`QUERY_POINTS_MAX`] unless set): a query past it
    /// is refused before it takes the memory.
    pub max_points: u64,
}

impl RangeQuery {
    /// A query for the raw values of the series `selector` names.
    ///
    /// # Errors
    /// As [`parse_selector`].
    pub fn new(selector: &str, start_ms: i64, end_ms: i64, step_ms: i64) -> Result<RangeQuery> {
        Ok(RangeQuery {
            matchers: parse_selector(selector)?,
            start_ms,
            end_ms,
            step_ms,
            rate_window_ms: None,
            aggregation: None,
            by: Vec::new(),
            max_points: QUERY_POINTS_MAX,
        })
    }

    /// Refuses the query once its result would hold more than `max_points` points.
    pub fn max_points(mut self, max_points: u64) -> RangeQuery {
        self.max_points = max_points;
        self
    }

    /// Takes each series' rate over `window_ms` instead of its value.
    pub fn rate(mut self, window_ms: i64) -> RangeQuery {
        self.rate_window_ms = Some(window_ms);
        self
    }

    /// Aggregates with `aggregation`, grouped by the labels `by`.
    pub fn aggregate(mut self, aggregation: Aggregation, by: &[&str]) -> RangeQuery {
        self.aggregation = Some(aggregation);
        self.by = by.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// One output series of a [`RangeQuery`]: its labels (a series' own, or a group's `by`
/// labels) and its `(timestamp_ms, value)` points, steps without a value left out. An
/// output with no point at all is left out.
#[derive(Clone, Debug, PartialEq)]
pub struct QuerySeries {
    /// The labels that name this output.
    pub labels: Vec<(String, String)>,
    /// One point per step that had a value.
    pub points: Vec<(i64, f64)>,
}

/// The trees a query reads, opened once.
struct Trees<'t> {
    labels: Tree<'t>,
    postings: hrafn::MultiTree<'t>,
    head: Tree<'t>,
    chunks: Tree<'t>,
    ooo: Tree<'t>,
}

impl<'t> Trees<'t> {
    fn open(rtx: &'t ReadTxn<'_>) -> Result<Trees<'t>> {
        Ok(Trees {
            labels: rtx.open_tree(TREE_LABELS)?,
            postings: rtx.open_multi_tree(TREE_POSTINGS)?,
            head: rtx.open_tree(TREE_HEAD)?,
            chunks: rtx.open_tree(TREE_CHUNKS)?,
            ooo: rtx.open_tree(TREE_OOO)?,
        })
    }

    fn labels_of(&self, id: u64) -> Result<Labels> {
        let bytes = self
            .labels
            .get(id_key(id))?
            .ok_or_else(|| Error::Corrupt(format!("series {id} has no labels")))?;
        Labels::decode(bytes)
    }

    /// Ids of the series whose labels satisfy every matcher, in id order.
    fn select(&self, matchers: &[Matcher]) -> Result<Vec<(u64, Labels)>> {
        crate::text::check_selector(matchers)?;
        // Equality matchers read their posting list directly; the shortest one is the
        // candidate set and the others are checked per candidate by membership.
        let mut equal: Vec<(u64, Vec<u8>)> = Vec::new();
        for m in matchers
            .iter()
            .filter(|m| m.op == MatchOp::Equal && !m.value.is_empty())
        {
            let key = posting_key(&m.name, &m.value);
            equal.push((self.postings.count(&key)?, key));
        }
        equal.sort();
        let mut candidates: Vec<u64> = match equal.first() {
            Some((_, key)) => self
                .postings
                .values(key)?
                .map(|v| v.map_err(Error::from).and_then(id_from))
                .collect::<Result<_>>()?,
            None => {
                // No equality: the union of the values of one matcher that needs its
                // label present.
                let m = matchers
                    .iter()
                    .find(|m| !m.matches_empty())
                    .ok_or_else(|| Error::InvalidQuery("no matcher selects anything".into()))?;
                let mut ids = Vec::new();
                let prefix = posting_key(&m.name, "");
                for key in self
                    .postings
                    .keys::<&[u8], _>((Bound::Included(&prefix[..]), Bound::Unbounded))?
                {
                    let key = key?;
                    if !key.starts_with(&prefix) {
                        break;
                    }
                    let (_, value) = posting_from(key)?;
                    if m.matches(Some(value)) {
                        for v in self.postings.values(key)? {
                            ids.push(id_from(v?)?);
                        }
                    }
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
        };
        for (_, key) in equal.iter().skip(1) {
            let mut kept = Vec::with_capacity(candidates.len());
            for id in candidates {
                if self.postings.contains(key, id_key(id))? {
                    kept.push(id);
                }
            }
            candidates = kept;
        }
        let mut out = Vec::with_capacity(candidates.len());
        for id in candidates {
            let labels = self.labels_of(id)?;
            if matchers.iter().all(|m| m.matches(labels.get(&m.name))) {
                out.push((id, labels));
            }
        }
        Ok(out)
    }

    /// The samples of series `id` with `start_ms <= timestamp <= end_ms`, in time order.
    fn samples(&self, id: u64, start_ms: i64, end_ms: i64) -> Result<Vec<Sample>> {
        let mut base = Vec::new();
        if start_ms > end_ms {
            return Ok(base);
        }
        let keep = |s: &Sample| (start_ms..=end_ms).contains(&s.timestamp_ms);
        // The one chunk starting at or before the range start may reach into it.
        let first = chunk_key(id, start_ms);
        let before = self
            .chunks
            .range::<&[u8], _>((
                Bound::Included(&chunk_key(id, i64::MIN)[..]),
                Bound::Included(&first[..]),
            ))?
            .next_back()
            .transpose()?;
        if let Some((_, bytes)) = before
            && chunk::header(bytes)?.last_timestamp_ms >= start_ms
        {
            base.extend(chunk::decode(bytes)?.into_iter().filter(keep));
        }
        let last = chunk_key(id, end_ms);
        for item in self
            .chunks
            .range::<&[u8], _>((Bound::Excluded(&first[..]), Bound::Included(&last[..])))?
        {
            let (_, bytes) = item?;
            base.extend(chunk::decode(bytes)?.into_iter().filter(keep));
        }
        if let Some(open) = self.head.get(id_key(id))? {
            base.extend(chunk::open_samples(open)?.into_iter().filter(keep));
        }
        let mut extra = Vec::new();
        if self.ooo.nested_kind(id_key(id))?.is_some() {
            let tree = self.ooo.open_fixed_tree(id_key(id))?;
            for item in tree.range(time_key(start_ms)..=time_key(end_ms))? {
                let (t, v) = item?;
                extra.push(Sample {
                    timestamp_ms: time_from_key(t),
                    value: f64_from(v)?,
                });
            }
        }
        Ok(overlay(base, extra))
    }
}

/// Reads an out-of-order sample's value bytes.
pub(crate) fn f64_from(bytes: &[u8]) -> Result<f64> {
    bytes
        .try_into()
        .map(|b| f64::from_bits(u64::from_le_bytes(b)))
        .map_err(|_| Error::Corrupt(format!("sample value of {} bytes", bytes.len())))
}

/// Merges two time-ordered sample lists; at an equal timestamp `top` wins.
pub(crate) fn overlay(base: Vec<Sample>, top: Vec<Sample>) -> Vec<Sample> {
    if top.is_empty() {
        return base;
    }
    let mut out = Vec::with_capacity(base.len() + top.len());
    let (mut a, mut b) = (base.into_iter().peekable(), top.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.timestamp_ms < y.timestamp_ms => out.extend(a.next()),
            (Some(x), Some(y)) if x.timestamp_ms == y.timestamp_ms => {
                a.next();
                out.extend(b.next());
            }
            (_, Some(_)) => out.extend(b.next()),
            (Some(_), None) => out.extend(a.next()),
            (None, None) => return out,
        }
    }
}

impl Store {
    /// The series `matchers` select, with their samples in `[start_ms, end_ms]`, all read
    /// in one snapshot. Series without samples in the range are included with none.
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a selector that selects nothing by itself; engine and
    /// corruption errors.
    pub fn select(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(Labels, Vec<Sample>)>> {
        let mut all = Vec::new();
        self.select_each(matchers, start_ms, end_ms, |labels, samples| {
            all.push((labels, samples));
            Ok(())
        })?;
        Ok(all)
    }

    /// [`Store::select`] one series at a time: `each` takes a series' labels and samples
    /// before the next series' samples are read, so a selection larger than memory (an
    /// export of everything) holds the selected series' labels and one series' samples at
    /// a time. Stops at `each`'s first error.
    ///
    /// # Errors
    /// As [`Store::select`]; `each`'s error.
    pub fn select_each(
        &self,
        matchers: &[Matcher],
        start_ms: i64,
        end_ms: i64,
        mut each: impl FnMut(Labels, Vec<Sample>) -> Result<()>,
    ) -> Result<()> {
        let rtx = self.environment().begin_read()?;
        let trees = Trees::open(&rtx)?;
        for (id, labels) in trees.select(matchers)? {
            each(labels, trees.samples(id, start_ms, end_ms)?)?;
        }
        Ok(())
    }

    /// The ids and labels of the series `matchers` select.
    ///
    /// # Errors
    /// As [`Store::select`].
    pub fn series(&self, matchers: &[Matcher]) -> Result<Vec<(SeriesId, Labels)>> {
        let rtx = self.environment().begin_read()?;
        let trees = Trees::open(&rtx)?;
        Ok(trees
            .select(matchers)?
            .into_iter()
            .map(|(id, l)| (SeriesId(id), l))
            .collect())
    }

    /// Every label name in use, sorted.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn label_names(&self) -> Result<Vec<String>> {
        let rtx = self.environment().begin_read()?;
        let postings = rtx.open_multi_tree(TREE_POSTINGS)?;
        let mut names: Vec<String> = Vec::new();
        let mut from = Vec::new();
        // Jump from one name to the next instead of visiting every value.
        loop {
            let next = postings
                .keys::<&[u8], _>((Bound::Included(&from[..]), Bound::Unbounded))?
                .next()
                .transpose()?;
            let Some(key) = next else { break };
            let (name, _) = posting_from(key)?;
            names.push(name.to_string());
            from = name.as_bytes().to_vec();
            from.push(1);
        }
        Ok(names)
    }

    /// Every value label `name` takes, sorted.
    ///
    /// # Errors
    /// Engine and corruption errors.
    pub fn label_values(&self, name: &str) -> Result<Vec<String>> {
        let rtx = self.environment().begin_read()?;
        let postings = rtx.open_multi_tree(TREE_POSTINGS)?;
        let prefix = posting_key(name, "");
        let mut values = Vec::new();
        for key in postings.keys::<&[u8], _>((Bound::Included(&prefix[..]), Bound::Unbounded))? {
            let key = key?;
            if !key.starts_with(&prefix) {
                break;
            }
            values.push(posting_from(key)?.1.to_string());
        }
        Ok(values)
    }

    /// Runs a range query (see [`RangeQuery`]).
    ///
    /// # Errors
    /// [`Error::InvalidQuery`] for a step ≤ 0, an end before the start, too many steps,
    /// or a result past [`RangeQuery::max_points`] (groups × steps when aggregating);
    /// as [`Store::select`].
    pub fn query_range(&self, q: &RangeQuery) -> Result<Vec<QuerySeries>> {
        if q.step_ms <= 0 || q.end_ms < q.start_ms {
            return Err(Error::InvalidQuery(
                "the step must be positive and the end not before the start".into(),
            ));
        }
        // In i128: the span of two i64 times can pass i64::MAX.
        let steps = (i128::from(q.end_ms) - i128::from(q.start_ms)) / i128::from(q.step_ms) + 1;
        if steps > 1_000_000 {
            return Err(Error::InvalidQuery(format!(
                "{steps} steps: at most 1,000,000"
            )));
        }
        let steps = steps as i64;
        let window_ms = match q.rate_window_ms {
            Some(w) if w <= 0 => {
                return Err(Error::InvalidQuery(
                    "the rate window must be positive".into(),
                ));
            }
            Some(w) => w,
            None => LOOKBACK_MS,
        };
        let rtx = self.environment().begin_read()?;
        let trees = Trees::open(&rtx)?;
        // The first step's window is (start - window, start], clamped to the times there are.
        let read_from =
            (i128::from(q.start_ms) - i128::from(window_ms) + 1).max(i128::from(i64::MIN)) as i64;
        let mut outputs: BTreeMap<Vec<(String, String)>, Vec<Option<Acc>>> = BTreeMap::new();
        let mut raw = Vec::new();
        // Points the result holds so far: checked before it grows, so that a valid but
        // huge query is refused instead of exhausting memory.
        let mut points_held: u64 = 0;
        let mut hold = |more: u64| -> Result<()> {
            points_held += more;
            if points_held > q.max_points {
                return Err(Error::InvalidQuery(format!(
                    "the result would hold more than {} points: narrow the \
                     range, the selection or the grouping, or take a longer step",
                    q.max_points
                )));
            }
            Ok(())
        };
        for (id, labels) in trees.select(&q.matchers)? {
            let samples = trees.samples(id, read_from, q.end_ms)?;
            let values = step_values(
                &samples,
                q.start_ms,
                q.step_ms,
                steps,
                window_ms,
                q.rate_window_ms.is_some(),
            );
            match q.aggregation {
                None => {
                    hold(values.iter().filter(|v| v.is_some()).count() as u64)?;
                    raw.push(QuerySeries {
                        labels: labels
                            .iter()
                            .map(|(n, v)| (n.to_string(), v.to_string()))
                            .collect(),
                        points: values
                            .iter()
                            .enumerate()
                            .filter_map(|(i, v)| {
                                v.map(|v| (step_time(q.start_ms, q.step_ms, i), v))
                            })
                            .collect(),
                    });
                }
                Some(_) => {
                    let group: Vec<(String, String)> =
                        q.by.iter()
                            .filter_map(|n| labels.get(n).map(|v| (n.clone(), v.to_string())))
                            .collect();
                    if !outputs.contains_key(&group) {
                        hold(steps as u64)?;
                    }
                    let accs = outputs
                        .entry(group)
                        .or_insert_with(|| vec![None; steps as usize]);
                    for (acc, v) in accs.iter_mut().zip(values) {
                        if let Some(v) = v {
                            acc.get_or_insert_with(Acc::default).add(v);
                        }
                    }
                }
            }
        }
        let Some(aggregation) = q.aggregation else {
            raw.retain(|s| !s.points.is_empty());
            return Ok(raw);
        };
        Ok(outputs
            .into_iter()
            .map(|(labels, accs)| QuerySeries {
                labels,
                points: accs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| {
                        a.map(|a| (step_time(q.start_ms, q.step_ms, i), a.result(aggregation)))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect())
    }
}

/// Most points a range query's result may hold unless [`RangeQuery::max_points`] says
/// otherwise (Prometheus's default sample limit for a query is of the same order): about
/// a gigabyte while aggregating.
pub const QUERY_POINTS_MAX: u64 = 20_000_000;

/// A running aggregate of one step of one group.
#[derive(Clone, Copy, Debug)]
struct Acc {
    sum: f64,
    min: f64,
    max: f64,
    count: u64,
}

impl Default for Acc {
    fn default() -> Acc {
        Acc {
            sum: 0.0,
            // `f64::min`/`max` return the other operand when one is NaN: a NaN start is
            // replaced by the first number, and a group of NaNs only stays NaN, as in
            // Prometheus.
            min: f64::NAN,
            max: f64::NAN,
            count: 0,
        }
    }
}

impl Acc {
    fn add(&mut self, v: f64) {
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.count += 1;
    }

    fn result(&self, aggregation: Aggregation) -> f64 {
        match aggregation {
            Aggregation::Sum => self.sum,
            Aggregation::Avg => self.sum / self.count as f64,
            Aggregation::Min => self.min,
            Aggregation::Max => self.max,
            Aggregation::Count => self.count as f64,
        }
    }
}

/// The time of step `i`, which the caller keeps at or before the query's end: the product
/// alone may pass i64::MAX (a step of i64::MAX from i64::MIN), the sum does not.
fn step_time(start_ms: i64, step_ms: i64, i: usize) -> i64 {
    (i128::from(start_ms) + i as i128 * i128::from(step_ms)) as i64
}

/// A series' value at each step: its latest sample in `(t - window_ms, t]`, or with `rate`
/// the per-second rate of the samples in that window.
pub(crate) fn step_values(
    samples: &[Sample],
    start_ms: i64,
    step_ms: i64,
    steps: i64,
    window_ms: i64,
    rate: bool,
) -> Vec<Option<f64>> {
    let mut out = Vec::with_capacity(steps as usize);
    let (mut lo, mut hi) = (0usize, 0usize);
    for i in 0..steps {
        let t = step_time(start_ms, step_ms, i as usize);
        while hi < samples.len() && samples[hi].timestamp_ms <= t {
            hi += 1;
        }
        // In i128: near i64::MIN the window's start is before any time.
        let after = i128::from(t) - i128::from(window_ms);
        while lo < hi && i128::from(samples[lo].timestamp_ms) <= after {
            lo += 1;
        }
        let window = &samples[lo..hi];
        out.push(if rate {
            rate_of(window)
        } else {
            window.last().map(|s| s.value)
        });
    }
    out
}

/// Per-second increase of a counter over `window` (time-ordered), corrected for resets.
fn rate_of(window: &[Sample]) -> Option<f64> {
    let (first, last) = (window.first()?, window.last()?);
    if window.len() < 2 || last.timestamp_ms == first.timestamp_ms {
        return None;
    }
    let increase: f64 = window
        .windows(2)
        .map(|w| {
            if w[1].value >= w[0].value {
                w[1].value - w[0].value
            } else {
                w[1].value
            }
        })
        .sum();
    // In i128: a window of i64::MAX can hold samples further apart than that.
    let span_ms = i128::from(last.timestamp_ms) - i128::from(first.timestamp_ms);
    Some(increase * 1000.0 / span_ms as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: i64, v: f64) -> Sample {
        Sample {
            timestamp_ms: t,
            value: v,
        }
    }

    #[test]
    fn overlay_prefers_the_top_list_at_equal_times() {
        let merged = overlay(
            vec![s(1, 1.0), s(3, 3.0), s(5, 5.0)],
            vec![s(0, 9.0), s(3, 30.0), s(6, 60.0)],
        );
        assert_eq!(
            merged,
            vec![s(0, 9.0), s(1, 1.0), s(3, 30.0), s(5, 5.0), s(6, 60.0)]
        );
    }

    #[test]
    fn step_values_take_the_latest_sample_within_the_window() {
        let samples = [s(0, 1.0), s(10, 2.0), s(20, 3.0)];
        assert_eq!(
            step_values(&samples, 0, 5, 6, 8, false),
            vec![
                Some(1.0),
                Some(1.0),
                Some(2.0),
                Some(2.0),
                Some(3.0),
                Some(3.0)
            ]
        );
        // Past the window the series has no value.
        assert_eq!(step_values(&samples, 30, 10, 2, 8, false), vec![None, None]);
    }

    #[test]
    fn min_and_max_ignore_nan_unless_every_value_is_nan() {
        let of = |values: &[f64]| {
            let mut acc = Acc::default();
            values.iter().for_each(|&v| acc.add(v));
            (acc.result(Aggregation::Min), acc.result(Aggregation::Max))
        };
        let (min, max) = of(&[f64::NAN, f64::NAN]);
        assert!(min.is_nan() && max.is_nan(), "{min} {max}");
        assert_eq!(of(&[f64::NAN, 2.0, -1.0]), (-1.0, 2.0));
        assert_eq!(of(&[3.0, f64::NAN]), (3.0, 3.0));
        assert_eq!(of(&[f64::INFINITY, 1.0]), (1.0, f64::INFINITY));
    }

    #[test]
    fn rate_corrects_counter_resets() {
        let samples = [s(0, 10.0), s(1000, 20.0), s(2000, 5.0), s(3000, 15.0)];
        // Increase 10 + 5 (after the reset) + 10 over 3 s.
        assert_eq!(rate_of(&samples), Some(25.0 / 3.0));
        assert_eq!(rate_of(&samples[..1]), None);
    }
}
