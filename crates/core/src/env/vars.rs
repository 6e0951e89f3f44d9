//! The registry itself: [`Category`], [`EnvVar`] and one constant per variable, declared once
//! each through `vars!` with its default, meaning and category, collected in [`REGISTRY`] in
//! documentation order.

/// Whether a variable configures the system or helps debugging (NCCL's split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Read by `init_process_group`; set by launchers and schedulers.
    Launcher,
    /// Configures phalanx for the system it runs on.
    Config,
    /// Debugging aids; do not keep them in production.
    Debug,
}

/// One documented environment variable.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// Default, as text (`""` when unset means "not set").
    pub default: &'static str,
    /// What it does and the values accepted.
    pub doc: &'static str,
    /// Version that introduced it.
    pub since: &'static str,
    /// Config or debug.
    pub category: Category,
}

macro_rules! vars {
    ($($id:ident = ($cat:ident, $default:expr, $doc:expr);)*) => {
        $(
            #[doc = $doc]
            pub const $id: EnvVar = EnvVar {
                name: stringify!($id),
                default: $default,
                doc: $doc,
                since: "0.1",
                category: Category::$cat,
            };
        )*
        /// Every variable, in documentation order.
        pub const REGISTRY: &[EnvVar] = &[$($id),*];
    };
}

