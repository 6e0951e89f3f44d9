//! What every Learner example here shares (`mnist_burn.rs`, `mnist_learner.rs`,
//! `tasks_learner.rs`): the error type, this process's share of the global batch, and the end
//! of a run (every rank's digest of its trained model). Not part of a Learner program: the
//! digest is how the tests check that every rank ends with the same model.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use burn_train::LearningResult;

pub(crate) type Error = Box<dyn std::error::Error>;

/// This process's share of the global batch `global`: `global` over the number of processes
/// of the job (`WORLD_SIZE`, which every launcher sets; 1 without one), as a PyTorch script
/// divides its batch by `dist.get_world_size()`.
pub(crate) fn batch_size_per_rank(global: usize) -> Result<usize, Error> {
    let world: usize = match std::env::var("WORLD_SIZE") {
        Ok(w) => w.parse()?,
        Err(_) => 1,
    };
    if !global.is_multiple_of(world) {
        return Err(format!("--batch-size {global} does not divide over {world} processes").into());
    }
    Ok(global / world)
}

/// The end of a run: the error, or every rank's digest of its trained model.
pub(crate) fn finish<M: Module>(result: LearningResult<M>) -> Result<(), Error> {
    if let Some(error) = result.error {
        return Err(format!("training failed: {error}").into());
    }
    let rank = std::env::var("RANK").unwrap_or_else(|_| "0".into());
    println!(
        "rank {rank}: parameter digest {:016x}",
        digest(&result.model)
    );
    Ok(())
}

/// FNV-1a over every float of the model (parameters and BatchNorm statistics), in visiting order.
fn digest<M: Module>(model: &M) -> u64 {
    struct Fnv(u64);
    impl ModuleVisitor for Fnv {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param
                .val()
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32 parameters");
            for v in values {
                self.0 = (self.0 ^ u64::from(v.to_bits())).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut fnv = Fnv(0xcbf2_9ce4_8422_2325);
    model.visit(&mut fnv);
    fnv.0
}
