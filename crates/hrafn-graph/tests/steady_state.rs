//! Steady state of a graph under sustained churn, default options (durable commits, the
//! engine's own flush and sync schedule).
//!
//! Two writer threads keep a sliding window of [`LIVE_NODES`] nodes: each round one adds
//! a batch of nodes (with a property index kept up) and their edges to random live nodes,
//! updates some live nodes' properties so that their records grow and move, and deletes
//! the oldest batch with its edges (cascading). A reader walks 1-hop and 2-hop
//! neighbourhoods from random live nodes throughout. Live data is bounded, so what a user
//! needs after hours shows within a minute: sampled every 250 ms, the test asserts
//! - the data file stops growing: after the first third of the run it grows by at most
//!   [`DATA_FILE_GROWTH`] (freed table sections and tree pages are reused);
//! - journal files on disk stay under [`JOURNAL_FILES_BOUND`];
//! - the synced transaction id advances at least every 2 × the sync interval;
//! - resident memory stays under [`RSS_BOUND_BYTES`];
//! - the writers keep their pace: no 5 s window below half the median window;
//! - the reader's 2-hop p99 in the last third is at most [`READ_P99_GROWTH`] × the first
//!   third's;
//! - at the end the graph holds exactly the live window and its edges, and its integrity
//!   check (no dangling edge, adjacency exactly the edge records) passes after a reopen.
//!
//! `HRAFN_GRAPH_STEADY_SECS` sets the run's length (default 30).

