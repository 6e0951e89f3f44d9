//! [`Work`]: the handle of an asynchronous collective.

use std::sync::{Arc, Condvar, Mutex};

use crate::Result;

/// A collective in flight. Collectives run in issue order on the group's worker thread;
/// `wait` returns the buffer once this one has finished.
///
/// Dropping a `Work` does not cancel the collective (every rank must run it), it only
/// discards the result.
#[must_use = "a Work's result (and errors) are only seen through wait()"]
#[derive(Debug)]
pub struct Work<T> {
    slot: Arc<Slot<T>>,
}

#[derive(Debug)]
pub(crate) struct Slot<T> {
    value: Mutex<Option<Result<T>>>,
    done: Condvar,
}

impl<T> Work<T> {
    pub(crate) fn new() -> (Work<T>, Arc<Slot<T>>) {
        let slot = Arc::new(Slot {
            value: Mutex::new(None),
            done: Condvar::new(),
        });
        (Work { slot: slot.clone() }, slot)
    }

    /// A `Work` that is already done with `r` (an argument refused before anything ran).
    pub fn ready(r: Result<T>) -> Work<T> {
        let (work, slot) = Work::new();
        slot.complete(r);
        work
    }

    /// Blocks until the collective has finished; returns its buffer or its error.
    pub fn wait(self) -> Result<T> {
        let mut v = self.slot.value.lock().unwrap();
        loop {
            if let Some(r) = v.take() {
                return r;
            }
            v = self.slot.done.wait(v).unwrap();
        }
    }

    /// Whether the collective has finished (successfully or not).
    pub fn is_done(&self) -> bool {
        self.slot.value.lock().unwrap().is_some()
    }
}

impl<T> Slot<T> {
    pub(crate) fn complete(&self, r: Result<T>) {
        *self.value.lock().unwrap() = Some(r);
        self.done.notify_all();
    }
}
