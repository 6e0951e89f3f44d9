//! The models `phalanx train` trains, and what the trainer needs of any model
//! ([`Classifier`]): a Burn module that maps a batch of flat feature rows to logits.
//!
//! Note [Stable parameter ids]
//! The optimizer keys its state (momentum, Adam's moments) by Burn's `ParamId`, which is random
//! per process. A checkpoint's optimizer state must map onto the same parameters in the process
//! that resumes it, so every model's float parameters get ids from their position in canonical
//! order ([`with_stable_ids`]): the first is 1, the next 2, and so on.

mod classifier;
mod cnn;
pub(crate) mod deferred;
mod gpt;
mod mlp;
mod transformer;

use burn::module::{Module, ModuleMapper, Param, ParamId};
use burn::tensor::{Device, Tensor};

pub use classifier::{Classifier, PipelineCosts, StageOutput};
pub use cnn::Cnn;
pub use deferred::with_deferred_init;
pub use gpt::{Block, CausalSelfAttention, FeedForward, Gpt, GptConfig};
pub use mlp::{Mlp, MlpConfig};
pub use transformer::{Encoder, Transformer};

use crate::{Error, Result};

/// Which model `phalanx train --model` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelKind {
    /// The seed MLP (`--hidden`, `--depth`).
    #[default]
    Mlp,
    /// The CNN on 1×28×28 images ([`Cnn`]).
    Cnn,
    /// The row-token transformer on 28×28 images ([`Transformer`]).
    Transformer,
    /// The GPT-style decoder language model on a text corpus ([`Gpt`]).
    Gpt,
}

impl ModelKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
            ModelKind::Transformer => "transformer",
            ModelKind::Gpt => "gpt",
        }
    }

    /// Whether the model reads text (windows of tokens: `phalanx_data::load_text`) rather
    /// than feature rows (`phalanx_data::load`).
    pub fn reads_text(self) -> bool {
        self == ModelKind::Gpt
    }

    /// Checks that the dataset's samples fit this model: the image models need 28×28 images.
    pub fn check_input(self, dataset: &str, dim: usize) -> Result<()> {
        let side = cnn::SIDE;
        if matches!(self, ModelKind::Cnn | ModelKind::Transformer) && dim != side * side {
            return Err(Error::Config(format!(
                "--model {} takes 1×{side}×{side} images ({} features per sample), but --dataset \
                 {dataset} has {dim}: use --dataset mnist5k or mnist-idx:DIR",
                self.name(),
                side * side,
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ModelKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mlp" => Ok(ModelKind::Mlp),
            "cnn" => Ok(ModelKind::Cnn),
            "transformer" => Ok(ModelKind::Transformer),
            "gpt" => Ok(ModelKind::Gpt),
            _ => Err(format!(
                "unknown model {s:?}: expected mlp, cnn, transformer or gpt"
            )),
        }
    }
}

/// What a model is built from: the data's shape, the MLP's or the GPT's sizes, the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelSpec {
    /// Which model.
    pub kind: ModelKind,
    /// Features per sample.
    pub input: usize,
    /// Classes.
    pub classes: usize,
    /// The MLP's hidden width; the GPT's d_model.
    pub hidden: usize,
    /// The MLP's hidden layers; the GPT's blocks.
    pub depth: usize,
    /// The GPT's attention heads.
    pub heads: usize,
    /// The GPT's dropout probability.
    pub dropout: f64,
    /// Seed of the initialisation.
    pub seed: u64,
}

impl ModelSpec {
    /// The GPT this spec describes: a window of `input` tokens is `seq_len + 1` of them, and
    /// the classes are the vocabulary.
    pub fn gpt(&self) -> GptConfig {
        GptConfig {
            vocab: self.classes,
            seq_len: self.input.saturating_sub(1),
            d_model: self.hidden,
            depth: self.depth,
            heads: self.heads,
            dropout: self.dropout,
        }
    }
}

/// Something to do with a freshly built model, whatever its type: the generic half of
/// [`with_model`] (a closure cannot be generic over the model type).
pub trait WithModel {
    /// What it returns.
    type Output;
    /// Runs with the model.
    fn run<M: Classifier>(self, model: M) -> Self::Output;
}

/// Builds the model `spec` describes on `device`, with stable parameter ids (Note [Stable
/// parameter ids]), and hands it to `then`. The MLP draws from `spec.seed` itself; the others use
/// Burn's initialisers on the device's generator, seeded with `spec.seed`.
/// (Whether the data fits the model is the trainer's check: [`ModelKind::check_input`].)
pub fn with_model<W: WithModel>(spec: &ModelSpec, device: &Device, then: W) -> W::Output {
    match spec.kind {
        ModelKind::Mlp => {
            let config = MlpConfig::seed(spec.input, spec.classes)
                .with_hidden(spec.hidden)
                .with_depth(spec.depth);
            then.run(with_stable_ids(Mlp::new(&config, spec.seed, device)))
        }
        ModelKind::Cnn => {
            device.seed(spec.seed);
            then.run(with_stable_ids(Cnn::new(spec.classes, device)))
        }
        ModelKind::Transformer => {
            device.seed(spec.seed);
            then.run(with_stable_ids(Transformer::new(spec.classes, device)))
        }
        ModelKind::Gpt => then.run(Gpt::new(&spec.gpt(), spec.seed, device)),
    }
}

/// Gives every float parameter of `module` the id of its position (Note [Stable parameter ids]).
pub fn with_stable_ids<M: Module>(module: M) -> M {
    let mut mapper = StableIds { next: 1 };
    module.map(&mut mapper)
}

struct StableIds {
    next: u64,
}

impl ModuleMapper for StableIds {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (_, value, mapper) = param.consume();
        let id = ParamId::from(self.next);
        self.next += 1;
        Param::from_mapped_value(id, value, mapper)
    }
}

