//! The `hrafn` binary given wrong paths, used targets, broken chains and live writers:
//! every failure exits non-zero with a message naming the path, never a panic, and leaves
//! what it was given as it was.

mod common;

use common::names;
use hrafn::{Environment, Options};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn hrafn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(args)
        .output()
        .expect("run hrafn")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

/// A failure: the exit code given, a message on standard error, no panic.
fn assert_fails(o: &Output, code: i32, mentions: &str) {
    assert_eq!(o.status.code(), Some(code), "{o:?}");
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(mentions), "{mentions:?} not in {err:?}");
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn small_env(dir: &Path, options: Options) -> Environment {
    let env = Environment::open(dir, options).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"k", b"v")
        .expect("insert");
    wtx.commit().expect("commit");
    env
}

#[test]
fn a_hex_key_with_a_multibyte_character_is_bad_usage_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(small_env(dir.path(), Options::default()));
    // Signs too: `from_str_radix` alone reads `+f` as 0x0f.
    for key in ["a\u{e9}0", "\u{e9}\u{e9}", "0g", "+f", "+0ff"] {
        let o = hrafn(&["get", s(dir.path()), "t", key, "--hex-key"]);
        assert_fails(&o, 2, "not hex");
    }
}

#[test]
fn reading_commands_refuse_a_directory_without_an_environment_and_leave_it_empty() {
    let empty = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let d = s(empty.path());
    let out = work.path().join("b");
    for args in [
        vec!["stat", d],
        vec!["check", d],
        vec!["trees", d],
        vec!["dump", d],
        vec!["report", d],
        vec!["scan", d, "t"],
        vec!["get", d, "t", "k"],
        vec!["backup", d, s(&out)],
        vec!["backup", "--chain", d, s(&out)],
        vec!["backup", "--incremental", d, s(&out)],
        vec!["compact", d, "--into", s(&out)],
    ] {
        let o = hrafn(&args);
        assert_fails(&o, 3, "no environment here");
        assert!(stderr(&o).contains(d), "{args:?}: {}", stderr(&o));
        assert!(names(empty.path()).is_empty(), "{args:?} wrote into it");
        assert!(!out.exists(), "{args:?} made the target");
    }
}

#[test]
fn every_command_given_a_missing_path_or_a_file_names_it_and_fails() {
    let work = tempfile::tempdir().expect("tempdir");
    let missing = work.path().join("missing");
    let file = work.path().join("file");
    std::fs::write(&file, b"not an environment").expect("file");
    let target = work.path().join("target");
    for bad in [&missing, &file] {
        let b = s(bad);
        for args in [
            vec!["stat", b],
            vec!["check", b],
            vec!["dump", b],
            vec!["report", b],
            vec!["backup", b, s(&target)],
            vec!["backup", "--chain", b, s(&target)],
            vec!["compact", b],
            vec!["compact", b, "--into", s(&target)],
            vec!["verify", b],
            vec!["restore", "--into", s(&target), b],
        ] {
            let o = hrafn(&args);
            assert!(matches!(o.status.code(), Some(1 | 3)), "{args:?}: {o:?}");
            let err = stderr(&o);
            assert!(
                !err.contains("panicked") && err.contains(b),
                "{args:?}: {err}"
            );
            assert!(!target.exists(), "{args:?} made the target");
        }
    }
    assert!(!missing.exists());
}

