//! Ordered iteration over a tree, both ways, with bounds.
//!
//! Nodes have no sibling links (a link would make every split dirty one more page), so a
//! cursor keeps the path from the root and climbs it to reach the next leaf. A [`Range`]
//! holds a front and a back cursor and ends when they cross.

use super::node::{self, ValueRef};
use super::{DEPTH_MAX, PageSource, resolve_value};
use crate::error::Result;
use crate::page::corrupt;
use std::ops::Bound;

/// A position in a tree: the branch path and an entry index in a leaf.
#[derive(Clone)]
struct Cursor<'a> {
    path: [(u64, usize); DEPTH_MAX],
    depth: usize,
    leaf_number: u64,
    leaf: &'a [u8],
    index: usize,
}

/// Which end of a leaf to settle on when descending.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    First,
    Last,
}

impl<'a> Cursor<'a> {
    /// Descends from `page_number` (at `depth`) along first or last children.
    fn descend_edge<S: PageSource<'a>>(
        &mut self,
        src: S,
        mut page_number: u64,
        side: Side,
    ) -> Result<()> {
        loop {
            let page = src.page(page_number)?;
            node::validate_header(page, page_number)?;
            if node::is_leaf(page, page_number)? {
                self.leaf_number = page_number;
                self.leaf = page;
                self.prefetch_leaves(src, side);
                let n = node::count(page);
                self.index = if side == Side::First {
                    0
                } else {
                    n.wrapping_sub(1)
                };
                return Ok(());
            }
            let c = if side == Side::First {
                0
            } else {
                node::count(page)
            };
            self.push(page_number, c)?;
            page_number = node::child_at(page, c, page_number)?;
        }
    }

    /// Hints the CPU to load the leaf just reached and the sibling a scan going `side`'s
    /// way reaches next (when the same parent holds it), so the scan rarely waits on
    /// memory. Measured on a 1M-entry full scan: about 1.5x faster than no hints, and
    /// faster than hinting only the sibling.
    fn prefetch_leaves<S: PageSource<'a>>(&self, src: S, side: Side) {
        crate::page::prefetch(self.leaf);
        let Some(&(parent, child)) = self.depth.checked_sub(1).map(|d| &self.path[d]) else {
            return;
        };
        let Some(parent_page) = src.page_unverified(parent) else {
            return;
        };
        let sibling = match side {
            Side::First if child < node::count(parent_page) => child + 1,
            Side::Last if child > 0 => child - 1,
            _ => return,
        };
        // Unverified bytes are fine for a hint; a bad child number just hints nothing.
        if let Ok(number) = node::child_at(parent_page, sibling, parent)
            && let Some(bytes) = src.page_unverified(number)
        {
            crate::page::prefetch(bytes);
        }
    }

    fn push(&mut self, page_number: u64, child: usize) -> Result<()> {
        if self.depth == DEPTH_MAX {
            return Err(corrupt(
                page_number,
                "tree deeper than any valid tree (cycle?)",
            ));
        }
        self.path[self.depth] = (page_number, child);
        self.depth += 1;
        Ok(())
    }

    /// Positions on `key`: for `Side::First` the first entry `>= key` (or `> key` when
    /// `inclusive` is false); for `Side::Last` the last entry `<= key` (or `< key`).
    fn seek<S: PageSource<'a>>(
        src: S,
        root: u64,
        key: &[u8],
        inclusive: bool,
        side: Side,
    ) -> Result<Option<Cursor<'a>>> {
        let mut cursor = Cursor::empty();
        let mut page_number = root;
        loop {
            let page = src.page(page_number)?;
            node::validate_header(page, page_number)?;
            if node::is_leaf(page, page_number)? {
                cursor.leaf_number = page_number;
                cursor.leaf = page;
                cursor.prefetch_leaves(src, side);
                let found = node::search(page, key, true, page_number)?;
                return match side {
                    Side::First => {
                        cursor.index = match found {
                            Ok(i) if inclusive => i,
                            Ok(i) => i + 1,
                            Err(i) => i,
                        };
                        cursor.settle_forward(src)
                    }
                    Side::Last => {
                        cursor.index = match found {
                            Ok(i) if inclusive => i,
                            Ok(i) | Err(i) => i.wrapping_sub(1),
                        };
                        cursor.settle_backward(src)
                    }
                };
            }
            let c = node::child_index_for(page, key, page_number)?;
            cursor.push(page_number, c)?;
            page_number = node::child_at(page, c, page_number)?;
        }
    }

    fn edge<S: PageSource<'a>>(src: S, root: u64, side: Side) -> Result<Option<Cursor<'a>>> {
        let mut cursor = Cursor::empty();
        cursor.descend_edge(src, root, side)?;
        match side {
            Side::First => cursor.settle_forward(src),
            Side::Last => cursor.settle_backward(src),
        }
    }

    fn empty() -> Cursor<'a> {
        Cursor {
            path: [(0, 0); DEPTH_MAX],
            depth: 0,
            leaf_number: 0,
            leaf: &[],
            index: 0,
        }
    }

    /// Moves past the end of empty or exhausted leaves; `None` when the tree ends.
    fn settle_forward<S: PageSource<'a>>(mut self, src: S) -> Result<Option<Cursor<'a>>> {
        while self.index >= node::count(self.leaf) {
            // Climb to the first ancestor with a child to the right.
            loop {
                if self.depth == 0 {
                    return Ok(None);
                }
                let (branch, child) = self.path[self.depth - 1];
                let page = src.page(branch)?;
                if child < node::count(page) {
                    self.path[self.depth - 1].1 = child + 1;
                    let next = node::child_at(page, child + 1, branch)?;
                    self.descend_edge(src, next, Side::First)?;
                    break;
                }
                self.depth -= 1;
            }
        }
        Ok(Some(self))
    }

    /// Moves before the start of empty or exhausted leaves (index wrapped below 0).
    fn settle_backward<S: PageSource<'a>>(mut self, src: S) -> Result<Option<Cursor<'a>>> {
        while self.index >= node::count(self.leaf) {
            loop {
                if self.depth == 0 {
                    return Ok(None);
                }
                let (branch, child) = self.path[self.depth - 1];
                if child > 0 {
                    self.path[self.depth - 1].1 = child - 1;
                    let page = src.page(branch)?;
                    let prev = node::child_at(page, child - 1, branch)?;
                    self.descend_edge(src, prev, Side::Last)?;
                    break;
                }
                self.depth -= 1;
            }
        }
        Ok(Some(self))
    }

    /// Like [`Cursor::settle_forward`], in place; false when the tree ends.
    #[inline]
    fn settle_forward_in_place<S: PageSource<'a>>(&mut self, src: S) -> Result<bool> {
        if self.index < node::count(self.leaf) {
            return Ok(true);
        }
        let moved = std::mem::replace(self, Cursor::empty());
        match moved.settle_forward(src)? {
            Some(c) => {
                *self = c;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Like [`Cursor::settle_backward`], in place; false when the tree ends.
    fn settle_backward_in_place<S: PageSource<'a>>(&mut self, src: S) -> Result<bool> {
        if self.index < node::count(self.leaf) {
            return Ok(true);
        }
        let moved = std::mem::replace(self, Cursor::empty());
        match moved.settle_backward(src)? {
            Some(c) => {
                *self = c;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    #[inline]
    fn entry<S: PageSource<'a>>(&self, src: S) -> Result<(&'a [u8], &'a [u8])> {
        let (k, v) = self.entry_stored()?;
        Ok((k, resolve_value(src, v)?))
    }

    /// The entry as stored: an overflow value not followed, a nested tree told apart.
    #[inline]
    fn entry_stored(&self) -> Result<(&'a [u8], ValueRef<'a>)> {
        node::leaf_entry(self.leaf, self.index, self.leaf_number)
    }
}

/// An owned copy of a range bound.
#[derive(Clone)]
enum Limit {
    Unbounded,
    Included(Vec<u8>),
    Excluded(Vec<u8>),
}

impl Limit {
    fn from(bound: Bound<&[u8]>) -> Limit {
        match bound {
            Bound::Unbounded => Limit::Unbounded,
            Bound::Included(k) => Limit::Included(k.to_vec()),
            Bound::Excluded(k) => Limit::Excluded(k.to_vec()),
        }
    }

    /// Whether `key` is within this limit taken as an upper bound.
    #[inline]
    fn admits_from_below(&self, key: &[u8]) -> bool {
        match self {
            Limit::Unbounded => true,
            Limit::Included(end) => node::compare_keys(key, end).is_le(),
            Limit::Excluded(end) => node::compare_keys(key, end).is_lt(),
        }
    }

    /// Whether `key` is within this limit taken as a lower bound.
    #[inline]
    fn admits_from_above(&self, key: &[u8]) -> bool {
        match self {
            Limit::Unbounded => true,
            Limit::Included(start) => node::compare_keys(key, start).is_ge(),
            Limit::Excluded(start) => node::compare_keys(key, start).is_gt(),
        }
    }
}

/// One end of a range: not positioned yet, positioned, or exhausted.
enum End<'a> {
    Unstarted,
    At(Box<Cursor<'a>>),
    Done,
}

/// An iterator over `(key, value)` pairs of a tree in key order, usable from both ends.
/// Items borrow from the transaction. Each end is positioned lazily, on its first use, and
/// stepped in place; the far bound is checked by comparing keys.
pub struct Range<'a, S: PageSource<'a>> {
    src: S,
    root: u64,
    start: Limit,
    end: Limit,
    front: End<'a>,
    back: End<'a>,
}

impl<'a, S: PageSource<'a>> Range<'a, S> {
    /// Iterates the entries of the tree at `root` between `start` and `end`.
    ///
    /// # Errors
    /// None at construction today (positioning happens on first use); kept fallible so a
    /// future eager check needs no API change.
    pub fn new(src: S, root: u64, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<Range<'a, S>> {
        Ok(Range {
            src,
            root,
            start: Limit::from(start),
            end: Limit::from(end),
            front: End::Unstarted,
            back: End::Unstarted,
        })
    }

    fn finish(&mut self) {
        self.front = End::Done;
        self.back = End::Done;
    }

    fn position_front(&mut self) -> Result<()> {
        if let End::Unstarted = self.front {
            // The back end may have passed this end's bound already: what it has not
            // returned ends at its entry, so this end must not start past it.
            if let End::At(back) = &self.back {
                self.end = Limit::Included(back.entry_stored()?.0.to_vec());
            }
            let cursor = match &self.start {
                Limit::Unbounded => Cursor::edge(self.src, self.root, Side::First)?,
                Limit::Included(k) => Cursor::seek(self.src, self.root, k, true, Side::First)?,
                Limit::Excluded(k) => Cursor::seek(self.src, self.root, k, false, Side::First)?,
            };
            self.front = cursor.map_or(End::Done, |c| End::At(Box::new(c)));
        }
        Ok(())
    }

    fn position_back(&mut self) -> Result<()> {
        if let End::Unstarted = self.back {
            // As in `position_front`: the front end's entry is the first not returned.
            if let End::At(front) = &self.front {
                self.start = Limit::Included(front.entry_stored()?.0.to_vec());
            }
            let cursor = match &self.end {
                Limit::Unbounded => Cursor::edge(self.src, self.root, Side::Last)?,
                Limit::Included(k) => Cursor::seek(self.src, self.root, k, true, Side::Last)?,
                Limit::Excluded(k) => Cursor::seek(self.src, self.root, k, false, Side::Last)?,
            };
            self.back = cursor.map_or(End::Done, |c| End::At(Box::new(c)));
        }
        Ok(())
    }

    fn step_front(&mut self) -> Result<Option<(&'a [u8], ValueRef<'a>)>> {
        self.position_front()?;
        let End::At(cursor) = &mut self.front else {
            self.finish();
            return Ok(None);
        };
        let (key, value) = cursor.entry_stored()?;
        if !self.end.admits_from_below(key) {
            self.finish();
            return Ok(None);
        }
        if let End::At(back) = &self.back
            && back.leaf_number == cursor.leaf_number
            && back.index == cursor.index
        {
            self.finish(); // the two ends met on this entry
            return Ok(Some((key, value)));
        }
        cursor.index += 1;
        if !cursor.settle_forward_in_place(self.src)? {
            self.finish(); // the tree ends: nothing is left for either end
        }
        Ok(Some((key, value)))
    }

    fn step_back(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        self.position_back()?;
        let End::At(cursor) = &mut self.back else {
            self.finish();
            return Ok(None);
        };
        let (key, value) = cursor.entry(self.src)?;
        if !self.start.admits_from_above(key) {
            self.finish();
            return Ok(None);
        }
        if let End::At(front) = &self.front
            && front.leaf_number == cursor.leaf_number
            && front.index == cursor.index
        {
            self.finish();
            return Ok(Some((key, value)));
        }
        cursor.index = cursor.index.wrapping_sub(1);
        if !cursor.settle_backward_in_place(self.src)? {
            self.finish();
        }
        Ok(Some((key, value)))
    }
}

/// A key, its value, and whether the entry holds a nested tree (see [`Range::next_entry`]).
pub(crate) type MarkedEntry<'a> = (&'a [u8], &'a [u8], bool);

impl<'a, S: PageSource<'a>> Range<'a, S> {
    /// The next entry from the front, `(key, value, nested)`: `nested` says the entry holds
    /// a nested tree (in pages or embedded), whose value is then the tree's stored form.
    /// Tells nested trees from values without a second lookup.
    #[inline]
    pub(crate) fn next_entry(&mut self) -> Option<Result<MarkedEntry<'a>>> {
        // Fast path, most steps of a forward scan: an inline value, not the leaf's last
        // entry (stepping off it climbs the path), no back end to meet. The slow path
        // below handles everything else, damaged entries included.
        if let End::At(cursor) = &mut self.front
            && matches!(self.back, End::Unstarted)
            && cursor.index + 1 < node::count(cursor.leaf)
            && let Some((key, value)) = node::leaf_inline_entry(cursor.leaf, cursor.index)
            && self.end.admits_from_below(key)
        {
            cursor.index += 1;
            return Some(Ok((key, value, false)));
        }
        let stepped = self.step_front().and_then(|entry| match entry {
            Some((key, value)) => Ok(Some((
                key,
                resolve_value(self.src, value)?,
                value.is_tree(),
            ))),
            None => Ok(None),
        });
        match stepped {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.finish();
                Some(Err(e))
            }
        }
    }
}

