//! Parsing of byte sizes (`4K`, `1M`, `256M`) and size lists (`4K,64K`, `4K..256M`, `4K..1G:4`).

use anyhow::{bail, Context};

/// Parses `4`, `4K`, `4KB`, `4KiB`, `1M`, `2G` (binary multiples).
pub(crate) fn parse_size(s: &str) -> anyhow::Result<usize> {
    Ok(phalanx_core::parse_bytes(s)?)
}

pub(crate) fn parse_sizes(spec: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, rest)) = part.split_once("..") {
            let (b, f) = match rest.split_once(':') {
                Some((b, f)) => (
                    b,
                    f.parse::<usize>()
                        .with_context(|| format!("factor in {part:?}"))?,
                ),
                None => (rest, 2),
            };
            let (a, b) = (parse_size(a)?, parse_size(b)?);
            if f < 2 || a == 0 || a > b {
                bail!("range {part:?}: need 0 < A <= B and a factor >= 2");
            }
            let mut x = a;
            while x <= b {
                out.push(x);
                // Near usize::MAX the next size would overflow: the range ends here.
                match x.checked_mul(f) {
                    Some(next) => x = next,
                    None => break,
                }
            }
        } else {
            out.push(parse_size(part)?);
        }
    }
    if out.is_empty() {
        bail!("--sizes {spec:?} names no size");
    }
    Ok(out)
}

/// `1K`, `64M`: the shortest exact binary form.
pub(crate) fn format_size(bytes: usize) -> String {
    for (unit, m) in [("G", 1usize << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{unit}", bytes / m);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_sizes("4K..64K:4").unwrap(), vec![4096, 16384, 65536]);
        assert_eq!(parse_sizes("4,1M").unwrap(), vec![4, 1 << 20]);
        assert_eq!(parse_sizes("1K..4K").unwrap(), vec![1024, 2048, 4096]);
        assert!(parse_sizes("4X").is_err());
        assert!(parse_sizes("8K..4K").is_err());
        assert!(parse_sizes("").is_err());
        assert_eq!(format_size(64 << 20), "64M");
        assert_eq!(format_size(1000), "1000");
    }
}
