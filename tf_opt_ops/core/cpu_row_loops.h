// The CPU kernels' loops: work split over a thread pool (cpu_pool.h: the
// intra-op pool of an OpKernel, XLA's for a custom call), one prefetching loop
// over the touched spans of the tables, and the grouping and summing of
// duplicate gradient rows. The per-element math they run is
// optimizer_math.h's. Why: see docs/design.md, "One training step".
#ifndef TF_OPT_OPS_CORE_CPU_ROW_LOOPS_H_
#define TF_OPT_OPS_CORE_CPU_ROW_LOOPS_H_

#include <array>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "tf_opt_ops/core/errors.h"
#include "tf_opt_ops/core/optimizer_math.h"
#include "tf_opt_ops/core/row_groups.h"

namespace tf_opt_ops {

// Updates that move less than this run on the calling thread: waking a pool
// thread costs more than such an update takes on one core.
constexpr double kInlineBytes = 1 << 20;

// Runs fn(begin, end) over [0, n): inline for small work, otherwise split over
// the pool with `cost` per item.
template <typename F>
void ForEachItem(const CpuPool& pool, int64_t n, const Eigen::TensorOpCost& cost, F&& fn) {
  if (n * (cost.bytes_loaded() + cost.bytes_stored()) < kInlineBytes) {
    fn(int64_t{0}, n);
    return;
  }
  pool.ParallelFor(n, cost, std::forward<F>(fn));
}

// Touched rows are scattered over tables far larger than the caches, so the
// hardware prefetcher cannot guess the next one: the span loop asks for the
// spans kAhead ahead while it works on the current one. The distance grows as
// spans narrow, so that about as many cache lines are in flight (narrow rows
// gain from a longer distance, wide ones do not). A compile-time distance: one
// read at run time cost more than it saved. The measurements: docs/benchmarks.md,
// "Measurements behind the design".
constexpr int64_t kPrefetchSpansNarrow = 16;  // spans of <= 64 bytes per table
constexpr int64_t kPrefetchSpansMedium = 8;   // spans of <= 128 bytes per table
constexpr int64_t kPrefetchSpans = 6;         // wider spans

// Prefetches `bytes` from `p` for writing, one cache line at a time.
inline void PrefetchForWrite(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, /*rw=*/1, /*locality=*/3);
}

// A table the span loop prefetches: span k covers `length(k)` elements from
// element `offset(k)`, of `element_bytes` each; a table holding one value per
// `per_value` elements (row-wise v: one per row) covers its share of them.
struct SpanTable {
  const void* data;
  int64_t element_bytes;
  int64_t per_value;
};
template <typename T>
SpanTable TableOf(T* data, int64_t per_value = 1) {
  return SpanTable{data, static_cast<int64_t>(sizeof(T)), per_value};
}

template <int64_t kAhead, typename Offset, typename Length, typename F>
void ForEachSpanAhead(int64_t begin, int64_t end, std::initializer_list<SpanTable> tables,
                      Offset offset, Length length, F&& fn) {
  for (int64_t k = begin; k < end; ++k) {
    if (k + kAhead < end) {
      const int64_t ahead = offset(k + kAhead);
      const int64_t count = length(k + kAhead);
      for (const SpanTable& table : tables) {
        const int64_t values =
            table.per_value == 1 ? count : (count + table.per_value - 1) / table.per_value;
        PrefetchForWrite(
            static_cast<const char*>(table.data) + ahead / table.per_value * table.element_bytes,
            values * table.element_bytes);
      }
    }
    fn(k, offset(k));
  }
}

// The one loop over touched spans, for every CPU kernel: calls
// fn(k, offset(k)) for k in [begin, end), where span k is the `length(k)`
// elements from `offset(k)` in each of `tables` (a row of a sparse update,
// a block of a dense one), prefetching the spans ahead (distance by the
// width of the first table's first span: all are as wide, but a dense
// variable's last).
template <typename Offset, typename Length, typename F>
void ForEachSpan(int64_t begin, int64_t end, std::initializer_list<SpanTable> tables, Offset offset,
                 Length length, F&& fn) {
  if (begin >= end) return;
  const int64_t span_bytes = length(begin) * tables.begin()->element_bytes;
  if (span_bytes <= 64) {
    ForEachSpanAhead<kPrefetchSpansNarrow>(begin, end, tables, offset, length, fn);
  } else if (span_bytes <= 128) {
    ForEachSpanAhead<kPrefetchSpansMedium>(begin, end, tables, offset, length, fn);
  } else {
    ForEachSpanAhead<kPrefetchSpans>(begin, end, tables, offset, length, fn);
  }
}

