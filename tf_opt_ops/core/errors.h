// The errors the TensorFlow-free code returns: absl statuses, so that the
// OpKernels, the XLA custom calls and the CPU loops report a bad input with
// one message.
#ifndef TF_OPT_OPS_CORE_ERRORS_H_
#define TF_OPT_OPS_CORE_ERRORS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tf_opt_ops {

template <typename... Args>
absl::Status InvalidArgument(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// The error of an index outside [0, num_rows), on CPU and GPU, with and
// without XLA alike.
inline absl::Status IndexOutOfRange(int64_t position, int64_t index, int64_t num_rows) {
  return InvalidArgument("indices[", position, "] = ", index, " is not in [0, ", num_rows,
                         "): every index must name a row of var");
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_ERRORS_H_
