// Where the CPU row loops (cpu_row_loops.h) run their parallel work. An
// OpKernel hands them TensorFlow's intra-op pool; an XLA custom call
// (xla_cpu_targets.cc) the pool XLA runs it with. The loops see only this
// interface, so both run the very same code. Why: see docs/design.md, "XLA".
#ifndef TF_OPT_OPS_CORE_CPU_POOL_H_
#define TF_OPT_OPS_CORE_CPU_POOL_H_

#ifndef EIGEN_USE_THREADS
#error "define EIGEN_USE_THREADS before including any header (TensorFlow kernel idiom)"
#endif

#include <cstdint>
#include <functional>

#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_opt_ops {

class CpuPool {
 public:
  virtual ~CpuPool() = default;

  // Runs fn(begin, end) over disjoint ranges that cover [0, n), on any
  // threads, and returns once all have run. `cost` is one item's cost: it
  // decides how many threads the work is worth.
  virtual void ParallelFor(int64_t n, const Eigen::TensorOpCost& cost,
                           const std::function<void(int64_t, int64_t)>& fn) const = 0;
};

// An OpKernel's pool: TensorFlow's intra-op threads (ctx->eigen_cpu_device()).
class EigenCpuPool final : public CpuPool {
 public:
  explicit EigenCpuPool(const Eigen::ThreadPoolDevice& device) : device_(device) {}

  void ParallelFor(int64_t n, const Eigen::TensorOpCost& cost,
                   const std::function<void(int64_t, int64_t)>& fn) const override {
    device_.parallelFor(n, cost, fn);
  }

 private:
  const Eigen::ThreadPoolDevice& device_;
};

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_POOL_H_
