//! The fuzz targets of `fuzz/` on stable: every target body runs over seeded inputs, made by
//! a small mutator from well-formed seeds (valid records, diffs, pages, workloads) and from
//! random bytes. This is the CI smoke run; `fuzz/README.md` says how to fuzz for hours.
//!
//! A panic anywhere, also in an engine thread, fails the test with the seed and the input
//! in hex (`HRAFN_FUZZ_SEED=0x...` replays a run; `HRAFN_TEST_SCALE` multiplies the counts).
//! Inputs that once crashed a target live in `regressions` below and run every time.

mod common;

#[allow(dead_code)]
#[path = "../../../fuzz/src/targets.rs"]
mod targets;

use hrafn::CorruptionSite;
use hrafn::journal::diff::encode_page;
use hrafn::journal::record::{self, RECORD_HEADER_SIZE_BYTES, RecordHeader};
use hrafn::limits::PAGE_SIZE_BYTES;
use hrafn::page::{self, PageKind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counted by the panic hook: a panic in any thread (the flusher's too) fails the input.
/// Never reset: the smoke tests run in parallel, and one's reset must not hide another's
/// panic; each compares the count before and after its input (a panic in another test
/// may then fail this one too: the run fails either way).
static PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Mutex<bool> = Mutex::new(false);

fn install_hook() {
    let mut installed = HOOK.lock().expect("hook flag");
    if !*installed {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
        *installed = true;
    }
}

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// A mutation of `seed`: bit flips, interesting values, cuts, insertions, splices.
fn mutate(rng: &mut Rng, seed: &[u8], max_len: usize) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        match rng.below(8) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = [0, 1, 0x7F, 0x80, 0xFF][rng.below(5)];
            }
            2 if out.len() >= 8 => {
                let i = rng.below(out.len() - 7);
                let v: u64 = [0, 1, u64::MAX, 1 << 40, 1 << 31, 8192, 4096][rng.below(7)];
                out[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            3 if !out.is_empty() => {
                let at = rng.below(out.len());
                out.truncate(at);
            }
            4 => {
                let at = rng.below(out.len() + 1);
                let n = 1 + rng.below(64);
                let bytes = rng.bytes(n);
                out.splice(at..at, bytes);
            }
            5 if out.len() > 4 => {
                let from = rng.below(out.len());
                let len = rng.below(out.len() - from).min(256);
                let to = rng.below(out.len());
                let chunk = out[from..from + len].to_vec();
                out.splice(to..to, chunk);
            }
            6 if !out.is_empty() => {
                let i = rng.below(out.len());
                let n = rng.below(out.len() - i).min(32);
                let b = rng.next_u64() as u8;
                out[i..i + n].fill(b);
            }
            _ => {
                let n = rng.below(64);
                out.extend(rng.bytes(n));
            }
        }
    }
    out.truncate(max_len);
    out
}

/// A diff payload changing a page of `page_number`, and its LZ4 block.
fn diff_payload(page_number: u64, salt: u8) -> (Vec<u8>, Vec<u8>) {
    let old = vec![0u8; PAGE_SIZE_BYTES];
    let mut new = old.clone();
    page::init(&mut new, page_number, PageKind::Leaf);
    for (i, b) in new[100..400].iter_mut().enumerate() {
        *b = salt.wrapping_add(i as u8);
    }
    let mut diff = Vec::new();
    encode_page(&mut diff, page_number, &new, Some(&old));
    let compressed = lz4_flex::block::compress(&diff);
    (diff, compressed)
}

