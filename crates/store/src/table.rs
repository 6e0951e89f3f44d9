//! The key-value table behind both the TCP server and [`crate::HashStore`], so the two have the
//! same semantics by construction.
//!
//! Lock order: one mutex (`state`), held only for in-memory work, never across I/O.
//! Each waiter sleeps on its own (a thread on a condvar, a task of the server's event loop on a
//! `Notify`), registered under the first key it still misses; a mutation wakes the waiters of
//! that key only, so the counter churn of a rendezvous (`add` by every rank) wakes nobody, and
//! the N arrivals that rank 0 waits for do not each wake the N ranks waiting for the table
//! (one condvar for all cost N² wake-ups under the lock).
//!
//! Note [Waiting on the first missing key]
//! A wait for many keys (rank 0 waits for every rank's) ends only once all are there, so it
//! need not wake until the first one it misses arrives: it is registered under that key alone,
//! and on waking looks on from there and moves to the next one missing. Registered under every
//! key, rank 0's wait woke for each of the 16,384 arrivals and took the table's
//! lock each time, against every other connection wanting it. A key that goes away again
//! (deleted, a queue popped) is still seen: each look runs to the end and then from the start.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::wire::MAX_VALUE_LEN;
use crate::{Error, Result};

/// Why a wait ended without all its keys.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitError {
    /// The deadline passed; the first missing key.
    Timeout(String),
    /// The caller's cancel check fired (peer gone, server shutting down).
    Cancelled,
}

#[derive(Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    /// The sleeping waiters of each watched key, by [`Waiter::id`] (a waiter leaves in O(1):
    /// 16,384 waiters of one key leaving one by one from a list cost 134 million comparisons
    /// under the lock).
    watched: HashMap<String, HashMap<usize, Waiter>>,
    /// PyTorch's queues (`queue_push`/`queue_pop`), kept apart from the keys as PyTorch does.
    queues: HashMap<String, VecDeque<Vec<u8>>>,
}

impl State {
    /// PyTorch's readiness for `check`/`wait`: the key exists or names a non-empty queue.
    fn present_or_queued(&self, key: &str) -> bool {
        self.map.contains_key(key) || self.queues.get(key).is_some_and(|q| !q.is_empty())
    }
}

/// The shared table.
#[derive(Default)]
pub(crate) struct Table {
    state: Mutex<State>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map half-updated (every mutation is
        // a single insert/remove), so poisoning is safe to ignore.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the lock, then wakes the waiters of `keys`. Waking outside the lock is safe (a
    /// waiter registers and checks under the lock, and sleeps atomically with releasing it)
    /// and keeps the woken from queueing on a lock their waker still holds: 16,384 waiters of
    /// one key woken under it made a convoy that left the CPUs idle.
    fn release_and_notify(&self, st: MutexGuard<'_, State>, keys: &[&str]) {
        let woken: Vec<Waiter> = keys
            .iter()
            .flat_map(|k| st.watched.get(*k).into_iter().flat_map(|w| w.values()))
            .cloned()
            .collect();
        drop(st);
        for waiter in woken {
            waiter.wake();
        }
    }

    /// Wakes every waiter so it re-runs its cancel check (used at shutdown).
    pub(crate) fn wake_all(&self) {
        let st = self.lock();
        for waiter in st.watched.values().flat_map(|w| w.values()) {
            waiter.wake();
        }
    }

    pub(crate) fn set(&self, key: &str, value: &[u8]) {
        let mut st = self.lock();
        st.map.insert(key.to_string(), value.to_vec());
        self.release_and_notify(st, &[key]);
    }

    pub(crate) fn multi_set(&self, pairs: &[(&str, &[u8])]) {
        let mut st = self.lock();
        for (k, v) in pairs {
            st.map.insert((*k).to_string(), v.to_vec());
        }
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        self.release_and_notify(st, &keys);
    }

    pub(crate) fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut st = self.lock();
        let new = added(key, st.map.get(key).map(Vec::as_slice), delta)?;
        st.map.insert(key.to_string(), new.to_string().into_bytes());
        self.release_and_notify(st, &[key]);
        Ok(new)
    }

    /// TCPStore's four cases (REFERENCE.md).
    pub(crate) fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Vec<u8> {
        let mut st = self.lock();
        let swap = match st.map.get(key) {
            None => expected.is_empty(),
            Some(current) => current.as_slice() == expected,
        };
        if !swap {
            // PyTorch returns `expected` for a missing key here without setting anything ("the
            // lie"), and the current value when it differs.
            return st
                .map
                .get(key)
                .map_or_else(|| expected.to_vec(), Vec::clone);
        }
        st.map.insert(key.to_string(), desired.to_vec());
        self.release_and_notify(st, &[key]);
        desired.to_vec()
    }

