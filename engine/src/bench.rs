//! `flowlab bench engine`: GEMM, training-step, inference and executor-overhead
//! measurements, printed by the CLI as a table or JSON lines.
