//! Series identity under hash collisions, space reuse after retention and deletion,
//! merged appends from many threads, and errors for bad input.

use hrafn_timeseries::text::parse_selector;
use hrafn_timeseries::{Error, Labels, Sample, Store, StoreOptions};
use std::sync::Arc;

fn labels(name: &str, host: &str) -> Labels {
    Labels::new([("__name__", name), ("host", host)]).expect("labels")
}

fn samples(from: i64, count: i64, step_ms: i64) -> Vec<Sample> {
    (0..count)
        .map(|i| Sample {
            timestamp_ms: from + i * step_ms,
            value: (i * 3) as f64,
        })
        .collect()
}

fn options() -> StoreOptions {
    StoreOptions {
        environment: hrafn::Options::default().durability(hrafn::Durability::None),
        ..StoreOptions::default()
    }
}

#[test]
fn a_hash_collision_never_merges_two_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), options()).expect("open");
    let a = labels("up", "a");
    let b = labels("up", "b");
    let id_b = store.series_id(&b).expect("id");
    // File series b under a's hash as well, as a collision of the two hashes would.
    {
        let mut wtx = store.environment().begin_write().expect("write");
        let hash = xxhash_rust::xxh3::xxh3_64(&a.encode());
        let mut key = hash.to_be_bytes().to_vec();
        key.extend_from_slice(&id_b.0.to_be_bytes());
        wtx.open_tree("ts.series")
            .expect("tree")
            .insert(key, [])
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let report = store.append(&a, &samples(0, 5, 1000)).expect("append a");
    assert_eq!(report.series_created, 1, "a is a new series, not b");
    let id_a = store.series_id(&a).expect("id");
    assert_ne!(id_a, id_b);
    let got = store
        .select(&parse_selector("up").expect("selector"), 0, 10_000)
        .expect("select");
    assert_eq!(got.len(), 2);
    let b_samples = &got.iter().find(|(l, _)| *l == b).expect("b").1;
    assert!(b_samples.is_empty(), "b got none of a's samples");
}

#[test]
fn space_is_reused_after_retention_and_deletion() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), options()).expect("open");
    let used = |store: &Store| {
        store
            .environment()
            .begin_read()
            .expect("read")
            .check()
            .expect("check")
            .used_pages
    };
    let fill = |from: i64| {
        for h in 0..50 {
            let rows = samples(from, 10_000, 15_000)
                .into_iter()
                .map(|s| (labels("load", &format!("h{h}")), s))
                .collect();
            store.append_batch(rows).expect("append");
        }
    };
    fill(0);
    let full = used(&store);
    let day_ms = 10_000 * 15_000;
    // Retention past every sample leaves (almost) nothing.
    let r = store.drop_before(day_ms + 1).expect("retention");
    assert_eq!(r.series_deleted, 50, "{r:?}");
    assert!(r.chunks_dropped > 0, "{r:?}");
    assert!(
        used(&store) < full / 4,
        "{} pages after retention of {full}",
        used(&store)
    );
    // The same volume again reuses the freed pages: the file does not grow.
    store.environment().flush_and_sync().expect("flush");
    let file_before = store.environment().stats().data_file_size_bytes;
    fill(2 * day_ms);
    assert_eq!(
        store
            .delete_series(&parse_selector("load").expect("sel"))
            .expect("delete"),
        50
    );
    fill(4 * day_ms);
    store.environment().flush_and_sync().expect("flush");
    let file_after = store.environment().stats().data_file_size_bytes;
    assert!(
        file_after <= file_before + file_before / 4,
        "data file grew from {file_before} to {file_after} bytes"
    );
    assert!(store.check().expect("check").is_ok());
    assert!(store.label_values("host").expect("values").len() == 50);
}

#[test]
fn appends_from_many_threads_merge_and_all_land() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        Store::open(
            dir.path(),
            StoreOptions {
                environment: hrafn::Options::default(),
                ..StoreOptions::default()
            },
        )
        .expect("open"),
    );
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for batch in 0..50 {
                    let rows = (0..20)
                        .map(|s| {
                            let sample = Sample {
                                timestamp_ms: batch * 1000,
                                value: f64::from(t),
                            };
                            (labels("m", &format!("t{t}s{s}")), sample)
                        })
                        .collect();
                    let r = store.append_batch(rows).expect("append");
                    assert_eq!(r.appended, 20);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let got = store
        .select(&parse_selector("m").expect("selector"), 0, i64::MAX)
        .expect("select");
    assert_eq!(got.len(), 160);
    assert!(got.iter().all(|(_, s)| s.len() == 50));
    let stats = store.environment().stats();
    assert!(
        stats.merged_transactions < stats.merged_requests,
        "no request shared a transaction: {} in {}",
        stats.merged_requests,
        stats.merged_transactions
    );
}

#[test]
fn bad_input_is_refused_with_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), options()).expect("open");
    let long = "x".repeat(2_000);
    let too_long = Labels::new([("__name__", "m"), ("big", long.as_str())]).expect("labels");
    assert!(matches!(
        store.append(&too_long, &samples(0, 1, 1)),
        Err(Error::InvalidLabels(_))
    ));
    for bad in ["", "{}", "{a=~\".*\"}", "up{a=\"b\"", "up{a=~\"(\"}"] {
        let e = parse_selector(bad);
        assert!(
            matches!(e, Err(Error::Parse { .. } | Error::InvalidQuery(_))),
            "{bad}: {e:?}"
        );
    }
    let q = hrafn_timeseries::RangeQuery::new("up", 10, 0, 1).expect("query");
    assert!(matches!(store.query_range(&q), Err(Error::InvalidQuery(_))));
    // An empty directory is not a store when opened read-only.
    let empty = tempfile::tempdir().expect("tempdir");
    drop(hrafn::Environment::open(empty.path(), hrafn::Options::default()).expect("env"));
    assert!(matches!(
        Store::open_read_only(empty.path(), StoreOptions::default()),
        Err(Error::NotAStore)
    ));
}
