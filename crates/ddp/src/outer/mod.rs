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
//! Note [Streaming fragments]
//! Streaming DiLoCo (arXiv 2501.18512; torchft's `DiLoCo` with several model fragments) cuts
//! the model into `F` fragments of nearly equal size, in tensor order (a fragment is a run of
//! layers), and syncs them in turn: fragment `k`'s sync ends at the inner steps
//! `(k + 1 + F i) H / F`, so each fragment meets the other islands once every `H` steps and
//! the slow link carries `1/F` of the model at a time (the peak bandwidth drops `F` times).
//! Each rank holds chunk `j` of every fragment's global parameters and momentum, and a
//! fragment's sync is the four steps above on that fragment alone. With `--fragment-delay T`
//! a sync starts `T` steps before it ends: its pseudo-gradient is taken then, and its mean
//! across islands runs on a thread of its own while the inner engine goes on (the `"island"`
//! group has its own connections, apart from the `"dp"` group's, so the two never mix);
//! when it ends, the fragment's new global parameters are set into the engine as
//! `global + α (local - global)` (torchft's `lerp`): with `α = 0` (the default) the `T`
//! steps of the island's own progress on that fragment are dropped and the islands are equal
//! on it again, with `α > 0` they keep a share of it and stay apart until the next sync. `T`
//! must be below `H / F`, so one sync at a time is under way. The values are bitwise those
//! of the same sync without overlap: the thread runs the same collective on the same values,
//! only at another time. At the end of a run, where [`DiLoCo::is_apart`], [`DiLoCo::sync`]
//! ends the sync under way and syncs every fragment that moved with `α = 0`, so every island
//! ends on the global parameters. One fragment with no delay is DiLoCo, step for step.
//!
//! Note [Islands that leave and join]
//! Under fault tolerance (`phalanx launch --fault-tolerance`) the group is formed again after
//! a failure, and a new mesh with it. What a rank's outer sync holds goes from the old
//! [`DiLoCo`] to the new one through [`OuterState`] ([`DiLoCo::into_state`], then
//! [`DiLoCo::heal`]); a replacement holds none. Chunk `j` of the global parameters and of the
//! momentum is the same on rank `j` of every island that made the same syncs, so healing is
//! HSDP's recovery across replicas: over each `"island"` group, the lowest island that made
//! the most syncs sends its chunk and counters to the islands behind it (nothing is sent when
//! none is behind). An island that took its inner state from another island (a *fresh*
//! island: every rank of it replaced, or left alone) then trains on from the global
//! parameters. A sync is committed only once its island gathered the result, so a group that
//! fails in a sync leaves it *owed*, with the outer state as before; [`DiLoCo::settle`] runs it
//! in the new group, where fresh islands send zeros and the mean counts only the islands that
//! trained. At a DiLoCo boundary an island healed from nothing is the undisturbed island bit
//! for bit; under streaming DiLoCo it loses its own progress on the fragments that were
//! moving.
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
mod fragment;
mod options;
mod state;

pub use codec::{OuterDType, FP4_BLOCK, INT8_BLOCK};
pub use options::{OuterMode, OuterOptions};
pub use state::{OuterSnapshot, OuterState, OuterStats};

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use phalanx_pg::{Mesh, ProcessGroup};

use crate::adapter::StateKind;
use crate::{DataParallel, Error, Result};
use fragment::Fragment;

/// The outer optimizer across islands (Note [Outer sync]): create it on the whole group,
/// build the inner engine on [`island`](Self::island), call [`start`](Self::start) once and
/// [`step`](Self::step) after every inner step.
pub struct DiLoCo {
    options: OuterOptions,
    mesh: Mesh,
    /// Each float tensor's length, in canonical order.
    lens: Vec<usize>,
    /// The model's fragments (one but under streaming DiLoCo), with this rank's outer state.
    fragments: Vec<Fragment>,
    /// The fragment whose sync is under way, started in an earlier step.
    pending: Option<Pending>,
    /// Inner steps since `start`.
    steps: u64,
    /// The inner step whose sync ended last (a sync due at `steps` and not ended is owed).
    synced_at: u64,
    /// Islands whose pseudo-gradients count in the next sync, where some islands are fresh
    /// after a regroup (Note [Islands that leave and join]); `None`: all of them.
    contributors: Option<usize>,
    stats: OuterStats,
}

