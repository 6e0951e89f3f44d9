//! The mutual authentication handshake, as pure state machines with injected nonces.
//!
//! ```text
//! client → server  ClientHello  magic u32 | version u16 | job_len u16 | job_id | client_nonce[32]
//! server → client  ServerHello  magic u32 | version u16 | status u8 | server_nonce[32] | server_proof[32]
//! client → server  ClientProof  client_proof[32]
//! server → client  Verdict      u8 (1 = accepted, 0 = refused)
//! ```
//! `server_proof = HMAC-SHA256(token, "phalanx-store/server" | job_id | client_nonce | server_nonce)`
//! `client_proof = HMAC-SHA256(token, "phalanx-store/client" | job_id | server_nonce | client_nonce)`
//! (the job proof of Note [Job proof] in `phalanx_core::job_proof`, shared with the transport).
//!
//! Both nonces are fresh randomness, so a recorded proof cannot be replayed; the direction labels
//! keep a rogue client from using the server as an oracle for its own proof (reflection); the
//! client checks the server's proof before it proves anything, so a rogue server learns nothing
//! and cannot pose as the store.

use phalanx_core::job_proof;

use super::codec::DecodeError;
use super::limits::{MAGIC, MAX_JOB_ID_LEN, PROTOCOL_VERSION};
use crate::Auth;

/// Bytes in each nonce and each proof.
pub const NONCE_LEN: usize = 32;
/// Fixed part of the client hello (magic, version, job id length).
pub const CLIENT_HELLO_HEADER_LEN: usize = 8;
/// Length of the server hello.
pub const SERVER_HELLO_LEN: usize = 4 + 2 + 1 + 2 * NONCE_LEN;
/// Length of the client proof.
pub const CLIENT_PROOF_LEN: usize = NONCE_LEN;
/// Length of the server's verdict.
pub const VERDICT_LEN: usize = 1;

/// The server's answer to a hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HelloStatus {
    /// Proceed to the proof.
    Ok = 0,
    /// The server speaks another protocol version (carried in the hello's version field).
    UnsupportedVersion = 1,
    /// The server serves another job.
    WrongJob = 2,
}

/// Labels of the two directions (Note [Job proof] in `phalanx_core::job_proof`).
const SERVER_LABEL: &str = "phalanx-store/server";
const CLIENT_LABEL: &str = "phalanx-store/client";

/// The server's proof of the token for this pair of nonces.
pub fn server_proof(
    auth: &Auth,
    client_nonce: &[u8; NONCE_LEN],
    server_nonce: &[u8; NONCE_LEN],
) -> [u8; NONCE_LEN] {
    job_proof::prove(
        &auth.token,
        SERVER_LABEL,
        &auth.job_id,
        &[client_nonce, server_nonce],
    )
}

/// The client's proof of the token for this pair of nonces.
pub fn client_proof(
    auth: &Auth,
    server_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
) -> [u8; NONCE_LEN] {
    job_proof::prove(
        &auth.token,
        CLIENT_LABEL,
        &auth.job_id,
        &[server_nonce, client_nonce],
    )
}

fn server_hello(status: HelloStatus, nonce: &[u8; NONCE_LEN], proof: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SERVER_HELLO_LEN);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.push(status as u8);
    out.extend_from_slice(nonce);
    out.extend_from_slice(proof);
    out
}

/// A refused handshake step: why, whether it is an authentication failure (versus malformed
/// bytes), and what to send the peer before closing, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Why the handshake failed (never contains the token).
    pub reason: String,
    /// True for a credential problem (token, job id), false for bytes that break the protocol.
    pub auth: bool,
    /// Bytes to send before closing, so the peer can report a precise error.
    pub reply: Option<Vec<u8>>,
}

impl Rejection {
    fn protocol(reason: impl Into<String>) -> Self {
        Rejection {
            reason: reason.into(),
            auth: false,
            reply: None,
        }
    }
}

/// Server side of the handshake.
#[derive(Debug)]
pub struct ServerHandshake {
    auth: Auth,
    server_nonce: [u8; NONCE_LEN],
    client_nonce: Option<[u8; NONCE_LEN]>,
}

impl ServerHandshake {
    /// Starts a handshake with a fresh random `server_nonce`.
    pub fn new(auth: &Auth, server_nonce: [u8; NONCE_LEN]) -> Self {
        ServerHandshake {
            auth: auth.clone(),
            server_nonce,
            client_nonce: None,
        }
    }

