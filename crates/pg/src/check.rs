//! The argument checks of the collectives and subgroups: buffer lengths, root and peer ranks,
//! split sizes, dtypes and ops, subgroup members, and what a backend offers. Pure functions of the call's arguments and of
//! [`Caller`] (the calling rank, its group's size and backend), so they run before anything is
//! sent, on every rank alike, and are tested without a group.
//!
//! A refused call changes nothing and fails only the caller: an argument error is an
//! [`Error::Collective`] whose `op` is `argument check` (the subgroup function, for subgroups);
//! a collective the backend does not run is an [`Error::Backend`] naming it. The group stays
//! usable.

use phalanx_core::{DType, Element, ReduceOp};

use crate::Error;

/// `Result` of a check.
type Checked = crate::Result<()>;

/// Who calls: this rank, the size of its group and the group's backend (`native`, `mpi`,
/// `nccl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) backend: &'static str,
}

impl Caller {
    /// A refused argument: `cause` says which and why.
    pub(crate) fn usage(&self, cause: String) -> Error {
        Error::Collective {
            rank: self.rank,
            op: "argument check".into(),
            cause,
        }
    }

    /// `r` is a rank of the group (`what`: `broadcast root`, `send peer`, …).
    pub(crate) fn rank(&self, r: usize, what: &str) -> Checked {
        if r < self.world_size {
            Ok(())
        } else {
            Err(self.usage(format!(
                "{what} {r} is not below world_size {}",
                self.world_size
            )))
        }
    }

    /// A point-to-point peer: another rank of the group.
    pub(crate) fn peer(&self, peer: usize, what: &str) -> Checked {
        self.rank(peer, &format!("{what} peer"))?;
        if peer == self.rank {
            return Err(self.usage(format!(
                "{what} peer {peer} is this rank; point-to-point needs another rank"
            )));
        }
        Ok(())
    }

    /// A bitwise op needs an integer dtype, and a backend that has it.
    pub(crate) fn reduce_op<T: Element>(&self, what: &str, op: ReduceOp) -> Checked {
        if !op.is_bitwise() {
            return Ok(());
        }
        if !matches!(T::DTYPE, DType::I32 | DType::I64 | DType::U8) {
            return Err(self.usage(format!(
                "{what}: {op} is a bitwise op, defined on integer dtypes (i32, i64, u8), not {}",
                T::DTYPE
            )));
        }
        if self.backend == "nccl" {
            return Err(Error::Backend {
                backend: "nccl",
                reason: format!(
                    "rank {}: {what} with {op}: NCCL has no bitwise reductions",
                    self.rank
                ),
            });
        }
        Ok(())
    }

    /// PREMUL_SUM's scale: a float dtype and a finite factor.
    pub(crate) fn premul_sum<T: Element>(&self, what: &str, factor: f64) -> Checked {
        if !matches!(T::DTYPE, DType::F32 | DType::F64 | DType::BF16 | DType::F16) {
            return Err(self.usage(format!(
                "{what} with PREMUL_SUM: a scale before the sum, defined on float dtypes (f32, \
                 f64, bf16, f16), not {}",
                T::DTYPE
            )));
        }
        if !factor.is_finite() {
            return Err(self.usage(format!(
                "{what} with PREMUL_SUM: the factor {factor} is not a finite number"
            )));
        }
        Ok(())
    }

    /// Refuses `op` on a backend that does not run it, at the call, naming both.
    pub(crate) fn native_only(&self, op: &str) -> Checked {
        match self.backend {
            "native" => Ok(()),
            backend => Err(Error::Backend {
                backend,
                reason: format!(
                    "rank {}: {op} is not offered by the {backend} backend yet; the native \
                     backend runs it",
                    self.rank
                ),
            }),
        }
    }