#[test]
fn a_backup_into_the_environment_or_a_used_directory_is_refused_naming_it() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    drop(small_env(&db, Options::default().incremental_backups(true)));
    let before = names(&db);
    let sub = db.join("sub");
    let dotted = work.path().join("other").join("..").join("db").join("x");
    for args in [
        vec!["backup", s(&db), s(&db)],
        vec!["backup", s(&db), s(&sub)],
        vec!["backup", s(&db), s(&dotted)],
        vec!["backup", "--chain", s(&db), s(&sub)],
        vec!["backup", "--compact", s(&db), s(&sub)],
    ] {
        let o = hrafn(&args);
        assert!(!o.status.success(), "{args:?}: {o:?}");
        assert!(stderr(&o).contains(" is inside "), "{o:?}");
        assert_eq!(names(&db), before, "{args:?} wrote into the environment");
    }
    let full = work.path().join("full");
    assert!(hrafn(&["backup", s(&db), s(&full)]).status.success());
    let manifest = std::fs::read(full.join("BACKUP")).expect("manifest");
    let again = hrafn(&["backup", s(&db), s(&full)]);
    assert_fails(&again, 3, s(&full));
    assert!(stderr(&again).contains("not empty"), "{again:?}");
    assert_eq!(
        std::fs::read(full.join("BACKUP")).expect("manifest"),
        manifest
    );
    let check = hrafn(&["check", s(&db)]);
    assert!(check.status.success(), "{check:?}");
}

/// `hrafn backup` without `--chain` opens the environment read-only: it starts no chain,
/// and an incremental taken after it must not pass for its continuation.
#[test]
fn an_incremental_after_a_plain_full_backup_is_refused_by_verify_and_restore() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    let options = Options::default().incremental_backups(true);
    drop(small_env(&db, options.clone()));
    let p = |name: &str| work.path().join(name);
    assert!(hrafn(&["backup", s(&db), s(&p("full"))]).status.success());
    drop(small_env(&db, options));
    let incr = hrafn(&["backup", "--incremental", s(&db), s(&p("incr"))]);
    assert!(incr.status.success(), "{incr:?}");

    assert_fails(&hrafn(&["verify", s(&p("full")), s(&p("incr"))]), 1, "incr");
    let restore = hrafn(&[
        "restore",
        "--into",
        s(&p("restored")),
        s(&p("full")),
        s(&p("incr")),
    ]);
    assert_fails(&restore, 1, "incr");
    assert!(
        !p("restored").exists(),
        "a refused restore left a directory"
    );
}

#[test]
fn a_restore_into_a_used_directory_is_refused_and_left_as_it_was() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    drop(small_env(&db, Options::default()));
    let full = work.path().join("full");
    assert!(hrafn(&["backup", s(&db), s(&full)]).status.success());
    let used = work.path().join("used");
    std::fs::create_dir(&used).expect("dir");
    std::fs::write(used.join("keep"), b"mine").expect("file");
    let o = hrafn(&["restore", "--into", s(&used), s(&full)]);
    assert_fails(&o, 3, s(&used));
    assert_eq!(names(&used), ["keep"]);
    // Into the backup itself.
    let o = hrafn(&["restore", "--into", s(&full), s(&full)]);
    assert!(!o.status.success(), "{o:?}");
    let verify = hrafn(&["verify", s(&full)]);
    assert!(verify.status.success(), "{verify:?}");
}

/// The writer commits without pause while another process backs the environment up:
/// the backup verifies, and its restore holds exactly the commits up to one of them.
#[test]
fn a_backup_from_another_process_while_commits_go_on_restores_a_committed_prefix() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    let env = Arc::new(Environment::open(&db, Options::default()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (env, stop) = (Arc::clone(&env), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) || i < 50 {
                i += 1;
                let mut txn = env.begin_write().expect("begin");
                {
                    let mut log = txn.open_tree("log").expect("log");
                    log.insert(i.to_be_bytes(), [i as u8; 300]).expect("insert");
                    log.insert(b"last", i.to_be_bytes()).expect("last");
                }
                txn.commit().expect("commit");
            }
        })
    };
    let mut restored_lasts = Vec::new();
    for round in 0..3 {
        let b = work.path().join(format!("b{round}"));
        let backup = hrafn(&["backup", s(&db), s(&b)]);
        assert!(backup.status.success(), "{backup:?}");
        let verify = hrafn(&["verify", "--deep", s(&b)]);
        assert!(verify.status.success(), "{verify:?}");
        let r = work.path().join(format!("r{round}"));
        let restore = hrafn(&["restore", "--into", s(&r), s(&b)]);
        assert!(restore.status.success(), "{restore:?}");
        let copy = Environment::open(&r, Options::default()).expect("open the restore");
        copy.check().expect("integrity");
        let rtx = copy.begin_read().expect("read");
        let Ok(log) = rtx.open_tree("log") else {
            continue;
        };
        let last = log
            .get(b"last")
            .expect("get")
            .map_or(0, |v| u64::from_be_bytes(v.try_into().expect("8 bytes")));
        assert_eq!(log.len(), last + u64::from(last > 0), "keys 1..=last");
        for i in 1..=last {
            assert_eq!(
                log.get(i.to_be_bytes()).expect("get"),
                Some(&[i as u8; 300][..]),
                "key {i} of {last}"
            );
        }
        restored_lasts.push(last);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(
        restored_lasts.windows(2).all(|w| w[0] <= w[1]),
        "{restored_lasts:?}"
    );
}

