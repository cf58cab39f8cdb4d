// Per-element math of the fused optimizers, shared by the CPU and CUDA kernels.
// The update rules themselves are stated once, in the op registrations'
// documentation (lazy_adam_ops.cc, clippy_adagrad_ops.cc); this is their code.
//
// No TensorFlow or Eigen includes: the CUDA compiler compiles this header in
// the TF-free .cu.cc files, and the CPU kernels inline it into plain loops the
// compiler can vectorize. `T` is the stored type (float, double, Eigen::half,
// Eigen::bfloat16, __half, __nv_bfloat16); `C` is the compute type (float for
// every type except double), so half types only round when stored.
#ifndef TF_OPT_OPS_OPTIMIZER_MATH_H_
#define TF_OPT_OPS_OPTIMIZER_MATH_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define TF_OPT_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TF_OPT_OPS_HOST_DEVICE inline
#endif

#define TF_OPT_OPS_RESTRICT __restrict__

namespace tf_opt_ops {

// Compute type: double stays double, everything narrower computes in float.
template <typename T>
struct ComputeType {
  using type = float;
};
template <>
struct ComputeType<double> {
  using type = double;
};
template <typename T>
using ComputeT = typename ComputeType<T>::type;

template <typename C, typename T>
TF_OPT_OPS_HOST_DEVICE C Load(const T& x) {
  return static_cast<C>(x);
}
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE T Store(C x) {
  return static_cast<T>(x);
}

#if defined(__CUDACC__)
// CUDA's half types, spelled out rather than left to their conversion
// operators (which -D__CUDA_NO_HALF_CONVERSIONS__ removes). Stores round to
// nearest even, as Eigen::half and Eigen::bfloat16 do on the CPU.
template <>
TF_OPT_OPS_HOST_DEVICE float Load<float, __half>(const __half& x) {
  return __half2float(x);
}
template <>
TF_OPT_OPS_HOST_DEVICE __half Store<__half, float>(float x) {
  return __float2half_rn(x);
}
template <>
TF_OPT_OPS_HOST_DEVICE float Load<float, __nv_bfloat16>(const __nv_bfloat16& x) {
  return __bfloat162float(x);
}
template <>
TF_OPT_OPS_HOST_DEVICE __nv_bfloat16 Store<__nv_bfloat16, float>(float x) {
  return __float2bfloat16_rn(x);
}
#endif  // __CUDACC__

#if defined(__CUDA_ARCH__)
// Correctly rounded square roots on the GPU, as std::sqrt on the host, so
// both agree bit for bit. Spelled out: a plain float sqrt() is sqrt.approx
// under clang's CUDA (libdevice's choice without a precise-sqrt request).
__device__ __forceinline__ float SqrtRn(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ double SqrtRn(double x) { return __dsqrt_rn(x); }
#endif

// std:: overloads keep float in float on the host; CUDA's device overloads
// of fabs do the same on the GPU.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C Sqrt(C x) {
#if defined(__CUDA_ARCH__)
  return SqrtRn(x);
#else
  return std::sqrt(x);
#endif
}
template <typename C>
TF_OPT_OPS_HOST_DEVICE C Abs(C x) {
#if defined(__CUDA_ARCH__)
  return fabs(x);
#else
  return std::fabs(x);
#endif
}

// ---------------------------------------------------------------- lazy Adam
// Hyperparameters of one step, with the bias correction folded into lr_t the
// way TensorFlow's ApplyAdam does (see the ResourceSparseApplyLazyAdam doc).
template <typename C>
struct AdamStep {
  C lr_t;
  C beta1;
  C one_minus_beta1;
  C beta2;
  C one_minus_beta2;
  C epsilon;
};

// The one conversion of AdamStep between compute types: the OpKernels widen
// to double for the launchers, which narrow back (exactly) in the kernels.
template <typename To, typename From>
TF_OPT_OPS_HOST_DEVICE AdamStep<To> CastStep(const AdamStep<From>& s) {
  return AdamStep<To>{static_cast<To>(s.lr_t),
                      static_cast<To>(s.beta1),
                      static_cast<To>(s.one_minus_beta1),
                      static_cast<To>(s.beta2),
                      static_cast<To>(s.one_minus_beta2),
                      static_cast<To>(s.epsilon)};
}

template <typename C>
TF_OPT_OPS_HOST_DEVICE AdamStep<C> MakeAdamStep(C lr, C beta1, C beta2, C epsilon, C beta1_power,
                                                C beta2_power) {
  AdamStep<C> s;
  s.lr_t = lr * Sqrt<C>(C(1) - beta2_power) / (C(1) - beta1_power);
  s.beta1 = beta1;
  s.one_minus_beta1 = C(1) - beta1;
  s.beta2 = beta2;
  s.one_minus_beta2 = C(1) - beta2;
  s.epsilon = epsilon;
  return s;
}

// One element of one touched row; `g` is the (duplicate-summed) gradient.
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void LazyAdamElement(T* var, T* m, T* v, C g, const AdamStep<C>& s) {
  const C m_t = s.beta1 * Load<C>(*m) + s.one_minus_beta1 * g;
  const C v_t = s.beta2 * Load<C>(*v) + s.one_minus_beta2 * g * g;
  *m = Store<T>(m_t);
  *v = Store<T>(v_t);
  *var = Store<T>(Load<C>(*var) - s.lr_t * m_t / (Sqrt<C>(v_t) + s.epsilon));
}

// One touched row of `n` elements: a plain loop over restrict pointers that
// the compiler vectorizes (no per-row Eigen expressions). `G` is the stored
// gradient type, or the compute type for duplicate-summed rows.
template <typename T, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE void LazyAdamRow(T* TF_OPT_OPS_RESTRICT var, T* TF_OPT_OPS_RESTRICT m,
                                        T* TF_OPT_OPS_RESTRICT v, const G* TF_OPT_OPS_RESTRICT g,
                                        int64_t n, const AdamStep<C>& s) {
  for (int64_t j = 0; j < n; ++j) LazyAdamElement<T, C>(var + j, m + j, v + j, Load<C>(g[j]), s);
}

// ---------------------------------------------------------- Clippy Adagrad
// Two passes over the touched elements (see the ResourceApplyClippyAdagrad
// doc): the first finds the per-variable clipping scale (a min-reduction),
// the second applies the scaled update.
template <typename C>
struct ClippyStep {
  C lr;
  C epsilon;
  C variable_relative_threshold;
  C accumulator_relative_threshold;
  C absolute_threshold;
  bool clip_accumulator_update;
  bool use_standard_accumulator_update;
};

// The one conversion of ClippyStep between compute types (as CastStep above).
template <typename To, typename From>
TF_OPT_OPS_HOST_DEVICE ClippyStep<To> CastStep(const ClippyStep<From>& s) {
  return ClippyStep<To>{static_cast<To>(s.lr),
                        static_cast<To>(s.epsilon),
                        static_cast<To>(s.variable_relative_threshold),
                        static_cast<To>(s.accumulator_relative_threshold),
                        static_cast<To>(s.absolute_threshold),
                        s.clip_accumulator_update,
                        s.use_standard_accumulator_update};
}

// min() that keeps NaN: once a NaN ratio is seen the scale is NaN, as
// tf.reduce_min/tf.minimum give in TensorFlow Recommenders' ClippyAdagrad.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C NanMin(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  return b < a ? b : a;
}

