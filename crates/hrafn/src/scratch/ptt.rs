//! The page translation table: page number → newest committed scratch copy.
//!
//! A persistent radix tree over page numbers. Publishing a commit clones the table in O(1)
//! and copies only the nodes on the paths to its changed pages, so older states keep
//! sharing every node the commit did not touch. Page numbers are dense small integers: a
//! look-up indexes one slot per level, with no key comparisons.

use super::PageBuf;
use std::sync::Arc;

/// One committed page version held in scratch.
#[derive(Debug, Clone)]
pub struct PttEntry {
    /// Transaction that wrote this version.
    pub txn_id: u64,
    /// Oldest transaction whose version of this page has not reached the data file. A sync
    /// point must stay below it: replaying from a later point would apply this page's newer
    /// diffs on top of a data-file page that is older than they assume.
    pub first_unflushed_txn_id: u64,
    /// The buffer holding the page (a run buffer for overflow values).
    pub buf: Arc<PageBuf>,
    /// Index of this page inside `buf`.
    pub index_in_buf: u32,
}

impl PttEntry {
    /// The page's bytes: the whole buffer for its first page (an overflow run is one
    /// buffer), exactly one page for any other.
    pub fn bytes(&self) -> &[u8] {
        use crate::limits::PAGE_SIZE_BYTES;
        let at = self.index_in_buf as usize * PAGE_SIZE_BYTES;
        if at == 0 {
            self.buf.bytes()
        } else {
            &self.buf.bytes()[at..at + PAGE_SIZE_BYTES]
        }
    }
}

/// Key bits a leaf resolves: 16 entries, so a commit's copy of a leaf it changes is
/// 512 bytes, where a wider leaf would copy (and count references to) more neighbours.
const LEAF_BITS: u32 = 4;
const LEAF_SLOTS: usize = 1 << LEAF_BITS;
/// Key bits an inner node resolves: 64 children, four levels for 32 GiB of data file.
const INNER_BITS: u32 = 6;
const INNER_SLOTS: usize = 1 << INNER_BITS;

#[derive(Clone)]
enum Node {
    Inner([Option<Arc<Node>>; INNER_SLOTS]),
    Leaf([Option<PttEntry>; LEAF_SLOTS]),
}

impl Node {
    fn is_empty(&self) -> bool {
        match self {
            Node::Inner(children) => children.iter().all(Option::is_none),
            Node::Leaf(entries) => entries.iter().all(Option::is_none),
        }
    }
}

/// Shift of the slot index in an inner node `level` levels above the leaves.
fn inner_shift(level: u32) -> u32 {
    LEAF_BITS + (level - 1) * INNER_BITS
}

fn slot_of(page_number: u64, level: u32) -> usize {
    if level == 0 {
        (page_number as usize) & (LEAF_SLOTS - 1)
    } else {
        ((page_number >> inner_shift(level)) as usize) & (INNER_SLOTS - 1)
    }
}

/// The page translation table of one state.
#[derive(Clone, Default)]
pub struct Ptt {
    root: Option<Arc<Node>>,
    /// Inner levels above the leaves: the root covers page numbers below
    /// `2^(LEAF_BITS + height × INNER_BITS)`.
    height: u32,
    len: usize,
}

impl std::fmt::Debug for Ptt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ptt")
            .field("len", &self.len)
            .field("height", &self.height)
            .finish()
    }
}

