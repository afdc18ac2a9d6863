//! kill -9: a child process commits from several writer threads while reader threads check
//! snapshot consistency; the parent kills it with SIGKILL at a random instant, reopens the
//! environment and checks that every acknowledged commit survived, that nothing else did
//! (no partial transaction, no made-up data) and that the integrity check passes. The next
//! child continues on the same directory, so recovery keeps running over recovered states.
//!
//! The child is this test binary run again with `--exact child_entry --ignored`; the
//! directory and seed travel in environment variables. Acknowledgements come back on
//! stdout, one line per commit, written after `commit()` returned `Ok`.
//!
//! Data layout, per writer `w` and sequence number `s` (one transaction each):
//! - tree `data`: keys `d/{w}/{s}/{i}` for `i < key_count(w, s)`, values `value(w, s, i)`;
//!   the same transaction removes the keys of sequence `s - RETAINED_SEQS`;
//! - tree `last`: key `w` holds `s`, the writer's last committed sequence.
//!
//! So after any prefix of the transactions, with `L` the stored last sequence of `w`, the
//! data of `w` is exactly the keys of sequences `L - RETAINED_SEQS + 1 ..= L`.
//!
//! Writers commit in three ways: their own write transaction, a closure merged with other
//! threads' requests (`Environment::submit`), or a merged `WriteBatch` that expects the
//! previous sequence (`Environment::write`).
//!
//! `HRAFN_KILL9_SEED` replays a run's kill instants and child seeds (thread timing is not
//! deterministic); `HRAFN_TEST_SCALE` multiplies the number of kills.

mod common;

use common::mix;

use hrafn::{Durability, Environment, Options, WriteBatch, WriteTxn};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CHILD_DIR_VAR: &str = "HRAFN_KILL9_CHILD_DIR";
const CHILD_SEED_VAR: &str = "HRAFN_KILL9_CHILD_SEED";
const SEED_VAR: &str = "HRAFN_KILL9_SEED";

/// Writers commit three ways (see `commit_seq`): two of each.
const WRITERS: u64 = 6;
const READERS: u64 = 2;
/// Sequences whose keys a writer keeps; older ones are removed as new ones commit.
const RETAINED_SEQS: u64 = 48;
const KILLS_PER_SCALE: u64 = 200;
const KILL_AFTER_MS_MIN: u64 = 20;
const KILL_AFTER_MS_MAX: u64 = 300;

fn options() -> Options {
    Options::default()
        .durability(Durability::Immediate)
        .journal_file_size_bytes(256 * 1024)
        .flush_threshold_bytes(256 * 1024)
        .flush_interval_ms(5)
        .sync_interval_ms(20)
        .sync_threshold_bytes(1 << 20)
}

struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

fn key_count(w: u64, s: u64) -> u64 {
    1 + mix(w << 48 ^ s) % 6
}

fn data_key(w: u64, s: u64, i: u64) -> Vec<u8> {
    format!("d/{w:02}/{s:012}/{i:02}").into_bytes()
}

fn writer_prefix(w: u64) -> Vec<u8> {
    format!("d/{w:02}/").into_bytes()
}

fn last_key(w: u64) -> Vec<u8> {
    format!("w{w:02}").into_bytes()
}

/// Mostly small values; one in sixteen spills into overflow pages.
fn value(w: u64, s: u64, i: u64) -> Vec<u8> {
    let h = mix(mix(w << 48 ^ s) ^ i);
    let len = if h.is_multiple_of(16) {
        3000 + (h >> 8) % 17_000
    } else {
        8 + (h >> 8) % 200
    };
    let mut out = Vec::with_capacity(len as usize + 8);
    let mut state = h;
    while (out.len() as u64) < len {
        state = mix(state);
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

fn first_retained(last: u64) -> u64 {
    last.saturating_sub(RETAINED_SEQS) + 1
}

fn decode_seq(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

// ---------------------------------------------------------------------------------------
// The child.

/// Entry point of the child process; does nothing in a normal test run.
#[test]
#[ignore = "the kill-9 child; run by kill9_loop"]
fn child_entry() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("the parent passes a numeric child seed");
    child_main(Path::new(&dir), seed);
}

/// Reports a broken invariant and exits without unwinding (the parent reads the line).
fn child_fail(message: &str) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "FAIL {message}");
    let _ = out.flush();
    std::process::exit(3);
}

