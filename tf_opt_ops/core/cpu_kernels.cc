// The CPU updates of cpu_kernels.h, instantiated for every variable and index
// type of the ops, in the namespace of the instruction-set level this copy is
// compiled for (TF_OPT_OPS_CPU_ISA_NAMESPACE, set by the build with the
// level's -m flags; see cpu_isa.h).
#define EIGEN_USE_THREADS  // before any Eigen header: the loops run on a thread pool

#include "tf_opt_ops/core/cpu_kernels.h"

#include <algorithm>
#include <mutex>
#include <type_traits>
#include <vector>

#include "tf_opt_ops/core/cpu_row_loops.h"

#ifndef TF_OPT_OPS_CPU_ISA_NAMESPACE
#error "compile with -DTF_OPT_OPS_CPU_ISA_NAMESPACE=<level> (see tf_opt_ops/BUILD)"
#endif

namespace tf_opt_ops {
namespace cpu {
namespace TF_OPT_OPS_CPU_ISA_NAMESPACE {
namespace {

constexpr int64_t kBlock = 4096;  // elements per parallel work item of the dense Clippy op

// Calls f(std::integral_constant<bool, stochastic>{}), or with false where the
// slot type S holds every compute value exactly (nothing to round).
template <typename S, typename F>
void WithRounding(bool stochastic, F&& f) {
  if constexpr (HalfKindOf<S>::value != HalfKind::kNone) {
    if (stochastic) {
      f(std::true_type{});
      return;
    }
  }
  f(std::false_type{});
}

// Nothing to do before a span's ratio (ClippyTwoPasses' `before_ratio`).
struct NothingBeforeRatio {
  void operator()(int64_t, int64_t) const {}
};

// No moving average kept by ClippyTwoPasses' update pass (its `average`).
struct NoAverage {};

// The moving average that ClippyTwoPasses' update pass keeps (the averaged
// ops): span k is table row rows[k], whose average is brought up to date from
// the row's value before its update, where the pass reads that row anyway.
template <typename T>
struct SpanAverage {
  const LazyAverage<T>& lazy;
  const int64_t* rows;
};

// Clippy's two passes over `count` spans in parallel: span k covers
// `length(k)` elements of var/accum from `offset(k)` (the flat index of the
// first, which keys the accumulator's rounding noise) and of the gradient
// rows `grad` (a PlainGradRows or ScaledGradRows: a work item's Reader()
// gives span k's). The first pass calls `before_ratio(k, end)` (`end`:
// the end of k's work item) before span k's ratio, which may write the
// span's gradient first; the second catches up span k's moving average
// (a SpanAverage `average`) before its update. Returns the scale.
template <typename T, typename A, typename GradRows, typename Offset, typename Length,
          typename BeforeRatio = NothingBeforeRatio, typename Average = NoAverage>
ComputeT<T> ClippyTwoPasses(const CpuPool& pool, T* var, A* accum, const GradRows& grad,
                            int64_t count, int64_t span, Offset offset, Length length,
                            const ClippyStep<ComputeT<T>>& step,
                            BeforeRatio before_ratio = BeforeRatio{}, Average average = Average{}) {
  using C = ComputeT<T>;
  constexpr bool kAveraged = !std::is_same_v<Average, NoAverage>;
  std::mutex mu;
  C min_ratio = C(1);
  C scale = C(1);
  const double bytes = span * (2.0 * sizeof(T) + sizeof(A));
  // With the average, the update pass also reads and writes it and synced.
  const double average_bytes = kAveraged ? span * sizeof(T) + sizeof(int32_t) : 0.0;
  WithRounding<A>(step.stochastic_rounding, [&](auto stochastic) {
    constexpr bool kStochastic = decltype(stochastic)::value;
    ForEachItem(pool, count, Eigen::TensorOpCost(bytes, 0, 15.0 * span),
                [&](int64_t begin, int64_t end) {
                  C local = C(1);
                  auto grad_row = grad.Reader();
                  ForEachSpan(begin, end, {TableOf(var), TableOf(accum)}, offset, length,
                              [&](int64_t k, int64_t o) {
                                before_ratio(k, end);
                                local = ClippyRatioRow<kStochastic>(var + o, accum + o, grad_row(k),
                                                                    length(k), o, step, local);
                              });
                  std::lock_guard<std::mutex> lock(mu);
                  min_ratio = NanMin<C>(min_ratio, local);
                });
    scale = ClippyScale<C>(min_ratio);
    ForEachItem(
        pool, count,
        Eigen::TensorOpCost(bytes + average_bytes,
                            span * (1.0 * sizeof(T) + sizeof(A)) + average_bytes,
                            (kAveraged ? 25.0 : 15.0) * span),
        [&](int64_t begin, int64_t end) {
          auto grad_row = grad.Reader();
          const auto apply = [&](int64_t k, int64_t o) {
            ClippyApplyRow<kStochastic>(var + o, accum + o, grad_row(k), length(k), o, scale, step);
          };
          if constexpr (kAveraged) {
            const LazyAverage<T>& lazy = average.lazy;
            MovingAverageDecayCache<T, C> decay_of(lazy.step);
            ForEachSpan(
                begin, end,
                {TableOf(var), TableOf(accum), TableOf(lazy.average), TableOf(lazy.synced, span)},
                offset, length, [&](int64_t k, int64_t o) {
                  CatchUpAverageRow<T>(decay_of, lazy.average + o, var + o, length(k),
                                       lazy.synced + average.rows[k]);
                  apply(k, o);
                });
          } else {
            ForEachSpan(begin, end, {TableOf(var), TableOf(accum)}, offset, length, apply);
          }
        });
  });
  return scale;
}

// The touched rows of a sparse update: the distinct rows of its indices,
// each one's summed gradient row, and where each lies in the tables.
template <typename T>
struct TouchedRows {
  template <typename Tindex>
  absl::Status Init(const CpuPool& pool, const SparseGrad<T, Tindex>& grad) {
    dim = grad.row_size;
    absl::Status status =
        GroupRows<Tindex>(pool, grad.indices, grad.num_indices, grad.num_rows, &groups);
    if (!status.ok()) return status;
    return grad_rows.Init(pool, groups, grad.grad, dim, grad.scale);
  }

