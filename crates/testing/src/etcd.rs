//! Real etcd clusters in tests: `etcd` members on loopback, or one in each of a test's network
//! namespace hosts ([`EtcdCluster::start_in`]), each a process of its own with its data in a
//! temporary folder, killed when the cluster is dropped and, should the test
//! process die first, by the kernel (`PR_SET_PDEATHSIG`, armed from a thread that lives as long
//! as the process).
//!
//! Debian's `etcd-server` (3.4) speaks the same v3 API as 3.5 and 3.6; `.ci/run` installs it.
#![allow(missing_docs)]

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use phalanx_store::{EtcdOptions, EtcdStore, Store};

use crate::process::{free_port, say, TempDir};

/// One member of a cluster.
pub struct Member {
    pub name: String,
    /// The address it listens on: 127.0.0.1, or its host's in a network namespace.
    pub ip: String,
    /// The network namespace it runs in (`ip netns exec`), if any.
    pub netns: Option<String>,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
}

/// A running cluster; every member is killed (SIGKILL) and its data removed on drop.
pub struct EtcdCluster {
    pub members: Vec<Member>,
    dir: TempDir,
    /// Clients must speak TLS and show a certificate ([`EtcdCluster::start_tls`]).
    tls: Option<Tls>,
}

/// PEM files of a test certificate authority, a server certificate for 127.0.0.1 and a
/// client certificate, all signed by it; and a second authority that signed nothing here.
#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
    pub other_ca: std::path::PathBuf,
}

impl Tls {
    /// Makes the files in `dir` with the `openssl` command (P-256 keys, valid a day), or
    /// `None` after saying why the test skips.
    pub fn make(test: &str, dir: &std::path::Path) -> Option<Tls> {
        let f = |name: &str| dir.join(name);
        let openssl = |args: &[&str]| -> bool {
            Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let (k, c, subj) = (
                format!("{ca}.key"),
                format!("{ca}.crt"),
                format!("/CN=phalanx {ca}"),
            );
            let mut args = vec!["req", "-x509", "-days", "1", "-subj", &subj];
            args.extend(key);
            args.extend(["-keyout", &k, "-out", &c]);
            if !openssl(&args) {
                say(&format!(
                    "SKIPPED {test}: `openssl` could not make a test CA (apt-get install openssl)"
                ));
                return None;
            }
        }
        for (who, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
            let (k, csr, c) = (
                format!("{who}.key"),
                format!("{who}.csr"),
                format!("{who}.crt"),
            );
            let ext = format!("{who}.ext");
            std::fs::write(
                f(&ext),
                format!("subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n"),
            )
            .ok()?;
            let subj = format!("/CN={who}");
            let mut args = vec!["req", "-subj", &subj];
            args.extend(key);
            args.extend(["-keyout", &k, "-out", &csr]);
            let signed = openssl(&args)
                && openssl(&[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "1",
                    "-extfile",
                    &ext,
                    "-out",
                    &c,
                ]);
            if !signed {
                say(&format!(
                    "SKIPPED {test}: `openssl` could not sign a test certificate"
                ));
                return None;
            }
        }
        Some(Tls {
            ca: f("ca.crt"),
            server_cert: f("server.crt"),
            server_key: f("server.key"),
            client_cert: f("client.crt"),
            client_key: f("client.key"),
            other_ca: f("other-ca.crt"),
        })
    }
}

/// The `etcd` binary, or `None` after saying why the test skips.
pub fn etcd_binary(test: &str) -> Option<&'static str> {
    let found = Command::new("etcd")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("etcd");
    }
    say(&format!(
        "SKIPPED {test}: no `etcd` on PATH (apt-get install etcd-server; .ci/run installs it)"
    ));
    None
}

impl EtcdCluster {
    /// Starts `n` members on 127.0.0.1 and waits until the cluster has a leader, at most
    /// `deadline`; `None` (the test skips) when `etcd` is not installed.
    pub fn start(test: &str, n: usize, deadline: Duration) -> Option<EtcdCluster> {
        Self::start_on_loopback(test, n, None, deadline)
    }

    /// [`start`](Self::start), with clients served over TLS only, each required to show a
    /// certificate signed by `tls.ca` (`--client-cert-auth`); the members talk to each other
    /// in the clear.
    pub fn start_tls(test: &str, n: usize, tls: &Tls, deadline: Duration) -> Option<EtcdCluster> {
        Self::start_on_loopback(test, n, Some(tls), deadline)
    }

