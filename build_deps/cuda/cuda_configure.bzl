"""Exposes the CUDA compiler (clang) and a CUDA 12 toolkit to Bazel as @local_config_cuda.

configure.sh decides (clang and a CUDA 12 toolkit found, TF_NEED_CUDA not 0)
and writes the values into .bazelrc as --repo_env. The toolkit is the one
build_deps/cuda/toolchain.sh assembles from PyPI wheels (or CUDA_TOOLKIT_PATH):
ptxas, fatbinary, libdevice, headers. This rule symlinks its directories and
clang (no download, no copy) and writes build_defs.bzl with CUDA_ENABLED and
the GPU architectures, which //tf_opt_ops:BUILD loads. With CUDA off the
repository still exists (CUDA_ENABLED = False) so BUILD files load it
unconditionally. Why: see docs/design.md, "GPU boundary".
"""

_ENV = [
    "TF_NEED_CUDA",
    "CUDA_TOOLKIT_PATH",
    "CUDA_CLANG",
    "CUDA_CLANG_VERSION",
    "TF_CUDA_ARCHS",
    "TF_CUDA_VERSION",
]

# Toolkit directories clang reads through --cuda-path.
_TOOLKIT_DIRS = ["bin", "include", "lib64", "nvvm"]

# The oldest Linux driver for each CUDA 12 minor version's PTX (the driver of
# that release): a driver JIT-compiles PTX of its own ISA version or older.
# Cubins (SASS) of any CUDA 12 toolkit run from the 12.0 driver on
# (minor version compatibility).
_SASS_MIN_DRIVER = "525.60.13"
_PTX_MIN_DRIVER = {
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
}

def _build_defs(enabled, archs, version):
    return '''"""Written by cuda_configure.bzl: what configure.sh found."""

CUDA_ENABLED = {enabled}

# Real GPU architectures (SASS); PTX of the last one is embedded too, so newer
# GPUs JIT-compile it.
CUDA_ARCHS = {archs}

CUDA_VERSION = "{version}"
'''.format(enabled = enabled, archs = repr(archs), version = version)

# Appended to the package's _build_info.py (//tf_opt_ops:build_info), so
# tests and users can tell a CUDA build from a CPU-only one.
def _build_info(version, archs, compiler):
    if not version:
        return """
# CUDA the GPU kernels were compiled for (None: CPU-only build).
CUDA_VERSION = None
CUDA_ARCHS = []
"""
    return """
# CUDA the GPU kernels were compiled for (None: CPU-only build): that
# toolkit's headers and ptxas. They run with the process's CUDA {major}
# runtime (libcudart.so.{major}, TensorFlow's), loaded when first needed.
CUDA_VERSION = {version}
CUDA_ARCHS = {archs}
# The oldest NVIDIA driver (Linux) the kernels run on: SASS for CUDA_ARCHS
# (CUDA minor version compatibility); PTX of the last architecture, which
# newer GPUs compile at load time, needs CUDA_PTX_MIN_DRIVER.
CUDA_MIN_DRIVER = {sass}
CUDA_PTX_MIN_DRIVER = {ptx}
CUDA_COMPILER = {compiler}
""".format(
        major = version.split(".")[0],
        version = repr(version),
        archs = repr(archs),
        sass = repr(_SASS_MIN_DRIVER),
        ptx = repr(_PTX_MIN_DRIVER[version]),
        compiler = repr(compiler),
    )

def _cuda_configure_impl(rctx):
    enabled = rctx.os.environ.get("TF_NEED_CUDA", "0") == "1"
    if not enabled:
        rctx.file("BUILD", """# CUDA is off (TF_NEED_CUDA != 1): only the build record.
exports_files(["_build_info_cuda.py"])
""")
        rctx.file("build_defs.bzl", _build_defs(False, [], ""))
        rctx.file("_build_info_cuda.py", _build_info("", [], ""))
        return
    path = rctx.os.environ.get("CUDA_TOOLKIT_PATH", "")
    clang = rctx.os.environ.get("CUDA_CLANG", "")
    if not path or not clang:
        fail("TF_NEED_CUDA=1 but CUDA_TOOLKIT_PATH or CUDA_CLANG is not set: re-run ./configure.sh.")
    for d in _TOOLKIT_DIRS:
        if not rctx.path(path + "/" + d).exists:
            fail("CUDA toolkit at %s has no %s/: re-run ./configure.sh." % (path, d))
        rctx.symlink(path + "/" + d, d)
    if not rctx.path(clang).exists:
        fail("CUDA_CLANG=%s does not exist: re-run ./configure.sh." % clang)
    rctx.symlink(clang, "clang")
    archs = [a.strip() for a in rctx.os.environ.get("TF_CUDA_ARCHS", "").split(",") if a.strip()]
    if not archs:
        fail("TF_CUDA_ARCHS is empty: re-run ./configure.sh.")
    version = rctx.os.environ.get("TF_CUDA_VERSION", "")
    if version not in _PTX_MIN_DRIVER:
        fail("TF_CUDA_VERSION=%s: the build knows the drivers of CUDA %s only." %
             (version, ", ".join(sorted(_PTX_MIN_DRIVER))))
    compiler = "clang " + rctx.os.environ.get("CUDA_CLANG_VERSION", "")
    rctx.file("build_defs.bzl", _build_defs(True, archs, version))
    rctx.file("_build_info_cuda.py", _build_info(version, archs, compiler))
    rctx.file("BUILD", '''
package(default_visibility = ["//visibility:public"])

exports_files(["clang", "_build_info_cuda.py"])

# Everything a clang CUDA compile reads from the toolkit: ptxas and fatbinary
# (with the libnvfatbin it loads), libdevice, the headers (CUDA runtime, crt,
# CUB and libcu++).
filegroup(
    name = "compiler_files",
    srcs = glob([
        "bin/**",
        "lib64/libnvfatbin.so*",
        "nvvm/**",
        "include/**",
    ]),
)

# The CUDA runtime API headers for the host .cc files of a CUDA build (Eigen's
# GpuDevice names cudaStream_t under EIGEN_USE_GPU): the toolkit's own, the CUDA
# the device code is built with, whichever TensorFlow wheel the build is for
# (tensorflow-cpu ships none).
cc_library(
    name = "cuda_headers",
    hdrs = glob([
        "include/*.h",
        "include/*.hpp",
        "include/crt/**",
    ]),
    includes = ["include"],
)

# The CUDA runtime API headers, for the host-compiled runtime stub
# (//tf_opt_ops:cuda_runtime_stub adds the include path itself, so that it
# does not reach TensorFlow's own CUDA headers in other targets).
filegroup(
    name = "runtime_headers",
    srcs = glob([
        "include/*.h",
        "include/crt/**",
    ]),
)
''')

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = _ENV,
    local = True,
)
