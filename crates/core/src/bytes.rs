//! Sizes in bytes as users write them: `4096`, `64K`, `1M`, `2GiB`.

use crate::{Error, Result};

/// Parses a byte count with an optional binary unit (K, M, G; `KB`/`KiB` spellings too).
///
/// ```
/// assert_eq!(phalanx_core::parse_bytes("64K").unwrap(), 65536);
/// assert!(phalanx_core::parse_bytes("1T").is_err());
/// ```
pub fn parse_bytes(text: &str) -> Result<usize> {
    let t = text.trim();
    let err = |reason: &str| Error::Parse {
        what: "size",
        value: text.to_string(),
        reason: reason.to_string(),
    };
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: usize = t[..digits]
        .parse()
        .map_err(|_| err("expected a number like 4K, 1M or 4096"))?;
    let mult: usize = match t[digits..].to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => return Err(err("unknown unit (use K, M or G)")),
    };
    n.checked_mul(mult).ok_or_else(|| err("overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes(" 2MiB ").unwrap(), 2 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        for bad in ["", "K", "-1", "1.5M", "1T", "99999999999999999999G"] {
            let e = parse_bytes(bad).unwrap_err().to_string();
            assert!(e.contains("size"), "{bad:?}: {e}");
        }
    }
}
