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
mod limits;
mod message;
pub mod torch;

pub use codec::DecodeError;
pub use frame::{
    decode_request, decode_response, encode_request, encode_response, frame_len, split_frame,
    Request, Response,
};
pub use handshake::{
    client_proof, server_proof, ClientHandshake, HelloStatus, Rejection, ServerHandshake,
    CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN, NONCE_LEN, SERVER_HELLO_LEN, VERDICT_LEN,
};
pub use limits::{
    MAGIC, MAX_FRAME_LEN, MAX_JOB_ID_LEN, MAX_KEYS, MAX_KEY_LEN, MAX_VALUE_LEN, PROTOCOL_VERSION,
};
