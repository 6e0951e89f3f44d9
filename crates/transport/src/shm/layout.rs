//! The control block at the start of every rank's segment, and typed access to its words.
//!
//! ```text
//! offset  line  contents (written by the segment's rank unless noted)
//!      0     0  magic (u64, stored last at init), version, world, rank, pid, buffer_bytes,
//!               pid-namespace id, single-copy probe address and value, single-copy verdict
//!     64     1  step (u64): the last step this rank published
//!    128     2  fingerprints of steps with even/odd numbers (2 × 32 bytes)
//!    192     3  waiters (u32, incremented by *peers* about to sleep), futex word (u32)
//!    256     4  abort state (u32: 0 none, 1 being written, 2 published), reason length,
//!               exposed region (address, length: Note [Single copy] in `group.rs`)
//!    320        abort reason (up to MAX_REASON bytes)
//!   4096        data: buffer 0, then buffer 1 (buffer_bytes each)
//! ```
//!
//! The step word sits alone on its line because peers spin on it; the waiter/futex line is
//! touched only on the slow path.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::segment::ShmSegment;

/// "PHXSHM01" in little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"PHXSHM01");
/// Layout version; bumped on any change to this file's offsets.
pub(crate) const VERSION: u32 = 2;
/// Bytes before the data buffers.
pub(crate) const CONTROL_BYTES: usize = 4096;
/// Longest abort reason kept in the segment.
pub(crate) const MAX_REASON: usize = CONTROL_BYTES - OFF_REASON;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_WORLD: usize = 12;
const OFF_RANK: usize = 16;
const OFF_PID: usize = 20;
const OFF_BUFFER_BYTES: usize = 24;
const OFF_PIDNS: usize = 32;
const OFF_PROBE_ADDR: usize = 40;
const OFF_PROBE_VALUE: usize = 48;
const OFF_SINGLE_COPY: usize = 56;
const OFF_STEP: usize = 64;
const OFF_FP: usize = 128;
const OFF_WAITERS: usize = 192;
const OFF_FUTEX: usize = 196;
const OFF_ABORT: usize = 256;
const OFF_REASON_LEN: usize = 260;
const OFF_EXPOSED_ADDR: usize = 272;
const OFF_EXPOSED_LEN: usize = 280;
const OFF_REASON: usize = 320;

// Abort states.
const ABORT_NONE: u32 = 0;
const ABORT_WRITING: u32 = 1;
const ABORT_PUBLISHED: u32 = 2;

/// Typed view of one segment's control block.
#[derive(Clone, Copy)]
pub(crate) struct Control<'a> {
    seg: &'a ShmSegment,
}

impl<'a> Control<'a> {
    /// The control block of `seg`, which must be at least [`CONTROL_BYTES`] long.
    pub(crate) fn of(seg: &'a ShmSegment) -> Self {
        assert!(
            seg.len() >= CONTROL_BYTES,
            "segment smaller than its control block"
        );
        Control { seg }
    }

