//! `Dataset`: a flat, row-major table of f32 features and i64 labels.

use crate::error::{Error, Result};
use crate::randperm::randperm;

/// A classification dataset held in memory: `len()` rows of `dim()` f32 features (row-major,
/// one flat buffer, as a batch is handed to the model) and one i64 label in `0..classes()` each.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    name: String,
    features: Vec<f32>,
    labels: Vec<i64>,
    dim: usize,
    classes: usize,
}

impl Dataset {
    /// Builds a dataset, checking that `features.len() == labels.len() * dim` and that every
    /// label is in `0..classes`.
    ///
    /// ```
    /// use phalanx_data::Dataset;
    /// let d = Dataset::new("xor", vec![0., 0., 0., 1., 1., 0., 1., 1.], vec![0, 1, 1, 0], 2, 2)?;
    /// assert_eq!((d.len(), d.dim(), d.classes()), (4, 2, 2));
    /// assert_eq!(d.row(1), [0., 1.]);
    /// # Ok::<(), phalanx_data::Error>(())
    /// ```
    pub fn new(
        name: impl Into<String>,
        features: Vec<f32>,
        labels: Vec<i64>,
        dim: usize,
        classes: usize,
    ) -> Result<Self> {
        let name = name.into();
        let invalid = |reason: String| Error::InvalidDataset {
            name: name.clone(),
            reason,
        };
        if dim == 0 {
            return Err(invalid("dim must be at least 1".into()));
        }
        if features.len() != labels.len() * dim {
            return Err(invalid(format!(
                "{} features for {} labels of dim {dim}",
                features.len(),
                labels.len()
            )));
        }
        if let Some((i, &l)) = labels
            .iter()
            .enumerate()
            .find(|(_, &l)| l < 0 || l as u64 >= classes as u64)
        {
            return Err(invalid(format!(
                "label {l} of row {i} is not in 0..{classes}"
            )));
        }
        Ok(Self {
            name,
            features,
            labels,
            dim,
            classes,
        })
    }

    /// The dataset's name (its spec, or the file it came from).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Features per sample.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of classes (labels are in `0..classes`).
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// All features, row-major: sample `i` is `features()[i * dim .. (i + 1) * dim]`.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// All labels.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The features of sample `i`. Panics if `i >= len()`, like slice indexing.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.features[i * self.dim..(i + 1) * self.dim]
    }

    /// Takes the buffers out: `(features, labels)`, features row-major.
    pub fn into_parts(self) -> (Vec<f32>, Vec<i64>) {
        (self.features, self.labels)
    }

    /// How many samples each class has.
    pub fn label_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }

    /// Appends the features and labels of `indices` to `features` and `labels` (a batch).
    pub fn gather_into(
        &self,
        indices: &[usize],
        features: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) -> Result<()> {
        self.check_indices(indices)?;
        features.reserve(indices.len() * self.dim);
        labels.reserve(indices.len());
        for &i in indices {
            features.extend_from_slice(self.row(i));
            labels.push(self.labels[i]);
        }
        Ok(())
    }

    /// A new dataset of the rows `indices`, in that order.
    pub fn subset(&self, indices: &[usize], name: impl Into<String>) -> Result<Self> {
        let (mut features, mut labels) = (Vec::new(), Vec::new());
        self.gather_into(indices, &mut features, &mut labels)?;
        Ok(Self {
            name: name.into(),
            features,
            labels,
            dim: self.dim,
            classes: self.classes,
        })
    }

    /// Deterministic train/test split: a torch `randperm(len, seed)` picks the
    /// `round(len * test_fraction)` test rows; both parts keep the original row order.
    /// Returns `(train, test)`.
    ///
    /// ```
    /// let d = phalanx_data::digits()?;
    /// let (train, test) = d.split(0.2, 0)?;
    /// assert_eq!((train.len(), test.len()), (1438, 359));
    /// # Ok::<(), phalanx_data::Error>(())
    /// ```
    pub fn split(&self, test_fraction: f64, seed: u64) -> Result<(Self, Self)> {
        if !(0.0..=1.0).contains(&test_fraction) {
            return Err(Error::InvalidArgument {
                what: "test_fraction",
                reason: format!("{test_fraction} is not in [0, 1]"),
            });
        }
        let n_test = (self.len() as f64 * test_fraction).round() as usize;
        let perm = randperm(self.len(), seed);
        let (mut test, mut train) = (perm[..n_test].to_vec(), perm[n_test..].to_vec());
        test.sort_unstable();
        train.sort_unstable();
        Ok((
            self.subset(&train, format!("{}[train]", self.name))?,
            self.subset(&test, format!("{}[test]", self.name))?,
        ))
    }

    fn check_indices(&self, indices: &[usize]) -> Result<()> {
        match indices.iter().find(|&&i| i >= self.len()) {
            Some(&index) => Err(Error::IndexOutOfRange {
                index,
                len: self.len(),
                name: self.name.clone(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dataset {
        let features = (0..20).map(|v| v as f32).collect();
        Dataset::new("tiny", features, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0], 2, 3).unwrap()
    }

    #[test]
    fn new_rejects_inconsistent_parts() {
        assert!(Dataset::new("a", vec![0.0; 5], vec![0, 1], 2, 2).is_err());
        assert!(Dataset::new("a", vec![0.0; 4], vec![0, 2], 2, 2).is_err());
        assert!(Dataset::new("a", vec![0.0; 4], vec![0, -1], 2, 2).is_err());
        assert!(Dataset::new("a", vec![], vec![], 0, 2).is_err());
    }

    #[test]
    fn split_is_deterministic_and_disjoint() {
        let d = tiny();
        let (tr, te) = d.split(0.3, 5).unwrap();
        assert_eq!((tr.len(), te.len()), (7, 3));
        assert_eq!(d.split(0.3, 5).unwrap(), (tr.clone(), te.clone()));
        // Rows are identified by their first feature (2 * index).
        let mut all: Vec<f32> = tr
            .features()
            .iter()
            .chain(te.features())
            .step_by(2)
            .copied()
            .collect();
        all.sort_by(f32::total_cmp);
        assert_eq!(all, (0..10).map(|i| (2 * i) as f32).collect::<Vec<_>>());
        assert!(d.split(1.5, 0).is_err());
        assert_eq!(d.split(0.0, 0).unwrap().1.len(), 0);
    }

    #[test]
    fn gather_checks_indices() {
        let d = tiny();
        let (mut f, mut l) = (Vec::new(), Vec::new());
        d.gather_into(&[3, 0], &mut f, &mut l).unwrap();
        assert_eq!(f, [6.0, 7.0, 0.0, 1.0]);
        assert_eq!(l, [0, 0]);
        let (features, labels) = d.clone().into_parts();
        assert_eq!((features.len(), labels.len()), (20, 10));
        assert!(matches!(
            d.gather_into(&[10], &mut f, &mut l),
            Err(Error::IndexOutOfRange {
                index: 10,
                len: 10,
                ..
            })
        ));
    }
}
