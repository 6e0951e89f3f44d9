//! [`DiLoCo`]: training across slow links. Islands of ranks train apart for `sync_every`
//! steps, each with its own data-parallel engine and inner optimizer, then meet in an outer
//! sync: torchft's `DiLoCo` and `LocalSGD` (arXiv 2311.08105, 2412.01152) for Burn models.
//!
//! Note [Outer sync]
//! The world is a mesh `("island", I), ("dp", N)` (Note [Mesh layout] in phalanx-pg): the ranks
//! of an island are consecutive, so an island is a host (or a few), its `"dp"` group runs the
//! inner engine over shared memory, and only the `"island"` groups (rank `j` of every island)
//! cross the slow links. Every island holds the global parameters `θ` and the outer optimizer's
//! momentum, split over its `N` ranks: rank `j` holds chunk `j` of the model's float tensors
//! laid end to end. Every `sync_every` inner steps, each rank `j`:
//! 1. takes its chunk of the pseudo-gradient `Δ = θ - local` (the inner engine keeps its
//!    island's ranks equal, so every rank of an island has the same local parameters, and the
//!    chunks need no exchange inside the island);
//! 2. averages it over its `"island"` group, in the outer dtype ([`OuterDType`], Note [Outer
//!    dtype error]): the one collective on the slow links, `1/N` of the model per rank;
//! 3. steps its chunk of `θ` with the outer optimizer: SGD with Nesterov momentum (DiLoCo,
//!    `lr` 0.7 and momentum 0.9 as in the paper), or `θ -= Δ` (local SGD, which is the same as
//!    averaging the islands' parameters);
//! 4. all-gathers `θ` over its `"dp"` group (shared memory) and sets it into the engine.
//!
//! Buffers (BatchNorm's running statistics) are averaged, never stepped by the outer optimizer;
//! the inner optimizer's state stays with its island, as in DiLoCo. The result is bitwise the
//! same on every rank of every island: each reduction folds in one order, and every rank
//! decodes the same bytes. Before the first step, [`DiLoCo::start`] gives every island island
//! 0's parameters, so the islands start equal whatever each built (sent across only where a
//! fingerprint of the chunks differs: islands built from one seed send 16 bytes).
//!
//! ```
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::optim::{GradientsParams, Optimizer, SgdConfig};
//! use burn::tensor::{Device, Tensor};
//! use phalanx_ddp::outer::{DiLoCo, OuterOptions};
//! use phalanx_ddp::{DataParallel, DdpOptions, DistributedDataParallel, StepKind};
//!
//! #[derive(Module, Debug)]
//! struct Net { fc: Linear }
//!
//! let digests = phalanx_testing::spawn_ranks(4, |pg| {
//!     let device = Device::flex().autodiff();
//!     // 2 islands of 2 ranks; an outer sync every 3 inner steps.
//!     let options = OuterOptions::diloco(3).with_island_size(Some(2));
//!     let mut diloco = DiLoCo::new(&pg, options).unwrap();
//!     let net = Net { fc: LinearConfig::new(4, 2).init(&device) };
//!     let island = diloco.island().clone();
//!     let mut ddp = DistributedDataParallel::new(net, island, DdpOptions::default()).unwrap();
//!     diloco.start(&mut ddp).unwrap();
//!     let mut optim = SgdConfig::new().init();
//!     for _ in 0..6 {
//!         // Each rank's own data: the islands drift apart between syncs.
//!         let x = Tensor::<2>::ones([8, 4], &device) * (pg.rank() as f32 + 1.0);
//!         let grads = ddp.unshard().unwrap().fc.forward(x).powf_scalar(2.0).mean().backward();
//!         ddp.step(grads, StepKind::Fused, |m, g| optim.step(0.01, m, g)).unwrap();
//!         diloco.step(&mut ddp).unwrap();
//!     }
//!     assert_eq!(diloco.stats().syncs, 2);
//!     format!("{:?}", ddp.full_params().unwrap())
//! });
//! // After the last sync every rank of every island holds the same parameters.
//! assert!(digests.iter().all(|d| *d == digests[0]));
//! ```

mod codec;
mod exchange;

pub use codec::{OuterDType, FP4_BLOCK, INT8_BLOCK};

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::Module;
use phalanx_pg::{Mesh, ProcessGroup};

use crate::adapter::StateKind;
use crate::{DataParallel, Error, Result};

/// The outer optimizer (`--outer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterMode {
    /// Pseudo-gradients stepped by SGD with Nesterov momentum (DiLoCo).
    DiLoCo,
    /// The islands' parameters averaged (local SGD): DiLoCo with `lr` 1 and no momentum.
    LocalSgd,
}

