// Placeholder: the GPU targets come next.
#include "tf_opt_ops/xla_targets.h"

namespace tf_opt_ops {
namespace xla_targets {
std::string RegisterGpuTargets(const XLA_FFI_Api*) { return ""; }
}  // namespace xla_targets
}  // namespace tf_opt_ops
