//! Storing a bulk load's transactions on two threads while the reading thread goes on.
//!
//! One writer runs every transaction, so two storing threads are enough: while one
//! transaction's journal write is in flight, the next one already waits in the merge
//! queue and runs (the merger's pipelined commit), and the reading thread parses and
//! prepares the one after. Jobs submit in the order they were sent ([`Turn`]), so ids
//! are given in that order. Results come back to the reading thread, which owns the
//! caller's progress callback; after a failed transaction nothing more is sent.

use crate::error::{Error, Result};
use crate::graph::{Graph, GraphWriter};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// Threads that submit transactions.
const STORERS: usize = 2;

/// A job: submits one transaction through [`Turn::submit`] (or tells [`Turn::ran`]
/// itself once its transaction runs).
pub(crate) type Job<'a, T> = Box<dyn FnOnce(&Turn) -> Result<T> + Send + 'a>;

/// How many jobs' work has run, for [`Turn`].
#[derive(Default)]
struct Turns {
    ran: Mutex<u64>,
    changed: Condvar,
}

/// A job's place in the order: job `n` submits once job `n - 1`'s work has run in the
/// writer (or its submit returned). Not sooner: the merger takes the requests waiting
/// when a transaction's work ends into that transaction, so a job submitted while the
/// last one runs would join it, and both storing threads would then wait through its
/// commit with nothing for the writer to do. Submitted as that work ends, job `n` mostly
/// arrives while `n - 1` is prepared for its commit, and runs while `n - 1`'s journal
/// write is in flight (it may still join `n - 1` when the journal is busy with `n - 2`).
#[derive(Clone)]
pub(crate) struct Turn {
    turns: Arc<Turns>,
    seq: u64,
}

impl Turn {
    fn wait(&self) {
        let mut ran = self
            .turns
            .ran
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *ran < self.seq {
            ran = self
                .turns
                .changed
                .wait(ran)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Runs `work` in a merged write transaction of `graph`, letting the next job submit
    /// as soon as the work has run.
    pub(crate) fn submit<T: Send + 'static>(
        &self,
        graph: &Graph,
        work: impl Fn(&mut GraphWriter<'_, '_>) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let turn = self.clone();
        graph.submit(move |g| {
            let result = work(g);
            turn.ran();
            result
        })
    }

    /// This job's work has run in the writer: the next job may submit. Called from inside
    /// the transaction (whose work may run more than once) and again after it.
    pub(crate) fn ran(&self) {
        let mut ran = self
            .turns
            .ran
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *ran <= self.seq {
            *ran = self.seq + 1;
            self.turns.changed.notify_all();
        }
    }
}

/// Lets the next job go even if this one panics, so the other thread never waits
/// forever (the scope then raises the panic).
struct RanOnDrop<'t>(&'t Turn);

impl Drop for RanOnDrop<'_> {
    fn drop(&mut self) {
        self.0.ran();
    }
}

