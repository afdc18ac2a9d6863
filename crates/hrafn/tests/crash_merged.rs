//! Power loss during merged and pipelined commits, and during the background flusher's own
//! steps. Several threads submit batches onto a simulated disk, in order and each waiting
//! for its acknowledgement, through `Environment::write`, `Environment::submit` and plain
//! transactions, while one thread flushes and syncs now and then (or the flusher runs on
//! its own timer) and another holds readers. Journal writes take a little time, as on a
//! real device, so requests queue up and merge. Power is lost at a sampled operation, of
//! any thread or of the flusher thread itself (data writes, data syncs, header writes,
//! journal retirement, spare journals); the disk is power-cut with several damage variants
//! and reopened.
//!
//! Scheduling decides which batches share a transaction, so the oracle is per batch: every
//! acknowledged batch is there, no batch that was never submitted is, every batch is there
//! whole or not at all, each thread's batches are a prefix of what it submitted, and a batch
//! acknowledged before another was submitted is there whenever that one is (records are
//! durable in transaction order; this is what holds when a buffered journal,
//! `Durability::None`, loses acknowledged batches). `check` must pass and the write-ahead
//! checker must stay silent. While running, a reader must see every batch acknowledged
//! before it began and none submitted after.
//!
//! Runs are not exactly replayable, so a crash point sampled from a dry run may lie past
//! the end of a run that took fewer operations: such points are counted apart, never as
//! crash states.
//!
//! Replay one crash point (approximately): `HRAFN_TEST_SEED=<workload seed>` and
//! `HRAFN_CRASH_OP=<op>` or `HRAFN_CRASH_FLUSHER_OP=<n>`, then `cargo test --release -p hrafn
//! --test crash_merged replay -- --ignored --nocapture`.

mod common;
mod crash_support;

use crash_support::{
    DAMAGE_VARIANTS, Model, Mutation, Rng, Tally, Verdict, apply_mutations, base_seed,
    describe_difference, is_power_loss, mix, read_state, snapshot, verify_recovery_with,
};
use hrafn::storage::Storage;
use hrafn::storage::sim::{CrashPoint, Damage, SimStorage};
use hrafn::{DATA_FILE, Durability, Environment, Error, Options, ReadTxn, WriteBatch};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 0x3E46_ED0C_C0FF_EE02;
/// Fewest crash states (reached crash points times damage variants) per CI run (times
/// `HRAFN_TEST_SCALE`).
const CRASH_STATES: u64 = 5_000;
/// Workloads per CI run (times `HRAFN_TEST_SCALE`): half run the flusher on its own timer,
/// a quarter commit to a buffered journal.
const WORKLOADS: u64 = 8;
/// Each workload opens the environment, runs its threads, and closes it this many times.
const ROUNDS: u64 = 2;
/// The name the engine gives its flusher thread.
const FLUSHER: &str = "hrafn-flusher";

/// How a batch is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// `Environment::write` with a `WriteBatch`.
    Write,
    /// `Environment::submit` with a closure.
    Submit,
    /// Its own transaction (`begin_write`, `commit`), pipelined behind merged ones.
    Plain,
}

#[derive(Debug, Clone)]
struct Batch {
    way: Way,
    mutations: Arc<[Mutation]>,
}

/// A seeded multi-threaded workload.
#[derive(Debug)]
struct Workload {
    seed: u64,
    /// Whether the flusher runs on its own timer (otherwise only when asked or on close).
    background: bool,
    /// Whether commits are acknowledged after a buffered journal write
    /// (`Durability::None`): a power loss may lose acknowledged batches, but what survives
    /// must still be a prefix in commit order.
    buffered: bool,
    options: Options,
    /// Each thread's batches in submission order; round `r` submits the `r`-th slice.
    batches: Vec<Vec<Batch>>,
    per_round: u64,
    /// Thread 0 flushes and syncs before every `flush_every`-th batch.
    flush_every: u64,
    /// How long a durable journal write takes: long enough for other threads' requests to
    /// queue up behind it, as on a real device.
    journal_latency: Duration,
}

fn data_tree(t: u64, j: u64) -> String {
    format!("data-{}", (t + j) % 2)
}

fn data_key(t: u64, i: u64, j: u64) -> Vec<u8> {
    format!("t{t}-b{i:05}-{j}").into_bytes()
}

