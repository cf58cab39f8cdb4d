// The CPU kernels' loops: work split over TensorFlow's intra-op pool, one
// prefetching loop over the touched spans of the tables, and the grouping and
// summing of duplicate gradient rows. The per-element math they run is
// optimizer_math.h's. Why: see docs/design.md, "One training step".
#ifndef TF_OPT_OPS_CPU_ROW_LOOPS_H_
#define TF_OPT_OPS_CPU_ROW_LOOPS_H_

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "tf_opt_ops/op_inputs.h"
#include "tf_opt_ops/optimizer_math.h"
#include "tf_opt_ops/row_groups.h"

namespace tf_opt_ops {

// Updates that move less than this run on the calling thread: waking a pool
// thread costs more than such an update takes on one core.
constexpr double kInlineBytes = 1 << 20;

// Runs fn(begin, end) over [0, n): inline for small work, otherwise split over
// TensorFlow's intra-op pool with `cost` per item.
template <typename F>
void ForEachItem(OpKernelContext* ctx, int64_t n, const Eigen::TensorOpCost& cost, F&& fn) {
  if (n * (cost.bytes_loaded() + cost.bytes_stored()) < kInlineBytes) {
    fn(int64_t{0}, n);
    return;
  }
  ctx->eigen_cpu_device().parallelFor(n, cost, std::forward<F>(fn));
}

// Touched rows are scattered over tables far larger than the caches, so the
// hardware prefetcher cannot guess the next one: the span loop asks for the
// spans kAhead ahead while it works on the current one. The distance grows as
// spans narrow, so that about as many cache lines are in flight: 64-byte rows
// (16 floats) run ~1.3x faster at 16 ahead than at 6, while from 256-byte
// rows on 4 to 16 ahead measure the same. A compile-time distance: one read
// at run time cost more than it saved.
constexpr int64_t kPrefetchSpansNarrow = 16;  // spans of <= 64 bytes per table
constexpr int64_t kPrefetchSpansMedium = 8;   // spans of <= 128 bytes per table
constexpr int64_t kPrefetchSpans = 6;         // wider spans

// Prefetches `bytes` from `p` for writing, one cache line at a time.
inline void PrefetchForWrite(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, /*rw=*/1, /*locality=*/3);
}

template <int64_t kAhead, typename T, typename Offset, typename Length, typename F>
void ForEachSpanAhead(int64_t begin, int64_t end, std::initializer_list<T*> tables, Offset offset,
                      Length length, F&& fn) {
  for (int64_t k = begin; k < end; ++k) {
    if (k + kAhead < end) {
      const int64_t ahead = offset(k + kAhead);
      const int64_t bytes = length(k + kAhead) * static_cast<int64_t>(sizeof(T));
      for (T* table : tables) PrefetchForWrite(table + ahead, bytes);
    }
    fn(k, offset(k));
  }
}

// The one loop over touched spans, for every CPU kernel: calls
// fn(k, offset(k)) for k in [begin, end), where span k is the `length(k)`
// elements from `offset(k)` in each of `tables` (a row of a sparse update,
// a block of a dense one), prefetching the spans ahead (distance by the
// width of the first span: all are as wide, but a dense variable's last).
template <typename T, typename Offset, typename Length, typename F>
void ForEachSpan(int64_t begin, int64_t end, std::initializer_list<T*> tables, Offset offset,
                 Length length, F&& fn) {
  if (begin >= end) return;
  const int64_t span_bytes = length(begin) * static_cast<int64_t>(sizeof(T));
  if (span_bytes <= 64) {
    ForEachSpanAhead<kPrefetchSpansNarrow>(begin, end, tables, offset, length, fn);
  } else if (span_bytes <= 128) {
    ForEachSpanAhead<kPrefetchSpansMedium>(begin, end, tables, offset, length, fn);
  } else {
    ForEachSpanAhead<kPrefetchSpans>(begin, end, tables, offset, length, fn);
  }
}

// Groups `indices` by row after checking each is in [0, num_rows), on the
// intra-op pool for large batches.
template <typename Tindex>
absl::Status GroupRows(OpKernelContext* ctx, const Tensor& indices, int64_t num_rows,
                       RowGroups* groups) {
  const auto flat = indices.flat<Tindex>();
  // Per work item: RowGroups::kChunk indices read, a few passes each.
  const Eigen::TensorOpCost cost(4.0 * RowGroups::kChunk * sizeof(Tindex),
                                 2.0 * RowGroups::kChunk * sizeof(int64_t),
                                 20.0 * RowGroups::kChunk);
  const auto parallel_for = [ctx, &cost](int64_t count, const auto& fn) {
    ctx->eigen_cpu_device().parallelFor(count, cost, fn);
  };
  const int64_t bad = groups->Build(flat.data(), flat.size(), num_rows, parallel_for);
  if (bad >= 0) return IndexOutOfRange(bad, static_cast<int64_t>(flat(bad)), num_rows);
  return absl::OkStatus();
}

// The gradient of each unique row, as a row-major [num_unique, dim] array:
// the caller's grad itself when there are no duplicates, otherwise the
// duplicate-summed rows (in the compute type C) in a temporary owned here.
template <typename T>
class SummedGradRows {
 public:
  using C = ComputeT<T>;

  absl::Status Init(OpKernelContext* ctx, const RowGroups& groups, const T* grad, int64_t dim) {
    grad_ = grad;
    summed_used_ = groups.has_duplicates();
    if (!summed_used_) return absl::OkStatus();
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DataTypeToEnum<C>::v(),
                                          TensorShape({groups.num_unique(), dim}), &summed_));
    C* out = summed_.flat<C>().data();
    const auto sum_groups = [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        C* row = out + u * dim;
        int64_t p = groups.first(u);
        const T* g = grad + p * dim;
        for (int64_t j = 0; j < dim; ++j) row[j] = Load<C>(g[j]);
        for (p = groups.next(p); p >= 0; p = groups.next(p)) {
          g = grad + p * dim;
          for (int64_t j = 0; j < dim; ++j) row[j] += Load<C>(g[j]);
        }
      }
    };
    ForEachItem(ctx, groups.num_unique(),
                Eigen::TensorOpCost(2.0 * dim * sizeof(T), dim * sizeof(C), dim), sum_groups);
    return absl::OkStatus();
  }

  // Calls f(rows) with a `const T*` or `const C*` pointer to the rows.
  template <typename F>
  void Visit(F&& f) const {
    if (summed_used_) {
      f(summed_.flat<C>().data());
    } else {
      f(grad_);
    }
  }

 private:
  const T* grad_ = nullptr;
  bool summed_used_ = false;
  Tensor summed_;
};

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CPU_ROW_LOOPS_H_
