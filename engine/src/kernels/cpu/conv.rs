//! 2-D convolution (NHWC input, HWIO filter, NHWC output) and its two
//! gradients, by im2col + GEMM.
//!
//! Every output position `(b, oy, ox)` is one row of a "patch" matrix whose
//! `k_h * k_w * in_c` columns are the input values under the filter window
//! (zero where the window hangs over the padding). Flattened HWIO, the filter
//! is a `[k_h * k_w * in_c, out_c]` matrix, so
//!
//! * forward:          `out[P, oc]    = patches[P, K] · filter[K, oc]`
//! * input gradient:   `dpatches[P, K] = grad_out[P, oc] · filter[K, oc]^T`,
//!   then scatter-added back onto the input positions (col2im);
//! * filter gradient:  `dfilter[K, oc] = patches[P, K]^T · grad_out[P, oc]`.
//!
//! The patch matrix is built in chunks of rows so memory stays bounded for
//! large batches; a 1x1, stride-1, unpadded convolution skips it entirely
//! (the input already is the patch matrix). On AVX-512 CPUs most f32 shapes
//! skip it too: [`super::conv_direct`] convolves without a patch matrix.

use super::conv_direct;
use super::pool::{Pool2dGeom, max_pool_with_workspace};
use super::matmul::{Product, gemm_strided};
use super::scalar::Float;
use super::vectorize::vectorized;
use rayon::prelude::*;

/// TensorFlow's padding schemes, with its exact output-size and offset rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// `out = ceil(in / stride)`; the total padding
    /// `max((out - 1) * stride + k - in, 0)` is split with the smaller half
    /// (`total / 2`) before and the rest after.
    Same,
    /// No padding: `out = (in - k) / stride + 1`; the window must fit.
    Valid,
    /// Given padding before and after each axis (`[top, bottom]`,
    /// `[left, right]`), as TensorFlow's EXPLICIT and ONNX's `pads`:
    /// `out = (in + before + after - k) / stride + 1`. A window reaching
    /// only padding is refused (each pad smaller than the window).
    Explicit { h: [usize; 2], w: [usize; 2] },
}

/// Output size and leading padding of one spatial axis, TF rules.
pub(crate) fn window_axis(
    axis: &str,
    input: usize,
    k: usize,
    stride: usize,
    padding: Padding,
) -> Result<(usize, usize), String> {
    if k == 0 {
        return Err(format!("window {axis} size must be at least 1, got 0"));
    }
    if stride == 0 {
        return Err(format!("stride along {axis} must be at least 1, got 0"));
    }
    match padding {
        Padding::Valid => {
            if k > input {
                return Err(format!(
                    "VALID padding: window {axis} {k} is larger than the input {axis} {input}"
                ));
            }
            Ok(((input - k) / stride + 1, 0))
        }
        Padding::Same => {
            let out = input.div_ceil(stride);
            let total = out.saturating_sub(1).saturating_mul(stride).saturating_add(k).saturating_sub(input);
            Ok((out, total / 2))
        }
        Padding::Explicit { h, w } => {
            let [before, after] = if axis == "height" { h } else { w };
            if before >= k || after >= k {
                return Err(format!("padding {before} before and {after} after along {axis} must each be smaller than the window {k}"));
            }
            let padded = input + before + after;
            if k > padded {
                return Err(format!("window {axis} {k} is larger than the padded input {axis} {padded}"));
            }
            Ok(((padded - k) / stride + 1, before))
        }
    }
}

/// Every size a convolution kernel needs, validated once by the op layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dGeom {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub in_c: usize,
    pub k_h: usize,
    pub k_w: usize,
    pub out_c: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl Conv2dGeom {
    /// Geometry of an NHWC input convolved with an HWIO filter. Errors name
    /// the offending parameter and sizes: mismatched input channels, a zero
    /// stride or window, or a VALID window larger than the input.
    pub fn new(
        input_nhwc: [usize; 4],
        filter_hwio: [usize; 4],
        strides: [usize; 2],
        padding: Padding,
    ) -> Result<Self, String> {
        let [batch, in_h, in_w, in_c] = input_nhwc;
        let [k_h, k_w, f_in, out_c] = filter_hwio;
        if f_in != in_c {
            return Err(format!(
                "filter input channels {f_in} (filter shape {filter_hwio:?}) do not match input channels {in_c} (input shape {input_nhwc:?})"
            ));
        }
        let (out_h, pad_top) = window_axis("height", in_h, k_h, strides[0], padding)?;
        let (out_w, pad_left) = window_axis("width", in_w, k_w, strides[1], padding)?;
        // Every length the kernels index with (input, filter, output, one
        // im2col matrix) must be a product that does not overflow.
        let fits = |d: &[usize]| d.iter().try_fold(1usize, |a, &x| a.checked_mul(x)).is_some();
        if ![&[batch, in_h, in_w, in_c][..], &filter_hwio, &[batch, out_h, out_w, out_c], &[batch, out_h, out_w, k_h, k_w, in_c]]
            .iter()
            .all(|d| fits(d))
        {
            return Err(format!(
                "input {input_nhwc:?} with filter {filter_hwio:?} gives sizes larger than this machine can address"
            ));
        }
        Ok(Self {
            batch,
            in_h,
            in_w,
            in_c,
            k_h,
            k_w,
            out_c,
            stride_h: strides[0],
            stride_w: strides[1],
            pad_top,
            pad_left,
            out_h,
            out_w,
        })
    }

    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.in_c
    }
    pub fn filter_len(&self) -> usize {
        self.k_h * self.k_w * self.in_c * self.out_c
    }
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h * self.out_w * self.out_c
    }
    /// Debug builds: the three buffers of a convolution have this geometry's lengths.
    fn debug_assert_lens(&self, input: usize, filter: usize, output: usize) {
        debug_assert_eq!(input, self.input_len());
        debug_assert_eq!(filter, self.filter_len());
        debug_assert_eq!(output, self.output_len());
    }
    /// Multiply-adds times two of the forward pass (each gradient costs the same).
    pub fn flops(&self) -> u64 {
        2 * (self.batch * self.out_h * self.out_w) as u64 * self.patch_len() as u64 * self.out_c as u64
    }

    /// Columns of the patch matrix: `k_h * k_w * in_c`.
    fn patch_len(&self) -> usize {
        self.k_h * self.k_w * self.in_c
    }
    /// Rows of the patch matrix: one per output position.
    fn positions(&self) -> usize {
        self.batch * self.out_h * self.out_w
    }
    /// True when the input itself is the patch matrix.
    fn is_pointwise(&self) -> bool {
        self.k_h == 1
            && self.k_w == 1
            && self.stride_h == 1
            && self.stride_w == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.out_h == self.in_h
            && self.out_w == self.in_w
    }
    /// Patch-matrix rows per chunk: whole images when they fit in the budget.
    fn rows_per_chunk(&self) -> usize {
        let per_row = self.patch_len().max(1);
        let budget = (PATCH_BUDGET_ELEMS / per_row).max(1);
        let image = (self.out_h * self.out_w).max(1);
        if budget >= image { (budget / image) * image } else { budget }
    }
}

