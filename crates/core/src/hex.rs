//! Lowercase hexadecimal: digests, tokens, nonces and run ids as text.
//!
//! ```
//! assert_eq!(phalanx_core::hex::encode(&[0x00, 0xab, 0x10]), "00ab10");
//! assert_eq!(phalanx_core::hex::decode("00AB10"), Some(vec![0x00, 0xab, 0x10]));
//! assert_eq!(phalanx_core::hex::decode("abc"), None);
//! ```

/// `bytes` as lowercase hex, two digits a byte.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The bytes of `text`, an even number of hex digits in either case; `None` for anything
/// else (an empty text included).
pub fn decode(text: &str) -> Option<Vec<u8>> {
    if text.is_empty()
        || !text.len().is_multiple_of(2)
        || !text.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let text = encode(&all);
        assert_eq!(text.len(), 512);
        assert_eq!(&text[..6], "000102");
        assert_eq!(&text[text.len() - 2..], "ff");
        assert_eq!(decode(&text), Some(all));
        assert_eq!(encode(&[]), "");
        for bad in ["", "0", "0g", "é0"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }
}
