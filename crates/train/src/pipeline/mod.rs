//! `--pp N`: pipeline parallelism. The model's blocks are cut into stages, one (or, under the
//! interleaved schedule, several) per rank of a pipeline; microbatches flow through them as
//! a schedule says (Note [Schedules as data]).
//!
//! Note [Pipeline run]
//! The world is a mesh `("pp", P), ("dp", D), ("tp", T)` (torchtitan's order, Note [Mesh
//! layout] in phalanx-pg): tensor-parallel groups are consecutive ranks (one host, shared
//! memory), the data-parallel groups next, and the pipeline's stages the farthest apart: a
//! stage boundary carries one activation per microbatch, the least traffic of the three, so it
//! is the one to cross hosts. Every rank builds the whole model from the seed and keeps its
//! stage's blocks ([`Classifier::pipeline_stage`](crate::Classifier::pipeline_stage)): the
//! embeddings on the first stage, the final norm and the head on the last, the blocks cut where the
//! largest stage's parameters are fewest (or where `--pp-split` says). A step splits the rank's
//! batch (the same on every stage of a pipeline: the data is sharded over `"dp"` only) into
//! `--microbatches` equal parts, runs the schedule's program, and hands the engine (DDP or FSDP on
//! `"dp"`) the stage's gradients summed over the microbatches, each microbatch's loss weighted by
//! its share of the batch, so that they are the whole batch's mean loss's gradients. The last
//! stage's loss goes to every stage of its pipeline; evaluation runs the stages forward only; the
//! digest is the whole model's, gathered over `"tp"` then `"pp"`, equal on every rank.
//!
//! The parameters a pipeline ends with are the run on one rank's within float rounding (the
//! sums of the microbatches' gradients are taken in another order), not bitwise; dropout draws
//! each microbatch's masks on each stage apart (from the step's seed, the stage and the
//! microbatch), so with dropout the runs differ as two seeds do.

mod bubble;
mod options;
mod schedule;
mod split;
mod stage;

pub use bubble::Bubble;
pub use options::PipelineOptions;
pub use schedule::{Action, Instr, Lowering, Message, PipelineSchedule, Schedule};
pub use stage::{PipelineStage, WholeOf, STAGE_WAIT_SPIN};
