//! Storage reports against an environment holding every kind of structure: every page
//! below the high-water mark has exactly one owner, the owners' page counts add up to the
//! high-water mark and agree with the integrity check, entries agree with what each
//! structure holds, and deleting most of a tree shows in its pages and fill factor. The
//! accounting assertions are run on damaged copies of a report too, to show they catch a
//! page counted twice.

use hrafn::btree::TreeKind;
use hrafn::report::{
    OWNER_FIRST_STRUCTURE, OWNER_FREE, OWNER_FREE_SPACE_MAP, OWNER_META, OWNER_ROOT_TREE,
    SYSTEM_OWNER_NAMES,
};
use hrafn::table::Schema;
use hrafn::{CheckReport, Environment, Options, Result, StorageReport, StructureReport};

fn schema() -> Schema {
    Schema::new(4)
        .primary_key(0)
        .index("by-city", &[1])
        .fixed_index("by-number", 2)
        .global_index("everywhere", &[1])
}

/// Records in the table; every tenth has a body past the inline limit (an overflow run).
const PEOPLE: u64 = 40;
/// Values in the multi-value tree's large set (far past the 1,024 bytes a set embeds).
const LARGE_SET: u64 = 300;
/// Entries of the plain B+tree that is mostly deleted later.
const LOG_ENTRIES: u64 = 5_000;
/// Entries of the named fixed-size tree.
const METRICS: u64 = 2_000;

/// Writes every kind of structure.
fn fill(env: &Environment) -> Result<()> {
    let mut wtx = env.begin_write()?;
    {
        let mut series = wtx.open_tree("series")?;
        series.insert(b"plain", b"value")?;
        series.insert(b"large", vec![7u8; 20_000])?; // a three-page overflow run
        {
            let mut host = series.open_tree(b"host-a")?;
            host.insert(b"os", b"linux")?;
            let mut cpu = host.open_fixed_tree(b"cpu", 8)?;
            for t in 0..200u64 {
                cpu.insert(t, &t.to_le_bytes())?; // spills into pages of its own
            }
        }
        {
            let mut small = series.open_fixed_tree(b"small", 4)?;
            small.insert(7, b"abcd")?; // stays embedded
        }
        let mut tags = series.open_multi_tree(b"tags")?;
        tags.add(b"env", b"prod")?;
        tags.add(b"env", b"eu")?;
    }
    {
        let mut metrics = wtx.open_fixed_tree("metrics", 16)?;
        for k in 0..METRICS {
            metrics.insert(k * 3, &[k as u8; 16])?;
        }
    }
    {
        let mut by_tag = wtx.open_multi_tree("by-tag")?;
        for v in 0..LARGE_SET {
            by_tag.add(b"large", format!("member-{v:05}"))?;
        }
        by_tag.add(b"small", b"one")?;
        by_tag.add(b"small", b"two")?;
    }
    {
        let mut people = wtx.open_table("people", &schema())?;
        for n in 0..PEOPLE {
            let body = if n % 10 == 0 {
                vec![n as u8; 5_000]
            } else {
                vec![n as u8; 20]
            };
            people.insert(&[
                format!("person-{n:03}").as_bytes(),
                format!("city-{}", n % 4).as_bytes(),
                &n.to_be_bytes(),
                &body,
            ])?;
        }
    }
    {
        let mut log = wtx.open_tree("log")?;
        for k in 0..LOG_ENTRIES {
            log.insert(format!("entry-{k:06}"), [k as u8; 100])?;
        }
    }
    wtx.commit()
}

