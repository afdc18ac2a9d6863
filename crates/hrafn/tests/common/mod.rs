//! Shared helpers for scenario tests.
#![allow(dead_code)]

use hrafn::Options;

/// Multiplier for test counts: `HRAFN_TEST_SCALE=100` turns CI counts into a soak run.
pub fn scale() -> u64 {
    std::env::var("HRAFN_TEST_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1)
}

/// Prints a suite's summary line (or why it was skipped) straight to the process's
/// standard error: the harness captures only `print!` and `eprint!`, so the line shows in
/// `cargo test` output with or without `--nocapture`.
pub fn summary(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    // Nothing to do if standard error is gone.
    let _ = writeln!(err, "{line}");
}

/// Options with small journals so rotation and recycling happen in small tests.
pub fn small_options() -> Options {
    Options::default()
        .journal_file_size_bytes(64 * 1024)
        .flush_interval_ms(1)
}

/// splitmix64 finalizer: every derived size and byte comes from it.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Every file under `dir` (name relative to it → bytes), except those named in `skip`.
pub fn dir_files(
    dir: &std::path::Path,
    skip: &[&str],
) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        skip: &[&str],
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, skip, out);
            } else {
                let name = path
                    .strip_prefix(root)
                    .expect("inside")
                    .display()
                    .to_string();
                if !skip.contains(&name.as_str()) {
                    out.insert(name, std::fs::read(&path).expect("read"));
                }
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, skip, &mut out);
    out
}

/// Bytes of every file under `dir`, subdirectories included.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).expect("read_dir") {
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

/// Flips one bit of the data file in `dir` where `marker` (a value the test stored, lying
/// within one page) is found, without resealing: that page then fails its checksum.
pub fn damage_page_holding(dir: &std::path::Path, marker: &[u8]) {
    use hrafn::limits::PAGE_SIZE_BYTES;
    let path = dir.join(hrafn::DATA_FILE);
    let mut data = std::fs::read(&path).expect("data file");
    let at = data
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("the marker in the data file");
    assert_eq!(
        at / PAGE_SIZE_BYTES,
        (at + marker.len() - 1) / PAGE_SIZE_BYTES,
        "the marker lies within one page"
    );
    data[at] ^= 1;
    std::fs::write(&path, &data).expect("write back");
}

/// The value of `key` in tree `tree`, as a new read transaction of `env` sees it.
pub fn value_of(env: &hrafn::Environment, tree: &str, key: &[u8]) -> Option<Vec<u8>> {
    env.begin_read()
        .expect("read")
        .open_tree(tree)
        .expect("tree")
        .get(key)
        .expect("get")
        .map(<[u8]>::to_vec)
}
