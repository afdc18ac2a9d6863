//! Endurance: steady state under sustained load with `Options::default()`.
//!
//! A child process (this test binary run again) opens an environment with default options
//! and keeps it busy: four threads write small merged batches through
//! `Environment::write`, one thread commits large `begin_write` transactions, one keeps
//! the data structures churning at a bounded size (a table with a primary key, a variable
//! and a fixed index, records moving into and out of overflow runs; one nested fixed-size
//! tree per series under a sliding time window, so trees embed, spill and embed again; a
//! multi-value tree), two threads read throughout, and one read transaction is held through the middle third of the run.
//! Every 250 ms the child prints a sample of its stats and its resident memory. At the end
//! the parent kills it with SIGKILL mid-write and reopens the environment.
//!
//! The parent asserts what a user needs after an hour as much as after a minute:
//! - the synced transaction id advances at least every 2 × `sync_interval_ms`, except while
//!   the long reader pins older page versions (a sync cannot pass the oldest reader: the
//!   data file may not be written with versions it must not see), and again within that
//!   bound once it ends;
//! - journal files on disk never exceed the ready files plus those waiting for a sync (plus
//!   the one just rotated into), and outside the long reader those waiting stay under
//!   [`WAITING_JOURNALS_BOUND`];
//! - resident memory stays under [`RSS_BOUND_BYTES`] throughout, the long reader included;
//! - the data file stops growing: live data is bounded, so freed pages (table pages emptied
//!   or compacted, spilled trees folded back) are reused, and after the long reader the file
//!   grows by at most [`DATA_FILE_GROWTH_AFTER_PIN`] over its size while the reader was open;
//! - throughput and latency stay flat: in windows of [`WINDOW_MS`], the merged writes
//!   acknowledged (as their callers time them) stay above a fraction of the median window's,
//!   each window's p99 below a multiple of the median window's, no write waits past
//!   [`WRITE_LATENCY_BOUND_US`], and the last third of the run is neither slower nor
//!   slower-to-answer than the first; and since the disk sets the writes' pace, the share of
//!   each window spent in journal writes stays above [`JOURNAL_BUSY_LOWEST_OF_MEDIAN`] of
//!   the median window's (the engine loses no time of its own), in the last third as in
//!   the first;
//! - after the kill, reopening replays only what was written since the last sync the child
//!   reported, and takes at most a second, and the integrity check passes (every table
//!   index agrees with its records, every embedded tree decodes, no page owned twice).
//!
//! `HRAFN_ENDURANCE_SECS` sets the run's length (default 60). With `HRAFN_ENDURANCE_OUT`
//! set to a directory, the samples are also written there as `samples.csv` and plotted in
//! `samples.svg`: the soak run documented in `docs/design.md` is this test run for hours.

mod common;

use common::mix;
use hrafn::steady::{journal_files_on_disk, median, rss_bytes, windows_below_median};
use hrafn::table::Schema;
use hrafn::{Environment, Options, WriteBatch};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CHILD_DIR_VAR: &str = "HRAFN_ENDURANCE_CHILD_DIR";
const SECS_VAR: &str = "HRAFN_ENDURANCE_SECS";
const OUT_VAR: &str = "HRAFN_ENDURANCE_OUT";
const DEFAULT_SECS: u64 = 60;
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Journal files waiting for a sync, outside a long reader: the flusher syncs once more
/// than 8 wait; files written while that flush and sync run come on top.
const WAITING_JOURNALS_BOUND: u64 = 16;
/// After the long reader ends, time the flusher has to sync what it pinned.
const CATCH_UP_MS: u64 = 2_000;
/// Resident memory of the child, throughout. The data set is a few tens of MiB; what the
/// long reader pins is bounded by the pages written while it is open.
const RSS_BOUND_BYTES: u64 = 1 << 30;
/// Growth of the data file allowed after the long reader ends, over its largest size while
/// the reader was open (pages the reader pinned come back to the free-space map then).
const DATA_FILE_GROWTH_AFTER_PIN: f64 = 0.10;
/// Longest reopen after the kill.
const REOPEN_BOUND: Duration = Duration::from_secs(1);

const MERGED_WRITERS: u64 = 4;
const READERS: u64 = 2;
const SMALL_KEYS_PER_WRITER: u64 = 4096;
const BIG_KEYS: u64 = 100_000;
const BIG_TXN_KEYS: u64 = 1000;
/// The structures thread: live table records, series, samples kept per series.
const TABLE_KEYS: u64 = 4000;
const SERIES: u64 = 64;
const SAMPLES_PER_SERIES: u64 = 600;

const CSV_HEADER: &str = "t_ms,txn_id,synced_txn_id,commits,flushes,syncs,journal_files_on_disk,\
journal_files_waiting,journal_files_ready,journal_files_retiring,scratch_used_bytes,scratch_pinned_bytes,rss_bytes,\
oldest_reader_age_ms,long_reader_open,data_file_bytes,journal_writes,journal_write_us,\
write_latency_buckets";

