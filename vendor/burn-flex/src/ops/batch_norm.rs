//! Batch normalization's training forward and backward as fused per-channel
//! passes over NC... data. (phalanx patch, see PHALANX.md.)
//!
//! burn-backend's generic `batch_norm_train` and `batch_norm_train_backward`
//! compute the statistics and gradient sums through `swap_dims` + reshape +
//! `mean_dim`, copying the activation several times per call. Here each
//! channel is one task: the forward reads it twice (mean, then the variance
//! around that mean) and writes the output once; the backward reads it once
//! for the two gradient sums and once more to write the input gradient.
//!
//! Sums accumulate in f64 in a fixed order (batch item by batch item, each
//! plane with a fixed 8-lane split), one channel per task, so the results do
//! not depend on the thread count.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::DType;
use burn_std::{Bytes, Shape, bf16, f16};
use core::mem::MaybeUninit;

use crate::ops::module::{cast_from_f32, cast_to_f32};
use crate::{FlexTensor, Layout};

/// Element types with a native kernel (f16 and bf16 go through f32).
pub(crate) trait NormScalar:
    burn_backend::Element + bytemuck::Pod + Copy + Send + Sync
{
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl NormScalar for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl NormScalar for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// `[batch, channels, spatial]` of an input `[batch, channels, ...]`.
fn dims(shape: &Shape) -> [usize; 3] {
    let batch = shape[0];
    let channels = shape[1];
    [
        batch,
        channels,
        shape.num_elements() / (batch * channels).max(1),
    ]
}

fn slice<T: NormScalar>(tensor: &FlexTensor) -> &[T] {
    tensor
        .as_slice()
        .expect("batch_norm: tensor must be contiguous here")
}

/// Lanes of a sum: element `i` of a plane goes to lane `i % 8`, and the lanes are combined in
/// a fixed order, so a sum does not depend on how planes are spread over threads. Eight f64
/// lanes are one AVX-512 register (two AVX2 ones): the loops below vectorize.
const LANES: usize = 8;

fn combine(lanes: [f64; LANES]) -> f64 {
    let [a, b, c, d, e, g, h, k] = lanes;
    ((a + b) + (c + d)) + ((e + g) + (h + k))
}

/// Σ f(p[i]) over a plane, in lanes.
fn lane_sum<T: NormScalar>(p: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let chunks = p.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += f(v.to_f64());
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(rest) {
        *lane += f(v.to_f64());
    }
    combine(lanes)
}

/// (Σ f(a[i], b[i]), Σ g(a[i], b[i])) over two planes of one length, in one pass, each in
/// lanes as [lane_sum].
fn lane_sums2<T: NormScalar>(
    a: &[T],
    b: &[T],
    f: impl Fn(f64, f64) -> f64,
    g: impl Fn(f64, f64) -> f64,
) -> (f64, f64) {
    let (mut fl, mut gl) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (ca, cb) in ac.zip(bc) {
        for j in 0..LANES {
            let (x, y) = (ca[j].to_f64(), cb[j].to_f64());
            fl[j] += f(x, y);
            gl[j] += g(x, y);
        }
    }
    for (j, (&x, &y)) in ar.iter().zip(br).enumerate() {
        let (x, y) = (x.to_f64(), y.to_f64());
        fl[j] += f(x, y);
        gl[j] += g(x, y);
    }
    (combine(fl), combine(gl))
}

/// Runs `f(channel)` for every channel, in parallel when rayon is on, and
/// returns the results in channel order.
fn per_channel<R: Send, F: Fn(usize) -> R + Send + Sync>(channels: usize, f: F) -> Vec<R> {
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        (0..channels).into_par_iter().map(f).collect()
    }
    #[cfg(not(feature = "rayon"))]
    (0..channels).map(f).collect()
}

fn tensor<T: NormScalar>(data: Vec<T>, shape: Shape) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(data),
        Layout::contiguous(shape),
        T::dtype(),
    )
}

