//! Damage to the journal records recovery must replay: a bit flipped at every byte, a
//! zeroed 512-byte sector at every sector, and every sector replaced by an older
//! generation's bytes at the same offset (the file's content before it was recycled, and
//! the other journal's). The records span two recycled journal files, across a rotation.
//!
//! Expected, from which records the damage touched (header or payload bytes; padding is
//! not covered by any checksum and is harmless): undamaged → every commit; the first
//! damaged record followed by an intact later one → `Err(Corruption)` (a hole); the first
//! damaged record is the last one → exactly the commits before it (a torn tail). Never a
//! panic, never a partly applied record.

mod common;
mod crash_support;

use crash_support::{Model, Rng, Tally, base_seed, key, read_state};
use hrafn::error::CorruptionSite;
use hrafn::journal::journal_file_name;
use hrafn::journal::record::{RECORD_HEADER_SIZE_BYTES, RecordHeader};
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Environment, Error, Options};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_SEED: u64 = 0x0000_10E5_C0EE_0001;
const SECTOR: u64 = 512;

/// Bytes written over a file: (file, offset, new bytes).
type Change = (String, u64, Vec<u8>);

/// One record on the base disk.
#[derive(Debug, Clone)]
struct Rec {
    file: String,
    offset: u64,
    /// Header and payload: the bytes checksums cover.
    covered: u64,
    size: u64,
    txn_id: u64,
}

/// The disk to damage and everything known about it.
struct Scenario {
    seed: u64,
    options: Options,
    /// Every file durable, nothing pending; `power_cut` gives identical copies.
    base: SimStorage,
    /// The records recovery replays, in order.
    replayed: Vec<Rec>,
    /// Records before the sync point, in the same files (covered by the header).
    synced: Vec<Rec>,
    /// Expected state after each transaction id.
    models: BTreeMap<u64, Model>,
    /// Content of each journal file before it was recycled into its current name.
    old_generation: BTreeMap<String, Vec<u8>>,
    /// Current content of each journal file holding records.
    current: BTreeMap<String, Vec<u8>>,
}

fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn journal_numbers(sim: &SimStorage) -> Vec<u64> {
    sim.file_names()
        .iter()
        .filter_map(|n| {
            n.strip_prefix("journal/")?
                .strip_suffix(".journal")?
                .parse()
                .ok()
        })
        .collect()
}

/// The records of journal `number` on `sim`, walked from offset 0.
fn records(sim: &SimStorage, number: u64) -> Vec<Rec> {
    let name = journal_file_name(number);
    let Ok(bytes) = sim.read_file(&name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut offset = 0usize;
    while offset + RECORD_HEADER_SIZE_BYTES <= bytes.len() {
        let Ok(h) = RecordHeader::decode(
            &bytes[offset..offset + RECORD_HEADER_SIZE_BYTES],
            &CorruptionSite::Environment,
        ) else {
            break;
        };
        if h.journal_number != number {
            break;
        }
        out.push(Rec {
            file: name.clone(),
            offset: offset as u64,
            covered: RECORD_HEADER_SIZE_BYTES as u64 + h.payload_size_bytes,
            size: h.record_size_bytes,
            txn_id: h.txn_id,
        });
        offset += h.record_size_bytes as usize;
    }
    out
}

/// Builds the scenario: big commits fill journal 2 and spill into 3; a sync retires 2;
/// big commits fill 3 and rotate into 4 (journal 2's file, recycled); another sync retires
/// 3; small commits fill the rest of 4 and rotate into 5 (journal 3's file, recycled).
/// The small commits after the last sync are what recovery replays.
fn scenario(seed: u64) -> Scenario {
    let options = crash_support::deterministic_options();
    let sim = SimStorage::new(seed);
    let env = Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut models = BTreeMap::from([(0u64, Model::new())]);
    let mut old_generation = BTreeMap::new();
    let mut k = 0u64;
    let mut commit = |rng: &mut Rng, len: usize, count: u64| {
        let mut wtx = env.begin_write().expect("write");
        let txn_id = wtx.txn_id();
        for _ in 0..count {
            let value: Arc<[u8]> = random_bytes(rng, len).into();
            wtx.open_tree("t")
                .expect("tree")
                .insert(key(k % 500), &value)
                .expect("insert");
            model
                .entry("t".to_owned())
                .or_default()
                .insert(key(k % 500), value);
            k += 1;
        }
        wtx.commit().expect("commit");
        models.insert(txn_id, model.clone());
    };
    let has = |sim: &SimStorage, n: u64| journal_numbers(sim).contains(&n);
    while !has(&sim, 3) {
        commit(&mut rng, 14_000, 1);
    }
    env.flush_and_sync().expect("sync");
    old_generation.insert(
        journal_file_name(4),
        sim.read_file(&journal_file_name(2)).expect("journal 2"),
    );
    while !has(&sim, 4) {
        commit(&mut rng, 14_000, 1);
    }
    // Leave room for a few small records in journal 4.
    while records(&sim, 4)
        .last()
        .is_some_and(|r| r.offset + r.size < 52 * 1024)
    {
        commit(&mut rng, 9_000, 1);
    }
    env.flush_and_sync().expect("sync");
    let synced_txn_id = env.stats().synced_txn_id;
    old_generation.insert(
        journal_file_name(5),
        sim.read_file(&journal_file_name(3)).expect("journal 3"),
    );
    while records(&sim, 5).len() < 2 {
        commit(&mut rng, 40, 3);
    }
    // Power goes before anything else is synced: the records stay the only copy.
    let base = sim.power_cut(Damage::KeepAll);
    drop(env);
    let all: Vec<Rec> = [4, 5].iter().flat_map(|&n| records(&base, n)).collect();
    let (synced, replayed): (Vec<Rec>, Vec<Rec>) =
        all.into_iter().partition(|r| r.txn_id <= synced_txn_id);
    assert!(
        replayed
            .first()
            .is_some_and(|r| r.file == journal_file_name(4))
            && replayed.len() >= 4,
        "seed {seed:#x}: the replayed records span journals 4 and 5: {replayed:?}"
    );
    let current = [4, 5]
        .iter()
        .map(|&n| {
            let name = journal_file_name(n);
            let bytes = base.read_file(&name).expect("journal");
            (name, bytes)
        })
        .collect();
    Scenario {
        seed,
        options,
        base,
        replayed,
        synced,
        models,
        old_generation,
        current,
    }
}

/// What recovery must do after a damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Open, with exactly the state after this transaction.
    State(u64),
    /// Fail with `Error::Corruption`.
    Hole,
}

