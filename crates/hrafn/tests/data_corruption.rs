//! Damage to the data file of a cleanly closed environment (nothing left to replay): bit
//! flips in every used page, one page's bytes written at another used page's offset (a
//! misdirected write), and truncation below the high-water mark. Every damage must be
//! detected — the open fails with `Corruption`, or a read or iteration returns
//! `Err(Corruption)`, or `check` fails — and nothing may panic. Truncating only the unused
//! tail must change nothing.

mod common;
mod crash_support;

use crash_support::{Model, Rng, base_seed, key, snapshot};
use hrafn::freespace::{is_free, locate, locate_section, read_entry};
use hrafn::limits::PAGE_SIZE_BYTES;
use hrafn::meta::Meta;
use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{DATA_FILE, Environment, Error, Options};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

const DEFAULT_SEED: u64 = 0x0DA7_AC0E_0000_0001;
const PAGE: u64 = PAGE_SIZE_BYTES as u64;
/// Bit flips per used page.
const FLIPS_PER_PAGE: u64 = 32;
/// Scenarios (environments damaged) per CI run (times `HRAFN_TEST_SCALE`).
const SCENARIOS: u64 = 2;

/// A closed environment to damage.
struct Scenario {
    seed: u64,
    options: Options,
    /// Every file durable; `power_cut` gives identical copies.
    base: SimStorage,
    model: Model,
    /// Pages below the high-water mark that are not free.
    used: Vec<u64>,
    next_page_number: u64,
    data: Vec<u8>,
}

/// Trees with branch levels, overflow values, and free pages left by removals.
fn scenario(seed: u64) -> Scenario {
    let options = crash_support::deterministic_options();
    let sim = SimStorage::new(seed);
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    {
        let env =
            Environment::open_with_storage(Arc::new(sim.clone()), options.clone()).expect("open");
        let mut commit = |f: &mut dyn FnMut(&mut hrafn::WriteTxn<'_>, &mut Model, &mut Rng)| {
            let mut wtx = env.begin_write().expect("write");
            f(&mut wtx, &mut model, &mut rng);
            wtx.commit().expect("commit");
        };
        let insert =
            |wtx: &mut hrafn::WriteTxn<'_>, model: &mut Model, tree: &str, k: u64, v: Arc<[u8]>| {
                wtx.open_tree(tree)
                    .expect("tree")
                    .insert(key(k), &v)
                    .expect("insert");
                model.entry(tree.to_owned()).or_default().insert(key(k), v);
            };
        commit(&mut |wtx, model, rng| {
            for k in 0..600 {
                let len = rng.between(10, 120) as usize;
                insert(wtx, model, "small", k, crash_support::value(rng, len));
            }
        });
        commit(&mut |wtx, model, rng| {
            for k in 0..8 {
                let len = rng.between(5_000, 30_000) as usize;
                insert(wtx, model, "large", k, crash_support::value(rng, len));
            }
            for k in 0..300 {
                let len = rng.between(10, 200) as usize;
                insert(wtx, model, "shrinking", k, crash_support::value(rng, len));
            }
        });
        env.flush_and_sync().expect("sync");
        commit(&mut |wtx, model, _| {
            // Frees pages (bitmap bits) and merges nodes.
            for k in 0..260 {
                wtx.open_tree("shrinking")
                    .expect("tree")
                    .remove(key(k))
                    .expect("remove");
                model.get_mut("shrinking").expect("tree").remove(&key(k));
            }
            wtx.open_tree("large")
                .expect("tree")
                .remove(key(3))
                .expect("remove");
            model.get_mut("large").expect("tree").remove(&key(3));
        });
        env.flush_and_sync().expect("sync");
    }
    let base = sim.power_cut(Damage::KeepAll);
    let data = base.read_file(DATA_FILE).expect("data file");
    let meta = Meta::decode(&data[..PAGE_SIZE_BYTES]).expect("meta page");
    let page = |number: u64| {
        let at = (number * PAGE) as usize;
        &data[at..at + PAGE_SIZE_BYTES]
    };
    let bitmap = |section: u64| {
        let (directory, entry) = locate_section(section);
        let directory_page = meta.directories[directory];
        let entry = read_entry(
            page(directory_page),
            directory_page,
            entry,
            meta.next_page_number,
        )
        .expect("directory entry");
        page(entry.bitmap_page)
    };
    let used: Vec<u64> = (0..meta.next_page_number)
        .filter(|&p| {
            let (section, bit) = locate(p);
            section >= meta.section_count || !is_free(bitmap(section), bit)
        })
        .collect();
    assert!(
        used.len() < meta.next_page_number as usize,
        "seed {seed:#x}: the removals left free pages"
    );
    Scenario {
        seed,
        options,
        base,
        model,
        used,
        next_page_number: meta.next_page_number,
        data,
    }
}

