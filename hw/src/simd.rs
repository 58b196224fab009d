//! Runs a loop nest compiled for AVX2 where the CPU has it.
//!
//! The workspace is built for baseline x86-64 (SSE2) so that one binary runs
//! on any x86-64 machine; `gemm` dispatches its own micro-kernels at run
//! time, but every other loop would stay 4 floats wide. It lives here, the
//! lowest crate, because both the engine's CPU kernels and the wire formats
//! use it. [`vectorized`] is the same
//! dispatch for the plain loops: the closure is inlined into a function
//! compiled with AVX2 enabled, so the compiler vectorises it 8 floats wide
//! (and with AVX2's masked moves and blends for branch-free selects). Only
//! the instruction set changes: no fused multiply-add is enabled, so every
//! result is bit-identical to the SSE2 build.

/// `f()`, compiled with AVX2 enabled when the CPU supports it. Mark the
/// closure `#[inline(always)]`: a closure that is not inlined into the AVX2
/// function is compiled on its own, for SSE2.
#[inline(always)]
pub fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { with_avx2(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
