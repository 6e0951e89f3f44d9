//! The `gpt` model of `phalanx train --model gpt`: a GPT-2-style decoder language model over
//! byte tokens (Note [Byte-level tokens] in phalanx-data).
//!
//! Token embedding + learned position embedding → `depth` pre-norm blocks (LayerNorm → causal
//! self-attention → residual; LayerNorm → Linear(d, 4d) GELU Linear(4d, d) → residual) → a final
//! LayerNorm → Linear(d, vocab) without bias. Dropout (`p`, default 0.1) after the embeddings,
//! on the attention weights and on each residual branch, as in GPT-2.
//!
//! Initialised as GPT-2 is: every weight from N(0, 0.02), the residual projections' (attention
//! and MLP outputs) from N(0, 0.02 / sqrt(2 · depth)) so that the residual stream's variance does
//! not grow with depth, the biases zero, the LayerNorms one and zero.
//!
//! The attention keeps its query, key and value projections apart (GPT-2 fuses them into one
//! `c_attn`): each is split by heads, so a head's columns are contiguous in each matrix.
//!
//! Under tensor parallelism ([`Gpt::tensor_parallel`], `--tp N`) each block is split in
//! Megatron's layout (Note [Tensor parallelism] in phalanx-tensor-parallel): the query, key and
//! value projections and the MLP's first linear by columns, so a rank holds `heads / N` whole
//! heads and `4d / N` of the MLP's width; the two output projections by rows. The vocabulary
//! is split too (Note [Vocabulary parallelism] in phalanx-tensor-parallel): the token
//! embedding by rows, the head by columns, and the loss and the arg-max are computed from the
//! rank's columns of the logits, which are never gathered. The position embedding and the
//! LayerNorms stay whole on every rank, and their gradients are the same on every rank without
//! a collective of their own: what reaches them passed `f`'s all-reduce.
//!
//! Note [Dropout under tensor parallelism]
//! Every rank of a tensor-parallel group seeds its generator alike (the step's seed, and each
//! block's: Note [Block seeds] in phalanx-ddp) and draws the same numbers in the same order.
//! Where the activations are replicated (after the embeddings, on each residual branch after
//! `g`), every rank draws the same mask over the whole tensor, so the replicas stay equal.
//! Where they are sharded (the attention weights, by heads), every rank draws the mask of the
//! *whole* tensor, all heads, and keeps its heads' slice (Note [Dropout of a shard] in
//! phalanx-tensor-parallel): the ranks' masks are different, as independent heads need, and
//! together they are the mask one rank draws without tensor parallelism, bit for bit. The cost
//! is the random numbers of the whole attention matrix on every rank, not its memory: the slice
//! is copied out and the whole mask dropped at once.
//!
//! Note [Sequence parallelism in the GPT]
//! Under `--sequence-parallel` (Note [Sequence parallelism] in phalanx-tensor-parallel) the
//! residual stream between the tensor-parallel regions is split along the sequence: rank `r`
//! of `n` holds positions `r · seq / n ..` of every window. The embeddings leave the
//! vocabulary-parallel lookup by a reduce-scatter, and each rank adds its positions' rows of
//! the position table. Each block's two norms, its residual additions and its two residual
//! dropouts run on the rank's positions; the attention and the MLP enter by an all-gather of
//! the sequence and leave by a reduce-scatter. The attention's own dropout is as without it
//! (its weights are whole in the sequence after the gather, split by heads). The final norm runs
//! on the positions, and the head gathers the sequence, so the logits and the loss are as
//! without it. The parameters used on the positions (the norms', the position table, the output
//! projections' biases) enter through `f`. Dropout masks are the whole stream's, sliced, so a
//! run with sequence parallelism draws the masks of the run without it. Between pipeline stages
//! a rank sends its positions only.
//!
//! Note [Language model as a classifier]
//! A language model classifies every position of a window by its next token. A sample is a
//! window of `seq_len + 1` tokens (phalanx-data's Note [Windows as samples]); the model reads the
//! first `seq_len` and scores its `batch × seq_len` rows of logits against the last `seq_len`
//! ([`Classifier::targets`]). The trainer's loss is then the mean next-token cross-entropy, and
//! its accuracy the share of next tokens predicted, with no code of its own for text.

