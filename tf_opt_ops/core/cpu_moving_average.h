// The CPU update of op ResourceSparseApplyLazyMovingAverage on raw buffers:
// validation of the indices, duplicate grouping, and the row loop of
// cpu_row_loops.h over optimizer_math.h's MovingAverageRow. Its OpKernel
// (kernels/moving_average_kernels.cc) calls it with the locked variables'
// buffers and TensorFlow's intra-op pool.
#ifndef TF_OPT_OPS_CORE_CPU_MOVING_AVERAGE_H_
#define TF_OPT_OPS_CORE_CPU_MOVING_AVERAGE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace cpu {

// The rows of a lazy moving-average step: `num_indices` (> 0) indices into
// tables of `num_rows` rows of `row_size` elements each.
template <typename Tindex>
struct MovingAverageRows {
  const Tindex* indices;
  int64_t num_indices;
  int64_t num_rows;
  int64_t row_size;
};

// Brings the average of each distinct row the indices name up to date
// (MovingAverageRow, once per row) and sets the row's synced count to
// step.count. Fails with IndexOutOfRange, before any write, when an index is
// outside [0, num_rows).
template <typename T, typename Tindex>
absl::Status SparseApplyLazyMovingAverage(const CpuPool& pool,
                                          const MovingAverageRows<Tindex>& rows, const T* var,
                                          T* average, int32_t* synced,
                                          const MovingAverageStep<ComputeT<T>>& step);

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_MOVING_AVERAGE_H_
