//! phalanx under a real Slurm: a one-machine cluster started by each test (munged with a key
//! of its own, slurmctld, and two slurmd as two nodes — Debian's Slurm is built with
//! `--enable-multiple-slurmd` — all in the foreground, configured in a temp dir), then the
//! real `phalanx` binary through `srun` and `sbatch`:
//!
//! - `srun -N1 -n2 phalanx train`: ranks from `SLURM_*`, no launcher, the replicas equal to
//!   `phalanx train --standalone`'s;
//! - `sbatch` running `phalanx launch` once per node (docs/clusters.md's multi-node lines);
//! - requeue: SIGUSR1 to the batch shell (`scancel --signal=USR1 --batch`, what
//!   `--signal=B:USR1@T` delivers), the run stops with a checkpoint and exits 138, the
//!   cluster's `RequeueExit=138` requeues it, the requeued job resumes and ends bitwise equal
//!   to the uninterrupted run;
//! - the same across two nodes: SIGUSR1 to the job's steps (`scancel --signal=USR1`, what
//!   `--signal=USR1@T` delivers) reaches every node's launcher and workers, `srun` exits 138,
//!   the requeued job ends bitwise equal to the same job run uninterrupted;
//! - `scancel`: the launcher and its workers gone within the launcher's grace period.
//!
//! Skipped, with one line saying why, without the Slurm and munge binaries or without root
//! (the daemons run as root). The tests take turns (one cluster at a time): each costs a few
//! seconds to start and two CPUs to run. Every daemon and job process is killed when a test
//! ends, panics included ([`Cluster`]'s `Drop`), and every wait has a deadline.

mod launch_util;

use std::fs;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use launch_util::{clean_env, free_port, newest_step, run, say, train_summaries, TempDir};

const PHALANX: &str = env!("CARGO_BIN_EXE_phalanx");
/// The cluster's daemons and nodes come up within this.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// A job (all of its runs, requeued ones included) ends within this.
const JOB_DEADLINE: Duration = Duration::from_secs(240);
/// The launcher's `--grace-period` in the scancel test, and the bound on its clean-up.
const GRACE: Duration = Duration::from_secs(5);
/// The exit code of a run stopped by SIGUSR1 (128 + 10), which `RequeueExit` names.
const REQUEUE_EXIT: i32 = 138;

/// One cluster at a time: each test starts its own.
static TURN: Mutex<()> = Mutex::new(());

/// A small run, the size of the other train tests' (`train_restart.rs`).
const TRAIN: &[&str] = &[
    "--dataset",
    "mnist5k",
    "--batch-size",
    "16",
    "--hidden",
    "64",
    "--seed",
    "5",
    "--json",
];

/// The binaries the cluster needs, or the reason the test skips.
fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (slurmd and munged run as root here)".into());
    }
    let absent: Vec<&str> = [
        "munged",
        "slurmctld",
        "slurmd",
        "srun",
        "sbatch",
        "scontrol",
        "scancel",
        "sinfo",
    ]
    .into_iter()
    .filter(|b| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
    .collect();
    (!absent.is_empty()).then(|| {
        format!(
            "no {} (apt-get install slurmctld slurmd slurm-client munge; .ci/run does)",
            absent.join(", ")
        )
    })
}

/// This machine's name (slurmctld runs only where `SlurmctldHost` names it).
fn hostname() -> String {
    phalanx_core::host::hostname().expect("this machine has a host name")
}

/// The two nodes' names: this host's, and the same with `-2` (Slurm turns a node called
/// `localhost` into the host's name). Both slurmd run here, at 127.0.0.1 (`NodeAddr`).
fn node_names(host: &str) -> Vec<String> {
    vec![host.to_string(), format!("{host}-2")]
}

/// Whether `name` resolves (the first node's name is where `srun`'s ranks look for rank 0).
fn resolves(name: &str) -> bool {
    (name, 0u16)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.next().is_some())
}

/// A running one-machine cluster. Dropping it kills every job process (anything whose
/// environment names this cluster's `slurm.conf`) and the daemons, and removes its files.
struct Cluster {
    conf: PathBuf,
    nodes: Vec<String>,
    daemons: Vec<(String, Child)>,
    // Last: removed after the processes are gone.
    dir: TempDir,
}