use std::sync::Arc;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::tensor::activation::{gelu, softmax};
use burn::tensor::module::embedding;
use burn::tensor::{Bool, Device, Int, Tensor};
use phalanx_ddp::fsdp::FullyShard;
use phalanx_pg::ProcessGroup;
use phalanx_tensor_parallel::{
    argmax_parallel, copy_to_region, dropout_of_shard, enter, gather_sequence, loss_parallel,
    ColwiseParallel, Placement, RowwiseParallel, SequenceParallel, VocabParallelEmbedding,
};

use super::classifier::{argmax, cross_entropy, Classifier, PipelineCosts, StageOutput};

/// GPT-2's standard deviation of the initial weights.
const STD: f64 = 0.02;

/// The LayerNorms' epsilon (Burn's and PyTorch's default); sequence parallelism runs the norms
/// itself and needs it, which Burn keeps private.
const LN_EPSILON: f64 = 1e-5;

// Note [Evaluation chunks]
// The trainer evaluates a classifier 1,024 rows at a time; a row of this model is a window of
// `seq_len` positions, each with a `d_model` residual, a `4 d_model` MLP activation and its
// attention row. At `--hidden 1024 --seq-len 64` a chunk of 1,024 windows held over a GB of
// activations on every rank, whatever `--tp` or `--pp` split: the run's peak, far above its
// training steps' (1,381 MB per rank under --tp 4 against 690 MB before the first step). So
// the model evaluates as many windows as hold `EVAL_POSITIONS` positions, about a small
// training batch's worth of activations; the sums are the same up to float rounding.
/// Positions an evaluation chunk holds (Note [Evaluation chunks]).
const EVAL_POSITIONS: usize = 4096;

/// The shape of a [`Gpt`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptConfig {
    /// Tokens in the vocabulary (256 for bytes).
    pub vocab: usize,
    /// Tokens a window feeds the model (`--seq-len`).
    pub seq_len: usize,
    /// Width of the residual stream (`--hidden`).
    pub d_model: usize,
    /// Blocks (`--depth`).
    pub depth: usize,
    /// Attention heads per block (`--heads`); they divide `d_model`.
    pub heads: usize,
    /// Dropout probability.
    pub dropout: f64,
}

impl GptConfig {
    /// Checks the shape, naming the numbers that do not fit.
    pub fn check(&self) -> Result<(), String> {
        if self.d_model == 0 || self.depth == 0 || self.heads == 0 || self.seq_len == 0 {
            return Err(format!(
                "--model gpt needs --hidden, --depth, --heads and --seq-len of at least 1 \
                 (got {}, {}, {} and {})",
                self.d_model, self.depth, self.heads, self.seq_len
            ));
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return Err(format!(
                "--model gpt: --heads {} does not divide --hidden {} (each head takes an equal \
                 share of the width)",
                self.heads, self.d_model
            ));
        }
        Ok(())
    }

    /// Float parameters of the model this config builds.
    pub fn num_params(&self) -> usize {
        let d = self.d_model;
        let block = 2 * 2 * d + 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
        self.vocab * d + self.seq_len * d + self.depth * block + 2 * d + d * self.vocab
    }
}

/// The GPT-style decoder. Each block is a [`FullyShard`] unit (under `--sharding full` it holds
/// only its shard between its own forward and backward); the embeddings, the final norm and
/// the head are the root's.
#[derive(Module, Debug)]
pub struct Gpt {
    /// Token embedding `[vocab, d_model]` (on the first pipeline stage only).
    pub wte: Option<Embedding>,
    /// Learned position embedding `[seq_len, d_model]` (on the first pipeline stage only).
    pub wpe: Option<Embedding>,
    /// The blocks, input first (under pipeline parallelism, those of this rank's chunks).
    pub blocks: Vec<FullyShard<Block>>,
    /// The final LayerNorm (on the last pipeline stage only).
    pub ln_f: Option<LayerNorm>,
    /// Linear(d_model, vocab), no bias: the logits (on the last pipeline stage only).
    pub head: Option<Linear>,
    drop: Dropout,
    seq_len: usize,
    /// The tensor-parallel group the vocabulary is split on (the embedding's rows, the head's
    /// columns, the loss: Note [Vocabulary parallelism] in phalanx-tensor-parallel).
    #[module(skip)]
    tp: Option<Arc<ProcessGroup>>,
    /// Under `--sequence-parallel`, the residual stream is split along the sequence on the
    /// tensor-parallel group (Note [Sequence parallelism in the GPT]).
    #[module(skip)]
    sequence_parallel: bool,
    /// Under pipeline parallelism, the blocks of each of this rank's chunks, as ranges of
    /// `blocks`; empty for the whole model.
    #[module(skip)]
    chunks: Vec<std::ops::Range<usize>>,
    /// Where the parameters live (a stage may hold no embedding and no head).
    #[module(skip)]
    device: Device,
}

