//! Direct f32 convolution kernels for AVX-512 CPUs: the forward pass, the
//! input gradient (stride 1) and the filter gradient, with no patch matrix.
//!
//! Why: im2col + GEMM spends most of a small-channel convolution building
//! the patch matrix (the Deep MNIST CNN's first layer, 5x5 over one input
//! channel: 62% of its forward pass in im2col, 18 GFLOP/s in all), and on the
//! second layer the patch matrix, its packing and the input gradient's col2im
//! cost a third of the time on top of the products. oneDNN, which TensorFlow
//! runs on this CPU, convolves directly; so does this module.
//!
//! Each image is first copied into a zero-padded buffer, so no kernel ever
//! tests a bound. With NHWC input and HWIO filter, output pixel `(oy, ox)`
//! reads `k_h` runs of `k_w * in_c` contiguous values of the padded image,
//! and the filter rows for those values are contiguous too: the forward pass
//! is a GEMM whose left operand is gathered through one pointer per pixel.
//! The register block is that of a GEMM micro-kernel: up to 4 vectors of 16
//! output channels by 6-8 pixels, the filter row loaded once per step and
//! each input value broadcast from memory.
//!
//! * forward: `out[p, o] = Σ_(ky,t) xp[base(p) + ky*row + t] · w[(ky, t), o]`;
//! * input gradient at stride 1: a forward convolution of the padded output
//!   gradient with the filter flipped in space and with its channel axes
//!   swapped;
//! * filter gradient: `dw[(ky, t), o] = Σ_p xp[base(p) + ky*row + t] · dy[p, o]`,
//!   summed per fixed group of images and then over the groups in order, so
//!   the result is the same for every thread count.
//!
//! Every kernel here needs the output (or, for the input gradient, the input)
//! channels to be a multiple of 16; other shapes, other element types and
//! CPUs without AVX-512 keep the im2col path.

use super::conv::{Conv2dGeom, PooledOut};
use super::scalar::Float;
use rayon::prelude::*;
use std::any::TypeId;

/// Lanes of one AVX-512 f32 vector: channel counts must be a multiple of it.
const LANES: usize = 16;

/// Images per filter-gradient group are chosen so that at most this many
/// groups (each a whole filter of partial sums) exist.
const MAX_FILTER_GROUPS: usize = 8;

/// The partial sums of all groups stay under this many f32 (64 MiB).
const FILTER_GROUPS_BUDGET: usize = 1 << 24;

/// Most output positions per pass of the filter gradient, the passes of an
/// image evened out: the output gradient of a pass at one block of 64
/// channels (25 KiB at 100 positions) stays in L1 while every block of
/// filter rows runs over it, and each pass adds every block's sums to the
/// filter once. At 64 (3 x 64 + 4 positions on a 14 x 14 image) those
/// additions cost 8%: the CNN's second filter gradient 5.50-5.52 ms at 64,
/// 5.05-5.08 ms at 2 x 98, 5.13-5.31 ms at 1 x 196 (whose 50 KiB leaves
/// L1); its first (8 x 98 of 784 positions) 438-453 against 426-430 us
/// (`cargo bench --bench cnn_kernels -- _dw/1t`, three alternated runs).
/// (Evening 196 positions out as 4 x 49 measured the same as 3 x 64 + 4.)
const POSITIONS_PER_PASS: usize = 100;