/// Every accounting rule a report must keep, as a list of the rules it breaks.
fn accounting_errors(report: &StorageReport, check: &CheckReport) -> Vec<String> {
    let mut errors = Vec::new();
    let mut fail = |e: String| errors.push(e);
    let owners = &report.owners;
    if report.next_page_number != check.next_page_number {
        fail("high-water mark differs from the check's".into());
    }
    if owners.pages.len() as u64 != report.next_page_number {
        fail(format!(
            "{} owners for {} pages",
            owners.pages.len(),
            report.next_page_number
        ));
    }
    if let Some(p) = owners
        .pages
        .iter()
        .position(|&o| o as usize >= owners.names.len())
    {
        fail(format!("page {p} has no known owner"));
    }
    let expected_names: Vec<String> = SYSTEM_OWNER_NAMES
        .iter()
        .map(|&n| n.to_owned())
        .chain(report.structures.iter().map(|s| s.name.clone()))
        .collect();
    if owners.names != expected_names {
        fail("owner names are not the system owners then the structures".into());
    }
    // The owner map and the per-owner page counts are made separately: a page given to
    // two owners, or counted twice by one, makes them disagree.
    let counts = owners.counts();
    let mut expected = vec![
        (OWNER_FREE, report.free_pages, "free"),
        (OWNER_META, report.system.meta, "meta"),
        (
            OWNER_FREE_SPACE_MAP,
            report.system.free_space_map,
            "free-space map",
        ),
        (
            OWNER_ROOT_TREE,
            report.system.root_tree.total(),
            "root tree",
        ),
    ];
    for (i, s) in report.structures.iter().enumerate() {
        if s.owner != OWNER_FIRST_STRUCTURE + i as u32 {
            fail(format!("{} has owner {}", s.name, s.owner));
        }
        expected.push((s.owner, s.pages.total(), &s.name));
    }
    for (owner, pages, what) in expected {
        if counts.get(owner as usize).copied() != Some(pages) {
            fail(format!(
                "{what}: the owner map holds {:?} pages, the report counts {pages}",
                counts.get(owner as usize)
            ));
        }
    }
    let structure_pages: u64 = report.structures.iter().map(|s| s.pages.total()).sum();
    let total = structure_pages + report.system.total() + report.free_pages;
    if total != report.next_page_number {
        fail(format!(
            "structures {structure_pages} + system {} + free {} = {total}, not the \
             high-water mark {}",
            report.system.total(),
            report.free_pages,
            report.next_page_number
        ));
    }
    if report.system.meta != 1 {
        fail("not one meta page".into());
    }
    if report.free_pages != check.free_pages {
        fail(format!(
            "{} free pages, the check says {}",
            report.free_pages, check.free_pages
        ));
    }
    if check.used_pages + check.free_pages != report.next_page_number {
        fail("the check's own accounting does not add up".into());
    }
    let section_free: u64 = report.sections.iter().map(|s| s.free_pages).sum();
    let section_pages: u64 = report.sections.iter().map(|s| s.pages).sum();
    if section_free != report.free_pages || section_pages != report.next_page_number {
        fail(format!(
            "sections hold {section_free} free of {section_pages} pages"
        ));
    }
    for s in &report.structures {
        let fill = s.fill_factor();
        if s.pages.total() > 0 && !(fill > 0.0 && fill <= 1.0) {
            fail(format!("{} has fill factor {fill}", s.name));
        }
        if s.entries > 0 && s.depth == 0 {
            fail(format!("{} holds entries at depth 0", s.name));
        }
    }
    errors
}

fn structure<'r>(report: &'r StorageReport, name: &str) -> &'r StructureReport {
    report
        .structures
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} in the report"))
}

