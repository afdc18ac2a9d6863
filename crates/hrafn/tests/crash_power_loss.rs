//! Power loss at every storage operation of many small seeded workloads (commits over
//! several trees, aborts, overflow values, merges, explicit flushes and syncs, long readers,
//! reopens, journal rotation and recycling, data-file growth), each crash state power-cut
//! with several damage variants and reopened. The recovered state must be exactly the
//! state after one transaction between the last acknowledged and the last submitted one,
//! `check` must pass and the write-ahead checker must stay silent.
//!
//! Replay one crash point: `HRAFN_TEST_SEED=<workload seed> HRAFN_CRASH_OP=<op> cargo test
//! --release -p hrafn --test crash_power_loss replay -- --ignored --nocapture`.

mod common;
mod crash_support;

use crash_support::{
    DAMAGE_VARIANTS, Plan, Tally, base_seed, execute, mix, parallel, uncrashed, verify_recovery,
};
use hrafn::storage::sim::{Damage, SimStorage};
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_SEED: u64 = 0x0B5E_55ED_C0FF_EE01;
/// Fewest workloads per CI run (times `HRAFN_TEST_SCALE`).
const WORKLOADS: u64 = 12;
/// Fewest crash states (crash points times damage variants) per CI run (times
/// `HRAFN_TEST_SCALE`).
const CRASH_STATES: u64 = 20_000;
/// Workloads run with the background flusher, and crash points sampled from each.
const RACY_WORKLOADS: u64 = 3;
const RACY_POINTS: u64 = 100;
/// Steps per workload (roughly).
const STEPS: u64 = 60;

/// Crashes `plan` at operation `op`, then power-cuts and verifies every damage variant.
fn crash_case(plan: &Plan, op: u64) -> Tally {
    let mut tally = Tally::default();
    let seed = plan.seed;
    let sim = SimStorage::new(seed);
    sim.crash_at(op);
    let run = execute(plan, Arc::new(sim.clone()));
    if !sim.is_frozen() {
        // With the flusher on its own a run may take fewer operations: that point was never
        // reached, and its end state is no crash state.
        if racy(plan) {
            tally.unreached += 1;
        } else {
            tally.fail(format!(
                "workload seed {seed:#x} op {op}: the run ended before the crash point"
            ));
        }
        return tally;
    }
    tally.spares_used = run.spares_used;
    if let Some(error) = &run.error
        && !run.power_loss
    {
        tally.fail(format!(
            "workload seed {seed:#x} op {op}: the run failed with an error other than the power \
             loss: {error}"
        ));
    }
    for problem in &run.problems {
        tally.fail(format!("workload seed {seed:#x} op {op}: {problem}"));
    }
    for violation in sim.violations() {
        tally.fail(format!(
            "workload seed {seed:#x} op {op}: write-ahead violation: {violation}"
        ));
    }
    for (damage, salt) in DAMAGE_VARIANTS {
        let disk = sim.power_cut_salted(damage, salt);
        let (verdict, _) =
            verify_recovery(&disk, &plan.options, &run.oracle, damage == Damage::KeepAll);
        tally.record(&verdict, || {
            format!(
                "workload seed {seed:#x} op {op} {damage:?} salt {salt} (acked {}, submitted \
                 {}){}",
                run.oracle.acked,
                run.oracle.submitted,
                if racy(plan) {
                    " with the background flusher (replays may differ)"
                } else {
                    ""
                }
            )
        });
    }
    tally
}

/// Whether `plan` lets the flusher thread run on its own timer (not exactly replayable).
fn racy(plan: &Plan) -> bool {
    plan.options.flush_interval_ms < 1_000
}

/// Workload `w` with the flusher running on its own every millisecond, syncing at once and
/// making spare journals, as in production but faster: crash points are sampled, and a
/// run's operations depend on thread timing, so a seed replays only approximately.
fn racy_workload(base: u64, w: u64) -> (Plan, u64) {
    let mut plan = Plan::generate(mix(base ^ w ^ 0x0BAC_46A0), STEPS);
    plan.options.flush_interval_ms = 1;
    plan.options.sync_interval_ms = 0;
    // Spare journals too, made by the flusher while commits rotate through small files.
    // Every other workload syncs only when its steps say so or journals pile up, so that
    // few journals retire and rotations mostly move into spares.
    plan.options.journal_spare_files = 2;
    if w % 2 == 1 {
        plan.options.sync_interval_ms = 3_600_000;
    }
    let sim = SimStorage::new(plan.seed);
    let run = execute(&plan, Arc::new(sim.clone()));
    assert!(
        run.error.is_none() && run.problems.is_empty(),
        "workload seed {:#x} with the background flusher: {:?} {:?}",
        plan.seed,
        run.error,
        run.problems
    );
    (plan, sim.ops_count())
}

