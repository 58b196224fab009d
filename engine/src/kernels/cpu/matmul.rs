//! Dense matrix multiplication over row-major slices, through the `gemm` crate
//! (runtime-dispatched AVX-512/AVX2/NEON micro-kernels). Every other heavy CPU
//! kernel (convolution, its gradients) reduces to these calls.

use super::scalar::Float;
use rayon::prelude::*;

/// A product `c[m, n] = op(a)[m, k] · op(b)[k, n]`: `op` reads an operand
/// stored transposed (`a` as `[k, m]`, `b` as `[n, k]`) where its flag says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl Product {
    /// Neither operand transposed.
    pub fn new(m: usize, n: usize, k: usize) -> Product {
        Product { m, n, k, trans_a: false, trans_b: false }
    }

    /// The same sizes with the operands read transposed as given.
    pub fn transposed(self, trans_a: bool, trans_b: bool) -> Product {
        Product { trans_a, trans_b, ..self }
    }
}

/// A matrix operand as gemm sees it: element `(i, j)` at `ptr + i*rs + j*cs`.
#[derive(Clone, Copy)]
struct View<T> {
    ptr: *const T,
    rs: isize,
    cs: isize,
}

impl<T> View<T> {
    /// Operand `x` stored row-major as `[rows, cols]`, read transposed when `trans`.
    fn of(x: &[T], cols: usize, trans: bool) -> Self {
        let (rs, cs) = if trans { (1, cols as isize) } else { (cols as isize, 1) };
        View { ptr: x.as_ptr(), rs, cs }
    }

    /// The same elements read transposed: element `(i, j)` is this view's `(j, i)`.
    fn t(self) -> Self {
        View { rs: self.cs, cs: self.rs, ..self }
    }

    /// The operand from column `j0` on.
    ///
    /// # Safety
    /// Column `j0` lies inside the operand.
    unsafe fn at_column(self, j0: usize) -> Self {
        // SAFETY: forwarded.
        View { ptr: unsafe { self.ptr.offset(j0 as isize * self.cs) }, ..self }
    }
}

// SAFETY: a view only reads the slice it was made from, which outlives
// every product that uses it.
unsafe impl<T: Sync> Send for View<T> {}
unsafe impl<T: Sync> Sync for View<T> {}

/// `c`'s first element, shared by the threads of one product that write
/// disjoint column panels of `c` (`columns_in_parallel`,
/// `aliased_transposed_rhs`).
#[derive(Clone, Copy)]
struct PanelsOut<T>(*mut T);

// SAFETY: each panel writes only its own columns of `c`.
unsafe impl<T> Send for PanelsOut<T> {}
unsafe impl<T> Sync for PanelsOut<T> {}

impl<T> PanelsOut<T> {
    /// Taken whole (a method, not `.0`), so that a closure captures the
    /// `Sync` wrapper rather than the raw pointer inside it.
    fn ptr(self) -> *mut T {
        self.0
    }
}

/// One gemm call: `c = a · b` (`c += a · b` when `accumulate`) for an
/// `m x n` block of `c` at `c` with row stride `c_rs`, `k` deep.
///
/// # Safety
/// Every element the views and `c` address for these sizes is in bounds of a
/// live allocation, `c`'s block is not written by anyone else meanwhile, and
/// `c` aliases neither `a` nor `b`.
unsafe fn gemm_block<T: Float>((m, n, k): (usize, usize, usize), a: View<T>, b: View<T>, c: *mut T, c_rs: isize, accumulate: bool, parallelism: gemm_common::Parallelism) {
    // gemm's micro-kernels prefer a column-major destination, so a
    // row-major block is computed as Cᵀ = Bᵀ · Aᵀ (what gemm's generic entry
    // point does before it dispatches on the element type).
    let (m, n, lhs, rhs, c_cs, c_rs) = if c_rs > 1 { (n, m, b.t(), a.t(), c_rs, 1) } else { (m, n, a, b, 1, c_rs) };
    // SAFETY: forwarded from the caller's contract (the transposed views
    // address the same elements); gemm's `dst = alpha*dst + beta*lhs*rhs`
    // with alpha = beta = 1 and `read_dst = accumulate`.
    unsafe {
        T::gemm_kernel()(m, n, k, c, c_cs, c_rs, accumulate, lhs.ptr, lhs.cs, lhs.rs, rhs.ptr, rhs.cs, rhs.rs, T::ONE, T::ONE, false, false, false, parallelism);
    }
}

