//! [`UnitState`]: one fully sharded block's share of the engine (FSDP2's `FSDPParamGroup`):
//! its parameters' layout, the all-gather of them (prefetched for the next block), the
//! reduce-scatter of its gradients as soon as its backward is done, and what a `no_sync`
//! step accumulates.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use phalanx_core::ReduceOp;
use phalanx_pg::{ProcessGroup, Work};

use super::collectives::gather_unit;
use crate::adapter::burn::Shaped;
use crate::adapter::shard::ShardParams;
use crate::adapter::unit_op::{Pass, UnitComm};
use crate::hook::BucketBuffer;
use crate::layout::{Ownership, Unit};
use crate::Error;

/// The engine's shard, shared with its units (they read their pieces to gather them).
pub(crate) type SharedShard = Arc<Mutex<Option<ShardParams>>>;

/// What every unit of one engine shares: the order blocks ran their forward in (recorded by
/// the first step, then used to prefetch), and whether gradients are reduced this step.
#[derive(Debug, Default)]
pub(crate) struct Units {
    all: Mutex<Vec<Weak<UnitState>>>,
    /// Unit indices in the order of the first step's forwards.
    order: Mutex<Vec<usize>>,
    /// Whether the first step's order is complete (a unit ran twice, or a step ended).
    recorded: AtomicBool,
    /// FSDP2's `set_requires_gradient_sync`: false during `no_sync` micro-steps.
    sync: AtomicBool,
    /// FSDP2's `set_reshard_after_backward(false)`: a unit's gathered parameters stay until
    /// the step ends (Note [Microbatched units]).
    keep_gathered: AtomicBool,
}

impl Units {
    pub(crate) fn new() -> Arc<Units> {
        let units = Units::default();
        units.sync.store(true, Ordering::SeqCst);
        Arc::new(units)
    }

    pub(crate) fn register(&self, unit: &Arc<UnitState>) {
        self.all
            .lock()
            .expect("not poisoned")
            .push(Arc::downgrade(unit));
    }

    pub(crate) fn set_sync(&self, yes: bool) {
        self.sync.store(yes, Ordering::SeqCst);
    }

    pub(crate) fn sync(&self) -> bool {
        self.sync.load(Ordering::SeqCst)
    }

    pub(crate) fn set_keep_gathered(&self, yes: bool) {
        self.keep_gathered.store(yes, Ordering::SeqCst);
    }

    fn keeps_gathered(&self) -> bool {
        self.keep_gathered.load(Ordering::SeqCst)
    }

    /// A step is over: the first one's order is complete.
    pub(crate) fn end_step(&self) {
        self.recorded.store(true, Ordering::SeqCst);
    }

    /// Whether unit `index` ran last in the first step's forwards: its backward comes right
    /// after its forward, so freeing its parameters in between saves nothing and costs a
    /// gather and a recomputation.
    fn is_last(&self, index: usize) -> bool {
        self.recorded.load(Ordering::SeqCst)
            && self.order.lock().expect("not poisoned").last() == Some(&index)
    }

    /// Notes that unit `index` runs its forward, and names the unit to prefetch for `pass`:
    /// the next in forward order, or the previous one in backward.
    fn next_after(&self, index: usize, pass: Pass) -> Option<Arc<UnitState>> {
        let mut order = self.order.lock().expect("not poisoned");
        if !self.recorded.load(Ordering::SeqCst) {
            if pass == Pass::Forward && !order.contains(&index) {
                order.push(index);
            }
            return None;
        }
        let at = order.iter().position(|&u| u == index)?;
        let next = match pass {
            Pass::Forward => order.get(at + 1),
            Pass::Backward => at.checked_sub(1).and_then(|a| order.get(a)),
        }?;
        self.all.lock().expect("not poisoned").get(*next)?.upgrade()
    }
}

/// One fully sharded block.
#[derive(Debug)]
pub(crate) struct UnitState {
    pub(crate) index: usize,
    /// The shard group (Note [Shard layout]); the engine averages across replicas.
    pg: Arc<ProcessGroup>,
    ownership: Arc<Ownership>,
    pub(crate) unit: Unit,
    /// Each parameter's shape, in the unit's order (the block's visiting order).
    shapes: Vec<Vec<usize>>,
    /// Which of the block's float tensors, in visiting order, are these parameters.
    trainable: Vec<bool>,
    shard: SharedShard,
    piece_of: Arc<Vec<Option<usize>>>,
    reshard_after_forward: bool,
    seeds: AtomicU64,
    units: Arc<Units>,
    run: Mutex<Run>,
}

