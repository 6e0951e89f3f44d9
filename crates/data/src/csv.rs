//! CSV datasets: one sample per line, the features then the integer label in the last column;
//! plain or gzip-compressed (recognised by its magic bytes, whatever the file name).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::GzDecoder;

use crate::dataset::Dataset;
use crate::error::{Error, Result};

/// Loads a CSV file (optionally gzipped): features as written, label in the last column,
/// `classes` = largest label + 1. A first line with no numeric field is taken as a header.
///
/// Errors name the file and the 1-based line: a short or long row, a field that is not a
/// number, a negative or fractional label, a truncated gzip stream.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("tiny.csv");
/// std::fs::write(&path, "x,y,label\n0.5,1,0\n2,3,1\n")?;
/// let d = phalanx_data::csv(&path)?;
/// assert_eq!((d.len(), d.dim(), d.classes()), (2, 2, 2));
/// assert_eq!(d.row(1), [2.0, 3.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn csv(path: &Path) -> Result<Dataset> {
    let file = File::open(path).map_err(|source| Error::Io {
        file: path.to_path_buf(),
        line: 0,
        source,
    })?;
    let table = parse(maybe_gunzip(file, path)?, path, 1.0)?;
    let classes = table.labels.iter().max().map_or(0, |&m| m as usize + 1);
    table.into_dataset(path.display().to_string(), classes)
}

/// Wraps `reader` in a gzip decoder when it starts with the gzip magic bytes.
pub(crate) fn maybe_gunzip<'a, R: Read + 'a>(
    reader: R,
    path: &Path,
) -> Result<Box<dyn BufRead + 'a>> {
    let mut buffered = BufReader::new(reader);
    let head = buffered.fill_buf().map_err(|source| Error::Io {
        file: path.to_path_buf(),
        line: 0,
        source,
    })?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::new(GzDecoder::new(buffered)))
    } else {
        Box::new(buffered)
    })
}

/// Rows parsed from a CSV stream, features divided by `divisor`.
pub(crate) struct Table {
    pub(crate) features: Vec<f32>,
    pub(crate) labels: Vec<i64>,
    pub(crate) dim: usize,
    file: std::path::PathBuf,
}

impl Table {
    pub(crate) fn into_dataset(self, name: String, classes: usize) -> Result<Dataset> {
        let file = self.file;
        Dataset::new(name, self.features, self.labels, self.dim, classes).map_err(|e| {
            Error::Parse {
                file,
                line: 0,
                reason: e.to_string(),
            }
        })
    }
}

/// Parses CSV lines from `reader`; `path` only names the source in errors.
pub(crate) fn parse(mut reader: impl BufRead, path: &Path, divisor: f32) -> Result<Table> {
    let (mut features, mut labels, mut dim) = (Vec::new(), Vec::new(), None::<usize>);
    let mut line = String::new();
    let mut line_no = 0;
    loop {
        line.clear();
        line_no += 1;
        let read = reader.read_line(&mut line).map_err(|source| Error::Io {
            file: path.to_path_buf(),
            line: line_no,
            source,
        })?;
        if read == 0 {
            break;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let bad = |reason: String| Error::Parse {
            file: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if line_no == 1 && fields.iter().all(|f| f.parse::<f64>().is_err()) {
            continue; // a header
        }
        let want = *dim.get_or_insert(fields.len() - 1);
        if want == 0 {
            return Err(bad("a row needs at least one feature and a label".into()));
        }
        if fields.len() != want + 1 {
            return Err(bad(format!(
                "expected {} columns ({want} features and a label), found {}",
                want + 1,
                fields.len()
            )));
        }
        for (col, f) in fields[..want].iter().enumerate() {
            let v: f32 = f
                .parse()
                .map_err(|_| bad(format!("column {}: {f:?} is not a number", col + 1)))?;
            features.push(v / divisor);
        }
        let label_text = fields[want];
        match label_text.parse::<i64>() {
            Ok(l) if l >= 0 => labels.push(l),
            _ => {
                return Err(bad(format!(
                    "label {label_text:?} is not a non-negative integer"
                )))
            }
        }
    }
    match dim {
        Some(dim) => Ok(Table {
            features,
            labels,
            dim,
            file: path.to_path_buf(),
        }),
        None => Err(Error::Parse {
            file: path.to_path_buf(),
            line: line_no - 1,
            reason: "no data rows".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Table> {
        parse(s.as_bytes(), Path::new("mem.csv"), 1.0)
    }

    fn line_of(e: Error) -> usize {
        match e {
            Error::Parse { line, .. } | Error::Io { line, .. } => line,
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn parses_with_and_without_header() {
        let t = parse_str("a,b,c\n1,2,3\n4,5,6\n").unwrap();
        assert_eq!((t.dim, t.labels.as_slice()), (2, &[3, 6][..]));
        let t = parse_str("1,2,3\n\n4,5,6").unwrap();
        assert_eq!(t.features, [1.0, 2.0, 4.0, 5.0]);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(line_of(parse_str("1,2,3\n4,5\n").err().unwrap()), 2);
        assert_eq!(line_of(parse_str("1,2,3\n4,x,6\n").err().unwrap()), 2);
        assert_eq!(
            line_of(parse_str("1,2,3\n4,5,6\n7,8,-1\n").err().unwrap()),
            3
        );
        assert_eq!(line_of(parse_str("1,2,3\n4,5,6.5\n").err().unwrap()), 2);
        assert_eq!(line_of(parse_str("3\n").err().unwrap()), 1);
        assert!(parse_str("").is_err());
        let msg = parse_str("1,2,3\n4,5\n").err().unwrap().to_string();
        assert!(msg.starts_with("mem.csv: line 2:"), "{msg}");
    }
}
