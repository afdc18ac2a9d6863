//! Shared machinery of the simulated-disk crash suites: seeded workloads with an oracle of
//! the expected state after every transaction, a deterministic runner, and the recovery
//! check (a reopened disk must hold exactly the state of one transaction between the last
//! acknowledged and the last submitted one).
#![allow(dead_code)]

use hrafn::storage::Storage;
use hrafn::storage::sim::{Damage, POWER_LOSS, SimStorage};
use hrafn::{Durability, Environment, Error, Options, ReadTxn};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Every tree's entries; trees that exist but are empty are present with no entries.
pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Arc<[u8]>>>;

/// The base seed of a suite: `HRAFN_TEST_SEED` (decimal or `0x` hex) or `default`.
pub fn base_seed(default: u64) -> u64 {
    std::env::var("HRAFN_TEST_SEED")
        .ok()
        .and_then(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        })
        .unwrap_or(default)
}

/// Prints a suite's summary line past the test harness's output capture.
pub fn summary(line: &str) {
    crate::common::summary(line);
}

/// How many worker threads a suite uses.
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4)
}

/// splitmix64: small, stable across versions, so a seed replays forever.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(mix(seed ^ 0x6872_6166_6e21))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * u128::from(n);
        (wide >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The splitmix64 finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One change inside a write transaction.
#[derive(Debug, Clone)]
pub enum Mutation {
    Insert {
        tree: String,
        key: Vec<u8>,
        value: Arc<[u8]>,
    },
    Remove {
        tree: String,
        key: Vec<u8>,
    },
    DeleteTree {
        tree: String,
    },
}

impl Mutation {
    /// Applies the change to a model, as the engine applies it to its trees.
    pub fn apply(&self, model: &mut Model) {
        match self {
            Mutation::Insert { tree, key, value } => {
                model
                    .entry(tree.clone())
                    .or_default()
                    .insert(key.clone(), Arc::clone(value));
            }
            Mutation::Remove { tree, key } => {
                // Opening a tree for writing creates it.
                model.entry(tree.clone()).or_default().remove(key);
            }
            Mutation::DeleteTree { tree } => {
                model.remove(tree);
            }
        }
    }
}

/// One step of a workload.
#[derive(Debug, Clone)]
pub enum Step {
    /// A write transaction that commits; `after` is the model once it has.
    Commit {
        mutations: Vec<Mutation>,
        after: Arc<Model>,
    },
    /// A write transaction that makes changes and aborts.
    Abort { mutations: Vec<Mutation> },
    /// `Environment::flush_and_sync`.
    FlushSync,
    /// Starts a read transaction held across later steps.
    BeginReader,
    /// Verifies the oldest held reader against the oracle and ends it.
    EndReader,
    /// Closes the environment (ending the readers) and opens it again.
    Reopen,
}

/// A seeded workload: its steps and the options it runs with.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub options: Options,
    pub steps: Vec<Step>,
    /// Percent of commits that override the environment's durability with the other
    /// kind (`WriteTxn::set_durability`), chosen per step from the seed.
    pub durability_flip_percent: u64,
}

/// Options that make a run deterministic: the flusher thread never wakes on its own (only
/// when the environment closes), so every flush happens at a chosen step, and small
/// journal files so records rotate through and recycle files.
pub fn deterministic_options() -> Options {
    Options::default()
        .journal_file_size_bytes(64 * 1024)
        // Spares are made on the flusher thread's own time, which would not replay.
        .journal_spare_files(0)
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
        .sync_interval_ms(0)
}

pub fn tree_name(i: u64) -> String {
    format!("tree-{i}")
}

/// Key `k`: lengths vary with `k` so nodes fill unevenly.
pub fn key(k: u64) -> Vec<u8> {
    let mut key = format!("key-{k:05}-").into_bytes();
    key.resize(key.len() + (k as usize * 37) % 90, b'a' + (k % 26) as u8);
    key
}

/// A value of `len` bytes: half random (incompressible), half a repeated byte.
pub fn value(rng: &mut Rng, len: usize) -> Arc<[u8]> {
    let mut v = Vec::with_capacity(len);
    let fill = rng.next_u64() as u8;
    while v.len() < len {
        let word = rng.next_u64().to_le_bytes();
        for (i, b) in word.iter().enumerate() {
            if v.len() < len {
                v.push(if (v.len() / 64) % 2 == 0 {
                    *b
                } else {
                    fill ^ i as u8
                });
            }
        }
    }
    v.into()
}