fn tmp_key(t: u64, i: u64) -> Vec<u8> {
    format!("t{t}-{i:05}").into_bytes()
}

fn last_key(t: u64) -> Vec<u8> {
    format!("t{t}").into_bytes()
}

/// Batch `i` of thread `t`: new keys (small, overflow, rarely larger than a journal file),
/// sometimes an overwrite or a removal of an earlier batch's key, the thread's temporary key
/// moved on, and the thread's `last` key set to `i`. Threads touch disjoint keys, so the
/// state is a function of how many batches of each thread it holds.
fn batch(rng: &mut Rng, t: u64, i: u64) -> Batch {
    let mut m = Vec::new();
    for j in 0..rng.between(1, 5) {
        let len = match rng.below(100) {
            0..2 => rng.between(70_000, 100_000),
            2..15 => rng.between(4_100, 24_000),
            _ => rng.between(1, 300),
        } as usize;
        m.push(Mutation::Insert {
            tree: data_tree(t, j),
            key: data_key(t, i, j),
            value: crash_support::value(rng, len),
        });
    }
    if i >= 3 && rng.chance(15) {
        m.push(Mutation::Remove {
            tree: data_tree(t, 0),
            key: data_key(t, i - 3, 0),
        });
    } else if i >= 2 && rng.chance(15) {
        let len = rng.between(1, 300) as usize;
        m.push(Mutation::Insert {
            tree: data_tree(t, 0),
            key: data_key(t, i - 2, 0),
            value: crash_support::value(rng, len),
        });
    }
    if i > 0 {
        m.push(Mutation::Remove {
            tree: "tmp".into(),
            key: tmp_key(t, i - 1),
        });
    }
    m.push(Mutation::Insert {
        tree: "tmp".into(),
        key: tmp_key(t, i),
        value: crash_support::value(rng, 16),
    });
    m.push(Mutation::Insert {
        tree: "last".into(),
        key: last_key(t),
        value: Arc::from(&i.to_be_bytes()[..]),
    });
    let way = match rng.below(100) {
        0..45 => Way::Write,
        45..90 => Way::Submit,
        _ => Way::Plain,
    };
    Batch {
        way,
        mutations: m.into(),
    }
}

impl Workload {
    /// The low bits of the seed choose the kind: odd seeds run the flusher on its own
    /// timer, the others a durable journal (`..00`) or a buffered one (`..10`).
    fn generate(seed: u64) -> Workload {
        let background = seed & 1 == 1;
        let buffered = !background && seed & 2 == 2;
        let mut rng = Rng::new(seed);
        let threads = rng.between(3, 4);
        let per_round = rng.between(14, 22);
        let mut options = crash_support::deterministic_options();
        if background {
            // As in production but faster: flushes every millisecond and past a small
            // threshold, spare journals, and either a sync at every flush or only when
            // journals pile up.
            options.flush_interval_ms = 1;
            options.flush_threshold_bytes = 256 << 10;
            options.journal_spare_files = 2;
            options.sync_interval_ms = if rng.chance(50) { 0 } else { 3_600_000 };
        }
        if buffered {
            options.durability = Durability::None;
        }
        let flush_every = if background { 24 } else { rng.between(5, 9) };
        let batches = (0..threads)
            .map(|t| {
                (0..per_round * ROUNDS)
                    .map(|i| batch(&mut rng, t, i))
                    .collect()
            })
            .collect();
        let journal_latency = Duration::from_micros(rng.between(50, 300));
        Workload {
            seed,
            background,
            buffered,
            options,
            batches,
            per_round,
            flush_every,
            journal_latency,
        }
    }

    fn threads(&self) -> usize {
        self.batches.len()
    }

    /// The state holding the first `counts[t]` batches of each thread `t`.
    fn expected(&self, counts: &[u64]) -> Model {
        let mut model = Model::new();
        for (batches, &k) in self.batches.iter().zip(counts) {
            for b in &batches[..k as usize] {
                for m in b.mutations.iter() {
                    m.apply(&mut model);
                }
            }
        }
        model
    }