    pub(crate) fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut st = self.lock();
        let entry = st.map.entry(key.to_string()).or_default();
        if entry.len() + value.len() > MAX_VALUE_LEN {
            return Err(Error::Value {
                key: key.to_string(),
                reason: format!("append would grow the value past the {MAX_VALUE_LEN}-byte limit"),
            });
        }
        entry.extend_from_slice(value);
        self.release_and_notify(st, &[key]);
        Ok(())
    }

    pub(crate) fn check(&self, keys: &[&str]) -> bool {
        let st = self.lock();
        keys.iter().all(|k| st.map.contains_key(*k))
    }

    /// [`Table::check`] with PyTorch's queues counted ([`State::present_or_queued`]).
    pub(crate) fn check_or_queued(&self, keys: &[&str]) -> bool {
        let st = self.lock();
        keys.iter().all(|k| st.present_or_queued(k))
    }

    /// The value of `key` now, without waiting.
    pub(crate) fn get_now(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }

    /// Every key (not the queues), in no particular order.
    pub(crate) fn list_keys(&self) -> Vec<String> {
        self.lock().map.keys().cloned().collect()
    }

    /// Appends to queue `key` and wakes its waiters.
    pub(crate) fn queue_push(&self, key: &str, value: &[u8]) {
        let mut st = self.lock();
        st.queues
            .entry(key.to_string())
            .or_default()
            .push_back(value.to_vec());
        self.release_and_notify(st, &[key]);
    }

    /// The queue's length before the pop, and its head if it had one.
    pub(crate) fn queue_pop(&self, key: &str) -> (i64, Option<Vec<u8>>) {
        let mut st = self.lock();
        match st.queues.get_mut(key) {
            Some(q) => (q.len() as i64, q.pop_front()),
            None => (0, None),
        }
    }

    pub(crate) fn queue_len(&self, key: &str) -> i64 {
        self.lock().queues.get(key).map_or(0, |q| q.len() as i64)
    }

    pub(crate) fn delete(&self, key: &str) -> bool {
        self.lock().map.remove(key).is_some()
    }

    pub(crate) fn num_keys(&self) -> i64 {
        self.lock().map.len() as i64
    }

    /// Blocks until every key exists, then returns their values (in order).
    ///
    /// `cancel` is consulted every `check_every` (and whenever the table changes); `None`
    /// sleeps straight to the deadline. No busy polling: between checks the thread sleeps on
    /// the condvar.
    pub(crate) fn wait_get(
        &self,
        keys: &[&str],
        timeout: Duration,
        check_every: Option<Duration>,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<Vec<Vec<u8>>, WaitError> {
        let ready = |st: &State, k: &str| st.map.contains_key(k);
        self.wait_until(keys, timeout, check_every, cancel, &ready, |st| {
            keys.iter().map(|k| st.map[*k].clone()).collect()
        })
    }

    /// PyTorch's `wait`: until every key exists or names a non-empty queue.
    pub(crate) fn wait_present_or_queued(
        &self,
        keys: &[&str],
        check_every: Duration,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<(), WaitError> {
        let ready = |st: &State, k: &str| st.present_or_queued(k);
        self.wait_until(
            keys,
            Duration::MAX,
            Some(check_every),
            cancel,
            &ready,
            |_| (),
        )
    }

    /// Until the decimal counter `key` (see [`Table::add`]) reaches `target`.
    pub(crate) fn wait_count(
        &self,
        key: &str,
        target: i64,
        check_every: Duration,
        cancel: &mut dyn FnMut() -> bool,
    ) -> Result<(), WaitError> {
        let ready = |st: &State, k: &str| {
            st.map
                .get(k)
                .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
                .is_some_and(|n| n >= target)
        };
        self.wait_until(
            &[key],
            Duration::MAX,
            Some(check_every),
            cancel,
            &ready,
            |_| (),
        )
    }

    /// [`Table::wait_get`] for a task of the server's event loop: no thread sleeps, the task is
    /// parked under the first key it misses until a set wakes it, the deadline passes, or
    /// `gone` completes (its client hung up), which ends the wait as cancelled. A wait whose
    /// task is dropped (the server stopping) leaves the table as it found it.
    pub(crate) async fn wait_get_parked(
        &self,
        keys: &[&str],
        timeout: Duration,
        gone: impl Future<Output = ()>,
    ) -> Result<Vec<Vec<u8>>, WaitError> {
        let ready = |st: &State, k: &str| st.map.contains_key(k);
        let me = Arc::new(Notify::new());
        let mut watch = Parked {
            table: self,
            watch: Watch::new(keys, Waiter::Task(me.clone())),
        };
        // A timeout past what `Instant` holds is no timeout.
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(gone, sleep);
        let mut expired = false;
        loop {
            {
                let mut st = self.lock();
                match watch.watch.first_missing(&st, &ready) {
                    None => {
                        watch.watch.leave(&mut st);
                        return Ok(keys.iter().map(|k| st.map[*k].clone()).collect());
                    }
                    Some(_) if expired => {
                        let key = watch.watch.culprit(&st, &ready);
                        watch.watch.leave(&mut st);
                        return Err(WaitError::Timeout(key));
                    }
                    Some(at) => watch.watch.register(&mut st, at),
                }
            }
            // A wake-up between the lock's release and this await is kept by `Notify` as a
            // permit, so none is lost.
            tokio::select! {
                () = me.notified() => {}
                () = &mut sleep, if !expired => expired = true,
                () = &mut gone => return Err(WaitError::Cancelled),
            }
        }
    }

    /// The one blocking wait loop: sleeps on a condvar, watching `keys`, until `ready` holds
    /// for all of them, the timeout passes or `cancel` fires; then `then` reads the state under
    /// the same lock.
    fn wait_until<T>(
        &self,
        keys: &[&str],
        timeout: Duration,
        check_every: Option<Duration>,
        cancel: &mut dyn FnMut() -> bool,
        ready: &dyn Fn(&State, &str) -> bool,
        then: impl FnOnce(&State) -> T,
    ) -> Result<T, WaitError> {
        let start = Instant::now();
        let mut st = self.lock();
        let me = Arc::new(Condvar::new());
        let mut watch = Watch::new(keys, Waiter::Thread(me.clone()));
        // When `cancel` last ran: it may make system calls, so it runs outside the lock and at
        // most every `check_every`, however often the table wakes this waiter.
        let mut checked: Option<Instant> = None;
        let result = loop {
            let Some(at) = watch.first_missing(&st, ready) else {
                break Ok(then(&st));
            };
            let left = match timeout.checked_sub(start.elapsed()) {
                Some(d) if !d.is_zero() => d,
                _ => break Err(WaitError::Timeout(watch.culprit(&st, ready))),
            };
            let due = match (checked, check_every) {
                (None, _) => true,
                (Some(t), Some(every)) => t.elapsed() >= every,
                (Some(_), None) => false,
            };
            if due {
                checked = Some(Instant::now());
                drop(st);
                let stop = cancel();
                st = self.lock();
                if stop {
                    break Err(WaitError::Cancelled);
                }
                continue; // the table may have changed meanwhile
            }
            watch.register(&mut st, at);
            let slice = check_every.map_or(left, |c| c.min(left));
            st = me
                .wait_timeout(st, slice)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        watch.leave(&mut st);
        result
    }
}

/// A sleeping waiter: a thread on its condvar, or a task of the server's event loop.
#[derive(Clone)]
enum Waiter {
    Thread(Arc<Condvar>),
    Task(Arc<Notify>),
}

impl Waiter {
    /// Its name in a key's waiter list: the address it sleeps on.
    fn id(&self) -> usize {
        match self {
            Waiter::Thread(c) => Arc::as_ptr(c) as usize,
            Waiter::Task(n) => Arc::as_ptr(n) as usize,
        }
    }

    fn wake(&self) {
        match self {
            Waiter::Thread(c) => c.notify_one(),
            Waiter::Task(n) => n.notify_one(),
        }
    }
}

/// One wait's place in the table: the key it is registered under, and where its last look
/// stopped (Note [Waiting on the first missing key]).
struct Watch<'k> {
    keys: &'k [&'k str],
    me: Waiter,
    /// The index of the one key this waiter is registered under: the first one missing.
    registered: Option<usize>,
    /// Where the last look found a key missing: keys arrive roughly in order (rank 0 waits for
    /// every rank's), so each look goes on from there instead of from the first key.
    from: usize,
}