fn child_main(dir: &Path, seed: u64) {
    // A panic in any thread fails the run: joining writer 0 would not see another's, and
    // the kill would hide it.
    std::panic::set_hook(Box::new(|info| child_fail(&format!("panic: {info}"))));
    let env = match Environment::open(dir, options()) {
        Ok(env) => Arc::new(env),
        Err(e) => child_fail(&format!("open: {e}")),
    };
    let mut next_seq = Vec::new();
    {
        let rtx = env
            .begin_read()
            .unwrap_or_else(|e| child_fail(&format!("begin_read: {e}")));
        let last = rtx.open_tree("last").ok();
        for w in 0..WRITERS {
            let l = match &last {
                Some(t) => t
                    .get(last_key(w))
                    .unwrap_or_else(|e| child_fail(&format!("get: {e}")))
                    .and_then(decode_seq)
                    .unwrap_or(0),
                None => 0,
            };
            next_seq.push(l + 1);
        }
    }
    // What this open recovered, for the parent to check against what it acknowledged:
    // a round it does not verify must not hide a loss behind the same data committed again.
    {
        let mut out = std::io::stdout().lock();
        for (w, next) in next_seq.iter().enumerate() {
            if writeln!(out, "START {w} {}", next - 1)
                .and_then(|()| out.flush())
                .is_err()
            {
                child_fail("writing a START line");
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (w, first) in next_seq.into_iter().enumerate() {
        let env = Arc::clone(&env);
        threads.push(std::thread::spawn(move || {
            child_writer(&env, w as u64, first, seed)
        }));
    }
    for r in 0..READERS {
        let env = Arc::clone(&env);
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            child_reader(&env, mix(seed ^ (r + 100)), &stop)
        }));
    }
    // The parent kills us long before the writers would end.
    for t in threads {
        let _ = t.join();
    }
    child_fail("threads ended before the kill");
}

/// The changes of sequence `s` of writer `w`, inside any write transaction.
fn apply_seq(wtx: &mut WriteTxn<'_>, w: u64, s: u64) -> hrafn::Result<()> {
    {
        let mut data = wtx.open_tree("data")?;
        for i in 0..key_count(w, s) {
            data.insert(data_key(w, s, i), value(w, s, i))?;
        }
        if s > RETAINED_SEQS {
            let old = s - RETAINED_SEQS;
            for i in 0..key_count(w, old) {
                if !data.remove(data_key(w, old, i))? {
                    return Err(hrafn::Error::InvalidArgument(format!(
                        "key {i} of writer {w} sequence {old} missing before removal"
                    )));
                }
            }
        }
    }
    wtx.open_tree("last")?
        .insert(last_key(w), s.to_be_bytes())?;
    Ok(())
}

/// The same changes as [`apply_seq`] as a batch that expects the previous sequence.
fn batch_seq(w: u64, s: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    let previous = (s - 1).to_be_bytes();
    batch.expect("last", last_key(w), (s > 1).then_some(&previous[..]));
    for i in 0..key_count(w, s) {
        batch.insert("data", data_key(w, s, i), value(w, s, i));
    }
    if s > RETAINED_SEQS {
        let old = s - RETAINED_SEQS;
        for i in 0..key_count(w, old) {
            batch.expect("data", data_key(w, old, i), Some(&value(w, old, i)));
            batch.remove("data", data_key(w, old, i));
        }
    }
    batch.insert("last", last_key(w), s.to_be_bytes());
    batch
}

/// How writer `w` commits: its own write transaction, a merged closure, or a merged batch.
fn commit_seq(env: &Environment, w: u64, s: u64) -> hrafn::Result<()> {
    match w % 3 {
        0 => {
            let mut wtx = env.begin_write()?;
            apply_seq(&mut wtx, w, s)?;
            wtx.commit()
        }
        1 => env.submit(move |wtx| apply_seq(wtx, w, s)),
        _ => env.write(batch_seq(w, s)),
    }
}

