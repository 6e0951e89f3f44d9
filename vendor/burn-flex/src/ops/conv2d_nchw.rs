//! 2D convolution's forward pass and its three backward passes (input,
//! weight and bias gradients) in NCHW as im2col + GEMM. (phalanx patch, see
//! PHALANX.md.)
//!
//! Without these overrides the flex backend inherits burn-backend's generic
//! backward passes: the weight gradient as a convolution of dim-swapped
//! tensors whose "kernel" is the whole output gradient (one serial GEMM with
//! a huge reduction dimension), the input gradient as a transposed
//! convolution, the bias gradient as swap + reshape + sum, each with
//! contiguous copies. Here every pass works on NCHW data in place:
//!
//! - forward: `Y_b = W · im2col(x_b)`, plus the bias (f32 and f64; upstream's
//!   forward copies the input to NHWC, builds zero-filled im2col tiles and
//!   scatters each tile's product into the output);
//! - weight gradient: `dW = Σ_b dY_b · im2col(x_b)ᵀ`;
//! - input gradient: `dx_b = col2im(Wᵀ · dY_b)`;
//! - bias gradient: per-channel sums of `dY`.
//!
//! The im2col row order `(c, kh, kw)` is the weight's own memory order, so
//! the weight is used as stored, with no reordering copy.
//!
//! Determinism: every GEMM runs single-threaded; rayon only spreads whole,
//! independent pieces of work (a batch item, a fixed chunk of the batch, a
//! channel) over threads. The weight gradient's sum over the batch is split
//! into chunks whose boundaries depend on the batch size only, and the
//! chunk partials are added in chunk order, so the result is bitwise the
//! same for any thread count.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_std::{Bytes, Shape, bf16, f16};
use core::ops::Add;

use crate::ops::matmul::GemmScalar;
use crate::ops::module::{cast_from_f32, cast_to_f32};
use crate::{FlexTensor, Layout};

/// Element types with a native kernel (f16 and bf16 go through f32).
pub(crate) trait ConvScalar: GemmScalar + Add<Output = Self> + Send + Sync {}
impl ConvScalar for f32 {}
impl ConvScalar for f64 {}

/// The largest number of partial weight gradients summed at the end: the
/// batch is cut into at most this many chunks (fixed by the batch size, not
/// the thread count), each reduced by accumulating GEMMs.
const MAX_WEIGHT_GRAD_CHUNKS: usize = 16;

/// Shapes and options of one 2D convolution, NCHW.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    batch: usize,
    channels_in: usize,
    in_h: usize,
    in_w: usize,
    channels_out: usize,
    groups: usize,
    /// Input channels per group.
    cg: usize,
    /// Output channels per group.
    og: usize,
    kernel_h: usize,
    kernel_w: usize,
    out_h: usize,
    out_w: usize,
    stride: [usize; 2],
    /// Padding before the first row and column (the end padding only shows
    /// in `out_h`/`out_w`, which come from the output's shape).
    pad: [usize; 2],
    dilation: [usize; 2],
}

impl Geometry {
    fn new(x: &Shape, weight: &Shape, out_hw: [usize; 2], options: &ConvOptions<2>) -> Self {
        let groups = options.groups;
        Self {
            batch: x[0],
            channels_in: x[1],
            in_h: x[2],
            in_w: x[3],
            channels_out: weight[0],
            groups,
            cg: weight[1],
            og: weight[0] / groups,
            kernel_h: weight[2],
            kernel_w: weight[3],
            out_h: out_hw[0],
            out_w: out_hw[1],
            stride: options.stride,
            pad: options.padding_begin(),
            dilation: options.dilation,
        }
    }

    /// Rows of the im2col matrix: `cg * kh * kw`.
    fn col_rows(&self) -> usize {
        self.cg * self.kernel_h * self.kernel_w
    }

    fn out_len(&self) -> usize {
        self.out_h * self.out_w
    }

