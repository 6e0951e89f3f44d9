//! [`FullyShard`]: a block of a model that, under `--sharding full`, holds only this rank's
//! shard of its parameters and gathers them just for its own forward and backward (FSDP2's
//! `fully_shard(layer)`).
//!
//! Burn has no module hooks, so the wrapper is a module type the model holds in place of the
//! block, and its [`forward`](FullyShard::forward) runs the block's forward as one operation
//! of Burn's autodiff graph (Note [Unit operation] in `adapter/unit_op.rs`). It is
//! transparent everywhere else: the block's tensors keep their names (`layers.0.weight`, not
//! `layers.0.block.weight`), so checkpoints, the agreement check, `--freeze` and PyTorch's
//! state dicts see the block's own names, and under DDP or without a process group it is the
//! block itself.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

use burn::module::{
    Content, Devices, Module, ModuleDisplay, ModuleDisplayDefault, ModuleMapper, ModuleVisitor,
    Param,
};
use burn::tensor::{Device, Tensor};

use super::unit::UnitState;
use crate::adapter::unit_op::{unit_forward, UnitComm};

/// Where the engine puts a wrapper's unit when it shards the model; shared by the wrapper's
/// clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnitSlot(Arc<Mutex<Option<Arc<UnitState>>>>);

impl UnitSlot {
    pub(crate) fn get(&self) -> Option<Arc<UnitState>> {
        self.0.lock().expect("not poisoned").clone()
    }

    pub(crate) fn set(&self, unit: Option<Arc<UnitState>>) {
        *self.0.lock().expect("not poisoned") = unit;
    }

