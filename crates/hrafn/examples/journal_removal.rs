//! What removing many retired journal files at once does to synced writes beside it.
//!
//! A sync after a long reader retires hundreds of journal files. On a filesystem mounted
//! with `discard`, removing a file sends its freed blocks to the device, and the synced
//! journal writes queue behind that. This makes `HRAFN_FILES` (default 200) zero-filled
//! files of 16 MiB in a temporary directory (`TMPDIR`, which should sit on the filesystem
//! an environment would use), starts a thread writing 4 KiB with `O_DIRECT | O_DSYNC` in a
//! loop, and removes the files: first all at once, then (made again) 4 every 100 ms, the
//! flusher's pace (`JOURNAL_REMOVALS_PER_TICK` per tick of `flush_interval_ms`). It prints
//! the synced writes per second and their p99 in half-second steps.
//!
//! Run it with:
//!
//! ```sh
//! cargo run --release -p hrafn --example journal_removal
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const FILE_BYTES: usize = 16 << 20;
const WRITE_BYTES: usize = 4096;
const JOURNAL_BYTES: u64 = 64 << 20;

fn make_files(dir: &Path, count: usize) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    for i in 0..count {
        let mut file = File::create(dir.join(format!("retired-{i}")))?;
        for _ in 0..FILE_BYTES / zeros.len() {
            file.write_all(&zeros)?;
        }
        file.sync_all()?;
    }
    Ok(())
}

/// Removes the files, `per_step` every 100 ms (all at once when `None`).
fn remove_files(dir: &Path, count: usize, per_step: Option<usize>) -> std::io::Result<()> {
    for i in 0..count {
        std::fs::remove_file(dir.join(format!("retired-{i}")))?;
        if per_step.is_some_and(|n| (i + 1) % n == 0) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

fn run(dir: &Path, count: usize, per_step: Option<usize>) -> std::io::Result<()> {
    make_files(dir, count)?;
    let journal_path = dir.join("journal");
    let mut journal = File::create(&journal_path)?;
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..JOURNAL_BYTES / zeros.len() as u64 {
        journal.write_all(&zeros)?;
    }
    journal.sync_all()?;
    let journal = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(&journal_path)?;
    // O_DIRECT wants an aligned buffer: an anonymous map is page-aligned.
    let mut buffer = memmap2::MmapMut::map_anon(WRITE_BYTES)?;
    buffer.fill(0x5A);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> std::io::Result<Vec<(Instant, Duration)>> {
            let mut writes = Vec::new();
            let mut offset = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                journal.write_all_at(&buffer, offset)?;
                writes.push((start, start.elapsed()));
                offset = (offset + WRITE_BYTES as u64) % JOURNAL_BYTES;
            }
            Ok(writes)
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    let removing = Instant::now();
    remove_files(dir, count, per_step)?;
    let removed = removing.elapsed();
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let writes = writer.join().expect("writer thread")?;
    std::fs::remove_file(&journal_path)?;

    let window = |from: Instant, length: Duration| {
        let mut latencies: Vec<Duration> = writes
            .iter()
            .filter(|(at, _)| *at >= from && *at < from + length)
            .map(|&(_, latency)| latency)
            .collect();
        latencies.sort_unstable();
        let p99 = latencies
            .get(latencies.len() * 99 / 100)
            .copied()
            .unwrap_or_default();
        (latencies.len() as f64 / length.as_secs_f64(), p99)
    };
    let label = per_step.map_or("all at once".to_owned(), |n| format!("{n} every 100 ms"));
    println!(
        "removing {count} files of 16 MiB, {label}: {:.2} s",
        removed.as_secs_f64()
    );
    let (rate, p99) = window(removing - Duration::from_secs(3), Duration::from_secs(3));
    println!(
        "  before:   {rate:>6.0} synced writes/s, p99 {:>6.2} ms",
        p99.as_secs_f64() * 1e3
    );
    let step = Duration::from_millis(500);
    let mut from = removing;
    while from < removing + removed + Duration::from_secs(3) {
        let (rate, p99) = window(from, step);
        println!(
            "  {:>+5.1} s: {rate:>6.0} synced writes/s, p99 {:>6.2} ms",
            (from - removing).as_secs_f64(),
            p99.as_secs_f64() * 1e3
        );
        from += step;
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let count = std::env::var("HRAFN_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir()?;
    run(dir.path(), count, None)?;
    run(dir.path(), count, Some(4))?;
    Ok(())
}
