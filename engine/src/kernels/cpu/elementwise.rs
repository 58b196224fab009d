//! Elementwise kernels over row-major slices: unary maps and binary ops with
//! NumPy broadcasting. Tight loops the compiler vectorizes; above
//! [`PAR_MIN_ELEMENTS`] and with more than one thread, chunks run on rayon.

use rayon::prelude::*;

/// Below this many output elements a kernel stays on the calling thread.
pub(crate) const PAR_MIN_ELEMENTS: usize = 1 << 15;
const CHUNK: usize = 1 << 13;
/// The chunk of elements one rayon task takes.
pub(crate) const PAR_CHUNK: usize = CHUNK;

/// The broadcast result of two shapes (right-aligned, 1 stretches), or
/// `None` when a pair of dimensions differs and neither is 1.
pub(crate) fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
        let db = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Strides of `dims` seen from an `out`-shaped index (0 where broadcast).
pub(crate) fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut st = vec![0; r];
    let mut acc = 1;
    for i in (0..dims.len()).rev() {
        let o = i + r - dims.len();
        st[o] = if dims[i] == 1 { 0 } else { acc };
        acc *= dims[i];
    }
    st
}

/// `f` over every element.
pub(crate) fn map<T: Copy + Send + Sync, U: Copy + Send + Sync + Default>(
    a: &[T],
    threads: usize,
    f: impl Fn(T) -> U + Sync + Send,
) -> Vec<U> {
    if threads > 1 && a.len() >= PAR_MIN_ELEMENTS {
        let mut out = vec![U::default(); a.len()];
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).for_each(|(o, x)| {
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(x);
            }
        });
        out
    } else {
        a.iter().map(|&x| f(x)).collect()
    }
}

/// `f` over every element, in place.
pub(crate) fn map_in_place<T: Copy + Send + Sync>(x: &mut [T], threads: usize, f: impl Fn(T) -> T + Sync + Send) {
    let run = |x: &mut [T]| {
        for v in x.iter_mut() {
            *v = f(*v);
        }
    };
    if threads > 1 && x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_mut(CHUNK).for_each(run);
    } else {
        run(x);
    }
}

/// `x[i] = f(x[i], y[i])` over equal-length slices.
pub(crate) fn zip_in_place<T: Copy + Send + Sync>(x: &mut [T], y: &[T], threads: usize, f: impl Fn(T, T) -> T + Sync + Send) {
    debug_assert_eq!(x.len(), y.len());
    let run = |(x, y): (&mut [T], &[T])| {
        for (v, &w) in x.iter_mut().zip(y) {
            *v = f(*v, w);
        }
    };
    if threads > 1 && x.len() >= PAR_MIN_ELEMENTS {
        x.par_chunks_mut(CHUNK).zip(y.par_chunks(CHUNK)).for_each(run);
    } else {
        run((x, y));
    }
}

/// `f` over pairs of equal-length slices.
pub(crate) fn zip_map<T: Copy + Send + Sync, U: Copy + Send + Sync + Default>(
    a: &[T],
    b: &[T],
    threads: usize,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    debug_assert_eq!(a.len(), b.len());
    if threads > 1 && a.len() >= PAR_MIN_ELEMENTS {
        let mut out = vec![U::default(); a.len()];
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK))).for_each(|(o, (x, y))| {
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = f(x, y);
            }
        });
        out
    } else {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
}

