//! Edge cases: extreme timestamps and values, chunk boundaries, equal and late timestamps,
//! query bounds and steps at the ends of `i64`, label extremes, retention and compaction
//! edges, corrupt stored bytes, and malformed text.

use hrafn_timeseries::text::{parse_csv, parse_exposition, parse_selector, parse_series};
use hrafn_timeseries::{
    Aggregation, Error, LABEL_PAIR_MAX_BYTES, Labels, RangeQuery, Sample, Store, StoreOptions,
};

fn options() -> StoreOptions {
    StoreOptions {
        environment: hrafn::Options::default().durability(hrafn::Durability::None),
        ..StoreOptions::default()
    }
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), options()).expect("open");
    (dir, store)
}

fn s(timestamp_ms: i64, value: f64) -> Sample {
    Sample {
        timestamp_ms,
        value,
    }
}

fn up(host: &str) -> Labels {
    Labels::new([("__name__", "up"), ("host", host)]).expect("labels")
}

/// Timestamps and value bits, so NaN payloads and signed zeros compare exactly.
fn exact(samples: &[Sample]) -> Vec<(i64, u64)> {
    samples
        .iter()
        .map(|s| (s.timestamp_ms, s.value.to_bits()))
        .collect()
}

/// The samples of the one series `selector` names, in `[start, end]`.
fn read(store: &Store, selector: &str, start: i64, end: i64) -> Vec<Sample> {
    let mut got = store
        .select(&parse_selector(selector).expect("selector"), start, end)
        .expect("select");
    assert_eq!(got.len(), 1, "{selector} names one series");
    got.pop().expect("one").1
}

fn assert_sound(store: &Store) {
    let report = store.check().expect("check");
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn extreme_timestamps_round_trip_through_chunks_and_compaction() {
    let (_dir, store) = open();
    let times = [
        i64::MIN,
        i64::MIN + 1,
        -1_000,
        -1,
        0,
        1,
        i64::MAX / 2,
        i64::MAX - 1,
        i64::MAX,
    ];
    let samples: Vec<Sample> = times
        .iter()
        .enumerate()
        .map(|(i, &t)| s(t, i as f64))
        .collect();
    let r = store.append(&up("a"), &samples).expect("append");
    assert_eq!(r.appended, times.len() as u64, "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&samples)
    );
    // Each timestamp alone, with inclusive bounds.
    for sample in &samples {
        let t = sample.timestamp_ms;
        assert_eq!(exact(&read(&store, "up", t, t)), exact(&[*sample]), "{t}");
    }
    assert_sound(&store);
}

#[test]
fn compaction_merges_chunks_spanning_more_than_i64_max() {
    let (_dir, store) = open();
    // Deltas of about 2^58 ms that alternate by 2^41 cost 69 bits each: the open chunk fills
    // by bits every twenty-odd samples, and the merged chunk spans most of the i64 range.
    let gap = (u64::MAX / 64) as i64;
    let times: Vec<i64> = (0..60i64)
        .map(|i| i64::MIN + i * gap + (i % 2) * (1 << 40))
        .chain([i64::MAX])
        .collect();
    for (host, f) in [("a", 3.0), ("b", 0.25), ("c", f64::NAN), ("d", -0.0)] {
        let samples: Vec<Sample> = times
            .iter()
            .enumerate()
            .map(|(i, &t)| s(t, i as f64 * f))
            .collect();
        let r = store.append(&up(host), &samples).expect("append");
        assert!(r.chunks_sealed >= 2, "{r:?}");
        let selector = format!("up{{host=\"{host}\"}}");
        assert_eq!(
            exact(&read(&store, &selector, i64::MIN, i64::MAX)),
            exact(&samples)
        );
        let c = store.compact().expect("compact");
        assert_eq!(c.chunks_after, 1, "{c:?}");
        assert_sound(&store);
        assert_eq!(
            exact(&read(&store, &selector, i64::MIN, i64::MAX)),
            exact(&samples),
            "{host}"
        );
        // Bounds at the merged chunk's first and last sample.
        for &t in &times[..3] {
            assert_eq!(read(&store, &selector, t, t).len(), 1);
        }
    }
}

#[test]
fn special_values_keep_their_bits_in_chunks_out_of_order_and_after_compaction() {
    let (_dir, store) = open();
    let values = [
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001), // signalling NaN payload
        f64::from_bits(0xfff8_dead_beef_0001), // negative NaN with payload
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        f64::from_bits(1), // smallest subnormal
        -f64::from_bits(1),
        f64::MAX,
        f64::MIN,
        9_007_199_254_740_993.0,
        1.0 / 3.0,
        0.1 + 0.2,
        12345.67,
        -0.0,
        1.0,
        -0.0,
    ];
    // 300 samples: several sealed chunks, each value class at many positions.
    let samples: Vec<Sample> = (0..300)
        .map(|i| s(i as i64 * 15_000, values[(i * 7) % values.len()]))
        .collect();
    store.append(&up("a"), &samples).expect("append");
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&samples)
    );
    // Out-of-order overwrites with special values.
    let late: Vec<Sample> = (0..20)
        .map(|i| s(i * 15_000 * 14 + 7, values[i as usize % values.len()]))
        .filter(|x| (299 * 15_000 - 3_600_000..299 * 15_000).contains(&x.timestamp_ms))
        .collect();
    let r = store.append(&up("a"), &late).expect("append late samples");
    assert_eq!(r.out_of_order, late.len() as u64, "{r:?}");
    let mut expected = samples.clone();
    expected.extend_from_slice(&late);
    expected.sort_by_key(|x| x.timestamp_ms);
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&expected)
    );
    store.compact().expect("compact");
    assert_sound(&store);
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&expected)
    );
}