impl Plan {
    /// A workload of commits over two or three trees (small values, overflow values, a
    /// rare value larger than a journal file, bulk inserts that split nodes and bulk
    /// removals that merge them, tree deletions), aborts, explicit flushes, long readers
    /// and reopens. `steps` is roughly the number of steps.
    pub fn generate(seed: u64, steps: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let mut model = Model::new();
        let tree_count = rng.between(2, 3);
        let mut out = Vec::new();
        let mut readers = 0u32;
        let steps = rng.between(steps * 3 / 4, steps * 5 / 4);
        for _ in 0..steps {
            let roll = rng.below(100);
            let step = if roll < 55 {
                let mutations = mutations(&mut rng, &model, tree_count);
                for m in &mutations {
                    m.apply(&mut model);
                }
                Step::Commit {
                    mutations,
                    after: Arc::new(model.clone()),
                }
            } else if roll < 63 {
                Step::Abort {
                    mutations: mutations(&mut rng, &model, tree_count),
                }
            } else if roll < 75 {
                Step::FlushSync
            } else if roll < 83 {
                readers += 1;
                Step::BeginReader
            } else if roll < 92 {
                if readers == 0 {
                    continue;
                }
                readers -= 1;
                Step::EndReader
            } else if roll < 95 {
                readers = 0;
                Step::Reopen
            } else {
                // A bulk change: many inserts (splits) or removing most of a tree (merges).
                let tree = tree_name(rng.below(tree_count));
                let mut mutations = Vec::new();
                let existing: Vec<Vec<u8>> = model
                    .get(&tree)
                    .map(|t| t.keys().cloned().collect())
                    .unwrap_or_default();
                if existing.len() > 40 && rng.chance(60) {
                    for k in existing {
                        if rng.chance(80) {
                            mutations.push(Mutation::Remove {
                                tree: tree.clone(),
                                key: k,
                            });
                        }
                    }
                } else {
                    let n = rng.between(30, 90);
                    let start = rng.below(400);
                    for k in start..start + n {
                        let len = rng.between(20, 200) as usize;
                        mutations.push(Mutation::Insert {
                            tree: tree.clone(),
                            key: key(k),
                            value: value(&mut rng, len),
                        });
                    }
                }
                for m in &mutations {
                    m.apply(&mut model);
                }
                Step::Commit {
                    mutations,
                    after: Arc::new(model.clone()),
                }
            };
            out.push(step);
        }
        Plan {
            seed,
            options: deterministic_options(),
            steps: out,
            durability_flip_percent: 0,
        }
    }
}

fn mutations(rng: &mut Rng, model: &Model, tree_count: u64) -> Vec<Mutation> {
    let n = rng.between(1, 6);
    let mut out = Vec::new();
    for _ in 0..n {
        let tree = tree_name(rng.below(tree_count));
        let roll = rng.below(100);
        if roll < 55 {
            let len = rng.between(1, 300) as usize;
            out.push(Mutation::Insert {
                tree,
                key: key(rng.below(500)),
                value: value(rng, len),
            });
        } else if roll < 70 {
            // Overflow pages; rarely a value larger than a whole journal file.
            let len = if rng.chance(5) {
                rng.between(70_000, 140_000)
            } else {
                rng.between(4_100, 24_000)
            } as usize;
            out.push(Mutation::Insert {
                tree,
                key: key(rng.below(500)),
                value: value(rng, len),
            });
        } else if roll < 97 {
            let existing = model.get(&tree).map_or(0, |t| t.len());
            let key = if existing > 0 && rng.chance(85) {
                let i = rng.below(existing as u64) as usize;
                model[&tree]
                    .keys()
                    .nth(i)
                    .cloned()
                    .expect("index below the length")
            } else {
                key(rng.below(500))
            };
            out.push(Mutation::Remove { tree, key });
        } else {
            out.push(Mutation::DeleteTree { tree });
        }
    }
    out
}

/// What a run of a workload acknowledged and submitted, and the expected state after each
/// transaction id it saw.
#[derive(Debug, Clone)]
pub struct Oracle {
    pub models: BTreeMap<u64, Arc<Model>>,
    /// Last transaction whose commit returned `Ok`.
    pub acked: u64,
    /// Last transaction known durable (with every earlier one): its commit returned `Ok`
    /// once durable, or a `flush_and_sync` or clean close after it returned `Ok`.
    pub durable_acked: u64,
    /// Last transaction whose commit was called.
    pub submitted: u64,
}

