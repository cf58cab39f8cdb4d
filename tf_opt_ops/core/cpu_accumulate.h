// The CPU loops of ops ResourceSparseAccumulateRows and
// ResourceSparseTakeWindowGradient on raw buffers: validation of the ids,
// row grouping (row_groups.h) and the row loops. Their OpKernels
// (kernels/accumulate_kernels.cc) call them with the locked variables'
// buffers and TensorFlow's intra-op pool.
#ifndef TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_
#define TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_

#include <algorithm>
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
// distinct rows, rows()[u] the accumulator row of distinct row u, in
// ascending order (so the row loops walk every table in address order, not
// at random; each row's sums keep their order, so the order changes no
// bits). TakeRow(u) writes that row's average ([row_size]): the
// accumulator's row (where held) plus the step's values in order, each
// addition rounded to T, over `steps`; a held row the step does not name is
// its accumulator row plus 0. It then zeroes the row of the accumulator
// (where held). Take takes every row (`rows`, [num_rows()]; `average`,
// [num_rows(), row_size]) and zeroes the count; a caller that takes the rows
// itself (the fused lazy Adam and Clippy of cpu_kernels.h) calls Applied once
// it has.
template <typename T, typename Tindex>
class WindowGradient {
 public:
  absl::Status Group(const CpuPool& pool, const AccumulatorWindow<T, Tindex>& window,
                     const MicroStepRows<T, Tindex>& step);
  int64_t num_rows() const { return static_cast<int64_t>(rows_.size()); }
  int64_t row_size() const { return window_.row_size; }
  const int64_t* rows() const { return rows_.data(); }
  T* accumulator() const { return window_.accumulator; }
  void Take(const CpuPool& pool, T steps, int64_t* rows, T* average);
  void Applied() { *window_.row_count = Tindex{0}; }

  // Inline: the fused lazy Adam and Clippy run them in their instruction-set
  // level's copy. PrefetchRow(u) prefetches what TakeRow(u) reads: the
  // accumulator's row (where held, for writing: it is zeroed) and the step's
  // first value row.
  void PrefetchRow(int64_t u) const {
    if (first_[u] < held_) {
      const char* a = reinterpret_cast<const char*>(window_.accumulator + rows()[u] * row_size());
      const int64_t row_bytes = row_size() * static_cast<int64_t>(sizeof(T));
      for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(a + b, /*rw=*/1, 3);
    }
    PrefetchStepRow(u);
  }
  void PrefetchStepRow(int64_t u) const {
    if (step_first_[u] < 0) return;
    const char* v = reinterpret_cast<const char*>(step_.values + step_first_[u] * row_size());
    const int64_t row_bytes = row_size() * static_cast<int64_t>(sizeof(T));
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(v + b, /*rw=*/0, 3);
  }
  void TakeRow(int64_t u, T steps, T* sum) const {
    const int64_t dim = row_size();
    T* held_row = window_.accumulator + rows()[u] * dim;
    const T* values = step_.values;
    const bool is_held = first_[u] < held_;
    int64_t p = step_first_[u] < 0 ? -1 : step_first_[u] + held_;  // positions in order
    if (!is_held) {
      std::copy_n(values + (p - held_) * dim, dim, sum);
    } else if (p >= 0) {
      const T* v = values + (p - held_) * dim;
      for (int64_t j = 0; j < dim; ++j) sum[j] = held_row[j] + v[j];
    } else {
      for (int64_t j = 0; j < dim; ++j) sum[j] = held_row[j] + T(0);
    }
    if (p >= 0) {
      for (p = groups_.next(p); p >= 0; p = groups_.next(p)) {
        const T* v = values + (p - held_) * dim;
        for (int64_t j = 0; j < dim; ++j) sum[j] = sum[j] + v[j];
      }
    }
    for (int64_t j = 0; j < dim; ++j) sum[j] = sum[j] / steps;
    // The average is out of the accumulator: the window is applied.
    if (is_held) std::fill_n(held_row, dim, T(0));
  }

 private:
  AccumulatorWindow<T, Tindex> window_{};
  MicroStepRows<T, Tindex> step_{};
  int64_t held_ = 0;         // the held ids: positions [0, held_) of ids_
  std::vector<Tindex> ids_;  // the held ids, then the step's indices
  RowGroups groups_;         // its links: the positions of a row after its first
  // Distinct row u (ascending): its row, its first position in ids_, and its
  // first value of the step (-1: the step does not name it), to prefetch with
  // the row's accumulator row: the rows are in no order of the step's, so its
  // values are read at random.
  std::vector<int64_t> rows_;
  std::vector<int64_t> first_;
  std::vector<int64_t> step_first_;
};

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_ACCUMULATE_H_
