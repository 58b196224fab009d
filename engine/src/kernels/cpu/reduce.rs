//! Reductions over one contiguous block of axes, seen as `[outer, r, inner]`.
//! Any set of axes reduces as a sequence of such blocks.

use rayon::prelude::*;

use super::elementwise::PAR_MIN_ELEMENTS;

const ROW_CHUNK: usize = 1 << 14;

/// Folds `map(x[i])` with `f` in eight accumulators (lane k takes elements
/// k, k + 8, ...), combined in lane order, then the remainder: a serial
/// fold is one long dependency chain (a float add or max every 3-4 cycles)
/// that the compiler may not reorder, while eight lanes vectorize. The
/// rounding order is fixed, so results stay deterministic.
#[inline(always)]
pub(crate) fn fold8<T: Copy, A: Copy>(x: &[T], init: A, map: impl Fn(T) -> A, f: impl Fn(A, A) -> A) -> A {
    let mut acc = [init; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            acc[k] = f(acc[k], map(c[k]));
        }
    }
    let mut s = init;
    for a in acc {
        s = f(s, a);
    }
    for &v in rest {
        s = f(s, map(v));
    }
    s
}

/// `out[o, i] = fold(init, x[o, 0..r, i])` with `f` the combining function.
pub(crate) fn reduce_block<T: Copy + Send + Sync>(
    x: &[T],
    outer: usize,
    r: usize,
    inner: usize,
    init: T,
    threads: usize,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Vec<T> {
    let mut out = vec![init; outer * inner];
    if r == 0 || inner == 0 {
        return out;
    }
    // A row is folded in fixed chunks of ROW_CHUNK elements (eight
    // accumulators each, so the loop vectorizes) whose partial results are
    // combined in order: the same rounding whatever the thread count.
    let fold_chunk = |c: &[T]| -> T { fold8(c, init, |v| v, &f) };
    let par = threads > 1 && x.len() >= PAR_MIN_ELEMENTS;
    let one = |o: usize, dst: &mut [T]| {
        let base = o * r * inner;
        if inner == 1 {
            let row = &x[base..base + r];
            dst[0] = if r <= ROW_CHUNK {
                fold_chunk(row)
            } else {
                let parts: Vec<T> = if par && outer == 1 {
                    row.par_chunks(ROW_CHUNK).map(fold_chunk).collect()
                } else {
                    row.chunks(ROW_CHUNK).map(fold_chunk).collect()
                };
                parts.into_iter().fold(init, &f)
            };
        } else {
            for j in 0..r {
                let src = &x[base + j * inner..base + (j + 1) * inner];
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = f(*d, v);
                }
            }
        }
    };
    if par && outer > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(|(o, d)| one(o, d));
    } else {
        for (o, d) in out.chunks_mut(inner).enumerate() {
            one(o, d);
        }
    }
    out
}

/// Reduces `x` (shape `dims`) over sorted unique `axes`; returns the result
/// with the reduced dimensions kept as 1.
pub(crate) fn reduce_axes<T: Copy + Send + Sync>(
    x: &[T],
    dims: &[usize],
    axes: &[usize],
    init: T,
    threads: usize,
    f: impl Fn(T, T) -> T + Sync + Send + Copy,
) -> (Vec<T>, Vec<usize>) {
    let mut cur: Vec<T> = Vec::new();
    let mut cur_dims = dims.to_vec();
    let mut first = true;
    // Merge runs of adjacent axes into one block each, last block first.
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    for &a in axes {
        match blocks.last_mut() {
            Some((_, e)) if *e == a => *e = a + 1,
            _ => blocks.push((a, a + 1)),
        }
    }
    for &(s, e) in blocks.iter().rev() {
        let outer: usize = cur_dims[..s].iter().product();
        let r: usize = cur_dims[s..e].iter().product();
        let inner: usize = cur_dims[e..].iter().product();
        let src: &[T] = if first { x } else { &cur };
        let next = reduce_block(src, outer, r, inner, init, threads, f);
        cur = next;
        first = false;
        for d in &mut cur_dims[s..e] {
            *d = 1;
        }
    }
    if first {
        cur = x.to_vec();
    }
    (cur, cur_dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_rows_columns_and_all() {
        let x: Vec<f64> = (1..=6).map(|v| v as f64).collect();
        let add = |a: f64, b: f64| a + b;
        assert_eq!(reduce_axes(&x, &[2, 3], &[1], 0.0, 1, add), (vec![6.0, 15.0], vec![2, 1]));
        assert_eq!(reduce_axes(&x, &[2, 3], &[0], 0.0, 1, add), (vec![5.0, 7.0, 9.0], vec![1, 3]));
        assert_eq!(reduce_axes(&x, &[2, 3], &[0, 1], 0.0, 1, add), (vec![21.0], vec![1, 1]));
        let x3: Vec<f64> = (0..24).map(|v| v as f64).collect();
        let (s, d) = reduce_axes(&x3, &[2, 3, 4], &[0, 2], 0.0, 1, add);
        assert_eq!(d, vec![1, 3, 1]);
        // sum over i,k of 12i + 4j + k = 2*4*4j + (4*12 + 2*6) = 32j + 60
        assert_eq!(s, vec![60.0, 92.0, 124.0]);
    }

    #[test]
    fn long_row_sum_matches_serial_sum() {
        let x: Vec<f64> = (0..100_003).map(|v| (v % 17) as f64).collect();
        let expect: f64 = x.iter().sum();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (p, _) = pool.install(|| reduce_axes(&x, &[x.len()], &[0], 0.0, 2, |a, b| a + b));
        assert_eq!(p[0], expect);
    }
}
