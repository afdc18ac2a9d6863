//! Basic behaviour: commit, read, abort, reopen, trees, ranges.

mod common;

use hrafn::{Environment, Error, Options};

fn options() -> Options {
    Options::default().journal_file_size_bytes(1 << 20)
}

#[test]
fn commit_read_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), options()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0..1000u32 {
                t.insert(i.to_be_bytes(), format!("value {i}"))
                    .expect("insert");
            }
            assert_eq!(
                t.get(5u32.to_be_bytes()).expect("get"),
                Some(&b"value 5"[..])
            );
        }
        wtx.commit().expect("commit");
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_tree("t").expect("tree");
        assert_eq!(t.len(), 1000);
        assert_eq!(
            t.get(999u32.to_be_bytes()).expect("get"),
            Some(&b"value 999"[..])
        );
    }
    let env = Environment::open(dir.path(), options()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), 1000);
    let all: Vec<_> = t
        .iter()
        .expect("iter")
        .collect::<Result<_, _>>()
        .expect("entries");
    assert_eq!(all.len(), 1000);
    assert_eq!(all[10].0, &10u32.to_be_bytes()[..]);
    let back: Vec<_> = t
        .iter()
        .expect("iter")
        .rev()
        .take(2)
        .collect::<Result<_, _>>()
        .expect("entries");
    assert_eq!(back[0].0, &999u32.to_be_bytes()[..]);
    assert!(matches!(
        rtx.open_tree("missing"),
        Err(Error::TreeNotFound { .. })
    ));
}

#[test]
fn abort_discards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), options()).expect("open");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("t")
        .expect("tree")
        .insert(b"a", b"1")
        .expect("insert");
    drop(wtx);
    let rtx = env.begin_read().expect("read");
    assert!(matches!(
        rtx.open_tree("t"),
        Err(Error::TreeNotFound { .. })
    ));
}

#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _env = Environment::open(dir.path(), options()).expect("open");
    assert!(matches!(
        Environment::open(dir.path(), options()),
        Err(Error::Locked)
    ));
}

#[test]
fn clean_close_gives_back_the_data_file_growth_slack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_len = || {
        std::fs::metadata(dir.path().join("data.hrafn"))
            .expect("data file")
            .len()
    };
    let fill = |env: &Environment, from: u32| {
        for chunk in 0..10u32 {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_tree("t").expect("tree");
                for i in 0..2000u32 {
                    let n = from + chunk * 2000 + i;
                    t.insert(n.to_be_bytes(), [n as u8; 100]).expect("insert");
                }
            }
            wtx.commit().expect("commit");
        }
    };
    let allocated = {
        let env = Environment::open(dir.path(), options()).expect("open");
        fill(&env, 0);
        env.stats().data_file_size_bytes
    };
    let trimmed = data_len();
    assert!(
        trimmed < allocated,
        "{trimmed} bytes after close, {allocated} before"
    );
    assert_eq!(trimmed % 8192, 0);
    // Everything reads back, and the file grows again for new pages.
    let env = Environment::open(dir.path(), options()).expect("reopen");
    env.check().expect("integrity");
    fill(&env, 20_000);
    {
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_tree("t").expect("tree");
        assert_eq!(t.len(), 40_000);
        for n in [0u32, 19_999, 20_000, 39_999] {
            let value = t.get(n.to_be_bytes()).expect("get");
            assert_eq!(value, Some(&[n as u8; 100][..]));
        }
    }
    drop(env);
    assert!(data_len() > trimmed);
    Environment::open(dir.path(), options())
        .expect("reopen")
        .check()
        .expect("integrity");
}

/// Bytes of every file under `dir`.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                disk_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

#[test]
fn a_tiny_database_takes_well_under_a_mebibyte_when_closed() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    for round in 0..3u8 {
        let env = Environment::open(dir.path(), Options::default())?;
        let mut wtx = env.begin_write()?;
        wtx.open_tree("settings")?
            .insert([round], b"a small value")?;
        wtx.commit()?;
        drop(env);
        let bytes = disk_bytes(dir.path());
        assert!(bytes < 256 << 10, "round {round}: {bytes} bytes on disk");
        if round == 2 {
            common::summary(&format!("tiny database: {bytes} bytes on disk when closed"));
        }
    }
    let env = Environment::open(dir.path(), Options::default())?;
    assert_eq!(env.begin_read()?.open_tree("settings")?.len(), 3);
    Ok(())
}