// Pass 1 for one element, up to the ratio: sets max_delta and |delta|. With
// the standard accumulator update the accumulator is incremented here
// (before the step), so pass 2 must not add g^2 again. The standard-update
// flag is a template parameter (= s.use_standard_accumulator_update) so the
// conditional store leaves the loop.
template <bool kStandardUpdate, typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyRatioTerms(const T* var, T* accum, C g, const ClippyStep<C>& s,
                                             C* max_delta, C* abs_delta) {
  C a = Load<C>(*accum);
  if (kStandardUpdate) {
    *accum = Store<T>(a + g * g);
    a = Load<C>(*accum);  // pass 2 reads the stored (rounded) value too
  }
  const C p = C(1) / Sqrt<C>(a + s.epsilon);
  *abs_delta = Abs<C>(s.lr * g * p);
  *max_delta = s.variable_relative_threshold * Abs<C>(Load<C>(*var)) +
               s.accumulator_relative_threshold * p + s.absolute_threshold;
}

// max_delta / |delta|, or 1 when delta == 0 (NaN when delta is NaN).
template <typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatio(C max_delta, C abs_delta) {
  const C ratio = max_delta / abs_delta;
  return abs_delta == C(0) ? C(1) : ratio;
}

template <bool kStandardUpdate, typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioElement(const T* var, T* accum, C g, const ClippyStep<C>& s) {
  C max_delta, abs_delta;
  ClippyRatioTerms<kStandardUpdate, T, C>(var, accum, g, s, &max_delta, &abs_delta);
  return ClippyRatio<C>(max_delta, abs_delta);
}

// The same with the flag read at run time (the GPU kernels' form).
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioElement(const T* var, T* accum, C g, const ClippyStep<C>& s) {
  return s.use_standard_accumulator_update ? ClippyRatioElement<true, T, C>(var, accum, g, s)
                                           : ClippyRatioElement<false, T, C>(var, accum, g, s);
}

