//! Dataset specs, the names `phalanx train --dataset` takes, and the loader each one calls.
//! Each source (csv, idx, synthetic, vendored) builds a [`Dataset`]; this module only
//! dispatches, so no source depends on another through it.

use std::path::Path;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::{csv, idx, synthetic, vendored};

/// Loads a dataset from a spec, as `phalanx train --dataset` takes it:
/// `digits`, `mnist5k`, `synthetic[:N[:SEED]]` (default 60000 samples, seed 0),
/// `csv:PATH` or `mnist-idx:DIR` (the training files of DIR).
///
/// ```
/// let d = phalanx_data::load("synthetic:100:7")?;
/// assert_eq!((d.len(), d.dim(), d.classes()), (100, 784, 10));
/// assert!(phalanx_data::load("cifar").is_err());
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn load(spec: &str) -> Result<Dataset> {
    let unknown = || Error::UnknownDataset {
        spec: spec.to_string(),
    };
    match spec.split_once(':') {
        None if spec == "digits" => vendored::digits(),
        None if spec == "mnist5k" => vendored::mnist5k(),
        None if spec == "synthetic" => Ok(synthetic::synthetic(60_000, 0)),
        None if spec == "shakespeare" => Err(Error::TextCorpus { spec: spec.into() }),
        Some(("text", _)) => Err(Error::TextCorpus { spec: spec.into() }),
        Some(("synthetic", rest)) => {
            let mut parts = rest.split(':');
            let n = parts
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(unknown)?;
            let seed = match parts.next() {
                Some(s) => s.parse().map_err(|_| unknown())?,
                None => 0,
            };
            if parts.next().is_some() {
                return Err(unknown());
            }
            Ok(synthetic::synthetic(n, seed))
        }
        Some(("csv", path)) if !path.is_empty() => csv::csv(Path::new(path)),
        Some(("mnist-idx", dir)) if !dir.is_empty() => idx::mnist_idx(Path::new(dir)),
        _ => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_specs() {
        for s in [
            "",
            "cifar",
            "csv:",
            "synthetic:x",
            "synthetic:1:2:3",
            "mnist-idx:",
        ] {
            assert!(matches!(load(s), Err(Error::UnknownDataset { .. })), "{s}");
        }
    }
}
