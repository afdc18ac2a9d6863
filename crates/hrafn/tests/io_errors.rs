//! I/O errors at every storage operation of a workload: the operation fails with `EIO`,
//! `ENOSPC` (once, or it and every later operation of its class) or `EINTR` (once). Every
//! API call must return `Ok` or a clean error of the right kind (never a panic, never
//! `Corruption`); `EINTR` on a read or write must be retried invisibly; after a commit or
//! `flush_and_sync` fails on a sync or a journal write, writes must return `Poisoned`.
//! Then the faults are cleared and the disk reopened as it is (a process restart) and after
//! a power cut: every acknowledged commit must be there, nothing unsubmitted, `check` must
//! pass.

mod common;
mod crash_support;

use crash_support::{
    Model, Oracle, Plan, Step, Tally, apply_mutations, base_seed, mix, snapshot, verify_recovery,
};
use hrafn::storage::sim::{Damage, Fault, SimStorage};
use hrafn::{Environment, Error, ReadTxn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const DEFAULT_SEED: u64 = 0x0010_E550_0000_0001;
/// Writes refused with `Poisoned` where the rules demanded it, and API errors seen, over
/// every run (for the summary line).
static POISON_CHECKS: AtomicU64 = AtomicU64::new(0);
static API_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Workloads per CI run (times `HRAFN_TEST_SCALE`).
const WORKLOADS: u64 = 2;
const STEPS: u64 = 40;
/// Each fault, once or persistent.
const FAULTS: [(Fault, bool); 5] = [
    (Fault::Eio, false),
    (Fault::Eio, true),
    (Fault::Enospc, false),
    (Fault::Enospc, true),
    (Fault::Eintr, false),
];

/// The operation class of a trace line (`"12: write_at ..."`), as `SimStorage` groups them.
fn class(line: &str) -> &'static str {
    let method = line.split_whitespace().nth(1).unwrap_or("");
    match method {
        "read_at" | "len" | "map" | "exists" | "list" => "read",
        "write_at" | "allocate" | "truncate" => "write",
        "sync_data" | "sync_dir" => "sync",
        _ => "namespace",
    }
}

fn method(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or("")
}

/// The injected fault and the trace of the run it is injected into.
struct Injection<'a> {
    sim: &'a SimStorage,
    at: u64,
    fault: Fault,
    persistent: bool,
}

impl Injection<'_> {
    /// The first operation in `from..to` the fault made fail, with its trace line.
    fn failing_op(&self, from: u64, to: u64) -> Option<(u64, String)> {
        let trace = self.sim.trace();
        let at_line = trace.get(self.at as usize)?.clone();
        (from..to).find_map(|i| {
            let line = trace.get(i as usize)?;
            let hit = i == self.at
                || (self.persistent
                    && self.fault != Fault::Eintr
                    && i > self.at
                    && class(line) == class(&at_line));
            hit.then(|| (i, line.clone()))
        })
    }
}

/// What a run under a fault did.
#[derive(Default)]
struct FaultRun {
    oracle: Oracle,
    problems: Vec<String>,
    /// API errors seen.
    errors: u64,
    /// Writes refused with `Poisoned` where the rules demand it.
    poison_checks: u64,
    /// Whether the next write must be refused with `Poisoned`.
    must_poison: bool,
    first_error_seen: bool,
}

