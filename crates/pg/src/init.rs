//! `init_process_group`: from the environment to a connected [`ProcessGroup`].
//!
//! Steps: read the launcher's variables ([`DistEnv`]), reach the store (rank 0 hosts it
//! unless the launcher's agent already does, `TORCHELASTIC_USE_AGENT_STORE=True`), pick the
//! interface (`PHALANX_SOCKET_IFNAME`, else `GLOO_SOCKET_IFNAME`, else `NCCL_SOCKET_IFNAME`,
//! Note [Borrowed variables] in phalanx-core; or the route to `MASTER_ADDR`), publish this
//! rank's listen address, and connect the mesh.

use std::{
    net::{IpAddr, SocketAddr, ToSocketAddrs},
    sync::Arc,
    time::Duration,
};

use phalanx_collectives::Options;
use phalanx_core::{env, Launcher, Timeout};
use phalanx_store::{
    Auth, EtcdOptions, HashStore, PrefixStore, Store, StoreServer, TcpStore, TorchStore, Watch,
    WatchedStore,
};
use phalanx_transport::{ifname, tcp, MeshConfig, SetupWatch, TcpTransport};

use crate::{bootstrap, process_group::GroupSeed, DistEnv, Error, Placement, ProcessGroup, Result};

/// Everything `init_process_group` reads, made explicit.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// Rank layout and store address.
    pub env: DistEnv,
    /// Job credentials.
    pub auth: Auth,
    /// Progress timeout (`PHALANX_TIMEOUT`).
    pub timeout: Duration,
    /// The interface variable that decided and its value (`PHALANX_SOCKET_IFNAME`, else
    /// `GLOO_SOCKET_IFNAME`, else `NCCL_SOCKET_IFNAME`); `None`: the route to `MASTER_ADDR`.
    pub socket_ifname: Option<env::SocketIfname>,
    /// Key namespace of this restart round (`PHALANX_STORE_PREFIX`).
    pub store_prefix: String,
    /// Whether the launcher's agent hosts the store (`TORCHELASTIC_USE_AGENT_STORE`).
    pub agent_store: bool,
    /// Whether that store is PyTorch's (torchrun's agent store) rather than phalanx's: see
    /// Note [torchrun's store].
    pub torch_store: bool,
    /// The job's store in etcd (`PHALANX_ETCD_*`, `phalanx launch --rdzv-backend etcd`),
    /// instead of the agent's at `MASTER_ADDR`.
    pub etcd: Option<EtcdOptions>,
    /// Algorithm tuning.
    pub collectives: Options,
}

