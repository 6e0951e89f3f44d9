//! Tests of the phalanx patches (PHALANX.md): each new kernel, called through
//! `ModuleOps for Flex`, against a direct-loop f64 evaluation of its
//! definition on random shapes (odd sizes, stride, padding incl. asymmetric,
//! dilation, groups, batch 1), bitwise across 1, 2 and 4 rayon threads, and
//! one finite-difference gradient check per op family.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::TensorData;
use burn_backend::ops::{ConvOptions, ModuleOps};

use crate::{Flex, FlexTensor};

/// xorshift64*: reproducible inputs without a dev-dependency.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        bits as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.uniform()).collect()
    }
}

fn f32_tensor(values: &[f64], shape: &[usize]) -> FlexTensor {
    let data: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    FlexTensor::from_data(TensorData::new(data, shape.to_vec()))
}

fn f64_tensor(values: &[f64], shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values.to_vec(), shape.to_vec()))
}

fn f32_values(t: FlexTensor) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn f64_values(t: FlexTensor) -> Vec<f64> {
    t.into_data().try_to_vec::<f64>().unwrap()
}

/// Runs `f` on a rayon pool of `threads` threads.
fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 * scale * (want.len() as f64).sqrt().max(4.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[track_caller]
fn assert_bitwise(what: &str, a: &[f32], b: &[f32]) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(a), bits(b), "{what}: differs across thread counts");
}

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    c_in: usize,
    hw: [usize; 2],
    c_out: usize,
    groups: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [(usize, usize); 2],
    dilation: [usize; 2],
}

const fn case(
    batch: usize,
    c_in: usize,
    hw: [usize; 2],
    c_out: usize,
    groups: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [(usize, usize); 2],
    dilation: [usize; 2],
) -> Case {
    Case {
        batch,
        c_in,
        hw,
        c_out,
        groups,
        kernel,
        stride,
        padding,
        dilation,
    }
}

const CASES: &[Case] = &[
    // The CNN's two layers (3×3, "same" padding), smaller batch.
    case(
        3,
        1,
        [28, 28],
        16,
        1,
        [3, 3],
        [1, 1],
        [(1, 1), (1, 1)],
        [1, 1],
    ),
    case(
        2,
        16,
        [14, 14],
        32,
        1,
        [3, 3],
        [1, 1],
        [(1, 1), (1, 1)],
        [1, 1],
    ),
    // Batch 1, odd sizes, non-square kernel, stride 2, no padding.
    case(1, 3, [9, 7], 5, 1, [3, 2], [2, 2], [(0, 0), (0, 0)], [1, 1]),
    // Dilation 2 with padding 2, stride (1, 3).
    case(
        2,
        2,
        [11, 10],
        3,
        1,
        [3, 3],
        [1, 3],
        [(2, 2), (2, 2)],
        [2, 2],
    ),
    // Groups 2 with mixed stride/dilation; depthwise.
    case(3, 4, [8, 9], 6, 2, [3, 3], [2, 1], [(1, 1), (0, 0)], [1, 2]),
    case(2, 3, [5, 6], 3, 3, [2, 2], [1, 1], [(1, 1), (1, 1)], [1, 1]),
    // Pointwise (1×1, stride 1, no padding: im2col skipped).
    case(2, 5, [4, 3], 7, 1, [1, 1], [1, 1], [(0, 0), (0, 0)], [1, 1]),
    // Asymmetric padding.
    case(2, 2, [6, 5], 3, 1, [3, 3], [2, 2], [(0, 1), (1, 0)], [1, 1]),
    // More batch items than weight-gradient chunks, unevenly split.
    case(
        19,
        2,
        [5, 5],
        3,
        1,
        [3, 3],
        [1, 1],
        [(1, 1), (1, 1)],
        [1, 1],
    ),
];

impl Case {
    fn options(&self) -> ConvOptions<2> {
        ConvOptions::new_with_padding(self.stride, self.padding, self.dilation, self.groups)
    }

    fn out_hw(&self) -> [usize; 2] {
        [0, 1].map(|i| {
            let (b, e) = self.padding[i];
            (self.hw[i] + b + e - self.dilation[i] * (self.kernel[i] - 1) - 1) / self.stride[i] + 1
        })
    }

    fn x_shape(&self) -> [usize; 4] {
        [self.batch, self.c_in, self.hw[0], self.hw[1]]
    }

    fn w_shape(&self) -> [usize; 4] {
        [
            self.c_out,
            self.c_in / self.groups,
            self.kernel[0],
            self.kernel[1],
        ]
    }

    fn y_shape(&self) -> [usize; 4] {
        let [oh, ow] = self.out_hw();
        [self.batch, self.c_out, oh, ow]
    }