/// One pre-norm block.
#[derive(Module, Debug)]
pub struct Block {
    /// LayerNorm before the attention.
    pub ln_1: LayerNorm,
    /// Causal self-attention.
    pub attn: CausalSelfAttention,
    /// LayerNorm before the MLP.
    pub ln_2: LayerNorm,
    /// The MLP.
    pub mlp: FeedForward,
    /// Under sequence parallelism, the group whose ranks each hold a range of the sequence:
    /// the norms run on it.
    #[module(skip)]
    sp: Option<Arc<ProcessGroup>>,
}

/// Multi-head causal self-attention.
#[derive(Module, Debug)]
pub struct CausalSelfAttention {
    /// Query projection, Linear(d, d): heads by columns.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Output projection, Linear(d, d): heads by rows.
    pub proj: Linear,
    attn_drop: Dropout,
    resid_drop: Dropout,
    /// The heads this rank computes (all of them without tensor parallelism).
    heads: usize,
    /// The tensor-parallel group the block's projections are split on.
    #[module(skip)]
    tp: Option<Arc<ProcessGroup>>,
    /// Whether its input and output are sequence shards.
    #[module(skip)]
    sequence_parallel: bool,
}

/// The block's MLP: Linear(d, 4d) GELU Linear(4d, d).
#[derive(Module, Debug)]
pub struct FeedForward {
    /// Linear(d, 4d).
    pub fc: Linear,
    /// Linear(4d, d).
    pub proj: Linear,
    drop: Dropout,
    /// The tensor-parallel group the MLP is split on.
    #[module(skip)]
    tp: Option<Arc<ProcessGroup>>,
    /// Whether its input and output are sequence shards.
    #[module(skip)]
    sequence_parallel: bool,
}

impl Gpt {
    /// Builds the model on `device` with every parameter undrawn: Burn's initialisers (GPT-2's
    /// normal of std 0.02, the residual projections scaled by depth), each drawing at the
    /// parameter's first use from the device's generator seeded with `seed` and the
    /// parameter's position (Note [Deferred init] in `model/deferred.rs`), so that a rank draws
    /// only the piece it keeps, and every piece equals the whole build's. Panics on a shape
    /// that [`GptConfig::check`] refuses.
    pub fn new(config: &GptConfig, seed: u64, device: &Device) -> Gpt {
        super::deferred::with_deferred_init(Gpt::undrawn(config, device), seed)
    }

