//! 2-D max and average pooling over NHWC tensors and their gradients, with
//! TensorFlow's window rules: padded positions never win a max and are not
//! counted in an average.
//!
//! Loops run over output rows (batch x out_h) with the channel vector
//! innermost, so the compiler vectorises across channels. Large inputs are
//! split across the current rayon pool; the gradients split by image, since
//! windows overlap within an image but never across images.

use super::conv::{Padding, window_axis};
use super::scalar::Float;
use super::vectorize::vectorized;
use rayon::prelude::*;

/// Every size a pooling kernel needs, validated once by the op layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dGeom {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub channels: usize,
    pub k_h: usize,
    pub k_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_top: usize,
    pub pad_left: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl Pool2dGeom {
    /// Geometry of pooling an NHWC input with a `[k_h, k_w]` window. Errors
    /// name the parameter: a zero window or stride, or a VALID window larger
    /// than the input.
    pub fn new(input_nhwc: [usize; 4], ksize: [usize; 2], strides: [usize; 2], padding: Padding) -> Result<Self, String> {
        let [batch, in_h, in_w, channels] = input_nhwc;
        let (out_h, pad_top) = window_axis("height", in_h, ksize[0], strides[0], padding)?;
        let (out_w, pad_left) = window_axis("width", in_w, ksize[1], strides[1], padding)?;
        let fits = |d: [usize; 4]| d.iter().try_fold(1usize, |a, &x| a.checked_mul(x)).is_some();
        if !fits(input_nhwc) || !fits([batch, out_h, out_w, channels]) || ksize[0].checked_mul(ksize[1]).is_none() {
            return Err(format!("input {input_nhwc:?} with window {ksize:?} gives sizes larger than this machine can address"));
        }
        // max_pool_grad numbers a window's positions with u32.
        if ksize[0] * ksize[1] > u32::MAX as usize {
            return Err(format!("window {ksize:?} has more than 2^32 positions"));
        }
        Ok(Self {
            batch,
            in_h,
            in_w,
            channels,
            k_h: ksize[0],
            k_w: ksize[1],
            stride_h: strides[0],
            stride_w: strides[1],
            pad_top,
            pad_left,
            out_h,
            out_w,
        })
    }

    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.channels
    }
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h * self.out_w * self.channels
    }

    /// True when every input position lies in exactly one window: windows
    /// as wide as their stride, reaching past the input's end.
    fn windows_tile_the_input(&self) -> bool {
        let covers = |k: usize, stride: usize, out: usize, pad: usize, len: usize| {
            k == stride && out.checked_mul(k).is_some_and(|end| end.saturating_sub(pad) >= len)
        };
        covers(self.k_h, self.stride_h, self.out_h, self.pad_top, self.in_h)
            && covers(self.k_w, self.stride_w, self.out_w, self.pad_left, self.in_w)
    }

    /// `f(oy, ox, (y0, y1), (x0, x1))` for every output position whose
    /// window holds at least one input position, row-major.
    #[inline(always)]
    fn for_each_window(&self, mut f: impl FnMut(usize, usize, (usize, usize), (usize, usize))) {
        for oy in 0..self.out_h {
            let rows = self.rows(oy);
            for ox in 0..self.out_w {
                let cols = self.cols(ox);
                if rows.0 < rows.1 && cols.0 < cols.1 {
                    f(oy, ox, rows, cols);
                }
            }
        }
    }

    /// Input rows `[y0, y1)` covered by output row `oy`, clipped to the image.
    #[inline]
    fn rows(&self, oy: usize) -> (usize, usize) {
        clip(oy * self.stride_h, self.pad_top, self.k_h, self.in_h)
    }
    /// Input columns `[x0, x1)` covered by output column `ox`, clipped.
    #[inline]
    fn cols(&self, ox: usize) -> (usize, usize) {
        clip(ox * self.stride_w, self.pad_left, self.k_w, self.in_w)
    }
}

/// `[start - pad, start - pad + k)` intersected with `[0, len)`.
#[inline]
fn clip(start: usize, pad: usize, k: usize, len: usize) -> (usize, usize) {
    let lo = start.saturating_sub(pad).min(len);
    let hi = (start + k).saturating_sub(pad).min(len);
    (lo, hi)
}

/// Below this many output elements the pooling kernels stay on one thread.
const PARALLEL_MIN_OUTPUT: usize = 1 << 15;

/// Runs `f(global_output_row, row_slice)` for each output row (`out_w *
/// channels` elements), in parallel when the output is large and the
/// device has `threads > 1` (its own pool, which the executor runs in: a
/// one-thread device must not borrow rayon's global pool, whose threads
/// the host's other devices are using).
fn for_output_rows<T: Float>(out: &mut [T], g: &Pool2dGeom, threads: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let row = (g.out_w * g.channels).max(1);
    if out.len() >= PARALLEL_MIN_OUTPUT && threads > 1 {
        out.par_chunks_mut(row).enumerate().for_each(|(r, s)| f(r, s));
    } else {
        out.chunks_mut(row).enumerate().for_each(|(r, s)| f(r, s));
    }
}