    /// `batch_isend_irecv`: every backend but MPI, whose point-to-point runs one blocking call
    /// at a time.
    pub(crate) fn batch(&self) -> Checked {
        if self.backend != "mpi" {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "mpi",
            reason: format!(
                "rank {}: batch_isend_irecv is not offered by the MPI backend, whose \
                 point-to-point runs one blocking MPI call at a time; use send/recv, or the \
                 native backend",
                self.rank
            ),
        })
    }

    /// Whether this group runs collectives on GPU memory: the NCCL backend does.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn supports_device_buffers(&self) -> bool {
        self.backend == "nccl"
    }

    /// `op` takes GPU memory, which only the NCCL backend reduces in place.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn device_buffers(&self, op: &str) -> Checked {
        if self.supports_device_buffers() {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "nccl",
            reason: format!(
                "{op} takes GPU memory, which only the nccl backend reduces in place, and this \
                 process group does not run on it (use the host-slice collectives, or \
                 --backend nccl)"
            ),
        })
    }

    /// `allreduce_device`'s op: NCCL has no bitwise reductions.
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn device_reduce_op(&self, op: ReduceOp) -> Checked {
        if !op.is_bitwise() {
            return Ok(());
        }
        Err(Error::Backend {
            backend: "nccl",
            reason: format!("allreduce_device with {op}: NCCL has no bitwise reductions"),
        })
    }

    /// allgather: `recv` holds `world_size` blocks of `send`.
    pub(crate) fn allgather(&self, send: usize, recv: usize) -> Checked {
        if recv != send * self.world_size {
            return Err(self.usage(format!(
                "allgather: recv holds {recv} elements, expected send.len() × world_size = {}",
                send * self.world_size
            )));
        }
        Ok(())
    }

    /// reduce_scatter: `send` holds `world_size` blocks of `recv`.
    pub(crate) fn reduce_scatter(&self, send: usize, recv: usize) -> Checked {
        if send != recv * self.world_size {
            return Err(self.usage(format!(
                "reduce_scatter: send holds {send} elements, expected recv.len() × world_size = \
                 {}",
                recv * self.world_size
            )));
        }
        Ok(())
    }

    /// `op`'s `send` of `send` elements splits into `world_size` equal blocks.
    pub(crate) fn equal_blocks(&self, op: &str, send: usize) -> Checked {
        let n = self.world_size;
        if !send.is_multiple_of(n) {
            return Err(self.usage(format!(
                "{op}: send holds {send} elements, not a multiple of world_size {n}"
            )));
        }
        Ok(())
    }

    /// gather: the root's `recv` holds `world_size` blocks of `send` (other ranks' is unused).
    pub(crate) fn gather(&self, root: usize, send: usize, recv: usize) -> Checked {
        if self.rank == root && recv != send * self.world_size {
            return Err(self.usage(format!(
                "gather: the root's recv holds {recv} elements, expected send.len() × world_size \
                 = {}",
                send * self.world_size
            )));
        }
        Ok(())
    }

    /// scatter: the root's `send` holds `world_size` blocks of `recv` (other ranks' is unused).
    pub(crate) fn scatter(&self, root: usize, send: usize, recv: usize) -> Checked {
        if self.rank == root && send != recv * self.world_size {
            return Err(self.usage(format!(
                "scatter: the root's send holds {send} elements, expected recv.len() × world_size \
                 = {}",
                recv * self.world_size
            )));
        }
        Ok(())
    }

    /// all_to_all with equal blocks: `send` and `recv` hold the same multiple of `world_size`.
    pub(crate) fn all_to_all(&self, send: usize, recv: usize) -> Checked {
        let n = self.world_size;
        if send != recv || !send.is_multiple_of(n) {
            return Err(self.usage(format!(
                "all_to_all: send and recv must hold the same multiple of world_size {n} \
                 elements (they hold {send} and {recv})"
            )));
        }
        Ok(())
    }

    /// `splits` has one entry per rank and adds up to `len`.
    pub(crate) fn splits(&self, op: &str, what: &str, len: usize, splits: &[usize]) -> Checked {
        let n = self.world_size;
        if splits.len() != n {
            return Err(self.usage(format!(
                "{op}: {} {what} sizes given for world_size {n}",
                splits.len()
            )));
        }
        let total: usize = splits.iter().sum();
        if total != len {
            return Err(self.usage(format!(
                "{op}: the {what} sizes add up to {total} but the {what} buffer holds {len}"
            )));
        }
        Ok(())
    }

    /// all_to_all_single: this rank's block to itself is the same size in both splits (after
    /// [`splits`](Self::splits)).
    pub(crate) fn own_block(&self, send_splits: &[usize], recv_splits: &[usize]) -> Checked {
        let r = self.rank;
        if send_splits[r] != recv_splits[r] {
            return Err(self.usage(format!(
                "all_to_all: this rank's block to itself is {} elements in send_splits but {} \
                 in recv_splits",
                send_splits[r], recv_splits[r]
            )));
        }
        Ok(())
    }

    /// This rank's own block must hold `counts[rank]` elements (after
    /// [`splits`](Self::splits)).
    pub(crate) fn own_count(&self, op: &str, what: &str, len: usize, counts: &[usize]) -> Checked {
        let r = self.rank;
        if len != counts[r] {
            return Err(self.usage(format!(
                "{op}: {what} holds {len} elements but counts[{r}] is {}",
                counts[r]
            )));
        }
        Ok(())
    }

    /// `op`'s members of a subgroup: at least one, each a rank of the group, none twice.
    pub(crate) fn subgroup_ranks(&self, op: &str, ranks: &[usize]) -> Checked {
        let n = self.world_size;
        if ranks.is_empty() {
            return Err(self.subgroup(op, "a group needs at least one rank".into()));
        }
        if let Some(r) = ranks.iter().find(|&&r| r >= n) {
            return Err(self.subgroup(op, format!("rank {r} is not below world_size {n}")));
        }
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(self.subgroup(op, format!("rank {} is listed twice in {ranks:?}", w[0])));
        }
        Ok(())
    }

    /// new_subgroups: consecutive groups of `group_size` ranks tile the group.
    pub(crate) fn subgroup_size(&self, group_size: usize) -> Checked {
        let n = self.world_size;
        if group_size == 0 || !n.is_multiple_of(group_size) {
            return Err(self.subgroup(
                "new_subgroups",
                format!("group size {group_size} does not divide world_size {n}"),
            ));
        }
        Ok(())
    }

    /// A refused subgroup request: the error names the subgroup function as its `op`.
    fn subgroup(&self, op: &str, cause: String) -> Error {
        Error::Collective {
            rank: self.rank,
            op: op.to_string(),
            cause,
        }
    }

    /// scatter_object_list: the root has one object per rank.
    pub(crate) fn scatter_objects(&self, root: usize, objects: usize) -> Checked {
        let n = self.world_size;
        if self.rank == root && objects != n {
            return Err(self.usage(format!(
                "scatter_object_list: the root has {objects} objects for world_size {n}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of 4 on `backend`.
    fn on(backend: &'static str) -> Caller {
        Caller {
            rank: 1,
            world_size: 4,
            backend,
        }
    }

    fn native() -> Caller {
        on("native")
    }

    /// The cause of an argument error (and that it is one).
    #[track_caller]
    fn usage(r: Checked) -> String {
        match r {
            Err(Error::Collective { rank: 1, op, cause }) if op == "argument check" => cause,
            other => panic!("expected an argument error, got {other:?}"),
        }
    }

    /// The backend and reason of a refusal by backend.
    #[track_caller]
    fn refusal(r: Checked) -> (&'static str, String) {
        match r {
            Err(Error::Backend { backend, reason }) => (backend, reason),
            other => panic!("expected a backend refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_rank_at_or_past_world_size_is_refused() {
        assert!(native().rank(3, "broadcast root").is_ok());
        assert_eq!(
            usage(native().rank(4, "broadcast root")),
            "broadcast root 4 is not below world_size 4"
        );
        let e = native().rank(9, "reduce root").unwrap_err().to_string();
        assert_eq!(
            e,
            "rank 1: argument check failed: reduce root 9 is not below world_size 4"
        );
    }

    #[test]
    fn a_peer_out_of_range_or_this_rank_is_refused() {
        assert!(native().peer(0, "send").is_ok());
        assert_eq!(
            usage(native().peer(4, "send")),
            "send peer 4 is not below world_size 4"
        );
        assert_eq!(
            usage(native().peer(1, "irecv")),
            "irecv peer 1 is this rank; point-to-point needs another rank"
        );
    }

    #[test]
    fn a_bitwise_op_needs_an_integer_dtype_and_not_nccl() {
        assert!(native()
            .reduce_op::<f32>("allreduce", ReduceOp::Sum)
            .is_ok());
        assert!(native()
            .reduce_op::<i32>("allreduce", ReduceOp::BXor)
            .is_ok());
        assert_eq!(
            usage(native().reduce_op::<f32>("allreduce", ReduceOp::BAnd)),
            format!(
                "allreduce: {} is a bitwise op, defined on integer dtypes (i32, i64, u8), not {}",
                ReduceOp::BAnd,
                DType::F32
            )
        );
        let (backend, reason) = refusal(on("nccl").reduce_op::<u8>("reduce", ReduceOp::BOr));
        assert_eq!(backend, "nccl");
        assert!(reason.starts_with("rank 1: reduce with "), "{reason}");
        assert!(
            reason.ends_with("NCCL has no bitwise reductions"),
            "{reason}"
        );
        // NCCL runs the arithmetic ops.
        assert!(on("nccl")
            .reduce_op::<f32>("allreduce", ReduceOp::Max)
            .is_ok());
    }

    #[test]
    fn premul_sum_needs_a_float_dtype_and_a_finite_factor() {
        assert!(native().premul_sum::<f32>("allreduce", 0.25).is_ok());
        let cause = usage(native().premul_sum::<i64>("allreduce", 0.25));
        assert!(
            cause.starts_with("allreduce with PREMUL_SUM: a scale before the sum"),
            "{cause}"
        );
        assert_eq!(
            usage(native().premul_sum::<f64>("reduce_scatter", f64::NAN)),
            "reduce_scatter with PREMUL_SUM: the factor NaN is not a finite number"
        );
    }

    #[test]
    fn native_only_collectives_are_refused_elsewhere_naming_the_backend() {
        assert!(native().native_only("gather").is_ok());
        for backend in ["mpi", "nccl"] {
            let (named, reason) = refusal(on(backend).native_only("gather"));
            assert_eq!(named, backend);
            assert_eq!(
                reason,
                format!(
                    "rank 1: gather is not offered by the {backend} backend yet; the native \
                     backend runs it"
                )
            );
        }
    }

    #[test]
    fn batch_isend_irecv_is_refused_on_mpi_only() {
        assert!(native().batch().is_ok());
        assert!(on("nccl").batch().is_ok());
        let (backend, reason) = refusal(on("mpi").batch());
        assert_eq!(backend, "mpi");
        assert!(reason.starts_with("rank 1: batch_isend_irecv is not offered by the MPI backend"));
    }

    #[test]
    fn device_buffers_need_nccl_and_an_arithmetic_op() {
        assert!(on("nccl").device_buffers("allreduce_device").is_ok());
        assert!(!native().supports_device_buffers());
        let (backend, reason) = refusal(native().device_buffers("broadcast_device"));
        assert_eq!(backend, "nccl");
        assert!(
            reason.starts_with("broadcast_device takes GPU memory"),
            "{reason}"
        );
        assert!(on("nccl").device_reduce_op(ReduceOp::Avg).is_ok());
        let (_, reason) = refusal(on("nccl").device_reduce_op(ReduceOp::BXor));
        assert!(reason.starts_with("allreduce_device with "), "{reason}");
    }

    #[test]
    fn allgather_and_reduce_scatter_need_world_size_blocks() {
        assert!(native().allgather(3, 12).is_ok());
        assert_eq!(
            usage(native().allgather(3, 11)),
            "allgather: recv holds 11 elements, expected send.len() × world_size = 12"
        );
        assert!(native().reduce_scatter(12, 3).is_ok());
        assert_eq!(
            usage(native().reduce_scatter(13, 3)),
            "reduce_scatter: send holds 13 elements, expected recv.len() × world_size = 12"
        );
        assert!(native().equal_blocks("reduce_scatter", 8).is_ok());
        assert_eq!(
            usage(native().equal_blocks("all_to_all", 6)),
            "all_to_all: send holds 6 elements, not a multiple of world_size 4"
        );
    }

    #[test]
    fn gather_and_scatter_check_the_roots_buffer_only() {
        // Rank 1 is not the root: its recv (send) is not used.
        assert!(native().gather(0, 2, 0).is_ok());
        assert!(native().scatter(0, 0, 2).is_ok());
        assert!(native().gather(1, 2, 8).is_ok());
        assert_eq!(
            usage(native().gather(1, 2, 7)),
            "gather: the root's recv holds 7 elements, expected send.len() × world_size = 8"
        );
        assert_eq!(
            usage(native().scatter(1, 7, 2)),
            "scatter: the root's send holds 7 elements, expected recv.len() × world_size = 8"
        );
    }

    #[test]
    fn all_to_all_needs_equal_multiples() {
        assert!(native().all_to_all(8, 8).is_ok());
        let want = |s: usize, r: usize| {
            format!(
                "all_to_all: send and recv must hold the same multiple of world_size 4 elements \
                 (they hold {s} and {r})"
            )
        };
        assert_eq!(usage(native().all_to_all(8, 4)), want(8, 4));
        assert_eq!(usage(native().all_to_all(6, 6)), want(6, 6));
    }

    #[test]
    fn splits_need_one_size_per_rank_adding_up_to_the_buffer() {
        assert!(native()
            .splits("all_to_all", "send", 6, &[1, 2, 3, 0])
            .is_ok());
        assert_eq!(
            usage(native().splits("all_to_all", "send", 6, &[3, 3])),
            "all_to_all: 2 send sizes given for world_size 4"
        );
        assert_eq!(
            usage(native().splits("allgather_v", "recv", 5, &[1, 1, 1, 1])),
            "allgather_v: the recv sizes add up to 4 but the recv buffer holds 5"
        );
    }

    #[test]
    fn own_block_and_own_count_are_this_ranks_entry() {
        assert!(native().own_block(&[0, 2, 0, 0], &[1, 2, 1, 1]).is_ok());
        assert_eq!(
            usage(native().own_block(&[0, 2, 0, 0], &[0, 3, 0, 0])),
            "all_to_all: this rank's block to itself is 2 elements in send_splits but 3 in \
             recv_splits"
        );
        assert!(native()
            .own_count("allgather_v", "send", 2, &[1, 2, 3, 4])
            .is_ok());
        assert_eq!(
            usage(native().own_count("reduce_scatter_v", "recv", 5, &[1, 2, 3, 4])),
            "reduce_scatter_v: recv holds 5 elements but counts[1] is 2"
        );
    }

    #[test]
    fn subgroup_ranks_must_be_in_the_group_and_distinct() {
        assert!(native().subgroup_ranks("new_group", &[3, 0]).is_ok());
        let cause = |r: Checked| match r {
            Err(Error::Collective { rank: 1, op, cause }) if op == "new_group" => cause,
            other => panic!("expected a new_group error, got {other:?}"),
        };
        assert_eq!(
            cause(native().subgroup_ranks("new_group", &[])),
            "a group needs at least one rank"
        );
        assert_eq!(
            cause(native().subgroup_ranks("new_group", &[0, 4])),
            "rank 4 is not below world_size 4"
        );
        assert_eq!(
            cause(native().subgroup_ranks("new_group", &[2, 0, 2])),
            "rank 2 is listed twice in [2, 0, 2]"
        );
    }

    #[test]
    fn subgroup_size_must_divide_the_group() {
        assert!(native().subgroup_size(2).is_ok());
        for size in [0, 3] {
            let e = native().subgroup_size(size).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "rank 1: new_subgroups failed: group size {size} does not divide world_size 4"
                )
            );
        }
    }

    #[test]
    fn scatter_object_list_needs_one_object_per_rank_on_the_root() {
        assert!(native().scatter_objects(0, 0).is_ok());
        assert!(native().scatter_objects(1, 4).is_ok());
        assert_eq!(
            usage(native().scatter_objects(1, 3)),
            "scatter_object_list: the root has 3 objects for world_size 4"
        );
    }
}