#[test]
fn a_full_open_chunk_and_one_more_sample_lose_nothing() {
    let (_dir, store) = open();
    // 120 samples fill an open chunk by count; the 121st seals it.
    let samples: Vec<Sample> = (0..121).map(|i| s(1_000 + i * 10, i as f64)).collect();
    let r = store.append(&up("a"), &samples[..120]).expect("append");
    assert_eq!((r.appended, r.chunks_sealed), (120, 0), "{r:?}");
    let r = store.append(&up("a"), &samples[120..]).expect("append");
    assert_eq!((r.appended, r.chunks_sealed), (1, 1), "{r:?}");
    assert_eq!(exact(&read(&store, "up", 0, 10_000)), exact(&samples));
    // Chunks filled by bits: random 64-bit values and irregular times.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut t = 0i64;
    let noisy: Vec<Sample> = (0..500)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += 1 + (x % 100_000) as i64;
            s(t, f64::from_bits(x))
        })
        .collect();
    let r = store.append(&up("b"), &noisy).expect("append");
    assert!(r.chunks_sealed > 4, "{r:?}");
    assert_eq!(
        exact(&read(&store, "up{host=\"b\"}", i64::MIN, i64::MAX)),
        exact(&noisy)
    );
    assert_sound(&store);
}

#[test]
fn range_bounds_are_inclusive_at_every_chunk_edge() {
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..1_000).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    // Edges of sealed chunks of 120 samples and of the open chunk.
    for edge in [0usize, 119, 120, 121, 239, 240, 959, 960, 999] {
        let t = samples[edge].timestamp_ms;
        assert_eq!(exact(&read(&store, "up", t, t)), exact(&[samples[edge]]));
        assert_eq!(
            exact(&read(&store, "up", t - 1, t + 1)),
            exact(&[samples[edge]])
        );
        assert!(read(&store, "up", t + 1, t + 999).is_empty());
        let lo = edge.saturating_sub(3);
        let hi = (edge + 3).min(samples.len() - 1);
        assert_eq!(
            exact(&read(
                &store,
                "up",
                samples[lo].timestamp_ms,
                samples[hi].timestamp_ms
            )),
            exact(&samples[lo..=hi])
        );
    }
    // An empty range (start > end) reads nothing.
    assert!(read(&store, "up", 5_000, 4_000).is_empty());
    assert!(read(&store, "up", i64::MAX, i64::MIN).is_empty());
    store.compact().expect("compact");
    for edge in [0usize, 479, 480, 481, 959, 960] {
        let t = samples[edge].timestamp_ms;
        assert_eq!(exact(&read(&store, "up", t, t)), exact(&[samples[edge]]));
    }
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&samples)
    );
}

#[test]
fn equal_timestamps_keep_the_last_written_value() {
    let (_dir, store) = open();
    // Within one batch: the last row for a timestamp wins.
    let r = store
        .append(&up("a"), &[s(10, 1.0), s(10, 2.0), s(20, 3.0), s(10, 4.0)])
        .expect("append");
    assert_eq!((r.appended, r.out_of_order), (2, 2), "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", 0, 100)),
        exact(&[s(10, 4.0), s(20, 3.0)])
    );
    // Across batches, at the newest timestamp and at an older one.
    store.append(&up("a"), &[s(20, -0.0)]).expect("append");
    store.append(&up("a"), &[s(10, f64::NAN)]).expect("append");
    store.append(&up("a"), &[s(10, 5.0)]).expect("append");
    let want = [s(10, 5.0), s(20, -0.0)];
    assert_eq!(exact(&read(&store, "up", 0, 100)), exact(&want));
    // After the chunk is sealed and compacted, the overwrites still win.
    let more: Vec<Sample> = (0..200).map(|i| s(30 + i, i as f64)).collect();
    store.append(&up("a"), &more).expect("append");
    store.compact().expect("compact");
    assert_sound(&store);
    assert_eq!(exact(&read(&store, "up", 0, 20)), exact(&want));
    assert_eq!(read(&store, "up", 0, 1_000).len(), 202);
}

#[test]
fn the_out_of_order_window_edge_is_inclusive() {
    let (_dir, store) = open();
    let window = store.options().out_of_order_window_ms;
    let last = 10_000_000;
    store.append(&up("a"), &[s(last, 1.0)]).expect("append");
    let r = store
        .append(
            &up("a"),
            &[s(last - window, 2.0), s(last - window - 1, 3.0)],
        )
        .expect("append");
    assert_eq!((r.out_of_order, r.too_old), (1, 1), "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&[s(last - window, 2.0), s(last, 1.0)])
    );
    // Near i64::MIN the window saturates instead of wrapping.
    store
        .append(&up("b"), &[s(i64::MIN + 5, 1.0)])
        .expect("append");
    let r = store.append(&up("b"), &[s(i64::MIN, 2.0)]).expect("append");
    assert_eq!((r.appended, r.out_of_order), (0, 1), "{r:?}");
}

