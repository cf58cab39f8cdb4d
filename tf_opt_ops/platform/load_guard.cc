// One set of kernels per process, whichever copy of the library loads first.
//
// Pipelines vendor the .so for tf.load_op_library and also import the Python
// package, which loads its own copy from another path. The dynamic loader
// treats two paths as two libraries, so the second copy's static initializers
// register every kernel again, and TensorFlow then fails each call with
// "Multiple OpKernel registrations match NodeDef". This file (linked into the
// .so only, never into a static TF Serving build) answers
// KernelsServedByEarlierCopy() for kernel_registration.h, so that a second copy
// registers no kernels: the first copy's serve every call. A second copy of a
// different build refuses to load, naming both. Everything here is public API:
// the dynamic loader's (dl_iterate_phdr, dlopen, dlsym, dladdr) and
// TensorFlow's op registry. Why: see docs/design.md, "Production".
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_opt_ops/build_id.h"
#include "tf_opt_ops/kernels/kernel_registration.h"

// The dl* functions at the symbol versions TensorFlow's own library binds: before
// glibc 2.34 they live in libdl.so.2 (a dependency of libtensorflow_framework.so.2),
// and linking against a newer glibc must not make the .so require it.
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#endif

// The build's identity, exported so that another copy can find it. The same
// value is the default of the BuildId op's attr (what Python reads) and
// BUILD_ID in _build_info.py (what the package expects).
extern "C" __attribute__((visibility("default"))) const char tf_opt_ops_build_id[] =
    TF_OPT_OPS_BUILD_ID;

namespace tf_opt_ops {
namespace {

struct LoadedCopy {
  std::string path;
  std::string build_id;
};

// Another loaded object that exports tf_opt_ops_build_id: an earlier copy of
// this library. The loader's list holds libraries loaded RTLD_LOCAL too, which
// a dlsym(RTLD_DEFAULT) would miss.
std::unique_ptr<LoadedCopy> FindEarlierCopy() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') {
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        }
        return 0;
      },
      &paths);
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    const char* id = static_cast<const char*>(dlsym(handle, "tf_opt_ops_build_id"));
    std::unique_ptr<LoadedCopy> copy;
    Dl_info owner;  // the file that defines it: dlsym also searches the object's dependencies
    if (id != nullptr && id != tf_opt_ops_build_id) {
      copy.reset(new LoadedCopy{
          dladdr(id, &owner) != 0 && owner.dli_fname != nullptr ? owner.dli_fname : path, id});
    }
    dlclose(handle);
    if (copy) return copy;
  }
  return nullptr;
}

// Looked up once, at the first kernel registration of this copy (a static
// initializer, so inside dlopen, before this copy's ops are registered).
const LoadedCopy* EarlierCopy() {
  static const LoadedCopy* const copy = FindEarlierCopy().release();
  return copy;
}

}  // namespace

bool KernelsServedByEarlierCopy() { return EarlierCopy() != nullptr; }

namespace {

std::string OwnPath() {
  Dl_info info;
  if (dladdr(tf_opt_ops_build_id, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "this library";
}

}  // namespace

// The build id as an op attr: the Python package reads it from TensorFlow's op
// registry to tell a copy of its own build from another build.
REGISTER_OP("TfOptOps>BuildId")
    .Attr("build_id: string = '" TF_OPT_OPS_BUILD_ID "'")
    .Output("id: string")
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("The build id of the tf_opt_ops library that registered the ops.");

class BuildIdOp : public ::tensorflow::OpKernel {
 public:
  explicit BuildIdOp(::tensorflow::OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(::tensorflow::OpKernelContext* context) override {
    ::tensorflow::Tensor* id = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, {}, &id));
    id->scalar<::tensorflow::tstring>()() = tf_opt_ops_build_id;
  }
};

TF_OPT_OPS_REGISTER_KERNEL(Name("TfOptOps>BuildId").Device(::tensorflow::DEVICE_CPU), BuildIdOp);

// A copy of another build cannot share the earlier copy's kernels (their ops
// may differ): fail the load (tf.load_op_library, TF_LoadLibrary) with both
// paths and ids. Only the first evaluation fails, so that TensorFlow's list of
// pending registrations does not fail every later library load too.
static const bool registered_build_check = [] {
  const LoadedCopy* earlier = EarlierCopy();
  if (earlier == nullptr) return true;
  if (earlier->build_id == tf_opt_ops_build_id) {
    // The load succeeds, but tf.load_op_library's module only wraps ops that
    // this load registered: none. Say where the wrappers are.
    std::fprintf(stderr,
                 "tf_opt_ops: %s is a copy of the library already loaded from %s (build %s); "
                 "that copy's ops and kernels serve both, and tf.load_op_library of this path "
                 "returns no op wrappers: use tf.load_op_library('%s') or tf_opt_ops.ops.\n",
                 OwnPath().c_str(), earlier->path.c_str(), tf_opt_ops_build_id,
                 earlier->path.c_str());
    return true;
  }
  ::tensorflow::OpRegistry::Global()->Register(
      [message = "tf_opt_ops: " + OwnPath() + " (build " + tf_opt_ops_build_id +
                 ") cannot load: this process already loaded another build of tf_opt_ops from " +
                 earlier->path + " (build " + earlier->build_id +
                 "). Load one build only: the Python package's library is at "
                 "tf_opt_ops_sysconfig.get_library_path().",
       failed = false](::tensorflow::OpRegistrationData*) mutable -> absl::Status {
        if (failed) return absl::AlreadyExistsError("tf_opt_ops build check");
        failed = true;
        return absl::FailedPreconditionError(message);
      });
  return true;
}();

}  // namespace tf_opt_ops
