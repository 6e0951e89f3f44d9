//! Shared memory between the ranks of one host: segments under `/dev/shm`, a step protocol
//! with spin-then-futex waits, aborts and dead-peer detection. Linux only.
//!
//! Each rank creates one [`ShmSegment`] (named after the job and the rank), maps every
//! peer's, and joins a [`ShmGroup`]. Collectives (`phalanx_collectives::allreduce_shm`)
//! copy data into their own segment's buffers, [`publish`](ShmGroup::publish) a step, and
//! read peers' buffers directly after [`wait_for`](ShmGroup::wait_for)ing their steps.
//!
//! ```
//! use std::time::Duration;
//! use phalanx_core::DType;
//! use phalanx_transport::{shm::{ShmGroup, ShmSegment}, CollectiveKind, Fingerprint};
//!
//! let job = format!("doc-{}", std::process::id());
//! let bytes = ShmGroup::segment_bytes(4096);
//! let segs: Vec<_> = (0..2).map(|r| ShmSegment::create(&format!("{job}-{r}"), bytes).unwrap()).collect();
//! let fp = Fingerprint { seq: 0, kind: CollectiveKind::Broadcast, op: None, dtype: DType::U8, count: 5, root: 0 };
//! std::thread::scope(|s| {
//!     for (rank, own) in segs.into_iter().enumerate() {
//!         let job = &job;
//!         s.spawn(move || {
//!             let peers = (0..2)
//!                 .map(|p| (p != rank).then(|| ShmSegment::open(&format!("{job}-{p}"), bytes).unwrap()))
//!                 .collect();
//!             let mut g = ShmGroup::new(rank, 2, own, peers, Duration::from_secs(10)).unwrap();
//!             let b = g.next_buffer();
//!             if rank == 0 {
//!                 // SAFETY: peers read buffer `b` only after the step published below.
//!                 unsafe { g.own_buffer_mut(b, 0..5) }.copy_from_slice(b"hello");
//!             }
//!             g.step_all(&fp).unwrap();
//!             // SAFETY: rank 0 wrote these bytes before its step and reuses `b` only after
//!             // this rank's next step.
//!             assert_eq!(unsafe { g.buffer(0, b, 0..5) }, b"hello");
//!         });
//!     }
//! });
//! ```
//!
//! Note [Shared-memory protocol]:
//! - Each rank writes only its own segment (peers touch just its waiter and futex words).
//!   It holds a control block (see `layout.rs`) and two data buffers of equal size.
//! - A rank's *step* counter grows by one per [`ShmGroup::publish`]. Every rank runs the same
//!   collectives in the same order, and each collective's number of steps depends only on
//!   its fingerprint and the group (world size, buffer size), so step `s` means the same
//!   thing on every rank; each step carries the collective's fingerprint, which waiters
//!   compare with theirs ([`crate::Error::Mismatch`] on a difference).
//! - Visibility: bytes a rank writes before publishing step `s` are visible to a peer once
//!   that peer has seen step `s` ([`ShmGroup::wait_for`]): the publication is a SeqCst store,
//!   the wait an Acquire load.
//! - Buffer reuse: data-buffer *uses* alternate between the two buffers
//!   ([`ShmGroup::next_buffer`]). Every use starts with a step that all ranks publish and
//!   wait for (a barrier) after writing their data for it; a rank reads peers' buffers of
//!   use `u` only between that barrier and its publication of use `u+1`'s first step. Hence
//!   when a rank writes use `u+2` (the same buffer as `u`), having passed use `u+1`'s
//!   barrier, every peer has finished reading use `u`. Writes a rank makes to its own
//!   buffer during a use touch only bytes no peer reads until a later step.
//! - Failure: a wait spins, then sleeps on the peer's futex in slices of at most 20 ms,
//!   checking the abort words of all ranks, the progress timeout, and (every 100 ms, when
//!   the processes share a pid namespace) whether the awaited peer's process still exists.
//!   A failed wait marks the group failed and publishes the error as this rank's abort
//!   reason, so peers stop at once with the root cause.

mod group;
mod layout;
mod segment;
mod sys;
mod wait;

pub use group::{BufferId, ShmAbortHandle, ShmGroup, DEFAULT_BUFFER_BYTES};
pub use segment::ShmSegment;
