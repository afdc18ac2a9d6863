//! Size scenarios: a million entries in one transaction, and a 1 GiB value.

mod common;

use hrafn::{Environment, Options};
use std::time::Instant;

#[test]
fn million_entries_in_one_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let count = 1_000_000u64;
    let value = |i: u64| {
        let mut v = [0u8; 100];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v[99] = i as u8;
        v
    };
    let started = Instant::now();
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut t = wtx.open_tree("big").expect("tree");
            for i in 0..count {
                t.insert(format!("{i:016}"), value(i)).expect("insert");
            }
        }
        wtx.commit().expect("commit");
        let rtx = env.begin_read().expect("read");
        let t = rtx.open_tree("big").expect("tree");
        for i in 0..count {
            assert_eq!(t.get(format!("{i:016}")).expect("get"), Some(&value(i)[..]));
        }
        let report = env.check().expect("check");
        assert_eq!(report.entry_count, count);
    }
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let t = rtx.open_tree("big").expect("tree");
    let mut n = 0;
    for (i, item) in t.iter().expect("iter").enumerate() {
        let (k, v) = item.expect("entry");
        assert_eq!(k, format!("{i:016}").as_bytes());
        assert_eq!(v, &value(i as u64)[..]);
        n += 1;
    }
    assert_eq!(n, count);
    eprintln!("million: {:?}", started.elapsed());
}

#[test]
fn one_gib_value_roundtrips_through_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let len = 1usize << 30;
    let mut value = vec![0u8; len];
    for (i, chunk) in value.chunks_mut(4096).enumerate() {
        chunk[0] = i as u8;
        chunk[4095] = (i >> 8) as u8;
    }
    let started = Instant::now();
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        wtx.open_tree("blobs")
            .expect("tree")
            .insert(b"big", &value)
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let got = rtx
        .open_tree("blobs")
        .expect("tree")
        .get(b"big")
        .expect("get")
        .expect("present");
    assert!(got == value.as_slice(), "value differs after reopen");
    eprintln!("1 GiB value: {:?}", started.elapsed());
}
