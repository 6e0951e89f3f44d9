//! Unit tests of `frame.rs`.
use super::*;

fn all_requests() -> Vec<Request<'static>> {
    vec![
        Request::Set {
            key: "a",
            value: b"1",
        },
        Request::Get {
            key: "k",
            timeout_ms: 300_000,
        },
        Request::Add {
            key: "n",
            delta: -3,
        },
        Request::CompareSet {
            key: "c",
            expected: b"",
            desired: b"d",
        },
        Request::Wait {
            keys: vec!["x", "y"],
            timeout_ms: 5,
        },
        Request::Check { keys: vec![] },
        Request::Delete { key: "gone" },
        Request::NumKeys,
        Request::Append {
            key: "log",
            value: b"more",
        },
        Request::MultiGet {
            keys: vec!["p", ""],
            timeout_ms: 0,
        },
        Request::MultiSet {
            pairs: vec![("p", b"1"), ("q", b"")],
        },
    ]
}

fn all_responses() -> Vec<Response<'static>> {
    vec![
        Response::Unit,
        Response::Value(b"v"),
        Response::Int(i64::MIN),
        Response::Bool(true),
        Response::Values(vec![b"a", b""]),
        Response::Timeout { key: "k" },
        Response::Error {
            key: "k",
            message: "not an integer",
        },
    ]
}

#[test]
fn requests_round_trip() {
    for req in all_requests() {
        let frame = encode_request(&req).unwrap();
        let (body, used) = split_frame(&frame).unwrap().unwrap();
        assert_eq!(used, frame.len());
        assert_eq!(decode_request(body).unwrap(), req);
    }
}

#[test]
fn responses_round_trip() {
    for resp in all_responses() {
        let frame = encode_response(&resp).unwrap();
        let (body, _) = split_frame(&frame).unwrap().unwrap();
        assert_eq!(decode_response(body).unwrap(), resp);
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for req in all_requests() {
        let frame = encode_request(&req).unwrap();
        let body = &frame[4..];
        for cut in 0..body.len() {
            assert!(
                decode_request(&body[..cut]).is_err(),
                "{req:?} cut at {cut}"
            );
        }
        assert_eq!(split_frame(&frame[..frame.len() - 1]).unwrap(), None);
    }
    for resp in all_responses() {
        let frame = encode_response(&resp).unwrap();
        for cut in 0..frame.len() - 4 {
            assert!(
                decode_response(&frame[4..4 + cut]).is_err(),
                "{resp:?} cut at {cut}"
            );
        }
    }
}

#[test]
fn trailing_bytes_and_unknown_codes_are_refused() {
    let mut frame = encode_request(&Request::NumKeys).unwrap();
    frame.push(0);
    assert!(decode_request(&frame[4..])
        .unwrap_err()
        .reason()
        .contains("trailing"));
    assert!(decode_request(&[200])
        .unwrap_err()
        .reason()
        .contains("opcode"));
    assert!(decode_response(&[99]).is_err());
    assert!(decode_response(&[tag::BOOL, 2]).is_err());
}

#[test]
fn oversized_lengths_are_refused_before_allocation() {
    assert!(frame_len(u32::MAX.to_le_bytes()).is_err());
    assert!(split_frame(&[0xff, 0xff, 0xff, 0xff]).is_err());
    // A key length past the limit, with no bytes behind it.
    let mut body = vec![op::SET];
    body.extend_from_slice(&(MAX_KEY_LEN as u32 + 1).to_le_bytes());
    assert!(decode_request(&body)
        .unwrap_err()
        .reason()
        .contains("limit"));
    // A key count that the remaining bytes cannot hold.
    let mut body = vec![op::CHECK];
    body.extend_from_slice(&1000u32.to_le_bytes());
    assert!(decode_request(&body).is_err());
    // Invalid UTF-8 in a key.
    let mut body = vec![op::DELETE];
    body.extend_from_slice(&2u32.to_le_bytes());
    body.extend_from_slice(&[0xff, 0xfe]);
    assert!(decode_request(&body)
        .unwrap_err()
        .reason()
        .contains("UTF-8"));
}

#[test]
fn encoder_checks_limits() {
    let long = "k".repeat(MAX_KEY_LEN + 1);
    assert!(encode_request(&Request::Delete { key: &long }).is_err());
    let keys = vec!["k"; MAX_KEYS + 1];
    assert!(encode_request(&Request::Check { keys }).is_err());
}

#[test]
fn long_error_messages_are_cut_on_a_char_boundary() {
    let msg = "é".repeat(MAX_MESSAGE_LEN);
    let frame = encode_response(&Response::Error {
        key: "k",
        message: &msg,
    })
    .unwrap();
    match decode_response(&frame[4..]).unwrap() {
        Response::Error { message, .. } => assert!(message.len() <= MAX_MESSAGE_LEN),
        other => panic!("{other:?}"),
    }
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
        let _ = split_frame(&bytes);
    }

    #[test]
    fn set_round_trips(key in ".{0,40}", value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let req = Request::Set { key: &key, value: &value };
        let frame = encode_request(&req).unwrap();
        proptest::prop_assert_eq!(decode_request(&frame[4..]).unwrap(), req);
    }
}
