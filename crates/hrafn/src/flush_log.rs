//! What the flusher has left to do, kept so that a pass costs in proportion to what it can
//! flush, not to the size of the page table.
//!
//! Every commit appends the pages it wrote, before its state is published. A flush pass
//! takes the commits at or below its bound (the oldest reader) and looks up only their
//! pages: a page whose newest version is at or below the bound is flushed; one whose newest
//! version is newer is *held* (an older version waits for nobody, but the page table keeps
//! only the newest) until the commit of that newer version is taken in its turn. While a
//! long reader pins the bound, a pass takes nothing and costs nothing.
//!
//! The sync rule needs the oldest unflushed version of any page: it is the oldest commit
//! not yet taken, or the oldest version a held page waits with, whichever is older.
//!
//! While a long reader pins the bound, the commits pile up. Past [`FOLD_AT`] of them, a
//! pass *folds* them into one record per page (the oldest and the newest commit that wrote
//! it since), so the log's memory follows the pages written, not the commits: a reader
//! held for an hour under a stream of small commits would otherwise keep every commit's
//! page list. A folded page is taken once its newest commit is at or below the bound,
//! which is what taking each of its commits in turn would have done for it.

use crate::scratch::Ptt;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Commits waiting past which a pass folds them into per-page records. Passes drain the
/// log down to the bound, so only a reader held across this many commits makes a fold.
const FOLD_AT: usize = 4096;

/// What one pass took from the log, to put back if its writes fail (the next pass then
/// tries the same pages again).
#[derive(Debug, Default)]
pub struct Taken {
    commits: VecDeque<(u64, Vec<u64>)>,
    /// Folded pages taken: (page, oldest commit, newest commit).
    folded: Vec<(u64, u64, u64)>,
    released: Vec<(u64, u64)>,
}

/// Commits whose pages the flusher has not looked at, and pages held back.
///
/// Two locks, because the two halves have different users: every commit appends to
/// `commits` while it holds the publish lock, so the flusher holds that lock only to split
/// off what it takes, never while it works through it (after a long reader, what it takes
/// can be minutes of commits). `held` belongs to the flush passes alone.
#[derive(Debug)]
pub struct FlushLog {
    commits: Mutex<VecDeque<(u64, Vec<u64>)>>,
    held: Mutex<Held>,
    fold_at: usize,
}

impl Default for FlushLog {
    fn default() -> FlushLog {
        FlushLog::folding_at(FOLD_AT)
    }
}

#[derive(Debug, Default)]
struct Held {
    /// Held page → the oldest of its versions not in the data file.
    by_page: BTreeMap<u64, u64>,
    /// The same, ordered by that version, for the minimum.
    by_txn: BTreeSet<(u64, u64)>,
    folded: Folded,
}

/// Commits folded into one record per page; all of them are older than any commit still
/// in the log, except after a failed pass puts its commits back (each page is still taken
/// once its newest commit is, so the order does not matter to the rule).
#[derive(Debug, Default)]
struct Folded {
    /// Page → (the oldest, the newest) folded commit that wrote it.
    by_page: BTreeMap<u64, (u64, u64)>,
    /// (newest commit, page), for the pages a bound releases.
    by_newest: BTreeSet<(u64, u64)>,
    /// (oldest commit, page), for the sync rule's minimum.
    by_oldest: BTreeSet<(u64, u64)>,
}

impl Folded {
    fn add(&mut self, page_number: u64, oldest: u64, newest: u64) {
        let (oldest, newest) = match self.by_page.get(&page_number) {
            Some(&(o, n)) => {
                self.by_newest.remove(&(n, page_number));
                self.by_oldest.remove(&(o, page_number));
                (o.min(oldest), n.max(newest))
            }
            None => (oldest, newest),
        };
        self.by_page.insert(page_number, (oldest, newest));
        self.by_newest.insert((newest, page_number));
        self.by_oldest.insert((oldest, page_number));
    }

    /// Removes and returns the pages whose newest commit is at or below `bound`.
    fn take(&mut self, bound: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        while let Some(&(newest, page_number)) = self.by_newest.first() {
            if newest > bound {
                break;
            }
            self.by_newest.pop_first();
            let (oldest, _) = self.by_page.remove(&page_number).expect("indexes agree");
            self.by_oldest.remove(&(oldest, page_number));
            out.push((page_number, oldest, newest));
        }
        out
    }
}

impl FlushLog {
    /// A log that folds its commits once more than `fold_at` wait.
    pub fn folding_at(fold_at: usize) -> FlushLog {
        FlushLog {
            commits: Mutex::default(),
            held: Mutex::default(),
            fold_at: fold_at.max(1),
        }
    }

    /// Records the pages commit `txn_id` wrote (called in transaction order, before the
    /// commit's state is published). Returns whether the log has grown long enough that a
    /// pass should fold it: while a reader pins the bound, nothing else may run a pass.
    pub fn record(&self, txn_id: u64, pages: Vec<u64>) -> bool {
        let mut commits = self.commits.lock();
        debug_assert!(
            commits.back().is_none_or(|&(t, _)| t < txn_id),
            "commits are recorded in order"
        );
        commits.push_back((txn_id, pages));
        commits.len().is_multiple_of(self.fold_at * 4)
    }

