"""Exposes the installed TensorFlow pip package to Bazel as @local_config_tf.

configure.sh writes the paths into .bazelrc (--repo_env); this rule symlinks
the header directory, links libtensorflow_framework.so.2 where it is installed,
and records the TensorFlow version the library is built against.
"""

_ENV = [
    "TF_HEADER_DIR",
    "TF_SHARED_LIBRARY_DIR",
    "TF_SHARED_LIBRARY_NAME",
    "TF_VERSION",
    "TF_CXX11_ABI_FLAG",
]

def _require(rctx, name):
    value = rctx.os.environ.get(name, "")
    if not value:
        fail("%s is not set: run ./configure.sh before bazel build." % name)
    return value

def _quoted(path):
    """`path` as one word of a response file (@file) for gcc or ld."""
    return "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"

def _tf_configure_impl(rctx):
    header_dir = _require(rctx, "TF_HEADER_DIR")
    lib_dir = _require(rctx, "TF_SHARED_LIBRARY_DIR")
    lib_name = _require(rctx, "TF_SHARED_LIBRARY_NAME")
    version = _require(rctx, "TF_VERSION")
    rctx.symlink(header_dir, "include")
    # TensorFlow's C and C++ API (TF_LoadSessionFromSavedModel), beside the
    # framework library in the pip package: serving/ links it.
    rctx.symlink(lib_dir + "/libtensorflow_cc.so.2", "lib/libtensorflow_cc.so.2")
    # The linker reaches TensorFlow's libraries through this repository's lib/
    # and reads their run-time folder from a file: pip's folder may hold
    # spaces, which Bazel's unquoted link parameter files would split.
    rctx.symlink(lib_dir + "/" + lib_name, "lib/" + lib_name)
    rctx.file("lib/runpath.args", "-rpath " + _quoted(lib_dir) + "\n")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**/*.h", "include/**/*.inc", "include/**/*.hpp",
                 "include/unsupported/Eigen/**", "include/Eigen/**"]),
    includes = ["include"],
)

# Linked as tf.sysconfig.get_link_flags() says, and as TensorFlow's custom-op
# guide does: -L<dir> -l:{lib_name}, so the library NEEDs the soname
# and carries no RUNPATH (a srcs entry would add one into Bazel's build tree).
# At run time the loader finds it because TensorFlow has loaded it first.
cc_library(
    name = "libtensorflow_framework",
    linkopts = [{search_lib_dir}, "-l:{lib_name}"],
)

# The XLA library (_tf_opt_ops_xla.so) also links TensorFlow's C++ library,
# where the tf2xla and XLA builder APIs live, the same way: by soname, no
# RUNPATH (TensorFlow has loaded both before us).
cc_library(
    name = "libtensorflow_cc_by_soname",
    linkopts = [{search_lib_dir}, "-l:libtensorflow_cc.so.2"],
)

# The tf2xla headers include two third-party libraries from where the wheel
# keeps them, without their folder.
cc_library(
    name = "tf_xla_header_lib",
    includes = [
        "include/external/farmhash_archive/src",
        "include/external/highwayhash",
    ],
    deps = [":tf_header_lib"],
)

# For programs on TensorFlow's C API (serving/): they run outside Python, so
# they find both of TensorFlow's libraries where pip installed them.
cc_library(
    name = "libtensorflow_cc",
    srcs = ["lib/libtensorflow_cc.so.2"],
    linkopts = [{run_from_lib_dir}],
)

exports_files(["_build_info.py"])
""".format(
        search_lib_dir = repr("-L" + str(rctx.path("lib"))),
        run_from_lib_dir = repr("-Wl,@" + str(rctx.path("lib/runpath.args"))),
        lib_name = lib_name,
    ))
    rctx.file("_build_info.py", '''"""Written by the build: what this library was built against."""

TF_VERSION = "{version}"
CXX11_ABI_FLAG = {abi}
'''.format(version = version, abi = rctx.os.environ.get("TF_CXX11_ABI_FLAG", "1")))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = _ENV,
    local = True,
)
