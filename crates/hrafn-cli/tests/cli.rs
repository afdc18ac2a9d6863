//! The `hrafn` binary against a real environment: every command's output and exit code,
//! while another handle holds the environment open for writing.

mod common;

use hrafn::{Environment, Options};
use std::process::{Command, Output};

fn hrafn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(args)
        .output()
        .expect("run hrafn")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

/// An environment with a B+tree, a fixed-size tree and a multi-value tree, kept open for
/// writing while the tests run the tool on it.
fn fixture() -> (tempfile::TempDir, Environment) {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut users = wtx.open_tree("users").expect("open");
        users.insert(b"alice", b"admin").expect("insert");
        users.insert(b"bob", b"reader").expect("insert");
        users.insert(b"carol", b"\x00\xffbinary").expect("insert");
    }
    {
        let mut series = wtx.open_fixed_tree("cpu", 8).expect("open");
        for t in 0..5u64 {
            series
                .insert(t * 10, &(t as f64).to_le_bytes())
                .expect("insert");
        }
    }
    {
        let mut by_role = wtx.open_multi_tree("by-role").expect("open");
        by_role.add(b"admin", b"alice").expect("add");
        by_role.add(b"reader", b"bob").expect("add");
        by_role.add(b"reader", b"carol").expect("add");
    }
    wtx.commit().expect("commit");
    (dir, env)
}

#[test]
fn read_commands_print_what_is_stored() {
    let (dir, _writer) = fixture();
    let d = dir.path().to_str().expect("utf-8 path");

    let trees = hrafn(&["trees", d]);
    assert!(trees.status.success(), "{trees:?}");
    assert_eq!(
        stdout(&trees),
        "by-role\tmulti\t2\ncpu\tfixed(8)\t5\nusers\tbtree\t3\n"
    );

    let get = hrafn(&["get", d, "users", "bob"]);
    assert!(get.status.success());
    assert_eq!(stdout(&get), "reader\n");
    let get = hrafn(&["get", d, "users", "carol", "--format", "hex"]);
    assert_eq!(stdout(&get), "00ff62696e617279\n");
    let get = hrafn(&["get", d, "users", "616c696365", "--hex-key"]);
    assert_eq!(stdout(&get), "admin\n");

    let scan = hrafn(&["scan", d, "users", "--prefix", "b"]);
    assert_eq!(stdout(&scan), "bob\treader\n");
    let scan = hrafn(&["scan", d, "users", "--from", "b", "--format", "json"]);
    assert_eq!(
        stdout(&scan),
        "{\"key\":\"bob\",\"value\":\"reader\"}\n{\"key\":\"carol\",\"value\":{\"hex\":\"00ff62696e617279\"}}\n"
    );
    let scan = hrafn(&["scan", d, "users", "--format", "text", "--limit", "1"]);
    assert_eq!(stdout(&scan), "alice\tadmin\n");
    let scan = hrafn(&["scan", d, "users", "--from", "carol"]);
    assert_eq!(stdout(&scan), "carol\t\\x00\\xffbinary\n");

    let scan = hrafn(&[
        "scan", d, "cpu", "--from", "10", "--to", "40", "--format", "hex",
    ]);
    assert_eq!(stdout(&scan).lines().count(), 3);
    assert!(stdout(&scan).starts_with("3130\t000000000000f03f\n"));
    let scan = hrafn(&["scan", d, "by-role", "--prefix", "reader"]);
    assert_eq!(stdout(&scan), "reader\tbob\nreader\tcarol\n");

    let check = hrafn(&["check", d]);
    assert!(check.status.success(), "{check:?}");
    assert!(
        stdout(&check).starts_with("ok: 3 trees"),
        "{}",
        stdout(&check)
    );
    let stat = hrafn(&["stat", d]);
    assert!(stat.status.success());
    assert!(stdout(&stat).contains("trees\t3\n"), "{}", stdout(&stat));
}

