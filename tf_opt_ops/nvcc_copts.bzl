"""The nvcc flags of the CUDA kernels, for both builds of them.

Loaded by tf_opt_ops/BUILD (the .so), and read by the Makefile's gpu-check
library, which takes every line of the form `"-flag",` below: keep one quoted
flag per line.
"""

NVCC_COPTS = [
    "-std=c++17",
    "-O3",
    # No fused multiply-add contraction: the host compiler does not contract
    # either (-mavx has no FMA), so GPU and CPU results agree bit for bit in
    # float32/float64 for the same inputs (the kernels are memory-bound).
    "--fmad=false",
    "-Xcompiler=-fPIC",
    "-Xcompiler=-fvisibility=hidden",
    "-DNDEBUG",
]