impl InitOptions {
    /// Reads every setting from the environment.
    pub fn from_env() -> Result<InitOptions> {
        for (name, near) in env::unknown_phalanx_vars() {
            match near {
                Some(n) => tracing::warn!("unknown variable {name}; did you mean {n}?"),
                None => tracing::warn!("unknown variable {name} (see `phalanx env`)"),
            }
        }
        let etcd = EtcdOptions::from_env(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
            .map_err(|e| Error::Env {
                name: env::PHALANX_ETCD_ENDPOINTS.name.into(),
                value: env::get(env::PHALANX_ETCD_ENDPOINTS).unwrap_or_default(),
                reason: e.to_string(),
            })?;
        // The launcher's store is etcd under `--rdzv-backend etcd` (where PyTorch's workers
        // are told there is no agent store, as torchrun's etcd backend tells them).
        let agent_store = etcd.is_some()
            || std::env::var("TORCHELASTIC_USE_AGENT_STORE")
                .is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        // torchrun's agent, not a hand-made launch pointing at `phalanx store` (which also
        // sets TORCHELASTIC_USE_AGENT_STORE): torchrun always sets its run id.
        let torch_store = agent_store
            && Launcher::detect() == Some(Launcher::Torchrun)
            && std::env::var_os("TORCHELASTIC_RUN_ID").is_some_and(|v| !v.is_empty());
        let mut store_prefix = env::get(env::PHALANX_STORE_PREFIX).unwrap_or_default();
        if torch_store && store_prefix.is_empty() {
            store_prefix =
                torch_agent_store_prefix(std::env::var("TORCHELASTIC_RESTART_COUNT").ok());
        }
        Ok(InitOptions {
            env: DistEnv::from_env()?,
            auth: Auth::from_env(),
            timeout: Timeout::from_env()?,
            socket_ifname: env::socket_ifname(),
            store_prefix,
            agent_store,
            torch_store,
            etcd,
            collectives: collective_options()?,
        })
    }
}

/// The key namespace of phalanx's ranks in torchrun's store: torchrun's own workers use
/// `/worker/attempt_<n>`, so ours sit beside them, one per restart like theirs.
///
/// Note [torchrun's store]: under torchrun (`TORCHELASTIC_USE_AGENT_STORE=True` and
/// `TORCHELASTIC_RUN_ID` without `PHALANX_LAUNCHED`; a hand-made launch that points
/// `MASTER_ADDR` at `phalanx store` sets no run id), `MASTER_ADDR:MASTER_PORT` is the agent's
/// PyTorch TCPStore, which
/// speaks PyTorch's unauthenticated protocol; the ranks rendezvous through it with
/// [`TorchStore`] and the mesh handshakes use the default job credentials unless
/// `PHALANX_TOKEN` is set for every rank.
fn torch_agent_store_prefix(restart_count: Option<String>) -> String {
    format!(
        "phalanx/attempt_{}",
        restart_count.as_deref().unwrap_or("0")
    )
}

/// Algorithm thresholds and choice from `PHALANX_DIRECT_MAX_BYTES`, `PHALANX_CHUNK_BYTES` and
/// `PHALANX_ALGO` (defaults: [`Options::default`], measured in docs/collectives.md). Public for
/// front ends that connect with [`connect`] (the PyTorch backend, `phalanx_torch`).
pub fn collective_options() -> Result<Options> {
    let mut o = Options {
        prefer_hierarchical: prefer_hierarchical()?,
        ..Options::default()
    };
    if let Some(v) = env::get(env::PHALANX_DIRECT_MAX_BYTES) {
        o.direct_max_bytes = bytes_var("PHALANX_DIRECT_MAX_BYTES", &v)?;
    }
    if let Some(v) = env::get(env::PHALANX_CHUNK_BYTES) {
        o.chunk_bytes = bytes_var("PHALANX_CHUNK_BYTES", &v)?;
        if o.chunk_bytes == 0 {
            return Err(Error::Env {
                name: "PHALANX_CHUNK_BYTES".into(),
                value: v,
                reason: "must be at least 1 byte".into(),
            });
        }
    }
    Ok(o)
}

fn bytes_var(name: &str, value: &str) -> Result<usize> {
    phalanx_core::parse_bytes(value).map_err(|e| Error::Env {
        name: name.into(),
        value: value.into(),
        reason: e.to_string(),
    })
}

/// `PHALANX_ALGO`: `auto` (the default) or `hierarchical`.
fn prefer_hierarchical() -> Result<bool> {
    match env::get(env::PHALANX_ALGO).as_deref() {
        None | Some("auto") => Ok(false),
        Some("hierarchical") => Ok(true),
        Some(other) => Err(Error::Env {
            name: "PHALANX_ALGO".into(),
            value: other.into(),
            reason: "expected `auto` or `hierarchical`".into(),
        }),
    }
}

/// The bound on each attempt of a worker's requests to etcd.
#[cfg(feature = "etcd")]
const WORKER_ATTEMPT: std::time::Duration = std::time::Duration::from_millis(500);

/// A client of the job's store: etcd's under `--rdzv-backend etcd`, else the store at
/// `MASTER_ADDR:MASTER_PORT` (PyTorch's under torchrun, Note [torchrun's store]).
pub(crate) fn job_store(
    o: &InitOptions,
) -> std::result::Result<Arc<dyn Store>, phalanx_store::Error> {
    if let Some(etcd) = &o.etcd {
        #[cfg(feature = "etcd")]
        {
            let store = phalanx_store::EtcdStore::connect(etcd)?;
            store.set_timeout(o.timeout);
            // A worker's requests are small (addresses, counters, the generation log), and a
            // regroup waits on them: an attempt a member will never answer is sent again
            // soon (Note [An attempt's bound] in phalanx-store).
            return Ok(Arc::new(store.with_attempt_bound(WORKER_ATTEMPT)));
        }
        // Note [A build without the etcd client] in phalanx-store: only the fuzz targets'.
        #[cfg(not(feature = "etcd"))]
        return Err(phalanx_store::Error::Etcd {
            endpoints: etcd.endpoints_text(),
            op: "connect",
            reason: "this build of phalanx-pg has no etcd client (its `etcd` feature is off)"
                .into(),
        });
    }
    let addr = format!("{}:{}", o.env.master_addr, o.env.master_port);
    Ok(match o.torch_store {
        true => Arc::new(TorchStore::connect(&addr, o.timeout)?),
        false => Arc::new(TcpStore::connect(&addr, &o.auth, o.timeout)?),
    })
}

/// [`init_process_group`](crate::init_process_group) with explicit options.
pub fn init_with(o: InitOptions) -> Result<ProcessGroup> {
    init_watched(o, None)
}

/// [`init_with`], with the store's waits watched while the group forms when `watch` is given:
/// when it gives a reason between slices of at most `slice`, a wait of the bootstrap (the
/// address exchange, the shared-memory votes) fails at once naming it, instead of waiting out
/// `PHALANX_TIMEOUT` for ranks that will not come (Note [Watched waits] in phalanx-store).
/// The process group keeps the store unwatched.
pub(crate) fn init_watched(
    o: InitOptions,
    watch: Option<(Duration, Watch)>,
) -> Result<ProcessGroup> {
    let e = &o.env;
    let rank = e.rank;
    let store_err = |source| Error::Store { rank, source };
    let (server, client): (Option<StoreServer>, Arc<dyn Store>) =
        if e.world_size == 1 && !o.agent_store {
            (None, Arc::new(HashStore::with_timeout(o.timeout)))
        } else {
            let server = if !o.agent_store && rank == 0 {
                Some(
                    StoreServer::bind(
                        resolve(&e.master_addr, e.master_port, rank)?,
                        o.auth.clone(),
                    )
                    .map_err(store_err)?,
                )
            } else {
                None
            };
            (server, job_store(&o).map_err(store_err)?)
        };
    let store: Arc<dyn Store> = if o.store_prefix.is_empty() {
        client
    } else {
        Arc::new(PrefixStore::new(
            o.store_prefix.trim_end_matches('/').to_string(),
            client,
        ))
    };
    let sel = ifname::select_from(o.socket_ifname.as_ref(), &e.master_addr)
        .map_err(|source| Error::Setup { rank, source })?;
    tracing::info!(
        rank,
        world_size = e.world_size,
        source = e.source,
        ifname = %sel.ifname,
        ip = %sel.ip,
        store = %format!("{}:{}", e.master_addr, e.master_port),
        ifname_from = ?ifname_origin(o.socket_ifname.as_ref()),
        "phalanx: init"
    );
    let placement = Placement {
        rank,
        world_size: e.world_size,
        local_rank: e.local_rank,
        local_world_size: e.local_world_size,
        node_rank: e.group_rank,
    };
    let Some((slice, watch)) = watch else {
        return connect(
            placement,
            store,
            server,
            &o.auth,
            o.timeout,
            sel.ip,
            o.collectives,
        );
    };
    let watched = Arc::new(WatchedStore::new(store, slice, watch));
    let moot = || watched.moot();
    let pg = connect_watched(
        placement,
        watched.clone(),
        server,
        &o.auth,
        o.timeout,
        sel.ip,
        o.collectives,
        Some(SetupWatch { slice, moot: &moot }),
    );
    watched.disarm();
    pg
}

/// What chose the interface, for the INFO line: `NCCL_SOCKET_IFNAME=eth1`, or `route to
/// MASTER_ADDR` when no interface variable is set (the line names the store's address).
fn ifname_origin(setting: Option<&env::SocketIfname>) -> String {
    match setting {
        Some(s) => s.origin.to_string(),
        None => "route to MASTER_ADDR".into(),
    }
}

/// Connects the mesh through an existing store: every rank publishes its listen address and
/// host, learns everyone else's from one table (Note [Leader gather] in `bootstrap/mod.rs`) and
/// connects to the lower ranks. Used by [`init_process_group`](crate::init_process_group) and by
/// the thread-level test harness.
pub fn connect(
    placement: Placement,
    store: Arc<dyn Store>,
    server: Option<StoreServer>,
    auth: &Auth,
    timeout: Duration,
    ip: IpAddr,
    opts: phalanx_collectives::Options,
) -> Result<ProcessGroup> {
    connect_watched(placement, store, server, auth, timeout, ip, opts, None)
}

/// [`connect`], with the mesh's connections watched as well as the store's waits (Note [A
/// watched mesh] in phalanx-transport).
#[allow(clippy::too_many_arguments)]
fn connect_watched(
    placement: Placement,
    store: Arc<dyn Store>,
    server: Option<StoreServer>,
    auth: &Auth,
    timeout: Duration,
    ip: IpAddr,
    mut opts: phalanx_collectives::Options,
    watch: Option<SetupWatch<'_>>,
) -> Result<ProcessGroup> {
    let rank = placement.rank;
    let setup = |source| Error::Setup { rank, source };
    let listener = tcp::listen(ip).map_err(setup)?;
    let me = listener.local_addr().map_err(|source| {
        setup(phalanx_transport::Error::Listen {
            addr: ip.to_string(),
            source,
        })
    })?;
    let me = bootstrap::Peer {
        addr: me,
        host: crate::shm_setup::host_id(placement.node_rank),
    };
    let peers = bootstrap::exchange(store.as_ref(), rank, placement.world_size, &me, timeout)?;
    let addrs: Vec<SocketAddr> = (0..=rank).map(|r| peers.addr(r)).collect();
    let cfg = MeshConfig {
        rank,
        world_size: placement.world_size,
        job_id: auth.job_id.clone(),
        token: auth.token.clone(),
        timeout,
    };
    let transport = TcpTransport::connect_watched(&cfg, listener, &addrs, watch).map_err(setup)?;
    let abort = transport.abort_handle();
    tracing::info!(rank, transport = "tcp", peers = placement.world_size - 1, listen = %me.addr, "phalanx: mesh connected");
    let one_host = peers.hosts() == 1;
    let hosts = peers.host_numbers();
    if opts.prefer_hierarchical && !one_host {
        opts.hierarchy = phalanx_collectives::Hierarchy::from_host_keys(&hosts);
        match &opts.hierarchy {
            Some(_) => tracing::info!(rank, "phalanx: PHALANX_ALGO=hierarchical: allreduce inside hosts, then across them"),
            None => tracing::warn!(rank, "PHALANX_ALGO=hierarchical needs every host to hold the same number (≥ 2) of ranks; using the flat ring"),
        }
    }
    // Shared memory: among all ranks when they share this host; among this host's ranks for
    // the hierarchical allreduce (Exec uses a group smaller than the job for that alone).
    let everyone: Vec<usize> = (0..placement.world_size).collect();
    let members = if one_host {
        Some(everyone.as_slice())
    } else {
        opts.hierarchy.as_ref().map(|h| h.host_of(rank).0)
    };
    let shm = crate::shm_setup::try_join(
        store.as_ref(),
        rank,
        placement.world_size,
        members,
        timeout,
        opts.shared_memory,
    )?;
    let seed = GroupSeed {
        auth: auth.clone(),
        ip,
        timeout,
        opts: opts.clone(),
        hosts,
        node_rank: placement.node_rank,
        made: Default::default(),
        job_ranks: everyone.clone(),
    };
    let mut pg = ProcessGroup::new(
        placement,
        Box::new(transport),
        shm,
        abort,
        store,
        server,
        opts,
    );
    pg.set_seed(seed);
    Ok(pg)
}

fn resolve(host: &str, port: u16, rank: usize) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Env {
            name: "MASTER_ADDR".into(),
            value: host.into(),
            reason: format!("rank {rank} cannot resolve it"),
        })
}