/// Generates workload `w`, checks that it replays the same operations, and returns it with
/// its operation count.
fn workload(base: u64, w: u64) -> (Plan, u64) {
    let plan = Plan::generate(mix(base ^ w), STEPS);
    let seed = plan.seed;
    let (run, sim, trace) = uncrashed(&plan);
    assert!(
        run.error.is_none() && run.problems.is_empty(),
        "workload seed {seed:#x}: the uncrashed run failed: {:?} {:?}",
        run.error,
        run.problems
    );
    assert!(
        sim.violations().is_empty(),
        "workload seed {seed:#x}: {:?}",
        sim.violations()
    );
    let (_, again, trace_again) = uncrashed(&plan);
    assert_eq!(
        trace, trace_again,
        "workload seed {seed:#x}: the same seed issued different operations"
    );
    assert_eq!(sim.ops_count(), again.ops_count());
    // After a clean close everything acknowledged is there, even if power goes.
    let (verdict, _) = verify_recovery(
        &sim.power_cut(Damage::DropAll),
        &plan.options,
        &run.oracle,
        false,
    );
    assert!(
        matches!(verdict, crash_support::Verdict::Good { txn_id } if txn_id == run.oracle.acked),
        "workload seed {seed:#x}: after a clean close: {verdict:?}"
    );
    (plan, sim.ops_count())
}

#[test]
fn power_loss_at_every_operation() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    // At least WORKLOADS workloads, and enough to reach the crash-state target.
    let target = CRASH_STATES * common::scale();
    let variants = DAMAGE_VARIANTS.len() as u64;
    let mut plans = Vec::new();
    let mut points = 0;
    while (plans.len() as u64) < WORKLOADS * common::scale() || points * variants < target {
        let (plan, ops) = workload(base, plans.len() as u64);
        points += ops;
        plans.push((plan, ops));
    }
    let mut starts = Vec::with_capacity(plans.len());
    let mut total = 0;
    for (_, ops) in &plans {
        starts.push(total);
        total += ops;
    }
    let mut tally = parallel(total, |i| {
        let w = starts.partition_point(|&s| s <= i) - 1;
        let (plan, _) = &plans[w];
        crash_case(plan, i - starts[w])
    });
    let deterministic_states = tally.states;
    // Then sampled crash points with the flusher running concurrently.
    let racy_plans: Vec<(Plan, u64)> = (0..RACY_WORKLOADS * common::scale())
        .map(|w| racy_workload(base, w))
        .collect();
    let racy_points = RACY_POINTS * racy_plans.len() as u64;
    let racy = parallel(racy_points, |i| {
        let (plan, ops) = &racy_plans[(i / RACY_POINTS) as usize];
        let op = crash_support::Rng::new(plan.seed ^ i).below(*ops);
        crash_case(plan, op)
    });
    // Crash points fell among rotations into spares, not only into recycled journals.
    let spares_used = racy.spares_used;
    assert!(
        spares_used > 0,
        "no crashed run rotated into a spare journal"
    );
    tally.merge(racy);
    let line = format!(
        "power-loss: {} crash states ({} workloads, {total} crash points; plus {} with the \
         background flusher, whose runs moved into {spares_used} spare journals before the \
         cut, from {} sampled crash points reached and {} skipped as past the end of their \
         run), {}, seed {base:#x}, {:.1}s",
        deterministic_states,
        plans.len(),
        tally.states - deterministic_states,
        (tally.states - deterministic_states) / DAMAGE_VARIANTS.len() as u64,
        tally.unreached,
        tally.outcomes(),
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    tally.assert_clean("power-loss", base);
    assert!(tally.states >= target, "only {} crash states", tally.states);
}

/// Replays one crash point (see the module documentation).
#[test]
#[ignore = "replays HRAFN_TEST_SEED and HRAFN_CRASH_OP on demand"]
fn replay() {
    let seed = base_seed(DEFAULT_SEED);
    let op: u64 = std::env::var("HRAFN_CRASH_OP")
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("HRAFN_CRASH_OP=<operation index>");
    let plan = Plan::generate(seed, STEPS);
    let tally = crash_case(&plan, op);
    for f in &tally.failures {
        eprintln!("{f}");
    }
    tally.assert_clean("replay", seed);
}