    /// How many batches of each thread `model` claims to hold (its `last` keys).
    fn counts(&self, model: &Model) -> Result<Vec<u64>, String> {
        let mut counts = vec![0; self.threads()];
        for (key, value) in model.get("last").into_iter().flatten() {
            let t = (0..self.threads())
                .find(|&t| *key == last_key(t as u64))
                .ok_or_else(|| format!("unknown key {}", String::from_utf8_lossy(key)))?;
            let i: [u8; 8] = (**value)
                .try_into()
                .map_err(|_| format!("a {}-byte last value", value.len()))?;
            counts[t] = u64::from_be_bytes(i) + 1;
        }
        Ok(counts)
    }
}

/// What one thread submitted and when: ticks of a clock shared by all threads, taken
/// before each call and after each acknowledgement.
#[derive(Debug, Clone, Default)]
struct Log {
    submitted_at: Vec<u64>,
    acked_at: Vec<u64>,
    /// The tick taken before the latest `flush_and_sync` (or clean close) this thread saw
    /// return `Ok`: every batch acknowledged before it is durable, non-durable ones too.
    synced_before: u64,
}

impl Log {
    fn submitted(&self) -> u64 {
        self.submitted_at.len() as u64
    }

    fn acked(&self) -> u64 {
        self.acked_at.len() as u64
    }
}

/// The outcome of running a workload.
#[derive(Debug, Default)]
struct Run {
    logs: Vec<Log>,
    /// Errors other than the power loss, and states that broke the oracle while running.
    problems: Vec<String>,
    merged_requests: u64,
    merged_transactions: u64,
    pipelined_commits: u64,
    spares_used: u64,
}

/// Judges a recovered state against what the threads submitted and had acknowledged;
/// without `acks_survive` (a buffered journal losing power), acknowledged batches may be
/// missing, but only from the end.
fn judge(w: &Workload, logs: &[Log], acks_survive: bool, txn_id: u64, model: &Model) -> Verdict {
    let counts = match w.counts(model) {
        Ok(c) => c,
        Err(detail) => return Verdict::Hole { txn_id, detail },
    };
    let synced = logs.iter().map(|l| l.synced_before).max().unwrap_or(0);
    for (k, log) in counts.iter().zip(logs) {
        if acks_survive && *k < log.acked() {
            return Verdict::Lost { txn_id };
        }
        // Made durable by a flush_and_sync or a clean close, whatever its durability.
        if *k < log.acked_at.partition_point(|&at| at < synced) as u64 {
            return Verdict::Lost { txn_id };
        }
        if *k > log.submitted() {
            return Verdict::Phantom { txn_id };
        }
    }
    let want = w.expected(&counts);
    if want != *model {
        return Verdict::Hole {
            txn_id,
            detail: format!(
                "not the state of batches {counts:?}: {}",
                describe_difference(&want, model)
            ),
        };
    }
    // Commits are durable in transaction order: whatever was acknowledged before the latest
    // recovered batch was submitted is there too.
    let latest = counts
        .iter()
        .zip(logs)
        .filter(|(k, _)| **k > 0)
        .map(|(k, log)| log.submitted_at[*k as usize - 1])
        .max()
        .unwrap_or(0);
    for (t, (k, log)) in counts.iter().zip(logs).enumerate() {
        let before = log.acked_at.partition_point(|&at| at < latest) as u64;
        if *k < before {
            return Verdict::Hole {
                txn_id,
                detail: format!(
                    "batches {counts:?}: thread {t}'s batch {k} was acknowledged before a \
                     recovered batch was submitted, and is missing"
                ),
            };
        }
    }
    Verdict::Good { txn_id }
}

/// Why a thread stopped: the power loss (expected), or anything else (a failure).
fn stopped(e: &Error) -> Result<bool, String> {
    if is_power_loss(e) {
        Ok(false)
    } else {
        Err(e.to_string())
    }
}

/// How far each thread has got, for readers to compare their snapshots with.
struct Progress {
    /// Ticks taken before each call and after each acknowledgement.
    clock: AtomicU64,
    submitted: Vec<AtomicU64>,
    acked: Vec<AtomicU64>,
}

impl Progress {
    /// The threads' progress so far; the clock goes on from `clock`.
    fn new(logs: &[Log], clock: u64) -> Progress {
        Progress {
            clock: AtomicU64::new(clock),
            submitted: logs.iter().map(|l| AtomicU64::new(l.submitted())).collect(),
            acked: logs.iter().map(|l| AtomicU64::new(l.acked())).collect(),
        }
    }