impl Ptt {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether both tables are the same version: clones of one table that neither changed
    /// since, or both empty. `false` for tables that were changed back to equal contents.
    pub fn ptr_eq(&self, other: &Ptt) -> bool {
        match (&self.root, &other.root) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    fn covers(&self, page_number: u64) -> bool {
        let bits = LEAF_BITS + self.height * INNER_BITS;
        bits >= u64::BITS || page_number >> bits == 0
    }

    /// The newest version of `page_number`, if scratch holds it.
    #[inline]
    pub fn get(&self, page_number: u64) -> Option<&PttEntry> {
        if !self.covers(page_number) {
            return None;
        }
        let mut node = self.root.as_deref()?;
        let mut level = self.height;
        loop {
            match node {
                Node::Inner(children) => {
                    node = children[slot_of(page_number, level)].as_deref()?;
                    level -= 1;
                }
                Node::Leaf(entries) => return entries[slot_of(page_number, 0)].as_ref(),
            }
        }
    }

    /// The slot of `page_number`, with the nodes on its path made this table's own (copied
    /// if another version shares them) and created where missing.
    fn slot_mut(&mut self, page_number: u64) -> &mut Option<PttEntry> {
        while !self.covers(page_number) {
            // One level more on top; the old root becomes the first child.
            if let Some(old) = self.root.take() {
                let mut children = no_children();
                children[0] = Some(old);
                self.root = Some(Arc::new(Node::Inner(children)));
            }
            self.height += 1;
        }
        let mut level = self.height;
        let mut node = Arc::make_mut(self.root.get_or_insert_with(|| new_node(level)));
        loop {
            match node {
                Node::Inner(children) => {
                    let child = children[slot_of(page_number, level)]
                        .get_or_insert_with(|| new_node(level - 1));
                    node = Arc::make_mut(child);
                    level -= 1;
                }
                Node::Leaf(entries) => return &mut entries[slot_of(page_number, 0)],
            }
        }
    }

    /// Sets the version of `page_number` to what `make` builds from the current one.
    pub fn upsert(&mut self, page_number: u64, make: impl FnOnce(Option<&PttEntry>) -> PttEntry) {
        let slot = self.slot_mut(page_number);
        let added = slot.is_none();
        *slot = Some(make(slot.as_ref()));
        self.len += usize::from(added);
    }

    /// Sets the version of `page_number`; returns the one it replaces.
    pub fn insert(&mut self, page_number: u64, entry: PttEntry) -> Option<PttEntry> {
        let old = self.slot_mut(page_number).replace(entry);
        self.len += usize::from(old.is_none());
        old
    }

    /// The version of `page_number`, to change in place (its path made this table's own).
    pub fn get_mut(&mut self, page_number: u64) -> Option<&mut PttEntry> {
        // Checked first so that a missing page copies no node.
        self.get(page_number)?;
        self.slot_mut(page_number).as_mut()
    }

    /// Drops `page_number` from the table; returns its version. Nodes left empty go too.
    pub fn remove(&mut self, page_number: u64) -> Option<PttEntry> {
        self.get(page_number)?;
        let root = self.root.as_mut().expect("a page was found");
        let old = remove_below(root, self.height, page_number);
        if root.is_empty() {
            self.root = None;
            self.height = 0;
        }
        self.len -= 1;
        debug_assert!(old.is_some());
        old
    }

    /// Every page and its version, in page order.
    pub fn iter(&self) -> Iter<'_> {
        let mut stack = Vec::with_capacity(self.height as usize + 1);
        if let Some(root) = &self.root {
            stack.push((root.as_ref(), 0, 0, self.height));
        }
        Iter { stack }
    }
}

fn new_node(level: u32) -> Arc<Node> {
    Arc::new(if level == 0 {
        Node::Leaf(Default::default())
    } else {
        Node::Inner(no_children())
    })
}

fn no_children() -> [Option<Arc<Node>>; INNER_SLOTS] {
    std::array::from_fn(|_| None)
}

/// Removes `page_number`, known to be present, under `node` at `level`.
fn remove_below(node: &mut Arc<Node>, level: u32, page_number: u64) -> Option<PttEntry> {
    match Arc::make_mut(node) {
        Node::Leaf(entries) => entries[slot_of(page_number, 0)].take(),
        Node::Inner(children) => {
            let slot = &mut children[slot_of(page_number, level)];
            let child = slot.as_mut()?;
            let old = remove_below(child, level - 1, page_number);
            if child.is_empty() {
                *slot = None;
            }
            old
        }
    }
}