/// A fragment's sync under way: its pseudo-gradient's mean across islands, still to be taken
/// here or being taken on a thread of its own (Note [Streaming fragments]).
struct Pending {
    fragment: usize,
    mean: Exchange,
    /// The pseudo-gradient sent, for a checkpoint taken while its mean is under way.
    sent: Vec<f32>,
}

enum Exchange {
    Here(Vec<f32>),
    Away(std::thread::JoinHandle<phalanx_pg::Result<Vec<f32>>>),
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
            fragments: Vec::new(),
            pending: None,
            steps: 0,
            synced_at: 0,
            contributors: None,
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

    /// Inner steps since [`start`](Self::start).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// What the syncs cost so far.
    pub fn stats(&self) -> OuterStats {
        self.stats
    }

    /// Gives every island island 0's parameters and keeps them as the global ones: call once,
    /// before the first inner step (a collective of the world).
    pub fn start<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<()> {
        let mut values = engine.full_params()?;
        self.layout(engine);
        debug_assert_eq!(values.iter().map(Vec::len).collect::<Vec<_>>(), self.lens);
        let mut firsts: Vec<Vec<f32>> = self
            .fragments
            .iter()
            .map(|f| gather_range(&values, f.chunk.clone()))
            .collect();
        // Islands that built the same model (the same seed) need not send it across the slow
        // links: a fingerprint of each chunk first, the chunks themselves only where they
        // differ.
        let across = self.across().clone();
        let print = fingerprint(firsts.iter().flatten());
        let mut prints = [print, print.wrapping_neg()];
        across
            .allreduce(&mut prints, phalanx_core::ReduceOp::Max)
            .map_err(|source| outer_err("the islands' first parameters compared", source))?;
        if prints != [print, print.wrapping_neg()] {
            for first in &mut firsts {
                across.broadcast(first, 0).map_err(|source| {
                    outer_err("the first global parameters from island 0", source)
                })?;
            }
        }
        for (fragment, first) in self.fragments.iter_mut().zip(firsts) {
            fragment.reset(first);
        }
        self.pending = None;
        (self.steps, self.synced_at) = (0, 0);
        let all: Vec<usize> = (0..self.fragments.len()).collect();
        self.publish(engine, &mut values, &all, 0.0)
    }

    /// What this rank holds of the outer sync, for the next attempt's [`heal`](Self::heal)
    /// once its group changed; `None` before [`start`](Self::start). A sync under way is
    /// dropped: it is owed, and runs again in the new group.
    pub fn into_state(mut self) -> Option<OuterState> {
        if let Some(Pending {
            mean: Exchange::Away(thread),
            ..
        }) = self.pending.take()
        {
            // Its group was aborted: it ends at once.
            let _ = thread.join();
        }
        let chunk_of = self.island().rank();
        (!self.fragments.is_empty()).then_some(OuterState {
            lens: self.lens,
            fragments: self.fragments,
            chunk_of,
            steps: self.steps,
            synced_at: self.synced_at,
            stats: self.stats,
            saved: None,
        })
    }

    /// What a checkpoint keeps of this rank's outer sync (no collective).
    pub fn snapshot(&self) -> OuterSnapshot {
        let pending = self.pending.as_ref().map(|p| {
            let sent = match &p.mean {
                Exchange::Here(delta) => delta.clone(),
                Exchange::Away(_) => p.sent.clone(),
            };
            (p.fragment, sent)
        });
        OuterSnapshot {
            steps: self.steps,
            synced_at: self.synced_at,
            syncs: self.stats.syncs,
            island: self.island_index().0,
            chunk_of: self.island().rank(),
            island_size: self.island().world_size(),
            global: self.fragments.iter().map(|f| f.global.clone()).collect(),
            momentum: self.fragments.iter().map(|f| f.snapshot().1).collect(),
            pending,
        }
    }

    /// Makes both groups of the mesh fail at once, so that no other island waits on this
    /// rank's in a sync until its timeout (the mesh has its own connections, apart from the
    /// world's). Call it when the world failed, before [`into_state`](Self::into_state).
    pub fn abort(&self, reason: &str) {
        self.island().abort(reason);
        self.across().abort(reason);
    }