// Groups the `n` indices by row after checking each is in [0, num_rows), on
// the pool for large batches.
template <typename Tindex>
absl::Status GroupRows(const CpuPool& pool, const Tindex* indices, int64_t n, int64_t num_rows,
                       RowGroups* groups) {
  // Per work item: RowGroups::kChunk indices read, a few passes each.
  const Eigen::TensorOpCost cost(4.0 * RowGroups::kChunk * sizeof(Tindex),
                                 2.0 * RowGroups::kChunk * sizeof(int64_t),
                                 20.0 * RowGroups::kChunk);
  const auto parallel_for = [&pool, &cost](int64_t count, const auto& fn) {
    pool.ParallelFor(count, cost, fn);
  };
  const int64_t bad = groups->Build(indices, n, num_rows, parallel_for);
  if (bad >= 0) return IndexOutOfRange(bad, static_cast<int64_t>(indices[bad]), num_rows);
  return absl::OkStatus();
}

// Gradient rows as a row loop reads them, row u at `rows + u * dim`: a work
// item takes a Reader() and calls it with each row it updates (ScaledGradRows
// has the same interface).
template <typename G>
struct PlainGradRows {
  const G* rows;
  int64_t dim;

  PlainGradRows Reader() const { return *this; }
  const G* operator()(int64_t u) const { return rows + u * dim; }
};

// Gradient rows of T read scaled (GradScale, ScaledGradValue): each work
// item's Reader scales the row it is asked for into a buffer of its own, in
// the compute type, where the row loop then reads it from cache. So the scale
// costs no pass over the rows in memory, and the row loops themselves (which
// read `const C*` rows as they read duplicate-summed ones) stay as they are.
template <typename T>
class ScaledGradRows {
 public:
  using C = ComputeT<T>;

  ScaledGradRows(const T* rows, int64_t dim, const GradScale<C>& scale)
      : rows_(rows), dim_(dim), scale_(scale) {}

  class RowReader {
   public:
    explicit RowReader(const ScaledGradRows& rows) : rows_(rows), buffer_(rows.dim_) {}

    const C* operator()(int64_t u) {
      const T* g = rows_.rows_ + u * rows_.dim_;
      // The scale's divide and clip are fixed per call: a branch per row, not per
      // element.
      VisitGradScaling(rows_.scale_, [&](auto divide, auto clips) {
        ScaleGradRow<T, decltype(divide)::value, decltype(clips)::value>(
            g, rows_.dim_, rows_.scale_, buffer_.data());
      });
      return buffer_.data();
    }

   private:
    const ScaledGradRows& rows_;
    std::vector<C> buffer_;
  };

  RowReader Reader() const { return RowReader(*this); }

 private:
  const T* rows_;
  int64_t dim_;
  GradScale<C> scale_;
};

// The gradient of each unique row, as a row-major [num_unique, dim] array:
// the caller's grad itself when there are no duplicates (read scaled, where
// `scale` has a count), otherwise the duplicate-summed rows (in the compute
// type C, each value scaled before it is added) in a temporary owned here
// (heap memory: a custom call has no OpKernelContext to allocate from).
template <typename T>
class SummedGradRows {
 public:
  using C = ComputeT<T>;

