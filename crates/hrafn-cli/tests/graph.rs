//! `hrafn graph` against real graphs: a CSV load, then every query's output; how bad input,
//! unknown ids and directories without a graph fail; a damaged graph; a writer beside.

mod common;
use common::{hrafn, ok, path, stderr, stdout};

use std::path::Path;
use std::process::{Command, Output};

/// Runs a command that must fail with `code` and a message holding `says`, not a crash.
fn fails(args: &[&str], code: i32, says: &str) -> Output {
    let o = hrafn(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {o:?}");
    let err = stderr(&o);
    assert!(
        err.starts_with("hrafn: ") || err.contains("error:"),
        "{args:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(!err.contains("RUST_BACKTRACE"), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err:?} lacks {says:?}");
    o
}

/// Nodes get the graph's ids in file order: alice 1, bob 2, carol 3, acme 4, zed 5.
const NODES: &str = "\
id,label,name,age,score
alice,Person,Alice,36,1.5
bob,Person,Bob,25,
carol,Person,Carol,41,true
acme,Company,\"Acme, Inc.\",,
zed,Person,Zed,25,
";

/// Edges 1 to 5 in file order.
const EDGES: &str = "\
src,dst,type,since,weight
alice,bob,KNOWS,2010,5
bob,carol,KNOWS,2015,1
alice,carol,KNOWS,2020,10
carol,acme,WORKS_AT,2018,
bob,acme,WORKS_AT,,2.5
";

/// Writes `content` into `name` in `dir` and returns its path.
fn file(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write input");
    path(&p).to_string()
}

/// A graph loaded from [`NODES`] and [`EDGES`].
fn fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = file(dir.path(), "nodes.csv", NODES);
    let edges = file(dir.path(), "edges.csv", EDGES);
    let db = path(&dir.path().join("db")).to_string();
    let summary = ok(&["graph", "load", &db, "--nodes", &nodes, "--edges", &edges]);
    assert!(
        summary.starts_with("nodes 5, edges 5, elapsed "),
        "{summary}"
    );
    assert!(summary.ends_with(" edges/s\n"), "{summary}");
    (dir, db)
}