/// Minimum multiply-adds before a product is split across threads at all
/// (about 40 µs on one core): below it, waking a second worker costs more
/// than it saves.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// `c = op(a) · op(b)` (or `c += op(a) · op(b)` when `accumulate`) over
/// row-major slices. Shared by [`matmul`] and the convolution kernels.
///
/// With `threads > 1` a large product uses gemm's own rayon threading,
/// which hands out blocks of the output dynamically inside the current
/// pool, not a static band per thread: on a shared machine a core's speed
/// changes with the load beside it, equal bands wait for the slower core,
/// and dynamic blocks follow whichever core is fast (the MLP's training
/// step at 2 threads was 10-20% faster so; finer static bands were slower,
/// each packing its operands again: docs/logs/training-speed.md).
///
/// A batch-1 product (m = 1: a GEMV over a 784x512 weight matrix, 45-52 µs
/// on one thread) got slower split in two (51-71 µs with a rayon worker, 77
/// µs with a dedicated spinning worker), so products under
/// [`PARALLEL_MIN_MACS`] stay on the calling thread.
pub(crate) fn gemm_strided<T: Float>(a: &[T], b: &[T], c: &mut [T], p: Product, accumulate: bool, threads: usize) {
    let Product { m, n, k, trans_a, trans_b } = p;
    // Checked products: wrapped sizes must not pass these checks, since the
    // unsafe gemm call below trusts them.
    assert_eq!(Some(a.len()), m.checked_mul(k), "matmul: a has {} elements, expected {m}x{k}", a.len());
    assert_eq!(Some(b.len()), k.checked_mul(n), "matmul: b has {} elements, expected {k}x{n}", b.len());
    assert_eq!(Some(c.len()), m.checked_mul(n), "matmul: c has {} elements, expected {m}x{n}", c.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(T::ZERO);
        }
        return;
    }
    // gemm reduces a product whose output has at most GEMM_SMALL_OUTPUT
    // elements along k with another kernel, which rounds differently; such
    // products are below PARALLEL_MIN_MACS unless k is huge, and stay on
    // one thread so that the result never depends on the thread count.
    let parallel = threads > 1 && m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MIN_MACS && m * n > GEMM_SMALL_OUTPUT;
    let parallelism = if parallel { gemm_common::Parallelism::Rayon(threads) } else { gemm_common::Parallelism::None };
    if trans_b && m >= TRANSPOSED_PROBLEM_MIN_ROWS && k.is_multiple_of(ALIASING_STRIDE) {
        aliased_transposed_rhs(a, b, c, p, accumulate, parallel);
        return;
    }
    if trans_b && m >= TRANSPOSED_PROBLEM_MIN_ROWS {
        // Cᵀ = op(b)ᵀ · op(a)ᵀ: b, stored [n, k], is read row by row as
        // the left operand, op(a)ᵀ is [k, m], and Cᵀ is c read column-major.
        let lhs = View::of(b, k, true).t();
        let rhs = View::of(a, if trans_a { m } else { k }, trans_a).t();
        // SAFETY: as below; the same elements of a, b and c are addressed,
        // only the roles of rows and columns are exchanged. Cᵀ is
        // column-major, as gemm's micro-kernels prefer.
        unsafe {
            T::gemm_kernel()(
                n, m, k, c.as_mut_ptr(), n as isize, 1, accumulate, lhs.ptr, lhs.cs, lhs.rs, rhs.ptr, rhs.cs, rhs.rs, T::ONE, T::ONE, false,
                false, false, parallelism,
            );
        }
        return;
    }
    // op(a) is [m, k]: stored [m, k], or [k, m] when transposed.
    let av = View::of(a, if trans_a { m } else { k }, trans_a);
    // op(b) is [k, n]: stored [k, n], or [n, k] when transposed.
    let bv = View::of(b, if trans_b { k } else { n }, trans_b);
    let c_rs = n as isize;
    if parallel && m <= FEW_ROWS && n >= 2 * COLUMN_PANEL {
        columns_in_parallel((m, n, k), av, bv, c, accumulate, threads);
        return;
    }
    // SAFETY: the asserted lengths cover every index the views reach (the
    // largest is (m-1)*rs + (k-1)*cs = m*k - 1 for a, likewise b, c); `c` is
    // exclusively borrowed and cannot alias the shared `a`, `b`.
    unsafe { gemm_block((m, n, k), av, bv, c.as_mut_ptr(), c_rs, accumulate, parallelism) };
}