/// What one step leaves in a unit.
#[derive(Default)]
struct Run {
    /// The all-gather a neighbour started for this unit's next pass.
    prefetched: Option<Work<Vec<f32>>>,
    /// This step's reduce-scatter of its gradients (this rank's block of the averages), and
    /// which of its parameters some backward used.
    pending: Option<Work<Vec<f32>>>,
    used: Vec<bool>,
    /// Gradients of `no_sync` micro-steps, the unit's buffer of this rank's local sums.
    accumulated: Option<Vec<f32>>,
    /// The gathered parameters kept for the step's later passes (Note [Microbatched units]).
    gathered: Option<Vec<f32>>,
    failure: Option<String>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("prefetched", &self.prefetched.is_some())
            .field("pending", &self.pending.is_some())
            .field("gathered", &self.gathered.is_some())
            .field("failure", &self.failure)
            .finish()
    }
}

/// What the engine takes from a unit at the step.
pub(crate) struct UnitGradients {
    /// This rank's block of the averaged gradients (`None`: no backward ran this step).
    pub(crate) work: Option<Work<Vec<f32>>>,
    /// Per parameter of the unit: whether a backward used it.
    pub(crate) used: Vec<bool>,
}

impl UnitState {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        pg: Arc<ProcessGroup>,
        ownership: Arc<Ownership>,
        unit: Unit,
        shapes: Vec<Vec<usize>>,
        trainable: Vec<bool>,
        shard: SharedShard,
        piece_of: Arc<Vec<Option<usize>>>,
        reshard_after_forward: bool,
        units: Arc<Units>,
    ) -> Arc<UnitState> {
        let n = unit.params().len();
        let state = Arc::new(UnitState {
            index,
            pg,
            ownership,
            unit,
            shapes,
            trainable,
            shard,
            piece_of,
            reshard_after_forward,
            seeds: AtomicU64::new(0),
            units: units.clone(),
            run: Mutex::new(Run {
                used: vec![false; n],
                ..Run::default()
            }),
        });
        units.register(&state);
        state
    }

    fn run(&self) -> std::sync::MutexGuard<'_, Run> {
        self.run.lock().expect("not poisoned")
    }

    /// This rank's block of the unit: its pieces' current values.
    fn own_values(&self) -> Result<Vec<f32>, Error> {
        let guard = self.shard.lock().expect("not poisoned");
        let shard = guard
            .as_ref()
            .expect("the shard is present outside the step");
        let mut own = Vec::with_capacity(self.unit.block(self.pg.rank()).len());
        for slot in self.unit.slots(&self.ownership, self.pg.rank()) {
            let piece = self.piece_of[slot.param].expect("a slot of this rank is a piece");
            own.extend(shard.value(piece)?);
        }
        Ok(own)
    }

    /// Starts the all-gather of this unit's parameters (for a neighbour's prefetch).
    fn start_gather(&self) -> Result<Work<Vec<f32>>, Error> {
        Ok(gather_unit(&self.pg, &self.unit, self.own_values()?))
    }

    /// Starts this unit's all-gather ahead of its pass, unless one is on its way or the
    /// parameters are kept gathered.
    fn prefetch(&self) {
        let mut run = self.run();
        if run.prefetched.is_some() || run.gathered.is_some() {
            return;
        }
        match self.start_gather() {
            Ok(work) => run.prefetched = Some(work),
            Err(e) => run.failure = run.failure.take().or(Some(e.to_string())),
        }
    }

    /// Takes what this step's backward left: the reduce-scatter in flight and the used flags.
    pub(crate) fn take_gradients(&self) -> UnitGradients {
        let mut run = self.run();
        let n = run.used.len();
        UnitGradients {
            work: run.pending.take(),
            used: std::mem::replace(&mut run.used, vec![false; n]),
        }
    }

    /// Whether `no_sync` gradients wait for the next synchronising step.
    pub(crate) fn has_accumulated(&self) -> bool {
        self.run().accumulated.is_some()
    }

    /// The step is over: a prefetch nobody consumed, and parameters kept gathered, hold
    /// values from before the update.
    pub(crate) fn end_step(&self) {
        let mut run = self.run();
        drop(run.prefetched.take());
        drop(run.gathered.take());
    }

    /// Frees parameters kept gathered (after an evaluation, or when the parameters are set
    /// from outside the step): the next pass gathers them again.
    pub(crate) fn free_gathered(&self) {
        drop(self.run().gathered.take());
    }

    /// The step is about to take the unit's gradients: what backward passes accumulated
    /// without a reduce (every microbatch of a pipeline's step, Note [Microbatched units]; or
    /// `no_sync` micro-steps that no synchronising backward of this unit followed) starts its
    /// reduce-scatter now. The same on every rank of the group: each ran the same backwards.
    pub(crate) fn flush(&self) {
        let mut run = self.run();
        if run.pending.is_some() {
            return;
        }
        if let Some(buffer) = run.accumulated.take() {
            self.start_reduce(&mut run, buffer);
        }
    }

    /// Starts the reduce-scatter of the unit's whole gradient `buffer`.
    fn start_reduce(&self, run: &mut Run, buffer: Vec<f32>) {
        // Not in place: the unit's whole buffer is freed as soon as the collective is done,
        // and only this rank's block waits for the step (every block's whole gradients
        // waiting would be the model's gradients again).
        run.pending = Some(match self.pg.world_size() {
            1 => Work::ready(Ok(buffer)),
            _ => self
                .pg
                .reduce_scatter_v_async(buffer, self.unit.counts(), ReduceOp::Avg),
        });
    }

    /// A failure a pass recorded, once.
    pub(crate) fn take_failure(&self) -> Option<String> {
        self.run().failure.take()
    }

    /// The whole parameters of the unit from a gathered buffer, in the unit's order.
    fn whole(&self, buffer: &[f32]) -> Vec<Shaped> {
        let params = self.unit.params();
        let mut whole: Vec<Shaped> = self
            .shapes
            .iter()
            .map(|s| (vec![0.0; s.iter().product()], s.clone()))
            .collect();
        for slot in self.unit.all_slots(&self.ownership) {
            let local = params
                .iter()
                .position(|&p| p == slot.param)
                .expect("a slot of the unit is one of its parameters");
            whole[local].0[slot.in_param].copy_from_slice(&buffer[slot.in_unit]);
        }
        whole
    }

    /// The unit's parameters, whole, now (a collective: for a checkpoint or the final model).
    pub(crate) fn gather_now(&self) -> Result<Vec<Shaped>, Error> {
        let buffer = super::collectives::wait_gather(self.start_gather()?, self.index)?;
        Ok(self.whole(&buffer))
    }

    /// The rank's name for a failure.
    fn failed(&self, what: &str, e: impl std::fmt::Display) -> String {
        format!(
            "rank {}: FullyShard unit {}: {what}: {e}",
            self.pg.rank(),
            self.index
        )
    }
}

