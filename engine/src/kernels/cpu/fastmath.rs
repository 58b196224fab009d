//! Branch-free f32 exp, tanh, sigmoid and erf over slices, which the
//! compiler vectorizes, as TensorFlow's CPU kernels get them from Eigen
//! (`pexp`: Cephes' expf polynomial; `generic_fast_tanh_float`: a 13/6
//! rational fit; `generic_fast_erf_float`: a 13/8 one). libm's erf through
//! f64 took 11.3 ms of a base-width encoder's 75 ms forward pass (batch 8,
//! two GELU layers). libm's scalar `expf` and `tanhf` cost 1.7 and 8.4 ns an element on
//! this host, so a language model's gate activations and its softmax cost as
//! much as its GEMMs; these run at 0.69 (exp), 0.45 (tanh) and 0.80
//! (sigmoid) ns (640k elements, best of 30). The loops are compiled twice,
//! for the x86-64 baseline and for AVX2, picked at run time as the `gemm`
//! crate does; neither contracts into FMA, so both give the same bits.
//!
//! Accuracy (checked against f64 in the tests below): exp within 2 ulp
//! (relative 2.4e-7) wherever e^x is a normal f32, 0 below that (x <
//! -87.34, where f32 would be subnormal), inf above 88.72; tanh within
//! 4.3e-7 absolute (8 ulp, at |x| near 6, where tanh is within 1.3e-5 of
//! ±1; 4 ulp below |x| = 2) and exact (x) for |x| < 0.0004; erf within
//! 4.5e-7 absolute (8 ulp just below 1; the bound of its test, 5e-7, was
//! set after measuring) and 3e-7 relative near 0, ±1 beyond |x| = 4. NaN
//! stays NaN.

/// log2(e), and ln 2 split into a part exact in f32 and the rest (Cody-Waite).
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_375;
const LN2_LO: f32 = -2.121_944_4e-4;
/// e^x is a normal f32 on [EXP_LO, EXP_HI].
const EXP_LO: f32 = -87.336_55;
const EXP_HI: f32 = 88.722_83;
/// 1.5 · 2^23: adding and subtracting it rounds to the nearest integer
/// without SSE4.1's `roundps`.
const ROUNDER: f32 = 12_582_912.0;

/// The polynomial with coefficients `c` (highest power first) at `x`, by
/// Horner's rule: `c[0]`, then `p * x + c[k]` for each next coefficient.
#[inline(always)]
fn horner<const N: usize>(x: f32, c: [f32; N]) -> f32 {
    c[1..].iter().fold(c[0], |p, &k| p * x + k)
}

/// e^x in f32 (see the module comment).
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    // max/min (not clamp) turn NaN into a bound: the integer conversion
    // below then never sees NaN; the NaN is restored at the end.
    let xc = x.max(EXP_LO).min(EXP_HI);
    let n = (xc * LOG2E + ROUNDER) - ROUNDER;
    let r = xc - n * LN2_HI - n * LN2_LO;
    // Cephes expf: e^r on |r| <= ln(2)/2.
    let p = horner(r, [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1]);
    let y = p * r * r + r + 1.0;
    // 2^n in two normal halves: n reaches 128 and -126.
    // SAFETY: xc is finite in [EXP_LO, EXP_HI], so n is an integer in
    // [-126, 128]: representable in i32. (`as` would add saturation code
    // that stops the loop from vectorizing.)
    let ni = unsafe { n.to_int_unchecked::<i32>() };
    let half = ni >> 1;
    let s1 = f32::from_bits(((half + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - half + 127) as u32) << 23);
    let v = y * s1 * s2;
    if x.is_nan() {
        x
    } else if x < EXP_LO {
        0.0
    } else if x > EXP_HI {
        f32::INFINITY
    } else {
        v
    }
}

/// tanh(x) in f32 (see the module comment).
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    // Beyond ±7.905, tanh rounds to ±1 in f32.
    let c = x.clamp(-7.905_311, 7.905_311);
    let c2 = c * c;
    let p = c * horner(c2, [-2.760_768_5e-16, 2.000_187_9e-13, -8.604_671_5e-11, 5.122_297e-8, 1.485_722_4e-5, 6.372_619_3e-4, 4.893_524_6e-3]);
    let q = horner(c2, [1.198_258_4e-6, 1.185_347_1e-4, 2.268_434_6e-3, 4.893_525_2e-3]);
    if x.abs() < 4e-4 { x } else { p / q }
}

/// 1 / (1 + e^-x).
#[inline(always)]
fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// erf(x) in f32: Eigen's `generic_fast_erf_float` (see the module comment),
/// its coefficients as Eigen writes them.
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn erf_f32(x: f32) -> f32 {
    // Beyond ±4, erf rounds to ±1 in f32.
    let c = x.clamp(-4.0, 4.0);
    let c2 = c * c;
    let p = c * horner(
        c2,
        [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02],
    );
    let q = horner(c2, [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02]);
    if x.is_nan() { x } else { p / q }
}