#[test]
fn query_range_near_the_smallest_time_sees_its_samples() {
    let (_dir, store) = open();
    let t0 = i64::MIN + 10;
    store
        .append(&up("a"), &[s(t0, 1.0), s(t0 + 1_000, 3.0)])
        .expect("append");
    let q = RangeQuery::new("up", t0, t0 + 2_000, 1_000).expect("query");
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].points,
        vec![(t0, 1.0), (t0 + 1_000, 3.0), (t0 + 2_000, 3.0)]
    );
    let rate = store
        .query_range(&q.clone().rate(10_000))
        .expect("rate query");
    assert_eq!(rate.len(), 1, "{rate:?}");
    assert_eq!(rate[0].points, vec![(t0 + 1_000, 2.0), (t0 + 2_000, 2.0)]);
    // A sample at i64::MIN itself is within the lookback of a step just after it.
    store.append(&up("b"), &[s(i64::MIN, 7.0)]).expect("append");
    let q = RangeQuery::new("up{host=\"b\"}", i64::MIN + 100, i64::MIN + 100, 1).expect("q");
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].points, vec![(i64::MIN + 100, 7.0)]);
    let q = RangeQuery::new("up{host=\"a\"}", t0, t0 + 2_000, 1_000).expect("query");
    // A rate window as long as time itself, at negative times.
    let r = store
        .query_range(&q.clone().rate(i64::MAX))
        .expect("long rate window");
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].points.len(), 2, "{r:?}");
}

#[test]
fn query_range_spans_past_i64_are_refused_or_answered_never_a_panic() {
    let (_dir, store) = open();
    store
        .append(&up("a"), &[s(-5, 1.0), s(0, 2.0), s(i64::MAX - 20, 3.0)])
        .expect("append");
    // `end - start` overflows i64 in all of these.
    let too_many = [
        (i64::MIN, i64::MAX, 1),
        (-2, i64::MAX - 1, 1),
        (i64::MIN, 0, 7),
    ];
    // (start, end, step) and the points expected: MIN, -1, MAX - 1 for the first.
    let answered = [
        (
            i64::MIN,
            i64::MAX,
            i64::MAX,
            vec![(-1, 1.0), (i64::MAX - 1, 3.0)],
        ),
        (-10, i64::MAX, i64::MAX / 2, vec![(i64::MAX - 11, 3.0)]),
        (i64::MIN, 0, i64::MAX, vec![(-1, 1.0)]),
    ];
    for aggregate in [false, true] {
        let query = |start, end, step| {
            let q = RangeQuery::new("up", start, end, step).expect("query");
            let q = if aggregate {
                q.aggregate(Aggregation::Max, &[])
            } else {
                q
            };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.query_range(&q)))
                .unwrap_or_else(|_| panic!("query_range({start}, {end}, {step}) panicked"))
        };
        for (start, end, step) in too_many {
            let got = query(start, end, step);
            assert!(
                matches!(got, Err(Error::InvalidQuery(_))),
                "({start}, {end}, {step}): {got:?}"
            );
        }
        for (start, end, step, want) in &answered {
            let got = query(*start, *end, *step).expect("query");
            assert_eq!(got.len(), 1, "({start}, {end}, {step}): {got:?}");
            assert_eq!(&got[0].points, want, "({start}, {end}, {step})");
        }
    }
}

#[test]
fn zero_and_oversized_windows_and_steps() {
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..10).map(|i| s(i * 1_000, (i * 10) as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    store.append(&up("b"), &samples).expect("append");
    // Zero or negative step or rate window: typed errors.
    for step in [0, -1, i64::MIN] {
        let q = RangeQuery::new("up", 0, 10_000, step).expect("query");
        assert!(matches!(store.query_range(&q), Err(Error::InvalidQuery(_))));
    }
    for w in [0, -5] {
        let q = RangeQuery::new("up", 0, 10_000, 1_000)
            .expect("query")
            .rate(w);
        assert!(matches!(store.query_range(&q), Err(Error::InvalidQuery(_))));
    }
    // A step longer than the range: one step, at the start.
    let q = RangeQuery::new("up", 5_000, 6_000, 1_000_000)
        .expect("query")
        .aggregate(Aggregation::Sum, &[]);
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].points, vec![(5_000, 100.0)]);
    // start == end: one step.
    let q = RangeQuery::new("up", 9_000, 9_000, 1).expect("query");
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|o| o.points == vec![(9_000, 90.0)]));
    // A rate window wider than the data: rate over all samples (10 per second).
    let q = RangeQuery::new("up", 9_000, 9_000, 1)
        .expect("query")
        .rate(1_000_000)
        .aggregate(Aggregation::Avg, &["host"]);
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 2);
    assert!(
        got.iter().all(|o| o.points == vec![(9_000, 10.0)]),
        "{got:?}"
    );
    // A window that holds one sample has no rate.
    let q = RangeQuery::new("up", 9_000, 9_000, 1)
        .expect("query")
        .rate(1);
    assert!(store.query_range(&q).expect("query").is_empty());
}