    /// The model with Burn's initialisers, undrawn.
    fn undrawn(config: &GptConfig, device: &Device) -> Gpt {
        config.check().expect("a checked GPT config");
        let d = config.d_model;
        let drop = || DropoutConfig::new(config.dropout).init();
        let normal = |std: f64| Initializer::Normal { mean: 0.0, std };
        let residual = STD / (2.0 * config.depth as f64).sqrt();
        let linear_std = |i, o, std| {
            let mut l = LinearConfig::new(i, o)
                .with_initializer(normal(std))
                .init(device);
            l.bias = Some(Param::from_tensor(Tensor::zeros([o], device)));
            l
        };
        let linear = |i, o| linear_std(i, o, STD);
        let norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(LN_EPSILON)
                .init(device)
        };
        let embedding = |n| {
            EmbeddingConfig::new(n, d)
                .with_initializer(normal(STD))
                .init(device)
        };
        Gpt {
            wte: Some(embedding(config.vocab)),
            wpe: Some(embedding(config.seq_len)),
            blocks: (0..config.depth)
                .map(|_| {
                    FullyShard::new(Block {
                        ln_1: norm(),
                        attn: CausalSelfAttention {
                            query: linear(d, d),
                            key: linear(d, d),
                            value: linear(d, d),
                            proj: linear_std(d, d, residual),
                            attn_drop: drop(),
                            resid_drop: drop(),
                            heads: config.heads,
                            tp: None,
                            sequence_parallel: false,
                        },
                        ln_2: norm(),
                        mlp: FeedForward {
                            fc: linear(d, 4 * d),
                            proj: linear_std(4 * d, d, residual),
                            drop: drop(),
                            tp: None,
                            sequence_parallel: false,
                        },
                        sp: None,
                    })
                })
                .collect(),
            ln_f: Some(norm()),
            head: Some(
                LinearConfig::new(d, config.vocab)
                    .with_bias(false)
                    .with_initializer(normal(STD))
                    .init(device),
            ),
            drop: drop(),
            seq_len: config.seq_len,
            tp: None,
            sequence_parallel: false,
            chunks: Vec::new(),
            device: device.clone(),
        }
    }

    /// This rank's piece of the model under tensor parallelism on `group` (the module's
    /// notes), with the residual stream split along the sequence when `sequence_parallel`
    /// (Note [Sequence parallelism in the GPT]): every rank passes the same whole model.
    /// Refused, naming the numbers, when the group's size does not divide the heads (or the
    /// sequence).
    pub fn tensor_parallel(
        self,
        group: Arc<ProcessGroup>,
        sequence_parallel: bool,
    ) -> Result<Gpt, String> {
        let (rank, n) = (group.rank(), group.world_size());
        let cut = |e: phalanx_tensor_parallel::Error| format!("--tp {n}: {e}");
        if sequence_parallel && !self.seq_len.is_multiple_of(n) {
            return Err(format!(
                "--sequence-parallel splits each window's --seq-len {} positions among the {n} \
                 ranks of --tp {n}; it must be a multiple of {n}",
                self.seq_len
            ));
        }
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for unit in self.blocks {
            let Block {
                ln_1,
                attn,
                ln_2,
                mlp,
                sp: _,
            } = unit.block().clone();
            if !attn.heads.is_multiple_of(n) {
                return Err(format!(
                    "--tp {n} splits each block's attention heads among {n} ranks, but \
                     --heads {} is not a multiple of {n}",
                    attn.heads
                ));
            }
            let attn = CausalSelfAttention {
                query: ColwiseParallel::shard(attn.query, rank, n).map_err(cut)?,
                key: ColwiseParallel::shard(attn.key, rank, n).map_err(cut)?,
                value: ColwiseParallel::shard(attn.value, rank, n).map_err(cut)?,
                proj: RowwiseParallel::shard(attn.proj, rank, n).map_err(cut)?,
                attn_drop: attn.attn_drop,
                resid_drop: attn.resid_drop,
                heads: attn.heads / n,
                tp: Some(group.clone()),
                sequence_parallel,
            };
            let mlp = FeedForward {
                fc: ColwiseParallel::shard(mlp.fc, rank, n).map_err(cut)?,
                proj: RowwiseParallel::shard(mlp.proj, rank, n).map_err(cut)?,
                drop: mlp.drop,
                tp: Some(group.clone()),
                sequence_parallel,
            };
            blocks.push(FullyShard::new(Block {
                ln_1,
                attn,
                ln_2,
                mlp,
                sp: sequence_parallel.then(|| group.clone()),
            }));
        }
        Ok(Gpt {
            wte: self
                .wte
                .map(|wte| VocabParallelEmbedding::shard(wte, rank, n))
                .transpose()
                .map_err(cut)?,
            head: self
                .head
                .map(|head| ColwiseParallel::shard(head, rank, n))
                .transpose()
                .map_err(cut)?,
            blocks,
            tp: Some(group.clone()),
            sequence_parallel,
            ..self
        })
    }

    /// Where each float parameter is on the tensor-parallel group, in canonical order: a
    /// column-split weight on its axis 1 (Burn's `[d_input, d_output]`) and bias on axis 0, a
    /// row-split weight on axis 0, everything else whole.
    pub fn placements(&self) -> Vec<Placement> {
        struct Walk {
            path: Vec<String>,
            placements: Vec<Placement>,
        }
        impl ModuleVisitor for Walk {
            fn enter_module(&mut self, name: &str, _container_type: &str) {
                self.path.push(name.to_string());
            }
            fn exit_module(&mut self, _name: &str, _container_type: &str) {
                self.path.pop();
            }
            fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
                let path = self.path.join(".");
                let columns = ["attn.query", "attn.key", "attn.value", "mlp.fc"];
                let rows = ["attn.proj", "mlp.proj"];
                let under = |layers: &[&str], leaf: &str| {
                    layers
                        .iter()
                        .any(|l| path.ends_with(&format!("{l}.{leaf}")))
                };
                self.placements
                    .push(if under(&columns, "weight") || path == "head.weight" {
                        Placement::Shard(1)
                    } else if under(&columns, "bias")
                        || under(&rows, "weight")
                        || path == "wte.weight"
                    {
                        Placement::Shard(0)
                    } else {
                        Placement::Replicate
                    });
            }
        }
        let mut walk = Walk {
            path: Vec::new(),
            placements: Vec::new(),
        };
        self.visit(&mut walk);
        walk.placements
    }

    /// The logits `[batch, seq, vocab]` of token ids `[batch, seq]` (`seq` ≤ the model's).
    /// The whole model's (not a pipeline stage's: [`Classifier::stage_forward`]).
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let x = self.embed(tokens);
        let x = self.run_blocks(0..self.blocks.len(), x);
        self.finish(x)
    }

    /// The embeddings of token ids `[batch, seq]`, with dropout.
    fn embed(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let (Some(wte), Some(wpe)) = (&self.wte, &self.wpe) else {
            panic!("only the first pipeline stage embeds tokens");
        };
        let [_, seq] = tokens.dims();
        let device = tokens.device();
        let arange = |r: std::ops::Range<usize>| {
            let len = r.len();
            Tensor::<1, Int>::arange(r.start as i64..r.end as i64, &device).reshape([1, len])
        };
        match (&self.tp, self.sequence_parallel) {
            (Some(group), true) => {
                // This rank's positions of the embeddings (Note [Sequence parallelism in the
                // GPT]); the position table is whole, and each rank's positions give a part
                // of its gradient.
                let mine = SequenceParallel::range(seq, group)
                    .unwrap_or_else(|e| panic!("--sequence-parallel: {e}"));
                let embedded = VocabParallelEmbedding::forward_to_shards(wte, tokens, group);
                let table = enter(wpe.weight.val(), group);
                let placed = embedded + embedding(table, arange(mine));
                SequenceParallel::dropout(&self.drop, placed, group)
            }
            (Some(group), false) => self.drop.forward(
                VocabParallelEmbedding::forward(wte, tokens, group) + wpe.forward(arange(0..seq)),
            ),
            (None, _) => self
                .drop
                .forward(wte.forward(tokens) + wpe.forward(arange(0..seq))),
        }
    }

    /// `x` through the blocks `range` (indices of `blocks`).
    fn run_blocks(&self, range: std::ops::Range<usize>, x: Tensor<3>) -> Tensor<3> {
        self.blocks[range]
            .iter()
            .fold(x, |x, block| block.forward(x, |b: &Block, x| b.forward(x)))
    }

    /// The final norm and the head: the logits (this rank's columns under tensor parallelism,
    /// its range of the vocabulary).
    fn finish(&self, x: Tensor<3>) -> Tensor<3> {
        let (Some(ln_f), Some(head)) = (&self.ln_f, &self.head) else {
            panic!("only the last pipeline stage has the head");
        };
        match (&self.tp, self.sequence_parallel) {
            (Some(group), true) => {
                let x = SequenceParallel::layer_norm(ln_f, LN_EPSILON, x, group);
                ColwiseParallel::forward_from_shards(head, x, group)
            }
            (Some(group), false) => ColwiseParallel::forward(head, ln_f.forward(x), group),
            (None, _) => head.forward(ln_f.forward(x)),
        }
    }

    /// Logits `[batch, seq, vocab]` flattened to the classifier's rows `[batch · seq, vocab]`.
    fn rows(logits: Tensor<3>) -> Tensor<2> {
        let [batch, seq, vocab] = logits.dims();
        logits.reshape([batch * seq, vocab])
    }

    /// The token ids a window of `seq_len + 1` reads: its first `seq_len`.
    fn tokens(&self, input: Tensor<2>) -> Tensor<2, Int> {
        let [batch, _] = input.dims();
        input.slice([0..batch, 0..self.seq_len]).int()
    }
}

