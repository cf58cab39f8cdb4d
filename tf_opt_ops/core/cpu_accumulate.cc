// The CPU loops of cpu_accumulate.h, instantiated for every accumulator and
// id type of the ops.
#define EIGEN_USE_THREADS  // before any Eigen header: the loops run on a thread pool

#include "tf_opt_ops/core/cpu_accumulate.h"

#include <algorithm>
#include <numeric>

#include "tf_opt_ops/core/cpu_row_loops.h"
#include "tf_opt_ops/core/errors.h"

namespace tf_opt_ops {
namespace cpu {
namespace {

absl::Status CheckCount(int64_t count, int64_t num_rows) {
  if (count >= 0 && count <= num_rows) return absl::OkStatus();
  return InvalidArgument("row_count = ", count, " is not in [0, ", num_rows,
                         "]: row_ids holds at most one id per row of the accumulator; zero "
                         "row_count (and the accumulator) to start a new window.");
}

// Groups `ids` (the first `held` the window's held ids, then a micro-step's
// indices), failing on the first id outside [0, num_rows).
template <typename Tindex>
absl::Status GroupIds(const CpuPool& pool, const std::vector<Tindex>& ids, int64_t held,
                      int64_t num_rows, RowGroups* groups) {
  const absl::Status status =
      GroupRows<Tindex>(pool, ids.data(), static_cast<int64_t>(ids.size()), num_rows, groups);
  if (status.ok()) return status;
  for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); ++p) {
    const int64_t row = static_cast<int64_t>(ids[p]);
    if (row >= 0 && row < num_rows) continue;
    if (p < held) {
      return InvalidArgument("row_ids[", p, "] = ", row, " is not in [0, ", num_rows,
                             "): the window's row ids must name rows of the accumulator.");
    }
    return IndexOutOfRange(p - held, row, num_rows);
  }
  return status;
}

template <typename Tindex>
std::vector<Tindex> HeldThenStep(const Tindex* held_ids, int64_t held, const Tindex* indices,
                                 int64_t n) {
  std::vector<Tindex> ids(held + n);
  std::copy_n(held_ids, held, ids.begin());
  std::copy_n(indices, n, ids.begin() + held);
  return ids;
}

// The number of bits that hold every value in [0, n).
int BitsBelow(int64_t n) {
  int bits = 0;
  while (bits < 63 && (int64_t{1} << bits) < n) ++bits;
  return bits;
}

// The permutation that sorts `count` rows in [0, num_rows) ascending: order[k]
// is the index of the k-th smallest. A radix sort, least significant digit
// first, of each row packed with its index in one word: a pass per 11 bits of
// the row (a pass's counts stay in L1), two for a million rows, where a
// comparison sort takes log2(count) passes. Where row and index need more than
// 64 bits (2^40 rows and more), the rows keep the order they came in: the
// order only saves time.
std::vector<int64_t> AscendingOrder(const int64_t* rows, int64_t count, int64_t num_rows) {
  std::vector<int64_t> order(count);
  const int index_bits = BitsBelow(count);
  const int row_bits = BitsBelow(num_rows);
  if (index_bits + row_bits > 64) {
    std::iota(order.begin(), order.end(), int64_t{0});
    return order;
  }
  std::vector<uint64_t> keys(count);
  for (int64_t k = 0; k < count; ++k) {
    keys[k] = static_cast<uint64_t>(rows[k]) << index_bits | static_cast<uint64_t>(k);
  }
  constexpr int kMaxDigitBits = 11;
  const int passes = (row_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  if (passes > 0) {
    const int digit_bits = (row_bits + passes - 1) / passes;
    const uint64_t digit_mask = (uint64_t{1} << digit_bits) - 1;
    std::vector<uint64_t> sorted(count);
    std::vector<int64_t> start(int64_t{1} << digit_bits);
    for (int pass = 0; pass < passes; ++pass) {
      const int shift = index_bits + pass * digit_bits;
      std::fill(start.begin(), start.end(), 0);
      for (const uint64_t key : keys) ++start[key >> shift & digit_mask];
      std::exclusive_scan(start.begin(), start.end(), start.begin(), int64_t{0});
      for (const uint64_t key : keys) sorted[start[key >> shift & digit_mask]++] = key;
      keys.swap(sorted);
    }
  }
  const uint64_t index_mask = (uint64_t{1} << index_bits) - 1;
  for (int64_t k = 0; k < count; ++k) order[k] = static_cast<int64_t>(keys[k] & index_mask);
  return order;
}

// Per distinct row: its values read, the accumulator row read and written.
template <typename T>
Eigen::TensorOpCost RowCost(int64_t dim) {
  return Eigen::TensorOpCost(dim * 2.0 * sizeof(T), dim * 1.0 * sizeof(T), 2.0 * dim + 20.0);
}

}  // namespace

template <typename T, typename Tindex>
absl::Status SparseAccumulateRows(const CpuPool& pool, const AccumulatorWindow<T, Tindex>& window,
                                  const MicroStepRows<T, Tindex>& step) {
  const int64_t count = static_cast<int64_t>(*window.row_count);
  absl::Status status = CheckCount(count, window.num_rows);
  if (!status.ok()) return status;
  RowGroups groups;
  status = GroupRows<Tindex>(pool, step.indices, step.num_indices, window.num_rows, &groups);
  if (!status.ok()) return status;
  // Ids that would not fit: the distinct rows of the held ids and these fit (a
  // table's distinct rows are its row count), validated before any write.
  const bool fits = count + step.num_indices <= window.num_rows;
  RowGroups distinct;
  if (!fits) {
    status = GroupIds(pool, HeldThenStep(window.row_ids, count, step.indices, step.num_indices),
                      count, window.num_rows, &distinct);
    if (!status.ok()) return status;
  }

  const int64_t dim = window.row_size;
  const bool empty = count == 0;
  const int64_t* rows = groups.rows();
  T* accumulator = window.accumulator;
  const T* values = step.values;
  const auto offset = [rows, dim](int64_t u) { return rows[u] * dim; };
  const auto length = [dim](int64_t) { return dim; };
  ForEachItem(pool, groups.num_unique(), RowCost<T>(dim), [&](int64_t begin, int64_t end) {
    ForEachSpan(begin, end, {TableOf(accumulator)}, offset, length, [&](int64_t u, int64_t o) {
      T* sum = accumulator + o;
      int64_t p = groups.first(u);
      const T* v = values + p * dim;
      if (empty) {
        std::copy_n(v, dim, sum);
      } else {
        for (int64_t j = 0; j < dim; ++j) sum[j] = sum[j] + v[j];
      }
      for (p = groups.next(p); p >= 0; p = groups.next(p)) {
        v = values + p * dim;
        for (int64_t j = 0; j < dim; ++j) sum[j] = sum[j] + v[j];
      }
    });
  });

  if (fits) {
    std::copy_n(step.indices, step.num_indices, window.row_ids + count);
    *window.row_count = static_cast<Tindex>(count + step.num_indices);
  } else {
    const int64_t kept = distinct.num_unique();
    std::transform(distinct.rows(), distinct.rows() + kept, window.row_ids,
                   [](int64_t row) { return static_cast<Tindex>(row); });
    *window.row_count = static_cast<Tindex>(kept);
  }
  return absl::OkStatus();
}

template <typename T, typename Tindex>
absl::Status WindowGradient<T, Tindex>::Group(const CpuPool& pool,
                                              const AccumulatorWindow<T, Tindex>& window,
                                              const MicroStepRows<T, Tindex>& step) {
  window_ = window;
  step_ = step;
  held_ = static_cast<int64_t>(*window.row_count);
  absl::Status status = CheckCount(held_, window.num_rows);
  if (!status.ok()) return status;
  ids_ = HeldThenStep(window.row_ids, held_, step.indices, step.num_indices);
  status = GroupIds(pool, ids_, held_, window.num_rows, &groups_);
  if (!status.ok()) return status;
  const int64_t num_groups = groups_.num_unique();
  const std::vector<int64_t> order = AscendingOrder(groups_.rows(), num_groups, window.num_rows);
  rows_.resize(num_groups);
  first_.resize(num_groups);
  step_first_.resize(num_groups);
  // Per distinct row: its group's row and first position, the links up to
  // the step's first value.
  const Eigen::TensorOpCost chain_cost(6.0 * sizeof(int64_t), 3.0 * sizeof(int64_t), 10.0);
  ForEachItem(pool, num_groups, chain_cost, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t group = order[u];
      rows_[u] = groups_.rows()[group];
      int64_t p = first_[u] = groups_.first(group);
      while (p >= 0 && p < held_) p = groups_.next(p);
      step_first_[u] = p < 0 ? -1 : p - held_;
    }
  });
  return absl::OkStatus();
}

template <typename T, typename Tindex>
void WindowGradient<T, Tindex>::Take(const CpuPool& pool, T steps, int64_t* rows, T* average) {
  const int64_t dim = row_size();
  ForEachItem(pool, num_rows(), RowCost<T>(dim), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      if (u + kPrefetchSpansMedium < end) PrefetchRow(u + kPrefetchSpansMedium);
      rows[u] = this->rows()[u];
      TakeRow(u, steps, average + u * dim);
    }
  });
  Applied();
}

#define TF_OPT_OPS_INSTANTIATE_INDEX(T, Tindex)                                              \
  template absl::Status SparseAccumulateRows<T, Tindex>(                                     \
      const CpuPool&, const AccumulatorWindow<T, Tindex>&, const MicroStepRows<T, Tindex>&); \
  template class WindowGradient<T, Tindex>;
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