#[test]
fn failures_have_exit_codes_and_messages() {
    let (dir, _writer) = fixture();
    let d = dir.path().to_str().expect("utf-8 path");
    let missing_key = hrafn(&["get", d, "users", "zed"]);
    assert_eq!(missing_key.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing_key.stderr).contains("no such key"));
    let missing_tree = hrafn(&["scan", d, "nope"]);
    assert_eq!(missing_tree.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing_tree.stderr).contains("does not exist"));
    let bad_key = hrafn(&["get", d, "cpu", "ten"]);
    assert_eq!(bad_key.status.code(), Some(2));
    let usage = hrafn(&["scan"]);
    assert_eq!(usage.status.code(), Some(2));
    let file = dir.path().join(hrafn::DATA_FILE);
    assert!(file.is_file());
    let not_dir = hrafn(&["trees", file.to_str().expect("utf-8")]);
    assert_eq!(not_dir.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&not_dir.stderr).contains("an environment is a directory"));
    let empty = tempfile::tempdir().expect("tempdir");
    let nothing = hrafn(&["trees", empty.path().to_str().expect("utf-8")]);
    assert_eq!(nothing.status.code(), Some(3), "{nothing:?}");
}

#[test]
fn a_dump_loads_back_into_an_identical_database() {
    let (dir, writer) = fixture();
    let mut wtx = writer.begin_write().expect("write");
    {
        let mut series = wtx.open_tree("series").expect("open");
        series.insert(b"plain", b"").expect("insert");
        {
            let mut host = series.open_tree(b"host-a").expect("nested");
            host.insert(b"os", b"linux").expect("insert");
            let mut cpu = host.open_fixed_tree(b"cpu", 8).expect("nested fixed");
            for t in 0..100u64 {
                cpu.insert(t, &t.to_le_bytes()).expect("insert"); // spills into pages
            }
        }
        {
            let mut small = series.open_fixed_tree(b"small", 4).expect("embedded");
            small.insert(7, b"abcd").expect("insert");
        }
        series.open_fixed_tree(b"empty", 2).expect("empty embedded");
        let mut tags = series.open_multi_tree(b"tags").expect("nested multi");
        tags.add(b"env", b"prod").expect("add");
        tags.add(b"env", b"eu").expect("add");
    }
    add_people(&mut wtx);
    wtx.commit().expect("commit");
    let d = dir.path().to_str().expect("utf-8 path");
    let first = hrafn(&["dump", d]);
    assert!(first.status.success(), "{first:?}");
    let text = stdout(&first);
    assert!(text.starts_with("hrafn-dump 2\n"));
    assert!(text.ends_with("\ndone\n"), "a dump closes with `done`");

    let copy = tempfile::tempdir().expect("tempdir");
    let c = copy.path().to_str().expect("utf-8 path");
    let loaded = load_into(c, text.as_bytes());
    assert!(loaded.status.success(), "{loaded:?}");
    let second = hrafn(&["dump", c]);
    assert_eq!(stdout(&second), text, "the copy dumps the same");
    let check = hrafn(&["check", c]);
    assert!(check.status.success(), "{check:?}");
    assert_eq!(stdout(&hrafn(&["trees", c])), stdout(&hrafn(&["trees", d])));

    // Loading again into the copy, which now holds trees, is refused and changes
    // nothing; with --merge it adds to them.
    let again = load_into(c, text.as_bytes());
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert!(stderr(&again).contains("--merge"), "{again:?}");
    assert_eq!(
        stdout(&hrafn(&["dump", c])),
        text,
        "the refused load changed nothing"
    );
    let extra = b"hrafn-dump 1\ntree 74 btree\nentry 6b 76\nend\n";
    let merged = load_into_with(c, &["--merge"], extra);
    assert!(merged.status.success(), "{merged:?}");
    let trees = stdout(&hrafn(&["trees", c]));
    assert!(trees.lines().any(|l| l.starts_with("t\t")), "{trees}");
    assert!(trees.lines().any(|l| l.starts_with("series\t")), "{trees}");

    let feed = |input: &[u8]| {
        let target = tempfile::tempdir().expect("tempdir");
        load_into(target.path().to_str().expect("utf-8 path"), input)
    };
    // A damaged dump is refused with its line number.
    let refused = feed(b"hrafn-dump 1\ntree 7573657273 btree\nentry zz 00\nend\n");
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("line 3"));

    // A dump cut off (here before its last tree's `end` and the closing `done`, and then
    // after a whole tree but before `done`) is refused, not loaded as a smaller database.
    let cut_at = text.rfind("\nend\n").expect("an end line") + 1;
    for cut in [&text[..cut_at], &text[..text.len() - "done\n".len()]] {
        let cut_off = feed(cut.as_bytes());
        assert_eq!(cut_off.status.code(), Some(3), "{cut_off:?}");
        assert!(stderr(&cut_off).contains("cut off") || stderr(&cut_off).contains("missing"));
    }
    // Anything after `done` is refused; a version 1 dump (no `done`) still loads.
    let trailing = feed(format!("{text}tree 74 btree\nend\n").as_bytes());
    assert_eq!(trailing.status.code(), Some(3), "{trailing:?}");
    let v1 = feed(b"hrafn-dump 1\ntree 74 btree\nentry 6b 76\nend\n");
    assert!(v1.status.success(), "{v1:?}");
}

