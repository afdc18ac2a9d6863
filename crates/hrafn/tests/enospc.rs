//! ENOSPC on a real file system: a small tmpfs is filled by commits until one fails.
//!
//! Each run mounts a tmpfs of a few MiB (skipped with a message when mounting is refused),
//! writes a filler file on it, then a child process (this test binary run again with
//! `--exact enospc_child --ignored`) opens an environment there and commits until a commit
//! fails. The failure must be `Error::NoSpace`, or `Error::Poisoned` caused by one, and so
//! must a few retries of the same commit (unless one finds room after all); the child must
//! end by itself (never by a signal such as SIGBUS). A second child reopens the still
//! full environment: it may succeed or fail with `NoSpace`, nothing else. Then the parent
//! removes the filler file, reopens, checks that every acknowledged commit is intact and
//! that writes resume, and checks the integrity of the result.
//!
//! Runs vary the tmpfs size, the filler size, the value sizes and the journal file size;
//! half of them commit through `Environment::submit` (merged writes).
//! `HRAFN_TEST_SCALE` multiplies the number of runs.

mod common;

use common::mix;

use hrafn::storage::sim::SimStorage;
use hrafn::storage::{FileKind, Mapping, Storage, StorageEvent, StorageFile};
use hrafn::{Durability, Environment, Error, Options, WriteTxn};
use std::any::Any;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const CHILD_DIR_VAR: &str = "HRAFN_ENOSPC_CHILD_DIR";
const CHILD_MODE_VAR: &str = "HRAFN_ENOSPC_CHILD_MODE";
const CHILD_RUN_VAR: &str = "HRAFN_ENOSPC_CHILD_RUN";
const RUNS_PER_SCALE: u64 = 10;
/// Commits a run makes after space is freed.
const RESUMED_COMMITS: u64 = 20;

/// The shape of one run, all derived from its index.
#[derive(Debug, Clone, Copy)]
struct RunShape {
    tmpfs_size_mib: u64,
    filler_size_kib: u64,
    value_size_bytes: u64,
    keys_per_commit: u64,
    journal_file_size_kib: u64,
    /// Commit through `Environment::submit` (merged writes).
    merged: bool,
}

fn shape(run: u64) -> RunShape {
    const TMPFS_MIB: [u64; 4] = [6, 8, 10, 12];
    const VALUE_BYTES: [u64; 5] = [100, 1500, 6000, 30_000, 200_000];
    const JOURNAL_KIB: [u64; 3] = [64, 256, 1024];
    let h = mix(run);
    let journal_file_size_kib = JOURNAL_KIB[(run % 3) as usize];
    RunShape {
        tmpfs_size_mib: TMPFS_MIB[(run % 4) as usize],
        // Freeing the filler must leave room for a fresh journal file and some growth.
        filler_size_kib: 2 * journal_file_size_kib + 512 + (h % 4) * 256,
        value_size_bytes: VALUE_BYTES[(run % 5) as usize],
        keys_per_commit: 1 + (h >> 8) % 4,
        journal_file_size_kib,
        merged: run % 2 == 1,
    }
}

fn options(shape: RunShape) -> Options {
    Options::default()
        .durability(Durability::Immediate)
        .journal_file_size_bytes(shape.journal_file_size_kib * 1024)
        .flush_threshold_bytes(256 * 1024)
        .flush_interval_ms(2)
        .sync_interval_ms(10)
        .sync_threshold_bytes(1 << 20)
}

fn key(seq: u64, i: u64) -> Vec<u8> {
    format!("k/{seq:010}/{i}").into_bytes()
}

