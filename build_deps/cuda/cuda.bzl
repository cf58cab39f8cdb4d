"""cuda_objects: compiles TensorFlow-free *.cu.cc files with clang's CUDA compiler.

Bazel 4.2.3 has no CUDA rules, and TensorFlow's crosstool is far more than we
need: our .cu.cc files include only the CUDA toolkit and tf_opt_ops headers,
so one clang action per file producing position-independent objects (host
code plus the fat binary of every GPU architecture), linked into the
cc_binary .so like any other object, is enough. The toolkit is the CUDA 12
one @local_config_cuda points at (--cuda-path); see docs/design.md, "GPU
boundary".
"""

load("@local_config_cuda//:build_defs.bzl", "CUDA_ARCHS", "CUDA_ENABLED")

def cuda_arch_flags(archs):
    """clang flags for SASS of every architecture in `archs`, and PTX of the last only."""
    flags = ["--cuda-gpu-arch=sm_%s" % a for a in archs]
    flags += ["--no-cuda-include-ptx=sm_%s" % a for a in archs[:-1]]
    return flags

def _cuda_objects_impl(ctx):
    clang = ctx.file.compiler
    toolkit = clang.dirname  # @local_config_cuda: clang and the toolkit's directories
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu.cc")] if src.basename.endswith(".cu.cc") else src.basename
        out = ctx.actions.declare_file("_objs/%s/%s.cu.pic.o" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add_all(["-c", "-x", "cuda", "--cuda-path=" + toolkit])
        args.add_all(ctx.attr.copts)
        args.add_all(cuda_arch_flags(ctx.attr.archs))
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        args.add_all(["-o", out.path, src.path])
        ctx.actions.run(
            executable = clang,
            arguments = [args],
            inputs = depset([src] + ctx.files.hdrs + ctx.files.toolkit),
            outputs = [out],
            mnemonic = "CudaCompile",
            progress_message = "Compiling %s for CUDA (%d GPU archs)" % (src.short_path, len(ctx.attr.archs)),
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu.cc"]),
        "hdrs": attr.label_list(allow_files = True),
        "copts": attr.string_list(),
        "archs": attr.string_list(),
        "compiler": attr.label(allow_single_file = True, default = "@local_config_cuda//:clang"),
        "toolkit": attr.label(default = "@local_config_cuda//:compiler_files"),
    },
    doc = "Object files (.cu.pic.o) of srcs compiled by clang for CUDA, one action per source.",
)

def if_cuda(if_true, if_false = []):
    """`if_true` when configure.sh turned CUDA on, else `if_false` (as TensorFlow's if_cuda)."""
    return if_true if CUDA_ENABLED else if_false

def cuda_kernels(name, srcs, hdrs = [], copts = [], **kwargs):
    """cuda_objects for the configured GPU architectures; no target when CUDA is off."""
    if CUDA_ENABLED:
        cuda_objects(name = name, srcs = srcs, hdrs = hdrs, copts = copts, archs = CUDA_ARCHS, **kwargs)

def cuda_runtime_library(name, srcs, copts = [], **kwargs):
    """A cc_library built against the toolkit's CUDA runtime headers; no target when CUDA is off.

    The include path is a copt, so it reaches neither dependents nor
    TensorFlow's own copy of the CUDA headers (a newer CUDA) in other targets.
    """
    if CUDA_ENABLED:
        native.cc_library(
            name = name,
            srcs = srcs + ["@local_config_cuda//:runtime_headers"],
            copts = copts + ["-isystem", "external/local_config_cuda/include"],
            **kwargs
        )