impl Cluster {
    /// Starts munged, slurmctld and one slurmd per node, and waits until every node is idle.
    fn start(name: &str) -> Cluster {
        // Short: munged's socket path must fit in 108 bytes.
        let dir = TempDir::new(&format!("sl{name}"));
        let d = dir.path().to_path_buf();
        for sub in ["munge", "state", "spool", "log"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        let host = hostname();
        let nodes = node_names(&host);
        let mut cluster = Cluster {
            conf: d.join("slurm.conf"),
            nodes,
            daemons: Vec::new(),
            dir,
        };
        // munged: a fresh 1 KiB key, readable by root alone, and its own socket and files.
        let key: Vec<u8> = (0..1024).map(|_| rand_byte()).collect();
        let key_path = d.join("munge/munge.key");
        fs::write(&key_path, key).unwrap();
        set_mode(&key_path, 0o600);
        let socket = d.join("munge/munge.socket");
        let m = |f: &str| d.join("munge").join(f).display().to_string();
        cluster.spawn(
            "munged",
            Command::new("munged").args([
                "--foreground",
                "--force",
                &format!("--socket={}", socket.display()),
                &format!("--key-file={}", key_path.display()),
                &format!("--pid-file={}", m("munged.pid")),
                &format!("--log-file={}", m("munged.log")),
                &format!("--seed-file={}", m("munged.seed")),
            ]),
        );
        cluster.wait_until("munged's socket", START_DEADLINE, || socket.exists());

        let ctld_port = free_port();
        let node_lines: String = cluster
            .nodes
            .iter()
            .map(|n| {
                // One slurmd per node on this machine (--enable-multiple-slurmd): each its
                // own port; CPUs=2 whatever the machine has (config_overrides), so that two
                // tasks fit on one node.
                format!(
                    "NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={} CPUs=2 State=UNKNOWN\n",
                    free_port()
                )
            })
            .collect();
        let p = |f: &str| d.join(f).display().to_string();
        let conf = format!(
            "# Written by crates/cli/tests/slurm_cluster.rs: a one-machine test cluster.
ClusterName=phalanxtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket={socket},cred_expire=5
StateSaveLocation={state}
SlurmdSpoolDir={spool}/%n
SlurmctldPidFile={ctld_pid}
SlurmdPidFile={pid}/slurmd.%n.pid
SlurmctldLogFile={log}/slurmctld.log
SlurmdLogFile={log}/slurmd.%n.log
# No cgroups here: processes tracked through /proc, tasks not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
# The requeued job is looked at again every second, not every minute.
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
# A run stopped by SIGUSR1 with its checkpoint exits 128 + 10 (docs/clusters.md).
RequeueExit={REQUEUE_EXIT}
# scancel: SIGTERM, then SIGKILL after this; longer than the launcher's grace period, so the
# scancel test sees phalanx's own clean-up, not Slurm's SIGKILL.
KillWait=30
{node_lines}PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
",
            socket = socket.display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            pid = d.display(),
            log = p("log"),
        );
        fs::write(&cluster.conf, conf).unwrap();
        let conf_arg = cluster.conf.display().to_string();
        cluster.spawn(
            "slurmctld",
            Command::new("slurmctld").args(["-D", "-i", "-f", &conf_arg]),
        );
        for n in cluster.nodes.clone() {
            cluster.spawn(
                &format!("slurmd-{n}"),
                Command::new("slurmd").args(["-D", "-N", &n, "-f", &conf_arg]),
            );
        }
        let want = cluster.nodes.len();
        cluster.wait_until("every node idle", START_DEADLINE, || {
            // Fails until slurmctld listens.
            let mut sinfo = cluster.client("sinfo");
            sinfo.args(["-h", "-N", "-o", "%N %T"]);
            let out = run(sinfo, Duration::from_secs(30)).stdout;
            out.lines().filter(|l| l.ends_with(" idle")).count() == want
        });
        cluster
    }

    /// Starts a daemon with this cluster's `SLURM_CONF`, its output in `log/<name>.out`.
    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let out = fs::File::create(self.dir.path().join(format!("log/{name}.out"))).unwrap();
        clean_env(cmd)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.daemons.push((name.to_string(), child));
    }

