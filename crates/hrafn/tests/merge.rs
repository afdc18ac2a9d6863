//! Transaction merging: concurrent requests share journal writes; failures stay isolated.

mod common;

use hrafn::storage::sim::{Damage, SimStorage};
use hrafn::{Environment, Error, WriteBatch};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn count_keys(env: &Environment, tree: &str) -> u64 {
    let rtx = env.begin_read().expect("read");
    match rtx.open_tree(tree) {
        Ok(t) => t.len(),
        Err(Error::TreeNotFound { .. }) => 0,
        Err(e) => panic!("{e}"),
    }
}

/// Runs `f(t)` for each `t` of `threads` on a thread of its own, all at once, and returns
/// when every one has.
fn on_threads<T: Send>(threads: impl IntoIterator<Item = T>, f: impl Fn(T) + Sync) {
    std::thread::scope(|scope| {
        for t in threads {
            let f = &f;
            scope.spawn(move || f(t));
        }
    });
}

#[test]
fn many_threads_all_acknowledged_requests_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let threads = 16u64;
    let per_thread = 200 * common::scale();
    {
        let env = Arc::new(Environment::open(dir.path(), common::small_options()).expect("open"));
        on_threads(0..threads, |t| {
            for i in 0..per_thread {
                if i % 2 == 0 {
                    let mut batch = WriteBatch::new();
                    batch.insert("m", format!("{t:04}-{i:08}"), i.to_le_bytes());
                    env.write(batch).expect("write");
                } else {
                    env.submit(move |wtx| {
                        wtx.open_tree("m")?
                            .insert(format!("{t:04}-{i:08}"), i.to_le_bytes())?;
                        Ok(())
                    })
                    .expect("submit");
                }
            }
        });
        let stats = env.stats();
        assert_eq!(stats.merged_requests, threads * per_thread);
        assert!(
            stats.merged_transactions < stats.merged_requests,
            "requests were merged: {stats:?}"
        );
        assert!(
            stats.pipelined_commits > 0,
            "a transaction ran while another was being written: {stats:?}"
        );
        eprintln!(
            "merge: {} requests in {} transactions ({:.1} per journal write), {} pipelined, \
             {} lingers",
            stats.merged_requests,
            stats.merged_transactions,
            stats.merged_requests as f64 / stats.merged_transactions as f64,
            stats.pipelined_commits,
            stats.merge_lingers
        );
    }
    let env = Environment::open(dir.path(), common::small_options()).expect("reopen");
    assert_eq!(count_keys(&env, "m"), threads * per_thread);
    env.check().expect("integrity");
}

#[test]
fn plain_transactions_from_many_threads_build_on_every_earlier_commit() {
    // Plain commits pipeline too: the next transaction may begin while the previous
    // one's record is being written, and must build on it, never on the published state.
    let sim = SimStorage::new(7);
    let env = Arc::new(
        Environment::open_with_storage(Arc::new(sim), common::small_options()).expect("open"),
    );
    let (threads, per_thread) = (4u64, 300 * common::scale());
    on_threads(0..threads, |t| {
        for i in 0..per_thread {
            let mut wtx = env.begin_write().expect("begin");
            wtx.open_tree("p")
                .expect("tree")
                .insert(format!("{t}-{i:06}"), b"v")
                .expect("insert");
            wtx.commit().expect("commit");
        }
    });
    assert_eq!(count_keys(&env, "p"), threads * per_thread);
    env.check().expect("integrity");
}

#[test]
fn a_lone_caller_never_waits_for_others() {
    // The leader lingers only after a merged transaction of several requests: one thread
    // submitting in turn must not pay the linger on every commit.
    let env = Environment::open_with_storage(Arc::new(SimStorage::new(3)), common::small_options())
        .expect("open");
    for i in 0..200u32 {
        let mut batch = WriteBatch::new();
        batch.insert("l", i.to_be_bytes(), b"v");
        env.write(batch).expect("write");
    }
    let stats = env.stats();
    assert_eq!(stats.merged_requests, 200);
    assert_eq!(stats.merge_lingers, 0, "{stats:?}");
}