    fn start_on_loopback(
        test: &str,
        n: usize,
        tls: Option<&Tls>,
        deadline: Duration,
    ) -> Option<EtcdCluster> {
        etcd_binary(test)?;
        let dir = TempDir::new(&format!("etcd-{test}"));
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                ip: "127.0.0.1".into(),
                netns: None,
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            dir,
            tls: tls.cloned(),
        };
        for i in 0..n {
            cluster.spawn(i, "new");
        }
        cluster.wait_ready(deadline);
        Some(cluster)
    }

    /// Options for a client of job `job`'s keys (with the TLS files, if the cluster wants
    /// them).
    pub fn options(&self, job: &str) -> EtcdOptions {
        let mut o = EtcdOptions::new(&self.endpoints(), job).unwrap();
        if let Some(t) = &self.tls {
            o.cacert = Some(t.ca.clone());
            o.identity = Some((t.client_cert.clone(), t.client_key.clone()));
        }
        o
    }

    /// Starts one member in each network namespace host of `hosts` (namespace, address), on
    /// etcd's own ports (each host is its own network), and waits until the cluster has a
    /// leader, at most `deadline`; `None` when `etcd` is not installed. The test process is
    /// outside those networks: readiness is checked with `etcdctl` from inside the first host.
    pub fn start_in(
        test: &str,
        hosts: &[(String, String)],
        deadline: Duration,
    ) -> Option<EtcdCluster> {
        etcd_binary(test)?;
        let dir = TempDir::new(&format!("etcd-{test}"));
        let members: Vec<Member> = hosts
            .iter()
            .enumerate()
            .map(|(i, (ns, ip))| Member {
                name: format!("m{i}"),
                ip: ip.clone(),
                netns: Some(ns.clone()),
                client_port: 2379,
                peer_port: 2380,
                child: None,
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            dir,
            tls: None,
        };
        for i in 0..hosts.len() {
            cluster.spawn(i, "new");
        }
        cluster.wait_ready(deadline);
        Some(cluster)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://{}:{}", m.name, m.ip, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let election_ms = election_ms();
        let initial = self.initial_cluster();
        let token = self
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://{}:{}", m.ip, m.client_port);
        let peer = format!("http://{}:{}", m.ip, m.peer_port);
        let mut cmd = match &m.netns {
            // `ip netns exec` execs etcd: the child's pid is the member's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "etcd"]);
                c
            }
            None => Command::new("etcd"),
        };
        cmd.args([
            "--name",
            &m.name,
            "--data-dir",
            data.to_str().unwrap(),
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &initial,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            &token,
            // etcd's own election timing (100 ms heartbeats, 1 s election timeout), as a
            // user's cluster has it: a leader lost leaves the cluster unanswering for a second
            // or two (Note [An election is not a lost store] in phalanx-launch).
            // `PHALANX_TEST_ETCD_ELECTION_MS` reruns the drills with a cluster tuned for a
            // fast network instead (heartbeats a tenth of it).
            "--heartbeat-interval",
            &(election_ms / 10).to_string(),
            "--election-timeout",
            &election_ms.to_string(),
            // Values as large as the TCP store's tests write (3 MiB); etcd advises at most 10.
            "--max-request-bytes",
            "10485760",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        if let Some(t) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&t.server_cert)
                .arg("--key-file")
                .arg(&t.server_key)
                .arg("--trusted-ca-file")
                .arg(&t.ca)
                .arg("--client-cert-auth");
        }
        let child = spawn_tied(cmd);
        self.members[i].child = Some(child);
    }

    /// `h1:p1,h2:p2,…` of the members.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}:{}", m.ip, m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A client of job `job`'s keys.
    pub fn store(&self, job: &str) -> EtcdStore {
        let mut o = self.options(job);
        o.connect_timeout = Duration::from_secs(20);
        EtcdStore::connect(&o).unwrap()
    }

    /// Waits until a write through the cluster succeeds; panics with the members' logs after
    /// `deadline`.
    pub fn wait_ready(&self, deadline: Duration) {
        if self.members[0].netns.is_some() {
            return self.wait_ready_in(deadline);
        }
        let end = Instant::now() + deadline;
        let mut o = self.options("ready");
        loop {
            o.connect_timeout = end
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            let ok = EtcdStore::connect(&o)
                .and_then(|s| s.set("ready", b"1").and_then(|_| s.delete_prefix()));
            match ok {
                Ok(_) => return,
                Err(e) if Instant::now() >= end => {
                    panic!(
                        "etcd cluster not ready after {deadline:?}: {e}\n{}",
                        self.logs()
                    )
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// [`wait_ready`](Self::wait_ready) from inside the first member's host, with `etcdctl`.
    fn wait_ready_in(&self, deadline: Duration) {
        let end = Instant::now() + deadline;
        loop {
            let out = self
                .etcdctl(0)
                .args(["--endpoints", &self.endpoints(), "put", "/ready", "1"])
                .output();
            match out {
                Ok(o) if o.status.success() => return,
                Ok(o) if Instant::now() >= end => panic!(
                    "etcd cluster not ready after {deadline:?}: {}\n{}",
                    String::from_utf8_lossy(&o.stderr),
                    self.logs()
                ),
                Err(e) => panic!("etcdctl (apt-get install etcd-client): {e}"),
                Ok(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The member that leads the cluster now, as `etcdctl endpoint status` tells it; `None`
    /// while none does (an election) or for a TLS cluster, whose status this does not ask.
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .position(|i| self.status(i).is_some_and(|(me, leader)| me == leader))
    }

    /// Moves etcd's leadership to member `to` (`etcdctl move-leader`, which asks the leader
    /// to hand over) and waits until `to` leads, at most `deadline`; panics with the members'
    /// logs past it. A drill that must lose (or keep) the leader with a host places it so,
    /// instead of taking whichever member won the first election.
    pub fn move_leader(&self, to: usize, deadline: Duration) {
        let end = Instant::now() + deadline;
        let (id, _) = self
            .status(to)
            .unwrap_or_else(|| panic!("member {to} gives no status\n{}", self.logs()));
        let mut said = String::new();
        while self.leader() != Some(to) {
            if Instant::now() >= end {
                panic!(
                    "etcd's leadership did not move to member {to} within {deadline:?}: \
                     {said}\n{}",
                    self.logs()
                );
            }
            // Sent through every endpoint: etcdctl finds the leader among them.
            let out = self
                .etcdctl(to)
                .args(["--endpoints", &self.endpoints(), "move-leader"])
                .arg(format!("{id:x}"))
                .output();
            said = match out {
                Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                Err(e) => format!("etcdctl (apt-get install etcd-client): {e}"),
            };
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `etcdctl`, from inside member `i`'s host when it has one, with short timeouts.
    fn etcdctl(&self, i: usize) -> Command {
        let mut cmd = match &self.members[i].netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "etcdctl"]);
                c
            }
            None => Command::new("etcdctl"),
        };
        cmd.args(["--dial-timeout", "1s", "--command-timeout", "2s"])
            .env("ETCDCTL_API", "3");
        cmd
    }

    /// Member `i`'s own id and the id of the leader it knows, from `etcdctl endpoint status`;
    /// `None` for a member not running, one that does not answer, or a TLS cluster.
    fn status(&self, i: usize) -> Option<(u64, u64)> {
        let m = &self.members[i];
        if self.tls.is_some() || m.child.is_none() {
            return None;
        }
        let field = |text: &str, name: &str| -> Option<u64> {
            let after = text.split(&format!("\"{name}\":")).nth(1)?;
            let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        };
        let endpoint = format!("{}:{}", m.ip, m.client_port);
        let out = self
            .etcdctl(i)
            .args(["--endpoints", &endpoint, "endpoint", "status", "-w", "json"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        Some((field(&text, "member_id")?, field(&text, "leader")?))
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its old data.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i, "existing");
    }

    /// The pids of the running members.
    pub fn pids(&self) -> Vec<i32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().map(|c| c.id() as i32))
            .collect()
    }

    /// The members' logs, for a failure's message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} ---\n{}", m.name, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// etcd's election timeout for the clusters the tests start, in milliseconds: etcd's default
/// of 1,000, or `PHALANX_TEST_ETCD_ELECTION_MS` (at least 50, which etcd's heartbeats of a
/// tenth of it allow).
fn election_ms() -> u64 {
    match std::env::var("PHALANX_TEST_ETCD_ELECTION_MS") {
        Err(_) => 1000,
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&ms: &u64| ms >= 50)
            .unwrap_or_else(|| {
                panic!(
                "PHALANX_TEST_ETCD_ELECTION_MS={v:?}: expected a whole number of milliseconds, \
                 at least 50"
            )
            }),
    }
}

/// Spawns `cmd` from a thread that lives as long as the process, with `PR_SET_PDEATHSIG`: the
/// kernel sends the signal when the *thread* that forked the child exits, so forking from a
/// test's own thread would kill the member when that test ends.
fn spawn_tied(cmd: Command) -> Child {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("etcd-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and
                    // exec.
                    unsafe {
                        cmd.pre_exec(|| {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
                // The senders live in a static: this loop ends only with the process.
            })
            .unwrap();
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply))
        .unwrap();
    answer.recv().unwrap().expect("start etcd")
}