/// In-order walk of a [`Ptt`].
pub struct Iter<'a> {
    /// Nodes on the path to the next entry: (node, next slot, first page number, level).
    stack: Vec<(&'a Node, usize, u64, u32)>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (u64, &'a PttEntry);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let top = self.stack.last_mut()?;
            let (node, slot, base, level) = (top.0, &mut top.1, top.2, top.3);
            let child = match node {
                Node::Leaf(entries) => {
                    let found = entries[*slot..].iter().position(Option::is_some);
                    if let Some(offset) = found {
                        let at = *slot + offset;
                        *slot = at + 1;
                        let entry = entries[at].as_ref().expect("found");
                        return Some((base | at as u64, entry));
                    }
                    None
                }
                Node::Inner(children) => {
                    let found = children[*slot..].iter().position(Option::is_some);
                    found.map(|offset| {
                        let at = *slot + offset;
                        *slot = at + 1;
                        let child = children[at].as_deref().expect("found");
                        (child, base | (at as u64) << inner_shift(level), level - 1)
                    })
                }
            };
            match child {
                Some((child, child_base, child_level)) => {
                    self.stack.push((child, 0, child_base, child_level));
                }
                None => {
                    self.stack.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::PAGE_SIZE_BYTES;
    use crate::scratch::ScratchUsage;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn entry(buf: &Arc<PageBuf>, txn_id: u64) -> PttEntry {
        PttEntry {
            txn_id,
            first_unflushed_txn_id: txn_id,
            buf: Arc::clone(buf),
            index_in_buf: 0,
        }
    }

    /// A page an operation acts on: any page number, or the `n`th page in the table (so
    /// that removals and changes reach pages of every height, not only small ones).
    #[derive(Debug, Clone)]
    enum Pick {
        Any(u64),
        Stored(usize),
    }

    impl Pick {
        fn page_number(&self, model: &Model) -> u64 {
            match *self {
                Pick::Stored(n) if !model.is_empty() => {
                    *model.keys().nth(n % model.len()).expect("n < len")
                }
                Pick::Stored(n) => n as u64,
                Pick::Any(page_number) => page_number,
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Pick),
        Upsert(Pick),
        /// `get_mut`, moving the page's `first_unflushed_txn_id`.
        Touch(Pick),
        Remove(Pick),
        /// Keep a clone of the table as it is now, to check later that it did not change.
        Snapshot,
    }

    /// Page number → (`txn_id`, `first_unflushed_txn_id`).
    type Model = BTreeMap<u64, (u64, u64)>;

    fn picks() -> impl Strategy<Value = Pick> {
        prop_oneof![
            1 => (0u64..64).prop_map(Pick::Any),
            1 => (0u64..5_000).prop_map(Pick::Any),
            1 => any::<u64>().prop_map(Pick::Any),
            3 => any::<usize>().prop_map(Pick::Stored),
        ]
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec(
            prop_oneof![
                4 => picks().prop_map(Op::Insert),
                2 => picks().prop_map(Op::Upsert),
                2 => picks().prop_map(Op::Touch),
                4 => picks().prop_map(Op::Remove),
                1 => Just(Op::Snapshot),
            ],
            0..300,
        )
    }

    fn version(entry: &PttEntry) -> (u64, u64) {
        (entry.txn_id, entry.first_unflushed_txn_id)
    }

    fn assert_same(ptt: &Ptt, model: &Model) {
        assert_eq!(ptt.len(), model.len());
        assert_eq!(ptt.is_empty(), model.is_empty());
        let walked: Vec<(u64, (u64, u64))> = ptt.iter().map(|(p, e)| (p, version(e))).collect();
        let expected: Vec<(u64, (u64, u64))> = model.iter().map(|(&p, &v)| (p, v)).collect();
        assert_eq!(walked, expected);
        for (&page_number, &v) in model {
            assert_eq!(ptt.get(page_number).map(version), Some(v));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The table against an ordered map, with earlier versions kept and checked again
        /// at the end: a change must copy shared nodes, never write through them, and
        /// `ptr_eq` must tell a kept version from the live table once either changed.
        #[test]
        fn matches_an_ordered_map_and_keeps_old_versions(ops in ops()) {
            let usage = Arc::new(ScratchUsage::default());
            let buf = Arc::new(PageBuf::copy_of(&[0u8; PAGE_SIZE_BYTES], &usage));
            let mut ptt = Ptt::new();
            let mut model = Model::new();
            // (table, its contents, whether the live table changed since)
            let mut snapshots: Vec<(Ptt, Model, bool)> = Vec::new();
            for (txn_id, op) in (1u64..).zip(ops) {
                let before = model.clone();
                let probed = match &op {
                    Op::Insert(pick) => {
                        let page_number = pick.page_number(&model);
                        let old = ptt.insert(page_number, entry(&buf, txn_id));
                        prop_assert_eq!(
                            old.as_ref().map(version),
                            model.insert(page_number, (txn_id, txn_id))
                        );
                        page_number
                    }
                    Op::Upsert(pick) => {
                        let page_number = pick.page_number(&model);
                        let mut seen = None;
                        ptt.upsert(page_number, |old| {
                            seen = old.map(version);
                            let mut e = entry(&buf, txn_id);
                            e.first_unflushed_txn_id =
                                old.map_or(txn_id, |o| o.first_unflushed_txn_id);
                            e
                        });
                        prop_assert_eq!(seen, model.get(&page_number).copied());
                        let first = seen.map_or(txn_id, |(_, first)| first);
                        model.insert(page_number, (txn_id, first));
                        page_number
                    }
                    Op::Touch(pick) => {
                        let page_number = pick.page_number(&model);
                        let found = ptt.get_mut(page_number).map(|e| {
                            e.first_unflushed_txn_id = txn_id;
                        });
                        prop_assert_eq!(found.is_some(), model.contains_key(&page_number));
                        if let Some(v) = model.get_mut(&page_number) {
                            v.1 = txn_id;
                        }
                        page_number
                    }
                    Op::Remove(pick) => {
                        let page_number = pick.page_number(&model);
                        let old = ptt.remove(page_number);
                        prop_assert_eq!(old.as_ref().map(version), model.remove(&page_number));
                        page_number
                    }
                    Op::Snapshot => {
                        snapshots.push((ptt.clone(), model.clone(), false));
                        0
                    }
                };
                // The page acted on, found or not (most picks miss).
                prop_assert_eq!(ptt.get(probed).map(version), model.get(&probed).copied());
                assert_same(&ptt, &model);
                for (snapshot, _, changed) in &mut snapshots {
                    *changed |= model != before;
                    let both_empty = snapshot.is_empty() && ptt.is_empty();
                    prop_assert_eq!(snapshot.ptr_eq(&ptt), !*changed || both_empty);
                }
            }
            for (snapshot, expected, _) in &snapshots {
                assert_same(snapshot, expected);
            }
            drop((ptt, snapshots));
            // Every reference to the buffer came back.
            prop_assert_eq!(Arc::strong_count(&buf), 1);
        }
    }

    #[test]
    fn upsert_and_get_mut_change_only_this_version() {
        let usage = Arc::new(ScratchUsage::default());
        let buf = Arc::new(PageBuf::copy_of(&[0u8; PAGE_SIZE_BYTES], &usage));
        let mut ptt = Ptt::new();
        ptt.insert(70, entry(&buf, 1));
        let before = ptt.clone();
        assert!(before.ptr_eq(&ptt));
        ptt.upsert(70, |old| {
            let mut e = entry(&buf, 2);
            e.first_unflushed_txn_id = old.expect("present").first_unflushed_txn_id;
            e
        });
        ptt.upsert(71, |old| {
            assert!(old.is_none());
            entry(&buf, 2)
        });
        ptt.get_mut(70).expect("present").first_unflushed_txn_id = 5;
        assert!(ptt.get_mut(72).is_none());
        assert!(!before.ptr_eq(&ptt));
        assert_eq!(ptt.len(), 2);
        let e = ptt.get(70).expect("present");
        assert_eq!((e.txn_id, e.first_unflushed_txn_id), (2, 5));
        let e = before.get(70).expect("present");
        assert_eq!((e.txn_id, e.first_unflushed_txn_id), (1, 1));
        assert_eq!(before.len(), 1);
        assert!(before.get(71).is_none());
    }

    #[test]
    fn removing_every_page_frees_every_node() {
        let usage = Arc::new(ScratchUsage::default());
        let buf = Arc::new(PageBuf::copy_of(&[0u8; PAGE_SIZE_BYTES], &usage));
        let mut ptt = Ptt::new();
        for page_number in [3, 1 << 20, u64::MAX] {
            ptt.insert(page_number, entry(&buf, 1));
        }
        for page_number in [1 << 20, u64::MAX, 3] {
            assert!(ptt.remove(page_number).is_some());
        }
        assert!(ptt.root.is_none());
        assert!(ptt.ptr_eq(&Ptt::new()));
        assert_eq!(ptt.iter().count(), 0);
    }
}
