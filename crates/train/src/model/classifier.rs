//! [`Classifier`]: what the trainer needs of any model, a Burn module that maps a batch of
//! flat feature rows to logits, and the classes they are scored against.

use std::ops::Range;
use std::sync::Arc;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Device, Int, Tensor};
use phalanx_pg::ProcessGroup;
use phalanx_tensor_parallel::Placement;

use crate::Result;

/// Rows an evaluation runs at once unless a model says otherwise ([`Classifier::eval_rows`]).
pub(crate) const EVAL_ROWS: usize = 1024;

/// A classifier the trainer can train: any Burn module with a forward pass from flat rows.
///
/// ```
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{Device, Tensor};
/// use phalanx_train::Classifier;
///
/// #[derive(Module, Debug)]
/// struct Logistic { fc: Linear }
///
/// impl Classifier for Logistic {
///     fn input_dim(&self) -> usize { self.fc.weight.val().dims()[0] }
///     fn logits(&self, x: Tensor<2>) -> Tensor<2> { self.fc.forward(x) }
///     fn device(&self) -> Device { self.fc.weight.val().device() }
/// }
///
/// let m = Logistic { fc: LinearConfig::new(4, 3).init(&Device::flex()) };
/// assert_eq!(m.logits(Tensor::zeros([2, 4], &m.device())).dims(), [2, 3]);
/// ```
pub trait Classifier: Module + 'static {
    /// Features per sample (the rows the trainer feeds are `[batch, input_dim]`).
    fn input_dim(&self) -> usize;
    /// Logits `[rows, classes]` of a batch `[batch, input_dim]` (reshape inside as needed):
    /// one row per sample for a classifier, one per position for a language model.
    fn logits(&self, input: Tensor<2>) -> Tensor<2>;
    /// The class each row of [`logits`](Self::logits) is scored against (`[rows]`): the
    /// labels as given, one per sample. A language model scores each position of a window
    /// against the next token, which its input holds (Note [Language model as a classifier]
    /// in `model/gpt.rs`).
    fn targets(&self, _input: Tensor<2>, labels: Tensor<1, Int>) -> Tensor<1, Int> {
        labels
    }
    /// The mean cross-entropy of [`logits`](Self::logits) against `targets`: Burn's. A model
    /// whose logits are split across ranks computes it from its piece.
    fn loss(&self, logits: Tensor<2>, targets: Tensor<1, Int>) -> Result<Tensor<1>> {
        Ok(cross_entropy(logits, targets))
    }
    /// The class each row of [`logits`](Self::logits) predicts (`[rows]`): the arg-max.
    fn predictions(&self, logits: Tensor<2>) -> Result<Tensor<1, Int>> {
        Ok(argmax(logits))
    }
    /// This rank's piece of the model under tensor parallelism on `group` (`--tp`, Note
    /// [Tensor-parallel run] in `tensor_parallel.rs`), from the whole model every rank built,
    /// with the activations between the regions split along the sequence when
    /// `sequence_parallel` (`--sequence-parallel`); a model that cannot be split says why. The
    /// default: none can.
    fn tensor_parallel(
        self,
        group: Arc<ProcessGroup>,
        _sequence_parallel: bool,
    ) -> Result<Self, String>
    where
        Self: Sized,
    {
        Err(format!(
            "--tp {}: this model has no tensor-parallel split",
            group.world_size()
        ))
    }
    /// Where each float tensor of a split model is on its tensor-parallel group, in canonical
    /// order (none listed: every tensor whole on every rank).
    fn placements(&self) -> Vec<Placement> {
        Vec::new()
    }
    /// Whether each parameter draws its initial values on its own, from the seed and its
    /// position (Note [Deferred init] in `model/deferred.rs`), so that a pipeline stage or a
    /// tensor-parallel shard is drawn without the rest of the model. The default: no (Burn's
    /// initialisers draw from the device's one generator in order of first use, so a stage
    /// draws the whole model first: Note [Whole before cut] in `pipeline/stage.rs`).
    fn deferred_init(&self) -> bool {
        false
    }
    /// How many rows an evaluation runs through the model at once: it bounds the evaluation's
    /// activations, which a chunk of a model whose rows are long (a language model's windows)
    /// makes the run's peak. The default: 1,024 (a classifier's rows are samples).
    fn eval_rows(&self) -> usize {
        EVAL_ROWS
    }
    /// What a pipeline cut weighs (`--pp`, Note [Pipeline run] in `pipeline/mod.rs`); `None`:
    /// the model has no pipeline split (the default).
    fn pipeline_costs(&self) -> Option<PipelineCosts> {
        None
    }
    /// This rank's chunks of the model under pipeline parallelism, from the whole model
    /// every rank built: the blocks of `chunks` (ranges of block indices, in order), the
    /// input's layers when `first` (its first chunk is stage 0), the output's when `last` (its
    /// last chunk is the last stage). The default: none can be cut.
    fn pipeline_stage(
        self,
        chunks: &[Range<usize>],
        _first: bool,
        _last: bool,
    ) -> Result<Self, String>
    where
        Self: Sized,
    {
        Err(format!(
            "--pp: this model has no pipeline split ({} chunk(s) asked for)",
            chunks.len()
        ))
    }
    /// The forward of this rank's chunk `chunk`: from the batch `input` on the first stage,
    /// from the activation `received` from the stage before on the others; the logits on the
    /// last stage, the activation to send on otherwise.
    fn stage_forward(
        &self,
        _chunk: usize,
        _input: Tensor<2>,
        _received: Option<Tensor<3>>,
    ) -> Result<StageOutput> {
        Err(crate::Error::Config(
            "--pp: this model has no pipeline split".to_string(),
        ))
    }
    /// The float tensors of each of this rank's chunks, in canonical order (the whole model's
    /// order is the stages' in turn).
    fn chunk_tensors(&self) -> Vec<usize> {
        Vec::new()
    }
    /// The device the parameters live on.
    fn device(&self) -> Device;
}

/// What a pipeline cut weighs, in parameters: what the first stage holds besides its blocks
/// (the embeddings), each block, what the last holds besides its blocks (the head).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineCosts {
    /// The first stage's own parameters.
    pub first: usize,
    /// Each block's.
    pub blocks: Vec<usize>,
    /// The last stage's own parameters.
    pub last: usize,
}

/// What a stage's forward gives ([`Classifier::stage_forward`]).
#[derive(Debug, Clone)]
pub enum StageOutput {
    /// The activation the next stage takes, `[batch, seq, width]`.
    Hidden(Tensor<3>),
    /// The last stage's logits, as [`Classifier::logits`] gives them.
    Logits(Tensor<2>),
}

/// Burn's mean cross-entropy of whole `logits` against `targets`.
pub(crate) fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>) -> Tensor<1> {
    CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, targets)
}

/// The arg-max of each row of whole `logits`, `[rows]`.
pub(crate) fn argmax(logits: Tensor<2>) -> Tensor<1, Int> {
    let rows = logits.dims()[0];
    logits.argmax(1).reshape([rows])
}
