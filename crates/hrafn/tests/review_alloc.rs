//! Page allocation, free space, overflow runs and scratch spill: freed runs are reused
//! without disturbing snapshots that still read them, no page leaks as values move across
//! the inline/overflow limit, and a pinned scratch reports `ScratchFull` and then drains.

mod common;

use common::mix;
use hrafn::{CheckReport, Environment, Error};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Value bytes derived from (key, version): a wrong page shows as a wrong byte anywhere.
fn value(key: u32, version: u64, len: usize) -> Vec<u8> {
    let seed = mix(u64::from(key) << 32 ^ version);
    (0..len)
        .map(|i| (mix(seed ^ (i as u64 / 8)) >> ((i % 8) * 8)) as u8)
        .collect()
}

fn key(k: u32) -> Vec<u8> {
    format!("key-{k:05}").into_bytes()
}

/// Runs the integrity check and asserts every page below the high-water mark is counted.
fn check(env: &Environment) -> CheckReport {
    let report = env.check().expect("check");
    assert_eq!(
        report.used_pages + report.free_pages,
        report.next_page_number,
        "pages neither used nor free: {report:?}"
    );
    report
}

fn read_tree(rtx: &hrafn::ReadTxn<'_>) -> Model {
    let mut out = Model::new();
    match rtx.open_tree("t") {
        Ok(t) => {
            for item in t.iter().expect("iter") {
                let (k, v) = item.expect("entry");
                out.insert(k.to_vec(), v.to_vec());
            }
            assert_eq!(t.len(), out.len() as u64);
        }
        Err(Error::TreeNotFound { .. }) => {}
        Err(e) => panic!("open_tree: {e}"),
    }
    out
}

/// Compares a model with what was read, naming the first key that differs (not the bytes).
fn assert_model(found: &Model, expected: &Model, what: &str) {
    let differs = expected
        .iter()
        .find(|(k, v)| found.get(*k) != Some(*v))
        .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.len()));
    assert!(
        differs.is_none() && found.len() == expected.len(),
        "{what}: first differing key {differs:?}, {} entries, {} expected",
        found.len(),
        expected.len()
    );
}

/// Asserts a value without printing its bytes.
fn assert_value(found: Option<&[u8]>, expected: &[u8], what: &str) {
    assert!(
        found == Some(expected),
        "{what}: {:?} bytes, {} expected",
        found.map(<[u8]>::len),
        expected.len()
    );
}

/// A value length: mostly around the inline limit or in overflow runs of varied lengths.
fn random_len(r: u64) -> usize {
    let page_body = 8_192 - 32;
    match r % 12 {
        0..=2 => (r >> 8) as usize % 200,
        3..=5 => 3_900 + (r >> 8) as usize % 200, // straddles the inline limit
        6..=8 => 4_100 + (r >> 8) as usize % 40_000,
        // One byte short of, at, or past a whole number of run pages.
        9 | 10 => (1 + (r >> 8) as usize % 6) * page_body + (r >> 16) as usize % 3 - 1,
        _ => 60_000 + (r >> 8) as usize % 140_000,
    }
}

