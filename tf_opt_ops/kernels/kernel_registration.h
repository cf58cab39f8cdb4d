// Kernel registration that lets a second copy of the library stand aside.
//
// Pipelines vendor the .so for tf.load_op_library and also import the Python
// package, which loads its own copy from another path: two libraries to the
// dynamic loader, whose static initializers would register every kernel twice
// (TensorFlow then fails each call with "Multiple OpKernel registrations match
// NodeDef"). TF_OPT_OPS_REGISTER_KERNEL is REGISTER_KERNEL_BUILDER through
// TensorFlow's public OpKernelRegistrar, asking first whether an earlier copy
// already serves our kernels. Why: see docs/design.md, "Production".
#ifndef TF_OPT_OPS_KERNELS_KERNEL_REGISTRATION_H_
#define TF_OPT_OPS_KERNELS_KERNEL_REGISTRATION_H_

#include <type_traits>

#include "tensorflow/core/framework/op_kernel.h"

namespace tf_opt_ops {

// True when an earlier-loaded copy of this library registered the kernels.
// load_guard.cc (linked into the .so only) answers; a binary that links the
// kernels statically (TF Serving) has one copy, and the default says false.
bool KernelsServedByEarlierCopy();

// Registers the kernel `build()` describes, unless an earlier copy serves it.
template <typename BuildKernelDef>
bool RegisterKernel(BuildKernelDef build, const char* kernel_class_name,
                    ::tensorflow::OpKernel* (*create)(::tensorflow::OpKernelConstruction*)) {
  if (KernelsServedByEarlierCopy()) return false;
  ::tensorflow::kernel_factory::OpKernelRegistrar registrar(build(), kernel_class_name, create);
  return true;
}

// `builder` on the CPU or (`gpu`) on GPUs, where the kernels read the scalar
// `hyperparameters`, with `step` a V2 op's step input, and a W op's
// `weight_decay` input (its name; null for the other ops) from host memory.
template <int N>
::tensorflow::KernelDefBuilder& KernelOn(::tensorflow::KernelDefBuilder&& builder, bool gpu,
                                         const char* const (&hyperparameters)[N], bool step,
                                         const char* weight_decay = nullptr) {
  if (!gpu) return builder.Device(::tensorflow::DEVICE_CPU);
  builder.Device(::tensorflow::DEVICE_GPU);
  for (const char* name : hyperparameters) builder.HostMemory(name);
  if (step) builder.HostMemory("step");
  if (weight_decay != nullptr) builder.HostMemory(weight_decay);
  return builder;
}

}  // namespace tf_opt_ops

// As REGISTER_KERNEL_BUILDER(kernel_builder, KernelClass), at namespace scope.
#define TF_OPT_OPS_REGISTER_KERNEL(kernel_builder, ...) \
  TF_OPT_OPS_REGISTER_KERNEL_UNIQ(__COUNTER__, kernel_builder, __VA_ARGS__)
#define TF_OPT_OPS_REGISTER_KERNEL_UNIQ(ctr, kernel_builder, ...) \
  TF_OPT_OPS_REGISTER_KERNEL_IMPL(ctr, kernel_builder, __VA_ARGS__)
#define TF_OPT_OPS_REGISTER_KERNEL_IMPL(ctr, kernel_builder, ...)                      \
  [[maybe_unused]] static const bool tf_opt_ops_kernel_registered_##ctr =              \
      ::tf_opt_ops::RegisterKernel(                                                    \
          [] {                                                                         \
            using ::tensorflow::register_kernel::Name;                                 \
            return (kernel_builder).Build();                                           \
          },                                                                           \
          #__VA_ARGS__,                                                                \
          [](::tensorflow::OpKernelConstruction* context) -> ::tensorflow::OpKernel* { \
            return new __VA_ARGS__(context);                                           \
          });

// Registers the OpKernel class template `Kernel`<Device, T, Tindex> as the
// sparse op `name` for tables of half, bfloat16, float and double with int32
// and int64 indices, on the CPU and (with CUDA) on GPUs, where the inputs
// named in the array `host_inputs` are read from host memory. At namespace
// scope in tf_opt_ops, where CPUDevice and GPUDevice are the devices.
#if GOOGLE_CUDA
#define TF_OPT_OPS_REGISTER_SPARSE_TABLE_OP(name, host_inputs, Kernel)      \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_ON(CPUDevice, name, host_inputs, Kernel) \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_ON(GPUDevice, name, host_inputs, Kernel)
#else
#define TF_OPT_OPS_REGISTER_SPARSE_TABLE_OP(name, host_inputs, Kernel) \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_ON(CPUDevice, name, host_inputs, Kernel)
#endif  // GOOGLE_CUDA
#define TF_OPT_OPS_REGISTER_SPARSE_TABLE_ON(Device, name, host_inputs, Kernel)           \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_T(Device, name, host_inputs, Kernel, Eigen::half)     \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_T(Device, name, host_inputs, Kernel, Eigen::bfloat16) \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_T(Device, name, host_inputs, Kernel, float)           \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_T(Device, name, host_inputs, Kernel, double)
#define TF_OPT_OPS_REGISTER_SPARSE_TABLE_T(Device, name, host_inputs, Kernel, T)         \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_KERNEL(Device, name, host_inputs, Kernel, T, int32_t) \
  TF_OPT_OPS_REGISTER_SPARSE_TABLE_KERNEL(Device, name, host_inputs, Kernel, T, int64_t)
#define TF_OPT_OPS_REGISTER_SPARSE_TABLE_KERNEL(Device, name, host_inputs, Kernel, T, Tindex) \
  TF_OPT_OPS_REGISTER_KERNEL(                                                                 \
      KernelOn(Name(name), !std::is_same_v<Device, CPUDevice>, host_inputs, /*step=*/false)   \
          .TypeConstraint<T>("T")                                                             \
          .TypeConstraint<Tindex>("Tindices"),                                                \
      Kernel<Device, T, Tindex>);

// Registers the OpKernel class template `Kernel`<T, Tindex> as the CPU-only
// sparse op `name` for tables of half, bfloat16, float and double with int32
// and int64 indices (the window ops).
#define TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_OP(name, Kernel)           \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_T(name, Kernel, Eigen::half)     \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_T(name, Kernel, Eigen::bfloat16) \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_T(name, Kernel, float)           \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_T(name, Kernel, double)
#define TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_T(name, Kernel, T)         \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_KERNEL(name, Kernel, T, int32_t) \
  TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_KERNEL(name, Kernel, T, int64_t)
#define TF_OPT_OPS_REGISTER_CPU_SPARSE_TABLE_KERNEL(name, Kernel, T, Tindex) \
  TF_OPT_OPS_REGISTER_KERNEL(Name(name)                                      \
                                 .Device(tensorflow::DEVICE_CPU)             \
                                 .TypeConstraint<T>("T")                     \
                                 .TypeConstraint<Tindex>("Tindices"),        \
                             Kernel<T, Tindex>);

#endif  // TF_OPT_OPS_KERNELS_KERNEL_REGISTRATION_H_