    pub(crate) fn same(&self, other: &UnitSlot) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

thread_local! {
    /// The wrappers around the tensors being visited now, innermost last: how the engine
    /// learns which tensors belong to which block without renaming any of them.
    static VISITING: RefCell<Vec<UnitSlot>> = const { RefCell::new(Vec::new()) };
    /// The step's seed ([`seed_step`]) and how many block forwards have run since.
    static STEP: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

// Note [Block seeds]
// A fully sharded block recomputes its forward in backward (Note [Unit operation]), so its
// dropout must draw the same masks twice, and Burn's generator has no state to save and
// restore: the block seeds it. For the seeding not to change the run against DDP, both do the
// same: [`seed_step`] seeds the device at the start of each step, and every block's forward,
// sharded or not, seeds it with a value derived from the step's seed and the block's place
// in the step before its forward, and with another one after. The random draws of a step
// are then a function of the step's seed alone, whatever the sharding mode, and the
// recomputation draws the same masks. (Without `seed_step`, an unsharded block leaves the
// generator alone, and a sharded one seeds it from its own counter: correct, reproducible,
// not DDP's draws.)

/// Seeds `device`'s generator for one training step and restarts the count of block forwards
/// (Note [Block seeds]): call it at the start of every step, with the same seed on every
/// rank, for a model with [`FullyShard`] blocks and dropout to draw the same masks under
/// every sharding mode, DDP's included.
pub fn seed_step(device: &Device, seed: u64) {
    device.seed(seed);
    STEP.with(|s| s.set(Some((seed, 0))));
}

/// The seeds before and after this block forward of the step, if the step has one.
fn block_seeds() -> Option<(u64, u64)> {
    STEP.with(|s| {
        let (seed, k) = s.get()?;
        s.set(Some((seed, k + 1)));
        let mix = |i: u64| {
            let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Some((mix(2 * k + 1), mix(2 * k + 2)))
    })
}

/// The wrapper being visited now, if any (and whether wrappers nest).
pub(crate) fn visiting() -> (Option<UnitSlot>, bool) {
    VISITING.with(|v| {
        let v = v.borrow();
        (v.last().cloned(), v.len() > 1)
    })
}

/// A block of a model, fully sharded under [`Sharding::Full`](super::Sharding::Full): the
/// engine all-gathers its parameters just before its forward (the next block's are
/// prefetched meanwhile), frees them after it (`reshard_after_forward`), gathers them again
/// for its backward and reduce-scatters its gradients as soon as its backward is done. Peak
/// memory: the shards plus the blocks being gathered, instead of the whole model.
///
/// ```
/// use burn::module::Module;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{activation::relu, Device, Tensor};
/// use phalanx_ddp::fsdp::FullyShard;
///
/// #[derive(Module, Debug)]
/// struct Net {
///     layers: Vec<FullyShard<Linear>>,
/// }
///
/// impl Net {
///     fn forward(&self, x: Tensor<2>) -> Tensor<2> {
///         self.layers.iter().fold(x, |x, l| relu(l.forward(x, |b, x| b.forward(x))))
///     }
/// }
///
/// let device = Device::flex().autodiff();
/// let net = Net {
///     layers: vec![
///         FullyShard::new(LinearConfig::new(4, 8).init(&device)),
///         FullyShard::new(LinearConfig::new(8, 2).init(&device)),
///     ],
/// };
/// // Unsharded (no engine yet), it is the block itself, under the block's own names.
/// assert_eq!(net.forward(Tensor::zeros([3, 4], &device)).dims(), [3, 2]);
/// let names: Vec<String> = phalanx_ddp::adapter::burn::param_infos(&net)
///     .into_iter()
///     .map(|i| i.name)
///     .collect();
/// assert_eq!(names, ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]);
/// ```
#[derive(Debug, Clone)]
pub struct FullyShard<B> {
    block: B,
    slot: UnitSlot,
}

impl<B: Module + 'static> FullyShard<B> {
    /// Wraps `block`.
    pub fn new(block: B) -> Self {
        FullyShard {
            block,
            slot: UnitSlot::default(),
        }
    }

    /// The block. Under `--sharding full` its trainable tensors are empty: they live in the
    /// shards, gathered only inside [`forward`](Self::forward).
    pub fn block(&self) -> &B {
        &self.block
    }

    /// Whether the engine holds this block's parameters as shards.
    pub fn is_sharded(&self) -> bool {
        self.slot.get().is_some()
    }

    /// `f(block, x)`: the block's forward. Unsharded, that is all; sharded, the block is
    /// rebuilt from its gathered parameters around it (Note [Unit operation]). `f` is kept
    /// for the backward's recomputation, so it owns what it uses (no borrowed tensors).
    pub fn forward<const D: usize, const E: usize, F>(&self, x: Tensor<D>, f: F) -> Tensor<E>
    where
        F: Fn(&B, Tensor<D>) -> Tensor<E> + Send + Sync + 'static,
    {
        let device = x.device();
        // Training draws dropout masks; evaluation none (Note [Block seeds]).
        let seeds = device.is_autodiff().then(block_seeds).flatten();
        match self.slot.get() {
            None => {
                if let Some((before, _)) = seeds {
                    device.seed(before);
                }
                let y = f(&self.block, x);
                if let Some((_, after)) = seeds {
                    device.seed(after);
                }
                y
            }
            Some(unit) => {
                let comm: Arc<dyn UnitComm> = unit;
                unit_forward(&self.block, comm, x, Arc::new(f), seeds)
            }
        }
    }
}

impl<B: Module + 'static> Module for FullyShard<B> {
    fn collect_devices(&self, devices: Devices) -> Devices {
        self.block.collect_devices(devices)
    }

    fn fork(self, device: &Device) -> Self {
        FullyShard {
            block: self.block.fork(device),
            slot: self.slot,
        }
    }

    fn to_device(self, device: &Device) -> Self {
        FullyShard {
            block: self.block.to_device(device),
            slot: self.slot,
        }
    }

    fn train(self) -> Self {
        FullyShard {
            block: self.block.train(),
            slot: self.slot,
        }
    }

    fn valid(&self) -> Self {
        FullyShard {
            block: self.block.valid(),
            slot: self.slot.clone(),
        }
    }

    fn materialize(self) -> Self {
        FullyShard {
            block: self.block.materialize(),
            slot: self.slot,
        }
    }

    fn visit<V: ModuleVisitor>(&self, visitor: &mut V) {
        VISITING.with(|v| v.borrow_mut().push(self.slot.clone()));
        self.block.visit(visitor);
        VISITING.with(|v| v.borrow_mut().pop());
    }

    fn map<M: ModuleMapper>(self, mapper: &mut M) -> Self {
        FullyShard {
            block: self.block.map(mapper),
            slot: self.slot,
        }
    }
}

impl<B: Module + ModuleDisplay + 'static> ModuleDisplayDefault for FullyShard<B> {
    fn content(&self, content: Content) -> Option<Content> {
        self.block.content(content)
    }

    fn num_params(&self) -> usize {
        Module::num_params(&self.block)
    }
}

impl<B: Module + ModuleDisplay + 'static> ModuleDisplay for FullyShard<B> {}

/// Records, for every float tensor of a module in canonical order, the wrapper around it.
struct Finder {
    slots: Vec<Option<UnitSlot>>,
    nested: bool,
}

impl ModuleVisitor for Finder {
    fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
        let (slot, nested) = visiting();
        self.nested |= nested;
        self.slots.push(slot);
    }
}

/// The [`FullyShard`] wrapper around each float tensor of `module` (canonical order; `None`:
/// not in a block), and whether any wrapper is inside another.
pub(crate) fn find_units<M: Module>(module: &M) -> (Vec<Option<UnitSlot>>, bool) {
    let mut finder = Finder {
        slots: Vec::new(),
        nested: false,
    };
    module.visit(&mut finder);
    (finder.slots, finder.nested)
}

/// Makes every wrapper of `module` a plain block again (the engine gave it back whole).
pub(crate) fn unshard_blocks<M: Module>(module: &M) {
    for slot in find_units(module).0.into_iter().flatten() {
        slot.set(None);
    }
}