/// True when this CPU runs the direct kernels.
fn cpu_has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x` as f32 when `T` is f32.
pub(super) fn as_f32<T: Float>(x: &[T]) -> Option<&[f32]> {
    // SAFETY: T is f32 (same TypeId), so the slice is one of f32.
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()) })
}

/// `x` as mutable f32 when `T` is f32.
fn as_f32_mut<T: Float>(x: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: T is f32 (same TypeId), so the slice is one of f32.
    (TypeId::of::<T>() == TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<f32>(), x.len()) })
}

/// Which direct kernels apply to a geometry on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirectKernels {
    pub forward: bool,
    pub input_grad: bool,
    pub filter_grad: bool,
}

impl DirectKernels {
    pub(crate) fn of<T: Float>(g: &Conv2dGeom) -> Self {
        // Empty images or outputs stay on the im2col path, which handles them
        // (the padded sizes below assume at least one output row and column).
        let sized = g.batch > 0 && g.in_h > 0 && g.in_w > 0 && g.out_h > 0 && g.out_w > 0;
        let on = TypeId::of::<T>() == TypeId::of::<f32>() && cpu_has_avx512() && sized;
        let out_ok = on && g.out_c % LANES == 0 && g.out_c > 0;
        Self {
            forward: out_ok,
            input_grad: on && g.in_c % LANES == 0 && g.in_c > 0 && g.stride_h == 1 && g.stride_w == 1,
            filter_grad: out_ok,
        }
    }
}

/// A convolution over an image that is already padded: `hp x wp x c` in,
/// `oh x ow x oc` out, window `kh x kw` at strides `sh, sw`.
#[derive(Debug, Clone, Copy)]
struct Padded {
    hp: usize,
    wp: usize,
    c: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    oh: usize,
    ow: usize,
    oc: usize,
    /// Rows `y0..y1` and columns `x0..x1` of the padded image hold data;
    /// the others are the zero padding, whose taps the kernels skip.
    y0: usize,
    y1: usize,
    x0: usize,
    x1: usize,
}

impl Padded {
    /// The forward convolution of `g`, over its input padded by its own padding.
    fn forward(g: &Conv2dGeom) -> Self {
        let hp = (g.out_h - 1) * g.stride_h + g.k_h;
        let wp = (g.out_w - 1) * g.stride_w + g.k_w;
        Self {
            hp,
            wp,
            c: g.in_c,
            kh: g.k_h,
            kw: g.k_w,
            sh: g.stride_h,
            sw: g.stride_w,
            oh: g.out_h,
            ow: g.out_w,
            oc: g.out_c,
            y0: g.pad_top.min(hp),
            y1: (g.pad_top + g.in_h).min(hp),
            x0: g.pad_left.min(wp),
            x1: (g.pad_left + g.in_w).min(wp),
        }
    }
    /// The input gradient of `g` at stride 1, as a forward convolution over
    /// the output gradient padded by `k - 1 - pad` before.
    fn input_grad(g: &Conv2dGeom) -> Self {
        let (hp, top) = (g.in_h + g.k_h - 1, g.k_h - 1 - g.pad_top);
        let (wp, left) = (g.in_w + g.k_w - 1, g.k_w - 1 - g.pad_left);
        Self {
            hp,
            wp,
            c: g.out_c,
            kh: g.k_h,
            kw: g.k_w,
            sh: 1,
            sw: 1,
            oh: g.in_h,
            ow: g.in_w,
            oc: g.in_c,
            y0: top.min(hp),
            y1: (top + g.out_h).min(hp),
            x0: left.min(wp),
            x1: (left + g.out_w).min(wp),
        }
    }
    /// Values of one window row: `kw * c`, contiguous in the padded image.
    fn run(&self) -> usize {
        self.kw * self.c
    }
    /// Elements between two rows of the padded image.
    fn row(&self) -> usize {
        self.wp * self.c
    }
    /// Offset of output position `pos`'s window corner in the padded image.
    fn base(&self, pos: usize) -> usize {
        let (oy, ox) = (pos / self.ow, pos % self.ow);
        (oy * self.sh * self.wp + ox * self.sw) * self.c
    }
    /// Window corners of positions `pos0..pos0 + valid`, the last repeated
    /// up to `N`: one division, then counting along the rows.
    fn bases<const N: usize>(&self, pos0: usize, valid: usize) -> [usize; N] {
        let (mut oy, mut ox) = (pos0 / self.ow, pos0 % self.ow);
        let mut out = [0; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = (oy * self.sh * self.wp + ox * self.sw) * self.c;
            if i + 1 < valid {
                ox += 1;
                if ox == self.ow {
                    ox = 0;
                    oy += 1;
                }
            }
        }
        out
    }
    /// Whether the kernels skip the window rows that read only padding:
    /// where a window row holds at least a vector's worth of taps. The
    /// CNN's second convolution (rows of 5 x 32 taps) gained 3-7% in each
    /// kernel; its first (rows of 5 taps, blocks of a few hundred
    /// multiply-adds) lost 6-7% to the per-block bounds.
    fn skips_padding(&self) -> bool {
        self.run() >= LANES
    }
    /// Window rows `ky0..ky1` that reach a row of data for some output row
    /// in `oy0..=oy1`: the others read only padding.
    fn data_window_rows(&self, oy0: usize, oy1: usize) -> (usize, usize) {
        let lo = self.y0.saturating_sub(oy1 * self.sh).min(self.kh);
        let hi = self.y1.saturating_sub(oy0 * self.sh).min(self.kh);
        (lo, hi.max(lo))
    }
    /// Taps of `taps` in window rows that reach data for the output
    /// positions `pos0..pos0 + n` (n > 0). (The divisions only where the
    /// padding is skipped: per block of a small convolution they cost more
    /// than the taps they save.)
    fn data_taps(&self, taps: Taps, pos0: usize, n: usize) -> (usize, usize) {
        if !self.skips_padding() {
            return (taps.j0, taps.j1);
        }
        let (lo, hi) = self.data_window_rows(pos0 / self.ow, (pos0 + n - 1) / self.ow);
        let j0 = taps.j0.max(lo * self.run());
        (j0, taps.j1.min(hi * self.run()).max(j0))
    }
    /// Pixels `lo..hi` of a block of `n` neighbouring pixels at stride 1
    /// whose window column lands on padded column `col` for the first
    /// pixel: the others read padding there.
    fn data_pixels(&self, col: usize, n: usize) -> (usize, usize) {
        let hi = self.x1.saturating_sub(col).min(n);
        (self.x0.saturating_sub(col).min(hi), hi)
    }
    /// Output positions (whole output rows) whose window rows for taps
    /// `j..j + n` (n > 0) reach a row of data.
    fn data_positions(&self, j: usize, n: usize) -> (usize, usize) {
        if !self.skips_padding() {
            return (0, self.oh * self.ow);
        }
        let (ky0, ky1) = (j / self.run(), (j + n - 1) / self.run());
        let hi = self.y1.saturating_sub(ky0).div_ceil(self.sh).min(self.oh);
        let lo = self.y0.saturating_sub(ky1).div_ceil(self.sh).min(hi);
        (lo * self.ow, hi * self.ow)
    }
    /// Length of a padded image.
    fn image_len(&self) -> usize {
        self.hp * self.wp * self.c
    }
}

/// Copies image `src` (`h x w x c`) into `dst` (`p.hp x p.wp x c`) at rows
/// `top..`, columns `left..`; everything else is zero.
fn pad_image(src: &[f32], h: usize, w: usize, top: usize, left: usize, p: &Padded, dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(p.image_len(), 0.0);
    let c = p.c;
    for y in 0..h.min(p.hp.saturating_sub(top)) {
        let cols = w.min(p.wp.saturating_sub(left));
        let d = &mut dst[((top + y) * p.wp + left) * c..][..cols * c];
        d.copy_from_slice(&src[y * w * c..][..cols * c]);
    }
}

/// `out = conv2d(input, filter)` by the direct kernel, then
/// `epilogue(first, image)` on each image's output while it is still in
/// cache (a fused bias, residual and activation; `first` is the image's
/// first element's index in `out`); false (nothing written) when the
/// kernel does not apply.
pub(crate) fn forward<T: Float>(
    input: &[T],
    filter: &[T],
    out: &mut [T],
    g: &Conv2dGeom,
    threads: usize,
    epilogue: impl Fn(usize, &mut [f32]) + Sync,
) -> bool {
    if !DirectKernels::of::<T>(g).forward {
        return false;
    }
    let (Some(x), Some(w), Some(y)) = (as_f32(input), as_f32(filter), as_f32_mut(out)) else { return false };
    let p = Padded::forward(g);
    let out_len = g.out_h * g.out_w * g.out_c;
    let image = |b: usize, y_img: &mut [f32], scratch: &mut Vec<f32>| {
        // SAFETY: `DirectKernels::of` checked above; `p` is this geometry's.
        unsafe { forward_image(x, w, b, y_img, g, &p, scratch) };
        epilogue(b * out_len, y_img);
    };
    per_image(y, out_len, threads, image);
    true
}

/// Image `b` of `x` convolved into `y_img` (padded into `scratch` first).
///
/// # Safety
/// `DirectKernels::of(g).forward` holds (so the CPU has AVX-512F), `p` is
/// `Padded::forward(g)`, `w` is the filter and `y_img` one image's output.
unsafe fn forward_image(x: &[f32], w: &[f32], b: usize, y_img: &mut [f32], g: &Conv2dGeom, p: &Padded, scratch: &mut Vec<f32>) {
    let in_len = g.in_h * g.in_w * g.in_c;
    pad_image(&x[b * in_len..][..in_len], g.in_h, g.in_w, g.pad_top, g.pad_left, p, scratch);
    // SAFETY: forwarded; the buffers have the lengths `convolve_image` documents.
    unsafe { convolve_image(scratch, w, y_img, p) };
}

/// [`forward`] with each image's output, after `epilogue`, handed to
/// `pool(image, pooled_image, argmax_image)` while it is in cache (one
/// scratch image per thread): the convolution's output is never written
/// whole. `out` holds the same number of values per image. False (nothing
/// written) when the kernel does not apply.
pub(crate) fn forward_pooled<T: Float>(
    input: &[T],
    filter: &[T],
    out: PooledOut<T>,
    g: &Conv2dGeom,
    threads: usize,
    epilogue: impl Fn(usize, &mut [f32]) + Sync,
    pool: impl Fn(&[f32], &mut [f32], &mut [i8]) + Sync,
) -> bool {
    let pool_len = out.values.len().checked_div(g.batch).unwrap_or(0);
    if !DirectKernels::of::<T>(g).forward || pool_len == 0 {
        return false;
    }
    let PooledOut { values, argmax: ws } = out;
    let (Some(x), Some(w), Some(pooled)) = (as_f32(input), as_f32(filter), as_f32_mut(values)) else { return false };
    let p = Padded::forward(g);
    let out_len = g.out_h * g.out_w * g.out_c;
    let image = |b: usize, p_img: &mut [f32], w_img: &mut [i8], (y, scratch): &mut (Vec<f32>, Vec<f32>)| {
        // The first pass of `convolve_image` overwrites every output.
        y.resize(out_len, 0.0);
        // SAFETY: as in `forward`.
        unsafe { forward_image(x, w, b, y, g, &p, scratch) };
        epilogue(b * out_len, y);
        pool(y, p_img, w_img);
    };
    let images = pooled.len() / pool_len;
    if threads > 1 && images > 1 {
        pooled
            .par_chunks_mut(pool_len)
            .zip(ws.par_chunks_mut(pool_len))
            .enumerate()
            .for_each_init(|| (Vec::new(), Vec::new()), |bufs, (b, (pi, wi))| image(b, pi, wi, bufs));
    } else {
        let mut bufs = (Vec::new(), Vec::new());
        for (b, (pi, wi)) in pooled.chunks_mut(pool_len).zip(ws.chunks_mut(pool_len)).enumerate() {
            image(b, pi, wi, &mut bufs);
        }
    }
    true
}

/// `grad_in = conv2d_backprop_input(grad_out, filter)` by the direct
/// kernel; false (nothing written) when it does not apply.
pub(crate) fn input_grad<T: Float>(grad_out: &[T], filter: &[T], grad_in: &mut [T], g: &Conv2dGeom, threads: usize) -> bool {
    if !DirectKernels::of::<T>(g).input_grad {
        return false;
    }
    let (Some(dy), Some(w), Some(dx)) = (as_f32(grad_out), as_f32(filter), as_f32_mut(grad_in)) else { return false };
    let p = Padded::input_grad(g);
    // The filter flipped in space with its channel axes swapped:
    // wt[kh-1-ky, kw-1-kx, o, c] = w[ky, kx, c, o].
    let mut wt = vec![0f32; w.len()];
    for ky in 0..g.k_h {
        for kx in 0..g.k_w {
            let (src_tap, dst_tap) = (ky * g.k_w + kx, (g.k_h - 1 - ky) * g.k_w + (g.k_w - 1 - kx));
            for c in 0..g.in_c {
                for o in 0..g.out_c {
                    wt[(dst_tap * g.out_c + o) * g.in_c + c] = w[(src_tap * g.in_c + c) * g.out_c + o];
                }
            }
        }
    }
    let (top, left) = (g.k_h - 1 - g.pad_top, g.k_w - 1 - g.pad_left);
    let (in_len, out_len) = (g.in_h * g.in_w * g.in_c, g.out_h * g.out_w * g.out_c);
    let image = |b: usize, dx_img: &mut [f32], scratch: &mut Vec<f32>| {
        pad_image(&dy[b * out_len..][..out_len], g.out_h, g.out_w, top, left, &p, scratch);
        // SAFETY: as in `forward`.
        unsafe { convolve_image(scratch, &wt, dx_img, &p) };
    };
    per_image(dx, in_len, threads, image);
    true
}

/// Runs `f(b, image b's slice of out, scratch)` for every image, over
/// `threads` rayon workers when more than one.
fn per_image(out: &mut [f32], image_len: usize, threads: usize, f: impl Fn(usize, &mut [f32], &mut Vec<f32>) + Sync + Send) {
    if threads > 1 && out.len() > image_len {
        out.par_chunks_mut(image_len).enumerate().for_each_init(Vec::new, |scratch, (b, img)| f(b, img, scratch));
    } else {
        let mut scratch = Vec::new();
        for (b, img) in out.chunks_mut(image_len).enumerate() {
            f(b, img, &mut scratch);
        }
    }
}

/// `grad_filter = conv2d_backprop_filter(input, grad_out)` by the direct
/// kernel; false (nothing written) when it does not apply.
pub(crate) fn filter_grad<T: Float>(input: &[T], grad_out: &[T], grad_filter: &mut [T], g: &Conv2dGeom, threads: usize) -> bool {
    if !DirectKernels::of::<T>(g).filter_grad {
        return false;
    }
    let (Some(x), Some(dy), Some(dw)) = (as_f32(input), as_f32(grad_out), as_f32_mut(grad_filter)) else { return false };
    let p = Padded::forward(g);
    let (in_len, out_len, f_len) = (g.in_h * g.in_w * g.in_c, g.out_h * g.out_w * g.out_c, dw.len());
    // Groups depend on the batch and filter size only, never on `threads`.
    let groups = MAX_FILTER_GROUPS.min(g.batch).min((FILTER_GROUPS_BUDGET / f_len.max(1)).max(1));
    let per_group = g.batch.div_ceil(groups);
    let groups = g.batch.div_ceil(per_group);
    let group = |gi: usize, acc: &mut [f32]| {
        acc.fill(0.0);
        let mut scratch = Vec::new();
        for b in gi * per_group..((gi + 1) * per_group).min(g.batch) {
            pad_image(&x[b * in_len..][..in_len], g.in_h, g.in_w, g.pad_top, g.pad_left, &p, &mut scratch);
            // SAFETY: as in `forward`.
            unsafe { filter_grad_image(&scratch, &dy[b * out_len..][..out_len], acc, &p) };
        }
    };
    // Group 0 sums straight into `dw`, the others into `rest`, added after.
    let mut rest = vec![0f32; (groups - 1) * f_len];
    if threads > 1 {
        rayon::iter::once(&mut *dw).chain(rest.par_chunks_mut(f_len)).enumerate().for_each(|(gi, acc)| group(gi, acc));
    } else {
        for (gi, acc) in std::iter::once(&mut *dw).chain(rest.chunks_mut(f_len)).enumerate() {
            group(gi, acc);
        }
    }
    for acc in rest.chunks(f_len) {
        for (d, a) in dw.iter_mut().zip(acc) {
            *d += a;
        }
    }
    true
}

/// Pixels per forward register block for `ov` vectors of channels: the
/// accumulators fill 24 of the 32 vector registers at 4 or 3 vectors, 16 at
/// 2 (8 pixels, so that the pixel pointers stay in general registers).
const fn block_rows(ov: usize) -> usize {
    if ov == 4 { 6 } else { 8 }
}

/// Pixels per block at 2 vectors of channels when a window row is long
/// (at least 16 input channels): 12, filling 24 accumulators as at 4
/// vectors. The 12 pixel pointers cost more to set up per window row, which
/// long rows amortise and short ones do not. The CNN's second convolution's
/// input gradient (32 channels out, 64 in) went from 1.14-1.33x its forward
/// pass's time to 1.03-1.14x (`cargo bench -p flowlab-engine --bench
/// cnn_kernels`, 8 and 12 alternated); its first convolution's forward (one
/// input channel, rows of 5 values) measured 1.0-1.3 ms at 12 against
/// 1.0 ms at 8, so it keeps 8.
const LONG_ROW_PIXELS: usize = 12;

/// Filter rows per filter-gradient register block: the compiler loads every
/// row's broadcast value at once there, so accumulators, gradient vectors
/// and broadcasts must fit the 32 registers together (6 rows of 4 vectors
/// spilled two accumulators to the stack in the inner loop).
const fn filter_rows(ov: usize) -> usize {
    match ov {
        4 => 5,
        3 => 6,
        _ => 8,
    }
}

/// One padded image convolved into `out` (`p.oh * p.ow * p.oc`).
///
/// # Safety
/// The CPU has AVX-512F; `xp` holds `p.image_len()` values, `w` the
/// `p.kh * p.run() * p.oc` filter rows, `out` `p.oh * p.ow * p.oc` values,
/// and `p.oc` is a multiple of 16.
#[cfg(target_arch = "x86_64")]
unsafe fn convolve_image(xp: &[f32], w: &[f32], out: &mut [f32], p: &Padded) {
    debug_assert!(xp.len() >= p.image_len() && w.len() == p.kh * p.run() * p.oc && out.len() == p.oh * p.ow * p.oc);
    let positions = p.oh * p.ow;
    // Rows that split into whole blocks (widths 14, 28, 56, 112: the common
    // ImageNet and MNIST feature maps; any other width would leave a short
    // block per row) of 32 or 64 input channels take `row_blocks`, two
    // vectors of output channels at a time.
    let rows = p.sw == 1 && p.ow.is_multiple_of(ROW_PIXELS) && (p.c == 32 || p.c == 64);
    let mut ob = 0;
    while ob < p.oc {
        let ov = if rows && p.oc - ob >= 2 * LANES { 2 } else { ((p.oc - ob) / LANES).min(4) };
        let taps_all = p.kh * p.run();
        let mut j0 = 0;
        while j0 < taps_all {
            {
                let taps = Taps { j0, j1: (j0 + taps_per_pass(ov)).min(taps_all), first: j0 == 0 };
                // SAFETY: forwarded; `ob + ov * 16 <= p.oc`, the taps lie in the window.
                unsafe {
                    match (ov, p.c) {
                        (2, 32) if rows => row_blocks::<ROW_PIXELS, 2, 32>(xp, w, out, p, ob, taps),
                        (2, 64) if rows => row_blocks::<ROW_PIXELS, 2, 64>(xp, w, out, p, ob, taps),
                        (4, _) => forward_blocks::<{ block_rows(4) }, 4>(xp, w, out, p, ob, positions, taps),
                        (3, _) => forward_blocks::<{ block_rows(3) }, 3>(xp, w, out, p, ob, positions, taps),
                        (2, c) if c >= LANES => forward_blocks::<LONG_ROW_PIXELS, 2>(xp, w, out, p, ob, positions, taps),
                        (2, _) => forward_blocks::<{ block_rows(2) }, 2>(xp, w, out, p, ob, positions, taps),
                        _ => forward_blocks::<{ block_rows(1) }, 1>(xp, w, out, p, ob, positions, taps),
                    }
                }
                j0 = taps.j1;
            }
        }
        ob += ov * LANES;
    }
}

/// Pixels per block of [`row_blocks`] (2 vectors of channels): 28
/// accumulators, 2 filter vectors and a broadcast fill 31 of the 32 vector
/// registers.
const ROW_PIXELS: usize = 14;

/// `forward_blocks` for stride 1 and `C` input channels known when
/// compiling: a block is `PX` neighbouring pixels of one output row, so
/// pixel `i` reads the padded image at the block's corner plus `i * C`, a
/// constant offset, and one pointer serves every pixel where
/// `forward_blocks` sets up `PX` of them per window row. The CNN's second
/// input gradient (32 channels out of 64, 14 x 14) went from 5.74-5.86 ms
/// to 5.26-5.48 ms (`cargo bench -p flowlab-engine --bench cnn_kernels --
/// conv2_dx/1t`, four alternated runs of each binary). A block also
/// knows which of its pixels' window columns lie in the padding (the
/// first and last pixels of a row under SAME padding) and skips those
/// taps, which blocks of pixels across rows cannot: conv2's input
/// gradient 4.83-4.91 -> 4.37-4.62 ms. With that, 64 output channels run
/// as two halves of 2 vectors here rather than as `forward_blocks` of 6
/// pixels at 4 vectors: conv2's forward pass 5.07-5.18 -> 4.42-4.58 ms
/// (the halves had measured the same as `forward_blocks` before the
/// column skip; 6 or 7 pixels of 4 vectors were slower: 7 spill, 6 leave
/// 2 of 14 columns to a short block). Widths that are not a multiple of
/// `PX` keep `forward_blocks`.
///
/// # Safety
/// As `forward_blocks`, with `p.sw == 1`, `p.c == C` and `p.ow` a multiple
/// of `PX`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_blocks<const PX: usize, const OV: usize, const C: usize>(xp: &[f32], w: &[f32], out: &mut [f32], p: &Padded, ob: usize, taps: Taps) {
    use std::arch::x86_64::*;
    debug_assert!(p.sw == 1 && p.c == C && p.ow.is_multiple_of(PX));
    // SAFETY: as in `forward_blocks`: every pixel of a block is a real
    // output position of the row, its window inside the padded image.
    unsafe {
        let (run, row, oc) = (p.run(), p.row(), p.oc);
        let wb = w.as_ptr().add(ob);
        let (xb, ob_out) = (xp.as_ptr(), out.as_mut_ptr().add(ob));
        for oy in 0..p.oh {
            for ox0 in (0..p.ow).step_by(PX) {
                let pos0 = oy * p.ow + ox0;
                let corner = xb.add(p.base(pos0));
                let o = ob_out.add(pos0 * oc);
                let mut acc = [[_mm512_setzero_ps(); OV]; PX];
                if !taps.first {
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        for (v, a) in acc_i.iter_mut().enumerate() {
                            *a = _mm512_loadu_ps(o.add(i * oc + v * LANES));
                        }
                    }
                }
                // Window rows wholly in the padding add nothing: skipped.
                let (mut j, j1) = p.data_taps(taps, pos0, PX);
                while j < j1 {
                    let (ky, t0) = (j / run, j % run);
                    let t1 = run.min(t0 + (j1 - j));
                    let x = corner.add(ky * row);
                    let wk = wb.add(ky * run * oc);
                    // Taps `ta..tb` for pixels `LO..HI` of the block.
                    macro_rules! taps {
                        ($lo:expr, $hi:expr, $ta:expr, $tb:expr) => {
                            for t in $ta..$tb {
                                let wr = wk.add(t * oc);
                                let wv: [__m512; OV] = std::array::from_fn(|v| _mm512_loadu_ps(wr.add(v * LANES)));
                                for i in $lo..$hi {
                                    let a = _mm512_set1_ps(*x.add(i * C + t));
                                    for v in 0..OV {
                                        acc[i][v] = _mm512_fmadd_ps(a, wv[v], acc[i][v]);
                                    }
                                }
                            }
                        };
                    }
                    // Window column by window column (C taps each): the
                    // pixels whose column lies in the padding skip it (up
                    // to two at either end of the row; a block of pixels
                    // fixed when compiling keeps its sums in registers).
                    let mut t = t0;
                    while t < t1 {
                        let kx = t / C;
                        let tb = t1.min((kx + 1) * C);
                        let (lo, hi) = p.data_pixels(ox0 + kx, PX);
                        match (lo.min(2), PX - hi.max(PX - 2)) {
                            (1, 0) => taps!(1, PX, t, tb),
                            (2, 0) => taps!(2, PX, t, tb),
                            (0, 1) => taps!(0, PX - 1, t, tb),
                            (0, 2) => taps!(0, PX - 2, t, tb),
                            _ => taps!(0, PX, t, tb),
                        }
                        t = tb;
                    }
                    j += t1 - t0;
                }
                for (i, acc_i) in acc.iter().enumerate() {
                    for (v, a) in acc_i.iter().enumerate() {
                        _mm512_storeu_ps(o.add(i * oc + v * LANES), *a);
                    }
                }
            }
        }
    }
}

