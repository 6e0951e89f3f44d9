//! The protocol's constants: the connection magic, the version, and the bounds every decoder
//! checks before it allocates.

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