/// Runs `f(image_index, image_slice)` for each image of an input-shaped
/// buffer, in parallel when it is large, holds several images and the
/// device has `threads > 1` (as [`for_output_rows`]).
fn for_input_images<T: Float>(buf: &mut [T], g: &Pool2dGeom, threads: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let image = (g.in_h * g.in_w * g.channels).max(1);
    if buf.len() >= PARALLEL_MIN_OUTPUT && g.batch > 1 && threads > 1 {
        buf.par_chunks_mut(image).enumerate().for_each(|(b, s)| f(b, s));
    } else {
        buf.chunks_mut(image).enumerate().for_each(|(b, s)| f(b, s));
    }
}

/// Max pooling: each output is the largest input in its window, padding
/// excluded (TF's SAME rule never yields a window wholly in the padding).
/// NaN inputs are skipped.
pub fn max_pool<T: Float>(input: &[T], out: &mut [T], g: &Pool2dGeom, threads: usize) {
    debug_assert_eq!(input.len(), g.input_len());
    debug_assert_eq!(out.len(), g.output_len());
    let c = g.channels;
    for_output_rows(out, g, threads, |r, orow| vectorized(#[inline(always)] || {
        let (b, oy) = (r / g.out_h, r % g.out_h);
        let (y0, y1) = g.rows(oy);
        let whole = c - c % CHUNK;
        for ox in 0..g.out_w {
            let (x0, x1) = g.cols(ox);
            let o = &mut orow[ox * c..][..c];
            let at = |y: usize, x: usize| ((b * g.in_h + y) * g.in_w + x) * c;
            // Whole chunks of channels, the running maxima in registers.
            for ch in (0..whole).step_by(CHUNK) {
                let mut best = [T::NEG_INFINITY; CHUNK];
                for y in y0..y1 {
                    for x in x0..x1 {
                        let src = chunk(input, at(y, x) + ch);
                        for (d, s) in best.iter_mut().zip(src) {
                            // Strict `>` keeps the first maximum, as the gradient assumes.
                            *d = if s > *d { s } else { *d };
                        }
                    }
                }
                o[ch..ch + CHUNK].copy_from_slice(&best);
            }
            // The channels after the last whole chunk.
            let o = &mut o[whole..];
            o.fill(T::NEG_INFINITY);
            for y in y0..y1 {
                for x in x0..x1 {
                    for (d, &s) in o.iter_mut().zip(&input[at(y, x) + whole..][..c - whole]) {
                        *d = if s > *d { s } else { *d };
                    }
                }
            }
        }
    }));
}

/// Channels the pooling loops keep in registers at once: two AVX2 vectors
/// of f32. The per-channel loops over a whole row of channels kept their
/// running maxima (and argmaxima) in memory, a load and a store per
/// window position; the CNN's first pool's gradient took 2.4x
/// TensorFlow's time that way.
const CHUNK: usize = 16;

/// `s[at..at + CHUNK]` as an array (a plain load once inlined).
#[inline(always)]
fn chunk<T: Float>(s: &[T], at: usize) -> [T; CHUNK] {
    let mut v = [T::ZERO; CHUNK];
    v.copy_from_slice(&s[at..at + CHUNK]);
    v
}

/// `s[at..at + CHUNK]` of a workspace as an array.
#[inline(always)]
fn chunk_i8(s: &[i8], at: usize) -> [i8; CHUNK] {
    let mut v = [0; CHUNK];
    v.copy_from_slice(&s[at..at + CHUNK]);
    v
}

/// Gradient of [`max_pool`]: each window's upstream gradient goes to the
/// first position (row-major within the window) holding its maximum, as
/// TensorFlow's CPU kernel does; overlapping windows add up. Overwrites
/// `grad_in`.
///
/// A window's argmax is found for all channels at once, channel innermost
/// with branch-free updates (so the compiler vectorises it), then the
/// gradients are scattered. Searching channel by channel, the previous
/// form, read the window at a stride of `channels` and took 2.9 / 1.4 ms for
/// the CNN's two pools at batch 64 (`cargo bench --bench cnn_kernels`).
pub fn max_pool_grad<T: Float>(input: &[T], grad_out: &[T], grad_in: &mut [T], g: &Pool2dGeom, threads: usize) {
    max_pool_grad_masked(input, grad_out, grad_in, g, threads, false)
}

/// `ReluGrad(max_pool_grad(y, grad_out), y)` in one pass, for a max pool
/// whose input `y` is a Relu's output: the routed gradient where `y > 0`,
/// else zero. The ReluGrad pass over the whole input-sized gradient (a
/// read of two such tensors and a write of one) goes away: the pooling
/// gradient already reads `y` and writes every position. Bit for bit the
/// two kernels' result.
pub fn max_pool_relu_grad<T: Float>(input: &[T], grad_out: &[T], grad_in: &mut [T], g: &Pool2dGeom, threads: usize) {
    max_pool_grad_masked(input, grad_out, grad_in, g, threads, true)
}

