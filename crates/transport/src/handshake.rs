//! Sans-IO connection handshake between two ranks.
//!
//! Both sides send a [`Hello`] (magic, protocol version, job id, their rank and world size, a
//! fresh 32-byte nonce), then a proof: HMAC-SHA256 of the peer's nonce under the job token
//! (Note [Job proof] in `phalanx_core::job_proof`, shared with the store's handshake). Each
//! side proves knowledge of the token over a nonce it did not choose, so a recorded handshake
//! cannot be replayed and a peer without the token is refused before any data flows. The token
//! itself never crosses the wire.

use phalanx_core::job_proof;

/// Protocol magic: ASCII "PHXT".
pub const MAGIC: u32 = 0x5048_5854;
/// Protocol version; bumped on any wire change.
pub const VERSION: u16 = 1;
/// Longest job id accepted.
pub const MAX_JOB_ID: usize = 256;
/// Length of a proof.
pub const PROOF_LEN: usize = 32;
/// Fixed part of an encoded hello (without the job id).
pub const HELLO_FIXED: usize = 4 + 2 + 4 + 4 + 32 + 2;

/// The first message on every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Sender's job id; must equal ours.
    pub job_id: String,
    /// Sender's rank.
    pub rank: u32,
    /// Sender's world size; must equal ours.
    pub world_size: u32,
    /// Fresh random challenge for the receiver to sign.
    pub nonce: [u8; 32],
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Not a phalanx transport connection (or another program on the port).
    #[error("bad magic 0x{0:08x}: not a phalanx transport connection")]
    BadMagic(u32),
    /// Peer speaks another protocol version.
    #[error("protocol version {theirs} (ours is {ours})")]
    Version {
        /// Theirs.
        theirs: u16,
        /// Ours.
        ours: u16,
    },
    /// Job id too long or not UTF-8.
    #[error("malformed job id")]
    BadJobId,
    /// Peer belongs to another job.
    #[error("job id {theirs:?} differs from ours {ours:?}")]
    OtherJob {
        /// Theirs.
        theirs: String,
        /// Ours.
        ours: String,
    },
    /// Peer's world size differs.
    #[error("peer rank {rank} has WORLD_SIZE={theirs}, ours is {ours}")]
    WorldSize {
        /// Peer rank.
        rank: u32,
        /// Theirs.
        theirs: u32,
        /// Ours.
        ours: u32,
    },
    /// Proof of the token did not verify.
    #[error("authentication failed: the peer does not hold this job's PHALANX_TOKEN")]
    BadProof,
}

impl Hello {
    /// Encodes the hello.
    pub fn encode(&self) -> Vec<u8> {
        let id = self.job_id.as_bytes();
        let mut out = Vec::with_capacity(HELLO_FIXED + id.len());
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.world_size.to_le_bytes());
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&(id.len() as u16).to_le_bytes());
        out.extend_from_slice(id);
        out
    }

    /// Decodes the fixed part; returns the hello minus its job id and the job id's length,
    /// which the caller reads next (bounded by [`MAX_JOB_ID`]).
    pub fn decode_fixed(b: &[u8; HELLO_FIXED]) -> Result<(Hello, usize), HandshakeError> {
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
        if magic != MAGIC {
            return Err(HandshakeError::BadMagic(magic));
        }
        let version = u16::from_le_bytes(b[4..6].try_into().unwrap());
        if version != VERSION {
            return Err(HandshakeError::Version {
                theirs: version,
                ours: VERSION,
            });
        }
        let id_len = u16::from_le_bytes(b[46..48].try_into().unwrap()) as usize;
        if id_len > MAX_JOB_ID {
            return Err(HandshakeError::BadJobId);
        }
        let hello = Hello {
            job_id: String::new(),
            rank: u32::from_le_bytes(b[6..10].try_into().unwrap()),
            world_size: u32::from_le_bytes(b[10..14].try_into().unwrap()),
            nonce: b[14..46].try_into().unwrap(),
        };
        Ok((hello, id_len))
    }

    /// Checks a peer's complete hello against our own.
    pub fn check_peer(&self, peer: &Hello) -> Result<(), HandshakeError> {
        if peer.job_id != self.job_id {
            return Err(HandshakeError::OtherJob {
                theirs: peer.job_id.clone(),
                ours: self.job_id.clone(),
            });
        }
        if peer.world_size != self.world_size {
            return Err(HandshakeError::WorldSize {
                rank: peer.rank,
                theirs: peer.world_size,
                ours: self.world_size,
            });
        }
        Ok(())
    }
}

