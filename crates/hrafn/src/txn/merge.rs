//! Transaction merging (group commit): many threads submit write requests; one of them —
//! the leader, whichever found no leader at work — drains the queue into one write
//! transaction, commits it with one journal write, and wakes every caller with its own
//! result. No extra thread: leadership passes to the next caller when the queue empties.
//!
//! If a request fails (an error, a failed expectation, or a panic), the merged transaction
//! is abandoned and only the failing request gets an error: failing first in its
//! transaction, it failed as it would alone, and that error stands; failing later, it runs
//! again alone, after the requests before it have run again merged. The requests after it
//! go back to the front of the queue and merge again, so one failure costs a journal write
//! or two, not one per request. Requests are therefore re-runnable: batches are data,
//! closures are `Fn`. A request that returns success but left the transaction unable to commit
//! (it ignored an operation's error) fails too. A request may not write through its own
//! environment (it would wait on itself): that write fails with [`Error::InvalidArgument`].
//!
//! Back-pressure: the queue holds at most `merge_queue_max_requests` requests; a caller
//! finding it full waits up to `merge_wait_timeout_ms`, then gets [`Error::Timeout`]. One
//! merged transaction takes at most `merge_batch_max_requests` requests and
//! `merge_batch_max_bytes` of batch data or changed pages, so memory stays bounded under
//! any load. Requests taken but not run when the changed pages reach the limit, and those
//! of a failed merged transaction, go back to the front of the queue, which may then
//! briefly hold that many more than its bound.