#[test]
fn update_in_place_changes_values_of_every_kind_and_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = vec![1u8; 20_000]; // kept in overflow pages
    {
        let env = Environment::open(dir.path(), options()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in 0..500u32 {
                t.insert(i.to_be_bytes(), [0u8; 32]).expect("insert");
            }
            t.insert(b"big", &big).expect("insert");
            t.open_fixed_tree(b"nested", 8).expect("nested");
        }
        wtx.commit().expect("commit");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            for i in (0..500u32).step_by(7) {
                let updated = t
                    .update_in_place(i.to_be_bytes(), |v| {
                        v[..4].copy_from_slice(&i.to_le_bytes())
                    })
                    .expect("update");
                assert!(updated);
            }
            assert!(
                t.update_in_place(b"big", |v| v[19_999] = 9)
                    .expect("update big")
            );
            assert!(
                !t.update_in_place(b"absent", |_| panic!("not called"))
                    .expect("absent")
            );
            assert!(matches!(
                t.update_in_place(b"nested", |_| panic!("not called")),
                Err(Error::WrongTreeKind { .. })
            ));
            assert_eq!(t.len(), 502);
        }
        wtx.commit().expect("commit");
    }
    let env = Environment::open(dir.path(), options()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    for i in 0..500u32 {
        let mut want = [0u8; 32];
        if i % 7 == 0 {
            want[..4].copy_from_slice(&i.to_le_bytes());
        }
        assert_eq!(
            t.get(i.to_be_bytes()).expect("get"),
            Some(&want[..]),
            "key {i}"
        );
    }
    let got = t.get(b"big").expect("get").expect("big");
    assert_eq!((got.len(), got[19_999], got[0]), (20_000, 9, 1));
    rtx.check().expect("check");
}

/// A record larger than a journal file gets a file of its own, which it fills exactly: the
/// file is sealed while still the writer's current one, and a sync retires it. Closing
/// must not remove it a second time (it used to fail with "No such file or directory").
#[test]
fn close_after_an_oversized_record_was_synced_succeeds() {
    for durability in [hrafn::Durability::None, hrafn::Durability::Immediate] {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::open(
            dir.path(),
            Options::default()
                .durability(durability)
                .journal_file_size_bytes(1 << 20),
        )
        .expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut tree = wtx.open_tree("t").expect("tree");
            for i in 0..4_000u32 {
                let value: Vec<u8> = (0..1000u32)
                    .map(|b| (b.wrapping_mul(i + 7) >> 3) as u8)
                    .collect();
                tree.insert(i.to_be_bytes(), value).expect("insert");
            }
        }
        wtx.commit().expect("commit");
        env.flush_and_sync().expect("sync");
        env.close().expect("close");
        let env = Environment::open(dir.path(), Options::default()).expect("reopen");
        assert_eq!(
            env.begin_read()
                .expect("read")
                .open_tree("t")
                .expect("tree")
                .len(),
            4_000
        );
    }
}

/// The `VmFlags` of this process's mappings of the data file in `dir` (`/proc/self/smaps`).
fn data_file_vm_flags(dir: &std::path::Path) -> Vec<String> {
    let path = dir
        .join(hrafn::DATA_FILE)
        .canonicalize()
        .expect("data file path");
    let path = path.to_str().expect("utf-8 path");
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut flags = Vec::new();
    let mut in_data = false;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("VmFlags:") {
            if in_data {
                flags.push(rest.trim().to_string());
            }
        } else if line.split_whitespace().next().is_some_and(|range| {
            range.contains('-') && range.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
        }) {
            // A mapping's first line: "start-end perms offset device inode path".
            in_data = line.ends_with(path);
        }
    }
    flags
}

/// `read_ahead(false)` advises every mapping of the data file as random access (the
/// kernel's `rr` flag), the first and those made when a flush grows the file; by default
/// none is.
#[test]
fn read_ahead_off_advises_the_data_file_mapping_random() {
    for read_ahead in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::open(dir.path(), options().read_ahead(read_ahead)).expect("open");
        for round in 0..2u32 {
            let mut wtx = env.begin_write().expect("write");
            {
                let mut t = wtx.open_tree("t").expect("tree");
                for i in 0..20_000u32 {
                    let key = [round.to_be_bytes(), i.to_be_bytes()].concat();
                    t.insert(key, [7u8; 100]).expect("insert");
                }
            }
            wtx.commit().expect("commit");
            // The flush grows the data file and maps it again.
            env.flush_and_sync().expect("flush");
            let flags = data_file_vm_flags(dir.path());
            assert!(!flags.is_empty(), "the data file is mapped");
            for f in &flags {
                let random = f.split_whitespace().any(|w| w == "rr");
                assert_eq!(random, !read_ahead, "read_ahead {read_ahead}: VmFlags {f}");
            }
        }
    }
}