    /// Checks the hello's fixed header; returns how many more hello bytes to read.
    pub fn on_hello_header(
        &self,
        header: &[u8; CLIENT_HELLO_HEADER_LEN],
    ) -> Result<usize, Rejection> {
        let magic = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(Rejection::protocol(format!(
                "bad magic {magic:#010x}: not a phalanx store client"
            )));
        }
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != PROTOCOL_VERSION {
            return Err(Rejection {
                reason: format!(
                    "client speaks protocol version {version}, this server {PROTOCOL_VERSION}"
                ),
                auth: false,
                reply: Some(server_hello(
                    HelloStatus::UnsupportedVersion,
                    &[0; NONCE_LEN],
                    &[0; NONCE_LEN],
                )),
            });
        }
        let job_len = u16::from_le_bytes([header[6], header[7]]) as usize;
        if job_len > MAX_JOB_ID_LEN {
            return Err(Rejection::protocol(format!(
                "job id of {job_len} bytes exceeds {MAX_JOB_ID_LEN}"
            )));
        }
        Ok(job_len + NONCE_LEN)
    }

    /// Takes the rest of the hello (job id and client nonce); returns the server hello to send.
    pub fn on_hello_rest(&mut self, rest: &[u8]) -> Result<Vec<u8>, Rejection> {
        if rest.len() < NONCE_LEN {
            return Err(Rejection::protocol("truncated client hello"));
        }
        let (job, nonce) = rest.split_at(rest.len() - NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("NONCE_LEN bytes");
        if job != self.auth.job_id.as_bytes() {
            return Err(Rejection {
                reason: format!(
                    "client belongs to job {:?}, this store serves job {:?}",
                    String::from_utf8_lossy(job),
                    self.auth.job_id
                ),
                auth: true,
                reply: Some(server_hello(
                    HelloStatus::WrongJob,
                    &[0; NONCE_LEN],
                    &[0; NONCE_LEN],
                )),
            });
        }
        self.client_nonce = Some(nonce);
        let proof = server_proof(&self.auth, &nonce, &self.server_nonce);
        Ok(server_hello(HelloStatus::Ok, &self.server_nonce, &proof))
    }

    /// Checks the client's proof (in constant time); returns the verdict to send.
    pub fn on_proof(&self, proof: &[u8; CLIENT_PROOF_LEN]) -> Result<Vec<u8>, Rejection> {
        let Some(client_nonce) = self.client_nonce else {
            return Err(Rejection::protocol("proof before hello"));
        };
        let parts: [&[u8]; 2] = [&self.server_nonce, &client_nonce];
        match job_proof::check(
            &self.auth.token,
            CLIENT_LABEL,
            &self.auth.job_id,
            &parts,
            proof,
        ) {
            true => Ok(vec![1]),
            false => Err(Rejection {
                reason: "client's proof of the job token is wrong (PHALANX_TOKEN differs)".into(),
                auth: true,
                reply: Some(vec![0]),
            }),
        }
    }
}

/// Client side of the handshake.
#[derive(Debug)]
pub struct ClientHandshake {
    auth: Auth,
    client_nonce: [u8; NONCE_LEN],
}

impl ClientHandshake {
    /// Starts a handshake with a fresh random `client_nonce`.
    pub fn new(auth: &Auth, client_nonce: [u8; NONCE_LEN]) -> Self {
        ClientHandshake {
            auth: auth.clone(),
            client_nonce,
        }
    }

    /// The hello to send first.
    pub fn hello(&self) -> Result<Vec<u8>, DecodeError> {
        let job = self.auth.job_id.as_bytes();
        if job.len() > MAX_JOB_ID_LEN {
            return Err(DecodeError::new(format!(
                "job id of {} bytes exceeds {MAX_JOB_ID_LEN}",
                job.len()
            )));
        }
        let mut out = Vec::with_capacity(CLIENT_HELLO_HEADER_LEN + job.len() + NONCE_LEN);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        out.extend_from_slice(&(job.len() as u16).to_le_bytes());
        out.extend_from_slice(job);
        out.extend_from_slice(&self.client_nonce);
        Ok(out)
    }

    /// Checks the server hello and the server's proof; returns the client proof to send.
    pub fn on_server_hello(
        &self,
        hello: &[u8; SERVER_HELLO_LEN],
    ) -> Result<[u8; CLIENT_PROOF_LEN], Rejection> {
        let magic = u32::from_le_bytes(hello[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(Rejection::protocol(format!(
                "bad magic {magic:#010x}: the peer is not a phalanx store"
            )));
        }
        let version = u16::from_le_bytes([hello[4], hello[5]]);
        match hello[6] {
            s if s == HelloStatus::Ok as u8 && version == PROTOCOL_VERSION => {}
            s if s == HelloStatus::UnsupportedVersion as u8 || version != PROTOCOL_VERSION => {
                return Err(Rejection::protocol(format!(
                    "the store speaks protocol version {version}, this client {PROTOCOL_VERSION}"
                )))
            }
            s if s == HelloStatus::WrongJob as u8 => {
                return Err(Rejection {
                    reason: format!(
                        "the store serves another job than {:?} (check PHALANX_JOB_ID)",
                        self.auth.job_id
                    ),
                    auth: true,
                    reply: None,
                })
            }
            s => return Err(Rejection::protocol(format!("unknown hello status {s}"))),
        }
        let server_nonce: [u8; NONCE_LEN] =
            hello[7..7 + NONCE_LEN].try_into().expect("NONCE_LEN bytes");
        let parts: [&[u8]; 2] = [&self.client_nonce, &server_nonce];
        let proof = &hello[7 + NONCE_LEN..];
        if !job_proof::check(
            &self.auth.token,
            SERVER_LABEL,
            &self.auth.job_id,
            &parts,
            proof,
        ) {
            return Err(Rejection {
                reason: "the server could not prove the job token (a rogue store, or PHALANX_TOKEN differs)".into(),
                auth: true,
                reply: None,
            });
        }
        Ok(client_proof(&self.auth, &server_nonce, &self.client_nonce))
    }

    /// Reads the verdict.
    pub fn on_verdict(&self, verdict: [u8; VERDICT_LEN]) -> Result<(), Rejection> {
        match verdict[0] {
            1 => Ok(()),
            0 => Err(Rejection {
                reason:
                    "the store refused this client's proof of the job token (PHALANX_TOKEN differs)"
                        .into(),
                auth: true,
                reply: None,
            }),
            b => Err(Rejection::protocol(format!("unknown verdict byte {b}"))),
        }
    }
}

#[cfg(test)]
mod tests;