#[test]
fn label_extremes_name_distinct_series() {
    let (_dir, store) = open();
    let at_limit = "v".repeat(LABEL_PAIR_MAX_BYTES - "big".len());
    let over = "v".repeat(LABEL_PAIR_MAX_BYTES - "big".len() + 1);
    let unicode = "ünï\u{1F600}čødé \"q\" \\ \n\t{}=,";
    let sets = [
        Labels::new([("__name__", "m"), ("big", at_limit.as_str())]).expect("labels"),
        Labels::new([("__name__", "m"), ("big", unicode)]).expect("labels"),
        Labels::new([("__name__", "m"), ("big", " ")]).expect("labels"),
        Labels::new([("__name__", unicode)]).expect("labels"),
        Labels::new([("__name__", "m"), ("a", ""), ("b", "1")]).expect("labels"),
    ];
    for (i, l) in sets.iter().enumerate() {
        store.append(l, &[s(i as i64, i as f64)]).expect("append");
    }
    let too_long = Labels::new([("__name__", "m"), ("big", over.as_str())]).expect("labels");
    assert!(matches!(
        store.append(&too_long, &[s(0, 0.0)]),
        Err(Error::InvalidLabels(_))
    ));
    assert!(matches!(
        store.series_ids(std::slice::from_ref(&too_long)),
        Err(Error::InvalidLabels(_))
    ));
    // Empty names and names with non-ASCII characters are not label names.
    assert!(Labels::new([("__name__", "m"), ("", "x")]).is_err());
    assert!(Labels::new([("__name__", "m"), ("né", "x")]).is_err());
    // Each set reads back through its text form.
    for (i, l) in sets.iter().enumerate() {
        let mut matchers = vec![
            hrafn_timeseries::text::Matcher::new(
                "__name__",
                hrafn_timeseries::text::MatchOp::Equal,
                l.metric_name(),
            )
            .expect("matcher"),
        ];
        for (n, v) in l.iter().filter(|(n, _)| *n != "__name__") {
            matchers.push(
                hrafn_timeseries::text::Matcher::new(n, hrafn_timeseries::text::MatchOp::Equal, v)
                    .expect("matcher"),
            );
        }
        let got = store.select(&matchers, i64::MIN, i64::MAX).expect("select");
        let mine: Vec<_> = got.iter().filter(|(x, _)| x == l).collect();
        assert_eq!(mine.len(), 1, "{l}");
        assert_eq!(exact(&mine[0].1), exact(&[s(i as i64, i as f64)]));
        let mut text = Vec::new();
        hrafn_timeseries::text::write_exposition(&mut text, l, &mine[0].1).expect("write");
        let mut back = Vec::new();
        parse_exposition(&text[..], 0, |p| {
            back.push(p);
            Ok(())
        })
        .expect("parse back");
        assert_eq!(back.len(), 1);
        assert_eq!(&back[0].labels, l);
    }
    let values = store.label_values("big").expect("values");
    assert_eq!(values.len(), 3, "{values:?}");
    assert!(values.contains(&unicode.to_string()));
    assert_eq!(
        store.label_names().expect("names"),
        vec!["__name__", "b", "big"]
    );
    assert_sound(&store);
}

#[test]
fn many_series_in_one_batch_are_all_kept() {
    let (_dir, store) = open();
    let rows: Vec<(Labels, Sample)> = (0..3_000)
        .flat_map(|i| {
            let l = Labels::new([
                ("__name__", "node_cpu"),
                ("cpu", &(i % 7).to_string()[..]),
                ("instance", &format!("h{i}")[..]),
            ])
            .expect("labels");
            [(l.clone(), s(1_000, i as f64)), (l, s(2_000, -(i as f64)))]
        })
        .collect();
    let r = store.append_batch(rows).expect("append");
    assert_eq!((r.series_created, r.appended), (3_000, 6_000), "{r:?}");
    let got = store
        .select(
            &parse_selector("node_cpu{cpu=\"3\"}").expect("sel"),
            0,
            5_000,
        )
        .expect("select");
    assert_eq!(got.len(), (0..3_000).filter(|i| i % 7 == 3).count());
    for (l, samples) in &got {
        let i: f64 = l.get("instance").expect("instance")[1..]
            .parse()
            .expect("int");
        assert_eq!(exact(samples), exact(&[s(1_000, i), s(2_000, -i)]), "{l}");
    }
    let q = RangeQuery::new("node_cpu", 2_000, 2_000, 1)
        .expect("query")
        .aggregate(Aggregation::Count, &["cpu"]);
    let got = store.query_range(&q).expect("query");
    assert_eq!(got.len(), 7);
    let total: f64 = got.iter().map(|o| o.points[0].1).sum();
    assert_eq!(total, 3_000.0);
}

#[test]
fn retention_keeps_everything_at_or_after_the_cutoff() {
    let (_dir, store) = open();
    // Sealed chunks of 120 samples at 1 s: [0, 119_000], [120_000, 239_000], ...
    let samples: Vec<Sample> = (0..500).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    store
        .append(&up("a"), &[s(500, -1.0), s(119_500, -2.0)])
        .expect("late samples");
    // The cutoff is the newest timestamp of the second chunk: it stays.
    let r = store.drop_before(239_000).expect("retain");
    assert_eq!(r.chunks_dropped, 1, "{r:?}");
    assert_eq!(r.out_of_order_dropped, 2, "{r:?}");
    let left = read(&store, "up", i64::MIN, i64::MAX);
    assert_eq!(exact(&left), exact(&samples[120..]));
    // One past it: that chunk goes too.
    let r = store.drop_before(239_001).expect("retain");
    assert_eq!(r.chunks_dropped, 1, "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&samples[240..])
    );
    // The open chunk's last sample at the cutoff keeps it and the series.
    let last = samples[499].timestamp_ms;
    let r = store.drop_before(last).expect("retain");
    assert_eq!((r.open_chunks_emptied, r.series_deleted), (0, 0), "{r:?}");
    assert!(read(&store, "up", last, last).len() == 1);
    assert_sound(&store);
    let r = store.drop_before(last + 1).expect("retain");
    assert_eq!(r.series_deleted, 1, "{r:?}");
    assert_sound(&store);
}

#[test]
fn retention_does_not_delete_a_series_resolved_for_appends_yet_unfilled() {
    let (_dir, store) = open();
    let ids = store.series_ids(&[up("a"), up("b")]).expect("ids");
    store
        .append_ids(&[(ids[1], s(1_000_000, 1.0))])
        .expect("append");
    // Retention of data older than a minute ago runs before the first scrape of "a".
    store.drop_before(10).expect("retain");
    let r = store
        .append_ids(&[(ids[0], s(2_000_000, 5.0))])
        .expect("append");
    assert_eq!((r.appended, r.unknown_series), (1, 0), "{r:?}");
    assert_eq!(
        exact(&read(&store, "up{host=\"a\"}", 0, i64::MAX)),
        exact(&[s(2_000_000, 5.0)])
    );
}

