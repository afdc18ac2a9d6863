//! The workloads, each written once against [`Engine`], and the table of rows they produce.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

use crate::engines::{self, Engine, Reader, Writer};
use crate::journal;
use crate::result::BenchResult;
use crate::sys;

/// Which raw-disk figure bounds a durable row (see [`Spec::limit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// Every commit needs at least one synced write: ceiling = synced 4 KiB writes/s ×
    /// operations per commit (from the row's `commits`).
    PerCommit,
    /// One large commit: reported next to the synced 16 KiB append bandwidth.
    Bandwidth,
    /// Many threads each waiting for their own commit: reported next to the same closed
    /// loop run with no engine (`journal_raw_group_4k`).
    Group,
}

/// One row of the output: a workload run against each engine (or the disk alone).
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    /// The name `--workloads` also accepts for a set of rows (e.g. `read_parallel`).
    pub group: &'static str,
    pub what: &'static str,
    /// True for the journal_raw rows, which run once against the disk, not per engine.
    pub raw_disk: bool,
    /// Durable rows name the disk limit they are reported next to.
    pub limit: Option<Limit>,
    /// Runs per engine, taken in turns across the engines; the median is reported. For a
    /// short row whose figure moves with the disk's moment-to-moment speed.
    pub rounds: u32,
}

const fn row(name: &'static str, group: &'static str, what: &'static str) -> Spec {
    Spec {
        name,
        group,
        what,
        raw_disk: false,
        limit: None,
        rounds: 1,
    }
}

const fn rounds(mut s: Spec, rounds: u32) -> Spec {
    s.rounds = rounds;
    s
}

const fn durable(mut s: Spec, limit: Limit) -> Spec {
    s.limit = Some(limit);
    s
}

const fn disk(mut s: Spec) -> Spec {
    s.raw_disk = true;
    s
}

