//! [`PipelineStage`]: one rank's stage of a pipeline, and the step, the evaluation and the
//! whole model's gathering it runs with the other stages.
//!
//! Note [A stage's waits spin]
//! A stage waits for its peer's message for up to a whole microbatch's compute, with nothing
//! else to do. Measured on this project's 2-core virtual machine (`--pp 2 --microbatches 8`,
//! the default GPT), a wait that slept in `poll(2)` woke about 1 ms after its message came, a
//! third of a microbatch's forward and backward: the step ran at 222 samples/s with 0.26 and
//! 0.28 of each rank idle. So where the ranks' compute threads fit in the host's cores, the
//! pipeline's group spins up to [`STAGE_WAIT_SPIN`] before it sleeps
//! ([`ProcessGroup::set_wait_spin`]); the core it spins on is the rank's own, idle otherwise.
//! Where they do not (`--tp 2 --pp 2` on 2 cores) the peer may need that core, and the group
//! keeps the transport's short spin.
//!
//! Note [The loss rides with the gradients]
//! Every stage reports the batch's loss, which only the last stage computes. It used to be
//! broadcast from the last stage at the end of each step: a collective that kept the last
//! stage waiting for the first stage's last backward, and every stage waiting for a wake-up,
//! 1–2 ms of a 30 ms step. Instead every gradient message carries one more value: the loss
//! its sender knew when it sent it: on the rank that holds the last stage, its running sum; on
//! another, the value of the gradient it last took. A rank's last backward is of the last microbatch on its
//! first chunk, and its gradient comes down the chain of the last microbatch's backwards,
//! which starts on the last stage after its last forward: so the value it brings is the whole
//! batch's loss, on every rank, with no message of its own. A rank that holds the last stage
//! keeps its own sum, and sends it with the gradients of its other chunks (interleaved).

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Gradients, Int, Tensor, TensorData};
use phalanx_ddp::fsdp::seed_step;
use phalanx_pg::{P2POp, ProcessGroup};

use super::bubble::{Bubble, Busy};
use super::options::PipelineOptions;
use super::schedule::{Action, Instr, Lowering, Message, Schedule};
use super::split::stage_starts;
use crate::model::StageOutput;
use crate::step::{batch_tensor, score_logits, Score};
use crate::{Classifier, Error, Result};

/// Rows of the test set one evaluation message carries.
const STAGE_EVAL_ROWS: usize = 256;

/// How long a stage's wait spins before it sleeps, where every rank has a core (Note [A
/// stage's waits spin]): longer than a microbatch's compute at the shapes this project runs,
/// so that a wait that does sleep has waited long enough for a wake-up not to matter.
pub const STAGE_WAIT_SPIN: Duration = Duration::from_millis(20);

/// One rank's stage of a pipeline (Note [Pipeline run]): its group, its schedule, the width
/// of the activations it sends, and the time it computed and waited. PyTorch's
/// `PipelineStage` with its schedule (`ScheduleGPipe`, `Schedule1F1B`,
/// `ScheduleInterleaved1F1B`): [`cut`](Self::cut) keeps this rank's chunks of a model that
/// implements [`Classifier`]'s pipeline hooks, and [`forward_backward`](Self::forward_backward)
/// runs one batch through the schedule with the other stages, as `schedule.step` does. The
/// tutorial `crates/examples/examples/pipeline.rs` trains a user's own Burn model with it in a
/// loop of the user's own.
#[derive(Debug)]
pub struct PipelineStage {
    pp: Arc<ProcessGroup>,
    options: PipelineOptions,
    /// An activation row's shape: `[seq, width]`.
    row: [usize; 2],
    /// What this rank computed and waited: the measured bubble.
    busy: RefCell<Busy>,
    /// The schedule of a full batch.
    full: Schedule,
    /// This rank's program of `full`, lowered once at the first step with the lowering then
    /// in force (a short last batch lowers its own).
    program: OnceCell<Vec<Instr>>,
    /// Where the programs' exchanges go (Note [Schedules as data]).
    lowering: Lowering,
}

