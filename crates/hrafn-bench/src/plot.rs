//! `--plot DIR`: one SVG bar chart per workload row.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{Results, engines_in, fmt_rate};
use crate::workloads::{DISK, Spec};

fn color(engine: &str) -> RGBColor {
    match engine {
        "hrafn" => RGBColor(0xd9, 0x5f, 0x02),
        "lmdb" => RGBColor(0x1b, 0x9e, 0x77),
        "redb" => RGBColor(0x75, 0x70, 0xb3),
        "rocksdb" => RGBColor(0xe7, 0x29, 0x8a),
        _ => RGBColor(0x66, 0x66, 0x66),
    }
}

/// Writes `<dir>/<workload>.svg` for every engine row in `specs` with at least one result
/// (a bar per engine; for a row measured per time window, a line per engine of its
/// throughput over time), and one `journal_raw.svg` with a bar per journal_raw row; returns
/// the files written. The Hrafn-only rows (journal_bytes) get no chart.
pub fn write_all(dir: &Path, results: &Results<'_>, specs: &[&Spec]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let unit_of = |name: &str| {
        results
            .all
            .iter()
            .find(|r| r.workload == name && r.ok())
            .map(|r| r.unit.clone())
            .unwrap_or_default()
    };
    for spec in specs.iter().filter(|s| !s.raw_disk && !s.hrafn_only) {
        let series: Vec<Series> = engines_in(results.all)
            .into_iter()
            .filter_map(|e| {
                let r = results.get(spec.name, e).filter(|r| r.ok())?;
                let windows = r.windows.as_ref()?;
                Some(Series {
                    label: e.to_string(),
                    points: windows.iter().map(|w| (w.t_s, w.ops_per_sec)).collect(),
                    color: color(e),
                })
            })
            .collect();
        if !series.is_empty() {
            // A row measured per time window: throughput over time, one line per engine.
            let path = dir.join(format!("{}.svg", spec.name));
            let title = format!("{} — throughput per window", spec.name);
            lines(&path, &title, &unit_of(spec.name), &series)?;
            written.push(path);
            continue;
        }
        let bars: Vec<Bar> = engines_in(results.all)
            .into_iter()
            .filter_map(|e| {
                let r = results.get(spec.name, e).filter(|r| r.ok())?;
                Some(Bar {
                    label: e.to_string(),
                    value: r.ops_per_sec,
                    color: color(e),
                })
            })
            .collect();
        if bars.is_empty() {
            continue;
        }
        let path = dir.join(format!("{}.svg", spec.name));
        let scale = results
            .all
            .iter()
            .find(|r| r.workload == spec.name)
            .map_or(1.0, |r| r.scale);
        let title = format!("{} — {} (full counts × {scale})", spec.name, spec.what);
        chart(
            &path,
            &title,
            &unit_of(spec.name),
            &bars,
            results.limit(spec),
        )?;
        written.push(path);
    }
    let disk: Vec<Bar> = specs
        .iter()
        .filter(|s| s.raw_disk)
        .filter_map(|s| {
            let r = results.get(s.name, DISK).filter(|r| r.ok())?;
            // The group row counts acknowledged requests, many per write: each bar says
            // what it counts.
            let label = format!("{} ({})", s.name.trim_start_matches("journal_raw_"), r.unit);
            Some(Bar {
                label,
                value: r.ops_per_sec,
                color: color(DISK),
            })
        })
        .collect();
    if !disk.is_empty() {
        let path = dir.join("journal_raw.svg");
        let title = "journal_raw — synced writes to a preallocated file, no engine";
        chart(&path, title, "writes or commits", &disk, None)?;
        written.push(path);
    }
    Ok(written)
}

/// The x range for `n` bars at 0..n: plotters' integer ranges include their end, so `0..n-1`
/// has n segments; a single bar gets an empty segment on each side to stay narrow.
fn x_range(n: usize) -> std::ops::Range<i32> {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    if n <= 1 { -1..1 } else { 0..n - 1 }
}

/// One engine's line: (seconds from the start, operations per second) points.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
}

fn lines(path: &Path, title: &str, unit: &str, series: &[Series]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let points = || series.iter().flat_map(|s| s.points.iter());
    let right = points().map(|p| p.0).fold(1.0f64, f64::max);
    let top = points().map(|p| p.1).fold(1.0f64, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..right, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds (end of window)")
        .y_desc(format!("{unit}/s"))
        .y_label_formatter(&|v| fmt_rate(*v))
        .draw()
        .map_err(|e| err(&e))?;
    for s in series {
        let style = ShapeStyle::from(&s.color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(|e| err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new(*p, 3, s.color.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

struct Bar {
    label: String,
    value: f64,
    color: RGBColor,
}

fn chart(path: &Path, title: &str, unit: &str, bars: &[Bar], limit: Option<f64>) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let top = bars
        .iter()
        .map(|b| b.value)
        .chain(limit)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.3;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range(bars.len()).into_segmented(), 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(format!("{unit}/s"))
        .y_label_formatter(&|v| fmt_rate(*v))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => usize::try_from(*i)
                .ok()
                .and_then(|i| bars.get(i))
                .map(|b| b.label.clone())
                .unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(|e| err(&e))?;
    // Segment i spans from Exact(i) to Exact(i + 1); the last one ends at Last.
    let last = x_range(bars.len()).end;
    let right = |i: i32| {
        if i < last {
            SegmentValue::Exact(i + 1)
        } else {
            SegmentValue::Last
        }
    };
    chart
        .draw_series((0..).zip(bars).map(|(i, b)| {
            let mut bar = Rectangle::new(
                [(SegmentValue::Exact(i), 0.0), (right(i), b.value)],
                b.color.filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series((0..).zip(bars).map(|(i, b)| {
            let style = TextStyle::from(("sans-serif", 14).into_font())
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            Text::new(
                fmt_rate(b.value),
                (SegmentValue::CenterOf(i), b.value),
                style,
            )
        }))
        .map_err(|e| err(&e))?;
    if let Some(l) = limit {
        let style = ShapeStyle::from(&RED).stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![
                    (SegmentValue::Exact(x_range(bars.len()).start), l),
                    (SegmentValue::Last, l),
                ],
                style,
            )))
            .map_err(|e| err(&e))?
            .label(format!("disk limit {}", fmt_rate(l)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The legend box both chart kinds draw.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
}