impl Scenario {
    /// The expectation after `changes` (file, offset, new bytes) are written.
    fn expect(&self, changes: &[(String, u64, Vec<u8>)]) -> Expect {
        let damaged = |r: &Rec| {
            changes.iter().any(|(file, offset, bytes)| {
                let old = &self.current[file];
                *file == r.file
                    && bytes.iter().enumerate().any(|(i, b)| {
                        let at = offset + i as u64;
                        at >= r.offset && at < r.offset + r.covered && old[at as usize] != *b
                    })
            })
        };
        let last = self.replayed.last().expect("records").txn_id;
        match self.replayed.iter().position(damaged) {
            None => Expect::State(last),
            Some(i) if i + 1 < self.replayed.len() => Expect::Hole,
            Some(i) => Expect::State(self.replayed[i].txn_id - 1),
        }
    }

    /// Applies `changes` to a copy of the base disk, recovers, and judges the outcome.
    fn case(&self, what: &str, changes: Vec<Change>, tally: &mut Tally) {
        let expect = self.expect(&changes);
        let disk = self.base.power_cut(Damage::KeepAll);
        for (file, offset, bytes) in &changes {
            disk.write_raw(file, *offset, bytes).expect("damage");
        }
        // Opens expected to fail are the ones whose files to compare (any other failed open
        // is a failure already).
        let before = matches!(expect, Expect::Hole).then(|| disk.files());
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            match Environment::open_with_storage(Arc::new(disk.clone()), self.options.clone()) {
                Ok(env) => {
                    let state = read_state(&env);
                    let check = env.check().map(|_| ());
                    Ok((state, check))
                }
                Err(e) => Err(e),
            }
        }));
        if matches!(outcome, Ok(Err(_)))
            && let Some(before) = before
            && disk.files() != before
        {
            tally.other += 1;
            tally.note(format!(
                "seed {:#x} {what}: the failed open changed files",
                self.seed
            ));
        }
        tally.states += 1;
        let context = || format!("seed {:#x} {what}: expected {expect:?}", self.seed);
        match (expect, outcome) {
            (_, Err(_)) => {
                tally.panics += 1;
                tally.note(format!("{}: panicked", context()));
            }
            (Expect::Hole, Ok(Err(Error::Corruption { .. }))) => {}
            (Expect::Hole, Ok(Ok((state, _)))) => {
                tally.holes += 1;
                tally.note(format!(
                    "{}: opened with txn {:?} despite a hole",
                    context(),
                    state.map(|s| s.0)
                ));
            }
            (_, Ok(Err(e))) => {
                tally.failed_opens += 1;
                tally.note(format!("{}: open failed: {e}", context()));
            }
            (Expect::State(want), Ok(Ok((state, check)))) => match state {
                Ok((txn_id, model)) if txn_id == want && model == self.models[&want] => {
                    if let Err(e) = check {
                        tally.check_failures += 1;
                        tally.note(format!("{}: check: {e}", context()));
                    }
                }
                Ok((txn_id, model)) => {
                    tally.lost += 1;
                    let detail = match self.models.get(&txn_id) {
                        Some(m) => crash_support::describe_difference(m, &model),
                        None => "no such transaction".into(),
                    };
                    tally.note(format!("{}: opened with txn {txn_id}: {detail}", context()));
                }
                Err(e) => {
                    tally.check_failures += 1;
                    tally.note(format!("{}: reading: {e}", context()));
                }
            },
        }
    }

    /// Every record in the damaged files: the synced ones, then the replayed ones.
    fn extents(&self) -> Vec<&Rec> {
        self.synced.iter().chain(self.replayed.iter()).collect()
    }
}

