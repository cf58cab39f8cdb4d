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

// The error of the first id outside [0, num_rows) of the window's ids (the
// `held` ids, then a micro-step's `n` indices), or OK where all are in it.
template <typename Tindex>
absl::Status CheckIds(const Tindex* held_ids, int64_t held, const Tindex* indices, int64_t n,
                      int64_t num_rows) {
  for (int64_t p = 0; p < held + n; ++p) {
    const int64_t row = static_cast<int64_t>(p < held ? held_ids[p] : indices[p - held]);
    if (row >= 0 && row < num_rows) continue;
    if (p < held) {
      return InvalidArgument("row_ids[", p, "] = ", row, " is not in [0, ", num_rows,
                             "): the window's row ids must name rows of the accumulator.");
    }
    return IndexOutOfRange(p - held, row, num_rows);
  }
  return absl::OkStatus();
}

// Groups `ids` (the first `held` the window's held ids, then a micro-step's
// indices), failing on the first id outside [0, num_rows).
template <typename Tindex>
absl::Status GroupIds(const CpuPool& pool, const std::vector<Tindex>& ids, int64_t held,
                      int64_t num_rows, RowGroups* groups) {
  const int64_t count = static_cast<int64_t>(ids.size());
  const absl::Status status = GroupRows<Tindex>(pool, ids.data(), count, num_rows, groups);
  if (status.ok()) return status;
  const absl::Status bad = CheckIds(ids.data(), held, ids.data() + held, count - held, num_rows);
  return bad.ok() ? status : bad;
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

// The window's ids (the `held` ids, then the step's `n` indices) sorted by
// row, a row's positions in input order: sorted id k is row rows[k] at
// position positions[k]; fails as CheckIds on an id outside [0, num_rows). A
// radix sort, least significant digit first, of each row packed with its
// position in one word: a pass per 11 bits of the row (a pass's counts stay
// in L1), two for a million rows, where a comparison sort takes log2(count)
// passes; the passes keep the order of equal rows, so their positions stay
// ascending. One pass validates, packs and counts every digit; the last
// scatter unpacks. Where row and position need more than 64 bits (2^40 rows
// and more), a stable comparison sort.
template <typename Tindex>
absl::Status SortIdsByRow(const Tindex* held_ids, int64_t held, const Tindex* indices, int64_t n,
                          int64_t num_rows, std::vector<int64_t>* rows,
                          std::vector<int64_t>* positions) {
  const int64_t count = held + n;
  const auto row_at = [&](int64_t p) {
    return static_cast<int64_t>(p < held ? held_ids[p] : indices[p - held]);
  };
  rows->resize(count);
  positions->resize(count);
  const int position_bits = BitsBelow(count);
  const int row_bits = BitsBelow(num_rows);
  if (position_bits + row_bits > 64) {
    const absl::Status status = CheckIds(held_ids, held, indices, n, num_rows);
    if (!status.ok()) return status;
    std::iota(positions->begin(), positions->end(), int64_t{0});
    std::stable_sort(positions->begin(), positions->end(),
                     [&](int64_t a, int64_t b) { return row_at(a) < row_at(b); });
    for (int64_t k = 0; k < count; ++k) (*rows)[k] = row_at((*positions)[k]);
    return absl::OkStatus();
  }
  constexpr int kMaxDigitBits = 11;
  const int passes = (row_bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int digit_bits = passes > 0 ? (row_bits + passes - 1) / passes : 0;
  const int64_t digits = int64_t{1} << digit_bits;
  const uint64_t digit_mask = static_cast<uint64_t>(digits) - 1;
  const auto digit = [&](uint64_t key, int pass) {
    return key >> (position_bits + pass * digit_bits) & digit_mask;
  };
  // starts[pass * digits + d]: first the count of digit d in that pass, then
  // where its keys go.
  std::vector<int64_t> starts(passes * digits, 0);
  std::vector<uint64_t> keys(count);
  for (int64_t p = 0; p < count; ++p) {
    const int64_t row = row_at(p);
    if (row < 0 || row >= num_rows) return CheckIds(held_ids, held, indices, n, num_rows);
    keys[p] = static_cast<uint64_t>(row) << position_bits | static_cast<uint64_t>(p);
    for (int pass = 0; pass < passes; ++pass) ++starts[pass * digits + digit(keys[p], pass)];
  }
  for (int pass = 0; pass < passes; ++pass) {
    const auto begin = starts.begin() + pass * digits;
    std::exclusive_scan(begin, begin + digits, begin, int64_t{0});
  }
  const uint64_t position_mask = (uint64_t{1} << position_bits) - 1;
  const auto unpack = [&](int64_t k, uint64_t key) {
    (*rows)[k] = static_cast<int64_t>(key >> position_bits);
    (*positions)[k] = static_cast<int64_t>(key & position_mask);
  };
  if (passes == 0) {
    for (int64_t k = 0; k < count; ++k) unpack(k, keys[k]);
    return absl::OkStatus();
  }
  std::vector<uint64_t> sorted(passes > 1 ? count : 0);
  for (int pass = 0; pass < passes; ++pass) {
    int64_t* start = starts.data() + pass * digits;
    if (pass + 1 < passes) {
      for (const uint64_t key : keys) sorted[start[digit(key, pass)]++] = key;
      keys.swap(sorted);
    } else {
      for (const uint64_t key : keys) unpack(start[digit(key, pass)]++, key);
    }
  }
  return absl::OkStatus();
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
absl::Status WindowGradient<T, Tindex>::Group(const CpuPool& /*pool*/,
                                              const AccumulatorWindow<T, Tindex>& window,
                                              const MicroStepRows<T, Tindex>& step) {
  window_ = window;
  step_ = step;
  held_ = static_cast<int64_t>(*window.row_count);
  absl::Status status = CheckCount(held_, window.num_rows);
  if (!status.ok()) return status;
  const int64_t n = step.num_indices;
  status = SortIdsByRow(window.row_ids, held_, step.indices, n, window.num_rows, &sorted_rows_,
                        &sorted_positions_);
  if (!status.ok()) return status;
  // Per distinct row (a run of equal sorted rows): its row, its first
  // position, and where in the sorted ids the step's first value of it is.
  for (auto* per_row : {&rows_, &first_, &step_first_}) {
    per_row->clear();
    per_row->reserve(held_ + n);
  }
  for (int64_t k = 0; k < held_ + n; ++k) {
    if (k == 0 || sorted_rows_[k] != sorted_rows_[k - 1]) {
      rows_.push_back(sorted_rows_[k]);
      first_.push_back(sorted_positions_[k]);
      step_first_.push_back(-1);
    }
    if (step_first_.back() < 0 && sorted_positions_[k] >= held_) step_first_.back() = k;
  }
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
