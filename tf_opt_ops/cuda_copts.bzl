"""The clang CUDA flags of the CUDA kernels, for both builds of them.

Loaded by tf_opt_ops/BUILD (the .so), and read by the Makefile's gpu-check
library, which takes every line of the form `"-flag",` below: keep one quoted
flag per line. The toolkit (--cuda-path) and the GPU architectures
(--cuda-gpu-arch, PTX of the last only) are added by each build.
"""

CUDA_COPTS = [
    "-std=c++17",
    # Host and device code; clang passes it on to ptxas too.
    "-O3",
    # No fused multiply-add contraction (clang contracts CUDA code by
    # default): the host compiler does not contract either (-mavx has no
    # FMA), so GPU and CPU results agree bit for bit in float32/float64 for
    # the same inputs (the kernels are memory-bound). The PTX then has
    # mul.rn/add.rn, which ptxas does not fuse either.
    "-ffp-contract=off",
    "-fPIC",
    "-fvisibility=hidden",
    "-DNDEBUG",
]
