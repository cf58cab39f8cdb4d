// The CPU update of cpu_moving_average.h, instantiated for every table and
// index type of the op.
#define EIGEN_USE_THREADS  // before any Eigen header: the loops run on a thread pool

#include "tf_opt_ops/core/cpu_moving_average.h"

#include "tf_opt_ops/core/cpu_row_loops.h"

namespace tf_opt_ops {
namespace cpu {
template <typename T, typename Tindex>
absl::Status SparseApplyLazyMovingAverage(const CpuPool& pool,
                                          const MovingAverageRows<Tindex>& rows, const T* var,
                                          T* average, int32_t* synced,
                                          const MovingAverageStep<ComputeT<T>>& step) {
  using C = ComputeT<T>;
  RowGroups groups;
  absl::Status status =
      GroupRows<Tindex>(pool, rows.indices, rows.num_indices, rows.num_rows, &groups);
  if (!status.ok()) return status;
  const int64_t dim = rows.row_size;
  const int64_t* distinct = groups.rows();
  const auto offset = [distinct, dim](int64_t u) { return distinct[u] * dim; };
  const auto length = [dim](int64_t) { return dim; };
  // Per row: read var, average and synced; write average and synced.
  const Eigen::TensorOpCost cost(dim * 2.0 * sizeof(T) + sizeof(int32_t),
                                 dim * 1.0 * sizeof(T) + sizeof(int32_t), 10.0 * dim + 40.0);
  ForEachItem(pool, groups.num_unique(), cost, [&](int64_t begin, int64_t end) {
    MovingAverageDecayCache<T, C> decay_of(step);
    ForEachSpan(begin, end, {TableOf(average), TableOf(var), TableOf(synced, dim)}, offset, length,
                [&](int64_t u, int64_t o) {
                  CatchUpAverageRow<T>(decay_of, average + o, var + o, dim, synced + distinct[u]);
                });
  });
  return absl::OkStatus();
}

#define TF_OPT_OPS_INSTANTIATE_INDEX(T, Tindex)                                 \
  template absl::Status SparseApplyLazyMovingAverage<T, Tindex>(                \
      const CpuPool&, const MovingAverageRows<Tindex>&, const T*, T*, int32_t*, \
      const MovingAverageStep<ComputeT<T>>&);
#define TF_OPT_OPS_INSTANTIATE(T)          \
  TF_OPT_OPS_INSTANTIATE_INDEX(T, int32_t) \
  TF_OPT_OPS_INSTANTIATE_INDEX(T, int64_t)
TF_OPT_OPS_INSTANTIATE(Eigen::half)
TF_OPT_OPS_INSTANTIATE(Eigen::bfloat16)
TF_OPT_OPS_INSTANTIATE(float)
TF_OPT_OPS_INSTANTIATE(double)
#undef TF_OPT_OPS_INSTANTIATE
#undef TF_OPT_OPS_INSTANTIATE_INDEX

}  // namespace cpu
}  // namespace tf_opt_ops