/// Freezes (`require_grad(false)`) the float parameters whose module path matches one of the
/// comma-separated `patterns`: a glob where `*` matches any run of characters, or a path prefix
/// ending at a `.` (`conv1` freezes `conv1.weight` and `conv1.bias`). Returns the module and
/// the frozen paths; a pattern that matches nothing is an error naming it and the paths there are.
pub fn freeze_matching<M: Module>(module: M, patterns: &str) -> Result<(M, Vec<String>)> {
    let patterns: Vec<&str> = patterns
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let mut freezer = Freezer {
        path: Vec::new(),
        patterns: &patterns,
        hits: vec![0; patterns.len()],
        frozen: Vec::new(),
        seen: Vec::new(),
    };
    let module = module.map(&mut freezer);
    if let Some(k) = freezer.hits.iter().position(|&h| h == 0) {
        return Err(Error::Config(format!(
            "--freeze {:?} matches no parameter; the model's parameters are: {}",
            patterns[k],
            freezer.seen.join(", ")
        )));
    }
    Ok((module, freezer.frozen))
}

struct Freezer<'a> {
    path: Vec<String>,
    patterns: &'a [&'a str],
    hits: Vec<usize>,
    frozen: Vec<String>,
    seen: Vec<String>,
}

impl ModuleMapper for Freezer<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let path = self.path.join(".");
        // Buffers (running statistics) need no gradient to begin with; only parameters count.
        if !param.is_require_grad() {
            return param;
        }
        self.seen.push(path.clone());
        let mut matched = false;
        for (k, pattern) in self.patterns.iter().enumerate() {
            if path_matches(pattern, &path) {
                self.hits[k] += 1;
                matched = true;
            }
        }
        if !matched {
            return param;
        }
        self.frozen.push(path);
        param.set_require_grad(false)
    }
}

/// Whether `path` matches `pattern` (see [`freeze_matching`]).
fn path_matches(pattern: &str, path: &str) -> bool {
    if !pattern.contains('*') {
        return path == pattern
            || path
                .strip_prefix(pattern)
                .is_some_and(|rest| rest.starts_with('.'));
    }
    glob(pattern.as_bytes(), path.as_bytes())
}

/// `*`-only glob matching, iterative with backtracking to the last star.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_paths_prefixes_and_globs() {
        assert!(path_matches("conv1", "conv1.weight"));
        assert!(path_matches("conv1.weight", "conv1.weight"));
        assert!(!path_matches("conv1", "conv10.weight"));
        assert!(path_matches(
            "encoder.layers.*.mha.*",
            "encoder.layers.0.mha.query.weight"
        ));
        assert!(path_matches("*.bias", "fc1.bias"));
        assert!(!path_matches("*.bias", "fc1.weight"));
        assert!(path_matches("*", "anything"));
    }

    #[test]
    fn freezing_names_a_pattern_that_matches_nothing() {
        let device = burn::tensor::Device::flex().autodiff();
        let mlp = Mlp::new(&MlpConfig::seed(4, 2), 0, &device);
        let err = freeze_matching(mlp.clone(), "layers.0,conv9")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"conv9\" matches no parameter"), "{err}");
        assert!(err.contains("layers.1.bias"), "{err}");
        let (frozen, paths) = freeze_matching(mlp, "layers.0").unwrap();
        assert_eq!(paths, ["layers.0.weight", "layers.0.bias"]);
        assert!(!frozen.layers[0].block().weight.is_require_grad());
        assert!(frozen.layers[1].block().weight.is_require_grad());
    }
}
