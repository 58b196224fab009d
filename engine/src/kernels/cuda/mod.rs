//! CUDA kernels (cargo feature `cuda`), compiled at run time by NVRTC.
//!
//! Contract. [`SOURCE`] holds every kernel; [`KERNELS`] names each entry
//! point. [`compile`] turns the source into PTX for one architecture
//! (`sm_70`, `sm_80`, `sm_90`, ...) and checks that every named kernel is in
//! it; a device compiles once and keeps the result ([`KernelCache`]).
//! cudarc loads libnvrtc, libcuda and libcublas when first used, so this
//! module builds, and its callers get an error instead of a crash, on a
//! machine with no CUDA at all ([`nvrtc_available`]).
//!
//! Status: the kernels compile for sm_70/80/90 (tested wherever libnvrtc
//! loads); running them needs a GPU, which the device layer (storage on
//! the device, streams, Send/Recv across host and device) will bring.

use std::collections::HashMap;
use parking_lot::Mutex;

/// Every kernel, one translation unit.
pub const SOURCE: &str = include_str!("kernels.cu");

/// The entry points [`SOURCE`] defines (`extern "C"`), by op family.
pub const KERNELS: &[&str] = &[
    // elementwise, with broadcasting
    "add_f32",
    "sub_f32",
    "mul_f32",
    "div_f32",
    "maximum_f32",
    "minimum_f32",
    "pow_f32",
    "relu_grad_f32",
    "neg_f32",
    "exp_f32",
    "log_f32",
    "sqrt_f32",
    "rsqrt_f32",
    "square_f32",
    "tanh_f32",
    "sigmoid_f32",
    "relu_f32",
    "fill_f32",
    // reductions, softmax and cross entropy
    "row_sum_f32",
    "row_max_f32",
    "col_sum_f32",
    "softmax_rows_f32",
    "sparse_xent_rows_f32",
    "bias_add_f32",
    // convolution (im2col, then cuBLAS) and pooling
    "im2col_nhwc_f32",
    "max_pool_nhwc_f32",
    // optimizers
    "apply_sgd_f32",
    "apply_momentum_f32",
    "apply_adam_f32",
];

/// Why kernels could not be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CudaError {
    #[error("libnvrtc could not be loaded (install the CUDA toolkit, or PyPI's nvidia-cuda-nvrtc-cu12 wheel and put its lib/ folder on LD_LIBRARY_PATH)")]
    NoNvrtc,
    #[error("NVRTC could not compile the kernels for {arch}: {log}")]
    Compile { arch: String, log: String },
    #[error("the PTX for {arch} lacks kernel '{kernel}'")]
    MissingKernel { arch: String, kernel: String },
}

/// Whether libnvrtc can be loaded on this machine.
pub fn nvrtc_available() -> bool {
    // SAFETY: only probes for the shared library; nothing is called in it.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// PTX of [`SOURCE`] for `arch` (e.g. "sm_80"), checked to define every
/// kernel of [`KERNELS`].
pub fn compile(arch: &'static str) -> Result<String, CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let opts = cudarc::nvrtc::CompileOptions { arch: Some(arch), name: Some("flowlab_kernels.cu".into()), ..Default::default() };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts)
        .map_err(|e| CudaError::Compile { arch: arch.into(), log: e.to_string() })?
        .to_src();
    for k in KERNELS {
        if !ptx.contains(&format!(".entry {k}(")) {
            return Err(CudaError::MissingKernel { arch: arch.into(), kernel: (*k).into() });
        }
    }
    Ok(ptx)
}

/// PTX per architecture, compiled on first use.
#[derive(Default)]
pub struct KernelCache {
    ptx: Mutex<HashMap<&'static str, String>>,
}

impl KernelCache {
    /// The PTX for `arch`, compiling it the first time.
    pub fn ptx(&self, arch: &'static str) -> Result<String, CudaError> {
        let mut m = self.ptx.lock();
        if let Some(p) = m.get(arch) {
            return Ok(p.clone());
        }
        let p = compile(arch)?;
        m.insert(arch, p.clone());
        Ok(p)
    }
}
