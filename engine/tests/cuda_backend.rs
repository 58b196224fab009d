//! The CUDA backend's memory and devices: every dtype to a GPU and back
//! unchanged, a device tensor refused where the host reads it, freed device
//! buffers kept for reuse, and a GPU in a build without the `cuda` feature
//! refused naming it. The device tests run with `--features cuda` on a
//! machine with a GPU; elsewhere each writes to the terminal (past the test
//! harness's capture) that it skipped, and why.

use flowlab_engine::{CudaDevice, DType, DeviceSet, DeviceType, Graph, Session, SessionOptions, Tensor};
use std::io::Write;

const GPU0: &str = "/job:localhost/replica:0/task:0/device:GPU:0";

fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// GPU 0, or `None` after saying why the test skips.
fn gpu(test: &str) -> Option<CudaDevice> {
    if !cfg!(feature = "cuda") {
        skip(test, "built without the `cuda` feature");
        return None;
    }
    match CudaDevice::open(0, GPU0) {
        Ok(d) => Some(d),
        Err(e) => {
            skip(test, &e.to_string());
            None
        }
    }
}

fn one_of_each_dtype() -> Vec<Tensor> {
    let f = [1.5f64, -2.25, 0.0, 3.0e-3, -7.0, 1.0e4];
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::Bool]
        .into_iter()
        .map(|d| Tensor::from_f64s(d, &f, [2, 3]).unwrap())
        .chain([Tensor::from_vec(Vec::<f32>::new(), [0, 4]).unwrap()])
        .collect()
}

#[test]
fn every_dtype_goes_to_the_gpu_and_back_unchanged() {
    let Some(gpu) = gpu("every_dtype_goes_to_the_gpu_and_back_unchanged") else { return };
    for t in one_of_each_dtype() {
        let d = t.to_cuda(gpu.allocator()).unwrap();
        assert_eq!((d.device_type(), d.dtype(), d.dims()), (DeviceType::Cuda, t.dtype(), t.dims()));
        let back = d.to_host().unwrap();
        assert_eq!(back.device_type(), DeviceType::Cpu);
        assert_eq!(back.cpu().unwrap(), t.cpu().unwrap(), "{} {:?}", t.dtype(), t.dims());
    }
}

#[test]
fn a_device_tensor_read_on_the_host_is_an_error_naming_the_device() {
    let Some(gpu) = gpu("a_device_tensor_read_on_the_host_is_an_error_naming_the_device") else { return };
    let d = Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap().to_cuda(gpu.allocator()).unwrap();
    let e = d.as_slice::<f32>().unwrap_err().to_string();
    assert_eq!(e, "a f32 tensor is in GPU:0 memory: copy it to the host before reading it there");
    assert!(d.cast(DType::F64).is_err());
}

#[test]
fn freed_device_buffers_are_kept_and_handed_out_again() {
    let Some(gpu) = gpu("freed_device_buffers_are_kept_and_handed_out_again") else { return };
    let alloc = gpu.allocator();
    let t = Tensor::from_vec(vec![0.5f32; 1000], [1000]).unwrap();
    let before = alloc.cached_bytes();
    drop(t.to_cuda(alloc).unwrap());
    assert_eq!(alloc.cached_bytes(), before + 4000);
    let again = t.to_cuda(alloc).unwrap();
    assert_eq!(alloc.cached_bytes(), before);
    assert_eq!(again.to_host().unwrap().to_vec::<f32>().unwrap(), vec![0.5f32; 1000]);
}

#[test]
fn a_gpu_in_a_build_without_cuda_is_refused_naming_it() {
    if cfg!(feature = "cuda") {
        skip("a_gpu_in_a_build_without_cuda_is_refused_naming_it", "this build has the `cuda` feature");
        return;
    }
    let g = Graph::new();
    g.scalar(1.0, DType::F32).unwrap();
    let mut devices = DeviceSet::local_cpus(1);
    devices.add(GPU0).unwrap();
    let e = Session::with_options(&g, SessionOptions { devices, ..Default::default() }).err().map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("/job:localhost/replica:0/task:0/device:GPU:0: this build has no CUDA support (rebuild with `--features cuda`)"));
}