    fn in_len(&self) -> usize {
        self.in_h * self.in_w
    }

    /// A 1×1 kernel with stride 1 and no padding: im2col(x) is x itself.
    fn is_pointwise(&self) -> bool {
        self.kernel_h == 1
            && self.kernel_w == 1
            && self.stride == [1, 1]
            && self.pad == [0, 0]
            && self.out_h == self.in_h
            && self.out_w == self.in_w
    }
}

/// Output positions `o` in `[0, out)` whose input index
/// `o * stride + offset - pad` lies in `[0, input)`, as a half-open range.
fn valid_range(
    out: usize,
    stride: usize,
    offset: usize,
    pad: usize,
    input: usize,
) -> (usize, usize) {
    let lo = if offset >= pad {
        0
    } else {
        (pad - offset).div_ceil(stride)
    };
    let hi = if input + pad <= offset {
        0
    } else {
        (input + pad - offset).div_ceil(stride).min(out)
    };
    (lo.min(hi), hi)
}

/// Fills `col` (`[cg*kh*kw, out_h*out_w]`, row-major) with the patches of
/// one batch item's group, `x` holding its `cg` input planes.
fn im2col<T: ConvScalar>(g: &Geometry, x: &[T], col: &mut [T]) {
    let (l, ow) = (g.out_len(), g.out_w);
    let mut row_index = 0;
    for c in 0..g.cg {
        let plane = &x[c * g.in_len()..(c + 1) * g.in_len()];
        for ki in 0..g.kernel_h {
            let (y_lo, y_hi) =
                valid_range(g.out_h, g.stride[0], ki * g.dilation[0], g.pad[0], g.in_h);
            for kj in 0..g.kernel_w {
                let offset_w = kj * g.dilation[1];
                let (x_lo, x_hi) = valid_range(ow, g.stride[1], offset_w, g.pad[1], g.in_w);
                let row = &mut col[row_index * l..(row_index + 1) * l];
                row_index += 1;
                row[..y_lo * ow].fill(T::zero());
                row[y_hi * ow..].fill(T::zero());
                for oy in y_lo..y_hi {
                    let iy = oy * g.stride[0] + ki * g.dilation[0] - g.pad[0];
                    let src = &plane[iy * g.in_w..(iy + 1) * g.in_w];
                    let dst = &mut row[oy * ow..(oy + 1) * ow];
                    dst[..x_lo].fill(T::zero());
                    dst[x_hi..].fill(T::zero());
                    if g.stride[1] == 1 {
                        let start = x_lo + offset_w - g.pad[1];
                        dst[x_lo..x_hi].copy_from_slice(&src[start..start + x_hi - x_lo]);
                    } else {
                        for (ox, d) in dst.iter_mut().enumerate().take(x_hi).skip(x_lo) {
                            *d = src[ox * g.stride[1] + offset_w - g.pad[1]];
                        }
                    }
                }
            }
        }
    }
}

/// Adds `col` (`[cg*kh*kw, out_h*out_w]`) back onto one batch item's group
/// of input planes `dx` (the adjoint of [im2col]), in a fixed order.
fn col2im<T: ConvScalar>(g: &Geometry, col: &[T], dx: &mut [T]) {
    let (l, ow) = (g.out_len(), g.out_w);
    let mut row_index = 0;
    for c in 0..g.cg {
        let plane = &mut dx[c * g.in_len()..(c + 1) * g.in_len()];
        for ki in 0..g.kernel_h {
            let (y_lo, y_hi) =
                valid_range(g.out_h, g.stride[0], ki * g.dilation[0], g.pad[0], g.in_h);
            for kj in 0..g.kernel_w {
                let offset_w = kj * g.dilation[1];
                let (x_lo, x_hi) = valid_range(ow, g.stride[1], offset_w, g.pad[1], g.in_w);
                let row = &col[row_index * l..(row_index + 1) * l];
                row_index += 1;
                for oy in y_lo..y_hi {
                    let iy = oy * g.stride[0] + ki * g.dilation[0] - g.pad[0];
                    let dst = &mut plane[iy * g.in_w..(iy + 1) * g.in_w];
                    let src = &row[oy * ow..(oy + 1) * ow];
                    if g.stride[1] == 1 {
                        let start = x_lo + offset_w - g.pad[1];
                        for (d, &s) in dst[start..start + x_hi - x_lo]
                            .iter_mut()
                            .zip(&src[x_lo..x_hi])
                        {
                            *d = *d + s;
                        }
                    } else {
                        for (ox, &s) in src.iter().enumerate().take(x_hi).skip(x_lo) {
                            let d = &mut dst[ox * g.stride[1] + offset_w - g.pad[1]];
                            *d = *d + s;
                        }
                    }
                }
            }
        }
    }
}