impl PipelineStage {
    /// Cuts `model` for this rank of `pp` as `options` say (Note [Pipeline run]); `row` is
    /// the shape `[seq, width]` of one sample's activation between two stages. Every rank
    /// passes the same whole model. Refused, naming the numbers, where the schedule or the
    /// cut does not fit the model. `pp` is the stage's own: where the ranks' compute threads
    /// fit in the host's cores, its waits spin up to [`STAGE_WAIT_SPIN`] from here on (Note
    /// [A stage's waits spin]), so a group that also runs work overlapped with compute is not
    /// one to pass. Where `pp`'s sends complete with no receive posted (the native backend),
    /// each message is sent when it is made and received when it is needed; a stage whose
    /// compute runs collectives of another group (tensor parallelism, a fully sharded
    /// block's all-gather) starts `pp`'s background progress next
    /// ([`ProcessGroup::start_progress`]), so that its peers' sends complete while it computes.
    pub fn cut<M: Classifier>(
        pp: Arc<ProcessGroup>,
        options: &PipelineOptions,
        row: [usize; 2],
        model: M,
    ) -> Result<(PipelineStage, M)> {
        // The microbatches as given: only a short last batch takes fewer.
        let schedule = Schedule::new(
            options.schedule,
            options.stages,
            options.virtual_stages,
            options.microbatches,
        )
        .map_err(Error::Config)?;
        let what = match schedule.chunks() {
            1 => format!("--pp {}", options.stages),
            v => format!("--pp {} --virtual-stages {v}", options.stages),
        };
        let Some(costs) = model.pipeline_costs() else {
            return Err(Error::Config(format!(
                "{what} cuts a model's blocks into stages; this model has no pipeline split: use \
                 --model gpt (a model of your own implements Classifier::pipeline_costs, \
                 pipeline_stage, stage_forward and chunk_tensors)"
            )));
        };
        let blocks = costs.blocks.len();
        let starts = stage_starts(&costs, schedule.stages(), options.split.as_deref(), &what)
            .map_err(Error::Config)?;
        let rank = pp.rank();
        let range = |stage: usize| -> Range<usize> {
            starts[stage]..starts.get(stage + 1).copied().unwrap_or(blocks)
        };
        let chunks: Vec<Range<usize>> = (0..schedule.chunks())
            .map(|c| range(schedule.stage_of(rank, c)))
            .collect();
        let last = schedule.rank_of(schedule.stages() - 1) == rank;
        // Note [Whole before cut]
        // Burn draws a parameter's initial values lazily, at its first use, from the device's
        // generator. A stage that only ever used its own blocks would draw its first block's
        // values where the whole model drew the first stage's: every rank would hold another
        // model. So the whole model's parameters are drawn here, in canonical order, before
        // the cut, as one process drawing the whole model draws them. A model whose
        // parameters draw on their own (Note [Deferred init] in `model/deferred.rs`) is cut
        // undrawn: the stage draws its own blocks only.
        if !model.deferred_init() {
            crate::model::deferred::draw_all(&model);
        }
        let model = model
            .pipeline_stage(&chunks, rank == 0, last)
            .map_err(Error::Config)?;
        if phalanx_ddp::ranks_have_cores() {
            pp.set_wait_spin(STAGE_WAIT_SPIN);
        }
        let lowering = match pp.sends_complete_alone() {
            true => Lowering::AsNeeded,
            false => Lowering::LockStep,
        };
        let stage = PipelineStage {
            pp,
            options: options.clone(),
            row,
            busy: RefCell::new(Busy::default()),
            full: schedule,
            program: OnceCell::new(),
            lowering,
        };
        Ok((stage, model))
    }

    /// Pairs each send with its receive in lock-step ticks from here on (Note [Schedules as
    /// data]): for a stage whose compute runs collectives of another group (tensor
    /// parallelism's, a fully sharded block's all-gather) on a group that reads nothing ahead
    /// in the background. There a send that waits for a peer busy in such a collective could
    /// wait behind a chain of them that comes back to this rank's own; ticks keep every wait
    /// of the pipeline's group paired. `phalanx train` starts the group's background progress
    /// instead ([`ProcessGroup::start_progress`]), which lets the messages go as needed.
    pub fn pair_sends(&mut self) {
        self.lowering = Lowering::LockStep;
        self.program = OnceCell::new();
    }