/// Upper bound on the elements of one patch-matrix chunk (1 MiB of f32, a
/// core's L2 on the machines measured): im2col writes a chunk that the GEMM
/// then reads while it is still in cache. The Deep MNIST CNN's second
/// convolution (batch 64) ran its forward, input and filter gradients in
/// 15.8 / 18.0 / 15.5 ms with 16 MiB chunks and 13.2 / 15.3 / 13.1 ms
/// with 1 MiB (one thread, interleaved runs, `flowlab profile --model cnn`).
const PATCH_BUDGET_ELEMS: usize = 1 << 18;

/// Splits `rows` rows of `row_len` into at most `threads` contiguous pieces
/// and runs `f(first_row, piece)` on each, in parallel when `threads > 1`.
fn for_row_pieces<T: Send>(
    data: &mut [T],
    row_len: usize,
    threads: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let rows = data.len() / row_len.max(1);
    if threads <= 1 || rows < 2 {
        f(0, data);
        return;
    }
    let per = rows.div_ceil(threads);
    data.par_chunks_mut(per * row_len).enumerate().for_each(|(i, piece)| f(i * per, piece));
}

/// `dst.copy_from_slice(src)` for the short runs of im2col. A copy of a
/// length known only at run time is a call to `memmove`; the first
/// convolution of an MNIST CNN (one input channel, 5x5) copies 5 floats
/// per call, and the calls took a third of its forward pass (perf,
/// `cargo bench --bench cnn_kernels`). Runs of up to 8 elements are copied
/// with a fixed length instead, which compiles to plain moves.
#[inline(always)]
fn copy_run<T: Copy>(dst: &mut [T], src: &[T]) {
    macro_rules! fixed {
        ($($n:literal)*) => {
            match dst.len() {
                $($n => dst[..$n].copy_from_slice(&src[..$n]),)*
                _ => dst.copy_from_slice(src),
            }
        };
    }
    fixed!(1 2 3 4 5 6 7 8)
}

/// Fills `patches` (rows `first_row..` of the global patch matrix) from `input`.
/// The output position advances by counting, not by dividing per row: with
/// one input channel a row is only `k_h * k_w` elements long, and three
/// divisions per row cost as much as its copies.
fn im2col<T: Float>(input: &[T], patches: &mut [T], first_row: usize, g: &Conv2dGeom, threads: usize) {
    let kl = g.patch_len();
    let run = g.k_w * g.in_c;
    let image_len = g.in_h * g.in_w * g.in_c;
    let row_len = g.in_w * g.in_c;
    for_row_pieces(patches, kl, threads, |row0, piece| {
        let pos = first_row + row0;
        let (mut b, mut oy, mut ox) = (pos / (g.out_h * g.out_w), (pos / g.out_w) % g.out_h, pos % g.out_w);
        for row in piece.chunks_exact_mut(kl) {
            let img = &input[b * image_len..][..image_len];
            let ix0 = (ox * g.stride_w) as isize - g.pad_left as isize;
            let whole_width = ix0 >= 0 && ix0 as usize + g.k_w <= g.in_w;
            for ky in 0..g.k_h {
                let dst_ky = &mut row[ky * run..][..run];
                let iy = (oy * g.stride_h + ky) as isize - g.pad_top as isize;
                if iy < 0 || iy as usize >= g.in_h {
                    dst_ky.fill(T::ZERO);
                    continue;
                }
                let src_row = &img[iy as usize * row_len..][..row_len];
                if whole_width {
                    // Whole window row inside the image: one contiguous copy.
                    copy_run(dst_ky, &src_row[ix0 as usize * g.in_c..][..run]);
                    continue;
                }
                for kx in 0..g.k_w {
                    let ix = ix0 + kx as isize;
                    let dst = &mut dst_ky[kx * g.in_c..][..g.in_c];
                    if ix < 0 || ix as usize >= g.in_w {
                        dst.fill(T::ZERO);
                    } else {
                        copy_run(dst, &src_row[ix as usize * g.in_c..][..g.in_c]);
                    }
                }
            }
            ox += 1;
            if ox == g.out_w {
                ox = 0;
                oy += 1;
                if oy == g.out_h {
                    oy = 0;
                    b += 1;
                }
            }
        }
    });
}

/// Scatter-adds patch rows `first_row..` back onto their input positions of
/// `grad_in` (which covers the whole batch). Images are independent, so the
/// rows of different images are added in parallel.
fn col2im<T: Float>(dpatches: &[T], grad_in: &mut [T], first_row: usize, g: &Conv2dGeom, threads: usize) {
    let kl = g.patch_len();
    let image_rows = g.out_h * g.out_w;
    let image_len = g.in_h * g.in_w * g.in_c;
    let rows = dpatches.len() / kl.max(1);
    let first_img = first_row / image_rows;
    let last_img = (first_row + rows).div_ceil(image_rows);
    let add_image = |b: usize, img: &mut [T]| vectorized(#[inline(always)] || {
        let lo = (b * image_rows).max(first_row);
        let hi = ((b + 1) * image_rows).min(first_row + rows);
        for pos in lo..hi {
            let row = &dpatches[(pos - first_row) * kl..][..kl];
            let oy = (pos / g.out_w) % g.out_h;
            let ox = pos % g.out_w;
            for ky in 0..g.k_h {
                let iy = (oy * g.stride_h + ky) as isize - g.pad_top as isize;
                if iy < 0 || iy as usize >= g.in_h {
                    continue;
                }
                for kx in 0..g.k_w {
                    let ix = (ox * g.stride_w + kx) as isize - g.pad_left as isize;
                    if ix < 0 || ix as usize >= g.in_w {
                        continue;
                    }
                    let dst = &mut img[(iy as usize * g.in_w + ix as usize) * g.in_c..][..g.in_c];
                    let src = &row[(ky * g.k_w + kx) * g.in_c..][..g.in_c];
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d += *s;
                    }
                }
            }
        }
    });
    let imgs = &mut grad_in[first_img * image_len..last_img * image_len];
    if threads > 1 && last_img - first_img > 1 {
        imgs.par_chunks_mut(image_len).enumerate().for_each(|(i, img)| add_image(first_img + i, img));
    } else {
        for (i, img) in imgs.chunks_mut(image_len).enumerate() {
            add_image(first_img + i, img);
        }
    }
}