/// Taps `j0..j1` of the window, tap `j` being value `j % run` of window row
/// `j / run` (and filter row `j`): one pass of the forward kernel. The first
/// pass of a channel block overwrites the output, the others add to it.
#[derive(Debug, Clone, Copy)]
struct Taps {
    j0: usize,
    j1: usize,
    first: bool,
}

/// Filter bytes per forward pass: the taps of one pass, at the channel
/// block's width, fill 16 KiB (a third of this CPU's 48 KiB L1 data cache),
/// so the filter block is read from L1 by every pixel block of the image (a
/// pass over all 800 taps of the CNN's second convolution read its 200 KiB
/// from L2 for each block, at 72 GFLOP/s). Sized in bytes, not taps: 64
/// taps of 64 channels, 128 of 32. With a fixed 64 taps the 32-channel
/// blocks of the CNN's second input gradient made 25 passes of 8 KiB, each
/// reloading and storing every pixel's accumulators; at 16 KiB it runs
/// 7-8% faster (a build with the pass size as a runtime setting, both
/// sizes alternated 40 times in one process: medians 9.87 against 10.67
/// ms in a fast spell, 14.3-14.5 against 15.5-15.7 ms in a slow one; the
/// forward pass at 64 channels is unchanged). A pass only splits where the accumulators are stored and
/// reloaded, so the sums are bit for bit the same at any pass size.
const PASS_BYTES: usize = 16 << 10;

