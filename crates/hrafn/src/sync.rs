//! The synchronisation the reader table and the published state are built on. Normally
//! the standard atomics and [`arc_swap::ArcSwap`]; under `--cfg hrafn_loom`, loom's
//! model-checked atomics and a model of the state cell, so that the concurrency-model tests
//! (`txn/model_tests.rs`) explore the interleavings of the real code.

pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::Ordering;

#[cfg(not(hrafn_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize};

#[cfg(hrafn_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize};

/// The cell holding the published state: one atomic pointer swap publishes a new one.
#[cfg(not(hrafn_loom))]
pub(crate) type StateCell<T> = arc_swap::ArcSwap<T>;

#[cfg(hrafn_loom)]
pub(crate) use model::StateCell;

#[cfg(hrafn_loom)]
mod model {
    use super::{Arc, AtomicUsize, Ordering};
    use loom::sync::atomic::fence;

    /// A model of `ArcSwap` for loom: the current value is an index, in one loom atomic,
    /// into every value ever stored (kept so that a load can clone the one it read; loom
    /// runs one thread at a time, so the plain mutex around them never waits and hides no
    /// interleaving).
    ///
    /// `ArcSwap` loads the pointer and swaps it in with `SeqCst`, and the reader table
    /// relies on that total order (a reader publishes its slot, then loads the state; the
    /// flusher loads the state, then reads the slots). Loom treats `SeqCst` accesses as
    /// `AcqRel` but models `SeqCst` fences, so each access here stands between two. Those
    /// fences also order the slot operations around the access: the model checks the order
    /// of the protocol's steps, but would not notice a slot operation weakened below
    /// `SeqCst`.
    pub(crate) struct StateCell<T> {
        values: std::sync::Mutex<Vec<Arc<T>>>,
        current: AtomicUsize,
    }

    impl<T> StateCell<T> {
        pub(crate) fn new(value: Arc<T>) -> StateCell<T> {
            StateCell {
                values: std::sync::Mutex::new(vec![value]),
                current: AtomicUsize::new(0),
            }
        }

        pub(crate) fn from_pointee(value: T) -> StateCell<T> {
            StateCell::new(Arc::new(value))
        }

        pub(crate) fn load(&self) -> Arc<T> {
            self.load_full()
        }

        pub(crate) fn load_full(&self) -> Arc<T> {
            fence(Ordering::SeqCst);
            let at = self.current.load(Ordering::SeqCst);
            fence(Ordering::SeqCst);
            Arc::clone(&self.values.lock().expect("values lock")[at])
        }

        pub(crate) fn store(&self, value: Arc<T>) {
            let at = {
                let mut values = self.values.lock().expect("values lock");
                values.push(value);
                values.len() - 1
            };
            fence(Ordering::SeqCst);
            self.current.swap(at, Ordering::SeqCst);
            fence(Ordering::SeqCst);
        }
    }
}
