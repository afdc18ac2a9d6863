//! The workloads, each written once against [`Engine`], and the table of rows they produce.

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

use crate::engines::{self, Engine, Reader, Writer};
use crate::journal;
use crate::result::{self, BenchResult, JournalBytes, Window};
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
    /// True for rows that read counters only Hrafn has; the peers' cells show `-`.
    pub hrafn_only: bool,
    /// True for rows not written for RocksDB (the table rows); its cells show `-`.
    pub rocksdb_skipped: bool,
    /// Durable rows name the disk limit they are reported next to.
    pub limit: Option<Limit>,
    /// Runs per engine, taken in turns across the engines; the median is reported. For a
    /// short row whose figure moves with the disk's moment-to-moment speed, and for the
    /// CPU-bound rows, whose figure moves with what else the machine's cores are doing.
    pub rounds: u32,
    /// The row a verdict compares this one with (`u64_insert_fixed` against
    /// `u64_insert_btree`): when both run, their rounds take turns, so a change in the
    /// machine's speed during the run does not fall on one side of the ratio.
    pub paired_with: Option<&'static str>,
}

const fn row(name: &'static str, group: &'static str, what: &'static str) -> Spec {
    Spec {
        name,
        group,
        what,
        raw_disk: false,
        hrafn_only: false,
        rocksdb_skipped: false,
        limit: None,
        rounds: 1,
        paired_with: None,
    }
}

const fn rounds(mut s: Spec, rounds: u32) -> Spec {
    s.rounds = rounds;
    s
}

/// Runs of a CPU-bound row (no synced I/O in the measured part): the median is reported.
const CPU_ROUNDS: u32 = 3;

const fn cpu(s: Spec) -> Spec {
    rounds(s, CPU_ROUNDS)
}