impl<'a, S: PageSource<'a>> Iterator for Range<'a, S> {
    type Item = Result<(&'a [u8], &'a [u8])>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry()
            .map(|e| e.map(|(key, value, _)| (key, value)))
    }
}

impl<'a, S: PageSource<'a>> DoubleEndedIterator for Range<'a, S> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self.step_back() {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.finish();
                Some(Err(e))
            }
        }
    }
}

/// Where a [`TreeCursor`] is.
enum Place<'a> {
    /// Not positioned yet: `next` starts at the first entry, `prev` at the last.
    Unpositioned,
    At(Box<Cursor<'a>>),
    /// Stepped past the last entry: `prev` returns to it, `next` stays.
    PastEnd,
    /// Stepped before the first entry: `next` returns to it, `prev` stays.
    BeforeStart,
}

/// A cursor over a tree: positioned by [`TreeCursor::first`], [`TreeCursor::last`] or
/// [`TreeCursor::seek`], stepped both ways. Entries borrow from the transaction. Stepping
/// moves within a leaf and climbs the kept path at leaf ends, as a [`Range`] does.
pub struct TreeCursor<'a, S: PageSource<'a>> {
    src: S,
    root: u64,
    place: Place<'a>,
}

/// An entry a cursor is on: key and value.
pub type Entry<'a> = (&'a [u8], &'a [u8]);

