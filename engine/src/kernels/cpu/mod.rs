//! CPU kernels over plain slices (row-major), independent of the tensor type.
//!
//! Contract for every kernel here: operands are contiguous and row-major,
//! output slices are preallocated by the caller with the exact length (the op
//! layer has validated the shapes; lengths are only `debug_assert!`ed), and a
//! `threads` argument says how many threads to use: 1 runs on the calling
//! thread, more splits the work inside the current rayon pool.

pub mod conv;
mod conv_direct;
pub(crate) mod elementwise;
pub(crate) mod fastmath;
pub(crate) mod lstm;
pub mod matmul;
pub mod pool;
pub(crate) mod reduce;
pub mod scalar;
pub(crate) mod transpose;
/// The AVX2 dispatch of plain loops, shared with the wire formats.
pub(crate) mod vectorize {
    pub(crate) use flowlab_hw::simd::vectorized;
}

pub use conv::{
    Conv2dGeom, Epilogue, Padding, PooledOut, conv2d, conv2d_backprop_filter, conv2d_bias, conv2d_bias_max_pool, conv2d_backprop_filter_by_im2col, conv2d_backprop_input,
    conv2d_backprop_input_by_im2col, conv2d_by_im2col,
};
pub use matmul::{Product, batch_matmul, matmul};
pub use pool::{
    MAX_WORKSPACE_WINDOW, Pool2dGeom, avg_pool, avg_pool_grad, max_pool, max_pool_grad, max_pool_grad_with_workspace, max_pool_relu_grad,
    max_pool_with_workspace,
};
pub use scalar::Float;