/// `update_in_place_each` gives what one `update_in_place` per key gives, whatever the
/// order of the keys (ascending, descending, shuffled, repeated, absent ones among them),
/// over many leaves, with overflow values in the mix; absent keys are reported by index.
#[test]
fn update_in_place_each_matches_one_update_per_key() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), options()).expect("open");
    let key = |i: u32| format!("key-{i:06}").into_bytes();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut wtx = env.begin_write().expect("write");
    {
        let mut t = wtx.open_tree("t").expect("tree");
        // Every third key absent; every 97th value in overflow pages.
        for i in (0..6000u32).filter(|i| i % 3 != 0) {
            let len = if i % 97 == 1 { 5000 } else { 40 };
            let value = vec![(i % 251) as u8; len];
            t.insert(key(i), &value).expect("insert");
            model.insert(key(i), value);
        }
        let mut seed = 7u64;
        let mut orders: Vec<Vec<u32>> = vec![
            (0..6000).collect(),
            (0..6000).rev().collect(),
            (0..3000).flat_map(|i| [i, i]).collect(),
        ];
        let mut shuffled: Vec<u32> = (0..6000).collect();
        for i in (1..shuffled.len()).rev() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            shuffled.swap(i, (seed >> 33) as usize % (i + 1));
        }
        orders.push(shuffled);
        for (round, order) in orders.iter().enumerate() {
            let keys: Vec<Vec<u8>> = order.iter().map(|&i| key(i)).collect();
            let bump = |v: &mut [u8]| {
                for b in v.iter_mut() {
                    *b = b.wrapping_add(round as u8 + 1);
                }
            };
            let absent = t
                .update_in_place_each(&keys, |_, v| bump(v))
                .expect("update each");
            let mut want_absent = Vec::new();
            for (n, k) in keys.iter().enumerate() {
                match model.get_mut(k) {
                    Some(v) => bump(v),
                    None => want_absent.push(n),
                }
            }
            assert_eq!(absent, want_absent, "round {round}");
            for (k, v) in &model {
                assert_eq!(t.get(k).expect("get"), Some(v.as_slice()), "round {round}");
            }
        }
    }
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("t").expect("tree");
    assert_eq!(t.len(), model.len() as u64);
    for (k, v) in &model {
        assert_eq!(t.get(k).expect("get"), Some(v.as_slice()));
    }
}

/// An insert makes its leaf writable before it searches it; one that is then refused (a
/// value over a key that holds a nested tree) must still leave the leaf as it was.
#[test]
fn a_refused_insert_leaves_its_leaf_as_it_was() -> hrafn::Result<()> {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), options())?;
        let mut wtx = env.begin_write()?;
        {
            let mut t = wtx.open_tree("t")?;
            for i in 0..200u32 {
                t.insert(i.to_be_bytes(), [1u8; 16])?;
            }
            t.open_tree(b"nested")?.insert(b"inner", b"kept")?;
        }
        wtx.commit()?;
        let mut wtx = env.begin_write()?;
        {
            let mut t = wtx.open_tree("t")?;
            assert!(matches!(
                t.insert(b"nested", b"a value"),
                Err(Error::WrongTreeKind { .. })
            ));
            t.insert(7u32.to_be_bytes(), [2u8; 16])?;
        }
        wtx.commit()?;
    }
    let env = Environment::open(dir.path(), options())?;
    env.check()?;
    let rtx = env.begin_read()?;
    let t = rtx.open_tree("t")?;
    assert_eq!(t.len(), 201);
    assert_eq!(t.open_tree(b"nested")?.get(b"inner")?, Some(&b"kept"[..]));
    assert_eq!(t.get(7u32.to_be_bytes())?, Some(&[2u8; 16][..]));
    Ok(())
}

