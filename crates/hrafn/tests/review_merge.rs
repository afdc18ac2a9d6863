//! Merged writes at their edges: failure isolation when a request leaves the transaction
//! unable to commit, requests nested inside requests, the queue's time-out, expectations
//! between batches of one merged transaction, mixed durabilities, sizes and names at the
//! limits, and a journal fault under merged load.

mod common;

use hrafn::storage::sim::{Damage, Fault, SimStorage};
use hrafn::{Durability, Environment, Error, Options, WriteBatch};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on any wait for a result that should come at once: past it, the test fails
/// instead of hanging.
const BOUND: Duration = Duration::from_secs(20);

/// One caller's work in [`merged`].
type Request<T = hrafn::Result<()>> = Box<dyn FnOnce(&Environment) -> T + Send>;

fn get(env: &Environment, tree: &str, key: &[u8]) -> Option<Vec<u8>> {
    let rtx = env.begin_read().expect("read");
    match rtx.open_tree(tree) {
        Ok(t) => t.get(key).expect("get").map(<[u8]>::to_vec),
        Err(Error::TreeNotFound { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

fn batch(tree: &str, key: &str, value: &[u8]) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.insert(tree, key, value);
    b
}

/// Runs `requests` on threads of their own while a plain write transaction holds the
/// writer, so that they queue up and merge into one transaction once it is dropped; each
/// thread starts a little after the one before, to keep their queue order. Returns their
/// results in the order given, failing rather than hanging if any does not come back.
fn merged<T: Send + 'static>(env: &Arc<Environment>, requests: Vec<Request<T>>) -> Vec<T> {
    let held = env.begin_write().expect("hold the writer");
    let (tx, rx) = mpsc::channel();
    let count = requests.len();
    for (i, request) in requests.into_iter().enumerate() {
        let (env, tx) = (Arc::clone(env), tx.clone());
        std::thread::spawn(move || {
            let result = request(&env);
            let _ = tx.send((i, result));
        });
        std::thread::sleep(Duration::from_millis(40));
    }
    std::thread::sleep(Duration::from_millis(100));
    drop(held);
    let mut results: Vec<Option<T>> = (0..count).map(|_| None).collect();
    for _ in 0..count {
        let (i, result) = rx
            .recv_timeout(BOUND)
            .expect("every merged request comes back");
        results[i] = Some(result);
    }
    results.into_iter().map(|r| r.expect("sent")).collect()
}

/// A closure that meets an error which leaves the transaction unable to commit (here a
/// transaction over the scratch limit) and ignores it: alone it would fail at commit with
/// `TransactionFailed`. Merged with others, only it may fail; the others commit.
#[test]
fn a_request_that_ignores_a_failed_operation_fails_alone() {
    let options = common::small_options().scratch_limit_bytes(4 << 20);
    let env = Arc::new(Environment::open(dir().path(), options).expect("open"));
    let requests: Vec<Request> = vec![
        Box::new(|env| env.write(batch("i", "before", b"v"))),
        Box::new(|env| {
            env.submit(|wtx| {
                let mut tree = wtx.open_tree("i")?;
                tree.insert(b"small", b"v")?;
                // Swallowed: the caller "handles" the error and carries on.
                let too_large = tree.insert(b"huge", vec![0u8; 8 << 20]);
                assert!(matches!(too_large, Err(Error::TransactionTooLarge { .. })));
                Ok(())
            })
        }),
        Box::new(|env| env.write(batch("i", "after", b"v"))),
    ];
    let results = merged(&env, requests);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(Error::TransactionFailed { .. })),
        "{:?}",
        results[1]
    );
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert!(get(&env, "i", b"before").is_some());
    assert!(get(&env, "i", b"after").is_some());
    assert!(
        get(&env, "i", b"small").is_none(),
        "the failed request kept nothing"
    );
}

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// A request that itself writes through the same environment would wait for a merged
/// transaction that only its own thread can lead: it must fail with a typed error, not
/// stall every writer.
#[test]
fn a_write_from_inside_a_request_fails_instead_of_hanging() {
    let env = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    let (tx, rx) = mpsc::channel();
    {
        let env = Arc::clone(&env);
        std::thread::spawn(move || {
            let inner = Arc::clone(&env);
            let outcome = env.submit(move |wtx| {
                wtx.open_tree("n")?.insert(b"outer", b"v")?;
                let nested = inner.write(batch("n", "nested", b"v"));
                assert!(
                    matches!(nested, Err(Error::InvalidArgument(_))),
                    "{nested:?}"
                );
                let nested = inner.submit(|_| Ok(()));
                assert!(
                    matches!(nested, Err(Error::InvalidArgument(_))),
                    "{nested:?}"
                );
                Ok(())
            });
            let _ = tx.send(outcome);
        });
    }
    let outcome = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a nested write returned instead of hanging");
    outcome.expect("the outer request commits");
    assert!(get(&env, "n", b"outer").is_some());
    assert!(get(&env, "n", b"nested").is_none());
    // Other writers were never stalled.
    env.write(batch("n", "later", b"v")).expect("a later write");

    // A request may still write to another environment.
    let other = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    let to_other = Arc::clone(&other);
    env.submit(move |wtx| {
        wtx.open_tree("n")?.insert(b"here", b"v")?;
        to_other.write(batch("n", "there", b"v"))
    })
    .expect("a write to another environment from inside a request");
    assert!(get(&other, "n", b"there").is_some());
}

