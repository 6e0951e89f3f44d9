//! What the modules of ddp's test binary share: the device, deterministic batches that differ
//! on every rank, and parameters set from their position.

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use phalanx_ddp::adapter::burn::{param_infos, params_to_flat, set_params_from_flat};

/// The autodiff CPU device every rank (thread) trains on.
pub(crate) fn device() -> Device {
    Device::flex().autodiff()
}

/// Deterministic batch `step` of rank `rank`: `rows` rows of `features` inputs and labels
/// below `classes`, different on every rank.
pub(crate) fn batch(
    step: usize,
    rank: usize,
    rows: usize,
    features: usize,
    classes: usize,
) -> (Tensor<2>, Tensor<1, Int>) {
    let d = device();
    let x: Vec<f32> = (0..rows * features)
        .map(|i| (((step * 31 + rank * 101 + i * 7) % 23) as f32 / 5.0) - 2.0)
        .collect();
    let y: Vec<i64> = (0..rows)
        .map(|r| ((step + rank * 2 + r * 5) % classes) as i64)
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [rows, features]), &d),
        Tensor::from_data(TensorData::new(y, [rows]), &d),
    )
}

/// `net` with every tensor outside BatchNorm (no `bn` in its name) set from its position: the
/// same in every run, not drawn from the device's generator, which the ranks (threads of one
/// process) share.
pub(crate) fn positional<M: Module>(net: M) -> M {
    let infos = param_infos(&net);
    let values: Vec<Vec<f32>> = params_to_flat(&net)
        .unwrap()
        .into_iter()
        .zip(infos)
        .enumerate()
        .map(|(k, (v, info))| match info.name.contains("bn") {
            true => v,
            false => (0..v.len())
                .map(|i| ((k * 131 + i * 37) % 61) as f32 / 100.0 - 0.3)
                .collect(),
        })
        .collect();
    set_params_from_flat(net, &values).unwrap()
}
