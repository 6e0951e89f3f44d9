//! The store server's side of the handshake fed arbitrary client bytes: never panics, and only
//! a client holding the token is accepted.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phalanx_store::wire::{ServerHandshake, CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN, NONCE_LEN};
use phalanx_store::Auth;

fuzz_target!(|data: &[u8]| {
    let auth = Auth::new("job", b"token".to_vec());
    let mut hs = ServerHandshake::new(&auth, [9; NONCE_LEN]);
    let Some(h) = data.get(..CLIENT_HELLO_HEADER_LEN) else {
        return;
    };
    let Ok(rest_len) = hs.on_hello_header(h.try_into().unwrap()) else {
        return;
    };
    let Some(rest) = data.get(CLIENT_HELLO_HEADER_LEN..CLIENT_HELLO_HEADER_LEN + rest_len) else {
        return;
    };
    if hs.on_hello_rest(rest).is_err() {
        return;
    }
    let at = CLIENT_HELLO_HEADER_LEN + rest_len;
    let Some(proof) = data.get(at..at + CLIENT_PROOF_LEN) else {
        return;
    };
    // A random proof passing would mean the check is broken (probability 2^-256).
    assert!(hs.on_proof(proof.try_into().unwrap()).is_err());
});