    /// A Slurm client command (`srun`, `sbatch`, …) for this cluster, run in its directory.
    fn client(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        clean_env(&mut c)
            .env("SLURM_CONF", &self.conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// The stdout of a client command that must succeed within 30 s.
    fn output(&self, prog: &str, args: &[&str]) -> String {
        let mut c = self.client(prog);
        c.args(args);
        let f = run(c, Duration::from_secs(30));
        assert_eq!(
            f.code(),
            Some(0),
            "{prog} {args:?}\n{}\n{}\n{}",
            f.stdout,
            f.stderr,
            self.logs()
        );
        f.stdout
    }

    /// Submits `script` with `sbatch --parsable FLAGS`; the job id.
    fn submit(&self, script: &str, flags: &[&str]) -> String {
        let path = self.dir.path().join(format!("job-{}.sh", rand_byte()));
        fs::write(&path, script).unwrap();
        set_mode(&path, 0o755);
        let mut args: Vec<&str> = flags.to_vec();
        let p = path.display().to_string();
        args.push(&p);
        let id = self.output("sbatch", &[&["--parsable"], &args[..]].concat());
        id.trim().split(';').next().unwrap().to_string()
    }

    /// `scontrol show job -o ID`'s `Key=value` fields.
    fn job(&self, id: &str) -> Vec<(String, String)> {
        self.output("scontrol", &["show", "job", "-o", id])
            .split_whitespace()
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect()
    }

    fn job_field(&self, id: &str, key: &str) -> String {
        self.job(id)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    /// Waits for job `id` to reach a final state; returns it (`COMPLETED`, `FAILED`, …).
    fn wait_job(&self, id: &str, deadline: Duration) -> String {
        let mut state = String::new();
        self.wait_until(&format!("job {id} to end"), deadline, || {
            state = self.job_field(id, "JobState");
            matches!(
                state.as_str(),
                "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY"
            )
        });
        state
    }

    /// Polls `done` every 100 ms; past `deadline` the test fails with the daemons' logs.
    fn wait_until(&self, what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
        let end = Instant::now() + deadline;
        while !done() {
            self.check_daemons();
            assert!(
                Instant::now() < end,
                "waited {deadline:?} for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Fails the test at once, with the logs, when a daemon has exited.
    fn check_daemons(&self) {
        for (name, d) in &self.daemons {
            // SAFETY: waitpid with WNOHANG on our own child; the status is only peeked
            // (WNOWAIT), so Child::wait still reaps it.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let r = unsafe {
                libc::waitid(
                    libc::P_PID,
                    d.id(),
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid is set by waitid when a child changed state.
            if r == 0 && unsafe { info.si_pid() } != 0 {
                panic!("{name} exited\n{}", self.logs());
            }
        }
    }

    /// The tail of every daemon's output and log, for failure messages.
    fn logs(&self) -> String {
        let mut s = String::new();
        if let Ok(rd) = fs::read_dir(self.dir.path().join("log")) {
            for e in rd.flatten() {
                let text = fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                s += &format!("--- {}\n", e.file_name().to_string_lossy());
                for l in tail.into_iter().rev() {
                    s += l;
                    s.push('\n');
                }
            }
        }
        s
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Job processes first (slurmstepd and the tasks outlive slurmd): everything whose
        // environment names this cluster's configuration, until none is left (2 s at most).
        let marker = format!("SLURM_CONF={}", self.conf.display());
        let end = Instant::now() + Duration::from_secs(2);
        loop {
            let left = with_env(&marker);
            if left.is_empty() || Instant::now() > end {
                break;
            }
            for pid in left {
                // SAFETY: kill(2) on a pid read from /proc; no memory involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (_, d) in self.daemons.iter_mut().rev() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Processes other than this one whose environment holds `entry` (`NAME=value`).
fn with_env(entry: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == entry.as_bytes()))
        })
        .collect()
}

/// Processes other than this one whose command line contains `marker`.
fn with_arg(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && launch_util::alive(pid))
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|a| String::from_utf8_lossy(a).contains(marker))
            })
        })
        .collect()
}

fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    // SAFETY: getrandom writes at most the buffer's length.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 1, 0) };
    b[0]
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Takes this test's turn and starts its cluster, or says why it skips.
fn cluster(test: &str, short: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Cluster)> {
    if let Some(why) = missing() {
        say(&format!("SKIPPED {test}: {why}"));
        return None;
    }
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    Some((turn, Cluster::start(short)))
}

/// The digests of `phalanx train --standalone ARGS` on 2 ranks, outside Slurm.
fn reference_digests(args: &[&str]) -> Vec<String> {
    // train_ok adds --standalone --json.
    let args: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let f = launch_util::train_ok(&args, Duration::from_secs(300));
    let s = train_summaries(&f.stdout);
    assert_eq!(s.len(), 2, "{}", f.stdout);
    s.into_iter().map(|(_, _, d)| d).collect()
}

fn digests(text: &str) -> Vec<String> {
    train_summaries(text)
        .into_iter()
        .map(|(_, _, d)| d)
        .collect()
}

#[test]
fn srun_starts_two_ranks_from_slurm_variables() {
    let Some((_turn, c)) = cluster("srun_starts_two_ranks_from_slurm_variables", "srun") else {
        return;
    };
    let args = [TRAIN, &["--epochs", "2"]].concat();
    let want = reference_digests(&args);
    let mut srun = c.client("srun");
    srun.args(["-N1", "-n2", "--kill-on-bad-exit=1", PHALANX, "train"])
        .args(&args)
        // The store's port (Slurm gives none; the default 29500 may be taken).
        .env("MASTER_PORT", free_port().to_string());
    // The ranks find rank 0 at the first node's name; where this host's name does not resolve
    // (some CI containers), at its NodeAddr instead.
    if !resolves(&c.nodes[0]) {
        say("slurm_cluster: this host's name does not resolve; srun's ranks get MASTER_ADDR");
        srun.env("MASTER_ADDR", "127.0.0.1");
    }
    let f = run(srun, Duration::from_secs(120));
    assert_eq!(
        f.code(),
        Some(0),
        "{}\n{}\n{}",
        f.stdout,
        f.stderr,
        c.logs()
    );
    let s = train_summaries(&f.stdout);
    assert_eq!(
        s.iter().map(|x| x.0).collect::<Vec<_>>(),
        [0, 1],
        "two ranks: {}",
        f.stdout
    );
    assert_eq!(
        digests(&f.stdout),
        want,
        "srun's replicas differ from phalanx train --standalone's\n{}",
        f.stderr
    );
}

#[test]
fn sbatch_runs_phalanx_launch_once_per_node() {
    let Some((_turn, c)) = cluster("sbatch_runs_phalanx_launch_once_per_node", "sbatch") else {
        return;
    };
    let nodes = c.nodes.len();
    let train = [TRAIN, &["--epochs", "2"]].concat().join(" ");
    let out = c.path("multinode.out");
    // docs/clusters.md's lines: the node rank and the master from Slurm, per task (single
    // quotes: $SLURM_NODEID is each task's own, not the batch shell's).
    let script = format!(
        "#!/bin/sh
set -e
export PHALANX_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')
first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)
# The first node's address (its name on most clusters; here both nodes are this machine).
export MASTER_ADDR=$(scontrol show node \"$first\" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_PORT={port}
srun --ntasks-per-node=1 sh -c 'exec {PHALANX} launch --nnodes \"$SLURM_NNODES\" \
--node-rank \"$SLURM_NODEID\" --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \
--nproc-per-node 2 -- {PHALANX} train {train}'
",
        port = free_port(),
    );
    let id = c.submit(
        &script,
        &[
            &format!("--nodes={nodes}"),
            "--ntasks-per-node=1",
            &format!("--output={}", out.display()),
        ],
    );
    let state = c.wait_job(&id, JOB_DEADLINE);
    let text = fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "job {id}:\n{text}\n{}", c.logs());
    assert_eq!(c.job_field(&id, "ExitCode"), "0:0", "{text}");
    let s = train_summaries(&text);
    assert_eq!(
        s.iter().map(|x| x.0 as usize).collect::<Vec<_>>(),
        (0..2 * nodes).collect::<Vec<_>>(),
        "every rank's summary:\n{text}"
    );
    let d = digests(&text);
    assert!(
        d.iter().all(|x| *x == d[0]),
        "replicas differ across the nodes:\n{text}"
    );
}