/// A full queue: the caller waits `merge_wait_timeout_ms`, gets `Error::Timeout`, and
/// nothing of its batch is ever applied; the queued requests all commit.
#[test]
fn a_full_queue_times_out_after_the_configured_wait_and_applies_nothing() {
    let options = common::small_options()
        .merge_queue_max_requests(2)
        .merge_wait_timeout_ms(300);
    let env = Arc::new(Environment::open(dir().path(), options).expect("open"));
    let held = env.begin_write().expect("hold the writer");
    let (tx, rx) = mpsc::channel();
    // The first becomes the leader and takes its request out of the queue before it
    // waits for the writer; the next two fill the queue.
    for i in 0..3 {
        let (env, tx) = (Arc::clone(&env), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send(env.write(batch("q", &format!("queued-{i}"), b"v")));
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    // From another thread: this one holds the writer, and is refused at once.
    let (refused, waited) = {
        let env = Arc::clone(&env);
        std::thread::spawn(move || {
            let started = Instant::now();
            let refused = env.write(batch("q", "refused", b"v"));
            (refused, started.elapsed())
        })
        .join()
        .expect("the refused writer")
    };
    assert!(matches!(refused, Err(Error::Timeout { .. })), "{refused:?}");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(10),
        "waited {waited:?}"
    );
    drop(held);
    for _ in 0..3 {
        rx.recv_timeout(BOUND)
            .expect("queued request returns")
            .expect("queued request commits");
    }
    for i in 0..3 {
        assert!(get(&env, "q", format!("queued-{i}").as_bytes()).is_some());
    }
    assert!(get(&env, "q", b"refused").is_none());
    // Once there is room, writes go through again.
    env.write(batch("q", "refused", b"v")).expect("write");
}

/// Two batches of one merged transaction that expect the same key absent and both set it:
/// the second sees the first's write, so exactly one commits; a third that expects the
/// winner's value commits too.
#[test]
fn batches_of_one_merged_transaction_see_each_others_writes() {
    let env = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    let claim = |who: &'static str| -> Request {
        Box::new(move |env| {
            let mut b = WriteBatch::new();
            b.expect("x", b"owner", None);
            b.insert("x", b"owner", who);
            env.write(b)
        })
    };
    let follow: Request = Box::new(|env| {
        let mut b = WriteBatch::new();
        b.expect("x", b"owner", Some(b"a"));
        b.insert("x", b"follower", b"saw a");
        env.write(b)
    });
    let results = merged(&env, vec![claim("a"), claim("b"), follow]);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(Error::Conflict { .. })),
        "{:?}",
        results[1]
    );
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert_eq!(get(&env, "x", b"owner").as_deref(), Some(&b"a"[..]));
    assert_eq!(get(&env, "x", b"follower").as_deref(), Some(&b"saw a"[..]));
    let stats = env.stats();
    assert_eq!(stats.merged_requests, 2, "{stats:?}");
}

