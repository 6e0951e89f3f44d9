//! `phalanx store`: a standalone rendezvous store for multi-host jobs.
//!
//! Start it on a host every node can reach, give every rank the same `PHALANX_TOKEN` and
//! `PHALANX_JOB_ID`, and point their `MASTER_ADDR`/`MASTER_PORT` at it. It serves until
//! SIGINT or SIGTERM, then closes every connection and exits 0.
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

use anyhow::Context;
use phalanx_core::env;
use phalanx_store::{Auth, ServerConfig, StoreServer, TorchClients};

/// Flags of `phalanx store`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, env = "MASTER_PORT", default_value_t = 29500)]
    port: u16,
    /// Address to listen on: one interface's address to listen on that interface only,
    /// `0.0.0.0` (every IPv4 interface) or `::`. Default: the interface PHALANX_SOCKET_IFNAME
    /// (else GLOO_SOCKET_IFNAME, else NCCL_SOCKET_IFNAME) selects, else every interface.
    #[arg(long)]
    host: Option<String>,
    /// Also serve PyTorch's TCPStore protocol to clients on other hosts (PyTorch workers
    /// whose MASTER_ADDR is this store). It has no authentication: anyone who reaches the port
    /// can read and write the PyTorch keys (never phalanx's). Without it, PyTorch clients are
    /// served only from this host.
    #[arg(long = "torch-store", env = "PET_TORCH_STORE",
          value_parser = clap::builder::BoolishValueParser::new())]
    torch_store: bool,
}

/// Serves until SIGINT or SIGTERM. Its warnings (refused clients, malformed input) go to
/// stderr through the log setup of `main` (phalanx's log level).
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let host = match (args.host, env::socket_ifname()) {
        (Some(h), _) => h,
        // Listen on the chosen interface only, as the ranks do.
        (None, Some(setting)) => {
            let sel = phalanx_transport::ifname::select_from(Some(&setting), "127.0.0.1")?;
            eprintln!(
                "phalanx store: interface {} (from {})",
                sel.ifname, setting.origin
            );
            sel.ip.to_string()
        }
        (None, None) => {
            eprintln!("phalanx store: listening on every interface (use --host or PHALANX_SOCKET_IFNAME to choose one)");
            "0.0.0.0".to_string()
        }
    };
    let addr: SocketAddr = (host.as_str(), args.port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve --host {host}"))?
        .next()
        .with_context(|| format!("--host {host} resolves to no address"))?;
    let auth = Auth::from_env();
    if auth.token.is_empty() {
        eprintln!(
            "phalanx store: warning: PHALANX_TOKEN is not set, so any client that presents an empty \
             token is accepted; set the same secret for the store and every rank, e.g. \
             `export PHALANX_TOKEN=$(openssl rand -hex 32)`"
        );
    }
    // Block the stop signals before the server starts its threads (they inherit the mask), so
    // that only `sigwait` below receives them.
    let signals = StopSignals::block();
    let torch = if args.torch_store {
        eprintln!(
            "phalanx store: --torch-store: serving PyTorch's TCPStore protocol, which has no \
             authentication, to every host that reaches {addr}"
        );
        TorchClients::Anyone
    } else {
        TorchClients::Loopback
    };
    let config = ServerConfig::default().with_torch_clients(torch);
    let server = match StoreServer::bind_with(addr, auth.clone(), config) {
        Ok(s) => s,
        Err(phalanx_store::Error::Bind { source, owner, .. })
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            let by = owner.map(|o| format!(" by {o}")).unwrap_or_default();
            anyhow::bail!(
                "port {} is already in use{by}; choose another with --port",
                addr.port()
            );
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "phalanx store listening on {} (job id {:?})",
        server.local_addr(),
        auth.job_id
    );
    let sig = signals.wait();
    eprintln!(
        "phalanx store: received {}, shutting down",
        phalanx_launch::signal_name(sig)
    );
    server.shutdown();
    Ok(ExitCode::SUCCESS)
}

/// SIGINT and SIGTERM, blocked in this thread and received synchronously.
struct StopSignals {
    set: libc::sigset_t,
}

impl StopSignals {
    fn block() -> Self {
        // SAFETY: sigemptyset/sigaddset initialise the set in place; pthread_sigmask only
        // changes this thread's mask (threads spawned later inherit it).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            StopSignals { set }
        }
    }

    /// Blocks until one of the signals arrives; returns it.
    fn wait(&self) -> i32 {
        let mut sig: libc::c_int = 0;
        loop {
            // SAFETY: `set` is initialised and `sig` is a valid out-pointer.
            if unsafe { libc::sigwait(&self.set, &mut sig) } == 0 {
                return sig;
            }
        }
    }
}
