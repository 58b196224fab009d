//! The kinds of device a tensor's memory and a kernel can live on.

/// Device types kernels are registered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    Cpu,
    Cuda,
}

impl DeviceType {
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Cpu => "CPU",
            DeviceType::Cuda => "CUDA",
        }
    }
}