fn max_pool_grad_masked<T: Float>(input: &[T], grad_out: &[T], grad_in: &mut [T], g: &Pool2dGeom, threads: usize, relu: bool) {
    debug_assert_eq!(input.len(), g.input_len());
    debug_assert_eq!(grad_out.len(), g.output_len());
    debug_assert_eq!(grad_in.len(), g.input_len());
    let c = g.channels;
    let tiles = g.windows_tile_the_input();
    for_input_images(grad_in, g, threads, |b, gin| vectorized(#[inline(always)] || {
        let img = &input[b * g.in_h * g.in_w * c..][..g.in_h * g.in_w * c];
        if tiles {
            tiled_grad_image(img, &grad_out[b * g.out_h * g.out_w * c..][..g.out_h * g.out_w * c], gin, g, relu);
            return;
        }
        gin.fill(T::ZERO);
        // Per channel: the largest value seen in the window and the index
        // (row-major within the window) of the first position holding it.
        // u32 indices keep the select as wide as the f32 compare.
        let mut best = vec![T::ZERO; c];
        let mut at = vec![0u32; c];
        g.for_each_window(#[inline(always)] |oy, ox, (y0, y1), (x0, x1)| {
            // The window's first position wins until a strictly larger
            // value comes (a NaN there is kept; a later NaN never wins).
            best.copy_from_slice(&img[(y0 * g.in_w + x0) * c..][..c]);
            at.fill(0);
            let mut k = 0u32;
            for y in y0..y1 {
                for x in x0..x1 {
                    if k > 0 {
                        let src = &img[(y * g.in_w + x) * c..][..c];
                        for ((bv, av), &s) in best.iter_mut().zip(at.iter_mut()).zip(src) {
                            let wins = s > *bv;
                            *bv = if wins { s } else { *bv };
                            *av = if wins { k } else { *av };
                        }
                    }
                    k += 1;
                }
            }
            let go = &grad_out[((b * g.out_h + oy) * g.out_w + ox) * c..][..c];
            let width = (x1 - x0) as u32;
            for (ch, (&a, &gv)) in at.iter().zip(go).enumerate() {
                let (y, x) = (y0 + (a / width) as usize, x0 + (a % width) as usize);
                gin[(y * g.in_w + x) * c + ch] += gv;
            }
        });
        if relu {
            // Overlapping windows: mask once every window has added its part.
            for (d, &s) in gin.iter_mut().zip(img) {
                *d = if s > T::ZERO { *d } else { T::ZERO };
            }
        }
    }));
}

/// One image's max-pool gradient when every input position lies in exactly
/// one window: each position is written once (the routed gradient or zero,
/// masked by `img > 0` when `relu`), with no zeroing pass and no adds.
/// Whole chunks of channels keep their maxima and argmaxima in registers;
/// the channels after the last whole chunk run the same steps over a slice.
#[inline(always)]
fn tiled_grad_image<T: Float>(img: &[T], grad_out: &[T], gin: &mut [T], g: &Pool2dGeom, relu: bool) {
    let c = g.channels;
    let whole = c - c % CHUNK;
    let (mut best, mut at) = (vec![T::ZERO; c - whole], vec![0u32; c - whole]);
    let mut offsets = Vec::with_capacity(g.k_h * g.k_w);
    g.for_each_window(#[inline(always)] |oy, ox, (y0, y1), (x0, x1)| {
        // Offsets of the window's positions, row-major.
        offsets.clear();
        offsets.extend((y0..y1).flat_map(|y| (x0..x1).map(move |x| (y * g.in_w + x) * c)));
        let (pos, n) = (|k: usize| offsets[k], offsets.len());
        let go = &grad_out[(oy * g.out_w + ox) * c..][..c];
        for ch in (0..whole).step_by(CHUNK) {
            // The window's first position wins until a strictly larger
            // value comes (a NaN there is kept; a later NaN never wins).
            let mut best = chunk(img, pos(0) + ch);
            let mut at = [0u32; CHUNK];
            for k in 1..n {
                let src = chunk(img, pos(k) + ch);
                for ((bv, av), s) in best.iter_mut().zip(at.iter_mut()).zip(src) {
                    let wins = s > *bv;
                    *bv = if wins { s } else { *bv };
                    *av = if wins { k as u32 } else { *av };
                }
            }
            let go = chunk(go, ch);
            for k in 0..n {
                let dst = &mut gin[pos(k) + ch..][..CHUNK];
                let src = chunk(img, pos(k) + ch);
                for (((d, &a), gv), s) in dst.iter_mut().zip(&at).zip(go).zip(src) {
                    let routed = if a == k as u32 { gv } else { T::ZERO };
                    *d = if !relu || s > T::ZERO { routed } else { T::ZERO };
                }
            }
        }
        if whole == c {
            return;
        }
        best.copy_from_slice(&img[pos(0) + whole..][..c - whole]);
        at.fill(0);
        for k in 1..n {
            for ((bv, av), &s) in best.iter_mut().zip(at.iter_mut()).zip(&img[pos(k) + whole..][..c - whole]) {
                let wins = s > *bv;
                *bv = if wins { s } else { *bv };
                *av = if wins { k as u32 } else { *av };
            }
        }
        for k in 0..n {
            let src = &img[pos(k) + whole..][..c - whole];
            let dst = &mut gin[pos(k) + whole..][..c - whole];
            for (((d, &a), &gv), &s) in dst.iter_mut().zip(&at).zip(&go[whole..]).zip(src) {
                let routed = if a == k as u32 { gv } else { T::ZERO };
                *d = if !relu || s > T::ZERO { routed } else { T::ZERO };
            }
        }
    });
}

/// Largest window a max pool's workspace can index: an entry keeps the
/// winning position in its low 7 bits.
pub const MAX_WORKSPACE_WINDOW: usize = 127;

/// Set in a workspace entry whose window's winner is not positive (or is
/// NaN): a ReluGrad after the pool's gradient zeroes what it routes there.
const NOT_POSITIVE: i8 = i8::MIN;