    fn load(counts: &[AtomicU64]) -> Vec<u64> {
        counts.iter().map(|c| c.load(Ordering::SeqCst)).collect()
    }
}

/// A reader and what it must see: every batch acknowledged before it began (`floor`),
/// none submitted after (`ceiling`).
struct HeldReader<'env> {
    rtx: ReadTxn<'env>,
    floor: Vec<u64>,
    ceiling: Vec<u64>,
    until: u64,
}

impl HeldReader<'_> {
    fn check(&self, w: &Workload) -> Result<(), String> {
        let (txn_id, model) = snapshot(&self.rtx)?;
        let counts = w.counts(&model)?;
        let want = w.expected(&counts);
        if want != model {
            return Err(format!(
                "a reader of txn {txn_id} sees no state of batches ({counts:?}): {}",
                describe_difference(&want, &model)
            ));
        }
        let fits = |(k, (lo, hi)): (&u64, (&u64, &u64))| lo <= k && k <= hi;
        if !counts
            .iter()
            .zip(self.floor.iter().zip(&self.ceiling))
            .all(fits)
        {
            return Err(format!(
                "a reader of txn {txn_id} sees batches {counts:?}: acknowledged when it began \
                 {:?}, submitted once it had {:?}",
                self.floor, self.ceiling
            ));
        }
        Ok(())
    }
}

/// Thread `t`'s part of round `round`. `Ok(true)`: all submitted and acknowledged;
/// `Ok(false)`: stopped by the power loss; `Err`: anything else went wrong.
fn writer(
    w: &Workload,
    env: &Environment,
    sim: &SimStorage,
    progress: &Progress,
    t: usize,
    round: u64,
    log: &mut Log,
) -> Result<bool, String> {
    let mut reader: Option<HeldReader<'_>> = None;
    let first = round * w.per_round;
    for i in first..first + w.per_round {
        if t == 0 && i % w.flush_every == w.flush_every - 1 {
            // Flushes from a caller's thread race with the merged commits of the others.
            let before = progress.clock.fetch_add(1, Ordering::SeqCst);
            if let Err(e) = env.flush_and_sync() {
                return stopped(&e);
            }
            log.synced_before = before;
        }
        if t == 1 {
            // Readers held across several commits pin page versions the flusher must skip.
            match reader.take() {
                Some(held) if i >= held.until => {
                    if let Err(problem) = held.check(w)
                        && !sim.is_frozen()
                    {
                        return Err(problem);
                    }
                }
                Some(held) => reader = Some(held),
                None if i % 11 == 2 => {
                    let floor = Progress::load(&progress.acked);
                    match env.begin_read() {
                        Ok(rtx) => {
                            reader = Some(HeldReader {
                                rtx,
                                floor,
                                ceiling: Progress::load(&progress.submitted),
                                until: i + 6,
                            });
                        }
                        Err(e) => return stopped(&e),
                    }
                }
                None => {}
            }
        }
        let batch = &w.batches[t][i as usize];
        log.submitted_at
            .push(progress.clock.fetch_add(1, Ordering::SeqCst));
        progress.submitted[t].store(i + 1, Ordering::SeqCst);
        let result = match batch.way {
            Way::Write => {
                let mut b = WriteBatch::new();
                for m in batch.mutations.iter() {
                    match m {
                        Mutation::Insert { tree, key, value } => b.insert(tree, key, value),
                        Mutation::Remove { tree, key } => b.remove(tree, key),
                        Mutation::DeleteTree { .. } => unreachable!("batches delete no tree"),
                    };
                }
                env.write(b)
            }
            Way::Submit => {
                let mutations = Arc::clone(&batch.mutations);
                env.submit(move |wtx| apply_mutations(wtx, &mutations))
            }
            Way::Plain => env.begin_write().and_then(|mut wtx| {
                apply_mutations(&mut wtx, &batch.mutations)?;
                wtx.commit()
            }),
        };
        match result {
            Ok(()) => {
                log.acked_at
                    .push(progress.clock.fetch_add(1, Ordering::SeqCst));
                progress.acked[t].store(i + 1, Ordering::SeqCst);
            }
            Err(e) => return stopped(&e),
        }
    }
    if let Some(held) = reader
        && let Err(problem) = held.check(w)
        && !sim.is_frozen()
    {
        return Err(problem);
    }
    Ok(true)
}