    /// Starts a new group's attempt under fault tolerance (Note [Islands that leave and
    /// join]): `state` is what this rank held (`None`: a replacement, or the run's first
    /// attempt), `fresh` says that this rank's island took its inner state from another
    /// island, and `steps` is the inner step every rank starts from (the trainer's position,
    /// the same on every rank). Every island ends with the outer state of the island that synced last (the
    /// lowest such), sent over the `"island"` groups only to the islands behind it; a fresh
    /// island's parameters become the global ones. Where no rank holds any state, this is
    /// [`start`](Self::start). A collective of the world.
    pub fn heal<M: Module, E: DataParallel<M>>(
        &mut self,
        engine: &mut E,
        state: Option<OuterState>,
        fresh: bool,
        steps: u64,
    ) -> Result<()> {
        let j = self.island().rank();
        let state = state.filter(|s| s.chunk_of == j);
        let holds = state.is_some();
        let mut header = [holds as i64, 0, 0];
        let mut resumed_pending = None;
        if let Some(mut s) = state {
            if let Some(saved) = s.saved.take() {
                resumed_pending = saved.pending.clone();
                (s.lens, s.fragments) = self.lay_out_saved(engine, saved)?;
            }
            header[1] = s.stats.syncs as i64;
            (
                self.lens,
                self.fragments,
                self.steps,
                self.synced_at,
                self.stats,
            ) = (s.lens, s.fragments, s.steps, s.synced_at, s.stats);
        }
        let across = self.across().clone();
        let islands = across.world_size();
        let mut all = vec![0i64; 3 * islands];
        across
            .allgather(&header, &mut all)
            .map_err(|source| outer_err("the islands' outer state compared", source))?;
        let rows: Vec<&[i64]> = all.chunks(3).collect();
        let Some(newest) = rows.iter().filter(|r| r[0] == 1).map(|r| r[1]).max() else {
            return self.start(engine);
        };
        let source = rows
            .iter()
            .position(|r| r[0] == 1 && r[1] == newest)
            .expect("a holder of the newest state");
        let behind = rows.iter().any(|r| r[0] == 0 || r[1] != newest);
        let took = header[0] == 0 || header[1] != newest;
        // The counters always come from the source: a rank that failed between two syncs
        // counted other steps, and the sync it may owe is the source's.
        let mut counters = [self.synced_at, self.stats.syncs].map(|c| c as i64);
        let failed = |source| outer_err("the outer state from a peer island", source);
        across.broadcast(&mut counters, source).map_err(failed)?;
        if behind {
            // Into buffers of their own: a failure part-way leaves this rank's state as it
            // was, never half taken (a later heal would offer it as the newest).
            let (lens, mut fragments) = self.laid_out(engine);
            for (i, f) in fragments.iter_mut().enumerate() {
                let (mut global, mut momentum) = match took {
                    true => (vec![0.0; f.chunk.len()], vec![0.0; f.chunk.len()]),
                    false => self.fragments[i].snapshot(),
                };
                across.broadcast(&mut global, source).map_err(failed)?;
                across.broadcast(&mut momentum, source).map_err(failed)?;
                f.restore((global, momentum));
                f.dirty = true;
            }
            if took {
                (self.lens, self.fragments) = (lens, fragments);
            }
        }
        [self.synced_at, self.stats.syncs] = counters.map(|c| c as u64);
        self.steps = steps;
        // A fresh island trains on from the global parameters; the others keep their own
        // progress, and the next sync's mean counts only theirs.
        let mut flags = [(fresh || took) as i64];
        self.island()
            .allreduce(&mut flags, phalanx_core::ReduceOp::Max)
            .map_err(|source| outer_err("the island's fresh start agreed", source))?;
        let fresh = flags[0] == 1;
        if fresh {
            self.fragments.iter_mut().for_each(|f| f.dirty = true);
            let mut values = engine.full_params()?;
            let all: Vec<usize> = (0..self.fragments.len()).collect();
            self.publish(engine, &mut values, &all, 0.0)?;
        }
        if let Some((fragment, sent)) = resumed_pending {
            // A sync under way when the checkpoint was taken: its mean is taken when it ends,
            // from the same pseudo-gradient.
            self.pending = Some(Pending {
                fragment,
                mean: Exchange::Here(sent),
                sent: Vec::new(),
            });
        }
        let mut kept = [(!fresh) as i64];
        across
            .allreduce(&mut kept, phalanx_core::ReduceOp::Sum)
            .map_err(|source| outer_err("the islands that keep their progress", source))?;
        self.contributors = (kept[0] as usize != islands).then_some(kept[0].max(1) as usize);
        Ok(())
    }