/// All rows, in output order.
pub const SPECS: &[Spec] = &[
    durable(
        row(
            "fill_seq",
            "fill_seq",
            "1M sequential entries in one durable transaction",
        ),
        Limit::Bandwidth,
    ),
    row(
        "read_seq",
        "read_seq",
        "reopen, point-read every key in order in one read txn",
    ),
    row(
        "read_parallel_t1",
        "read_parallel",
        "1 thread, own read txn, shuffled distinct keys",
    ),
    row(
        "read_parallel_t2",
        "read_parallel",
        "2 threads, own read txns, shuffled distinct keys",
    ),
    row(
        "read_parallel_t4",
        "read_parallel",
        "4 threads, own read txns, shuffled distinct keys",
    ),
    durable(
        row(
            "fill_rnd_tx_durable",
            "fill_rnd_tx",
            "10k durable txns x 100 random 16-byte keys",
        ),
        Limit::PerCommit,
    ),
    row(
        "fill_rnd_tx_nosync",
        "fill_rnd_tx",
        "10k non-durable txns x 100 random 16-byte keys",
    ),
    durable(
        row(
            "bulk_seq_small",
            "bulk_seq_small",
            "20M 8-byte BE keys/8-byte values, 10k txns",
        ),
        Limit::PerCommit,
    ),
    durable(
        row(
            "commit_latency",
            "commit_latency",
            "10k single-key durable commits, one thread",
        ),
        Limit::PerCommit,
    ),
    rounds(
        durable(
            row(
                "concurrent_writers",
                "concurrent_writers",
                "16 threads x 1k single-key commits",
            ),
            Limit::Group,
        ),
        3,
    ),
    row(
        "range_scan_full",
        "range_scan",
        "one full scan of 1M entries",
    ),
    row(
        "range_scan_rnd100",
        "range_scan",
        "10k scans of 100 keys from random starts",
    ),
    row(
        "u64_insert_fixed",
        "u64",
        "1M random u64 keys -> 16-byte values, 100 txns; hrafn: fixed-size tree",
    ),
    row(
        "u64_insert_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    ),
    row(
        "u64_get_fixed",
        "u64",
        "reopen, point-read every key in random order; hrafn: fixed-size tree",
    ),
    row(
        "u64_get_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    ),
    row(
        "u64_scan_fixed",
        "u64",
        "reopen, one full scan in key order; hrafn: fixed-size tree",
    ),
    row(
        "u64_scan_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    ),
    row(
        "u64_append_fixed",
        "u64",
        "1M increasing u64 keys -> 16-byte values, 100 txns (time series); hrafn: fixed-size tree",
    ),
    row(
        "u64_append_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    ),
    row(
        "table_insert",
        "table",
        "1M records (16-byte name, u64, 100 bytes), 2 indexes, 100 txns; peers: record + 2 index tables by hand",
    ),
    row(
        "table_get_by_id",
        "table",
        "reopen, read every record by id in random order; peers: get from the record table",
    ),
    disk(row(
        "journal_raw_direct_4k",
        "journal_raw",
        "4 KiB writes, O_DIRECT|O_DSYNC",
    )),
    disk(row(
        "journal_raw_direct_16k",
        "journal_raw",
        "16 KiB writes, O_DIRECT|O_DSYNC",
    )),
    disk(row(
        "journal_raw_fdatasync_4k",
        "journal_raw",
        "4 KiB buffered write + fdatasync",
    )),
    disk(row(
        "journal_raw_fdatasync_16k",
        "journal_raw",
        "16 KiB buffered write + fdatasync",
    )),
    disk(row(
        "journal_raw_group_4k",
        "journal_raw",
        "concurrent_writers' loop, no engine: one 4 KiB O_DIRECT|O_DSYNC write per group",
    )),
];

pub const KEY_LEN: usize = 16;
pub const VALUE_LEN: usize = 100;
const RND_TX_KEYS: usize = 100;
/// Engine name used for the journal_raw rows.
pub const DISK: &str = "disk";

pub fn spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

/// Expands `--workloads` names (rows or groups) into rows, in output order.
pub fn select(names: &[String]) -> Result<Vec<&'static Spec>> {
    for n in names {
        if !SPECS.iter().any(|s| s.name == n || s.group == n) {
            let groups: Vec<&str> = SPECS.iter().map(|s| s.group).collect();
            bail!("unknown workload {n}; known: {}", dedup(groups).join(", "));
        }
    }
    Ok(SPECS
        .iter()
        .filter(|s| names.iter().any(|n| s.name == n || s.group == n))
        .collect())
}

fn dedup(mut v: Vec<&'static str>) -> Vec<&'static str> {
    let mut seen = Vec::new();
    v.retain(|x| {
        let new = !seen.contains(x);
        seen.push(*x);
        new
    });
    v
}

/// The group names, in output order (what `--workloads` lists by default).
pub fn groups() -> Vec<&'static str> {
    dedup(SPECS.iter().map(|s| s.group).collect())
}

/// The counts a run uses, from the full figures times `--scale`.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub scale: f64,
    pub bulk_100m: bool,
}

impl Config {
    /// `full` scaled, at least 1.
    pub fn n(&self, full: u64) -> u64 {
        ((full as f64 * self.scale).round() as u64).max(1)
    }

    pub fn entries(&self) -> u64 {
        self.n(1_000_000)
    }

    fn bulk_entries(&self) -> u64 {
        self.n(if self.bulk_100m {
            100_000_000
        } else {
            20_000_000
        })
    }
}

/// 16-digit zero-padded decimal key for entry `i`.
pub fn decimal_key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [b'0'; KEY_LEN];
    let mut v = i;
    for slot in k.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    k
}

/// Random bytes that 100-byte values are cut from, so making a value costs no RNG time.
pub struct Values {
    pool: Vec<u8>,
}

impl Values {
    pub fn new(seed: u64) -> Self {
        let mut pool = vec![0u8; (1 << 20) + VALUE_LEN];
        StdRng::seed_from_u64(seed).fill_bytes(&mut pool);
        Values { pool }
    }

    pub fn get(&self, i: u64) -> &[u8] {
        let span = (self.pool.len() - VALUE_LEN) as u64;
        let off = (i.wrapping_mul(7_919) % span) as usize;
        &self.pool[off..off + VALUE_LEN]
    }
}

/// Runs row `spec` against `engine_name` in a fresh directory under `dir`.
pub fn run(spec: &Spec, engine_name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let db_dir = dir.join("db");
    let mut result = match spec.name {
        "fill_seq" => fill_seq(spec, engine_name, cfg, &db_dir)?,
        "read_seq" => read_seq(spec, engine_name, cfg, &db_dir)?,
        "read_parallel_t1" => read_parallel(spec, engine_name, cfg, &db_dir, 1)?,
        "read_parallel_t2" => read_parallel(spec, engine_name, cfg, &db_dir, 2)?,
        "read_parallel_t4" => read_parallel(spec, engine_name, cfg, &db_dir, 4)?,
        "fill_rnd_tx_durable" => fill_rnd_tx(spec, engine_name, cfg, &db_dir, true)?,
        "fill_rnd_tx_nosync" => fill_rnd_tx(spec, engine_name, cfg, &db_dir, false)?,
        "bulk_seq_small" => bulk_seq_small(spec, engine_name, cfg, &db_dir)?,
        "commit_latency" => commit_latency(spec, engine_name, cfg, &db_dir)?,
        "concurrent_writers" => concurrent_writers(spec, engine_name, cfg, &db_dir)?,
        "range_scan_full" => range_scan_full(spec, engine_name, cfg, &db_dir)?,
        "range_scan_rnd100" => range_scan_rnd100(spec, engine_name, cfg, &db_dir)?,
        "u64_insert_fixed" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Insert, true)?,
        "u64_insert_btree" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Insert, false)?,
        "u64_get_fixed" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Get, true)?,
        "u64_get_btree" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Get, false)?,
        "u64_append_fixed" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Append, true)?,
        "u64_scan_fixed" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Scan, true)?,
        "u64_scan_btree" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Scan, false)?,
        "u64_append_btree" => u64_rows(spec, engine_name, cfg, &db_dir, U64::Append, false)?,
        "table_insert" => table_rows(spec, engine_name, cfg, &db_dir, false)?,
        "table_get_by_id" => table_rows(spec, engine_name, cfg, &db_dir, true)?,
        "journal_raw_direct_4k" => journal::run(spec.name, cfg, dir, 4096, true)?,
        "journal_raw_direct_16k" => journal::run(spec.name, cfg, dir, 16384, true)?,
        "journal_raw_fdatasync_4k" => journal::run(spec.name, cfg, dir, 4096, false)?,
        "journal_raw_fdatasync_16k" => journal::run(spec.name, cfg, dir, 16384, false)?,
        "journal_raw_group_4k" => journal::group(spec.name, cfg, dir, WRITER_THREADS)?,
        other => bail!("no runner for workload {other}"),
    };
    if !spec.raw_disk {
        result.disk_bytes = Some(sys::dir_bytes(&db_dir)?);
    }
    Ok(result)
}