#[test]
fn every_page_has_one_owner_and_the_counts_add_up() -> Result<()> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let env = Environment::open(dir.path(), Options::default())?;
    fill(&env)?;
    let report = env.storage_report()?;
    let check = env.check()?;
    assert_eq!(accounting_errors(&report, &check), Vec::<String>::new());

    let rtx = env.begin_read()?;
    assert_eq!(report.txn_id, rtx.txn_id());
    let names: Vec<&str> = report.structures.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, rtx.list_trees()?);
    assert_eq!(
        names,
        ["by-tag", "everywhere", "log", "metrics", "people", "series"]
    );

    // Entries: the report against each structure's length, and that against its contents.
    let series = structure(&report, "series");
    let series_tree = rtx.open_tree("series")?;
    assert_eq!(series.entries, series_tree.len());
    assert_eq!(series.entries, series_tree.iter()?.count() as u64);
    assert_eq!(series.entries, 5);
    let log = structure(&report, "log");
    assert_eq!(log.entries, rtx.open_tree("log")?.len());
    assert_eq!(log.entries, LOG_ENTRIES);
    let metrics = structure(&report, "metrics");
    let metrics_tree = rtx.open_fixed_tree("metrics")?;
    assert_eq!(metrics.entries, metrics_tree.len());
    assert_eq!(metrics.entries, metrics_tree.range(..)?.count() as u64);
    assert_eq!(metrics.entries, METRICS);
    let by_tag = structure(&report, "by-tag");
    assert_eq!(by_tag.entries, rtx.open_multi_tree("by-tag")?.key_count());
    assert_eq!(by_tag.entries, 2);
    let people = structure(&report, "people");
    let table = rtx.open_table("people", &schema())?;
    assert_eq!(people.entries, table.len());
    assert_eq!(people.entries, table.scan()?.count() as u64);
    assert_eq!(people.entries, PEOPLE);
    let everywhere = structure(&report, "everywhere");
    assert_eq!(
        everywhere.entries,
        rtx.open_multi_tree("everywhere")?.key_count()
    );

    // Kinds, depths and pages by kind.
    assert_eq!(series.kind, TreeKind::BTree);
    assert_eq!(metrics.kind, TreeKind::Fixed { value_size: 16 });
    assert_eq!(by_tag.kind, TreeKind::Multi);
    assert_eq!(people.kind, TreeKind::Table);
    assert!(log.depth >= 2, "5,000 entries need a branch: {log:?}");
    assert!(log.pages.branch >= 1 && log.pages.leaf >= 2, "{log:?}");
    assert_eq!(log.pages.total(), log.pages.branch + log.pages.leaf);
    assert!(metrics.depth >= 2, "{metrics:?}");
    assert!(metrics.pages.fixed_branch >= 1 && metrics.pages.fixed_leaf >= 2);
    assert_eq!(
        metrics.pages.total(),
        metrics.pages.fixed_branch + metrics.pages.fixed_leaf
    );
    // The 20,000-byte value: ceil((32 + 20,000) / 8,192) pages.
    assert_eq!(series.overflow_pages(), 3);
    assert!(
        series.pages.fixed_leaf >= 1,
        "the spilled cpu tree: {series:?}"
    );
    // host-a, its cpu tree and the tags tree have pages of their own; small is embedded.
    assert_eq!((series.nested_trees, series.embedded_trees), (3, 1));
    // The large set lives in a tree of its own, the small one in its entry.
    assert_eq!((by_tag.nested_trees, by_tag.embedded_trees), (1, 0));
    assert!(by_tag.pages.leaf >= 2, "{by_tag:?}");
    assert!(people.pages.records >= 1, "{people:?}");
    assert!(people.depth >= 1);
    for s in &report.structures {
        assert!(s.depth >= 1, "{s:?}");
        assert!(s.used_bytes <= s.page_bytes(), "{s:?}");
    }

    // Environment-level facts.
    let environment = report.environment.as_ref().expect("environment facts");
    let stats = env.stats();
    assert_eq!(environment.txn_id, stats.txn_id);
    assert!(environment.journal_files >= 1, "{environment:?}");
    assert!(environment.journal_bytes > 0);
    assert!(environment.unsynced_bytes >= environment.unflushed_bytes);
    assert!(environment.data_file_size_bytes >= report.next_page_number * 8192);
    // A reader's snapshot report has none of them, and the same pages.
    let snapshot = rtx.storage_report()?;
    assert!(snapshot.environment.is_none());
    assert_eq!(snapshot.owners, report.owners);
    Ok(())
}

#[test]
fn the_accounting_assertions_catch_a_page_counted_twice() -> Result<()> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let env = Environment::open(dir.path(), Options::default())?;
    fill(&env)?;
    let report = env.storage_report()?;
    let check = env.check()?;
    assert!(accounting_errors(&report, &check).is_empty());
    let log = structure(&report, "log").owner;
    let metrics = structure(&report, "metrics").owner;
    let log_page = report
        .owners
        .pages
        .iter()
        .position(|&o| o == log)
        .expect("a log page");

    // One page given to another owner in the map.
    let mut moved = report.clone();
    moved.owners.pages[log_page] = metrics;
    assert!(!accounting_errors(&moved, &check).is_empty());
    // One structure counting a page twice.
    let mut twice = report.clone();
    let i = twice
        .structures
        .iter()
        .position(|s| s.owner == log)
        .expect("log");
    twice.structures[i].pages.leaf += 1;
    assert!(!accounting_errors(&twice, &check).is_empty());
    // One page counted by two structures.
    let mut shared = report.clone();
    let j = shared
        .structures
        .iter()
        .position(|s| s.owner == metrics)
        .expect("metrics");
    shared.structures[j].pages.leaf += 1;
    assert!(!accounting_errors(&shared, &check).is_empty());
    // A free page counted as in use as well.
    let mut free_and_used = report.clone();
    free_and_used.free_pages += 1;
    assert!(!accounting_errors(&free_and_used, &check).is_empty());
    Ok(())
}

