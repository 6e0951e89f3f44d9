//! The tensor-library adapter: everything phalanx needs from a deep-learning framework, in one
//! place, so that DDP itself only sees names, shapes and flat `f32` buffers.
//!
//! An adapter provides, for a model:
//! - its float parameters in a canonical order with their names and shapes ([`ParamInfo`]);
//! - a way to copy each parameter's gradient into a flat `f32` buffer after backward, and to hand
//!   averaged flat gradients back to the framework's optimizer;
//! - a way to read and overwrite all parameter values as flat `f32` buffers (the init broadcast,
//!   checkpoints and digests).
//!
//! [`burn`] implements it for Burn 0.22. A Candle adapter would be a sibling `candle.rs` with the
//! same functions over `candle_nn::VarMap` (names are its keys, gradients come from `GradStore`).

pub mod burn;
#[cfg(all(feature = "cuda", feature = "nccl"))]
pub(crate) mod cuda;
pub(crate) mod device_buckets;
pub(crate) mod shard;
pub(crate) mod unit_op;

/// Name and shape of one float parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParamInfo {
    /// Module path, fields joined by `.` (`layers.0.weight`).
    pub name: String,
    /// Dimensions in the framework's storage layout.
    pub shape: Vec<usize>,
}

/// What a tensor of a module is to DDP (Note [Parameters, buffers and frozen] in `burn.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// A float parameter that takes gradients: it travels in buckets.
    Trainable,
    /// A float parameter that takes none (frozen): broadcast once, never updated by DDP.
    Frozen,
    /// A float buffer (BatchNorm's running statistics): synchronised after every step.
    Buffer,
    /// An int tensor, with its dtype: broadcast once.
    Int(String),
    /// A bool tensor, with its dtype: broadcast once.
    Bool(String),
}

impl StateKind {
    /// Whether the tensor is a float one (trainable, frozen or buffer).
    pub fn is_float(&self) -> bool {
        matches!(
            self,
            StateKind::Trainable | StateKind::Frozen | StateKind::Buffer
        )
    }
}

/// Name, shape and kind of one tensor of a module.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateInfo {
    /// Name and shape.
    pub info: ParamInfo,
    /// What it is to DDP.
    pub kind: StateKind,
}

impl std::fmt::Display for StateInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            StateKind::Trainable => "parameter".to_string(),
            StateKind::Frozen => "frozen parameter".to_string(),
            StateKind::Buffer => "buffer".to_string(),
            StateKind::Int(dtype) => format!("int tensor {dtype}"),
            StateKind::Bool(dtype) => format!("bool tensor {dtype}"),
        };
        write!(f, "{} {:?} ({kind})", self.info.name, self.info.shape)
    }
}

impl ParamInfo {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}