#[test]
fn a_conflict_fails_only_its_own_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Arc::new(Environment::open(dir.path(), common::small_options()).expect("open"));
    let mut setup = WriteBatch::new();
    setup.insert("c", b"balance", b"100");
    env.write(setup).expect("setup");
    // Many racing read-modify-write requests; each expects what its snapshot saw.
    let successes = Arc::new(AtomicU64::new(0));
    let conflicts = Arc::new(AtomicU64::new(0));
    on_threads(0..8, |t| {
        for i in 0..50u32 {
            let seen = {
                let rtx = env.begin_read().expect("read");
                rtx.open_tree("c")
                    .expect("tree")
                    .get(b"balance")
                    .expect("get")
                    .map(<[u8]>::to_vec)
            };
            let mut batch = WriteBatch::new();
            batch.expect("c", b"balance", seen.as_deref());
            batch.insert("c", b"balance", format!("{t}-{i}"));
            batch.insert("c", format!("log-{t}-{i}"), b"x");
            match env.write(batch) {
                Ok(()) => successes.fetch_add(1, Ordering::Relaxed),
                Err(Error::Conflict { .. }) => conflicts.fetch_add(1, Ordering::Relaxed),
                Err(e) => panic!("unexpected {e}"),
            };
        }
    });
    let ok = successes.load(Ordering::Relaxed);
    assert_eq!(ok + conflicts.load(Ordering::Relaxed), 400);
    // Exactly the successful requests left a log entry: failed ones applied nothing.
    assert_eq!(count_keys(&env, "c"), 1 + ok);
    let mut stale = WriteBatch::new();
    stale.expect("c", b"balance", Some(b"100"));
    stale.insert("c", b"never", b"written");
    assert!(matches!(env.write(stale), Err(Error::Conflict { .. })));
}

#[test]
fn a_panicking_request_does_not_fail_the_others() {
    // Keep the intended panics out of the test output; others still print.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("fails on purpose") {
            default_hook(info);
        }
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Arc::new(Environment::open(dir.path(), common::small_options()).expect("open"));
    let handles: Vec<_> = (0..8u32)
        .map(|t| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || {
                let mut outcomes = Vec::new();
                for i in 0..50u32 {
                    let bad = (t + i) % 7 == 0;
                    let result = env.submit(move |wtx| {
                        wtx.open_tree("p")?.insert(format!("{t}-{i}"), b"v")?;
                        if bad {
                            panic!("request {t}-{i} fails on purpose");
                        }
                        Ok(())
                    });
                    outcomes.push((bad, result));
                }
                outcomes
            })
        })
        .collect();
    let mut good = 0;
    for h in handles {
        for (bad, result) in h.join().expect("thread") {
            if bad {
                assert!(
                    matches!(result, Err(Error::RequestPanicked { .. })),
                    "{result:?}"
                );
            } else {
                result.expect("good request");
                good += 1;
            }
        }
    }
    assert_eq!(count_keys(&env, "p"), good);
}

#[test]
fn back_pressure_bounds_the_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options()
        .merge_queue_max_requests(4)
        .merge_batch_max_requests(2);
    let env = Arc::new(Environment::open(dir.path(), options).expect("open"));
    on_threads(0..32u32, |t| {
        for i in 0..20u32 {
            let mut batch = WriteBatch::new();
            batch.insert("b", format!("{t}-{i}"), vec![0u8; 1000]);
            env.write(batch).expect("write");
        }
    });
    let stats = env.stats();
    assert!(
        stats.merge_queue_peak <= 4,
        "queue grew to {}",
        stats.merge_queue_peak
    );
    assert!(stats.merged_requests == 640);
    assert!(
        stats.merged_requests <= 2 * stats.merged_transactions,
        "batches are capped at 2"
    );
    assert_eq!(count_keys(&env, "b"), 640);
}

