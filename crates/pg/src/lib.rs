//! The process group: how a training process joins its job and runs collectives.
//!
//! [`init_process_group`] reads the launcher's environment (torchrun's `RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, …, or Open MPI's, MPICH's and Slurm's), reaches the rendezvous store,
//! connects a TCP mesh and returns a [`ProcessGroup`]. Every collective has a blocking form
//! and an async form returning a [`Work`]; the first failure anywhere fails every rank's
//! pending collectives with the root cause (see Note [Fail fast] in `process_group.rs`).
//!
//! Collectives run on one backend ([`BackendType`]): phalanx's own algorithms over TCP and
//! shared memory (the default), or, with the `mpi` cargo feature, the MPI library's
//! (`init_mpi`, or [`init_backend`]`(BackendType::Mpi)` under `mpirun`; `docs/mpi.md`), or,
//! with the `nccl` cargo feature, NCCL's on this rank's GPU (`init_nccl`, or
//! [`init_backend`]`(BackendType::Nccl)`; `docs/gpu.md`). The job's store can be an etcd
//! cluster's (`--rdzv-backend etcd`) through the `etcd` cargo feature, on by default (Note [A
//! build without the etcd client] in phalanx-store). The object collectives
//! ([`all_gather_object`], …) are free functions over a group, as in torch.distributed.
//!
//! ```
//! // One process with no launcher variables is a group of one.
//! use phalanx_core::ReduceOp;
//! let pg = phalanx_pg::init_process_group().unwrap();
//! let mut grads = vec![1.0f32, 2.0];
//! pg.allreduce(&mut grads, ReduceOp::Avg).unwrap();
//! let grads = pg.allreduce_async(grads, ReduceOp::Sum).wait().unwrap();
//! assert_eq!((pg.rank(), pg.world_size(), grads), (0, 1, vec![1.0, 2.0]));
//! ```
#![warn(missing_docs, unreachable_pub)]

mod backend;
mod backend_type;
pub mod bootstrap;
mod check;
#[cfg(feature = "nccl")]
mod device_collectives;
mod dist_env;
mod error;
mod exec;
mod fault_tolerance;
pub mod flight_recorder;
mod init;
mod mesh;
#[cfg(feature = "mpi")]
mod mpi;
mod native;
#[cfg(feature = "nccl")]
mod nccl;
mod object_collectives;
mod p2p_op;
mod pending;
#[cfg(feature = "nccl")]
mod pinned;
mod placement;
mod process_group;
mod progress;
mod shared;
mod shm_setup;
mod subgroup;
mod work;

pub use backend_type::{init_backend, init_process_group, BackendType};
#[cfg(feature = "nccl")]
pub use device_collectives::DeviceSlice;
pub use dist_env::{first_host, tasks_on_node, DistEnv, DEFAULT_MASTER_PORT};
pub use error::{Error, Result};
pub use fault_tolerance::FaultTolerance;
#[cfg(feature = "mpi")]
pub use init::init_mpi;
#[cfg(feature = "nccl")]
pub use init::init_nccl;
pub use init::{collective_options, connect, init_with, InitOptions};
pub use mesh::Mesh;
#[cfg(feature = "nccl")]
pub use nccl::nccl_probe;
pub use object_collectives::{
    all_gather_object, broadcast_object, gather_object, scatter_object_list,
};
pub use p2p_op::P2POp;
pub use phalanx_collectives::Options as CollectiveOptions;
#[cfg(feature = "nccl")]
pub use pinned::PinnedStaging;
pub use placement::Placement;
pub use process_group::ProcessGroup;
pub use subgroup::{new_group, new_subgroups, new_subgroups_by_host, split_group};
pub use work::Work;
