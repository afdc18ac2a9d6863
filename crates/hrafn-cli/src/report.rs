//! `hrafn report`: the storage report as aligned text or one JSON object, and the page map
//! as an SVG picture.

use crate::{Failure, fail, kind_name, text};
use hrafn::report::{OWNER_FREE, PageCounts, StorageReport};
use hrafn::{Environment, EnvironmentReport};
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

/// Most cells the page map draws; a larger file puts several pages in a cell.
pub(crate) const MAP_CELLS_MAX: u64 = 65_536;

/// Prints the report of `env` (text or JSON) and, with `svg`, writes the page map there.
pub(crate) fn report(
    env: &Environment,
    json: bool,
    svg: Option<&Path>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let report = env.storage_report()?;
    if let Some(path) = svg {
        let svg = page_map_svg(
            &report.owners.names,
            &report.owners.pages,
            report.page_size_bytes,
            report.txn_id,
        );
        std::fs::write(path, svg)
            .map_err(|e| fail(3, format!("writing {}: {e}", path.display())))?;
    }
    if json {
        writeln!(out, "{}", to_json(&report))?;
    } else {
        out.write_all(to_text(&report).as_bytes())?;
    }
    Ok(())
}

/// "1 page", "2 pages".
pub(crate) fn page_count(n: u64) -> String {
    if n == 1 {
        "1 page".into()
    } else {
        format!("{n} pages")
    }
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

/// The text form: a table of structures with aligned columns, then the rest line by line.
pub(crate) fn to_text(report: &StorageReport) -> String {
    let header = [
        "structure",
        "kind",
        "entries",
        "depth",
        "nested",
        "embedded",
        "pages",
        "branch",
        "leaf",
        "overflow",
        "fixed-branch",
        "fixed-leaf",
        "records",
        "fill",
    ];
    let counts = |p: &PageCounts| {
        [
            p.total(),
            p.branch,
            p.leaf,
            p.overflow,
            p.fixed_branch,
            p.fixed_leaf,
            p.records,
        ]
        .map(|n| n.to_string())
    };
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|&h| h.to_owned()).collect()];
    for s in &report.structures {
        let mut row = vec![
            text(s.name.as_bytes()),
            kind_name(s.kind),
            s.entries.to_string(),
            s.depth.to_string(),
            s.nested_trees.to_string(),
            s.embedded_trees.to_string(),
        ];
        row.extend(counts(&s.pages));
        row.push(percent(s.used_bytes, s.page_bytes()));
        rows.push(row);
    }
    let mut root = vec![
        "(root tree)".to_owned(),
        "btree".to_owned(),
        report.structures.len().to_string(),
        "-".into(),
        "-".into(),
        "-".into(),
    ];
    root.extend(counts(&report.system.root_tree));
    root.push("-".into());
    rows.push(root);
    let mut widths = vec![0; header.len()];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            // Names and kinds to the left, numbers to the right.
            if i < 2 {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    let n = report.next_page_number;
    let page = report.page_size_bytes;
    let _ = writeln!(
        s,
        "\npages: {n} below the high-water mark ({} bytes), snapshot of transaction {}",
        n * page,
        report.txn_id
    );
    let _ = writeln!(
        s,
        "system pages: meta {}, free-space map {}, root tree {}",
        report.system.meta,
        report.system.free_space_map,
        report.system.root_tree.total()
    );
    let _ = writeln!(
        s,
        "free: {} pages ({} bytes, {} of the pages)",
        report.free_pages,
        report.free_pages * page,
        percent(report.free_pages, n)
    );
    for section in &report.sections {
        let _ = writeln!(
            s,
            "  section {} (pages {}..{}): {} free of {}",
            section.section,
            section.first_page,
            section.first_page + section.pages,
            section.free_pages,
            section.pages
        );
    }
    if let Some(e) = &report.environment {
        environment_text(&mut s, e);
    }
    s
}