  absl::Status Init(const CpuPool& pool, const RowGroups& groups, const T* grad, int64_t dim,
                    const GradScale<C>& scale) {
    grad_ = grad;
    dim_ = dim;
    scale_ = scale;
    if (!groups.has_duplicates()) return absl::OkStatus();
    // Cache-line aligned, as TensorFlow's allocator gives it; the size a
    // multiple of 64 and not 0, as std::aligned_alloc requires.
    const size_t bytes = static_cast<size_t>(groups.num_unique() * dim) * sizeof(C);
    summed_.reset(static_cast<C*>(std::aligned_alloc(64, bytes / 64 * 64 + 64)));
    if (summed_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory summing the gradient rows of duplicate indices (", bytes, " bytes)"));
    }
    C* out = summed_.get();
    const auto sum_groups = [&](int64_t begin, int64_t end, auto value_of) {
      for (int64_t u = begin; u < end; ++u) {
        C* row = out + u * dim;
        int64_t p = groups.first(u);
        const T* g = grad + p * dim;
        for (int64_t j = 0; j < dim; ++j) row[j] = value_of(g[j]);
        for (p = groups.next(p); p >= 0; p = groups.next(p)) {
          g = grad + p * dim;
          for (int64_t j = 0; j < dim; ++j) row[j] += value_of(g[j]);
        }
      }
    };
    ForEachItem(pool, groups.num_unique(),
                Eigen::TensorOpCost(2.0 * dim * sizeof(T), dim * sizeof(C), dim),
                [&](int64_t begin, int64_t end) {
                  if (!scale.changes_values()) {
                    sum_groups(begin, end, [](const T& g) { return Load<C>(g); });
                  } else {
                    VisitGradScaling(scale, [&](auto divide, auto clips) {
                      sum_groups(begin, end, [scale](const T& g) {
                        return ScaledGradValue<T, decltype(divide)::value, decltype(clips)::value>(
                            Load<C>(g), scale);
                      });
                    });
                  }
                });
    return absl::OkStatus();
  }

  // Calls f(rows) with the rows: a PlainGradRows of `const T` or `const C`,
  // or a ScaledGradRows.
  template <typename F>
  void Visit(F&& f) const {
    if (summed_ != nullptr) {
      f(PlainGradRows<C>{summed_.get(), dim_});
    } else if (!scale_.changes_values()) {
      f(PlainGradRows<T>{grad_, dim_});
    } else {
      f(ScaledGradRows<T>(grad_, dim_, scale_));
    }
  }

 private:
  struct Free {
    void operator()(C* p) const { std::free(p); }
  };

  const T* grad_ = nullptr;
  int64_t dim_ = 0;
  GradScale<C> scale_;
  std::unique_ptr<C, Free> summed_;
};

// MovingAverageDecay of the rows one thread works on, remembered by the
// number of steps a row missed (the last one seen of each value modulo
// kDecayCacheSize): a row's decay is a pow, which cost as much as a fifth of
// the row loop, and the rows of a step missed far fewer distinct counts than
// there are rows. The same function of the same count: the same bits. (The
// size at namespace scope: a static member would be a weak symbol, which the
// per-level copies of cpu_kernels.cc cannot keep local.)
constexpr uint32_t kDecayCacheSize = 256;
template <typename T, typename C>
class MovingAverageDecayCache {
 public:
  explicit MovingAverageDecayCache(const MovingAverageStep<C>& step) : step_(step) {
    missed_.fill(-1);
  }

  C operator()(int32_t synced) {
    const uint32_t missed = static_cast<uint32_t>(step_.count) - static_cast<uint32_t>(synced);
    const uint32_t slot = missed % kDecayCacheSize;
    if (missed_[slot] != missed) {
      missed_[slot] = missed;
      decay_[slot] = MovingAverageDecay<T, C>(step_, synced);
    }
    return decay_[slot];
  }

  int32_t count() const { return step_.count; }

 private:
  const MovingAverageStep<C> step_;
  std::array<int64_t, kDecayCacheSize> missed_;  // -1: empty
  std::array<C, kDecayCacheSize> decay_;
};

// Brings one row's average (`n` elements) up to date from the row's value in
// var, which has not changed since *synced, and stamps *synced with the
// step's count: the row step of every lazy moving average on the CPU.
template <typename T, typename C>
void CatchUpAverageRow(MovingAverageDecayCache<T, C>& decay_of, T* average, const T* var, int64_t n,
                       int32_t* synced) {
  MovingAverageRow<T, C>(average, var, n, decay_of(*synced));
  *synced = decay_of.count();
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_ROW_LOOPS_H_