/// Returns `(output, mean, biased variance)`.
pub(crate) fn batch_norm_train<T: NormScalar>(
    x: FlexTensor,
    gamma: FlexTensor,
    beta: FlexTensor,
    epsilon: f64,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let x = x.to_contiguous();
    let (gamma, beta) = (gamma.to_contiguous(), beta.to_contiguous());
    let shape = x.layout().shape().clone();
    let [batch, channels, spatial] = dims(&shape);
    let (xd, gd, bd): (&[T], &[T], &[T]) = (slice(&x), slice(&gamma), slice(&beta));
    let count = (batch * spatial) as f64;
    let plane = |b: usize, c: usize| (b * channels + c) * spatial;

    let stats = per_channel(channels, |c| {
        let mut sum = 0.0;
        for b in 0..batch {
            sum += lane_sum(&xd[plane(b, c)..][..spatial], |v| v);
        }
        let mean = sum / count;
        let mut squares = 0.0;
        for b in 0..batch {
            squares += lane_sum(&xd[plane(b, c)..][..spatial], |v| (v - mean) * (v - mean));
        }
        (mean, squares / count)
    });

    // SAFETY: the closure writes each element of `dst`, zipped with a source plane of
    // `spatial` elements.
    let out = unsafe {
        write_planes(batch, channels, spatial, |c, b, dst| {
            let (mean, var) = stats[c];
            let scale = gd[c].to_f64() / (var + epsilon).sqrt();
            let shift = bd[c].to_f64() - mean * scale;
            let src = &xd[plane(b, c)..][..spatial];
            for (d, &s) in dst.iter_mut().zip(src) {
                d.write(T::from_f64(s.to_f64() * scale + shift));
            }
        })
    };

    let mean: Vec<T> = stats.iter().map(|s| T::from_f64(s.0)).collect();
    let var: Vec<T> = stats.iter().map(|s| T::from_f64(s.1)).collect();
    let per_channel_shape = Shape::from(vec![channels]);
    (
        tensor(out, shape),
        tensor(mean, per_channel_shape.clone()),
        tensor(var, per_channel_shape),
    )
}

/// A `[batch, channels, spatial]` buffer whose every `(channel, batch item)` plane is written
/// by `f(channel, item, plane)`, one plane per call, in parallel when rayon is on.
///
/// # Safety
/// `f` writes every element of the plane it is given: the buffer is not filled before.
unsafe fn write_planes<T: Send, F: Fn(usize, usize, &mut [MaybeUninit<T>]) + Send + Sync>(
    batch: usize,
    channels: usize,
    spatial: usize,
    f: F,
) -> Vec<T> {
    let len = batch * channels * spatial;
    let mut out = Vec::with_capacity(len);
    if len > 0 {
        let run = |(i, dst): (usize, &mut [MaybeUninit<T>])| f(i % channels, i / channels, dst);
        let planes = &mut out.spare_capacity_mut()[..len];
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            planes.par_chunks_mut(spatial).enumerate().for_each(run);
        }
        #[cfg(not(feature = "rayon"))]
        planes.chunks_mut(spatial).enumerate().for_each(run);
    }
    // SAFETY: the planes cover `..len`, and `f` wrote every element of each.
    unsafe { out.set_len(len) };
    out
}

/// Returns `(x_grad, gamma_grad, beta_grad)`.
pub(crate) fn batch_norm_train_backward<T: NormScalar>(
    x: FlexTensor,
    gamma: FlexTensor,
    mean: FlexTensor,
    variance: FlexTensor,
    epsilon: f64,
    output_grad: FlexTensor,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let x = x.to_contiguous();
    let dy = output_grad.to_contiguous();
    let (gamma, mean, variance) = (
        gamma.to_contiguous(),
        mean.to_contiguous(),
        variance.to_contiguous(),
    );
    let shape = x.layout().shape().clone();
    let [batch, channels, spatial] = dims(&shape);
    let (xd, dyd): (&[T], &[T]) = (slice(&x), slice(&dy));
    let (gd, md, vd): (&[T], &[T], &[T]) = (slice(&gamma), slice(&mean), slice(&variance));
    let count = (batch * spatial) as f64;
    let plane = |b: usize, c: usize| (b * channels + c) * spatial;
    let inv_std = |c: usize| 1.0 / (vd[c].to_f64() + epsilon).sqrt();

    // Per channel: Σ dy (beta's gradient) and Σ dy · x̂ (gamma's).
    let sums = per_channel(channels, |c| {
        let (m, s) = (md[c].to_f64(), inv_std(c));
        let (mut dy_sum, mut dy_xhat_sum) = (0.0, 0.0);
        for b in 0..batch {
            let (xp, gp) = (
                &xd[plane(b, c)..][..spatial],
                &dyd[plane(b, c)..][..spatial],
            );
            let (a, b) = lane_sums2(gp, xp, |g, _| g, |g, x| g * (x - m) * s);
            dy_sum += a;
            dy_xhat_sum += b;
        }
        (dy_sum, dy_xhat_sum)
    });

    // dx = γ·σ⁻¹ · (dy − mean(dy) − x̂ · mean(dy · x̂))
    // SAFETY: as for the forward's output: one write per element of `dst`.
    let dx = unsafe {
        write_planes(batch, channels, spatial, |c, b, dst| {
            let (m, s) = (md[c].to_f64(), inv_std(c));
            let scale = gd[c].to_f64() * s;
            let (mean_dy, mean_dy_xhat) = (sums[c].0 / count, sums[c].1 / count);
            let (xp, gp) = (
                &xd[plane(b, c)..][..spatial],
                &dyd[plane(b, c)..][..spatial],
            );
            for ((d, &xv), &g) in dst.iter_mut().zip(xp).zip(gp) {
                let xhat = (xv.to_f64() - m) * s;
                d.write(T::from_f64(
                    scale * (g.to_f64() - mean_dy - xhat * mean_dy_xhat),
                ));
            }
        })
    };

    let per_channel_shape = Shape::from(vec![channels]);
    let gamma_grad: Vec<T> = sums.iter().map(|s| T::from_f64(s.1)).collect();
    let beta_grad: Vec<T> = sums.iter().map(|s| T::from_f64(s.0)).collect();
    (
        tensor(dx, shape),
        tensor(gamma_grad, per_channel_shape.clone()),
        tensor(beta_grad, per_channel_shape),
    )
}

