//! Store frames, requests and responses: decode, and what decodes re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phalanx_store::wire::{
    decode_request, decode_response, encode_request, encode_response, split_frame,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((body, used))) = split_frame(data) {
        assert_eq!(used, body.len() + 4);
    }
    if let Ok(req) = decode_request(data) {
        assert_eq!(&encode_request(&req).unwrap()[4..], data);
    }
    if let Ok(resp) = decode_response(data) {
        assert_eq!(&encode_response(&resp).unwrap()[4..], data);
    }
});
