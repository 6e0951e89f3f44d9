//! TCPStore semantics (REFERENCE.md), run against the TCP store, the in-memory store and the
//! etcd store (a real 3-member etcd cluster) with the same test bodies, so they cannot drift
//! apart.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::with_deadline;
use phalanx_store::{
    Auth, Claim, Error, EtcdStore, HashStore, PrefixStore, Store, StoreServer, TcpStore,
};
use phalanx_testing::etcd::EtcdCluster;

/// A store under test: something that hands out clients of one shared store.
trait Harness: Send + Sync + 'static {
    type Client: Store + 'static;
    fn new(timeout: Duration) -> Self;
    fn client(&self) -> Self::Client;
}

struct Tcp {
    server: StoreServer,
    auth: Auth,
    timeout: Duration,
}

impl Harness for Tcp {
    type Client = TcpStore;
    fn new(timeout: Duration) -> Self {
        let auth = Auth::random("semantics");
        let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
        Tcp {
            server,
            auth,
            timeout,
        }
    }
    fn client(&self) -> TcpStore {
        TcpStore::connect(
            &self.server.local_addr().to_string(),
            &self.auth,
            self.timeout,
        )
        .unwrap()
    }
}

struct Hash(HashStore);

impl Harness for Hash {
    type Client = HashStore;
    fn new(timeout: Duration) -> Self {
        Hash(HashStore::with_timeout(timeout))
    }
    fn client(&self) -> HashStore {
        self.0.clone()
    }
}

/// Each test's own job (prefix) in one cluster shared by the binary's tests: starting three
/// members per test would cost more than the tests.
struct Etcd {
    job: String,
    timeout: Duration,
}

static CLUSTER: std::sync::Mutex<Option<EtcdCluster>> = std::sync::Mutex::new(None);
static JOBS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn stop_cluster() {
    // The test harness ends with `exit`, which runs this: the members go, and their data.
    if let Ok(mut c) = CLUSTER.lock() {
        c.take();
    }
}