/// A dump whose reader closes the pipe early is incomplete: `hrafn dump` fails, where a
/// scan cut by `head` succeeds.
#[test]
fn a_dump_into_a_closed_pipe_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = hrafn::Environment::open(dir.path(), hrafn::Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for i in 0..200_000u32 {
            t.insert(i.to_be_bytes(), [7u8; 32]).expect("insert");
        }
    }
    wtx.commit().expect("commit");
    drop(env);
    let mut dump = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(["dump", dir.path().to_str().expect("utf-8 path")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn dump");
    {
        use std::io::Read;
        let mut first = [0u8; 64];
        dump.stdout
            .take()
            .expect("stdout")
            .read_exact(&mut first)
            .expect("the dump begins");
    } // the reader goes away
    let out = dump.wait_with_output().expect("dump");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(stderr(&out).contains("incomplete"), "{out:?}");
}

/// Runs `hrafn load DIR` with `input` on its standard input.
fn load_into(dir: &str, input: &[u8]) -> Output {
    load_into_with(dir, &[], input)
}

/// Runs `hrafn load DIR FLAGS...` with `input` on its standard input.
fn load_into_with(dir: &str, flags: &[&str], input: &[u8]) -> Output {
    let mut load = Command::new(env!("CARGO_BIN_EXE_hrafn"))
        .args(["load", dir])
        .args(flags)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn load");
    {
        use std::io::Write;
        let mut stdin = load.stdin.take().expect("stdin");
        stdin.write_all(input).expect("feed the dump");
    }
    load.wait_with_output().expect("load")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn backup_verify_and_restore_while_another_process_writes() {
    let (dir, writer) = fixture();
    let work = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8 path");
    let b = work.path().join("full");
    let b = b.to_str().expect("utf-8 path");
    let backup = hrafn(&["backup", d, b]);
    assert!(backup.status.success(), "{backup:?}");
    assert!(stdout(&backup).contains("\tfull\t"), "{}", stdout(&backup));

    let verify = hrafn(&["verify", "--deep", b]);
    assert!(verify.status.success(), "{verify:?}");
    assert!(stdout(&verify).ends_with("ok\n"), "{}", stdout(&verify));

    let r = work.path().join("restored");
    let r = r.to_str().expect("utf-8 path");
    let restore = hrafn(&["restore", "--into", r, b]);
    assert!(restore.status.success(), "{restore:?}");
    assert_eq!(stdout(&hrafn(&["dump", r])), stdout(&hrafn(&["dump", d])));

    // The writer holds the environment: an incremental backup needs it, and says so.
    let refused = hrafn(&[
        "backup",
        "--incremental",
        d,
        work.path().join("i").to_str().expect("path"),
    ]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        stderr(&refused).contains("another process"),
        "{}",
        stderr(&refused)
    );
    drop(writer);

    // A backup cut short (no manifest) is rejected, with exit code 1.
    std::fs::remove_file(work.path().join("full").join("BACKUP")).expect("remove manifest");
    let partial = hrafn(&["verify", b]);
    assert_eq!(partial.status.code(), Some(1), "{partial:?}");
    assert!(
        stderr(&partial).contains("no manifest"),
        "{}",
        stderr(&partial)
    );
}

#[test]
fn a_chain_of_backups_from_the_command_line_restores_to_the_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let options = Options::default().incremental_backups(true);
    let write = |from: u64| {
        let env = Environment::open(dir.path(), options.clone()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in from..from + 100 {
                t.insert(i.to_be_bytes(), [i as u8; 40]).expect("insert");
            }
        }
        wtx.commit().expect("commit");
    };
    write(0);
    let d = dir.path().to_str().expect("utf-8 path");
    let path = |name: &str| work.path().join(name).to_str().expect("path").to_owned();
    let full = hrafn(&["backup", "--chain", d, &path("full")]);
    assert!(full.status.success(), "{full:?}");
    write(100);
    let i1 = hrafn(&["backup", "--incremental", d, &path("i1")]);
    assert!(i1.status.success(), "{i1:?}");
    assert!(stdout(&i1).contains("\tincremental\t"), "{}", stdout(&i1));
    write(200);
    let i2 = hrafn(&["backup", "--incremental", d, &path("i2")]);
    assert!(i2.status.success(), "{i2:?}");

    let verify = hrafn(&["verify", &path("full"), &path("i1"), &path("i2")]);
    assert!(verify.status.success(), "{verify:?}");
    let gap = hrafn(&["verify", &path("full"), &path("i2")]);
    assert_eq!(gap.status.code(), Some(1), "{gap:?}");

    let restore = hrafn(&[
        "restore",
        "--into",
        &path("r"),
        &path("full"),
        &path("i1"),
        &path("i2"),
    ]);
    assert!(restore.status.success(), "{restore:?}");
    assert_eq!(
        stdout(&hrafn(&["dump", &path("r")])),
        stdout(&hrafn(&["dump", d]))
    );
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("list") {
        let entry = entry.expect("entry");
        let metadata = entry.metadata().expect("metadata");
        total += if metadata.is_dir() {
            dir_bytes(&entry.path())
        } else {
            metadata.len()
        };
    }
    total
}

/// A field of `hrafn compact`'s output.
fn field(out: &str, name: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}\t")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name:?} in {out}"))
}