/// `f(a, b)` with NumPy broadcasting; `out_dims` from [`broadcast_dims`].
pub(crate) fn binary<T: Copy + Send + Sync, U: Copy + Send + Sync + Default>(
    a: &[T],
    ad: &[usize],
    b: &[T],
    bd: &[usize],
    out_dims: &[usize],
    threads: usize,
    f: impl Fn(T, T) -> U + Sync + Send,
) -> Vec<U> {
    let n: usize = out_dims.iter().product();
    if a.len() == n && b.len() == n {
        return zip_map(a, b, threads, f);
    }
    if b.len() == 1 && a.len() == n {
        let y = b[0];
        return map(a, threads, |x| f(x, y));
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return map(b, threads, |y| f(x, y));
    }
    let r = out_dims.len();
    let last = out_dims[r - 1].max(1);
    let sa = broadcast_strides(ad, out_dims);
    let sb = broadcast_strides(bd, out_dims);
    let (la, lb) = (sa[r - 1], sb[r - 1]);
    let row = |ri: usize, o: &mut [U]| {
        let (mut oa, mut ob, mut rem) = (0, 0, ri);
        for d in (0..r - 1).rev() {
            let i = rem % out_dims[d];
            rem /= out_dims[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        match (la, lb) {
            (1, 1) => {
                for ((o, &x), &y) in o.iter_mut().zip(&a[oa..oa + last]).zip(&b[ob..ob + last]) {
                    *o = f(x, y);
                }
            }
            (1, 0) => {
                let y = b[ob];
                for (o, &x) in o.iter_mut().zip(&a[oa..oa + last]) {
                    *o = f(x, y);
                }
            }
            (0, 1) => {
                let x = a[oa];
                for (o, &y) in o.iter_mut().zip(&b[ob..ob + last]) {
                    *o = f(x, y);
                }
            }
            _ => {
                for (j, o) in o.iter_mut().enumerate() {
                    *o = f(a[oa + j * la], b[ob + j * lb]);
                }
            }
        }
    };
    let mut out = vec![U::default(); n];
    if n == 0 {
        return out;
    }
    if threads > 1 && n >= PAR_MIN_ELEMENTS {
        out.par_chunks_mut(last).enumerate().for_each(|(ri, o)| row(ri, o));
    } else {
        for (ri, o) in out.chunks_mut(last).enumerate() {
            row(ri, o);
        }
    }
    out
}

/// Copies `x` (shape `xd`) broadcast to `out_dims`.
pub(crate) fn broadcast_to<T: Copy + Send + Sync + Default>(x: &[T], xd: &[usize], out_dims: &[usize], threads: usize) -> Vec<T> {
    let n: usize = out_dims.iter().product();
    if x.len() == n {
        return x.to_vec();
    }
    if x.len() == 1 {
        return vec![x[0]; n];
    }
    let dummy = [x[0]];
    binary(x, xd, &dummy, &[], out_dims, threads, |a, _| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_dims_follow_numpy() {
        assert_eq!(broadcast_dims(&[2, 3], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast_dims(&[2, 1], &[1, 4]), Some(vec![2, 4]));
        assert_eq!(broadcast_dims(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_dims(&[2, 3], &[2]), None);
    }

    #[test]
    fn binary_broadcasts_rows_columns_and_scalars() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let add = |x: f64, y: f64| x + y;
        assert_eq!(binary(&a, &[2, 3], &[10.0, 20.0, 30.0], &[3], &[2, 3], 1, add), vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        assert_eq!(binary(&a, &[2, 3], &[10.0, 20.0], &[2, 1], &[2, 3], 1, add), vec![11.0, 12.0, 13.0, 24.0, 25.0, 26.0]);
        assert_eq!(binary(&[1.0, 2.0], &[2, 1], &[10.0, 20.0, 30.0], &[1, 3], &[2, 3], 1, add), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
        assert_eq!(binary(&a, &[2, 3], &[1.0], &[], &[2, 3], 1, add), vec![2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    }

    #[test]
    fn parallel_and_serial_agree() {
        let n = PAR_MIN_ELEMENTS * 3 + 7;
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..7).map(|i| i as f32).collect();
        let d = [n / 7, 7];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let p = pool.install(|| binary(&a[..n / 7 * 7], &d, &b, &[7], &d, 2, |x, y| x * y));
        let s = binary(&a[..n / 7 * 7], &d, &b, &[7], &d, 1, |x, y| x * y);
        assert_eq!(p, s);
    }
}