    /// Takes the commits at or below `bound` and returns, in page order, the page versions
    /// of `ptt` (the state the pass flushes from) that may go to the data file (exactly
    /// what a scan of all of `ptt` finds), the number of pages it looked up, and what it
    /// took, for [`FlushLog::put_back`]. Called by flush passes only, which hold the
    /// flush book's lock: one at a time.
    pub fn take_flushable(&self, ptt: &Ptt, bound: u64) -> (Vec<(u64, u64)>, u64, Taken) {
        let (commits, waiting) = {
            let mut log = self.commits.lock();
            // Moves whichever side is shorter: while a reader pins the bound, nothing is
            // taken from a log that keeps growing.
            let taken_count = log.partition_point(|&(txn_id, _)| txn_id <= bound);
            let commits: VecDeque<(u64, Vec<u64>)> = if taken_count <= log.len() / 2 {
                log.drain(..taken_count).collect()
            } else {
                let newer = log.split_off(taken_count);
                std::mem::replace(&mut *log, newer)
            };
            // What is left waits for a reader: past the threshold it is folded below,
            // outside this lock. Sound only because the sync rule reads the log under the
            // flush book's lock too, which this pass holds: nobody sees the commits in
            // neither place.
            let waiting = if log.len() > self.fold_at {
                std::mem::take(&mut *log)
            } else {
                VecDeque::new()
            };
            (commits, waiting)
        };
        let mut held = self.held.lock();
        let folded = held.folded.take(bound);
        for (txn_id, pages) in waiting {
            for page_number in pages {
                held.folded.add(page_number, txn_id, txn_id);
            }
        }
        // A set, not a sorted list of every page of every commit: after a long reader the
        // commits repeat the same pages many times over.
        let pages: BTreeSet<u64> = commits
            .iter()
            .flat_map(|c| c.1.iter().copied())
            .chain(folded.iter().map(|f| f.0))
            .collect();
        let examined = pages.len() as u64;
        let mut taken = Taken {
            commits,
            folded,
            released: Vec::new(),
        };
        let mut batch = Vec::with_capacity(pages.len());
        for page_number in pages {
            let Some(entry) = ptt.get(page_number) else {
                continue; // flushed already, with a version taken earlier
            };
            if entry.txn_id <= bound {
                if let Some(oldest) = held.release(page_number) {
                    taken.released.push((page_number, oldest));
                }
                batch.push((page_number, entry.txn_id));
            } else {
                held.hold(page_number, entry.first_unflushed_txn_id);
            }
        }
        (batch, examined, taken)
    }

    /// Undoes a take whose pages did not reach the data file.
    pub fn put_back(&self, taken: Taken) {
        let mut held = self.held.lock();
        for (page_number, oldest) in taken.released {
            held.hold(page_number, oldest);
        }
        for (page_number, oldest, newest) in taken.folded {
            held.folded.add(page_number, oldest, newest);
        }
        // Commits recorded since are all newer than those taken.
        let mut commits = self.commits.lock();
        for commit in taken.commits.into_iter().rev() {
            commits.push_front(commit);
        }
    }