#[test]
fn compaction_folds_late_samples_without_overlap_or_loss() {
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..1_300).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    // Late samples inside sealed chunks, at their edges and inside the open chunk.
    let late = [
        s(0, -1.0),
        s(500, -2.0),
        s(119_000, -3.0),
        s(119_999, -4.0),
        s(1_199_000, -5.0),
        s(1_200_000, -6.0),
        s(1_299_000, -7.0),
    ];
    // Stay within the out-of-order window of the newest sample.
    let r = store.append(&up("a"), &late).expect("late");
    assert_eq!(r.out_of_order as usize + r.too_old as usize, late.len());
    let mut want = samples.clone();
    for l in late
        .iter()
        .filter(|l| l.timestamp_ms >= 1_299_000 - 3_600_000)
    {
        match want.binary_search_by_key(&l.timestamp_ms, |x| x.timestamp_ms) {
            Ok(i) => want[i] = *l,
            Err(i) => want.insert(i, *l),
        }
    }
    let before = exact(&read(&store, "up", i64::MIN, i64::MAX));
    assert_eq!(before, exact(&want));
    let c = store.compact().expect("compact");
    assert!(c.chunks_after < c.chunks_before, "{c:?}");
    assert_sound(&store);
    assert_eq!(exact(&read(&store, "up", i64::MIN, i64::MAX)), before);
    // A second compaction changes nothing.
    let again = store.compact().expect("compact");
    assert_eq!(again.series_rewritten, 0, "{again:?}");
    assert_eq!(exact(&read(&store, "up", i64::MIN, i64::MAX)), before);
}

/// Writes `bytes` as the value at `key` of tree `tree`.
fn poke(store: &Store, tree: &str, key: &[u8], bytes: &[u8]) {
    let mut wtx = store.environment().begin_write().expect("write");
    wtx.open_tree(tree)
        .expect("tree")
        .insert(key, bytes)
        .expect("insert");
    wtx.commit().expect("commit");
}

fn peek(store: &Store, tree: &str, key: &[u8]) -> Vec<u8> {
    let rtx = store.environment().begin_read().expect("read");
    let t = rtx.open_tree(tree).expect("tree");
    t.get(key).expect("get").expect("present").to_vec()
}

fn chunk_key(id: u64, t: i64) -> Vec<u8> {
    let mut k = id.to_be_bytes().to_vec();
    k.extend_from_slice(&((t as u64) ^ (1 << 63)).to_be_bytes());
    k
}

#[test]
fn corrupt_stored_chunks_are_typed_errors_never_panics() {
    let (_dir, store) = open();
    let id = store.series_id(&up("a")).expect("id").0;
    let samples: Vec<Sample> = (0..200)
        .map(|i| s(i * 15_000 + (i % 3), ((i * 37) % 11) as f64 * 0.25))
        .collect();
    store
        .append_ids(
            &samples
                .iter()
                .map(|&x| (hrafn_timeseries::SeriesId(id), x))
                .collect::<Vec<_>>(),
        )
        .expect("append");
    let sealed_key = chunk_key(id, 0);
    let sealed = peek(&store, "ts.chunks", &sealed_key);
    let head = peek(&store, "ts.head", &id.to_be_bytes());
    let sel = parse_selector("up").expect("selector");
    let try_all = |store: &Store, what: &str| {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = store.select(&sel, i64::MIN, i64::MAX);
            let _ = store.query_range(&RangeQuery::new("up", 0, 4_000_000, 60_000).expect("q"));
            let _ = store.check();
            let _ = store.append_ids(&[(hrafn_timeseries::SeriesId(id), s(10_000_000, 1.0))]);
            let _ = store.append_ids(&[(hrafn_timeseries::SeriesId(id), s(2_900_000, 1.0))]);
        }));
        assert!(run.is_ok(), "{what} panicked");
    };
    // Every truncation and many bit flips of the sealed chunk.
    for len in (0..sealed.len()).step_by(3) {
        poke(&store, "ts.chunks", &sealed_key, &sealed[..len]);
        try_all(&store, &format!("sealed chunk cut to {len}"));
        assert!(
            matches!(store.select(&sel, 0, 10), Err(Error::Corrupt(_))),
            "cut to {len}"
        );
    }
    for bit in (0..sealed.len() * 8).step_by(5) {
        let mut b = sealed.clone();
        b[bit / 8] ^= 0x80 >> (bit % 8);
        poke(&store, "ts.chunks", &sealed_key, &b);
        try_all(&store, &format!("sealed bit {bit}"));
    }
    poke(&store, "ts.chunks", &sealed_key, &sealed);
    // The open chunk: flips, and values of a wrong size.
    for bit in (0..head.len() * 8).step_by(7) {
        let mut b = head.clone();
        b[bit / 8] ^= 0x80 >> (bit % 8);
        poke(&store, "ts.head", &id.to_be_bytes(), &b);
        try_all(&store, &format!("open bit {bit}"));
    }
    for len in [0, 1, 255, 257] {
        poke(&store, "ts.head", &id.to_be_bytes(), &vec![0xff; len]);
        try_all(&store, &format!("open chunk of {len} bytes"));
        assert!(
            matches!(store.select(&sel, 0, 10), Err(Error::Corrupt(_))),
            "{len}"
        );
    }
    // A label set that does not decode.
    poke(&store, "ts.labels", &id.to_be_bytes(), b"\xff\xfe");
    try_all(&store, "labels");
    assert!(!store.check().expect("check").is_ok());
}