fn environment_text(s: &mut String, e: &EnvironmentReport) {
    let _ = writeln!(s, "data file: {} bytes", e.data_file_size_bytes);
    let _ = writeln!(
        s,
        "journals: {} files, {} bytes; spare journals: {} files, {} bytes",
        e.journal_files, e.journal_bytes, e.spare_journal_files, e.spare_journal_bytes
    );
    let _ = writeln!(
        s,
        "unsynced: {} transactions ({} to {}), {} bytes ({} not yet in the data file)",
        e.txn_id.saturating_sub(e.synced_txn_id),
        e.synced_txn_id,
        e.txn_id,
        e.unsynced_bytes,
        e.unflushed_bytes
    );
    let _ = writeln!(
        s,
        "scratch (this process): {} bytes, {} in memory, {} files, {} pinned by readers",
        e.scratch_used_bytes, e.scratch_memory_bytes, e.scratch_files, e.scratch_pinned_bytes
    );
    let oldest = match (e.oldest_reader_age_ms, e.oldest_reader_txn_id) {
        (Some(age), Some(txn)) => format!("{age} ms old, reads transaction {txn}"),
        _ => "none".into(),
    };
    let _ = writeln!(
        s,
        "readers (this process): {} open; oldest: {oldest}",
        e.readers_active
    );
    if let Some(txn) = e.oldest_process_reader_txn_id {
        let _ = writeln!(s, "oldest reader process reads transaction {txn}");
    }
}

fn pages_json(p: &PageCounts) -> serde_json::Value {
    json!({
        "total": p.total(),
        "branch": p.branch,
        "leaf": p.leaf,
        "overflow": p.overflow,
        "fixed_branch": p.fixed_branch,
        "fixed_leaf": p.fixed_leaf,
        "records": p.records,
    })
}

/// The JSON form: everything the text says, and the page map as runs of
/// `[owner index, pages]`.
pub(crate) fn to_json(report: &StorageReport) -> serde_json::Value {
    let structures: Vec<_> = report
        .structures
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "kind": kind_name(s.kind),
                "owner": s.owner,
                "entries": s.entries,
                "depth": s.depth,
                "nested_trees": s.nested_trees,
                "embedded_trees": s.embedded_trees,
                "pages": pages_json(&s.pages),
                "overflow_pages": s.overflow_pages(),
                "used_bytes": s.used_bytes,
                "fill_factor": s.fill_factor(),
            })
        })
        .collect();
    let counts = report.owners.counts();
    let owners: Vec<_> = report
        .owners
        .names
        .iter()
        .zip(&counts)
        .enumerate()
        .map(|(i, (name, pages))| json!({ "index": i, "name": name, "pages": pages }))
        .collect();
    let mut runs: Vec<[u64; 2]> = Vec::new();
    for &owner in &report.owners.pages {
        match runs.last_mut() {
            Some(run) if run[0] == u64::from(owner) => run[1] += 1,
            _ => runs.push([u64::from(owner), 1]),
        }
    }
    let sections: Vec<_> = report
        .sections
        .iter()
        .map(|s| {
            json!({
                "section": s.section,
                "first_page": s.first_page,
                "pages": s.pages,
                "free_pages": s.free_pages,
            })
        })
        .collect();
    let environment = report.environment.as_ref().map(|e| {
        json!({
            "data_file_size_bytes": e.data_file_size_bytes,
            "journal_files": e.journal_files,
            "journal_bytes": e.journal_bytes,
            "spare_journal_files": e.spare_journal_files,
            "spare_journal_bytes": e.spare_journal_bytes,
            "txn_id": e.txn_id,
            "synced_txn_id": e.synced_txn_id,
            "unsynced_bytes": e.unsynced_bytes,
            "unflushed_bytes": e.unflushed_bytes,
            "scratch_used_bytes": e.scratch_used_bytes,
            "scratch_memory_bytes": e.scratch_memory_bytes,
            "scratch_files": e.scratch_files,
            "scratch_pinned_bytes": e.scratch_pinned_bytes,
            "readers_active": e.readers_active,
            "oldest_reader_age_ms": e.oldest_reader_age_ms,
            "oldest_reader_txn_id": e.oldest_reader_txn_id,
            "oldest_process_reader_txn_id": e.oldest_process_reader_txn_id,
        })
    });
    json!({
        "txn_id": report.txn_id,
        "page_size_bytes": report.page_size_bytes,
        "next_page_number": report.next_page_number,
        "structures": structures,
        "system": {
            "meta": report.system.meta,
            "free_space_map": report.system.free_space_map,
            "root_tree": pages_json(&report.system.root_tree),
        },
        "free_pages": report.free_pages,
        "sections": sections,
        "owners": owners,
        "page_map": runs,
        "environment": environment,
    })
}