    /// The oldest transaction that wrote a version not yet in the data file, if any.
    pub fn oldest_unflushed(&self) -> Option<u64> {
        let held = self.held.lock();
        let commits = self.commits.lock().front().map(|&(t, _)| t);
        [
            commits,
            held.by_txn.first().map(|&(t, _)| t),
            held.folded.by_oldest.first().map(|&(t, _)| t),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

impl Held {
    fn hold(&mut self, page_number: u64, first_unflushed_txn_id: u64) {
        let oldest = match self.by_page.get(&page_number) {
            Some(&t) if t <= first_unflushed_txn_id => return,
            Some(&t) => {
                self.by_txn.remove(&(t, page_number));
                first_unflushed_txn_id
            }
            None => first_unflushed_txn_id,
        };
        self.by_page.insert(page_number, oldest);
        self.by_txn.insert((oldest, page_number));
    }

    fn release(&mut self, page_number: u64) -> Option<u64> {
        let t = self.by_page.remove(&page_number)?;
        self.by_txn.remove(&(t, page_number));
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flush::flushable;
    use crate::scratch::{PageBuf, PttEntry, ScratchUsage};
    use std::sync::Arc;

    /// Every commit appends to the log while it holds the publish lock, so a pass that
    /// takes a long log (a long reader just ended) must not keep commits waiting while it
    /// works through what it took: a commit's append waits at most for the split.
    #[test]
    fn a_pass_does_not_hold_up_commits_while_it_works() {
        const COMMITS: u64 = 400_000;
        let log = FlushLog::default();
        for txn_id in 1..=COMMITS {
            let _ = log.record(txn_id, (0..10).map(|i| (txn_id * 7 + i) % 1000).collect());
        }
        let ptt = Ptt::new();
        let barrier = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            let pass = scope.spawn(|| {
                barrier.wait();
                let started = std::time::Instant::now();
                let (_, examined, _) = log.take_flushable(&ptt, COMMITS);
                (started.elapsed(), examined)
            });
            barrier.wait();
            let mut slowest = std::time::Duration::ZERO;
            let mut txn_id = COMMITS;
            while !pass.is_finished() {
                txn_id += 1;
                let started = std::time::Instant::now();
                let _ = log.record(txn_id, vec![txn_id % 1000]);
                slowest = slowest.max(started.elapsed());
            }
            let (took, examined) = pass.join().expect("the pass");
            assert_eq!(examined, 1000);
            assert!(txn_id > COMMITS, "no append ran during the pass");
            assert!(
                slowest < took / 2,
                "an append waited {slowest:?} during a pass of {took:?}"
            );
        });
        // What the pass took is gone; the appends made meanwhile wait for the next one.
        assert_eq!(log.oldest_unflushed(), Some(COMMITS + 1));
    }

    /// A reader pinning the bound through a million commits: the log keeps one record per
    /// page written, not one per commit, and the pages are taken once the reader ends.
    #[test]
    fn a_pinned_bound_keeps_the_log_to_the_pages_written() {
        let log = FlushLog::default();
        let mut ptt = Ptt::new();
        let usage = Arc::new(ScratchUsage::default());
        let buf = Arc::new(PageBuf::zeroed(1, &usage));
        let (pages, commits) = (500u64, 1_000_000u64);
        let mut kicks = 0;
        for txn_id in 1..=commits {
            let page_number = txn_id * 7919 % pages;
            let first_unflushed_txn_id = ptt
                .get(page_number)
                .map_or(txn_id, |e| e.first_unflushed_txn_id);
            ptt.insert(
                page_number,
                PttEntry {
                    txn_id,
                    first_unflushed_txn_id,
                    buf: Arc::clone(&buf),
                    index_in_buf: 0,
                },
            );
            if log.record(txn_id, vec![page_number]) {
                kicks += 1;
                // The kicked pass: the reader still pins the bound at 0.
                let (batch, _, _) = log.take_flushable(&ptt, 0);
                assert!(batch.is_empty());
            }
        }
        // A kick at every 4 × FOLD_AT commits; each pass folds the log empty.
        assert_eq!(kicks, commits / (4 * FOLD_AT as u64));
        let held = log.held.lock();
        assert_eq!(held.folded.by_page.len() as u64, pages);
        assert!(log.commits.lock().len() < FOLD_AT * 4);
        drop(held);
        assert_eq!(log.oldest_unflushed(), Some(1));
        // The reader ends: one pass takes every page, at its newest version.
        let (batch, examined, _) = log.take_flushable(&ptt, commits);
        assert_eq!(batch, flushable(&ptt, commits));
        assert_eq!((batch.len() as u64, examined), (pages, pages));
        assert_eq!(log.oldest_unflushed(), None);
    }

    /// Random commits and passes at random bounds, against a scan of the whole table and
    /// the flusher's own bookkeeping of `first_unflushed_txn_id`.
    #[test]
    fn takes_what_a_full_scan_finds() {
        let usage = Arc::new(ScratchUsage::default());
        let buf = Arc::new(PageBuf::zeroed(1, &usage));
        let mut seed = 0x5eed_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for round in 0..100 {
            let mut ptt = Ptt::new();
            // Half the rounds fold whatever waits past a few commits.
            let log = if round % 2 == 0 {
                FlushLog::default()
            } else {
                FlushLog::folding_at(1 + round % 7)
            };
            let mut txn_id = 0;
            let mut oldest_reader = 0;
            for _step in 0..200 {
                if next(3) > 0 {
                    txn_id += 1;
                    let pages: BTreeSet<u64> = (0..1 + next(5)).map(|_| next(40)).collect();
                    let _ = log.record(txn_id, pages.iter().copied().collect());
                    for &p in &pages {
                        let first_unflushed_txn_id =
                            ptt.get(p).map_or(txn_id, |e| e.first_unflushed_txn_id);
                        let entry = PttEntry {
                            txn_id,
                            first_unflushed_txn_id,
                            buf: Arc::clone(&buf),
                            index_in_buf: 0,
                        };
                        ptt.insert(p, entry);
                    }
                } else {
                    // A reader comes or goes: the bound moves forward only.
                    oldest_reader = oldest_reader.max(txn_id.saturating_sub(next(20)));
                    let bound = oldest_reader;
                    let expected = flushable(&ptt, bound);
                    let (batch, _, taken) = log.take_flushable(&ptt, bound);
                    assert_eq!(batch, expected);
                    if next(4) == 0 {
                        // The pass's writes fail: nothing left the table.
                        log.put_back(taken);
                    } else {
                        for (p, _) in expected {
                            ptt.remove(p);
                        }
                    }
                }
                let scanned = ptt.iter().map(|(_, e)| e.first_unflushed_txn_id).min();
                assert_eq!(log.oldest_unflushed(), scanned);
            }
        }
    }
}