impl FaultRun {
    /// Judges an error returned by the API call that ran operations `from..to`.
    fn error(&mut self, inj: &Injection<'_>, call: &str, from: u64, to: u64, e: &Error) {
        self.errors += 1;
        if e.is_corruption() {
            self.problems
                .push(format!("{call}: an I/O fault reported as corruption: {e}"));
        }
        let Some((op, line)) = inj.failing_op(from, to) else {
            if !matches!(e, Error::Poisoned { .. }) {
                self.problems.push(format!(
                    "{call}: failed without a faulted operation in ops {from}..{to}: {e}"
                ));
            }
            return;
        };
        // The rule: a failed sync, or a failed journal write, poisons. (A commit that fails
        // before its record is written, say growing the data file, need not.)
        let sync = method(&line) == "sync_data" || method(&line) == "sync_dir";
        let journal_write = method(&line) == "write_at" && line.contains("journal/");
        if (sync || journal_write) && (call == "commit" || call == "flush_and_sync") {
            self.must_poison = true;
        }
        if self.first_error_seen || matches!(e, Error::Poisoned { .. }) {
            return;
        }
        self.first_error_seen = true;
        let right_kind = match inj.fault {
            Fault::Enospc => matches!(e, Error::NoSpace { .. }),
            Fault::Eio => {
                matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO))
            }
            Fault::Eintr => {
                if method(&line) == "write_at" || method(&line) == "read_at" {
                    self.problems.push(format!(
                        "{call}: EINTR on op {op} ({line}) was not retried: {e}"
                    ));
                }
                matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::Interrupted)
            }
        };
        if !right_kind {
            self.problems.push(format!(
                "{call}: op {op} ({line}) failed with {:?} and the API reported {e:?}",
                inj.fault
            ));
        }
    }

    /// Checks a `begin_write` result against the poisoning rule.
    fn check_poison<T>(&mut self, result: &Result<T, Error>) {
        if self.must_poison {
            match result {
                Err(Error::Poisoned { .. }) => self.poison_checks += 1,
                Err(e) => self
                    .problems
                    .push(format!("a write after a failed sync or journal write: {e}")),
                Ok(_) => self.problems.push(
                    "a write was accepted after a failed sync or journal write (not poisoned)"
                        .into(),
                ),
            }
        }
    }
}

/// Opens, retrying once (a fault that fired once is gone the second time).
fn open(plan: &Plan, inj: &Injection<'_>, run: &mut FaultRun) -> Option<Environment> {
    for _ in 0..2 {
        let from = inj.sim.ops_count();
        match Environment::open_with_storage(Arc::new(inj.sim.clone()), plan.options.clone()) {
            Ok(env) => {
                // A reopened environment holds what was acknowledged, maybe the failed one.
                match crash_support::read_state(&env) {
                    Ok((txn_id, model)) => {
                        let verdict = crash_support::judge(&run.oracle, txn_id, &model);
                        if !verdict.is_good() {
                            run.problems.push(format!("after a reopen: {verdict:?}"));
                        }
                        // A commit that failed but landed counts as acknowledged now.
                        run.oracle.acked = txn_id;
                        run.oracle.submitted = txn_id;
                    }
                    Err(e) => run.problems.push(format!("reading after a reopen: {e}")),
                }
                return Some(env);
            }
            Err(e) => {
                let to = inj.sim.ops_count();
                run.error(inj, "open", from, to, &e);
            }
        }
    }
    None
}

/// Runs `plan` under the fault, going on after errors.
fn run_with_fault(plan: &Plan, inj: &Injection<'_>) -> FaultRun {
    let mut run = FaultRun::default();
    let mut at = 0;
    let mut model_before: Arc<Model> = Arc::new(Model::new());
    while at < plan.steps.len() {
        let Some(env) = open(plan, inj, &mut run) else {
            return run;
        };
        model_before = Arc::clone(&run.oracle.models[&run.oracle.acked]);
        // A new environment: nothing poisoned yet.
        run.must_poison = false;
        segment(plan, inj, &env, &mut at, &mut run, &mut model_before);
        drop(env);
    }
    let _ = model_before;
    run
}