    /// A checkpoint's chunks laid out on `engine`'s tensors, or why they do not fit.
    fn lay_out_saved<M: Module, E: DataParallel<M>>(
        &mut self,
        engine: &E,
        saved: OuterSnapshot,
    ) -> Result<(Vec<usize>, Vec<Fragment>)> {
        self.layout(engine);
        let fits = saved.island_size == self.island().world_size()
            && saved.global.len() == self.fragments.len()
            && self
                .fragments
                .iter()
                .zip(&saved.global)
                .zip(&saved.momentum)
                .all(|((f, g), m)| g.len() == f.chunk.len() && m.len() == f.chunk.len());
        if !fits {
            return Err(Error::Outer {
                reason: format!(
                    "the checkpoint's outer state was written by islands of {} ranks in {} \
                     fragments, this run has islands of {} in {}: resume with the same \
                     --island-size and --fragments (or without --outer, from island 0's model)",
                    saved.island_size,
                    saved.global.len(),
                    self.island().world_size(),
                    self.fragments.len()
                ),
            });
        }
        for ((f, g), m) in self
            .fragments
            .iter_mut()
            .zip(saved.global)
            .zip(saved.momentum)
        {
            f.restore((g, m));
            f.dirty = true;
        }
        Ok((
            std::mem::take(&mut self.lens),
            std::mem::take(&mut self.fragments),
        ))
    }

    /// Runs the sync due at this step if a failed group left it owed (its pseudo-gradient
    /// taken now). A collective of the world when one is owed.
    pub fn settle<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<bool> {
        // Fresh islands count as none only in the sync owed at the regroup: in later ones
        // their pseudo-gradients are their own training's.
        let contributors = self.contributors.take();
        let cadence = self.options.sync_every / self.fragments.len() as u64;
        if self.steps == 0 || !self.steps.is_multiple_of(cadence) || self.synced_at == self.steps {
            return Ok(false);
        }
        let fragment = self.due(self.steps);
        self.begin(engine, fragment, false)?;
        self.complete(engine, self.options.fragment_alpha, contributors)?;
        Ok(true)
    }

    /// The fragment whose sync ends at inner step `step` (a multiple of the cadence).
    fn due(&self, step: u64) -> usize {
        let count = self.fragments.len() as u64;
        let cadence = self.options.sync_every / count;
        ((step / cadence - 1) % count) as usize
    }

    /// The fragments' layout for this rank's island chunk, from the engine's float tensors,
    /// with no global parameters yet.
    fn layout<M: Module, E: DataParallel<M>>(&mut self, engine: &E) {
        (self.lens, self.fragments) = self.laid_out(engine);
    }