#[test]
fn random_large_and_small_values_match_a_model_with_readers_and_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A small memory budget so that held readers make the flusher spill.
    let options = || common::small_options().scratch_memory_bytes(512 << 10);
    let mut env = Environment::open(dir.path(), options()).expect("open");
    let mut model = Model::new();
    let mut seed = 0x00A1_10C8_u64;
    let mut next = || {
        seed = mix(seed);
        seed
    };
    let commits = 400 * common::scale();
    let mut spilled = false;
    for commit in 0..commits {
        // Snapshots held across the commits below: (model at begin, reader).
        let mut readers: Vec<(Model, hrafn::ReadTxn<'_>)> = Vec::new();
        let rounds = 1 + next() % 5;
        for _ in 0..rounds {
            if next() % 3 == 0 && readers.len() < 3 {
                readers.push((model.clone(), env.begin_read().expect("read")));
            }
            let mut wtx = env.begin_write().expect("write");
            let mut staged = model.clone();
            {
                let mut t = wtx.open_tree("t").expect("tree");
                for _ in 0..1 + next() % 6 {
                    let k = (next() % 120) as u32;
                    if next() % 60 == 0 {
                        // Every run of the tree freed at once.
                        let len = t.len();
                        assert_eq!(t.delete_range::<&[u8], _>(..).expect("clear"), len);
                        staged.clear();
                        continue;
                    }
                    if next() % 4 == 0 {
                        let removed = t.remove(key(k)).expect("remove");
                        assert_eq!(removed, staged.remove(&key(k)).is_some());
                    } else {
                        let v = value(k, next(), random_len(next()));
                        t.insert(key(k), &v).expect("insert");
                        staged.insert(key(k), v);
                    }
                }
            }
            if next() % 8 == 0 {
                drop(wtx); // aborted: the pages it took stay free
            } else {
                wtx.commit().expect("commit");
                model = staged;
            }
            let report = check(&env);
            assert_eq!(report.entry_count, model.len() as u64, "commit {commit}");
        }
        if !readers.is_empty() && commit % 10 == 0 {
            // Moves what the held readers pin into scratch files.
            env.flush_and_sync().expect("flush");
            spilled |= env.stats().scratch_files > 0;
        }
        for (expected, rtx) in &readers {
            assert_model(
                &read_tree(rtx),
                expected,
                &format!("snapshot, commit {commit}"),
            );
        }
        drop(readers);
        if commit % 40 == 39 {
            drop(env);
            env = Environment::open(dir.path(), options()).expect("reopen");
            check(&env);
        }
    }
    assert_model(
        &read_tree(&env.begin_read().expect("read")),
        &model,
        "at the end",
    );
    assert!(spilled, "no reader's pages were spilled");
}

/// A value around the inline limit grows into a run and shrinks back, over and over, with
/// runs of other keys freed between: once settled, the pages in use must not creep up.
#[test]
fn values_crossing_the_inline_limit_back_and_forth_leak_no_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let mut used_after_cycle = Vec::new();
    for cycle in 0..30u64 {
        for len in (3_960..4_020)
            .step_by(3)
            .chain((3_960..4_020).rev().step_by(5))
        {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_tree("t").expect("tree");
                for k in 0..8u32 {
                    let v = value(k, cycle * 10_000 + len as u64, len + k as usize);
                    t.insert(key(k), &v).expect("insert");
                }
                // A neighbour that alternates between a long run and nothing.
                if len % 2 == 0 {
                    t.insert(key(99), value(99, cycle, 30_000)).expect("insert");
                } else {
                    t.remove(key(99)).expect("remove");
                }
            }
            wtx.commit().expect("commit");
        }
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .remove(key(99))
            .expect("remove");
        wtx.commit().expect("commit");
        let report = check(&env);
        used_after_cycle.push(report.used_pages);
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_tree("t").expect("tree");
        for k in 0..8u32 {
            let len = 4_019 - 5 * ((4_019 - 3_960) / 5) + k as usize;
            let expected = value(k, cycle * 10_000 + (len - k as usize) as u64, len);
            assert_value(t.get(key(k)).expect("get"), &expected, &format!("key {k}"));
        }
    }
    // The same entries every cycle: the pages in use stay put after the first few.
    let settled = used_after_cycle[5];
    assert!(
        used_after_cycle[5..].iter().all(|&u| u <= settled + 2),
        "pages in use creep up: {used_after_cycle:?}"
    );
}

/// A reader keeps reading an overflow value whose run was freed and then reused by later
/// commits, before and after they are flushed.
#[test]
fn a_reader_keeps_a_freed_run_while_later_commits_reuse_its_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let old = value(1, 1, 90_000);
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(key(1), &old)
        .expect("insert");
    wtx.commit().expect("commit");
    env.flush_and_sync().expect("flush");
    let rtx = env.begin_read().expect("read");
    let next_page_before = check(&env).next_page_number;

    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .remove(key(1))
        .expect("remove");
    wtx.commit().expect("commit");
    // Runs of every size, written over and over into the freed pages.
    for round in 0..20u64 {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for k in 2..6u32 {
                let len = 5_000 + (mix(round * 7 + u64::from(k)) % 20_000) as usize;
                t.insert(key(k), value(k, round, len)).expect("insert");
            }
        }
        wtx.commit().expect("commit");
        env.flush_and_sync().expect("flush");
        let t = rtx.open_tree("t").expect("tree");
        assert_value(t.get(key(1)).expect("get"), &old, &format!("round {round}"));
        assert_eq!(t.len(), 1);
        check(&env);
    }
    let report = check(&env);
    assert!(
        report.next_page_number < next_page_before + 40,
        "freed pages were not reused: {} then {}",
        next_page_before,
        report.next_page_number
    );
    drop(rtx);
    env.flush_and_sync().expect("flush");
    check(&env);
}