/// A row-major `rows × cols` matrix view at `ptr` with explicit strides.
#[derive(Clone, Copy)]
struct Mat<T> {
    ptr: *const T,
    row_stride: isize,
    col_stride: isize,
}

impl<T> Mat<T> {
    fn row_major(data: &[T], cols: usize) -> Self {
        Self {
            ptr: data.as_ptr(),
            row_stride: cols as isize,
            col_stride: 1,
        }
    }

    /// The transpose of a row-major matrix with `cols` columns.
    fn transposed(data: &[T], cols: usize) -> Self {
        Self {
            ptr: data.as_ptr(),
            row_stride: 1,
            col_stride: cols as isize,
        }
    }
}

/// `dst[m×n] (row-major) = lhs[m×k] · rhs[k×n]`, or `+=` when `accumulate`,
/// single-threaded (the callers parallelize over independent work).
fn gemm<T: ConvScalar>(
    dst: &mut [T],
    [m, n, k]: [usize; 3],
    lhs: Mat<T>,
    rhs: Mat<T>,
    accumulate: bool,
) {
    assert!(dst.len() >= m * n, "conv2d gemm: destination too small");
    // SAFETY: `dst` holds m×n elements (asserted).
    unsafe { gemm_raw(dst.as_mut_ptr(), [m, n, k], lhs, rhs, accumulate) }
}

/// [gemm] writing through a pointer, which without `accumulate` may point
/// at memory not yet initialized (the product is written, never read).
///
/// # Safety
/// `dst` is valid for writes (and reads when `accumulate`) of m×n elements;
/// `lhs` and `rhs` were built from slices holding m×k and k×n elements.
unsafe fn gemm_raw<T: ConvScalar>(
    dst: *mut T,
    [m, n, k]: [usize; 3],
    lhs: Mat<T>,
    rhs: Mat<T>,
    accumulate: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            lhs.ptr,
            lhs.col_stride,
            lhs.row_stride,
            rhs.ptr,
            rhs.col_stride,
            rhs.row_stride,
            T::one(),
            T::one(),
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Runs `f(index, chunk)` over `data`'s `chunk_len`-sized chunks, in
/// parallel when rayon is on. Each chunk is written by one call only.
fn for_each_chunk<T: Send, F: Fn(usize, &mut [T]) + Send + Sync>(
    data: &mut [T],
    chunk_len: usize,
    f: F,
) {
    if chunk_len == 0 {
        return;
    }
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        data.par_chunks_mut(chunk_len)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
    #[cfg(not(feature = "rayon"))]
    data.chunks_mut(chunk_len)
        .enumerate()
        .for_each(|(i, c)| f(i, c));
}

fn contiguous_slice<T: ConvScalar>(tensor: &FlexTensor) -> &[T] {
    tensor
        .as_slice()
        .expect("conv2d: tensor must be contiguous here")
}

fn out_tensor<T: ConvScalar>(data: Vec<T>, shape: [usize; 4]) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(data),
        Layout::contiguous(Shape::from(shape.to_vec())),
        T::dtype(),
    )
}