/// `out = conv2d(input, filter)`: NHWC input, HWIO filter, NHWC output,
/// overwriting `out`. `threads` as for [`super::matmul::matmul`]. Runs the
/// direct kernel where it applies (f32, AVX-512, output channels a multiple
/// of 16, not 1x1), else [`conv2d_by_im2col`].
pub fn conv2d<T: Float>(input: &[T], filter: &[T], out: &mut [T], g: &Conv2dGeom, threads: usize) {
    assert_eq!(input.len(), g.input_len(), "conv2d: input length");
    assert_eq!(filter.len(), g.filter_len(), "conv2d: filter length");
    assert_eq!(out.len(), g.output_len(), "conv2d: output length");
    if !g.is_pointwise() && conv_direct::forward(input, filter, out, g, threads, |_, _| ()) {
        return;
    }
    conv2d_by_im2col(input, filter, out, g, threads);
}

/// What a fused convolution applies to each block of its output while the
/// block is in cache: a bias per output channel, a residual of the
/// output's shape (a ResNet block's shortcut) when given, then a ReLU when
/// `relu` (TensorFlow's `_FusedConv2D` with BiasAdd [, Add] [, Relu]).
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a, T> {
    pub bias: &'a [T],
    pub residual: Option<&'a [T]>,
    pub relu: bool,
}

/// A max pool's outputs: the pooled values and, per value, the window
/// offset it came from (what the gradient reads back).
#[derive(Debug)]
pub struct PooledOut<'a, T> {
    pub values: &'a mut [T],
    pub argmax: &'a mut [i8],
}

/// `out = relu?(conv2d(input, filter) + bias [+ residual])`, the
/// epilogue applied to each block of output while it is in cache instead
/// of more passes over the whole output. Every value is the one Conv2D,
/// BiasAdd, Add and Relu give one after the other, bit for bit: the same
/// products, then the same single-precision adds and select.
pub fn conv2d_bias<T: Float>(input: &[T], filter: &[T], epi: Epilogue<T>, out: &mut [T], g: &Conv2dGeom, threads: usize) {
    let Epilogue { bias, residual, relu } = epi;
    assert_eq!(bias.len(), g.out_c, "conv2d_bias: bias length");
    assert_eq!(out.len(), g.output_len(), "conv2d_bias: output length");
    assert!(residual.is_none_or(|r| r.len() == out.len()), "conv2d_bias: residual length");
    // The direct kernel is f32's: bias and residual (of the same T) are f32 slices then.
    let res32 = residual.and_then(conv_direct::as_f32);
    if !g.is_pointwise()
        && let Some(b32) = conv_direct::as_f32(bias)
        && conv_direct::forward(input, filter, out, g, threads, |at, img| bias_act(img, b32, res32.map(|r| &r[at..at + img.len()]), relu))
    {
        return;
    }
    forward_by_im2col(input, filter, out, g, threads, |at, rows| bias_act(rows, bias, residual.map(|r| &r[at..at + rows.len()]), relu));
}

/// [`conv2d_bias`], then [`max_pool_with_workspace`] with `pool` (whose
/// input is the convolution's output) into `out`. With the direct kernel
/// each image is pooled while its convolution output is in cache, and that
/// output is never written whole; bit for bit the two kernels one after
/// the other.
pub fn conv2d_bias_max_pool<T: Float>(input: &[T], filter: &[T], epi: Epilogue<T>, out: PooledOut<T>, g: &Conv2dGeom, pool: &Pool2dGeom, threads: usize) {
    let Epilogue { bias, residual, relu } = epi;
    assert_eq!(bias.len(), g.out_c, "conv2d_bias_max_pool: bias length");
    assert!(residual.is_none_or(|r| r.len() == g.output_len()), "conv2d_bias_max_pool: residual length");
    assert_eq!(
        (pool.batch, pool.in_h, pool.in_w, pool.channels),
        (g.batch, g.out_h, g.out_w, g.out_c),
        "conv2d_bias_max_pool: the pool's input is the convolution's output"
    );
    assert!(out.values.len() == pool.output_len() && out.argmax.len() == pool.output_len(), "conv2d_bias_max_pool: output lengths");
    let one = Pool2dGeom { batch: 1, ..*pool };
    let res32 = residual.and_then(conv_direct::as_f32);
    if !g.is_pointwise()
        && let Some(b32) = conv_direct::as_f32(bias)
        && conv_direct::forward_pooled(
            input,
            filter,
            PooledOut { values: &mut *out.values, argmax: &mut *out.argmax },
            g,
            threads,
            |at, img| bias_act(img, b32, res32.map(|r| &r[at..at + img.len()]), relu),
            |img, p, w| max_pool_with_workspace(img, p, w, &one, 1),
        )
    {
        return;
    }
    let mut y = vec![T::ZERO; g.output_len()];
    conv2d_bias(input, filter, epi, &mut y, g, threads);
    max_pool_with_workspace(&y, out.values, out.argmax, pool, threads);
}