/// Filling, emptying and refilling with runs of other sizes reuses the freed pages.
#[test]
fn a_mostly_freed_file_is_refilled_without_growing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let fill = |round: u64, keys: std::ops::Range<u32>| {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for k in keys {
                let len = 5_000 + (mix(round ^ u64::from(k)) % 60_000) as usize;
                t.insert(key(k), value(k, round, len)).expect("insert");
            }
        }
        wtx.commit().expect("commit");
    };
    fill(1, 0..200);
    let full = check(&env);
    // Everything but every tenth key goes.
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        for k in (0..200u32).filter(|k| k % 10 != 0) {
            assert!(t.remove(key(k)).expect("remove"));
        }
    }
    wtx.commit().expect("commit");
    // The first frees also create the free-space map (a directory and a bitmap page).
    let emptied = check(&env);
    assert!(emptied.free_pages > full.used_pages / 2, "{emptied:?}");
    assert!(emptied.next_page_number <= full.next_page_number + 2);
    // Half as much data again, in other sizes.
    fill(2, 200..290);
    let refilled = check(&env);
    assert_eq!(
        refilled.next_page_number, emptied.next_page_number,
        "{refilled:?}"
    );
    assert_eq!(
        refilled.free_pages + refilled.used_pages,
        emptied.free_pages + emptied.used_pages
    );
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), 20 + 90);
    for k in (0..200u32).step_by(10).chain(200..290) {
        let round = if k < 200 { 1 } else { 2 };
        let len = 5_000 + (mix(round ^ u64::from(k)) % 60_000) as usize;
        assert_value(
            t.get(key(k)).expect("get"),
            &value(k, round, len),
            &format!("key {k}"),
        );
    }
}

/// A transaction that takes freed runs and is dropped gives them back: the next one finds
/// them (the writer's cached free count must not keep the aborted allocations).
#[test]
fn an_aborted_transaction_leaves_its_freed_runs_to_the_next_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), common::small_options()).expect("open");
    let write = |keys: std::ops::Range<u32>, round: u64, commit: bool| {
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for k in keys {
                t.insert(key(k), value(k, round, 40_000)).expect("insert");
            }
        }
        if commit {
            wtx.commit().expect("commit");
        }
    };
    write(0..40, 1, true);
    let mut wtx = env.begin_write().expect("write");
    assert_eq!(
        wtx.open_tree("t")
            .expect("tree")
            .delete_range::<&[u8], _>(..)
            .expect("clear"),
        40
    );
    wtx.commit().expect("commit");
    let emptied = check(&env);
    for round in 0..3 {
        write(100..140, 10 + round, false);
        assert_eq!(check(&env).free_pages, emptied.free_pages);
    }
    write(100..140, 20, true);
    let refilled = check(&env);
    assert_eq!(
        refilled.next_page_number, emptied.next_page_number,
        "{refilled:?}"
    );
}

/// Rewrites the runs of keys 0..16 and adds those of 16 new keys (new pages, which a
/// reader that began earlier keeps from reaching the data file).
fn rewrite_runs(env: &Environment, round: u64) -> hrafn::Result<()> {
    let mut wtx = env.begin_write()?;
    {
        let mut t = wtx.open_tree("t")?;
        let fresh = 16 * round as u32..16 * round as u32 + 16;
        for k in (0..16u32).chain(fresh) {
            t.insert(key(k), value(k, round, 20_000))?;
        }
    }
    wtx.commit()
}