/// Output size of one spatial dimension with `pad` elements of padding in
/// all (begin and end).
fn conv_out_len(input: usize, kernel: usize, stride: usize, pad: usize, dilation: usize) -> usize {
    let span = dilation * (kernel - 1) + 1;
    assert!(
        input + pad >= span,
        "conv2d: the kernel spans {span} elements, more than the input's {input} and its {pad} of padding"
    );
    (input + pad - span) / stride + 1
}

/// Forward: `Y_b = W · im2col(x_b) (+ bias)` per group, in parallel over the
/// batch (each item's output is computed by one thread); the output is
/// written by its GEMMs, never filled before.
pub(crate) fn conv2d_forward<T: ConvScalar>(
    x: FlexTensor,
    weight: FlexTensor,
    bias: Option<FlexTensor>,
    options: &ConvOptions<2>,
) -> FlexTensor {
    let x = x.to_contiguous();
    let weight = weight.to_contiguous();
    let bias = bias.map(|b| b.to_contiguous());
    let (xs, ws) = (x.layout().shape(), weight.layout().shape());
    let out_hw = [0, 1].map(|i| {
        let (begin, end) = options.padding[i];
        let (stride, dilation) = (options.stride[i], options.dilation[i]);
        conv_out_len(xs[2 + i], ws[2 + i], stride, begin + end, dilation)
    });
    let g = Geometry::new(xs, ws, out_hw, options);
    // Every output row is written by a group's GEMM only if the groups split both channel
    // counts evenly; checked here since the buffer is not filled before.
    assert!(
        g.groups > 0 && g.channels_out % g.groups == 0 && g.channels_in == g.groups * g.cg,
        "conv2d: {} input and {} output channels do not split into {} groups of {} inputs",
        g.channels_in,
        g.channels_out,
        g.groups,
        g.cg
    );
    let (l, kc) = (g.out_len(), g.col_rows());
    let xd: &[T] = contiguous_slice(&x);
    let wd: &[T] = contiguous_slice(&weight);
    let bd: Option<&[T]> = bias.as_ref().map(contiguous_slice);
    if let Some(bd) = bd {
        assert_eq!(
            bd.len(),
            g.channels_out,
            "conv2d: bias length against output channels"
        );
    }

    let len = [g.batch, g.channels_out, l]
        .into_iter()
        .try_fold(1usize, usize::checked_mul)
        .expect("conv2d: output size overflows usize");
    kc.checked_mul(l)
        .expect("conv2d: im2col size overflows usize");
    let mut y = Vec::<T>::with_capacity(len);
    for_each_chunk(
        &mut y.spare_capacity_mut()[..len],
        g.channels_out * l,
        |b, yb| {
            let mut col = vec![T::zero(); if g.is_pointwise() { 0 } else { kc * l }];
            for gi in 0..g.groups {
                let xg = &xd[(b * g.channels_in + gi * g.cg) * g.in_len()..][..g.cg * g.in_len()];
                let rhs = if g.is_pointwise() {
                    xg
                } else {
                    im2col(&g, xg, &mut col);
                    &col
                };
                let yg = &mut yb[gi * g.og * l..][..g.og * l];
                let lhs = Mat::row_major(&wd[gi * g.og * kc..][..g.og * kc], kc);
                // SAFETY: `yg` holds og×l elements; without accumulation the
                // GEMM writes them all and reads none.
                unsafe {
                    gemm_raw(
                        yg.as_mut_ptr().cast::<T>(),
                        [g.og, l, kc],
                        lhs,
                        Mat::row_major(rhs, l),
                        false,
                    );
                }
            }
            if let Some(bd) = bd {
                // SAFETY: every element of `yb` was written above.
                let yb = unsafe { &mut *(yb as *mut [core::mem::MaybeUninit<T>] as *mut [T]) };
                for (row, &bias) in yb.chunks_exact_mut(l).zip(bd) {
                    row.iter_mut().for_each(|v| *v = *v + bias);
                }
            }
        },
    );
    // SAFETY: the chunks cover `..len` and each was written by its GEMMs
    // (`channels_out * l` divides `len`).
    unsafe { y.set_len(len) };
    out_tensor(y, [g.batch, g.channels_out, g.out_h, g.out_w])
}