/// The fixture, grown with every structure (nested trees, tables with a global index)
/// and then mostly deleted, so that most of its data file is free pages.
fn sparse_fixture() -> (tempfile::TempDir, Environment) {
    use hrafn::table::Schema;
    let (dir, env) = fixture();
    let people = Schema::new(3)
        .primary_key(0)
        .index("by-city", &[1])
        .global_index("everywhere", &[1]);
    let offices = Schema::new(2).global_index("everywhere", &[1]);
    let mut wtx = env.begin_write().expect("write");
    {
        let mut bulk = wtx.open_tree("bulk").expect("open");
        for i in 0..20_000u32 {
            bulk.insert(i.to_be_bytes(), [7u8; 1_000]).expect("insert");
        }
        let mut host = bulk.open_tree(b"host-a").expect("nested");
        host.open_fixed_tree(b"cpu", 8)
            .expect("nested fixed")
            .insert(1, &[1; 8])
            .expect("insert");
        host.open_multi_tree(b"tags")
            .expect("nested multi")
            .add(b"env", b"prod")
            .expect("add");
    }
    {
        let mut t = wtx.open_table("people", &people).expect("table");
        for i in 0..5_000u32 {
            let key = format!("person{i:05}");
            t.insert(&[key.as_bytes(), b"London", &[1u8; 300]])
                .expect("insert");
        }
    }
    wtx.open_table("offices", &offices)
        .expect("table")
        .insert(&[b"hq", b"London"])
        .expect("insert");
    wtx.commit().expect("commit");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("bulk")
        .expect("open")
        .retain(|k, _| k.len() != 4 || u32::from_be_bytes([k[0], k[1], k[2], k[3]]) % 100 == 0)
        .expect("retain");
    {
        let mut t = wtx.open_table("people", &people).expect("table");
        for i in (0..5_000u32).filter(|i| i % 100 != 0) {
            let key = format!("person{i:05}");
            let (id, _) = t.get_by_key(key.as_bytes()).expect("get").expect("there");
            t.delete(id).expect("delete");
        }
    }
    wtx.commit().expect("commit");
    (dir, env)
}

