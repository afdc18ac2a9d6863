//! Power loss under appends, on the engine's simulated disk: after any crash and any damage
//! to what was not yet durable, the store opens, its integrity check passes, and every
//! acknowledged append is there whole (the append in flight is there whole or not at all).
//! Also shows the check catches a store whose trees disagree.

use hrafn::storage::Storage;
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Durability, Environment, Options};
use hrafn_timeseries::text::parse_selector;
use hrafn_timeseries::{Labels, Sample, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

type Model = BTreeMap<Labels, BTreeMap<i64, u64>>;

fn options() -> StoreOptions {
    StoreOptions {
        out_of_order_window_ms: 1_000_000,
        environment: Options::default().durability(Durability::Immediate),
    }
}

fn open(sim: &SimStorage) -> hrafn_timeseries::Result<Store> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    Store::with_environment(
        Environment::open_with_storage(storage, options().environment)?,
        options(),
    )
}

fn batch(rng: &mut StdRng, step: u64) -> Vec<(Labels, Sample)> {
    (0..rng.gen_range(1..30))
        .map(|_| {
            let host = format!("h{}", rng.gen_range(0..6));
            let labels =
                Labels::new([("__name__", "load"), ("host", host.as_str())]).expect("labels");
            // Mostly increasing, some behind (kept aside), some repeats (overwrites).
            let t = step as i64 * 1_000 - rng.gen_range(0..3) * 2_000;
            (
                labels,
                Sample {
                    timestamp_ms: t,
                    value: rng.gen_range(0..1000) as f64,
                },
            )
        })
        .collect()
}

fn apply(model: &mut Model, rows: &[(Labels, Sample)]) {
    for (l, s) in rows {
        model
            .entry(l.clone())
            .or_default()
            .insert(s.timestamp_ms, s.value.to_bits());
    }
}

fn stored(store: &Store) -> Model {
    let all = parse_selector("load").expect("selector");
    store
        .select(&all, i64::MIN, i64::MAX)
        .expect("select")
        .into_iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(l, s)| {
            (
                l,
                s.iter()
                    .map(|s| (s.timestamp_ms, s.value.to_bits()))
                    .collect(),
            )
        })
        .collect()
}

/// Runs appends (and a compaction now and then) until the disk loses power at `crash_op`.
/// Returns the model after the acknowledged batches and the batch in flight.
fn run(seed: u64, sim: &SimStorage) -> (Model, Vec<(Labels, Sample)>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let Ok(store) = open(sim) else {
        return (model, Vec::new());
    };
    for step in 0..400u64 {
        let rows = batch(&mut rng, step);
        if store.append_batch(rows.clone()).is_err() {
            return (model, rows);
        }
        apply(&mut model, &rows);
        if step % 97 == 50 && store.compact().is_err() {
            return (model, Vec::new());
        }
    }
    (model, Vec::new())
}

#[test]
fn every_acknowledged_append_survives_power_loss() {
    let seed = 7;
    // A dry run tells how many disk operations the workload takes.
    let dry = SimStorage::new(seed);
    let (full, _) = run(seed, &dry);
    let ops = dry.ops_count();
    assert!(ops > 100 && !full.is_empty(), "{ops} operations");
    let mut states = 0;
    for i in 0..40u64 {
        let crash_op = 1 + i * ops / 40;
        let sim = SimStorage::new(seed);
        sim.crash_at(crash_op);
        let (acked, in_flight) = run(seed, &sim);
        for damage in [Damage::DropAll, Damage::KeepAll, Damage::Random] {
            let disk = sim.power_cut(damage);
            let store =
                open(&disk).unwrap_or_else(|e| panic!("op {crash_op} {damage:?}: open: {e}"));
            let report = store.check().expect("check");
            assert!(
                report.is_ok(),
                "op {crash_op} {damage:?}: {:?}",
                report.problems
            );
            let got = stored(&store);
            let mut with_flight = acked.clone();
            apply(&mut with_flight, &in_flight);
            assert!(
                got == acked || got == with_flight,
                "op {crash_op} {damage:?}: the store holds neither the acknowledged appends nor those plus the one in flight"
            );
            states += 1;
        }
    }
    assert_eq!(states, 120);
}

#[test]
fn the_check_catches_trees_that_disagree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), options()).expect("open");
    let labels = Labels::new([("__name__", "up"), ("job", "node")]).expect("labels");
    let samples: Vec<Sample> = (0..300)
        .map(|i| Sample {
            timestamp_ms: i * 15_000,
            value: i as f64,
        })
        .collect();
    store.append(&labels, &samples).expect("append");
    assert!(store.check().expect("check").is_ok());
    // Drop one index entry behind the store's back.
    let env = store.environment();
    let mut wtx = env.begin_write().expect("begin");
    {
        let mut postings = wtx.open_multi_tree("ts.postings").expect("postings");
        let mut key = b"job\0".to_vec();
        key.extend_from_slice(b"node");
        assert!(postings.remove(&key, 1u64.to_be_bytes()).expect("remove"));
    }
    // And one age-index entry.
    {
        let mut blocks = wtx.open_tree("ts.blocks").expect("blocks");
        let first = blocks
            .iter()
            .expect("iter")
            .next()
            .expect("an entry")
            .expect("read")
            .0
            .to_vec();
        assert!(blocks.remove(&first).expect("remove"));
    }
    wtx.commit().expect("commit");
    let report = store.check().expect("check");
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
}