const fn paired(mut s: Spec, with: &'static str) -> Spec {
    s.paired_with = Some(with);
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

const fn hrafn_only(mut s: Spec) -> Spec {
    s.hrafn_only = true;
    s
}

const fn without_rocksdb(mut s: Spec) -> Spec {
    s.rocksdb_skipped = true;
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
    cpu(row(
        "read_seq",
        "read_seq",
        "reopen, point-read every key in order in one read txn",
    )),
    cpu(row(
        "read_parallel_t1",
        "read_parallel",
        "1 thread, own read txn, shuffled distinct keys",
    )),
    cpu(row(
        "read_parallel_t2",
        "read_parallel",
        "2 threads, own read txns, shuffled distinct keys",
    )),
    cpu(row(
        "read_parallel_t4",
        "read_parallel",
        "4 threads, own read txns, shuffled distinct keys",
    )),
    durable(
        row(
            "fill_rnd_tx_durable",
            "fill_rnd_tx",
            "10k durable txns x 100 random 16-byte keys",
        ),
        Limit::PerCommit,
    ),
    cpu(row(
        "fill_rnd_tx_nosync",
        "fill_rnd_tx",
        "10k non-durable txns x 100 random 16-byte keys",
    )),
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
    durable(
        row(
            "sustained_rnd_durable",
            "sustained",
            "durable txns x 100 random 16-byte keys for 60 s, default options; per-window figures",
        ),
        Limit::PerCommit,
    ),
    hrafn_only(row(
        "journal_bytes_insert",
        "journal_bytes",
        "txns of 100 new random keys into a tree of 1M; journal bytes vs whole pages",
    )),
    hrafn_only(row(
        "journal_bytes_update",
        "journal_bytes",
        "txns overwriting 100 random existing keys of 1M; journal bytes vs whole pages",
    )),
    cpu(row(
        "range_scan_full",
        "range_scan",
        "one full scan of 1M entries",
    )),
    cpu(row(
        "range_scan_rnd100",
        "range_scan",
        "10k scans of 100 keys from random starts",
    )),
    paired(
        cpu(row(
            "u64_insert_fixed",
            "u64",
            "1M random u64 keys -> 16-byte values, 100 txns; hrafn: fixed-size tree",
        )),
        "u64_insert_btree",
    ),
    cpu(row(
        "u64_insert_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    )),
    paired(
        cpu(row(
            "u64_get_fixed",
            "u64",
            "reopen, point-read every key in random order; hrafn: fixed-size tree",
        )),
        "u64_get_btree",
    ),
    cpu(row(
        "u64_get_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    )),
    cpu(row(
        "u64_scan_fixed",
        "u64",
        "reopen, one full scan in key order; hrafn: fixed-size tree",
    )),
    cpu(row(
        "u64_scan_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    )),
    cpu(row(
        "u64_append_fixed",
        "u64",
        "1M increasing u64 keys -> 16-byte values, 100 txns (time series); hrafn: fixed-size tree",
    )),
    cpu(row(
        "u64_append_btree",
        "u64",
        "the same; hrafn: B+tree with 8-byte big-endian keys",
    )),
    without_rocksdb(cpu(row(
        "table_insert",
        "table",
        "1M records (16-byte name, u64, 100 bytes), 2 indexes, 100 txns; peers: record + 2 index tables by hand",
    ))),
    without_rocksdb(cpu(row(
        "table_get_by_id",
        "table",
        "reopen, read every record by id in random order; peers: get from the record table",
    ))),
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
        "sustained_rnd_durable" => sustained(spec, engine_name, cfg, &db_dir)?,
        "journal_bytes_insert" => journal_bytes(spec, engine_name, cfg, &db_dir, false)?,
        "journal_bytes_update" => journal_bytes(spec, engine_name, cfg, &db_dir, true)?,
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
    result.mark_short();
    Ok(result)
}

/// The shortest measured part a row should have (see [`BenchResult::mark_short`]).
const MIN_MEASURED: Duration = Duration::from_millis(result::MIN_MEASURED_MS as u64);

/// How a row that is cheap to repeat was sized (see [`sized`]).
struct Sized {
    passes: u64,
    elapsed: Duration,
    /// The single pass that was too short, when the row was sized up.
    first: Option<Duration>,
}

impl Sized {
    /// The row's result: `ops_per_pass` operations in each pass, counted over every pass;
    /// its note is `note` (if not empty), then what [`Sized::note`] adds.
    fn result(
        &self,
        spec: &Spec,
        engine: &str,
        cfg: &Config,
        (ops_per_pass, unit): (u64, &str),
        note: &str,
    ) -> BenchResult {
        let mut r = BenchResult::measured(
            spec.name,
            engine,
            cfg.scale,
            ops_per_pass * self.passes,
            unit,
            self.elapsed,
        );
        if !note.is_empty() {
            r.add_note(note);
        }
        self.note(&mut r);
        r
    }

    /// Sets the result's passes and says in its note how the row was sized up.
    fn note(&self, r: &mut BenchResult) {
        if let Some(first) = self.first {
            r.passes = Some(self.passes);
            r.add_note(&format!(
                "sized up: one pass took {:.1} ms (under {} ms), so the measured part is {} \
                 passes; the shorter runs before it are not counted",
                first.as_secs_f64() * 1e3,
                MIN_MEASURED.as_millis(),
                self.passes
            ));
        }
    }
}

/// Passes that make a part taking `once` last about twice [`MIN_MEASURED`] (at least 2).
fn passes_for(once: Duration) -> u64 {
    let target = 2.0 * MIN_MEASURED.as_secs_f64();
    let once = once.as_secs_f64().max(1e-6);
    ((target / once).ceil() as u64).clamp(2, 1_000_000)
}

/// Tries [`sized`] makes before it reports a part that is still short.
const SIZING_TRIES: usize = 4;

/// Runs `measure(1)` (one pass of the measured part, returning its time) once untimed as a
/// warm-up, then once timed; while that is shorter than [`MIN_MEASURED`], runs
/// `measure(passes)` again with enough passes to last about twice as long (warm passes can
/// be faster than the first), up to [`SIZING_TRIES`] timed runs in all, and reports the
/// last run (the shorter ones served as a warm-up too).
fn sized(mut measure: impl FnMut(u64) -> Result<Duration>) -> Result<Sized> {
    // The first pass after a reopen pays first-touch faults. Reporting it when it is long
    // enough, and a warm run when it is not, would time slow engines cold and fast ones
    // warm: every engine is timed warm instead.
    measure(1)?;
    let once = measure(1)?;
    let (mut passes, mut elapsed) = (1u64, once);
    for _ in 1..SIZING_TRIES {
        if elapsed >= MIN_MEASURED {
            break;
        }
        passes = passes.saturating_mul(passes_for(elapsed)).min(100_000_000);
        elapsed = measure(passes)?;
    }
    Ok(Sized {
        passes,
        elapsed,
        first: (passes > 1).then_some(once),
    })
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
    let run = sized(|passes| {
        let start = Instant::now();
        for _ in 0..passes {
            engine.read(&mut |r| {
                for i in 0..n {
                    check_len(r.get(&decimal_key(i))?, i)?;
                }
                Ok(())
            })?;
        }
        Ok(start.elapsed())
    })?;
    Ok(run.result(spec, name, cfg, (n, "reads"), ""))
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
    let engine = engine.as_ref();
    let run = sized(|passes| {
        let (elapsed, _) = timed_together(threads, |t| {
            for _ in 0..passes {
                engine.read(&mut |r| {
                    for &i in &parts[t as usize] {
                        check_len(r.get(&decimal_key(i))?, i)?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        Ok(elapsed)
    })?;
    let note = format!("{threads} thread(s), each with its own read transaction");
    Ok(run.result(spec, name, cfg, (n, "reads"), &note))
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
    // First a database of one key, for its size on disk once closed.
    let one_key_dir = dir.with_file_name(format!(
        "{}-one-key",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("db")
    ));
    {
        let engine = engines::open(name, &one_key_dir, true)?;
        engine.write(&mut |w| w.put(&decimal_key(0), values.get(0)))?;
    }
    let one_key_disk_bytes = crate::sys::dir_bytes(&one_key_dir)?;
    std::fs::remove_dir_all(&one_key_dir)
        .with_context(|| format!("removing {}", one_key_dir.display()))?;
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
    r.one_key_disk_bytes = Some(one_key_disk_bytes);
    Ok(r)
}

/// Runs `work(t)` on `threads` threads that start together, and returns each one's output
/// with the time from before any of them can start to when the last one ends. The threads
/// are spawned before the clock starts and wait at a barrier this thread joins after
/// starting it: on 2 cores, a clock started after the barrier could miss threads that
/// finish first (`read_parallel_t4` once reported 1653× LMDB that way).
pub(crate) fn timed_together<T: Send>(
    threads: u64,
    work: impl Fn(u64) -> Result<T> + Sync,
) -> Result<(Duration, Vec<T>)> {
    let barrier = Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || -> Result<(T, Instant)> {
                    barrier.wait();
                    let out = work(t)?;
                    Ok((out, Instant::now()))
                })
            })
            .collect();
        let start = Instant::now();
        barrier.wait();
        let mut end = start;
        let mut outs = Vec::with_capacity(handles.len());
        for h in handles {
            let (out, done) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a timed thread panicked"))??;
            outs.push(out);
            end = end.max(done);
        }
        Ok((end - start, outs))
    })
}

/// Threads of `concurrent_writers` (and of its no-engine reference, `journal_raw_group_4k`).
const WRITER_THREADS: u64 = 16;

fn concurrent_writers(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let per_thread = cfg.n(1_000);
    let values = Values::new(6);
    let engine = engines::open(name, dir, true)?;
    let path = engine.concurrent_write_path();
    let engine_ref = engine.as_ref();
    let (elapsed, lats) = timed_together(WRITER_THREADS, |t| {
        let mut lat = Vec::with_capacity(per_thread as usize);
        for j in 0..per_thread {
            let i = t * per_thread + j;
            let kv = vec![(decimal_key(i).to_vec(), values.get(i).to_vec())];
            let t0 = Instant::now();
            engine_ref.write_concurrent(kv)?;
            lat.push(t0.elapsed());
        }
        Ok(lat)
    })?;
    let mut lat: Vec<Duration> = lats.into_iter().flatten().collect();
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

/// How long the sustained row runs and how its time is cut into windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SustainedPlan {
    /// A whole number of windows.
    pub total: Duration,
    pub window: Duration,
    pub windows: usize,
}

/// 60 s × `scale`, at least 5 s, in 5 s windows (1 s windows for a run shorter than 30 s),
/// rounded up to a whole number of windows.
pub fn sustained_plan(scale: f64) -> SustainedPlan {
    let secs = (60.0 * scale).max(5.0);
    let window = if secs < 30.0 { 1.0 } else { 5.0 };
    let windows = (secs / window - 1e-9).ceil().max(1.0) as usize;
    SustainedPlan {
        total: Duration::from_secs_f64(window * windows as f64),
        window: Duration::from_secs_f64(window),
        windows,
    }
}

/// Cuts a run into `plan.windows` windows: commit `i` ended `ends[i]` after the start, took
/// `lat[i]` and wrote `per_commit` operations. A commit that ended after the planned end
/// counts in the last window, which then lasts until `elapsed`. `files[w]`, when present,
/// is what the directory held at the end of window `w`.
pub fn bucket_windows(
    ends: &[Duration],
    lat: &[Duration],
    per_commit: u64,
    plan: &SustainedPlan,
    elapsed: Duration,
    files: &[engines::FileSample],
) -> Vec<Window> {
    let n = plan.windows.max(1);
    let mut ops = vec![0u64; n];
    let mut lats: Vec<Vec<Duration>> = vec![Vec::new(); n];
    for (end, l) in ends.iter().zip(lat) {
        let w = ((end.as_secs_f64() / plan.window.as_secs_f64()) as usize).min(n - 1);
        ops[w] += per_commit;
        lats[w].push(*l);
    }
    (0..n)
        .map(|w| {
            let from = plan.window.as_secs_f64() * w as f64;
            let to = if w + 1 == n {
                elapsed.as_secs_f64().max(from + plan.window.as_secs_f64())
            } else {
                from + plan.window.as_secs_f64()
            };
            let file = files.get(w);
            Window {
                t_s: to,
                ops_per_sec: ops[w] as f64 / (to - from),
                p99_us: result::percentile(&mut lats[w], 99.0).map(|d| d.as_secs_f64() * 1e6),
                journal_files: file.and_then(|f| f.journal_files),
                data_file_bytes: file.and_then(|f| f.data_file_bytes),
                disk_bytes: file.map(|f| f.disk_bytes),
            }
        })
        .collect()
}

/// The lowest window's throughput over the median window's.
pub fn min_window_ratio(windows: &[Window]) -> Option<f64> {
    let rates: Vec<f64> = windows.iter().map(|w| w.ops_per_sec).collect();
    let median = result::median(&rates)?;
    let min = rates.iter().copied().reduce(f64::min)?;
    (median > 0.0).then(|| min / median)
}

/// The sustained row: durable transactions of 100 random keys, as `fill_rnd_tx_durable`,
/// for [`sustained_plan`]'s time on an engine opened with its default durable settings (for
/// Hrafn `Options::default()`: the flusher and syncs run as they would for a user);
/// throughput and p99 per window, and the engine's files counted at each window's end.
fn sustained(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let plan = sustained_plan(cfg.scale);
    let values = Values::new(9);
    let mut rng = StdRng::seed_from_u64(90);
    let mut keys = vec![0u8; RND_TX_KEYS * KEY_LEN];
    let engine = engines::open_default(name, dir)?;
    let mut ends = Vec::new();
    let mut lat = Vec::new();
    let mut files = Vec::with_capacity(plan.windows);
    let mut next_sample = plan.window;
    let mut t = 0u64;
    let start = Instant::now();
    while start.elapsed() < plan.total {
        rng.fill_bytes(&mut keys);
        let t0 = Instant::now();
        engine.write(&mut |w| {
            for (j, key) in keys.chunks_exact(KEY_LEN).enumerate() {
                w.put(key, values.get(t * RND_TX_KEYS as u64 + j as u64))?;
            }
            Ok(())
        })?;
        let end = t0.elapsed();
        lat.push(end);
        let since = start.elapsed();
        ends.push(since);
        t += 1;
        while since >= next_sample && files.len() + 1 < plan.windows {
            files.push(engines::file_sample(name, dir)?);
            next_sample += plan.window;
        }
    }
    let elapsed = start.elapsed();
    files.push(engines::file_sample(name, dir)?);
    // An engine that counts its journal files' high-water mark itself (Hrafn) catches a
    // peak between two samples.
    let files_peak = engine.journal_counters().map(|c| c.journal_files_peak);
    drop(engine);
    let windows = bucket_windows(&ends, &lat, RND_TX_KEYS as u64, &plan, elapsed, &files);
    let ops = t * RND_TX_KEYS as u64;
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, ops, "entries", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(t);
    r.min_window_ratio = min_window_ratio(&windows);
    r.journal_files_max = windows
        .iter()
        .filter_map(|w| w.journal_files)
        .chain(files_peak)
        .max();
    r.note = Some(format!(
        "{t} txns in {:.0} s, {} windows of {} s; lowest window {} of the median window",
        elapsed.as_secs_f64(),
        windows.len(),
        plan.window.as_secs(),
        r.min_window_ratio
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}×")),
    ));
    r.windows = Some(windows);
    Ok(r)
}

/// Transactions a journal_bytes row measures: 1,000 (scaled), at least 100.
fn journal_bytes_txns(cfg: &Config) -> u64 {
    cfg.n(1_000).max(100)
}

/// Entries per transaction of the untimed fill of the journal_bytes rows.
const JOURNAL_BYTES_FILL_TXN: usize = 10_000;

/// The journal_bytes rows: fill a tree with `cfg.entries()` random 16-byte keys (untimed),
/// then durable transactions of 100 random new keys (`update` false) or overwriting the
/// values of 100 distinct random existing keys (`update` true), with the engine's journal
/// counters read before and after: bytes journaled per transaction against the whole pages
/// those transactions changed.
fn journal_bytes(
    spec: &Spec,
    name: &str,
    cfg: &Config,
    dir: &Path,
    update: bool,
) -> Result<BenchResult> {
    let n = cfg.entries() as usize;
    let txns = journal_bytes_txns(cfg);
    let values = Values::new(10);
    let mut rng = StdRng::seed_from_u64(100);
    let mut keys = vec![0u8; n * KEY_LEN];
    rng.fill_bytes(&mut keys);
    let engine = engines::open(name, dir, true)?;
    for (c, chunk) in keys.chunks(JOURNAL_BYTES_FILL_TXN * KEY_LEN).enumerate() {
        engine.write(&mut |w| {
            for (j, key) in chunk.chunks_exact(KEY_LEN).enumerate() {
                w.put(key, values.get((c * JOURNAL_BYTES_FILL_TXN + j) as u64))?;
            }
            Ok(())
        })?;
    }
    let before = engine.journal_counters().with_context(|| {
        format!("{name} reports no journal counters; the journal_bytes rows are for hrafn")
    })?;
    let mut batch = vec![0u8; RND_TX_KEYS * KEY_LEN];
    let mut lat = Vec::with_capacity(txns as usize);
    let start = Instant::now();
    for t in 0..txns {
        if update {
            for (slot, i) in rand::seq::index::sample(&mut rng, n, RND_TX_KEYS.min(n))
                .into_iter()
                .enumerate()
            {
                batch[slot * KEY_LEN..][..KEY_LEN].copy_from_slice(&keys[i * KEY_LEN..][..KEY_LEN]);
            }
        } else {
            rng.fill_bytes(&mut batch);
        }
        // Value offsets past the fill's: an update writes different bytes.
        let first = (n as u64 + t * RND_TX_KEYS as u64) * 13;
        let t0 = Instant::now();
        engine.write(&mut |w| {
            for (j, key) in batch.chunks_exact(KEY_LEN).enumerate() {
                w.put(key, values.get(first + j as u64))?;
            }
            Ok(())
        })?;
        lat.push(t0.elapsed());
    }
    let elapsed = start.elapsed();
    let after = engine
        .journal_counters()
        .context("journal counters after the measured part")?;
    drop(engine);
    let commits = after.commits - before.commits;
    ensure!(
        commits == txns,
        "{commits} commits journaled for {txns} transactions"
    );
    let per_txn = |a: u64, b: u64| (a - b) as f64 / txns as f64;
    let journal_bytes_per_txn = per_txn(after.journal_bytes_written, before.journal_bytes_written);
    let page_bytes_per_txn = per_txn(after.dirty_page_bytes, before.dirty_page_bytes);
    let jb = JournalBytes {
        txns,
        journal_bytes_per_txn,
        payload_bytes_per_txn: per_txn(after.journal_payload_bytes, before.journal_payload_bytes),
        page_bytes_per_txn,
        pages_per_txn: page_bytes_per_txn / PAGE_SIZE as f64,
        ratio: if page_bytes_per_txn > 0.0 {
            journal_bytes_per_txn / page_bytes_per_txn
        } else {
            0.0
        },
    };
    let mut r = BenchResult::measured(spec.name, name, cfg.scale, txns, "txns", elapsed)
        .with_latencies(&mut lat);
    r.commits = Some(txns);
    r.note = Some(format!(
        "{txns} durable txns of {RND_TX_KEYS} {} into a tree of {n} keys: {:.0} journal bytes \
         and {:.1} pages ({:.0} bytes) per txn, ratio {:.3}",
        if update { "overwrites" } else { "new keys" },
        jb.journal_bytes_per_txn,
        jb.pages_per_txn,
        jb.page_bytes_per_txn,
        jb.ratio
    ));
    r.journal = Some(jb);
    Ok(r)
}

/// Hrafn's page size: `Stats::dirty_page_bytes` counts whole pages of this size.
#[cfg(feature = "hrafn")]
pub const PAGE_SIZE: u64 = hrafn::limits::PAGE_SIZE_BYTES as u64;
#[cfg(not(feature = "hrafn"))]
pub const PAGE_SIZE: u64 = 8192;

fn range_scan_full(spec: &Spec, name: &str, cfg: &Config, dir: &Path) -> Result<BenchResult> {
    let n = cfg.entries();
    let values = Values::new(7);
    let engine = filled(name, dir, n, &values)?;
    let run = sized(|passes| {
        let start = Instant::now();
        for _ in 0..passes {
            let mut bytes = 0usize;
            let mut seen = 0;
            engine.read(&mut |r| {
                seen = r.scan(b"", None, &mut |k, v| bytes += k.len() + v.len())?;
                Ok(())
            })?;
            ensure!(
                seen as u64 == n,
                "full scan saw {seen} entries, expected {n}"
            );
            ensure!(
                bytes == n as usize * (KEY_LEN + VALUE_LEN),
                "full scan saw {bytes} bytes"
            );
        }
        Ok(start.elapsed())
    })?;
    Ok(run.result(spec, name, cfg, (n, "entries"), ""))
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
    let run = sized(|passes| {
        lat.clear();
        let start = Instant::now();
        for _ in 0..passes {
            engine.read(&mut |r| {
                for key in &starts {
                    let t0 = Instant::now();
                    let got = r.scan(key, Some(SCAN_LEN), &mut |_, _| {})?;
                    lat.push(t0.elapsed());
                    ensure!(got == want, "scan returned {got} entries, expected {want}");
                }
                Ok(())
            })?;
        }
        Ok(start.elapsed())
    })?;
    let note = format!("{scans} scans of {SCAN_LEN} entries in one read txn");
    Ok(run
        .result(spec, name, cfg, (scans, "scans"), &note)
        .with_latencies(&mut lat))
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
    let inserted = matches!(what, U64::Insert | U64::Append);
    let (elapsed, pages_in_use) = {
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
        let elapsed = start.elapsed();
        // Only the insert rows report pages: the check walks every page, and the read
        // rows' fill needs no figure.
        let pages = if inserted {
            engine.pages_in_use()?
        } else {
            None
        };
        (elapsed, pages)
    };
    if inserted {
        let mut r = BenchResult::measured(spec.name, name, cfg.scale, n, "entries", elapsed);
        r.pages_in_use = pages_in_use;
        return Ok(r);
    }
    let engine = engines::open(name, dir, false)?;
    let read_with = |f: &mut dyn FnMut(&dyn Reader) -> Result<()>| {
        if fixed {
            engine.read_u64(f)
        } else {
            engine.read(f)
        }
    };
    if what == U64::Scan {
        let run = sized(|passes| {
            let start = Instant::now();
            for _ in 0..passes {
                read_with(&mut |r: &dyn Reader| -> Result<()> {
                    let seen = r.scan(&[], None, &mut |_, _| {})?;
                    ensure!(seen as u64 == n, "scanned {seen} of {n} entries");
                    Ok(())
                })?;
            }
            Ok(start.elapsed())
        })?;
        return Ok(run.result(spec, name, cfg, (n, "entries"), ""));
    }
    let mut order = keys;
    order.shuffle(&mut rng);
    let run = sized(|passes| {
        let start = Instant::now();
        for _ in 0..passes {
            read_with(&mut |r: &dyn Reader| -> Result<()> {
                for &k in &order {
                    match r.get(&k.to_be_bytes())? {
                        Some(U64_VALUE_LEN) => {}
                        other => bail!("key {k}: {other:?}"),
                    }
                }
                Ok(())
            })?;
        }
        Ok(start.elapsed())
    })?;
    Ok(run.result(spec, name, cfg, (n, "reads"), ""))
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
    let run = sized(|passes| {
        let start = Instant::now();
        for _ in 0..passes {
            let bytes = engine.table_get(&ids)?;
            if bytes < n * VALUE_LEN as u64 {
                bail!("read {bytes} bytes of {n} records");
            }
        }
        Ok(start.elapsed())
    })?;
    Ok(run.result(spec, name, cfg, (n, "reads"), ""))
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
                let outcome = run(spec, engine, &cfg, dir.path());
                if spec.hrafn_only && engine != "hrafn" {
                    let e = outcome.expect_err("a Hrafn-only row fails on a peer");
                    assert!(format!("{e:#}").contains("journal counters"), "{e:#}");
                    continue;
                }
                let r = outcome.unwrap_or_else(|e| panic!("{} on {engine}: {e:#}", spec.name));
                assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{}: {r:?}", spec.name);
                assert_eq!(r.disk_bytes.is_some(), !spec.raw_disk, "{}", spec.name);
                if spec.name == "sustained_rnd_durable" {
                    let windows = r.windows.as_ref().expect("windows");
                    assert_eq!(windows.len(), 5, "5 s in 1 s windows");
                    assert!(r.min_window_ratio.is_some());
                    let journals = matches!(engine, "hrafn" | "rocksdb");
                    assert_eq!(r.journal_files_max.is_some(), journals, "{engine}");
                    assert!(windows.iter().all(|w| w.disk_bytes.is_some()));
                }
                if spec.hrafn_only {
                    let j = r.journal.as_ref().expect("journal bytes");
                    assert!(j.journal_bytes_per_txn > 0.0 && j.page_bytes_per_txn > 0.0);
                    assert!(j.ratio > 0.0, "{j:?}");
                }
            }
        }
    }

    #[test]
    fn cpu_bound_rows_run_three_times() {
        for name in [
            "read_seq",
            "read_parallel_t1",
            "read_parallel_t2",
            "read_parallel_t4",
            "fill_rnd_tx_nosync",
            "range_scan_full",
            "range_scan_rnd100",
            "u64_insert_fixed",
            "u64_get_btree",
            "u64_append_btree",
            "table_insert",
            "table_get_by_id",
        ] {
            assert_eq!(spec(name).expect("row").rounds, 3, "{name}");
        }
        for name in ["fill_seq", "fill_rnd_tx_durable", "sustained_rnd_durable"] {
            assert_eq!(spec(name).expect("row").rounds, 1, "{name}");
        }
    }

    #[test]
    fn sustained_runs_whole_windows() {
        let plan = |scale: f64| {
            let p = sustained_plan(scale);
            (p.total.as_secs_f64(), p.window.as_secs_f64(), p.windows)
        };
        assert_eq!(plan(1.0), (60.0, 5.0, 12));
        assert_eq!(plan(0.2), (12.0, 1.0, 12));
        assert_eq!(plan(0.05), (5.0, 1.0, 5), "at least 5 s");
        assert_eq!(
            plan(0.6),
            (40.0, 5.0, 8),
            "36 s rounded up to whole windows"
        );
        assert_eq!(plan(0.45), (27.0, 1.0, 27));
        assert_eq!(plan(0.5), (30.0, 5.0, 6));
    }

    #[test]
    fn commits_are_bucketed_by_the_window_they_end_in() {
        let plan = sustained_plan(0.05); // 5 windows of 1 s
        let ms = Duration::from_millis;
        // Window 0: two commits; window 1: none; window 2: one; the last window also takes
        // the commit that ended after the planned 5 s.
        let ends = [ms(100), ms(999), ms(2_500), ms(4_200), ms(5_100)];
        let lat = [ms(1), ms(3), ms(2), ms(4), ms(8)];
        let files = vec![
            engines::FileSample {
                journal_files: Some(3),
                data_file_bytes: Some(10),
                disk_bytes: 20,
            };
            5
        ];
        let w = bucket_windows(&ends, &lat, 100, &plan, ms(5_200), &files);
        assert_eq!(w.len(), 5);
        let rates: Vec<f64> = w.iter().map(|w| w.ops_per_sec).collect();
        assert_eq!(rates[..4], [200.0, 0.0, 100.0, 0.0]);
        // The last window runs from 4 s to 5.2 s.
        assert!((rates[4] - 200.0 / 1.2).abs() < 1e-9, "{rates:?}");
        assert_eq!(w[4].t_s, 5.2);
        assert_eq!(w[0].t_s, 1.0);
        assert_eq!(w[0].p99_us, Some(3_000.0));
        assert_eq!(w[1].p99_us, None);
        assert_eq!(w[4].p99_us, Some(8_000.0));
        assert_eq!(w[2].journal_files, Some(3));
        // Lowest window (0) over the median (100).
        assert_eq!(min_window_ratio(&w), Some(0.0));
        let even: Vec<Window> = [100.0, 50.0, 80.0, 120.0]
            .iter()
            .map(|&ops_per_sec| Window {
                t_s: 1.0,
                ops_per_sec,
                p99_us: None,
                journal_files: None,
                data_file_bytes: None,
                disk_bytes: None,
            })
            .collect();
        assert_eq!(min_window_ratio(&even), Some(50.0 / 90.0));
        assert_eq!(min_window_ratio(&[]), None);
    }

    #[test]
    fn short_parts_are_sized_up() {
        let ms = Duration::from_millis;
        assert_eq!(passes_for(ms(10)), 10);
        assert_eq!(passes_for(ms(49)), 3);
        assert!((100_000..=1_000_000).contains(&passes_for(Duration::ZERO)));
        // 10 ms per pass: a warm-up, then sized up to 10 passes, the first pass not counted.
        let mut calls = Vec::new();
        let s = sized(|passes| {
            calls.push(passes);
            Ok(ms(10) * passes as u32)
        })
        .expect("sized");
        assert_eq!(calls, [1, 1, 10]);
        assert_eq!((s.passes, s.elapsed, s.first), (10, ms(100), Some(ms(10))));
        let mut r = BenchResult::measured("x", "y", 1.0, 1, "reads", s.elapsed);
        s.note(&mut r);
        assert_eq!(r.passes, Some(10));
        assert!(r.note.as_deref().unwrap_or("").contains("10 passes"));
        // Long enough at once: run once, nothing noted.
        let s = sized(|passes| Ok(ms(60) * passes as u32)).expect("sized");
        assert_eq!((s.passes, s.first), (1, None));
        let mut r = BenchResult::measured("x", "y", 1.0, 1, "reads", s.elapsed);
        s.note(&mut r);
        assert_eq!((r.passes, r.note), (None, None));
        // Warm passes faster than the first: sized again until long enough.
        let mut calls = Vec::new();
        let s = sized(|passes| {
            calls.push(passes);
            Ok(if passes == 1 {
                ms(20)
            } else {
                ms(1) * passes as u32
            })
        })
        .expect("sized");
        assert_eq!(calls, [1, 1, 5, 100]);
        assert_eq!((s.passes, s.elapsed), (100, ms(100)));
        // A part that never gets long enough stops after a few tries.
        let mut calls = 0;
        let s = sized(|_| {
            calls += 1;
            Ok(ms(1))
        })
        .expect("sized");
        assert_eq!(calls, SIZING_TRIES + 1, "a warm-up and the timed tries");
        assert!(s.elapsed < MIN_MEASURED);
    }

    /// A cold first pass long enough to count was reported as it was, while an engine
    /// whose first pass was short got a warm figure: the first pass is never timed now.
    #[test]
    fn the_first_pass_is_a_warm_up() {
        let ms = Duration::from_millis;
        let mut calls = 0;
        let s = sized(|passes| {
            calls += 1;
            // Cold: 200 ms; warm: 60 ms a pass.
            let pass = if calls == 1 { ms(200) } else { ms(60) };
            Ok(pass * passes as u32)
        })
        .expect("sized");
        assert_eq!((s.passes, s.elapsed, s.first), (1, ms(60), None));
    }
}