/// Writes entries `0..n` (decimal keys, 100-byte values) in one transaction.
fn fill(engine: &dyn Engine, n: u64, values: &Values) -> Result<()> {
    engine.write(&mut |w| {
        for i in 0..n {
            w.put(&decimal_key(i), values.get(i))?;
        }
        Ok(())
    })
}

/// Opens durable, fills `n` entries, closes and reopens: the state the read rows start from.
fn filled(name: &str, dir: &Path, n: u64, values: &Values) -> Result<Box<dyn Engine>> {
    {
        let engine = engines::open(name, dir, true)?;
        fill(engine.as_ref(), n, values)?;
    }
    engines::open(name, dir, true)
}

fn fill_seq(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let n = cfg.entries();
    let values = Values::new(1);
    let engine = engines::open(name, dir, true)?;
    let start = Instant::now();
    fill(engine.as_ref(), n, &values)?;
    let elapsed = start.elapsed();
    drop(engine);
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, n, "entries", elapsed);
    r.commits = Some(1);
    Ok(r)
}

fn read_seq(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let n = cfg.entries();
    let values = Values::new(2);
    let engine = filled(name, dir, n, &values)?;
    let start = Instant::now();
    engine.read(&mut |r| {
        for i in 0..n {
            check_len(r.get(&decimal_key(i))?, i)?;
        }
        Ok(())
    })?;
    let elapsed = start.elapsed();
    Ok(BenchResult::measured(
        spec.name, name, cfg.scale, n, "reads", elapsed,
    ))
}