/// The operation index of the last trace line that satisfies `pred`.
fn last_op(trace: &[String], pred: impl Fn(&str) -> bool) -> Option<u64> {
    trace
        .iter()
        .rev()
        .find(|line| pred(line))
        .and_then(|line| line.split(':').next())
        .and_then(|index| index.parse().ok())
}

/// Regression (workload seed 0xcfabf0c4c25e857f, crash op 54, `Random` salt 1): a commit
/// whose record did not fit rotated to a new journal and was cut while writing it; the
/// record's header sector landed, part of its payload did not. Recovery ended the log in
/// the previous journal, then found that header at the start of the next one and called it
/// a hole, so the disk never opened again. It is the torn tail.
#[test]
fn torn_record_at_the_start_of_the_next_journal_is_a_torn_tail() {
    use hrafn::error::CorruptionSite;
    use hrafn::journal::record::{RECORD_HEADER_SIZE_BYTES, RecordHeader};
    let seed = 0xcfab_f0c4_c25e_857f;
    let options = crash_support::deterministic_options();
    let mut rng = crash_support::Rng::new(seed);
    let values: Vec<Arc<[u8]>> = (0..12)
        .map(|_| crash_support::value(&mut rng, 12_000))
        .collect();
    let run = |sim: &SimStorage| -> (u64, hrafn::Result<()>) {
        let mut acked = 0;
        let result = (|| {
            let env =
                hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options.clone())?;
            for (i, v) in values.iter().enumerate() {
                let mut wtx = env.begin_write()?;
                wtx.open_tree("t")?
                    .insert(crash_support::key(i as u64), v)?;
                wtx.commit()?;
                acked = i as u64 + 1;
            }
            Ok(())
        })();
        (acked, result)
    };
    let next_journal = "journal/0000000000000000003.journal";
    let sim = SimStorage::new(seed);
    sim.record_trace(true);
    run(&sim).1.expect("uncrashed run");
    // The record write into the next journal comes after its zero-filling.
    let op = last_op(&sim.trace(), |l| {
        l.contains("write_at") && l.contains(next_journal) && l.contains("off=0 ")
    })
    .unwrap_or_else(|| panic!("the workload reaches the next journal: {:#?}", sim.trace()));

    let crashed = SimStorage::new(seed);
    crashed.crash_at(op);
    let (acked, result) = run(&crashed);
    assert!(result.is_err(), "the crash point is inside the workload");
    let disk = crashed.power_cut(Damage::KeepAll);
    let record = disk.read_file(next_journal).expect("next journal");
    let header = RecordHeader::decode(
        &record[..RECORD_HEADER_SIZE_BYTES],
        &CorruptionSite::Environment,
    )
    .expect("the in-flight record's header landed");
    assert_eq!(header.txn_id, acked + 1, "the record is the one in flight");
    // Tear it: one payload sector never reached the disk.
    disk.write_raw(next_journal, 512, &[0u8; 512])
        .expect("tear the payload");

    let env = hrafn::Environment::open_with_storage(Arc::new(disk), options)
        .expect("a torn tail in the next journal opens");
    let (txn_id, model) = crash_support::read_state(&env).expect("read");
    assert_eq!(
        txn_id, acked,
        "every acknowledged commit, nothing of the torn one"
    );
    assert_eq!(model.get("t").map_or(0, |t| t.len() as u64), acked);
    env.check().expect("check");
}

