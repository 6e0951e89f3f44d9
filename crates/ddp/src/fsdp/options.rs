//! [`Sharding`] (what each rank keeps whole and what only its shard of) and [`FsdpOptions`].

use phalanx_pg::ProcessGroup;

use crate::{BucketMemory, DdpOptions, Error, Result};

/// What is sharded across the ranks of a data-parallel group, and how that maps onto ZeRO's
/// stages and PyTorch's FSDP strategies (`phalanx train --sharding`).
///
/// | `--sharding` | ZeRO | PyTorch | per rank, between steps (Adam, f32) |
/// |---|---|---|---|
/// | `none` | stage 0 | DDP, FSDP `NO_SHARD` | 16 bytes per parameter |
/// | `optimizer` | stage 1 | `ZeroRedundancyOptimizer` | 4 + 4 + 8/n |
/// | `grad` | stage 2 | FSDP `SHARD_GRAD_OP` | 4 + 12/n |
/// | `full` | stage 3 | FSDP `FULL_SHARD`, FSDP2 `fully_shard` | 16/n |
/// | `hybrid` | stage 3 within a host | FSDP `HYBRID_SHARD`, HSDP | 16/local ranks |
///
/// (`optimizer` keeps the whole averaged gradient through the step; `grad` only its shard.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharding {
    /// Every rank keeps everything (DDP).
    #[default]
    None,
    /// Optimizer state sharded: gradients are averaged by allreduce as under DDP, each rank
    /// steps the elements it owns, then the updated parameters are all-gathered.
    Optimizer,
    /// Optimizer state and gradients sharded: gradients are reduce-scattered, each rank keeps
    /// and steps only its shard, then the updated parameters are all-gathered.
    Grad,
    /// Parameters too: between steps a rank holds only its shard of everything; parameters
    /// are all-gathered for the forward pass (per wrapped block with [`FullyShard`], or the
    /// whole model) and freed after the step.
    ///
    /// [`FullyShard`]: crate::fsdp::FullyShard
    Full,
    /// `full` among the ranks of each host (shared memory), replicated across hosts: the
    /// shards are averaged across hosts after the reduce-scatter within each.
    Hybrid,
}

impl Sharding {
    /// Every choice, in order.
    pub const ALL: [Sharding; 5] = [
        Sharding::None,
        Sharding::Optimizer,
        Sharding::Grad,
        Sharding::Full,
        Sharding::Hybrid,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Sharding::None => "none",
            Sharding::Optimizer => "optimizer",
            Sharding::Grad => "grad",
            Sharding::Full => "full",
            Sharding::Hybrid => "hybrid",
        }
    }

    /// Whether the optimizer state is sharded (every mode but `none`).
    pub fn shards_optimizer(self) -> bool {
        self != Sharding::None
    }

    /// Whether gradients are reduce-scattered into shards.
    pub fn shards_gradients(self) -> bool {
        matches!(self, Sharding::Grad | Sharding::Full | Sharding::Hybrid)
    }

    /// Whether parameters are sharded between steps.
    pub fn shards_parameters(self) -> bool {
        matches!(self, Sharding::Full | Sharding::Hybrid)
    }
}

impl std::fmt::Display for Sharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Sharding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let want = s.trim().to_ascii_lowercase();
        Sharding::ALL
            .into_iter()
            .find(|m| m.name() == want)
            .ok_or_else(|| {
                format!(
                    "unknown sharding {s:?}: expected none, optimizer (ZeRO-1), grad (ZeRO-2), \
                     full (ZeRO-3, FSDP) or hybrid (HSDP)"
                )
            })
    }
}

/// Options of [`FullyShardedDataParallel`](crate::fsdp::FullyShardedDataParallel).
#[derive(Debug, Clone)]
pub struct FsdpOptions {
    /// What is sharded.
    pub sharding: Sharding,
    /// DDP's options: the buckets (their caps and gradient-as-bucket-view decide each rank's
    /// shard, Note [Shard layout]), the initial broadcast and the buffer synchronisation. The
    /// communication hook must be the default and buckets live on the host.
    pub ddp: DdpOptions,
    /// Under `full`: whether a wrapped block frees its gathered parameters after its forward
    /// and gathers them again (recomputing its forward) for its backward, as FSDP2's
    /// `reshard_after_forward=True` (true, the default), or keeps them until its backward
    /// (Note [Full sharding] in `fully_sharded/mod.rs`).
    pub reshard_after_forward: bool,
    /// Under `hybrid`: the ranks of each shard group (consecutive ranks; the world is that many
    /// groups' replicas). `None`: the ranks of one host (`LOCAL_WORLD_SIZE`, equal on every
    /// host), HSDP's usual mesh.
    pub shard_group_size: Option<usize>,
}

impl Default for FsdpOptions {
    fn default() -> Self {
        FsdpOptions {
            sharding: Sharding::Full,
            ddp: DdpOptions::default(),
            reshard_after_forward: true,
            shard_group_size: None,
        }
    }
}

impl FsdpOptions {
    /// The options of `sharding`, DDP's defaults otherwise.
    pub fn new(sharding: Sharding) -> Self {
        FsdpOptions {
            sharding,
            ..FsdpOptions::default()
        }
    }

    /// Sets DDP's options (buckets, broadcast, buffers).
    pub fn with_ddp(mut self, ddp: DdpOptions) -> Self {
        self.ddp = ddp;
        self
    }

    /// Sets the size of `hybrid`'s shard groups (default: the ranks of one host).
    pub fn with_shard_group_size(mut self, size: Option<usize>) -> Self {
        self.shard_group_size = size;
        self
    }

    /// Sets whether wrapped blocks free their parameters after their forward.
    pub fn with_reshard_after_forward(mut self, yes: bool) -> Self {
        self.reshard_after_forward = yes;
        self
    }

    /// Refuses what sharding cannot do in `pg`, naming both sides.
    pub(crate) fn check(&self, pg: &ProcessGroup) -> Result<()> {
        let options = self;
        let sharding = options.sharding;
        let refuse = |reason: String| Err(Error::Options { reason });
        if sharding == Sharding::None {
            return refuse(
                "--sharding none is DDP: use DistributedDataParallel for it".to_string(),
            );
        }
        if !options.ddp.comm_hook.is_plain_average() {
            return refuse(format!(
                "--sharding {sharding} averages gradients itself; the communication hook `{}` \
                 cannot be combined with it",
                options.ddp.comm_hook.name()
            ));
        }
        if options.ddp.bucket_memory == BucketMemory::Device {
            return refuse(format!(
                "--sharding {sharding} keeps gradients in host buckets; BucketMemory::Device \
                 cannot be combined with it"
            ));
        }
        if sharding.shards_gradients() && pg.backend() != "native" && pg.world_size() > 1 {
            return refuse(format!(
                "--sharding {sharding} reduce-scatters gradients into blocks of different sizes \
                 (reduce_scatter_v), which the {} backend does not offer; use --backend native",
                pg.backend()
            ));
        }
        if sharding.shards_optimizer() && pg.backend() != "native" && pg.world_size() > 1 {
            return refuse(format!(
                "--sharding {sharding} all-gathers parameters in blocks of different sizes \
                 (allgather_v), which the {} backend does not offer; use --backend native",
                pg.backend()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_an_unknown_one_lists_the_choices() {
        for m in Sharding::ALL {
            assert_eq!(m.name().parse::<Sharding>(), Ok(m));
        }
        let e = "zero3".parse::<Sharding>().unwrap_err();
        assert!(
            e.contains("\"zero3\"") && e.contains("optimizer (ZeRO-1)"),
            "{e}"
        );
    }
}
