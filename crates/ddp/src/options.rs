//! [`DdpOptions`]: bucket sizes and memory, the init broadcast and the communication hook.

use std::sync::Arc;

use crate::bucket::{
    compute_bucket_assignment_by_size, isolate_large, DEFAULT_BUCKET_BYTES_CAP,
    DEFAULT_FIRST_BUCKET_BYTES, DEFAULT_VIEW_MIN_BYTES,
};
use crate::hook::{AllreduceHook, CommHook};
use crate::model_norm::ModelNorm;

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
    /// Where buckets live ([`BucketMemory::Auto`] by default).
    pub bucket_memory: BucketMemory,
    /// How buffers (BatchNorm's running statistics) are made equal after every step
    /// ([`BufferSync::Broadcast`] by default, PyTorch's `broadcast_buffers=True`).
    pub buffer_sync: BufferSync,
    /// Whether a gradient of at least
    /// [`DEFAULT_VIEW_MIN_BYTES`](crate::bucket::DEFAULT_VIEW_MIN_BYTES) travels alone in its own memory
    /// instead of being copied into and out of a bucket (PyTorch's `gradient_as_bucket_view`;
    /// Note [Gradient as bucket view] in `bucket.rs`). True by default; host buckets only.
    pub gradient_as_bucket_view: bool,
    /// Under tensor or pipeline parallelism, where the rest of the model's gradient norm is
    /// (Note [Norm across a cut model]): a clipped step's norm is then the whole model's.
    /// `None` (the default): the engine's module is the whole model.
    pub model_norm: Option<Arc<ModelNorm>>,
}

/// How buffers are synchronised after every step (Note [Parameters, buffers and frozen] in
/// `adapter/burn.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BufferSync {
    /// Every rank takes the values of the lowest rank that ran the step (rank 0 unless it has
    /// joined): PyTorch's `broadcast_buffers=True`. Replicas, buffers included, are bitwise
    /// identical at the end of every step.
    #[default]
    Broadcast,
    /// Every rank takes the average over the ranks that ran the step (statistics of all the
    /// step's data); bitwise identical on every rank too.
    Average,
    /// Buffers stay per rank (PyTorch's `broadcast_buffers=False`): replicas' buffers drift.
    Off,
}

impl std::str::FromStr for BufferSync {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "broadcast" => Ok(BufferSync::Broadcast),
            "average" | "avg" => Ok(BufferSync::Average),
            "off" | "none" => Ok(BufferSync::Off),
            _ => Err(format!(
                "unknown buffer sync {s:?}: expected broadcast, average or off"
            )),
        }
    }
}

/// Where gradient buckets live between backward and the optimizer step (Note [Device buckets]
/// in `adapter/device_buckets.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BucketMemory {
    /// `Device` when the parameters are on a CUDA GPU and the hook is the default allreduce
    /// (averaged in place by NCCL under the nccl backend, through page-locked host memory
    /// under the others); `Host` otherwise.
    #[default]
    Auto,
    /// Flat host `f32` buffers, averaged by the communication hook, overlapping packing: any
    /// device, any backend.
    Host,
    /// Flat tensors on the parameters' device, averaged in place by NCCL on a CUDA GPU with the
    /// nccl backend, through page-locked host memory on a CUDA GPU with another backend, and
    /// read back through the tensor library on other devices. The default allreduce only
    /// (hooks take host buffers).
    Device,
}

impl std::str::FromStr for BucketMemory {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(BucketMemory::Auto),
            "host" => Ok(BucketMemory::Host),
            "device" => Ok(BucketMemory::Device),
            _ => Err(format!(
                "unknown bucket memory {s:?}: expected auto, host or device"
            )),
        }
    }
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_bytes: DEFAULT_BUCKET_BYTES_CAP,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
            broadcast_params: true,
            comm_hook: Arc::new(AllreduceHook),
            bucket_memory: BucketMemory::Auto,
            buffer_sync: BufferSync::Broadcast,
            gradient_as_bucket_view: true,
            model_norm: None,
        }
    }
}

impl DdpOptions {
    /// The buckets DDP averages for trainable parameters of `numels` elements (`f32`), in
    /// launch order (Note [Bucket order] in `bucket.rs`); with `views`, every gradient of at
    /// least [`DEFAULT_VIEW_MIN_BYTES`] travels alone (Note [Gradient as bucket view]).
    pub fn bucket_assignment(&self, numels: &[usize], views: bool) -> Vec<Vec<usize>> {
        let sizes: Vec<usize> = numels.iter().map(|n| n * 4).collect();
        let caps = [
            self.first_bucket_bytes.min(self.bucket_cap_bytes),
            self.bucket_cap_bytes,
        ];
        let assignment = compute_bucket_assignment_by_size(&sizes, &caps);
        match views {
            true => isolate_large(assignment, &sizes, DEFAULT_VIEW_MIN_BYTES),
            false => assignment,
        }
    }

    /// How many buckets [`bucket_assignment`](Self::bucket_assignment) makes without views.
    pub fn bucket_count(&self, numels: &[usize]) -> usize {
        self.bucket_assignment(numels, false).len()
    }

    /// Takes a clipped step's norm over the whole of a model cut across ranks (Note [Norm
    /// across a cut model]).
    pub fn with_model_norm(mut self, norm: Arc<ModelNorm>) -> Self {
        self.model_norm = Some(norm);
        self
    }

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

    /// Sets where buckets live.
    pub fn with_bucket_memory(mut self, memory: BucketMemory) -> Self {
        self.bucket_memory = memory;
        self
    }

    /// Sets how buffers are synchronised after every step.
    pub fn with_buffer_sync(mut self, sync: BufferSync) -> Self {
        self.buffer_sync = sync;
        self
    }

    /// Sets whether large gradients travel in their own memory (Note [Gradient as bucket view]).
    pub fn with_gradient_as_bucket_view(mut self, yes: bool) -> Self {
        self.gradient_as_bucket_view = yes;
        self
    }

    /// Sets the communication hook (PyTorch's `register_comm_hook`).
    pub fn with_comm_hook(mut self, hook: impl CommHook + 'static) -> Self {
        self.comm_hook = Arc::new(hook);
        self
    }
}