/// Regression (workload seed 0x419f6cb0952173c3, crash ops 15 and 16, `Random`): creating
/// an environment renames its header into place while the directory entries of the data
/// file and of the journal directory are not yet durable; a power cut that keeps the
/// rename and drops them leaves a header naming files that do not exist ("data file
/// missing", "journal: no such file") and the disk never opens again. Every crash point of
/// creation, with several damage draws, must leave a disk that opens empty.
#[test]
fn power_loss_while_creating_leaves_an_openable_disk() {
    let seed = 0x419f_6cb0_9521_73c3;
    let options = crash_support::deterministic_options();
    let sim = SimStorage::new(seed);
    drop(
        hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options.clone())
            .expect("open"),
    );
    let ops = sim.ops_count();
    let mut failures = Vec::new();
    for op in 0..ops {
        for (damage, salt) in DAMAGE_VARIANTS
            .into_iter()
            .chain((4..12).map(|s| (Damage::Random, s)))
        {
            let crashed = SimStorage::new(seed);
            crashed.crash_at(op);
            drop(hrafn::Environment::open_with_storage(
                Arc::new(crashed.clone()),
                options.clone(),
            ));
            let disk = crashed.power_cut_salted(damage, salt);
            match hrafn::Environment::open_with_storage(Arc::new(disk), options.clone()) {
                Ok(env) => {
                    let (txn_id, model) = crash_support::read_state(&env).expect("read");
                    assert!(txn_id == 0 && model.is_empty(), "op {op}: not empty");
                }
                Err(e) => failures.push(format!(
                    "seed {seed:#x} op {op} {damage:?} salt {salt}: {e}"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed opens: {failures:#?}",
        failures.len()
    );
}

/// Regression: `Durability::None` is not crash-safe but keeps a consistent prefix. With
/// buffered journal writes a power loss may keep a later record and drop an earlier one;
/// recovery used to refuse the disk as a hole (workload seed 0x0 op 59 Random salt 2:
/// "valid record of transaction 14 after the end of the log"). Buffered records now carry
/// a flag and never count as a hole.
#[test]
fn buffered_durability_power_loss_keeps_a_prefix() {
    let mut tally = Tally::default();
    for w in 0..4 {
        let mut plan = Plan::generate(mix(w), STEPS);
        plan.options.durability = hrafn::Durability::None;
        let sim = SimStorage::new(plan.seed);
        let run = execute(&plan, Arc::new(sim.clone()));
        assert!(run.error.is_none(), "{:?}", run.error);
        let ops = sim.ops_count();
        for i in 0..100 {
            let op = crash_support::Rng::new(plan.seed ^ i).below(ops);
            let crashed = SimStorage::new(plan.seed);
            crashed.crash_at(op);
            let run = execute(&plan, Arc::new(crashed.clone()));
            for (damage, salt) in DAMAGE_VARIANTS {
                let mut oracle = run.oracle.clone();
                if damage != Damage::KeepAll {
                    // Unsynced commits may be lost; what survives must be a prefix.
                    oracle.acked = oracle.durable_acked;
                }
                let disk = crashed.power_cut_salted(damage, salt);
                let (verdict, _) = verify_recovery(&disk, &plan.options, &oracle, false);
                tally.record(&verdict, || {
                    format!(
                        "workload seed {:#x} op {op} {damage:?} salt {salt}",
                        plan.seed
                    )
                });
            }
        }
    }
    tally.assert_clean("buffered power loss", 0);
}

/// Durability per transaction (`WriteTxn::set_durability`): in a durable environment with
/// a third of the commits non-durable, and in a buffered one with a third durable, a power
/// loss keeps every commit up to the last durable one acknowledged (it syncs what came
/// before it) and a prefix beyond; a process crash (every pending write kept) keeps every
/// acknowledged one. The write-ahead checker stays silent: the flusher syncs buffered
/// records before writing data pages.
#[test]
fn per_transaction_durability_keeps_every_durable_commit() {
    let mut tally = Tally::default();
    let (mut durable_acks, mut buffered_acks) = (0u64, 0u64);
    for w in 0..6 {
        let mut plan = Plan::generate(mix(0xD0_0000 + w), STEPS);
        plan.durability_flip_percent = 33;
        if w % 2 == 1 {
            plan.options.durability = hrafn::Durability::None;
        }
        let (run, sim, _) = uncrashed(&plan);
        assert!(
            run.error.is_none() && run.problems.is_empty(),
            "{:?} {:?}",
            run.error,
            run.problems
        );
        let ops = sim.ops_count();
        for i in 0..120 {
            let op = crash_support::Rng::new(plan.seed ^ i).below(ops);
            let crashed = SimStorage::new(plan.seed);
            crashed.crash_at(op);
            let run = execute(&plan, Arc::new(crashed.clone()));
            for problem in &run.problems {
                tally.fail(format!("workload seed {:#x} op {op}: {problem}", plan.seed));
            }
            for violation in crashed.violations() {
                tally.fail(format!(
                    "workload seed {:#x} op {op}: write-ahead violation: {violation}",
                    plan.seed
                ));
            }
            durable_acks += run.oracle.durable_acked;
            buffered_acks += run.oracle.acked - run.oracle.durable_acked;
            for (damage, salt) in DAMAGE_VARIANTS {
                let mut oracle = run.oracle.clone();
                if damage != Damage::KeepAll {
                    oracle.acked = oracle.durable_acked;
                }
                let disk = crashed.power_cut_salted(damage, salt);
                let (verdict, _) = verify_recovery(&disk, &plan.options, &oracle, false);
                tally.record(&verdict, || {
                    format!(
                        "workload seed {:#x} op {op} {damage:?} salt {salt} (acked {}, durable \
                         {}, submitted {})",
                        plan.seed, run.oracle.acked, run.oracle.durable_acked, run.oracle.submitted
                    )
                });
            }
        }
    }
    // Both kinds of commit were acknowledged before crashes (the test would prove nothing
    // if the flips never happened).
    assert!(
        durable_acks > 0 && buffered_acks > 0,
        "{durable_acks} {buffered_acks}"
    );
    tally.assert_clean("per-transaction durability", 0);
}

/// A commit diffs a page it takes from past the high-water mark against zeros. The engine
/// never writes there, but bytes can lie there all the same (an older version, a tool,
/// damage while closed): opening must empty that tail, or replaying the next commits after
/// a power cut builds their new pages on the leftovers.
#[test]
fn pages_taken_past_the_high_water_mark_replay_onto_zeros() {
    // No flush before the cut: the journal alone carries the second run's commits.
    let options = hrafn::Options::default()
        .flush_interval_ms(3_600_000)
        .sync_interval_ms(3_600_000);
    let sim = SimStorage::new(0x7a11);
    let env = hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options.clone())
        .expect("create");
    let mut batch = hrafn::WriteBatch::new();
    batch.insert("t", b"first", b"run");
    env.write(batch).expect("commit");
    drop(env);

    // Leftovers past every page in use (one key takes a few of the first pages), in the
    // file and past its end.
    let leftovers = vec![0xA5u8; 3 << 19];
    sim.write_raw(hrafn::DATA_FILE, 1 << 19, &leftovers)
        .expect("leftovers");

    let env = hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options.clone())
        .expect("reopen over leftovers");
    let value = |i: u32| vec![(i % 251) as u8; 600];
    // About 2 MiB of new pages, taken from the end of the file through the leftovers.
    for batch in 0..4u32 {
        let mut wtx = env.begin_write().expect("write");
        let mut tree = wtx.open_tree("t").expect("tree");
        for i in batch * 1_000..(batch + 1) * 1_000 {
            tree.insert(i.to_be_bytes(), value(i)).expect("insert");
        }
        wtx.commit().expect("commit");
    }
    let disk = sim.power_cut(Damage::DropAll);
    drop(env);

    let env = hrafn::Environment::open_with_storage(Arc::new(disk), options)
        .expect("recovery replays the second run");
    env.check().expect("every page sound after replay");
    let rtx = env.begin_read().expect("read");
    let tree = rtx.open_tree("t").expect("tree");
    assert_eq!(tree.get(b"first").expect("get"), Some(&b"run"[..]));
    for i in 0..4_000u32 {
        assert_eq!(
            tree.get(i.to_be_bytes()).expect("get"),
            Some(&value(i)[..]),
            "key {i}"
        );
    }
}

/// Opening syncs the data file only when it changed it (a cut tail, replayed pages): after
/// a clean close there is nothing to make durable, and an open pays no `fdatasync`.
#[test]
fn a_clean_reopen_does_not_sync_the_data_file() {
    let sim = SimStorage::new(0xc1ea);
    let options = hrafn::Options::default();
    let env = hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options.clone())
        .expect("create");
    let mut batch = hrafn::WriteBatch::new();
    batch.insert("t", b"k", b"v");
    env.write(batch).expect("commit");
    env.close().expect("clean close");

    sim.record_trace(true);
    let env =
        hrafn::Environment::open_with_storage(Arc::new(sim.clone()), options).expect("reopen");
    let trace = sim.trace();
    drop(env);
    let data_syncs = |trace: &[String]| {
        trace
            .iter()
            .filter(|l| l.contains("sync_data") && l.contains(hrafn::DATA_FILE))
            .count()
    };
    assert!(
        trace.iter().any(|l| l.contains(hrafn::DATA_FILE)),
        "the trace names files: {trace:?}"
    );
    assert_eq!(data_syncs(&trace), 0, "{trace:#?}");
}