impl OuterMode {
    /// Every mode, as `--outer` spells it.
    pub const ALL: [OuterMode; 2] = [OuterMode::DiLoCo, OuterMode::LocalSgd];

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            OuterMode::DiLoCo => "diloco",
            OuterMode::LocalSgd => "local-sgd",
        }
    }
}

impl fmt::Display for OuterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OuterMode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "streaming-diloco" => Err("--outer streaming-diloco (fragments synced in turn, \
                 overlapped with the inner steps) is not built yet: use diloco or local-sgd"
                .into()),
            _ => Self::ALL
                .into_iter()
                .find(|m| m.name() == s)
                .ok_or_else(|| format!("unknown outer optimizer `{s}`: use diloco or local-sgd")),
        }
    }
}

/// How the islands sync: the outer optimizer, how often, in which dtype, and the islands' size.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterOptions {
    /// The outer optimizer.
    pub mode: OuterMode,
    /// Inner steps between outer syncs (DiLoCo's `H`, torchft's `sync_every`).
    pub sync_every: u64,
    /// The outer learning rate (DiLoCo only).
    pub lr: f32,
    /// The outer Nesterov momentum (DiLoCo only).
    pub momentum: f32,
    /// The pseudo-gradients' dtype between islands.
    pub dtype: OuterDType,
    /// Ranks per island; `None`: the ranks of one host (the group's local world size).
    pub island_size: Option<usize>,
}

impl OuterOptions {
    /// DiLoCo with the paper's outer optimizer: Nesterov SGD, `lr` 0.7, momentum 0.9.
    pub fn diloco(sync_every: u64) -> Self {
        OuterOptions {
            mode: OuterMode::DiLoCo,
            sync_every,
            lr: 0.7,
            momentum: 0.9,
            dtype: OuterDType::F32,
            island_size: None,
        }
    }

    /// Local SGD: the islands' parameters averaged every `sync_every` steps.
    pub fn local_sgd(sync_every: u64) -> Self {
        OuterOptions {
            mode: OuterMode::LocalSgd,
            lr: 1.0,
            momentum: 0.0,
            ..Self::diloco(sync_every)
        }
    }

    /// With another outer learning rate and momentum.
    pub fn with_outer_optimizer(mut self, lr: f32, momentum: f32) -> Self {
        (self.lr, self.momentum) = (lr, momentum);
        self
    }

    /// With another dtype between islands.
    pub fn with_dtype(mut self, dtype: OuterDType) -> Self {
        self.dtype = dtype;
        self
    }

    /// With another island size (`None`: the ranks of one host).
    pub fn with_island_size(mut self, size: Option<usize>) -> Self {
        self.island_size = size;
        self
    }

    /// Whether these options can work in any group: `sync_every` at least 1, the outer
    /// optimizer's numbers in range.
    pub fn check_alone(&self) -> Result<()> {
        let reason = |reason: String| Err(Error::Outer { reason });
        if self.sync_every == 0 {
            return reason(
                "sync_every (--sync-every) is 0: the islands would never meet; give the inner \
                 steps between outer syncs, at least 1 (DiLoCo's paper uses 500, torchft's \
                 examples 20 to 100)"
                    .into(),
            );
        }
        if self.mode == OuterMode::DiLoCo {
            if !(self.lr.is_finite() && self.lr > 0.0) {
                return reason(format!(
                    "the outer learning rate (--outer-lr) is {}: it must be a positive number \
                     (DiLoCo's paper uses 0.7)",
                    self.lr
                ));
            }
            if !(0.0..1.0).contains(&self.momentum) {
                return reason(format!(
                    "the outer momentum (--outer-momentum) is {}: it must be at least 0 and \
                     below 1 (DiLoCo's paper uses 0.9)",
                    self.momentum
                ));
            }
        }
        Ok(())
    }

    /// The island size these options give in `pg`, or why they cannot work there.
    pub fn check(&self, pg: &ProcessGroup) -> Result<usize> {
        self.check_alone()?;
        let reason = |reason: String| Error::Outer { reason };
        let world = pg.world_size();
        let size = self.island_size.unwrap_or(pg.local_world_size());
        if size == 0 || !world.is_multiple_of(size) {
            let divisors: Vec<String> = (1..=world)
                .filter(|d| world.is_multiple_of(*d))
                .map(|d| d.to_string())
                .collect();
            return Err(reason(format!(
                "an island of {size} ranks{} does not divide the world's {world} ranks into \
                 islands of equal size: use --island-size {}",
                match self.island_size {
                    None => " (the ranks of one host, the default)",
                    Some(_) => "",
                },
                divisors.join(", ")
            )));
        }
        if self.dtype != OuterDType::F32 && pg.backend() != "native" && world > size {
            return Err(reason(format!(
                "--outer-dtype {} sends its blocks with all_to_all, which the {} backend does \
                 not have: use --outer-dtype f32 (an all-reduce) or the native backend",
                self.dtype,
                pg.backend()
            )));
        }
        Ok(size)
    }
}