/// Runs `w` on `sim` until it ends or power is lost.
fn execute(w: &Workload, sim: &SimStorage) -> Run {
    sim.journal_write_latency(w.journal_latency);
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    let mut clock = 0;
    let mut run = Run {
        logs: vec![Log::default(); w.threads()],
        ..Run::default()
    };
    for round in 0..ROUNDS {
        let env = match Environment::open_with_storage(Arc::clone(&storage), w.options.clone()) {
            Ok(env) => env,
            Err(e) => {
                if !is_power_loss(&e) {
                    run.problems.push(format!("open in round {round}: {e}"));
                }
                return run;
            }
        };
        // After a clean close: every batch, all acknowledged.
        let acked: Vec<u64> = run.logs.iter().map(Log::acked).collect();
        match read_state(&env) {
            Ok((_, model)) if model == w.expected(&acked) => {}
            Ok((txn_id, model)) => run.problems.push(format!(
                "after a clean reopen, txn {txn_id} is not the state of batches {acked:?}: {}",
                describe_difference(&w.expected(&acked), &model)
            )),
            Err(e) => run.problems.push(format!("reading after a reopen: {e}")),
        }
        let progress = Progress::new(&run.logs, clock);
        let outcomes: Vec<Result<bool, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = run
                .logs
                .iter_mut()
                .enumerate()
                .map(|(t, log)| {
                    let (env, progress) = (&env, &progress);
                    std::thread::Builder::new()
                        .name(format!("writer-{t}"))
                        .spawn_scoped(s, move || writer(w, env, sim, progress, t, round, log))
                        .expect("spawning a writer thread")
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a writer panicked".into())))
                .collect()
        });
        clock = progress.clock.load(Ordering::SeqCst);
        let stats = env.stats();
        run.merged_requests += stats.merged_requests;
        run.merged_transactions += stats.merged_transactions;
        run.pipelined_commits += stats.pipelined_commits;
        run.spares_used += stats.journal_spares_used;
        // A clean close makes every acknowledged batch durable.
        let before = progress.clock.load(Ordering::SeqCst);
        if let Err(e) = env.close() {
            if !is_power_loss(&e) {
                run.problems.push(format!("close in round {round}: {e}"));
            }
            return run;
        }
        run.logs[0].synced_before = before;
        let mut finished = true;
        for (t, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Ok(done) => finished &= done,
                Err(problem) => {
                    run.problems
                        .push(format!("round {round}, thread {t}: {problem}"));
                    finished = false;
                }
            }
        }
        if !finished {
            return run;
        }
    }
    run
}

/// Where a crashed run loses power.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// At this index among all operations.
    Op(u64),
    /// At this operation of the flusher thread.
    FlusherOp(u64),
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::Op(op) => write!(f, "op {op}"),
            Point::FlusherOp(n) => write!(f, "flusher op {n}"),
        }
    }
}

/// One crashed run: whether it reached its crash point, where it landed, and the verdicts.
struct Attempt {
    landed: Option<CrashPoint>,
    tally: Tally,
}

