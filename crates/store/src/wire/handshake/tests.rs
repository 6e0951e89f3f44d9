//! Unit tests of `handshake.rs`.
use super::*;

/// Runs a whole handshake in memory; returns the first rejection, if any.
fn run(client_auth: &Auth, server_auth: &Auth) -> Result<(), Rejection> {
    let client = ClientHandshake::new(client_auth, [1; NONCE_LEN]);
    let mut server = ServerHandshake::new(server_auth, [2; NONCE_LEN]);
    let hello = client.hello().unwrap();
    let header: [u8; CLIENT_HELLO_HEADER_LEN] =
        hello[..CLIENT_HELLO_HEADER_LEN].try_into().unwrap();
    let rest_len = server.on_hello_header(&header)?;
    assert_eq!(rest_len, hello.len() - CLIENT_HELLO_HEADER_LEN);
    let server_hello = match server.on_hello_rest(&hello[CLIENT_HELLO_HEADER_LEN..]) {
        Ok(h) => h,
        Err(rej) => {
            // The client must read the reply as the same kind of failure.
            let reply: [u8; SERVER_HELLO_LEN] = rej.reply.clone().unwrap().try_into().unwrap();
            let seen = client.on_server_hello(&reply).unwrap_err();
            assert_eq!(seen.auth, rej.auth);
            return Err(rej);
        }
    };
    let proof = client.on_server_hello(&server_hello.try_into().unwrap())?;
    let verdict = match server.on_proof(&proof) {
        Ok(v) => v,
        Err(rej) => {
            let v: [u8; 1] = rej.reply.clone().unwrap().try_into().unwrap();
            assert!(client.on_verdict(v).unwrap_err().auth);
            return Err(rej);
        }
    };
    client.on_verdict(verdict.try_into().unwrap())
}

#[test]
fn matching_credentials_pass() {
    let a = Auth::new("job", b"secret".to_vec());
    run(&a, &a).unwrap();
    let empty = Auth::new("default", Vec::new());
    run(&empty, &empty).unwrap();
}

#[test]
fn wrong_token_is_refused_by_the_client_first() {
    // The client checks the server's proof before proving anything: with different tokens
    // the client refuses the server (it cannot tell a rogue store from a misconfigured one).
    let err = run(
        &Auth::new("job", b"a".to_vec()),
        &Auth::new("job", b"b".to_vec()),
    )
    .unwrap_err();
    assert!(
        err.auth && err.reason.contains("server could not prove"),
        "{err:?}"
    );
}

#[test]
fn wrong_client_proof_is_refused_by_the_server() {
    let auth = Auth::new("job", b"t".to_vec());
    let mut server = ServerHandshake::new(&auth, [2; NONCE_LEN]);
    let hello = ClientHandshake::new(&auth, [1; NONCE_LEN]).hello().unwrap();
    server
        .on_hello_rest(&hello[CLIENT_HELLO_HEADER_LEN..])
        .unwrap();
    let forged = client_proof(
        &Auth::new("job", b"guess".to_vec()),
        &[2; NONCE_LEN],
        &[1; NONCE_LEN],
    );
    let rej = server.on_proof(&forged).unwrap_err();
    assert!(rej.auth && rej.reason.contains("PHALANX_TOKEN"));
    assert_eq!(rej.reply, Some(vec![0]));
    // Reflection: the server's own proof is not a valid client proof.
    let reflected = server_proof(&auth, &[1; NONCE_LEN], &[2; NONCE_LEN]);
    assert!(server.on_proof(&reflected).is_err());
    let good = client_proof(&auth, &[2; NONCE_LEN], &[1; NONCE_LEN]);
    assert_eq!(server.on_proof(&good).unwrap(), vec![1]);
}

#[test]
fn wrong_job_is_refused_with_a_reply() {
    let err = run(
        &Auth::new("a", b"t".to_vec()),
        &Auth::new("b", b"t".to_vec()),
    )
    .unwrap_err();
    assert!(err.auth && err.reason.contains("job"));
}

#[test]
fn bad_magic_version_and_lengths() {
    let auth = Auth::new("j", Vec::new());
    let server = ServerHandshake::new(&auth, [0; NONCE_LEN]);
    let rej = server.on_hello_header(b"GET / HT").unwrap_err();
    assert!(!rej.auth && rej.reply.is_none() && rej.reason.contains("magic"));
    let mut h = ClientHandshake::new(&auth, [0; NONCE_LEN]).hello().unwrap();
    h[4] = 9;
    let rej = server
        .on_hello_header(&h[..8].try_into().unwrap())
        .unwrap_err();
    assert!(rej.reason.contains("version 9") && rej.reply.is_some());
    let client = ClientHandshake::new(&auth, [0; NONCE_LEN]);
    let reply: [u8; SERVER_HELLO_LEN] = rej.reply.unwrap().try_into().unwrap();
    assert!(client
        .on_server_hello(&reply)
        .unwrap_err()
        .reason
        .contains("version"));
    let mut h = ClientHandshake::new(&auth, [0; NONCE_LEN]).hello().unwrap();
    h[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(server.on_hello_header(&h[..8].try_into().unwrap()).is_err());
    let long = Auth::new("j".repeat(MAX_JOB_ID_LEN + 1), Vec::new());
    assert!(ClientHandshake::new(&long, [0; NONCE_LEN]).hello().is_err());
    assert!(client.on_verdict([7]).is_err());
}

#[test]
fn rejections_never_contain_the_token() {
    let token = b"TOKEN-VALUE-123".to_vec();
    let err = run(
        &Auth::new("a", token.clone()),
        &Auth::new("b", token.clone()),
    )
    .unwrap_err();
    assert!(!err.reason.contains("TOKEN-VALUE-123"));
    let err = run(&Auth::new("a", token), &Auth::new("a", b"other".to_vec())).unwrap_err();
    assert!(!err.reason.contains("TOKEN-VALUE-123"));
}

proptest::proptest! {
    #[test]
    fn arbitrary_handshake_bytes_never_panic_or_pass(
        header in proptest::array::uniform8(proptest::prelude::any::<u8>()),
        rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        hello in proptest::collection::vec(proptest::prelude::any::<u8>(), SERVER_HELLO_LEN),
        proof in proptest::array::uniform32(proptest::prelude::any::<u8>()),
    ) {
        let auth = Auth::new("job", b"t".to_vec());
        let mut server = ServerHandshake::new(&auth, [3; NONCE_LEN]);
        let _ = server.on_hello_header(&header);
        let _ = server.on_hello_rest(&rest);
        // A random proof never passes.
        proptest::prop_assert!(server.on_proof(&proof).is_err());
        let client = ClientHandshake::new(&auth, [4; NONCE_LEN]);
        proptest::prop_assert!(client.on_server_hello(&hello.try_into().unwrap()).is_err());
    }
}