impl Default for Oracle {
    fn default() -> Oracle {
        Oracle {
            models: BTreeMap::from([(0, Arc::new(Model::new()))]),
            acked: 0,
            durable_acked: 0,
            submitted: 0,
        }
    }
}

/// The outcome of running a workload.
#[derive(Debug, Default)]
pub struct Run {
    pub oracle: Oracle,
    /// The first error, which ended the run.
    pub error: Option<String>,
    /// Whether that error came from the simulated power loss.
    pub power_loss: bool,
    /// Steps completed.
    pub steps_done: usize,
    /// Problems seen while running (a reader's view changed, a state diverged).
    pub problems: Vec<String>,
    /// Spare journals the writer moved into, summed over the run's environments.
    pub spares_used: u64,
}

/// Whether `e` comes from the simulated power loss (directly or as a poisoning's cause).
pub fn is_power_loss(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.to_string().contains(POWER_LOSS),
        Error::Poisoned { cause } => cause.contains(POWER_LOSS),
        _ => false,
    }
}

/// Runs `plan` on `storage` until it ends or an operation fails.
pub fn execute(plan: &Plan, storage: Arc<dyn Storage>) -> Run {
    let mut run = Run::default();
    let mut at = 0;
    let mut model_before: Arc<Model> = Arc::new(Model::new());
    loop {
        let env = match Environment::open_with_storage(Arc::clone(&storage), plan.options.clone()) {
            Ok(env) => env,
            Err(e) => {
                run.power_loss = is_power_loss(&e);
                run.error = Some(format!("open: {e}"));
                return run;
            }
        };
        // A reopened environment must hold what was acknowledged.
        match read_state(&env) {
            Ok((txn_id, model)) => {
                if txn_id != run.oracle.acked || model != *model_before {
                    run.problems.push(format!(
                        "after a clean reopen: txn {txn_id} where {} was acknowledged, or its \
                         state differs",
                        run.oracle.acked
                    ));
                }
            }
            Err(e) => run.problems.push(format!("reading after a reopen: {e}")),
        }
        let step = segment(plan, &env, &mut at, &mut run, &mut model_before);
        run.spares_used += env.stats().journal_spares_used;
        match step {
            // A clean close makes every acknowledged commit durable.
            Ok(true) => match env.close() {
                Ok(()) => run.oracle.durable_acked = run.oracle.acked,
                Err(e) => {
                    run.power_loss = is_power_loss(&e);
                    run.error = Some(format!("close before step {at}: {e}"));
                    return run;
                }
            },
            Ok(false) => {
                drop(env);
                return run;
            }
            Err(e) => {
                run.power_loss = is_power_loss(&e);
                run.error = Some(format!("step {at}: {e}"));
                drop(env);
                return run;
            }
        }
    }
}

/// Runs steps until a reopen (`Ok(true)`), the end (`Ok(false)`) or an error.
fn segment(
    plan: &Plan,
    env: &Environment,
    at: &mut usize,
    run: &mut Run,
    model_before: &mut Arc<Model>,
) -> hrafn::Result<bool> {
    let mut readers: Vec<ReadTxn<'_>> = Vec::new();
    while *at < plan.steps.len() {
        let step = &plan.steps[*at];
        match step {
            Step::Commit { mutations, after } => {
                let mut wtx = env.begin_write()?;
                let txn_id = wtx.txn_id();
                if mix(plan.seed ^ *at as u64) % 100 < plan.durability_flip_percent {
                    wtx.set_durability(match plan.options.durability {
                        Durability::Immediate => Durability::None,
                        Durability::None => Durability::Immediate,
                    });
                }
                let durable = wtx.durability() == Durability::Immediate;
                apply_mutations(&mut wtx, mutations)?;
                run.oracle.models.insert(txn_id, Arc::clone(after));
                run.oracle.submitted = txn_id;
                wtx.commit()?;
                let committed = env.stats().txn_id;
                if committed == txn_id {
                    run.oracle.acked = txn_id;
                    if durable {
                        run.oracle.durable_acked = txn_id;
                    }
                } else {
                    // Nothing changed: no transaction id was used.
                    run.oracle.models.remove(&txn_id);
                    run.oracle.submitted = run.oracle.acked;
                    if **after != **model_before {
                        run.problems.push(format!(
                            "step {}: a commit that changed the model used no transaction id",
                            *at
                        ));
                    }
                }
                *model_before = Arc::clone(after);
            }
            Step::Abort { mutations } => {
                let mut wtx = env.begin_write()?;
                apply_mutations(&mut wtx, mutations)?;
                wtx.abort();
            }
            // Every acknowledged commit is durable once it returns, non-durable ones too,
            // also while readers keep pages from being written.
            Step::FlushSync => {
                env.flush_and_sync()?;
                run.oracle.durable_acked = run.oracle.acked;
            }
            Step::BeginReader => readers.push(env.begin_read()?),
            Step::EndReader => {
                if !readers.is_empty() {
                    let reader = readers.remove(0);
                    match snapshot(&reader) {
                        Ok((txn_id, model)) => {
                            let expected = run.oracle.models.get(&txn_id);
                            if expected.is_none_or(|m| **m != model) {
                                run.problems.push(format!(
                                    "step {}: a reader of txn {txn_id} sees another state",
                                    *at
                                ));
                            }
                        }
                        Err(e) => run.problems.push(format!("step {}: reader: {e}", *at)),
                    }
                }
            }
            Step::Reopen => {
                *at += 1;
                return Ok(true);
            }
        }
        run.steps_done += 1;
        *at += 1;
    }
    Ok(false)
}