#[test]
fn a_dump_with_binary_keys_empty_values_and_the_largest_key_loads_back_the_same() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    let longest = vec![0xffu8; hrafn::limits::KEY_SIZE_MAX_BYTES];
    {
        let env = Environment::open(&db, Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("bin \u{e9}\n").expect("tree");
            t.insert([0u8], b"").expect("insert");
            t.insert([0u8, 0xff, b' ', b'\n'], [0u8; 3])
                .expect("insert");
            t.insert(&longest, b"").expect("insert");
            t.insert(b"-", b"-").expect("insert");
        }
        {
            let mut m = wtx.open_multi_tree("multi").expect("multi");
            m.add(b"\x00", b"").expect("add");
            m.add(b"\x00", b"\xff").expect("add");
        }
        {
            let mut f = wtx.open_fixed_tree("fixed", 2).expect("fixed");
            f.insert(u64::MAX, &[0, 0xff]).expect("insert");
        }
        wtx.commit().expect("commit");
    }
    let dump = hrafn(&["dump", s(&db)]);
    assert!(dump.status.success(), "{dump:?}");
    let copy = work.path().join("copy");
    let mut load = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(["load", s(&copy)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hrafn load");
    {
        use std::io::Write;
        let mut stdin = load.stdin.take().expect("stdin");
        stdin.write_all(&dump.stdout).expect("write the dump");
    }
    let loaded = load.wait_with_output().expect("load");
    assert!(loaded.status.success(), "{loaded:?}");
    assert_eq!(stdout(&hrafn(&["dump", s(&copy)])), stdout(&dump));
    let env = Environment::open(&copy, Options::default()).expect("open");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("bin \u{e9}\n").expect("tree");
    assert_eq!(t.get(&longest).expect("get"), Some(&b""[..]));
    assert_eq!(t.get([0u8]).expect("get"), Some(&b""[..]));
}

#[test]
fn writing_commands_on_an_environment_another_process_holds_fail_with_code_3() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    let _held = small_env(&db, Options::default().incremental_backups(true));
    let load = |flags: &[&str]| {
        let mut load = Command::new(env!("CARGO_BIN_EXE_hrafn"))
            .args(["load", s(&db)])
            .args(flags)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hrafn load");
        {
            use std::io::Write;
            // A dump's first line: only then does `load` open the environment.
            let mut stdin = load.stdin.take().expect("stdin");
            stdin.write_all(b"hrafn-dump 1\n").expect("feed");
        }
        load.wait_with_output().expect("load")
    };
    // Its trees are seen read-only first (a usage error); merging into it needs the
    // writer, which another process is.
    assert_fails(&load(&[]), 2, "--merge");
    assert_fails(&load(&["--merge"]), 3, s(&db));
    assert_fails(&hrafn(&["compact", s(&db)]), 3, s(&db));
    let chain = work.path().join("chain");
    assert_fails(
        &hrafn(&["backup", "--chain", s(&db), s(&chain)]),
        3,
        "another process",
    );
    assert!(!chain.exists());
    // A compaction into the environment itself or an existing file is refused.
    assert_fails(
        &hrafn(&["compact", s(&db), "--into", s(&db)]),
        3,
        "not empty",
    );
    let file = work.path().join("file");
    std::fs::write(&file, b"x").expect("file");
    assert_fails(
        &hrafn(&["compact", s(&db), "--into", s(&file)]),
        3,
        "not a directory",
    );
    assert_eq!(std::fs::read(&file).expect("file"), b"x");
}

