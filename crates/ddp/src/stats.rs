//! Communication statistics of gradient synchronisation, for the `comm_fraction` metric.

use std::time::Duration;

/// Time and bytes spent synchronising gradients, totals since construction plus the last step.
///
/// `wait` is the time the training thread was blocked waiting for buckets after packing them: the
/// communication that did not overlap with packing. `comm_fraction` of a run is
/// `wait / step time`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommStats {
    /// Synchronising steps so far.
    pub syncs: u64,
    /// Buckets launched so far.
    pub buckets: u64,
    /// Bytes of gradients handed to the hooks (in their wire dtype), this rank's contribution.
    pub bytes: u64,
    /// Total time blocked on bucket completion.
    pub wait: Duration,
    /// Total time in `sync_gradients` (packing, waiting, unpacking).
    pub sync: Duration,
    /// Blocked time of the last synchronising step.
    pub last_wait: Duration,
    /// Time of the last synchronising step.
    pub last_sync: Duration,
}

impl CommStats {
    pub(crate) fn record(&mut self, wait: Duration, sync: Duration, buckets: usize, bytes: u64) {
        self.syncs += 1;
        self.buckets += buckets as u64;
        self.bytes += bytes;
        self.wait += wait;
        self.sync += sync;
        self.last_wait = wait;
        self.last_sync = sync;
    }
}
