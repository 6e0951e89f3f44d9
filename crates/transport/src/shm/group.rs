//! [`ShmGroup`]: the ranks of one host, their segments, and the step protocol of
//! Note [Shared-memory protocol] (see the module docs).

use std::{
    io,
    ops::Range,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use phalanx_core::env;

use super::{
    layout::{Control, CONTROL_BYTES, MAGIC, VERSION},
    segment::ShmSegment,
    sys,
    wait::Waiter,
};
use crate::{frame, Error, Fingerprint, Result};

/// Default size of each of a segment's two data buffers (a segment is twice this plus
/// 4 KiB). Larger buffers mean fewer steps per byte, which matters most when other processes
/// compete for the cores (every step needs all ranks scheduled); 2 MiB chunks still fit the
/// shared L3. Measured on 2 cores under load, 64 MiB: 512 KiB buffers 2.2 GB/s bus
/// bandwidth, 1 MiB 3.8, 2 MiB 4.5, 4 MiB 3.2 (docs/shm.md).
pub const DEFAULT_BUFFER_BYTES: usize = 2 * 1024 * 1024;

/// One of a segment's two data buffers, handed out in turn by [`ShmGroup::next_buffer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferId(usize);

impl BufferId {
    /// 0 or 1.
    pub fn index(self) -> usize {
        self.0
    }
}

/// The ranks of one host joined through shared memory: this rank's segment (written only by
/// this rank, apart from the waiter words) and a read mapping of every peer's.
///
/// Collectives drive it with [`next_buffer`](Self::next_buffer), the buffer accessors,
/// [`publish`](Self::publish) and [`wait_for`](Self::wait_for)/[`wait_all`](Self::wait_all);
/// `phalanx_collectives::allreduce_shm` is the main user.
#[derive(Debug)]
pub struct ShmGroup {
    rank: usize,
    world: usize,
    segs: Arc<[ShmSegment]>,
    buffer_bytes: usize,
    /// The last step this rank published.
    step: u64,
    /// Data-buffer uses so far (buffer = uses % 2).
    uses: u64,
    waiter: Waiter,
    failed: Option<String>,
    /// Every rank of the group can read every other's memory (Note [Single copy]).
    single_copy: bool,
    /// The ranks' process ids, for single-copy reads.
    pids: Vec<u32>,
}

/// Note [Single copy]
/// Through the shared buffers every byte is copied twice: into the sender's buffer, out to
/// the receiver. Where the kernel lets a process read another's memory (`process_vm_readv`,
/// "cross-memory attach": same user, and ptrace rights, which containers and Yama's
/// `ptrace_scope` may deny), a rank can instead copy straight from the sender's own buffer:
/// the sender *exposes* a region (its address and length in its control block) before a
/// step, receivers read from it after that step, and a second step keeps the region alive
/// until every receiver is done. Open MPI's vader transport does the same (CMA). Every rank
/// probes at setup whether it can read each peer (a value at an address the peer publishes)
/// and publishes its verdict; the group uses single copies only when every verdict is yes,
/// so all ranks choose the same algorithm. `PHALANX_SHM_SINGLE_COPY=0` votes no.
static PROBE: AtomicU64 = AtomicU64::new(0);

/// Aborts a [`ShmGroup`] from any thread: publishes the reason in this rank's segment and
/// wakes every rank sleeping in a wait, which then fails naming this rank.
#[derive(Debug, Clone)]
pub struct ShmAbortHandle {
    rank: usize,
    segs: Arc<[ShmSegment]>,
}

impl ShmAbortHandle {
    /// Records `reason` (the first abort wins) and wakes every waiter of the group.
    pub fn abort(&self, reason: &str) {
        Control::of(&self.segs[self.rank]).publish_abort(reason);
        for seg in self.segs.iter() {
            let c = Control::of(seg);
            c.futex().fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(c.futex());
        }
    }

    /// The reason this rank aborted with, once it has.
    pub fn reason(&self) -> Option<String> {
        Control::of(&self.segs[self.rank]).read_abort()
    }
}

fn layout_err(seg: &ShmSegment, what: String) -> Error {
    Error::Shm {
        path: seg.path().display().to_string(),
        op: "join the group".into(),
        source: io::Error::new(io::ErrorKind::InvalidData, what),
    }
}

impl ShmGroup {
    /// Bytes a segment needs for two data buffers of `buffer_bytes` each.
    pub fn segment_bytes(buffer_bytes: usize) -> usize {
        CONTROL_BYTES + 2 * buffer_bytes.next_multiple_of(4096)
    }

    /// Joins the group: initialises this rank's control block in `own` (created with
    /// [`ShmSegment::create`], [`segment_bytes`](Self::segment_bytes) long), then waits up to
    /// `timeout` until every peer's segment in `peers` (indexed by rank; this rank's slot is
    /// ignored) is initialised with the same world size and buffer size.
    pub fn new(
        rank: usize,
        world: usize,
        own: ShmSegment,
        mut peers: Vec<Option<ShmSegment>>,
        timeout: Duration,
    ) -> Result<ShmGroup> {
        assert!(
            rank < world,
            "rank {rank} out of range for world size {world}"
        );
        assert_eq!(peers.len(), world, "peers must hold one slot per rank");
        let own_len = own.len();
        if own_len < ShmGroup::segment_bytes(64) {
            return Err(layout_err(
                &own,
                format!("segment of {} bytes is too small", own.len()),
            ));
        }
        // Cache-line multiple, so that the two buffers start on their own lines.
        let buffer_bytes = ((own.len() - CONTROL_BYTES) / 2) & !63;
        if buffer_bytes < world * 64 {
            return Err(layout_err(
                &own,
                format!(
                    "{buffer_bytes}-byte buffers are too small for {world} ranks (64 bytes each)"
                ),
            ));
        }
        let me = Control::of(&own);
        if me.magic().load(Ordering::Acquire) != 0 {
            return Err(layout_err(&own, "segment already in use by a group".into()));
        }
        me.version().store(VERSION, Ordering::Relaxed);
        me.world().store(world as u32, Ordering::Relaxed);
        me.rank().store(rank as u32, Ordering::Relaxed);
        me.pid().store(std::process::id(), Ordering::Relaxed);
        me.buffer_bytes()
            .store(buffer_bytes as u64, Ordering::Relaxed);
        me.pid_ns().store(sys::pid_namespace(), Ordering::Relaxed);
        // One value per process, set by its first group.
        let _ = PROBE.compare_exchange(
            0,
            u64::from(std::process::id()) << 32 | 0x5a5a_0001,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let probe = PROBE.load(Ordering::Relaxed);
        me.probe_addr()
            .store(std::ptr::addr_of!(PROBE) as u64, Ordering::Relaxed);
        me.probe_value().store(probe, Ordering::Relaxed);
        me.single_copy().store(0, Ordering::Relaxed);
        me.magic().store(MAGIC, Ordering::Release);

        let mut segs = Vec::with_capacity(world);
        let mut own = Some(own);
        for (p, slot) in peers.iter_mut().enumerate() {
            if p == rank {
                segs.push(own.take().expect("own segment placed once"));
                continue;
            }
            let seg = slot.take().ok_or_else(|| Error::Shm {
                path: format!("(segment of rank {p})"),
                op: "join the group".into(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "no segment given"),
            })?;
            if seg.len() < CONTROL_BYTES + 2 * buffer_bytes {
                return Err(layout_err(
                    &seg,
                    format!(
                        "rank {p}'s segment holds {} bytes, rank {rank}'s {own_len}",
                        seg.len()
                    ),
                ));
            }
            segs.push(seg);
        }
        let deadline = Instant::now() + timeout;
        let mut pids = vec![0u32; world];
        let my_ns = sys::pid_namespace();
        let mut same_ns = true;
        for (p, seg) in segs.iter().enumerate() {
            let c = Control::of(seg);
            while c.magic().load(Ordering::Acquire) != MAGIC {
                if Instant::now() >= deadline {
                    return Err(Error::Timeout {
                        during: "shared-memory group setup".into(),
                        waiting_for: vec![p],
                        after: timeout,
                    });
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let (v, w, r, b) = (
                c.version().load(Ordering::Relaxed),
                c.world().load(Ordering::Relaxed) as usize,
                c.rank().load(Ordering::Relaxed) as usize,
                c.buffer_bytes().load(Ordering::Relaxed) as usize,
            );
            if v != VERSION || w != world || r != p || b != buffer_bytes {
                return Err(layout_err(
                    seg,
                    format!(
                        "rank {rank} expected layout v{VERSION} rank {p} of {world} with \
                         {buffer_bytes}-byte buffers, found v{v} rank {r} of {w} with {b}"
                    ),
                ));
            }
            pids[p] = c.pid().load(Ordering::Relaxed);
            same_ns &= c.pid_ns().load(Ordering::Relaxed) == my_ns && my_ns != 0;
        }
        let single_copy = agree_single_copy(&segs, rank, &pids, same_ns, deadline, timeout)?;
        Ok(ShmGroup {
            rank,
            world,
            segs: segs.into(),
            buffer_bytes,
            step: 0,
            uses: 0,
            waiter: Waiter::new(world, timeout, pids.clone(), same_ns),
            failed: None,
            single_copy,
            pids,
        })
    }

    /// Overrides the longest a wait spins before it sleeps on the futex (default: 100 µs
    /// when every rank of the host has a core, 20 µs with yields when ranks outnumber
    /// cores). The budget adapts below it; see Note [Spin then sleep] in `wait.rs`.
    pub fn with_spin(mut self, max_spin: Duration) -> Self {
        self.waiter.set_max_spin(max_spin);
        self
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the group.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// Keeps the group off single copies when `on` is false (tests compare both paths);
    /// every rank must call it alike, since all must take the same path.
    pub fn with_single_copy(mut self, on: bool) -> Self {
        self.single_copy &= on;
        self
    }

    /// Whether every rank can read every other's exposed memory (Note [Single copy]).
    pub fn single_copy(&self) -> bool {
        self.single_copy
    }

    /// Lets peers read `region` of this process's memory (Note [Single copy]) from the next
    /// step this rank publishes until the step after it.
    pub fn expose(&mut self, region: &[u8]) {
        let me = Control::of(&self.segs[self.rank]);
        me.exposed_addr()
            .store(region.as_ptr() as u64, Ordering::Relaxed);
        me.exposed_len()
            .store(region.len() as u64, Ordering::Relaxed);
    }

    /// Copies bytes `offset..offset + dst.len()` of the region `peer` exposed into `dst`,
    /// with one copy (Note [Single copy]). Call between the step after which `peer` exposed
    /// it and the step that ends the exposure.
    pub fn read_exposed(&mut self, peer: usize, offset: usize, dst: &mut [u8]) -> Result<()> {
        let c = Control::of(&self.segs[peer]);
        let (addr, len) = (
            c.exposed_addr().load(Ordering::Relaxed),
            c.exposed_len().load(Ordering::Relaxed) as usize,
        );
        let (path, want) = (self.segs[peer].path().display().to_string(), dst.len());
        let fail = |source: io::Error| Error::Shm {
            path: path.clone(),
            op: format!(
                "read {want} bytes at offset {offset} of rank {peer}'s exposed {len} bytes \
                 (process_vm_readv)"
            ),
            source,
        };
        if offset + dst.len() > len {
            let e = fail(io::Error::new(
                io::ErrorKind::InvalidData,
                "outside the exposed region",
            ));
            self.fail(&e);
            return Err(e);
        }
        if dst.is_empty() {
            return Ok(());
        }
        let read = sys::read_process(self.pids[peer], addr + offset as u64, dst).map_err(fail);
        if let Err(e) = &read {
            self.fail(e);
        }
        read
    }

    /// Bytes in each of the two data buffers of every segment.
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// The progress timeout of every wait.
    pub fn timeout(&self) -> Duration {
        self.waiter.timeout
    }

    /// A handle that aborts this group from another thread.
    pub fn abort_handle(&self) -> ShmAbortHandle {
        ShmAbortHandle {
            rank: self.rank,
            segs: self.segs.clone(),
        }
    }

    /// Aborts the group: peers' waits fail naming this rank and `reason`; later calls here
    /// fail with [`Error::Aborted`].
    pub fn abort(&mut self, reason: &str) {
        self.abort_handle().abort(reason);
        self.failed.get_or_insert_with(|| reason.to_string());
    }

    /// The data buffer of the next use. Uses alternate between the two buffers, so a rank may
    /// overwrite a buffer once every peer has published a step after its last use of the
    /// other one (Note [Shared-memory protocol]).
    pub fn next_buffer(&mut self) -> BufferId {
        let b = BufferId((self.uses % 2) as usize);
        self.uses += 1;
        b
    }

    fn buffer_ptr(&self, rank: usize, b: BufferId, range: &Range<usize>) -> *mut u8 {
        assert!(
            range.start <= range.end && range.end <= self.buffer_bytes,
            "range {range:?} outside a {}-byte buffer",
            self.buffer_bytes
        );
        // SAFETY: in bounds of the mapping: CONTROL_BYTES + 2 * buffer_bytes ≤ len (checked
        // in `new`) and `range` lies inside one buffer (asserted above).
        unsafe {
            self.segs[rank]
                .as_ptr()
                .add(CONTROL_BYTES + b.0 * self.buffer_bytes + range.start)
        }
    }

    /// Bytes `range` of `rank`'s buffer `b` (this rank's own included).
    ///
    /// # Safety
    /// No process may write these bytes while the slice lives: `rank` must have published
    /// them (this rank waited for that step) and not yet been allowed to reuse `b`, per Note
    /// [Shared-memory protocol]; for this rank's own buffer, no `own_buffer_mut` may overlap.
    pub unsafe fn buffer(&self, rank: usize, b: BufferId, range: Range<usize>) -> &[u8] {
        let p = self.buffer_ptr(rank, b, &range);
        // SAFETY: in bounds and live as long as `self` (segments are held in `self.segs`);
        // immutability for the lifetime is the caller's contract.
        unsafe { std::slice::from_raw_parts(p, range.len()) }
    }

    /// Bytes `range` of this rank's buffer `b`, for writing.
    ///
    /// # Safety
    /// No peer may read these bytes while the slice lives: peers read a buffer only between
    /// the step that publishes it and their next step, per Note [Shared-memory protocol].
    pub unsafe fn own_buffer_mut(&mut self, b: BufferId, range: Range<usize>) -> &mut [u8] {
        let p = self.buffer_ptr(self.rank, b, &range);
        // SAFETY: in bounds, live as long as `self`, and `&mut self` excludes other slices
        // from this group; exclusivity against peers is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(p, range.len()) }
    }

    /// Publishes this rank's next step of collective `fp`: everything it wrote to its buffers
    /// before becomes visible to peers that wait for the step.
    pub fn publish(&mut self, fp: &Fingerprint) -> Result<()> {
        let me = Control::of(&self.segs[self.rank]);
        if let Some(reason) = self.failed.clone().or_else(|| me.read_abort()) {
            return Err(Error::Aborted { reason });
        }
        self.step += 1;
        me.write_fp(self.step, &frame::encode_data(fp, 0));
        // SeqCst store, then SeqCst load of the waiter count: with a sleeper's SeqCst
        // increment followed by its SeqCst load of the step, at least one side sees the
        // other, so a sleeper is never left waiting for a step already published.
        me.step().store(self.step, Ordering::SeqCst);
        if me.waiters().load(Ordering::SeqCst) > 0 {
            me.futex().fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(me.futex());
        }
        Ok(())
    }

    /// Waits until `peer` has published this rank's current step, then checks that the step
    /// belongs to the same collective (`fp`).
    pub fn wait_for(&mut self, peer: usize, fp: &Fingerprint) -> Result<()> {
        if let Some(reason) = &self.failed {
            return Err(Error::Aborted {
                reason: reason.clone(),
            });
        }
        let r = self
            .waiter
            .wait(&self.segs, self.rank, peer, self.step, fp)
            .and_then(|()| self.check_fp(peer, fp));
        r.inspect_err(|e| self.fail(e))
    }

    /// [`wait_for`](Self::wait_for) every peer.
    pub fn wait_all(&mut self, fp: &Fingerprint) -> Result<()> {
        for p in 0..self.world {
            if p != self.rank {
                self.wait_for(p, fp)?;
            }
        }
        Ok(())
    }

    fn check_fp(&self, peer: usize, fp: &Fingerprint) -> Result<()> {
        // The peer cannot overwrite this slot before this rank publishes its next step: it
        // reuses a parity slot two steps later, and it needs our next step first.
        let bytes = Control::of(&self.segs[peer]).read_fp(self.step);
        match frame::decode(&bytes) {
            Ok(frame::Header::Data { fp: theirs, .. }) if theirs == *fp => Ok(()),
            Ok(frame::Header::Data { fp: theirs, .. }) => Err(Error::Mismatch {
                me: self.rank,
                peer,
                ours: *fp,
                theirs,
            }),
            Ok(frame::Header::Abort { .. }) => Err(Error::Frame {
                peer,
                source: frame::FrameError::BadType(0xAB),
            }),
            Err(source) => Err(Error::Frame { peer, source }),
        }
    }

    /// Marks the group failed and tells the peers why, so that they stop waiting for this
    /// rank at once with the root cause instead of timing out.
    fn fail(&mut self, e: &Error) {
        if self.failed.is_none() {
            let reason = e.to_string();
            self.abort_handle().abort(&reason);
            self.failed = Some(reason);
        }
    }

    /// Publishes a step and waits for every peer's: a barrier of `fp`.
    pub fn step_all(&mut self, fp: &Fingerprint) -> Result<()> {
        self.publish(fp)?;
        self.wait_all(fp)
    }
}

/// Probes whether this rank can read every peer's memory, publishes the verdict, and waits
/// for every peer's (Note [Single copy]): true when all are yes.
fn agree_single_copy(
    segs: &[ShmSegment],
    rank: usize,
    pids: &[u32],
    same_ns: bool,
    deadline: Instant,
    timeout: Duration,
) -> Result<bool> {
    let wanted = env::get(env::PHALANX_SHM_SINGLE_COPY).is_none_or(|v| v != "0");
    let can = wanted
        && same_ns
        && segs.iter().enumerate().all(|(p, seg)| {
            if p == rank {
                return true;
            }
            let c = Control::of(seg);
            let (addr, want) = (
                c.probe_addr().load(Ordering::Relaxed),
                c.probe_value().load(Ordering::Relaxed),
            );
            let mut got = [0u8; 8];
            sys::read_process(pids[p], addr, &mut got).is_ok() && u64::from_ne_bytes(got) == want
        });
    Control::of(&segs[rank])
        .single_copy()
        .store(if can { 1 } else { 2 }, Ordering::Release);
    let mut all = can;
    for (p, seg) in segs.iter().enumerate() {
        let c = Control::of(seg);
        loop {
            match c.single_copy().load(Ordering::Acquire) {
                0 if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(100)),
                0 => {
                    return Err(Error::Timeout {
                        during: "shared-memory group setup (single-copy verdicts)".into(),
                        waiting_for: vec![p],
                        after: timeout,
                    })
                }
                v => {
                    all &= v == 1;
                    break;
                }
            }
        }
    }
    Ok(all)
}

impl Drop for ShmGroup {
    /// Leaving tells peers still waiting for a step of this rank that it will never come
    /// (a panicking or returning rank thread); peers waiting for steps it already published
    /// are unaffected (see `check_aborts` in `wait.rs`).
    fn drop(&mut self) {
        if self.failed.is_none() && self.world > 1 {
            self.abort_handle()
                .abort(&format!("rank {} left the shared-memory group", self.rank));
        }
    }
}