/// The owner drawn in each cell: each cell covers `per_cell` consecutive pages and shows
/// the owner of most of them (the lowest owner index on a tie).
pub(crate) fn cells(owners: &[u32], owner_count: usize, per_cell: usize) -> Vec<u32> {
    let mut tally = vec![0u64; owner_count];
    owners
        .chunks(per_cell.max(1))
        .map(|chunk| {
            tally.iter_mut().for_each(|t| *t = 0);
            for &o in chunk {
                if let Some(t) = tally.get_mut(o as usize) {
                    *t += 1;
                }
            }
            let mut best = 0;
            for (i, &t) in tally.iter().enumerate() {
                if t > tally[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}

/// `#rrggbb` for HSL (`hue` in degrees, `saturation` and `lightness` 0 to 1).
fn hsl(hue: f64, saturation: f64, lightness: f64) -> String {
    let c = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let h = (hue % 360.0) / 60.0;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = lightness - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    format!("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b))
}

/// The color of owner `owner`: grays for free pages and the system's, a hue per structure
/// (golden-angle steps, so neighbors differ).
fn color(owner: u32) -> String {
    match owner {
        OWNER_FREE => "#eeeeee".into(),
        1 => "#000000".into(),
        2 => "#555555".into(),
        3 => "#999999".into(),
        n => {
            let i = f64::from(n - hrafn::report::OWNER_FIRST_STRUCTURE);
            let lightness = [0.45, 0.6, 0.35][(n as usize) % 3];
            hsl(i * 137.508, 0.7, lightness)
        }
    }
}

/// Text for XML content or an attribute: markup characters escaped, and characters XML
/// cannot hold (controls) written as `\xNN`.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The page map (`names` by owner index, `pages` the owner of each page) as a standalone
/// SVG: pages (or groups of pages, for at most [`MAP_CELLS_MAX`] cells) left to right, top
/// to bottom, colored by owner, and a legend naming each owner with its page count.
pub(crate) fn page_map_svg(names: &[String], pages: &[u32], page_size: u64, txn_id: u64) -> String {
    let mut counts = vec![0u64; names.len()];
    for &owner in pages {
        if let Some(count) = counts.get_mut(owner as usize) {
            *count += 1;
        }
    }
    let per_cell = (pages.len() as u64).div_ceil(MAP_CELLS_MAX).max(1) as usize;
    let cells = cells(pages, names.len(), per_cell);
    let (columns, cell) = match cells.len() {
        0..=1_024 => (32, 12),
        1_025..=16_384 => (128, 6),
        _ => (256, 3),
    };
    let rows = cells.len().div_ceil(columns).max(1);
    let margin = 10;
    let caption = 20;
    let grid_width = columns * cell;
    let grid_top = margin + caption;
    let legend_top = grid_top + rows * cell + margin;
    let line = 18;
    let width = (2 * margin + grid_width).max(480);
    let height = legend_top + names.len() * line + margin;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let title = format!(
        "Page map: {} pages of {} bytes, {} per cell, transaction {}",
        pages.len(),
        page_size,
        per_cell,
        txn_id
    );
    let _ = writeln!(s, "<title>{}</title>", xml(&title));
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{margin}\" y=\"{}\">{}</text>",
        margin + 12,
        xml(&title)
    );
    let _ = writeln!(s, "<g class=\"cells\" shape-rendering=\"crispEdges\">");
    // One rectangle per run of one owner within a row.
    for (r, row) in cells.chunks(columns).enumerate() {
        let mut start = 0;
        while start < row.len() {
            let owner = row[start];
            let mut end = start + 1;
            while end < row.len() && row[end] == owner {
                end += 1;
            }
            let first_page = (r * columns + start) * per_cell;
            let last_page = ((r * columns + end) * per_cell).min(pages.len()) - 1;
            let _ = writeln!(
                s,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{cell}\" fill=\"{}\">\
                 <title>pages {first_page}..={last_page}: {}</title></rect>",
                margin + start * cell,
                grid_top + r * cell,
                (end - start) * cell,
                color(owner),
                xml(names.get(owner as usize).map_or("?", String::as_str)),
            );
            start = end;
        }
    }
    let _ = writeln!(s, "</g>");
    let _ = writeln!(s, "<g class=\"legend\">");
    for (i, (name, count)) in names.iter().zip(&counts).enumerate() {
        let y = legend_top + i * line;
        let _ = writeln!(
            s,
            "<g class=\"legend-entry\"><rect x=\"{margin}\" y=\"{y}\" width=\"12\" \
             height=\"12\" fill=\"{}\" stroke=\"#333333\" stroke-width=\"0.5\"/>\
             <text x=\"{}\" y=\"{}\">{}: {}</text></g>",
            color(i as u32),
            margin + 18,
            y + 10,
            xml(name),
            page_count(*count),
        );
    }
    let _ = writeln!(s, "</g>");
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_shows_the_owner_of_most_of_its_pages() {
        assert_eq!(cells(&[0, 1, 1, 2, 2, 2, 3], 4, 3), vec![1, 2, 3]);
        assert_eq!(cells(&[5, 4], 6, 1), vec![5, 4]);
        // A tie goes to the lower index.
        assert_eq!(cells(&[4, 5], 6, 2), vec![4]);
    }

    #[test]
    fn colors_are_hex_and_names_are_escaped() {
        for owner in 0..40 {
            let c = color(owner);
            assert_eq!(c.len(), 7, "{c}");
            assert!(c.starts_with('#') && c[1..].chars().all(|d| d.is_ascii_hexdigit()));
        }
        assert_ne!(color(4), color(5));
        assert_eq!(xml("a<b>&\"c'\u{1}"), "a&lt;b&gt;&amp;&quot;c&apos;\\x01");
    }

    #[test]
    fn a_large_map_groups_pages_into_at_most_the_cell_limit() {
        let names: Vec<String> = ["(free)", "(meta)", "(free-space map)", "(root tree)", "a<b"]
            .iter()
            .map(|&n| n.to_owned())
            .collect();
        // 300,000 pages: the first half free, then the structure, one meta page first.
        let mut pages = vec![0u32; 300_000];
        pages[0] = 1;
        pages[150_000..].iter_mut().for_each(|o| *o = 4);
        let svg = page_map_svg(&names, &pages, 8192, 9);
        assert!(svg.starts_with("<svg "));
        assert!(
            svg.contains("300000 pages of 8192 bytes, 5 per cell"),
            "{svg}"
        );
        // Runs merge within rows: one rectangle per row and owner here.
        let cells = cells(&pages, names.len(), 5);
        assert_eq!(cells.len(), 60_000);
        assert!(cells.len() as u64 <= MAP_CELLS_MAX);
        assert_eq!(cells[0], 0, "one meta page among five is not the majority");
        let rects = svg.matches("<rect ").count();
        let rows = 60_000usize.div_ceil(256);
        assert!(rects <= rows + 2 + 1 + names.len(), "{rects} rectangles");
        assert_eq!(svg.matches("<g class=\"legend-entry\">").count(), 5);
        assert!(svg.contains(">a&lt;b: 150000 pages</text>"));
        assert!(svg.contains(">(meta): 1 page</text>"));
    }
}
