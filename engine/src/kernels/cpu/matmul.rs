//! Dense matrix multiplication over row-major slices, through the `gemm` crate
//! (runtime-dispatched AVX-512/AVX2/NEON micro-kernels). Every other heavy CPU
//! kernel (convolution, its gradients) reduces to these calls.

use super::scalar::Float;
use rayon::prelude::*;

/// Chooses gemm's parallelism for a requested thread count.
fn parallelism(threads: usize) -> gemm::Parallelism {
    if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    }
}

/// Row and column strides of a row-major `[rows, cols]` matrix read as its
/// transpose when `trans`: (row stride, column stride) of op(x).
#[inline]
fn strides(rows_stored_cols: usize, trans: bool) -> (isize, isize) {
    if trans { (1, rows_stored_cols as isize) } else { (rows_stored_cols as isize, 1) }
}

/// `c = op(a) · op(b)` (or `c += op(a) · op(b)` when `accumulate`), with
/// general strides for `c`. Shared by [`matmul`] and the convolution kernels.
///
/// # Safety contract (checked by debug asserts in callers)
/// The slices hold every element the strides address.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided<T: Float>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    accumulate: bool,
    threads: usize,
) {
    debug_assert_eq!(a.len(), m * k, "matmul: a has {} elements, expected {m}x{k}", a.len());
    debug_assert_eq!(b.len(), k * n, "matmul: b has {} elements, expected {k}x{n}", b.len());
    debug_assert_eq!(c.len(), m * n, "matmul: c has {} elements, expected {m}x{n}", c.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(T::ZERO);
        }
        return;
    }
    // op(a) is [m, k]: stored [m, k] (row stride k) or [k, m] (row stride 1, col stride m).
    let (a_rs, a_cs) = if trans_a { strides(m, true) } else { strides(k, false) };
    // op(b) is [k, n]: stored [k, n] or [n, k].
    let (b_rs, b_cs) = if trans_b { strides(k, true) } else { strides(n, false) };
    // SAFETY: the asserted lengths cover every index the strides reach:
    // a: max index (m-1)*a_rs + (k-1)*a_cs = m*k-1 either way; same for b and c.
    // `c` is exclusively borrowed, `a` and `b` are shared and do not alias it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism(threads),
        );
    }
}

/// `c[m,n] = op(a) · op(b)`, overwriting `c`.
///
/// `a` is `[m,k]` (or `[k,m]` if `trans_a`), `b` is `[k,n]` (or `[n,k]` if
/// `trans_b`), all row-major and contiguous. `threads` is the number of
/// threads to use: 1 runs on the calling thread, more splits the work inside
/// the current rayon pool.
#[allow(clippy::too_many_arguments)]
pub fn matmul<T: Float>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    threads: usize,
) {
    gemm_strided(a, b, c, m, n, k, trans_a, trans_b, false, threads);
}

/// Below this many multiply-adds per matrix, a batch is split across threads
/// by whole matrices (each single-threaded) instead of inside each product.
const SMALL_MATMUL_FLOPS: usize = 64 * 64 * 64;

/// A batch of independent products, each exactly as [`matmul`]; operand `i`
/// of the batch starts at `i * m * k` in `a`, `i * k * n` in `b` and
/// `i * m * n` in `c`.
#[allow(clippy::too_many_arguments)]
pub fn batch_matmul<T: Float>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    threads: usize,
) {
    debug_assert_eq!(a.len(), batch * m * k);
    debug_assert_eq!(b.len(), batch * k * n);
    debug_assert_eq!(c.len(), batch * m * n);
    if batch == 0 || m == 0 || n == 0 {
        return;
    }
    let (sa, sb, sc) = (m * k, k * n, m * n);
    if threads > 1 && batch > 1 && m * n * k < SMALL_MATMUL_FLOPS {
        c.par_chunks_mut(sc).enumerate().with_min_len(batch.div_ceil(threads)).for_each(|(i, ci)| {
            matmul(&a[i * sa..(i + 1) * sa], &b[i * sb..(i + 1) * sb], ci, m, n, k, trans_a, trans_b, 1);
        });
    } else {
        for (i, ci) in c.chunks_mut(sc).enumerate() {
            matmul(&a[i * sa..(i + 1) * sa], &b[i * sb..(i + 1) * sb], ci, m, n, k, trans_a, trans_b, threads);
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
        matmul(&a, &b, &mut c, m, n, k, ta, tb, threads);
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
    fn matmul_with_two_threads_matches_naive() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| {
            for ta in [false, true] {
                for tb in [false, true] {
                    check::<f32>(130, 97, 111, ta, tb, 2, 1e-5);
                    check::<f64>(130, 97, 111, ta, tb, 2, 1e-12);
                }
            }
        });
    }

    #[test]
    fn matmul_with_empty_inner_dimension_writes_zeros() {
        let mut c = vec![5.0f32; 6];
        matmul::<f32>(&[], &[], &mut c, 2, 3, 0, false, false, 1);
        assert_eq!(c, vec![0.0; 6]);
    }

    #[test]
    fn accumulating_gemm_adds_to_the_destination() {
        let a = [1.0f64, 2.0, 3.0, 4.0];
        let b = [1.0f64, 0.0, 0.0, 1.0];
        let mut c = [10.0f64, 20.0, 30.0, 40.0];
        gemm_strided(&a, &b, &mut c, 2, 2, 2, false, false, true, 1);
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
                    batch_matmul(&a, &b, &mut c, batch, m, n, k, ta, tb, threads);
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