/// Label of the transport's proofs (Note [Job proof] in `phalanx_core::job_proof`).
const LABEL: &str = "phalanx-transport-v1";

/// The proof that `prover` holds `token`, over the verifier's nonce (and the prover's own
/// nonce and rank).
pub fn proof(token: &[u8], verifier_nonce: &[u8; 32], prover: &Hello) -> [u8; PROOF_LEN] {
    let rank = prover.rank.to_le_bytes();
    job_proof::prove(
        token,
        LABEL,
        &prover.job_id,
        &[verifier_nonce, &prover.nonce, &rank],
    )
}

/// Verifies a peer's proof in constant time.
pub fn verify(
    token: &[u8],
    our_nonce: &[u8; 32],
    peer: &Hello,
    got: &[u8; PROOF_LEN],
) -> Result<(), HandshakeError> {
    let rank = peer.rank.to_le_bytes();
    let parts: [&[u8]; 3] = [our_nonce, &peer.nonce, &rank];
    if job_proof::check(token, LABEL, &peer.job_id, &parts, got) {
        Ok(())
    } else {
        Err(HandshakeError::BadProof)
    }
}

/// A fresh random nonce.
pub fn nonce() -> [u8; 32] {
    job_proof::nonce()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(rank: u32) -> Hello {
        Hello {
            job_id: "job-7".into(),
            rank,
            world_size: 4,
            nonce: nonce(),
        }
    }

    #[test]
    fn hello_round_trip() {
        let h = hello(3);
        let bytes = h.encode();
        let (mut d, n) = Hello::decode_fixed(bytes[..HELLO_FIXED].try_into().unwrap()).unwrap();
        d.job_id = String::from_utf8(bytes[HELLO_FIXED..HELLO_FIXED + n].to_vec()).unwrap();
        assert_eq!(d, h);
    }

    #[test]
    fn proofs_bind_token_nonce_and_rank() {
        let (a, b) = (hello(0), hello(1));
        let p = proof(b"secret", &a.nonce, &b);
        assert!(verify(b"secret", &a.nonce, &b, &p).is_ok());
        assert_eq!(
            verify(b"other", &a.nonce, &b, &p),
            Err(HandshakeError::BadProof)
        );
        let other_rank = Hello {
            rank: 2,
            ..b.clone()
        };
        assert_eq!(
            verify(b"secret", &a.nonce, &other_rank, &p),
            Err(HandshakeError::BadProof)
        );
        assert_eq!(
            verify(b"secret", &nonce(), &b, &p),
            Err(HandshakeError::BadProof)
        );
    }

    #[test]
    fn rejects_bad_fixed_part() {
        let mut bytes = hello(1).encode();
        bytes[0] ^= 1;
        assert!(matches!(
            Hello::decode_fixed(bytes[..HELLO_FIXED].try_into().unwrap()),
            Err(HandshakeError::BadMagic(_))
        ));
        let mut bytes = hello(1).encode();
        bytes[4] = 9;
        assert!(matches!(
            Hello::decode_fixed(bytes[..HELLO_FIXED].try_into().unwrap()),
            Err(HandshakeError::Version { .. })
        ));
        let mut bytes = hello(1).encode();
        bytes[46..48].copy_from_slice(&1000u16.to_le_bytes());
        assert_eq!(
            Hello::decode_fixed(bytes[..HELLO_FIXED].try_into().unwrap()),
            Err(HandshakeError::BadJobId)
        );
        let mine = hello(0);
        let mut theirs = hello(1);
        theirs.world_size = 8;
        assert!(matches!(
            mine.check_peer(&theirs),
            Err(HandshakeError::WorldSize { .. })
        ));
        theirs.job_id = "x".into();
        assert!(matches!(
            mine.check_peer(&theirs),
            Err(HandshakeError::OtherJob { .. })
        ));
    }
}
