//! Ordered iteration over a tree, both ways, with bounds.
//!
//! Nodes have no sibling links (a link would make every split dirty one more page), so a
//! cursor keeps the path from the root and climbs it to reach the next leaf. A [`Range`]
//! holds a front and a back cursor and ends when they cross.

use super::node::{self};
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

    fn entry<S: PageSource<'a>>(&self, src: S) -> Result<(&'a [u8], &'a [u8])> {
        let (k, v) = node::leaf_entry(self.leaf, self.index, self.leaf_number)?;
        Ok((k, resolve_value(src, v)?))
    }
}

/// An iterator over `(key, value)` pairs of a tree in key order, usable from both ends.
/// Items borrow from the transaction.
pub struct Range<'a, S: PageSource<'a>> {
    src: S,
    front: Option<Cursor<'a>>,
    back: Option<Cursor<'a>>,
}

impl<'a, S: PageSource<'a>> Range<'a, S> {
    /// Iterates the entries of the tree at `root` between `start` and `end`.
    ///
    /// # Errors
    /// Damaged pages met while positioning.
    pub fn new(src: S, root: u64, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<Range<'a, S>> {
        let front = match start {
            Bound::Unbounded => Cursor::edge(src, root, Side::First)?,
            Bound::Included(k) => Cursor::seek(src, root, k, true, Side::First)?,
            Bound::Excluded(k) => Cursor::seek(src, root, k, false, Side::First)?,
        };
        let back = match end {
            Bound::Unbounded => Cursor::edge(src, root, Side::Last)?,
            Bound::Included(k) => Cursor::seek(src, root, k, true, Side::Last)?,
            Bound::Excluded(k) => Cursor::seek(src, root, k, false, Side::Last)?,
        };
        let mut range = Range { src, front, back };
        range.check_crossed()?;
        Ok(range)
    }

    /// Ends the range when the cursors have passed each other.
    fn check_crossed(&mut self) -> Result<()> {
        let crossed = match (&self.front, &self.back) {
            (Some(f), Some(b)) => {
                if f.leaf_number == b.leaf_number {
                    f.index > b.index
                } else {
                    // Different leaves: compare keys (rare: only when positioning).
                    let fk = node::key(f.leaf, f.index, true, f.leaf_number)?;
                    let bk = node::key(b.leaf, b.index, true, b.leaf_number)?;
                    fk > bk
                }
            }
            _ => true,
        };
        if crossed {
            self.front = None;
            self.back = None;
        }
        Ok(())
    }

    fn step_front(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let Some(cursor) = self.front.take() else {
            return Ok(None);
        };
        let item = cursor.entry(self.src)?;
        let done_here = self
            .back
            .as_ref()
            .is_some_and(|b| b.leaf_number == cursor.leaf_number && b.index == cursor.index);
        if done_here {
            self.back = None;
            return Ok(Some(item));
        }
        let mut next = cursor;
        next.index += 1;
        self.front = next.settle_forward(self.src)?;
        if self.front.is_none() {
            self.back = None;
        }
        Ok(Some(item))
    }

    fn step_back(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let Some(cursor) = self.back.take() else {
            return Ok(None);
        };
        let item = cursor.entry(self.src)?;
        let done_here = self
            .front
            .as_ref()
            .is_some_and(|f| f.leaf_number == cursor.leaf_number && f.index == cursor.index);
        if done_here {
            self.front = None;
            return Ok(Some(item));
        }
        let mut prev = cursor;
        prev.index = prev.index.wrapping_sub(1);
        self.back = prev.settle_backward(self.src)?;
        if self.back.is_none() {
            self.front = None;
        }
        Ok(Some(item))
    }
}

impl<'a, S: PageSource<'a>> Iterator for Range<'a, S> {
    type Item = Result<(&'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step_front() {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.front = None;
                self.back = None;
                Some(Err(e))
            }
        }
    }
}

impl<'a, S: PageSource<'a>> DoubleEndedIterator for Range<'a, S> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self.step_back() {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.front = None;
                self.back = None;
                Some(Err(e))
            }
        }
    }
}
