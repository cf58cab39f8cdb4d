// Clippy Adagrad on the GPU: pass 1 reduces the per-variable scale on the
// device (per-block NanMin partials, then one block), pass 2 applies it. The
// scale never leaves the device, so the two passes need no host round trip.
#include <cuda_runtime.h>

#include <type_traits>

#include "tf_opt_ops/core/gpu_kernel_util.cu.h"
#include "tf_opt_ops/core/gpu_launchers.h"
#include "tf_opt_ops/core/optimizer_math.h"

namespace tf_opt_ops {
namespace gpu {
namespace {

// ------------------------------------------------------------------ dense

template <typename T, typename A>
__global__ void __launch_bounds__(kThreadsPerBlock)
    DenseRatioKernel(int64_t size, const T* __restrict__ grad, const T* __restrict__ var,
                     A* __restrict__ accum, ClippyStep<ComputeT<T>> step, double* partials) {
  using C = ComputeT<T>;
  C local = C(1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += stride) {
    local = NanMin<C>(local,
                      ClippyRatioElement<T, A, C>(var + i, accum + i, Load<C>(grad[i]), step, i));
  }
  local = BlockNanMin<C>(local);
  if (threadIdx.x == 0) partials[blockIdx.x] = static_cast<double>(local);
}

template <typename T, typename A>
__global__ void __launch_bounds__(kThreadsPerBlock)
    DenseApplyKernel(int64_t size, const T* __restrict__ grad, T* __restrict__ var,
                     A* __restrict__ accum, ClippyStep<ComputeT<T>> step,
                     const ComputeT<T>* __restrict__ scale) {
  using C = ComputeT<T>;
  const C s = *scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += stride) {
    ClippyApplyElement<T, A, C>(var + i, accum + i, Load<C>(grad[i]), s, step, i);
  }
}

// ----------------------------------------------------------------- sparse
// Both passes visit each distinct row once (one thread group per row), with
// the duplicate-summed gradient; pass 1 may write accum (standard
// accumulator update), which pass 2 then reads, as on the CPU.
// These kernels have the dense ones' shape on purpose: only the walk over
// the elements differs, and each kernel states its walk in place; what is
// done per element is one piece of code, ClippyRatioElement and
// ClippyApplyElement (optimizer_math.h), shared with the CPU kernels too.

template <typename T, typename A>
__global__ void __launch_bounds__(kThreadsPerBlock)
    SparseRatioKernel(SortedRows rows, const T* __restrict__ grad, const T* __restrict__ var,
                      A* __restrict__ accum, ClippyStep<ComputeT<T>> step) {
  using C = ComputeT<T>;
  const int64_t dim = rows.row_size;
  C local = C(1);
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;  // 64-bit: tables past 2^31 elements
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      local = NanMin<C>(local, ClippyRatioElement<T, A, C>(var + offset + j, accum + offset + j, g,
                                                           step, offset + j));
    }
  });
  local = BlockNanMin<C>(local);
  if (threadIdx.x == 0 && threadIdx.y == 0) rows.partials[blockIdx.x] = static_cast<double>(local);
}

template <typename T, typename A>
__global__ void __launch_bounds__(kThreadsPerBlock)
    SparseApplyKernel(SortedRows rows, const T* __restrict__ grad, T* __restrict__ var,
                      A* __restrict__ accum, ClippyStep<ComputeT<T>> step,
                      const ComputeT<T>* __restrict__ scale) {
  using C = ComputeT<T>;
  const C s = *scale;
  const int64_t dim = rows.row_size;
  ForEachDistinctRow(rows, [&](int64_t row, int64_t begin, int64_t end) {
    const int64_t offset = row * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const C g = SummedGrad<C>(rows, grad, begin, end, j);
      ClippyApplyElement<T, A, C>(var + offset + j, accum + offset + j, g, s, step, offset + j);
    }
  });
}

template <typename C>
__global__ void SetOneKernel(C* scale) {
  *scale = C(1);
}

