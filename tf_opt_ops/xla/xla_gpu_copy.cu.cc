// CopyToHost (xla_gpu_copy.h): the XLA GPU targets' one copy to the host.
#include "tf_opt_ops/xla/xla_gpu_copy.h"

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"

namespace tf_opt_ops {
namespace gpu {

int CopyToHost(void* host, const void* device, size_t bytes, void* stream) {
  // XLA runs a custom call with its device current, as TensorFlow runs an op
  // (the CUDA kernels rely on the same; see gpu_kernel_util.cu.h).
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int err = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s);
  if (err == 0) err = cudaStreamSynchronize(s);
  return err;
}

}  // namespace gpu
}  // namespace tf_opt_ops