  // The offset of distinct row u in the tables (64-bit: tables past 2^31
  // elements) and its length.
  auto offset() const {
    return [rows = groups.rows(), dim = dim](int64_t u) { return rows[u] * dim; };
  }
  auto length() const {
    return [dim = dim](int64_t) { return dim; };
  }

  RowGroups groups;
  SummedGradRows<T> grad_rows;
  int64_t dim = 0;
};

// Sparse Clippy's two passes over the distinct rows of `grad`, the update
// pass keeping `average_of(rows)` (NoAverage, or the SpanAverage of the
// distinct rows `rows`); writes the scale to `*scale`.
template <typename T, typename A, typename Tindex, typename AverageOf>
absl::Status SparseClippyTwoPasses(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var,
                                   A* accum, const ClippyStep<ComputeT<T>>& step,
                                   ComputeT<T>* scale, AverageOf average_of) {
  TouchedRows<T> touched;
  absl::Status status = touched.Init(pool, grad);
  if (!status.ok()) return status;
  touched.grad_rows.Visit([&](const auto& g) {
    *scale = ClippyTwoPasses(pool, var, accum, g, touched.groups.num_unique(), touched.dim,
                             touched.offset(), touched.length(), step, NothingBeforeRatio{},
                             average_of(touched.groups.rows()));
  });
  return absl::OkStatus();
}

// One row of lazy Adam with its moving average (the averaged ops): table row
// `row` at offset `o`, its average first brought up to date from its value
// before the update, then lazy Adam with gradient row `g`.
template <typename T, typename G>
void AveragedLazyAdamRow(MovingAverageDecayCache<T, ComputeT<T>>& decay_of,
                         const LazyAverage<T>& lazy, int64_t row, int64_t o, T* var, T* m, T* v,
                         const G* g, int64_t dim, const AdamStep<ComputeT<T>>& step) {
  CatchUpAverageRow<T>(decay_of, lazy.average + o, var + o, dim, lazy.synced + row);
  LazyAdamRow<false, T, T>(var + o, m + o, v + o, g, dim, step, RowNoise{});
}

// The row loop of the lazy Adam window ops over a grouped `window`, in the
// rows' address order: each distinct row u's average taken
// (WindowGradient::TakeRow, which zeroes its accumulator row) into a buffer of
// the thread, as op ResourceSparseTakeWindowGradient writes it, then
// `update(u, o, average)` on the row at offset o of `tables`, `update` made
// by `make_update()` once per work item (so its state, a decay cache, is the
// item's own); then the window's count zeroed.
template <typename T, typename Tindex, typename MakeUpdate>
void TakeWindowRows(const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps,
                    const Eigen::TensorOpCost& cost, std::initializer_list<SpanTable> tables,
                    MakeUpdate make_update) {
  const int64_t dim = window.row_size();
  const int64_t* rows = window.rows();
  const auto offset = [rows, dim](int64_t u) { return rows[u] * dim; };
  const auto length = [dim](int64_t) { return dim; };
  ForEachItem(pool, window.num_rows(), cost, [&](int64_t begin, int64_t end) {
    std::vector<T> average(dim);
    auto update = make_update();
    ForEachSpan(begin, end, tables, offset, length, [&](int64_t u, int64_t o) {
      if (u + kPrefetchSpansMedium < end) window.PrefetchStepRow(u + kPrefetchSpansMedium);
      window.TakeRow(u, steps, average.data());
      update(u, o, static_cast<const T*>(average.data()));
    });
  });
  window.Applied();
}

}  // namespace

template <typename T, typename S, typename Tindex>
absl::Status SparseApplyLazyAdam(const CpuPool& pool, const SparseGrad<T, Tindex>& grad, T* var,
                                 S* m, S* v, const AdamStep<ComputeT<T>>& step,
                                 const AdamStateLayout& layout) {
  TouchedRows<T> touched;
  absl::Status status = touched.Init(pool, grad);
  if (!status.ok()) return status;
  const int64_t dim = touched.dim;
  const int64_t* rows = touched.groups.rows();
  const auto offset = touched.offset();
  const auto length = touched.length();
  const bool rowwise = layout.rowwise_second_moment;
  // Per row: read var, m, v, g; write var, m, v.
  const double v_bytes = rowwise ? sizeof(S) : dim * sizeof(S);
  const Eigen::TensorOpCost cost(dim * (2.0 * sizeof(T) + sizeof(S)) + v_bytes,
                                 dim * (1.0 * sizeof(T) + sizeof(S)) + v_bytes, 20.0 * dim);
  touched.grad_rows.Visit([&](const auto& g) {
    WithRounding<S>(layout.stochastic_rounding, [&](auto stochastic) {
      constexpr bool kStochastic = decltype(stochastic)::value;
      ForEachItem(pool, touched.groups.num_unique(), cost, [&](int64_t begin, int64_t end) {
        auto grad_row = g.Reader();
        if (rowwise) {
          ForEachSpan(begin, end, {TableOf(var), TableOf(m), TableOf(v, dim)}, offset, length,
                      [&](int64_t u, int64_t o) {
                        const RowNoise noise =
                            kStochastic ? RowNoiseOf(layout, rows[u]) : RowNoise{};
                        LazyAdamRowwiseRow<kStochastic, T, S>(var + o, m + o, v + rows[u],
                                                              grad_row(u), dim, step, noise);
                      });
        } else {
          ForEachSpan(begin, end, {TableOf(var), TableOf(m), TableOf(v)}, offset, length,
                      [&](int64_t u, int64_t o) {
                        const RowNoise noise =
                            kStochastic ? RowNoiseOf(layout, rows[u]) : RowNoise{};
                        LazyAdamRow<kStochastic, T, S>(var + o, m + o, v + o, grad_row(u), dim,
                                                       step, noise);
                      });
        }
      });
    });
  });
  return absl::OkStatus();
}

template <typename T, typename Tindex>
absl::Status SparseApplyLazyAdamAveraged(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                         T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step,
                                         const LazyAverage<T>& lazy) {
  using C = ComputeT<T>;
  TouchedRows<T> touched;
  absl::Status status = touched.Init(pool, grad);
  if (!status.ok()) return status;
  const int64_t dim = touched.dim;
  const int64_t* rows = touched.groups.rows();
  T* average = lazy.average;
  int32_t* synced = lazy.synced;
  // Per row: read var, m, v, average, g and synced; write all but g. The
  // average reads the var row the update then reads again, from cache.
  const Eigen::TensorOpCost cost(dim * 5.0 * sizeof(T) + sizeof(int32_t),
                                 dim * 4.0 * sizeof(T) + sizeof(int32_t), 30.0 * dim + 40.0);
  touched.grad_rows.Visit([&](const auto& g) {
    ForEachItem(pool, touched.groups.num_unique(), cost, [&](int64_t begin, int64_t end) {
      MovingAverageDecayCache<T, C> decay_of(lazy.step);
      auto grad_row = g.Reader();
      ForEachSpan(begin, end,
                  {TableOf(var), TableOf(m), TableOf(v), TableOf(average), TableOf(synced, dim)},
                  touched.offset(), touched.length(), [&](int64_t u, int64_t o) {
                    AveragedLazyAdamRow(decay_of, lazy, rows[u], o, var, m, v, grad_row(u), dim,
                                        step);
                  });
    });
  });
  return absl::OkStatus();
}

template <typename T, typename Tindex>
void SparseApplyLazyAdamWindow(const CpuPool& pool, WindowGradient<T, Tindex>& window, T steps,
                               T* var, T* m, T* v, const AdamStep<ComputeT<T>>& step) {
  const int64_t dim = window.row_size();
  // Per row: read var, m, v, the accumulator and the step's values; write all
  // but the values.
  const Eigen::TensorOpCost cost(dim * 5.0 * sizeof(T), dim * 4.0 * sizeof(T), 25.0 * dim);
  TakeWindowRows(pool, window, steps, cost,
                 {TableOf(var), TableOf(m), TableOf(v), TableOf(window.accumulator())}, [&] {
                   return [&](int64_t, int64_t o, const T* average) {
                     LazyAdamRow<false, T, T>(var + o, m + o, v + o, average, dim, step,
                                              RowNoise{});
                   };
                 });
}

template <typename T, typename Tindex>
void SparseApplyLazyAdamWindowAveraged(const CpuPool& pool, WindowGradient<T, Tindex>& window,
                                       T steps, T* var, T* m, T* v,
                                       const AdamStep<ComputeT<T>>& step,
                                       const LazyAverage<T>& lazy) {
  const int64_t dim = window.row_size();
  const int64_t* rows = window.rows();
  // Per row: read var, m, v, average, the accumulator, the step's values and
  // synced; write all but the values.
  const Eigen::TensorOpCost cost(dim * 6.0 * sizeof(T) + sizeof(int32_t),
                                 dim * 5.0 * sizeof(T) + sizeof(int32_t), 35.0 * dim + 40.0);
  TakeWindowRows(pool, window, steps, cost,
                 {TableOf(var), TableOf(m), TableOf(v), TableOf(window.accumulator()),
                  TableOf(lazy.average), TableOf(lazy.synced, dim)},
                 [&] {
                   return [&, decay_of = MovingAverageDecayCache<T, ComputeT<T>>(lazy.step)](
                              int64_t u, int64_t o, const T* average) mutable {
                     AveragedLazyAdamRow(decay_of, lazy, rows[u], o, var, m, v, average, dim, step);
                   };
                 });
}

template <typename T, typename A>
ComputeT<T> ApplyClippyAdagrad(const CpuPool& pool, int64_t size, const T* grad, T* var, A* accum,
                               const ClippyStep<ComputeT<T>>& step) {
  // The dense variable as contiguous blocks, whatever its shape.
  const auto offset = [](int64_t k) { return k * kBlock; };
  const auto length = [size](int64_t k) { return std::min(kBlock, size - k * kBlock); };
  return ClippyTwoPasses(pool, var, accum, PlainGradRows<T>{grad, kBlock},
                         (size + kBlock - 1) / kBlock, kBlock, offset, length, step);
}

template <typename T, typename A, typename Tindex>
absl::Status SparseApplyClippyAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                      T* var, A* accum, const ClippyStep<ComputeT<T>>& step,
                                      ComputeT<T>* scale) {
  return SparseClippyTwoPasses(pool, grad, var, accum, step, scale,
                               [](const int64_t*) { return NoAverage{}; });
}

template <typename T, typename Tindex>
absl::Status SparseApplyClippyAdagradAveraged(const CpuPool& pool,
                                              const SparseGrad<T, Tindex>& grad, T* var, T* accum,
                                              const ClippyStep<ComputeT<T>>& step,
                                              const LazyAverage<T>& lazy, ComputeT<T>* scale) {
  return SparseClippyTwoPasses(pool, grad, var, accum, step, scale, [&lazy](const int64_t* rows) {
    return SpanAverage<T>{lazy, rows};
  });
}

template <typename T, typename Tindex>
ComputeT<T> SparseApplyClippyAdagradWindow(const CpuPool& pool, WindowGradient<T, Tindex>& window,
                                           T steps, T* var, T* accum,
                                           const ClippyStep<ComputeT<T>>& step, T* average) {
  const int64_t dim = window.row_size();
  const int64_t* rows = window.rows();
  // The window's average, as op ResourceSparseTakeWindowGradient writes it:
  // the first pass takes each row just before its ratio, and the second reads
  // it again (the scale needs every row's ratio first, so no buffer of the
  // thread would do).
  const auto offset = [rows, dim](int64_t u) { return rows[u] * dim; };
  const auto length = [dim](int64_t) { return dim; };
  const ComputeT<T> scale =
      ClippyTwoPasses(pool, var, accum, PlainGradRows<T>{average, dim}, window.num_rows(), dim,
                      offset, length, step, [&](int64_t u, int64_t end) {
                        if (u + kPrefetchSpansMedium < end)
                          window.PrefetchRow(u + kPrefetchSpansMedium);
                        window.TakeRow(u, steps, average + u * dim);
                      });
  window.Applied();
  return scale;
}

template <typename T, typename Tindex>
absl::Status SparseApplyRowwiseAdagrad(const CpuPool& pool, const SparseGrad<T, Tindex>& grad,
                                       T* var, ComputeT<T>* accum,
                                       const RowwiseAdagradStep<ComputeT<T>>& step) {
  using C = ComputeT<T>;
  TouchedRows<T> touched;
  absl::Status status = touched.Init(pool, grad);
  if (!status.ok()) return status;
  const int64_t dim = touched.dim;
  const int64_t* rows = touched.groups.rows();
  const auto offset = touched.offset();
  const auto length = touched.length();
  // Per row: read var (twice with L2, from cache), g and the accumulator; write var and it.
  const Eigen::TensorOpCost cost(dim * 2.0 * sizeof(T) + sizeof(C),
                                 dim * 1.0 * sizeof(T) + sizeof(C), 6.0 * dim);
  touched.grad_rows.Visit([&](const auto& g) {
    WithRounding<T>(step.stochastic_rounding, [&](auto stochastic) {
      constexpr bool kStochastic = decltype(stochastic)::value;
      ForEachItem(pool, touched.groups.num_unique(), cost, [&](int64_t begin, int64_t end) {
        auto grad_row = g.Reader();
        ForEachSpan(begin, end, {TableOf(var), TableOf(accum, dim)}, offset, length,
                    [&](int64_t u, int64_t o) {
                      RowwiseAdagradRow<kStochastic, T>(var + o, accum + rows[u], grad_row(u), dim,
                                                        step, rows[u]);
                    });
      });
    });
  });
  return absl::OkStatus();
}

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

TF_OPT_OPS_CPU_KERNEL_TYPES(TF_OPT_OPS_CPU_KERNELS_INSTANTIATE)
TF_OPT_OPS_CPU_TABLE_TYPES(TF_OPT_OPS_CPU_TABLE_INSTANTIATE)

}  // namespace TF_OPT_OPS_CPU_ISA_NAMESPACE
}  // namespace cpu
}  // namespace tf_opt_ops
