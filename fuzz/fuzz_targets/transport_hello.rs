//! The transport's connection hello and proof, decoded the way a listener does.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phalanx_transport::handshake::{self, Hello, HELLO_FIXED, MAX_JOB_ID, PROOF_LEN};

fuzz_target!(|data: &[u8]| {
    let Some(fixed) = data.get(..HELLO_FIXED) else {
        return;
    };
    let Ok((mut peer, id_len)) = Hello::decode_fixed(fixed.try_into().unwrap()) else {
        return;
    };
    assert!(id_len <= MAX_JOB_ID);
    let Some(id) = data.get(HELLO_FIXED..HELLO_FIXED + id_len) else {
        return;
    };
    let Ok(job) = std::str::from_utf8(id) else {
        return;
    };
    peer.job_id = job.to_string();
    let ours = Hello {
        job_id: "job".into(),
        rank: 0,
        world_size: 4,
        nonce: [7; 32],
    };
    if ours.check_peer(&peer).is_err() {
        return;
    }
    let at = HELLO_FIXED + id_len;
    let Some(proof) = data.get(at..at + PROOF_LEN) else {
        return;
    };
    let ok = handshake::verify(b"token", &ours.nonce, &peer, proof.try_into().unwrap()).is_ok();
    // Only the real proof passes.
    assert_eq!(ok, proof == handshake::proof(b"token", &ours.nonce, &peer));
});