impl Block {
    /// `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let norm = |ln: &LayerNorm, x: Tensor<3>| match &self.sp {
            Some(group) => SequenceParallel::layer_norm(ln, LN_EPSILON, x, group),
            None => ln.forward(x),
        };
        let x = x.clone() + self.attn.forward(norm(&self.ln_1, x));
        x.clone() + self.mlp.forward(norm(&self.ln_2, x))
    }
}

impl CausalSelfAttention {
    /// Attention of `[batch, seq, d]` over itself, each position seeing itself and the ones
    /// before it.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        // One `f` (or one all-gather of the sequence shards) for the three projections: their
        // input's gradient is summed once.
        let x = match (&self.tp, self.sequence_parallel) {
            (Some(group), true) => gather_sequence(x, group),
            (Some(group), false) => copy_to_region(x, group),
            (None, _) => x,
        };
        let [batch, seq, _] = x.dims();
        // This rank's heads: the local width of the projections.
        let width = self.query.weight.dims()[1];
        let d_head = width / self.heads;
        let split = |t: Tensor<3>| t.reshape([batch, seq, self.heads, d_head]).swap_dims(1, 2);
        let q = split(self.query.forward(x.clone()));
        let k = split(self.key.forward(x.clone()));
        let v = split(self.value.forward(x));
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .div_scalar((d_head as f32).sqrt());
        // Burn's lower-triangle mask is true above the diagonal (what is not in the lower
        // triangle): the later positions, which a position must not attend to.
        let future =
            Tensor::<2, Bool>::tril_mask([seq, seq], 0, &scores.device()).reshape([1, 1, seq, seq]);
        let weights = self.drop_weights(softmax(scores.mask_fill(future, -1.0e9), 3));
        let context = weights
            .matmul(v)
            .swap_dims(1, 2)
            .reshape([batch, seq, width]);
        match (&self.tp, self.sequence_parallel) {
            (Some(group), true) => SequenceParallel::dropout(
                &self.resid_drop,
                RowwiseParallel::forward_to_shards(&self.proj, context, group),
                group,
            ),
            (Some(group), false) => self
                .resid_drop
                .forward(RowwiseParallel::forward(&self.proj, context, group)),
            (None, _) => self.resid_drop.forward(self.proj.forward(context)),
        }
    }
}

