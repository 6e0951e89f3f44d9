//! `WatchedStore`: a view of another store whose blocking calls also stop when a watch says
//! that what they wait for will not come (a process group forming under fault tolerance, whose
//! membership moved on: Note [FT generations] in phalanx-pg).
//!
//! Note [Watched waits]: a blocking call (`get`, `wait`, the waiting half of `set_then_get`
//! and `claim_then_get`, `multi_get`) waits in slices of at most `slice`. Between slices the
//! watch runs; when it returns a reason, the call fails with [`Error::Abandoned`] naming the
//! key and the reason, instead of waiting out its timeout. A call that ends within its first
//! slice costs what it costs on the inner store (`set_then_get` and `claim_then_get` their one
//! round trip; `multi_get` one more request, its wait); a longer one costs one more request
//! per slice and whatever the watch reads. Once [`WatchedStore::disarm`] is called, every call goes to
//! the inner store unchanged (its single round trips included): the watch is for a phase, such
//! as a bootstrap, not for the store's whole life.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{Claim, Error, Result, Store};

/// What a [`WatchedStore`] asks between slices: `Some(reason)` when the wait is moot.
pub type Watch = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// A view of `inner` whose blocking calls give up early when `watch` says so (Note [Watched
/// waits]).
///
/// ```
/// use std::time::Duration;
/// use phalanx_store::{Error, HashStore, Store, WatchedStore};
/// let base = HashStore::new();
/// let watched = WatchedStore::new(
///     base.clone(),
///     Duration::from_millis(10),
///     Box::new(|| Some("the membership moved on".to_string())),
/// );
/// let e = watched.get_timeout("never", Duration::from_secs(60)).unwrap_err();
/// assert!(matches!(e, Error::Abandoned { ref key, .. } if key == "never"), "{e}");
/// watched.disarm();
/// base.set("now", b"1").unwrap();
/// assert_eq!(watched.get("now").unwrap(), b"1");
/// ```
pub struct WatchedStore<S: Store> {
    inner: S,
    slice: Duration,
    watch: Watch,
    armed: AtomicBool,
}

impl<S: Store> std::fmt::Debug for WatchedStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchedStore")
            .field("slice", &self.slice)
            .field("armed", &self.armed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<S: Store> WatchedStore<S> {
    /// A view of `inner` whose waits run `watch` every `slice` (at least 1 ms).
    pub fn new(inner: S, slice: Duration, watch: Watch) -> Self {
        WatchedStore {
            inner,
            slice: slice.max(Duration::from_millis(1)),
            watch,
            armed: AtomicBool::new(true),
        }
    }

    /// From now on every call goes to the inner store unchanged.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    /// The watch's reason while armed, asked now: what this store's waits ask between slices,
    /// and what a wait that is not the store's (the mesh's connections, Note [A watched mesh]
    /// in phalanx-transport) asks between its own.
    pub fn moot(&self) -> Option<String> {
        if !self.armed() {
            return None;
        }
        (self.watch)()
    }

    fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Runs `call` with slices of `timeout` until it ends otherwise than by a timeout inside
    /// `timeout`, the watch gives a reason, or `timeout` has passed. A wait that began armed
    /// and is still waiting when the store is disarmed (a thread the group started while it
    /// formed) waits out the rest in one call, unwatched: the watch is about the forming.
    fn sliced<T>(
        &self,
        timeout: Duration,
        mut call: impl FnMut(Duration) -> Result<T>,
    ) -> Result<T> {
        if !self.armed() {
            return call(timeout);
        }
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let armed = self.armed();
            let slice = if armed { left.min(self.slice) } else { left };
            match call(slice) {
                // Disarmed meanwhile: no reason, and the next call waits out the rest.
                Err(Error::Timeout { key, .. }) if slice < left => {
                    if let Some(reason) = self.moot() {
                        return Err(Error::Abandoned { key, reason });
                    }
                }
                // The whole timeout has passed: say so, not the last slice.
                Err(Error::Timeout { key, .. }) => {
                    return Err(Error::Timeout {
                        key,
                        after: start.elapsed(),
                    })
                }
                other => return other,
            }
        }
    }

    /// A set or a claim and a wait for `then` (`first`, given the time it may wait): its first
    /// slice is one call to the inner store, in one round trip where its protocol allows;
    /// when that slice passes, the rest of the wait is a sliced `get` of `then`, whose value
    /// `held` turns into the answer.
    fn first_slice_then_get<T>(
        &self,
        then: &str,
        t: Duration,
        held: impl FnOnce(Vec<u8>) -> Result<T>,
        first: impl FnOnce(Duration) -> Result<T>,
    ) -> Result<T> {
        let start = Instant::now();
        let slice = t.min(self.slice);
        match first(slice) {
            Err(Error::Timeout { key, .. }) if slice < t => {
                if let Some(reason) = self.moot() {
                    return Err(Error::Abandoned { key, reason });
                }
                held(self.get_timeout(then, t.saturating_sub(start.elapsed()))?)
            }
            other => other,
        }
    }
}