/// One damage to apply to a copy of the base disk.
#[derive(Debug, Clone)]
enum Damaging {
    Flip { file: String, at: u64, bit: u8 },
    ZeroSector { file: String, at: u64 },
    Splice { file: String, at: u64, from: String },
}

fn damages(s: &Scenario) -> Vec<Damaging> {
    let mut rng = Rng::new(s.seed ^ 0xF11B);
    let mut out = Vec::new();
    // Every byte of the records recovery replays; the header bytes and a sample of the
    // rest of the records before the sync point, which recovery must not even read.
    for r in &s.replayed {
        for at in r.offset..r.offset + r.size {
            out.push(Damaging::Flip {
                file: r.file.clone(),
                at,
                bit: rng.below(8) as u8,
            });
        }
    }
    for r in &s.synced {
        let header = r.offset..r.offset + RECORD_HEADER_SIZE_BYTES as u64;
        for at in header
            .chain((r.offset + RECORD_HEADER_SIZE_BYTES as u64..r.offset + r.size).step_by(61))
        {
            out.push(Damaging::Flip {
                file: r.file.clone(),
                at,
                bit: rng.below(8) as u8,
            });
        }
    }
    for r in s.extents() {
        for at in (r.offset..r.offset + r.size).step_by(SECTOR as usize) {
            out.push(Damaging::ZeroSector {
                file: r.file.clone(),
                at,
            });
            for from in s.old_generation.keys().chain(s.current.keys()) {
                if *from != r.file {
                    out.push(Damaging::Splice {
                        file: r.file.clone(),
                        at,
                        from: from.clone(),
                    });
                }
            }
            out.push(Damaging::Splice {
                file: r.file.clone(),
                at,
                from: format!("old:{}", r.file),
            });
        }
    }
    out
}

/// What `d` writes, with a description; `None` when the source has no such sector.
fn changes(s: &Scenario, d: &Damaging) -> Option<(String, Vec<Change>)> {
    match d {
        Damaging::Flip { file, at, bit } => {
            let old = s.current[file][*at as usize];
            Some((
                format!("bit {bit} of byte {at} of {file}"),
                vec![(file.clone(), *at, vec![old ^ (1 << bit)])],
            ))
        }
        Damaging::ZeroSector { file, at } => Some((
            format!("zeroed sector at byte {at} of {file}"),
            vec![(file.clone(), *at, vec![0; SECTOR as usize])],
        )),
        Damaging::Splice { file, at, from } => {
            let source = match from.strip_prefix("old:") {
                Some(name) => &s.old_generation[name],
                None => &s.current[from],
            };
            let start = *at as usize;
            let bytes = source.get(start..start + SECTOR as usize)?;
            Some((
                format!("sector at byte {at} of {file} from {from}"),
                vec![(file.clone(), *at, bytes.to_vec())],
            ))
        }
    }
}

#[test]
fn every_journal_damage_is_a_clean_prefix_or_a_hole() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    let mut tally = Tally::default();
    let mut counts = (0u64, 0u64, 0u64);
    // Holes, torn tails, harmless (padding or before the sync point).
    let mut expected = (0u64, 0u64, 0u64);
    for i in 0..common::scale() {
        let s = scenario(crash_support::mix(base ^ i));
        // The undamaged disk recovers everything.
        s.case("no damage", Vec::new(), &mut tally);
        let mut work = Vec::new();
        for d in damages(&s) {
            let Some((what, change)) = changes(&s, &d) else {
                continue;
            };
            match d {
                Damaging::Flip { .. } => counts.0 += 1,
                Damaging::ZeroSector { .. } => counts.1 += 1,
                Damaging::Splice { .. } => counts.2 += 1,
            }
            let last = s.replayed.last().expect("records").txn_id;
            match s.expect(&change) {
                Expect::Hole => expected.0 += 1,
                Expect::State(t) if t < last => expected.1 += 1,
                Expect::State(_) => expected.2 += 1,
            }
            work.push((what, change));
        }
        tally.merge(crash_support::parallel(work.len() as u64, |j| {
            let mut t = Tally::default();
            let (what, change) = &work[j as usize];
            s.case(what, change.clone(), &mut t);
            t
        }));
    }
    let line = format!(
        "journal-corruption: {} damaged journals ({} bit flips, {} zeroed sectors, {} \
         old-generation sectors; {} holes, {} torn tails, {} harmless), {} applied wrongly, {} \
         undetected holes, {} failed opens, {} check failures, {} failed opens that changed files, {} \
         panics, seed {base:#x}, \
         {:.1}s",
        tally.states,
        counts.0,
        counts.1,
        counts.2,
        expected.0,
        expected.1,
        expected.2,
        tally.lost,
        tally.holes,
        tally.failed_opens,
        tally.check_failures,
        tally.other,
        tally.panics,
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    tally.assert_clean("journal-corruption", base);
}
