//! MNIST in its original IDX format (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-…`), gzipped or not, for users who have the full dataset.
//!
//! IDX layout: two zero bytes, a type byte (0x08 = u8), the number of dimensions, each
//! dimension as a big-endian u32, then the data.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::csv::maybe_gunzip;
use crate::dataset::Dataset;
use crate::error::{Error, Result};

/// The 60,000 training images of an MNIST directory: `train-images-idx3-ubyte` and
/// `train-labels-idx1-ubyte` (also found as `train-images.idx3-ubyte`, or with `.gz`).
/// Features are scaled from 0..255 to [0, 1]; 10 classes.
pub fn mnist_idx(dir: &Path) -> Result<Dataset> {
    load(dir, "train")
}

/// The 10,000 test images of an MNIST directory (`t10k-images-idx3-ubyte`, …).
pub fn mnist_idx_test(dir: &Path) -> Result<Dataset> {
    load(dir, "t10k")
}

fn load(dir: &Path, part: &str) -> Result<Dataset> {
    let images_path = find(dir, part, "images", 3)?;
    let labels_path = find(dir, part, "labels", 1)?;
    let (images_dims, pixels) = read_idx(&images_path, 3)?;
    let (labels_dims, raw_labels) = read_idx(&labels_path, 1)?;
    if images_dims[0] != labels_dims[0] {
        return Err(Error::Idx {
            file: labels_path,
            offset: 4,
            reason: format!(
                "{} labels for {} images in {}",
                labels_dims[0],
                images_dims[0],
                images_path.display()
            ),
        });
    }
    if let Some(i) = raw_labels.iter().position(|&l| l > 9) {
        return Err(Error::Idx {
            file: labels_path,
            offset: 8 + i as u64,
            reason: format!("label {} is not a digit", raw_labels[i]),
        });
    }
    let features = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
    let labels = raw_labels.iter().map(|&l| i64::from(l)).collect();
    let name = format!("mnist-idx:{}[{part}]", dir.display());
    Dataset::new(name, features, labels, images_dims[1] * images_dims[2], 10)
}

/// The first existing spelling of an MNIST file name in `dir`.
fn find(dir: &Path, part: &str, kind: &str, ndims: usize) -> Result<PathBuf> {
    let candidates = [
        format!("{part}-{kind}-idx{ndims}-ubyte"),
        format!("{part}-{kind}.idx{ndims}-ubyte"),
    ];
    for base in &candidates {
        for name in [base.clone(), format!("{base}.gz")] {
            let path = dir.join(name);
            if path.is_file() {
                return Ok(path);
            }
        }
    }
    Err(Error::Io {
        file: dir.join(&candidates[0]),
        line: 0,
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not found (also tried .gz and the .idxN-ubyte spelling)",
        ),
    })
}

/// Reads an IDX file of u8 with `ndims` dimensions: its dimensions and its data.
pub(crate) fn read_idx(path: &Path, ndims: usize) -> Result<(Vec<usize>, Vec<u8>)> {
    let file = File::open(path).map_err(|source| Error::Io {
        file: path.to_path_buf(),
        line: 0,
        source,
    })?;
    let mut bytes = Vec::new();
    maybe_gunzip(file, path)?
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Idx {
            file: path.to_path_buf(),
            offset: bytes.len() as u64,
            reason: format!("read failed: {e}"),
        })?;
    parse_idx(&bytes, path, ndims)
}

fn parse_idx(bytes: &[u8], path: &Path, ndims: usize) -> Result<(Vec<usize>, Vec<u8>)> {
    let bad = |offset: usize, reason: String| Error::Idx {
        file: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    let header_len = 4 + 4 * ndims;
    let truncated_header = || {
        bad(
            bytes.len(),
            format!("truncated header: {} bytes, need {header_len}", bytes.len()),
        )
    };
    if bytes.len() < 4 {
        return Err(truncated_header());
    }
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] as usize != ndims {
        return Err(bad(
            0,
            format!(
                "bad magic {:02x}{:02x}{:02x}{:02x}, expected 000008{ndims:02x} (u8, {ndims} dims)",
                bytes[0], bytes[1], bytes[2], bytes[3]
            ),
        ));
    }
    if bytes.len() < header_len {
        return Err(truncated_header());
    }
    let dims: Vec<usize> = (0..ndims)
        .map(|d| {
            let at = 4 + 4 * d;
            u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize
        })
        .collect();
    let want = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let data = &bytes[header_len..];
    match want {
        Some(w) if w == data.len() => Ok((dims, data.to_vec())),
        Some(w) if w > data.len() => Err(bad(
            bytes.len(),
            format!(
                "truncated: dimensions {dims:?} need {w} data bytes, found {}",
                data.len()
            ),
        )),
        _ => Err(bad(
            header_len,
            format!("dimensions {dims:?} do not match {} data bytes", data.len()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(ndims: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 8, ndims];
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn parses_and_rejects() {
        let p = Path::new("x");
        let ok = idx(1, &[3], &[1, 2, 3]);
        assert_eq!(parse_idx(&ok, p, 1).unwrap(), (vec![3], vec![1, 2, 3]));
        let offset = |r: Result<(Vec<usize>, Vec<u8>)>| match r {
            Err(Error::Idx { offset, .. }) => offset,
            other => panic!("{other:?}"),
        };
        assert_eq!(offset(parse_idx(&ok[..9], p, 1)), 9); // truncated data
        assert_eq!(offset(parse_idx(&ok[..5], p, 1)), 5); // truncated header
        assert_eq!(offset(parse_idx(&ok[..2], p, 1)), 2);
        assert_eq!(offset(parse_idx(&ok, p, 3)), 0); // wrong dimensionality
        assert_eq!(offset(parse_idx(&idx(1, &[2], &[1, 2, 3]), p, 1)), 8); // trailing bytes
    }
}