/// What the outer syncs cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OuterStats {
    /// Outer syncs done.
    pub syncs: u64,
    /// Wall time inside them.
    pub wait: Duration,
    /// Bytes this rank sent across islands (the encoded pseudo-gradient's share of the ring
    /// or of the all-to-all and all-gather, by the algorithm's count, not the wire's).
    pub bytes_across: u64,
}

/// The outer optimizer across islands (Note [Outer sync]): create it on the whole group,
/// build the inner engine on [`island`](Self::island), call [`start`](Self::start) once and
/// [`step`](Self::step) after every inner step.
pub struct DiLoCo {
    options: OuterOptions,
    mesh: Mesh,
    /// Each float tensor's length, in canonical order.
    lens: Vec<usize>,
    /// This rank's chunk of the tensors laid end to end, and each tensor's part of it (its
    /// range in the chunk and whether the outer optimizer steps it).
    chunk: Range<usize>,
    parts: Vec<(Range<usize>, bool)>,
    /// The chunk of the global parameters and of the outer momentum.
    global: Vec<f32>,
    momentum: Vec<f32>,
    since_sync: u64,
    stats: OuterStats,
}

impl DiLoCo {
    /// Lays `world` out in islands as `options` says (a collective of `world`: the mesh's
    /// groups are built).
    pub fn new(world: &ProcessGroup, options: OuterOptions) -> Result<Self> {
        let size = options.check(world)?;
        let dims = [("island", world.world_size() / size), ("dp", size)];
        let mesh = Mesh::new(world, &dims).map_err(|source| Error::Setup {
            op: "the outer sync's mesh of islands",
            source,
        })?;
        Ok(DiLoCo {
            options,
            mesh,
            lens: Vec::new(),
            chunk: 0..0,
            parts: Vec::new(),
            global: Vec::new(),
            momentum: Vec::new(),
            since_sync: 0,
            stats: OuterStats::default(),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &OuterOptions {
        &self.options
    }

    /// This rank's island: the group the inner engine runs on.
    pub fn island(&self) -> &Arc<ProcessGroup> {
        self.mesh.group("dp").expect("the mesh has a dp dimension")
    }

    /// The ranks that hold the same chunk in every island: the group across the slow links.
    pub fn across(&self) -> &Arc<ProcessGroup> {
        self.mesh
            .group("island")
            .expect("the mesh has an island dimension")
    }

    /// This rank's island's index, and how many islands there are.
    pub fn island_index(&self) -> (usize, usize) {
        let index = self.mesh.coordinate("island").expect("an island dimension");
        (
            index,
            self.mesh.size("island").expect("an island dimension"),
        )
    }

    /// Inner steps since the last outer sync.
    pub fn since_sync(&self) -> u64 {
        self.since_sync
    }

    /// What the syncs cost so far.
    pub fn stats(&self) -> OuterStats {
        self.stats
    }

    /// Gives every island island 0's parameters and keeps them as the global ones: call once,
    /// before the first inner step (a collective of the world).
    pub fn start<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<()> {
        let mut values = engine.full_params()?;
        self.lens = values.iter().map(Vec::len).collect();
        let trainable: Vec<bool> = engine
            .state_infos()
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.kind == StateKind::Trainable)
            .collect();
        debug_assert_eq!(trainable.len(), self.lens.len());
        let total: usize = self.lens.iter().sum();
        let (n, j) = (self.island().world_size(), self.island().rank());
        let per = total.div_ceil(n);
        self.chunk = (j * per).min(total)..((j + 1) * per).min(total);
        self.parts.clear();
        let mut at = 0;
        for (len, trainable) in self.lens.iter().zip(trainable) {
            let (lo, hi) = (at.max(self.chunk.start), (at + len).min(self.chunk.end));
            if lo < hi {
                self.parts
                    .push((lo - self.chunk.start..hi - self.chunk.start, trainable));
            }
            at += len;
        }
        self.global = gather_range(&values, self.chunk.clone());
        // Islands that built the same model (the same seed) need not send it across the slow
        // links: a fingerprint of each chunk first, the chunk itself only where they differ.
        let across = self.across().clone();
        let print = fingerprint(&self.global);
        let mut prints = [print, print.wrapping_neg()];
        across
            .allreduce(&mut prints, phalanx_core::ReduceOp::Max)
            .map_err(|source| outer_err("the islands' first parameters compared", source))?;
        if prints != [print, print.wrapping_neg()] {
            across
                .broadcast(&mut self.global, 0)
                .map_err(|source| outer_err("the first global parameters from island 0", source))?;
        }
        self.momentum = vec![0.0; self.global.len()];
        self.since_sync = 0;
        self.publish(engine, &mut values)
    }

    /// Counts an inner step; every `sync_every`-th one is followed by an outer sync (a
    /// collective of the world then). Returns whether it synced.
    pub fn step<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<bool> {
        self.since_sync += 1;
        if self.since_sync < self.options.sync_every {
            return Ok(false);
        }
        self.sync(engine)?;
        Ok(true)
    }

    /// An outer sync now (Note [Outer sync]), whatever the count: at the end of a run, so that
    /// every island ends with the global parameters. A collective of the world.
    pub fn sync<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<()> {
        assert!(
            !self.lens.is_empty(),
            "DiLoCo::start runs before the first sync"
        );
        let started = Instant::now();
        let mut values = engine.full_params()?;
        let local = gather_range(&values, self.chunk.clone());
        let mut delta: Vec<f32> = self.global.iter().zip(&local).map(|(g, l)| g - l).collect();
        drop(local);
        let across = self.across().clone();
        exchange::mean_across(&across, &mut delta, self.options.dtype)
            .map_err(|source| outer_err("the pseudo-gradients' mean across islands", source))?;
        let (lr, mu) = (self.options.lr, self.options.momentum);
        for (range, stepped) in &self.parts {
            for i in range.clone() {
                let d = delta[i];
                if *stepped && self.options.mode == OuterMode::DiLoCo {
                    // torch.optim.SGD(lr, momentum, nesterov=True): b = mu b + d, then
                    // d + mu b.
                    let b = mu * self.momentum[i] + d;
                    self.momentum[i] = b;
                    self.global[i] -= lr * (d + mu * b);
                } else {
                    self.global[i] -= d;
                }
            }
        }
        self.stats.bytes_across +=
            sent_across(across.world_size(), delta.len(), self.options.dtype);
        self.publish(engine, &mut values)?;
        self.since_sync = 0;
        self.stats.syncs += 1;
        self.stats.wait += started.elapsed();
        Ok(())
    }

    /// The global parameters, gathered over the island (shared memory), set into the engine.
    fn publish<M: Module, E: DataParallel<M>>(
        &self,
        engine: &mut E,
        values: &mut [Vec<f32>],
    ) -> Result<()> {
        let island = self.island();
        let per = self
            .lens
            .iter()
            .sum::<usize>()
            .div_ceil(island.world_size());
        let mut send = self.global.clone();
        send.resize(per, 0.0);
        let mut all = vec![0.0f32; per * island.world_size()];
        island
            .allgather(&send, &mut all)
            .map_err(|source| outer_err("the global parameters over the island", source))?;
        let mut at = 0;
        for tensor in values.iter_mut() {
            let len = tensor.len();
            tensor.copy_from_slice(&all[at..at + len]);
            at += len;
        }
        engine.set_full_params(values)
    }
}

impl fmt::Debug for DiLoCo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiLoCo")
            .field("options", &self.options)
            .field("island", &self.island_index())
            .field("chunk", &self.chunk)
            .field("stats", &self.stats)
            .finish()
    }
}