impl<S: Store> Store for WatchedStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(key, value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        if !self.armed() {
            return self.inner.get(key);
        }
        self.get_timeout(key, self.inner.timeout())
    }
    fn get_timeout(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.sliced(timeout, |t| self.inner.get_timeout(key, t))
    }
    fn set_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Vec<u8>> {
        if !self.armed() {
            return self.inner.set_then_get(key, value, then, t);
        }
        self.first_slice_then_get(then, t, Ok, |s| {
            self.inner.set_then_get(key, value, then, s)
        })
    }
    fn claim_then_get(&self, key: &str, value: &[u8], then: &str, t: Duration) -> Result<Claim> {
        if !self.armed() {
            return self.inner.claim_then_get(key, value, then, t);
        }
        // A claim another writer holds comes back at once, never as a timeout: a timeout
        // means this call holds it, and only the wait goes on.
        self.first_slice_then_get(
            then,
            t,
            |v| Ok(Claim::Held(v)),
            |s| self.inner.claim_then_get(key, value, then, s),
        )
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.add(key, delta)
    }
    fn peek(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.peek(key)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        self.inner.compare_set(key, expected, desired)
    }
    fn wait_timeout(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.sliced(timeout, |t| self.inner.wait_timeout(keys, t))
    }
    fn check(&self, keys: &[&str]) -> Result<bool> {
        self.inner.check(keys)
    }
    fn delete_key(&self, key: &str) -> Result<bool> {
        self.inner.delete_key(key)
    }
    fn num_keys(&self) -> Result<i64> {
        self.inner.num_keys()
    }
    fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.append(key, value)
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        // The inner call waits with the store's own timeout: watched, the wait comes first
        // (one more request; the bootstrap only reads keys it waited for).
        if self.armed() {
            self.wait_timeout(keys, self.inner.timeout())?;
        }
        self.inner.multi_get(keys)
    }
    fn multi_set(&self, keys: &[&str], values: &[&[u8]]) -> Result<()> {
        self.inner.multi_set(keys, values)
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn set_timeout(&self, t: Duration) {
        self.inner.set_timeout(t)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    use super::*;
    use crate::HashStore;

    fn watched(after: usize) -> (HashStore, WatchedStore<HashStore>, Arc<AtomicUsize>) {
        let base = HashStore::new();
        let asked = Arc::new(AtomicUsize::new(0));
        let n = asked.clone();
        let store = WatchedStore::new(
            base.clone(),
            Duration::from_millis(20),
            Box::new(move || {
                (n.fetch_add(1, Ordering::SeqCst) + 1 >= after).then(|| "moved on".to_string())
            }),
        );
        (base, store, asked)
    }

    #[test]
    fn a_wait_stops_when_the_watch_says_so_and_names_the_key() {
        let (_, store, asked) = watched(3);
        let start = Instant::now();
        let e = store
            .wait_timeout(&["a", "b"], Duration::from_secs(60))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Abandoned { key, reason } if key == "a" && reason == "moved on"),
            "{e}"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_key_that_comes_ends_the_wait_and_a_quiet_watch_lets_the_timeout_pass() {
        let (base, store, _) = watched(usize::MAX);
        let setter = {
            let base = base.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(70));
                base.set("late", b"v").unwrap();
            })
        };
        assert_eq!(
            store.get_timeout("late", Duration::from_secs(60)).unwrap(),
            b"v"
        );
        setter.join().unwrap();
        let e = store
            .get_timeout("never", Duration::from_millis(90))
            .unwrap_err();
        match e {
            Error::Timeout { key, after } => {
                assert_eq!(key, "never");
                assert!(after >= Duration::from_millis(90), "{after:?}");
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_claim_is_made_once_and_its_wait_is_watched() {
        let (base, store, _) = watched(2);
        let e = store
            .claim_then_get("mine", b"1", "table", Duration::from_secs(60))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Abandoned { key, .. } if key == "table"),
            "{e}"
        );
        assert_eq!(base.get("mine").unwrap(), b"1");
        // Another writer's claim is found without waiting.
        assert_eq!(
            store
                .claim_then_get("mine", b"2", "table", Duration::from_secs(60))
                .unwrap(),
            Claim::Taken(b"1".to_vec())
        );
        let e = store
            .set_then_get("vote", b"1", "outcome", Duration::from_secs(60))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Abandoned { key, .. } if key == "outcome"),
            "{e}"
        );
        assert_eq!(base.get("vote").unwrap(), b"1");
    }

    #[test]
    fn a_wait_still_running_when_disarmed_is_no_longer_watched() {
        let (base, store, asked) = watched(2);
        let store = Arc::new(store);
        let waiter = {
            let store = store.clone();
            std::thread::spawn(move || store.get_timeout("late", Duration::from_secs(60)))
        };
        // Disarmed inside the waiter's first slice; the watch would stop it at its second.
        std::thread::sleep(Duration::from_millis(5));
        store.disarm();
        std::thread::sleep(Duration::from_millis(100));
        base.set("late", b"v").unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), b"v");
        assert_eq!(asked.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn disarmed_it_is_the_inner_store() {
        let (base, store, asked) = watched(1);
        store.disarm();
        let e = store
            .get_timeout("never", Duration::from_millis(50))
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert_eq!(asked.load(Ordering::SeqCst), 0);
        base.set("k", b"v").unwrap();
        assert_eq!(store.multi_get(&["k"]).unwrap(), vec![b"v".to_vec()]);
    }
}