    /// Calls `f(x index, w index, y index)` for every multiply-add of the
    /// convolution, straight from its definition.
    fn for_each_tap(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [oh, ow] = self.out_hw();
        let [h, w] = self.hw;
        let (cg, og) = (self.c_in / self.groups, self.c_out / self.groups);
        for n in 0..self.batch {
            for o in 0..self.c_out {
                let group = o / og;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let yi = ((n * self.c_out + o) * oh + oy) * ow + ox;
                        for c in 0..cg {
                            for ki in 0..self.kernel[0] {
                                for kj in 0..self.kernel[1] {
                                    let iy = (oy * self.stride[0] + ki * self.dilation[0]) as isize
                                        - self.padding[0].0 as isize;
                                    let ix = (ox * self.stride[1] + kj * self.dilation[1]) as isize
                                        - self.padding[1].0 as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let ci = group * cg + c;
                                    let xi =
                                        ((n * self.c_in + ci) * h + iy as usize) * w + ix as usize;
                                    let wi =
                                        ((o * cg + c) * self.kernel[0] + ki) * self.kernel[1] + kj;
                                    f(xi, wi, yi);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// `conv2d(x, w) + b` by the definition, in f64.
    fn reference_forward(&self, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; num_elements(&self.y_shape())];
        let plane = y.len() / (self.batch * self.c_out);
        for (i, v) in y.iter_mut().enumerate() {
            *v = b[(i / plane) % self.c_out];
        }
        self.for_each_tap(|xi, wi, yi| y[yi] += x[xi] * w[wi]);
        y
    }

    /// (dx, dw, db) of `Σ y · dy` by the definition, in f64.
    fn reference_grads(&self, x: &[f64], w: &[f64], dy: &[f64]) -> [Vec<f64>; 3] {
        let mut dx = vec![0.0; x.len()];
        let mut dw = vec![0.0; w.len()];
        self.for_each_tap(|xi, wi, yi| {
            dx[xi] += w[wi] * dy[yi];
            dw[wi] += x[xi] * dy[yi];
        });
        let plane = dy.len() / (self.batch * self.c_out);
        let mut db = vec![0.0; self.c_out];
        for (i, g) in dy.iter().enumerate() {
            db[(i / plane) % self.c_out] += g;
        }
        [dx, dw, db]
    }
}

fn num_elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The three backward ops on f32 inputs.
fn conv_grads(c: &Case, x: &[f64], w: &[f64], b: &[f64], dy: &[f64]) -> [Vec<f32>; 3] {
    let (xs, ws, ys) = (c.x_shape(), c.w_shape(), c.y_shape());
    let dx = Flex::conv2d_x_backward(
        f32_tensor(x, &xs),
        f32_tensor(w, &ws),
        f32_tensor(dy, &ys),
        c.options(),
    );
    let dw = Flex::conv2d_weight_backward(
        f32_tensor(x, &xs),
        f32_tensor(w, &ws),
        f32_tensor(dy, &ys),
        c.options(),
    );
    let db = Flex::conv2d_bias_backward(
        f32_tensor(x, &xs),
        f32_tensor(b, &[c.c_out]),
        f32_tensor(dy, &ys),
    );
    assert_eq!(dx.layout().shape().to_vec(), xs.to_vec());
    assert_eq!(dw.layout().shape().to_vec(), ws.to_vec());
    [f32_values(dx), f32_values(dw), f32_values(db)]
}

/// The forward pass (with and without bias) against the definition on every
/// case, and bitwise across thread counts.
#[test]
fn conv2d_forward_matches_definition_and_is_bitwise_across_threads() {
    let mut rng = Rng(0xf0e1_d2c3);
    for c in CASES {
        let (xs, ws) = (c.x_shape(), c.w_shape());
        let x = rng.values(num_elements(&xs));
        let w = rng.values(num_elements(&ws));
        let b = rng.values(c.c_out);
        let forward = |bias: bool| {
            let bias = bias.then(|| f32_tensor(&b, &[c.c_out]));
            let y = Flex::conv2d(f32_tensor(&x, &xs), f32_tensor(&w, &ws), bias, c.options());
            assert_eq!(y.layout().shape().to_vec(), c.y_shape().to_vec(), "{c:?}");
            f32_values(y)
        };
        let zero = vec![0.0; c.c_out];
        for (bias, want) in [
            (true, c.reference_forward(&x, &w, &b)),
            (false, c.reference_forward(&x, &w, &zero)),
        ] {
            let one = on_threads(1, || forward(bias));
            assert_close(&alloc::format!("{c:?} y, bias {bias}"), &one, &want);
            for threads in [2, 4] {
                let many = on_threads(threads, || forward(bias));
                assert_bitwise(&alloc::format!("{c:?} y on {threads}"), &one, &many);
            }
        }
    }
}

#[test]
fn conv2d_backward_matches_definition_and_is_bitwise_across_threads() {
    let mut rng = Rng(0x5eed_c0de);
    for c in CASES {
        let x = rng.values(num_elements(&c.x_shape()));
        let w = rng.values(num_elements(&c.w_shape()));
        let b = rng.values(c.c_out);
        let dy = rng.values(num_elements(&c.y_shape()));
        let want = c.reference_grads(&x, &w, &dy);
        let one = on_threads(1, || conv_grads(c, &x, &w, &b, &dy));
        for (name, (got, want)) in ["dx", "dw", "db"].iter().zip(one.iter().zip(&want)) {
            assert_close(&alloc::format!("{c:?} {name}"), got, want);
        }
        for threads in [2, 4] {
            let many = on_threads(threads, || conv_grads(c, &x, &w, &b, &dy));
            for (name, (a, b)) in ["dx", "dw", "db"].iter().zip(one.iter().zip(&many)) {
                assert_bitwise(&alloc::format!("{c:?} {name} on {threads}"), a, b);
            }
        }
    }
}

#[test]
fn conv2d_gradients_match_finite_differences() {
    // f64, groups 2, stride, dilation and asymmetric padding at once.
    let c = case(2, 4, [7, 6], 4, 2, [3, 2], [2, 1], [(1, 0), (0, 1)], [1, 2]);
    let mut rng = Rng(42);
    let (xs, ws, ys) = (c.x_shape(), c.w_shape(), c.y_shape());
    let x = rng.values(num_elements(&xs));
    let w = rng.values(num_elements(&ws));
    let b = rng.values(c.c_out);
    let r = rng.values(num_elements(&ys));
    // loss(x, w, b) = Σ conv2d(x, w, b) · r, through flex's forward.
    let loss = |x: &[f64], w: &[f64], b: &[f64]| -> f64 {
        let y = Flex::conv2d(
            f64_tensor(x, &xs),
            f64_tensor(w, &ws),
            Some(f64_tensor(b, &[c.c_out])),
            c.options(),
        );
        f64_values(y).iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let dx = f64_values(Flex::conv2d_x_backward(
        f64_tensor(&x, &xs),
        f64_tensor(&w, &ws),
        f64_tensor(&r, &ys),
        c.options(),
    ));
    let dw = f64_values(Flex::conv2d_weight_backward(
        f64_tensor(&x, &xs),
        f64_tensor(&w, &ws),
        f64_tensor(&r, &ys),
        c.options(),
    ));
    let db = f64_values(Flex::conv2d_bias_backward(
        f64_tensor(&x, &xs),
        f64_tensor(&b, &[c.c_out]),
        f64_tensor(&r, &ys),
    ));
    let h = 1e-5;
    let central = |which: usize, i: usize| {
        let mut args = [x.clone(), w.clone(), b.clone()];
        args[which][i] += h;
        let up = loss(&args[0], &args[1], &args[2]);
        args[which][i] -= 2.0 * h;
        let down = loss(&args[0], &args[1], &args[2]);
        (up - down) / (2.0 * h)
    };
    for (which, grad) in [&dx, &dw, &db].into_iter().enumerate() {
        for i in (0..grad.len()).step_by(grad.len().div_ceil(7)) {
            let fd = central(which, i);
            assert!(
                (fd - grad[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "argument {which}[{i}]: finite difference {fd}, kernel {}",
                grad[i]
            );
        }
    }
}

/// Batch norm's training statistics and output by the definition, in f64.
fn reference_batch_norm(
    x: &[f64],
    shape: &[usize],
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
) -> [Vec<f64>; 3] {
    let (n, ch) = (shape[0], shape[1]);
    let s = x.len() / (n * ch);
    let at = |b: usize, c: usize, i: usize| x[(b * ch + c) * s + i];
    let count = (n * s) as f64;
    let mut mean = vec![0.0; ch];
    let mut var = vec![0.0; ch];
    for c in 0..ch {
        for b in 0..n {
            for i in 0..s {
                mean[c] += at(b, c, i) / count;
            }
        }
        for b in 0..n {
            for i in 0..s {
                var[c] += (at(b, c, i) - mean[c]).powi(2) / count;
            }
        }
    }
    let out = (0..x.len())
        .map(|j| {
            let c = (j / s) % ch;
            (x[j] - mean[c]) / (var[c] + eps).sqrt() * gamma[c] + beta[c]
        })
        .collect();
    [out, mean, var]
}

const BN_SHAPES: &[&[usize]] = &[&[3, 4, 5, 6], &[7, 3], &[1, 2, 9], &[32, 16, 4, 4]];

fn bn_f32(shape: &[usize], x: &[f64], gamma: &[f64], beta: &[f64], dy: &[f64]) -> [Vec<f32>; 6] {
    let ch = [shape[1]];
    let eps = 1e-5;
    let fwd = Flex::batch_norm_train(
        f32_tensor(x, shape),
        f32_tensor(gamma, &ch),
        f32_tensor(beta, &ch),
        eps,
    );
    let bwd = Flex::batch_norm_train_backward(
        f32_tensor(x, shape),
        f32_tensor(gamma, &ch),
        fwd.mean.clone(),
        fwd.variance.clone(),
        eps,
        f32_tensor(dy, shape),
    );
    [
        f32_values(fwd.output),
        f32_values(fwd.mean),
        f32_values(fwd.variance),
        f32_values(bwd.x_grad),
        f32_values(bwd.gamma_grad),
        f32_values(bwd.beta_grad),
    ]
}

#[test]
fn batch_norm_train_matches_definition_and_is_bitwise_across_threads() {
    let mut rng = Rng(7);
    for shape in BN_SHAPES {
        let ch = shape[1];
        let x: Vec<f64> = rng
            .values(num_elements(shape))
            .iter()
            .map(|v| 3.0 * v + 0.5)
            .collect();
        let (gamma, beta) = (rng.values(ch), rng.values(ch));
        let dy = rng.values(num_elements(shape));
        let one = on_threads(1, || bn_f32(shape, &x, &gamma, &beta, &dy));
        let [out, mean, var] = reference_batch_norm(&x, shape, &gamma, &beta, 1e-5);
        assert_close(&alloc::format!("{shape:?} output"), &one[0], &out);
        assert_close(&alloc::format!("{shape:?} mean"), &one[1], &mean);
        assert_close(&alloc::format!("{shape:?} variance"), &one[2], &var);
        for threads in [2, 4] {
            let many = on_threads(threads, || bn_f32(shape, &x, &gamma, &beta, &dy));
            for (i, (a, b)) in one.iter().zip(&many).enumerate() {
                assert_bitwise(&alloc::format!("{shape:?} result {i} on {threads}"), a, b);
            }
        }
    }
}

#[test]
fn batch_norm_train_gradients_match_finite_differences() {
    let shape = [3, 2, 4, 3];
    let ch = [shape[1]];
    let eps = 1e-5;
    let mut rng = Rng(99);
    let x = rng.values(num_elements(&shape));
    let (gamma, beta) = (rng.values(2), rng.values(2));
    let r = rng.values(num_elements(&shape));
    let loss = |x: &[f64], gamma: &[f64], beta: &[f64]| -> f64 {
        let out = Flex::batch_norm_train(
            f64_tensor(x, &shape),
            f64_tensor(gamma, &ch),
            f64_tensor(beta, &ch),
            eps,
        )
        .output;
        f64_values(out).iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let fwd = Flex::batch_norm_train(
        f64_tensor(&x, &shape),
        f64_tensor(&gamma, &ch),
        f64_tensor(&beta, &ch),
        eps,
    );
    let bwd = Flex::batch_norm_train_backward(
        f64_tensor(&x, &shape),
        f64_tensor(&gamma, &ch),
        fwd.mean,
        fwd.variance,
        eps,
        f64_tensor(&r, &shape),
    );
    let grads = [
        f64_values(bwd.x_grad),
        f64_values(bwd.gamma_grad),
        f64_values(bwd.beta_grad),
    ];
    let h = 1e-5;
    for (which, grad) in grads.iter().enumerate() {
        for i in (0..grad.len()).step_by(grad.len().div_ceil(9)) {
            let mut args = [x.clone(), gamma.clone(), beta.clone()];
            args[which][i] += h;
            let up = loss(&args[0], &args[1], &args[2]);
            args[which][i] -= 2.0 * h;
            let down = loss(&args[0], &args[1], &args[2]);
            let fd = (up - down) / (2.0 * h);
            assert!(
                (fd - grad[i]).abs() < 1e-6 * (1.0 + fd.abs()),
                "argument {which}[{i}]: finite difference {fd}, kernel {}",
                grad[i]
            );
        }
    }
}

/// Flex's generator is one per process (`Backend::seed`): tests that seed it and draw take
/// turns, or their draws interleave.
static SEEDED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Note [One sampler per tensor] (`float.rs`): `float_random` draws exactly the values burn-std's
/// per-element `TensorData::random` draws from the same generator, for every distribution but
/// Bernoulli (next test) and every float dtype, and leaves the generator where that path leaves
/// it (the next tensor matches too).
#[test]
fn float_random_draws_what_the_per_element_path_draws() {
    let _one_seed_user = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    use burn_backend::ops::FloatTensorOps;
    use burn_backend::{Backend, Distribution, FloatDType};
    use burn_std::rand::{SeedableRng, StdRng};
    use burn_std::{Shape, bf16, f16};

    let device = Default::default();
    let shape = Shape::new([3, 5, 7]);
    let distributions = [
        Distribution::Default,
        Distribution::Uniform(-2.0, 3.0),
        Distribution::Normal(1.0, 0.5),
    ];
    for (i, distribution) in distributions.into_iter().enumerate() {
        for dtype in [
            FloatDType::F32,
            FloatDType::F64,
            FloatDType::F16,
            FloatDType::BF16,
        ] {
            let seed = 7 + i as u64;
            Flex::seed(&device, seed);
            let mut rng = StdRng::seed_from_u64(seed);
            for draw in 0..2 {
                let got =
                    Flex::float_random(shape.clone(), distribution, &device, dtype).into_data();
                let want = match dtype {
                    FloatDType::F64 => {
                        TensorData::random::<f64, _, _>(shape.clone(), distribution, &mut rng)
                    }
                    FloatDType::F16 => {
                        TensorData::random::<f16, _, _>(shape.clone(), distribution, &mut rng)
                    }
                    FloatDType::BF16 => {
                        TensorData::random::<bf16, _, _>(shape.clone(), distribution, &mut rng)
                    }
                    _ => TensorData::random::<f32, _, _>(shape.clone(), distribution, &mut rng),
                };
                assert_eq!(
                    got.shape(),
                    want.shape(),
                    "{distribution:?} {dtype:?} draw {draw}: shape"
                );
                assert_eq!(
                    got.dtype(),
                    want.dtype(),
                    "{distribution:?} {dtype:?} draw {draw}: dtype"
                );
                assert_eq!(
                    got.as_bytes(),
                    want.as_bytes(),
                    "{distribution:?} {dtype:?} draw {draw}: values"
                );
            }
        }
    }
}

/// max_pool2d's whole-window path (`pool.rs`, no padding): output and indices against a direct
/// evaluation of the definition (the first maximum of each window, a NaN winning), on
/// non-overlapping and overlapping windows, dilation, odd sizes and ceil mode whose last window
/// fits or not (then the range-checked path runs), bitwise across 1, 2 and 4 threads.
#[test]
fn max_pool2d_matches_definition_and_is_bitwise_across_threads() {
    struct Case {
        shape: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil: bool,
    }
    let case = |shape, kernel, stride, padding, dilation, ceil| Case {
        shape,
        kernel,
        stride,
        padding,
        dilation,
        ceil,
    };
    let cases = [
        case([32, 16, 28, 28], [2, 2], [2, 2], [0, 0], [1, 1], false),
        case([3, 5, 7, 9], [2, 2], [2, 2], [0, 0], [1, 1], false),
        case([1, 2, 9, 8], [3, 3], [2, 2], [0, 0], [1, 1], false),
        case([2, 3, 10, 11], [3, 2], [1, 2], [0, 0], [2, 1], false),
        case([2, 2, 7, 7], [2, 2], [2, 2], [0, 0], [1, 1], true),
        case([2, 2, 8, 8], [3, 3], [2, 2], [0, 0], [1, 1], true),
        case([2, 3, 6, 5], [3, 3], [2, 1], [1, 1], [1, 1], false),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for c in &cases {
        let [n, ch, h, w] = c.shape;
        let mut x = rng.values(n * ch * h * w);
        x[5] = f64::NAN;
        let out_len = |input: usize, k: usize, s: usize, p: usize, d: usize| {
            let span = input + 2 * p - d * (k - 1) - 1;
            let mut out = if c.ceil {
                span.div_ceil(s) + 1
            } else {
                span / s + 1
            };
            if c.ceil && (out - 1) * s >= input + p {
                out -= 1;
            }
            out
        };
        let oh = out_len(h, c.kernel[0], c.stride[0], c.padding[0], c.dilation[0]);
        let ow = out_len(w, c.kernel[1], c.stride[1], c.padding[1], c.dilation[1]);
        let mut want = Vec::new();
        let mut want_idx = Vec::new();
        for plane in 0..n * ch {
            for i in 0..oh {
                for j in 0..ow {
                    let (mut best, mut at) = (f32::NEG_INFINITY, -1i64);
                    for ki in 0..c.kernel[0] {
                        for kj in 0..c.kernel[1] {
                            let r = (i * c.stride[0] + ki * c.dilation[0]) as isize
                                - c.padding[0] as isize;
                            let q = (j * c.stride[1] + kj * c.dilation[1]) as isize
                                - c.padding[1] as isize;
                            if r < 0 || q < 0 || r >= h as isize || q >= w as isize {
                                continue;
                            }
                            let k = r as usize * w + q as usize;
                            let v = x[plane * h * w + k] as f32;
                            if at < 0 || v > best || v.is_nan() {
                                (best, at) = (v, k as i64);
                            }
                        }
                    }
                    want.push(best);
                    want_idx.push(at);
                }
            }
        }
        let run = || {
            let out = Flex::max_pool2d_with_indices(
                f32_tensor(&x, &c.shape),
                c.kernel,
                c.stride,
                c.padding,
                c.dilation,
                c.ceil,
                burn_std::IntDType::I64,
            );
            let indices = out.indices.into_data().convert::<i64>();
            (f32_values(out.output), indices.try_to_vec::<i64>().unwrap())
        };
        let (got, got_idx) = run();
        assert_eq!(got.len(), want.len(), "{:?}: output length", c.shape);
        for (k, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                "{:?} kernel {:?}: output {k}: {g} against {e}",
                c.shape,
                c.kernel
            );
        }
        assert_eq!(
            got_idx, want_idx,
            "{:?} kernel {:?}: indices",
            c.shape, c.kernel
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for threads in [1, 2, 4] {
            let (t, ti) = on_threads(threads, run);
            assert_eq!(
                bits(&t),
                bits(&got),
                "{:?}: output on {threads} threads",
                c.shape
            );
            assert_eq!(ti, got_idx, "{:?}: indices on {threads} threads", c.shape);
        }
    }
}

/// Note [Bernoulli from 32-bit words] (`float.rs`): the mask is `word < round(p · 2³²)` over
/// 32-bit words filled from the seeded generator, the same for every float dtype; the generator
/// advances (a second draw differs); frequencies match `p`; `p` = 0 and 1 are exact.
#[test]
fn bernoulli_is_a_threshold_on_32_bit_words() {
    let _one_seed_user = SEEDED.lock().unwrap_or_else(|e| e.into_inner());
    use burn_backend::ops::FloatTensorOps;
    use burn_backend::{Backend, Distribution, FloatDType};
    use burn_std::rand::{RngExt, SeedableRng, StdRng};

    let device = Default::default();
    let n = 1 << 20;
    for (seed, p) in [(3u64, 0.9f64), (4, 0.25), (5, 0.0), (6, 1.0)] {
        let mut rng = StdRng::seed_from_u64(seed);
        let threshold = (p * 4_294_967_296.0).round() as u64;
        let mut want = Vec::new();
        for _ in 0..2 {
            let mut words = vec![0u32; n];
            rng.fill(&mut words[..]);
            want.push(
                words
                    .iter()
                    .map(|&w| {
                        if u64::from(w) < threshold {
                            1.0f64
                        } else {
                            0.0
                        }
                    })
                    .collect::<Vec<_>>(),
            );
        }
        for dtype in [
            FloatDType::F32,
            FloatDType::F64,
            FloatDType::F16,
            FloatDType::BF16,
        ] {
            Flex::seed(&device, seed);
            for (draw, want) in want.iter().enumerate() {
                let got =
                    Flex::float_random([n].into(), Distribution::Bernoulli(p), &device, dtype)
                        .into_data()
                        .convert::<f64>()
                        .try_to_vec::<f64>()
                        .unwrap();
                assert!(got == *want, "p {p} {dtype:?} draw {draw}: mask differs");
            }
        }
        assert!(
            p == 0.0 || p == 1.0 || want[0] != want[1],
            "p {p}: the generator did not advance"
        );
        let ones = want[0].iter().sum::<f64>();
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (ones - n as f64 * p).abs() <= 5.0 * sigma,
            "p {p}: {ones} ones in {n} draws"
        );
    }
}

/// GELU's f32 forward and backward (`activation.rs`, `gelu_f32_parts`, `exp_f32_arith`) against
/// the f64 definition through libm's erf, over [-12, 12] in steps of 1/64 and at the edges
/// (±0, ±∞, NaN): within 2.5e-7·max(1, |x|) absolute; and the exponential alone within 2 ulp
/// over its whole clamped range.
#[test]
fn gelu_f32_matches_its_definition() {
    use burn_backend::ops::ActivationOps;

    let gelu = |x: f64| 0.5 * x * (1.0 + libm::erf(x / core::f64::consts::SQRT_2));
    let dgelu = |x: f64| {
        0.5 * (1.0 + libm::erf(x / core::f64::consts::SQRT_2))
            + x * (-0.5 * x * x).exp() / (2.0 * core::f64::consts::PI).sqrt()
    };
    let mut xs: Vec<f64> = (-768..=768).map(|i| i as f64 / 64.0).collect();
    xs.extend([1e-30, -1e-30, 0.3, -0.3, 5.55, -5.55]);
    let got = f32_values(Flex::gelu(f32_tensor(&xs, &[xs.len()])));
    let ones = vec![1.0; xs.len()];
    let got_grad = f32_values(Flex::gelu_backward(
        f32_tensor(&xs, &[xs.len()]),
        f32_tensor(&ones, &[xs.len()]),
    ));
    for (i, &x) in xs.iter().enumerate() {
        let x32 = x as f32 as f64;
        let tol = 2.5e-7 * x32.abs().max(1.0);
        let (want, want_grad) = (gelu(x32), dgelu(x32));
        assert!(
            (got[i] as f64 - want).abs() <= tol,
            "gelu({x32}) = {} against {want}",
            got[i]
        );
        assert!(
            (got_grad[i] as f64 - want_grad).abs() <= tol,
            "gelu'({x32}) = {} against {want_grad}",
            got_grad[i]
        );
    }
    let edges = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    let got = f32_values(Flex::gelu(f32_tensor(&edges, &[5])));
    assert_eq!(got[0].to_bits(), 0.0f32.to_bits(), "gelu(0)");
    assert_eq!(got[1], 0.0, "gelu(-0)");
    assert_eq!(got[2], f32::INFINITY, "gelu(inf)");
    // 0.5·x·(1 + erf) at −∞ is −∞·0, NaN, as libm's erf gives too.
    assert!(
        got[3].is_nan() && got[4].is_nan(),
        "gelu(-inf), gelu(NaN): {got:?}"
    );

    let mut x = -87.0f32;
    while x <= 88.0 {
        let (got, want) = (super::activation::exp_f32_arith(x), (x as f64).exp());
        let ulp = f32::from_bits((want as f32).to_bits() + 1) as f64 - (want as f32) as f64;
        assert!(
            (got as f64 - want).abs() <= 2.0 * ulp,
            "exp({x}) = {got} against {want}"
        );
        x += 0.0137;
    }
}

#[test]
fn exp_f32_is_libm_exp_bitwise() {
    // Around the cut, down to -inf, the ordinary range and the specials.
    let mut xs: Vec<f32> = vec![
        f32::NEG_INFINITY,
        f32::MIN,
        -1.0e9,
        -1.0e30,
        f32::NAN,
        0.0,
        -0.0,
    ];
    let mut x = -110.0f32;
    while x < 90.0 {
        xs.push(x);
        x += 0.013;
    }
    let cut = (-crate::ops::unary::EXP_F32_ZERO_BELOW).to_bits();
    for at in cut - 10_000..cut + 10_000 {
        xs.push(-f32::from_bits(at));
    }
    for &x in &xs {
        let (got, want) = (crate::ops::unary::exp_f32(x), x.exp());
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "exp({x:e}): {got:e} against {want:e}"
        );
    }
    // Through the tensor op too.
    let values: Vec<f64> = xs
        .iter()
        .filter(|x| !x.is_nan())
        .map(|&x| x as f64)
        .collect();
    let n = values.len();
    let got = f32_values(crate::ops::unary::exp(f32_tensor(&values, &[n])));
    let want: Vec<f32> = values.iter().map(|&v| (v as f32).exp()).collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want), "exp of a tensor against libm's");
}

/// The fused softmax over the last dimension (the evaluation's causal attention) on rows with
/// masked scores (−1e9) and rows of ordinary ones, against the same three passes with libm's
/// `expf`: bitwise (Note [exp of a masked score] in `unary.rs`).
#[test]
fn softmax_of_masked_scores_is_the_libm_softmax_bitwise() {
    let mut rng = Rng(0x5eed_50f7);
    for (rows, len) in [(128usize, 128usize), (9, 37), (4, 1), (3, 300)] {
        let mut values = rng.values(rows * len);
        for (r, row) in values.chunks_mut(len).enumerate() {
            // A causal mask: row r sees its first r + 1 positions.
            for v in row.iter_mut().skip(r + 1) {
                *v = -1.0e9;
            }
            for v in row.iter_mut().take(r + 1) {
                *v *= 20.0;
            }
        }
        let got = f32_values(super::activation::softmax(
            f32_tensor(&values, &[rows, len]),
            1,
        ));
        let mut want = vec![0.0f32; rows * len];
        for (row, out) in values.chunks(len).zip(want.chunks_mut(len)) {
            let row: Vec<f32> = row.iter().map(|&v| v as f32).collect();
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for (o, &x) in out.iter_mut().zip(&row) {
                *o = (x - max).exp();
                sum += *o;
            }
            let inv = 1.0f32 / sum;
            out.iter_mut().for_each(|o| *o *= inv);
        }
        assert_bitwise(&format!("softmax of {rows} rows of {len}"), &got, &want);
    }
}

/// `lhs` `[batch, m, k]` times `rhs` (`[batch, k, n]`, or `[k, n]` for every batch item when
/// `shared`), by a direct loop over the f32 values.
fn matmul_reference(
    lhs: &[f64],
    rhs: &[f64],
    [batch, m, k, n]: [usize; 4],
    shared: bool,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        let rb = if shared { 0 } else { bi * k * n };
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k)
                    .map(|l| {
                        (lhs[bi * m * k + i * k + l] as f32 as f64)
                            * (rhs[rb + l * n + j] as f32 as f64)
                    })
                    .sum::<f64>();
                out.push(dot);
            }
        }
    }
    out
}

#[test]
fn matmul_writes_every_output_element() {
    // Note [gemm writes its output whole]: outputs that gemm writes without a zero fill,
    // against a direct loop, after dirtying the allocator with NaN-filled buffers of the
    // output's size, on a pool of 4 threads (the large cases take the rayon branches). 2-D:
    // general, m = 1 (gemv), k = 1 and 2 (gevv), large. Batched: general, m = n = 1, k = 0,
    // large; broadcast: `[b, m, k] x [k, n]` and `[b, m, k] x [1, k, n]`. Each also with the
    // right operand stored transposed (a strided view).
    use burn_backend::ops::FloatTensorOps;
    let mut rng = Rng(0x5eed_1234);
    // (batch, m, k, n, rhs): rhs 0 = per batch item, 2 = one `[k, n]`, 3 = one `[1, k, n]`.
    let cases: &[(usize, usize, usize, usize, usize)] = &[
        (1, 7, 5, 3, 0),
        (1, 1, 9, 13, 0),
        (1, 6, 1, 5, 0),
        (1, 6, 2, 5, 0),
        (1, 200, 200, 200, 0),
        (3, 16, 33, 9, 0),
        (4, 1, 8, 1, 0),
        (2, 5, 0, 4, 0),
        (8, 128, 64, 48, 0),
        (3, 7, 5, 6, 2),
        (3, 7, 5, 6, 3),
    ];
    on_threads(4, || {
        for &(batch, m, k, n, rhs_kind) in cases {
            let shared = rhs_kind != 0;
            let a = rng.values(batch * m * k);
            let b = rng.values(if shared { k * n } else { batch * k * n });
            let want = matmul_reference(&a, &b, [batch, m, k, n], shared);
            let lhs_shape: Vec<usize> = match batch {
                1 => vec![m, k],
                _ => vec![batch, m, k],
            };
            let (rhs_shape, rhs_t_shape): (Vec<usize>, Vec<usize>) = match (rhs_kind, batch) {
                (2, _) | (0, 1) => (vec![k, n], vec![n, k]),
                (3, _) => (vec![1, k, n], vec![1, n, k]),
                _ => (vec![batch, k, n], vec![batch, n, k]),
            };
            let what = format!("matmul {lhs_shape:?} x {rhs_shape:?}");
            for _ in 0..4 {
                drop(core::hint::black_box(vec![f32::NAN; batch * m * n]));
            }
            let got = f32_values(crate::Flex::float_matmul(
                f32_tensor(&a, &lhs_shape),
                f32_tensor(&b, &rhs_shape),
            ));
            assert_close(&what, &got, &want);
            // The right operand stored transposed: each `[k, n]` matrix as `[n, k]`.
            let items = b.len() / (k * n).max(1);
            let bt: Vec<f64> = (0..items)
                .flat_map(|bi| {
                    let b = &b;
                    (0..n).flat_map(move |j| (0..k).map(move |l| b[bi * k * n + l * n + j]))
                })
                .collect();
            let dims = rhs_t_shape.len();
            let rhs_t =
                crate::Flex::float_swap_dims(f32_tensor(&bt, &rhs_t_shape), dims - 2, dims - 1);
            for _ in 0..4 {
                drop(core::hint::black_box(vec![f32::NAN; batch * m * n]));
            }
            let got = f32_values(crate::Flex::float_matmul(f32_tensor(&a, &lhs_shape), rhs_t));
            assert_close(&format!("{what}, rhs strided"), &got, &want);
        }
    });
    // f16 takes the same gemm path (gemm computes in f32 and stores f16).
    let (batch, m, k, n) = (2, 9, 7, 5);
    let (a, b) = (rng.values(batch * m * k), rng.values(batch * k * n));
    let half = |v: &[f64], shape: &[usize]| {
        let data: Vec<burn_std::f16> = v.iter().map(|&x| burn_std::f16::from_f64(x)).collect();
        FlexTensor::from_data(TensorData::new(data, shape.to_vec()))
    };
    let a16: Vec<f64> = a
        .iter()
        .map(|&x| burn_std::f16::from_f64(x).to_f64())
        .collect();
    let b16: Vec<f64> = b
        .iter()
        .map(|&x| burn_std::f16::from_f64(x).to_f64())
        .collect();
    let want = matmul_reference(&a16, &b16, [batch, m, k, n], false);
    let got: Vec<f64> =
        crate::Flex::float_matmul(half(&a, &[batch, m, k]), half(&b, &[batch, k, n]))
            .into_data()
            .try_to_vec::<burn_std::f16>()
            .unwrap()
            .iter()
            .map(|x| x.to_f64())
            .collect();
    assert_eq!(got.len(), want.len(), "f16 matmul: length");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 4e-3 * w.abs().max(1.0),
            "f16 matmul[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn pow2_f32_is_the_integer_path_bitwise() {
    // Note [2^k without a float-to-int cast]: every k that exp_f32_arith can form.
    for k in -126..=127 {
        let want = f32::from_bits(((k + 127) << 23) as u32);
        let got = crate::ops::activation::pow2_f32(k as f32);
        assert_eq!(got.to_bits(), want.to_bits(), "2^{k}");
        assert_eq!(got, 2f32.powi(k), "2^{k}");
    }
}