pub fn apply_mutations(wtx: &mut hrafn::WriteTxn<'_>, mutations: &[Mutation]) -> hrafn::Result<()> {
    for m in mutations {
        match m {
            Mutation::Insert { tree, key, value } => {
                wtx.open_tree(tree)?.insert(key, value)?;
            }
            Mutation::Remove { tree, key } => {
                wtx.open_tree(tree)?.remove(key)?;
            }
            Mutation::DeleteTree { tree } => {
                wtx.delete_tree(tree)?;
            }
        }
    }
    Ok(())
}

/// The state a read transaction sees, with its transaction id.
pub fn snapshot(rtx: &ReadTxn<'_>) -> Result<(u64, Model), String> {
    let mut model = Model::new();
    for name in rtx.list_trees().map_err(|e| format!("list_trees: {e}"))? {
        let tree = rtx
            .open_tree(&name)
            .map_err(|e| format!("open_tree {name}: {e}"))?;
        let mut entries = BTreeMap::new();
        for item in tree.iter().map_err(|e| format!("iter {name}: {e}"))? {
            let (k, v) = item.map_err(|e| format!("iterating {name}: {e}"))?;
            entries.insert(k.to_vec(), Arc::<[u8]>::from(v));
        }
        if tree.len() != entries.len() as u64 {
            return Err(format!(
                "tree {name} counts {} entries and holds {}",
                tree.len(),
                entries.len()
            ));
        }
        model.insert(name, entries);
    }
    Ok((rtx.txn_id(), model))
}

/// The latest committed state of `env`.
pub fn read_state(env: &Environment) -> Result<(u64, Model), String> {
    let rtx = env.begin_read().map_err(|e| format!("begin_read: {e}"))?;
    snapshot(&rtx)
}

/// Runs `plan` uncrashed and returns the run and the disk's operation trace.
pub fn uncrashed(plan: &Plan) -> (Run, SimStorage, Vec<String>) {
    let sim = SimStorage::new(plan.seed);
    sim.record_trace(true);
    let run = execute(plan, Arc::new(sim.clone()));
    let trace = sim.trace();
    sim.record_trace(false);
    (run, sim, trace)
}

/// How a recovered disk compared with the oracle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The state of transaction `txn_id`, within the allowed range.
    Good { txn_id: u64 },
    /// The state of a transaction before the last acknowledged one.
    Lost { txn_id: u64 },
    /// The state of a transaction after the last submitted one.
    Phantom { txn_id: u64 },
    /// A state that is no transaction's (partly applied, or damaged).
    Hole { txn_id: u64, detail: String },
    /// Opening failed.
    OpenFailed(String),
    /// Reading or `check` failed.
    CheckFailed(String),
    /// The write-ahead checker saw a broken rule during recovery.
    Violation(String),
    /// The engine panicked.
    Panicked(String),
}