fn crash_case(w: &Workload, point: Point) -> Attempt {
    let seed = w.seed;
    let sim = SimStorage::new(seed);
    sim.watch_thread(FLUSHER);
    match point {
        Point::Op(op) => sim.crash_at(op),
        Point::FlusherOp(n) => sim.crash_at_watched_op(n),
    }
    let run = execute(w, &sim);
    let mut tally = Tally::default();
    let context = format!("workload seed {seed:#x} {point}");
    for problem in &run.problems {
        tally.fail(format!("{context}: {problem}"));
    }
    for violation in sim.violations() {
        tally.fail(format!("{context}: write-ahead violation: {violation}"));
    }
    let Some(landed) = sim.crash_point() else {
        // The run ended before the crash point: no crash state.
        tally.unreached += 1;
        return Attempt {
            landed: None,
            tally,
        };
    };
    tally.spares_used = run.spares_used;
    let acked: Vec<u64> = run.logs.iter().map(Log::acked).collect();
    let submitted: Vec<u64> = run.logs.iter().map(Log::submitted).collect();
    for (damage, salt) in DAMAGE_VARIANTS {
        let disk = sim.power_cut_salted(damage, salt);
        let (verdict, state) = verify_recovery_with(
            &disk,
            &w.options,
            &|txn_id, model| {
                let acks_survive = !w.buffered || damage == Damage::KeepAll;
                judge(w, &run.logs, acks_survive, txn_id, model)
            },
            damage == Damage::KeepAll,
        );
        tally.record(&verdict, || {
            format!(
                "{context} ({:?} on {}: {}) {damage:?} salt {salt}: acked {acked:?}, \
                 submitted {submitted:?}, recovered {:?}",
                landed.op,
                landed
                    .thread
                    .as_deref()
                    .unwrap_or("the thread that opens and closes"),
                landed.what,
                state.map(|(_, model)| w.counts(&model))
            )
        });
    }
    Attempt {
        landed: Some(landed),
        tally,
    }
}

/// The flusher step an operation belongs to, by what it changes: reads, listings and
/// opens of those files count as "other", so a step is covered only by crash points
/// inside its writes.
fn step(point: &CrashPoint) -> &'static str {
    let what = &point.what;
    let op = what.split_whitespace().next().unwrap_or("");
    let changes = matches!(
        op,
        "write_at" | "sync_data" | "allocate" | "truncate" | "rename" | "remove" | "sync_dir"
    );
    if !changes {
        "other"
    } else if what.contains(DATA_FILE) {
        if op == "sync_data" {
            "data syncs"
        } else {
            "data writes"
        }
    } else if what.contains("header") {
        "header writes"
    } else if what.contains(".spare") || (op == "sync_dir" && what.contains("\"journal\"")) {
        "spare journals"
    } else if what.contains(".journal") && matches!(op, "remove" | "rename") {
        "journal retirements"
    } else {
        "other"
    }
}

/// Crash points of one kind, sampled until enough were reached.
#[derive(Default)]
struct Sampled {
    tally: Tally,
    reached: u64,
    /// Reached points on the flusher thread, by step.
    flusher_steps: BTreeMap<&'static str, u64>,
}

/// Runs attempts `0, 1, ...` on the worker threads until `quota` reached their crash point
/// (or `4 * quota + 20` ran).
fn until_reached(quota: u64, attempt: impl Fn(u64) -> Attempt + Sync) -> Sampled {
    let next = AtomicU64::new(0);
    let reached = AtomicU64::new(0);
    let total = std::sync::Mutex::new(Sampled::default());
    let max_attempts = 4 * quota + 20;
    std::thread::scope(|s| {
        for _ in 0..crash_support::workers() {
            s.spawn(|| {
                let mut mine = Sampled::default();
                while reached.load(Ordering::SeqCst) < quota {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= max_attempts {
                        break;
                    }
                    let a = attempt(i);
                    mine.tally.merge(a.tally);
                    if let Some(point) = a.landed {
                        reached.fetch_add(1, Ordering::SeqCst);
                        mine.reached += 1;
                        if point.thread.as_deref() == Some(FLUSHER) {
                            *mine.flusher_steps.entry(step(&point)).or_default() += 1;
                        }
                    }
                }
                let mut total = total.lock().expect("sample lock");
                total.tally.merge(mine.tally);
                total.reached += mine.reached;
                for (k, v) in mine.flusher_steps {
                    *total.flusher_steps.entry(k).or_default() += v;
                }
            });
        }
    });
    total.into_inner().expect("sample lock")
}

