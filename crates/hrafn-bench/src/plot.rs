//! `--plot DIR`: one SVG bar chart per workload row.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::report::{Results, engines_in, fmt_rate};
use crate::workloads::Spec;

fn color(engine: &str) -> RGBColor {
    match engine {
        "hrafn" => RGBColor(0xd9, 0x5f, 0x02),
        "lmdb" => RGBColor(0x1b, 0x9e, 0x77),
        "redb" => RGBColor(0x75, 0x70, 0xb3),
        "rocksdb" => RGBColor(0xe7, 0x29, 0x8a),
        _ => RGBColor(0x66, 0x66, 0x66),
    }
}

/// Writes `<dir>/<workload>.svg` for every row in `specs` with at least one result; returns
/// the files written.
pub fn write_all(dir: &Path, results: &Results<'_>, specs: &[&Spec]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for spec in specs {
        let bars: Vec<(String, f64, RGBColor)> = if spec.raw_disk {
            results
                .get(spec.name, crate::workloads::DISK)
                .filter(|r| r.ok())
                .map(|r| vec![("disk".to_string(), r.ops_per_sec, color("disk"))])
                .unwrap_or_default()
        } else {
            engines_in(results.all)
                .into_iter()
                .filter_map(|e| {
                    let r = results.get(spec.name, e).filter(|r| r.ok())?;
                    Some((e.to_string(), r.ops_per_sec, color(e)))
                })
                .collect()
        };
        if bars.is_empty() {
            continue;
        }
        let unit = results
            .all
            .iter()
            .find(|r| r.workload == spec.name && r.ok())
            .map(|r| r.unit.clone())
            .unwrap_or_default();
        let path = dir.join(format!("{}.svg", spec.name));
        chart(&path, spec, &unit, &bars, results.limit(spec))?;
        written.push(path);
    }
    Ok(written)
}

fn chart(
    path: &Path,
    spec: &Spec,
    unit: &str,
    bars: &[(String, f64, RGBColor)],
    limit: Option<f64>,
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", spec.name);
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let top = bars
        .iter()
        .map(|b| b.1)
        .chain(limit)
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.15;
    let n = bars.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} — {}", spec.name, spec.what), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(format!("{unit}/s"))
        .y_label_formatter(&|v| fmt_rate(*v))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v, c))| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *v),
                ],
                c.filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v, _))| {
            Text::new(
                fmt_rate(*v),
                (SegmentValue::CenterOf(i), *v),
                ("sans-serif", 14),
            )
        }))
        .map_err(|e| err(&e))?;
    if let Some(l) = limit {
        let style = ShapeStyle::from(&RED).stroke_width(2);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(SegmentValue::Exact(0), l), (SegmentValue::Last, l)],
                style,
            )))
            .map_err(|e| err(&e))?
            .label(format!("disk limit {}", fmt_rate(l)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