/// A reader pins overflow runs that every commit rewrites: the copies spill to scratch
/// files, the reader reads its snapshot throughout, and once it ends the files and memory
/// go back. Past the scratch limit the writer gets `ScratchFull` naming the reader.
#[test]
fn a_pinned_scratch_spills_reports_scratch_full_and_drains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = common::small_options()
        .scratch_memory_bytes(1 << 20)
        .scratch_limit_bytes(24 << 20)
        .scratch_wait_ms(50);
    let env = Environment::open(dir.path(), options).expect("open");
    rewrite_runs(&env, 0).expect("write");
    env.flush_and_sync().expect("flush");
    let snapshot = read_tree(&env.begin_read().expect("read"));
    let rtx = env.begin_read().expect("read");
    std::thread::sleep(Duration::from_millis(20));

    let mut full = None;
    for round in 1..200u64 {
        match rewrite_runs(&env, round) {
            Ok(()) => {}
            Err(e) => {
                full = Some((round, e));
                break;
            }
        }
        if round % 5 == 0 {
            env.flush_and_sync().expect("flush");
            assert_model(&read_tree(&rtx), &snapshot, &format!("round {round}"));
        }
    }
    let (last_round, error) = full.expect("a pinned scratch fills up");
    match error {
        Error::ScratchFull {
            oldest_reader_age_ms,
            limit_bytes,
            used_bytes,
        } => {
            assert!(oldest_reader_age_ms.is_some_and(|age| age >= 20));
            assert_eq!(limit_bytes, 24 << 20);
            assert!(used_bytes <= limit_bytes);
        }
        other => panic!("expected ScratchFull, got {other}"),
    }
    assert!(
        env.stats().scratch_files > 0,
        "copies spilled: {:?}",
        env.stats()
    );
    assert_model(&read_tree(&rtx), &snapshot, "after ScratchFull");
    check(&env);
    drop(rtx);

    // The failed transaction left nothing behind, and scratch drains.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        env.flush_and_sync().expect("flush");
        let stats = env.stats();
        if stats.scratch_files == 0 && stats.scratch_used_bytes == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "scratch kept: {stats:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let leftovers = std::fs::read_dir(dir.path().join("scratch"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(leftovers, 0, "scratch files left on disk");
    rewrite_runs(&env, last_round).expect("writes resume");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    for k in 0..16u32 {
        assert_value(
            t.get(key(k)).expect("get"),
            &value(k, last_round, 20_000),
            &format!("key {k}"),
        );
    }
    check(&env);
}

/// A free-space map damaged so that it calls the meta page free, with its checksum made to
/// hold: the allocator refuses the page with a corruption error instead of handing out
/// page 0 (whose new contents would replace the meta page at commit).
#[test]
fn a_map_that_calls_the_meta_page_free_is_corruption() {
    let inserted = insert_with_one_page_called_free(|_| 0);
    assert!(
        matches!(inserted, Err(Error::Corruption { .. })),
        "{inserted:?}"
    );
}

/// The same for the bitmap's own page: handed out, it became a leaf the directory still
/// named as the bitmap, whose bytes later allocations read as bits.
#[test]
fn a_map_that_calls_its_own_bitmap_free_is_corruption() {
    let inserted = insert_with_one_page_called_free(|bitmap| bitmap);
    assert!(
        matches!(inserted, Err(Error::Corruption { .. })),
        "{inserted:?}"
    );
}

/// Damages the free-space map so that only the page `free(bitmap page)` is free (checksum
/// made to hold), reopens, and inserts into a new tree.
fn insert_with_one_page_called_free(free: impl FnOnce(usize) -> usize) -> hrafn::Result<()> {
    use hrafn::limits::{PAGE_HEADER_SIZE_BYTES, PAGE_SIZE_BYTES};
    use hrafn::page::{self, PageKind};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), hrafn::Options::default()).expect("open");
        for remove in [false, true] {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_tree("t").expect("t");
                for k in 0..50u32 {
                    if remove {
                        t.remove(key(k)).expect("remove");
                    } else {
                        t.insert(key(k), value(k, 0, 20_000)).expect("insert");
                    }
                }
            }
            wtx.commit().expect("commit");
        }
        env.check().expect("check before the damage");
    }
    let path = dir.path().join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let bitmap = (0..data.len() / PAGE_SIZE_BYTES)
        .find(|&p| data[p * PAGE_SIZE_BYTES + page::OFFSET_KIND] == PageKind::Bitmap as u8)
        .expect("a bitmap page");
    let only_free = free(bitmap);
    let bytes = &mut data[bitmap * PAGE_SIZE_BYTES..(bitmap + 1) * PAGE_SIZE_BYTES];
    // Only that page free, so that it is the page the allocator finds.
    bytes[PAGE_HEADER_SIZE_BYTES..].fill(0);
    bytes[PAGE_HEADER_SIZE_BYTES + only_free / 8] = 1 << (only_free % 8);
    page::seal(bytes, bitmap as u64);
    std::fs::write(&path, &data).expect("write back");

    let env = Environment::open(dir.path(), hrafn::Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("u")
        .and_then(|mut t| t.insert(b"k", b"v").map(|_| ()))
}