    fn u64_at(&self, off: usize) -> &'a AtomicU64 {
        debug_assert!(off & 7 == 0 && off + 8 <= CONTROL_BYTES);
        // SAFETY: the mapping is page-aligned and at least CONTROL_BYTES long (checked in
        // `of`), so `off` is in bounds and 8-aligned; it lives as long as `'a`; every process
        // touches these bytes only through atomics, so there is no data race.
        unsafe { &*(self.seg.as_ptr().add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &'a AtomicU32 {
        debug_assert!(off & 3 == 0 && off + 4 <= CONTROL_BYTES);
        // SAFETY: as in `u64_at`, with 4-byte alignment.
        unsafe { &*(self.seg.as_ptr().add(off) as *const AtomicU32) }
    }

    pub(crate) fn magic(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_MAGIC)
    }
    pub(crate) fn version(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_VERSION)
    }
    pub(crate) fn world(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_WORLD)
    }
    pub(crate) fn rank(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_RANK)
    }
    pub(crate) fn pid(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_PID)
    }
    pub(crate) fn buffer_bytes(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_BUFFER_BYTES)
    }
    pub(crate) fn pid_ns(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_PIDNS)
    }
    /// Where this process keeps its single-copy probe, and the value there.
    pub(crate) fn probe_addr(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_PROBE_ADDR)
    }
    pub(crate) fn probe_value(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_PROBE_VALUE)
    }
    /// This rank's single-copy verdict: 0 not yet, 1 it can read every peer, 2 it cannot.
    pub(crate) fn single_copy(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_SINGLE_COPY)
    }
    /// The region of its own memory this rank lets peers read in the current collective.
    pub(crate) fn exposed_addr(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_EXPOSED_ADDR)
    }
    pub(crate) fn exposed_len(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_EXPOSED_LEN)
    }
    /// The last step this rank published.
    pub(crate) fn step(&self) -> &'a AtomicU64 {
        self.u64_at(OFF_STEP)
    }
    /// Peers sleeping (or about to) on this rank's futex word.
    pub(crate) fn waiters(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_WAITERS)
    }
    /// Bumped before every FUTEX_WAKE on this segment.
    pub(crate) fn futex(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_FUTEX)
    }
    pub(crate) fn abort(&self) -> &'a AtomicU32 {
        self.u32_at(OFF_ABORT)
    }

    /// Writes the 32-byte fingerprint of `step` into its parity slot (before the step is
    /// published with Release).
    pub(crate) fn write_fp(&self, step: u64, fp: &[u8; 32]) {
        let base = OFF_FP + (step % 2) as usize * 32;
        for (i, w) in fp.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8-byte chunk"));
            self.u64_at(base + 8 * i).store(v, Ordering::Relaxed);
        }
    }

    /// Reads the fingerprint of `step` (after its publication was observed with Acquire).
    pub(crate) fn read_fp(&self, step: u64) -> [u8; 32] {
        let base = OFF_FP + (step % 2) as usize * 32;
        let mut out = [0u8; 32];
        for (i, w) in out.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(
                &self
                    .u64_at(base + 8 * i)
                    .load(Ordering::Relaxed)
                    .to_le_bytes(),
            );
        }
        out
    }

    /// Claims the abort state and publishes `reason`; the first abort wins.
    pub(crate) fn publish_abort(&self, reason: &str) -> bool {
        if self
            .abort()
            .compare_exchange(
                ABORT_NONE,
                ABORT_WRITING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        let mut r = reason.as_bytes();
        if r.len() > MAX_REASON {
            r = &r[..MAX_REASON];
        }
        // SAFETY: OFF_REASON..OFF_REASON+MAX_REASON lies inside the control block; only the
        // claimant of ABORT_WRITING writes it, and readers read it only after observing
        // ABORT_PUBLISHED (Release below, Acquire in `read_abort`).
        unsafe {
            std::ptr::copy_nonoverlapping(r.as_ptr(), self.seg.as_ptr().add(OFF_REASON), r.len())
        };
        self.u32_at(OFF_REASON_LEN)
            .store(r.len() as u32, Ordering::Relaxed);
        self.abort().store(ABORT_PUBLISHED, Ordering::Release);
        true
    }

    /// The abort reason, once one is published (`None` while it is being written: the
    /// writer publishes within microseconds and slow waits poll again).
    pub(crate) fn read_abort(&self) -> Option<String> {
        match self.abort().load(Ordering::Acquire) {
            ABORT_NONE => None,
            ABORT_PUBLISHED => {
                let len =
                    (self.u32_at(OFF_REASON_LEN).load(Ordering::Relaxed) as usize).min(MAX_REASON);
                let mut bytes = vec![0u8; len];
                // SAFETY: in bounds (len ≤ MAX_REASON); written once before ABORT_PUBLISHED,
                // which we observed with Acquire, and never again.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.seg.as_ptr().add(OFF_REASON),
                        bytes.as_mut_ptr(),
                        len,
                    )
                };
                Some(String::from_utf8_lossy(&bytes).into_owned())
            }
            _ => None,
        }
    }
}