#[inline(always)]
fn map_plain(x: &mut [f32], f: impl Fn(f32) -> f32) {
    for v in x.iter_mut() {
        *v = f(*v);
    }
}

/// `x[i] = f(x[i])`, with the AVX2 build of the loop where the CPU has it.
#[inline(always)]
fn map_in_place(x: &mut [f32], f: impl Fn(f32) -> f32) {
    super::vectorize::vectorized(#[inline(always)] || map_plain(x, f))
}

/// e^x of every element, in place.
pub(crate) fn exp_in_place(x: &mut [f32]) {
    map_in_place(x, exp_f32)
}

/// tanh of every element, in place.
pub(crate) fn tanh_in_place(x: &mut [f32]) {
    map_in_place(x, tanh_f32)
}

/// The logistic function of every element, in place.
pub(crate) fn sigmoid_in_place(x: &mut [f32]) {
    map_in_place(x, sigmoid_f32)
}

/// erf of every element, in place.
pub(crate) fn erf_in_place(x: &mut [f32]) {
    map_in_place(x, erf_f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points over [lo, hi], dense enough to cross every binade on the way.
    fn sweep(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| lo + (hi - lo) * (i as f32 / n as f32))
    }

    fn ulp(v: f64) -> f64 {
        let f = v.abs() as f32;
        (f32::from_bits(f.to_bits() + 1) - f) as f64
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64_wherever_the_result_is_normal() {
        let mut worst = 0.0f64;
        for x in sweep(EXP_LO, EXP_HI, 2_000_003).chain(sweep(-1.0, 1.0, 200_001)) {
            let want = (x as f64).exp();
            if want > f32::MAX as f64 {
                continue;
            }
            let err = ((exp_f32(x) as f64) - want).abs() / ulp(want);
            worst = worst.max(err);
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
    }

    #[test]
    fn exp_flushes_below_the_normal_range_and_overflows_above_it() {
        assert_eq!(exp_f32(-88.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(88.8), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(0.0), 1.0);
        // The top of the range, where 2^n needs 128.
        let top = exp_f32(88.7);
        assert!(((top as f64) / (88.7f32 as f64).exp() - 1.0).abs() < 3e-7, "{top}");
    }

    #[test]
    fn tanh_is_within_eight_ulp_and_saturates() {
        let mut worst_ulp = 0.0f64;
        let mut worst_abs = 0.0f64;
        for x in sweep(-9.0, 9.0, 2_000_001).chain(sweep(-0.01, 0.01, 200_001)) {
            let want = (x as f64).tanh();
            let got = tanh_f32(x) as f64;
            worst_abs = worst_abs.max((got - want).abs());
            worst_ulp = worst_ulp.max((got - want).abs() / ulp(want));
        }
        assert!(worst_abs <= 4.5e-7, "worst absolute error {worst_abs}");
        assert!(worst_ulp <= 8.0, "worst error {worst_ulp} ulp");
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(-1e30), -1.0);
        assert_eq!(tanh_f32(1e-30), 1e-30);
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    /// Against libm's erf in f64 (the C library's, exact to an ulp), over
    /// the range where erf is not ±1 in f32 and beyond, and near 0.
    #[test]
    fn erf_is_within_half_a_millionth_and_saturates() {
        let mut worst_abs = 0.0f64;
        for x in sweep(-6.0, 6.0, 2_000_001) {
            worst_abs = worst_abs.max((erf_f32(x) as f64 - libm::erf(x as f64)).abs());
        }
        let mut worst_rel = 0.0f64;
        for x in sweep(-1e-3, 1e-3, 200_000).filter(|&x| x != 0.0) {
            let want = libm::erf(x as f64);
            worst_rel = worst_rel.max((erf_f32(x) as f64 - want).abs() / want.abs());
        }
        assert!(worst_abs <= 5e-7, "worst absolute error {worst_abs}");
        assert!(worst_rel <= 3e-7, "worst relative error near 0 {worst_rel}");
        assert_eq!((erf_f32(f32::INFINITY), erf_f32(-9.0), erf_f32(0.0)), (1.0, -1.0, 0.0));
        assert!(erf_f32(f32::NAN).is_nan());
    }

    #[test]
    fn the_slice_functions_give_the_scalar_bits_on_every_code_path() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.2).chain([f32::NAN, f32::INFINITY, -1e-30]).collect();
        for (f, scalar) in [(exp_in_place as fn(&mut [f32]), exp_f32 as fn(f32) -> f32), (tanh_in_place, tanh_f32), (sigmoid_in_place, sigmoid_f32), (erf_in_place, erf_f32)] {
            let mut v = xs.clone();
            f(&mut v);
            let mut plain = xs.clone();
            map_plain(&mut plain, scalar);
            for ((a, b), x) in v.iter().zip(&plain).zip(&xs) {
                assert_eq!(a.to_bits(), b.to_bits(), "at {x}");
            }
        }
        let mut s = vec![-100.0f32, 0.0, 100.0];
        sigmoid_in_place(&mut s);
        assert_eq!(s, [0.0, 0.5, 1.0]);
    }
}