/// FNV-1a of `values`' bits: equal on two islands when their chunks are (a difference
/// escapes it with probability about 2^-64), as a value whose maximum and whose negation's
/// maximum over a group are both its own only when every rank has the same.
fn fingerprint(values: &[f32]) -> i64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    // Away from i64::MIN, whose negation is itself.
    (h >> 1) as i64
}

/// Elements `range` of `tensors` laid end to end.
fn gather_range(tensors: &[Vec<f32>], range: Range<usize>) -> Vec<f32> {
    let mut out = Vec::with_capacity(range.len());
    let mut at = 0;
    for t in tensors {
        let (lo, hi) = (range.start.max(at), range.end.min(at + t.len()));
        if lo < hi {
            out.extend_from_slice(&t[lo - at..hi - at]);
        }
        at += t.len();
    }
    out
}

/// Bytes a rank sends to take the mean of `len` values over `n` ranks in `dtype`
/// ([`exchange::mean_across`]'s algorithms: `2 (n - 1) / n` of the encoded values).
fn sent_across(n: usize, len: usize, dtype: OuterDType) -> u64 {
    if n <= 1 {
        return 0;
    }
    let encoded = match dtype {
        OuterDType::F32 => dtype.encoded_len(len),
        _ => n * dtype.encoded_len(len.div_ceil(n)),
    };
    (2 * (n - 1) * encoded / n) as u64
}

fn outer_err(op: &'static str, source: phalanx_pg::Error) -> Error {
    Error::OuterSync { op, source }
}