/// Options where only commits make anything durable.
fn buffered_options() -> Options {
    Options::default()
        .durability(Durability::None)
        .journal_file_size_bytes(64 * 1024)
        .journal_spare_files(0)
        .flush_interval_ms(3_600_000)
        .flush_threshold_bytes(1 << 40)
}

/// In an environment that defaults to `Durability::None`, a merged transaction holding
/// one durable batch is durable as a whole; when a third request fails it and the
/// others run alone, the durable one still is.
#[test]
fn a_durable_batch_makes_its_merged_transaction_durable() {
    for with_failure in [false, true] {
        let sim = SimStorage::new(7);
        let env = Arc::new(
            Environment::open_with_storage(Arc::new(sim.clone()), buffered_options())
                .expect("open"),
        );
        let mut requests: Vec<Request> = vec![
            Box::new(|env| env.write(batch("d", "buffered", b"v"))),
            Box::new(|env| {
                let mut b = batch("d", "durable", b"v");
                b.durability(Durability::Immediate);
                env.write(b)
            }),
        ];
        if with_failure {
            requests.push(Box::new(|env| {
                let mut b = WriteBatch::new();
                b.expect("d", b"missing", Some(b"v"));
                env.write(b)
            }));
        }
        let results = merged(&env, requests);
        results[0].as_ref().expect("buffered");
        results[1].as_ref().expect("durable");
        if with_failure {
            assert!(matches!(results[2], Err(Error::Conflict { .. })));
        }
        let disk = sim.power_cut(Damage::DropAll);
        drop(env);
        let env =
            Environment::open_with_storage(Arc::new(disk), buffered_options()).expect("reopen");
        // Both ran in order before the durable commit returned, so both are kept.
        assert!(
            get(&env, "d", b"durable").is_some(),
            "failure {with_failure}"
        );
        assert!(
            get(&env, "d", b"buffered").is_some(),
            "failure {with_failure}"
        );
    }
}

/// A batch larger than `merge_batch_max_bytes` alone still commits, merged or not; an
/// empty batch commits nothing; tree names at the edges work or fail alone.
#[test]
fn batch_sizes_and_tree_names_at_the_limits() {
    let options = common::small_options().merge_batch_max_bytes(4096);
    let env = Arc::new(Environment::open(dir().path(), options).expect("open"));
    let txn_before = env.stats().txn_id;
    env.write(WriteBatch::new()).expect("empty batch");
    assert_eq!(
        env.stats().txn_id,
        txn_before,
        "an empty batch journals nothing"
    );

    let big = || {
        let mut b = WriteBatch::new();
        for i in 0..64u32 {
            b.insert("big", i.to_be_bytes(), vec![1u8; 1000]);
        }
        assert!(b.size_bytes() > 4096);
        b
    };
    env.write(big()).expect("an oversized batch alone");
    assert_eq!(
        env.begin_read()
            .expect("read")
            .open_tree("big")
            .expect("tree")
            .len(),
        64
    );

    let long_name = "n".repeat(2001);
    let name_at_limit = "m".repeat(2000);
    let requests: Vec<Request> = vec![
        Box::new(|env| env.write(batch("", "k", b"empty name"))),
        Box::new(move |env| env.write(batch(&long_name, "k", b"v"))),
        Box::new(move |env| {
            let mut b = big();
            b.insert("big", b"extra", b"v");
            env.write(b)
        }),
        Box::new(move |env| env.write(batch(&name_at_limit, "k", b"v"))),
        Box::new(|env| env.write(WriteBatch::new())),
    ];
    let results = merged(&env, requests);
    results[0].as_ref().expect("empty tree name");
    assert!(
        matches!(results[1], Err(Error::KeyTooLarge { .. })),
        "{:?}",
        results[1]
    );
    results[2].as_ref().expect("oversized batch merged");
    results[3].as_ref().expect("tree name at the key limit");
    results[4].as_ref().expect("empty batch merged");
    assert_eq!(get(&env, "", b"k").as_deref(), Some(&b"empty name"[..]));
    assert!(get(&env, &"m".repeat(2000), b"k").is_some());
    assert!(get(&env, "big", b"extra").is_some());
    let names = env.begin_read().expect("read").list_trees().expect("list");
    assert!(!names.iter().any(|n| n.len() > 2000), "{names:?}");
    env.check().expect("integrity");
}

