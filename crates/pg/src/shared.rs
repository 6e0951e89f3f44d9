//! [`Shared`]: the state a process group's callers and its worker thread share, and what runs
//! every collective: the sequence number, the trace span, and Note [Fail fast] in practice
//! (working out a failure's root cause, publishing it, and aborting every link so the other
//! ranks stop at once).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use phalanx_collectives::{Algorithm, Options};
use phalanx_core::trace;
use phalanx_store::Store;
use phalanx_transport::{shm::ShmAbortHandle, AbortHandle};

use crate::{
    exec::Exec,
    flight_recorder::{self, GroupId, Shape},
    progress::Progress,
    Error, Result,
};

/// How long a failing rank waits for each of its failure's words to be written (Note [A
/// failure's word is bounded]).
const PUBLISH_WAIT: Duration = Duration::from_millis(250);

/// How long a failure outside fault tolerance waits for a peer whose connection closed to
/// publish why.
const PEER_WORD_WAIT: Duration = Duration::from_millis(500);

/// Which sequence an operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// The group's collectives, numbered in issue order on every rank.
    Group,
    /// Point-to-point messages, numbered per pair of ranks.
    PointToPoint,
}

/// What a collective closure returns: its result and the algorithm it used.
pub(crate) type Step<R> = phalanx_transport::Result<(R, Algorithm)>;

pub(crate) struct Shared {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) local_rank: usize,
    pub(crate) local_world_size: usize,
    pub(crate) exec: Mutex<Exec>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) abort: AbortHandle,
    pub(crate) shm_abort: Option<ShmAbortHandle>,
    pub(crate) failed: Mutex<Option<String>>,
    /// Last completed collective, for `status/<rank>` (Note [Hang diagnosis] in progress.rs).
    pub(crate) progress: Progress,
    pub(crate) opts: Options,
    /// (collective, algorithm) pairs already reported at INFO level.
    pub(crate) reported: Mutex<Vec<(&'static str, Algorithm)>>,
    /// The backend's name (`native`, `mpi`, `nccl`), fixed for the group's lifetime.
    pub(crate) backend: &'static str,
    /// The backend's promise about sends, fixed for the group's lifetime and read without the
    /// `exec` lock ([`crate::ProcessGroup::sends_complete_alone`]).
    pub(crate) sends_complete_alone: bool,
    /// Whether this group is a fault-tolerant generation, or a subgroup of one (Note [FT
    /// generations]): its failures neither wait for a dead peer's word (the launcher names
    /// the dead rank, and every millisecond is the survivors') nor for the store longer than
    /// [`PUBLISH_WAIT`] (Note [A failure's word is bounded]).
    pub(crate) fault_tolerant: std::sync::atomic::AtomicBool,
    /// Which subgroup this is, for errors (`subgroup of job ranks [0, 2]`); unset for the
    /// world.
    pub(crate) label: std::sync::OnceLock<String>,
    /// This group in the flight recorder (Note [Flight recorder]).
    pub(crate) fr: GroupId,
}

impl Shared {
    /// Runs collective `name` under the `Exec` lock with the next sequence number, and on an
    /// error works out the root cause, publishes it and fails the group (Note [Fail fast]).
    pub(crate) fn run<R>(
        &self,
        name: &'static str,
        shape: Shape,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<R>,
    ) -> Result<R> {
        self.run_in(name, shape, Stream::Group, f)
    }

    /// Runs point-to-point operation `name` like [`run`](Self::run), but without taking a
    /// group sequence number: the backend numbers each pair's messages itself.
    pub(crate) fn run_p2p<R>(
        &self,
        name: &'static str,
        shape: Shape,
        f: impl FnOnce(&mut Exec) -> Step<R>,
    ) -> Result<R> {
        self.run_in(name, shape, Stream::PointToPoint, |_, exec, _| f(exec))
    }

