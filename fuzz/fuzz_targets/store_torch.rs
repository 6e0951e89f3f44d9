//! PyTorch's TCPStore protocol (wire::torch): queries and replies decode without panicking,
//! and what decodes re-encodes to the bytes it used.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phalanx_store::wire::torch::{
    decode_reply, decode_request, encode_reply, encode_request, ReplyKind,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((req, used))) = decode_request(data) {
        assert_eq!(encode_request(&req).unwrap(), &data[..used]);
    }
    for kind in [
        ReplyKind::Nonce,
        ReplyKind::Value,
        ReplyKind::Int,
        ReplyKind::Status,
        ReplyKind::Values(3),
        ReplyKind::Popped,
        ReplyKind::Keys,
    ] {
        if let Ok(Some((reply, used))) = decode_reply(kind, data) {
            assert_eq!(encode_reply(&reply), &data[..used]);
        }
    }
});
