//! [`ServerConfig`], the tunables of a store server (handshake deadline, connection cap), and
//! [`TorchClients`], which PyTorch TCPStore clients it serves.

use std::time::Duration;

/// Tunables of a [`StoreServer`](super::StoreServer).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub(super) handshake_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) torch_clients: TorchClients,
}

/// Which PyTorch TCPStore clients a [`StoreServer`](super::StoreServer) serves. PyTorch's protocol has no
/// authentication: whoever reaches the port may read and write the PyTorch keys (never
/// phalanx's own, which live apart). See Note [Two protocols on one port].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TorchClients {
    /// None: the connection is closed and the refusal logged with how to allow it.
    Refuse,
    /// Clients connecting from a loopback address, i.e. from this host (the default).
    #[default]
    Loopback,
    /// Any client that reaches the port (`phalanx launch --torch-store`).
    Anyone,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            handshake_timeout: Duration::from_secs(5),
            max_connections: 32_768,
            torch_clients: TorchClients::default(),
        }
    }
}

impl ServerConfig {
    /// Time a new connection has to complete the handshake before it is dropped (default 5 s).
    pub fn with_handshake_timeout(mut self, t: Duration) -> Self {
        self.handshake_timeout = t;
        self
    }
    /// Which PyTorch TCPStore clients to serve (default [`TorchClients::Loopback`]).
    pub fn with_torch_clients(mut self, t: TorchClients) -> Self {
        self.torch_clients = t;
        self
    }
    /// Most simultaneous connections; later ones are closed at once (default 32,768: a job of
    /// 16,384 ranks and its agents, with room to spare).
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }
}