    fn run_in<R>(
        &self,
        name: &'static str,
        shape: Shape,
        stream: Stream,
        f: impl FnOnce(&Shared, &mut Exec, u64) -> Step<R>,
    ) -> Result<R> {
        let bytes = shape.bytes();
        if let Some(cause) = self.failed.lock().unwrap().clone() {
            return Err(Error::Failed {
                rank: self.rank,
                cause,
            });
        }
        let mut exec = self.exec.lock().unwrap();
        let seq = exec.seq;
        if stream == Stream::Group {
            exec.seq += 1;
        }
        let started = flight_recorder::start();
        let fr_op = flight_recorder::Op {
            pg: self.fr,
            seq,
            is_p2p: stream == Stream::PointToPoint,
            name,
            shape,
        };
        let span = trace::span(name, "collective").arg("bytes", bytes);
        let span = match stream {
            Stream::Group => span.arg("seq", seq),
            Stream::PointToPoint => span,
        };
        match f(self, &mut exec, seq) {
            Ok((r, algo)) => {
                flight_recorder::finish(started, fr_op, true);
                if stream == Stream::Group {
                    self.progress.complete(seq);
                }
                drop(span.arg("algorithm", exec.describe(algo)));
                if exec.picks_algorithm() {
                    // MPI and NCCL pick theirs inside the library; init says so once.
                    self.note_algorithm(name, bytes, algo);
                }
                Ok(r)
            }
            Err(e) => {
                flight_recorder::finish(started, fr_op, false);
                let (cause, origin) = self.root_cause(&e);
                drop(exec);
                let mut op = describe_op(&e, name, (stream == Stream::Group).then_some(seq));
                if let Some(label) = self.label.get() {
                    // Ranks in the message are this subgroup's; the label maps them.
                    op = format!("{op} in the {label}");
                }
                self.publish(
                    phalanx_store::keys::status(self.rank),
                    self.progress.status(&e, &op),
                );
                self.fail(&cause, origin);
                // After the peers were told: they stop at once and write theirs too.
                flight_recorder::dump_on_failure();
                Err(Error::Collective {
                    rank: self.rank,
                    op,
                    cause,
                })
            }
        }
    }

    /// Logs each (collective, algorithm) pair the first time it is used (`PHALANX_DEBUG=INFO`).
    pub(crate) fn note_algorithm(&self, name: &'static str, bytes: usize, algo: Algorithm) {
        let mut seen = self.reported.lock().unwrap();
        if !seen.contains(&(name, algo)) {
            seen.push((name, algo));
            tracing::info!(
                rank = self.rank,
                collective = name,
                bytes,
                algorithm = ?algo,
                direct_max_bytes = self.opts.direct_max_bytes,
                chunk_bytes = self.opts.chunk_bytes,
                "phalanx: algorithm"
            );
        }
    }

    /// Works out the root cause of a transport error; `true` when this rank is its origin.
    pub(crate) fn root_cause(&self, e: &phalanx_transport::Error) -> (String, bool) {
        use phalanx_transport::Error as T;
        match e {
            T::PeerAborted { reason, .. } => (reason.clone(), false),
            T::Aborted { reason } => (reason.clone(), false),
            // Its process is gone: whatever it published before exiting is in the store
            // already (unless its write was still under way: Note [A failure's word is
            // bounded]), so one look, not a wait that would hold every survivor up.
            T::PeerExited { peer, pid, during } => (
                self.published(*peer, Duration::ZERO).unwrap_or_else(|| {
                    format!("rank {peer} (process {pid}) exited during {during}")
                }),
                false,
            ),
            // A dead peer may have published why; give it a moment to land.
            T::PeerClosed { peer, during } => (
                self.published(*peer, self.peer_word_wait())
                    .unwrap_or_else(|| {
                        format!("rank {peer} exited or lost its connection during {during}")
                    }),
                false,
            ),
            other => (format!("rank {}: {other}", self.rank), true),
        }
    }