#[test]
fn compact_in_place_shrinks_the_directory_and_keeps_the_data() {
    let parent = tempfile::tempdir().expect("tempdir");
    let db = parent.path().join("db");
    let (dir, writer) = sparse_fixture();
    drop(writer);
    std::fs::rename(dir.path(), &db).expect("move the database");
    let d = db.to_str().expect("utf-8 path");
    let dump_before = stdout(&hrafn(&["dump", d]));
    let trees_before = stdout(&hrafn(&["trees", d]));
    let size_before = dir_bytes(&db);

    // Not while another process (here: this one) holds it open for writing.
    let held = Environment::open(&db, Options::default()).expect("open");
    let refused = hrafn(&["compact", d]);
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("close every writer"),
        "{refused:?}"
    );
    drop(held);
    assert_eq!(
        stdout(&hrafn(&["dump", d])),
        dump_before,
        "a refusal changes nothing"
    );

    let size_before = size_before.max(dir_bytes(&db));
    let compacted = hrafn(&["compact", d]);
    assert!(compacted.status.success(), "{compacted:?}");
    let out = stdout(&compacted);
    let (before, after) = (field(&out, "bytes before"), field(&out, "bytes after"));
    assert!(after * 3 < before, "{out}");
    assert!(out.contains("ratio\t0."), "{out}");
    assert_eq!(field(&out, "tables"), 2, "{out}");
    assert_eq!(field(&out, "records"), 51, "{out}");
    assert_eq!(field(&out, "nested trees"), 3, "{out}");
    let size_after = dir_bytes(&db);
    assert!(
        size_after * 3 < size_before,
        "the directory shrinks: {size_before} -> {size_after} bytes"
    );
    // The same data (dumps carry no record ids), a sound environment, nothing left over.
    assert_eq!(stdout(&hrafn(&["dump", d])), dump_before);
    assert_eq!(stdout(&hrafn(&["trees", d])), trees_before);
    let check = hrafn(&["check", d]);
    assert!(check.status.success(), "{check:?}");
    let left: Vec<_> = std::fs::read_dir(parent.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("db")]);
}

