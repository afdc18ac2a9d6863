//! Power loss during recovery itself. Crashed disks come from seeded workloads cut at spread
//! crash points; each is recovered once cleanly (the reference), then again with power lost
//! at every storage operation of the recovery, power-cut with several damage variants and
//! recovered a third time. The result must be the reference state exactly: recovery is
//! idempotent, whatever part of it reached the disk.

mod common;
mod crash_support;

use crash_support::{
    DAMAGE_VARIANTS, Plan, Tally, Verdict, base_seed, execute, mix, parallel, uncrashed,
    verify_recovery,
};
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Environment, Options};
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_SEED: u64 = 0x0005_EC0D_C4A5_4001;
/// Fewest second-crash states per CI run (times `HRAFN_TEST_SCALE`).
const STATES: u64 = 2_000;
/// Crashed disks drawn from each workload.
const DISKS_PER_WORKLOAD: u64 = 12;
/// Damage of the second power cut.
const SECOND_DAMAGE: [(Damage, u64); 3] = [
    (Damage::DropAll, 0),
    (Damage::KeepAll, 0),
    (Damage::Random, 7),
];

/// A crashed disk: the workload crashed at `op`, cut with (`damage`, `salt`).
struct CrashedDisk {
    plan: Arc<Plan>,
    op: u64,
    damage: Damage,
    salt: u64,
    /// Operations the clean recovery of this disk takes.
    recovery_ops: u64,
    /// The state the clean recovery yields.
    reference: (u64, crash_support::Model),
}

impl CrashedDisk {
    fn describe(&self) -> String {
        format!(
            "workload seed {:#x} op {} {:?} salt {}",
            self.plan.seed, self.op, self.damage, self.salt
        )
    }

    /// The crashed disk, before any recovery (the same every call).
    fn disk(&self) -> SimStorage {
        let sim = SimStorage::new(self.plan.seed);
        sim.crash_at(self.op);
        let _ = execute(&self.plan, Arc::new(sim.clone()));
        sim.power_cut_salted(self.damage, self.salt)
    }
}

/// Crashes `plan` at `op`, recovers cleanly and returns the disk with its reference state.
fn crashed_disk(plan: &Arc<Plan>, op: u64, damage: Damage, salt: u64) -> CrashedDisk {
    let sim = SimStorage::new(plan.seed);
    sim.crash_at(op);
    let run = execute(plan, Arc::new(sim.clone()));
    let disk = sim.power_cut_salted(damage, salt);
    let (verdict, state) = verify_recovery(&disk, &plan.options, &run.oracle, false);
    let reference = match (verdict, state) {
        (Verdict::Good { .. }, Some(state)) => state,
        (verdict, _) => panic!(
            "workload seed {:#x} op {op} {damage:?} salt {salt}: the first recovery failed: \
             {verdict:?}",
            plan.seed
        ),
    };
    // Count the operations of a clean recovery alone.
    let again = sim.power_cut_salted(damage, salt);
    let env = Environment::open_with_storage(Arc::new(again.clone()), plan.options.clone())
        .expect("open");
    let recovery_ops = again.ops_count();
    drop(env);
    CrashedDisk {
        plan: Arc::clone(plan),
        op,
        damage,
        salt,
        recovery_ops,
        reference,
    }
}

/// Crashes the recovery of `disk` at operation `op`, then checks every second damage.
fn second_crash(disk: &CrashedDisk, op: u64, options: &Options) -> Tally {
    let mut tally = Tally::default();
    let first = disk.disk();
    first.crash_at(op);
    match Environment::open_with_storage(Arc::new(first.clone()), options.clone()) {
        Ok(env) => {
            drop(env);
            tally.fail(format!(
                "{} recovery op {op}: recovery succeeded through a power loss",
                disk.describe()
            ));
            return tally;
        }
        Err(e) if e.to_string().contains(hrafn::storage::sim::POWER_LOSS) => {}
        Err(e) => tally.fail(format!(
            "{} recovery op {op}: recovery failed with another error than the power loss: {e}",
            disk.describe()
        )),
    }
    for (damage, salt) in SECOND_DAMAGE {
        let second = first.power_cut_salted(damage, salt);
        let oracle = crash_support::Oracle {
            models: [(disk.reference.0, Arc::new(disk.reference.1.clone()))].into(),
            acked: disk.reference.0,
            durable_acked: disk.reference.0,
            submitted: disk.reference.0,
        };
        let (verdict, _) = verify_recovery(&second, options, &oracle, damage == Damage::KeepAll);
        tally.record(&verdict, || {
            format!(
                "{} recovery op {op} then {damage:?} salt {salt} (reference txn {})",
                disk.describe(),
                disk.reference.0
            )
        });
    }
    tally
}

