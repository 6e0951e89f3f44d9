//! Transport frame headers: decode, and what decodes re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use phalanx_transport::frame::{self, Header, HEADER_LEN, MAX_PAYLOAD, MAX_REASON};

fuzz_target!(|data: &[u8]| {
    let Some(h) = data.get(..HEADER_LEN) else {
        return;
    };
    let h: &[u8; HEADER_LEN] = h.try_into().unwrap();
    match frame::decode(h) {
        Ok(Header::Data { fp, len }) => {
            assert!(len <= MAX_PAYLOAD);
            assert_eq!(frame::encode_data(&fp, len)[..28], h[..28]);
        }
        Ok(Header::Abort { len }) => assert!(len <= MAX_REASON),
        Err(_) => {}
    }
});
