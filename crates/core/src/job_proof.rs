//! Note [Job proof]: how two parties show each other that they hold the job's token
//! (`PHALANX_TOKEN`) without sending it. The store's handshake (client ↔ store) and the
//! transport's (rank ↔ rank) both use this one construction, so they cannot drift apart:
//!
//! `proof = HMAC-SHA256(token, label | len(job_id) as u16 LE | job_id | part | part | …)`
//!
//! The parts are the handshake's nonces (and whatever else it binds, such as the prover's
//! rank), in an order fixed by the protocol. Each side proves the token over a nonce that it
//! did not choose, so a recorded proof cannot be replayed; the label names the protocol and the
//! direction, so a proof made for one can never be used for another (no reflection, no
//! cross-protocol reuse). Proofs are checked in constant time.
//!
//! ```
//! use phalanx_core::job_proof::{check, nonce, prove};
//! let (token, theirs) = (b"secret", nonce());
//! let p = prove(token, "example/client", "job-7", &[&theirs]);
//! assert!(check(token, "example/client", "job-7", &[&theirs], &p));
//! assert!(!check(b"other", "example/client", "job-7", &[&theirs], &p));
//! assert!(!check(token, "example/server", "job-7", &[&theirs], &p));
//! ```

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes in a proof.
pub const PROOF_LEN: usize = 32;
/// Bytes in a nonce.
pub const NONCE_LEN: usize = 32;

fn mac(token: &[u8], label: &str, job_id: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes keys of any length");
    m.update(label.as_bytes());
    // Job ids are at most a few hundred bytes (the handshakes refuse longer ones).
    m.update(&(job_id.len() as u16).to_le_bytes());
    m.update(job_id.as_bytes());
    for p in parts {
        m.update(p);
    }
    m
}

/// The proof that the caller holds `token`, for protocol and direction `label`, job `job_id`
/// and the handshake's `parts`.
pub fn prove(token: &[u8], label: &str, job_id: &str, parts: &[&[u8]]) -> [u8; PROOF_LEN] {
    mac(token, label, job_id, parts)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `got` is the proof [`prove`] makes from the same inputs, compared in constant time.
pub fn check(token: &[u8], label: &str, job_id: &str, parts: &[&[u8]], got: &[u8]) -> bool {
    mac(token, label, job_id, parts).verify_slice(got).is_ok()
}

/// A fresh nonce from the operating system's generator.
pub fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    // The OS generator failing is an invariant violation on every platform we support.
    getrandom::fill(&mut n).expect("the operating system's random generator is available");
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_binds_token_label_job_and_every_part() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let p = prove(b"t", "l", "job", &[&a, &b]);
        assert!(check(b"t", "l", "job", &[&a, &b], &p));
        assert!(!check(b"u", "l", "job", &[&a, &b], &p));
        assert!(!check(b"t", "m", "job", &[&a, &b], &p));
        assert!(!check(b"t", "l", "jog", &[&a, &b], &p));
        assert!(!check(b"t", "l", "job", &[&b, &a], &p));
        assert!(!check(b"t", "l", "job", &[&a], &p));
        assert!(!check(b"t", "l", "job", &[&a, &b], &p[..31]));
    }

    #[test]
    fn the_job_id_is_length_prefixed() {
        // Without the prefix, ("ab", "c…") and ("a", "bc…") would hash the same bytes.
        let p = prove(b"t", "l", "ab", &[b"c"]);
        assert!(!check(b"t", "l", "a", &[b"bc"], &p));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce(), nonce());
    }
}