#[test]
fn malformed_exposition_lines_are_parse_errors() {
    let bad = [
        "up",
        "up ",
        "up{",
        "up{a=\"b\" 1",
        "up{a=\"b} 1",
        "up{a=b} 1",
        "up{a=\"\\q\"} 1",
        "up 1 2 3",
        "up 1 1.5",
        "up 1 99999999999999999999",
        "up one",
        "up 0x10",
        "up{=\"x\"} 1",
        "up{a=\"1\",a=\"2\"} 1",
        "{} 1",
        "{a=\"b\"} 1",
        "\u{1F600} 1",
        "up{a=\"\u{1F600}\"}1",
        "up{,} 1",
        "up{a=\"1\",,b=\"2\"} 1",
        "up 1 -",
        "up\u{a0}1",
    ];
    for line in bad {
        let mut n = 0;
        let got = parse_exposition(line.as_bytes(), 0, |_| {
            n += 1;
            Ok(())
        });
        assert!(
            matches!(got, Err(Error::Parse { line: 1, .. })),
            "{line:?}: {got:?}"
        );
        assert_eq!(n, 0, "{line:?}");
    }
}

#[test]
fn exposition_accepts_crlf_spaces_and_extremes() {
    let text = "# HELP up x\r\n\r\n  up{a=\"x y\",b=\"\u{e9}\"}   1e308  \t -9223372036854775808\r\n\
                up 1e400 9223372036854775807\r\nup -Inf\r\nup NaN 5 # {trace=\"1\"} 1\r\n\
                up{} -0.0 7\r\nup{a=\"\"} 2 8";
    let mut got = Vec::new();
    let n = parse_exposition(text.as_bytes(), 42, |p| {
        got.push(p);
        Ok(())
    })
    .expect("parse");
    assert_eq!(n, 6);
    let ts: Vec<i64> = got.iter().map(|p| p.sample.timestamp_ms).collect();
    assert_eq!(ts, vec![i64::MIN, i64::MAX, 42, 5, 7, 8]);
    assert_eq!(got[0].sample.value, 1e308);
    assert_eq!(got[0].labels.get("a"), Some("x y"));
    assert_eq!(got[0].labels.get("b"), Some("\u{e9}"));
    assert_eq!(got[1].sample.value, f64::INFINITY);
    assert_eq!(got[2].sample.value, f64::NEG_INFINITY);
    assert!(got[3].sample.value.is_nan());
    assert_eq!(got[4].sample.value.to_bits(), (-0.0f64).to_bits());
    assert_eq!(got[5].labels.len(), 1, "an empty value is no label");
}

#[test]
fn malformed_csv_and_series_are_parse_errors() {
    let header = "series,timestamp_ms,value\n";
    for body in [
        "up,1\n",
        "up,1,2,3\n",
        "\"up,1,2\n",
        "up,1.5,2\n",
        "up,1,two\n",
        "\"up\"x,1,2\n",
        "u\"p,1,2\n",
        "up,99999999999999999999,1\n",
        "\"up{a=\"\"b}\",1,2\n",
    ] {
        let text = format!("{header}{body}");
        let got = parse_csv(text.as_bytes(), |_| Ok(()));
        assert!(matches!(got, Err(Error::Parse { .. })), "{body:?}: {got:?}");
    }
    assert!(matches!(
        parse_csv(&b""[..], |_| Ok(())),
        Err(Error::Parse { .. })
    ));
    // CRLF line ends and a quoted series with commas and doubled quotes.
    let mut got = Vec::new();
    parse_csv(
        "series,timestamp_ms,value\r\n\"up{a=\"\"x,y\"\"}\", 5 , -Inf \r\n".as_bytes(),
        |p| {
            got.push(p);
            Ok(())
        },
    )
    .expect("parse");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].labels.get("a"), Some("x,y"));
    assert_eq!(got[0].sample, s(5, f64::NEG_INFINITY));
    for bad in [
        "",
        "up{",
        "up{a=\"b\"} x",
        "{a=\"b\"}",
        "up{a=\"b\",a=\"c\"}",
    ] {
        assert!(
            matches!(parse_series(bad), Err(Error::Parse { .. })),
            "{bad:?}"
        );
    }
}

/// `samples` with the value at each of `overwrites`' timestamps replaced.
fn overwritten(samples: &[Sample], overwrites: &[Sample]) -> Vec<Sample> {
    let mut out = samples.to_vec();
    for o in overwrites {
        let i = out
            .binary_search_by_key(&o.timestamp_ms, |x| x.timestamp_ms)
            .expect("overwrites a stored sample");
        out[i] = *o;
    }
    out
}

#[test]
fn retention_keeps_the_overwrites_of_samples_it_keeps() {
    // An open chunk that reaches past the cutoff.
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..10).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    let r = store.append(&up("a"), &[s(2_000, 99.0)]).expect("late");
    assert_eq!(r.out_of_order, 1, "{r:?}");
    let r = store.drop_before(5_000).expect("retain");
    assert_eq!(r.out_of_order_dropped, 0, "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", 0, 9_000)),
        exact(&overwritten(&samples, &[s(2_000, 99.0)]))
    );
    assert_sound(&store);

    // Sealed chunks [0, 119_000] and [120_000, 239_000], the second straddling the cutoff.
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..360).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    let late = [s(50_000, -1.0), s(150_000, -2.0)];
    let r = store.append(&up("a"), &late).expect("late");
    assert_eq!(r.out_of_order, 2, "{r:?}");
    let r = store.drop_before(200_000).expect("retain");
    // The overwrite inside the dropped chunk goes with it.
    assert_eq!((r.chunks_dropped, r.out_of_order_dropped), (1, 1), "{r:?}");
    assert_eq!(
        exact(&read(&store, "up", i64::MIN, i64::MAX)),
        exact(&overwritten(&samples[120..], &late[1..]))
    );
    assert_sound(&store);
}