    /// The pipeline's ranks.
    pub fn group(&self) -> &Arc<ProcessGroup> {
        &self.pp
    }

    /// Per float tensor of this rank's stage (canonical order, `chunk_tensors` per chunk as
    /// [`Classifier::chunk_tensors`] counts them), its position in the whole model: the
    /// order [`whole`](Self::whole) joins them in. A collective of the pipeline's group.
    pub fn positions(&self, chunk_tensors: &[usize]) -> Result<Vec<usize>> {
        let (p, rank) = (self.pp.world_size(), self.pp.rank());
        let chunks = chunk_tensors.len();
        let mine: Vec<i64> = chunk_tensors.iter().map(|&c| c as i64).collect();
        let mut all = vec![0i64; chunks * p];
        self.pp.allgather(&mine, &mut all)?;
        // The stages in order: chunk 0 of every rank, then chunk 1, …
        let mut positions = vec![Vec::new(); chunks];
        let mut at = 0;
        for (c, positions) in positions.iter_mut().enumerate() {
            for r in 0..p {
                let count = all[r * chunks + c] as usize;
                if r == rank {
                    positions.extend(at..at + count);
                }
                at += count;
            }
        }
        Ok(positions.concat())
    }

    /// The stages of the pipeline.
    pub fn size(&self) -> usize {
        self.pp.world_size()
    }

    /// The bubble measured over the steps so far, next to the schedule's in theory (Note [The
    /// measured bubble]); `None` before a step ran. A collective of the pipeline.
    pub fn bubble(&self) -> Result<Option<Bubble>> {
        self.busy.borrow().bubble(&self.pp, self.full.bubble())
    }