impl CausalSelfAttention {
    /// Dropout of the attention weights `[batch, heads here, seq, seq]` (Note [Dropout under
    /// tensor parallelism]).
    fn drop_weights(&self, weights: Tensor<4>) -> Tensor<4> {
        match &self.tp {
            // By heads: axis 1.
            Some(group) => dropout_of_shard(&self.attn_drop, weights, 1, group),
            None => self.attn_drop.forward(weights),
        }
    }
}

impl FeedForward {
    /// Linear(d, 4d) GELU Linear(4d, d), then dropout.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        match (&self.tp, self.sequence_parallel) {
            (Some(group), true) => {
                let h = gelu(ColwiseParallel::forward_from_shards(&self.fc, x, group));
                let out = RowwiseParallel::forward_to_shards(&self.proj, h, group);
                SequenceParallel::dropout(&self.drop, out, group)
            }
            (Some(group), false) => {
                let h = gelu(ColwiseParallel::forward(&self.fc, x, group));
                self.drop
                    .forward(RowwiseParallel::forward(&self.proj, h, group))
            }
            (None, _) => self
                .drop
                .forward(self.proj.forward(gelu(self.fc.forward(x)))),
        }
    }
}

impl Classifier for Gpt {
    /// A window of `seq_len + 1` token ids (Note [Language model as a classifier]).
    fn input_dim(&self) -> usize {
        self.seq_len + 1
    }

    /// Always: [`Gpt::new`] builds it with deferred init.
    fn deferred_init(&self) -> bool {
        true
    }

    /// As many windows as hold `EVAL_POSITIONS` positions (Note [Evaluation chunks]).
    fn eval_rows(&self) -> usize {
        (EVAL_POSITIONS / self.seq_len.max(1)).clamp(1, crate::model::classifier::EVAL_ROWS)
    }

    /// `[batch * seq_len, vocab]`: position `t` of each window scored for token `t + 1`.
    fn logits(&self, input: Tensor<2>) -> Tensor<2> {
        Gpt::rows(self.forward(self.tokens(input)))
    }

    /// Each window's tokens after the first, `[batch * seq_len]`.
    fn targets(&self, input: Tensor<2>, _labels: Tensor<1, Int>) -> Tensor<1, Int> {
        let [batch, dim] = input.dims();
        input
            .slice([0..batch, 1..dim])
            .int()
            .reshape([batch * self.seq_len])
    }

