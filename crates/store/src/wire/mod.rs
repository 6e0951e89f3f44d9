//! The store's wire protocol as pure functions over byte slices (sans-IO): request/response
//! frames and the authentication handshake. Tests and fuzzers drive these without sockets; the
//! client and server only move the bytes. The format is described in `docs/store.md`.
//!
//! ```
//! use phalanx_store::wire::{decode_request, encode_request, split_frame, Request};
//! let frame = encode_request(&Request::Add { key: "rank_count", delta: 1 }).unwrap();
//! let (body, used) = split_frame(&frame).unwrap().unwrap();
//! assert_eq!(used, frame.len());
//! assert_eq!(decode_request(body).unwrap(), Request::Add { key: "rank_count", delta: 1 });
//! ```

mod codec;
mod frame;
mod handshake;
mod message;
pub mod torch;

pub use frame::{
    decode_request, decode_response, encode_request, encode_response, frame_len, split_frame,
    Request, Response,
};
pub use handshake::{
    client_proof, server_proof, ClientHandshake, HelloStatus, Rejection, ServerHandshake,
    CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN, NONCE_LEN, SERVER_HELLO_LEN, VERDICT_LEN,
};

/// First four bytes of every connection ("PHXS" little-endian); anything else is dropped.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PHXS");
/// Protocol version; a peer speaking another one is told so and dropped.
pub const PROTOCOL_VERSION: u16 = 1;
/// Longest job id, in bytes.
pub const MAX_JOB_ID_LEN: usize = 256;
/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64 * 1024;
/// Longest value, in bytes (also bounds what `append` can grow a value to).
pub const MAX_VALUE_LEN: usize = 64 * 1024 * 1024;
/// Most keys in one request (`wait`, `check`, `multi_get`, `multi_set`).
pub const MAX_KEYS: usize = 64 * 1024;
/// Longest frame body, in bytes; checked before a single byte of it is read.
pub const MAX_FRAME_LEN: usize = 256 * 1024 * 1024;

/// Why some bytes are not a valid message. Its text names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    reason: String,
}

impl DecodeError {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        DecodeError {
            reason: reason.into(),
        }
    }
    /// What was wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DecodeError {}
