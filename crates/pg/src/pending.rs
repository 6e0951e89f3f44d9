//! [`Pending`]: how many collectives are queued on the worker thread.

use std::sync::{Condvar, Mutex};

/// Count of queued collectives, with a wait for "none left".
#[derive(Default)]
pub(crate) struct Pending {
    count: Mutex<usize>,
    idle: Condvar,
}

impl Pending {
    pub(crate) fn add(&self) {
        *self.count.lock().unwrap() += 1;
    }

    pub(crate) fn done(&self) {
        let mut c = self.count.lock().unwrap();
        *c -= 1;
        if *c == 0 {
            self.idle.notify_all();
        }
    }

    pub(crate) fn wait_idle(&self) {
        let mut c = self.count.lock().unwrap();
        while *c > 0 {
            c = self.idle.wait(c).unwrap();
        }
    }
}