#[test]
fn a_loaded_graph_answers_every_query() {
    let (_dir, db) = fixture();
    let q = |args: &[&str]| {
        let mut all = vec!["graph", args[0], db.as_str()];
        all.extend_from_slice(&args[1..]);
        ok(&all)
    };

    assert_eq!(q(&["stat"]), "nodes\t5\nedges\t5\ncheck\tok\n");

    assert_eq!(
        q(&["node", "1"]),
        "{\"id\":1,\"label\":\"Person\",\"properties\":\
         {\"_id\":\"alice\",\"age\":36,\"name\":\"Alice\",\"score\":1.5}}\n"
    );
    assert_eq!(
        q(&["node", "3"]),
        "{\"id\":3,\"label\":\"Person\",\"properties\":\
         {\"_id\":\"carol\",\"age\":41,\"name\":\"Carol\",\"score\":true}}\n"
    );
    assert_eq!(
        q(&["node", "4"]),
        "{\"id\":4,\"label\":\"Company\",\"properties\":\
         {\"_id\":\"acme\",\"name\":\"Acme, Inc.\"}}\n"
    );
    assert_eq!(
        q(&["edge", "1"]),
        "{\"id\":1,\"type\":\"KNOWS\",\"source\":1,\"destination\":2,\"properties\":\
         {\"since\":2010,\"weight\":5}}\n"
    );
    assert_eq!(
        q(&["edge", "5"]),
        "{\"id\":5,\"type\":\"WORKS_AT\",\"source\":2,\"destination\":4,\"properties\":\
         {\"weight\":2.5}}\n"
    );

    assert_eq!(q(&["neighbours", "2"]), "3 2 KNOWS\n4 5 WORKS_AT\n");
    assert_eq!(q(&["neighbours", "2", "--direction", "in"]), "1 1 KNOWS\n");
    assert_eq!(
        q(&["neighbours", "2", "--direction", "both"]),
        "1 1 KNOWS\n3 2 KNOWS\n4 5 WORKS_AT\n"
    );
    assert_eq!(
        q(&["neighbours", "1", "--type", "KNOWS"]),
        "2 1 KNOWS\n3 3 KNOWS\n"
    );
    assert_eq!(q(&["neighbours", "1", "--type", "WORKS_AT"]), "");
    assert_eq!(q(&["neighbours", "5", "--direction", "both"]), "");

    assert_eq!(q(&["bfs", "1"]), "1 0\n2 1\n3 1\n4 2\n");
    assert_eq!(q(&["bfs", "1", "--depth", "1"]), "1 0\n2 1\n3 1\n");
    assert_eq!(q(&["bfs", "1", "--depth", "0"]), "1 0\n");
    assert_eq!(q(&["bfs", "1", "--type", "WORKS_AT"]), "1 0\n");
    assert_eq!(
        q(&["bfs", "1", "--type", "KNOWS", "--type", "WORKS_AT"]),
        "1 0\n2 1\n3 1\n4 2\n"
    );
    assert_eq!(
        q(&["bfs", "4", "--direction", "in"]),
        "4 0\n2 1\n3 1\n1 2\n"
    );
    assert_eq!(q(&["bfs", "5", "--direction", "both"]), "5 0\n");

    assert_eq!(q(&["path", "1", "4"]), "1 2 4\n");
    assert_eq!(q(&["path", "1", "3"]), "1 3\n");
    assert_eq!(q(&["path", "1", "1"]), "1\n");
    assert_eq!(q(&["path", "4", "1", "--direction", "in"]), "4 2 1\n");
    assert_eq!(
        q(&["path", "1", "3", "--weight", "weight"]),
        "1 2 3\nweight 6\n"
    );
    // The edge from carol to acme has no weight: it weighs 1.
    assert_eq!(
        q(&["path", "1", "4", "--weight", "weight"]),
        "1 2 3 4\nweight 7\n"
    );
    assert_eq!(
        q(&[
            "path", "1", "4", "--weight", "since", "--type", "KNOWS", "--type", "WORKS_AT"
        ]),
        "1 2 4\nweight 2011\n"
    );

    assert_eq!(q(&["find", "--label", "Person"]), "1\n2\n3\n5\n");
    assert_eq!(q(&["find", "--label", "Company"]), "4\n");
    assert_eq!(q(&["find", "--label", "Robot"]), "");
    let find = |label: &str, property: &str, value: &str| {
        q(&[
            "find",
            "--label",
            label,
            "--property",
            property,
            "--value",
            value,
        ])
    };
    assert_eq!(find("Person", "age", "25"), "2\n5\n");
    assert_eq!(find("Person", "score", "1.5"), "1\n");
    assert_eq!(find("Person", "score", "true"), "3\n");
    assert_eq!(find("Person", "_id", "carol"), "3\n");
    assert_eq!(find("Company", "name", "Acme, Inc."), "4\n");
    assert_eq!(find("Person", "age", "-1"), "");
    // A value is typed as the loader types cells: "25" is an integer, not text.
    assert_eq!(find("Person", "name", "25"), "");
}

