//! Steady state of a time-series store under sustained ingest with retention, default
//! options (durable commits, the engine's own flush and sync schedule).
//!
//! Two threads append scrape-sized batches (each its half of [`SERIES`] series, one sample
//! per series every simulated 15 s), a third applies retention, keeping
//! [`RETENTION_MS`] of simulated time, and compacts (merged chunks are rewritten, packed,
//! in key order), and a fourth runs a selective query over the newest hour throughout. The simulated clock runs thousands of times faster than the wall
//! clock, so a run of a minute ingests days of monitoring data and passes through the
//! retention window many times (the wall-clock schedules, flush and sync, run as they
//! would for a user).
//!
//! Sampled every 250 ms (`hrafn::steady`), it asserts:
//! - the data file stops growing: after the first third of the run it grows by at most
//!   one growth step, since retention frees as much as ingest adds and freed pages are
//!   reused (in 40 s the store writes over 100 MB of chunks into a file of about 10 MB);
//! - journal files on disk stay under 24;
//! - the synced transaction id advances at least every 2 × the sync interval;
//! - resident memory stays under 512 MiB;
//! - ingest keeps its pace: no 5 s window below half the median window;
//! - the query's p99 in the last third is at most [`QUERY_P99_GROWTH`] × the first
//!   third's (data older than the retention period is gone, so the query does not slow
//!   down as the days pass), and it always finds every series;
//! - at the end, retention leaves no sample older than the window beyond the sealed chunk
//!   that straddles the cutoff (at most a compacted chunk's span), and the store's integrity check passes after a
//!   reopen.
//!
//! `HRAFN_TS_STEADY_SECS` sets the run's length (default 40).

