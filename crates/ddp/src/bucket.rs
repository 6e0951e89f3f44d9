//! Bucket assignment: which parameters' gradients travel together in one allreduce.
//!
//! Note [Bucket order]
//! PyTorch's reducer starts from buckets built in `model.parameters()` order and, after the first
//! iteration, rebuilds them once in the order gradients became ready, with the limits
//! `[1 MiB, 25 MiB]`: the first bucket launched is the small one, so communication starts as early
//! as possible. Backward produces gradients from the last layer to the first, so the ready order is
//! the reverse parameter order. Burn hands over all gradients at once after `backward`, so phalanx
//! uses that steady-state assignment from the first step: parameters in reverse order, greedily
//! grouped, first cap 1 MiB, then 25 MiB. Buckets are launched strictly in index order.

/// PyTorch's `kDefaultFirstBucketBytes`: the cap of the first bucket launched.
pub const DEFAULT_FIRST_BUCKET_BYTES: usize = 1024 * 1024;

/// PyTorch's `kDefaultBucketBytesCap` (`bucket_cap_mb = 25`): the cap of every later bucket.
pub const DEFAULT_BUCKET_BYTES_CAP: usize = 25 * 1024 * 1024;

/// Groups parameters into buckets, PyTorch's `compute_bucket_assignment_by_size` applied in
/// gradient-ready order (see Note [Bucket order] in this module).
///
/// `sizes_bytes[i]` is the gradient size of parameter `i` in model order. Parameters are taken
/// from the last to the first; a bucket closes as soon as its size reaches its cap (a soft cap: the
/// parameter that crosses it stays in the bucket). Bucket `k` uses `caps[k]`, and the last cap
/// repeats; an empty `caps` means one unlimited bucket. Returns the buckets in launch order, each
/// listing parameter indices in descending order; every parameter appears exactly once.
///
/// ```
/// use phalanx_ddp::bucket::compute_bucket_assignment_by_size;
/// // Four parameters of 600 KiB: the first bucket (cap 1 MiB) takes the last two.
/// let kib = 1024;
/// let buckets = compute_bucket_assignment_by_size(&[600 * kib; 4], &[1024 * kib, 25 * 1024 * kib]);
/// assert_eq!(buckets, vec![vec![3, 2], vec![1, 0]]);
/// ```
pub fn compute_bucket_assignment_by_size(sizes_bytes: &[usize], caps: &[usize]) -> Vec<Vec<usize>> {
    let mut buckets = Vec::new();
    let mut current = Vec::new();
    let mut current_bytes = 0usize;
    for i in (0..sizes_bytes.len()).rev() {
        current.push(i);
        current_bytes += sizes_bytes[i];
        let cap = caps
            .get(buckets.len())
            .or(caps.last())
            .copied()
            .unwrap_or(usize::MAX);
        if current_bytes >= cap {
            buckets.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
    }
    if !current.is_empty() {
        buckets.push(current);
    }
    buckets
}

/// [`compute_bucket_assignment_by_size`] with PyTorch's default caps, `bucket_cap_bytes` for every
/// bucket after the first (1 MiB) one.
pub fn default_bucket_assignment(
    sizes_bytes: &[usize],
    bucket_cap_bytes: usize,
) -> Vec<Vec<usize>> {
    compute_bucket_assignment_by_size(
        sizes_bytes,
        &[
            DEFAULT_FIRST_BUCKET_BYTES.min(bucket_cap_bytes),
            bucket_cap_bytes,
        ],
    )
}

/// Parameters whose gradient is at least this large travel alone, their gradient's own memory as
/// the bucket (Note [Gradient as bucket view]).
pub const DEFAULT_VIEW_MIN_BYTES: usize = 1024 * 1024;

// Note [Gradient as bucket view]
// A packed bucket costs two copies of every gradient per step: into the bucket, and out of it
// into the tensors the optimizer takes. For a large gradient both are avoidable: the adapter
// lends the gradient's own storage (Burn's `TensorData`, moved out of the tensor without a
// copy when nothing else holds it) as the bucket (`BucketBuffer::lent`), the allreduce
// averages it in place (`ProcessGroup::allreduce_async_buffer`), and the same storage goes
// back to Burn as the averaged gradient. Not a `Vec<f32>`: flex allocates with a wider
// alignment than `f32`'s, so turning its storage into a `Vec` copies. PyTorch's
// `gradient_as_bucket_view=True` saves the same copies the other way round (gradients are
// views into the bucket). A gradient of at least [`DEFAULT_VIEW_MIN_BYTES`] is large enough
// that an allreduce of its own costs no more than sharing one, so [`isolate_large`] gives it
// a bucket of its own; smaller ones are still packed. Measured on the big MLP (64-2048-2048-10,
// docs/performance.md): the two copies of the 16 MiB weight were 3.2 ms of a 46 ms step.

/// Moves every parameter of at least `min_bytes` out of its bucket into a bucket of its own
/// (Note [Gradient as bucket view]). The rest of a bucket stays in place, followed by its
/// large parameters in their order; an emptied bucket disappears.
///
/// ```
/// use phalanx_ddp::bucket::isolate_large;
/// let buckets = isolate_large(vec![vec![3, 2, 1], vec![0]], &[8, 8, 64, 4], 64);
/// assert_eq!(buckets, vec![vec![3, 1], vec![2], vec![0]]);
/// ```
pub fn isolate_large(
    assignment: Vec<Vec<usize>>,
    sizes_bytes: &[usize],
    min_bytes: usize,
) -> Vec<Vec<usize>> {
    let mut out = Vec::with_capacity(assignment.len());
    for bucket in assignment {
        let (large, small): (Vec<usize>, Vec<usize>) = bucket
            .into_iter()
            .partition(|&p| sizes_bytes[p] >= min_bytes);
        if !small.is_empty() {
            out.push(small);
        }
        out.extend(large.into_iter().map(|p| vec![p]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn empty_model_has_no_bucket() {
        assert!(compute_bucket_assignment_by_size(&[], &[MIB]).is_empty());
    }

    #[test]
    fn no_caps_means_one_bucket() {
        assert_eq!(
            compute_bucket_assignment_by_size(&[4, 4, 4], &[]),
            vec![vec![2, 1, 0]]
        );
    }

    #[test]
    fn big_mlp_matches_pytorch_rebuilt_buckets() {
        // 784-2048-2048-10 in f32, parameters in model order: w1, b1, w2, b2, w3, b3.
        let sizes = [
            784 * 2048 * 4,
            2048 * 4,
            2048 * 2048 * 4,
            2048 * 4,
            2048 * 10 * 4,
            10 * 4,
        ];
        let buckets = default_bucket_assignment(&sizes, DEFAULT_BUCKET_BYTES_CAP);
        // The 16 MiB w2 crosses the 1 MiB cap and stays in the first bucket (soft cap).
        assert_eq!(buckets, vec![vec![5, 4, 3, 2], vec![1, 0]]);
    }

    #[test]
    fn later_caps_apply_in_order_and_last_repeats() {
        let buckets = compute_bucket_assignment_by_size(&[1; 7], &[1, 2]);
        assert_eq!(buckets, vec![vec![6], vec![5, 4], vec![3, 2], vec![1, 0]]);
    }

    #[test]
    fn a_cap_is_reached_not_exceeded_before_closing() {
        // 3 + 3 = 6 < 7, + 3 = 9 >= 7 closes.
        let buckets = compute_bucket_assignment_by_size(&[3, 3, 3, 3], &[7]);
        assert_eq!(buckets, vec![vec![3, 2, 1], vec![0]]);
    }

    proptest! {
        #[test]
        fn buckets_cover_each_param_once_in_reverse_order(
            sizes in proptest::collection::vec(0usize..3 * MIB, 0..40),
            first in 1usize..4 * MIB,
            cap in 1usize..30 * MIB,
        ) {
            let caps = [first, cap];
            let buckets = compute_bucket_assignment_by_size(&sizes, &caps);
            // Flattened, the buckets list n-1, n-2, ..., 0: each parameter once, reverse order.
            let flat: Vec<usize> = buckets.iter().flatten().copied().collect();
            let expected: Vec<usize> = (0..sizes.len()).rev().collect();
            prop_assert_eq!(flat, expected);
            for (k, bucket) in buckets.iter().enumerate() {
                prop_assert!(!bucket.is_empty());
                let limit = caps[k.min(1)];
                let bytes: usize = bucket.iter().map(|&i| sizes[i]).sum();
                let last = sizes[*bucket.last().unwrap()];
                // Soft cap: without its last parameter, a bucket is under its cap.
                prop_assert!(bytes - last < limit);
                // Every bucket but the last closed because it reached its cap.
                if k + 1 < buckets.len() {
                    prop_assert!(bytes >= limit);
                }
            }
        }
    }
}