#[test]
fn power_loss_during_recovery_changes_nothing() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    let target = STATES * common::scale();
    let mut disks = Vec::new();
    let mut states = 0;
    let mut w = 0;
    while states < target {
        let plan = Arc::new(Plan::generate(mix(base ^ w), 40));
        w += 1;
        let (_, sim, _) = uncrashed(&plan);
        let ops = sim.ops_count();
        for k in 0..DISKS_PER_WORKLOAD {
            // Spread over the run, skipping environment creation.
            let op = ops / 8 + (k * 7 + 3) * ops / (DISKS_PER_WORKLOAD * 8);
            let (damage, salt) = DAMAGE_VARIANTS[(k as usize) % DAMAGE_VARIANTS.len()];
            let disk = crashed_disk(&plan, op.min(ops - 1), damage, salt);
            states += disk.recovery_ops * SECOND_DAMAGE.len() as u64;
            disks.push(disk);
        }
    }
    let mut starts = Vec::with_capacity(disks.len());
    let mut total = 0;
    for d in &disks {
        starts.push(total);
        total += d.recovery_ops;
    }
    let tally = parallel(total, |i| {
        let d = starts.partition_point(|&s| s <= i) - 1;
        let disk = &disks[d];
        second_crash(disk, i - starts[d], &disk.plan.options)
    });
    let line = format!(
        "crash-in-recovery: {} second-crash states ({} crashed disks from {w} workloads, {total} \
         recovery crash points), {} diverged, {} failed opens, {} check failures, {} \
         violations, {} panics, {} other, seed {base:#x}, {:.1}s",
        tally.states,
        disks.len(),
        tally.lost + tally.phantom + tally.holes,
        tally.failed_opens,
        tally.check_failures,
        tally.violations,
        tally.panics,
        tally.other,
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    tally.assert_clean("crash-in-recovery", base);
    assert!(tally.states >= target, "only {} states", tally.states);
}

/// Replay reads journals through the page cache, so after a killed process it may see
/// records that are not on disk (commits that skipped the sync). Recovery syncs the
/// journals before it writes a page built from them: otherwise a power cut during the
/// open could keep the pages and lose the records, leaving the data file ahead of a
/// header and journal that no longer explain it.
#[test]
fn recovery_syncs_the_journal_before_writing_replayed_pages() {
    let options = Options::default()
        .durability(hrafn::Durability::None)
        .flush_interval_ms(60_000)
        .sync_interval_ms(60_000);
    let sim = SimStorage::new(11);
    let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
    for i in 0..20u64 {
        let mut batch = hrafn::WriteBatch::new();
        batch.insert("t", i.to_be_bytes(), [i as u8; 100]);
        env.write(batch).expect("commit");
    }
    std::mem::forget(env); // killed: no close
    let disk = sim.power_cut(Damage::KeepAll);
    disk.record_trace(true);
    let env = Environment::open_with_storage(Arc::new(disk.clone()), options).expect("reopen");
    let trace = disk.trace();
    drop(env);
    let first_page_write = trace
        .iter()
        .position(|l| l.contains("write_at") && l.contains(hrafn::DATA_FILE))
        .unwrap_or_else(|| panic!("recovery writes replayed pages: {trace:#?}"));
    assert!(
        trace[..first_page_write]
            .iter()
            .any(|l| l.contains("sync_data") && l.contains("journal/")),
        "no journal sync before the first page write: {trace:#?}"
    );
}