fn check_len(found: Option<usize>, i: u64) -> Result<()> {
    match found {
        Some(VALUE_LEN) => Ok(()),
        Some(len) => bail!("entry {i}: value of {len} bytes, expected {VALUE_LEN}"),
        None => bail!("entry {i}: key not found"),
    }
}

fn read_parallel(
    spec: &Spec,
    name: &str,
    cfg: &Config,
    dir: &Path,
    threads: u64,
) -> Result<BenchResult> {
    let n = cfg.entries();
    let values = Values::new(3);
    let engine = filled(name, dir, n, &values)?;
    // Thread t reads the keys i with i % threads == t, in a shuffled order made beforehand.
    let mut rng = StdRng::seed_from_u64(30);
    let parts: Vec<Vec<u64>> = (0..threads)
        .map(|t| {
            let mut ids: Vec<u64> = (t..n).step_by(threads as usize).collect();
            ids.shuffle(&mut rng);
            ids
        })
        .collect();
    let barrier = Barrier::new(threads as usize + 1);
    let engine = engine.as_ref();
    let elapsed = std::thread::scope(|s| -> Result<Duration> {
        let handles: Vec<_> = parts
            .iter()
            .map(|ids| {
                let barrier = &barrier;
                s.spawn(move || -> Result<Instant> {
                    barrier.wait();
                    engine.read(&mut |r| {
                        for &i in ids {
                            check_len(r.get(&decimal_key(i))?, i)?;
                        }
                        Ok(())
                    })?;
                    Ok(Instant::now())
                })
            })
            .collect();
        // The clock starts before this thread reaches the barrier, so before any reader can
        // pass it, and stops when the last reader ends.
        let start = Instant::now();
        barrier.wait();
        let mut end = start;
        for h in handles {
            let done = h
                .join()
                .map_err(|_| anyhow::anyhow!("reader thread panicked"))??;
            end = end.max(done);
        }
        Ok(end - start)
    })?;
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, n, "reads", elapsed);
    r.note = Some(format!(
        "{threads} thread(s), each with its own read transaction"
    ));
    Ok(r)
}

fn fill_rnd_tx(
    spec: &Spec,
    name: &str,
    cfg: &Config,
    dir: &Path,
    durable: bool,
) -> Result<BenchResult> {
    let txns = cfg.n(10_000);
    let values = Values::new(4);
    let mut rng = StdRng::seed_from_u64(40);
    let mut keys = vec![0u8; txns as usize * RND_TX_KEYS * KEY_LEN];
    rng.fill_bytes(&mut keys);
    let engine = engines::open(name, dir, durable)?;
    let mut lat = Vec::with_capacity(txns as usize);
    let start = Instant::now();
    for (t, chunk) in keys.chunks_exact(RND_TX_KEYS * KEY_LEN).enumerate() {
        let t0 = Instant::now();
        engine.write(&mut |w| {
            for (j, key) in chunk.chunks_exact(KEY_LEN).enumerate() {
                w.put(key, values.get((t * RND_TX_KEYS + j) as u64))?;
            }
            Ok(())
        })?;
        lat.push(t0.elapsed());
    }
    let elapsed = start.elapsed();
    drop(engine);
    let ops = txns * RND_TX_KEYS as u64;
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, ops, "entries", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(txns);
    r.note = Some(format!("{txns} txns; p50/p99 are per commit"));
    Ok(r)
}