    /// Where the parameters are: after `valid()` the device without autodiff, so that an
    /// evaluation builds no graph. (The device the model was built on kept the autodiff one:
    /// a fully sharded block then ran each evaluation forward as a node of a graph no backward
    /// ever consumed, and Burn kept every such node, saved input included: `--sharding full`
    /// grew by a block's activations per block forward of the validation pass, to 3 GB per
    /// rank at d 512 × 4.)
    fn device(&self) -> Device {
        self.devices()
            .into_iter()
            .next()
            .unwrap_or_else(|| self.device.clone())
    }

    fn tensor_parallel(
        self,
        group: Arc<ProcessGroup>,
        sequence_parallel: bool,
    ) -> Result<Self, String> {
        Gpt::tensor_parallel(self, group, sequence_parallel)
    }

    /// Under tensor parallelism, from this rank's columns of the logits without gathering
    /// them (Note [Vocabulary parallelism] in phalanx-tensor-parallel).
    fn loss(&self, logits: Tensor<2>, targets: Tensor<1, Int>) -> crate::Result<Tensor<1>> {
        match &self.tp {
            Some(group) => Ok(loss_parallel(logits, targets, group)?),
            None => Ok(cross_entropy(logits, targets)),
        }
    }

    fn predictions(&self, logits: Tensor<2>) -> crate::Result<Tensor<1, Int>> {
        match &self.tp {
            Some(group) => Ok(argmax_parallel(logits, group)?),
            None => Ok(argmax(logits)),
        }
    }

    fn placements(&self) -> Vec<Placement> {
        Gpt::placements(self)
    }

    /// The embeddings on the first stage, the final norm and the head on the last.
    fn pipeline_costs(&self) -> Option<PipelineCosts> {
        // A part a stage does not hold (`None`) has no parameters.
        Some(PipelineCosts {
            first: self.wte.num_params() + self.wpe.num_params(),
            blocks: self.blocks.iter().map(Module::num_params).collect(),
            last: self.ln_f.num_params() + self.head.num_params(),
        })
    }

    fn pipeline_stage(
        self,
        chunks: &[std::ops::Range<usize>],
        first: bool,
        last: bool,
    ) -> Result<Self, String> {
        let depth = self.blocks.len();
        if let Some(bad) = chunks.iter().find(|r| r.is_empty() || r.end > depth) {
            return Err(format!(
                "--pp: blocks {}..{} are not a stage of a model of {depth} blocks",
                bad.start, bad.end
            ));
        }
        let mut local = Vec::with_capacity(chunks.len());
        let mut blocks = Vec::new();
        let mut whole: Vec<Option<FullyShard<Block>>> = self.blocks.into_iter().map(Some).collect();
        for range in chunks {
            let start = blocks.len();
            for i in range.clone() {
                blocks.push(
                    whole[i].take().ok_or_else(|| {
                        format!("--pp: block {i} is in two of this rank's chunks")
                    })?,
                );
            }
            local.push(start..blocks.len());
        }
        Ok(Gpt {
            wte: self.wte.filter(|_| first),
            wpe: self.wpe.filter(|_| first),
            ln_f: self.ln_f.filter(|_| last),
            head: self.head.filter(|_| last),
            blocks,
            chunks: local,
            ..self
        })
    }

    fn stage_forward(
        &self,
        chunk: usize,
        input: Tensor<2>,
        received: Option<Tensor<3>>,
    ) -> crate::Result<StageOutput> {
        let Some(range) = self.chunks.get(chunk) else {
            return Err(crate::Error::Config(format!(
                "--pp: this rank has {} chunk(s), not chunk {chunk}",
                self.chunks.len()
            )));
        };
        let x = match received {
            Some(x) => x,
            None => self.embed(self.tokens(input)),
        };
        let x = self.run_blocks(range.clone(), x);
        Ok(
            match self.head.is_some() && chunk + 1 == self.chunks.len() {
                true => StageOutput::Logits(Gpt::rows(self.finish(x))),
                false => StageOutput::Hidden(x),
            },
        )
    }

