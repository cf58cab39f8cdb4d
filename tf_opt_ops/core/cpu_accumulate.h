// The CPU loops of ops ResourceSparseAccumulateRows and
// ResourceSparseTakeWindowGradient on raw buffers: validation of the ids,
// row grouping (row_groups.h) and the row loops. Their OpKernels
// (kernels/accumulate_kernels.cc) call them with the locked variables'
// buffers and TensorFlow's intra-op pool.
#ifndef TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_
#define TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "tf_opt_ops/core/row_groups.h"

namespace tf_opt_ops {
namespace cpu {

// An accumulator of `num_rows` rows of `row_size` elements, and the window's
// row ids: `row_ids` has room for `num_rows` ids, the first `*row_count` of
// them held (a row possibly more than once).
template <typename T, typename Tindex>
struct AccumulatorWindow {
  T* accumulator;
  int64_t num_rows;
  int64_t row_size;
  Tindex* row_ids;
  Tindex* row_count;
};

// One micro-step's rows: `values` holds `num_indices` rows, row i for row
// indices[i] of the accumulator.
template <typename T, typename Tindex>
struct MicroStepRows {
  const Tindex* indices;
  int64_t num_indices;
  const T* values;
};

// accumulator[indices[i]] += values[i] for each i in order, each addition
// rounded to T (as a scatter-add adds); with no ids held (the window's first
// micro-step, the accumulator 0 on every row) each row's first value is
// written as it is. Then appends the indices to the held ids, or, where they
// would not fit, holds the distinct rows of both instead. Fails with
// InvalidArgument, before any write, when an index or held id is outside
// [0, num_rows) or the count outside [0, num_rows].
template <typename T, typename Tindex>
absl::Status SparseAccumulateRows(const CpuPool& pool, const AccumulatorWindow<T, Tindex>& window,
                                  const MicroStepRows<T, Tindex>& step);

// The window's last micro-step, grouped with the held ids: Group validates
// (as SparseAccumulateRows) and groups them; num_rows() is then the number of
// distinct rows, and Take writes them (`rows`, [num_rows()]) and their
// average (`average`, [num_rows(), row_size]): per row, the accumulator's row
// (where held) plus the step's values in order, each addition rounded to T,
// over `steps`; a held row the step does not name is its accumulator row plus
// 0. Take then zeroes the held rows of the accumulator and the count.
template <typename T, typename Tindex>
class WindowGradient {
 public:
  absl::Status Group(const CpuPool& pool, const AccumulatorWindow<T, Tindex>& window,
                     const MicroStepRows<T, Tindex>& step);
  int64_t num_rows() const { return groups_.num_unique(); }
  void Take(const CpuPool& pool, T steps, int64_t* rows, T* average);

 private:
  AccumulatorWindow<T, Tindex> window_{};
  MicroStepRows<T, Tindex> step_{};
  int64_t held_ = 0;         // the held ids: positions [0, held_) of ids_
  std::vector<Tindex> ids_;  // the held ids, then the step's indices
  RowGroups groups_;
};

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_