impl UnitComm for UnitState {
    fn gather(&self, pass: Pass) -> Vec<Shaped> {
        let keep = self.units.keeps_gathered();
        let prefetched = {
            let mut run = self.run();
            if let (true, Some(kept)) = (keep, &run.gathered) {
                return self.whole(kept);
            }
            run.prefetched.take()
        };
        let work = match prefetched {
            Some(work) => Ok(work),
            None => self.start_gather(),
        };
        // The neighbour's parameters travel while this block computes.
        if let Some(next) = self.units.next_after(self.index, pass) {
            next.prefetch();
        }
        let buffer = work.and_then(|w| super::collectives::wait_gather(w, self.index));
        match buffer {
            Ok(buffer) => {
                let whole = self.whole(&buffer);
                if keep {
                    self.run().gathered = Some(buffer);
                }
                whole
            }
            // A forward cannot return an error: the block runs on zeros, and the failure is the
            // step's (the group is broken, so its collectives fail too, naming the root cause;
            // under fault tolerance the ranks then re-form the group with the shards intact).
            Err(e) => {
                self.fail(self.failed("gathering its parameters", e));
                self.shapes
                    .iter()
                    .map(|s| (vec![0.0; s.iter().product()], s.clone()))
                    .collect()
            }
        }
    }

    fn reduce(&self, grads: Vec<Option<BucketBuffer>>) {
        let params = self.unit.params();
        let mut buffer = vec![0f32; self.unit.len()];
        for slot in self.unit.all_slots(&self.ownership) {
            let local = params
                .iter()
                .position(|&p| p == slot.param)
                .expect("a slot of the unit is one of its parameters");
            if let Some(g) = &grads[local] {
                buffer[slot.in_unit].copy_from_slice(&g[slot.in_param]);
            }
        }
        // Burn's gradients go back to it now; only the packed buffer travels.
        let used: Vec<bool> = grads.iter().map(Option::is_some).collect();
        drop(grads);
        let mut run = self.run();
        for (u, g) in run.used.iter_mut().zip(used) {
            *u |= g;
        }
        // The sum DDP's reducer forms: the accumulated gradients, then this step's added.
        if let Some(mut acc) = run.accumulated.take() {
            for (a, g) in acc.iter_mut().zip(&buffer) {
                *a += *g;
            }
            buffer = acc;
        }
        if !self.units.sync() {
            run.accumulated = Some(buffer);
            return;
        }
        if run.pending.is_some() {
            run.failure = Some(self.failed(
                "reduce",
                "its backward ran twice in one step (a block used twice per step is not \
                 supported under --sharding full)",
            ));
            return;
        }
        self.start_reduce(&mut run, buffer);
    }

    fn trainable(&self) -> &[bool] {
        &self.trainable
    }

    fn reshard_after_forward(&self) -> bool {
        self.reshard_after_forward && !self.units.is_last(self.index)
    }

    fn next_seed(&self) -> u64 {
        // The same on every rank, different per forward of each unit.
        let k = self.seeds.fetch_add(1, Ordering::SeqCst);
        0x9E37_79B9_7F4A_7C15u64
            .wrapping_mul(self.index as u64 + 1)
            .wrapping_add(k.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    fn fail(&self, reason: String) {
        let mut run = self.run();
        run.failure = run.failure.take().or(Some(reason));
    }
}