fn bulk_seq_small(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let total = cfg.bulk_entries();
    let txns = cfg.n(10_000).min(total);
    let per_txn = total.div_ceil(txns);
    let engine = engines::open(name, dir, true)?;
    let mut lat = Vec::with_capacity(txns as usize);
    let start = Instant::now();
    let mut next = 0u64;
    while next < total {
        let end = (next + per_txn).min(total);
        let t0 = Instant::now();
        engine.write(&mut |w| {
            for i in next..end {
                let v = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                w.put(&i.to_be_bytes(), &v.to_le_bytes())?;
            }
            Ok(())
        })?;
        lat.push(t0.elapsed());
        next = end;
    }
    let elapsed = start.elapsed();
    drop(engine);
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, total, "entries", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(lat.len() as u64);
    r.note = Some(format!(
        "{} txns of {per_txn} entries; p50/p99 are per commit",
        lat.len()
    ));
    Ok(r)
}

fn commit_latency(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let commits = cfg.n(10_000);
    let values = Values::new(5);
    let engine = engines::open(name, dir, true)?;
    let mut lat = Vec::with_capacity(commits as usize);
    let start = Instant::now();
    for i in 0..commits {
        let t0 = Instant::now();
        engine.write(&mut |w| w.put(&decimal_key(i), values.get(i)))?;
        lat.push(t0.elapsed());
    }
    let elapsed = start.elapsed();
    drop(engine);
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, commits, "commits", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(commits);
    Ok(r)
}

/// Threads of `concurrent_writers` (and of its no-engine reference, `journal_raw_group_4k`).
const WRITER_THREADS: u64 = 16;

fn concurrent_writers(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let per_thread = cfg.n(1_000);
    let values = Values::new(6);
    let engine = engines::open(name, dir, true)?;
    let path = engine.concurrent_write_path();
    let barrier = Barrier::new(WRITER_THREADS as usize + 1);
    let (engine_ref, values) = (engine.as_ref(), &values);
    let (elapsed, mut lat) = std::thread::scope(|s| -> Result<(Duration, Vec<Duration>)> {
        let handles: Vec<_> = (0..WRITER_THREADS)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(Vec<Duration>, Instant)> {
                    let mut lat = Vec::with_capacity(per_thread as usize);
                    barrier.wait();
                    for j in 0..per_thread {
                        let i = t * per_thread + j;
                        let kv = vec![(decimal_key(i).to_vec(), values.get(i).to_vec())];
                        let t0 = Instant::now();
                        engine_ref.write_concurrent(kv)?;
                        lat.push(t0.elapsed());
                    }
                    Ok((lat, Instant::now()))
                })
            })
            .collect();
        // As in read_parallel: the clock starts before any writer can pass the barrier and
        // stops when the last writer ends.
        let start = Instant::now();
        barrier.wait();
        let mut end = start;
        let mut all = Vec::new();
        for h in handles {
            let (lat, done) = h
                .join()
                .map_err(|_| anyhow::anyhow!("writer thread panicked"))??;
            all.extend(lat);
            end = end.max(done);
        }
        Ok((end - start, all))
    })?;
    let stats = engine.commit_stats();
    drop(engine);
    let commits = WRITER_THREADS * per_thread;
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, commits, "commits", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(commits);
    r.note = Some(match stats {
        Some(stats) => format!("{WRITER_THREADS} threads x {per_thread} commits; {path}; {stats}"),
        None => format!("{WRITER_THREADS} threads x {per_thread} commits; {path}"),
    });
    Ok(r)
}

fn range_scan_full(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let n = cfg.entries();
    let values = Values::new(7);
    let engine = filled(name, dir, n, &values)?;
    let mut bytes = 0usize;
    let start = Instant::now();
    let mut seen = 0;
    engine.read(&mut |r| {
        seen = r.scan(b"", None, &mut |k, v| bytes += k.len() + v.len())?;
        Ok(())
    })?;
    let elapsed = start.elapsed();
    ensure!(
        seen as u64 == n,
        "full scan saw {seen} entries, expected {n}"
    );
    ensure!(
        bytes == n as usize * (KEY_LEN + VALUE_LEN),
        "full scan saw {bytes} bytes"
    );
    Ok(BenchResult::measured(
        spec.name, name, cfg.scale, n, "entries", elapsed,
    ))
}

const SCAN_LEN: usize = 100;