/// A journal write fails for good while many threads submit: every caller comes back,
/// with success or a typed error; once one write failed every later one is refused as
/// poisoned, reads keep working, and everything acknowledged is visible.
#[test]
fn a_journal_fault_under_merged_load_fails_every_later_write_typed() {
    let sim = SimStorage::new(11);
    sim.journal_write_latency(Duration::from_millis(1));
    let env = Arc::new(
        Environment::open_with_storage(Arc::new(sim.clone()), common::small_options())
            .expect("open"),
    );
    env.write(batch("f", "setup", b"v")).expect("setup");
    sim.fail_at(sim.ops_count() + 40, Fault::Eio, true);
    let (tx, rx) = mpsc::channel();
    for t in 0..6u32 {
        let (env, tx) = (Arc::clone(&env), tx.clone());
        std::thread::spawn(move || {
            let mut outcomes = Vec::new();
            for i in 0..60u32 {
                let key = format!("{t}-{i:03}");
                let result = if i % 2 == 0 {
                    env.write(batch("f", &key, b"v"))
                } else {
                    let k = key.clone();
                    env.submit(move |wtx| {
                        wtx.open_tree("f")?.insert(&k, b"v")?;
                        Ok(())
                    })
                };
                outcomes.push((key, result));
            }
            let _ = tx.send(outcomes);
        });
    }
    let mut acked = Vec::new();
    let mut failed = 0;
    for _ in 0..6 {
        let outcomes = rx.recv_timeout(BOUND * 3).expect("every submitter returns");
        for (key, result) in outcomes {
            match result {
                Ok(()) => acked.push(key),
                Err(Error::Io { .. } | Error::Poisoned { .. }) => failed += 1,
                Err(e) => panic!("untyped failure for {key}: {e:?}"),
            }
        }
    }
    assert!(failed > 0, "the fault was hit");
    for key in &acked {
        assert!(
            get(&env, "f", key.as_bytes()).is_some(),
            "{key} acked, missing"
        );
    }
    assert!(matches!(
        env.write(batch("f", "after", b"v")),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(
        env.submit(|wtx| {
            wtx.open_tree("f")?.insert(b"after", b"v")?;
            Ok(())
        }),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(env.begin_write(), Err(Error::Poisoned { .. })));
    assert!(get(&env, "f", b"setup").is_some());
    assert!(get(&env, "f", b"after").is_none());
}

/// A write transaction dropped without commit, or ended by a panic, frees the writer for
/// merged writes waiting on it.
#[test]
fn an_abandoned_write_transaction_releases_merged_writers() {
    let env = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let env = Arc::clone(&env);
        move || {
            let env2 = Arc::clone(&env);
            std::thread::spawn(move || {
                let _ = tx.send(env2.write(batch("a", "waiting", b"v")));
            });
        }
    };
    let panicked = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut wtx = env.begin_write().expect("begin");
                wtx.open_tree("a")
                    .expect("tree")
                    .insert(b"dropped", b"v")
                    .expect("insert");
                waiter();
                std::thread::sleep(Duration::from_millis(100));
                panic!("the writer's thread dies holding the transaction");
            })
            .join()
    });
    assert!(panicked.is_err());
    rx.recv_timeout(BOUND)
        .expect("the waiting write proceeds")
        .expect("commits");
    assert!(get(&env, "a", b"waiting").is_some());
    assert!(get(&env, "a", b"dropped").is_none());
}