/// The value of key `i` of commit `seq`: sizes vary around the run's value size.
fn value(shape: RunShape, seq: u64, i: u64) -> Vec<u8> {
    let h = mix(seq << 8 ^ i);
    let len = shape.value_size_bytes / 2 + h % shape.value_size_bytes;
    let mut out = Vec::with_capacity(len as usize + 8);
    let mut state = h;
    while (out.len() as u64) < len {
        state = mix(state);
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// One transaction: the keys of `seq` and the `last` marker.
/// Odd-numbered runs submit it as a merged write request instead of their own transaction.
fn commit(env: &Environment, shape: RunShape, seq: u64) -> hrafn::Result<()> {
    let apply = move |wtx: &mut WriteTxn<'_>| -> hrafn::Result<()> {
        {
            let mut t = wtx.open_tree("data")?;
            for i in 0..shape.keys_per_commit {
                t.insert(key(seq, i), value(shape, seq, i))?;
            }
        }
        wtx.open_tree("last")?.insert(b"last", seq.to_be_bytes())?;
        Ok(())
    };
    if shape.merged {
        env.submit(apply)
    } else {
        let mut wtx = env.begin_write()?;
        apply(&mut wtx)?;
        wtx.commit()
    }
}

/// Whether `e` is the disk being full, directly or as the cause of a poisoning.
fn is_no_space(e: &Error) -> bool {
    match e {
        Error::NoSpace { .. } => true,
        Error::Poisoned { cause } => cause.starts_with("no space left on device"),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// Children.

/// Entry point of the child processes; does nothing in a normal test run.
#[test]
#[ignore = "the ENOSPC child; run by enospc_runs"]
fn enospc_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return;
    };
    let run: u64 = std::env::var(CHILD_RUN_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("the parent passes the run index");
    let shape = shape(run);
    let mode = std::env::var(CHILD_MODE_VAR).expect("the parent passes a mode");
    let mut out = std::io::stdout().lock();
    let mut say = |line: String| {
        writeln!(out, "{line}").expect("writing to the parent");
        out.flush().expect("flushing to the parent");
    };
    let env = match Environment::open(&dir, options(shape)) {
        Ok(env) => env,
        Err(e) => {
            let kind = if is_no_space(&e) { "nospace" } else { "other" };
            say(format!("OPEN-ERR {kind} {e}"));
            return;
        }
    };
    say("OPENED".to_owned());
    if mode == "reopen" {
        return;
    }
    // Fill: commit until a commit fails (a bounded number, in case the disk never fills).
    let mut seq = env
        .begin_read()
        .ok()
        .and_then(|r| {
            let t = r.open_tree("last").ok()?;
            let v = t.get(b"last").ok()??;
            Some(u64::from_be_bytes(v.try_into().ok()?))
        })
        .unwrap_or(0);
    let mut failures = 0;
    for _ in 0..100_000 {
        match commit(&env, shape, seq + 1) {
            Ok(()) => {
                seq += 1;
                say(format!("ACK {seq}"));
            }
            Err(e) => {
                // The first failure, then a few retries of the same commit: each fails
                // cleanly, or (a transaction that found room after all) succeeds.
                let kind = if is_no_space(&e) { "nospace" } else { "other" };
                let tag = if failures == 0 {
                    "COMMIT-ERR"
                } else {
                    "LATER-ERR"
                };
                say(format!("{tag} {} {kind} {e}", seq + 1));
                failures += 1;
                if failures == 4 {
                    break;
                }
            }
        }
    }
    if failures == 0 {
        say("NEVER-FULL".to_owned());
        return;
    }
    // Reads still work.
    match env.begin_read().and_then(|r| r.check().map(|_| ())) {
        Ok(()) => say("READ-OK".to_owned()),
        Err(e) => say(format!("READ-ERR {e}")),
    }
    // Dropping the environment flushes into a full disk: that must not crash either.
}

/// What a child printed, and how it ended.
struct ChildOutput {
    lines: Vec<String>,
    status: std::process::ExitStatus,
    stderr: String,
}

fn run_child(dir: &Path, run: u64, mode: &str) -> ChildOutput {
    let exe = std::env::current_exe().expect("path of the test binary");
    let output = Command::new(exe)
        .args(["--exact", "enospc_child", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_DIR_VAR, dir)
        .env(CHILD_RUN_VAR, run.to_string())
        .env(CHILD_MODE_VAR, mode)
        .stdin(Stdio::null())
        .output()
        .expect("running the child");
    let lines = BufReader::new(&output.stdout[..])
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| {
            // The test harness may print its own text before ours on the same line.
            const TAGS: [&str; 8] = [
                "ACK ",
                "COMMIT-ERR ",
                "LATER-ERR ",
                "OPEN-ERR ",
                "OPENED",
                "NEVER-FULL",
                "READ-OK",
                "READ-ERR ",
            ];
            TAGS.iter()
                .filter_map(|tag| line.find(tag))
                .min()
                .map(|at| line[at..].to_owned())
        })
        .collect();
    ChildOutput {
        lines,
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

/// A mounted tmpfs, unmounted on drop (also when a check fails).
struct Mount {
    path: PathBuf,
}

impl Mount {
    fn new(path: &Path, size_mib: u64) -> Result<Mount, String> {
        if !cfg!(target_os = "linux") {
            return Err("not Linux".to_owned());
        }
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Mount {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let plain = Command::new("umount").arg(&self.path).status();
        if !matches!(plain, Ok(s) if s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

#[derive(Default)]
struct Totals {
    runs: u64,
    acked: u64,
    no_space_errors: u64,
    poisoned_no_space: u64,
    full_reopens_ok: u64,
    full_reopens_no_space: u64,
    resumed_commits: u64,
}

fn child_problem(run: u64, what: &str, child: &ChildOutput) -> String {
    format!(
        "run {run}: {what}; status {}; stdout: {:?}; stderr: {}",
        child.status,
        child.lines.iter().rev().take(8).collect::<Vec<_>>(),
        child.stderr.trim()
    )
}

/// Checks that the child ended by itself with success, not by a signal.
fn check_exit(run: u64, child: &ChildOutput) {
    use std::os::unix::process::ExitStatusExt;
    assert!(
        child.status.signal().is_none(),
        "{}",
        child_problem(run, "child killed by a signal (SIGBUS?)", child)
    );
    assert!(
        child.status.success(),
        "{}",
        child_problem(run, "child failed", child)
    );
}

/// Verifies the acknowledged commits `1..=acked` and that nothing beyond `acked + 1` (the
/// commit that failed may or may not have landed) exists. Returns the last sequence found.
fn verify(env: &Environment, shape: RunShape, acked: u64, run: u64) -> u64 {
    let rtx = env.begin_read().expect("read transaction");
    let last = rtx
        .open_tree("last")
        .ok()
        .and_then(|t| t.get(b"last").expect("reading last").map(<[u8]>::to_vec))
        .map_or(0, |v| {
            u64::from_be_bytes(v.try_into().expect("last holds a u64"))
        });
    assert!(
        last >= acked,
        "run {run}: {acked} commits acknowledged, the last present is {last}"
    );
    assert!(
        last <= acked + 1,
        "run {run}: {acked} commits acknowledged, yet commit {last} is present"
    );
    if last > 0 {
        let data = rtx.open_tree("data").expect("data tree");
        for seq in 1..=last {
            for i in 0..shape.keys_per_commit {
                let got = data.get(key(seq, i)).expect("reading a key");
                assert!(
                    got == Some(&value(shape, seq, i)[..]),
                    "run {run}: key {i} of commit {seq} (of {last}) missing or wrong"
                );
            }
        }
        assert_eq!(
            data.len(),
            last * shape.keys_per_commit,
            "run {run}: extra keys after commit {last}"
        );
    }
    drop(rtx);
    env.check()
        .unwrap_or_else(|e| panic!("run {run}: integrity check: {e}"));
    last
}

fn listing(path: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("df -k {0}; ls -lR {0}", path.display()))
        .output()
        .expect("ls");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn one_run(run: u64, root: &Path, totals: &mut Totals) -> Result<(), String> {
    let shape = shape(run);
    let mount_point = root.join(format!("mnt{run}"));
    std::fs::create_dir(&mount_point).expect("creating the mount point");
    let mount = Mount::new(&mount_point, shape.tmpfs_size_mib)?;
    let filler = mount.path.join("filler");
    std::fs::write(
        &filler,
        vec![0xA5u8; (shape.filler_size_kib * 1024) as usize],
    )
    .expect("writing the filler file");
    let dir = mount.path.join("env");

    // Fill until a commit fails.
    let child = run_child(&dir, run, "fill");
    check_exit(run, &child);
    let mut acked = 0u64;
    let mut commit_error = None;
    for line in &child.lines {
        if let Some(seq) = line.strip_prefix("ACK ") {
            acked = seq.trim().parse().expect("an acknowledged sequence");
        } else if line.starts_with("COMMIT-ERR ") {
            commit_error = Some(line.clone());
        } else if line.starts_with("OPEN-ERR ") || line.starts_with("NEVER-FULL") {
            panic!(
                "{}",
                child_problem(run, "the fill did not reach ENOSPC", &child)
            );
        } else if line.starts_with("LATER-ERR") && !line.contains(" nospace ") {
            panic!(
                "{}",
                child_problem(run, "a write after ENOSPC did not fail cleanly", &child)
            );
        } else if line.starts_with("READ-ERR") {
            panic!(
                "{}",
                child_problem(run, "reads failed after ENOSPC", &child)
            );
        }
    }
    let commit_error = commit_error
        .unwrap_or_else(|| panic!("{}", child_problem(run, "no commit failed", &child)));
    assert!(
        commit_error.contains(" nospace "),
        "{}",
        child_problem(
            run,
            &format!("commit failed with something else than NoSpace: {commit_error}"),
            &child
        )
    );
    if commit_error.contains("poisoned") {
        totals.poisoned_no_space += 1;
    } else {
        totals.no_space_errors += 1;
    }
    totals.acked += acked;

    // Reopen while the disk is still full: success or NoSpace, never anything else.
    let child = run_child(&dir, run, "reopen");
    check_exit(run, &child);
    if child.lines.iter().any(|l| l == "OPENED") {
        totals.full_reopens_ok += 1;
    } else if child
        .lines
        .iter()
        .any(|l| l.starts_with("OPEN-ERR nospace"))
    {
        totals.full_reopens_no_space += 1;
    } else {
        panic!(
            "{}",
            child_problem(run, "reopening the full disk failed badly", &child)
        );
    }

    // Free space: the acknowledged data is intact and writes resume.
    std::fs::remove_file(&filler).expect("removing the filler file");
    let env = Environment::open(&dir, options(shape)).unwrap_or_else(|e| {
        panic!(
            "run {run}: reopening after freeing space: {e}; {}",
            listing(&mount.path)
        )
    });
    let last = verify(&env, shape, acked, run);
    // Space for a few more commits: a quarter of the freed filler.
    let resumed = RESUMED_COMMITS.min(
        (shape.filler_size_kib * 1024 / 4)
            / (shape.value_size_bytes * 2 * shape.keys_per_commit + 8192),
    );
    for seq in last + 1..=last + resumed.max(1) {
        commit(&env, shape, seq)
            .unwrap_or_else(|e| panic!("run {run}: commit {seq} after freeing space: {e}"));
        totals.resumed_commits += 1;
    }
    drop(env);
    let env = Environment::open(&dir, options(shape))
        .unwrap_or_else(|e| panic!("run {run}: reopening after the resumed writes: {e}"));
    let final_last = verify(&env, shape, last + resumed.max(1), run);
    assert_eq!(final_last, last + resumed.max(1), "run {run}");
    drop(env);
    drop(mount);
    totals.runs += 1;
    Ok(())
}

#[test]
fn enospc_runs() {
    if std::env::var(CHILD_DIR_VAR).is_ok() {
        return; // never nest
    }
    let started = std::time::Instant::now();
    let root = tempfile::tempdir().expect("tempdir");
    let runs = RUNS_PER_SCALE * common::scale();
    let mut totals = Totals::default();
    for run in 0..runs {
        if let Err(reason) = one_run(run, root.path(), &mut totals) {
            // A passing test's output is captured: say it where CI logs show it.
            common::summary(&format!(
                "enospc: SKIPPED after {} of {runs} runs, no small file system to fill \
                 ({reason}); the simulated full-disk test still runs",
                totals.runs
            ));
            return;
        }
    }
    common::summary(&format!(
        "enospc: {} runs, {} acked commits, {} NoSpace + {} poisoned-by-NoSpace commit errors, \
         0 signals, full-disk reopens {} ok / {} NoSpace, {} commits resumed after freeing \
         space, {:.1} s",
        totals.runs,
        totals.acked,
        totals.no_space_errors,
        totals.poisoned_no_space,
        totals.full_reopens_ok,
        totals.full_reopens_no_space,
        totals.resumed_commits,
        started.elapsed().as_secs_f64()
    ));
    assert_eq!(totals.runs, runs);
}

// ---------------------------------------------------------------------------------------
// A full disk on the simulated storage: deterministic in what it checks, and independent of
// mount permissions.

/// A [`SimStorage`] with a capacity: growing any file past it fails with `ENOSPC`.
#[derive(Clone)]
struct CappedStorage {
    inner: SimStorage,
    capacity_bytes: Arc<AtomicU64>,
}

impl CappedStorage {
    /// Bytes held by all files.
    fn used_bytes(&self) -> io::Result<u64> {
        let mut total = 0;
        for dir in ["", "journal"] {
            let names = match self.inner.list(dir) {
                Ok(names) => names,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for name in names {
                let path = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if let Ok(file) = self.inner.open(&path, FileKind::Data, false) {
                    total += file.len()?;
                }
            }
        }
        Ok(total)
    }

    /// Fails with `ENOSPC` unless a file of `len_bytes` may grow to `new_len_bytes`.
    fn claim(&self, len_bytes: u64, new_len_bytes: u64) -> io::Result<()> {
        if new_len_bytes <= len_bytes {
            return Ok(());
        }
        let used = self.used_bytes()?;
        if used + (new_len_bytes - len_bytes) > self.capacity_bytes.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}

impl Storage for CappedStorage {
    fn open(&self, name: &str, kind: FileKind, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(CappedFile {
            storage: self.clone(),
            inner: self.inner.open(name, kind, create)?,
        }))
    }
    fn exists(&self, name: &str) -> io::Result<bool> {
        self.inner.exists(name)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir(&self, dir: &str) -> io::Result<()> {
        self.inner.create_dir(dir)
    }
    fn sync_dir(&self, dir: &str) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock(&self) -> io::Result<Box<dyn Any + Send + Sync>> {
        self.inner.lock()
    }
    fn process_readers(&self) -> io::Result<Option<Arc<dyn hrafn::storage::ProcessReaders>>> {
        self.inner.process_readers()
    }
    fn note(&self, event: StorageEvent) {
        self.inner.note(event);
    }
}

struct CappedFile {
    storage: CappedStorage,
    inner: Arc<dyn StorageFile>,
}

impl StorageFile for CappedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.storage
            .claim(self.inner.len()?, offset + buf.len() as u64)?;
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        self.storage.claim(self.inner.len()?, len_bytes)?;
        self.inner.allocate(len_bytes)
    }
    fn truncate(&self, len_bytes: u64) -> io::Result<()> {
        self.inner.truncate(len_bytes)
    }
    fn map(&self, len_bytes: u64) -> io::Result<Arc<dyn Mapping>> {
        self.inner.map(len_bytes)
    }
}

/// Fills a capped disk until a commit fails, then frees as much space as the tmpfs runs
/// free (two journal files and half a MiB, and room for one commit): the environment must
/// reopen with every
/// acknowledged commit and take new writes. Some cases keep the flusher far behind the
/// commits, so many committed pages wait in scratch when the disk fills.
#[test]
fn full_sim_disk_reopens_after_freeing_space() {
    let cases: [(u64, u64, u64); 6] = [
        (3, 30_000, 2),
        (4, 6000, 2),
        (6, 200_000, 2),
        (5, 1500, 2),
        (4, 30_000, 60_000),
        (6, 6000, 60_000),
    ];
    for (case, &(capacity_mib, value_size_bytes, flush_interval_ms)) in cases.iter().enumerate() {
        let run = 1000 + case as u64;
        let shape = RunShape {
            tmpfs_size_mib: capacity_mib,
            // As on the tmpfs, plus room for one more commit: its journal record and its
            // pages (values are up to 1.5 times the nominal size).
            filler_size_kib: 2 * 64 + 512 + 2 * 3 * value_size_bytes * 3 / 2 / 1024,
            value_size_bytes,
            keys_per_commit: 3,
            journal_file_size_kib: 64,
            merged: case % 2 == 1,
        };
        let options = options(shape)
            .flush_interval_ms(flush_interval_ms)
            .flush_threshold_bytes(if flush_interval_ms > 1000 {
                1 << 30
            } else {
                256 << 10
            })
            .sync_interval_ms(flush_interval_ms * 5);
        let storage = CappedStorage {
            inner: SimStorage::new(run),
            capacity_bytes: Arc::new(AtomicU64::new(capacity_mib << 20)),
        };
        let open = || Environment::open_with_storage(Arc::new(storage.clone()), options.clone());
        let env = open().expect("open");
        let mut acked = 0;
        let failure = loop {
            match commit(&env, shape, acked + 1) {
                Ok(()) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 100_000, "case {case}: the disk never filled");
        };
        assert!(is_no_space(&failure), "case {case}: {failure}");
        drop(env);
        storage
            .capacity_bytes
            .fetch_add(shape.filler_size_kib * 1024, Ordering::SeqCst);
        let env = open().unwrap_or_else(|e| {
            panic!(
                "case {case}: reopening after freeing space ({acked} commits acknowledged, \
                 {} of {} bytes used): {e}",
                storage.used_bytes().expect("usage"),
                storage.capacity_bytes.load(Ordering::SeqCst)
            )
        });
        let last = verify(&env, shape, acked, run);
        commit(&env, shape, last + 1)
            .unwrap_or_else(|e| panic!("case {case}: a commit after freeing space: {e}"));
    }
}

/// An operation that fails part-way for lack of space (here growing the data file for an
/// overflow value, after the leaf's old entry was taken out) fails its transaction:
/// committing it anyway is refused, and the key keeps its old value.
#[test]
fn an_operation_failing_for_space_part_way_fails_its_transaction() {
    let sim = SimStorage::with_capacity(7, 8 << 20);
    let options = Options::default().journal_file_size_bytes(1 << 20);
    let env = Environment::open_with_storage(Arc::new(sim), options).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("t")
        .insert(b"k", b"small")
        .expect("insert");
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    let inserted = wtx
        .open_tree("t")
        .expect("t")
        .insert(b"k", vec![1u8; 16 << 20]);
    assert!(
        matches!(inserted, Err(Error::NoSpace { .. })),
        "{inserted:?}"
    );
    let committed = wtx.commit();
    assert!(
        matches!(committed, Err(Error::TransactionFailed { .. })),
        "{committed:?}"
    );
    let rtx = env.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("t").expect("t").get(b"k").expect("get"),
        Some(&b"small"[..])
    );
    drop(rtx);
    env.check().expect("check");
}
