//! The Burn adapter: names, order, parameter round trip, gradients out and back in.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::{Device, Distribution, Tensor};
use phalanx_ddp::adapter::burn::{param_infos, params_to_flat, set_params_from_flat, GradTable};
use phalanx_ddp::adapter::ParamInfo;

#[derive(Module, Debug)]
struct Net {
    input: Linear,
    blocks: Vec<Linear>,
    head: Linear,
}

fn device() -> Device {
    Device::flex().autodiff()
}

fn net(device: &Device) -> Net {
    Net {
        input: LinearConfig::new(3, 4).init(device),
        blocks: vec![
            LinearConfig::new(4, 4).init(device),
            LinearConfig::new(4, 5).init(device),
        ],
        head: LinearConfig::new(5, 2).with_bias(false).init(device),
    }
}

impl Net {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let x = self.input.forward(x);
        let x = self.blocks.iter().fold(x, |x, l| l.forward(x));
        self.head.forward(x)
    }
}

fn info(name: &str, shape: &[usize]) -> ParamInfo {
    ParamInfo {
        name: name.into(),
        shape: shape.to_vec(),
    }
}

#[test]
fn parameters_are_named_by_module_path_in_declaration_order() {
    let infos = param_infos(&net(&device()));
    assert_eq!(
        infos,
        vec![
            info("input.weight", &[3, 4]),
            info("input.bias", &[4]),
            info("blocks.0.weight", &[4, 4]),
            info("blocks.0.bias", &[4]),
            info("blocks.1.weight", &[4, 5]),
            info("blocks.1.bias", &[5]),
            info("head.weight", &[5, 2]),
        ]
    );
}

#[test]
fn two_independently_built_models_have_the_same_names() {
    // ParamIds are random per construction; names are what ranks compare.
    let d = device();
    assert_eq!(param_infos(&net(&d)), param_infos(&net(&d)));
}

#[test]
fn params_round_trip_through_flat_buffers() {
    let d = device();
    let a = net(&d);
    let b = net(&d);
    let values_a = params_to_flat(&a).unwrap();
    assert_ne!(values_a, params_to_flat(&b).unwrap(), "random init differs");
    let b = set_params_from_flat(b, &values_a).unwrap();
    assert_eq!(params_to_flat(&b).unwrap(), values_a);
    // The overwritten model still trains: its parameters still require gradients.
    let loss = b
        .forward(Tensor::random([2, 3], Distribution::Default, &d))
        .sum();
    let grads = GradientsParams::from_grads(loss.backward(), &b);
    assert_eq!(grads.len(), 7);
}

#[test]
fn set_params_rejects_wrong_sizes() {
    let a = net(&device());
    let mut values = params_to_flat(&a).unwrap();
    values[2].pop();
    let err = set_params_from_flat(a.clone(), &values)
        .unwrap_err()
        .to_string();
    assert!(err.contains("blocks.0.weight"), "{err}");
    values.pop();
    assert!(set_params_from_flat(a, &values).is_err());
}

#[test]
fn gradients_out_and_back_drive_the_optimizer() {
    let d = device();
    let model = net(&d);
    let x = Tensor::<2>::random([6, 3], Distribution::Default, &d);
    let grads = model.forward(x.clone()).powf_scalar(2.0).mean().backward();
    let table = GradTable::new(&model);
    let infos: Vec<ParamInfo> = table.infos().cloned().collect();
    let mut grads = grads;
    let mut flat = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        let mut buf = vec![f32::NAN; info.numel()];
        assert!(table.grad_into(i, &mut grads, &mut buf, false).unwrap());
        assert!(buf.iter().all(|g| g.is_finite()));
        flat.push(buf);
    }
    // Removed from `grads`: asking again yields "no gradient", and accumulate leaves `out` alone.
    let mut again = vec![1.0; infos[0].numel()];
    assert!(!table.grad_into(0, &mut grads, &mut again, true).unwrap());
    assert!(again.iter().all(|&v| v == 1.0));

    // Same values as Burn's own extraction.
    let reference = model.forward(x).powf_scalar(2.0).mean().backward();
    let reference = GradientsParams::from_grads(reference, &model);
    let w: Tensor<2> = reference.get(model.input.weight.id).unwrap();
    assert_eq!(w.into_data().try_to_vec::<f32>().unwrap(), flat[0]);

    // Registered back, with lr 1 the update is exactly param - grad.
    let before = params_to_flat(&model).unwrap();
    let mut params = GradientsParams::new();
    for (i, g) in flat.iter().enumerate() {
        table.register_grad(i, g.clone(), &mut params);
    }
    let mut optim = SgdConfig::new().init();
    let model = optim.step(1.0, model, params);
    let after = params_to_flat(&model).unwrap();
    for ((b, a), g) in before.iter().zip(&after).zip(&flat) {
        for ((b, a), g) in b.iter().zip(a).zip(g) {
            assert_eq!(*a, b - g);
        }
    }
}