/// Buckets of the merged writes' latency histogram: bucket 0 counts writes under 1 µs,
/// bucket `i` those from 2^(i-1) to 2^i µs, the last one everything from 2^22 µs (4.2 s) up.
const LATENCY_BUCKETS: usize = 24;
/// Windows the parent judges throughput and latency over.
const WINDOW_MS: u64 = 5_000;
/// Flat throughput: every window's merged writes against the median window's.
const WRITES_LOWEST_OF_MEDIAN: f64 = 0.25;
/// Flat pace of the engine itself: every window's share of time spent writing the journal
/// against the median window's. Every commit is one journal write, and on this load the
/// share stays near constant while the disk's pace moves: a slow disk lowers the writes,
/// not this share, while a stall in the engine lowers it. So does CPU taken by
/// other processes (two spinning ones brought it from about 0.53 to about 0.27), hence a
/// floor well below that.
const JOURNAL_BUSY_LOWEST_OF_MEDIAN: f64 = 0.3;
/// Below this median share (thousandths) the journal does not set the pace, and its
/// share says nothing about the engine's.
const JOURNAL_BUSY_MEANINGFUL_PERMILLE: u64 = 100;
/// Flat latency: every window's p99 against the median window's (p99s are powers of two).
const P99_HIGHEST_OF_MEDIAN: u64 = 4;
/// No merged write waits longer than this (µs, a bucket bound: 2.1 s).
const WRITE_LATENCY_BOUND_US: u64 = 1 << 21;
/// No drift: the last third's median window against the first third's, for throughput
/// (at least this fraction) and for p99 (at most this factor). Not tighter: on a 2-core
/// machine a 60 s run can spend 15 s of its last third at less than half the writes
/// (0.45× in one CI run, with p99 doubled), then recover.
const DRIFT_WRITES_FRACTION: f64 = 0.25;
const DRIFT_P99_FACTOR: u64 = 4;

/// One line of the child's report.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    t_ms: u64,
    txn_id: u64,
    synced_txn_id: u64,
    commits: u64,
    flushes: u64,
    syncs: u64,
    journal_files_on_disk: u64,
    journal_files_waiting: u64,
    journal_files_ready: u64,
    /// Retired files the flusher has yet to remove (a few per tick).
    journal_files_retiring: u64,
    scratch_used_bytes: u64,
    scratch_pinned_bytes: u64,
    rss_bytes: u64,
    oldest_reader_age_ms: u64,
    long_reader_open: bool,
    data_file_bytes: u64,
    /// Journal records written so far, and the time their writes took (µs, summed): the
    /// disk's share of a commit, to tell a slow disk from a slow engine.
    journal_writes: u64,
    journal_write_us: u64,
    /// Merged writes acknowledged so far, by latency (see [`LATENCY_BUCKETS`]).
    write_latency_buckets: [u64; LATENCY_BUCKETS],
}

impl Sample {
    fn to_csv(self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.t_ms,
            self.txn_id,
            self.synced_txn_id,
            self.commits,
            self.flushes,
            self.syncs,
            self.journal_files_on_disk,
            self.journal_files_waiting,
            self.journal_files_ready,
            self.journal_files_retiring,
            self.scratch_used_bytes,
            self.scratch_pinned_bytes,
            self.rss_bytes,
            self.oldest_reader_age_ms,
            u8::from(self.long_reader_open),
            self.data_file_bytes,
            self.journal_writes,
            self.journal_write_us,
            self.write_latency_buckets.map(|n| n.to_string()).join(";")
        )
    }

    fn from_csv(line: &str) -> Option<Sample> {
        let (line, buckets) = line.rsplit_once(',')?;
        let buckets: Vec<u64> = buckets
            .split(';')
            .map(|f| f.trim().parse().ok())
            .collect::<Option<_>>()?;
        let write_latency_buckets = buckets.try_into().ok()?;
        let v: Vec<u64> = line
            .split(',')
            .map(|f| f.trim().parse().ok())
            .collect::<Option<_>>()?;
        (v.len() == 18).then(|| Sample {
            t_ms: v[0],
            txn_id: v[1],
            synced_txn_id: v[2],
            commits: v[3],
            flushes: v[4],
            syncs: v[5],
            journal_files_on_disk: v[6],
            journal_files_waiting: v[7],
            journal_files_ready: v[8],
            journal_files_retiring: v[9],
            scratch_used_bytes: v[10],
            scratch_pinned_bytes: v[11],
            rss_bytes: v[12],
            oldest_reader_age_ms: v[13],
            long_reader_open: v[14] != 0,
            data_file_bytes: v[15],
            journal_writes: v[16],
            journal_write_us: v[17],
            write_latency_buckets,
        })
    }
}

/// Journal writes since open and the time they took (µs), read off the Prometheus text in
/// one snapshot: the count and sum of the `hrafn_journal_write_seconds` histogram.
fn journal_writes_and_us(env: &Environment) -> (u64, u64) {
    let text = env.metrics_text();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| child_fail(&format!("no {name} in the metrics")))
    };
    (
        value("hrafn_journal_write_seconds_count") as u64,
        (value("hrafn_journal_write_seconds_sum") * 1e6).round() as u64,
    )
}