fn segment(
    plan: &Plan,
    inj: &Injection<'_>,
    env: &Environment,
    at: &mut usize,
    run: &mut FaultRun,
    model_before: &mut Arc<Model>,
) {
    let mut readers: Vec<ReadTxn<'_>> = Vec::new();
    while *at < plan.steps.len() {
        let step = &plan.steps[*at];
        *at += 1;
        let from = inj.sim.ops_count();
        match step {
            Step::Commit { mutations, .. } => {
                let begun = env.begin_write();
                run.check_poison(&begun);
                let mut wtx = match begun {
                    Ok(w) => w,
                    Err(e) => {
                        let to = inj.sim.ops_count();
                        run.error(inj, "begin_write", from, to, &e);
                        continue;
                    }
                };
                let txn_id = wtx.txn_id();
                // Allocating pages may grow the data file, so changes can fail with I/O
                // errors too; the transaction is then dropped (aborted).
                if let Err(e) = apply_mutations(&mut wtx, mutations) {
                    let to = inj.sim.ops_count();
                    run.error(inj, "insert or remove", from, to, &e);
                    continue;
                }
                // The plan's models assume every earlier commit landed; here some failed.
                let mut after = (**model_before).clone();
                for m in mutations {
                    m.apply(&mut after);
                }
                let after = Arc::new(after);
                run.oracle.models.insert(txn_id, Arc::clone(&after));
                run.oracle.submitted = txn_id;
                match wtx.commit() {
                    Ok(()) => {
                        if env.stats().txn_id == txn_id {
                            run.oracle.acked = txn_id;
                        } else {
                            run.oracle.models.remove(&txn_id);
                            run.oracle.submitted = run.oracle.acked;
                        }
                        *model_before = after;
                    }
                    Err(e) => {
                        let to = inj.sim.ops_count();
                        run.error(inj, "commit", from, to, &e);
                    }
                }
            }
            Step::Abort { mutations } => {
                let begun = env.begin_write();
                run.check_poison(&begun);
                match begun {
                    Ok(mut wtx) => {
                        if let Err(e) = apply_mutations(&mut wtx, mutations) {
                            let to = inj.sim.ops_count();
                            run.error(inj, "insert or remove", from, to, &e);
                        }
                        wtx.abort();
                    }
                    Err(e) => {
                        let to = inj.sim.ops_count();
                        run.error(inj, "begin_write", from, to, &e);
                    }
                }
            }
            Step::FlushSync => {
                if let Err(e) = env.flush_and_sync() {
                    let to = inj.sim.ops_count();
                    run.error(inj, "flush_and_sync", from, to, &e);
                }
            }
            Step::BeginReader => match env.begin_read() {
                Ok(r) => readers.push(r),
                Err(e) => {
                    let to = inj.sim.ops_count();
                    run.error(inj, "begin_read", from, to, &e);
                }
            },
            Step::EndReader => {
                if !readers.is_empty() {
                    let reader = readers.remove(0);
                    match snapshot(&reader) {
                        Ok((txn_id, model)) => {
                            if run.oracle.models.get(&txn_id).is_none_or(|m| **m != model) {
                                run.problems
                                    .push(format!("a reader of txn {txn_id} sees another state"));
                            }
                        }
                        Err(e) => run.problems.push(format!("reader: {e}")),
                    }
                }
            }
            Step::Reopen => return,
        }
    }
}

/// Runs one fault variant at operation `at` and checks the reopened disks.
fn fault_case(plan: &Plan, at: u64, fault: Fault, persistent: bool) -> Tally {
    let mut tally = Tally::default();
    let context = |what: &str| {
        format!(
            "workload seed {:#x} op {at} {fault:?}{}: {what}",
            plan.seed,
            if persistent { " persistent" } else { "" }
        )
    };
    let mut final_disks = Vec::new();
    // Twice, identically: one disk is reopened as it is, the other power-cut.
    for power_cut in [false, true] {
        let sim = SimStorage::new(plan.seed);
        sim.record_trace(true);
        sim.fail_at(at, fault, persistent);
        let inj = Injection {
            sim: &sim,
            at,
            fault,
            persistent,
        };
        let run = match catch_unwind(AssertUnwindSafe(|| run_with_fault(plan, &inj))) {
            Ok(run) => run,
            Err(_) => {
                tally.panics += 1;
                tally.note(context("panicked"));
                return tally;
            }
        };
        sim.record_trace(false);
        sim.clear_faults();
        if !power_cut {
            POISON_CHECKS.fetch_add(run.poison_checks, Ordering::Relaxed);
            API_ERRORS.fetch_add(run.errors, Ordering::Relaxed);
            for p in &run.problems {
                tally.fail(context(p));
            }
            tally.states += 1;
        }
        final_disks.push((power_cut, sim, run.oracle));
    }
    for (power_cut, sim, oracle) in final_disks {
        let disks: Vec<(String, SimStorage)> = if power_cut {
            vec![
                ("power cut DropAll".into(), sim.power_cut(Damage::DropAll)),
                (
                    "power cut Random".into(),
                    sim.power_cut_salted(Damage::Random, 5),
                ),
            ]
        } else {
            vec![("reopened as is".into(), sim)]
        };
        for (what, disk) in disks {
            let (verdict, _) = verify_recovery(&disk, &plan.options, &oracle, !power_cut);
            tally.record(&verdict, || {
                context(&format!(
                    "{what} (acked {}, submitted {})",
                    oracle.acked, oracle.submitted
                ))
            });
        }
    }
    tally
}