/// [`max_pool`], also writing its *workspace*: per output element, the
/// position (row-major in the window clipped to the image) that
/// [`max_pool_grad`] routes its gradient to, and whether the value there is
/// positive (see [`max_pool_grad_with_workspace`]). The gradient then reads
/// one byte per window instead of the pool's whole input, which by the
/// time the backward pass runs has usually left the cache (the CNN's first
/// pool's input is 6.4 MB at batch 64); oneDNN's pooling keeps such a
/// workspace for the same reason. The output is [`max_pool`]'s bit for bit
/// (NaN skipped), while the routed position follows the gradient's rule
/// (the first position wins until a strictly larger value comes, so a NaN
/// there keeps it). Windows of more than [`MAX_WORKSPACE_WINDOW`]
/// positions are the caller's to refuse.
pub fn max_pool_with_workspace<T: Float>(input: &[T], out: &mut [T], ws: &mut [i8], g: &Pool2dGeom, threads: usize) {
    debug_assert_eq!(input.len(), g.input_len());
    debug_assert_eq!(out.len(), g.output_len());
    debug_assert_eq!(ws.len(), g.output_len());
    debug_assert!(g.k_h * g.k_w <= MAX_WORKSPACE_WINDOW);
    let c = g.channels;
    let row = (g.out_w * c).max(1);
    let body = |r: usize, orow: &mut [T], wrow: &mut [i8]| vectorized(#[inline(always)] || {
        let (b, oy) = (r / g.out_h, r % g.out_h);
        let (y0, y1) = g.rows(oy);
        let whole = c - c % CHUNK;
        let entry = |arg: u32, best: T| arg as i8 | if best > T::ZERO { 0 } else { NOT_POSITIVE };
        for ox in 0..g.out_w {
            let (x0, x1) = g.cols(ox);
            let (o, w) = (&mut orow[ox * c..][..c], &mut wrow[ox * c..][..c]);
            let at = |y: usize, x: usize| ((b * g.in_h + y) * g.in_w + x) * c;
            let positions = || (y0..y1).flat_map(|y| (x0..x1).map(move |x| (y, x)));
            for ch in (0..whole).step_by(CHUNK) {
                // `top`: the forward's maximum; `best`, `arg`: the gradient's winner.
                let mut top = [T::NEG_INFINITY; CHUNK];
                let mut best = [T::ZERO; CHUNK];
                let mut arg = [0u32; CHUNK];
                for (k, (y, x)) in positions().enumerate() {
                    let src = chunk(input, at(y, x) + ch);
                    for (t, s) in top.iter_mut().zip(src) {
                        *t = if s > *t { s } else { *t };
                    }
                    if k == 0 {
                        best = src;
                        continue;
                    }
                    for ((bv, av), s) in best.iter_mut().zip(arg.iter_mut()).zip(src) {
                        let wins = s > *bv;
                        *bv = if wins { s } else { *bv };
                        *av = if wins { k as u32 } else { *av };
                    }
                }
                o[ch..ch + CHUNK].copy_from_slice(&top);
                for ((e, &a), &bv) in w[ch..ch + CHUNK].iter_mut().zip(&arg).zip(&best) {
                    *e = entry(a, bv);
                }
            }
            // The channels after the last whole chunk, one at a time.
            for ch in whole..c {
                let (mut top, mut best, mut arg) = (T::NEG_INFINITY, T::ZERO, 0u32);
                for (k, (y, x)) in positions().enumerate() {
                    let s = input[at(y, x) + ch];
                    top = if s > top { s } else { top };
                    if k == 0 || s > best {
                        (best, arg) = (s, k as u32);
                    }
                }
                o[ch] = top;
                w[ch] = entry(arg, best);
            }
        }
    });
    if out.len() >= PARALLEL_MIN_OUTPUT && threads > 1 {
        out.par_chunks_mut(row).zip(ws.par_chunks_mut(row)).enumerate().for_each(|(r, (o, w))| body(r, o, w));
    } else {
        out.chunks_mut(row).zip(ws.chunks_mut(row)).enumerate().for_each(|(r, (o, w))| body(r, o, w));
    }
}

