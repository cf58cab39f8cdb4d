// The one CUDA runtime call the XLA GPU targets (xla_gpu_targets.cc) make
// themselves, behind a plain C++ declaration as gpu_launchers.h's launchers:
// reading a custom call's hyperparameters, a few bytes of device memory, on
// the host. See docs/design.md, "XLA".
#ifndef TF_OPT_OPS_XLA_XLA_GPU_COPY_H_
#define TF_OPT_OPS_XLA_XLA_GPU_COPY_H_

#include <cstddef>

namespace tf_opt_ops {
namespace gpu {

// Copies `bytes` from device memory to `host` in order on `stream`, and
// waits for the copy. Returns a cudaError_t as int (0 = success).
int CopyToHost(void* host, const void* device, size_t bytes, void* stream);

}  // namespace gpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_XLA_GPU_COPY_H_
