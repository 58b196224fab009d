//! Dataflow graph, op registry, CPU/CUDA kernels, executor, sessions, autodiff, optimizers, checkpoints.