/// Well-formed starting points for each target.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let site = CorruptionSite::Environment;
    let _ = site;
    let (diff, compressed) = diff_payload(3, 9);
    let mut header = RecordHeader {
        flags: 0,
        txn_id: 7,
        journal_number: 2,
        prev_checksum: 11,
        payload_size_bytes: diff.len() as u64,
        uncompressed_size_bytes: diff.len() as u64,
        record_size_bytes: record::record_size_for(diff.len()) as u64,
        page_count: 1,
        next_page_number: 40,
        root_page: 1,
        timestamp_ms: 5,
        payload_checksum: record::payload_checksum(&diff, 7),
        checksum: 0,
    };
    let mut record_bytes = vec![0u8; RECORD_HEADER_SIZE_BYTES];
    header.encode(&mut record_bytes);
    record_bytes.extend_from_slice(&diff);
    match target {
        "record_decode" => vec![
            [vec![0u8], record_bytes.clone()].concat(),
            [vec![1u8], record_bytes.clone()].concat(),
            [vec![2u8], record_bytes.clone()].concat(),
            [vec![3u8], vec![0u8; 40]].concat(),
        ],
        "recover_journal" => {
            let mut modes = Vec::new();
            for flag in [0u8, 1] {
                let payload = if flag == 1 { &compressed } else { &diff };
                let mut seed = vec![4, flag];
                seed.extend_from_slice(&(diff.len() as u64).to_le_bytes());
                seed.extend_from_slice(&40u64.to_le_bytes());
                seed.extend_from_slice(payload);
                modes.push(seed);
            }
            let mut padded = record_bytes.clone();
            padded.resize(4096, 0);
            modes.push([vec![1, 0, 0], padded.clone()].concat());
            modes.push([vec![2, 0, 0], padded.clone()].concat());
            modes.push([vec![7, 0], padded.clone()].concat());
            modes.push([vec![0], padded].concat());
            modes
        }
        "open_files" => {
            let mut page_bytes = vec![0u8; 512];
            page_bytes[page::OFFSET_KIND] = PageKind::Leaf as u8;
            vec![
                [vec![0, 1, 40, 0, 0, 0], vec![0xFF; 8]].concat(),
                [vec![1, 1, 48, 0, 0, 0], vec![0x01; 8]].concat(),
                [vec![3, 1, 72, 0, 0, 0], vec![0x7F; 8]].concat(),
                [vec![2, 1, 0, 0x20, 0, 0], page_bytes.clone()].concat(),
                [vec![2, 1, 18, 0x20, 0, 0], vec![0xFF, 0x00, 0x10, 0x00]].concat(),
                [vec![2, 0, 0, 0, 0, 0], vec![0u8; 64]].concat(),
                vec![2, 2, 0, 0, 0, 0],
            ]
        }
        "page_decode" => {
            let mut leaf = vec![0u8; PAGE_SIZE_BYTES];
            page::init(&mut leaf, 1, PageKind::Leaf);
            hrafn::btree::node::init_node(&mut leaf);
            for (i, k) in [&b"apple"[..], b"kiwi", b"pear"].iter().enumerate() {
                let v = vec![i as u8; 20];
                hrafn::btree::node::insert_leaf(
                    &mut leaf,
                    i,
                    k,
                    &hrafn::btree::node::ValueRef::Inline(&v),
                );
            }
            let mut file = vec![0u8; PAGE_SIZE_BYTES];
            file.extend_from_slice(&leaf);
            vec![
                [vec![2, 4], b"kiwi".to_vec(), file.clone()].concat(),
                [vec![6, 4], b"kiwi".to_vec(), file.clone()].concat(),
                [vec![1, 0], file.clone()].concat(),
                // Page 1 as a packed and as a slotted fixed-size leaf, its slots whatever
                // the bytes hold.
                [vec![64 | 2, 2], b"ab".to_vec(), file.clone()].concat(),
                [vec![128 | 64 | 2, 0], file.clone()].concat(),
                [vec![9 | 2 | 4, 1, b'a'], file].concat(),
            ]
        }
        "ops_crash" => {
            let mut rng = Rng(0x5EED);
            (0..6)
                .map(|i| {
                    let mut seed = vec![i as u8, rng.next_u64() as u8, i as u8, i as u8 % 3, 0];
                    if i % 2 == 1 {
                        seed[4] = 5 + i as u8;
                    }
                    for _ in 0..40 {
                        seed.extend_from_slice(&rng.bytes(4));
                    }
                    seed
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Runs `body` on `count` inputs derived from `seed`; panics with the failing input.
fn smoke(name: &str, body: fn(&[u8]), count: u64, max_len: usize, seed: u64) {
    install_hook();
    let count = std::env::var("HRAFN_FUZZ_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(count);
    let mut rng = Rng(seed ^ name.len() as u64);
    let mut pool = seeds(name);
    pool.push(Vec::new());
    let started = std::time::Instant::now();
    let open_before = targets::open_outcomes();
    let crash_before = targets::crash_outcomes();
    for i in 0..count {
        let input = if i < pool.len() as u64 {
            pool[i as usize].clone()
        } else if rng.below(4) == 0 {
            let n = rng.below(max_len + 1);
            rng.bytes(n)
        } else {
            let from = pool[rng.below(pool.len())].clone();
            mutate(&mut rng, &from, max_len)
        };
        let panics_before = PANICS.load(Ordering::SeqCst);
        let input_started = std::time::Instant::now();
        let result = std::panic::catch_unwind(|| body(&input));
        let took = input_started.elapsed();
        if took > std::time::Duration::from_secs(2) {
            common::summary(&format!(
                "fuzz smoke: {name}: input {i} took {:.1} s: {}",
                took.as_secs_f64(),
                hex(&input[..input.len().min(64)])
            ));
        }
        if result.is_err() || PANICS.load(Ordering::SeqCst) != panics_before {
            panic!(
                "fuzz target {name} failed on input {i} (HRAFN_FUZZ_SEED={seed:#x}): {}",
                hex(&input)
            );
        }
        // Keep some inputs as seeds for later mutations.
        if pool.len() < 64 && rng.below(8) == 0 {
            pool.push(input);
        }
    }
    let detail = match name {
        "ops_crash" => {
            let (runs, commits, ops) = targets::crash_outcomes();
            format!(
                " ({} crashed workloads of {} commits and {} storage operations)",
                runs - crash_before.0,
                commits - crash_before.1,
                ops - crash_before.2
            )
        }
        "recover_journal" | "open_files" => {
            let (opened, corrupt, other) = targets::open_outcomes();
            format!(
                " (opens: {} ok, {} corruption, {} other errors)",
                opened - open_before.0,
                corrupt - open_before.1,
                other - open_before.2
            )
        }
        _ => String::new(),
    };
    common::summary(&format!(
        "fuzz smoke: {name}: {count} inputs, 0 crashes, {:.1} s{detail}",
        started.elapsed().as_secs_f64()
    ));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("hex digits"))
        .collect()
}

fn seed() -> u64 {
    std::env::var("HRAFN_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

#[test]
fn record_decode_smoke() {
    smoke(
        "record_decode",
        targets::record_decode,
        4_000 * common::scale(),
        4096,
        seed(),
    );
}

#[test]
fn page_decode_smoke() {
    smoke(
        "page_decode",
        targets::page_decode,
        3_000 * common::scale(),
        4 * PAGE_SIZE_BYTES + 64,
        seed(),
    );
}

#[test]
fn recover_journal_smoke() {
    smoke(
        "recover_journal",
        targets::recover_journal,
        2_000 * common::scale(),
        8192,
        seed(),
    );
}

#[test]
fn open_files_smoke() {
    smoke(
        "open_files",
        targets::open_files,
        2_000 * common::scale(),
        8192,
        seed(),
    );
}

#[test]
fn ops_crash_smoke() {
    smoke(
        "ops_crash",
        targets::ops_crash,
        1_000 * common::scale(),
        600,
        seed(),
    );
}

/// A re-sealed record whose size field rounds up past 2^64 (here 2^64 - 4095) once made
/// the re-sealing loop of `recover_journal`'s mode 2 step by zero, forever.
#[test]
fn a_record_size_that_wraps_ends_the_resealing() {
    use hrafn::journal::record::{RECORD_HEADER_SIZE_BYTES, RECORD_MAGIC, offsets};
    let mut record = vec![0u8; RECORD_HEADER_SIZE_BYTES];
    record[offsets::MAGIC..offsets::MAGIC + 8].copy_from_slice(&RECORD_MAGIC);
    record[offsets::PAYLOAD_SIZE..offsets::PAYLOAD_SIZE + 8]
        .copy_from_slice(&u64::MAX.to_le_bytes());
    record[offsets::RECORD_SIZE..offsets::RECORD_SIZE + 8]
        .copy_from_slice(&(u64::MAX - 4094).to_le_bytes());
    // Mode 2 (overwrite at the journal's record offset, then re-seal), offset 0.
    let mut input = vec![2u8, 0, 0];
    input.extend_from_slice(&record);
    install_hook();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // A panic is reported, not left to end the thread silently.
        let ran = std::panic::catch_unwind(|| targets::recover_journal(&input));
        let _ = done.send(ran.is_ok());
    });
    let ended = finished.recv_timeout(std::time::Duration::from_secs(60));
    assert!(ended.is_ok(), "re-sealing did not end");
    assert_eq!(ended, Ok(true), "recover_journal panicked");
}

/// Inputs that once crashed a target (hex, as the smoke run prints them).
#[test]
fn regressions() {
    install_hook();
    type Case = (&'static str, fn(&[u8]), &'static str);
    let cases: &[Case] = &[
        // A compressed record claiming a 1 TiB payload: recovery allocated it up front.
        (
            "recover_journal",
            targets::recover_journal,
            "0401000000000001000028000a000000000000000000010000000000",
        ),
        // A re-sealed header naming journal u64::MAX: replay's `number + 1` overflowed.
        (
            "open_files",
            targets::open_files,
            "35212900800100000000ffffffffffffffffffffff000000ff40404040e9ffff6865616465722e61000000",
        ),
        // A journal record whose next page number (2^60) overflowed the data file's size.
        (
            "recover_journal",
            targets::recover_journal,
            "04001600000000000000000000000000001003000000000000000100640008000102030405060708",
        ),
        // A meta page with a high-water mark of 2^62: the integrity check allocated a bitmap
        // of every page up to it and aborted.
        (
            "page_decode",
            targets::page_decode,
            "00000000000000000000000000000000000004000000000000000000000000000000485241464e4d4554\
             00000000000000000000000000000000000000000000004000000000000000000000000000000000",
        ),
    ];
    for (name, body, input) in cases {
        let panics_before = PANICS.load(Ordering::SeqCst);
        body(&unhex(input));
        assert_eq!(
            PANICS.load(Ordering::SeqCst),
            panics_before,
            "{name} panicked in a thread"
        );
    }
}