/// In place, a compaction replaces the whole directory: one that holds no environment, or
/// holds entries that are not the environment's, is refused and left as it was; a
/// directory's permissions survive the swap.
#[test]
fn compact_in_place_refuses_what_it_would_delete_and_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().expect("tempdir");
    let left = |dir: &std::path::Path| common::names(dir);

    // A mistyped path: a directory of other things, no environment.
    let data = parent.path().join("data");
    std::fs::create_dir_all(data.join("app")).expect("mkdir");
    std::fs::write(data.join("notes.txt"), b"mine").expect("write");
    let refused = hrafn(&["compact", data.to_str().expect("utf-8")]);
    assert!(!refused.status.success(), "{refused:?}");
    assert_eq!(
        left(&data),
        ["app", "notes.txt"],
        "nothing created or deleted"
    );
    assert_eq!(left(parent.path()), ["data"], "no copy left beside it");

    // An environment with someone else's file in its directory.
    let db = parent.path().join("db");
    drop(Environment::open(&db, Options::default()).expect("create"));
    std::fs::write(db.join("README"), b"do not delete").expect("write");
    let refused = hrafn(&["compact", db.to_str().expect("utf-8")]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("README"),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read(db.join("README")).expect("kept"),
        b"do not delete"
    );
    std::fs::remove_file(db.join("README")).expect("remove");

    // Without it, the compaction runs, and the directory keeps its mode.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let compacted = hrafn(&["compact", db.to_str().expect("utf-8")]);
    assert!(compacted.status.success(), "{compacted:?}");
    let mode = std::fs::metadata(&db).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(left(parent.path()), ["data", "db"]);
}

#[test]
fn compact_into_another_directory_while_a_writer_goes_on() {
    let (dir, writer) = sparse_fixture();
    let d = dir.path().to_str().expect("utf-8 path");
    let dump_before = stdout(&hrafn(&["dump", d]));
    let out_dir = tempfile::tempdir().expect("tempdir");
    let target = out_dir.path().join("copy");
    let t = target.to_str().expect("utf-8 path");

    let compacted = hrafn(&["compact", d, "--into", t]);
    assert!(compacted.status.success(), "{compacted:?}");
    let out = stdout(&compacted);
    assert!(
        field(&out, "bytes after") * 3 < field(&out, "bytes before"),
        "{out}"
    );
    assert_eq!(stdout(&hrafn(&["dump", t])), dump_before);
    assert!(hrafn(&["check", t]).status.success());
    // The source is untouched, and still the writer's.
    assert_eq!(stdout(&hrafn(&["dump", d])), dump_before);
    let mut wtx = writer.begin_write().expect("write");
    wtx.open_tree("users")
        .expect("open")
        .insert(b"dave", b"new")
        .expect("insert");
    wtx.commit().expect("commit");

    // A target that holds something is refused, and kept.
    let again = hrafn(&["compact", d, "--into", t]);
    assert_eq!(again.status.code(), Some(3), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{again:?}"
    );
    assert_eq!(stdout(&hrafn(&["dump", t])), dump_before);
}

/// The fixture with nested trees (one embedded, one spilled fixed-size tree), a
/// multi-value tree with a set too large to embed, and a table with a primary key,
/// indexes and an overflow record.
fn full_fixture() -> (tempfile::TempDir, Environment) {
    let (dir, env) = fixture();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut series = wtx.open_tree("series").expect("open");
        series
            .insert(b"big", vec![1u8; 20_000])
            .expect("overflow value");
        let mut host = series.open_tree(b"host-a").expect("nested");
        let mut cpu = host.open_fixed_tree(b"cpu", 8).expect("nested fixed");
        for t in 0..200u64 {
            cpu.insert(t, &t.to_le_bytes()).expect("insert"); // spills into pages
        }
    }
    {
        let mut series = wtx.open_tree("series").expect("open");
        let mut small = series.open_fixed_tree(b"small", 4).expect("embedded");
        small.insert(7, b"abcd").expect("insert");
    }
    {
        let mut by_role = wtx.open_multi_tree("by-role").expect("open");
        for v in 0..300 {
            by_role.add(b"guest", format!("guest-{v:04}")).expect("add");
        }
    }
    add_people(&mut wtx);
    wtx.commit().expect("commit");
    (dir, env)
}

