//! Deterministic fuzzing of the store's wire protocol (crates/store/src/wire): frames, requests,
//! responses and both sides of the handshake, 100,000+ random and mutated inputs each, in
//! `cargo test`. No input may panic or make a decoder allocate more than a small bound; what
//! decodes re-encodes to the same bytes; only the token holder passes the handshake.

use phalanx_store::wire::{
    decode_request, decode_response, encode_request, encode_response, split_frame, ClientHandshake,
    Request, Response, ServerHandshake, CLIENT_HELLO_HEADER_LEN, CLIENT_PROOF_LEN, NONCE_LEN,
    SERVER_HELLO_LEN, VERDICT_LEN,
};
use phalanx_store::Auth;
use phalanx_testing::fuzz::{fuzz, TrackingAlloc};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc::new();

const CASES: usize = 1_000_000;
/// Decoders borrow from the input; nothing may allocate more than this.
const ALLOC_BOUND: usize = 1 << 20;

fn request_seeds() -> Vec<Vec<u8>> {
    let reqs = [
        Request::Set {
            key: "round/0/error/1",
            value: b"rank 1: boom",
        },
        Request::Get {
            key: "k",
            timeout_ms: 300_000,
        },
        Request::Add {
            key: "rank_count",
            delta: -3,
        },
        Request::CompareSet {
            key: "failed",
            expected: b"",
            desired: b"{}",
        },
        Request::Wait {
            keys: vec!["a", "bb", ""],
            timeout_ms: 5,
        },
        Request::Check {
            keys: vec!["status/0", "status/1"],
        },
        Request::Delete { key: "x" },
        Request::NumKeys,
        Request::Append {
            key: "log",
            value: &[0, 1, 2, 255],
        },
        Request::MultiGet {
            keys: vec!["a", "b"],
            timeout_ms: 1,
        },
        Request::MultiSet {
            pairs: vec![("a", b"1".as_slice()), ("b", b"")],
        },
    ];
    // Bodies, without the 4-byte length prefix (fuzzed on its own below).
    reqs.iter()
        .map(|r| encode_request(r).unwrap()[4..].to_vec())
        .collect()
}

fn response_seeds() -> Vec<Vec<u8>> {
    let resps = [
        Response::Unit,
        Response::Value(b"value"),
        Response::Int(i64::MIN),
        Response::Bool(true),
        Response::Values(vec![b"a", b"", b"ccc"]),
        Response::Timeout { key: "missing" },
        Response::Error {
            key: "k",
            message: "add on a non-integer value",
        },
    ];
    resps
        .iter()
        .map(|r| encode_response(r).unwrap()[4..].to_vec())
        .collect()
}