/// Workload `i` (half of them with the background flusher, a quarter with a buffered
/// journal), checked uncrashed, with the operation counts of its dry run (all, and the
/// flusher thread's).
fn workload(base: u64, i: u64) -> (Workload, u64, u64, Run) {
    let seed = (mix(base ^ i.wrapping_mul(0x9E37_79B9)) & !3) | (i & 3);
    let w = Workload::generate(seed);
    let sim = SimStorage::new(seed);
    sim.watch_thread(FLUSHER);
    let run = execute(&w, &sim);
    let all = w.per_round * ROUNDS;
    assert!(
        run.problems.is_empty() && !sim.is_frozen(),
        "workload seed {seed:#x}, uncrashed: {:?}",
        run.problems
    );
    assert!(
        run.logs.iter().all(|l| l.acked() == all),
        "workload seed {seed:#x}: not every batch was acknowledged"
    );
    assert!(
        sim.violations().is_empty(),
        "workload seed {seed:#x}: {:?}",
        sim.violations()
    );
    // After a clean close everything is there, even if power goes.
    let (verdict, state) = verify_recovery_with(
        &sim.power_cut(Damage::DropAll),
        &w.options,
        &|txn_id, model| judge(&w, &run.logs, true, txn_id, model),
        false,
    );
    assert!(
        verdict.is_good(),
        "workload seed {seed:#x}, after a clean close: {verdict:?} {:?}",
        state.map(|(_, m)| w.counts(&m))
    );
    let (ops, flusher_ops) = (sim.ops_count(), sim.watched_ops_count());
    (w, ops, flusher_ops, run)
}

#[test]
fn power_loss_during_merged_commits_and_flusher_steps() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    let scale = common::scale();
    let workloads: Vec<(Workload, u64, u64, Run)> =
        (0..WORKLOADS * scale).map(|i| workload(base, i)).collect();
    let (requests, transactions, pipelined) =
        workloads
            .iter()
            .fold((0, 0, 0), |(r, t, p), (_, _, _, run)| {
                (
                    r + run.merged_requests,
                    t + run.merged_transactions,
                    p + run.pipelined_commits,
                )
            });
    // The workloads exercise what they are about.
    assert!(
        transactions < requests,
        "no requests were merged: {requests} requests in {transactions} transactions"
    );
    assert!(pipelined > 0, "no commit was pipelined");
    let quiet: Vec<_> = workloads.iter().filter(|w| !w.0.background).collect();
    let background: Vec<_> = workloads.iter().filter(|w| w.0.background).collect();

    // Reached crash points needed, split between the three kinds of crash point.
    let variants = DAMAGE_VARIANTS.len() as u64;
    let points = (CRASH_STATES * scale).div_ceil(variants);
    let quotas = [
        points * 2 / 5,
        points * 3 / 10,
        points - points * 2 / 5 - points * 3 / 10,
    ];
    let pick = |set: &[&(Workload, u64, u64, Run)], i: u64, salt: u64, flusher: bool| {
        let (w, ops, flusher_ops, _) = set[(i % set.len() as u64) as usize];
        let range = if flusher { *flusher_ops } else { *ops };
        let n = Rng::new(w.seed ^ mix(i ^ salt)).below(range.max(1));
        let point = if flusher {
            Point::FlusherOp(n)
        } else {
            Point::Op(n)
        };
        crash_case(w, point)
    };
    let merged = until_reached(quotas[0], |i| pick(&quiet, i, 0x51, false));
    let racy = until_reached(quotas[1], |i| pick(&background, i, 0x52, false));
    let flusher = until_reached(quotas[2], |i| pick(&background, i, 0x53, true));

    let mut tally = Tally::default();
    let mut reached = 0;
    let mut on_flusher: BTreeMap<&'static str, u64> = BTreeMap::new();
    for sampled in [merged, racy, flusher] {
        tally.merge(sampled.tally);
        reached += sampled.reached;
        for (k, v) in sampled.flusher_steps {
            *on_flusher.entry(k).or_default() += v;
        }
    }
    let flusher_points: u64 = on_flusher.values().sum();
    let steps = on_flusher
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let line = format!(
        "crash-merged: {} crash states ({reached} crash points reached, {} sampled past the \
         end of their run skipped; {flusher_points} at the flusher thread's own steps: \
         {steps}; {} workloads of 3-4 threads, {} with the background flusher and {} with a \
         buffered journal, whose uncrashed runs merged {requests} requests into \
         {transactions} transactions and pipelined {pipelined} commits; {} spare journals \
         used before the cuts), {}, seed {base:#x}, {:.1}s",
        tally.states,
        tally.unreached,
        workloads.len(),
        background.len(),
        workloads.iter().filter(|w| w.0.buffered).count(),
        tally.spares_used,
        tally.outcomes(),
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    tally.assert_clean("crash-merged", base);
    assert_eq!(
        tally.states,
        reached * variants,
        "states of unreached points"
    );
    assert!(
        tally.states >= CRASH_STATES * scale,
        "only {} crash states: too many crash points were not reached",
        tally.states
    );
    for needed in [
        "data writes",
        "data syncs",
        "header writes",
        "journal retirements",
        "spare journals",
    ] {
        assert!(
            on_flusher.get(needed).is_some_and(|&n| n > 0),
            "no crash point among the flusher's {needed}: {steps}"
        );
    }
}