impl Verdict {
    pub fn is_good(&self) -> bool {
        matches!(self, Verdict::Good { .. })
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

/// Compares a recovered state with the oracle.
pub fn judge(oracle: &Oracle, txn_id: u64, model: &Model) -> Verdict {
    if txn_id < oracle.acked {
        return Verdict::Lost { txn_id };
    }
    if txn_id > oracle.submitted {
        return Verdict::Phantom { txn_id };
    }
    match oracle.models.get(&txn_id) {
        Some(m) if **m == *model => Verdict::Good { txn_id },
        Some(m) => Verdict::Hole {
            txn_id,
            detail: describe_difference(m, model),
        },
        None => Verdict::Hole {
            txn_id,
            detail: "no model for this transaction".into(),
        },
    }
}

/// A short description of how `got` differs from `want`.
pub fn describe_difference(want: &Model, got: &Model) -> String {
    for (name, entries) in want {
        match got.get(name) {
            None => return format!("tree {name} missing"),
            Some(g) => {
                for (k, v) in entries {
                    match g.get(k) {
                        None => {
                            return format!("{name}: key {} missing", String::from_utf8_lossy(k));
                        }
                        Some(gv) if gv != v => {
                            return format!(
                                "{name}: key {} has a {}-byte value, want {} bytes",
                                String::from_utf8_lossy(k),
                                gv.len(),
                                v.len()
                            );
                        }
                        Some(_) => {}
                    }
                }
                if let Some(k) = g.keys().find(|k| !entries.contains_key(*k)) {
                    return format!("{name}: unexpected key {}", String::from_utf8_lossy(k));
                }
            }
        }
    }
    if let Some(name) = got.keys().find(|n| !want.contains_key(*n)) {
        return format!("unexpected tree {name}");
    }
    "equal".into()
}

/// Opens `disk`, reads everything, runs `check`, and judges the state against `oracle`.
/// With `continue_writing`, also commits one more transaction on the recovered
/// environment, closes it and checks that a second open sees it.
pub fn verify_recovery(
    disk: &SimStorage,
    options: &Options,
    oracle: &Oracle,
    continue_writing: bool,
) -> (Verdict, Option<(u64, Model)>) {
    verify_recovery_with(
        disk,
        options,
        &|txn_id, model| judge(oracle, txn_id, model),
        continue_writing,
    )
}

/// [`verify_recovery`] with another judge of the recovered state (its transaction id and
/// trees), for workloads whose oracle is not a sequence of transaction ids.
pub fn verify_recovery_with(
    disk: &SimStorage,
    options: &Options,
    judge: &dyn Fn(u64, &Model) -> Verdict,
    continue_writing: bool,
) -> (Verdict, Option<(u64, Model)>) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        verify_inner(disk, options, judge, continue_writing)
    }));
    match result {
        Ok(v) => v,
        Err(p) => (Verdict::Panicked(panic_message(&*p)), None),
    }
}

fn verify_inner(
    disk: &SimStorage,
    options: &Options,
    judge: &dyn Fn(u64, &Model) -> Verdict,
    continue_writing: bool,
) -> (Verdict, Option<(u64, Model)>) {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let env = match Environment::open_with_storage(Arc::clone(&storage), options.clone()) {
        Ok(env) => env,
        Err(e) => return (Verdict::OpenFailed(e.to_string()), None),
    };
    let (txn_id, model) = match read_state(&env) {
        Ok(s) => s,
        Err(e) => return (Verdict::CheckFailed(e), None),
    };
    let verdict = judge(txn_id, &model);
    if !verdict.is_good() {
        return (verdict, Some((txn_id, model)));
    }
    match env.check() {
        Ok(report) => {
            let entries: u64 = model.values().map(|t| t.len() as u64).sum();
            if report.entry_count != entries || report.tree_count != model.len() as u64 {
                return (
                    Verdict::CheckFailed(format!(
                        "check counts {} trees and {} entries, the state has {} and {entries}",
                        report.tree_count,
                        report.entry_count,
                        model.len()
                    )),
                    Some((txn_id, model)),
                );
            }
        }
        Err(e) => return (Verdict::CheckFailed(format!("check: {e}")), None),
    }
    let violations = disk.violations();
    if !violations.is_empty() {
        return (Verdict::Violation(violations.join("; ")), None);
    }
    if continue_writing {
        let extra = Mutation::Insert {
            tree: "after-recovery".into(),
            key: b"k".to_vec(),
            value: Arc::from(&txn_id.to_le_bytes()[..]),
        };
        let step = (|| -> hrafn::Result<u64> {
            let mut wtx = env.begin_write()?;
            let id = wtx.txn_id();
            apply_mutations(&mut wtx, std::slice::from_ref(&extra))?;
            wtx.commit()?;
            Ok(id)
        })();
        let next_id = match step {
            Ok(id) => id,
            Err(e) => {
                return (
                    Verdict::CheckFailed(format!("committing after recovery: {e}")),
                    None,
                );
            }
        };
        drop(env);
        let mut want = model.clone();
        extra.apply(&mut want);
        let env = match Environment::open_with_storage(Arc::clone(&storage), options.clone()) {
            Ok(env) => env,
            Err(e) => {
                return (
                    Verdict::OpenFailed(format!("second open after recovery: {e}")),
                    None,
                );
            }
        };
        match read_state(&env) {
            Ok((id, got)) if id == next_id && got == want => {}
            Ok((id, got)) => {
                return (
                    Verdict::CheckFailed(format!(
                        "after a commit on the recovered environment and a reopen: txn {id} \
                         (want {next_id}), {}",
                        describe_difference(&want, &got)
                    )),
                    None,
                );
            }
            Err(e) => return (Verdict::CheckFailed(format!("second open: {e}")), None),
        }
        if let Err(e) = env.check() {
            return (Verdict::CheckFailed(format!("second check: {e}")), None);
        }
        drop(env);
    } else {
        drop(env);
    }
    let violations = disk.violations();
    if !violations.is_empty() {
        return (Verdict::Violation(violations.join("; ")), None);
    }
    (verdict, Some((txn_id, model)))
}

