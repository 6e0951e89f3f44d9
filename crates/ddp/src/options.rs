//! [`DdpOptions`]: bucket sizes, the init broadcast and the communication hook.

use std::sync::Arc;

use crate::bucket::{DEFAULT_BUCKET_BYTES_CAP, DEFAULT_FIRST_BUCKET_BYTES};
use crate::hook::{AllreduceHook, CommHook};

/// Options of [`DistributedDataParallel`](crate::DistributedDataParallel), PyTorch's defaults.
#[derive(Debug, Clone)]
pub struct DdpOptions {
    /// Cap of every bucket after the first (`bucket_cap_mb`, 25 MiB).
    pub bucket_cap_bytes: usize,
    /// Cap of the first bucket launched (1 MiB).
    pub first_bucket_bytes: usize,
    /// Whether construction broadcasts rank 0's parameters (`broadcast_buffers`-like; true).
    pub broadcast_params: bool,
    /// How buckets are averaged ([`AllreduceHook`] by default).
    pub comm_hook: Arc<dyn CommHook>,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_bytes: DEFAULT_BUCKET_BYTES_CAP,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
            broadcast_params: true,
            comm_hook: Arc::new(AllreduceHook),
        }
    }
}

impl DdpOptions {
    /// Sets the cap of the buckets after the first, in MiB (PyTorch's `bucket_cap_mb`).
    pub fn with_bucket_cap_mb(mut self, mib: f64) -> Self {
        self.bucket_cap_bytes = ((mib * 1024.0 * 1024.0) as usize).max(1);
        self
    }

    /// Sets the cap of the first bucket, in bytes.
    pub fn with_first_bucket_bytes(mut self, bytes: usize) -> Self {
        self.first_bucket_bytes = bytes.max(1);
        self
    }

    /// Whether construction broadcasts rank 0's parameters.
    pub fn with_broadcast_params(mut self, yes: bool) -> Self {
        self.broadcast_params = yes;
        self
    }

    /// Sets the communication hook (PyTorch's `register_comm_hook`).
    pub fn with_comm_hook(mut self, hook: impl CommHook + 'static) -> Self {
        self.comm_hook = Arc::new(hook);
        self
    }
}