impl<'k> Watch<'k> {
    fn new(keys: &'k [&'k str], me: Waiter) -> Self {
        Watch {
            keys,
            me,
            registered: None,
            from: 0,
        }
    }

    /// The first key not `ready`, from where the last look stopped to the end, then (once
    /// those are all there) from the start: the wait ends only on a look that found every key.
    fn first_missing(&mut self, st: &State, ready: &dyn Fn(&State, &str) -> bool) -> Option<usize> {
        let keys = self.keys;
        let from = self.from;
        let at = keys[from..]
            .iter()
            .position(|k| !ready(st, k))
            .map(|i| from + i)
            .or_else(|| keys[..from].iter().position(|k| !ready(st, k)))?;
        self.from = at;
        Some(at)
    }

    /// The key a timeout names: the first one still missing, from the start (usually the
    /// culprit, the lowest rank not yet arrived).
    fn culprit(&self, st: &State, ready: &dyn Fn(&State, &str) -> bool) -> String {
        let at = self.keys.iter().position(|k| !ready(st, k));
        self.keys[at.unwrap_or(self.from)].to_string()
    }

    /// Registers under key `at`, leaving the key it was registered under.
    fn register(&mut self, st: &mut State, at: usize) {
        if self.registered == Some(at) {
            return;
        }
        self.leave(st);
        let waiters = st.watched.entry(self.keys[at].to_string()).or_default();
        waiters.insert(self.me.id(), self.me.clone());
        self.registered = Some(at);
    }

    /// Takes this waiter off the list of the key it is registered under.
    fn leave(&mut self, st: &mut State) {
        let Some(at) = self.registered.take() else {
            return;
        };
        let key = self.keys[at];
        if let Some(waiters) = st.watched.get_mut(key) {
            waiters.remove(&self.me.id());
            if waiters.is_empty() {
                st.watched.remove(key);
            }
        }
    }
}