#[test]
fn sigusr1_stops_with_a_checkpoint_and_the_requeued_job_ends_bitwise_equal() {
    let test = "sigusr1_stops_with_a_checkpoint_and_the_requeued_job_ends_bitwise_equal";
    let Some((_turn, c)) = cluster(test, "requeue") else {
        return;
    };
    let flags = [
        TRAIN,
        &["--epochs", "40", "--checkpoint-every", "10", "--resume"],
    ]
    .concat();
    let clean = TempDir::new("slurm-requeue-clean");
    let want = reference_digests(&[&flags[..], &["--checkpoint-dir", clean.str()]].concat());

    let ck = c.path("ck");
    let out = c.path("requeue.out");
    let script = format!(
        "#!/bin/sh
echo \"run with SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-0}}\"
exec {PHALANX} launch --standalone --nproc-per-node 2 --signals-to-handle SIGTERM,SIGINT,SIGUSR1 \
-- {PHALANX} train {} --checkpoint-dir {}
",
        flags.join(" "),
        ck.display()
    );
    let id = c.submit(
        &script,
        &[
            "--requeue",
            "--open-mode=append",
            &format!("--output={}", out.display()),
        ],
    );
    // Mid-run: once the second checkpoint is committed (step 20 of 5,000).
    c.wait_until("a checkpoint at step 20", JOB_DEADLINE, || {
        newest_step(&ck) >= 20
    });
    // What --signal=B:USR1@T delivers (SIGUSR1 to the batch shell, here the launcher it
    // exec'd), at a moment of the test's choosing instead of slurmctld's next time-limit check.
    c.output("scancel", &["--signal=USR1", "--batch", &id]);
    c.wait_until(&format!("job {id} requeued"), JOB_DEADLINE, || {
        c.job_field(&id, "Restarts") == "1"
    });
    let state = c.wait_job(&id, JOB_DEADLINE);
    let text = fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "job {id}:\n{text}\n{}", c.logs());
    assert!(
        text.contains("run with SLURM_RESTART_COUNT=0")
            && text.contains("run with SLURM_RESTART_COUNT=1"),
        "two runs of the script:\n{text}"
    );
    let stop = text
        .lines()
        .find(|l| l.contains("received SIGUSR1: all ranks stopped after step"))
        .unwrap_or_else(|| panic!("no stop line:\n{text}"));
    let step: u64 = stop
        .split("after step ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no step in {stop:?}"));
    assert!(
        stop.contains("exiting with 138") && text.contains("received SIGUSR1; forwarding it"),
        "{text}"
    );
    // The requeued run resumed (phalanx train --json does not say so): rank 0 printed each of
    // the 40 epochs once over both runs, and only the first run found no checkpoint.
    assert!(step >= 20, "stopped before the signal was sent: {stop}");
    assert_eq!(text.matches("\"event\":\"epoch\"").count(), 40, "{text}");
    assert_eq!(text.matches("no checkpoint in").count(), 1, "{text}");
    assert_eq!(
        digests(&text),
        want,
        "the requeued job's replicas differ from the uninterrupted run's:\n{text}"
    );
    say(&format!(
        "slurm_cluster: requeue: stopped after step {step}, requeued, resumed, digests equal to \
         the uninterrupted run's ({})",
        &want[0][..12]
    ));
}