#[test]
fn io_errors_at_every_operation() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    let mut cases = Vec::new();
    for w in 0..WORKLOADS * common::scale() {
        let plan = Arc::new(Plan::generate(mix(base ^ w), STEPS));
        let sim = SimStorage::new(plan.seed);
        let run = crash_support::execute(&plan, Arc::new(sim.clone()));
        assert!(
            run.error.is_none(),
            "workload seed {:#x}: {:?}",
            plan.seed,
            run.error
        );
        for at in 0..sim.ops_count() {
            for (fault, persistent) in FAULTS {
                cases.push((Arc::clone(&plan), at, fault, persistent));
            }
        }
    }
    let tally = crash_support::parallel(cases.len() as u64, |i| {
        let (plan, at, fault, persistent) = &cases[i as usize];
        fault_case(plan, *at, *fault, *persistent)
    });
    let line = format!(
        "io-errors: {} faulted runs ({} workloads × every op × {} faults; {} API errors, {} \
         writes refused as poisoned), {} reopen checks with {} lost, {} phantom, {} holes, {} \
         failed opens, {} check failures; {} API misbehaviours, {} panics, seed {base:#x}, \
         {:.1}s",
        cases.len(),
        WORKLOADS * common::scale(),
        FAULTS.len(),
        API_ERRORS.load(Ordering::Relaxed),
        POISON_CHECKS.load(Ordering::Relaxed),
        tally.states - cases.len() as u64,
        tally.lost,
        tally.phantom,
        tally.holes,
        tally.failed_opens,
        tally.check_failures,
        tally.other,
        tally.panics,
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    tally.assert_clean("io-errors", base);
}

/// Commits one small transaction on `env`.
fn small_commit(env: &Environment, value: &[u8]) -> hrafn::Result<()> {
    let mut wtx = env.begin_write()?;
    wtx.open_tree("t")?.insert(b"k", value)?;
    wtx.commit()
}