/// How a damaged disk fared.
#[derive(Debug)]
enum Outcome {
    /// Reported as `Corruption` by open, a read or `check`.
    Detected,
    /// Opened, read and checked cleanly, with the right state.
    Clean,
    /// Opened and read cleanly with a different state.
    Silent(String),
    /// Failed with an error that is not `Corruption`.
    WrongError(String),
    Panicked,
}

impl Scenario {
    fn run(&self, damage: impl FnOnce(&SimStorage)) -> Outcome {
        let disk = self.base.power_cut(Damage::KeepAll);
        damage(&disk);
        let before = disk.files();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let env = match Environment::open_with_storage(
                Arc::new(disk.clone()),
                self.options.clone(),
            ) {
                Ok(env) => env,
                Err(e) => {
                    // A failed open must leave every file exactly as it found it.
                    if disk.files() != before {
                        return Ok(Err(format!("the failed open changed files ({e})")));
                    }
                    return Err(e);
                }
            };
            let rtx = env.begin_read()?;
            // Point lookups take other paths through the trees than iteration does.
            for (tree, entries) in &self.model {
                let t = rtx.open_tree(tree)?;
                for (k, v) in entries {
                    if t.get(k)? != Some(&v[..]) {
                        return Ok(Err(format!("{tree}: wrong value")));
                    }
                }
            }
            let state = snapshot(&rtx);
            drop(rtx);
            env.check()?;
            Ok::<_, Error>(match state {
                Ok((_, model)) if model == self.model => Ok(()),
                Ok((_, model)) => Err(crash_support::describe_difference(&self.model, &model)),
                Err(e) => Err(e),
            })
        }));
        match result {
            Err(_) => Outcome::Panicked,
            Ok(Err(Error::Corruption { .. })) => Outcome::Detected,
            Ok(Err(e)) => Outcome::WrongError(e.to_string()),
            Ok(Ok(Ok(()))) => Outcome::Clean,
            // A snapshot error text carries the engine's error; corruption is detection.
            Ok(Ok(Err(e))) if e.contains("corruption") && !e.contains("failed open") => {
                Outcome::Detected
            }
            Ok(Ok(Err(e))) => Outcome::Silent(e),
        }
    }
}

#[derive(Debug, Clone)]
enum Case {
    Flip { page: u64, bit: u64 },
    Misdirect { from: u64, to: u64 },
    Truncate { len: u64, harmful: bool },
}

fn cases(s: &Scenario) -> Vec<Case> {
    let mut rng = Rng::new(s.seed ^ 0xDA7A);
    let mut out = Vec::new();
    let page_bits = PAGE * 8;
    for &page in &s.used {
        // One flip in the page header, the rest anywhere.
        out.push(Case::Flip {
            page,
            bit: rng.below(32 * 8),
        });
        for _ in 1..FLIPS_PER_PAGE {
            out.push(Case::Flip {
                page,
                bit: rng.below(page_bits),
            });
        }
    }
    for (i, &to) in s.used.iter().enumerate() {
        for _ in 0..4 {
            let from = s.used[(i + 1 + rng.below(s.used.len() as u64 - 1) as usize) % s.used.len()];
            if s.data[(from * PAGE) as usize..][..PAGE_SIZE_BYTES]
                != s.data[(to * PAGE) as usize..][..PAGE_SIZE_BYTES]
            {
                out.push(Case::Misdirect { from, to });
            }
        }
    }
    let end = s.next_page_number * PAGE;
    for page in 0..s.next_page_number {
        out.push(Case::Truncate {
            len: page * PAGE,
            harmful: true,
        });
        out.push(Case::Truncate {
            len: page * PAGE + rng.between(1, PAGE - 1),
            harmful: true,
        });
    }
    let file_len = s.data.len() as u64;
    for len in [end, end + PAGE, (end + file_len) / 2, file_len - 1] {
        if len >= end && len < file_len {
            out.push(Case::Truncate {
                len,
                harmful: false,
            });
        }
    }
    out
}

#[derive(Default)]
struct Counts {
    cases: u64,
    flips: u64,
    misdirected: u64,
    truncations: u64,
    harmless: u64,
    detected: u64,
    undetected: u64,
    silent: u64,
    wrong_errors: u64,
    panics: u64,
    failures: Vec<String>,
}