#[test]
fn compacting_overlapping_chunks_is_a_corruption_error() {
    let (_dir, store) = open();
    // A sealed chunk [0, 119_000] and a full open chunk.
    let samples: Vec<Sample> = (0..240).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    let sealed = peek(&store, "ts.chunks", &chunk_key(1, 0));
    poke(&store, "ts.chunks", &chunk_key(1, 1), &sealed);
    assert!(matches!(store.compact(), Err(Error::Corrupt(_))));
}

#[test]
fn an_append_to_an_empty_open_chunk_stays_behind_the_sealed_chunks() {
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..240).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    // What retention racing an append could leave: an empty open chunk beside a sealed
    // chunk [0, 119_000].
    poke(
        &store,
        "ts.head",
        &1u64.to_be_bytes(),
        &hrafn_timeseries::chunk::open_empty(),
    );
    let r = store.append(&up("a"), &[s(50_000, -1.0)]).expect("append");
    assert_eq!((r.appended, r.out_of_order), (0, 1), "{r:?}");
    // Older than the window before the sealed chunk's end.
    let r = store
        .append(&up("a"), &[s(119_000 - 3_600_001, 5.0)])
        .expect("append");
    assert_eq!((r.appended, r.too_old), (0, 1), "{r:?}");
    let want = overwritten(&samples[..120], &[s(50_000, -1.0)]);
    assert_eq!(exact(&read(&store, "up", i64::MIN, i64::MAX)), exact(&want));
    // After the sealed chunk's end a sample is in order again.
    let r = store.append(&up("a"), &[s(119_500, 7.0)]).expect("append");
    assert_eq!(r.appended, 1, "{r:?}");
    assert_sound(&store);
}

#[test]
fn a_series_counter_at_or_below_a_stored_id_is_reported_and_never_reuses_it() {
    let (_dir, store) = open();
    store.append(&up("a"), &[s(1_000, 1.0)]).expect("append");
    store.append(&up("b"), &[s(1_000, 2.0)]).expect("append");
    poke(&store, "ts.meta", b"next_series_id", &2u64.to_be_bytes());
    assert!(!store.check().expect("check").is_ok());
    assert!(matches!(
        store.append(&up("c"), &[s(1_000, 3.0)]),
        Err(Error::Corrupt(_))
    ));
    assert!(matches!(store.series_id(&up("c")), Err(Error::Corrupt(_))));
    assert_eq!(
        exact(&read(&store, "up{host=\"b\"}", i64::MIN, i64::MAX)),
        exact(&[s(1_000, 2.0)])
    );
    // A counter that does not decode is reported too.
    poke(&store, "ts.meta", b"next_series_id", b"\x01");
    assert!(!store.check().expect("check").is_ok());
}

#[test]
fn malformed_keys_and_entries_are_check_problems_not_errors() {
    type Damage = fn(&Store);
    let damages: [(&str, Damage); 8] = [
        ("ooo plain value", |st| {
            poke(st, "ts.ooo", &1u64.to_be_bytes(), b"x")
        }),
        ("ooo key", |st| poke(st, "ts.ooo", b"abc", b"x")),
        ("labels key", |st| poke(st, "ts.labels", b"abc", b"x")),
        ("series key", |st| poke(st, "ts.series", b"abc", b"")),
        ("chunks key", |st| poke(st, "ts.chunks", b"abc", b"x")),
        ("blocks key", |st| poke(st, "ts.blocks", b"abc", b"")),
        ("posting key", |st| {
            add_posting(st, b"abc", &1u64.to_be_bytes())
        }),
        ("posting value", |st| add_posting(st, b"host\0a", b"abc")),
    ];
    for (what, damage) in damages {
        let (_dir, store) = open();
        let samples: Vec<Sample> = (0..200).map(|i| s(i * 1_000, i as f64)).collect();
        store.append(&up("a"), &samples).expect("append");
        assert_sound(&store);
        damage(&store);
        let report = store.check().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!report.is_ok(), "{what}");
    }
}

fn add_posting(store: &Store, key: &[u8], value: &[u8]) {
    let mut wtx = store.environment().begin_write().expect("write");
    wtx.open_multi_tree("ts.postings")
        .expect("tree")
        .add(key, value)
        .expect("add");
    wtx.commit().expect("commit");
}

#[test]
fn samples_of_one_call_count_the_same_in_any_order() {
    let rows = [s(7_200_000, 1.0), s(0, 2.0), s(3_600_000, 3.0)];
    let mut results = Vec::new();
    for order in [[0, 1, 2], [1, 0, 2], [2, 1, 0], [1, 2, 0]] {
        let (_dir, store) = open();
        let call: Vec<Sample> = order.iter().map(|&i| rows[i]).collect();
        let r = store.append(&up("a"), &call).expect("append");
        results.push((r, exact(&read(&store, "up", i64::MIN, i64::MAX))));
    }
    assert_eq!(results[0].0.appended, 3, "{:?}", results[0].0);
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
    // At one timestamp, the sample later in the call wins.
    let (_dir, store) = open();
    store
        .append(&up("a"), &[s(10, 1.0), s(5, 0.0), s(10, 2.0)])
        .expect("append");
    assert_eq!(exact(&read(&store, "up", 10, 10)), exact(&[s(10, 2.0)]));
}