fn child_writer(env: &Environment, w: u64, first: u64, seed: u64) {
    let mut rng = Rng(mix(seed ^ w));
    let mut s = first;
    loop {
        if let Err(e) = commit_seq(env, w, s) {
            child_fail(&format!("writer {w} sequence {s}: {e}"));
        }
        {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "ACK {w} {s}")
                .and_then(|()| out.flush())
                .is_err()
            {
                std::process::exit(5);
            }
        }
        s += 1;
        // Now and then let other writers (and the flusher) in.
        if rng.next_u64().is_multiple_of(8) {
            std::thread::yield_now();
        }
    }
}

fn child_reader(env: &Environment, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed);
    while !stop.load(Ordering::Relaxed) {
        let rtx = env
            .begin_read()
            .unwrap_or_else(|e| child_fail(&format!("begin_read: {e}")));
        // Before the first commit the trees do not exist; any other error fails the run.
        let opened = |name: &str| match rtx.open_tree(name) {
            Ok(tree) => Some(tree),
            Err(hrafn::Error::TreeNotFound { .. }) => None,
            Err(e) => child_fail(&format!("reader open_tree {name}: {e}")),
        };
        let (Some(last), Some(data)) = (opened("last"), opened("data")) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let w = rng.next_u64() % WRITERS;
        let l = last
            .get(last_key(w))
            .unwrap_or_else(|e| child_fail(&format!("reader get: {e}")))
            .and_then(decode_seq)
            .unwrap_or(0);
        // The whole snapshot of this writer, or just its newest and next sequence.
        let problems = if rng.next_u64().is_multiple_of(4) {
            let mut found = BTreeMap::new();
            let entries = data
                .prefix(writer_prefix(w))
                .unwrap_or_else(|e| child_fail(&format!("reader prefix: {e}")));
            for entry in entries {
                let (k, v) = entry.unwrap_or_else(|e| child_fail(&format!("reader scan: {e}")));
                found.insert(k.to_vec(), v.to_vec());
            }
            compare_writer(w, l, &found)
        } else {
            let mut problems = Vec::new();
            if l > 0 {
                for i in 0..key_count(w, l) {
                    let got = data
                        .get(data_key(w, l, i))
                        .unwrap_or_else(|e| child_fail(&format!("reader get: {e}")));
                    if got != Some(&value(w, l, i)[..]) {
                        problems.push(format!("writer {w} seq {l} key {i} wrong or missing"));
                    }
                }
            }
            for i in 0..key_count(w, l + 1) {
                if data
                    .get(data_key(w, l + 1, i))
                    .unwrap_or_else(|e| child_fail(&format!("reader get: {e}")))
                    .is_some()
                {
                    problems.push(format!("writer {w} seq {} key {i} visible early", l + 1));
                }
            }
            problems
        };
        if !problems.is_empty() {
            child_fail(&format!(
                "snapshot {} inconsistent: {}",
                rtx.txn_id(),
                problems.join("; ")
            ));
        }
    }
}

