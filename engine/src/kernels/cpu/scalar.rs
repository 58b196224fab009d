//! The floating-point element type the CPU kernels are generic over.
//!
//! Implemented for `f32` (the speed path) and `f64` (gradient checks against
//! finite differences run in f64). Kept deliberately small and concrete rather
//! than pulling in a numeric-traits crate: every method here is one the
//! kernels or the op layer actually call.

use std::fmt::{Debug, Display};
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

/// gemm's kernel for one element type: `dst = alpha * dst + beta * lhs *
/// rhs` over strided operands (sizes m, n, k; each operand's column and row
/// strides; whether dst is read; alpha, beta; conjugation flags; threads).
pub type GemmKernel<T> =
    unsafe fn(usize, usize, usize, *mut T, isize, isize, bool, *const T, isize, isize, *const T, isize, isize, T, T, bool, bool, bool, gemm_common::Parallelism);

/// A real floating-point scalar (`f32` or `f64`).
pub trait Float:
    Copy
    + Send
    + Sync
    + 'static
    + Default
    + Debug
    + Display
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + Sum
{
    const ZERO: Self;
    const ONE: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    /// Machine epsilon of the type.
    const EPSILON: Self;
    /// The smallest positive normal value.
    const MIN_POSITIVE: Self;
    /// Size in bytes, for cost accounting.
    const BYTES: usize;

    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// gemm's kernel for this type, chosen for the CPU's features once.
    fn gemm_kernel() -> GemmKernel<Self>;
    /// Exact for counts up to 2^24 in f32, 2^53 in f64.
    fn from_usize(v: usize) -> Self;

    fn abs(self) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn powf(self, e: Self) -> Self;
    /// IEEE maxNum: a NaN operand loses to a number.
    fn max(self, o: Self) -> Self;
    /// IEEE minNum: a NaN operand loses to a number.
    fn min(self, o: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_finite(self) -> bool;
    /// `self * a + b`, fused where the hardware has it.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// e^x of every element, in place. For f32 the vectorized polynomial of
    /// `fastmath` (2 ulp), for f64 libm: kernels that apply exp, tanh or the
    /// logistic function to whole tensors use these, not the scalar methods.
    fn exp_in_place(x: &mut [Self]) {
        for v in x {
            *v = v.exp();
        }
    }
    /// tanh of every element, in place (f32: `fastmath`, 8 ulp).
    fn tanh_in_place(x: &mut [Self]) {
        for v in x {
            *v = v.tanh();
        }
    }
    /// 1 / (1 + e^-x) of every element, in place.
    fn sigmoid_in_place(x: &mut [Self]) {
        for v in x {
            *v = Self::ONE / (Self::ONE + (-*v).exp());
        }
    }
    /// The Gauss error function of every element, in place (f32:
    /// `fastmath`, 4e-7 absolute; f64: libm's erf, exact to an ulp).
    fn erf_in_place(x: &mut [Self]) {
        for v in x {
            *v = Self::from_f64(libm::erf(v.to_f64()));
        }
    }
}

macro_rules! impl_float {
    ($t:ty, $gemm:path, { $($extra:item)* }) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const EPSILON: Self = <$t>::EPSILON;
            const MIN_POSITIVE: Self = <$t>::MIN_POSITIVE;
            const BYTES: usize = std::mem::size_of::<$t>();

            #[inline(always)]
            fn gemm_kernel() -> GemmKernel<Self> {
                $gemm()
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_usize(v: usize) -> Self {
                v as $t
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                <$t>::max(self, o)
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                <$t>::min(self, o)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::mul_add(self, a, b)
            }
            $($extra)*
        }
    };
}

impl_float!(f32, gemm_f32::gemm::f32::get_gemm_fn, {
    fn exp_in_place(x: &mut [f32]) {
        super::fastmath::exp_in_place(x)
    }
    fn tanh_in_place(x: &mut [f32]) {
        super::fastmath::tanh_in_place(x)
    }
    fn sigmoid_in_place(x: &mut [f32]) {
        super::fastmath::sigmoid_in_place(x)
    }
    fn erf_in_place(x: &mut [f32]) {
        super::fastmath::erf_in_place(x)
    }
});
impl_float!(f64, gemm_f64::gemm::f64::get_gemm_fn, {});

#[cfg(test)]
mod tests {
    use super::Float;

    fn roundtrip<T: Float>() -> (f64, f64, usize) {
        let x = T::from_f64(0.5) + T::ONE;
        (x.to_f64(), (T::ZERO.max(T::NEG_INFINITY)).to_f64(), T::BYTES)
    }

    #[test]
    fn constants_and_conversions_match_the_primitive_types() {
        assert_eq!(roundtrip::<f32>(), (1.5, 0.0, 4));
        assert_eq!(roundtrip::<f64>(), (1.5, 0.0, 8));
        assert_eq!(<f32 as Float>::from_usize(7), 7.0);
        assert!(<f64 as Float>::is_nan(f64::NAN));
        assert_eq!(<f64 as Float>::max(f64::NAN, 2.0), 2.0);
        assert_eq!(<f32 as Float>::mul_add(2.0, 3.0, 1.0), 7.0);
    }
}