/// A thread that holds the write transaction and asks for it again — `begin_write` a second
/// time, or from inside a merged request — waits on itself for ever, and every other
/// writer behind it: it is refused instead (a hang is turned into a failure by the bounds
/// below).
#[test]
fn begin_write_on_a_thread_that_holds_the_writer_fails_instead_of_hanging() {
    let env = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    let (tx, rx) = mpsc::channel();
    {
        let env = Arc::clone(&env);
        std::thread::spawn(move || {
            let inner = Arc::clone(&env);
            let outcome = env.submit(move |_| match inner.begin_write() {
                Ok(_) => Err(Error::InvalidArgument("a second writer".into())),
                Err(_) => Ok(()),
            });
            let _ = tx.send(outcome);
        });
    }
    rx.recv_timeout(Duration::from_secs(5))
        .expect("begin_write inside a request returned")
        .expect("and refused the second writer");
    let first = env.begin_write().expect("begin");
    // The same thread again: a second transaction, a merged write, a backup.
    assert!(matches!(env.begin_write(), Err(Error::InvalidArgument(_))));
    let mut batch = hrafn::WriteBatch::new();
    batch.insert("a", b"k", b"v");
    assert!(matches!(env.write(batch), Err(Error::InvalidArgument(_))));
    let target = dir();
    assert!(matches!(
        env.backup_to(target.path().join("b")),
        Err(Error::InvalidArgument(_))
    ));
    let (tx, rx) = mpsc::channel();
    let env2 = Arc::clone(&env);
    std::thread::spawn(move || {
        let _ = tx.send(env2.begin_write().is_err());
    });
    // Another thread still waits its turn: only the holder's own thread is refused.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    drop(first);
    assert!(!rx.recv_timeout(BOUND).expect("the other thread proceeds"));
}

/// A transaction that changes nothing, begun while the (merged) commit it builds on is
/// still being written, commits only after that commit's record is: what it read is then
/// committed.
#[test]
fn a_transaction_that_changes_nothing_waits_for_the_commit_it_read() {
    let sim = SimStorage::new(1);
    sim.journal_write_latency(Duration::from_millis(300));
    let env =
        Arc::new(Environment::open_with_storage(Arc::new(sim), Options::default()).expect("open"));
    env.write(batch("t", "seed", b"0")).expect("seed");
    let writer = {
        let env = Arc::clone(&env);
        std::thread::spawn(move || env.write(batch("t", "k", b"1")))
    };
    std::thread::sleep(Duration::from_millis(50));
    let mut wtx = env.begin_write().expect("write");
    let seen = wtx
        .open_tree("t")
        .expect("t")
        .get(b"k")
        .expect("get")
        .map(<[u8]>::to_vec);
    wtx.commit().expect("commit");
    // It builds on the pending commit (whose write takes 300 ms), so it sees its value...
    assert_eq!(seen.as_deref(), Some(&b"1"[..]));
    // ...and returns only once that value is committed.
    assert_eq!(
        get(&env, "t", b"k").as_deref(),
        Some(&b"1"[..]),
        "returned a value of a commit not yet written"
    );
    writer.join().expect("no panic").expect("write");
}

