//! Batching with a background prefetch thread, so the next batches are gathered while the
//! model computes on the current one.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::dataset::Dataset;
use crate::error::{Error, Result};

/// One batch: `len()` samples of `dim` features, flat row-major, and their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `len() * dim` features, row-major.
    pub features: Vec<f32>,
    /// One label per sample.
    pub labels: Vec<i64>,
}

impl Batch {
    /// Number of samples in the batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch is empty (never true for a batch a [`DataLoader`] yields).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// Turns a rank's sample indices (typically [`DistributedSampler::indices`]) into batches,
/// in order, gathered by a background thread up to `prefetch` batches ahead.
///
/// [`DistributedSampler::indices`]: crate::DistributedSampler::indices
///
/// ```
/// use std::sync::Arc;
/// use phalanx_data::{DataLoader, DistributedSampler};
/// let data = Arc::new(phalanx_data::digits()?);
/// let sampler = DistributedSampler::new(data.len(), 2, 1)?;
/// let loader = DataLoader::new(data.clone(), sampler.indices(0), 64)?;
/// assert_eq!(loader.num_batches(), 15); // 899 samples: 14 full batches and one of 3
/// let mut seen = 0;
/// for batch in loader.iter() {
///     assert_eq!(batch.features.len(), batch.len() * 64);
///     seen += batch.len();
/// }
/// assert_eq!(seen, sampler.num_samples());
/// # Ok::<(), phalanx_data::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct DataLoader {
    dataset: Arc<Dataset>,
    indices: Arc<[usize]>,
    batch_size: usize,
    prefetch: usize,
    drop_last: bool,
}

/// Batches gathered ahead of use by default.
pub const DEFAULT_PREFETCH: usize = 2;

impl DataLoader {
    /// A loader over `indices` of `dataset`, `batch_size` samples a batch (the last one may be
    /// short), prefetching [`DEFAULT_PREFETCH`] batches. Fails on `batch_size == 0` or an
    /// index past the end of the dataset.
    pub fn new(dataset: Arc<Dataset>, indices: Vec<usize>, batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument {
                what: "batch_size",
                reason: "must be at least 1".into(),
            });
        }
        if let Some(&index) = indices.iter().find(|&&i| i >= dataset.len()) {
            return Err(Error::IndexOutOfRange {
                index,
                len: dataset.len(),
                name: dataset.name().to_string(),
            });
        }
        Ok(Self {
            dataset,
            indices: indices.into(),
            batch_size,
            prefetch: DEFAULT_PREFETCH,
            drop_last: false,
        })
    }

    /// How many batches the background thread may prepare ahead (0: it hands each batch
    /// over only when asked, with no overlap).
    pub fn with_prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches;
        self
    }

    /// Skip the last batch when it is short (default `false`).
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Batches per pass.
    pub fn num_batches(&self) -> usize {
        if self.drop_last {
            self.indices.len() / self.batch_size
        } else {
            self.indices.len().div_ceil(self.batch_size)
        }
    }

    /// Starts a pass: a background thread gathers the batches in order.
    pub fn iter(&self) -> Batches {
        let count = self.num_batches();
        let (tx, rx) = sync_channel(self.prefetch);
        let me = self.clone();
        let worker = std::thread::Builder::new()
            .name("phalanx-data-prefetch".into())
            .spawn(move || {
                for b in 0..count {
                    // The receiver is gone when the consumer stopped early: stop too.
                    if tx.send(me.gather(b)).is_err() {
                        return;
                    }
                }
            });
        let source = match worker {
            Ok(handle) => Source::Prefetch {
                rx: Some(rx),
                worker: Some(handle),
            },
            // Out of threads: still correct, only without the overlap.
            Err(_) => Source::Inline(self.clone()),
        };
        Batches {
            source,
            next: 0,
            count,
        }
    }

    /// Batch number `b` of the pass (the indices were checked in `new`).
    fn gather(&self, b: usize) -> Batch {
        let start = b * self.batch_size;
        let chunk = &self.indices[start..(start + self.batch_size).min(self.indices.len())];
        let mut features = Vec::with_capacity(chunk.len() * self.dataset.dim());
        let mut labels = Vec::with_capacity(chunk.len());
        for &i in chunk {
            features.extend_from_slice(self.dataset.row(i));
            labels.push(self.dataset.labels()[i]);
        }
        Batch { features, labels }
    }
}

impl IntoIterator for &DataLoader {
    type Item = Batch;
    type IntoIter = Batches;

    fn into_iter(self) -> Batches {
        self.iter()
    }
}

/// One pass of a [`DataLoader`]; dropping it early stops and joins the prefetch thread.
#[derive(Debug)]
pub struct Batches {
    source: Source,
    next: usize,
    count: usize,
}

#[derive(Debug)]
enum Source {
    Prefetch {
        rx: Option<Receiver<Batch>>,
        worker: Option<JoinHandle<()>>,
    },
    Inline(DataLoader),
}

impl Iterator for Batches {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.next >= self.count {
            return None;
        }
        let batch = match &self.source {
            Source::Prefetch { rx, .. } => rx.as_ref()?.recv().ok()?,
            Source::Inline(loader) => loader.gather(self.next),
        };
        self.next += 1;
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Batches {}

impl Drop for Batches {
    fn drop(&mut self) {
        if let Source::Prefetch { rx, worker } = &mut self.source {
            // Drop the receiver first, so a worker blocked in `send` wakes up and exits.
            drop(rx.take());
            if let Some(worker) = worker.take() {
                let _ = worker.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Arc<Dataset> {
        let features = (0..n * 2).map(|v| v as f32).collect();
        let labels = (0..n as i64).map(|i| i % 3).collect();
        Arc::new(Dataset::new("t", features, labels, 2, 3).unwrap())
    }

    #[test]
    fn batches_follow_the_indices() {
        let l = DataLoader::new(data(10), vec![9, 0, 4, 5, 1], 2).unwrap();
        let got: Vec<Batch> = l.iter().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].features, [18.0, 19.0, 0.0, 1.0]);
        assert_eq!(got[0].labels, [0, 0]);
        assert_eq!(got[2].labels, [1]);
        let dropped = l.clone().with_drop_last(true);
        assert_eq!(dropped.iter().count(), 2);
        assert_eq!(dropped.num_batches(), 2);
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(DataLoader::new(data(3), vec![0], 0).is_err());
        assert!(matches!(
            DataLoader::new(data(3), vec![0, 3], 1),
            Err(Error::IndexOutOfRange { index: 3, .. })
        ));
    }

    #[test]
    fn stopping_early_joins_the_worker() {
        let (tx, rx) = std::sync::mpsc::channel();
        let l = DataLoader::new(data(1000), (0..1000).collect(), 1)
            .unwrap()
            .with_prefetch(0);
        std::thread::spawn(move || {
            let mut it = l.iter();
            assert_eq!(it.len(), 1000);
            it.next();
            drop(it); // must not hang on the blocked worker
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("dropping a pass must stop its prefetch thread");
    }

    #[test]
    fn empty_indices_give_no_batches() {
        let l = DataLoader::new(data(3), vec![], 4).unwrap();
        assert_eq!(l.iter().count(), 0);
    }
}