/// Joins the MPI job this process was started in (`mpirun -np N …`; a process started
/// without `mpirun` is a world of one) and returns its process group. Rank and world size
/// come from `MPI_Comm_rank`/`MPI_Comm_size`; ranks on this host from
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`. MPI is finalised when the group is dropped;
/// one group per process.
///
/// ```no_run
/// // Run under `mpirun -np 2`.
/// use phalanx_core::ReduceOp;
/// let pg = phalanx_pg::init_mpi().unwrap();
/// let mut x = [pg.rank() as f32 + 1.0];
/// pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
/// assert_eq!(x[0], (pg.world_size() * (pg.world_size() + 1) / 2) as f32);
/// ```
#[cfg(feature = "mpi")]
pub fn init_mpi() -> Result<ProcessGroup> {
    let (comm, placement) = crate::mpi::MpiComm::init()?;
    Ok(ProcessGroup::with_backend(
        placement,
        crate::exec::AnyBackend::Mpi(comm),
        phalanx_transport::AbortHandle::default(),
        None,
        Arc::new(HashStore::new()),
        None,
        Options::default(),
    ))
}

/// Joins the job as the native backend does (store, TCP mesh), then creates an
/// NCCL communicator over every rank on GPU `LOCAL_RANK`. Fails fast, naming what is missing,
/// when NCCL, the CUDA driver or that GPU is not there.
///
/// ```no_run
/// // Under `phalanx launch --nproc-per-node 2` on a machine with 2 GPUs.
/// use phalanx_core::ReduceOp;
/// let pg = phalanx_pg::init_nccl().unwrap();
/// let mut x = [pg.rank() as f32 + 1.0];
/// pg.allreduce(&mut x, ReduceOp::Sum).unwrap();
/// assert_eq!(x[0], 3.0);
/// ```
#[cfg(feature = "nccl")]
pub fn init_nccl() -> Result<ProcessGroup> {
    let dist = DistEnv::from_env()?;
    let (nccl, driver, gpu) = crate::nccl::open(dist.local_rank)?;
    // The native group itself, not `init_process_group`, which follows PHALANX_BACKEND (=nccl).
    let native = init_with(InitOptions::from_env()?)?;
    let placement = Placement {
        rank: native.rank(),
        world_size: native.world_size(),
        local_rank: native.local_rank(),
        local_world_size: native.local_world_size(),
        node_rank: dist.group_rank,
    };
    let store = native.store().clone();
    let abort = phalanx_transport::AbortHandle::default();
    let (rank, world_size) = (native.rank(), native.world_size());
    let comm = crate::nccl::NcclComm::init(
        nccl,
        driver,
        gpu,
        (rank, world_size),
        &*store,
        Arc::new(native),
        abort.clone(),
    )?;
    Ok(ProcessGroup::with_backend(
        placement,
        crate::exec::AnyBackend::Nccl(Box::new(comm)),
        abort,
        None,
        store,
        None,
        Options::default(),
    ))
}

/// The native group under an NCCL one (Note in `nccl/comm.rs`'s `NativeGroup`): its mesh
/// carries the NCCL group's point-to-point traffic, as bytes.
#[cfg(feature = "nccl")]
impl crate::nccl::NativeGroup for ProcessGroup {
    fn send_bytes(&self, buf: &[u8], peer: usize, tag: u32) -> Result<()> {
        self.send(buf, peer, tag)
    }

    fn recv_bytes(&self, buf: &mut [u8], peer: usize, tag: u32) -> Result<()> {
        self.recv(buf, peer, tag)
    }

    fn batch_bytes(&self, ops: Vec<crate::P2POp<u8>>) -> Result<Vec<crate::P2POp<u8>>> {
        self.batch_isend_irecv(ops).wait()
    }

    fn abort(&self, cause: &str) {
        ProcessGroup::abort(self, cause)
    }
}