/// Input gradient: `dx_b = col2im(Wᵀ · dY_b)` per group, in parallel over
/// the batch (each item's gradient is computed by one thread).
pub(crate) fn conv2d_x_backward<T: ConvScalar>(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: &ConvOptions<2>,
) -> FlexTensor {
    let weight = weight.to_contiguous();
    let dy = output_grad.to_contiguous();
    let ds = dy.layout().shape();
    let g = Geometry::new(
        x.layout().shape(),
        weight.layout().shape(),
        [ds[2], ds[3]],
        options,
    );
    let (l, kc) = (g.out_len(), g.col_rows());
    let wd: &[T] = contiguous_slice(&weight);
    let dyd: &[T] = contiguous_slice(&dy);

    let mut dx = vec![T::zero(); g.batch * g.channels_in * g.in_len()];
    for_each_chunk(&mut dx, g.channels_in * g.in_len(), |b, dxb| {
        let mut col = vec![T::zero(); if g.is_pointwise() { 0 } else { kc * l }];
        for gi in 0..g.groups {
            let dyg = &dyd[(b * g.channels_out + gi * g.og) * l..][..g.og * l];
            let lhs = Mat::transposed(&wd[gi * g.og * kc..(gi + 1) * g.og * kc], kc);
            let dxg = &mut dxb[gi * g.cg * g.in_len()..(gi + 1) * g.cg * g.in_len()];
            if g.is_pointwise() {
                gemm(dxg, [kc, l, g.og], lhs, Mat::row_major(dyg, l), false);
            } else {
                gemm(&mut col, [kc, l, g.og], lhs, Mat::row_major(dyg, l), false);
                col2im(&g, &col, dxg);
            }
        }
    });
    out_tensor(dx, [g.batch, g.channels_in, g.in_h, g.in_w])
}

/// Weight gradient: `dW = Σ_b dY_b · im2col(x_b)ᵀ` per group. The batch is
/// cut into at most [MAX_WEIGHT_GRAD_CHUNKS] chunks (boundaries fixed by the
/// batch size); each chunk accumulates its items in order on one thread, and
/// the chunk partials are added in chunk order.
pub(crate) fn conv2d_weight_backward<T: ConvScalar>(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: &ConvOptions<2>,
) -> FlexTensor {
    let x = x.to_contiguous();
    let dy = output_grad.to_contiguous();
    let ws = weight.layout().shape();
    let ds = dy.layout().shape();
    let g = Geometry::new(x.layout().shape(), ws, [ds[2], ds[3]], options);
    let (l, kc) = (g.out_len(), g.col_rows());
    let xd: &[T] = contiguous_slice(&x);
    let dyd: &[T] = contiguous_slice(&dy);
    let w_len = g.channels_out * kc;

    let chunks = g.batch.clamp(1, MAX_WEIGHT_GRAD_CHUNKS);
    let per_chunk = g.batch.div_ceil(chunks);
    let mut partials = vec![T::zero(); chunks * w_len];
    for_each_chunk(&mut partials, w_len, |chunk, dw| {
        let mut col = vec![T::zero(); if g.is_pointwise() { 0 } else { kc * l }];
        let items = chunk * per_chunk..((chunk + 1) * per_chunk).min(g.batch);
        for (i, b) in items.enumerate() {
            for gi in 0..g.groups {
                let xg = &xd[(b * g.channels_in + gi * g.cg) * g.in_len()..][..g.cg * g.in_len()];
                let rhs = if g.is_pointwise() {
                    Mat::transposed(xg, l)
                } else {
                    im2col(&g, xg, &mut col);
                    Mat::transposed(&col, l)
                };
                let dyg = &dyd[(b * g.channels_out + gi * g.og) * l..][..g.og * l];
                gemm(
                    &mut dw[gi * g.og * kc..(gi + 1) * g.og * kc],
                    [g.og, kc, l],
                    Mat::row_major(dyg, l),
                    rhs,
                    i > 0,
                );
            }
        }
    });
    let mut dw = partials[..w_len].to_vec();
    for partial in partials.chunks(w_len).skip(1) {
        dw.iter_mut().zip(partial).for_each(|(a, &p)| *a = *a + p);
    }
    out_tensor(dw, [ws[0], ws[1], ws[2], ws[3]])
}