/// Differences between the data found for writer `w` and what `last = l` implies.
fn compare_writer(w: u64, l: u64, found: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<String> {
    let mut expected = BTreeMap::new();
    for s in first_retained(l)..=l {
        for i in 0..key_count(w, s) {
            expected.insert(data_key(w, s, i), value(w, s, i));
        }
    }
    let mut problems = Vec::new();
    for (k, v) in found {
        match expected.get(k) {
            None => problems.push(format!(
                "writer {w} (last {l}): unexpected key {}",
                String::from_utf8_lossy(k)
            )),
            Some(want) if want != v => problems.push(format!(
                "writer {w} (last {l}): wrong value under {}",
                String::from_utf8_lossy(k)
            )),
            Some(_) => {}
        }
    }
    for k in expected.keys() {
        if !found.contains_key(k) {
            problems.push(format!(
                "writer {w} (last {l}): missing key {}",
                String::from_utf8_lossy(k)
            ));
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------
// The parent.

#[derive(Default)]
struct Totals {
    kills: u64,
    acked: u64,
    lost: u64,
    phantom: u64,
    failed_opens: u64,
    verifications: u64,
    failures: Vec<String>,
}

/// What one child reported before it died.
struct ChildRun {
    /// Highest acknowledged sequence per writer.
    acked: BTreeMap<u64, u64>,
    /// The last sequence per writer its open recovered (writers it printed before the
    /// kill).
    started: BTreeMap<u64, u64>,
    ack_count: u64,
    failures: Vec<String>,
}

fn run_child(dir: &Path, child_seed: u64, kill_after: Duration) -> ChildRun {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "child_entry", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_DIR_VAR, dir)
        .env(CHILD_SEED_VAR, child_seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning the child");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut acked = BTreeMap::new();
        let mut started = BTreeMap::new();
        let mut ack_count = 0;
        let mut failures = Vec::new();
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut by the kill has no newline: that acknowledgement never completed.
            if !line.ends_with('\n') {
                break;
            }
            // The test harness may print its own text before ours on the same line.
            if let Some(at) = line.find("START ") {
                let mut parts = line[at + 6..].split_whitespace();
                let w = parts.next().and_then(|p| p.parse::<u64>().ok());
                let l = parts.next().and_then(|p| p.parse::<u64>().ok());
                match (w, l) {
                    (Some(w), Some(l)) => {
                        started.insert(w, l);
                    }
                    _ => failures.push(format!("unreadable child line {line:?}")),
                }
            } else if let Some(at) = line.find("ACK ") {
                let mut parts = line[at + 4..].split_whitespace();
                let w = parts.next().and_then(|p| p.parse::<u64>().ok());
                let s = parts.next().and_then(|p| p.parse::<u64>().ok());
                match (w, s) {
                    (Some(w), Some(s)) => {
                        let top = acked.entry(w).or_insert(0);
                        *top = (*top).max(s);
                        ack_count += 1;
                    }
                    _ => failures.push(format!("unreadable child line {line:?}")),
                }
            } else if let Some(at) = line.find("FAIL ") {
                failures.push(format!("child: {}", line[at + 5..].trim_end()));
            }
        }
        (acked, started, ack_count, failures)
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    std::thread::sleep(kill_after);
    // SIGKILL; an error means the child already exited, which the status shows.
    let _ = child.kill();
    let status = child.wait().expect("waiting for the child");
    let (acked, started, ack_count, mut failures) = reader.join().expect("stdout reader");
    let stderr_text = err_reader.join().expect("stderr reader");
    {
        use std::os::unix::process::ExitStatusExt;
        if status.signal() != Some(libc::SIGKILL) {
            failures.push(format!(
                "child ended by itself ({status}) before the kill; stderr: {}",
                stderr_text.trim()
            ));
        }
    }
    ChildRun {
        acked,
        started,
        ack_count,
        failures,
    }
}

/// Reopens the environment and checks it against the acknowledgements; returns the last
/// sequence per writer found, or `None` when the open failed.
fn verify(
    dir: &Path,
    acked: &BTreeMap<u64, u64>,
    totals: &mut Totals,
    context: &str,
) -> Option<BTreeMap<u64, u64>> {
    totals.verifications += 1;
    let env = match Environment::open(dir, options()) {
        Ok(env) => env,
        Err(e) => {
            totals.failed_opens += 1;
            totals.failures.push(format!("{context}: open failed: {e}"));
            return None;
        }
    };
    let mut lasts = BTreeMap::new();
    let rtx = env.begin_read().expect("read transaction");
    let last_tree = rtx.open_tree("last").ok();
    let data_tree = rtx.open_tree("data").ok();
    for w in 0..WRITERS {
        let l = match &last_tree {
            Some(t) => match t.get(last_key(w)) {
                Ok(v) => v.and_then(decode_seq).unwrap_or(0),
                Err(e) => {
                    totals.phantom += 1;
                    totals
                        .failures
                        .push(format!("{context}: reading last of {w}: {e}"));
                    0
                }
            },
            None => 0,
        };
        let acked_w = acked.get(&w).copied().unwrap_or(0);
        if l < acked_w {
            totals.lost += acked_w - l;
            totals.failures.push(format!(
                "{context}: writer {w}: acknowledged through {acked_w}, recovered {l}"
            ));
        }
        let mut found = BTreeMap::new();
        if let Some(t) = &data_tree {
            match t.prefix(writer_prefix(w)) {
                Ok(entries) => {
                    for entry in entries {
                        match entry {
                            Ok((k, v)) => {
                                found.insert(k.to_vec(), v.to_vec());
                            }
                            Err(e) => {
                                totals.failures.push(format!("{context}: scan of {w}: {e}"));
                                break;
                            }
                        }
                    }
                }
                Err(e) => totals.failures.push(format!("{context}: scan of {w}: {e}")),
            }
        }
        let problems = compare_writer(w, l, &found);
        if !problems.is_empty() {
            totals.phantom += problems.len() as u64;
            totals.failures.push(format!(
                "{context}: {} (and {} more)",
                problems[0],
                problems.len() - 1
            ));
        }
        lasts.insert(w, l);
    }
    drop(rtx);
    if let Err(e) = env.check() {
        totals
            .failures
            .push(format!("{context}: integrity check: {e}"));
    }
    Some(lasts)
}

#[test]
fn kill9_loop() {
    if std::env::var(CHILD_DIR_VAR).is_ok() {
        return; // never nest
    }
    let seed = std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            mix(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1))
        });
    let kills = KILLS_PER_SCALE * common::scale();
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng(seed);
    let mut totals = Totals::default();
    // Highest acknowledged sequence per writer since the last verification.
    let mut acked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut since_verify = 0;
    for round in 0..kills {
        let child_seed = rng.next_u64();
        let kill_after = Duration::from_millis(rng.between(KILL_AFTER_MS_MIN, KILL_AFTER_MS_MAX));
        let run = run_child(dir.path(), child_seed, kill_after);
        totals.kills += 1;
        totals.acked += run.ack_count;
        // Every open, verified or not, recovers what earlier children acknowledged.
        for (&w, &l) in &run.started {
            let acked_w = acked.get(&w).copied().unwrap_or(0);
            if l < acked_w {
                totals.lost += acked_w - l;
                totals.failures.push(format!(
                    "round {round} (seed {seed:#x}): writer {w}: acknowledged through \
                     {acked_w}, the child's open recovered {l}"
                ));
            }
        }
        for (w, s) in run.acked {
            let top = acked.entry(w).or_insert(0);
            *top = (*top).max(s);
        }
        let context = format!("round {round} (seed {seed:#x})");
        totals
            .failures
            .extend(run.failures.iter().map(|f| format!("{context}: {f}")));
        since_verify += 1;
        // One round in four leaves the crashed state to the next child, so recovery also
        // runs inside a process that is then killed, and verification covers both.
        let last_round = round + 1 == kills;
        if last_round || !rng.next_u64().is_multiple_of(4) || since_verify > 3 {
            since_verify = 0;
            if verify(dir.path(), &acked, &mut totals, &context).is_none() {
                break;
            }
        }
        if !totals.failures.is_empty() {
            break;
        }
    }
    common::summary(&format!(
        "kill-9: {} kills, {} acked commits, {} lost, {} phantom, {} failed opens, \
         {} verifications, {:.1} s, seed {seed:#x}",
        totals.kills,
        totals.acked,
        totals.lost,
        totals.phantom,
        totals.failed_opens,
        totals.verifications,
        started.elapsed().as_secs_f64()
    ));
    assert!(
        totals.failures.is_empty(),
        "kill-9 failures (replay with {SEED_VAR}={seed:#x}):\n{}",
        totals.failures.join("\n")
    );
    assert_eq!(totals.kills, kills);
    assert!(
        totals.acked > 0,
        "no commit was acknowledged in {kills} runs"
    );
}