#[test]
fn a_damaged_data_file_is_reported_by_check_with_code_1() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    {
        let env = small_env(&db, Options::default());
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0..2_000u32 {
                t.insert(i.to_be_bytes(), [1u8; 100]).expect("insert");
            }
        }
        wtx.commit().expect("commit");
        env.flush_and_sync().expect("flush");
    }
    let data = db.join(hrafn::DATA_FILE);
    let mut bytes = std::fs::read(&data).expect("read");
    // Past the first pages (meta and bitmap): somewhere in the tree's pages.
    let at = bytes.len() / 2;
    for b in &mut bytes[at..at + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&data, bytes).expect("write");
    let check = hrafn(&["check", s(&db)]);
    assert_eq!(check.status.code(), Some(1), "{check:?}");
    assert!(!stderr(&check).contains("panicked"), "{check:?}");
    for cmd in ["dump", "stat", "report", "trees"] {
        let o = hrafn(&[cmd, s(&db)]);
        assert!(!stderr(&o).contains("panicked"), "{cmd}: {o:?}");
        assert_ne!(o.status.code(), None, "{cmd}: {o:?}");
    }
}

/// Damage found while opening (both headers damaged) exits 1 like damage the page walk
/// finds, for `check` and the other reading commands; it is not taken for a missing
/// environment (3).
#[test]
fn damaged_headers_are_reported_with_code_1() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    drop(small_env(&db, Options::default()));
    for header in ["header.a", "header.b"] {
        let path = db.join(header);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[40] ^= 0xff;
        std::fs::write(&path, bytes).expect("write");
    }
    for cmd in ["check", "stat", "dump"] {
        assert_fails(&hrafn(&[cmd, s(&db)]), 1, "corruption");
    }
}

/// A dump line the loader cannot use names its line and exits 3 (`docs/dump.md`), whatever
/// the engine's error: here a table schema of an unknown version.
#[test]
fn a_bad_table_schema_in_a_dump_names_its_line_and_exits_3() {
    let work = tempfile::tempdir().expect("tempdir");
    let db = work.path().join("db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(["load", s(&db)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hrafn");
    std::io::Write::write_all(
        child.stdin.as_mut().expect("stdin"),
        b"hrafn-dump 1\ntable 74 00\nend\n",
    )
    .expect("write the dump");
    let o = child.wait_with_output().expect("wait");
    assert_fails(&o, 3, "dump line 2");
}

/// `load` reads the first line before it opens anything: input that is not a dump leaves
/// no environment behind; a dump whose hex has a sign is refused, naming the line.
#[test]
fn load_refuses_what_is_not_a_dump_before_creating_anything() {
    let work = tempfile::tempdir().expect("tempdir");
    let run = |dir: &Path, input: &[u8]| {
        let mut load = Command::new(env!("CARGO_BIN_EXE_hrafn"))
            .args(["load", s(dir)])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run hrafn load");
        {
            use std::io::Write;
            let mut stdin = load.stdin.take().expect("stdin");
            stdin.write_all(input).expect("feed");
        }
        load.wait_with_output().expect("load")
    };
    let fresh = work.path().join("fresh");
    assert_fails(&run(&fresh, b"id,label\n1,Person\n"), 3, "not a dump");
    assert!(
        !fresh.exists(),
        "nothing created for input that is not a dump"
    );

    let signed = work.path().join("signed");
    let dump = b"hrafn-dump 1\ntree 74 btree\nentry +a +b\nend\n";
    assert_fails(&run(&signed, dump), 3, "line 3");
}