/// Adds `bias` to every row of `out` (rows of `bias.len()` channels), then
/// `residual` (as long as `out`) when given, then zeroes what is not
/// positive when `relu` (as the Relu kernel: NaN too).
fn bias_act<T: Float>(out: &mut [T], bias: &[T], residual: Option<&[T]>, relu: bool) {
    #[inline(always)]
    fn relu_of<T: Float>(v: T) -> T {
        if v > T::ZERO { v } else { T::ZERO }
    }
    let c = bias.len();
    vectorized(
        #[inline(always)]
        || match (residual, relu) {
            (None, true) => out.chunks_exact_mut(c).for_each(|row| row.iter_mut().zip(bias).for_each(|(o, &b)| *o = relu_of(*o + b))),
            (None, false) => out.chunks_exact_mut(c).for_each(|row| row.iter_mut().zip(bias).for_each(|(o, &b)| *o += b)),
            (Some(res), true) => out
                .chunks_exact_mut(c)
                .zip(res.chunks_exact(c))
                .for_each(|(row, res)| row.iter_mut().zip(bias).zip(res).for_each(|((o, &b), &r)| *o = relu_of((*o + b) + r))),
            (Some(res), false) => out
                .chunks_exact_mut(c)
                .zip(res.chunks_exact(c))
                .for_each(|(row, res)| row.iter_mut().zip(bias).zip(res).for_each(|((o, &b), &r)| *o = (*o + b) + r)),
        },
    )
}

/// [`conv2d`] by im2col + GEMM whatever the shape: the path for shapes the
/// direct kernel does not take, and its peer in `cargo bench --bench
/// cnn_kernels`.
pub fn conv2d_by_im2col<T: Float>(input: &[T], filter: &[T], out: &mut [T], g: &Conv2dGeom, threads: usize) {
    forward_by_im2col(input, filter, out, g, threads, |_, _| ());
}

/// [`conv2d_by_im2col`], running `epilogue(first, rows)` on each chunk of
/// output rows right after its product (`first`: its first element's
/// index in `out`).
fn forward_by_im2col<T: Float>(input: &[T], filter: &[T], out: &mut [T], g: &Conv2dGeom, threads: usize, epilogue: impl Fn(usize, &mut [T])) {
    assert_eq!(input.len(), g.input_len(), "conv2d: input length");
    assert_eq!(filter.len(), g.filter_len(), "conv2d: filter length");
    assert_eq!(out.len(), g.output_len(), "conv2d: output length");
    let (kl, oc, p) = (g.patch_len(), g.out_c, g.positions());
    if g.is_pointwise() {
        gemm_strided(input, filter, out, Product::new(p, oc, kl), false, threads);
        epilogue(0, out);
        return;
    }
    let chunk = g.rows_per_chunk().min(p.max(1));
    let mut patches = vec![T::ZERO; chunk * kl];
    let mut r0 = 0;
    while r0 < p {
        let rows = chunk.min(p - r0);
        let pt = &mut patches[..rows * kl];
        im2col(input, pt, r0, g, threads);
        let block = &mut out[r0 * oc..(r0 + rows) * oc];
        gemm_strided(pt, filter, block, Product::new(rows, oc, kl), false, threads);
        epilogue(r0 * oc, block);
        r0 += rows;
    }
}

/// Gradient of [`conv2d`] with respect to its input, overwriting `grad_in`
/// (NHWC, the input's shape) from `grad_out` (NHWC, the output's shape).
/// Runs the direct kernel where it applies (f32, AVX-512, input channels a
/// multiple of 16, stride 1, not 1x1), else
/// [`conv2d_backprop_input_by_im2col`].
pub fn conv2d_backprop_input<T: Float>(
    grad_out: &[T],
    filter: &[T],
    grad_in: &mut [T],
    g: &Conv2dGeom,
    threads: usize,
) {
    g.debug_assert_lens(grad_in.len(), filter.len(), grad_out.len());
    if !g.is_pointwise() && conv_direct::input_grad(grad_out, filter, grad_in, g, threads) {
        return;
    }
    conv2d_backprop_input_by_im2col(grad_out, filter, grad_in, g, threads);
}

/// [`conv2d_backprop_input`] by GEMM + col2im whatever the shape.
pub fn conv2d_backprop_input_by_im2col<T: Float>(
    grad_out: &[T],
    filter: &[T],
    grad_in: &mut [T],
    g: &Conv2dGeom,
    threads: usize,
) {
    g.debug_assert_lens(grad_in.len(), filter.len(), grad_out.len());
    let (kl, oc, p) = (g.patch_len(), g.out_c, g.positions());
    if g.is_pointwise() {
        gemm_strided(grad_out, filter, grad_in, Product::new(p, kl, oc).transposed(false, true), false, threads);
        return;
    }
    grad_in.fill(T::ZERO);
    let chunk = g.rows_per_chunk().min(p.max(1));
    let mut dpatches = vec![T::ZERO; chunk * kl];
    let mut r0 = 0;
    while r0 < p {
        let rows = chunk.min(p - r0);
        let dp = &mut dpatches[..rows * kl];
        gemm_strided(&grad_out[r0 * oc..(r0 + rows) * oc], filter, dp, Product::new(rows, kl, oc).transposed(false, true), false, threads);
        col2im(dp, grad_in, r0, g, threads);
        r0 += rows;
    }
}

/// Gradient of [`conv2d`] with respect to its filter, overwriting
/// `grad_filter` (HWIO) from the forward `input` and `grad_out`. Runs the
/// direct kernel where it applies (f32, AVX-512, output channels a multiple
/// of 16, not 1x1), else [`conv2d_backprop_filter_by_im2col`].
pub fn conv2d_backprop_filter<T: Float>(
    input: &[T],
    grad_out: &[T],
    grad_filter: &mut [T],
    g: &Conv2dGeom,
    threads: usize,
) {
    g.debug_assert_lens(input.len(), grad_filter.len(), grad_out.len());
    if !g.is_pointwise() && g.positions() > 0 && conv_direct::filter_grad(input, grad_out, grad_filter, g, threads) {
        return;
    }
    conv2d_backprop_filter_by_im2col(input, grad_out, grad_filter, g, threads);
}