/// The elements of `xml` if every tag is closed in order (comments, declarations and
/// self-closing tags allowed); the error names the first mismatch.
fn balanced_tags(xml: &str) -> Result<usize, String> {
    let mut open: Vec<&str> = Vec::new();
    let mut elements = 0;
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let end = rest[start..]
            .find('>')
            .ok_or_else(|| format!("unclosed tag at {:?}", &rest[start..]))?
            + start;
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        let name = |t: &'_ str| {
            t.trim_start_matches('/')
                .split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap_or("")
                .to_owned()
        };
        if let Some(closing) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if name(o) == name(closing) => {}
                other => return Err(format!("</{closing}> closes {other:?}")),
            }
        } else {
            elements += 1;
            if !tag.ends_with('/') {
                open.push(tag);
            }
        }
    }
    if rest.contains('>') {
        return Err("a stray '>'".into());
    }
    match open.pop() {
        None => Ok(elements),
        Some(o) => Err(format!("<{o}> never closed")),
    }
}

#[test]
fn report_prints_every_structure_and_draws_the_page_map() {
    let (dir, writer) = full_fixture();
    let d = dir.path().to_str().expect("utf-8 path");
    let trees = writer
        .begin_read()
        .expect("read")
        .list_trees()
        .expect("trees");
    assert_eq!(
        trees,
        ["by-role", "cpu", "everywhere", "people", "series", "users"]
    );

    let report = hrafn(&["report", d]);
    assert!(report.status.success(), "{report:?}");
    let text = stdout(&report);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("structure  "), "{text}");
    for (i, name) in trees.iter().enumerate() {
        let line = lines[i + 1];
        assert!(line.starts_with(&format!("{name} ")), "{name}: {text}");
        // Aligned columns: every row as long as the header up to the fill column.
        assert!(line.ends_with('%'), "{line}");
    }
    assert!(lines[trees.len() + 1].starts_with("(root tree)"), "{text}");
    let people = lines
        .iter()
        .find(|l| l.starts_with("people "))
        .expect("people");
    assert!(people.contains(" table "), "{people}");
    for fact in [
        "\nfree: ",
        "\n  section 0 (pages 0..",
        "\njournals: ",
        "\nscratch (this process): ",
        "\nunsynced: ",
        "\nreaders (this process): ",
    ] {
        assert!(text.contains(fact), "{fact:?} missing: {text}");
    }

    let json = hrafn(&["report", d, "--json"]);
    assert!(json.status.success(), "{json:?}");
    let value: serde_json::Value = serde_json::from_str(&stdout(&json)).expect("one JSON object");
    let names: Vec<&str> = value["structures"]
        .as_array()
        .expect("structures")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, trees);
    let series = &value["structures"][4];
    assert_eq!(series["pages"]["overflow"], 3, "{series}");
    assert_eq!(series["embedded_trees"], 1, "{series}");
    let owners = value["owners"].as_array().expect("owners");
    assert_eq!(owners.len(), 4 + trees.len());
    let pages: u64 = owners.iter().map(|o| o["pages"].as_u64().expect("n")).sum();
    assert_eq!(pages, value["next_page_number"].as_u64().expect("n"));
    let runs: u64 = value["page_map"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r[1].as_u64().expect("n"))
        .sum();
    assert_eq!(runs, pages);

    let svg_path = dir.path().join("map.svg");
    let svg_arg = svg_path.to_str().expect("utf-8 path");
    let drawn = hrafn(&["report", d, "--svg", svg_arg]);
    assert!(drawn.status.success(), "{drawn:?}");
    assert_eq!(stdout(&drawn), text, "--svg prints the same report");
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG file");
    assert!(svg.starts_with("<svg "), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    balanced_tags(&svg).expect("balanced tags");
    assert_eq!(
        svg.matches("<g class=\"legend-entry\">").count(),
        owners.len(),
        "one legend entry per owner"
    );
    for owner in owners {
        let pages = owner["pages"].as_u64().expect("pages");
        let entry = format!(
            ">{}: {pages} page{}</text>",
            owner["name"].as_str().expect("name"),
            if pages == 1 { "" } else { "s" }
        );
        assert!(svg.contains(&entry), "{entry} missing");
    }
    // The checker itself refuses what it should.
    assert!(balanced_tags("<svg><g></svg></g>").is_err());
    assert!(balanced_tags("<svg><g>").is_err());
    assert_eq!(balanced_tags("<svg><rect/><g><t>x</t></g></svg>"), Ok(4));
}