#[test]
fn scancel_ends_the_launcher_and_its_workers_within_the_grace_period() {
    let test = "scancel_ends_the_launcher_and_its_workers_within_the_grace_period";
    let Some((_turn, c)) = cluster(test, "scancel") else {
        return;
    };
    // A unique word in every job process's command line.
    let marker = c.path(&format!("scancel-marker-{}", rand_byte()));
    let out = c.path("scancel.out");
    let script = format!(
        "#!/bin/sh
exec {PHALANX} launch --standalone --nproc-per-node 2 --grace-period {}s \
-- {PHALANX} train {} --epochs 100000 --checkpoint-dir {}
",
        GRACE.as_secs(),
        TRAIN.join(" "),
        marker.display()
    );
    let id = c.submit(&script, &[&format!("--output={}", out.display())]);
    c.wait_until("training under way", JOB_DEADLINE, || {
        newest_step(&marker) >= 1 && with_arg(&marker.display().to_string()).len() >= 3
    });
    let before = with_arg(&marker.display().to_string());
    c.output("scancel", &[&id]);
    let cancelled = Instant::now();
    let mut left = before.clone();
    while !left.is_empty() && cancelled.elapsed() < GRACE + Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        left.retain(|&p| launch_util::alive(p));
    }
    let text = fs::read_to_string(&out).unwrap_or_default();
    assert!(
        left.is_empty(),
        "processes {left:?} of {before:?} still alive {:?} after scancel (launcher grace \
         period {GRACE:?}, Slurm's KillWait 30 s)\n{text}",
        cancelled.elapsed()
    );
    say(&format!(
        "slurm_cluster: scancel -> launcher and 2 workers gone in {:.2} s",
        cancelled.elapsed().as_secs_f64()
    ));
    assert!(
        // Slurm signals the workers too: some may have stopped before the launcher forwards.
        text.contains("phalanx launch: received SIGTERM; forwarding it to")
            && !text.contains("job failed"),
        "the launcher's report names the signal:\n{text}"
    );
    assert_eq!(c.wait_job(&id, JOB_DEADLINE), "CANCELLED");
}