    /// One step's forward and backward of `features`/`labels` through the pipeline, with the
    /// other stages: this stage's gradients, summed over the microbatches, and the batch's
    /// mean loss (the last stage's, sent to every stage). `seed` draws each microbatch's
    /// dropout on each stage apart.
    pub fn forward_backward<M: Classifier>(
        &self,
        model: &M,
        features: &[f32],
        labels: &[i64],
        seed: u64,
    ) -> Result<(Gradients, f32)> {
        let start = Instant::now();
        let rows = labels.len();
        let dim = model.input_dim();
        // A short last batch takes as many microbatches as it can.
        let short;
        let (schedule, program) = match rows >= self.options.microbatches {
            true => (
                self.full,
                self.program
                    .get_or_init(|| self.full.program(self.pp.rank(), self.lowering)),
            ),
            false => {
                let schedule = self.options.schedule_for(rows)?;
                short = schedule.program(self.pp.rank(), self.lowering);
                (schedule, &short)
            }
        };
        let m = schedule.microbatches();
        let bounds = |mb: usize| (mb * rows / m)..((mb + 1) * rows / m);
        let rank = self.pp.rank();
        let last = schedule.stages() - 1;
        let holds_last = schedule.rank_of(last) == rank;
        let device = model.device();
        let mut run = Running::default();
        let mut computing = Duration::ZERO;
        for instr in program {
            match instr {
                Instr::Exchange { sends, recvs } => {
                    self.exchange(&schedule, &mut run, sends, recvs, |msg| {
                        bounds(msg.mb).len()
                    })?
                }
                &Instr::Compute(action) => {
                    let began = Instant::now();
                    let (chunk, mb) = match action {
                        Action::Forward { chunk, mb } | Action::Backward { chunk, mb } => {
                            (chunk, mb)
                        }
                    };
                    let stage = schedule.stage_of(rank, chunk);
                    let span = bounds(mb);
                    let produced = match action {
                        Action::Forward { .. } => {
                            seed_step(&device, mix(seed, (stage * m + mb) as u64));
                            let x = batch_tensor(
                                model,
                                &features[span.start * dim..span.end * dim],
                                span.len(),
                            )?;
                            let received = match schedule.needs(rank, action) {
                                None => None,
                                Some(msg) => {
                                    let leaf = self
                                        .activation(run.take(&msg)?, span.len(), &model.device())
                                        .require_grad();
                                    run.inputs.insert((chunk, mb), leaf.clone());
                                    Some(leaf)
                                }
                            };
                            match model.stage_forward(chunk, x.clone(), received)? {
                                StageOutput::Hidden(h) => {
                                    run.outputs.insert((chunk, mb), h.clone());
                                    Some(values(h)?)
                                }
                                StageOutput::Logits(logits) => {
                                    let y = Tensor::<1, Int>::from_data(
                                        TensorData::new(
                                            labels[span.clone()].to_vec(),
                                            [span.len()],
                                        ),
                                        &device,
                                    );
                                    let targets = model.targets(x, y);
                                    // Weighted by the microbatch's share: the gradients sum to the
                                    // whole batch's mean loss's.
                                    let share = span.len() as f32 / rows as f32;
                                    let loss = model.loss(logits, targets)?.mul_scalar(share);
                                    run.loss += loss.clone().into_scalar::<f32>() as f64;
                                    run.losses.insert(mb, loss);
                                    None
                                }
                            }
                        }
                        Action::Backward { .. } => {
                            let mut grads = match stage == last {
                                true => run
                                    .losses
                                    .remove(&mb)
                                    .expect("the last stage's forward kept its loss")
                                    .backward(),
                                false => {
                                    let msg = schedule.needs(rank, action).expect("a gradient");
                                    let out = run
                                        .outputs
                                        .remove(&(chunk, mb))
                                        .expect("a forward kept its output");
                                    let mut grad = run.take(&msg)?;
                                    // Note [The loss rides with the gradients]
                                    let known =
                                        grad.pop().ok_or_else(|| missing_grad(stage, mb))?;
                                    if !holds_last {
                                        run.loss = f64::from(known);
                                    }
                                    let grad = self.activation(grad, span.len(), &device);
                                    // The output's gradient is `grad`: backward of <out, grad>.
                                    (out * grad).sum().backward()
                                }
                            };
                            let produced = match run.inputs.remove(&(chunk, mb)) {
                                Some(input) => {
                                    let mut grad = values(
                                        input
                                            .grad_remove(&mut grads)
                                            .ok_or_else(|| missing_grad(stage, mb))?,
                                    )?;
                                    grad.push(run.loss as f32);
                                    Some(grad)
                                }
                                None => None,
                            };
                            run.accumulate(model, grads);
                            produced
                        }
                    };
                    if let (Some(data), Some(msg)) = (produced, schedule.sends(rank, action)) {
                        run.outbox.insert(msg, data);
                    }
                    computing += began.elapsed();
                }
            }
        }
        let grads = run.acc.ok_or_else(|| {
            Error::Config(format!(
                "--pp: stage {rank} ran no backward in its schedule"
            ))
        })?;
        self.busy
            .borrow_mut()
            .add(computing.as_secs_f64(), start.elapsed().as_secs_f64());
        Ok((grads, run.loss as f32))
    }

    /// The model's [`Score`] on `x`/`y` through the pipeline (forward only), the same on every
    /// stage.
    pub fn score<M: Classifier>(&self, model: &M, x: &[f32], y: &[i64]) -> Result<Score> {
        let model = model.valid();
        let schedule = self.full;
        let (rank, dim, last) = (self.pp.rank(), model.input_dim(), schedule.stages() - 1);
        let device = model.device();
        let mut total = Score::default();
        let chunk = model.eval_rows().clamp(1, STAGE_EVAL_ROWS);
        for (rows, labels) in x.chunks(chunk * dim).zip(y.chunks(chunk)) {
            let n = labels.len();
            let input = batch_tensor(&model, rows, n)?;
            let mut carried: Option<Vec<f32>> = None;
            for stage in 0..schedule.stages() {
                if schedule.rank_of(stage) != rank {
                    continue;
                }
                let chunk = stage / schedule.ranks();
                let received = match stage {
                    0 => None,
                    _ => Some(match carried.take() {
                        Some(local) => local,
                        None => {
                            let mut buf = vec![0f32; n * self.row[0] * self.row[1]];
                            self.pp
                                .recv(&mut buf, schedule.rank_of(stage - 1), stage as u32)?;
                            buf
                        }
                    }),
                };
                let received = received.map(|v| self.activation(v, n, &device));
                match model.stage_forward(chunk, input.clone(), received)? {
                    StageOutput::Hidden(h) => {
                        let data = values(h)?;
                        let to = schedule.rank_of(stage + 1);
                        match to == rank {
                            true => carried = Some(data),
                            false => self.pp.send(&data, to, stage as u32 + 1)?,
                        }
                    }
                    StageOutput::Logits(logits) => {
                        let y = Tensor::<1, Int>::from_data(
                            TensorData::new(labels.to_vec(), [n]),
                            &device,
                        );
                        let s = score_logits(&model, logits, model.targets(input.clone(), y))?;
                        total.targets += s.targets;
                        total.correct += s.correct;
                        total.loss_sum += s.loss_sum;
                    }
                }
            }
        }
        let mut sums = [total.targets as f64, total.correct as f64, total.loss_sum];
        self.pp.broadcast(&mut sums, schedule.rank_of(last))?;
        Ok(Score {
            targets: sums[0] as usize,
            correct: sums[1] as usize,
            loss_sum: sums[2],
        })
    }