use super::write::{TreeMut, WriteTxn};
use crate::btree::TreeKind;
use crate::env::{Durability, EnvInner};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum BatchOp {
    Insert {
        tree: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Remove {
        tree: String,
        key: Vec<u8>,
    },
    Expect {
        tree: String,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
}

/// A list of writes applied atomically by [`crate::Environment::write`], merged with other
/// threads' batches into one durable journal write.
///
/// Expectations give optimistic concurrency: read in a snapshot, build a batch that
/// expects what you read, submit; if another commit changed those keys meanwhile, this
/// batch alone fails with [`Error::Conflict`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
    size_bytes: usize,
    /// `None`: the environment's [`crate::Options::durability`].
    durability: Option<Durability>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Inserts or replaces `key` in `tree` (created if missing).
    pub fn insert(
        &mut self,
        tree: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        let (key, value) = (key.as_ref().to_vec(), value.as_ref().to_vec());
        self.size_bytes += tree.len() + key.len() + value.len();
        self.ops.push(BatchOp::Insert {
            tree: tree.to_owned(),
            key,
            value,
        });
        self
    }

    /// Removes `key` from `tree`.
    pub fn remove(&mut self, tree: &str, key: impl AsRef<[u8]>) -> &mut Self {
        let key = key.as_ref().to_vec();
        self.size_bytes += tree.len() + key.len();
        self.ops.push(BatchOp::Remove {
            tree: tree.to_owned(),
            key,
        });
        self
    }

    /// Requires `key` in `tree` to hold `value` (`None` = absent) when the batch applies;
    /// otherwise the batch fails with [`Error::Conflict`] and applies nothing.
    pub fn expect(&mut self, tree: &str, key: impl AsRef<[u8]>, value: Option<&[u8]>) -> &mut Self {
        let key = key.as_ref().to_vec();
        self.size_bytes += tree.len() + key.len() + value.map_or(0, <[u8]>::len);
        self.ops.push(BatchOp::Expect {
            tree: tree.to_owned(),
            key,
            value: value.map(<[u8]>::to_vec),
        });
        self
    }

    /// Sets when [`crate::Environment::write`] returns for this batch, overriding
    /// [`crate::Options::durability`] (see [`WriteTxn::set_durability`]). A merged
    /// transaction is durable if any of its requests asks for it: a non-durable batch may
    /// still wait for a durable write it was merged with.
    pub fn durability(&mut self, durability: Durability) -> &mut Self {
        self.durability = Some(durability);
        self
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the batch has no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Approximate bytes of keys and values held.
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    fn apply(&self, wtx: &mut WriteTxn<'_>) -> Result<()> {
        for op in &self.ops {
            match op {
                BatchOp::Insert { tree, key, value } => {
                    wtx.open_tree(tree)?.insert(key, value)?;
                }
                // Neither makes a tree that is missing: it holds no key.
                BatchOp::Remove { tree, key } => {
                    if let Some(mut t) = existing(wtx, tree)? {
                        t.remove(key)?;
                    }
                }
                BatchOp::Expect { tree, key, value } => {
                    let differs = match existing(wtx, tree)? {
                        Some(t) => t.get(key)? != value.as_deref(),
                        None => value.is_some(),
                    };
                    if differs {
                        return Err(Error::Conflict {
                            tree: tree.clone(),
                            key: key.clone(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// The B+tree `name` if it exists.
fn existing<'t, 'env>(
    wtx: &'t mut WriteTxn<'env>,
    name: &str,
) -> Result<Option<TreeMut<'t, 'env>>> {
    match wtx.existing_tree(name, |kind| kind == TreeKind::BTree, "a B+tree") {
        Ok(index) => Ok(Some(TreeMut::new(wtx, index))),
        Err(Error::TreeNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A closure request: must be re-runnable, since the requests of a failed merged
/// transaction run again (see the module documentation).
pub type WriteFn = dyn Fn(&mut WriteTxn<'_>) -> Result<()> + Send + Sync;

enum Work {
    Batch(WriteBatch),
    Closure(Box<WriteFn>),
}

/// Size charged for a closure request against the batch byte limit.
const CLOSURE_SIZE_BYTES: usize = 256;

struct Request {
    work: Work,
    size_bytes: usize,
    /// Set once the request failed after others in a merged transaction: it then runs in
    /// a transaction of its own, for an error (or a success) that is its own.
    alone: std::sync::atomic::AtomicBool,
    state: Mutex<RequestState>,
    done: Condvar,
}

#[derive(Default)]
struct RequestState {
    result: Option<Result<()>>,
    /// Set when the previous leader hands leadership to this waiting caller.
    lead: bool,
}

impl Request {
    fn run(&self, wtx: &mut WriteTxn<'_>) -> Result<()> {
        let outcome = catch_unwind(AssertUnwindSafe(|| match &self.work {
            Work::Batch(batch) => batch.apply(wtx),
            Work::Closure(f) => f(wtx),
        }));
        let result = outcome.unwrap_or_else(|panic| {
            Err(Error::RequestPanicked {
                message: crate::error::panic_message(&*panic),
            })
        });
        // A request that ignored an operation's error may have left the transaction unable
        // to commit: that is its failure, not that of the requests merged with it.
        result.and_then(|()| match &wtx.failed {
            Some(cause) => Err(Error::TransactionFailed {
                cause: cause.clone(),
            }),
            None => Ok(()),
        })
    }

    /// Whether the transaction this request runs in must be durable on return.
    fn durable(&self, env: &EnvInner) -> bool {
        let asked = match &self.work {
            Work::Batch(batch) => batch.durability,
            Work::Closure(_) => None,
        };
        asked.unwrap_or(env.options.durability) == Durability::Immediate
    }

    fn complete(&self, result: Result<()>) {
        self.state.lock().result = Some(result);
        self.done.notify_all();
    }

    fn runs_alone(&self) -> bool {
        self.alone.load(Ordering::Relaxed)
    }

    fn hand_lead(&self) {
        self.state.lock().lead = true;
        self.done.notify_all();
    }
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Arc<Request>>,
    leader_active: bool,
}

/// The merge queue of one environment.
#[derive(Default)]
pub(crate) struct Merger {
    queue: Mutex<Queue>,
    room: Condvar,
    wake: Condvar,
    /// Most requests ever queued at once (for the back-pressure test).
    pub queue_peak: AtomicU64,
    /// Requests in the last merged transaction that committed (see [`Merger::linger`]).
    last_batch_requests: AtomicU64,
}

impl Merger {
    /// Submits a request and returns its result once it is durable (or failed).
    fn submit(&self, env: &EnvInner, work: Work, size_bytes: usize) -> Result<()> {
        // A request writing through its own environment would wait for itself.
        super::write::refuse_if_writing(env)?;
        let request = Arc::new(Request {
            work,
            size_bytes,
            alone: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(RequestState::default()),
            done: Condvar::new(),
        });
        let lead = {
            let mut queue = self.queue.lock();
            let limit = env.options.merge_queue_max_requests;
            let started = Instant::now();
            let timeout = Duration::from_millis(env.options.merge_wait_timeout_ms);
            while queue.pending.len() >= limit {
                if self
                    .room
                    .wait_for(&mut queue, timeout.saturating_sub(started.elapsed()))
                    .timed_out()
                    && queue.pending.len() >= limit
                {
                    return Err(Error::Timeout {
                        what: "room in the merge queue".into(),
                        waited_ms: started.elapsed().as_millis() as u64,
                    });
                }
            }
            queue.pending.push_back(Arc::clone(&request));
            self.wake.notify_all();
            self.queue_peak
                .fetch_max(queue.pending.len() as u64, Ordering::Relaxed);
            let lead = !queue.leader_active;
            queue.leader_active = true;
            lead
        };
        if lead {
            self.lead(env);
        }
        loop {
            let mut state = request.state.lock();
            while state.result.is_none() && !state.lead {
                request.done.wait(&mut state);
            }
            if let Some(result) = state.result.take() {
                return result;
            }
            state.lead = false;
            drop(state);
            self.lead(env);
        }
    }

    /// Drains the queue in merged transactions. While an earlier transaction's journal
    /// write is in flight, the leader keeps running newly arrived requests in the next
    /// transaction (pipelined commit); when that write completes — or the transaction is
    /// full — it prepares the transaction, hands leadership to the next waiting caller, and
    /// finishes (journal write, publish, wake callers).
    fn lead(&self, env: &EnvInner) {
        loop {
            let mut executed: Vec<Arc<Request>> = Vec::new();
            let mut bytes = 0;
            let mut wtx: Option<WriteTxn<'_>> = None;
            let mut failed = false;
            // Where the merged transaction failed: the index of the request that failed
            // (with its error), or none when the transaction could not begin.
            let mut failure: Option<(usize, Error)> = None;
            let mut lingered = false;
            loop {
                let changed_bytes = changed_bytes_of(&wtx);
                // A request running alone takes its transaction for itself.
                let alone = executed.first().is_some_and(|r| r.runs_alone());
                let taken = {
                    let mut queue = self.queue.lock();
                    loop {
                        let full = executed.len() >= env.options.merge_batch_max_requests
                            || bytes.max(changed_bytes) >= env.options.merge_batch_max_bytes
                            || alone;
                        if !queue.pending.is_empty() && !full {
                            break;
                        }
                        let idle = env.commits_in_flight.load(Ordering::SeqCst) == 0;
                        if idle && !full && !executed.is_empty() && !lingered {
                            lingered = true;
                            if self.linger(env, &mut queue) {
                                continue;
                            }
                        }
                        if full || (!executed.is_empty() && idle) {
                            break;
                        }
                        if executed.is_empty() {
                            queue.leader_active = false;
                            return;
                        }
                        // Wait for more requests or for the journal write ahead to finish.
                        self.wake.wait_for(&mut queue, Duration::from_millis(5));
                    }
                    let mut taken: Vec<Arc<Request>> = Vec::new();
                    while let Some(next) = queue.pending.front() {
                        let count = executed.len() + taken.len();
                        if count > 0
                            && (alone
                                || count >= env.options.merge_batch_max_requests
                                || bytes.max(changed_bytes) + next.size_bytes
                                    > env.options.merge_batch_max_bytes
                                || next.runs_alone())
                        {
                            break;
                        }
                        bytes += next.size_bytes;
                        let alone = next.runs_alone();
                        taken.push(queue.pending.pop_front().expect("front exists"));
                        if alone {
                            break;
                        }
                    }
                    if !taken.is_empty() {
                        self.room.notify_all();
                    }
                    taken
                };
                if taken.is_empty() {
                    break; // full, or the journal is idle: commit what we have
                }
                let mut taken = taken.into_iter();
                for request in taken.by_ref() {
                    if !failed && changed_bytes_of(&wtx) >= env.options.merge_batch_max_bytes {
                        // Full by what it changed: the rest wait for the next transaction,
                        // first in line as they were.
                        let rest: Vec<Arc<Request>> =
                            std::iter::once(request).chain(taken.by_ref()).collect();
                        bytes -= rest.iter().map(|r| r.size_bytes).sum::<usize>();
                        self.requeue(&rest);
                        break;
                    }
                    if !failed {
                        let txn = match &mut wtx {
                            Some(t) => Ok(t),
                            None => WriteTxn::begin(env).map(|t| wtx.insert(t)),
                        };
                        failed = match txn {
                            Ok(t) => match request.run(t) {
                                Ok(()) => false,
                                Err(error) => {
                                    failure = Some((executed.len(), error));
                                    true
                                }
                            },
                            Err(_) => true,
                        };
                    }
                    executed.push(request);
                }
                if failed {
                    break;
                }
            }
            if failed {
                // Nothing of the merged transaction is kept.
                drop(wtx);
                match failure {
                    // First in its transaction, it failed as it would alone: its error
                    // stands. The rest never ran; they merge again.
                    Some((0, error)) => {
                        executed[0].complete(Err(error));
                        self.requeue(&executed[1..]);
                    }
                    // Those before it merge again; it runs alone after them, for its own
                    // outcome; those after it merge again after that.
                    Some((index, _)) => {
                        executed[index].alone.store(true, Ordering::Relaxed);
                        self.requeue(&executed);
                    }
                    // The transaction could not begin: each request tries alone.
                    None => {
                        for request in &executed {
                            run_single(env, request);
                        }
                    }
                }
                continue;
            }
            let Some(mut wtx) = wtx else { continue };
            wtx.set_durability(durability_of(env, executed.iter().map(|r| &**r)));
            match wtx.prepare() {
                Ok(Some(prepared)) => {
                    self.hand_over();
                    let result = prepared.finish();
                    complete_all(env, &executed, result);
                    return;
                }
                Ok(None) => complete_all(env, &executed, Ok(())),
                Err(error) => complete_all(env, &executed, Err(error)),
            }
        }
    }

    /// Waits up to `merge_linger_us` for a request to arrive, if the last merged
    /// transaction had several callers: they are likely on their way back, and closing
    /// the transaction without them would split the callers into two groups that take
    /// turns at the journal. Yields rather than sleeps, since a timed sleep is far coarser
    /// than the wait. Returns whether a request arrived.
    fn linger(&self, env: &EnvInner, queue: &mut MutexGuard<'_, Queue>) -> bool {
        let linger = Duration::from_micros(env.options.merge_linger_us);
        if linger.is_zero() || self.last_batch_requests.load(Ordering::Relaxed) < 2 {
            return false;
        }
        env.counters.merge_lingers.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        while queue.pending.is_empty() && started.elapsed() < linger {
            MutexGuard::unlocked(queue, std::thread::yield_now);
        }
        !queue.pending.is_empty()
    }

    /// Puts `requests` back at the front of the queue, in their order, to be taken next.
    fn requeue(&self, requests: &[Arc<Request>]) {
        let mut queue = self.queue.lock();
        for request in requests.iter().rev() {
            queue.pending.push_front(Arc::clone(request));
        }
        self.queue_peak
            .fetch_max(queue.pending.len() as u64, Ordering::Relaxed);
    }

    /// Wakes a leader waiting for requests or for the journal.
    pub(crate) fn wake(&self) {
        let _queue = self.queue.lock();
        self.wake.notify_all();
    }

    /// Passes leadership to the oldest waiting caller, or steps down if none waits.
    fn hand_over(&self) {
        let mut queue = self.queue.lock();
        match queue.pending.front() {
            Some(next) => next.hand_lead(),
            None => queue.leader_active = false,
        }
    }
}

/// The scratch bytes of the pages a merged transaction changed so far: a closure's size is
/// known only once it ran, so these count against `merge_batch_max_bytes` too.
fn changed_bytes_of(wtx: &Option<WriteTxn<'_>>) -> usize {
    wtx.as_ref().map_or(0, WriteTxn::dirty_size_bytes)
}

/// The durability of a transaction running `requests`: durable if any asks for it.
fn durability_of<'r>(
    env: &EnvInner,
    mut requests: impl Iterator<Item = &'r Request>,
) -> Durability {
    if requests.any(|r| r.durable(env)) {
        Durability::Immediate
    } else {
        Durability::None
    }
}

/// Gives every request of a merged transaction the transaction's result.
fn complete_all(env: &EnvInner, batch: &[Arc<Request>], result: Result<()>) {
    match result {
        Ok(()) => {
            env.merger
                .last_batch_requests
                .store(batch.len() as u64, Ordering::Relaxed);
            env.counters
                .merged_transactions
                .fetch_add(1, Ordering::Relaxed);
            env.counters
                .merged_requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            for request in batch {
                request.complete(Ok(()));
            }
        }
        Err(error) => {
            for request in batch {
                request.complete(Err(error.duplicate()));
            }
        }
    }
}

/// Runs one request in its own transaction and completes it.
fn run_single(env: &EnvInner, request: &Request) {
    let result = WriteTxn::begin(env).and_then(|mut wtx| {
        request.run(&mut wtx)?;
        wtx.set_durability(durability_of(env, std::iter::once(request)));
        wtx.commit()
    });
    if result.is_ok() {
        env.counters
            .merged_transactions
            .fetch_add(1, Ordering::Relaxed);
        env.counters.merged_requests.fetch_add(1, Ordering::Relaxed);
    }
    request.complete(result);
}

/// Submits a batch (see [`crate::Environment::write`]).
pub(crate) fn write(env: &EnvInner, batch: WriteBatch) -> Result<()> {
    let size = batch.size_bytes().max(1);
    env.merger.submit(env, Work::Batch(batch), size)
}

/// Submits a closure (see [`crate::Environment::submit`]).
pub(crate) fn submit(env: &EnvInner, f: Box<WriteFn>) -> Result<()> {
    env.merger.submit(env, Work::Closure(f), CLOSURE_SIZE_BYTES)
}