impl<'a, S: PageSource<'a>> TreeCursor<'a, S> {
    /// An unpositioned cursor over the tree rooted at `root`.
    pub fn new(src: S, root: u64) -> TreeCursor<'a, S> {
        TreeCursor {
            src,
            root,
            place: Place::Unpositioned,
        }
    }

    fn settle(&mut self, cursor: Option<Cursor<'a>>, off: Place<'a>) -> Result<Option<Entry<'a>>> {
        match cursor {
            Some(c) => {
                let entry = c.entry(self.src)?;
                self.place = Place::At(Box::new(c));
                Ok(Some(entry))
            }
            None => {
                self.place = off;
                Ok(None)
            }
        }
    }

    /// Moves to the first entry.
    ///
    /// # Errors
    /// Corruption.
    pub fn first(&mut self) -> Result<Option<Entry<'a>>> {
        let c = Cursor::edge(self.src, self.root, Side::First)?;
        self.settle(c, Place::PastEnd)
    }

    /// Moves to the last entry.
    ///
    /// # Errors
    /// Corruption.
    pub fn last(&mut self) -> Result<Option<Entry<'a>>> {
        let c = Cursor::edge(self.src, self.root, Side::Last)?;
        self.settle(c, Place::BeforeStart)
    }

    /// Moves to the first entry whose key is `>= key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn seek(&mut self, key: &[u8]) -> Result<Option<Entry<'a>>> {
        let c = Cursor::seek(self.src, self.root, key, true, Side::First)?;
        self.settle(c, Place::PastEnd)
    }

    /// Moves to the last entry whose key is `<= key`.
    ///
    /// # Errors
    /// Corruption.
    pub fn seek_back(&mut self, key: &[u8]) -> Result<Option<Entry<'a>>> {
        let c = Cursor::seek(self.src, self.root, key, true, Side::Last)?;
        self.settle(c, Place::BeforeStart)
    }

    /// The entry the cursor is on.
    ///
    /// # Errors
    /// Corruption.
    pub fn current(&self) -> Result<Option<Entry<'a>>> {
        match &self.place {
            Place::At(c) => c.entry(self.src).map(Some),
            _ => Ok(None),
        }
    }

    /// Moves to the next entry (the first, if unpositioned or before the start).
    ///
    /// # Errors
    /// Corruption.
    // A cursor step, not an iterator: it moves a position that `prev`, `seek` and
    // `delete` share, and its entries borrow the cursor.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Entry<'a>>> {
        match std::mem::replace(&mut self.place, Place::Unpositioned) {
            Place::Unpositioned | Place::BeforeStart => self.first(),
            Place::PastEnd => {
                self.place = Place::PastEnd;
                Ok(None)
            }
            Place::At(mut c) => {
                c.index += 1;
                if c.settle_forward_in_place(self.src)? {
                    let entry = c.entry(self.src)?;
                    self.place = Place::At(c);
                    Ok(Some(entry))
                } else {
                    self.place = Place::PastEnd;
                    Ok(None)
                }
            }
        }
    }

    /// Moves to the previous entry (the last, if unpositioned or past the end).
    ///
    /// # Errors
    /// Corruption.
    pub fn prev(&mut self) -> Result<Option<Entry<'a>>> {
        match std::mem::replace(&mut self.place, Place::Unpositioned) {
            Place::Unpositioned | Place::PastEnd => self.last(),
            Place::BeforeStart => {
                self.place = Place::BeforeStart;
                Ok(None)
            }
            Place::At(mut c) => {
                c.index = c.index.wrapping_sub(1);
                if c.settle_backward_in_place(self.src)? {
                    let entry = c.entry(self.src)?;
                    self.place = Place::At(c);
                    Ok(Some(entry))
                } else {
                    self.place = Place::BeforeStart;
                    Ok(None)
                }
            }
        }
    }
}