    /// The whole model's float tensors in canonical order, from every stage's `mine` (its
    /// tensors, `chunk_tensors[c]` of them for its chunk `c`): a collective of the pipeline.
    pub fn whole(&self, mine: Vec<Vec<f32>>, chunk_tensors: &[usize]) -> Result<Vec<Vec<f32>>> {
        let mut whole = Vec::new();
        self.for_each_whole(&mine, chunk_tensors, &mut |_, t| Ok(t.to_vec()), &mut |t| {
            whole.push(t.to_vec())
        })?;
        Ok(whole)
    }

    /// Hands `f` the whole model's float tensors in canonical order, one at a time (a digest
    /// or an export holds one tensor, not the model: Note [One block at a time] in
    /// phalanx-ddp). Each stage's tensors come from its `mine` (`chunk_tensors[c]` of them for
    /// its chunk `c`) through `whole_of(k, mine[k])`, which may complete a piece (a
    /// tensor-parallel gather among the stage's ranks), and are broadcast to the other stages.
    /// A collective of the pipeline.
    pub fn for_each_whole(
        &self,
        mine: &[Vec<f32>],
        chunk_tensors: &[usize],
        whole_of: &mut WholeOf<'_>,
        f: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        let (p, rank) = (self.pp.world_size(), self.pp.rank());
        // Every stage's tensors per chunk, broadcast from each in turn.
        let mut counts: Vec<Vec<i64>> = Vec::with_capacity(p);
        for root in 0..p {
            let mut chunks = [chunk_tensors.len() as i64];
            self.pp.broadcast(&mut chunks, root)?;
            let mut of_root = match root == rank {
                true => chunk_tensors.iter().map(|&c| c as i64).collect(),
                false => vec![0i64; chunks[0] as usize],
            };
            self.pp.broadcast(&mut of_root, root)?;
            counts.push(of_root);
        }
        // The stages in order: chunk 0 of every rank, then chunk 1, …
        for c in 0..counts[0].len() {
            for (root, of_root) in counts.iter().enumerate() {
                let first: i64 = of_root[..c].iter().sum();
                for k in first..first + of_root[c] {
                    let mut tensor = match root == rank {
                        true => whole_of(k as usize, &mine[k as usize])?,
                        false => Vec::new(),
                    };
                    let mut len = [tensor.len() as i64];
                    self.pp.broadcast(&mut len, root)?;
                    tensor.resize(len[0] as usize, 0.0);
                    self.pp.broadcast(&mut tensor, root)?;
                    f(&tensor);
                }
            }
        }
        Ok(())
    }