    /// [`layout`](Self::layout)'s tensor lengths and fragments, not kept.
    fn laid_out<M: Module, E: DataParallel<M>>(&self, engine: &E) -> (Vec<usize>, Vec<Fragment>) {
        let trainable: Vec<bool> = engine
            .state_infos()
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.kind == StateKind::Trainable)
            .collect();
        let lens: Vec<usize> = engine
            .state_infos()
            .iter()
            .filter(|s| s.kind.is_float())
            .map(|s| s.info.numel())
            .collect();
        let island = (self.island().world_size(), self.island().rank());
        let fragments = Fragment::layout(&lens, &trainable, self.options.fragments, island);
        (lens, fragments)
    }

    /// Counts an inner step and runs the outer syncs it is due (Note [Streaming fragments]):
    /// under DiLoCo and local SGD the whole model every `sync_every`-th step; under streaming
    /// DiLoCo the next fragment's sync ends every `sync_every / fragments` steps, having
    /// started `fragment_delay` steps before. A collective of the world when one is due.
    /// Returns whether a sync ended.
    pub fn step<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<bool> {
        assert!(
            !self.fragments.is_empty(),
            "DiLoCo::start runs before the first step"
        );
        self.steps += 1;
        self.fragments.iter_mut().for_each(|f| f.dirty = true);
        let count = self.fragments.len() as u64;
        let cadence = self.options.sync_every / count;
        let delay = self.options.fragment_delay;
        let ahead = self.steps + delay;
        if ahead.is_multiple_of(cadence) {
            let fragment = self.due(ahead);
            self.begin(engine, fragment, delay > 0)?;
        }
        if !self.steps.is_multiple_of(cadence) {
            return Ok(false);
        }
        if self.pending.is_none() {
            // Its start was lost with a failed group: the pseudo-gradient is taken now.
            self.begin(engine, self.due(self.steps), false)?;
        }
        self.complete(engine, self.options.fragment_alpha, None)?;
        Ok(true)
    }

    /// Whether the islands may be apart: an inner step ran since a fragment's last sync, a
    /// sync kept some of the islands' own progress, or a sync is under way. Where it is false
    /// every island holds the global parameters, and [`sync`](Self::sync) is not needed.
    pub fn is_apart(&self) -> bool {
        self.pending.is_some() || self.fragments.iter().any(|f| f.dirty)
    }

    /// At the end of a run: an outer sync if any island is apart ([`is_apart`](Self::is_apart)
    /// agreed over the islands, since after a regroup a fresh island can be apart while the
    /// others are not), so that every island ends on the global parameters. A collective of
    /// the world.
    pub fn end<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<()> {
        let mut apart = [self.is_apart() as i64];
        self.across()
            .allreduce(&mut apart, phalanx_core::ReduceOp::Max)
            .map_err(|source| outer_err("the islands' last sync agreed", source))?;
        if apart[0] == 1 {
            self.sync(engine)?;
        }
        Ok(())
    }

    /// Ends every island on the global parameters now, whatever the count: at the end of a
    /// run. The sync under way (if any) ends first; then every fragment that may be apart
    /// (an inner step moved it since its sync, or its sync kept some of the islands' progress)
    /// syncs, keeping none of it. A fragment that is not apart is left alone: a sync of it
    /// would add a momentum-only outer step. A collective of the world (the islands agree on
    /// which fragments are apart: each moves them in the same steps).
    pub fn sync<M: Module, E: DataParallel<M>>(&mut self, engine: &mut E) -> Result<()> {
        assert!(
            !self.fragments.is_empty(),
            "DiLoCo::start runs before the first sync"
        );
        if self.pending.is_some() {
            self.complete(engine, self.options.fragment_alpha, None)?;
        }
        for fragment in 0..self.fragments.len() {
            if self.fragments[fragment].dirty {
                self.begin(engine, fragment, false)?;
                self.complete(engine, 0.0, None)?;
            }
        }
        Ok(())
    }

    /// Starts `fragment`'s sync: its chunk of the pseudo-gradient `Δ = θ - local` (the inner
    /// engine keeps its island's ranks equal, so the chunks need no exchange inside the
    /// island), whose mean across islands is taken on a thread of its own when `overlap`
    /// (the `"island"` group's collectives run beside the inner engine's, Note [Streaming
    /// fragments]), else when the sync completes.
    fn begin<M: Module, E: DataParallel<M>>(
        &mut self,
        engine: &mut E,
        fragment: usize,
        overlap: bool,
    ) -> Result<()> {
        assert!(self.pending.is_none(), "one fragment's sync at a time");
        let started = Instant::now();
        let values = engine.full_params()?;
        let f = &self.fragments[fragment];
        let local = gather_range(&values, f.chunk.clone());
        drop(values);
        let delta: Vec<f32> = f.global.iter().zip(&local).map(|(g, l)| g - l).collect();
        let (across, dtype) = (self.across().clone(), self.options.dtype);
        self.stats.bytes_across += sent_across(across.world_size(), delta.len(), dtype);
        let sent = match overlap {
            true => delta.clone(),
            false => Vec::new(),
        };
        let mean = match overlap {
            false => Exchange::Here(delta),
            true => {
                let thread = std::thread::Builder::new()
                    .name("phalanx-outer-sync".into())
                    .spawn(move || {
                        let mut delta = delta;
                        exchange::mean_across(&across, &mut delta, dtype).map(|()| delta)
                    })
                    .map_err(|e| Error::Outer {
                        reason: format!("could not start the outer sync's thread: {e}"),
                    })?;
                Exchange::Away(thread)
            }
        };
        self.pending = Some(Pending {
            fragment,
            mean,
            sent,
        });
        self.stats.wait += started.elapsed();
        Ok(())
    }

    /// Completes the sync under way: waits for its mean, steps the fragment's global
    /// parameters with the outer optimizer, and sets them into the engine keeping `alpha` of
    /// the island's own progress.
    fn complete<M: Module, E: DataParallel<M>>(
        &mut self,
        engine: &mut E,
        alpha: f32,
        contributors: Option<usize>,
    ) -> Result<()> {
        let started = Instant::now();
        let Pending { fragment, mean, .. } = self.pending.take().expect("a sync under way");
        let delta = match mean {
            Exchange::Here(mut delta) => {
                exchange::mean_across(self.across(), &mut delta, self.options.dtype).map(|()| delta)
            }
            Exchange::Away(thread) => thread.join().map_err(|_| Error::Outer {
                reason: "the outer sync's thread panicked".into(),
            })?,
        }
        .map_err(|source| outer_err("the pseudo-gradients' mean across islands", source))?;
        let mut delta = delta;
        if let Some(c) = contributors {
            // Fresh islands sent zeros: the mean over the islands that trained.
            let scale = self.across().world_size() as f32 / c as f32;
            delta.iter_mut().for_each(|d| *d *= scale);
        }
        // The sync counts only once the island has its result: if the gather below fails,
        // the fragment's outer state is as before and the sync is owed.
        let before = self.fragments[fragment].snapshot();
        self.fragments[fragment].outer_step(&delta, &self.options);
        let mut values = engine.full_params()?;
        if let Err(e) = self.publish(engine, &mut values, &[fragment], alpha) {
            self.fragments[fragment].restore(before);
            return Err(e);
        }
        self.fragments[fragment].dirty = alpha != 0.0;
        self.synced_at = self.steps;
        self.stats.syncs += 1;
        self.stats.wait += started.elapsed();
        Ok(())
    }

    /// The global parameters of `fragments`, gathered over the island (shared memory), set
    /// into the engine as `global + alpha (local - global)` where `values` holds the local
    /// ones.
    fn publish<M: Module, E: DataParallel<M>>(
        &self,
        engine: &mut E,
        values: &mut [Vec<f32>],
        fragments: &[usize],
        alpha: f32,
    ) -> Result<()> {
        let island = self.island();
        let n = island.world_size();
        for &fragment in fragments {
            let f = &self.fragments[fragment];
            let per = f.per(n);
            let mut send = f.global.clone();
            send.resize(per, 0.0);
            let mut all = vec![0.0f32; per * n];
            island
                .allgather(&send, &mut all)
                .map_err(|source| outer_err("the global parameters over the island", source))?;
            all.truncate(f.range.len());
            scatter_range(values, f.range.start, &all, alpha);
        }
        engine.set_full_params(values)
    }
}

impl fmt::Debug for DiLoCo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiLoCo")
            .field("options", &self.options)
            .field("island", &self.island_index())
            .field("steps", &self.steps)
            .field("stats", &self.stats)
            .finish()
    }
}

/// FNV-1a of `values`' bits: equal on two islands when their chunks are (a difference
/// escapes it with probability about 2^-64), as a value whose maximum and whose negation's
/// maximum over a group are both its own only when every rank has the same.
fn fingerprint<'a>(values: impl Iterator<Item = &'a f32>) -> i64 {
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

/// Writes `global` over `tensors` laid end to end from element `start`, as
/// `global + alpha (local - global)` (PyTorch's `lerp(global, local, alpha)`).
fn scatter_range(tensors: &mut [Vec<f32>], start: usize, global: &[f32], alpha: f32) {
    let end = start + global.len();
    let mut at = 0;
    for t in tensors {
        let (lo, hi) = (start.max(at), end.min(at + t.len()));
        for i in lo..hi {
            let (g, local) = (global[i - start], &mut t[i - at]);
            *local = if alpha == 0.0 {
                g
            } else {
                g + alpha * (*local - g)
            };
        }
        at += t.len();
    }
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