/// A compaction's work is in what came since the last one: a series' leading full chunks
/// stay as they are (it rewrote the whole series each time, since the chunks sealed after
/// a compaction are always small enough to merge), unless a late sample falls into them.
#[test]
fn compaction_rewrites_only_what_came_since_the_last() {
    let (_dir, store) = open();
    let samples: Vec<Sample> = (0..48_000).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &samples).expect("append");
    let first = store.compact().expect("compact");
    assert_eq!(first.chunks_after, 100, "{first:?}");
    let more: Vec<Sample> = (48_000..48_360).map(|i| s(i * 1_000, i as f64)).collect();
    store.append(&up("a"), &more).expect("append");
    let second = store.compact().expect("compact");
    assert_eq!(second.series_rewritten, 1, "{second:?}");
    // Of about a hundred chunks: the last compacted one if not full, and the new ones.
    assert!(second.chunks_before <= 4, "{second:?}");
    assert!(second.chunks_after <= 2, "{second:?}");
    assert_sound(&store);
    let all: Vec<Sample> = samples.iter().chain(&more).copied().collect();
    // The open chunk holds the newest samples; every stored one reads back.
    let got = read(&store, "up", i64::MIN, i64::MAX);
    assert_eq!(exact(&got[..all.len()]), exact(&all));
    // A late sample inside the 98th full chunk (within the out-of-order window of the
    // newest): the chunks from there on are rewritten, the 97 before stay.
    let late = s(47_000 * 1_000 + 500, -1.0);
    let r = store.append(&up("a"), &[late]).expect("late");
    assert_eq!(r.out_of_order, 1, "{r:?}");
    let third = store.compact().expect("compact");
    assert_eq!(third.out_of_order_folded, 1, "{third:?}");
    assert!(third.chunks_before <= 4, "{third:?}");
    let mut want = all.clone();
    want.insert(47_001, late);
    let got = read(&store, "up", i64::MIN, i64::MAX);
    assert_eq!(exact(&got[..want.len()]), exact(&want));
    assert_sound(&store);
}

/// A maintenance pass over many series with long histories commits before a transaction
/// grows past the scratch limit (it took 512 series per transaction whatever their size).
#[test]
fn compaction_and_deletion_of_long_series_fit_a_small_scratch_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        environment: hrafn::Options::default()
            .durability(hrafn::Durability::None)
            .scratch_limit_bytes(16 << 20),
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).expect("open");
    let samples: Vec<Sample> = (0..24_000)
        .map(|i| s(i * 15_000, (i as f64).sin()))
        .collect();
    for host in 0..100 {
        store
            .append(&up(&format!("h{host:03}")), &samples)
            .expect("append");
    }
    let c = store.compact().expect("compact");
    assert_eq!(c.series_rewritten, 100, "{c:?}");
    assert_sound(&store);
    let sel = parse_selector("up").expect("selector");
    assert_eq!(store.delete_series(&sel).expect("delete"), 100);
    assert!(store.series(&sel).expect("series").is_empty());
    assert_sound(&store);
}

/// A range query whose result would pass its point limit is refused before it takes the
/// memory (groups × steps while aggregating, points held without): a million steps over
/// thousands of groups asked for tens of gigabytes.
#[test]
fn a_query_past_its_point_limit_is_refused() {
    let (_dir, store) = open();
    for host in 0..5 {
        store
            .append(&up(&format!("h{host}")), &[s(0, 1.0), s(1_000, 2.0)])
            .expect("append");
    }
    let q = |max_points| {
        RangeQuery::new("up", 0, 999, 1)
            .expect("query")
            .max_points(max_points)
    };
    // 1000 steps: five groups hold 5000 points, four fit in 4999.
    let by_host = store.query_range(&q(5_000).aggregate(Aggregation::Sum, &["host"]));
    assert_eq!(by_host.expect("within the limit").len(), 5);
    let refused = store.query_range(&q(4_999).aggregate(Aggregation::Sum, &["host"]));
    assert!(
        matches!(refused, Err(Error::InvalidQuery(_))),
        "{refused:?}"
    );
    // One group: 1000 points.
    let summed = store.query_range(&q(1_000).aggregate(Aggregation::Sum, &[]));
    assert_eq!(summed.expect("one group").len(), 1);
    // Without aggregation, the points with a value: each series has one at every step.
    assert_eq!(store.query_range(&q(5_000)).expect("raw").len(), 5);
    assert!(matches!(
        store.query_range(&q(4_999)),
        Err(Error::InvalidQuery(_))
    ));
    let default = RangeQuery::new("up", 0, 1, 1).expect("query");
    assert_eq!(default.max_points, hrafn_timeseries::QUERY_POINTS_MAX);
}

/// `select_each` hands over the series `select` returns, in its order, one at a time,
/// and stops at the callback's first error.
#[test]
fn select_each_streams_what_select_returns() {
    let (_dir, store) = open();
    for host in 0..4 {
        store
            .append(&up(&format!("h{host}")), &[s(host, 1.0)])
            .expect("append");
    }
    let sel = parse_selector("up").expect("selector");
    let mut seen = Vec::new();
    store
        .select_each(&sel, i64::MIN, i64::MAX, |labels, samples| {
            seen.push((labels, exact(&samples)));
            Ok(())
        })
        .expect("select_each");
    let want: Vec<(Labels, Vec<(i64, u64)>)> = (0..4)
        .map(|host| (up(&format!("h{host}")), exact(&[s(host, 1.0)])))
        .collect();
    assert_eq!(seen, want);
    let mut calls = 0;
    let stopped = store.select_each(&sel, i64::MIN, i64::MAX, |_, _| {
        calls += 1;
        Err(Error::InvalidQuery("stop".into()))
    });
    assert!(matches!(stopped, Err(Error::InvalidQuery(_))));
    assert_eq!(calls, 1);
}
