//! `hrafn-bench timeseries`: the time-series store on a monitoring-shaped workload, beside
//! a plain B+tree layout in Hrafn (key `series id | timestamp` → 8-byte value).
//!
//! The workload: node-exporter-like label sets (24 series per instance: CPU seconds by cpu
//! and mode, memory, network and disk byte counters, filesystem space, load), one sample
//! per series per 15 s scrape (with up to 5 ms of jitter), over a simulated span. Values
//! move as those metrics do: CPU seconds in 10 ms ticks, byte counters in bytes (disks and
//! loopback often idle), memory and filesystem space in 4 KiB pages (filesystems mostly
//! still), load averages in hundredths. Scrapes go in from 4 threads (as 4
//! scrape pools would), each a durable append of its share of the series.

use anyhow::{Context, Result, ensure};
use hrafn::{Durability, Environment, Options};
use hrafn_timeseries::text::parse_selector;
use hrafn_timeseries::{Aggregation, Labels, RangeQuery, Sample, SeriesId, Store, StoreOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCRAPE_MS: i64 = 15_000;
const SERIES_PER_INSTANCE: usize = 24;
const THREADS: usize = 4;
/// Seeds the values of every scrape, so other tools can be fed the very same samples.
const SAMPLES_SEED: u64 = 17;
/// Most samples handed to Prometheus's block import (its input is a text file).
const PROMTOOL_SAMPLES_MAX: usize = 2_000_000;
/// Most scrapes the plain B+tree baseline ingests (4 h): enough for its rate and size.
const BASELINE_SCRAPES_MAX: usize = 960;

/// How a series' value moves from scrape to scrape, after node exporter's metrics.
#[derive(Clone, Copy)]
enum Kind {
    /// CPU seconds (two decimals, as the kernel's 10 ms ticks give): grows by up to this
    /// many seconds per 15 s scrape.
    CpuSeconds(u32),
    /// A byte counter that grows by up to this many bytes per scrape, and stays put with
    /// probability `idle_percent`.
    Bytes { step: u32, idle_percent: u32 },
    /// A gauge in multiples of `unit` bytes that moves by up to `steps` units, and stays
    /// put with probability `idle_percent`.
    Space {
        unit: f64,
        steps: i32,
        idle_percent: u32,
    },
    /// A load average (two decimals).
    Load,
}

/// One series of the workload: its labels and how its value moves.
struct Series {
    labels: Labels,
    kind: Kind,
    value: f64,
}

fn workload(series_count: usize) -> Vec<Series> {
    let mut out = Vec::with_capacity(series_count);
    let mut instance = 0;
    while out.len() < series_count {
        let inst = format!("host-{instance}:9100");
        let base = [("job", "node"), ("instance", inst.as_str())];
        let mut add = |name: &str, extra: &[(&str, &str)], kind: Kind, value: f64| {
            let mut pairs: Vec<(&str, &str)> = base.to_vec();
            pairs.push(("__name__", name));
            pairs.extend_from_slice(extra);
            out.push(Series {
                labels: Labels::new(pairs).expect("valid labels"),
                kind,
                value,
            });
        };
        for cpu in ["0", "1", "2", "3"] {
            for (mode, step) in [("idle", 15), ("user", 3), ("system", 1), ("iowait", 0)] {
                let labels = [("cpu", cpu), ("mode", mode)];
                add(
                    "node_cpu_seconds_total",
                    &labels,
                    Kind::CpuSeconds(step),
                    123_456.78,
                );
            }
        }
        let memory = Kind::Space {
            unit: 4096.0,
            steps: 256,
            idle_percent: 0,
        };
        add(
            "node_memory_MemAvailable_bytes",
            &[],
            memory,
            8_000_000_000.0 - 8_000_000_000.0 % 4096.0,
        );
        add("node_load1", &[], Kind::Load, 1.0);
        let network = Kind::Bytes {
            step: 200_000,
            idle_percent: 0,
        };
        add(
            "node_network_receive_bytes_total",
            &[("device", "eth0")],
            network,
            1e9,
        );
        let loopback = Kind::Bytes {
            step: 2_000,
            idle_percent: 50,
        };
        add(
            "node_network_receive_bytes_total",
            &[("device", "lo")],
            loopback,
            1e7,
        );
        for device in ["sda", "sdb"] {
            let disk = Kind::Bytes {
                step: 512 * 64,
                idle_percent: 70,
            };
            add(
                "node_disk_read_bytes_total",
                &[("device", device)],
                disk,
                1e10,
            );
        }
        for (mount, device) in [("/", "sda1"), ("/home", "sdb1")] {
            let labels = [
                ("mountpoint", mount),
                ("device", device),
                ("fstype", "ext4"),
            ];
            let space = Kind::Space {
                unit: 4096.0,
                steps: 64,
                idle_percent: 90,
            };
            add(
                "node_filesystem_avail_bytes",
                &labels,
                space,
                5e10 - 5e10 % 4096.0,
            );
        }
        debug_assert_eq!(out.len() % SERIES_PER_INSTANCE, 0);
        instance += 1;
    }
    out.truncate(series_count);
    out
}

/// The next value of a series.
fn step(s: &mut Series, rng: &mut StdRng) -> f64 {
    let cents = |v: f64| (v * 100.0).round() / 100.0;
    s.value = match s.kind {
        Kind::CpuSeconds(max) => cents(s.value + f64::from(rng.gen_range(0..=max * 100)) / 100.0),
        Kind::Bytes { step, idle_percent } => {
            if rng.gen_range(0..100) < idle_percent {
                s.value
            } else {
                s.value + f64::from(rng.gen_range(0..step))
            }
        }
        Kind::Space {
            unit,
            steps,
            idle_percent,
        } => {
            if rng.gen_range(0..100) < idle_percent {
                s.value
            } else {
                s.value + f64::from(rng.gen_range(-steps..=steps)) * unit
            }
        }
        Kind::Load => cents((s.value + f64::from(rng.gen_range(-10i32..=10)) / 100.0).max(0.0)),
    };
    s.value
}

/// Times the ingest of `scrapes` scrapes of every series: `append(thread, rows)` stores
/// one thread's share of one scrape.
/// The timestamp and values of scrape number `scrape` (call in order, with one `rng`).
fn scrape(series: &mut [Series], scrape: usize, rng: &mut StdRng) -> (i64, Vec<f64>) {
    let t = scrape as i64 * SCRAPE_MS + rng.gen_range(0..5);
    (t, series.iter_mut().map(|s| step(s, rng)).collect())
}

fn ingest(
    series: &mut [Series],
    scrapes: usize,
    append: &(dyn Fn(usize, Vec<(usize, Sample)>) -> Result<()> + Sync),
) -> Result<Duration> {
    let mut rng = StdRng::seed_from_u64(SAMPLES_SEED);
    let start = Instant::now();
    let share = series.len().div_ceil(THREADS);
    for n in 0..scrapes {
        let (t, values) = scrape(series, n, &mut rng);
        let rows: Vec<Vec<(usize, Sample)>> = values
            .chunks(share)
            .enumerate()
            .map(|(part, values)| {
                values
                    .iter()
                    .enumerate()
                    .map(|(i, &value)| {
                        let sample = Sample {
                            timestamp_ms: t,
                            value,
                        };
                        (part * share + i, sample)
                    })
                    .collect()
            })
            .collect();
        std::thread::scope(|scope| -> Result<()> {
            let handles: Vec<_> = rows
                .into_iter()
                .enumerate()
                .map(|(thread, rows)| scope.spawn(move || append(thread, rows)))
                .collect();
            for h in handles {
                h.join()
                    .map_err(|_| anyhow::anyhow!("an ingest thread panicked"))??;
            }
            Ok(())
        })?;
    }
    Ok(start.elapsed())
}

fn used_bytes(env: &Environment) -> Result<u64> {
    let report = env.begin_read()?.check()?;
    Ok(report.used_pages * hrafn::limits::PAGE_SIZE_BYTES as u64)
}

/// What Prometheus's own tool measured on the same series.
struct Prometheus {
    version: String,
    ingest_per_s: f64,
    block_bytes: u64,
    block_samples: usize,
}

/// Runs `promtool tsdb bench write` on the workload's label sets (its head appender with
/// its own values) and `promtool tsdb create-blocks-from openmetrics` on the very samples
/// the store got (up to [`PROMTOOL_SAMPLES_MAX`]).
fn promtool(series_count: usize, scrapes: usize, dir: &Path) -> Result<Prometheus> {
    use std::io::Write;
    use std::process::Command;
    let version = Command::new("promtool")
        .arg("--version")
        .output()
        .context("promtool is not installed (Debian: apt install prometheus)")?;
    let version = String::from_utf8_lossy(&version.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap_or("?")
        .to_string();
    let mut series = workload(series_count);
    let labels_file = dir.join("series.json");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&labels_file)?);
    for s in &series {
        let map: serde_json::Map<String, serde_json::Value> = s
            .labels
            .iter()
            .map(|(n, v)| (n.to_string(), serde_json::Value::from(v)))
            .collect();
        writeln!(out, "{}", serde_json::Value::Object(map))?;
    }
    out.flush()?;
    drop(out);
    let bench = Command::new("promtool")
        .args(["tsdb", "bench", "write"])
        .arg(format!("--metrics={series_count}"))
        .arg(format!("--scrapes={scrapes}"))
        .arg(format!("--out={}", dir.join("prom-bench").display()))
        .arg(&labels_file)
        .output()?;
    let text = String::from_utf8_lossy(&bench.stdout).into_owned()
        + &String::from_utf8_lossy(&bench.stderr);
    let ingest_per_s: f64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("> samples/sec:"))
        .context("no samples/sec in promtool's output")?
        .trim()
        .parse()?;
    // The same samples as OpenMetrics text (timestamps in seconds).
    let block_scrapes = scrapes
        .min(PROMTOOL_SAMPLES_MAX / series_count.max(1))
        .max(1);
    let om_file = dir.join("samples.om");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&om_file)?);
    let mut rng = StdRng::seed_from_u64(SAMPLES_SEED);
    for n in 0..block_scrapes {
        let (t, values) = scrape(&mut series, n, &mut rng);
        for (s, v) in series.iter().zip(values) {
            writeln!(
                out,
                "{} {v} {}.{:03}",
                s.labels,
                t.div_euclid(1000),
                t.rem_euclid(1000)
            )?;
        }
    }
    writeln!(out, "# EOF")?;
    out.flush()?;
    drop(out);
    let blocks = dir.join("prom-blocks");
    let status = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics", "--quiet"])
        .arg(&om_file)
        .arg(&blocks)
        .status()?;
    ensure!(
        status.success(),
        "promtool create-blocks-from failed: {status}"
    );
    Ok(Prometheus {
        version,
        ingest_per_s,
        block_bytes: dir_bytes(&blocks)?,
        block_samples: block_scrapes * series_count,
    })
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Bytes and samples of the store's sealed chunks, read through the engine.
fn sealed_payload(env: &Environment) -> Result<(u64, u64)> {
    let rtx = env.begin_read()?;
    let chunks = rtx.open_tree("ts.chunks")?;
    let (mut bytes, mut samples) = (0u64, 0u64);
    for item in chunks.iter()? {
        let (_, v) = item?;
        bytes += v.len() as u64;
        samples += u64::from(hrafn_timeseries::chunk::header(v)?.sample_count);
    }
    Ok((bytes, samples))
}