    /// Writes `text` under `key` for the other ranks and the launcher; in a fault-tolerant
    /// generation waiting at most [`PUBLISH_WAIT`] for the store (Note [A failure's word is
    /// bounded]). Best effort, since the store may be gone too and the failure itself is
    /// reported anyway.
    ///
    /// Note [A failure's word is bounded]
    /// A rank whose collective failed writes what it knows (its status, and its error when it
    /// is the origin), then aborts its links and regroups. Through etcd while the cluster
    /// elects a leader (its leader's member went with the host that failed), each write
    /// waited out the election, and every survivor with it: in the node drills with etcd's
    /// leader on the lost host, the survivors' groups failed 2.06 s after the kill, inside the
    /// write of their status, and the leader elsewhere, 0.02 s. So each write runs on a
    /// thread of its own and is waited for at most `PUBLISH_WAIT`. A store that answers takes
    /// it in about a millisecond, well inside the wait; one that does not lands it later or
    /// never, and the failure goes on meanwhile, its own report unchanged. Only in a
    /// fault-tolerant generation or a subgroup of one (whose ranks do not wait for a dead
    /// peer's word either): elsewhere the process usually exits after the failure, and a
    /// write still under way would be lost with it, and a store served by Python (`PyStore`)
    /// needs the interpreter's lock, which the thread that aborts a group holds.
    fn publish(&self, key: String, text: String) {
        let write = |store: &dyn Store, key: &str, text: &str| {
            if let Err(err) = store.set(key, text.as_bytes()) {
                tracing::debug!("phalanx: could not publish {key}: {err}");
            }
        };
        if !self.is_fault_tolerant() {
            return write(&*self.store, &key, &text);
        }
        let (store, k, t) = (self.store.clone(), key.clone(), text.clone());
        let (done, wait) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("phalanx-publish".into())
            .spawn(move || {
                write(&*store, &k, &t);
                let _ = done.send(());
            });
        match spawned {
            Ok(_) => {
                let _ = wait.recv_timeout(PUBLISH_WAIT);
            }
            // No thread to spare: written here, as outside fault tolerance.
            Err(_) => write(&*self.store, &key, &text),
        }
    }

    /// Whether this group is a fault-tolerant generation or a subgroup of one.
    pub(crate) fn is_fault_tolerant(&self) -> bool {
        self.fault_tolerant
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long a failure waits for a peer that closed its connection to publish why, before
    /// it names that peer itself: a crashing rank's own words are the better root cause,
    /// except under fault tolerance, where nothing waits for them.
    fn peer_word_wait(&self) -> Duration {
        match self.is_fault_tolerant() {
            true => Duration::ZERO,
            false => PEER_WORD_WAIT,
        }
    }

    /// What rank `peer` published as its failure (`error/<peer>`), waiting up to `wait` for it.
    /// Without a wait, one look that holds nobody up, even while etcd elects a leader (Note [A
    /// poll reads serializably] in phalanx-store).
    fn published(&self, peer: usize, wait: Duration) -> Option<String> {
        let key = phalanx_store::keys::error(peer);
        let value = match wait.is_zero() {
            true => self.store.peek(&key).ok().flatten(),
            false => self
                .store
                .wait_timeout(&[&key], wait)
                .ok()
                .and_then(|()| self.store.get(&key).ok()),
        };
        value.map(|r| String::from_utf8_lossy(&r).into_owned())
    }

    /// Marks the group failed, publishes the reason when this rank is the origin, and aborts
    /// the transport so peers learn at once.
    pub(crate) fn fail(&self, cause: &str, origin: bool) {
        {
            let mut f = self.failed.lock().unwrap();
            if f.is_some() {
                return;
            }
            *f = Some(cause.to_string());
        }
        if origin {
            let text = if cause.starts_with("rank ") {
                cause.to_string()
            } else {
                format!("rank {}: {cause}", self.rank)
            };
            self.publish(phalanx_store::keys::error(self.rank), text);
        }
        tracing::error!(rank = self.rank, "process group failed: {cause}");
        // The exec lock may be held by a blocked collective on another thread: the abort
        // handle shuts the sockets down without it, waking that collective.
        match self.exec.try_lock() {
            Ok(mut exec) => exec.abort(self.rank, cause),
            Err(_) => {
                if let Some(h) = &self.shm_abort {
                    h.abort(cause);
                }
                self.abort.abort(cause);
                // MPI has no handle to wake one call: MPI_Abort ends the whole job instead.
                #[cfg(feature = "mpi")]
                if self.backend == "mpi" {
                    crate::mpi::MpiComm::abort_job(self.rank, cause);
                }
            }
        }
    }
}

/// The failed collective as the error names it (its fingerprint or what it was doing), else
/// `name #seq`.
fn describe_op(e: &phalanx_transport::Error, name: &str, seq: Option<u64>) -> String {
    use phalanx_transport::Error as T;
    match e {
        T::Mismatch { ours, .. } => ours.to_string(),
        T::Length { fp, .. } => fp.to_string(),
        T::PeerClosed { during, .. } | T::PeerExited { during, .. } => during.clone(),
        T::Timeout { during, .. } => during.clone(),
        _ => match seq {
            Some(seq) => format!("{name} #{seq}"),
            None => name.to_string(),
        },
    }
}