/// [`conv2d_backprop_filter`] by im2col + GEMM whatever the shape.
pub fn conv2d_backprop_filter_by_im2col<T: Float>(
    input: &[T],
    grad_out: &[T],
    grad_filter: &mut [T],
    g: &Conv2dGeom,
    threads: usize,
) {
    g.debug_assert_lens(input.len(), grad_filter.len(), grad_out.len());
    let (kl, oc, p) = (g.patch_len(), g.out_c, g.positions());
    if g.is_pointwise() {
        gemm_strided(input, grad_out, grad_filter, Product::new(kl, oc, p).transposed(true, false), false, threads);
        return;
    }
    if p == 0 {
        grad_filter.fill(T::ZERO);
        return;
    }
    let chunk = g.rows_per_chunk().min(p);
    let mut patches = vec![T::ZERO; chunk * kl];
    let mut r0 = 0;
    while r0 < p {
        let rows = chunk.min(p - r0);
        let pt = &mut patches[..rows * kl];
        im2col(input, pt, r0, g, threads);
        gemm_strided(pt, &grad_out[r0 * oc..(r0 + rows) * oc], grad_filter, Product::new(kl, oc, rows).transposed(true, false), r0 > 0, threads);
        r0 += rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::conv_direct::DirectKernels;
    use crate::kernels::cpu::matmul::tests::random;

    /// Direct seven-loop convolution in f64, the reference.
    fn naive_conv(input: &[f64], filter: &[f64], g: &Conv2dGeom) -> Vec<f64> {
        let mut out = vec![0.0; g.output_len()];
        for b in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for o in 0..g.out_c {
                        let mut s = 0.0;
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let iy = (oy * g.stride_h + ky) as isize - g.pad_top as isize;
                                let ix = (ox * g.stride_w + kx) as isize - g.pad_left as isize;
                                if iy < 0 || ix < 0 || iy as usize >= g.in_h || ix as usize >= g.in_w {
                                    continue;
                                }
                                for c in 0..g.in_c {
                                    let iv = input[((b * g.in_h + iy as usize) * g.in_w + ix as usize) * g.in_c + c];
                                    let fv = filter[((ky * g.k_w + kx) * g.in_c + c) * g.out_c + o];
                                    s += iv * fv;
                                }
                            }
                        }
                        out[((b * g.out_h + oy) * g.out_w + ox) * g.out_c + o] = s;
                    }
                }
            }
        }
        out
    }

    /// (input NHWC, filter HWIO, strides, padding) cases covering SAME/VALID,
    /// stride 2, odd sizes, even kernels (asymmetric SAME padding), 1x1.
    fn cases() -> Vec<([usize; 4], [usize; 4], [usize; 2], Padding)> {
        vec![
            ([2, 5, 6, 3], [3, 3, 3, 4], [1, 1], Padding::Same),
            ([2, 5, 6, 3], [3, 3, 3, 4], [1, 1], Padding::Valid),
            ([1, 7, 8, 2], [3, 2, 2, 5], [2, 2], Padding::Same),
            ([3, 7, 9, 2], [2, 4, 2, 3], [2, 3], Padding::Valid),
            ([2, 6, 6, 4], [4, 4, 4, 2], [2, 2], Padding::Same),
            ([2, 4, 5, 6], [1, 1, 6, 3], [1, 1], Padding::Same),
            ([2, 5, 5, 3], [1, 1, 3, 2], [2, 2], Padding::Valid),
            ([1, 3, 3, 1], [5, 5, 1, 2], [1, 1], Padding::Same),
            // Even windows at unit stride: SAME pads less before than after.
            ([2, 5, 6, 3], [4, 2, 3, 2], [1, 1], Padding::Same),
        ]
    }

    /// Both gradients by direct scatter loops in f64, the reference:
    /// `dx[b, iy, ix, c] += dy[b, oy, ox, o] * w[ky, kx, c, o]` and
    /// `dw[ky, kx, c, o] += x[b, iy, ix, c] * dy[b, oy, ox, o]`.
    fn naive_backprops(x: &[f64], w: &[f64], dy: &[f64], g: &Conv2dGeom) -> (Vec<f64>, Vec<f64>) {
        let (mut dx, mut dw) = (vec![0.0; g.input_len()], vec![0.0; g.filter_len()]);
        for b in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for ky in 0..g.k_h {
                        for kx in 0..g.k_w {
                            let iy = (oy * g.stride_h + ky) as isize - g.pad_top as isize;
                            let ix = (ox * g.stride_w + kx) as isize - g.pad_left as isize;
                            if iy < 0 || ix < 0 || iy as usize >= g.in_h || ix as usize >= g.in_w {
                                continue;
                            }
                            let xi = ((b * g.in_h + iy as usize) * g.in_w + ix as usize) * g.in_c;
                            for c in 0..g.in_c {
                                for o in 0..g.out_c {
                                    let d = dy[((b * g.out_h + oy) * g.out_w + ox) * g.out_c + o];
                                    let wi = ((ky * g.k_w + kx) * g.in_c + c) * g.out_c + o;
                                    dx[xi + c] += d * w[wi];
                                    dw[wi] += x[xi + c] * d;
                                }
                            }
                        }
                    }
                }
            }
        }
        (dx, dw)
    }

    /// Shapes the direct kernels take (channels multiples of 16): SAME and
    /// VALID, stride 2 (the input gradient then takes im2col), an even window
    /// (SAME pads less before than after), 3 and 5 vectors of output
    /// channels, a batch of 11 (filter-gradient groups of unequal size), and
    /// the MNIST CNN's first layer (one input channel).
    fn direct_cases() -> Vec<([usize; 4], [usize; 4], [usize; 2], Padding)> {
        vec![
            ([3, 7, 6, 16], [3, 3, 16, 32], [1, 1], Padding::Same),
            ([2, 9, 8, 32], [5, 5, 32, 64], [1, 1], Padding::Same),
            ([11, 5, 6, 16], [2, 4, 16, 48], [1, 1], Padding::Same),
            ([2, 8, 9, 16], [3, 3, 16, 80], [2, 2], Padding::Same),
            ([2, 7, 7, 16], [3, 2, 16, 16], [1, 1], Padding::Valid),
            ([2, 9, 10, 32], [4, 3, 32, 16], [2, 3], Padding::Valid),
            ([4, 12, 12, 1], [5, 5, 1, 32], [1, 1], Padding::Same),
            // Widths that split into whole row blocks of 14 pixels at 2
            // vectors of channels (32 or 64 channels read): the forward
            // pass, the input gradient, or both, over several tap passes.
            ([2, 14, 14, 64], [3, 3, 64, 32], [1, 1], Padding::Same),
            ([1, 6, 28, 32], [5, 5, 32, 32], [1, 1], Padding::Same),
            ([2, 5, 14, 32], [5, 5, 32, 64], [1, 1], Padding::Same),
            ([1, 4, 16, 32], [3, 3, 32, 32], [1, 1], Padding::Valid),
        ]
    }

    /// The direct kernels against direct loops in f64, and bit for bit the
    /// same at one and two threads. The im2col path is held to the same
    /// reference on the same shapes.
    #[test]
    fn direct_kernels_match_direct_loops_at_any_thread_count() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (i, (inp, fil, st, pad)) in direct_cases().into_iter().enumerate() {
            let g = Conv2dGeom::new(inp, fil, st, pad).unwrap();
            let kernels = DirectKernels::of::<f32>(&g);
            if !kernels.forward {
                eprintln!("SKIPPED direct_kernels_match_direct_loops_at_any_thread_count: this CPU has no AVX-512F");
                return;
            }
            assert!(kernels.filter_grad, "case {i}");
            assert_eq!(kernels.input_grad, st == [1, 1] && inp[3] % 16 == 0, "case {i}");
            let x = random::<f64>(g.input_len(), 70 + i as u64);
            let w = random::<f64>(g.filter_len(), 80 + i as u64);
            let dy = random::<f64>(g.output_len(), 90 + i as u64);
            let y_want = naive_conv(&x, &w, &g);
            let (dx_want, dw_want) = naive_backprops(&x, &w, &dy, &g);
            let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (x32, w32, dy32) = (f32s(&x), f32s(&w), f32s(&dy));
            let run = |threads: usize| {
                let mut y = vec![f32::NAN; g.output_len()];
                let mut dx = vec![f32::NAN; g.input_len()];
                let mut dw = vec![f32::NAN; g.filter_len()];
                pool.install(|| {
                    conv2d(&x32, &w32, &mut y, &g, threads);
                    conv2d_backprop_input(&dy32, &w32, &mut dx, &g, threads);
                    conv2d_backprop_filter(&x32, &dy32, &mut dw, &g, threads);
                });
                (y, dx, dw)
            };
            let one = run(1);
            let two = run(2);
            // Sums of up to 800 (forward, input gradient) or 1,100 (filter
            // gradient) products of values in [-1, 1], rounded to f32.
            let close = |got: &[f32], want: &[f64], what: &str| {
                assert_eq!(got.len(), want.len());
                for (j, (a, b)) in got.iter().zip(want).enumerate() {
                    assert!((*a as f64 - b).abs() < 2e-4 * (1.0 + b.abs()), "case {i} {what}[{j}]: {a} vs {b}");
                }
            };
            close(&one.0, &y_want, "forward");
            close(&one.1, &dx_want, "input gradient");
            close(&one.2, &dw_want, "filter gradient");
            assert!(one.0 == two.0 && one.1 == two.1 && one.2 == two.2, "case {i}: 2 threads differ from 1");
            let mut y = vec![f32::NAN; g.output_len()];
            let mut dx = vec![f32::NAN; g.input_len()];
            let mut dw = vec![f32::NAN; g.filter_len()];
            conv2d_by_im2col(&x32, &w32, &mut y, &g, 1);
            conv2d_backprop_input_by_im2col(&dy32, &w32, &mut dx, &g, 1);
            conv2d_backprop_filter_by_im2col(&x32, &dy32, &mut dw, &g, 1);
            close(&y, &y_want, "im2col forward");
            close(&dx, &dx_want, "im2col input gradient");
            close(&dw, &dw_want, "im2col filter gradient");
        }
    }

    /// The fused bias and activation against direct loops in f64 (the
    /// convolution, plus the channel's bias, then max(0, .)), on the direct
    /// kernel's shapes and on the im2col path's, at one and two threads;
    /// and bit for bit what Conv2D, then BiasAdd, then Relu give.
    #[test]
    fn fused_bias_and_relu_match_direct_loops_and_the_unfused_chain() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (i, (inp, fil, st, pad)) in direct_cases().into_iter().chain(cases()).enumerate() {
            let g = Conv2dGeom::new(inp, fil, st, pad).unwrap();
            let x = random::<f64>(g.input_len(), 170 + i as u64);
            let w = random::<f64>(g.filter_len(), 180 + i as u64);
            let b = random::<f64>(g.out_c, 190 + i as u64);
            let conv = naive_conv(&x, &w, &g);
            let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (x32, w32, b32) = (f32s(&x), f32s(&w), f32s(&b));
            let mut unfused = vec![f32::NAN; g.output_len()];
            conv2d(&x32, &w32, &mut unfused, &g, 1);
            for relu in [false, true] {
                let act = |v: f64| if relu { v.max(0.0) } else { v };
                let want: Vec<f64> = conv.iter().enumerate().map(|(j, &v)| act(v + b[j % g.out_c])).collect();
                let chain: Vec<f32> = unfused
                    .iter()
                    .enumerate()
                    .map(|(j, &v)| {
                        let v = v + b32[j % g.out_c];
                        if relu && !(v > 0.0) { 0.0 } else { v }
                    })
                    .collect();
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; g.output_len()];
                    pool.install(|| conv2d_bias(&x32, &w32, Epilogue { bias: &b32, residual: None, relu }, &mut y, &g, threads));
                    for (j, (a, e)) in y.iter().zip(&want).enumerate() {
                        assert!((*a as f64 - e).abs() < 2e-4 * (1.0 + e.abs()), "case {i} relu {relu} [{j}]: {a} vs {e}");
                    }
                    assert!(y.iter().zip(&chain).all(|(a, c)| a.to_bits() == c.to_bits()), "case {i} relu {relu}: differs from the unfused chain");
                }
                let mut y64 = vec![f64::NAN; g.output_len()];
                conv2d_bias(&x, &w, Epilogue { bias: &b, residual: None, relu }, &mut y64, &g, 1);
                for (j, (a, e)) in y64.iter().zip(&want).enumerate() {
                    assert!((a - e).abs() < 1e-12 * (1.0 + e.abs()), "case {i} relu {relu} f64 [{j}]: {a} vs {e}");
                }
                // with a residual: bit for bit BiasAdd, then Add, then Relu
                let res: Vec<f32> = random::<f32>(g.output_len(), 90 + i as u64);
                let chain: Vec<f32> = unfused
                    .iter()
                    .zip(&res)
                    .enumerate()
                    .map(|(j, (&v, &r))| {
                        let v = (v + b32[j % g.out_c]) + r;
                        if relu && !(v > 0.0) { 0.0 } else { v }
                    })
                    .collect();
                for threads in [1, 2] {
                    let mut y = vec![f32::NAN; g.output_len()];
                    pool.install(|| conv2d_bias(&x32, &w32, Epilogue { bias: &b32, residual: Some(&res), relu }, &mut y, &g, threads));
                    assert!(y.iter().zip(&chain).all(|(a, c)| a.to_bits() == c.to_bits()), "case {i} relu {relu}, residual: differs from the unfused chain");
                }
            }
        }
    }

    /// The convolution with its pool fused, bit for bit `conv2d_bias` then
    /// `max_pool_with_workspace` (the output and the workspace), with and
    /// without a residual, on the
    /// direct kernel's shapes and the im2col path's, with tiling and
    /// overlapping windows, at one and two threads.
    #[test]
    fn a_pooled_convolution_equals_the_convolution_then_the_pool() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (i, (inp, fil, st, pad)) in direct_cases().into_iter().chain(cases()).enumerate() {
            let g = Conv2dGeom::new(inp, fil, st, pad).unwrap();
            if g.output_len() == 0 {
                continue;
            }
            let x: Vec<f32> = random::<f32>(g.input_len(), 200 + i as u64);
            let w: Vec<f32> = random::<f32>(g.filter_len(), 210 + i as u64);
            let b: Vec<f32> = random::<f32>(g.out_c, 220 + i as u64);
            let res: Vec<f32> = random::<f32>(g.output_len(), 230 + i as u64);
            for (k, s) in [([2, 2], [2, 2]), ([3, 3], [2, 2])] {
                let pg = Pool2dGeom::new([g.batch, g.out_h, g.out_w, g.out_c], k, s, Padding::Same).unwrap();
                for (relu, residual) in [(false, None), (true, None), (true, Some(res.as_slice()))] {
                    let epi = Epilogue { bias: &b, residual, relu };
                    let mut y = vec![0f32; g.output_len()];
                    conv2d_bias(&x, &w, epi, &mut y, &g, 1);
                    let (mut want, mut want_ws) = (vec![0f32; pg.output_len()], vec![0i8; pg.output_len()]);
                    max_pool_with_workspace(&y, &mut want, &mut want_ws, &pg, 1);
                    let with = if residual.is_some() { "a residual" } else { "no residual" };
                    for threads in [1, 2] {
                        let (mut got, mut got_ws) = (vec![f32::NAN; pg.output_len()], vec![7i8; pg.output_len()]);
                        pool.install(|| conv2d_bias_max_pool(&x, &w, epi, PooledOut { values: &mut got, argmax: &mut got_ws }, &g, &pg, threads));
                        let bits = |v: &[f32]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "case {i} {k:?} relu {relu}, {with}, {threads} threads");
                        assert_eq!(got_ws, want_ws, "case {i} {k:?} relu {relu}, {with}, {threads} threads: workspace");
                    }
                }
            }
        }
    }

    /// Empty images (zero height with SAME padding) give empty outputs and
    /// a zero filter gradient on every path, never a wrapped size.
    #[test]
    fn empty_images_give_empty_outputs_and_a_zero_filter_gradient() {
        let g = Conv2dGeom::new([2, 0, 5, 16], [3, 3, 16, 32], [1, 1], Padding::Same).unwrap();
        assert_eq!((g.out_h, g.output_len(), g.input_len()), (0, 0, 0));
        assert!(!DirectKernels::of::<f32>(&g).forward);
        let w = vec![1f32; g.filter_len()];
        let mut y: Vec<f32> = vec![];
        conv2d(&[], &w, &mut y, &g, 2);
        let mut dx: Vec<f32> = vec![];
        conv2d_backprop_input(&[], &w, &mut dx, &g, 2);
        let mut dw = vec![f32::NAN; g.filter_len()];
        conv2d_backprop_filter(&[], &[], &mut dw, &g, 2);
        assert!(dw.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn geometry_follows_tensorflow_same_and_valid_rules() {
        let g = Conv2dGeom::new([1, 7, 8, 2], [3, 2, 2, 5], [2, 2], Padding::Same).unwrap();
        // out = ceil(7/2)=4, ceil(8/2)=4; pad totals (3*2+3-7)=2 -> top 1, (3*2+2-8)=0 -> left 0.
        assert_eq!((g.out_h, g.out_w, g.pad_top, g.pad_left), (4, 4, 1, 0));
        let g = Conv2dGeom::new([1, 6, 6, 1], [4, 4, 1, 1], [1, 1], Padding::Same).unwrap();
        // total 3 -> 1 before, 2 after.
        assert_eq!((g.out_h, g.pad_top), (6, 1));
        let g = Conv2dGeom::new([3, 7, 9, 2], [2, 4, 2, 3], [2, 3], Padding::Valid).unwrap();
        assert_eq!((g.out_h, g.out_w, g.pad_top, g.pad_left), (3, 2, 0, 0));
    }

    #[test]
    fn geometry_rejects_bad_input_with_the_sizes_involved() {
        let e = Conv2dGeom::new([1, 5, 5, 3], [3, 3, 2, 4], [1, 1], Padding::Same).unwrap_err();
        assert_eq!(
            e,
            "filter input channels 2 (filter shape [3, 3, 2, 4]) do not match input channels 3 (input shape [1, 5, 5, 3])"
        );
        let e = Conv2dGeom::new([1, 2, 5, 3], [3, 3, 3, 4], [1, 1], Padding::Valid).unwrap_err();
        assert_eq!(e, "VALID padding: window height 3 is larger than the input height 2");
        let e = Conv2dGeom::new([1, 5, 5, 3], [3, 3, 3, 4], [1, 0], Padding::Same).unwrap_err();
        assert_eq!(e, "stride along width must be at least 1, got 0");
    }

    #[test]
    fn conv2d_matches_direct_loops_in_f32_and_f64() {
        for (threads, (inp, fil, st, pad)) in cases().into_iter().enumerate().map(|(i, c)| (1 + i % 2, c)) {
            let g = Conv2dGeom::new(inp, fil, st, pad).unwrap();
            let x = random::<f64>(g.input_len(), 10);
            let w = random::<f64>(g.filter_len(), 11);
            let want = naive_conv(&x, &w, &g);
            let mut got = vec![f64::NAN; g.output_len()];
            conv2d(&x, &w, &mut got, &g, threads);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() < 1e-12, "{inp:?} {fil:?} {st:?} {pad:?}: out[{i}] {a} vs {b}");
            }
            let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let w32: Vec<f32> = w.iter().map(|&v| v as f32).collect();
            let mut got32 = vec![f32::NAN; g.output_len()];
            conv2d(&x32, &w32, &mut got32, &g, threads);
            for (a, b) in got32.iter().zip(&want) {
                assert!((*a as f64 - b).abs() < 1e-4, "f32 {inp:?} {fil:?}: {a} vs {b}");
            }
        }
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// Both gradients are adjoints of the forward map, which is bilinear:
    /// `<conv(x, w), y> = <x, dx(y, w)> = <w, dw(x, y)>` for every x, w, y.
    #[test]
    fn backprops_are_adjoint_to_the_forward_convolution() {
        for (i, (inp, fil, st, pad)) in cases().into_iter().enumerate() {
            let g = Conv2dGeom::new(inp, fil, st, pad).unwrap();
            let threads = 1 + i % 2;
            let x = random::<f64>(g.input_len(), 20 + i as u64);
            let w = random::<f64>(g.filter_len(), 40 + i as u64);
            let y = random::<f64>(g.output_len(), 60 + i as u64);
            let mut fwd = vec![0.0; g.output_len()];
            conv2d(&x, &w, &mut fwd, &g, threads);
            let mut dx = vec![f64::NAN; g.input_len()];
            conv2d_backprop_input(&y, &w, &mut dx, &g, threads);
            let mut dw = vec![f64::NAN; g.filter_len()];
            conv2d_backprop_filter(&x, &y, &mut dw, &g, threads);
            let lhs = dot(&fwd, &y);
            assert!((lhs - dot(&x, &dx)).abs() < 1e-10 * (1.0 + lhs.abs()), "case {i}: input adjoint");
            assert!((lhs - dot(&w, &dw)).abs() < 1e-10 * (1.0 + lhs.abs()), "case {i}: filter adjoint");
        }
    }

    /// Spot-checks the gradients against central finite differences of
    /// `L = <conv(x, w), y>` on individual coordinates.
    #[test]
    fn backprops_match_finite_differences() {
        let g = Conv2dGeom::new([2, 5, 4, 2], [3, 2, 2, 3], [2, 1], Padding::Same).unwrap();
        let x = random::<f64>(g.input_len(), 1);
        let w = random::<f64>(g.filter_len(), 2);
        let y = random::<f64>(g.output_len(), 3);
        let loss = |x: &[f64], w: &[f64]| {
            let mut o = vec![0.0; g.output_len()];
            conv2d(x, w, &mut o, &g, 1);
            dot(&o, &y)
        };
        let mut dx = vec![0.0; g.input_len()];
        conv2d_backprop_input(&y, &w, &mut dx, &g, 1);
        let mut dw = vec![0.0; g.filter_len()];
        conv2d_backprop_filter(&x, &y, &mut dw, &g, 1);
        let h = 1e-5;
        for idx in (0..x.len()).step_by(7) {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[idx] += h;
            xm[idx] -= h;
            let fd = (loss(&xp, &w) - loss(&xm, &w)) / (2.0 * h);
            assert!((fd - dx[idx]).abs() < 1e-7, "dx[{idx}]: fd {fd} vs {}", dx[idx]);
        }
        for idx in (0..w.len()).step_by(5) {
            let (mut wp, mut wm) = (w.clone(), w.clone());
            wp[idx] += h;
            wm[idx] -= h;
            let fd = (loss(&x, &wp) - loss(&x, &wm)) / (2.0 * h);
            assert!((fd - dw[idx]).abs() < 1e-7, "dw[{idx}]: fd {fd} vs {}", dw[idx]);
        }
    }

    #[test]
    fn chunked_patch_matrix_gives_the_same_result_as_one_chunk() {
        // 3x3x64 patches: 576 columns, so an image of 96x96 outputs (9216 rows)
        // exceeds the chunk budget and is split mid-image.
        let g = Conv2dGeom::new([1, 96, 96, 64], [3, 3, 64, 2], [1, 1], Padding::Same).unwrap();
        assert!(g.rows_per_chunk() < g.out_h * g.out_w);
        let x = random::<f64>(g.input_len(), 5);
        let w = random::<f64>(g.filter_len(), 6);
        let y = random::<f64>(g.output_len(), 7);
        let mut fwd = vec![0.0; g.output_len()];
        conv2d(&x, &w, &mut fwd, &g, 2);
        // Compare a few output positions against the direct sum.
        for &pos in &[0usize, 4000, 7281, 9215] {
            let (oy, ox) = (pos / g.out_w, pos % g.out_w);
            for o in 0..g.out_c {
                let mut s = 0.0;
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (iy, ix) = (oy as isize + ky as isize - 1, ox as isize + kx as isize - 1);
                        if iy < 0 || ix < 0 || iy >= 96 || ix >= 96 {
                            continue;
                        }
                        for c in 0..64 {
                            s += x[((iy as usize) * 96 + ix as usize) * 64 + c] * w[((ky * 3 + kx) * 64 + c) * 2 + o];
                        }
                    }
                }
                assert!((s - fwd[pos * 2 + o]).abs() < 1e-10);
            }
        }
        let mut dx = vec![0.0; g.input_len()];
        conv2d_backprop_input(&y, &w, &mut dx, &g, 2);
        let mut dw = vec![0.0; g.filter_len()];
        conv2d_backprop_filter(&x, &y, &mut dw, &g, 2);
        let lhs = dot(&fwd, &y);
        assert!((lhs - dot(&x, &dx)).abs() < 1e-9 * (1.0 + lhs.abs()));
        assert!((lhs - dot(&w, &dw)).abs() < 1e-9 * (1.0 + lhs.abs()));
    }
}
