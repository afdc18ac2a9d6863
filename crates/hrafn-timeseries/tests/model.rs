//! Random appends (in order, out of order, duplicates, too old), deletions, retention,
//! compaction and reopening against an in-memory reference; queries compared after each
//! step.

use hrafn_timeseries::text::parse_selector;
use hrafn_timeseries::{Aggregation, Labels, RangeQuery, Sample, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const WINDOW_MS: i64 = 50_000;

#[derive(Default)]
struct ModelSeries {
    samples: BTreeMap<i64, f64>,
    /// The newest sample appended in order: what the out-of-order window counts from.
    newest: Option<i64>,
}

#[derive(Default)]
struct Model {
    series: BTreeMap<Labels, ModelSeries>,
    /// Samples before this may have been dropped by retention.
    floor_ms: i64,
}

impl Model {
    fn append(&mut self, labels: &Labels, s: Sample) {
        let series = self.series.entry(labels.clone()).or_default();
        match series.newest {
            Some(n) if s.timestamp_ms <= n => {
                if s.timestamp_ms < n - WINDOW_MS {
                    return; // too old: dropped
                }
            }
            _ => series.newest = Some(s.timestamp_ms),
        }
        series.samples.insert(s.timestamp_ms, s.value);
    }
}

fn labels(rng: &mut StdRng) -> Labels {
    let metric = format!("m{}", rng.gen_range(0..3));
    let host = format!("h{}", rng.gen_range(0..4));
    let dc = ["a", "b"][rng.gen_range(0..2)];
    Labels::new([
        ("__name__", metric.as_str()),
        ("host", host.as_str()),
        ("dc", dc),
    ])
    .expect("labels")
}

fn selector(rng: &mut StdRng) -> String {
    match rng.gen_range(0..6) {
        0 => format!("m{}", rng.gen_range(0..3)),
        1 => format!(
            "m{}{{host=\"h{}\"}}",
            rng.gen_range(0..3),
            rng.gen_range(0..4)
        ),
        2 => format!("{{host=\"h{}\",dc!=\"a\"}}", rng.gen_range(0..4)),
        3 => "{__name__=~\"m[01]\",host!~\"h[23]\"}".to_string(),
        4 => format!("{{dc=\"{}\"}}", ["a", "b"][rng.gen_range(0..2)]),
        _ => "{host=~\"h.*\"}".to_string(),
    }
}

/// Compares the store's answer for `sel` over `[start, end]` with the model's.
fn check_select(store: &Store, model: &Model, sel: &str, start: i64, end: i64) {
    let matchers = parse_selector(sel).expect("selector");
    let got: BTreeMap<Labels, Vec<Sample>> = store
        .select(&matchers, start, end)
        .expect("select")
        .into_iter()
        .filter(|(_, s)| !s.is_empty())
        .collect();
    let floor = model.floor_ms;
    for (labels, samples) in &got {
        assert!(
            matchers.iter().all(|m| m.matches(labels.get(&m.name))),
            "{labels} does not match {sel}"
        );
        let want = model.series.get(labels).map(|s| &s.samples);
        for s in samples {
            let expected = want.and_then(|w| w.get(&s.timestamp_ms));
            assert_eq!(
                expected.map(|v| v.to_bits()),
                Some(s.value.to_bits()),
                "{labels} at {}: store has {}, model {expected:?}",
                s.timestamp_ms,
                s.value
            );
        }
    }
    for (labels, series) in &model.series {
        if !matchers.iter().all(|m| m.matches(labels.get(&m.name))) {
            continue;
        }
        let want: Vec<(i64, f64)> = series
            .samples
            .iter()
            .filter(|(t, _)| (start.max(floor)..=end).contains(*t))
            .map(|(t, v)| (*t, *v))
            .collect();
        let have: Vec<(i64, f64)> = got
            .get(labels)
            .map(|s| {
                s.iter()
                    .filter(|s| s.timestamp_ms >= floor)
                    .map(|s| (s.timestamp_ms, s.value))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(have, want, "{labels} in [{start}, {end}] for {sel}");
    }
}

/// `sum by (host)` of instant values, computed naively from the model.
fn check_sum_by_host(store: &Store, model: &Model, sel: &str, start: i64, step: i64) {
    if start - hrafn_timeseries::query::LOOKBACK_MS < model.floor_ms {
        return; // retention may have kept or dropped samples the lookback reaches
    }
    let steps = 8;
    let end = start + step * (steps - 1);
    let q = RangeQuery::new(sel, start, end, step)
        .expect("query")
        .aggregate(Aggregation::Sum, &["host"]);
    let got = store.query_range(&q).expect("query_range");
    let mut want: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    for (labels, series) in &model.series {
        if !q.matchers.iter().all(|m| m.matches(labels.get(&m.name))) {
            continue;
        }
        for i in 0..steps {
            let t = start + i * step;
            let latest = series
                .samples
                .range(t - hrafn_timeseries::query::LOOKBACK_MS + 1..=t)
                .next_back();
            if let Some((_, v)) = latest {
                *want
                    .entry(labels.get("host").unwrap_or_default().to_string())
                    .or_default()
                    .entry(t)
                    .or_insert(0.0) += v;
            }
        }
    }
    let have: BTreeMap<String, BTreeMap<i64, f64>> = got
        .into_iter()
        .map(|s| {
            let host = s
                .labels
                .iter()
                .find(|(n, _)| n == "host")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            (host, s.points.into_iter().collect())
        })
        .collect();
    if have.keys().collect::<Vec<_>>() != want.keys().collect::<Vec<_>>() {
        let m = parse_selector(sel).expect("sel");
        for (l, s) in store.select(&m, start - 300_000, end).expect("select") {
            eprintln!(
                "store {l}: {:?}",
                s.iter().map(|s| s.timestamp_ms).collect::<Vec<_>>()
            );
        }
        for (l, s) in &model.series {
            eprintln!(
                "model {l}: {:?}",
                s.samples.keys().rev().take(5).collect::<Vec<_>>()
            );
        }
        eprintln!("start {start} end {end} floor {}", model.floor_ms);
    }
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{sel}"
    );
    for (host, points) in &want {
        for (t, v) in points {
            let h = have[host].get(t).copied().unwrap_or(f64::NAN);
            assert!(
                (h - v).abs() <= 1e-9 * v.abs().max(1.0),
                "{sel} {host} at {t}: {h} vs {v}"
            );
        }
    }
}

/// Sealed chunks with the packed body (codec byte 1 after the 18 shared header bytes, as
/// `docs/timeseries-chunk-format.md` lays them out).
fn packed_chunks(store: &Store) -> usize {
    let rtx = store.environment().begin_read().expect("read");
    let chunks = rtx.open_tree("ts.chunks").expect("chunks tree");
    chunks
        .iter()
        .expect("iter")
        .filter(|item| item.as_ref().expect("chunk").1.get(18) == Some(&1))
        .count()
}

/// Runs `ops` random operations against the model; returns how many packed chunks the
/// compactions left, summed over them.
fn run(seed: u64, ops: usize) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        out_of_order_window_ms: WINDOW_MS,
        environment: hrafn::Options::default().durability(hrafn::Durability::None),
    };
    let mut store = Store::open(dir.path(), options.clone()).expect("open");
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut now: i64 = -200_000;
    let mut packed_seen = 0;
    for op in 0..ops {
        match rng.gen_range(0..100) {
            0..=69 => {
                // A batch: mostly in order, some behind, some far behind, some repeats.
                let mut rows = Vec::new();
                for _ in 0..rng.gen_range(1..40) {
                    now += rng.gen_range(0..3_000);
                    let t = match rng.gen_range(0..10) {
                        0 => now - rng.gen_range(0..WINDOW_MS * 2),
                        1 => now - rng.gen_range(0..5_000),
                        _ => now,
                    };
                    let l = labels(&mut rng);
                    // m0 holds arbitrary floats (chunks keep the stream), m1 cents and m2
                    // small integers (compaction packs their chunks).
                    let v = match l.metric_name() {
                        "m1" => f64::from(rng.gen_range(-100_000..100_000)) / 100.0,
                        "m2" => f64::from(rng.gen_range(0..4)),
                        _ if rng.gen_bool(0.3) => f64::from(rng.gen_range(0..4)),
                        _ => rng.gen_range(-1e6..1e6),
                    };
                    rows.push((
                        l,
                        Sample {
                            timestamp_ms: t,
                            value: v,
                        },
                    ));
                }
                // A series' rows of one call are taken in time order; at one timestamp
                // the later row wins.
                let mut in_time = rows.clone();
                in_time.sort_by_key(|(_, s)| s.timestamp_ms);
                for (l, s) in &in_time {
                    model.append(l, *s);
                }
                store.append_batch(rows).expect("append");
            }
            70..=79 => {
                let sel = selector(&mut rng);
                let a = now - rng.gen_range(0..400_000);
                let b = a + rng.gen_range(0..400_000);
                check_select(&store, &model, &sel, a, b);
            }
            80..=84 => {
                let sel = selector(&mut rng);
                let start = now - rng.gen_range(0..300_000);
                check_sum_by_host(&store, &model, &sel, start, rng.gen_range(1_000..40_000));
            }
            85..=87 => {
                store.compact().expect("compact");
                let report = store.check().expect("check");
                assert!(report.is_ok(), "op {op}: {:?}", report.problems);
                packed_seen += packed_chunks(&store);
            }
            88..=89 => {
                let sel = selector(&mut rng);
                let matchers = parse_selector(&sel).expect("selector");
                let n = store.delete_series(&matchers).expect("delete");
                let before = model.series.len();
                model
                    .series
                    .retain(|l, _| !matchers.iter().all(|m| m.matches(l.get(&m.name))));
                assert!(
                    n as usize >= before - model.series.len(),
                    "op {op}: deleted {n}"
                );
            }
            90..=91 => {
                let cutoff = now - rng.gen_range(100_000..300_000);
                if cutoff > model.floor_ms {
                    store.drop_before(cutoff).expect("retention");
                    model.floor_ms = cutoff;
                    for s in model.series.values_mut() {
                        if s.newest.is_some_and(|n| n < cutoff) {
                            s.newest = None;
                        }
                    }
                }
            }
            _ => {
                drop(store);
                store = Store::open(dir.path(), options.clone()).expect("reopen");
            }
        }
    }
    check_select(
        &store,
        &model,
        "{host=~\".*\",__name__=~\".+\"}",
        i64::MIN,
        i64::MAX,
    );
    let names = store.label_names().expect("names");
    let expected: Vec<&str> = if store.label_values("host").expect("values").is_empty() {
        vec![]
    } else {
        vec!["__name__", "dc", "host"]
    };
    assert_eq!(names, expected);
    packed_seen
}

#[test]
fn random_operations_match_the_model() {
    let packed: usize = (0..6).map(|seed| run(seed, 2_000)).sum();
    // The model covers both chunk bodies: compaction packed some chunks.
    assert!(packed > 0, "no compaction packed a chunk");
}