/// Taps of one forward pass for a block of `ov` vectors of output channels.
const fn taps_per_pass(ov: usize) -> usize {
    PASS_BYTES / (ov * LANES * std::mem::size_of::<f32>())
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn convolve_image(_: &[f32], _: &[f32], _: &mut [f32], _: &Padded) {
    unreachable!("direct convolution kernels are only dispatched on x86_64 with AVX-512")
}

/// Output channels `ob..ob + 16*OV` of every position over one pass of taps,
/// `PX` pixels at a time; the last block repeats its last pixel and stores
/// only the real ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn forward_blocks<const PX: usize, const OV: usize>(
    xp: &[f32],
    w: &[f32],
    out: &mut [f32],
    p: &Padded,
    ob: usize,
    positions: usize,
    taps: Taps,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (see `convolve_image`) bounds every
    // offset below: window corners plus taps inside the padded image,
    // channel blocks inside `oc`, positions inside the output.
    unsafe {
        let (run, row, oc) = (p.run(), p.row(), p.oc);
        let w = w.as_ptr().add(ob);
        let (xp, out) = (xp.as_ptr(), out.as_mut_ptr().add(ob));
        let mut pos0 = 0;
        while pos0 < positions {
            let valid = PX.min(positions - pos0);
            let bases = p.bases::<PX>(pos0, valid);
            let corner: [*const f32; PX] = std::array::from_fn(|i| xp.add(bases[i]));
            let mut acc = [[_mm512_setzero_ps(); OV]; PX];
            if !taps.first {
                for (i, acc_i) in acc.iter_mut().enumerate().take(valid) {
                    let o = out.add((pos0 + i) * oc);
                    for (v, a) in acc_i.iter_mut().enumerate() {
                        *a = _mm512_loadu_ps(o.add(v * LANES));
                    }
                }
            }
            // The pass, window row by window row, skipping those in the
            // padding for every pixel of the block.
            let (mut j, j1) = p.data_taps(taps, pos0, valid);
            while j < j1 {
                let (ky, t0) = (j / run, j % run);
                let t1 = run.min(t0 + (j1 - j));
                let px: [*const f32; PX] = std::array::from_fn(|i| corner[i].add(ky * row));
                let wk = w.add((ky * run) * oc);
                for t in t0..t1 {
                    let wr = wk.add(t * oc);
                    let wv: [__m512; OV] = std::array::from_fn(|v| _mm512_loadu_ps(wr.add(v * LANES)));
                    for i in 0..PX {
                        let a = _mm512_set1_ps(*px[i].add(t));
                        for v in 0..OV {
                            acc[i][v] = _mm512_fmadd_ps(a, wv[v], acc[i][v]);
                        }
                    }
                }
                j += t1 - t0;
            }
            for (i, acc_i) in acc.iter().enumerate().take(valid) {
                let o = out.add((pos0 + i) * oc);
                for (v, a) in acc_i.iter().enumerate() {
                    _mm512_storeu_ps(o.add(v * LANES), *a);
                }
            }
            pos0 += PX;
        }
    }
}