/// ENOSPC reaches the API as `Error::NoSpace`, EIO as `Error::Io` carrying the errno, from a
/// commit (journal write) and from `flush_and_sync` (sync); both poison, and the data
/// acknowledged before is intact after a reopen.
#[test]
fn enospc_is_no_space_and_eio_is_io() {
    let options = crash_support::deterministic_options();
    for fault in [Fault::Enospc, Fault::Eio] {
        let right_kind = |e: &Error| match fault {
            Fault::Enospc => matches!(e, Error::NoSpace { .. }),
            _ => matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO)),
        };
        // A commit whose journal write fails.
        let sim = SimStorage::new(11);
        let env =
            Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
        small_commit(&env, b"acknowledged").expect("commit");
        sim.fail_at(sim.ops_count(), fault, true);
        let e = small_commit(&env, b"failed").expect_err("the journal write fails");
        assert!(right_kind(&e), "{fault:?} from a commit surfaced as {e:?}");
        assert!(
            matches!(env.begin_write(), Err(Error::Poisoned { .. })),
            "{fault:?}: a failed journal write poisons"
        );
        drop(env);
        sim.clear_faults();
        let env =
            Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("reopen");
        let rtx = env.begin_read().expect("read");
        let got = rtx
            .open_tree("t")
            .expect("tree")
            .get(b"k")
            .expect("get")
            .map(<[u8]>::to_vec);
        assert!(
            got.as_deref() == Some(&b"acknowledged"[..]) || got.as_deref() == Some(&b"failed"[..]),
            "{fault:?}: {got:?}"
        );
        drop(rtx);
        drop(env);

        // A flush whose data-file sync fails: find that sync in a twin run's trace.
        let flush_run = |sim: &SimStorage, fault_at: Option<u64>| {
            let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone())
                .expect("open");
            small_commit(&env, b"acknowledged").expect("commit");
            let from = sim.ops_count();
            if let Some(at) = fault_at {
                sim.fail_at(at, fault, false);
            }
            let result = env.flush_and_sync();
            let poisoned = matches!(env.begin_write(), Err(Error::Poisoned { .. }));
            (from, result, poisoned)
        };
        let twin = SimStorage::new(12);
        twin.record_trace(true);
        let (from, result, _) = flush_run(&twin, None);
        result.expect("the twin's flush");
        let sync_at = twin.trace()[from as usize..]
            .iter()
            .find(|l| l.contains("sync_data \"data.hrafn\""))
            .and_then(|l| l.split(':').next()?.parse::<u64>().ok())
            .expect("the flush syncs the data file");
        let sim = SimStorage::new(12);
        let (_, result, poisoned) = flush_run(&sim, Some(sync_at));
        let e = result.expect_err("the data-file sync fails");
        assert!(
            right_kind(&e),
            "{fault:?} from flush_and_sync surfaced as {e:?}"
        );
        assert!(poisoned, "{fault:?}: a failed sync poisons");
        sim.clear_faults();
        let disk = sim.power_cut(Damage::DropAll);
        let env = Environment::open_with_storage(Arc::new(disk), options.clone()).expect("reopen");
        let rtx = env.begin_read().expect("read");
        assert_eq!(
            rtx.open_tree("t").expect("tree").get(b"k").expect("get"),
            Some(&b"acknowledged"[..]),
            "{fault:?}: the acknowledged commit survives a failed flush and a power cut"
        );
    }
}

/// Short writes and short reads (each transfer may move only a prefix) change nothing:
/// the same workloads commit, recover and check exactly as with whole transfers.
#[test]
fn short_transfers_are_transparent() {
    let base = base_seed(DEFAULT_SEED);
    for w in 0..WORKLOADS * common::scale() {
        let plan = Plan::generate(mix(base ^ w ^ 0x5407), STEPS);
        let whole = SimStorage::new(plan.seed);
        let reference = crash_support::execute(&plan, Arc::new(whole.clone()));
        let sim = SimStorage::new(plan.seed);
        sim.short_writes(true);
        sim.short_reads(true);
        let run = crash_support::execute(&plan, Arc::new(sim.clone()));
        assert!(
            run.error.is_none() && run.problems.is_empty(),
            "workload seed {:#x}: {:?} {:?}",
            plan.seed,
            run.error,
            run.problems
        );
        assert_eq!(run.oracle.acked, reference.oracle.acked);
        assert!(
            sim.ops_count() > whole.ops_count(),
            "workload seed {:#x}: no transfer was short",
            plan.seed
        );
        // Recovery with short transfers still on, then after a power cut.
        let (verdict, _) = verify_recovery(&sim, &plan.options, &run.oracle, false);
        assert!(
            matches!(verdict, crash_support::Verdict::Good { txn_id } if txn_id == run.oracle.acked),
            "workload seed {:#x}: {verdict:?}",
            plan.seed
        );
        let (verdict, _) = verify_recovery(
            &sim.power_cut(Damage::DropAll),
            &plan.options,
            &run.oracle,
            false,
        );
        assert!(
            verdict.is_good(),
            "workload seed {:#x} after a power cut: {verdict:?}",
            plan.seed
        );
    }
}