fn range_scan_rnd100(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let n = cfg.entries();
    let scans = cfg.n(10_000);
    let values = Values::new(8);
    let engine = filled(name, dir, n, &values)?;
    let mut rng = StdRng::seed_from_u64(80);
    let last_start = n.saturating_sub(SCAN_LEN as u64);
    let starts: Vec<[u8; KEY_LEN]> = (0..scans)
        .map(|_| decimal_key(rng.gen_range(0..=last_start)))
        .collect();
    let mut lat = Vec::with_capacity(scans as usize);
    let want = SCAN_LEN.min(n as usize);
    let start = Instant::now();
    engine.read(&mut |r| {
        for key in &starts {
            let t0 = Instant::now();
            let got = r.scan(key, Some(SCAN_LEN), &mut |_, _| {})?;
            lat.push(t0.elapsed());
            ensure!(got == want, "scan returned {got} entries, expected {want}");
        }
        Ok(())
    })?;
    let elapsed = start.elapsed();
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, scans, "scans", elapsed)
        .with_latencies(&mut lat);
    r.note = Some(format!(
        "{scans} scans of {SCAN_LEN} entries in one read txn"
    ));
    Ok(r)
}

/// Value size of the u64 rows.
const U64_VALUE_LEN: usize = 16;
const U64_TXNS: u64 = 100;

/// What a u64 row measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum U64 {
    /// Random keys inserted.
    Insert,
    /// Random keys inserted, then read back after a reopen (the reads are timed).
    Get,
    /// Increasing keys inserted.
    Append,
    /// Random keys inserted, then one full scan after a reopen (timed).
    Scan,
}

/// The u64 rows: random (or, to append, increasing) `u64` keys with 16-byte values
/// inserted in [`U64_TXNS`] non-durable transactions (timed for the insert rows), then, for
/// the get rows, reopened and every key read in another random order. `fixed` picks Hrafn's fixed-size tree
/// ([`Engine::write_u64`]) over its B+tree; the other engines run the same either way.
fn u64_rows(
    spec: &Spec,
    name: &str,
    cfg: &Config,
    dir: &Path,
    what: U64,
    fixed: bool,
) -> Result<BenchResult> {
    let n = cfg.entries();
    let mut rng = StdRng::seed_from_u64(64);
    let keys: Vec<u64> = if what == U64::Append {
        (0..n).map(|i| 1_700_000_000_000 + i * 15_000).collect()
    } else {
        (0..n).map(|_| rng.next_u64()).collect()
    };
    let values = Values::new(64);
    let write = |engine: &dyn Engine, f: &mut dyn FnMut(&mut dyn Writer) -> Result<()>| {
        if fixed {
            engine.write_u64(f)
        } else {
            engine.write(f)
        }
    };
    let elapsed = {
        let engine = engines::open(name, dir, false)?;
        let start = Instant::now();
        for chunk in keys.chunks((n / U64_TXNS).max(1) as usize) {
            write(engine.as_ref(), &mut |w| {
                for &k in chunk {
                    w.put(&k.to_be_bytes(), &values.get(k)[..U64_VALUE_LEN])?;
                }
                Ok(())
            })?;
        }
        start.elapsed()
    };
    if matches!(what, U64::Insert | U64::Append) {
        return Ok(BenchResult::measured(
            spec.name, name, cfg.scale, n, "entries", elapsed,
        ));
    }
    let engine = engines::open(name, dir, false)?;
    if what == U64::Scan {
        let start = Instant::now();
        let mut scan = |r: &dyn Reader| -> Result<()> {
            let seen = r.scan(&[], None, &mut |_, _| {})?;
            ensure!(seen as u64 == n, "scanned {seen} of {n} entries");
            Ok(())
        };
        if fixed {
            engine.read_u64(&mut scan)?;
        } else {
            engine.read(&mut scan)?;
        }
        return Ok(BenchResult::measured(
            spec.name,
            name,
            cfg.scale,
            n,
            "entries",
            start.elapsed(),
        ));
    }
    let mut order = keys;
    order.shuffle(&mut rng);
    let start = Instant::now();
    let mut read = |r: &dyn Reader| -> Result<()> {
        for &k in &order {
            match r.get(&k.to_be_bytes())? {
                Some(U64_VALUE_LEN) => {}
                other => bail!("key {k}: {other:?}"),
            }
        }
        Ok(())
    };
    if fixed {
        engine.read_u64(&mut read)?;
    } else {
        engine.read(&mut read)?;
    }
    let elapsed = start.elapsed();
    Ok(BenchResult::measured(
        spec.name, name, cfg.scale, n, "reads", elapsed,
    ))
}