/// The reading thread's end of the storing threads.
pub(crate) struct Pipeline<'a, 'h, T> {
    jobs: Option<mpsc::SyncSender<(Turn, Job<'a, T>)>>,
    done: mpsc::Receiver<Result<T>>,
    sent: u64,
    turns: Arc<Turns>,
    /// Takes each stored transaction's result.
    on_stored: &'h mut dyn FnMut(T) -> Result<()>,
    /// The first failure: a transaction's, or `on_stored`'s.
    failure: Option<Error>,
}

impl<'a, 'h, T: Send + 'a> Pipeline<'a, 'h, T> {
    /// Runs `body` with a pipeline whose threads end when it returns, after every job
    /// sent has been stored (or has failed) and handed to `on_stored`. Returns the first
    /// failure of a transaction or of `on_stored` if there was one (the body then stopped
    /// at its next send or [`Pipeline::check`]), else what `body` returned.
    pub(crate) fn run<R>(
        on_stored: &'h mut dyn FnMut(T) -> Result<()>,
        body: impl FnOnce(&mut Pipeline<'a, 'h, T>) -> Result<R>,
    ) -> Result<R> {
        std::thread::scope(|scope| {
            let (jobs, queue) = mpsc::sync_channel::<(Turn, Job<'a, T>)>(1);
            let (results, done) = mpsc::channel();
            let queue = Arc::new(Mutex::new(queue));
            for _ in 0..STORERS {
                let (results, queue) = (results.clone(), Arc::clone(&queue));
                scope.spawn(move || {
                    loop {
                        // The guard goes at the end of the statement: one thread waits
                        // for a job while the other works.
                        let next = queue
                            .lock()
                            .map_err(|_| ())
                            .and_then(|q| q.recv().map_err(|_| ()));
                        let Ok((turn, job)) = next else { return };
                        let _next_may_go = RanOnDrop(&turn);
                        turn.wait();
                        if results.send(job(&turn)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(results);
            let mut pipeline = Pipeline {
                jobs: Some(jobs),
                done,
                sent: 0,
                turns: Arc::default(),
                on_stored,
                failure: None,
            };
            let outcome = body(&mut pipeline);
            pipeline.finish();
            match pipeline.failure {
                Some(failure) => Err(failure),
                None => outcome,
            }
        })
    }

    /// Sends `job`, after taking the results ready; waits while both threads are busy
    /// and one job already waits.
    ///
    /// # Errors
    /// A stand-in error once a transaction failed (nothing more is sent);
    /// [`Pipeline::run`] returns the failure itself.
    pub(crate) fn send(&mut self, job: Job<'a, T>) -> Result<()> {
        self.check()?;
        let turn = Turn {
            turns: Arc::clone(&self.turns),
            seq: self.sent,
        };
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        jobs.send((turn, job)).map_err(|_| stopped())?;
        self.sent += 1;
        Ok(())
    }

    /// Takes the results ready now, without waiting.
    ///
    /// # Errors
    /// As [`Pipeline::send`].
    pub(crate) fn check(&mut self) -> Result<()> {
        while let Ok(result) = self.done.try_recv() {
            self.take(result);
        }
        match self.failure {
            Some(_) => Err(stopped()),
            None => Ok(()),
        }
    }

    /// Sends no more jobs and takes every result still to come: the threads finish the
    /// jobs queued, then end, which closes the results.
    fn finish(&mut self) {
        self.jobs = None;
        while let Ok(result) = self.done.recv() {
            self.take(result);
        }
    }

    fn take(&mut self, result: Result<T>) {
        // Every stored transaction is handed over, also after a failure.
        let outcome = result.and_then(|stored| (self.on_stored)(stored));
        if let Err(error) = outcome {
            self.failure.get_or_insert(error);
        }
    }
}

/// What a send returns once a transaction failed; never returned from [`Pipeline::run`],
/// which returns the failure instead.
fn stopped() -> Error {
    Error::Io(std::io::Error::other(
        "the load stopped: a transaction failed",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Jobs run in the order sent although two threads take them, every result is handed
    /// over, and after a failure nothing more is sent while what was sent still completes.
    #[test]
    fn jobs_submit_in_order_and_a_failure_stops_sending() {
        let order = Mutex::new(Vec::new());
        let mut stored = Vec::new();
        let mut on_stored = |n: u64| {
            stored.push(n);
            Ok(())
        };
        let result = Pipeline::run(&mut on_stored, |pipeline| {
            for n in 0..20u64 {
                let order = &order;
                pipeline.send(Box::new(move |turn: &Turn| {
                    // Later jobs are quick: only the turns keep them in order.
                    std::thread::sleep(Duration::from_millis(if n % 2 == 0 { 3 } else { 0 }));
                    order.lock().expect("lock").push(n);
                    turn.ran();
                    if n == 12 {
                        Err(Error::NoSuchNode(n))
                    } else {
                        Ok(n)
                    }
                }))?;
            }
            Ok(())
        });
        assert!(matches!(result, Err(Error::NoSuchNode(12))), "{result:?}");
        let order = order.into_inner().expect("lock");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        // Every job up to the failing one ran; after it, only the few in flight when its
        // result came back (two threads and one waiting job, give or take a race).
        assert!(order.len() >= 13 && order.len() <= 17, "{order:?}");
        stored.sort_unstable();
        let want: Vec<u64> = order.iter().copied().filter(|&n| n != 12).collect();
        assert_eq!(stored, want);
    }
}