/// Adds one image's filter gradient to `acc` (the filter's layout).
///
/// # Safety
/// The CPU has AVX-512F; `xp` holds `p.image_len()` values, `dy`
/// `p.oh * p.ow * p.oc`, `acc` `p.kh * p.run() * p.oc`, and `p.oc` is a
/// multiple of 16.
#[cfg(target_arch = "x86_64")]
unsafe fn filter_grad_image(xp: &[f32], dy: &[f32], acc: &mut [f32], p: &Padded) {
    debug_assert!(xp.len() >= p.image_len() && dy.len() == p.oh * p.ow * p.oc && acc.len() == p.kh * p.run() * p.oc);
    let positions = p.oh * p.ow;
    let per_pass = positions.div_ceil(positions.div_ceil(POSITIONS_PER_PASS).max(1)).max(1);
    let mut first = 0;
    while first < positions {
        let last = (first + per_pass).min(positions);
        let mut ob = 0;
        while ob < p.oc {
            let ov = ((p.oc - ob) / LANES).min(4);
            // SAFETY: forwarded; `ob + ov * 16 <= p.oc`.
            unsafe {
                match ov {
                    4 => filter_blocks::<{ filter_rows(4) }, 4>(xp, dy, acc, p, ob, first, last),
                    3 => filter_blocks::<{ filter_rows(3) }, 3>(xp, dy, acc, p, ob, first, last),
                    2 => filter_blocks::<{ filter_rows(2) }, 2>(xp, dy, acc, p, ob, first, last),
                    _ => filter_blocks::<{ filter_rows(1) }, 1>(xp, dy, acc, p, ob, first, last),
                }
            }
            ob += ov * LANES;
        }
        first = last;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn filter_grad_image(_: &[f32], _: &[f32], _: &mut [f32], _: &Padded) {
    unreachable!("direct convolution kernels are only dispatched on x86_64 with AVX-512")
}

/// Channels `ob..ob + 16*OV` of every filter row, `R` rows at a time, summed
/// over positions `first..last`. A row is a tap `(ky, t)`: value `t` of
/// window row `ky`. The last block's missing rows are computed from the
/// window corner and not stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn filter_blocks<const R: usize, const OV: usize>(
    xp: &[f32],
    dy: &[f32],
    acc: &mut [f32],
    p: &Padded,
    ob: usize,
    first: usize,
    last: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (see the `_image` function that
    // dispatches here) bounds every offset below: window corners and taps
    // inside the padded image, channel blocks inside `oc`, positions and
    // rows inside the output, filter and gradient slices.
    unsafe {
        let (run, row, oc) = (p.run(), p.row(), p.oc);
        let rows = p.kh * run;
        let (xp, dy, acc) = (xp.as_ptr(), dy.as_ptr().add(ob), acc.as_mut_ptr().add(ob));
        let mut r0 = 0;
        while r0 < rows {
            let valid = R.min(rows - r0);
            // Offset of each row's tap from a window corner; a missing row reads
            // the corner itself (it is never stored).
            let off: [usize; R] = std::array::from_fn(|i| if i < valid { ((r0 + i) / run) * row + (r0 + i) % run } else { 0 });
            let mut sum = [[_mm512_setzero_ps(); OV]; R];
            // Only output rows whose window rows of this block reach data:
            // the others multiply padding.
            let (lo, hi) = p.data_positions(r0, valid);
            let (first, last) = (first.max(lo), last.min(hi).max(first.max(lo)));
            // Window corners advance by counting: no division per position.
            let (mut ox, mut base) = (first % p.ow, p.base(first));
            for pos in first..last {
                let x = xp.add(base);
                let d = dy.add(pos * oc);
                let dv: [__m512; OV] = std::array::from_fn(|v| _mm512_loadu_ps(d.add(v * LANES)));
                for i in 0..R {
                    let a = _mm512_set1_ps(*x.add(off[i]));
                    for v in 0..OV {
                        sum[i][v] = _mm512_fmadd_ps(a, dv[v], sum[i][v]);
                    }
                }
                ox += 1;
                if ox == p.ow {
                    ox = 0;
                    base = p.base(pos + 1);
                } else {
                    base += p.sw * p.c;
                }
            }
            for (i, sum_i) in sum.iter().enumerate().take(valid) {
                let o = acc.add((r0 + i) * oc);
                for (v, s) in sum_i.iter().enumerate() {
                    let q = o.add(v * LANES);
                    _mm512_storeu_ps(q, _mm512_add_ps(_mm512_loadu_ps(q), *s));
                }
            }
            r0 += R;
        }
    }
}