#[test]
fn requests_never_panic_and_round_trip() {
    let mut decoded = 0usize;
    fuzz("store request", 11, &request_seeds(), CASES, 256, |body| {
        if let Ok(req) = decode_request(body) {
            decoded += 1;
            let _ = req.op();
            let again = encode_request(&req).expect("a decoded request re-encodes");
            assert_eq!(&again[4..], body, "{req:?}");
        }
    });
    assert!(
        decoded > CASES / 100,
        "only {decoded} inputs decoded: mutations too blunt"
    );
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

#[test]
fn responses_never_panic_and_round_trip() {
    let mut decoded = 0usize;
    fuzz(
        "store response",
        12,
        &response_seeds(),
        CASES,
        256,
        |body| {
            if let Ok(resp) = decode_response(body) {
                decoded += 1;
                let again = encode_response(&resp).expect("a decoded response re-encodes");
                assert_eq!(&again[4..], body, "{resp:?}");
            }
        },
    );
    assert!(decoded > CASES / 100, "only {decoded} inputs decoded");
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

#[test]
fn frames_split_within_bounds() {
    let framed: Vec<Vec<u8>> = request_seeds()
        .into_iter()
        .chain(response_seeds())
        .map(|mut body| {
            let mut f = (body.len() as u32).to_le_bytes().to_vec();
            f.append(&mut body);
            f
        })
        .collect();
    let mut whole = 0usize;
    fuzz(
        "store frame",
        15,
        &framed,
        CASES,
        256,
        |input| match split_frame(input) {
            Ok(Some((body, used))) => {
                assert_eq!(used, body.len() + 4);
                assert!(used <= input.len());
                whole += 1;
            }
            Ok(None) => {}
            Err(e) => assert!(e.reason().contains("exceeds")),
        },
    );
    assert!(whole > 0);
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

/// The server's side of a handshake over one byte string: hello header, the rest of the
/// hello, then the proof. `Ok` only when the client proved the token.
fn serve(auth: &Auth, server_nonce: [u8; NONCE_LEN], input: &[u8]) -> Result<(), String> {
    let mut hs = ServerHandshake::new(auth, server_nonce);
    let header: &[u8; CLIENT_HELLO_HEADER_LEN] = input
        .get(..CLIENT_HELLO_HEADER_LEN)
        .ok_or("short")?
        .try_into()
        .unwrap();
    let rest_len = hs.on_hello_header(header).map_err(|r| r.reason)?;
    assert!(
        rest_len <= 256 + NONCE_LEN,
        "bounded before allocation: {rest_len}"
    );
    let rest = input
        .get(CLIENT_HELLO_HEADER_LEN..CLIENT_HELLO_HEADER_LEN + rest_len)
        .ok_or("short rest")?;
    let reply = hs.on_hello_rest(rest).map_err(|r| r.reason)?;
    assert_eq!(reply.len(), SERVER_HELLO_LEN);
    let at = CLIENT_HELLO_HEADER_LEN + rest_len;
    let proof: &[u8; CLIENT_PROOF_LEN] = input
        .get(at..at + CLIENT_PROOF_LEN)
        .ok_or("short proof")?
        .try_into()
        .unwrap();
    let verdict = hs.on_proof(proof).map_err(|r| r.reason)?;
    assert_eq!(verdict, vec![1]);
    Ok(())
}

#[test]
fn server_handshake_never_panics_and_refuses_wrong_tokens() {
    let auth = Auth::new("job-a", b"the-token".to_vec());
    let server_nonce = [9u8; NONCE_LEN];
    // A full, valid client transcript: hello then the proof over the server's nonce.
    let client = ClientHandshake::new(&auth, [3u8; NONCE_LEN]);
    let mut valid = client.hello().unwrap();
    let mut probe = ServerHandshake::new(&auth, server_nonce);
    let header: [u8; CLIENT_HELLO_HEADER_LEN] = valid[..8].try_into().unwrap();
    probe.on_hello_header(&header).unwrap();
    let server_hello: [u8; SERVER_HELLO_LEN] = probe
        .on_hello_rest(&valid[8..])
        .unwrap()
        .try_into()
        .unwrap();
    let proof = client.on_server_hello(&server_hello).unwrap();
    valid.extend_from_slice(&proof);
    assert_eq!(serve(&auth, server_nonce, &valid), Ok(()));
    // The same client with another token is refused.
    let wrong = Auth::new("job-a", b"not-the-token".to_vec());
    let rogue = ClientHandshake::new(&wrong, [3u8; NONCE_LEN]);
    assert!(
        rogue.on_server_hello(&server_hello).is_err(),
        "client checks the server first"
    );
    let mut forged = rogue.hello().unwrap();
    forged.extend_from_slice(&[0u8; CLIENT_PROOF_LEN]);
    assert!(serve(&auth, server_nonce, &forged).is_err());

    let seeds = vec![valid.clone(), forged];
    let mut passed = 0usize;
    fuzz("store server handshake", 13, &seeds, CASES, 400, |input| {
        if serve(&auth, server_nonce, input).is_ok() {
            // Only the untouched transcript (plus trailing bytes) may pass.
            assert_eq!(&input[..valid.len()], &valid[..]);
            passed += 1;
        }
    });
    assert!(passed >= 1);
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

#[test]
fn client_handshake_never_panics_and_refuses_rogue_servers() {
    let auth = Auth::new("job-a", b"the-token".to_vec());
    let client = ClientHandshake::new(&auth, [3u8; NONCE_LEN]);
    let hello = client.hello().unwrap();
    let mut server = ServerHandshake::new(&auth, [9u8; NONCE_LEN]);
    server
        .on_hello_header(&hello[..8].try_into().unwrap())
        .unwrap();
    let mut valid = server.on_hello_rest(&hello[8..]).unwrap();
    valid.push(1); // the verdict
    let seeds = vec![valid.clone()];
    let mut passed = 0usize;
    fuzz("store client handshake", 14, &seeds, CASES, 200, |input| {
        let Some(sh) = input.get(..SERVER_HELLO_LEN) else {
            return;
        };
        let Ok(_proof) = client.on_server_hello(sh.try_into().unwrap()) else {
            return;
        };
        assert_eq!(&input[..SERVER_HELLO_LEN], &valid[..SERVER_HELLO_LEN]);
        if let Some(v) = input.get(SERVER_HELLO_LEN..SERVER_HELLO_LEN + VERDICT_LEN) {
            if client.on_verdict(v.try_into().unwrap()).is_ok() {
                passed += 1;
            }
        }
    });
    assert!(passed >= 1);
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

/// PyTorch's TCPStore queries (wire::torch), the ones torch 2.15's client sends.
fn torch_request_seeds() -> Vec<Vec<u8>> {
    use phalanx_store::wire::torch::{encode_request, Request as Q, VALIDATION_MAGIC};
    [
        Q::Validate {
            magic: VALIDATION_MAGIC,
        },
        Q::Ping { nonce: 7 },
        Q::Set {
            key: "/worker/attempt_0/k",
            value: b"v",
        },
        Q::CompareSet {
            key: "/k",
            expected: b"",
            desired: b"d",
        },
        Q::Get { key: "/k" },
        Q::Add {
            key: "/n",
            delta: -1,
        },
        Q::Check {
            keys: vec!["/a", "/b"],
        },
        Q::Wait { keys: vec!["/a"] },
        Q::NumKeys,
        Q::DeleteKey { key: "/k" },
        Q::Append {
            key: "/k",
            value: b"xy",
        },
        Q::MultiGet {
            keys: vec!["/a", "/b"],
        },
        Q::MultiSet {
            pairs: vec![("/a", b"1"), ("/b", b"22")],
        },
        Q::CancelWait,
        Q::QueuePush {
            key: "/q",
            value: b"e",
        },
        Q::QueuePop { key: "/q" },
        Q::QueueLen { key: "/q" },
        Q::ListKeys,
        Q::Barrier {
            key: "/bk",
            world_size: 4,
        },
    ]
    .iter()
    .map(|q| encode_request(q).unwrap())
    .collect()
}

#[test]
fn torch_requests_never_panic_and_round_trip() {
    use phalanx_store::wire::torch::{decode_request, encode_request};
    let mut decoded = 0usize;
    fuzz(
        "torch request",
        16,
        &torch_request_seeds(),
        CASES,
        256,
        |input| {
            if let Ok(Some((req, used))) = decode_request(input) {
                decoded += 1;
                let _ = (req.name(), req.reply_kind());
                assert_eq!(encode_request(&req).unwrap(), &input[..used], "{req:?}");
                // One byte short is an incomplete query, never a different one.
                assert_eq!(decode_request(&input[..used - 1]), Ok(None));
            }
        },
    );
    assert!(decoded > CASES / 100, "only {decoded} inputs decoded");
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

#[test]
fn torch_replies_never_panic_and_round_trip() {
    use phalanx_store::wire::torch::{decode_reply, encode_reply, Reply, ReplyKind};
    let kinds = [
        ReplyKind::Nonce,
        ReplyKind::Value,
        ReplyKind::Int,
        ReplyKind::Status,
        ReplyKind::Values(2),
        ReplyKind::Popped,
        ReplyKind::Keys,
    ];
    let seeds: Vec<Vec<u8>> = [
        Reply::Nonce(9),
        Reply::Value(b"abc"),
        Reply::Int(-5),
        Reply::Status(1),
        Reply::Values(vec![b"a", b""]),
        Reply::Popped {
            len: 2,
            head: Some(b"e"),
        },
        Reply::Keys(vec!["/a", "/bb"]),
    ]
    .iter()
    .map(encode_reply)
    .collect();
    let mut decoded = 0usize;
    fuzz("torch reply", 17, &seeds, CASES, 256, |input| {
        for kind in kinds {
            if let Ok(Some((reply, used))) = decode_reply(kind, input) {
                decoded += 1;
                assert_eq!(encode_reply(&reply), &input[..used], "{reply:?}");
            }
        }
    });
    assert!(decoded > CASES / 100, "only {decoded} inputs decoded");
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}