fn run_secs() -> u64 {
    std::env::var(SECS_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s >= 6)
        .unwrap_or(DEFAULT_SECS)
}

// ---------------------------------------------------------------------------------------
// The child.

#[test]
#[ignore = "the endurance child; run by steady_state_under_default_options"]
fn endurance_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return;
    };
    child_main(Path::new(&dir), Duration::from_secs(run_secs()));
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn child_fail(message: &str) -> ! {
    say(&format!("FAIL {message}"));
    std::process::exit(3);
}

fn small_key(w: u64, i: u64) -> Vec<u8> {
    format!("w{w}/{:05}", i % SMALL_KEYS_PER_WRITER).into_bytes()
}

fn big_key(n: u64) -> [u8; 8] {
    (n % BIG_KEYS).to_be_bytes()
}

fn child_main(dir: &Path, run_for: Duration) {
    let started = Instant::now();
    let env = match Environment::open(dir, Options::default()) {
        Ok(env) => Arc::new(env),
        Err(e) => child_fail(&format!("open: {e}")),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let latency = Arc::new(LatencyHistogram::default());
    let long_reader_open = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for w in 0..MERGED_WRITERS {
        let env = Arc::clone(&env);
        let latency = Arc::clone(&latency);
        threads.push(std::thread::spawn(move || {
            let value = [w as u8; 64];
            for i in 0u64.. {
                let mut batch = WriteBatch::new();
                batch.insert("small", small_key(w, i), value);
                batch.insert("small", small_key(w, i + 1), value);
                let writing = Instant::now();
                if let Err(e) = env.write(batch) {
                    child_fail(&format!("merged write: {e}"));
                }
                latency.record(writing.elapsed());
            }
        }));
    }
    {
        let env = Arc::clone(&env);
        threads.push(std::thread::spawn(move || {
            let value = [7u8; 100];
            for round in 0u64.. {
                let commit = (|| {
                    let mut wtx = env.begin_write()?;
                    {
                        let mut big = wtx.open_tree("big")?;
                        for i in 0..BIG_TXN_KEYS {
                            let n = mix(round << 20 ^ i);
                            if n.is_multiple_of(8) {
                                big.remove(big_key(n))?;
                            } else {
                                big.insert(big_key(n), value)?;
                            }
                        }
                    }
                    wtx.commit()
                })();
                if let Err(e) = commit {
                    child_fail(&format!("large transaction: {e}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    {
        let env = Arc::clone(&env);
        threads.push(std::thread::spawn(move || {
            for round in 0u64.. {
                if let Err(e) = structures_round(&env, round) {
                    child_fail(&format!("structures: {e}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    for r in 0..READERS {
        let env = Arc::clone(&env);
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let mut n = r;
            while !stop.load(Ordering::Relaxed) {
                let read = (|| -> hrafn::Result<()> {
                    let rtx = env.begin_read()?;
                    if let Ok(big) = rtx.open_tree("big") {
                        for _ in 0..16 {
                            n = mix(n);
                            big.get(big_key(n))?;
                        }
                    }
                    Ok(())
                })();
                if let Err(e) = read {
                    child_fail(&format!("read: {e}"));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    {
        let env = Arc::clone(&env);
        let long_reader_open = Arc::clone(&long_reader_open);
        let latency = Arc::clone(&latency);
        let dir = dir.to_path_buf();
        threads.push(std::thread::spawn(move || {
            loop {
                std::thread::sleep(SAMPLE_EVERY);
                let stats = env.stats();
                let (journal_writes, journal_write_us) = journal_writes_and_us(&env);
                let sample = Sample {
                    t_ms: started.elapsed().as_millis() as u64,
                    txn_id: stats.txn_id,
                    synced_txn_id: stats.synced_txn_id,
                    commits: stats.commits,
                    flushes: stats.flushes,
                    syncs: stats.syncs,
                    journal_files_on_disk: journal_files_on_disk(&dir),
                    journal_files_waiting: stats.journal_files_waiting,
                    journal_files_ready: stats.journal_files_ready,
                    journal_files_retiring: stats.journal_files_retiring,
                    scratch_used_bytes: stats.scratch_used_bytes,
                    scratch_pinned_bytes: stats.scratch_pinned_bytes,
                    rss_bytes: rss_bytes(),
                    oldest_reader_age_ms: stats.oldest_reader_age_ms.unwrap_or(0),
                    long_reader_open: long_reader_open.load(Ordering::Relaxed),
                    data_file_bytes: std::fs::metadata(dir.join(hrafn::DATA_FILE))
                        .map_or(0, |m| m.len()),
                    journal_writes,
                    journal_write_us,
                    write_latency_buckets: latency.snapshot(),
                };
                say(&format!("SAMPLE {}", sample.to_csv()));
            }
        }));
    }

    // The long reader: through the middle third, its snapshot must not move.
    std::thread::sleep(run_for / 3);
    {
        let rtx = env
            .begin_read()
            .unwrap_or_else(|e| child_fail(&format!("begin_read: {e}")));
        long_reader_open.store(true, Ordering::Relaxed);
        let snapshot = |rtx: &hrafn::ReadTxn<'_>| -> Vec<(Vec<u8>, Vec<u8>)> {
            let tree = rtx
                .open_tree("small")
                .unwrap_or_else(|e| child_fail(&format!("open_tree: {e}")));
            tree.range::<&[u8], _>(..)
                .unwrap_or_else(|e| child_fail(&format!("range: {e}")))
                .map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect::<hrafn::Result<_>>()
                .unwrap_or_else(|e| child_fail(&format!("scan: {e}")))
        };
        let before = snapshot(&rtx);
        std::thread::sleep(run_for / 3);
        if snapshot(&rtx) != before {
            child_fail("the long reader's snapshot changed");
        }
        long_reader_open.store(false, Ordering::Relaxed);
    }
    std::thread::sleep(run_for.saturating_sub(started.elapsed()));
    stop.store(true, Ordering::Relaxed);
    say("DONE");
    // Writers go on until the parent's SIGKILL.
    std::thread::sleep(Duration::from_secs(3600));
    child_fail("not killed");
}

/// Latencies of the merged writes as the user sees them (`Environment::write` returning),
/// in power-of-two buckets of microseconds.
#[derive(Default)]
struct LatencyHistogram {
    buckets: [std::sync::atomic::AtomicU64; LATENCY_BUCKETS],
}

impl LatencyHistogram {
    fn record(&self, elapsed: Duration) {
        let us = elapsed.as_micros() as u64;
        let bucket = (u64::BITS - us.leading_zeros()) as usize;
        self.buckets[bucket.min(LATENCY_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> [u64; LATENCY_BUCKETS] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }
}

fn events_schema() -> Schema {
    Schema::new(4)
        .primary_key(0)
        .index("by-kind", &[1])
        .fixed_index("by-seq", 2)
}

/// One transaction over the data structures, each kept at a bounded size: table records
/// inserted, resized (into and out of overflow runs) and deleted; each series appends
/// samples at increasing timestamps and drops those older than its window; tags come and
/// go.
fn structures_round(env: &Environment, round: u64) -> hrafn::Result<()> {
    let mut wtx = env.begin_write()?;
    {
        let mut events = wtx.open_table("events", &events_schema())?;
        for i in 0..50 {
            let n = mix(round << 16 ^ i);
            let pk = format!("e{:05}", n % TABLE_KEYS).into_bytes();
            let kind = format!("kind{}", n % 13).into_bytes();
            let seq = (round << 16 | i).to_be_bytes();
            let payload_bytes = if n.is_multiple_of(17) {
                3_000 // an overflow run
            } else {
                40 + (n as usize >> 8) % 300
            };
            let payload = vec![n as u8; payload_bytes];
            match events.get_by_key(&pk)? {
                Some((id, _)) if n.is_multiple_of(3) => {
                    events.delete(id)?;
                }
                Some((id, _)) => {
                    events.update(id, &[&pk, &kind, &seq, &payload])?;
                }
                None => {
                    events.insert(&[&pk, &kind, &seq, &payload])?;
                }
            }
        }
    }
    {
        let mut series = wtx.open_tree("series")?;
        let now = round * 10;
        for s in 0..SERIES {
            let mut samples = series.open_fixed_tree(s.to_be_bytes(), 16)?;
            for t in now..now + 10 {
                samples.insert(t, &[s as u8; 16])?;
            }
            if now >= SAMPLES_PER_SERIES {
                samples.delete_range(..now - SAMPLES_PER_SERIES)?;
            }
        }
    }
    {
        let mut tags = wtx.open_multi_tree("tags")?;
        for i in 0..40 {
            let n = mix(round << 8 ^ i ^ 0x7a65);
            let key = format!("tag{}", n % 50);
            let value = ((n >> 16) % 2_000).to_be_bytes();
            if n.is_multiple_of(2) {
                tags.add(key, value)?;
            } else {
                tags.remove(key, value)?;
            }
        }
    }
    wtx.commit()
}

// ---------------------------------------------------------------------------------------
// The parent.

struct Report {
    samples: Vec<Sample>,
    failures: Vec<String>,
    done: bool,
}

fn run_child(dir: &Path, run_for: Duration) -> Report {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "endurance_child", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_DIR_VAR, dir)
        .env(SECS_VAR, run_for.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut report = Report {
            samples: Vec::new(),
            failures: Vec::new(),
            done: false,
        };
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with('\n') {
                break; // cut by the kill
            }
            // The test harness may print its own text before ours on the same line.
            if let Some(at) = line.find("SAMPLE ") {
                match Sample::from_csv(line[at + 7..].trim_end()) {
                    Some(s) if !report.done => report.samples.push(s),
                    Some(_) => {}
                    None => report.failures.push(format!("unreadable line {line:?}")),
                }
            } else if let Some(at) = line.find("FAIL ") {
                report
                    .failures
                    .push(format!("child: {}", line[at + 5..].trim_end()));
                let _ = done_tx.send(());
            } else if line.contains("DONE") {
                report.done = true;
                let _ = done_tx.send(());
            }
        }
        let _ = done_tx.send(());
        report
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let _ = done_rx.recv_timeout(run_for + Duration::from_secs(120));
    // Killed mid-write: the writers are still committing.
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let status = child.wait().expect("waiting for the child");
    let mut report = reader.join().expect("stdout reader");
    let stderr_text = err_reader.join().expect("stderr reader");
    {
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(libc::SIGKILL) {
            report.failures.push(format!(
                "child ended by itself ({status}); stderr: {}",
                stderr_text.trim()
            ));
        }
    }
    if !report.done {
        report
            .failures
            .push("the child never finished its run".into());
    }
    report
}

/// The merged writes of one [`WINDOW_MS`] window.
#[derive(Debug, Clone, Copy)]
struct Window {
    end_ms: u64,
    writes: u64,
    /// Upper bound of the bucket holding the 99th percentile, in µs.
    p99_us: u64,
    /// Upper bound of the highest bucket with a write in it, in µs.
    max_us: u64,
    /// Mean time of the window's journal record writes, in µs.
    journal_write_mean_us: u64,
    /// Share of the window's time spent in journal writes, in thousandths.
    journal_busy_permille: u64,
}

/// Splits the run into windows of [`WINDOW_MS`] (the last one, cut short by the end of
/// the run, is dropped) and reads each one's writes and latency off the cumulative
/// histograms at its ends.
fn windows(samples: &[Sample]) -> Vec<Window> {
    let bound_us = |bucket: usize| 1u64 << bucket;
    let mut out = Vec::new();
    let mut start = Sample::default();
    for (i, s) in samples.iter().enumerate() {
        let window_ends = samples
            .get(i + 1)
            .is_some_and(|next| next.t_ms / WINDOW_MS != s.t_ms / WINDOW_MS);
        if !window_ends {
            continue;
        }
        let counts: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|b| s.write_latency_buckets[b] - start.write_latency_buckets[b]);
        let writes: u64 = counts.iter().sum();
        let mut below = 0;
        let p99_bucket = counts
            .iter()
            .position(|&n| {
                below += n;
                below * 100 >= writes * 99
            })
            .unwrap_or(0);
        let max_bucket = counts.iter().rposition(|&n| n > 0).unwrap_or(0);
        out.push(Window {
            end_ms: s.t_ms,
            writes,
            p99_us: bound_us(p99_bucket),
            max_us: bound_us(max_bucket),
            journal_write_mean_us: (s.journal_write_us - start.journal_write_us)
                / (s.journal_writes - start.journal_writes).max(1),
            journal_busy_permille: (s.journal_write_us - start.journal_write_us)
                / (s.t_ms - start.t_ms).max(1),
        });
        start = *s;
    }
    out
}

/// What breaks flat throughput and latency across `windows`, as messages (none when flat):
/// a window far below the median's writes or far above its p99, a write past
/// [`WRITE_LATENCY_BOUND_US`], or the last third of the run slower than the first.
fn flatness_failures(windows: &[Window]) -> Vec<String> {
    let mut failures = Vec::new();
    if windows.len() < 6 {
        failures.push(format!("{} windows, too few to judge", windows.len()));
        return failures;
    }
    let at_s = |w: &Window| w.end_ms as f64 / 1000.0;
    let median_of =
        |part: &[Window], f: fn(&Window) -> u64| median(&part.iter().map(f).collect::<Vec<_>>());
    let writes: Vec<u64> = windows.iter().map(|w| w.writes).collect();
    let median_writes = median(&writes);
    for (i, n) in windows_below_median(&writes, WRITES_LOWEST_OF_MEDIAN) {
        failures.push(format!(
            "writes fell to {n} in the window ending at {:.1} s; median window {median_writes}",
            at_s(&windows[i])
        ));
    }
    // The disk sets the pace: a window with fewer writes had slower journal writes (see
    // `JOURNAL_BUSY_LOWEST_OF_MEDIAN`). Time the engine itself loses shows as a window
    // whose journal sat idle more than the others'.
    let busy: Vec<u64> = windows.iter().map(|w| w.journal_busy_permille).collect();
    let median_busy = median(&busy);
    let busy_speaks = median_busy >= JOURNAL_BUSY_MEANINGFUL_PERMILLE;
    for (i, n) in windows_below_median(&busy, JOURNAL_BUSY_LOWEST_OF_MEDIAN)
        .into_iter()
        .filter(|_| busy_speaks)
    {
        failures.push(format!(
            "the journal was busy {n}‰ of the window ending at {:.1} s; median window \
             {median_busy}‰",
            at_s(&windows[i])
        ));
    }
    let p99_us = median_of(windows, |w| w.p99_us);
    for w in windows {
        let at_s = at_s(w);
        if w.p99_us > p99_us * P99_HIGHEST_OF_MEDIAN {
            failures.push(format!(
                "p99 rose to {} µs in the window ending at {at_s:.1} s; median window \
                 {p99_us} µs",
                w.p99_us
            ));
        }
        if w.max_us > WRITE_LATENCY_BOUND_US {
            failures.push(format!(
                "a write waited past the bound ({} µs) in the window ending at {at_s:.1} s",
                w.max_us
            ));
        }
    }
    let third = windows.len() / 3;
    let (first, last) = (&windows[..third], &windows[windows.len() - third..]);
    let (writes_first, writes_last) = (
        median_of(first, |w| w.writes),
        median_of(last, |w| w.writes),
    );
    let (p99_first, p99_last) = (
        median_of(first, |w| w.p99_us),
        median_of(last, |w| w.p99_us),
    );
    if (writes_last as f64) < writes_first as f64 * DRIFT_WRITES_FRACTION {
        failures.push(format!(
            "throughput drifted down: median window {writes_first} writes in the first \
             third, {writes_last} in the last"
        ));
    }
    if p99_last > p99_first * DRIFT_P99_FACTOR {
        failures.push(format!(
            "latency drifted up: median window p99 {p99_first} µs in the first third, \
             {p99_last} µs in the last"
        ));
    }
    let (busy_first, busy_last) = (
        median_of(first, |w| w.journal_busy_permille),
        median_of(last, |w| w.journal_busy_permille),
    );
    if busy_speaks && (busy_last as f64) < busy_first as f64 * JOURNAL_BUSY_LOWEST_OF_MEDIAN {
        failures.push(format!(
            "the engine slowed down: the journal was busy {busy_first}‰ of the median \
             window in the first third, {busy_last}‰ in the last"
        ));
    }
    failures
}

#[test]
fn flatness_flags_a_drift_a_dip_and_a_stall() {
    let window = |i: u64, writes: u64, p99_us: u64, max_us: u64| Window {
        end_ms: (i + 1) * WINDOW_MS,
        writes,
        p99_us,
        max_us,
        journal_write_mean_us: 100,
        journal_busy_permille: 500,
    };
    let flat: Vec<Window> = (0..12)
        .map(|i| window(i, 30_000 + i % 3 * 5_000, 8192, 32_768))
        .collect();
    assert_eq!(flatness_failures(&flat), Vec::<String>::new());
    // Latency doubling every three windows: the last third's p99 is 8× the first's.
    let drifting: Vec<Window> = (0..12)
        .map(|i| window(i, 30_000, 8192 << (i / 3), 32_768 << (i / 3)))
        .collect();
    let failures = flatness_failures(&drifting);
    assert!(
        failures.iter().any(|f| f.contains("latency drifted")),
        "{failures:?}"
    );
    // One window nearly without writes, and one write held for 4 s.
    let mut dip = flat.clone();
    dip[5].writes = 1_000;
    dip[7].max_us = 1 << 22;
    let failures = flatness_failures(&dip);
    assert!(
        failures.iter().any(|f| f.contains("writes fell")),
        "{failures:?}"
    );
    assert!(
        failures.iter().any(|f| f.contains("past the bound")),
        "{failures:?}"
    );
    // A much slower disk: fewer writes, each journal write longer, the journal as busy as
    // ever. The writes' floor fails; the engine's own pace is not blamed.
    let mut slow_disk = flat.clone();
    slow_disk[4].writes = 8_000;
    slow_disk[4].journal_write_mean_us = 400;
    let failures = flatness_failures(&slow_disk);
    assert!(
        failures.len() == 1 && failures[0].contains("writes fell"),
        "{failures:?}"
    );
    // The engine stalls 3 s of a window, and later spends ever longer between writes.
    let mut stall = flat.clone();
    stall[6].journal_busy_permille = 100;
    let failures = flatness_failures(&stall);
    assert!(
        failures.iter().any(|f| f.contains("journal was busy 100")),
        "{failures:?}"
    );
    // A journal idle most of the time is not the pace-setter: its share is not judged.
    let cpu_bound: Vec<Window> = stall
        .iter()
        .map(|w| Window {
            journal_busy_permille: w.journal_busy_permille / 10,
            ..*w
        })
        .collect();
    assert_eq!(flatness_failures(&cpu_bound), Vec::<String>::new());
    let slowing: Vec<Window> = (0..12)
        .map(|i| Window {
            journal_busy_permille: [500, 400, 120][i / 4],
            ..flat[i]
        })
        .collect();
    let failures = flatness_failures(&slowing);
    assert!(
        failures.iter().any(|f| f.contains("engine slowed down")),
        "{failures:?}"
    );
    assert!(flatness_failures(&flat[..4]).len() == 1);
}

/// Longest time the synced id stood still, outside the long reader: the clock restarts
/// when the synced id moves and when the long reader ends.
fn longest_sync_stall_ms(samples: &[Sample]) -> u64 {
    let mut since = samples.first().map_or(0, |s| s.t_ms);
    let mut last_synced = samples.first().map_or(0, |s| s.synced_txn_id);
    let mut was_pinned = false;
    let mut worst = 0;
    for s in samples {
        if s.synced_txn_id != last_synced || (was_pinned && !s.long_reader_open) {
            since = s.t_ms;
            last_synced = s.synced_txn_id;
        }
        was_pinned = s.long_reader_open;
        if !s.long_reader_open {
            worst = worst.max(s.t_ms - since);
        }
    }
    worst
}

#[test]
fn steady_state_under_default_options() {
    let run_for = Duration::from_secs(run_secs());
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path();
    let report = run_child(dir, run_for);
    if let Ok(out) = std::env::var(OUT_VAR) {
        write_outputs(Path::new(&out), &report.samples);
    }
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    let samples = &report.samples;
    let expected = run_for.as_millis() as u64 / SAMPLE_EVERY.as_millis() as u64;
    assert!(
        samples.len() as u64 >= expected * 3 / 4,
        "{} samples of {expected}",
        samples.len()
    );
    let last = *samples.last().expect("samples");
    let options = Options::default();

    // Syncs keep moving under load.
    let stall_ms = longest_sync_stall_ms(samples);
    assert!(
        stall_ms <= 2 * options.sync_interval_ms,
        "the synced id stood still for {stall_ms} ms outside the long reader"
    );
    assert!(last.syncs >= 3 && last.flushes >= 3, "{last:?}");

    // Journal files stay bounded. Once the long reader ends, the flusher has one pass to
    // catch up before the bound applies again.
    let mut pin_ended_ms = None;
    let mut was_pinned = false;
    let mut retiring_before = 0;
    for s in samples {
        if was_pinned && !s.long_reader_open {
            pin_ended_ms = Some(s.t_ms);
        }
        was_pinned = s.long_reader_open;
        let catching_up = pin_ended_ms.is_some_and(|at| s.t_ms < at + CATCH_UP_MS);
        // Plus the file just rotated into, and one spare the flusher may be zero-filling
        // while the sample is taken: it is on disk before it counts as ready, which shows
        // as fewer ready files than `journal_spare_files`.
        let spares = Options::default().journal_spare_files as u64;
        let making_spare = u64::from(s.journal_files_ready < spares);
        assert!(
            s.journal_files_on_disk
                <= s.journal_files_ready
                    + s.journal_files_waiting
                    + s.journal_files_retiring
                    + 1
                    + making_spare,
            "journal files on disk beyond the ready, waiting and retiring ones: {s:?}"
        );
        if !s.long_reader_open && !catching_up {
            assert!(
                s.journal_files_waiting <= WAITING_JOURNALS_BOUND,
                "journals waiting for a sync beyond the bound: {s:?}"
            );
            // A sync retires what waited, and the flusher removes 40 a second: the queue
            // stays small, or (after the long reader's sync) drains from one sample to
            // the next.
            assert!(
                s.journal_files_retiring <= WAITING_JOURNALS_BOUND
                    || s.journal_files_retiring < retiring_before,
                "retired journals left on disk beyond the bound, not draining: {s:?}"
            );
        }
        retiring_before = s.journal_files_retiring;
        assert!(s.rss_bytes <= RSS_BOUND_BYTES, "resident memory: {s:?}");
    }
    let pinned = samples.iter().filter(|s| s.long_reader_open).count();
    assert!(pinned >= 4, "the long reader was seen in {pinned} samples");

    // The data file stops growing: after the long reader, its size stays within a margin
    // of the largest it reached until then.
    let pin_end_ms = pin_ended_ms.expect("the long reader ended");
    let until_pin_end = samples
        .iter()
        .filter(|s| s.t_ms <= pin_end_ms)
        .map(|s| s.data_file_bytes)
        .max()
        .unwrap_or(0);
    let data_file_end = last.data_file_bytes;
    assert!(
        data_file_end as f64 <= until_pin_end as f64 * (1.0 + DATA_FILE_GROWTH_AFTER_PIN),
        "the data file kept growing: {until_pin_end} bytes until the long reader ended, \
         {data_file_end} at the end"
    );
    // Throughput and the merged writes' latency stay flat, and do not drift over the run.
    let windows = windows(samples);
    let failures = flatness_failures(&windows);
    assert!(failures.is_empty(), "{failures:#?}\nwindows: {windows:#?}");
    let writes_per_s = |w: &Window| w.writes as f64 * 1000.0 / WINDOW_MS as f64;
    let lowest = windows.iter().min_by_key(|w| w.writes).expect("windows");
    let peak = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
    let summary = format!(
        "endurance: {} s, {} commits ({:.0}/s), {} flushes, {} syncs, longest sync stall \
         outside the long reader {} ms, journal files on disk peak {} (waiting peak {}), \
         scratch peak {:.1} MiB, pinned peak {:.1} MiB, RSS peak {:.1} MiB, data file \
         {:.1} MiB until the long reader ended and {:.1} MiB at the end; merged writes \
         {:.0}/s in the lowest window of {} s (journal writes there {} µs on average, {} µs \
         in the median window), p99 at most {} µs and the slowest at most {} µs in any \
         window, the journal busy {}‰ to {}‰ of each window",
        run_for.as_secs(),
        last.commits,
        last.commits as f64 / (last.t_ms as f64 / 1000.0),
        last.flushes,
        last.syncs,
        stall_ms,
        peak(|s| s.journal_files_on_disk),
        peak(|s| s.journal_files_waiting),
        peak(|s| s.scratch_used_bytes) as f64 / (1 << 20) as f64,
        peak(|s| s.scratch_pinned_bytes) as f64 / (1 << 20) as f64,
        peak(|s| s.rss_bytes) as f64 / (1 << 20) as f64,
        until_pin_end as f64 / (1 << 20) as f64,
        data_file_end as f64 / (1 << 20) as f64,
        writes_per_s(lowest),
        WINDOW_MS / 1000,
        lowest.journal_write_mean_us,
        median(
            &windows
                .iter()
                .map(|w| w.journal_write_mean_us)
                .collect::<Vec<_>>()
        ),
        windows.iter().map(|w| w.p99_us).max().unwrap_or(0),
        windows.iter().map(|w| w.max_us).max().unwrap_or(0),
        windows
            .iter()
            .map(|w| w.journal_busy_permille)
            .min()
            .unwrap_or(0),
        windows
            .iter()
            .map(|w| w.journal_busy_permille)
            .max()
            .unwrap_or(0),
    );

    // Reopen after the kill replays only what came after the last reported sync.
    let opening = Instant::now();
    let env = Environment::open(dir, Options::default()).expect("reopen after kill -9");
    let reopen = opening.elapsed();
    let stats = env.stats();
    let replay_from = stats.txn_id - stats.recovered_records;
    assert!(
        replay_from >= last.synced_txn_id,
        "replay started at {replay_from}, before the last reported sync {}",
        last.synced_txn_id
    );
    assert!(
        stats.txn_id >= last.txn_id,
        "acknowledged commits lost: {} < {}",
        stats.txn_id,
        last.txn_id
    );
    assert!(reopen <= REOPEN_BOUND, "reopen took {reopen:?}");
    env.check().expect("integrity after kill -9");
    // Straight to standard error, which the test harness does not capture: CI shows it.
    let _ = writeln!(
        std::io::stderr().lock(),
        "{summary}; reopen after kill -9 {} ms replaying {} records",
        reopen.as_millis(),
        stats.recovered_records
    );
}

// ---------------------------------------------------------------------------------------
// Soak output: CSV and an SVG with one panel per series.

fn write_outputs(dir: &Path, samples: &[Sample]) {
    std::fs::create_dir_all(dir).expect("output directory");
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for s in samples {
        csv.push_str(&s.to_csv());
        csv.push('\n');
    }
    std::fs::write(dir.join("samples.csv"), csv).expect("writing samples.csv");
    std::fs::write(dir.join("samples.svg"), svg(samples)).expect("writing samples.svg");
}

fn svg(samples: &[Sample]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut throughput = Vec::new();
    let mut journal_write = Vec::new();
    for w in samples.windows(2) {
        let dt = (w[1].t_ms - w[0].t_ms).max(1) as f64 / 1000.0;
        throughput.push((w[1].t_ms, (w[1].commits - w[0].commits) as f64 / dt));
        let writes = (w[1].journal_writes - w[0].journal_writes).max(1);
        journal_write.push((
            w[1].t_ms,
            (w[1].journal_write_us - w[0].journal_write_us) as f64 / writes as f64,
        ));
    }
    let series: [(&str, Vec<(u64, f64)>); 6] = [
        ("commits/s", throughput),
        ("journal write µs (mean)", journal_write),
        (
            "journal files on disk",
            samples
                .iter()
                .map(|s| (s.t_ms, s.journal_files_on_disk as f64))
                .collect(),
        ),
        (
            "scratch MiB",
            samples
                .iter()
                .map(|s| (s.t_ms, mib(s.scratch_used_bytes)))
                .collect(),
        ),
        (
            "RSS MiB",
            samples.iter().map(|s| (s.t_ms, mib(s.rss_bytes))).collect(),
        ),
        (
            "data file MiB",
            samples
                .iter()
                .map(|s| (s.t_ms, mib(s.data_file_bytes)))
                .collect(),
        ),
    ];
    let (width, panel, margin) = (900.0, 160.0, 40.0);
    let t_max = samples.last().map_or(1, |s| s.t_ms.max(1)) as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n",
        series.len() as f64 * (panel + margin) + margin
    );
    for (i, (name, points)) in series.iter().enumerate() {
        let top = margin + i as f64 * (panel + margin);
        let y_max = points.iter().map(|p| p.1).fold(1e-9, f64::max);
        let coords: Vec<String> = points
            .iter()
            .map(|&(t, v)| {
                format!(
                    "{:.1},{:.1}",
                    60.0 + t as f64 / t_max * (width - 80.0),
                    top + panel - v / y_max * panel
                )
            })
            .collect();
        out.push_str(&format!(
            "<text x=\"60\" y=\"{:.0}\">{name} (max {y_max:.1}; x: 0 to {:.0} s)</text>\n\
             <rect x=\"60\" y=\"{top:.0}\" width=\"{:.0}\" height=\"{panel:.0}\" fill=\"none\" \
             stroke=\"#ccc\"/>\n<polyline fill=\"none\" stroke=\"#d95f02\" points=\"{}\"/>\n",
            top - 6.0,
            t_max / 1000.0,
            width - 80.0,
            coords.join(" ")
        ));
    }
    out.push_str("</svg>\n");
    out
}
