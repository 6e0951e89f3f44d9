//! What an outer sync does and how often: [`OuterMode`] and [`OuterOptions`], and the checks
//! that need no group (`check_alone`) and those that need the world (`check`).

use std::fmt;
use std::str::FromStr;

use phalanx_pg::ProcessGroup;

use super::codec::OuterDType;
use crate::{Error, Result};

/// The outer optimizer (`--outer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterMode {
    /// Pseudo-gradients stepped by SGD with Nesterov momentum (DiLoCo).
    DiLoCo,
    /// The islands' parameters averaged (local SGD): DiLoCo with `lr` 1 and no momentum.
    LocalSgd,
    /// DiLoCo one fragment of the model at a time, each sync overlapped with the inner steps
    /// that follow it (Streaming DiLoCo, Note [Streaming fragments]).
    StreamingDiLoCo,
}

impl OuterMode {
    /// Every mode, as `--outer` spells it.
    pub const ALL: [OuterMode; 3] = [
        OuterMode::DiLoCo,
        OuterMode::LocalSgd,
        OuterMode::StreamingDiLoCo,
    ];

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            OuterMode::DiLoCo => "diloco",
            OuterMode::LocalSgd => "local-sgd",
            OuterMode::StreamingDiLoCo => "streaming-diloco",
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
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown outer optimizer `{s}`: use diloco, local-sgd or streaming-diloco")
            })
    }
}

/// How the islands sync: the outer optimizer, how often, in which dtype, and the islands' size.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterOptions {
    /// The outer optimizer.
    pub mode: OuterMode,
    /// Inner steps between outer syncs (DiLoCo's `H`, torchft's `sync_every`).
    pub sync_every: u64,
    /// The outer learning rate (DiLoCo and streaming DiLoCo).
    pub lr: f32,
    /// The outer Nesterov momentum (DiLoCo and streaming DiLoCo).
    pub momentum: f32,
    /// The pseudo-gradients' dtype between islands.
    pub dtype: OuterDType,
    /// Ranks per island; `None`: the ranks of one host (the group's local world size).
    pub island_size: Option<usize>,
    /// The fragments the model is cut into, synced in turn (1 but under streaming DiLoCo).
    pub fragments: usize,
    /// Inner steps a fragment's sync overlaps: it starts this many steps before its result
    /// is needed (the paper's τ, torchft's `fragment_sync_delay`).
    pub fragment_delay: u64,
    /// How much of the island's own progress a synced fragment keeps: its parameters become
    /// `global + alpha (local - global)` (the paper's α, torchft's `fragment_update_alpha`).
    pub fragment_alpha: f32,
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
            fragments: 1,
            fragment_delay: 0,
            fragment_alpha: 0.0,
        }
    }

    /// Streaming DiLoCo: DiLoCo's outer optimizer on `fragments` pieces of the model, one
    /// synced every `sync_every / fragments` steps, each once every `sync_every` steps;
    /// without overlap until [`with_fragment_delay`](Self::with_fragment_delay).
    pub fn streaming_diloco(sync_every: u64, fragments: usize) -> Self {
        OuterOptions {
            mode: OuterMode::StreamingDiLoCo,
            fragments,
            ..Self::diloco(sync_every)
        }
    }

    /// With a fragment's sync overlapping `delay` inner steps, and a synced fragment keeping
    /// `alpha` of the island's own progress (streaming DiLoCo only).
    pub fn with_fragment_delay(mut self, delay: u64, alpha: f32) -> Self {
        (self.fragment_delay, self.fragment_alpha) = (delay, alpha);
        self
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
    /// optimizer's numbers in range, the fragments' schedule possible.
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
        if self.mode != OuterMode::LocalSgd {
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
        self.check_fragments()
    }

    /// The fragments' schedule (Note [Streaming fragments]): each fragment synced once every
    /// `sync_every` steps, one every `sync_every / fragments`, and a sync over before the
    /// next one starts.
    fn check_fragments(&self) -> Result<()> {
        let reason = |reason: String| Err(Error::Outer { reason });
        let (h, f, delay) = (self.sync_every, self.fragments, self.fragment_delay);
        if self.mode != OuterMode::StreamingDiLoCo {
            for (flag, given) in [
                ("--fragments", f != 1),
                ("--fragment-delay", delay != 0),
                ("--fragment-alpha", self.fragment_alpha != 0.0),
            ] {
                if given {
                    return reason(format!(
                        "{flag} cuts the outer sync into fragments: it applies to --outer \
                         streaming-diloco, not to --outer {}",
                        self.mode
                    ));
                }
            }
            return Ok(());
        }
        if f == 0 {
            return reason(
                "--fragments 0: the model must be cut into at least 1 fragment (the Streaming \
                 DiLoCo paper uses 2 to 8; 1 is DiLoCo with overlap)"
                    .into(),
            );
        }
        if !h.is_multiple_of(f as u64) {
            let lower = h / f as u64 * f as u64;
            return reason(format!(
                "--sync-every {h} is not a multiple of --fragments {f}: one fragment syncs every \
                 H/F steps, each once every H steps (use --sync-every {}{})",
                h.div_ceil(f as u64) * f as u64,
                if lower > 0 {
                    format!(" or {lower}")
                } else {
                    String::new()
                }
            ));
        }
        let cadence = h / f as u64;
        if delay >= cadence {
            return reason(format!(
                "--fragment-delay {delay} is not below H/F = {h}/{f} = {cadence} steps: a \
                 fragment's sync must end before the next fragment's starts (use at most {})",
                cadence - 1
            ));
        }
        if !(0.0..=1.0).contains(&self.fragment_alpha) {
            return reason(format!(
                "--fragment-alpha {} is outside 0 to 1: a synced fragment keeps this share of \
                 the island's own progress (0, the default, takes the global parameters)",
                self.fragment_alpha
            ));
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
