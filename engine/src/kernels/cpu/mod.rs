//! CPU kernels over plain slices (row-major), independent of the tensor type.