/// Long commands draw a progress bar on a terminal (here the pseudo-terminal of util-linux's
/// `script`, where installed) and write nothing but their result when standard error is a
/// pipe.
#[test]
fn progress_bars_on_a_terminal_only() {
    let (dir, writer) = fixture();
    drop(writer);
    let d = dir.path().to_str().expect("utf-8 path");
    for args in [vec!["check", d], vec!["dump", d], vec!["backup", d]] {
        let mut args = args;
        let out_dir = tempfile::tempdir().expect("tempdir");
        let target = out_dir.path().join("b");
        let target = target.to_str().expect("utf-8 path").to_owned();
        if args[0] == "backup" {
            args.push(&target);
        }
        let piped = hrafn(&args);
        assert!(piped.status.success(), "{piped:?}");
        assert!(
            !stderr(&piped).contains('\u{1b}') && !stderr(&piped).contains('['),
            "{args:?} drew on a pipe: {:?}",
            stderr(&piped)
        );
        let _ = std::fs::remove_dir_all(&target);

        let has_script = Command::new("script").arg("--version").output().is_ok();
        if !has_script {
            eprintln!("no `script` here: the terminal half of the test is skipped");
            continue;
        }
        let log = out_dir.path().join("typescript");
        let line = std::iter::once(env!("CARGO_BIN_EXE_hrafn").to_owned())
            .chain(args.iter().map(|a| a.to_string()))
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");
        let run = Command::new("script")
            .args(["-qec", &format!("{line} > /dev/null")])
            .arg(&log)
            .output()
            .expect("run script");
        assert!(run.status.success(), "{run:?}");
        let drawn = std::fs::read_to_string(&log).expect("typescript");
        assert!(
            drawn.contains(&format!("{} [", args[0])),
            "{args:?} drew no bar on a terminal: {drawn:?}"
        );
    }
}

#[test]
fn a_compacted_backup_verifies_and_restores() {
    let (dir, writer) = fixture();
    let d = dir.path().to_str().expect("utf-8 path");
    let out = tempfile::tempdir().expect("tempdir");
    let b = out.path().join("b");
    let b = b.to_str().expect("utf-8 path");
    // Read-only open: another process holds the environment for writing.
    let backup = hrafn(&["backup", d, b, "--compact"]);
    assert!(backup.status.success(), "{backup:?}");
    assert!(stdout(&backup).contains("full"), "{}", stdout(&backup));
    let verify = hrafn(&["verify", "--deep", b]);
    assert!(verify.status.success(), "{verify:?}");
    let r = out.path().join("r");
    let r = r.to_str().expect("utf-8 path");
    let restore = hrafn(&["restore", "--into", r, b]);
    assert!(restore.status.success(), "{restore:?}");
    drop(writer);
    assert_eq!(stdout(&hrafn(&["dump", r])), stdout(&hrafn(&["dump", d])));
    let refused = hrafn(&["backup", d, b, "--compact", "--incremental"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

/// A table with a primary key, a local and a global index, and one record large enough
/// for an overflow page.
fn add_people(wtx: &mut hrafn::WriteTxn<'_>) {
    let schema = hrafn::table::Schema::new(3)
        .primary_key(0)
        .index("by-city", &[1])
        .global_index("everywhere", &[1]);
    let mut people = wtx.open_table("people", &schema).expect("table");
    people.insert(&[b"ada", b"London", b""]).expect("insert");
    people
        .insert(&[b"alan", b"London", &[9u8; 5_000]])
        .expect("insert"); // overflow
    people
        .insert(&[b"grace", b"Arlington", b"\x00"])
        .expect("insert");
}