impl Harness for Etcd {
    type Client = EtcdStore;
    fn new(timeout: Duration) -> Self {
        let mut cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        if cluster.is_none() {
            *cluster = EtcdCluster::start("store_tcp", 3, Duration::from_secs(30));
            // SAFETY: registers a plain function; nothing else is passed.
            unsafe { libc::atexit(stop_cluster) };
        }
        let job = format!(
            "semantics-{}",
            JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        Etcd { job, timeout }
    }
    fn client(&self) -> EtcdStore {
        let cluster = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
        let s = cluster.as_ref().expect("started").store(&self.job);
        s.set_timeout(self.timeout);
        s
    }
}

const LONG: Duration = Duration::from_secs(10);

fn set_get_overwrite<H: Harness>() {
    let h = H::new(LONG);
    let s = h.client();
    s.set("k", b"one").unwrap();
    assert_eq!(s.get("k").unwrap(), b"one");
    s.set("k", b"two").unwrap();
    assert_eq!(s.get("k").unwrap(), b"two");
    s.set("empty", b"").unwrap();
    assert_eq!(s.get("empty").unwrap(), b"");
    let big = vec![0xAB; 3 * 1024 * 1024];
    s.set("big", &big).unwrap();
    assert_eq!(s.get("big").unwrap(), big);
    s.set("ключ/😀", b"unicode").unwrap();
    assert_eq!(s.get("ключ/😀").unwrap(), b"unicode");
}

fn get_blocks_until_set_by_another_client<H: Harness>() {
    let h = H::new(LONG);
    let (reader, writer) = (h.client(), h.client());
    let start = Instant::now();
    let t = std::thread::spawn(move || reader.get("late").unwrap());
    std::thread::sleep(Duration::from_millis(200));
    assert!(!t.is_finished(), "get returned before the key existed");
    writer.set("late", b"here").unwrap();
    assert_eq!(t.join().unwrap(), b"here");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

fn get_timeout_names_the_key<H: Harness>() {
    let h = H::new(Duration::from_millis(300));
    let s = h.client();
    let start = Instant::now();
    match s.get("never/set") {
        Err(Error::Timeout { key, after }) => {
            assert_eq!(key, "never/set");
            assert_eq!(after, Duration::from_millis(300));
            let e = s.get("never/set").unwrap_err().to_string();
            assert!(e.contains("never/set"), "{e}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // The connection is still usable after a timeout.
    s.set("after", b"ok").unwrap();
    assert_eq!(s.get("after").unwrap(), b"ok");
    // set_timeout changes the wait.
    s.set_timeout(Duration::from_millis(50));
    assert_eq!(s.timeout(), Duration::from_millis(50));
    let start = Instant::now();
    assert!(matches!(s.get("nope"), Err(Error::Timeout { .. })));
    assert!(start.elapsed() < Duration::from_millis(290));
}

fn add_counts_from_zero<H: Harness>() {
    let h = H::new(LONG);
    let s = h.client();
    assert_eq!(s.add("n", 1).unwrap(), 1);
    assert_eq!(s.add("n", 41).unwrap(), 42);
    assert_eq!(s.add("n", -50).unwrap(), -8);
    assert_eq!(s.get("n").unwrap(), b"-8");
    assert_eq!(s.add("zero", 0).unwrap(), 0);
    assert_eq!(s.get("zero").unwrap(), b"0");
    s.set("text", b"abc").unwrap();
    match s.add("text", 1) {
        Err(Error::Value { key, .. }) => assert_eq!(key, "text"),
        other => panic!("expected a value error, got {other:?}"),
    }
    s.set("decimal", b"17").unwrap();
    assert_eq!(s.add("decimal", 3).unwrap(), 20);
}

fn compare_set_four_cases<H: Harness>() {
    let h = H::new(LONG);
    let s = h.client();
    // Missing key, non-empty expected: returns expected, sets nothing.
    assert_eq!(s.compare_set("k", b"exp", b"des").unwrap(), b"exp");
    assert!(!s.check(&["k"]).unwrap());
    // Missing key, empty expected: sets desired.
    assert_eq!(s.compare_set("k", b"", b"first").unwrap(), b"first");
    assert_eq!(s.get("k").unwrap(), b"first");
    // Present and equal: sets desired.
    assert_eq!(s.compare_set("k", b"first", b"second").unwrap(), b"second");
    // Present and different: returns the current value unchanged.
    assert_eq!(s.compare_set("k", b"wrong", b"third").unwrap(), b"second");
    assert_eq!(s.compare_set("k", b"", b"third").unwrap(), b"second");
    assert_eq!(s.get("k").unwrap(), b"second");
}

fn wait_and_check<H: Harness>() {
    let h = H::new(LONG);
    let (s, other) = (h.client(), h.client());
    assert!(s.check(&[]).unwrap());
    s.wait(&[]).unwrap();
    assert!(!s.check(&["a"]).unwrap());
    s.set("a", b"1").unwrap();
    assert!(s.check(&["a"]).unwrap());
    assert!(!s.check(&["a", "b"]).unwrap());
    match s.wait_timeout(&["a", "b"], Duration::from_millis(100)) {
        Err(Error::Timeout { key, .. }) => assert_eq!(key, "b"),
        r => panic!("expected a timeout naming b, got {r:?}"),
    }
    let t = std::thread::spawn(move || other.wait(&["a", "c"]));
    std::thread::sleep(Duration::from_millis(100));
    s.set("c", b"3").unwrap();
    t.join().unwrap().unwrap();
}

fn delete_and_num_keys<H: Harness>() {
    let h = H::new(LONG);
    let s = h.client();
    assert_eq!(s.num_keys().unwrap(), 0);
    s.set("a", b"1").unwrap();
    s.add("b", 1).unwrap();
    assert_eq!(s.num_keys().unwrap(), 2);
    assert!(s.delete_key("a").unwrap());
    assert!(!s.delete_key("a").unwrap());
    assert_eq!(s.num_keys().unwrap(), 1);
    assert!(!s.check(&["a"]).unwrap());
}

fn append_concatenates<H: Harness>() {
    let h = H::new(LONG);
    let s = h.client();
    s.append("log", b"a").unwrap();
    s.append("log", b"bc").unwrap();
    assert_eq!(s.get("log").unwrap(), b"abc");
    s.set("log", b"x").unwrap();
    s.append("log", b"").unwrap();
    s.append("log", b"y").unwrap();
    assert_eq!(s.get("log").unwrap(), b"xy");
}

fn multi_get_and_set<H: Harness>() {
    let h = H::new(LONG);
    let (s, other) = (h.client(), h.client());
    s.multi_set(&["a", "b", "c"], &[b"1", b"", b"333"]).unwrap();
    assert_eq!(
        s.multi_get(&["c", "a", "b"]).unwrap(),
        vec![b"333".to_vec(), b"1".to_vec(), b"".to_vec()]
    );
    assert_eq!(s.multi_get(&[]).unwrap(), Vec::<Vec<u8>>::new());
    assert!(matches!(
        s.multi_set(&["a"], &[]),
        Err(Error::Invalid { .. })
    ));
    // multi_get blocks until every key exists.
    let t = std::thread::spawn(move || other.multi_get(&["a", "later"]));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!t.is_finished());
    s.set("later", b"L").unwrap();
    assert_eq!(
        t.join().unwrap().unwrap(),
        vec![b"1".to_vec(), b"L".to_vec()]
    );
    s.set_timeout(Duration::from_millis(100));
    match s.multi_get(&["a", "missing"]) {
        Err(Error::Timeout { key, .. }) => assert_eq!(key, "missing"),
        r => panic!("{r:?}"),
    }
}

fn prefix_store_namespaces<H: Harness>() {
    let h = H::new(Duration::from_millis(100));
    let base = Arc::new(h.client());
    let p = PrefixStore::new("round1", base.clone());
    p.set("addr", b"x").unwrap();
    assert_eq!(base.get("round1/addr").unwrap(), b"x");
    assert_eq!(p.add("count", 2).unwrap(), 2);
    // A peek may be a moment behind the newest write (etcd's serializable read, from a member
    // that has not applied it yet: Note [A poll reads serializably]), never wrong.
    let seen = |s: &dyn Store, key: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            match s.peek(key).unwrap() {
                None if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                v => return v,
            }
        }
    };
    assert_eq!(seen(&p, "count"), Some(b"2".to_vec()));
    assert_eq!(seen(&*base, "round1/count"), Some(b"2".to_vec()));
    assert_eq!(p.peek("absent").unwrap(), None);
    assert!(p.check(&["addr", "count"]).unwrap());
    assert!(!base.check(&["addr"]).unwrap());
    p.multi_set(&["m"], &[b"v"]).unwrap();
    assert_eq!(
        p.multi_get(&["m", "addr"]).unwrap(),
        vec![b"v".to_vec(), b"x".to_vec()]
    );
    match p.get("absent") {
        Err(Error::Timeout { key, .. }) => assert_eq!(key, "absent"),
        r => panic!("{r:?}"),
    }
    let nested = PrefixStore::new("sub", &p);
    nested.set("k", b"n").unwrap();
    assert_eq!(base.get("round1/sub/k").unwrap(), b"n");
    assert!(p.delete_key("addr").unwrap());
    assert_eq!(p.compare_set("cas", b"", b"1").unwrap(), b"1");
}

fn concurrent_adds_are_atomic<H: Harness>() {
    let h = H::new(LONG);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let c = h.client();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    c.add("counter", 1).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(h.client().get("counter").unwrap(), b"800");
}

/// `set_then_get` and `claim_then_get`: one round trip on the TCP store (Note [Two requests in
/// one round trip]), a set or claim and a get elsewhere; the same answers everywhere.
fn set_or_claim_then_get<H: Harness>() {
    let h = H::new(LONG);
    let (a, b, writer) = (h.client(), h.client(), h.client());
    let w = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        writer.set("answer", b"42").unwrap();
    });
    assert_eq!(a.set_then_get("mine", b"1", "answer", LONG).unwrap(), b"42");
    w.join().unwrap();
    assert_eq!(a.get("mine").unwrap(), b"1");
    assert_eq!(
        a.claim_then_get("slot", b"a", "answer", LONG).unwrap(),
        Claim::Held(b"42".to_vec())
    );
    // A claim another writer holds comes back at once with its value, nothing awaited.
    let start = Instant::now();
    assert_eq!(
        b.claim_then_get("slot", b"b", "never/set", LONG).unwrap(),
        Claim::Taken(b"a".to_vec())
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // The client still works afterwards, and a timeout names the awaited key, unprefixed.
    b.set("after", b"ok").unwrap();
    assert_eq!(b.get("after").unwrap(), b"ok");
    let p = PrefixStore::new("job", b);
    let t = Duration::from_millis(300);
    match p.claim_then_get("k", b"v", "missing", t) {
        Err(Error::Timeout { key, .. }) => assert_eq!(key, "missing"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    match p.set_then_get("k2", b"v", "missing", t) {
        Err(Error::Timeout { key, .. }) => assert_eq!(key, "missing"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(p.get("k").unwrap(), b"v");
}

/// Note [Waiting on the first missing key]: a wait for many keys ends when all are there at
/// once, whatever order they come in, and a key that goes away again is waited for anew.
fn a_wait_for_many_keys_sees_every_arrival_and_departure<H: Harness>() {
    let h = H::new(LONG);
    let (waiter, writer) = (h.client(), h.client());
    let t = std::thread::spawn(move || waiter.wait(&["k/a", "k/b", "k/c"]).unwrap());
    let settle = || std::thread::sleep(Duration::from_millis(100));
    settle();
    writer.set("k/c", b"").unwrap();
    writer.set("k/a", b"").unwrap();
    settle();
    assert!(writer.delete_key("k/a").unwrap());
    writer.set("k/b", b"").unwrap();
    settle();
    assert!(!t.is_finished(), "the wait ended with k/a gone");
    writer.set("k/a", b"").unwrap();
    t.join().unwrap();
}

mod waits {
    #[test]
    fn tcp() {
        super::with_deadline(
            30,
            super::a_wait_for_many_keys_sees_every_arrival_and_departure::<super::Tcp>,
        )
    }
    #[test]
    fn hash() {
        super::with_deadline(
            30,
            super::a_wait_for_many_keys_sees_every_arrival_and_departure::<super::Hash>,
        )
    }
}

macro_rules! semantics {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $(#[test] fn $name() { super::with_deadline(30, super::$name::<super::Tcp>) })*
        }
        mod hash {
            $(#[test] fn $name() { super::with_deadline(30, super::$name::<super::Hash>) })*
        }
        mod etcd {
            $(#[test] fn $name() {
                if phalanx_testing::etcd::etcd_binary(stringify!($name)).is_some() {
                    super::with_deadline(60, super::$name::<super::Etcd>)
                }
            })*
        }
    };
}

semantics!(
    set_get_overwrite,
    get_blocks_until_set_by_another_client,
    get_timeout_names_the_key,
    add_counts_from_zero,
    compare_set_four_cases,
    wait_and_check,
    delete_and_num_keys,
    append_concatenates,
    multi_get_and_set,
    prefix_store_namespaces,
    concurrent_adds_are_atomic,
    set_or_claim_then_get,
);

/// A server may be dropped inside async code (tokio refuses to wait for a runtime's threads
/// there, so the server stops its event loop from a thread of its own).
#[test]
fn a_server_dropped_inside_async_code_stops() {
    with_deadline(30, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let auth = Auth::random("async-drop");
            let server = StoreServer::bind("127.0.0.1:0".parse().unwrap(), auth.clone()).unwrap();
            let client = TcpStore::connect(
                &server.local_addr().to_string(),
                &auth,
                Duration::from_secs(10),
            )
            .unwrap();
            client.set("k", b"v").unwrap();
            drop(server);
            assert!(client.get("k").is_err(), "a stopped server must not answer");
        });
    });
}