/// The damage variants every crash state is power-cut with: (variant, salt).
pub const DAMAGE_VARIANTS: [(Damage, u64); 5] = [
    (Damage::DropAll, 0),
    (Damage::KeepAll, 0),
    (Damage::Random, 1),
    (Damage::Random, 2),
    (Damage::Random, 3),
];

/// Counts of a crash suite, printed as its summary line.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub states: u64,
    pub lost: u64,
    pub phantom: u64,
    pub holes: u64,
    pub failed_opens: u64,
    pub check_failures: u64,
    pub violations: u64,
    pub panics: u64,
    pub other: u64,
    /// Spare journals the writer moved into before the crash (coverage, not a verdict).
    pub spares_used: u64,
    /// Sampled crash points a run ended before reaching (no crash state, not a verdict).
    pub unreached: u64,
    pub failures: Vec<String>,
}

impl Tally {
    pub fn record(&mut self, verdict: &Verdict, context: impl FnOnce() -> String) {
        self.states += 1;
        let counter = match verdict {
            Verdict::Good { .. } => return,
            Verdict::Lost { .. } => &mut self.lost,
            Verdict::Phantom { .. } => &mut self.phantom,
            Verdict::Hole { .. } => &mut self.holes,
            Verdict::OpenFailed(_) => &mut self.failed_opens,
            Verdict::CheckFailed(_) => &mut self.check_failures,
            Verdict::Violation(_) => &mut self.violations,
            Verdict::Panicked(_) => &mut self.panics,
        };
        *counter += 1;
        self.note(format!("{}: {verdict:?}", context()));
    }

    /// A failure outside the verdicts (a run that misbehaved).
    pub fn fail(&mut self, message: String) {
        self.other += 1;
        self.note(message);
    }

    /// Keeps a failure message (the first 20) without counting it.
    pub fn note(&mut self, message: String) {
        if self.failures.len() < 20 {
            self.failures.push(message);
        }
    }

    pub fn merge(&mut self, other: Tally) {
        self.states += other.states;
        self.lost += other.lost;
        self.phantom += other.phantom;
        self.holes += other.holes;
        self.failed_opens += other.failed_opens;
        self.check_failures += other.check_failures;
        self.violations += other.violations;
        self.panics += other.panics;
        self.other += other.other;
        self.spares_used += other.spares_used;
        self.unreached += other.unreached;
        for f in other.failures {
            if self.failures.len() < 20 {
                self.failures.push(f);
            }
        }
    }

    pub fn bad(&self) -> u64 {
        self.lost
            + self.phantom
            + self.holes
            + self.failed_opens
            + self.check_failures
            + self.violations
            + self.panics
            + self.other
    }