/// At most this many rows of `c`, a parallel product is split by columns
/// instead (`columns_in_parallel`).
const FEW_ROWS: usize = 64;

/// Columns per panel of `columns_in_parallel`, at the least.
const COLUMN_PANEL: usize = 64;

/// `c = op(a) · op(b)` as panels of `c`'s columns shared out over the pool,
/// each a single-threaded gemm. gemm's own threading splits the rows of
/// `c`, so a product with few of them ran on one thread: the CNN's dense
/// layer, [64, 3136] x [3136, 1024], took 4.7-5.4 ms on one thread and
/// 5.2-5.5 ms on two (best of 30, a 2-thread pool). Two panels per thread,
/// so that a faster core takes more of them (see `gemm_strided`).
fn columns_in_parallel<T: Float>((m, n, k): (usize, usize, usize), a: View<T>, b: View<T>, c: &mut [T], accumulate: bool, threads: usize) {
    let out = PanelsOut(c.as_mut_ptr());
    let panels = (2 * threads).min(n / COLUMN_PANEL).max(1);
    let width = n.div_ceil(panels).next_multiple_of(16);
    (0..n.div_ceil(width)).into_par_iter().for_each(|p| {
        let j0 = p * width;
        let cols = width.min(n - j0);
        // SAFETY: columns j0..j0 + cols of op(b) and of c lie inside the
        // asserted lengths (as in `gemm_strided`); the panels are disjoint.
        unsafe {
            gemm_block((m, cols, k), a, b.at_column(j0), out.ptr().add(j0), n as isize, accumulate, gemm_common::Parallelism::None);
        }
    });
}

/// `c = op(a) · bᵀ` for a `b` stored `[n, k]` whose rows lie a multiple of
/// 512 bytes apart, which gemm's packing reads slowly in either role (few
/// cache sets). `ALIASED_PANEL_ROWS` rows of `b` at a time are copied a
/// cache line further apart into a scratch panel that stays in L2, and gemm
/// reads the panel as its right operand for those columns of `c`. Copying
/// all of `b` first (the former path) sent the copy to memory and back:
/// [64, 1024] x [3136, 1024]ᵀ took 12.9 ms that way against 6.4 ms in
/// panels of 64 rows, 7.1 ms of 256 and 7.9 ms of 512, beside 7.3 ms for
/// the untransposed forward product (one thread, medians of 30,
/// interleaved). With several threads the panels are shared out; each is
/// one single-threaded gemm either way, so the result is the same for any
/// thread count.
/// `p.trans_b` is set: `b` is stored `[n, k]`.
fn aliased_transposed_rhs<T: Float>(a: &[T], b: &[T], c: &mut [T], p: Product, accumulate: bool, parallel: bool) {
    let Product { m, n, k, trans_a, .. } = p;
    let rs = k + ALIASING_PAD;
    let out = PanelsOut(c.as_mut_ptr());
    let panel = |j0: usize, scratch: &mut Vec<T>| {
        let rows = ALIASED_PANEL_ROWS.min(n - j0);
        scratch.resize(ALIASED_PANEL_ROWS * rs, T::ZERO);
        for (dst, src) in scratch.chunks_exact_mut(rs).zip(b[j0 * k..(j0 + rows) * k].chunks_exact(k)) {
            dst[..k].copy_from_slice(src);
        }
        let av = View::of(a, if trans_a { m } else { k }, trans_a);
        let bv = View { ptr: scratch.as_ptr(), rs: 1, cs: rs as isize };
        // SAFETY: element (i, j) of the panel's op(b) is scratch[j*rs + i]
        // with i < k, j < rows, inside the scratch; `a` as in gemm_strided;
        // the block of c is columns j0..j0+rows of its m rows (row stride
        // n), inside c, and no other panel writes those columns.
        unsafe { gemm_block((m, rows, k), av, bv, out.ptr().add(j0), n as isize, accumulate, gemm_common::Parallelism::None) };
    };
    if parallel {
        (0..n.div_ceil(ALIASED_PANEL_ROWS)).into_par_iter().for_each_init(Vec::new, |scratch, p| panel(p * ALIASED_PANEL_ROWS, scratch));
    } else {
        let mut scratch = Vec::new();
        for j0 in (0..n).step_by(ALIASED_PANEL_ROWS) {
            panel(j0, &mut scratch);
        }
    }
}

