//! The vendored datasets load with their documented shapes; CSV and IDX files load, and a
//! corrupt or truncated file is an error that names the file and the line (or byte offset).

use std::io::Write;
use std::path::Path;

use phalanx_data::{csv, digits, mnist5k, mnist_idx, mnist_idx_test, Error};

const DIGITS_GZ: &[u8] = include_bytes!("../../../../data/digits.csv.gz");

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[test]
fn digits_shape_and_label_counts() {
    let d = digits().unwrap();
    assert_eq!((d.len(), d.dim(), d.classes()), (1797, 64, 10));
    assert_eq!(
        d.label_counts(),
        [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    );
    // First row of the file: 0,0,5,13,9,1,0,0,… label 0; features divided by 16.
    assert_eq!(&d.row(0)[..4], &[0.0, 0.0, 5.0 / 16.0, 13.0 / 16.0]);
    assert_eq!(d.labels()[0], 0);
}

#[test]
fn mnist5k_shape_and_label_counts() {
    let d = mnist5k().unwrap();
    assert_eq!((d.len(), d.dim(), d.classes()), (5000, 784, 10));
    assert_eq!(d.label_counts(), [500; 10]);
    assert_eq!(phalanx_data::load("mnist5k").unwrap(), d);
}

#[test]
fn csv_file_plain_and_gzipped() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("d.csv");
    std::fs::write(&plain, "1,2,0\n3,4,2\n").unwrap();
    let gz = dir.path().join("d.data"); // gzip is recognised by content, not name
    std::fs::write(&gz, gzip(b"1,2,0\n3,4,2\n")).unwrap();
    let a = csv(&plain).unwrap();
    assert_eq!((a.len(), a.dim(), a.classes()), (2, 2, 3));
    assert_eq!(a.features(), csv(&gz).unwrap().features());
    let spec = format!("csv:{}", plain.display());
    assert_eq!(phalanx_data::load(&spec).unwrap().labels(), [0, 2]);
}

fn assert_names_file_and_line(err: Error, file: &Path, want_line: Option<usize>) {
    let msg = err.to_string();
    assert!(msg.starts_with(&file.display().to_string()), "{msg}");
    match err {
        Error::Parse { line, .. } | Error::Io { line, .. } => {
            assert!(line >= 1, "{msg}");
            if let Some(want) = want_line {
                assert_eq!(line, want, "{msg}");
            }
            assert!(msg.contains(&format!("line {line}")), "{msg}");
        }
        other => panic!("expected a file/line error, got {other:?}"),
    }
}

#[test]
fn corrupt_csv_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    std::fs::write(&path, "1,2,0\n3,4,1\n5,oops,1\n").unwrap();
    assert_names_file_and_line(csv(&path).unwrap_err(), &path, Some(3));
    // A plain file cut in the middle of a row: the last row is short.
    std::fs::write(&path, "1,2,0\n3,4,1\n5,").unwrap();
    assert_names_file_and_line(csv(&path).unwrap_err(), &path, Some(3));
    let missing = dir.path().join("missing.csv");
    assert!(csv(&missing)
        .unwrap_err()
        .to_string()
        .contains("missing.csv"));
}

#[test]
fn truncated_gzip_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("digits.csv.gz");
    for cut in [100, DIGITS_GZ.len() / 2, DIGITS_GZ.len() - 5] {
        std::fs::write(&path, &DIGITS_GZ[..cut]).unwrap();
        let err = csv(&path).unwrap_err();
        assert_names_file_and_line(err, &path, None);
    }
}

#[test]
fn corrupt_gzip_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("digits.csv.gz");
    for at in [20, 5000, 30_000, DIGITS_GZ.len() - 6] {
        let mut bytes = DIGITS_GZ.to_vec();
        bytes[at] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        assert_names_file_and_line(csv(&path).unwrap_err(), &path, None);
    }
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

#[test]
fn mnist_idx_plain_gzipped_and_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let pixels: Vec<u8> = (0..3 * 2 * 2).map(|v| (v * 20) as u8).collect();
    // Training files plain, test files gzipped (the usual download is all .gz).
    std::fs::write(
        dir.path().join("train-images-idx3-ubyte"),
        idx_bytes(&[3, 2, 2], &pixels),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx_bytes(&[3], &[7, 0, 9]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("t10k-images-idx3-ubyte.gz"),
        gzip(&idx_bytes(&[1, 2, 2], &[255; 4])),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("t10k-labels-idx1-ubyte.gz"),
        gzip(&idx_bytes(&[1], &[4])),
    )
    .unwrap();

    let train = mnist_idx(dir.path()).unwrap();
    assert_eq!((train.len(), train.dim(), train.classes()), (3, 4, 10));
    assert_eq!(train.labels(), [7, 0, 9]);
    assert_eq!(
        train.row(1),
        [80.0 / 255.0, 100.0 / 255.0, 120.0 / 255.0, 140.0 / 255.0]
    );
    let test = mnist_idx_test(dir.path()).unwrap();
    assert_eq!((test.len(), test.row(0)), (1, &[1.0f32; 4][..]));
    let spec = format!("mnist-idx:{}", dir.path().display());
    assert_eq!(phalanx_data::load(&spec).unwrap(), train);

    // Truncated images: the error names the file and the byte offset where data ran out.
    let images = dir.path().join("train-images-idx3-ubyte");
    std::fs::write(&images, &idx_bytes(&[3, 2, 2], &pixels)[..20]).unwrap();
    match mnist_idx(dir.path()).unwrap_err() {
        Error::Idx { file, offset, .. } => assert_eq!((file, offset), (images.clone(), 20)),
        other => panic!("{other:?}"),
    }
    // A label that is not a digit.
    std::fs::write(&images, idx_bytes(&[3, 2, 2], &pixels)).unwrap();
    let labels = dir.path().join("train-labels-idx1-ubyte");
    std::fs::write(&labels, idx_bytes(&[3], &[1, 12, 3])).unwrap();
    match mnist_idx(dir.path()).unwrap_err() {
        Error::Idx { file, offset, .. } => assert_eq!((file, offset), (labels.clone(), 9)),
        other => panic!("{other:?}"),
    }
    // A truncated gzip stream.
    let t10k = dir.path().join("t10k-images-idx3-ubyte.gz");
    let gz = gzip(&idx_bytes(&[1, 2, 2], &[255; 4]));
    std::fs::write(&t10k, &gz[..gz.len() - 10]).unwrap();
    let msg = mnist_idx_test(dir.path()).unwrap_err().to_string();
    assert!(
        msg.contains("t10k-images-idx3-ubyte.gz: byte offset"),
        "{msg}"
    );
    // No files at all.
    let empty = tempfile::tempdir().unwrap();
    assert!(mnist_idx(empty.path())
        .unwrap_err()
        .to_string()
        .contains("train-images-idx3-ubyte"));
}

#[test]
fn split_of_a_vendored_dataset() {
    let d = digits().unwrap();
    let (train, test) = d.split(0.25, 3).unwrap();
    assert_eq!(train.len() + test.len(), d.len());
    assert_eq!(test.len(), 449);
    assert_eq!(d.split(0.25, 3).unwrap().1, test);
    assert_ne!(d.split(0.25, 4).unwrap().1.labels(), test.labels());
}