#[test]
fn deleting_most_of_a_tree_shows_in_its_pages_and_fill() -> Result<()> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let env = Environment::open(dir.path(), Options::default())?;
    fill(&env)?;
    let before = env.storage_report()?;
    let mut wtx = env.begin_write()?;
    {
        let mut log = wtx.open_tree("log")?;
        for k in 0..LOG_ENTRIES {
            if k % 10 != 0 {
                log.remove(format!("entry-{k:06}"))?;
            }
        }
    }
    wtx.commit()?;
    let after = env.storage_report()?;
    assert_eq!(
        accounting_errors(&after, &env.check()?),
        Vec::<String>::new()
    );
    let (old, new) = (structure(&before, "log"), structure(&after, "log"));
    assert_eq!(new.entries, LOG_ENTRIES / 10);
    assert_eq!(new.entries, env.begin_read()?.open_tree("log")?.len());
    assert!(
        new.pages.total() < old.pages.total(),
        "pages {} → {}",
        old.pages.total(),
        new.pages.total()
    );
    assert!(new.used_bytes < old.used_bytes / 5, "{old:?} → {new:?}");
    assert!(
        new.fill_factor() < old.fill_factor(),
        "fill {} → {}",
        old.fill_factor(),
        new.fill_factor()
    );
    // The freed pages are free now (or reused by the write), and the others unchanged.
    assert!(after.free_pages > before.free_pages, "{after:?}");
    for name in ["series", "metrics", "people", "by-tag"] {
        assert_eq!(
            structure(&after, name).pages,
            structure(&before, name).pages,
            "{name}"
        );
    }
    Ok(())
}

#[test]
fn the_accounting_holds_through_churn() -> Result<()> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let env = Environment::open(dir.path(), Options::default())?;
    fill(&env)?;
    let mut r: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        r
    };
    let mut people = PEOPLE;
    let mut free_seen = 0;
    let mut nested_seen = 0;
    for round in 0..25u64 {
        let mut wtx = env.begin_write()?;
        {
            let mut log = wtx.open_tree("log")?;
            for _ in 0..200 {
                let k = next() % LOG_ENTRIES;
                if next() % 3 == 0 {
                    log.remove(format!("entry-{k:06}"))?;
                } else {
                    let len = if next() % 50 == 0 { 9_000 } else { 100 };
                    log.insert(format!("entry-{k:06}"), vec![round as u8; len])?;
                }
            }
        }
        {
            let mut by_tag = wtx.open_multi_tree("by-tag")?;
            for _ in 0..50 {
                let v = format!("member-{:05}", next() % LARGE_SET);
                if next() % 2 == 0 {
                    by_tag.remove(b"large", v)?;
                } else {
                    by_tag.add(b"large", v)?;
                }
            }
        }
        {
            let mut series = wtx.open_tree("series")?;
            let key = format!("host-{}", next() % 4);
            if next() % 3 == 0 {
                series.remove(&key)?;
            } else {
                let mut host = series.open_tree(&key)?;
                let mut cpu = host.open_fixed_tree(b"cpu", 8)?;
                for _ in 0..40 {
                    cpu.insert(next() % 300, &round.to_le_bytes())?;
                }
            }
        }
        {
            let mut table = wtx.open_table("people", &schema())?;
            let ids: Vec<u64> = table
                .scan()?
                .map(|e| e.map(|(id, _)| id))
                .collect::<Result<_>>()?;
            for id in ids.iter().filter(|_| next() % 4 == 0) {
                table.delete(*id)?;
            }
            for _ in 0..8 {
                let body = vec![round as u8; if next() % 5 == 0 { 4_000 } else { 30 }];
                table.insert(&[
                    format!("person-{people:03}").as_bytes(),
                    format!("city-{}", people % 4).as_bytes(),
                    &people.to_be_bytes(),
                    &body,
                ])?;
                people += 1;
            }
        }
        wtx.commit()?;
        let report = env.storage_report()?;
        let errors = accounting_errors(&report, &env.check()?);
        assert!(errors.is_empty(), "round {round}: {errors:?}");
        free_seen = free_seen.max(report.free_pages);
        nested_seen = nested_seen.max(structure(&report, "series").nested_trees);
        let rtx = env.begin_read()?;
        for s in &report.structures {
            assert_eq!(
                s.entries,
                rtx.tree_header(&s.name)?.entry_count,
                "{}",
                s.name
            );
        }
        assert_eq!(
            structure(&report, "log").entries,
            rtx.open_tree("log")?.iter()?.count() as u64
        );
        assert_eq!(
            structure(&report, "people").entries,
            rtx.open_table("people", &schema())?.scan()?.count() as u64
        );
    }
    // The churn did free pages and nest trees, so the accounting above was exercised.
    assert!(free_seen > 0);
    assert!(nested_seen > 3, "{nested_seen}");
    Ok(())
}