/// The table rows: records of a 16-byte name (a thousand records share each), a unique
/// sequence number and a 100-byte payload, in random sequence order, in [`U64_TXNS`]
/// transactions; then (`get`) every record read by its id in random order after a reopen.
fn table_rows(spec: &Spec, name: &str, cfg: &Config, dir: &Path, get: bool) -> Result<BenchResult> {
    let n = cfg.entries();
    let mut rng = StdRng::seed_from_u64(77);
    let values = Values::new(77);
    let mut seqs: Vec<u64> = (0..n).collect();
    seqs.shuffle(&mut rng);
    let records: Vec<engines::TableRecord> = seqs
        .iter()
        .map(|&seq| engines::TableRecord {
            name: format!("name{:012}", seq % (n / 1000).max(1)).into_bytes(),
            seq,
            payload: values.get(seq).to_vec(),
        })
        .collect();
    let mut ids = Vec::with_capacity(records.len());
    let elapsed = {
        let engine = engines::open(name, dir, false)?;
        let start = Instant::now();
        for chunk in records.chunks((n / U64_TXNS).max(1) as usize) {
            ids.extend(engine.table_insert(chunk)?);
        }
        start.elapsed()
    };
    if !get {
        return Ok(BenchResult::measured(
            spec.name, name, cfg.scale, n, "records", elapsed,
        ));
    }
    let engine = engines::open(name, dir, false)?;
    ids.shuffle(&mut rng);
    let start = Instant::now();
    let bytes = engine.table_get(&ids)?;
    let elapsed = start.elapsed();
    if bytes < n * VALUE_LEN as u64 {
        bail!("read {bytes} bytes of {n} records");
    }
    Ok(BenchResult::measured(
        spec.name, name, cfg.scale, n, "reads", elapsed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_zero_padded_decimal() {
        assert_eq!(&decimal_key(0), b"0000000000000000");
        assert_eq!(&decimal_key(1_234_567), b"0000000001234567");
        assert!(
            decimal_key(9) < decimal_key(10),
            "decimal keys sort numerically"
        );
    }

    #[test]
    fn groups_expand_to_rows() {
        let rows = select(&["read_parallel".into(), "fill_seq".into()]).expect("select");
        let names: Vec<&str> = rows.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "fill_seq",
                "read_parallel_t1",
                "read_parallel_t2",
                "read_parallel_t4"
            ]
        );
        assert!(select(&["nope".into()]).is_err());
        assert_eq!(
            Config {
                scale: 0.2,
                bulk_100m: false
            }
            .entries(),
            200_000
        );
    }

    /// Every row runs end to end at a tiny scale against every compiled-in engine.
    #[test]
    fn all_rows_run_tiny() {
        let cfg = Config {
            scale: 0.0005,
            bulk_100m: false,
        };
        for spec in SPECS {
            let engines: Vec<&str> = if spec.raw_disk {
                vec![DISK]
            } else {
                engines::ALL_ENGINES
                    .iter()
                    .copied()
                    .filter(|e| engines::compiled_in(e))
                    .collect()
            };
            for engine in engines {
                let dir = tempfile::tempdir().expect("tempdir");
                let r = run(spec, engine, &cfg, dir.path())
                    .unwrap_or_else(|e| panic!("{} on {engine}: {e:#}", spec.name));
                assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{}: {r:?}", spec.name);
                assert_eq!(r.disk_bytes.is_some(), !spec.raw_disk, "{}", spec.name);
            }
        }
    }
}