// Final scale from the reduced minimum ratio: min(1, ratio), NaN kept.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyScale(C min_ratio) {
  return NanMin<C>(C(1), min_ratio);
}

// Pass 2 for one element, with the scale of the whole variable.
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyApplyElement(T* var, T* accum, C g, C scale,
                                               const ClippyStep<C>& s) {
  const C a = Load<C>(*accum);
  const C p = C(1) / Sqrt<C>(a + s.epsilon);
  const C delta = s.lr * g * p;
  if (!s.use_standard_accumulator_update) {
    const C g_acc = s.clip_accumulator_update ? g * scale : g;
    *accum = Store<T>(a + g_acc * g_acc);
  }
  *var = Store<T>(Load<C>(*var) - delta * scale);
}

// Pass 1 over `n` contiguous elements: NanMin(min_ratio, every ratio).
// Host compilers run it as kLanes independent minima in a GCC vector, whose
// compares and selects compile to one vector instruction each; the terms of
// each ratio are computed in a plain loop first, so the divide and the
// delta == 0 select are vector operations too. (GCC will not vectorize a
// floating-point min reduction without fast-math, and with the lanes as
// arrays it left the loop scalar, or with a masked store and reload, many
// times slower than pass 2.) The NaN flag is kept apart, as NaN must win. Device
// code (which has no use for this row loop) gets the plain loop alone.
template <bool kStandardUpdate, typename T, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioRowImpl(const T* TF_OPT_OPS_RESTRICT var,
                                            T* TF_OPT_OPS_RESTRICT accum,
                                            const G* TF_OPT_OPS_RESTRICT g, int64_t n,
                                            const ClippyStep<C>& step, C min_ratio) {
  const ClippyStep<C> s = step;  // a local copy: no aliasing with the stores
  C m = min_ratio;
  bool nan = min_ratio != min_ratio;
  int64_t j = 0;
#if !defined(__CUDACC__)
  constexpr int kLanes = 8;
  typedef C Lanes __attribute__((vector_size(kLanes * sizeof(C))));
  Lanes lane_min = Lanes{} + min_ratio;
  Lanes lane_nan = Lanes{};  // 1 once a lane saw NaN
  for (; j + kLanes <= n; j += kLanes) {
    C max_delta[kLanes], abs_delta[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      ClippyRatioTerms<kStandardUpdate, T, C>(var + j + l, accum + j + l, Load<C>(g[j + l]), s,
                                              max_delta + l, abs_delta + l);
    }
    Lanes md, ad;
    __builtin_memcpy(&md, max_delta, sizeof(md));
    __builtin_memcpy(&ad, abs_delta, sizeof(ad));
    const Lanes r = ad == C(0) ? Lanes{} + C(1) : md / ad;  // ClippyRatio, lane-wise
    lane_min = r < lane_min ? r : lane_min;
    lane_nan = r == r ? lane_nan : Lanes{} + C(1);
  }
  for (int l = 0; l < kLanes; ++l) {
    m = lane_min[l] < m ? lane_min[l] : m;
    nan = nan || lane_nan[l] != C(0);
  }
#endif
  for (; j < n; ++j) {
    const C r = ClippyRatioElement<kStandardUpdate, T, C>(var + j, accum + j, Load<C>(g[j]), s);
    m = r < m ? r : m;
    nan = nan || r != r;
  }
  return nan ? C(NAN) : m;
}

template <typename T, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioRow(const T* TF_OPT_OPS_RESTRICT var,
                                        T* TF_OPT_OPS_RESTRICT accum,
                                        const G* TF_OPT_OPS_RESTRICT g, int64_t n,
                                        const ClippyStep<C>& s, C min_ratio) {
  return s.use_standard_accumulator_update
             ? ClippyRatioRowImpl<true, T, G, C>(var, accum, g, n, s, min_ratio)
             : ClippyRatioRowImpl<false, T, G, C>(var, accum, g, n, s, min_ratio);
}

// Pass 2 over `n` contiguous elements.
template <typename T, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyApplyRow(T* TF_OPT_OPS_RESTRICT var, T* TF_OPT_OPS_RESTRICT accum,
                                           const G* TF_OPT_OPS_RESTRICT g, int64_t n, C scale,
                                           const ClippyStep<C>& s) {
  for (int64_t j = 0; j < n; ++j)
    ClippyApplyElement<T, C>(var + j, accum + j, Load<C>(g[j]), scale, s);
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_OPTIMIZER_MATH_H_