impl Counts {
    fn merge(&mut self, o: Counts) {
        self.cases += o.cases;
        self.flips += o.flips;
        self.misdirected += o.misdirected;
        self.truncations += o.truncations;
        self.harmless += o.harmless;
        self.detected += o.detected;
        self.undetected += o.undetected;
        self.silent += o.silent;
        self.wrong_errors += o.wrong_errors;
        self.panics += o.panics;
        for f in o.failures {
            if self.failures.len() < 20 {
                self.failures.push(f);
            }
        }
    }
}

fn run_case(s: &Scenario, case: &Case) -> Counts {
    let mut c = Counts {
        cases: 1,
        ..Counts::default()
    };
    let harmful = !matches!(case, Case::Truncate { harmful: false, .. });
    let outcome = match case {
        Case::Flip { page, bit } => {
            c.flips += 1;
            s.run(|d| {
                d.flip_bit(DATA_FILE, page * PAGE * 8 + bit)
                    .expect("flip a bit");
            })
        }
        Case::Misdirect { from, to } => {
            c.misdirected += 1;
            let bytes = &s.data[(from * PAGE) as usize..][..PAGE_SIZE_BYTES];
            s.run(|d| d.write_raw(DATA_FILE, to * PAGE, bytes).expect("misdirect"))
        }
        Case::Truncate { len, harmful } => {
            if *harmful {
                c.truncations += 1;
            } else {
                c.harmless += 1;
            }
            s.run(|d| d.truncate_raw(DATA_FILE, *len).expect("truncate"))
        }
    };
    let describe = || format!("seed {:#x} {case:?}", s.seed);
    match (harmful, outcome) {
        (true, Outcome::Detected) => c.detected += 1,
        (false, Outcome::Clean) => {}
        (_, Outcome::Panicked) => {
            c.panics += 1;
            c.failures.push(format!("{}: panicked", describe()));
        }
        (_, Outcome::WrongError(e)) => {
            c.wrong_errors += 1;
            c.failures.push(format!(
                "{}: an error other than Corruption: {e}",
                describe()
            ));
        }
        (true, Outcome::Clean) => {
            c.undetected += 1;
            c.failures.push(format!("{}: not detected", describe()));
        }
        (_, Outcome::Silent(e)) => {
            c.silent += 1;
            c.failures
                .push(format!("{}: wrong data without an error: {e}", describe()));
        }
        (false, Outcome::Detected) => {
            c.wrong_errors += 1;
            c.failures.push(format!(
                "{}: a harmless truncation was called corruption",
                describe()
            ));
        }
    }
    c
}

#[test]
fn every_data_file_damage_is_detected() {
    let started = Instant::now();
    let base = base_seed(DEFAULT_SEED);
    let mut total = Counts::default();
    let mut used_pages = 0;
    for i in 0..SCENARIOS * common::scale() {
        let s = scenario(crash_support::mix(base ^ i));
        used_pages += s.used.len();
        let work = cases(&s);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let merged = std::sync::Mutex::new(Counts::default());
        std::thread::scope(|scope| {
            for _ in 0..crash_support::workers() {
                scope.spawn(|| {
                    let mut mine = Counts::default();
                    loop {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(case) = work.get(j) else {
                            break;
                        };
                        mine.merge(run_case(&s, case));
                    }
                    merged.lock().expect("counts").merge(mine);
                });
            }
        });
        total.merge(merged.into_inner().expect("counts"));
    }
    let harmful = total.flips + total.misdirected + total.truncations;
    let line = format!(
        "data-corruption: {harmful} damages ({} bit flips over {used_pages} used pages, {} \
         misdirected pages, {} truncations), {} detected ({:.1}%), {} undetected, {} silent, \
         {} wrong errors, {} panics; {} harmless tail truncations, seed {base:#x}, {:.1}s",
        total.flips,
        total.misdirected,
        total.truncations,
        total.detected,
        100.0 * total.detected as f64 / harmful.max(1) as f64,
        total.undetected,
        total.silent,
        total.wrong_errors,
        total.panics,
        total.harmless,
        started.elapsed().as_secs_f64()
    );
    crash_support::summary(&line);
    for f in &total.failures {
        eprintln!("data-corruption failure: {f}");
    }
    assert!(
        total.failures.is_empty() && total.detected == harmful,
        "data-corruption: {} of {harmful} damages not detected or mishandled (base seed \
         {base:#x}); first: {}",
        harmful - total.detected,
        total.failures.first().map_or("", String::as_str)
    );
    assert!(
        harmful >= 1_000 * SCENARIOS * common::scale(),
        "only {harmful} damages"
    );
}