/// A write transaction finds trees through its own root tree, which moves when it gains its
/// first tree, splits or collapses before the meta page is written at commit: a listing
/// after the first tree shows it, and a tree named after a split of the root in the same
/// transaction is found with its entries, not made again empty (which lost them at commit).
#[test]
fn a_write_transaction_finds_trees_after_its_root_tree_moved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = Environment::open(dir.path(), Options::default()).expect("open");
    let mut wtx = env.begin_write().expect("begin");
    wtx.open_tree("a").expect("a");
    assert_eq!(wtx.list_trees().expect("list"), ["a"]);
    wtx.open_tree("zz-old")
        .expect("tree")
        .insert(b"k", b"v")
        .expect("insert");
    wtx.commit().expect("commit");

    let mut wtx = env.begin_write().expect("begin");
    let names: Vec<String> = (0..600).map(|i| format!("new-{i:04}")).collect();
    for name in &names {
        wtx.open_tree(name).expect("new tree");
    }
    // Writes every new tree into the root tree, which splits: its root page moves.
    assert_eq!(wtx.list_trees().expect("list").len(), 602);
    assert_eq!(
        wtx.open_tree("zz-old")
            .expect("old tree")
            .get(b"k")
            .expect("get"),
        Some(&b"v"[..]),
        "the tree named after the split was made again"
    );
    for name in &names[..300] {
        assert!(wtx.delete_tree(name).expect("delete"));
    }
    // The root tree shrank: the old tree is still found.
    assert_eq!(wtx.list_trees().expect("list").len(), 302);
    assert_eq!(
        wtx.open_tree("zz-old")
            .expect("old tree")
            .get(b"k")
            .expect("get"),
        Some(&b"v"[..])
    );
    wtx.commit().expect("commit");
    let rtx = env.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("zz-old")
            .expect("tree")
            .get(b"k")
            .expect("get"),
        Some(&b"v"[..])
    );
    assert_eq!(rtx.list_trees().expect("list").len(), 302);
    drop(rtx);
    env.check().expect("check");
}

/// Freeing a value's overflow run first checks that the entry's reference matches the run
/// (kind and length): a damaged reference would otherwise free pages that may be live,
/// which a later transaction reuses. The remove fails as corruption, and so does the
/// transaction.
#[test]
fn a_damaged_overflow_reference_frees_nothing() {
    use hrafn::limits::PAGE_SIZE_BYTES;
    use hrafn::page::{OFFSET_AUX, OFFSET_KIND, PageKind, put_u64, seal};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("begin");
        {
            let mut t = wtx.open_tree("t").expect("tree");
            t.insert(b"big", vec![0u8; 20_000]).expect("insert");
            t.insert(b"small", b"v").expect("insert");
        }
        wtx.commit().expect("commit");
    }
    let path = dir.path().join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let runs: Vec<usize> = (0..data.len() / PAGE_SIZE_BYTES)
        .filter(|&p| data[p * PAGE_SIZE_BYTES + OFFSET_KIND] == PageKind::Overflow as u8)
        .collect();
    assert_eq!(runs.len(), 1, "one overflow run");
    let first = runs[0];
    let run = &mut data[first * PAGE_SIZE_BYTES..(first + 3) * PAGE_SIZE_BYTES];
    put_u64(run, OFFSET_AUX, 19_999); // the entry says 20,000
    seal(run, first as u64);
    std::fs::write(&path, &data).expect("write back");

    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("begin");
    let removed = wtx.open_tree("t").expect("tree").remove(b"big");
    assert!(
        matches!(removed, Err(Error::Corruption { .. })),
        "{removed:?}"
    );
    assert!(wtx.commit().is_err(), "the failed remove cannot commit");
    let rtx = env.begin_read().expect("read");
    assert_eq!(
        rtx.open_tree("t")
            .expect("tree")
            .get(b"small")
            .expect("get"),
        Some(&b"v"[..])
    );
}

/// A B+tree insert that meets damage fails its transaction, as a remove does: damage met
/// part way (a split, a replaced value's pages freed) must not commit half done.
#[test]
fn an_insert_that_meets_damage_fails_the_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = *b"the leaf's value";
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("t")
            .expect("tree")
            .insert(b"k", marker)
            .expect("insert");
        wtx.commit().expect("commit");
    }
    common::damage_page_holding(dir.path(), &marker);
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let mut wtx = env.begin_write().expect("write");
    wtx.open_tree("other")
        .expect("tree")
        .insert(b"x", b"y")
        .expect("insert elsewhere");
    let inserted = wtx.open_tree("t").expect("tree").insert(b"k2", b"v");
    assert!(
        matches!(inserted, Err(Error::Corruption { .. })),
        "{inserted:?}"
    );
    assert!(wtx.commit().is_err(), "a failed insert cannot commit");
}
