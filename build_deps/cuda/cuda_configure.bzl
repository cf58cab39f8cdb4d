"""Exposes the local CUDA toolkit to Bazel as @local_config_cuda.

configure.sh decides (nvcc found, TF_NEED_CUDA not 0) and writes the values
into .bazelrc as --repo_env. This rule symlinks the toolkit's directories (no
download, no copy) and writes build_defs.bzl with CUDA_ENABLED and the GPU
architectures, which //tf_opt_ops:BUILD loads. With CUDA off the repository
still exists (CUDA_ENABLED = False) so BUILD files load it unconditionally.
"""

_ENV = [
    "TF_NEED_CUDA",
    "CUDA_TOOLKIT_PATH",
    "TF_CUDA_ARCHS",
    "TF_CUDA_VERSION",
]

# Toolkit directories nvcc reads through its nvcc.profile ($(TOP)/...).
_TOOLKIT_DIRS = ["bin", "include", "lib64", "nvvm", "targets"]

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
def _build_info(version, archs):
    return """
# CUDA toolkit the GPU kernels were compiled with (None: CPU-only build).
CUDA_VERSION = {version}
CUDA_ARCHS = {archs}
""".format(version = repr(version) if version else "None", archs = repr(archs))

def _cuda_configure_impl(rctx):
    enabled = rctx.os.environ.get("TF_NEED_CUDA", "0") == "1"
    if not enabled:
        rctx.file("BUILD", """# CUDA is off (TF_NEED_CUDA != 1): only the build record.
exports_files(["_build_info_cuda.py"])
""")
        rctx.file("build_defs.bzl", _build_defs(False, [], ""))
        rctx.file("_build_info_cuda.py", _build_info("", []))
        return
    path = rctx.os.environ.get("CUDA_TOOLKIT_PATH", "")
    if not path:
        fail("TF_NEED_CUDA=1 but CUDA_TOOLKIT_PATH is not set: re-run ./configure.sh.")
    for d in _TOOLKIT_DIRS:
        if not rctx.path(path + "/" + d).exists:
            fail("CUDA toolkit at %s has no %s/: re-run ./configure.sh." % (path, d))
        rctx.symlink(path + "/" + d, d)
    archs = [a.strip() for a in rctx.os.environ.get("TF_CUDA_ARCHS", "").split(",") if a.strip()]
    if not archs:
        fail("TF_CUDA_ARCHS is empty: re-run ./configure.sh.")
    version = rctx.os.environ.get("TF_CUDA_VERSION", "")
    rctx.file("build_defs.bzl", _build_defs(True, archs, version))
    rctx.file("_build_info_cuda.py", _build_info(version or "unknown", archs))
    rctx.file("BUILD", '''
package(default_visibility = ["//visibility:public"])

exports_files(["bin/nvcc", "_build_info_cuda.py"])

# Everything an nvcc action reads: the driver, its compilers (cicc, ptxas,
# fatbinary, ...), the toolkit headers (CUB ships in include/cccl) and libdevice.
filegroup(
    name = "nvcc_files",
    srcs = glob([
        "bin/**",
        "nvvm/**",
        "include/**",
        "targets/*/include/**",
    ]),
)

# The CUDA runtime, linked statically and kept hidden by the .so's linkopts
# (-Wl,--exclude-libs,libcudart_static.a): the GPU tensorflow wheel exports
# the runtime API from libtensorflow_framework.so.2, and a plain dependency
# would silently bind to those symbols (and then fail to load with
# tensorflow-cpu, which exports none). alwayslink: take the archive whole,
# even though nothing we link first leaves its symbols undefined.
cc_import(
    name = "cudart_static_import",
    static_library = "lib64/libcudart_static.a",
    alwayslink = 1,
)

cc_library(
    name = "cudart_static",
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    deps = [":cudart_static_import"],
)
''')

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = _ENV,
    local = True,
)