    /// Sends and receives one exchange's messages at once.
    fn exchange(
        &self,
        schedule: &Schedule,
        run: &mut Running,
        sends: &[Message],
        recvs: &[Message],
        rows: impl Fn(&Message) -> usize,
    ) -> Result<()> {
        let width = self.row[0] * self.row[1];
        let mut ops = Vec::with_capacity(sends.len() + recvs.len());
        for msg in sends {
            ops.push(P2POp::Send {
                buf: run.outbox.remove(msg).expect("a sent message was computed"),
                peer: schedule.rank_of(msg.to()),
                tag: schedule.tag(msg),
            });
        }
        for msg in recvs {
            // A gradient carries the loss its sender knew (Note [The loss rides with the
            // gradients]).
            ops.push(P2POp::Recv {
                buf: vec![0f32; rows(msg) * width + usize::from(msg.grad)],
                peer: schedule.rank_of(msg.from),
                tag: schedule.tag(msg),
            });
        }
        let done = self.pp.batch_send_recv(ops)?;
        for (msg, op) in recvs.iter().zip(done.into_iter().skip(sends.len())) {
            run.arrived.insert(*msg, op.into_buf());
        }
        Ok(())
    }

    /// `values` as an activation (or its gradient) of `rows` rows.
    fn activation(
        &self,
        values: Vec<f32>,
        rows: usize,
        device: &burn::tensor::Device,
    ) -> Tensor<3> {
        let [seq, width] = self.row;
        Tensor::from_data(TensorData::new(values, [rows, seq, width]), device)
    }
}

/// What a step holds while its program runs.
#[derive(Default)]
struct Running {
    /// Messages received (or passed between two chunks of this rank), not yet used.
    arrived: HashMap<Message, Vec<f32>>,
    /// Messages computed, not yet sent.
    outbox: HashMap<Message, Vec<f32>>,
    /// The received activations, by (chunk, microbatch): their gradients go back.
    inputs: HashMap<(usize, usize), Tensor<3>>,
    /// The outputs sent on, by (chunk, microbatch): their backward takes the gradient back.
    outputs: HashMap<(usize, usize), Tensor<3>>,
    /// The last stage's losses, by microbatch, weighted by its share of the batch.
    losses: HashMap<usize, Tensor<1>>,
    /// The batch's mean loss: the last stage's running sum, or the value the gradient this
    /// rank last took carried (Note [The loss rides with the gradients]).
    loss: f64,
    /// The gradients summed over the microbatches so far.
    acc: Option<Gradients>,
}

impl Running {
    /// The data of `msg`, received, or computed by another chunk of this rank.
    fn take(&mut self, msg: &Message) -> Result<Vec<f32>> {
        self.arrived
            .remove(msg)
            .or_else(|| self.outbox.remove(msg))
            .ok_or_else(|| {
                Error::Config(format!(
                    "--pp: stage {} needs the {} of microbatch {} from stage {}, which did not \
                     arrive",
                    msg.to(),
                    if msg.grad { "gradient" } else { "activation" },
                    msg.mb,
                    msg.from
                ))
            })
    }

    /// Adds `grads`' parameter gradients to the sum.
    fn accumulate<M: Module>(&mut self, model: &M, grads: Gradients) {
        match &mut self.acc {
            None => self.acc = Some(grads),
            Some(acc) => {
                let mut add = Accumulate { acc, new: grads };
                model.visit(&mut add);
            }
        }
    }
}

/// Completes a stage's tensor `k` from this rank's piece of it (a tensor-parallel gather).
pub type WholeOf<'a> = dyn FnMut(usize, &[f32]) -> Result<Vec<f32>> + 'a;

/// Adds a microbatch's parameter gradients to the step's.
struct Accumulate<'a> {
    acc: &'a mut Gradients,
    new: Gradients,
}

impl ModuleVisitor for Accumulate<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        if let Some(g) = t.grad_remove(&mut self.new) {
            let sum = match t.grad_remove(self.acc) {
                Some(a) => a + g,
                None => g,
            };
            t.grad_replace(self.acc, sum);
        }
    }
}

fn missing_grad(stage: usize, mb: usize) -> Error {
    Error::Config(format!(
        "--pp: stage {stage}'s input of microbatch {mb} got no gradient in its backward"
    ))
}

/// A tensor's values as `f32`.
fn values<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.into_data()
        .try_into_vec::<f32>()
        .map_err(|e| Error::Config(format!("--pp: an activation's values: {e:?}")))
}

/// SplitMix64 of a step's seed and a (stage, microbatch): each microbatch on each stage draws
/// its own dropout masks.
fn mix(seed: u64, k: u64) -> u64 {
    let mut z = seed ^ k.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