    /// Per chunk: its blocks' tensors, with the embeddings' on the first stage and the norm's
    /// and the head's on the last.
    fn chunk_tensors(&self) -> Vec<usize> {
        let n = self.chunks.len();
        self.chunks
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut count: usize = self.blocks[r.clone()].iter().map(float_tensors).sum();
                if i == 0 {
                    count += float_tensors(&self.wte) + float_tensors(&self.wpe);
                }
                if i + 1 == n {
                    count += float_tensors(&self.ln_f) + float_tensors(&self.head);
                }
                count
            })
            .collect()
    }
}

/// The float tensors of a module (none for a part a stage does not hold).
fn float_tensors<M: Module>(module: &M) -> usize {
    phalanx_ddp::adapter::burn::state_infos(module)
        .iter()
        .filter(|s| s.kind.is_float())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;

    fn tiny() -> GptConfig {
        GptConfig {
            vocab: 256,
            seq_len: 8,
            d_model: 16,
            depth: 2,
            heads: 4,
            dropout: 0.0,
        }
    }

    #[test]
    fn shapes_and_parameter_count() {
        let device = Device::flex();
        let config = tiny();
        let model = Gpt::new(&config, 0, &device);
        assert_eq!(model.num_params(), config.num_params());
        let input = Tensor::<2>::from_floats([[1.0; 9], [2.0; 9]], &device);
        assert_eq!(model.logits(input.clone()).dims(), [16, 256]);
        let labels = Tensor::<1, Int>::zeros([2], &device);
        assert_eq!(model.targets(input, labels).dims(), [16]);
    }

    /// Draws every parameter of `model`, last first.
    struct Backwards(Vec<Box<dyn Fn()>>);

    impl burn::module::ModuleVisitor for Backwards {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            let param = param.clone();
            self.0.push(Box::new(move || drop(param.val())));
        }
    }

    /// Note [Deferred init]: a parameter's values are its own, whatever was drawn before it,
    /// so a rank drawing only its piece draws the whole build's values.
    #[test]
    fn each_parameter_draws_its_own_values_in_any_order() {
        let device = Device::flex();
        let flat = |m: &Gpt| phalanx_ddp::adapter::burn::params_to_flat(m).unwrap();
        let forwards = Gpt::new(&tiny(), 7, &device);
        let backwards = Gpt::new(&tiny(), 7, &device);
        let mut draws = Backwards(Vec::new());
        backwards.visit(&mut draws);
        assert!(draws.0.len() > 4);
        // Some other draws on the device's generator in between change nothing.
        device.seed(99);
        let _ = Tensor::<1>::random([1000], burn::tensor::Distribution::Default, &device);
        for draw in draws.0.iter().rev() {
            draw();
        }
        assert_eq!(flat(&backwards), flat(&forwards));
        assert_ne!(flat(&Gpt::new(&tiny(), 8, &device)), flat(&forwards));
    }

    /// An evaluation (on `valid()`) builds no autodiff graph: its inputs go where the
    /// parameters are, off autodiff (a fully sharded block otherwise leaves a graph node per
    /// forward that no backward consumes).
    #[test]
    fn an_evaluation_copy_is_off_autodiff() {
        let device = Device::flex().autodiff();
        let model = Gpt::new(&tiny(), 0, &device);
        assert!(model.device().is_autodiff());
        assert!(!model.valid().device().is_autodiff());
    }

    #[test]
    fn a_position_never_sees_a_later_token() {
        let device = Device::flex();
        let model = Gpt::new(&tiny(), 0, &device);
        let a = Tensor::<2, Int>::from_ints([[5, 6, 7, 8, 9, 10, 11, 12]], &device);
        let b = Tensor::<2, Int>::from_ints([[5, 6, 7, 8, 99, 98, 97, 96]], &device);
        let (la, lb) = (model.forward(a), model.forward(b));
        let first = |t: Tensor<3>| t.slice([0..1, 0..4, 0..256]).into_data();
        first(la.clone()).assert_eq(&first(lb.clone()), true);
        let later = |t: Tensor<3>| t.slice([0..1, 4..5, 0..256]).into_data();
        assert_ne!(later(la), later(lb));
    }

    #[test]
    fn bad_shapes_are_named() {
        let mut c = tiny();
        c.heads = 3;
        let err = c.check().unwrap_err();
        assert!(
            err.contains("--heads 3 does not divide --hidden 16"),
            "{err}"
        );
        c.heads = 0;
        assert!(c.check().unwrap_err().contains("at least 1"));
    }
}