/// Rows of an aliased transposed operand copied per panel: 64 rows of
/// k = 1,024 floats are 266 KB, read by gemm from L2.
const ALIASED_PANEL_ROWS: usize = 64;

/// From this many rows of the output on, a product whose right operand is
/// stored transposed is computed as the transposed problem (Cᵀ = B·Aᵀ, so
/// gemm reads B's rows as its left operand): gemm 0.19 reads a transposed
/// right operand far below its usual rate (measured, one thread: [32, 512]
/// x [256, 512]ᵀ 335 us against 76 us untransposed; the CNN's [64, 1024] x
/// [3136, 1024]ᵀ 12.9-14.0 ms against 4.8-5.2 ms). Fewer rows (m = 1 is a
/// GEMV over contiguous rows of b) stay on the direct call.
const TRANSPOSED_PROBLEM_MIN_ROWS: usize = 16;

/// Row strides (in elements) at which gemm's packing of an operand read
/// across its rows slows down by 2-4x (rows 512 bytes apart and multiples
/// map into few cache sets): [64, 1024] x [3136, 1024]ᵀ took 13.1 ms as the
/// transposed problem and 8.5 ms with b transposed first, against 6.0 ms
/// and 7.5 ms at k = 1,000. Such operands are copied with rows a cache line
/// further apart, a panel at a time ([`aliased_transposed_rhs`]).
const ALIASING_STRIDE: usize = 128;

/// Elements added to each row of such an operand (64 bytes of f32).
const ALIASING_PAD: usize = 16;

/// gemm 0.19 takes its "horizontal" small-output path (a different
/// summation order over k) when the output has at most 16 x 16 elements and
/// the operands are laid out for it.
const GEMM_SMALL_OUTPUT: usize = 16 * 16;

/// `c[m,n] = op(a) · op(b)` for the sizes and layouts of `p`, overwriting `c`.
///
/// `a` is `[m,k]` (or `[k,m]` if `p.trans_a`), `b` is `[k,n]` (or `[n,k]` if
/// `p.trans_b`), all row-major and contiguous. `threads` is the number of
/// threads to use: 1 runs on the calling thread, more splits the work inside
/// the current rayon pool.
///
/// # Panics
/// When a slice's length is not the product its sizes give (checked, so
/// sizes whose product overflows are refused too).
pub fn matmul<T: Float>(a: &[T], b: &[T], c: &mut [T], p: Product, threads: usize) {
    gemm_strided(a, b, c, p, false, threads);
}

/// Below this many multiply-adds per matrix, a batch is split across threads
/// by whole matrices (each single-threaded) instead of inside each product.
const SMALL_MATMUL_FLOPS: usize = 64 * 64 * 64;

