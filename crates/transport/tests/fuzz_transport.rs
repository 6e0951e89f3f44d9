//! Deterministic fuzzing of the transport's pure decoders (frame headers, the connection
//! hello and its proof): 100,000+ random and mutated inputs each, in `cargo test`. No input may
//! panic or make a decoder allocate more than a small bound; whatever decodes must re-encode
//! to the same bytes.

use phalanx_core::{DType, ReduceOp};
use phalanx_testing::fuzz::{fuzz, TrackingAlloc};
use phalanx_transport::frame::{self, Header, HEADER_LEN, MAX_PAYLOAD, MAX_REASON};
use phalanx_transport::handshake::{self, Hello, HELLO_FIXED, MAX_JOB_ID, PROOF_LEN};
use phalanx_transport::{CollectiveKind, Fingerprint};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc::new();

const CASES: usize = 1_000_000;
/// No decoder here needs more than this for any input.
const ALLOC_BOUND: usize = 1 << 20;

fn seeds_frames() -> Vec<Vec<u8>> {
    let fp = |kind, op, dtype, count, root| Fingerprint {
        seq: 1580,
        kind,
        op,
        dtype,
        count,
        root,
    };
    vec![
        frame::encode_data(
            &fp(
                CollectiveKind::Allreduce,
                Some(ReduceOp::Sum),
                DType::F32,
                1024,
                0,
            ),
            4096,
        )
        .to_vec(),
        frame::encode_data(
            &fp(CollectiveKind::Broadcast, None, DType::BF16, 1 << 40, 3),
            0,
        )
        .to_vec(),
        frame::encode_data(
            &fp(CollectiveKind::Barrier, None, DType::U8, 0, 0),
            MAX_PAYLOAD,
        )
        .to_vec(),
        frame::encode_abort("rank 2: timed out in allreduce #7"),
    ]
}

#[test]
fn frame_headers_never_panic_and_round_trip() {
    let n = fuzz(
        "frame header",
        1,
        &seeds_frames(),
        CASES,
        2 * HEADER_LEN,
        |input| {
            let Some(h) = input.get(..HEADER_LEN) else {
                return;
            };
            let h: &[u8; HEADER_LEN] = h.try_into().unwrap();
            match frame::decode(h) {
                Ok(Header::Data { fp, len }) => {
                    assert!(len <= MAX_PAYLOAD);
                    // Everything but the reserved bytes survives a round trip.
                    let again = frame::encode_data(&fp, len);
                    assert_eq!(again[..28], h[..28]);
                    let _ = fp.to_string();
                }
                Ok(Header::Abort { len }) => {
                    assert!(len <= MAX_REASON);
                    let reason = &input[HEADER_LEN..];
                    let _ = String::from_utf8_lossy(&reason[..reason.len().min(len)]);
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        },
    );
    assert!(n >= 100_000);
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}

fn hello(job: &str, rank: u32) -> Hello {
    Hello {
        job_id: job.into(),
        rank,
        world_size: 4,
        nonce: [7; 32],
    }
}

/// Decodes a hello and its proof the way a listener does, from one byte string.
fn accept(ours: &Hello, token: &[u8], input: &[u8]) -> Result<Hello, String> {
    let fixed: &[u8; HELLO_FIXED] = input.get(..HELLO_FIXED).ok_or("short")?.try_into().unwrap();
    let (mut peer, id_len) = Hello::decode_fixed(fixed).map_err(|e| e.to_string())?;
    assert!(id_len <= MAX_JOB_ID);
    let id = input
        .get(HELLO_FIXED..HELLO_FIXED + id_len)
        .ok_or("short id")?;
    peer.job_id = String::from_utf8(id.to_vec()).map_err(|e| e.to_string())?;
    ours.check_peer(&peer).map_err(|e| e.to_string())?;
    let proof: &[u8; PROOF_LEN] = input
        .get(HELLO_FIXED + id_len..HELLO_FIXED + id_len + PROOF_LEN)
        .ok_or("short proof")?
        .try_into()
        .unwrap();
    handshake::verify(token, &ours.nonce, &peer, proof).map_err(|e| e.to_string())?;
    Ok(peer)
}

#[test]
fn hellos_never_panic_and_only_the_token_holder_passes() {
    let token = b"job-secret-token";
    let ours = hello("job-a", 0);
    let mut seeds = Vec::new();
    for (job, rank) in [("job-a", 1u32), ("job-a", 3), ("job-b", 2), ("", 0)] {
        let h = hello(job, rank);
        let mut bytes = h.encode();
        bytes.extend_from_slice(&handshake::proof(token, &ours.nonce, &h));
        seeds.push(bytes);
    }
    let valid = seeds[0].clone();
    assert!(
        accept(&ours, token, &valid).is_ok(),
        "the seed itself passes"
    );
    let mut passed = 0usize;
    let n = fuzz("transport hello", 2, &seeds, CASES, 400, |input| {
        if let Ok(peer) = accept(&ours, token, input) {
            // Only an untouched proof over exactly this hello can pass.
            let exact = {
                let mut b = peer.encode();
                b.extend_from_slice(&handshake::proof(token, &ours.nonce, &peer));
                b
            };
            assert_eq!(&input[..exact.len()], &exact[..]);
            passed += 1;
        }
    });
    assert!(n >= 100_000);
    // A wrong token never passes, even with a well-formed hello.
    assert!(accept(&ours, b"wrong-token", &valid).is_err());
    assert!(
        passed >= 2,
        "the unmutated seeds (and mutants of trailing bytes) pass"
    );
    assert!(ALLOC.largest() < ALLOC_BOUND, "{} bytes", ALLOC.largest());
}