/// The `p`th percentile (0..=100) of `times` by the crate's nearest-rank method (the
/// query lists are never empty: their lengths are constants).
fn percentile(times: &[Duration], p: f64) -> Duration {
    crate::result::percentile_sorted(times, p).unwrap_or_default()
}

/// Runs the comparison and prints the table.
pub fn run(series_count: usize, scrapes: usize, dir: &Path) -> Result<()> {
    let samples = (series_count * scrapes) as f64;
    println!(
        "time series: {series_count} series (node-exporter-like, {SERIES_PER_INSTANCE} per instance) x {scrapes} scrapes every 15 s ({:.1} h), {THREADS} ingest threads, durable appends",
        scrapes as f64 * SCRAPE_MS as f64 / 3.6e6
    );
    // The store.
    let store_dir = dir.join("store");
    let options = StoreOptions {
        environment: Options::default().durability(Durability::Immediate),
        ..StoreOptions::default()
    };
    let store = Store::open(&store_dir, options).context("opening the store")?;
    let mut series = workload(series_count);
    let labels: Vec<Labels> = series.iter().map(|s| s.labels.clone()).collect();
    let ids: Vec<SeriesId> = store.series_ids(&labels)?;
    let ids = Arc::new(ids);
    let elapsed = ingest(&mut series, scrapes, &|_, rows| {
        let rows: Vec<(SeriesId, Sample)> = rows.into_iter().map(|(i, s)| (ids[i], s)).collect();
        let report = store.append_ids(&rows)?;
        ensure!(
            report.appended == rows.len() as u64,
            "append report {report:?}"
        );
        Ok(())
    })?;
    let ingest_rate = samples / elapsed.as_secs_f64();
    let before = used_bytes(store.environment())?;
    let t = Instant::now();
    let compacted = store.compact()?;
    let compact_s = t.elapsed().as_secs_f64();
    let after = used_bytes(store.environment())?;
    let (chunk_bytes, chunk_samples) = sealed_payload(store.environment())?;
    // A dense copy (what `hrafn compact` writes): pages filled, free space dropped.
    let dense = store
        .environment()
        .compact_to(dir.join("dense"))?
        .bytes_after;
    std::fs::remove_dir_all(dir.join("dense"))?;
    let file_bytes = store.environment().stats().data_file_size_bytes;

    // Queries: one metric of one instance over the last hour; a day-wide sum by instance.
    let end = scrapes as i64 * SCRAPE_MS;
    let instances = series_count.div_ceil(SERIES_PER_INSTANCE);
    let mut rng = StdRng::seed_from_u64(23);
    let mut selective = Vec::new();
    for _ in 0..500 {
        let inst = rng.gen_range(0..instances);
        let sel = format!("node_cpu_seconds_total{{instance=\"host-{inst}:9100\",mode=\"user\"}}");
        let matchers = parse_selector(&sel)?;
        let t0 = Instant::now();
        let got = store.select(&matchers, end - 3_600_000, end)?;
        selective.push(t0.elapsed());
        ensure!(!got.is_empty(), "no series for {sel}");
    }
    selective.sort();
    let broad = RangeQuery::new("node_cpu_seconds_total", 0, end, 60_000)?
        .rate(300_000)
        .aggregate(Aggregation::Sum, &["instance"]);
    let mut broad_times = Vec::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = store.query_range(&broad)?;
        broad_times.push(t0.elapsed());
        ensure!(
            out.len() == instances.min(series_count),
            "{} groups",
            out.len()
        );
    }
    broad_times.sort();
    let check = store.check()?;
    ensure!(check.is_ok(), "check: {:?}", check.problems);
    drop(store);

    // The baseline: every sample as its own B+tree entry.
    let base_dir = dir.join("btree");
    let env = Environment::open(
        &base_dir,
        Options::default().durability(Durability::Immediate),
    )?;
    let mut series = workload(series_count);
    // The baseline is slow: its rate and size come from the first hours only.
    let base_scrapes = scrapes.min(BASELINE_SCRAPES_MAX);
    let base_samples = (series_count * base_scrapes) as f64;
    let base_elapsed = ingest(&mut series, base_scrapes, &|_, rows| {
        env.submit(move |wtx| {
            let mut tree = wtx.open_tree("samples")?;
            for (i, s) in &rows {
                let mut key = [0u8; 16];
                key[..8].copy_from_slice(&(*i as u64).to_be_bytes());
                key[8..].copy_from_slice(&((s.timestamp_ms as u64) ^ (1 << 63)).to_be_bytes());
                tree.insert(key, s.value.to_bits().to_le_bytes())?;
            }
            Ok(())
        })?;
        Ok(())
    })?;
    let base_rate = base_samples / base_elapsed.as_secs_f64();
    let base_bytes = used_bytes(&env)?;
    let rtx = env.begin_read()?;
    let tree = rtx.open_tree("samples")?;
    let base_end = base_scrapes as i64 * SCRAPE_MS;
    let mut base_selective = Vec::new();
    for _ in 0..500 {
        // The same shape: the 4 "user" CPU series of one instance (indices 1, 5, 9, 13).
        let inst = rng.gen_range(0..instances) as u64;
        let t0 = Instant::now();
        let mut n = 0;
        for cpu in 0..4u64 {
            let id = inst * SERIES_PER_INSTANCE as u64 + cpu * 4 + 1;
            let mut from = [0u8; 16];
            from[..8].copy_from_slice(&id.to_be_bytes());
            from[8..].copy_from_slice(&(((base_end - 3_600_000) as u64) ^ (1 << 63)).to_be_bytes());
            let mut to = from;
            to[8..].copy_from_slice(&((base_end as u64) ^ (1 << 63)).to_be_bytes());
            let before = n;
            for item in tree.range::<&[u8], _>(&from[..]..=&to[..])? {
                let (_, v) = item?;
                n += v.len();
            }
            // A series that exists has samples in its last hour: an empty range means the
            // baseline's keys or bounds are wrong, and the timings would be of nothing.
            ensure!(
                n > before || id >= series_count as u64,
                "the baseline's range over series {id} is empty"
            );
        }
        base_selective.push(t0.elapsed());
    }
    base_selective.sort();

    let prometheus = match promtool(series_count, scrapes, dir) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("(Prometheus's TSDB not measured: {e:#})");
            None
        }
    };

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{:<34} {:>14} {:>14}",
        "",
        "store",
        format!("B+tree ({base_scrapes} scrapes)")
    );
    println!(
        "{:<34} {:>12.0}/s {:>12.0}/s   ({:.2}x)",
        "durable ingest, samples",
        ingest_rate,
        base_rate,
        ingest_rate / base_rate
    );
    println!(
        "{:<34} {:>14.2} {:>14.2}   (store before compaction {:.2}; data file {:.2})",
        "bytes per sample (pages in use)",
        after as f64 / samples,
        base_bytes as f64 / base_samples,
        before as f64 / samples,
        file_bytes as f64 / samples
    );
    println!(
        "{:<34} {:>14.2}   (the data file of a dense copy, as `hrafn compact` writes)",
        "  after `hrafn compact`",
        dense as f64 / samples,
    );
    println!(
        "{:<34} {:>14.2}   (compressed chunk bytes over the samples in them)",
        "  of which sealed chunk payload",
        chunk_bytes as f64 / chunk_samples.max(1) as f64,
    );
    println!(
        "{:<34} {:>11.1} us {:>11.1} us",
        "selective query p50 (1 h, 4 series)",
        us(percentile(&selective, 50.0)),
        us(percentile(&base_selective, 50.0))
    );
    println!(
        "{:<34} {:>11.1} us {:>11.1} us",
        "selective query p99",
        us(percentile(&selective, 99.0)),
        us(percentile(&base_selective, 99.0))
    );
    println!(
        "{:<34} {:>11.1} ms {:>14}",
        "broad query (sum by instance of rate, all cpu series, whole span, 1 min steps), median of 3",
        us(broad_times[1]) / 1000.0,
        "-"
    );
    if let Some(p) = &prometheus {
        println!(
            "Prometheus TSDB (promtool {}): head ingest {:.0} samples/s ({:.2}x the store; its own values, WAL not synced per scrape); blocks from the same samples {:.2} bytes/sample (first {} samples)",
            p.version,
            p.ingest_per_s,
            p.ingest_per_s / ingest_rate,
            p.block_bytes as f64 / p.block_samples as f64,
            p.block_samples
        );
    }
    println!(
        "compaction: {:.2} s, {} series rewritten, {} chunks into {}",
        compact_s, compacted.series_rewritten, compacted.chunks_before, compacted.chunks_after
    );
    println!(
        "targets: ingest >= 1M samples/s: {} ({:.0}); <= 2 bytes/sample after compaction: {} ({:.2}); selective p50 <= 1 ms: {} ({:.1} us)",
        if ingest_rate >= 1e6 { "met" } else { "NOT met" },
        ingest_rate,
        if after as f64 / samples <= 2.0 {
            "met"
        } else {
            "NOT met"
        },
        after as f64 / samples,
        if percentile(&selective, 50.0) <= Duration::from_millis(1) {
            "met"
        } else {
            "NOT met"
        },
        us(percentile(&selective, 50.0))
    );
    Ok(())
}