/// The multi-node requeue line: `srun` runs `phalanx launch` on each node and SIGUSR1 goes to
/// the job's steps (`scancel --signal=USR1 JOBID`, what `--signal=USR1@T` without `B:`
/// delivers): every node's launcher and workers get it, `srun` and the script exit 138, Slurm
/// requeues, and the requeued job ends with the parameters of the same job run uninterrupted.
#[test]
fn sigusr1_to_every_node_requeues_a_multinode_job_bitwise_equal() {
    let test = "sigusr1_to_every_node_requeues_a_multinode_job_bitwise_equal";
    let Some((_turn, c)) = cluster(test, "multireq") else {
        return;
    };
    let nodes = c.nodes.len();
    let flags = [
        TRAIN,
        &["--epochs", "30", "--checkpoint-every", "10", "--resume"],
    ]
    .concat()
    .join(" ");
    let script = |ck: &Path| {
        format!(
            "#!/bin/sh
echo \"run with SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-0}}\"
export PHALANX_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')
first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)
export MASTER_ADDR=$(scontrol show node \"$first\" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_PORT={port}
srun --ntasks-per-node=1 sh -c 'exec {PHALANX} launch --nnodes \"$SLURM_NNODES\" \
--node-rank \"$SLURM_NODEID\" --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \
--nproc-per-node 2 --signals-to-handle SIGTERM,SIGINT,SIGUSR1 \
-- {PHALANX} train {flags} --checkpoint-dir {ck}'
",
            port = free_port(),
            ck = ck.display(),
        )
    };
    let submit = |name: &str, ck: &Path| {
        let out = c.path(&format!("{name}.out"));
        let id = c.submit(
            &script(ck),
            &[
                &format!("--nodes={nodes}"),
                "--ntasks-per-node=1",
                "--requeue",
                "--open-mode=append",
                &format!("--output={}", out.display()),
            ],
        );
        (id, out)
    };
    // The same job, uninterrupted: the reference (its reduction spans the two nodes).
    let (clean, clean_out) = submit("multi-clean", &c.path("ck-clean"));
    let state = c.wait_job(&clean, JOB_DEADLINE);
    let clean_text = fs::read_to_string(&clean_out).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{clean_text}\n{}", c.logs());
    let want = digests(&clean_text);
    assert_eq!(want.len(), 2 * nodes, "{clean_text}");

    let ck = c.path("ck");
    let (id, out) = submit("multi-requeue", &ck);
    c.wait_until("a checkpoint at step 20", JOB_DEADLINE, || {
        newest_step(&ck) >= 20
    });
    c.output("scancel", &["--signal=USR1", &id]);
    c.wait_until(&format!("job {id} requeued"), JOB_DEADLINE, || {
        c.job_field(&id, "Restarts") == "1"
    });
    let state = c.wait_job(&id, JOB_DEADLINE);
    let text = fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "job {id}:\n{text}\n{}", c.logs());
    let stop = text
        .lines()
        .find(|l| l.contains("all ranks stopped after step"))
        .unwrap_or_else(|| panic!("no stop line:\n{text}"));
    assert!(stop.contains("exiting with"), "{text}");
    // Every node's launcher ended the first run with 138 (srun names each non-zero task).
    assert_eq!(
        text.matches("Exited with exit code 138").count(),
        nodes,
        "{text}"
    );
    assert_eq!(text.matches("\"event\":\"epoch\"").count(), 30, "{text}");
    assert_eq!(text.matches("no checkpoint in").count(), 1, "{text}");
    assert_eq!(
        digests(&text),
        want,
        "the requeued job's replicas differ from the uninterrupted job's:\n{text}"
    );
    say(&format!("slurm_cluster: multi-node requeue: {stop}"));
}