vars! {
    RANK = (Launcher, "", "Global rank of this process, 0..WORLD_SIZE. Set by `phalanx launch` and torchrun.");
    WORLD_SIZE = (Launcher, "", "Number of processes in the job.");
    LOCAL_RANK = (Launcher, "", "Rank of this process on its host, 0..LOCAL_WORLD_SIZE.");
    LOCAL_WORLD_SIZE = (Launcher, "", "Number of processes on this host.");
    GROUP_RANK = (Launcher, "", "Rank of this host (node) among the job's hosts.");
    MASTER_ADDR = (Launcher, "127.0.0.1", "Address of the rendezvous store (node rank 0).");
    MASTER_PORT = (Launcher, "29500", "Port of the rendezvous store.");
    PHALANX_TOKEN = (Config, "", "Job secret used to authenticate every connection (HMAC-SHA256 challenge). `phalanx launch` generates a random one per job; set it yourself for multi-host jobs started without the launcher's store. Never logged.");
    PHALANX_JOB_ID = (Config, "", "Identifier of the job, sent in every handshake so that two jobs sharing a port never mix. Set by `phalanx launch`.");
    PHALANX_STORE_PREFIX = (Launcher, "", "Prefix of the store keys of the current worker group, `round/<n>` (use it with `PrefixStore`, giving keys `round/<n>/key`); `phalanx launch` sets a new one for each restart round so that a restarted group never reads the previous round's keys.");
    PHALANX_ETCD_ENDPOINTS = (Launcher, "", "Set by `phalanx launch --rdzv-backend etcd` in every worker: `host:port[,host:port…]` of the etcd members that hold the job's store (with `PHALANX_ETCD_PREFIX`). The process group, fault tolerance and heartbeats then use etcd instead of the store at `MASTER_ADDR`.");
    PHALANX_ETCD_PREFIX = (Launcher, "", "Set with `PHALANX_ETCD_ENDPOINTS`: the job's key prefix in etcd, `/phalanx/<rdzv-id>/`.");
    PHALANX_ETCD_CACERT = (Launcher, "", "Set with `PHALANX_ETCD_ENDPOINTS` from `--rdzv-conf cacert=`: the PEM file of the authority that signed the etcd members' certificates (TLS).");
    PHALANX_ETCD_CERT = (Launcher, "", "Set with `PHALANX_ETCD_ENDPOINTS` from `--rdzv-conf cert=`: this client's PEM certificate (mutual TLS), with `PHALANX_ETCD_KEY`.");
    PHALANX_ETCD_KEY = (Launcher, "", "Set with `PHALANX_ETCD_CERT` from `--rdzv-conf key=`: this client's PEM private key.");
    PHALANX_ETCD_USER = (Launcher, "", "Set with `PHALANX_ETCD_ENDPOINTS` from `--rdzv-conf user=`: etcd's user name, with `PHALANX_ETCD_PASSWORD`.");
    PHALANX_ETCD_PASSWORD = (Launcher, "", "Set with `PHALANX_ETCD_USER` from `--rdzv-conf password=`: etcd's password. Never logged.");
    PHALANX_LAUNCHED = (Launcher, "", "Set to `1` by `phalanx launch` in every worker: a `phalanx train`/`bench` that sees it acts as one worker instead of launching itself.");
    PHALANX_TIMEOUT = (Config, "300s", "Progress timeout for store operations, rendezvous and collectives: a wait that makes no progress for this long fails. Accepts `300`, `300s`, `5m`, `250ms`.");
    PHALANX_SOCKET_IFNAME = (Config, "", "Network interface(s) to use, NCCL's syntax: `eth0` (prefix), `eth,ib` (prefix list), `^docker0,lo` (exclude), `=eth0` (exact). When unset, `GLOO_SOCKET_IFNAME`, then `NCCL_SOCKET_IFNAME` decide, each with its own syntax; when none is set: the interface that routes to MASTER_ADDR. `phalanx env`, `phalanx doctor` and the INFO logs say which variable decided.");
    GLOO_SOCKET_IFNAME = (Config, "", "PyTorch's Gloo variable, read when `PHALANX_SOCKET_IFNAME` is unset: a comma list of exact interface names (`eth0,eth1`; no prefixes, no `^`). phalanx listens on one of the listed interfaces that has an address (IPv4 first, in the system's order, as for the other two variables); the NCCL backend gets it as `NCCL_SOCKET_IFNAME==eth0,eth1` when that is unset.");
    NCCL_SOCKET_IFNAME = (Config, "", "NCCL's variable, read when `PHALANX_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` are unset, with NCCL's syntax (as `PHALANX_SOCKET_IFNAME`). NCCL itself reads it first: under `--backend nccl` it wins over the other two, which only fill it in when it is unset.");
    PHALANX_BACKEND = (Config, "native", "Process-group backend of `init_process_group` and the `--backend` flags: `native` (TCP and shared memory), `mpi` (build with the `mpi` cargo feature, run under mpirun), `nccl` (build with the `nccl` feature; GPUs).");
    PHALANX_NCCL_LIBRARY = (Config, "", "Path of the NCCL library for `--backend nccl` (e.g. `/opt/nccl/lib/libnccl.so.2`). Default: `libnccl.so.2`, then `libnccl.so`, through the loader's search path, then `nvidia/{nccl,cu13,cu12}/lib` under Python's site-packages (PyPI's nvidia-nccl-cu12/cu13 wheels, as PyTorch installs them). `PHALANX_DEBUG=INFO` logs the file loaded.");
    PHALANX_PYTHON = (Config, "python3", "The interpreter `phalanx launch` runs a `.py` program or `-m MODULE` with (torchrun runs them with its own Python).");
    PHALANX_FAULT_TOLERANCE = (Launcher, "", "Set to 1 by `phalanx launch --fault-tolerance` in every worker: when a rank dies, the others re-form their process group without it and go on, and its replacement joins them later (Note [FT generations] in phalanx-pg) instead of everyone exiting.");
    PHALANX_FT_REPLACEMENT = (Launcher, "", "Set to 1 by `phalanx launch --fault-tolerance` in a worker started to replace a dead one, or on a node admitted into the running round (`--nnodes MIN:MAX`): it prepares (data, model), then joins the running ranks at a step boundary and takes its state from them.");
    PHALANX_FT_SLOTS = (Launcher, "", "Set by `phalanx launch --fault-tolerance` in every worker: the world size the round started with (its first generation's slots, Note [FT generations] in phalanx-pg). A node admitted into a running round (`--nnodes MIN:MAX`) gets ranks from this number up, so its `WORLD_SIZE` is larger.");
    PHALANX_PROGRESS = (Launcher, "", "Set to 1 by `phalanx launch` when its terminal can show a progress bar: rank 0 of `phalanx train` then sends progress records for the launcher to draw.");
    PHALANX_ALGO = (Config, "auto", "Allreduce algorithm family: `auto` (direct exchange, ring, shared memory, all in the canonical reduction order: bitwise equal across placements) or `hierarchical` (inside hosts, then across them: fewer bytes between hosts when each holds several ranks, but sums grouped by host, so not bitwise equal across placements).");
    PHALANX_DIRECT_MAX_BYTES = (Config, "64K", "Collectives up to this size (bytes; `64K`, `1M`) use direct exchange over TCP instead of the ring (latency over bandwidth). Must be equal on every rank.");
    PHALANX_CHUNK_BYTES = (Config, "512K", "Largest frame of a pipelined TCP ring step (bytes; `512K`, `2M`). Must be equal on every rank.");
    PHALANX_SHM_DISABLE = (Config, "0", "Set to 1 to carry every collective over TCP even when all ranks share a host (shared memory is used by default then).");
    PHALANX_SHM_SINGLE_COPY = (Config, "1", "Set to 0 to keep shared-memory all_gather, all_to_all and broadcast on the shared buffers (two copies) even where the kernel lets ranks read each other's memory (`process_vm_readv`, one copy; used from 16 KiB per rank (two ranks) or 128 KiB (more) when every rank of the host can).");
    PHALANX_POOL_SPIN = (Config, "auto", "Whether the compute pool's other threads spin between the operations of a training step on the CPU (`phalanx train`, `phalanx bench train`, the Learner strategy) instead of sleeping: `auto` spins when a rank has two threads or more and the ranks' threads fit in the cores (threads × local ranks ≤ cores), `1` whenever a rank has two threads or more, `0` never. A spinning thread ends after 2 ms without work. A value that is none of these is named on stderr and `auto` is kept.");
    PHALANX_DEBUG = (Debug, "WARN", "Log level: WARN, INFO (per rank: interface and the variable that chose it, addresses, transports, algorithms) or TRACE (ERROR and DEBUG are accepted too). When unset, `NCCL_DEBUG`, then `TORCH_DISTRIBUTED_DEBUG` decide. A value that is no level is named with its variable and WARN is used.");
    NCCL_DEBUG = (Debug, "", "NCCL's log level, read when `PHALANX_DEBUG` is unset: `VERSION` and `WARN` → WARN, `INFO` and `ABORT` → INFO, `TRACE` → TRACE. Under `--backend nccl` NCCL reads it itself; when it is unset, phalanx's level fills it in (WARN, INFO or TRACE).");
    TORCH_DISTRIBUTED_DEBUG = (Debug, "", "PyTorch's distributed debug level, read when `PHALANX_DEBUG` and `NCCL_DEBUG` are unset: `OFF` → WARN, `INFO` → INFO, `DETAIL` → TRACE.");
    PHALANX_TRACE = (Debug, "", "Path prefix for a Chrome/Perfetto trace per rank.");
    PHALANX_FR_BUFFER_SIZE = (Debug, "2000", "Flight recorder: how many of the last collectives (all process groups together) each rank keeps, with group, sequence number, operation, sizes, dtypes, state and times (docs/flight-recorder.md); `0` turns recording off. When unset, `TORCH_FR_BUFFER_SIZE`, then `TORCH_NCCL_TRACE_BUFFER_SIZE` decide. A value that is no number is named on stderr and the default is kept.");
    TORCH_FR_BUFFER_SIZE = (Debug, "", "PyTorch's flight-recorder size, read when `PHALANX_FR_BUFFER_SIZE` is unset (same meaning; `0` turns it off).");
    TORCH_NCCL_TRACE_BUFFER_SIZE = (Debug, "", "PyTorch's older name of `TORCH_FR_BUFFER_SIZE`, read when both that and `PHALANX_FR_BUFFER_SIZE` are unset.");
    PHALANX_FR_DUMP_TEMP_FILE = (Debug, "", "Flight recorder: path prefix of the per-rank dump (file = prefix + rank, e.g. `/tmp/fr/trace_` gives `/tmp/fr/trace_0`, …) written when a collective fails (timeout, mismatch, a peer's failure), in the format of PyTorch's `fr_trace` and `phalanx fr-trace`. Setting it turns dumps on. When unset, `TORCH_FR_DUMP_TEMP_FILE`, then `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` decide. A dump that cannot be written is one line on stderr naming the path and the OS error; the job's own result is unchanged.");
    TORCH_FR_DUMP_TEMP_FILE = (Debug, "", "PyTorch's flight-recorder dump prefix, read when `PHALANX_FR_DUMP_TEMP_FILE` is unset.");
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE = (Debug, "", "PyTorch's older name of `TORCH_FR_DUMP_TEMP_FILE`, read when both that and `PHALANX_FR_DUMP_TEMP_FILE` are unset.");
    PHALANX_FR_DUMP_ON_TIMEOUT = (Debug, "", "Flight recorder: `1` dumps on a failed collective even with no prefix set (to PyTorch's default `/tmp/nccl_trace_rank_`), `0` never dumps. When unset (and `TORCH_NCCL_DUMP_ON_TIMEOUT` too), dumps are written exactly when a dump prefix is set: unlike PyTorch, nothing lands in /tmp by default.");
    TORCH_NCCL_DUMP_ON_TIMEOUT = (Debug, "", "PyTorch's switch, read when `PHALANX_FR_DUMP_ON_TIMEOUT` is unset (same meaning).");
}