/// [`max_pool_grad`] from the pool's workspace (see
/// [`max_pool_with_workspace`]) instead of its input; with `relu`,
/// [`max_pool_relu_grad`] (the routed gradient kept only where the winner
/// is positive). Bit for bit those kernels' results. Overwrites `grad_in`.
pub fn max_pool_grad_with_workspace<T: Float>(ws: &[i8], grad_out: &[T], grad_in: &mut [T], g: &Pool2dGeom, threads: usize, relu: bool) {
    debug_assert_eq!(ws.len(), g.output_len());
    debug_assert_eq!(grad_out.len(), g.output_len());
    debug_assert_eq!(grad_in.len(), g.input_len());
    let c = g.channels;
    let tiles = g.windows_tile_the_input();
    let out_image = g.out_h * g.out_w * c;
    for_input_images(grad_in, g, threads, |b, gin| vectorized(#[inline(always)] || {
        let (ws, go) = (&ws[b * out_image..][..out_image], &grad_out[b * out_image..][..out_image]);
        // Entry `a` routes to position `key(a)` (with `relu`, a set sign
        // bit matches no position). A mask, not a branch on `relu`, so that
        // the loops below stay vector code.
        let mask: i8 = if relu { -1 } else { i8::MAX };
        let key = |a: i8| a & mask;
        if tiles {
            // Every position written once: the routed gradient or zero.
            let whole = c - c % CHUNK;
            g.for_each_window(#[inline(always)] |oy, ox, (y0, y1), (x0, x1)| {
                let e = (oy * g.out_w + ox) * c;
                let (wv, gv) = (&ws[e..][..c], &go[e..][..c]);
                let mut k = 0i8;
                for y in y0..y1 {
                    for x in x0..x1 {
                        let dst = &mut gin[(y * g.in_w + x) * c..][..c];
                        for ch in (0..whole).step_by(CHUNK) {
                            let (keys, grads) = (chunk_i8(wv, ch), chunk(gv, ch));
                            for ((d, a), gr) in dst[ch..ch + CHUNK].iter_mut().zip(keys).zip(grads) {
                                *d = if key(a) == k { gr } else { T::ZERO };
                            }
                        }
                        for ((d, &a), &gr) in dst[whole..].iter_mut().zip(&wv[whole..]).zip(&gv[whole..]) {
                            *d = if key(a) == k { gr } else { T::ZERO };
                        }
                        k += 1;
                    }
                }
            });
            return;
        }
        // Overlapping windows add up, in window order as `max_pool_grad`;
        // a position whose value is not positive is the winner of no window
        // that routes (all its windows' entries say so), so it stays zero
        // as the masked sum would.
        gin.fill(T::ZERO);
        g.for_each_window(#[inline(always)] |oy, ox, (y0, y1), (x0, x1)| {
            let e = (oy * g.out_w + ox) * c;
            let width = x1 - x0;
            for (ch, (&a, &gr)) in ws[e..][..c].iter().zip(&go[e..][..c]).enumerate() {
                let k = key(a) as usize;
                // A set sign bit under `relu`, or (in a workspace not
                // written by the pool) a position outside the window.
                if k >= (y1 - y0) * width {
                    continue;
                }
                gin[((y0 + k / width) * g.in_w + x0 + k % width) * c + ch] += gr;
            }
        });
    }));
}

/// Average pooling: each output is the mean of the inputs inside its window,
/// dividing by the number of unpadded positions (TensorFlow's rule).
pub fn avg_pool<T: Float>(input: &[T], out: &mut [T], g: &Pool2dGeom, threads: usize) {
    debug_assert_eq!(input.len(), g.input_len());
    debug_assert_eq!(out.len(), g.output_len());
    let c = g.channels;
    for_output_rows(out, g, threads, |r, orow| vectorized(#[inline(always)] || {
        let (b, oy) = (r / g.out_h, r % g.out_h);
        let (y0, y1) = g.rows(oy);
        for ox in 0..g.out_w {
            let (x0, x1) = g.cols(ox);
            let o = &mut orow[ox * c..][..c];
            o.fill(T::ZERO);
            for y in y0..y1 {
                for x in x0..x1 {
                    let src = &input[((b * g.in_h + y) * g.in_w + x) * c..][..c];
                    for (d, &s) in o.iter_mut().zip(src) {
                        *d += s;
                    }
                }
            }
            let count = (y1 - y0) * (x1 - x0);
            if count > 0 {
                let inv = T::ONE / T::from_usize(count);
                o.iter_mut().for_each(|v| *v *= inv);
            }
        }
    }));
}

