//! The typed layer through a real environment: typed trees and multi-value trees written,
//! committed, reopened and read back, ranges over big-endian numbers in numeric order, and
//! bytes of the wrong shape reported as decode errors.
#![cfg(feature = "typed")]

use hrafn::typed::{Bytes, I64Be, Serde, Str, TypedMultiTree, TypedTree, U64Be};
use hrafn::{Environment, Error, Options};
use std::ops::Bound;

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Sample {
    value: f64,
    labels: Vec<String>,
}

const SAMPLES: TypedTree<U64Be, Serde<Sample>> = TypedTree::new("samples");
const OFFSETS: TypedTree<I64Be, Str> = TypedTree::new("offsets");
const BY_LABEL: TypedMultiTree<Str, U64Be> = TypedMultiTree::new("by-label");
const RAW: TypedTree<Bytes, Bytes> = TypedTree::new("raw");

#[test]
fn typed_trees_round_trip_through_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let env = Environment::open(dir.path(), Options::default()).expect("open");
        let mut wtx = env.begin_write().expect("write");
        {
            let mut samples = SAMPLES.open_mut(&mut wtx).expect("open");
            // Inserted out of order, including keys whose little-endian bytes would sort
            // differently.
            for t in [300u64, 1, 256, 70_000, 2] {
                let sample = Sample {
                    value: t as f64 / 2.0,
                    labels: vec![format!("t{t}")],
                };
                assert!(!samples.insert(&t, &sample).expect("insert"));
            }
            assert_eq!(samples.len(), 5);
            assert_eq!(
                samples.get(&256).expect("get").map(|s| s.value),
                Some(128.0)
            );
        }
        {
            let mut offsets = OFFSETS.open_mut(&mut wtx).expect("open");
            for n in [-300i64, 5, -1, 0, i64::MIN] {
                offsets.insert(&n, &format!("n{n}")).expect("insert");
            }
        }
        {
            let mut by_label = BY_LABEL.open_mut(&mut wtx).expect("open");
            for id in [9u64, 3, 700] {
                assert!(by_label.add("job=api", &id).expect("add"));
            }
            assert!(!by_label.add("job=api", &3).expect("add again"));
            assert!(by_label.remove("job=api", &9).expect("remove"));
        }
        RAW.open_mut(&mut wtx)
            .expect("open")
            .insert(b"k", b"\xFF\xFE")
            .expect("insert");
        wtx.commit().expect("commit");
    }
    let env = Environment::open(dir.path(), Options::default()).expect("reopen");
    let rtx = env.begin_read().expect("read");
    let samples = SAMPLES.open(&rtx).expect("open");
    let keys: Vec<u64> = samples
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(keys, [1, 2, 256, 300, 70_000], "numeric order");
    let middle: Vec<u64> = samples
        .range(Bound::Included(&2), Bound::Excluded(&300))
        .expect("range")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(middle, [2, 256]);
    assert_eq!(
        samples.get(&70_000).expect("get"),
        Some(Sample {
            value: 35_000.0,
            labels: vec!["t70000".into()]
        })
    );
    let offsets: Vec<(i64, String)> = OFFSETS
        .open(&rtx)
        .expect("open")
        .range(Bound::Unbounded, Bound::Unbounded)
        .expect("range")
        .map(|e| e.map(|(k, v)| (k, v.to_owned())).expect("entry"))
        .collect();
    let keys: Vec<i64> = offsets.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, [i64::MIN, -300, -1, 0, 5], "signed order");
    let by_label = BY_LABEL.open(&rtx).expect("open");
    let ids: Vec<u64> = by_label
        .values("job=api")
        .expect("values")
        .map(|v| v.expect("id"))
        .collect();
    assert_eq!(ids, [3, 700]);
    assert_eq!(by_label.count("job=none").expect("count"), 0);
    // The raw value is not UTF-8: read as text through another definition, it is an error.
    const RAW_AS_TEXT: TypedTree<Bytes, Str> = TypedTree::new("raw");
    assert!(matches!(
        RAW_AS_TEXT.open(&rtx).expect("open").get(b"k"),
        Err(Error::Decode { .. })
    ));
    const SAMPLES_AS_U64: TypedTree<U64Be, U64Be> = TypedTree::new("samples");
    assert!(matches!(
        SAMPLES_AS_U64.open(&rtx).expect("open").get(&1),
        Err(Error::Decode { .. })
    ));
}