/// A failed request costs its merged transaction a retry, not one journal write per
/// request: failing first, its error stands and the rest merge again; failing later, the
/// requests before it merge again, it runs alone, and those after it merge again. Eight
/// merged requests, the first and the fourth refused by their expectations, commit the
/// other six in two journal writes (one by one they took six).
#[test]
fn failed_requests_leave_the_others_merged() {
    let env = Arc::new(Environment::open(dir().path(), common::small_options()).expect("open"));
    env.write(batch("m", "seed", b"v")).expect("seed");
    let refused = |key: &'static str| -> Request {
        Box::new(move |env| {
            let mut b = batch("m", key, b"v");
            b.expect("m", b"missing", Some(b"v"));
            env.write(b)
        })
    };
    let plain =
        |key: &'static str| -> Request { Box::new(move |env| env.write(batch("m", key, b"v"))) };
    let requests: Vec<Request> = vec![
        refused("r0"),
        plain("p1"),
        plain("p2"),
        refused("r3"),
        plain("p4"),
        plain("p5"),
        plain("p6"),
        plain("p7"),
    ];
    let writes_before = env.stats().journal_writes;
    let results = merged(&env, requests);
    let writes = env.stats().journal_writes - writes_before;
    for (i, result) in results.iter().enumerate() {
        if i == 0 || i == 3 {
            assert!(
                matches!(result, Err(Error::Conflict { .. })),
                "{i}: {result:?}"
            );
        } else {
            assert!(result.is_ok(), "{i}: {result:?}");
        }
    }
    for key in ["p1", "p2", "p4", "p5", "p6", "p7"] {
        assert!(get(&env, "m", key.as_bytes()).is_some(), "{key}");
    }
    assert!(get(&env, "m", b"r0").is_none() && get(&env, "m", b"r3").is_none());
    assert!(
        writes <= 2,
        "{writes} journal writes for six committed requests"
    );
}

/// `try_submit` returns the caller's own error only when the closure's last run returned
/// it. Here the closure fails in its merged transaction (and plants a journal fault); the
/// request before it then commits again into that fault, which poisons the environment.
/// If the closure's run alone begins only after that, it never runs again, and the caller
/// gets the engine's error, not the error of the abandoned run. (It may begin while the
/// failing journal write is still in flight, a pipelined commit: then it runs, and its own
/// error stands.)
#[test]
fn try_submit_reports_the_engines_error_when_its_last_run_never_began() {
    #[derive(Debug)]
    enum AppError {
        Refused,
        Db(Error),
    }
    impl From<Error> for AppError {
        fn from(e: Error) -> AppError {
            AppError::Db(e)
        }
    }
    let sim = SimStorage::new(5);
    // No flusher pass and no spare journal between the planted fault and the commit meant
    // to meet it.
    let options = common::small_options()
        .flush_interval_ms(60_000)
        .journal_spare_files(0);
    let env =
        Arc::new(Environment::open_with_storage(Arc::new(sim.clone()), options).expect("open"));
    env.write(batch("s", "setup", b"v")).expect("setup");
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&runs);
    let requests: Vec<Request<std::result::Result<(), AppError>>> = vec![
        Box::new(|env| env.write(batch("s", "first", b"v")).map_err(AppError::Db)),
        Box::new(move |env| {
            let sim = sim.clone();
            env.try_submit(move |_wtx| -> std::result::Result<(), AppError> {
                if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    sim.fail_at(sim.ops_count(), Fault::Eio, true);
                }
                Err(AppError::Refused)
            })
        }),
    ];
    let results = merged(&env, requests);
    assert!(
        matches!(results[0], Err(AppError::Db(Error::Io { .. }))),
        "{:?}",
        results[0]
    );
    match runs.load(std::sync::atomic::Ordering::SeqCst) {
        1 => assert!(
            matches!(results[1], Err(AppError::Db(Error::Poisoned { .. }))),
            "one run, abandoned: {:?}",
            results[1]
        ),
        2 => assert!(
            matches!(results[1], Err(AppError::Refused)),
            "{:?}",
            results[1]
        ),
        n => panic!("{n} runs: {:?}", results[1]),
    }
}