use hrafn::Options;
use hrafn_graph::{DeleteMode, Direction, Graph, Properties, Traversal, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SECS_VAR: &str = "HRAFN_GRAPH_STEADY_SECS";
const DEFAULT_SECS: u64 = 30;
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
const WINDOW: Duration = Duration::from_secs(5);

const LIVE_NODES: usize = 20_000;
const BATCH_NODES: usize = 200;
const EDGES_PER_NODE: usize = 8;
const UPDATES_PER_ROUND: usize = 50;
const TYPES: [&str; 2] = ["KNOWS", "FOLLOWS"];

const DATA_FILE_GROWTH: f64 = 0.15;
const JOURNAL_FILES_BOUND: u64 = 24;
const RSS_BOUND_BYTES: u64 = 512 << 20;
const READ_P99_GROWTH: f64 = 3.0;

fn run_secs() -> u64 {
    std::env::var(SECS_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_SECS)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

fn person(n: u64, padding: usize) -> Properties {
    let mut p = Properties::new();
    p.insert("name".to_string(), Value::from(format!("person-{n}")));
    p.insert("bio".to_string(), Value::from("x".repeat(padding)));
    p
}

/// The live window: batches of node ids, oldest first.
struct Window {
    batches: VecDeque<Vec<u64>>,
    live: Vec<u64>,
}

impl Window {
    fn random(&self, rng: &mut StdRng) -> u64 {
        self.live[rng.gen_range(0..self.live.len())]
    }

    fn rebuild(&mut self) {
        self.live = self.batches.iter().flatten().copied().collect();
    }
}

#[derive(Clone, Copy)]
struct Point {
    t: Duration,
    rounds: u64,
    data_file_bytes: u64,
    journal_files: u64,
    synced_txn_id: u64,
    rss_bytes: u64,
}

/// One writer round: a batch of nodes in, their edges, some records grown, the oldest
/// batch out with its edges. The window lock serializes rounds' choices, not their writes.
fn round(g: &Graph, window: &Mutex<Window>, rng: &mut StdRng, serial: u64) {
    let targets: Vec<u64> = {
        let w = window.lock().expect("window lock");
        (0..BATCH_NODES * EDGES_PER_NODE)
            .map(|_| w.random(rng))
            .collect()
    };
    let updates: Vec<(u64, usize)> = {
        let w = window.lock().expect("window lock");
        (0..UPDATES_PER_ROUND)
            .map(|_| (w.random(rng), rng.gen_range(0..600)))
            .collect()
    };
    let added = g
        .write(|w| {
            let ids = (0..BATCH_NODES as u64)
                .map(|i| w.add_node("Person", &person(serial * 1000 + i, 16)))
                .collect::<hrafn_graph::Result<Vec<u64>>>()?;
            let props = Properties::new();
            let edges: Vec<(u64, u64, &str, &Properties)> = targets
                .iter()
                .enumerate()
                .map(|(k, &dst)| (ids[k / EDGES_PER_NODE], dst, TYPES[k % 2], &props))
                .collect();
            // A target may have been deleted by the other writer since it was chosen.
            for e in edges {
                match w.add_edge(e.0, e.1, e.2, e.3) {
                    Ok(_) | Err(hrafn_graph::Error::NoSuchNode(_)) => {}
                    Err(err) => return Err(err),
                }
            }
            for &(id, padding) in &updates {
                match w.update_node(id, "Person", &person(id, padding)) {
                    Ok(()) | Err(hrafn_graph::Error::NoSuchNode(_)) => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(ids)
        })
        .expect("add and update");
    let doomed = {
        let mut w = window.lock().expect("window lock");
        w.batches.push_back(added);
        let doomed = if w.batches.len() * BATCH_NODES > LIVE_NODES {
            w.batches.pop_front()
        } else {
            None
        };
        w.rebuild();
        doomed
    };
    if let Some(doomed) = doomed {
        g.write(|w| {
            for id in doomed {
                assert!(w.delete_node(id, DeleteMode::Cascade)?, "node {id} was live");
            }
            Ok(())
        })
        .expect("delete");
    }
}

#[test]
fn churn_reaches_a_steady_state_under_default_options() {
    let run_for = Duration::from_secs(run_secs());
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options::default();
    let sync_interval = Duration::from_millis(options.sync_interval_ms);
    let g = Arc::new(Graph::open(dir.path(), options.clone()).expect("open"));
    g.write(|w| w.create_property_index("Person", "name"))
        .expect("index");
    let window = Arc::new(Mutex::new(Window {
        batches: VecDeque::new(),
        live: Vec::new(),
    }));
    // Fill the window before the clock starts.
    let mut rng = StdRng::seed_from_u64(1);
    let seed_ids = g
        .write(|w| {
            (0..LIVE_NODES as u64)
                .map(|n| w.add_node("Person", &person(n, 16)))
                .collect::<hrafn_graph::Result<Vec<u64>>>()
        })
        .expect("seed nodes");
    {
        let mut w = window.lock().expect("window lock");
        w.batches = seed_ids.chunks(BATCH_NODES).map(<[u64]>::to_vec).collect();
        w.rebuild();
    }
    for _ in 0..LIVE_NODES / BATCH_NODES {
        round(&g, &window, &mut rng, 0);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for t in 0..2u64 {
        let (g, window, stop, rounds) = (g.clone(), window.clone(), stop.clone(), rounds.clone());
        writers.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(10 + t);
            let mut serial = 1 + t;
            while !stop.load(Ordering::Relaxed) {
                round(&g, &window, &mut rng, serial);
                serial += 2;
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let reader = {
        let (g, window, stop) = (g.clone(), window.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(3);
            let mut latencies: Vec<(Duration, Duration)> = Vec::new();
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let start = window.lock().expect("window lock").random(&mut rng);
                let t = Instant::now();
                g.read(|r| {
                    // The node may be gone by the time the snapshot opens.
                    if r.node(start)?.is_some() {
                        r.neighbours(start, Direction::Both, None)?;
                        r.k_hop(start, 2, &Traversal::default())?;
                    }
                    Ok(())
                })
                .expect("read");
                latencies.push((started.elapsed(), t.elapsed()));
                std::thread::sleep(Duration::from_millis(5));
            }
            latencies
        })
    };

    let started = Instant::now();
    let mut points = Vec::new();
    while started.elapsed() < run_for {
        std::thread::sleep(SAMPLE_EVERY);
        let stats = g.environment().stats();
        points.push(Point {
            t: started.elapsed(),
            rounds: rounds.load(Ordering::Relaxed),
            data_file_bytes: stats.data_file_size_bytes,
            journal_files: std::fs::read_dir(dir.path().join("journal"))
                .map_or(0, |d| d.count() as u64),
            synced_txn_id: stats.synced_txn_id,
            rss_bytes: rss_bytes(),
        });
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let latencies = reader.join().expect("reader");
    let total = points.last().expect("points").rounds;
    eprintln!(
        "{total} rounds in {:.1} s: {} nodes and {} edges added and deleted",
        run_for.as_secs_f64(),
        total * BATCH_NODES as u64,
        total * (BATCH_NODES * EDGES_PER_NODE) as u64
    );
    assert!(
        total as usize * BATCH_NODES > 3 * LIVE_NODES,
        "the window turned over only {:.1} times",
        (total as usize * BATCH_NODES) as f64 / LIVE_NODES as f64
    );

    let third = points.len() / 3;
    let settled = points[third].data_file_bytes;
    let last = points.last().expect("points").data_file_bytes;
    eprintln!(
        "data file {settled} bytes at {:.0} s, {last} at the end",
        points[third].t.as_secs_f64()
    );
    assert!(
        last as f64 <= settled as f64 * (1.0 + DATA_FILE_GROWTH),
        "the data file grew from {settled} to {last} bytes after the first third"
    );
    let journals_peak = points.iter().map(|p| p.journal_files).max().unwrap_or(0);
    let rss_peak = points.iter().map(|p| p.rss_bytes).max().unwrap_or(0);
    eprintln!(
        "journal files on disk at most {journals_peak}, resident memory at most {rss_peak} bytes"
    );
    assert!(
        journals_peak <= JOURNAL_FILES_BOUND,
        "{journals_peak} journal files"
    );
    assert!(rss_peak <= RSS_BOUND_BYTES, "resident memory {rss_peak} bytes");

    let mut since = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for w in points.windows(2) {
        if w[1].synced_txn_id > w[0].synced_txn_id {
            since = w[1].t;
        }
        longest = longest.max(w[1].t - since);
    }
    eprintln!("longest stretch without a sync: {:.1} s", longest.as_secs_f64());
    assert!(longest <= 2 * sync_interval, "no sync for {longest:?}");

    let per_window = WINDOW.as_millis() as usize / SAMPLE_EVERY.as_millis() as usize;
    let windows: Vec<u64> = points
        .chunks_exact(per_window)
        .scan(0u64, |before, w| {
            let end = w[w.len() - 1].rounds;
            let n = end - *before;
            *before = end;
            Some(n)
        })
        .collect();
    let mut sorted = windows.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    eprintln!("rounds per {} s window: {windows:?}", WINDOW.as_secs());
    assert!(
        windows.iter().all(|&w| w * 2 >= median),
        "a window fell below half the median {median}: {windows:?}"
    );

    let p99 = |from: Duration, to: Duration| {
        let mut v: Vec<Duration> = latencies
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|&(_, l)| l)
            .collect();
        v.sort_unstable();
        v[(v.len() - 1) * 99 / 100]
    };
    let early = p99(Duration::ZERO, run_for / 3);
    let late = p99(run_for * 2 / 3, run_for * 2);
    eprintln!(
        "reader p99 (1-hop and 2-hop): {:.2} ms in the first third, {:.2} ms in the last",
        early.as_secs_f64() * 1e3,
        late.as_secs_f64() * 1e3
    );
    assert!(
        late.as_secs_f64() <= early.as_secs_f64() * READ_P99_GROWTH + 0.002,
        "the reader's p99 grew from {early:?} to {late:?}"
    );

    let live = window.lock().expect("window lock").live.clone();
    drop(g);
    let g = Graph::open(dir.path(), options).expect("reopen");
    let report = g.check().expect("check");
    assert!(report.is_ok(), "{:?}", report.problems);
    g.read(|r| {
        assert_eq!(r.node_count(), live.len() as u64);
        for &id in live.iter().step_by(97) {
            assert!(r.node(id)?.is_some(), "live node {id}");
        }
        Ok(())
    })
    .expect("read");
}