/// Gradient of [`avg_pool`]: each window's upstream gradient, divided by the
/// window's unpadded count, is added to every input it averaged. Overwrites
/// `grad_in`.
pub fn avg_pool_grad<T: Float>(grad_out: &[T], grad_in: &mut [T], g: &Pool2dGeom, threads: usize) {
    debug_assert_eq!(grad_out.len(), g.output_len());
    debug_assert_eq!(grad_in.len(), g.input_len());
    let c = g.channels;
    for_input_images(grad_in, g, threads, |b, gin| vectorized(#[inline(always)] || {
        gin.fill(T::ZERO);
        for oy in 0..g.out_h {
            let (y0, y1) = g.rows(oy);
            for ox in 0..g.out_w {
                let (x0, x1) = g.cols(ox);
                let count = (y1 - y0) * (x1 - x0);
                if count == 0 {
                    continue;
                }
                let inv = T::ONE / T::from_usize(count);
                let go = &grad_out[((b * g.out_h + oy) * g.out_w + ox) * c..][..c];
                for y in y0..y1 {
                    for x in x0..x1 {
                        let dst = &mut gin[(y * g.in_w + x) * c..][..c];
                        for (d, &s) in dst.iter_mut().zip(go) {
                            *d += s * inv;
                        }
                    }
                }
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::matmul::tests::random;

    /// Every (output index, input indices of its window in row-major
    /// order, padding left out) of the geometry, channel by channel.
    fn windows(g: &Pool2dGeom) -> Vec<(usize, Vec<usize>)> {
        let mut out = Vec::with_capacity(g.output_len());
        for b in 0..g.batch {
            for oy in 0..g.out_h {
                for ox in 0..g.out_w {
                    for ch in 0..g.channels {
                        let mut at = Vec::new();
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let iy = (oy * g.stride_h + ky) as isize - g.pad_top as isize;
                                let ix = (ox * g.stride_w + kx) as isize - g.pad_left as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < g.in_h && (ix as usize) < g.in_w {
                                    at.push(((b * g.in_h + iy as usize) * g.in_w + ix as usize) * g.channels + ch);
                                }
                            }
                        }
                        out.push((((b * g.out_h + oy) * g.out_w + ox) * g.channels + ch, at));
                    }
                }
            }
        }
        out
    }

    /// Direct reference: (max, mean over valid) per output, in f64.
    fn naive(input: &[f64], g: &Pool2dGeom) -> (Vec<f64>, Vec<f64>) {
        let mut mx = vec![0.0; g.output_len()];
        let mut av = vec![0.0; g.output_len()];
        for (o, at) in windows(g) {
            mx[o] = at.iter().map(|&i| input[i]).fold(f64::NEG_INFINITY, f64::max);
            av[o] = at.iter().map(|&i| input[i]).sum::<f64>() / at.len() as f64;
        }
        (mx, av)
    }

    fn cases() -> Vec<([usize; 4], [usize; 2], [usize; 2], Padding)> {
        vec![
            ([2, 6, 7, 3], [2, 2], [2, 2], Padding::Valid),
            // Windows that tile the input (the odd width padded on the right).
            ([2, 6, 7, 3], [2, 2], [2, 2], Padding::Same),
            ([2, 6, 7, 3], [3, 3], [2, 2], Padding::Same),
            ([1, 5, 5, 2], [3, 3], [1, 1], Padding::Same),
            ([3, 8, 5, 1], [2, 3], [3, 1], Padding::Valid),
            ([1, 4, 4, 2], [4, 4], [3, 3], Padding::Same),
            // Whole chunks of 16 channels, and a chunk with channels after it,
            // tiling and overlapping.
            ([2, 6, 7, 16], [2, 2], [2, 2], Padding::Same),
            ([1, 4, 6, 40], [2, 2], [2, 2], Padding::Valid),
            ([2, 5, 5, 20], [3, 3], [2, 2], Padding::Same),
            ([1, 6, 6, 18], [3, 3], [3, 3], Padding::Valid),
            // Large enough to take the parallel path, overlapping and tiling.
            ([4, 64, 64, 8], [3, 3], [2, 2], Padding::Same),
            ([4, 64, 64, 8], [2, 2], [2, 2], Padding::Same),
        ]
    }

    #[test]
    fn pool_geometry_follows_tensorflow_rules_and_reports_bad_windows() {
        let g = Pool2dGeom::new([1, 4, 4, 2], [4, 4], [3, 3], Padding::Same).unwrap();
        // out = ceil(4/3) = 2; total = (2-1)*3 + 4 - 4 = 3 -> 1 before.
        assert_eq!((g.out_h, g.out_w, g.pad_top, g.pad_left), (2, 2, 1, 1));
        let e = Pool2dGeom::new([1, 4, 2, 2], [2, 3], [1, 1], Padding::Valid).unwrap_err();
        assert_eq!(e, "VALID padding: window width 3 is larger than the input width 2");
        let e = Pool2dGeom::new([1, 4, 4, 2], [0, 2], [1, 1], Padding::Same).unwrap_err();
        assert_eq!(e, "window height size must be at least 1, got 0");
        // Tiling: SAME 2x2/2 over 7 pads one column; VALID leaves it out;
        // 3x3/2 windows overlap.
        let tiles = |w, k, s, p| Pool2dGeom::new([1, 6, w, 1], k, s, p).unwrap().windows_tile_the_input();
        assert!(tiles(7, [2, 2], [2, 2], Padding::Same));
        assert!(!tiles(7, [2, 2], [2, 2], Padding::Valid));
        assert!(tiles(6, [2, 2], [2, 2], Padding::Valid));
        assert!(!tiles(7, [3, 3], [2, 2], Padding::Same));
        assert!(!tiles(7, [2, 2], [3, 3], Padding::Valid));
    }

    /// `max_pool_relu_grad` against a direct scatter in f64 (each window's
    /// gradient to its first maximum, summed, then zero where the input is
    /// not positive), on tiling and overlapping windows with about a third
    /// of the inputs at or below zero; and bit for bit `max_pool_grad`
    /// followed by ReluGrad's select, at one and two threads.
    #[test]
    fn fused_relu_grad_matches_a_direct_scatter_and_the_two_kernels() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (i, (inp, k, s, p)) in cases().into_iter().enumerate() {
            let g = Pool2dGeom::new(inp, k, s, p).unwrap();
            // Relu-like inputs: negatives clipped to zero (ties at zero
            // included), as a pool over a Relu's output sees them.
            let x: Vec<f64> = random::<f64>(g.input_len(), 30 + i as u64).iter().map(|&v| if v < -0.3 { 0.0 } else { v }).collect();
            let dy = random::<f64>(g.output_len(), 40 + i as u64);
            let mut want = vec![0.0; g.input_len()];
            for (o, at) in windows(&g) {
                // The first position holding the window's maximum.
                let first = at.iter().copied().reduce(|best, i| if x[i] > x[best] { i } else { best });
                if let Some(i) = first {
                    want[i] += dy[o];
                }
            }
            for (w, &v) in want.iter_mut().zip(&x) {
                if v <= 0.0 {
                    *w = 0.0;
                }
            }
            for threads in [1, 2] {
                let mut got = vec![f64::NAN; g.input_len()];
                pool.install(|| max_pool_relu_grad(&x, &dy, &mut got, &g, threads));
                for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                    assert!((a - e).abs() < 1e-12, "case {i} [{j}]: {a} vs {e}");
                }
                let mut plain = vec![f64::NAN; g.input_len()];
                pool.install(|| max_pool_grad(&x, &dy, &mut plain, &g, threads));
                let chain: Vec<u64> = plain.iter().zip(&x).map(|(&d, &v)| if v > 0.0 { d } else { 0.0 }.to_bits()).collect();
                assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), chain, "case {i}");
            }
            assert!(x.iter().filter(|&&v| v == 0.0).count() > g.input_len() / 5, "case {i}: too few zeros to test the mask");
        }
    }

    /// The workspace pair against the kernels it stands in for, bit for
    /// bit: the pool's output against `max_pool`, and the gradient from the
    /// workspace against `max_pool_grad` and `max_pool_relu_grad` reading
    /// the input, on every geometry (tiling and overlapping, 16-channel
    /// chunks and the channels after them), at one and two threads, over
    /// inputs with zeros, ties, negative zeros, infinities and NaNs leading
    /// and later in windows.
    #[test]
    fn workspace_gradients_equal_the_input_reading_kernels_bit_for_bit() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (i, (inp, k, s, p)) in cases().into_iter().enumerate() {
            let g = Pool2dGeom::new(inp, k, s, p).unwrap();
            let specials = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.25];
            let x: Vec<f32> = random::<f32>(g.input_len(), 50 + i as u64)
                .iter()
                .enumerate()
                .map(|(j, &v)| if j % 7 == 3 { specials[(j / 7) % specials.len()] } else if v < -0.3 { 0.0 } else { v })
                .collect();
            let mut dy = random::<f32>(g.output_len(), 60 + i as u64);
            dy[0] = -0.0;
            for threads in [1, 2] {
                let (mut want_out, mut got_out) = (vec![f32::NAN; g.output_len()], vec![f32::NAN; g.output_len()]);
                let mut ws = vec![0i8; g.output_len()];
                pool.install(|| {
                    max_pool(&x, &mut want_out, &g, threads);
                    max_pool_with_workspace(&x, &mut got_out, &mut ws, &g, threads);
                });
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got_out), bits(&want_out), "case {i}, {threads} threads: pool output");
                for relu in [false, true] {
                    let (mut want, mut got) = (vec![f32::NAN; g.input_len()], vec![f32::NAN; g.input_len()]);
                    pool.install(|| {
                        if relu {
                            max_pool_relu_grad(&x, &dy, &mut want, &g, threads);
                        } else {
                            max_pool_grad(&x, &dy, &mut want, &g, threads);
                        }
                        max_pool_grad_with_workspace(&ws, &dy, &mut got, &g, threads, relu);
                    });
                    assert_eq!(bits(&got), bits(&want), "case {i}, {threads} threads, relu {relu}");
                }
            }
        }
    }

    /// A workspace entry by hand: one 2x2 window per channel, the winner's
    /// position in the low bits, the sign bit where it is not positive.
    #[test]
    fn workspace_entries_name_the_winner_and_its_sign() {
        let g = Pool2dGeom::new([1, 2, 2, 4], [2, 2], [2, 2], Padding::Valid).unwrap();
        // Channels: max 3.0 at position 2; all negative, max at 1; leading
        // NaN (kept by the gradient; the pool's output skips it); a tie at
        // zero (the first, position 0).
        #[rustfmt::skip]
        let x = [
            0.5f32, -4.0, f32::NAN, 0.0,
            1.0,    -1.0, 2.0,      0.0,
            3.0,    -3.0, 1.0,      -1.0,
            2.0,    -2.0, 5.0,      0.0,
        ];
        let (mut out, mut ws) = ([0f32; 4], [0i8; 4]);
        max_pool_with_workspace(&x, &mut out, &mut ws, &g, 1);
        assert_eq!(out, [3.0, -1.0, 5.0, 0.0]);
        assert_eq!(ws, [2, 1 | i8::MIN, i8::MIN, i8::MIN]);
    }

    #[test]
    fn forward_pools_match_direct_loops() {
        for (inp, k, s, p) in cases() {
            let g = Pool2dGeom::new(inp, k, s, p).unwrap();
            let x = random::<f64>(g.input_len(), 9);
            let (mx, av) = naive(&x, &g);
            let mut got = vec![f64::NAN; g.output_len()];
            max_pool(&x, &mut got, &g, 1);
            assert_eq!(got, mx, "max_pool {inp:?} {k:?} {s:?} {p:?}");
            avg_pool(&x, &mut got, &g, 1);
            for (a, b) in got.iter().zip(&av) {
                assert!((a - b).abs() < 1e-14, "avg_pool {inp:?} {k:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn avg_pool_divides_by_the_unpadded_count() {
        // Every window of a SAME 3x3 pool over a 2x2 input covers all 4
        // inputs and 5 padded positions: the mean is over the 4 only.
        let g = Pool2dGeom::new([1, 2, 2, 1], [3, 3], [1, 1], Padding::Same).unwrap();
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let mut out = [0.0f32; 4];
        avg_pool(&x, &mut out, &g, 1);
        assert_eq!(out, [3.0; 4]);
    }

    #[test]
    fn max_pool_grad_routes_to_the_first_maximum() {
        // One 2x2 window with a tie between positions 1 and 2.
        let g = Pool2dGeom::new([1, 2, 2, 1], [2, 2], [2, 2], Padding::Valid).unwrap();
        let x = [0.5f64, 3.0, 3.0, 1.0];
        let mut gin = [9.0f64; 4];
        max_pool_grad(&x, &[2.5], &mut gin, &g, 1);
        assert_eq!(gin, [0.0, 2.5, 0.0, 0.0]);
    }

    #[test]
    fn max_pool_grad_keeps_a_leading_nan_and_skips_later_ones_per_channel() {
        // Two channels over one 2x2 window: channel 0 starts with NaN (it
        // wins, as nothing compares greater), channel 1 has a NaN later
        // (never greater) and its maximum at position 2.
        let g = Pool2dGeom::new([1, 2, 2, 2], [2, 2], [2, 2], Padding::Valid).unwrap();
        let x = [f64::NAN, 1.0, 5.0, f64::NAN, 7.0, 4.0, 1.0, 2.0];
        let mut gin = [9.0f64; 8];
        max_pool_grad(&x, &[1.5, 2.5], &mut gin, &g, 1);
        assert_eq!(gin, [1.5, 0.0, 0.0, 0.0, 0.0, 2.5, 0.0, 0.0]);
    }

    /// The same rules on 20 channels (a chunk of 16 and 4 after it), NaNs
    /// leading and later in both parts, checked channel by channel against
    /// a scalar scan of the window; the forward pass skips every NaN.
    #[test]
    fn nan_rules_hold_in_whole_chunks_and_the_channels_after_them() {
        let c = 20;
        let g = Pool2dGeom::new([1, 2, 2, c], [2, 2], [2, 2], Padding::Valid).unwrap();
        let mut x = random::<f64>(4 * c, 77);
        for (pos, ch) in [(0, 3), (0, 17), (2, 5), (1, 18), (3, 0)] {
            x[pos * c + ch] = f64::NAN;
        }
        let dy: Vec<f64> = (0..c).map(|ch| 1.0 + ch as f64).collect();
        let mut gin = vec![9.0; 4 * c];
        max_pool_grad(&x, &dy, &mut gin, &g, 1);
        let mut out = vec![0.0; c];
        max_pool(&x, &mut out, &g, 1);
        for ch in 0..c {
            let mut first = 0;
            for pos in 1..4 {
                if x[pos * c + ch] > x[first * c + ch] {
                    first = pos;
                }
            }
            for pos in 0..4 {
                let want = if pos == first { dy[ch] } else { 0.0 };
                assert_eq!(gin[pos * c + ch], want, "channel {ch}, position {pos}");
            }
            let max = (0..4).map(|pos| x[pos * c + ch]).filter(|v| !v.is_nan()).fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(out[ch], max, "channel {ch}");
        }
        // The leading NaNs kept their window's gradient.
        assert_eq!((gin[3], gin[17]), (dy[3], dy[17]));
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    /// Central finite differences of `L = <pool(x), y>`. Random inputs have no
    /// ties, so max pooling is differentiable at them.
    #[test]
    fn pool_gradients_match_finite_differences() {
        for (inp, k, s, p) in cases().into_iter().take(5) {
            let g = Pool2dGeom::new(inp, k, s, p).unwrap();
            let x = random::<f64>(g.input_len(), 31);
            let y = random::<f64>(g.output_len(), 32);
            let mut dmax = vec![f64::NAN; g.input_len()];
            max_pool_grad(&x, &y, &mut dmax, &g, 1);
            let mut davg = vec![f64::NAN; g.input_len()];
            avg_pool_grad(&y, &mut davg, &g, 1);
            let loss = |x: &[f64], avg: bool| {
                let mut o = vec![0.0; g.output_len()];
                if avg { avg_pool(x, &mut o, &g, 1) } else { max_pool(x, &mut o, &g, 1) }
                dot(&o, &y)
            };
            let h = 1e-6;
            for i in 0..x.len() {
                let (mut xp, mut xm) = (x.clone(), x.clone());
                xp[i] += h;
                xm[i] -= h;
                for (avg, grad) in [(false, &dmax), (true, &davg)] {
                    let fd = (loss(&xp, avg) - loss(&xm, avg)) / (2.0 * h);
                    assert!((fd - grad[i]).abs() < 1e-7, "{inp:?} {k:?} avg={avg}: d[{i}] fd {fd} vs {}", grad[i]);
                }
            }
        }
    }

    #[test]
    fn parallel_gradients_agree_with_the_adjoint_identity() {
        for (inp, k, s, p) in cases().into_iter().rev().take(2) {
            let g = Pool2dGeom::new(inp, k, s, p).unwrap();
            let x = random::<f64>(g.input_len(), 41);
            let y = random::<f64>(g.output_len(), 42);
            let mut o = vec![0.0; g.output_len()];
            // Two threads: the large cases take the parallel paths.
            avg_pool(&x, &mut o, &g, 2);
            let mut d = vec![0.0; g.input_len()];
            avg_pool_grad(&y, &mut d, &g, 2);
            assert!((dot(&o, &y) - dot(&x, &d)).abs() < 1e-9);
            // Max pooling is piecewise linear: <maxpool(x), y> = <x, dmax(x, y)>.
            max_pool(&x, &mut o, &g, 2);
            max_pool_grad(&x, &y, &mut d, &g, 2);
            assert!((dot(&o, &y) - dot(&x, &d)).abs() < 1e-9);
        }
    }
}