#[test]
fn no_path_and_unknown_ids_exit_1() {
    let (_dir, db) = fixture();
    let db = db.as_str();
    fails(&["graph", "path", db, "1", "5"], 1, "no path from 1 to 5");
    fails(
        &["graph", "path", db, "1", "4", "--type", "KNOWS"],
        1,
        "no path from 1 to 4",
    );
    fails(
        &["graph", "path", db, "4", "1", "--weight", "weight"],
        1,
        "no path from 4 to 1",
    );
    for args in [
        &["node", db, "99"][..],
        &["neighbours", db, "99"],
        &["bfs", db, "99"],
        &["path", db, "99", "1"],
        &["path", db, "1", "99"],
    ] {
        let mut all = vec!["graph"];
        all.extend_from_slice(args);
        let o = fails(&all, 1, "no node 99");
        assert!(o.stdout.is_empty(), "{all:?}");
    }
    fails(&["graph", "edge", db, "99"], 1, "no edge 99");
    // An id that is not a number is bad usage.
    fails(&["graph", "node", db, "alice"], 2, "invalid value");
    fails(
        &["graph", "bfs", db, "1", "--direction", "up"],
        2,
        "invalid value",
    );
    fails(
        &[
            "graph",
            "find",
            db,
            "--label",
            "Person",
            "--property",
            "age",
        ],
        2,
        "--value",
    );
}

#[test]
fn malformed_csv_fails_with_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let nodes = file(d, "nodes.csv", NODES);
    let edges = file(d, "edges.csv", EDGES);
    let db = path(&d.join("db")).to_string();
    let load = |nodes: &str, edges: &str, code: i32, says: &[&str]| {
        let o = fails(
            &["graph", "load", &db, "--nodes", nodes, "--edges", edges],
            code,
            says[0],
        );
        for s in says {
            assert!(stderr(&o).contains(s), "{:?} lacks {s:?}", stderr(&o));
        }
        assert!(o.stdout.is_empty());
    };

    let short = file(d, "short.csv", "id,label,age\na,Person,3\nb,Person\n");
    load(
        &short,
        &edges,
        3,
        &[
            "short.csv",
            "line 3",
            "a row of 2 fields where the header has 3",
            "nothing was stored",
        ],
    );
    let header = file(d, "header.csv", "name,label\na,Person\n");
    load(
        &header,
        &edges,
        3,
        &["header.csv", "line 1", "must start with id,label"],
    );
    let no_label = file(d, "no-label.csv", "id,label\na,\n");
    load(
        &no_label,
        &edges,
        3,
        &["no-label.csv", "line 2", "invalid label"],
    );
    // An edge to a node the node file lacks: the nodes before it stay.
    let dangling = file(
        d,
        "dangling.csv",
        "src,dst,type\nalice,bob,KNOWS\nalice,nobody,KNOWS\n",
    );
    load(
        &nodes,
        &dangling,
        3,
        &[
            "dangling.csv",
            "line 3",
            "no node \"nobody\" in the node file",
            "stored before the failure: nodes 5, edges 0",
        ],
    );
    let edge_header = file(d, "edge-header.csv", "from,to,type\n");
    load(
        &nodes,
        &edge_header,
        3,
        &["edge-header.csv", "must start with src,dst,type"],
    );
    assert_eq!(
        ok(&["graph", "stat", &db]),
        "nodes\t10\nedges\t0\ncheck\tok\n"
    );

    // A missing input is found before anything is made.
    let fresh = d.join("fresh");
    fails(
        &[
            "graph",
            "load",
            path(&fresh),
            "--nodes",
            &nodes,
            "--edges",
            path(&d.join("missing.csv")),
        ],
        3,
        "missing.csv",
    );
    assert!(!fresh.exists(), "a failed load made a graph");
    fails(
        &[
            "graph",
            "load",
            path(&fresh),
            "--nodes",
            path(d),
            "--edges",
            &edges,
        ],
        3,
        "a directory, not a CSV file",
    );
    assert!(!fresh.exists(), "a failed load made a graph");
}