/// A closure's size is unknown until it runs: the pages it changed count against the
/// batch byte limit, so closures that each change more than it are never merged. The
/// requests are made to queue up behind a plain transaction, and the same queue merges
/// under a limit they do not reach.
#[test]
fn closures_that_change_many_pages_commit_one_by_one() {
    for (limit_bytes, merged) in [(64 << 10, false), (64 << 20, true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = common::small_options().merge_batch_max_bytes(limit_bytes);
        let env = Environment::open(dir.path(), options).expect("open");
        std::thread::scope(|scope| {
            let held = env.begin_write().expect("write");
            let submitters = scope.spawn(|| {
                on_threads(0..4u32, |t| {
                    for i in 0..10u32 {
                        env.submit(move |txn| {
                            let mut tree = txn.open_tree("big")?;
                            for k in 0..100u32 {
                                tree.insert(format!("{t}-{i}-{k}"), vec![7u8; 1000])?;
                            }
                            Ok(())
                        })
                        .expect("submit");
                    }
                });
            });
            // Long enough for every thread's first request to be waiting.
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(held);
            submitters.join().expect("submitters");
        });
        let stats = env.stats();
        assert_eq!(stats.merged_requests, 40);
        if merged {
            assert!(stats.merged_transactions < 40, "{stats:?}");
        } else {
            assert_eq!(
                stats.merged_transactions, 40,
                "each closure changed about 100 KiB of pages, over the 64 KiB limit"
            );
        }
        assert_eq!(count_keys(&env, "big"), 4000);
    }
}

#[test]
fn acknowledged_merged_writes_survive_a_simulated_power_loss() {
    for crash_op in [400u64, 900, 1500, 2500] {
        let sim = SimStorage::new(crash_op);
        let storage: Arc<dyn hrafn::storage::Storage> = Arc::new(sim.clone());
        let acked = Arc::new(parking_lot::Mutex::new(Vec::new()));
        {
            let env =
                match Environment::open_with_storage(Arc::clone(&storage), common::small_options())
                {
                    Ok(env) => Arc::new(env),
                    Err(e) => panic!("open: {e}"),
                };
            sim.crash_at(crash_op);
            on_threads(0..4u32, |t| {
                for i in 0..200u32 {
                    let mut batch = WriteBatch::new();
                    batch.insert("s", format!("{t}-{i:04}"), b"v");
                    if env.write(batch).is_err() {
                        return;
                    }
                    acked.lock().push(format!("{t}-{i:04}"));
                }
            });
            if !sim.is_frozen() {
                // The power stayed on: every acknowledged write is visible before the cut.
                // (A next transaction built on a stale base once lost one here.)
                let rtx = env.begin_read().expect("read");
                let t = rtx.open_tree("s").expect("tree");
                for key in acked.lock().iter() {
                    assert!(t.get(key).expect("get").is_some(), "{key} missing live");
                }
            }
        }
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
        let after = sim.power_cut(Damage::Random);
        let env = Environment::open_with_storage(Arc::new(after), common::small_options())
            .expect("reopen");
        let rtx = env.begin_read().expect("read");
        let acked = acked.lock();
        if !acked.is_empty() {
            let t = rtx.open_tree("s").expect("tree");
            for key in acked.iter() {
                assert!(
                    t.get(key).expect("get").is_some(),
                    "acknowledged {key} lost (crash at op {crash_op})"
                );
            }
        }
        drop(rtx);
        env.check().expect("integrity");
    }
}

/// The caller's error type comes back as it is, a value comes back from a committed
/// request, and a request that fails where it ran first (as it would alone) runs once;
/// one that failed after others in its merged transaction runs again alone.
#[test]
fn submit_returns_values_and_the_callers_errors_and_never_reruns_a_lone_failure() {
    use std::sync::atomic::{AtomicU64, Ordering};
    #[derive(Debug, PartialEq)]
    enum AppError {
        Refused(u64),
        Db(String),
    }
    impl From<Error> for AppError {
        fn from(e: Error) -> AppError {
            AppError::Db(e.to_string())
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Arc::new(Environment::open(dir.path(), common::small_options()).expect("open"));
    let runs = Arc::new(AtomicU64::new(0));
    {
        let runs = Arc::clone(&runs);
        let refused = env.try_submit(move |wtx| -> Result<(), AppError> {
            runs.fetch_add(1, Ordering::SeqCst);
            wtx.open_tree("t")?.insert(b"never", b"kept")?;
            Err(AppError::Refused(7))
        });
        assert_eq!(refused, Err(AppError::Refused(7)));
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a lone failing request ran once"
    );
    assert_eq!(count_keys(&env, "t"), 0, "its change was not kept");

    // Many threads: values come back; failures stay the callers' own.
    let handles: Vec<_> = (0..8u64)
        .map(|t| {
            let env = Arc::clone(&env);
            std::thread::spawn(move || {
                (0..40u64)
                    .map(|i| {
                        env.try_submit(move |wtx| -> Result<u64, AppError> {
                            if (t + i) % 5 == 0 {
                                return Err(AppError::Refused(t * 100 + i));
                            }
                            let mut tree = wtx.open_tree("t")?;
                            tree.insert((t * 100 + i).to_be_bytes(), b"v")?;
                            Ok(t * 100 + i)
                        })
                        .map_err(|e| (t * 100 + i, e))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut kept = 0;
    for h in handles {
        for outcome in h.join().expect("thread") {
            match outcome {
                Ok(_) => kept += 1,
                Err((n, e)) => assert_eq!(e, AppError::Refused(n)),
            }
        }
    }
    assert_eq!(count_keys(&env, "t"), kept);
    assert_eq!(kept, 8 * 40 - 8 * 40 / 5);
}

/// A batch's expectation or remove on a tree that does not exist finds no key there and
/// leaves it missing (both opened the tree, so a batch that only checked made it).
#[test]
fn expect_and_remove_do_not_make_missing_trees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), hrafn::Options::default()).expect("open");
    let mut batch = WriteBatch::new();
    batch.expect("checked", b"k", None).remove("removed", b"k");
    env.write(batch).expect("the expectation holds");
    let mut wrong = WriteBatch::new();
    wrong.expect("checked", b"k", Some(b"v"));
    assert!(matches!(env.write(wrong), Err(Error::Conflict { .. })));
    let rtx = env.begin_read().expect("read");
    for name in ["checked", "removed"] {
        assert!(
            matches!(rtx.open_tree(name), Err(Error::TreeNotFound { .. })),
            "{name}"
        );
    }
}