/// A batch of independent products, each exactly as [`matmul`]; operand `i`
/// of the batch starts at `i * m * k` in `a`, `i * k * n` in `b` and
/// `i * m * n` in `c`.
pub fn batch_matmul<T: Float>(a: &[T], b: &[T], c: &mut [T], batch: usize, p: Product, threads: usize) {
    let Product { m, n, k, .. } = p;
    let len = |x: usize, y: usize| batch.checked_mul(x).and_then(|v| v.checked_mul(y));
    assert_eq!(Some(a.len()), len(m, k), "batch_matmul: a has {} elements, expected {batch}x{m}x{k}", a.len());
    assert_eq!(Some(b.len()), len(k, n), "batch_matmul: b has {} elements, expected {batch}x{k}x{n}", b.len());
    assert_eq!(Some(c.len()), len(m, n), "batch_matmul: c has {} elements, expected {batch}x{m}x{n}", c.len());
    if batch == 0 || m == 0 || n == 0 {
        return;
    }
    let (sa, sb, sc) = (m * k, k * n, m * n);
    if threads > 1 && batch > 1 && m.saturating_mul(n).saturating_mul(k) < SMALL_MATMUL_FLOPS {
        c.par_chunks_mut(sc).enumerate().with_min_len(batch.div_ceil(threads)).for_each(|(i, ci)| {
            matmul(&a[i * sa..(i + 1) * sa], &b[i * sb..(i + 1) * sb], ci, p, 1);
        });
    } else {
        for (i, ci) in c.chunks_mut(sc).enumerate() {
            matmul(&a[i * sa..(i + 1) * sa], &b[i * sb..(i + 1) * sb], ci, p, threads);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    pub(crate) fn random<T: Float>(len: usize, seed: u64) -> Vec<T> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..len).map(|_| T::from_f64(rng.random_range(-1.0..1.0))).collect()
    }

    /// Textbook triple loop in f64, reading operands through the transposes.
    fn naive<T: Float>(a: &[T], b: &[T], m: usize, n: usize, k: usize, ta: bool, tb: bool) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    s += av.to_f64() * bv.to_f64();
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    fn check<T: Float>(m: usize, n: usize, k: usize, ta: bool, tb: bool, threads: usize, tol: f64) {
        let a = random::<T>(m * k, 1 + m as u64);
        let b = random::<T>(k * n, 2 + n as u64);
        let mut c = vec![T::from_f64(99.0); m * n];
        matmul(&a, &b, &mut c, Product::new(m, n, k).transposed(ta, tb), threads);
        let want = naive(&a, &b, m, n, k, ta, tb);
        for (idx, (g, w)) in c.iter().zip(&want).enumerate() {
            assert!(
                (g.to_f64() - w).abs() <= tol * (1.0 + w.abs()),
                "m={m} n={n} k={k} ta={ta} tb={tb} threads={threads}: c[{idx}] = {g} want {w}"
            );
        }
    }

    #[test]
    fn matmul_matches_naive_for_every_transpose_and_odd_sizes() {
        let sizes = [(1, 1, 1), (3, 5, 7), (17, 1, 9), (1, 13, 4), (33, 29, 65), (70, 45, 3)];
        for &(m, n, k) in &sizes {
            for ta in [false, true] {
                for tb in [false, true] {
                    check::<f32>(m, n, k, ta, tb, 1, 1e-5);
                    check::<f64>(m, n, k, ta, tb, 1, 1e-12);
                }
            }
        }
    }

    #[test]
    fn threaded_matmul_matches_naive_when_split_by_rows_or_columns() {
        // Each size is above PARALLEL_MIN_MACS: 150x140 splits by rows,
        // 100x170 by columns; 40x30 would leave an 8x30 band (240 outputs,
        // gemm's small-output path), so it runs on one thread.
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| {
            for ta in [false, true] {
                for tb in [false, true] {
                    check::<f32>(150, 140, 120, ta, tb, 2, 1e-5);
                    check::<f64>(150, 140, 120, ta, tb, 2, 1e-12);
                    check::<f64>(100, 170, 130, ta, tb, 2, 1e-12);
                    check::<f64>(40, 30, 2000, ta, tb, 3, 1e-12);
                    // At most FEW_ROWS rows: panels of columns, the last
                    // one narrower (300 = 2 x 160 - 20 at 2 threads).
                    check::<f64>(64, 300, 200, ta, tb, 2, 1e-12);
                    check::<f32>(64, 300, 200, ta, tb, 2, 1e-5);
                    // k a multiple of 128 with m >= 16: b transposed first.
                    check::<f64>(20, 33, 256, ta, tb, 1, 1e-12);
                    check::<f32>(17, 9, 128, ta, tb, 2, 1e-5);
                    // ... in panels of 64 rows of b, the last one partial,
                    // shared out over the threads.
                    check::<f64>(40, 150, 512, ta, tb, 2, 1e-12);
                    check::<f32>(16, 129, 256, ta, tb, 2, 1e-4);
                }
            }
        });
    }

    /// The thread count must not change a single bit: gemm's threads split
    /// the output, never the sum over k, so every element is reduced in the
    /// same order. Sizes are not multiples of the vector width, include a
    /// batch-1 row (m = 1), a one-column product and 16x16-ish outputs.
    #[test]
    fn threaded_matmul_is_bit_identical_to_one_thread() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let sizes = [(150, 140, 120), (100, 170, 130), (1, 4100, 600), (2100, 1, 1000), (37, 61, 1500), (40, 30, 2000), (300, 260, 520), (17, 17, 8000), (48, 200, 512), (64, 300, 200)];
        pool.install(|| {
            for &(m, n, k) in &sizes {
                assert!(m * n * k >= PARALLEL_MIN_MACS, "{m}x{n}x{k} would not be split");
                for ta in [false, true] {
                    for tb in [false, true] {
                        let a = random::<f32>(m * k, 11);
                        let b = random::<f32>(k * n, 12);
                        let mut one = vec![0.0f32; m * n];
                        matmul(&a, &b, &mut one, Product::new(m, n, k).transposed(ta, tb), 1);
                        for threads in [2, 3] {
                            let mut many = vec![0.0f32; m * n];
                            matmul(&a, &b, &mut many, Product::new(m, n, k).transposed(ta, tb), threads);
                            let same = one.iter().zip(&many).all(|(x, y)| x.to_bits() == y.to_bits());
                            assert!(same, "{m}x{n}x{k} ta={ta} tb={tb}: {threads} threads differ from 1");
                        }
                    }
                }
            }
        });
    }

    #[test]
    fn threaded_accumulating_gemm_adds_every_band() {
        let (m, n, k) = (64, 200, 180);
        let a = random::<f64>(m * k, 7);
        let b = random::<f64>(k * n, 8);
        let mut c = vec![1.0; m * n];
        gemm_strided(&a, &b, &mut c, Product::new(m, n, k), true, 2);
        let want = naive(&a, &b, m, n, k, false, false);
        for (g, w) in c.iter().zip(&want) {
            assert!((g - (w + 1.0)).abs() < 1e-12);
        }
    }

    #[test]
    fn accumulating_gemm_adds_over_every_panel_of_an_aliased_transposed_operand() {
        let (m, n, k) = (64, 150, 256); // above PARALLEL_MIN_MACS: two threads share the panels
        let a = random::<f64>(m * k, 9);
        let b = random::<f64>(n * k, 10);
        let want = naive(&a, &b, m, n, k, false, true);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for threads in [1, 2] {
            let mut c = vec![1.0; m * n];
            pool.install(|| gemm_strided(&a, &b, &mut c, Product::new(m, n, k).transposed(false, true), true, threads));
            for (i, (g, w)) in c.iter().zip(&want).enumerate() {
                assert!((g - (w + 1.0)).abs() < 1e-12, "element {i} with {threads} threads: {g} against {}", w + 1.0);
            }
        }
    }

    #[test]
    fn matmul_with_empty_inner_dimension_writes_zeros() {
        let mut c = vec![5.0f32; 6];
        matmul::<f32>(&[], &[], &mut c, Product::new(2, 3, 0), 1);
        assert_eq!(c, vec![0.0; 6]);
    }

    #[test]
    fn accumulating_gemm_adds_to_the_destination() {
        let a = [1.0f64, 2.0, 3.0, 4.0];
        let b = [1.0f64, 0.0, 0.0, 1.0];
        let mut c = [10.0f64, 20.0, 30.0, 40.0];
        gemm_strided(&a, &b, &mut c, Product::new(2, 2, 2), true, 1);
        assert_eq!(c, [11.0, 22.0, 33.0, 44.0]);
    }

    #[test]
    fn batch_matmul_matches_per_item_products() {
        let (batch, m, n, k) = (5, 6, 7, 8);
        for ta in [false, true] {
            for tb in [false, true] {
                let a = random::<f64>(batch * m * k, 3);
                let b = random::<f64>(batch * k * n, 4);
                for threads in [1, 2] {
                    let mut c = vec![0.0; batch * m * n];
                    batch_matmul(&a, &b, &mut c, batch, Product::new(m, n, k).transposed(ta, tb), threads);
                    for i in 0..batch {
                        let want = naive(&a[i * m * k..][..m * k], &b[i * k * n..][..k * n], m, n, k, ta, tb);
                        for (g, w) in c[i * m * n..][..m * n].iter().zip(&want) {
                            assert!((g - w).abs() < 1e-12, "batch item {i}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}