#[test]
fn reading_commands_refuse_what_is_not_a_graph() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let other = dir.path().join("other");
    {
        let env = hrafn::Environment::open(&other, hrafn::Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("users")
            .expect("open")
            .insert(b"alice", b"admin")
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let other_files = std::fs::read_dir(&other).expect("read dir").count();
    for dir in [&empty, &other] {
        let d = path(dir);
        for args in [
            &["stat", d][..],
            &["node", d, "1"],
            &["edge", d, "1"],
            &["neighbours", d, "1"],
            &["bfs", d, "1"],
            &["path", d, "1", "2"],
            &["find", d, "--label", "Person"],
        ] {
            let mut all = vec!["graph"];
            all.extend_from_slice(args);
            let o = fails(&all, 1, "no graph here");
            assert!(o.stdout.is_empty(), "{all:?}");
        }
    }
    let left = std::fs::read_dir(&empty).expect("read dir").count();
    assert_eq!(left, 0, "the empty directory was written to");
    assert_eq!(
        std::fs::read_dir(&other).expect("read dir").count(),
        other_files
    );
    assert_eq!(ok(&["trees", path(&other)]), "users\tbtree\t1\n");

    let nowhere = dir.path().join("nowhere");
    fails(&["graph", "stat", path(&nowhere)], 3, "not a directory");
    assert!(!nowhere.exists());
}

#[test]
fn queries_and_stat_run_beside_a_writer() {
    let (_dir, db) = fixture();
    let writer = hrafn::Environment::open(&db, hrafn::Options::default()).expect("open");
    assert_eq!(
        ok(&["graph", "bfs", &db, "1", "--depth", "1"]),
        "1 0\n2 1\n3 1\n"
    );
    assert_eq!(ok(&["graph", "find", &db, "--label", "Company"]), "4\n");
    // The counts and the check read one read-only snapshot.
    assert_eq!(
        ok(&["graph", "stat", &db]),
        "nodes\t5\nedges\t5\ncheck\tok\n"
    );
    drop(writer);
}

#[test]
fn stat_lists_what_the_check_finds() {
    let (_dir, db) = fixture();
    {
        // Drop the outgoing adjacency of edge 1 (alice -KNOWS-> bob) behind the graph's back.
        let env = hrafn::Environment::open(&db, hrafn::Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        let mut key = 1u64.to_be_bytes().to_vec();
        key.extend_from_slice(b"KNOWS");
        let mut value = 2u64.to_be_bytes().to_vec();
        value.extend_from_slice(&1u64.to_be_bytes());
        let removed = wtx
            .open_multi_tree("g.out")
            .expect("open")
            .remove(&key, &value)
            .expect("remove");
        assert!(removed);
        wtx.commit().expect("commit");
    }
    let o = fails(
        &["graph", "stat", &db],
        1,
        "the graph check found 1 problem:",
    );
    assert_eq!(stdout(&o), "nodes\t5\nedges\t5\ncheck\t1 problem\n");
    assert!(
        stderr(&o).contains("\n  g.out lacks (1, \"KNOWS\", 2, 1)"),
        "{}",
        stderr(&o)
    );
}

/// The load draws its bar on a terminal only (the terminal half runs under `script`, where
/// installed).
#[test]
fn the_load_bar_is_drawn_on_a_terminal_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = file(dir.path(), "nodes.csv", NODES);
    let edges = file(dir.path(), "edges.csv", EDGES);
    let db = path(&dir.path().join("db")).to_string();
    let piped = hrafn(&["graph", "load", &db, "--nodes", &nodes, "--edges", &edges]);
    assert!(piped.status.success(), "{piped:?}");
    assert_eq!(stderr(&piped), "");

    let has_script = Command::new("script").arg("--version").output().is_ok();
    if !has_script {
        eprintln!("no `script` here: the terminal half of the test is skipped");
        return;
    }
    let log = dir.path().join("typescript");
    let line = [
        env!("CARGO_BIN_EXE_hrafn"),
        "graph",
        "load",
        &db,
        "--nodes",
        &nodes,
        "--edges",
        &edges,
    ]
    .iter()
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
    assert!(drawn.contains("load ["), "no bar on a terminal: {drawn:?}");
    assert_eq!(
        ok(&["graph", "stat", &db]),
        "nodes\t10\nedges\t10\ncheck\tok\n"
    );
}