/// A parked task's [`Watch`], which leaves the table when the task is dropped mid-wait.
struct Parked<'t, 'k> {
    table: &'t Table,
    watch: Watch<'k>,
}

impl Drop for Parked<'_, '_> {
    fn drop(&mut self) {
        if self.watch.registered.is_some() {
            self.watch.leave(&mut self.table.lock());
        }
    }
}

/// `add`'s arithmetic, shared by every store: `current` (a decimal int64, absent: 0) plus
/// `delta`, refused when `current` is not a number or the sum overflows.
pub(crate) fn added(key: &str, current: Option<&[u8]>, delta: i64) -> Result<i64> {
    let current = match current {
        None => 0,
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| Error::Value {
                key: key.to_string(),
                reason: format!(
                    "add needs a decimal int64 value, found {} bytes that are not one",
                    v.len()
                ),
            })?,
    };
    current.checked_add(delta).ok_or_else(|| Error::Value {
        key: key.to_string(),
        reason: format!("add of {delta} to {current} overflows int64"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_set_four_cases() {
        let t = Table::default();
        assert_eq!(t.compare_set("k", b"x", b"y"), b"x");
        assert!(!t.check(&["k"]));
        assert_eq!(t.compare_set("k", b"", b"a"), b"a");
        assert_eq!(t.compare_set("k", b"a", b"b"), b"b");
        assert_eq!(t.compare_set("k", b"zz", b"c"), b"b");
    }

    #[test]
    fn add_parses_and_refuses() {
        let t = Table::default();
        assert_eq!(t.add("n", 5).unwrap(), 5);
        assert_eq!(t.add("n", -7).unwrap(), -2);
        t.set("s", b"hello");
        assert!(matches!(t.add("s", 1), Err(Error::Value { key, .. }) if key == "s"));
        t.set("m", i64::MAX.to_string().as_bytes());
        assert!(t.add("m", 1).is_err());
    }

    #[test]
    fn wait_times_out_naming_key_and_unregisters() {
        let t = Table::default();
        t.set("a", b"1");
        let r = t.wait_get(&["a", "b"], Duration::from_millis(20), None, &mut || false);
        assert_eq!(r, Err(WaitError::Timeout("b".into())));
        assert!(t.lock().watched.is_empty());
    }

    /// A wait on many keys goes on from where its last look stopped, and ends only on a look
    /// that found every key, whatever order they came in.
    #[test]
    fn a_wait_on_many_keys_ends_when_every_key_is_there() {
        let t = Arc::new(Table::default());
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        let waiter = {
            let (t, keys) = (t.clone(), keys.clone());
            std::thread::spawn(move || {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                t.wait_get(&keys, Duration::from_secs(20), None, &mut || false)
            })
        };
        // The later half first, then the earlier one: a look that stopped late must go back.
        for (i, k) in keys[100..].iter().chain(&keys[..100]).enumerate() {
            t.set(k, i.to_string().as_bytes());
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let values = waiter.join().unwrap().unwrap();
        assert_eq!(values.len(), 200);
        assert_eq!(values[0], b"100");
        assert_eq!(values[199], b"99");
        assert!(t.lock().watched.is_empty());
    }

    #[test]
    fn cancel_stops_wait() {
        let t = Table::default();
        let r = t.wait_get(
            &["x"],
            Duration::from_secs(30),
            Some(Duration::from_millis(5)),
            &mut || true,
        );
        assert_eq!(r, Err(WaitError::Cancelled));
    }
}