macro_rules! via_f32 {
    ($h:ident, $f:ident ( $($arg:expr),* ), $($scalar:expr),*) => {{
        let (a, b, c) = $f::<f32>($(cast_to_f32($arg, $h::to_f32)),*, $($scalar),*);
        (
            cast_from_f32(a, $h::from_f32),
            cast_from_f32(b, $h::from_f32),
            cast_from_f32(c, $h::from_f32),
        )
    }};
}

/// [batch_norm_train] for any float dtype (f16 and bf16 through f32).
pub(crate) fn batch_norm_train_any(
    x: FlexTensor,
    gamma: FlexTensor,
    beta: FlexTensor,
    epsilon: f64,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    match x.dtype() {
        DType::F32 => batch_norm_train::<f32>(x, gamma, beta, epsilon),
        DType::F64 => batch_norm_train::<f64>(x, gamma, beta, epsilon),
        DType::F16 => via_f32!(f16, batch_norm_train(x, gamma, beta), epsilon),
        DType::BF16 => via_f32!(bf16, batch_norm_train(x, gamma, beta), epsilon),
        dtype => panic!("batch_norm_train: unsupported dtype {dtype:?}"),
    }
}

/// [batch_norm_train_backward] for any float dtype (f16 and bf16 through f32).
pub(crate) fn batch_norm_train_backward_any(
    x: FlexTensor,
    gamma: FlexTensor,
    mean: FlexTensor,
    variance: FlexTensor,
    epsilon: f64,
    output_grad: FlexTensor,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    match x.dtype() {
        DType::F32 => {
            batch_norm_train_backward::<f32>(x, gamma, mean, variance, epsilon, output_grad)
        }
        DType::F64 => {
            batch_norm_train_backward::<f64>(x, gamma, mean, variance, epsilon, output_grad)
        }
        DType::F16 => {
            let (x, gamma, mean, variance, dy) = (
                cast_to_f32(x, f16::to_f32),
                cast_to_f32(gamma, f16::to_f32),
                cast_to_f32(mean, f16::to_f32),
                cast_to_f32(variance, f16::to_f32),
                cast_to_f32(output_grad, f16::to_f32),
            );
            let (a, b, c) = batch_norm_train_backward::<f32>(x, gamma, mean, variance, epsilon, dy);
            (
                cast_from_f32(a, f16::from_f32),
                cast_from_f32(b, f16::from_f32),
                cast_from_f32(c, f16::from_f32),
            )
        }
        DType::BF16 => {
            let (x, gamma, mean, variance, dy) = (
                cast_to_f32(x, bf16::to_f32),
                cast_to_f32(gamma, bf16::to_f32),
                cast_to_f32(mean, bf16::to_f32),
                cast_to_f32(variance, bf16::to_f32),
                cast_to_f32(output_grad, bf16::to_f32),
            );
            let (a, b, c) = batch_norm_train_backward::<f32>(x, gamma, mean, variance, epsilon, dy);
            (
                cast_from_f32(a, bf16::from_f32),
                cast_from_f32(b, bf16::from_f32),
                cast_from_f32(c, bf16::from_f32),
            )
        }
        dtype => panic!("batch_norm_train_backward: unsupported dtype {dtype:?}"),
    }
}