use hrafn::steady;
use hrafn_timeseries::text::parse_selector;
use hrafn_timeseries::{Labels, Sample, SeriesId, Store, StoreOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SECS_VAR: &str = "HRAFN_TS_STEADY_SECS";
const DEFAULT_SECS: u64 = 40;

/// Series: 20 metric names × 100 instances.
const METRICS: usize = 20;
const INSTANCES: usize = 100;
const SERIES: usize = METRICS * INSTANCES;
const SCRAPE_MS: i64 = 15_000;
/// Simulated time kept by retention.
const RETENTION_MS: i64 = 2 * 3_600_000;
/// How often (wall clock) retention runs.
const RETENTION_EVERY: Duration = Duration::from_millis(500);
/// Scrapes per append call (a batch of scrapes, as a remote-write sender ships them).
const SCRAPES_PER_APPEND: i64 = 4;

const QUERY_P99_GROWTH: f64 = 3.0;

fn run_secs() -> u64 {
    std::env::var(SECS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SECS)
}

fn labels(metric: usize, instance: usize) -> Labels {
    Labels::new([
        ("__name__", format!("node_metric_{metric}")),
        (
            "instance",
            format!("10.0.{}.{}:9100", instance / 250, instance % 250),
        ),
        ("job", "node".to_string()),
    ])
    .expect("labels")
}

/// The value of series `s` at scrape `n`: counters for even metrics, gauges for odd ones.
fn value(s: usize, n: i64) -> f64 {
    if (s / INSTANCES).is_multiple_of(2) {
        (n * (s as i64 % 7 + 1)) as f64
    } else {
        ((n * 31 + s as i64 * 17) % 1000) as f64 / 10.0
    }
}

#[test]
fn ingest_with_retention_reaches_a_steady_state_under_default_options() {
    let run_for = Duration::from_secs(run_secs());
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions::default();
    let store = Arc::new(Store::open(dir.path(), options.clone()).expect("open"));
    let all: Vec<Labels> = (0..SERIES)
        .map(|s| labels(s / INSTANCES, s % INSTANCES))
        .collect();
    let ids: Arc<Vec<SeriesId>> = Arc::new(store.series_ids(&all).expect("ids"));

    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    // Each ingest thread's newest timestamp; retention keeps the window behind the slower.
    let clocks: Arc<[AtomicI64; 2]> = Arc::new([AtomicI64::new(0), AtomicI64::new(0)]);
    let start_ms: i64 = 1_700_000_000_000;
    let mut threads = Vec::new();
    for half in 0..2usize {
        let (store, ids, stop, appended, clocks) = (
            store.clone(),
            ids.clone(),
            stop.clone(),
            appended.clone(),
            clocks.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mine: Vec<usize> = (half * SERIES / 2..(half + 1) * SERIES / 2).collect();
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                let mut rows = Vec::with_capacity(mine.len() * SCRAPES_PER_APPEND as usize);
                for _ in 0..SCRAPES_PER_APPEND {
                    let t = start_ms + n * SCRAPE_MS;
                    rows.extend(mine.iter().map(|&s| {
                        (
                            ids[s],
                            Sample {
                                timestamp_ms: t,
                                value: value(s, n),
                            },
                        )
                    }));
                    n += 1;
                }
                let report = store.append_ids(&rows).expect("append");
                assert_eq!(report.appended, rows.len() as u64, "{report:?}");
                appended.fetch_add(report.appended, Ordering::Relaxed);
                clocks[half].store(start_ms + (n - 1) * SCRAPE_MS, Ordering::Relaxed);
            }
        }));
    }
    let retention = {
        let (store, stop, clocks) = (store.clone(), stop.clone(), clocks.clone());
        std::thread::spawn(move || {
            let (mut dropped, mut compacted) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(RETENTION_EVERY);
                let newest = clocks[0]
                    .load(Ordering::Relaxed)
                    .min(clocks[1].load(Ordering::Relaxed));
                if newest > start_ms + RETENTION_MS {
                    dropped += store
                        .drop_before(newest - RETENTION_MS)
                        .expect("retention")
                        .chunks_dropped;
                }
                compacted += store.compact().expect("compact").series_rewritten;
            }
            (dropped, compacted)
        })
    };
    let query = {
        let (store, stop, clocks) = (store.clone(), stop.clone(), clocks.clone());
        std::thread::spawn(move || {
            let matchers = parse_selector(r#"node_metric_3{job="node"}"#).expect("selector");
            let mut latencies: Vec<(Duration, Duration)> = Vec::new();
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let newest = clocks[0].load(Ordering::Relaxed);
                if newest == 0 {
                    std::thread::yield_now();
                    continue;
                }
                let t = Instant::now();
                let got = store
                    .select(&matchers, newest - 3_600_000, newest)
                    .expect("query");
                latencies.push((started.elapsed(), t.elapsed()));
                assert_eq!(got.len(), INSTANCES, "every instance's series");
                std::thread::sleep(Duration::from_millis(20));
            }
            latencies
        })
    };

    let points = steady::record(store.environment(), dir.path(), run_for, &|| {
        appended.load(Ordering::Relaxed)
    });
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("ingest thread");
    }
    let (chunks_dropped, series_compacted) = retention.join().expect("retention thread");
    let latencies = query.join().expect("query thread");

    let total = points.last().expect("points").progress;
    let simulated_ms = clocks[0].load(Ordering::Relaxed) - start_ms;
    eprintln!(
        "{total} samples in {:.1} s ({:.0}/s), {:.1} simulated days, {chunks_dropped} chunks dropped by retention, {series_compacted} series compacted",
        run_for.as_secs_f64(),
        total as f64 / run_for.as_secs_f64(),
        simulated_ms as f64 / 86_400_000.0
    );
    assert!(
        simulated_ms > 5 * RETENTION_MS,
        "the run passed through the retention window only {:.1} times",
        simulated_ms as f64 / RETENTION_MS as f64
    );
    assert!(chunks_dropped > 0, "retention dropped no chunk");
    assert!(series_compacted > 0, "compaction rewrote no series");

    steady::assert_steady(&points, &steady::Bounds::for_options(&options.environment));
    // The selective query does not slow down as the days pass.
    steady::assert_latency_flat(
        "selective query",
        &latencies,
        run_for,
        QUERY_P99_GROWTH,
        Duration::from_millis(2),
    );

    // Retention leaves nothing older than the cutoff but the chunk straddling it, which
    // spans at most a compacted chunk's samples. (Run once more now: while the threads ran,
    // the simulated clock moved on between two retention passes.)
    let newest = clocks[0]
        .load(Ordering::Relaxed)
        .min(clocks[1].load(Ordering::Relaxed));
    let cutoff_ms = newest - RETENTION_MS;
    store.drop_before(cutoff_ms).expect("retention");
    let straddle_ms = hrafn_timeseries::COMPACTED_CHUNK_SAMPLES as i64 * SCRAPE_MS;
    let everything = parse_selector(r#"{job="node"}"#).expect("selector");
    let old = store
        .select(&everything, 0, cutoff_ms - straddle_ms)
        .expect("select");
    let old_samples: usize = old.iter().map(|(_, s)| s.len()).sum();
    assert_eq!(
        old_samples, 0,
        "samples older than the cutoff beyond a straddling chunk remain"
    );

    drop(store);
    let store = Store::open(dir.path(), options).expect("reopen");
    let report = store.check().expect("check");
    assert!(report.is_ok(), "{report:?}");
}
