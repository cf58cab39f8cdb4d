"""cuda_objects: compiles TensorFlow-free *.cu.cc files with nvcc.

Bazel 4.2.3 has no CUDA rules, and TensorFlow's crosstool (a Python wrapper
routing `-x cuda` to nvcc) is far more than we need: our .cu.cc files include
only the CUDA toolkit and tf_opt_ops headers, so one nvcc action per file
producing position-independent objects, linked into the cc_binary .so like
any other object, is enough.
"""

load("@local_config_cuda//:build_defs.bzl", "CUDA_ARCHS", "CUDA_ENABLED")

def _cuda_objects_impl(ctx):
    nvcc = ctx.file.nvcc
    gencode = []
    for arch in ctx.attr.archs:
        gencode.append("-gencode=arch=compute_%s,code=sm_%s" % (arch, arch))
    if ctx.attr.archs:
        last = ctx.attr.archs[-1]
        gencode.append("-gencode=arch=compute_%s,code=compute_%s" % (last, last))
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu.cc")] if src.basename.endswith(".cu.cc") else src.basename
        out = ctx.actions.declare_file("_objs/%s/%s.cu.pic.o" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add_all(["-c", "-x", "cu"])
        args.add_all(ctx.attr.copts)
        args.add_all(gencode)
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        args.add_all(["-o", out.path, src.path])
        ctx.actions.run(
            executable = nvcc,
            arguments = [args],
            inputs = depset([src] + ctx.files.hdrs + ctx.files.toolkit),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc (%d GPU archs)" % (src.short_path, len(ctx.attr.archs)),
            # nvcc runs the host compiler (gcc) it finds on PATH.
            use_default_shell_env = True,
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
        "nvcc": attr.label(allow_single_file = True, default = "@local_config_cuda//:bin/nvcc"),
        "toolkit": attr.label(default = "@local_config_cuda//:nvcc_files"),
    },
    doc = "Object files (.cu.pic.o) of srcs compiled by nvcc, one action per source.",
)

def if_cuda(if_true, if_false = []):
    """`if_true` when configure.sh turned CUDA on, else `if_false` (as TensorFlow's if_cuda)."""
    return if_true if CUDA_ENABLED else if_false

def cuda_kernels(name, srcs, hdrs = [], copts = [], **kwargs):
    """cuda_objects for the configured GPU architectures; no target when CUDA is off."""
    if CUDA_ENABLED:
        cuda_objects(name = name, srcs = srcs, hdrs = hdrs, copts = copts, archs = CUDA_ARCHS, **kwargs)
