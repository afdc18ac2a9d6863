//! `kill -9` during a compaction: the target never holds a partial copy.
//!
//! A child process compacts an environment, slowed by its progress callback, and is killed
//! while copying. The target must be as it was (absent); the unfinished copy sits beside it
//! as `<target>.unfinished`, which the next compaction refuses by name until it is
//! removed; then a compaction completes with every tree.

use hrafn::{Environment, Error, Options};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_DIR_VAR: &str = "HRAFN_KILL9_COMPACT_DIR";
const TREES: u64 = 20;

fn source(dir: &Path) -> std::path::PathBuf {
    dir.join("source")
}

fn target(dir: &Path) -> std::path::PathBuf {
    dir.join("copy")
}

/// The child: compacts `source` into `copy`, telling the parent when the copy has begun,
/// then sleeping at every step so the parent's kill lands mid-copy.
#[test]
#[ignore = "the child of kill9_during_compaction_leaves_the_target_untouched"]
fn compact_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_VAR) else {
        return;
    };
    let dir = Path::new(&dir);
    let env = Environment::open(source(dir), Options::default()).expect("open the source");
    let mut told = false;
    let result = env.compact_to_with_progress(target(dir), |at| {
        if at.trees_done > 0 && !told {
            println!("COPYING");
            told = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    });
    println!("FINISHED {result:?}");
}

#[test]
fn kill9_during_compaction_leaves_the_target_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(source(dir.path()), Options::default()).expect("open");
        env.submit(|wtx| {
            for t in 0..TREES {
                let mut tree = wtx.open_tree(&format!("tree-{t:02}"))?;
                for k in 0..100u64 {
                    tree.insert(k.to_be_bytes(), [t as u8; 64])?;
                }
            }
            Ok(())
        })
        .expect("fill");
        env.close().expect("close");
    }
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "compact_child", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the child");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    loop {
        line.clear();
        let read = lines.read_line(&mut line).expect("the child's output");
        assert!(read > 0, "the child ended before copying");
        assert!(!line.contains("FINISHED"), "the child finished: {line}");
        if line.contains("COPYING") {
            break;
        }
    }
    child.kill().expect("kill -9"); // SIGKILL on Unix
    child.wait().expect("reaping the child");

    let target = target(dir.path());
    let unfinished = dir.path().join("copy.unfinished");
    assert!(!target.exists(), "the target holds a partial copy");
    assert!(
        unfinished.exists(),
        "the unfinished copy sits beside the target"
    );

    let env = Environment::open(source(dir.path()), Options::default()).expect("reopen");
    match env.compact_to(&target) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("copy.unfinished"), "{message}");
        }
        other => panic!("a compaction beside an unfinished one: {other:?}"),
    }
    assert!(!target.exists());
    std::fs::remove_dir_all(&unfinished).expect("removing the unfinished copy");
    let report = env.compact_to(&target).expect("compaction");
    assert_eq!(report.trees, TREES);
    assert!(!unfinished.exists());
    let copy = Environment::open(&target, Options::default()).expect("open the copy");
    assert_eq!(
        copy.begin_read()
            .expect("read")
            .list_trees()
            .expect("list")
            .len() as u64,
        TREES
    );
}