    /// Prints the failures and panics if there were any.
    /// The bad-outcome counts for a summary line.
    pub fn outcomes(&self) -> String {
        format!(
            "{} lost, {} phantom, {} holes, {} failed opens, {} check failures, {} violations, \
             {} panics, {} other",
            self.lost,
            self.phantom,
            self.holes,
            self.failed_opens,
            self.check_failures,
            self.violations,
            self.panics,
            self.other
        )
    }

    pub fn assert_clean(&self, suite: &str, seed: u64) {
        if self.bad() > 0 {
            for f in &self.failures {
                eprintln!("{suite} failure: {f}");
            }
            panic!(
                "{suite}: {} bad outcomes (base seed {seed:#x}); first: {}",
                self.bad(),
                self.failures.first().map_or("", String::as_str)
            );
        }
    }
}

/// Runs `work(i)` for `i in 0..count` on [`workers`] threads and merges the tallies.
pub fn parallel<F>(count: u64, work: F) -> Tally
where
    F: Fn(u64) -> Tally + Sync,
{
    let next = std::sync::atomic::AtomicU64::new(0);
    let total = std::sync::Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..workers() {
            s.spawn(|| {
                let mut mine = Tally::default();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    mine.merge(work(i));
                }
                total.lock().expect("tally lock").merge(mine);
            });
        }
    });
    total.into_inner().expect("tally lock")
}

/// Power loss at every storage operation of a structure's workload, under every damage
/// variant. `run` replays the workload on a simulated disk (deterministic for `seed`) and
/// returns the state after each commit (the first: before any) and how many commits were
/// acknowledged; `read` reads the state back from a reopened environment. Every recovered
/// state must be one between the last acknowledged commit and the last submitted one, and
/// the integrity check must pass. Returns (crash states, storage operations).
pub fn power_loss_at_every_operation<M: PartialEq + std::fmt::Debug>(
    seed: u64,
    options: &Options,
    run: &dyn Fn(&SimStorage) -> (Vec<M>, usize),
    read: &dyn Fn(&Environment) -> M,
) -> (u64, u64) {
    let dry = SimStorage::new(seed);
    let (models, acked) = run(&dry);
    assert_eq!(
        acked + 1,
        models.len(),
        "the uncrashed workload commits every step"
    );
    let ops = dry.ops_count();
    let mut states = 0;
    for op in 0..ops {
        let sim = SimStorage::new(seed);
        sim.crash_at(op);
        let (models, acked) = run(&sim);
        for (damage, salt) in DAMAGE_VARIANTS {
            let disk = sim.power_cut_salted(damage, salt);
            let env = Environment::open_with_storage(Arc::new(disk), options.clone())
                .unwrap_or_else(|e| panic!("op {op} {damage:?}: reopen failed: {e}"));
            let found = read(&env);
            assert!(
                (acked..models.len()).any(|j| models[j] == found),
                "op {op} {damage:?}: recovered a state that is not one of commits {acked}..{}",
                models.len() - 1
            );
            env.check()
                .unwrap_or_else(|e| panic!("op {op} {damage:?}: check: {e}"));
            states += 1;
        }
    }
    (states, ops)
}

/// Runs `commits` write transactions of `step` on an environment over `sim`, syncing the
/// data file after every `sync_every`-th, and returns the model after each commit (the
/// first: the empty model) and how many were acknowledged. A failure ends the run; one
/// that is not the simulated power loss is printed, since it would be a bug.
pub fn run_commits<M: Clone + Default>(
    sim: &SimStorage,
    options: &Options,
    commits: u64,
    sync_every: u64,
    step: &dyn Fn(&mut hrafn::WriteTxn<'_>, u64, &mut M) -> hrafn::Result<()>,
) -> (Vec<M>, usize) {
    let mut models = vec![M::default()];
    let Ok(env) = Environment::open_with_storage(Arc::new(sim.clone()), options.clone()) else {
        return (models, 0);
    };
    let mut acked = 0;
    for txn in 0..commits {
        let mut model = models.last().expect("model").clone();
        let done = (|| {
            let mut wtx = env.begin_write()?;
            step(&mut wtx, txn, &mut model)?;
            wtx.commit()?;
            if txn % sync_every == sync_every - 1 {
                env.flush_and_sync()?;
            }
            Ok::<(), Error>(())
        })();
        models.push(model);
        if let Err(e) = done {
            if !is_power_loss(&e) {
                summary(&format!("workload failed: {e}"));
            }
            break;
        }
        acked += 1;
    }
    (models, acked)
}