/// Replays one crash point (see the module documentation).
#[test]
#[ignore = "replays HRAFN_TEST_SEED and HRAFN_CRASH_OP or HRAFN_CRASH_FLUSHER_OP on demand"]
fn replay() {
    let seed = base_seed(DEFAULT_SEED);
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
    let point = match (var("HRAFN_CRASH_OP"), var("HRAFN_CRASH_FLUSHER_OP")) {
        (Some(op), _) => Point::Op(op),
        (None, Some(n)) => Point::FlusherOp(n),
        (None, None) => panic!("HRAFN_CRASH_OP=<op> or HRAFN_CRASH_FLUSHER_OP=<n>"),
    };
    let w = Workload::generate(seed);
    let attempt = crash_case(&w, point);
    eprintln!("crash point: {:?}", attempt.landed);
    for f in &attempt.tally.failures {
        eprintln!("{f}");
    }
    attempt.tally.assert_clean("replay", seed);
}

/// The oracle itself: it accepts exactly the states it should.
#[test]
fn the_oracle_tells_the_allowed_states_apart() {
    let w = Workload::generate(0x40);
    assert!(!w.background && !w.buffered);
    let mut logs = vec![Log::default(); w.threads()];
    // Thread 0 had batches 0 and 1 acknowledged; then thread 1 submitted its batch 0,
    // which was in flight at the cut.
    logs[0] = Log {
        submitted_at: vec![0, 2],
        acked_at: vec![1, 3],
        synced_before: 0,
    };
    logs[1] = Log {
        submitted_at: vec![4],
        acked_at: vec![],
        synced_before: 0,
    };
    let verdict = |counts: &[u64], acks_survive: bool| {
        let mut all = counts.to_vec();
        all.resize(w.threads(), 0);
        judge(&w, &logs, acks_survive, 0, &w.expected(&all))
    };
    assert!(verdict(&[2, 0], true).is_good());
    assert!(verdict(&[2, 1], true).is_good());
    assert_eq!(verdict(&[1, 0], true), Verdict::Lost { txn_id: 0 });
    assert_eq!(verdict(&[3, 0], true), Verdict::Phantom { txn_id: 0 });
    assert_eq!(verdict(&[2, 2], true), Verdict::Phantom { txn_id: 0 });
    assert_eq!(verdict(&[2, 0, 1], true), Verdict::Phantom { txn_id: 0 });
    // A buffered journal may lose acknowledged batches from the end only.
    assert!(verdict(&[1, 0], false).is_good());
    assert!(verdict(&[0, 0], false).is_good());
    assert!(matches!(verdict(&[1, 1], false), Verdict::Hole { .. }));
    assert!(matches!(verdict(&[0, 1], false), Verdict::Hole { .. }));
    // A flush_and_sync begun after thread 0's first acknowledgement (tick 2) made that
    // batch durable: a buffered journal may lose only the second.
    logs[0].synced_before = 2;
    let verdict = |counts: &[u64], acks_survive: bool| {
        let mut all = counts.to_vec();
        all.resize(w.threads(), 0);
        judge(&w, &logs, acks_survive, 0, &w.expected(&all))
    };
    assert!(verdict(&[1, 0], false).is_good());
    assert_eq!(verdict(&[0, 0], false), Verdict::Lost { txn_id: 0 });
    logs[0].synced_before = 0;
    // Part of a batch.
    let mut counts = vec![0; w.threads()];
    counts[..2].copy_from_slice(&[2, 1]);
    let mut torn = w.expected(&counts);
    let tmp = torn.get_mut("tmp").expect("tmp tree");
    assert!(tmp.remove(&tmp_key(1, 0)).is_some());
    assert!(matches!(
        judge(&w, &logs, true, 0, &torn),
        Verdict::Hole { .. }
    ));
}