/// Bias gradient: `db[o] = Σ_b Σ_p dY[b, o, p]`, one channel per task, the
/// batch in order, each plane summed with a fixed 8-lane split.
pub(crate) fn conv2d_bias_backward<T: ConvScalar>(
    bias: FlexTensor,
    output_grad: FlexTensor,
) -> FlexTensor {
    let dy = output_grad.to_contiguous();
    let ds = dy.layout().shape();
    let (batch, channels, l) = (ds[0], ds[1], ds[2] * ds[3]);
    let dyd: &[T] = contiguous_slice(&dy);
    let mut db = vec![T::zero(); channels];
    for_each_chunk(&mut db, 1, |o, out| {
        let mut total = T::zero();
        for b in 0..batch {
            total = total + lane_sum(&dyd[(b * channels + o) * l..][..l]);
        }
        out[0] = total;
    });
    FlexTensor::new(
        Bytes::from_elems(db),
        Layout::contiguous(bias.layout().shape().clone()),
        T::dtype(),
    )
}

/// Sum with 8 independent accumulators (vectorizable), combined in a fixed
/// order: the same result on every call for the same input.
pub(crate) fn lane_sum<T: ConvScalar>(values: &[T]) -> T {
    let mut lanes = [T::zero(); 8];
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(c) {
            *lane = *lane + v;
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = *lane + v;
    }
    let [a, b, c, d, e, f, g, h] = lanes;
    ((a + b) + (c + d)) + ((e + f) + (g + h))
}

/// Dispatch on dtype: f32 and f64 natively, f16 and bf16 through f32.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident ( $($arg:expr),* ), [$($t:ident),*]) => {
        match $dtype {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            DType::F16 => cast_from_f32($f::<f32>($(by_dtype!(@cast f16, $t, $arg)),*), f16::from_f32),
            DType::BF16 => cast_from_f32($f::<f32>($(by_dtype!(@cast bf16, $t, $arg)),*), bf16::from_f32),
            dtype => panic!("conv2d: unsupported dtype {dtype:?}"),
        }
    };
    (@cast $h:ident, t, $arg:expr) => { cast_to_f32($arg, $h::to_f32) };
    (@cast $h:ident, p, $arg:expr) => { $arg };
}

/// [conv2d_x_backward] for any float dtype.
pub(crate) fn conv2d_x_backward_any(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: &ConvOptions<2>,
) -> FlexTensor {
    by_dtype!(
        output_grad.dtype(),
        conv2d_x_backward(x, weight, output_grad, options),
        [p, t, t, p]
    )
}

/// [conv2d_weight_backward] for any float dtype.
pub(crate) fn conv2d_weight_backward_any(
    x: FlexTensor,
    weight: FlexTensor,
    output_grad: FlexTensor,
    options: &ConvOptions<2>,
) -> FlexTensor {
    by_dtype!(
        output_grad.dtype(),
        conv2d_weight_backward(x, weight, output_grad, options),
        [t, t, t, p]
    )
}

/// [conv2d_bias_backward] for any float dtype.
pub(crate) fn conv2d_bias_backward_any(bias: FlexTensor, output_grad: FlexTensor) -> FlexTensor {
    by_dtype!(
        output_grad.dtype(),
        conv2d_bias_backward(bias, output_grad),
        [p, t]
    )
}