// Calls f(TypeTag<T>(), TypeTag<A>()) for the table type `dtype` and the
// accumulator type `accum_dtype`: the table's own, or for half, bfloat16 and
// float tables any of those (the V2 ops).
template <typename F>
int DispatchTableAndAccumulator(DType dtype, DType accum_dtype, F&& f) {
  return DispatchDType(dtype, [&](auto type_tag) {
    return DispatchDType(accum_dtype, [&](auto accum_tag) {
      using T = typename decltype(type_tag)::type;
      using A = typename decltype(accum_tag)::type;
      if constexpr (std::is_same_v<T, double> != std::is_same_v<A, double>) {
        return static_cast<int>(cudaErrorInvalidValue);
      } else {
        return f(type_tag, accum_tag);
      }
    });
  });
}

}  // namespace

size_t DenseScratchBytes(DType dtype) {
  (void)dtype;
  return kPartialBytes;
}

int ApplyClippyAdagrad(DType dtype, DType accum_dtype, int64_t size, const void* grad, void* var,
                       void* accum, const ClippyStep<double>& step, void* scale, void* scratch,
                       size_t scratch_bytes, void* stream) {
  if (scratch_bytes < kPartialBytes) return static_cast<int>(cudaErrorInvalidValue);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  double* partials = static_cast<double*>(scratch);
  return DispatchTableAndAccumulator(dtype, accum_dtype, [&](auto tag, auto accum_tag) {
    using T = typename decltype(tag)::type;
    using A = typename decltype(accum_tag)::type;
    using C = ComputeT<T>;
    const ClippyStep<C> c_step = CastStep<C>(step);
    const int blocks = BlocksFor(size, kThreadsPerBlock);
    DenseRatioKernel<T, A><<<blocks, kThreadsPerBlock, 0, s>>>(
        size, static_cast<const T*>(grad), static_cast<const T*>(var), static_cast<A*>(accum),
        c_step, partials);
    FinalScaleKernel<C><<<1, kThreadsPerBlock, 0, s>>>(partials, blocks, static_cast<C*>(scale));
    DenseApplyKernel<T, A><<<blocks, kThreadsPerBlock, 0, s>>>(
        size, static_cast<const T*>(grad), static_cast<T*>(var), static_cast<A*>(accum), c_step,
        static_cast<const C*>(scale));
    return static_cast<int>(cudaGetLastError());
  });
}

int SparseApplyClippyAdagrad(DType dtype, DType accum_dtype, const SparseRows& rows,
                             const void* grad, void* var, void* accum,
                             const ClippyStep<double>& step, void* scale, void* scratch,
                             size_t scratch_bytes, void* stream, IndexError* index_error) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  SortedRows sorted;
  const int err = PrepareSortedRows(rows, scratch, scratch_bytes, s, index_error, &sorted);
  if (err != 0 || index_error->position >= 0) return err;
  return DispatchTableAndAccumulator(dtype, accum_dtype, [&](auto type_tag, auto accum_tag) {
    using T = typename decltype(type_tag)::type;
    using A = typename decltype(accum_tag)::type;
    using C = ComputeT<T>;
    const ClippyStep<C> c_step = CastStep<C>(step);
    const RowLaunch launch = MakeRowLaunch(sorted.count, sorted.row_size);
    SparseRatioKernel<T, A><<<launch.grid, launch.block, 0, s>>>(
        sorted, static_cast<const T*>(grad), static_cast<const T*>(var), static_cast<A*>(accum),
        c_step);
    FinalScaleKernel<C>
        <<<1, kThreadsPerBlock, 0, s>>>(sorted.partials, launch.grid.x, static_cast<C*>(scale));
    SparseApplyKernel<T, A><<<launch.grid, launch.block, 0, s>>>(
        sorted, static_cast<const T*>(grad), static_cast<T*>(var), static_cast<A*>(accum), c_step,
        static_cast<const C*>(scale));
    return static_cast<int>(cudaGetLastError());
  });
}

int SetScaleToOne(DType dtype, void* scale, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kDouble) {
    SetOneKernel<double><<<1, 1, 0, s>>>(static_cast<double*>(scale));
  } else {
    SetOneKernel<float><<<1, 1, 0, s>>>(static_cast<float*>(scale));
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gpu
}  // namespace tf_opt_ops
