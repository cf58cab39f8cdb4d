// Per-element math of the fused optimizers, shared by the CPU and CUDA kernels.
// The update rules themselves are stated once, in the op registrations'
// documentation (lazy_adam_ops.cc, clippy_adagrad_ops.cc); this is their code.
//
// No TensorFlow or Eigen includes: the CUDA compiler compiles this header in
// the TF-free .cu.cc files, and the CPU kernels inline it into plain loops the
// compiler can vectorize. `T` is the stored type (float, double, Eigen::half,
// Eigen::bfloat16, __half, __nv_bfloat16); `C` is the compute type (float for
// every type except double), so half types only round when stored.
#ifndef TF_OPT_OPS_CORE_OPTIMIZER_MATH_H_
#define TF_OPT_OPS_CORE_OPTIMIZER_MATH_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define TF_OPT_OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TF_OPT_OPS_HOST_DEVICE inline
#endif

#define TF_OPT_OPS_RESTRICT __restrict__

// A row loop's whole body inlined, so that the loop vectorizes: in a translation
// unit as large as cpu_kernels.cc (every op x type x level), GCC's inliner
// left the slots' rounding (StoreSlot) out of line, a call per element.
// Device code inlines everything already.
#if defined(__CUDACC__)
#define TF_OPT_OPS_ROW_LOOP TF_OPT_OPS_HOST_DEVICE
#else
#define TF_OPT_OPS_ROW_LOOP inline __attribute__((flatten))
#endif

// Two vectors per iteration of a row's element loop on the avx512 level
// (cpu_isa.h). LazyAdamRow: GCC's one-vector AVX-512 loop with the weight
// decay ran 1.2x as long as without it on tables far larger than the caches,
// the two-vector one 1.03x; at the 256-bit levels two vectors made bfloat16
// rows 9% (bare) to 17% (with the decay) slower (docs/benchmarks.md, "W op").
// MovingAverageRow: the EMA step 4-8% shorter at 1M x 128.
#if defined(__AVX512F__) && !defined(__CUDACC__)
#define TF_OPT_OPS_AVX512_ROW_UNROLL _Pragma("GCC unroll 2")
#else
#define TF_OPT_OPS_AVX512_ROW_UNROLL
#endif

// Eigen's 16-bit types, for Load/Store and HalfKindOf below.
namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

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

#if defined(__F16C__) && !defined(__CUDACC__)
// float16 conversions in hardware (F16C: the avx2 and avx512 levels of
// cpu_isa.h), in loops the compiler vectorizes. They round to nearest even
// as Eigen's software conversions (the avx level's) do, but keep a NaN's
// payload and quiet a signaling NaN, where Eigen's keep a float16 NaN's bits
// as they are and store every float NaN as the quiet NaN with its sign: NaNs
// are selected apart, so that every level gives Eigen's bits
// (tests/ops/test_cpu_isa.py compares all 65536 float16 values).
inline float Float16BitsToFloat(uint16_t h) {
  _Float16 f;
  __builtin_memcpy(&f, &h, sizeof(f));
  const uint32_t nan_bits = ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13);
  float nan;
  __builtin_memcpy(&nan, &nan_bits, sizeof(nan));
  return (h & 0x7FFFu) > 0x7C00u ? nan : static_cast<float>(f);
}
inline uint16_t FloatToFloat16Bits(float x) {
  const _Float16 f = static_cast<_Float16>(x);
  uint16_t bits;
  __builtin_memcpy(&bits, &f, sizeof(bits));
  uint32_t x_bits;
  __builtin_memcpy(&x_bits, &x, sizeof(x_bits));
  const uint16_t nan = static_cast<uint16_t>(((x_bits >> 16) & 0x8000u) | 0x7E00u);
  return x != x ? nan : bits;
}
#define TF_OPT_OPS_F16C_CONVERSIONS 1
#endif

template <typename C, typename T>
TF_OPT_OPS_HOST_DEVICE C Load(const T& x) {
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
  if constexpr (std::is_same_v<T, Eigen::half>) {
    return static_cast<C>(Float16BitsToFloat(x.x));  // x: Eigen's bits (a copy would not vectorize)
  }
#endif
  return static_cast<C>(x);
}
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE T Store(C x) {
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
  if constexpr (std::is_same_v<T, Eigen::half>) {
    T out;
    out.x = FloatToFloat16Bits(static_cast<float>(x));
    return out;
  }
#endif
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
// With `decays`, each touched row is first decayed (decoupled weight decay,
// see DecayedWeight) by weight_decay and decay_lr, the op's lr.
template <typename C>
struct AdamStep {
  C lr_t;
  C beta1;
  C one_minus_beta1;
  C beta2;
  C one_minus_beta2;
  C epsilon;
  bool decays;
  C weight_decay;
  C decay_lr;
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
                      static_cast<To>(s.epsilon),
                      s.decays,
                      static_cast<To>(s.weight_decay),
                      static_cast<To>(s.decay_lr)};
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
  s.decays = false;
  s.weight_decay = C(0);
  s.decay_lr = C(0);
  return s;
}

// The step with decoupled weight decay `weight_decay` on its touched rows.
template <typename C>
TF_OPT_OPS_HOST_DEVICE AdamStep<C> WithWeightDecay(AdamStep<C> s, C weight_decay, C lr) {
  s.decays = true;
  s.weight_decay = weight_decay;
  s.decay_lr = lr;
  return s;
}

// ------------------------------------------------------ light slot state
// A lazy Adam update may keep its slots lighter than its table: in another
// type (slot_dtype, with stochastic rounding when that type is 16-bit) and
// with v per row instead of per element (FBGEMM's partial row-wise Adam).
// The state's layout is fixed per variable; the rounding noise is keyed by
// (seed, step, row, column), so a rerun, the CPU and the GPU round alike.
struct AdamStateLayout {
  bool rowwise_second_moment = false;  // v holds one value per row of var
  bool stochastic_rounding = false;    // 16-bit slots round stochastically
  uint64_t seed = 0;
  int64_t step = 0;  // the 1-based step t
};

// Which 16-bit format a slot type is (none: float and double, which hold a
// float compute value exactly), for the CUDA types and for Eigen's. Eigen's
// are only declared here (this header includes no Eigen); FromBits, a
// template, is compiled where the type is complete.
enum class HalfKind { kNone, kFloat16, kBfloat16 };
template <typename S>
struct HalfKindOf {
  static constexpr HalfKind value = HalfKind::kNone;
};
#if defined(__CUDACC__)
template <>
struct HalfKindOf<__half> {
  static constexpr HalfKind value = HalfKind::kFloat16;
};
template <>
struct HalfKindOf<__nv_bfloat16> {
  static constexpr HalfKind value = HalfKind::kBfloat16;
  static TF_OPT_OPS_HOST_DEVICE __nv_bfloat16 FromBits(uint16_t bits) {
    return __ushort_as_bfloat16(bits);
  }
};
#endif
template <>
struct HalfKindOf<Eigen::half> {
  static constexpr HalfKind value = HalfKind::kFloat16;
};
template <>
struct HalfKindOf<Eigen::bfloat16> {
  static constexpr HalfKind value = HalfKind::kBfloat16;
  template <typename B = Eigen::bfloat16>
  static B FromBits(uint16_t bits) {
    B out;
    __builtin_memcpy(static_cast<void*>(&out), &bits, sizeof(out));  // trivially copyable
    return out;
  }
};

#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
// float16 row loops convert 8 elements per F16C instruction: GCC converts
// _Float16 one element at a time (it has no vector _Float16 below
// AVX512-FP16), which left those loops scalar. A row loop loads 8 slot values
// into Float16Staged, runs the element's math on them (Load reads the float;
// StoreSlot rounds as for float16, up to the final conversion to nearest
// even) and stores them with StoreFloat16x8, which is that conversion.
struct Float16Staged {
  float x;
  Float16Staged() = default;
  explicit Float16Staged(float value) : x(value) {}
  explicit operator float() const { return x; }
  explicit operator double() const { return x; }
};
template <>
struct HalfKindOf<Float16Staged> {
  static constexpr HalfKind value = HalfKind::kFloat16;
};
constexpr int kFloat16Lanes = 8;

// Float16BitsToFloat and FloatToFloat16Bits of 8 elements (`H`: Eigen::half),
// a NaN among them taking the one-at-a-time path for its bits; that path is
// kept out of line, so that the flattened row loops stay tight.
template <typename H>
__attribute__((noinline, cold)) void LoadFloat16x8Nans(const H* h, Float16Staged* out) {
  for (int l = 0; l < kFloat16Lanes; ++l) out[l].x = Float16BitsToFloat(h[l].x);
}
template <typename H>
__attribute__((noinline, cold)) void StoreFloat16x8Nans(const Float16Staged* in, H* h) {
  for (int l = 0; l < kFloat16Lanes; ++l) h[l].x = FloatToFloat16Bits(in[l].x);
}
template <typename H>
inline void LoadFloat16x8(const H* h, Float16Staged* out) {
  static_assert(sizeof(H) == 2 && sizeof(Float16Staged) == 4, "16-bit slots, float staging");
  const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  _mm256_storeu_ps(reinterpret_cast<float*>(out), x);
  if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) LoadFloat16x8Nans(h, out);
}
template <typename H>
inline void StoreFloat16x8(const Float16Staged* in, H* h) {
  const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float*>(in));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) StoreFloat16x8Nans(in, h);
}

// X, or the staging type where X is float16.
template <typename X>
using Float16StagedT =
    std::conditional_t<HalfKindOf<std::remove_cv_t<X>>::value == HalfKind::kFloat16, Float16Staged,
                       X>;

// kFloat16Lanes elements of a row of X for a staged row loop: loaded into
// floats (LoadFloat16x8) and stored back (Store) where X is float16, else the
// row's own elements.
template <typename X, bool kStaged = !std::is_same_v<Float16StagedT<X>, X>>
class Float16Stage {
 public:
  explicit Float16Stage(X* row) : row_(row) {}
  X* at(int l) { return row_ + l; }
  void Store() {}

 private:
  X* row_;
};
template <typename X>
class Float16Stage<X, true> {
 public:
  explicit Float16Stage(X* row) : row_(row) { LoadFloat16x8(row, lanes_); }
  Float16Staged* at(int l) { return lanes_ + l; }
  void Store() { StoreFloat16x8(lanes_, row_); }

 private:
  X* row_;
  Float16Staged lanes_[kFloat16Lanes];
};

// Whether a row loop over these types stages kFloat16Lanes elements at a time.
template <typename... X>
constexpr bool kAnyFloat16 = (... ||
                              (HalfKindOf<std::remove_cv_t<X>>::value == HalfKind::kFloat16));
#endif

TF_OPT_OPS_HOST_DEVICE uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  __builtin_memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}
TF_OPT_OPS_HOST_DEVICE float BitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  __builtin_memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

// SplitMix64's finalizer and a 32-bit finalizer (Chris Wellons' lowbias32):
// the counter-based hash behind the rounding noise.
TF_OPT_OPS_HOST_DEVICE uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
TF_OPT_OPS_HOST_DEVICE uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// The noise keys of one row: one per slot (m: 0, v: 1), from the step's
// layout; the noise of element j is Mix32(key + j). Computed once per row.
struct RowNoise {
  uint32_t m;
  uint32_t v;
};
TF_OPT_OPS_HOST_DEVICE uint32_t SlotRowKey(const AdamStateLayout& layout, uint64_t slot,
                                           int64_t row) {
  const uint64_t step_key = Mix64(Mix64(layout.seed + slot) ^ static_cast<uint64_t>(layout.step));
  return static_cast<uint32_t>(Mix64(step_key ^ static_cast<uint64_t>(row)) >> 32);
}
TF_OPT_OPS_HOST_DEVICE RowNoise RowNoiseOf(const AdamStateLayout& layout, int64_t row) {
  return RowNoise{SlotRowKey(layout, 0, row), SlotRowKey(layout, 1, row)};
}

// a where `condition` holds, else b, through masks: a ternary on a value the
// row loop does not change (a hyperparameter rounded to float16) became a
// branch, which kept the loop from vectorizing.
TF_OPT_OPS_HOST_DEVICE uint32_t SelectBits(bool condition, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (a & mask) | (b & ~mask);
}

// x rounded to nearest even in S, as Store rounds; for bfloat16 from the bits
// themselves (NaN quiet, with its sign, as Eigen's conversion), so that no
// conversion's NaN branch keeps a row loop from vectorizing.
template <typename S>
TF_OPT_OPS_HOST_DEVICE S StoreNearest(float x) {
  if constexpr (HalfKindOf<S>::value == HalfKind::kBfloat16) {
    const uint32_t bits = FloatBits(x);
    const uint32_t nearest = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t nan = ((bits >> 16) & 0x8000u) | 0x7FC0u;
    return HalfKindOf<S>::FromBits(static_cast<uint16_t>(x != x ? nan : nearest));
  } else {
    return Store<S>(x);
  }
}

// x rounded to the 16-bit type S stochastically: to the neighbour of larger
// magnitude with probability (|x| - lower) / (upper - lower), taking that
// probability from the 32 random bits `noise`; the result is exact in S.
// Values S cannot hold finitely (NaN, infinities, beyond S's largest)
// round to nearest, as Store does. Branch-free, so that row loops vectorize:
// adding random bits below the kept ones carries into them with exactly the
// wanted probability, and leaves the sign alone (|x| below S's largest
// cannot carry into it).
template <typename S>
TF_OPT_OPS_HOST_DEVICE S StoreStochastic(float x, uint32_t noise) {
  constexpr HalfKind kind = HalfKindOf<S>::value;
  if constexpr (kind == HalfKind::kNone) {
    return Store<S>(x);
  } else {
    const uint32_t bits = FloatBits(x);
    const float a = Abs<float>(x);
    if constexpr (kind == HalfKind::kBfloat16) {
      // Beyond the largest bfloat16 (and NaN): to nearest, as StoreNearest (whose bits are
      // selected here, not its result: a select of integers keeps the loop vectorized).
      const uint32_t stochastic = (bits + (noise >> 16)) >> 16;
      const uint32_t nearest = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      const uint32_t nan = ((bits >> 16) & 0x8000u) | 0x7FC0u;
      const uint32_t out = x != x ? nan : (a < 3.38953139e38f ? stochastic : nearest);
      return HalfKindOf<S>::FromBits(static_cast<uint16_t>(out));
    } else {
      // float16 normals keep 11 significant bits; its subnormals are multiples of
      // 2^-24, rounded up with probability the fraction of 2^-24 (24 random bits).
      const float normal = BitsFloat((bits + (noise >> 19)) & ~0x1FFFu);
      const float q = (a < 6.103515625e-05f ? a : 0.0f) * 16777216.0f;
#if defined(__CUDA_ARCH__)
      const float whole = floorf(q);
#else
      const float whole = std::floor(q);
#endif
      // Below 2^24: through int32, which vectorizes (AVX2 has no float-to-uint32).
      const uint32_t fraction =
          static_cast<uint32_t>(static_cast<int32_t>((q - whole) * 16777216.0f));
      const float up = (noise >> 8) < fraction ? 1.0f : 0.0f;
      const float subnormal =
          BitsFloat(FloatBits((whole + up) * 5.9604644775390625e-08f) | (bits & 0x80000000u));
      const float rounded = a >= 6.103515625e-05f ? normal : subnormal;
      return Store<S>(a < 65504.0f ? rounded : x);  // largest float16
    }
  }
}

// A slot value stored: rounded to nearest, or stochastically with the noise
// of element j of the row whose key is `key`.
template <bool kStochastic, typename S, typename C>
TF_OPT_OPS_HOST_DEVICE S StoreSlot(C x, uint32_t key, int64_t j) {
  if constexpr (kStochastic) {
    return StoreStochastic<S>(static_cast<float>(x), Mix32(key + static_cast<uint32_t>(j)));
  } else if constexpr (std::is_same_v<C, float>) {
    return StoreNearest<S>(x);
  } else {
    return Store<S>(x);
  }
}

// x stored as T, rounded to nearest even (as Store; bfloat16 from the bits).
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE T StoreRounded(C x) {
  if constexpr (std::is_same_v<T, C>) {
    return x;
  } else {
    return StoreNearest<T>(x);
  }
}

// x rounded to the nearest float16 (ties to even; from 65520 up, infinity),
// as a float: what a store to float16 and a load give, a NaN as the quiet NaN
// of its sign (Eigen's conversions), in integer and float operations that a
// row loop vectorizes (a float16 conversion outside the staged loops is one
// value at a time).
TF_OPT_OPS_HOST_DEVICE float RoundToFloat16(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits ^ sign;
  // Below float16's least normal, 2^-14: a multiple of 2^-24, the spacing of
  // floats in [0.5, 1), so adding 0.5 rounds the magnitude and taking it away
  // is exact.
  const float subnormal = (BitsFloat(magnitude) + 0.5f) - 0.5f;
  // Normal: 10 of the 23 fraction bits kept, to nearest even (a carry may
  // reach the exponent).
  const uint32_t normal = (magnitude + 0xFFFu + ((magnitude >> 13) & 1u)) & ~0x1FFFu;
  uint32_t rounded = SelectBits(magnitude < 0x38800000u, FloatBits(subnormal), normal);
  rounded = SelectBits(rounded >= 0x47800000u, 0x7F800000u, rounded);   // 2^16 and up, inf
  rounded = SelectBits(magnitude > 0x7F800000u, 0x7FC00000u, rounded);  // NaN
  return BitsFloat(sign | rounded);
}

// x rounded to T and back to the compute type C (nothing to do for C == T).
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C RoundTo(C x) {
  if constexpr (HalfKindOf<T>::value == HalfKind::kFloat16 && std::is_same_v<C, float>) {
    return RoundToFloat16(x);
  } else {
    return Load<C>(StoreRounded<T, C>(x));
  }
}

// The scale of a sparse op's gradient values (its grad_scale inputs,
// grad_scale_interface.h), in the compute type C: `count` 0 leaves them as
// they are; 1 reads each value g as g * numerator (Keras' global_clipnorm);
// 2 as (g * numerator) / denominator (Keras' clipnorm). Where it `clips`
// (Keras' clipvalue), the scaled value is then clipped to [clip_min,
// clip_max].
template <typename C>
struct GradScale {
  int count = 0;
  C numerator = C(1);
  C denominator = C(1);
  // The denominator's inverse where dividing by it is multiplying by that
  // (ExactInverse), else 0.
  C inverse_denominator = C(0);
  bool clips = false;
  C clip_min = -std::numeric_limits<C>::infinity();
  C clip_max = std::numeric_limits<C>::infinity();

  // Whether the values are read other than as they are.
  TF_OPT_OPS_HOST_DEVICE bool changes_values() const { return count > 0 || clips; }
};

// The inverse of `d` where x / d == x * inverse for every x in C, else 0: d
// a power of two (of either sign) whose inverse is a normal C. Then both are
// the exact quotient, rounded once (the same under flush-to-zero too), and
// the multiply costs a fraction of the divide. A loss scale (Keras 3's
// LossScaleOptimizer divides the gradient by it) is a power of two.
template <typename C>
C ExactInverse(C d) {
  int exponent = 0;
  const C fraction = std::frexp(d, &exponent);  // 0, infinite or NaN for those
  if (fraction != C(0.5) && fraction != C(-0.5)) return C(0);
  const C inverse = C(1) / d;
  return std::isnormal(inverse) ? inverse : C(0);
}

// How a scale's value is divided: not (count < 2), by the denominator, or by
// a multiply with its exact inverse (GradScale::inverse_denominator).
enum class GradDivide { kNone, kByDenominator, kByInverse };

// Gradient value g of the table's type T (read into C) scaled as Keras scales
// it in T: each operation rounded to T (C holds each exactly, and a 16-bit
// result of a float operation rounded to T is the correctly rounded T
// result), so the op reads the bits a tensor of the scaled values would hold.
// kDivide: how (GradDivide). With kClips, then clipped as tf.clip_by_value
// clips (the bounds are values of T: no rounding): its minimum with
// clip_max, then the maximum of that with clip_min, each keeping a NaN and,
// on a tie, the value itself.
template <typename T, GradDivide kDivide, bool kClips, typename C>
TF_OPT_OPS_HOST_DEVICE C ScaledGradValue(C g, const GradScale<C>& s) {
  C value = RoundTo<T, C>(g * s.numerator);
  if constexpr (kDivide == GradDivide::kByDenominator) {
    value = RoundTo<T, C>(value / s.denominator);
  } else if constexpr (kDivide == GradDivide::kByInverse) {
    value = RoundTo<T, C>(value * s.inverse_denominator);
  }
  if constexpr (kClips) {
    value = s.clip_max < value ? s.clip_max : value;
    value = value < s.clip_min ? s.clip_min : value;
  }
  return value;
}

// Calls f(std::integral_constant<GradDivide, how>{},
// std::integral_constant<bool, clips>{}) for scale `s`: the row loops branch
// on the divide and the clip once, not per value, and a loop without a clip
// range has no compare in it.
template <typename C, typename F>
void VisitGradScaling(const GradScale<C>& s, F&& f) {
  const auto with_clip = [&](auto divide) {
    if (s.clips) {
      f(divide, std::true_type{});
    } else {
      f(divide, std::false_type{});
    }
  };
  if (s.count < 2) {
    with_clip(std::integral_constant<GradDivide, GradDivide::kNone>{});
  } else if (s.inverse_denominator != C(0)) {
    with_clip(std::integral_constant<GradDivide, GradDivide::kByInverse>{});
  } else {
    with_clip(std::integral_constant<GradDivide, GradDivide::kByDenominator>{});
  }
}

// Gradient row `g` of `n` values of T scaled into `out` (ScaledGradValue), in
// the compute type. Restrict parameters and the scale by value: so that the
// loop vectorizes (GCC honours restrict on parameters only, and a divisor
// read through a pointer would be reloaded per element), the divide too.
template <typename T, GradDivide kDivide, bool kClips, typename C>
TF_OPT_OPS_ROW_LOOP void ScaleGradRow(const T* TF_OPT_OPS_RESTRICT g, int64_t n,
                                      const GradScale<C> s, C* TF_OPT_OPS_RESTRICT out) {
  int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
  if constexpr (kAnyFloat16<T>) {  // as in LazyAdamRow
    for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
      Float16Stage<const T> g8(g + j);
#pragma GCC unroll 1  // as in LazyAdamRow
      for (int l = 0; l < kFloat16Lanes; ++l) {
        out[j + l] = ScaledGradValue<Float16StagedT<T>, kDivide, kClips>(Load<C>(*g8.at(l)), s);
      }
    }
  }
#endif
  for (; j < n; ++j) {
    out[j] = ScaledGradValue<T, kDivide, kClips>(Load<C>(g[j]), s);
  }
}

// A weight w of a touched row after decoupled weight decay, as stock Keras
// decays a variable: w - w * weight_decay * lr with weight_decay and lr
// rounded to the table's type T and every operation rounded to T (C holds
// each exactly; a 16-bit result of a float operation rounded to T is the
// correctly rounded T result), so the decayed row is the one Keras' own
// arithmetic in T gives.
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C DecayedWeight(C w, C weight_decay, C lr) {
  const C decay = RoundTo<T, C>(weight_decay);
  const C rate = RoundTo<T, C>(lr);
  return RoundTo<T, C>(w - RoundTo<T, C>(RoundTo<T, C>(w * decay) * rate));
}

// The weight an update reads: with kDecay (the step's `decays`) decayed first
// by `weight_decay` and the op's rate `lr` (DecayedWeight).
template <bool kDecay, typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C UpdatedWeight(const T* var, C weight_decay, C lr) {
  const C w = Load<C>(*var);
  if constexpr (kDecay) {
    return DecayedWeight<T, C>(w, weight_decay, lr);
  } else {
    return w;
  }
}

// Calls f(std::integral_constant<bool, decays>{}) for a step `s` with the
// flag `decays` (AdamStep, ClippyStep): row loops branch on the decay once
// per row, not per element, so that each loop vectorizes.
template <typename Step, typename F>
TF_OPT_OPS_HOST_DEVICE void WithDecay(const Step& s, F&& f) {
  if (s.decays) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// One element of one touched row; `g` is the (duplicate-summed) gradient.
// Slots of type S (the table's type T unless the layout says otherwise);
// `noise` and `j` key stochastic rounding; with kDecay the weight is decayed
// first (DecayedWeight).
template <bool kStochastic, typename T, typename S, typename C, bool kDecay = false>
TF_OPT_OPS_HOST_DEVICE void LazyAdamElement(T* var, S* m, S* v, C g, const AdamStep<C>& s,
                                            RowNoise noise, int64_t j) {
  const C m_t = s.beta1 * Load<C>(*m) + s.one_minus_beta1 * g;
  const C v_t = s.beta2 * Load<C>(*v) + s.one_minus_beta2 * g * g;
  *m = StoreSlot<kStochastic, S>(m_t, noise.m, j);
  *v = StoreSlot<kStochastic, S>(v_t, noise.v, j);
  *var = Store<T>(UpdatedWeight<kDecay, T, C>(var, s.weight_decay, s.decay_lr) -
                  s.lr_t * m_t / (Sqrt<C>(v_t) + s.epsilon));
}

// One touched row of `n` elements: a plain loop over restrict pointers that
// the compiler vectorizes (no per-row Eigen expressions). `G` is the stored
// gradient type, or the compute type for duplicate-summed rows.
template <bool kStochastic, typename T, typename S, typename G, typename C>
TF_OPT_OPS_ROW_LOOP void LazyAdamRow(T* TF_OPT_OPS_RESTRICT var, S* TF_OPT_OPS_RESTRICT m,
                                     S* TF_OPT_OPS_RESTRICT v, const G* TF_OPT_OPS_RESTRICT g,
                                     int64_t n, const AdamStep<C>& s, RowNoise noise) {
  WithDecay(s, [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
    if constexpr (kAnyFloat16<T, S, G>) {
      for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
        Float16Stage<T> w8(var + j);
        Float16Stage<S> m8(m + j), v8(v + j);
        Float16Stage<const G> g8(g + j);
#pragma GCC unroll 1  // a loop of 8 for the vectorizer, not 8 unrolled elements
        for (int l = 0; l < kFloat16Lanes; ++l) {
          LazyAdamElement<kStochastic, Float16StagedT<T>, Float16StagedT<S>, C, kDecay>(
              w8.at(l), m8.at(l), v8.at(l), Load<C>(*g8.at(l)), s, noise, j + l);
        }
        w8.Store();
        m8.Store();
        v8.Store();
      }
    }
#endif
    TF_OPT_OPS_AVX512_ROW_UNROLL
    for (; j < n; ++j) {
      LazyAdamElement<kStochastic, T, S, C, kDecay>(var + j, m + j, v + j, Load<C>(g[j]), s, noise,
                                                    j);
    }
  });
}

// The mean of g^2 over a row, in one fixed order on every device: lane l of
// kMeanLanes sums g_j^2 for j = l, l + kMeanLanes, ... in turn, then the
// lanes are added pairwise, lane l with lane l ^ offset for offset 16, 8, 4,
// 2, 1 (a warp's butterfly of __shfl_xor_sync). The result is lane 0's.
constexpr int kMeanLanes = 32;

//
// Only lanes below `offset` feed lane 0's later rounds, and for those
// lanes[l ^ offset] is lanes[l + offset]: halving in place adds the same
// operands in the same order as the full butterfly, in straight-line code the
// compiler vectorizes (a loop over offsets compiled to scalar gathers and
// cost as much as the whole row update).
template <typename C>
TF_OPT_OPS_HOST_DEVICE C ButterflyLaneSum(C* lanes) {
  static_assert(kMeanLanes == 32, "the halving below is written out for 32 lanes");
  for (int l = 0; l < 16; ++l) lanes[l] = lanes[l] + lanes[l + 16];
  for (int l = 0; l < 8; ++l) lanes[l] = lanes[l] + lanes[l + 8];
  for (int l = 0; l < 4; ++l) lanes[l] = lanes[l] + lanes[l + 4];
  for (int l = 0; l < 2; ++l) lanes[l] = lanes[l] + lanes[l + 2];
  return lanes[0] + lanes[1];
}

template <typename G, typename C>
TF_OPT_OPS_HOST_DEVICE C RowMeanSquare(const G* TF_OPT_OPS_RESTRICT g, int64_t n) {
  C lanes[kMeanLanes];
  for (int l = 0; l < kMeanLanes; ++l) lanes[l] = C(0);
  int64_t j = 0;
  for (; j + kMeanLanes <= n; j += kMeanLanes) {  // whole chunks: a loop over lanes vectorizes
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
    if constexpr (kAnyFloat16<G>) {  // as in LazyAdamRow, in the same order
      for (int b = 0; b < kMeanLanes; b += kFloat16Lanes) {
        Float16Stage<const G> g8(g + j + b);
        for (int l = 0; l < kFloat16Lanes; ++l) {
          const C x = Load<C>(*g8.at(l));
          lanes[b + l] += x * x;
        }
      }
      continue;
    }
#endif
    for (int l = 0; l < kMeanLanes; ++l) {
      const C x = Load<C>(g[j + l]);
      lanes[l] += x * x;
    }
  }
  for (int l = 0; j + l < n; ++l) {
    const C x = Load<C>(g[j + l]);
    lanes[l] += x * x;
  }
  return ButterflyLaneSum<C>(lanes) / static_cast<C>(n);
}

// Row-wise v of one touched row from the row's mean square gradient:
// v_r = beta2 * v_r + (1 - beta2) * mean_j(g_j^2); returns sqrt(v_r) + epsilon,
// the denominator of every element of the row (v_r stored, stochastically
// rounded with element 0's noise of the row's v key).
template <bool kStochastic, typename S, typename C>
TF_OPT_OPS_HOST_DEVICE C RowwiseSecondMoment(S* v, C mean_square, const AdamStep<C>& s,
                                             RowNoise noise) {
  const C v_t = s.beta2 * Load<C>(*v) + s.one_minus_beta2 * mean_square;
  *v = StoreSlot<kStochastic, S>(v_t, noise.v, 0);
  return Sqrt<C>(v_t) + s.epsilon;
}

// One element of a row with row-wise v: m as in LazyAdamElement, the
// denominator the row's.
template <bool kStochastic, typename T, typename S, typename C, bool kDecay = false>
TF_OPT_OPS_HOST_DEVICE void LazyAdamRowwiseElement(T* var, S* m, C g, C denominator,
                                                   const AdamStep<C>& s, RowNoise noise,
                                                   int64_t j) {
  const C m_t = s.beta1 * Load<C>(*m) + s.one_minus_beta1 * g;
  *m = StoreSlot<kStochastic, S>(m_t, noise.m, j);
  *var = Store<T>(UpdatedWeight<kDecay, T, C>(var, s.weight_decay, s.decay_lr) -
                  s.lr_t * m_t / denominator);
}

// One touched row with row-wise v (`v` points at the row's one value).
template <bool kStochastic, typename T, typename S, typename G, typename C>
TF_OPT_OPS_ROW_LOOP void LazyAdamRowwiseRow(T* TF_OPT_OPS_RESTRICT var, S* TF_OPT_OPS_RESTRICT m,
                                            S* TF_OPT_OPS_RESTRICT v,
                                            const G* TF_OPT_OPS_RESTRICT g, int64_t n,
                                            const AdamStep<C>& s, RowNoise noise) {
  const C denominator =
      RowwiseSecondMoment<kStochastic, S, C>(v, RowMeanSquare<G, C>(g, n), s, noise);
  WithDecay(s, [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
    if constexpr (kAnyFloat16<T, S, G>) {  // as in LazyAdamRow
      for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
        Float16Stage<T> w8(var + j);
        Float16Stage<S> m8(m + j);
        Float16Stage<const G> g8(g + j);
#pragma GCC unroll 1  // as in LazyAdamRow
        for (int l = 0; l < kFloat16Lanes; ++l) {
          LazyAdamRowwiseElement<kStochastic, Float16StagedT<T>, Float16StagedT<S>, C, kDecay>(
              w8.at(l), m8.at(l), Load<C>(*g8.at(l)), denominator, s, noise, j + l);
        }
        w8.Store();
        m8.Store();
      }
    }
#endif
    for (; j < n; ++j) {
      LazyAdamRowwiseElement<kStochastic, T, S, C, kDecay>(var + j, m + j, Load<C>(g[j]),
                                                           denominator, s, noise, j);
    }
  });
}

// ------------------------------------------------- lazy moving average (EMA)
// The average of a table's rows, kept lazily (see the
// ResourceSparseApplyLazyMovingAverage doc): a row's average is brought up
// to date only where the row is about to change. Each operation is rounded to
// the table's type T, as the same TensorFlow ops in dtype T round (a no-op for
// float and double), so a 16-bit table's average gets the numbers of the
// TensorFlow ops it replaces.
template <typename C>
struct MovingAverageStep {
  C ema_momentum;  // rounded to T
  int32_t count;   // the EMA steps applied so far
};

// The one conversion of MovingAverageStep between compute types (as CastStep
// above).
template <typename To, typename From>
TF_OPT_OPS_HOST_DEVICE MovingAverageStep<To> CastStep(const MovingAverageStep<From>& s) {
  return MovingAverageStep<To>{static_cast<To>(s.ema_momentum), s.count};
}

template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE MovingAverageStep<C> MakeMovingAverageStep(C ema_momentum, int32_t count) {
  return MovingAverageStep<C>{RoundTo<T, C>(ema_momentum), count};
}

// ema_momentum^k for the k = count - synced steps a row missed (int32
// arithmetic, k rounded to T), in double rounded to T: one formula on the
// host and the device, so both agree but in the rarest ties.
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C MovingAverageDecay(const MovingAverageStep<C>& s, int32_t synced) {
  const int32_t missed =
      static_cast<int32_t>(static_cast<uint32_t>(s.count) - static_cast<uint32_t>(synced));
  const double steps = static_cast<double>(RoundTo<T, C>(static_cast<C>(missed)));
#if defined(__CUDA_ARCH__)
  const double decay = pow(static_cast<double>(s.ema_momentum), steps);
#else
  const double decay = std::pow(static_cast<double>(s.ema_momentum), steps);
#endif
  return RoundTo<T, C>(static_cast<C>(decay));
}

// One element of a row brought up to date: var + decay * (average - var),
// `decay` the row's MovingAverageDecay.
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void MovingAverageElement(T* average, const T& var, C decay) {
  const C w = Load<C>(var);
  *average = StoreRounded<T, C>(w + RoundTo<T, C>(decay * RoundTo<T, C>(Load<C>(*average) - w)));
}

// One row of `n` elements (a float16 row staged as in LazyAdamRow).
template <typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void MovingAverageRow(T* TF_OPT_OPS_RESTRICT average,
                                             const T* TF_OPT_OPS_RESTRICT var, int64_t n, C decay) {
  int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
  if constexpr (kAnyFloat16<T>) {
    for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
      Float16Stage<T> a8(average + j);
      Float16Stage<const T> w8(var + j);
#pragma GCC unroll 1  // a loop of 8 for the vectorizer, not 8 unrolled elements
      for (int l = 0; l < kFloat16Lanes; ++l) {
        MovingAverageElement<Float16StagedT<T>, C>(a8.at(l), *w8.at(l), decay);
      }
      a8.Store();
    }
  }
#endif
  TF_OPT_OPS_AVX512_ROW_UNROLL
  for (; j < n; ++j) MovingAverageElement<T, C>(average + j, var[j], decay);
}

// ---------------------------------------------------------- Clippy Adagrad
// Two passes over the touched elements (see the ResourceApplyClippyAdagrad
// doc): the first finds the per-variable clipping scale (a min-reduction),
// the second applies the scaled update. The accumulator has type A: the
// table's type T, or for ResourceApplyClippyAdagradV2 its own (Taccum),
// optionally rounded stochastically when stored. With `decays` (the sparse
// W ops), each touched element's weight is first decayed (decoupled weight
// decay, DecayedWeight, by weight_decay and the op's lr), and both passes
// read the decayed weight: pass 1's |var| and pass 2's update.
template <typename C>
struct ClippyStep {
  C lr;
  C epsilon;
  C variable_relative_threshold;
  C accumulator_relative_threshold;
  C absolute_threshold;
  bool clip_accumulator_update;
  bool use_standard_accumulator_update;
  // V2: round a 16-bit accumulator stochastically, with the noise of flat
  // element e being ClippyNoise(noise_key, e).
  bool stochastic_rounding = false;
  uint32_t noise_key = 0;
  bool decays = false;
  C weight_decay = C(0);
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
                        s.use_standard_accumulator_update,
                        s.stochastic_rounding,
                        s.noise_key,
                        s.decays,
                        static_cast<To>(s.weight_decay)};
}

// Clippy's accumulator noise: one key per step (slot 2 of SlotRowKey's
// scheme), then element e of the flattened accumulator, so that the dense op
// and the sparse one round an element alike.
TF_OPT_OPS_HOST_DEVICE uint32_t ClippyNoiseKey(uint64_t seed, int64_t step) {
  return static_cast<uint32_t>(Mix64(Mix64(seed + 2) ^ static_cast<uint64_t>(step)) >> 32);
}
TF_OPT_OPS_HOST_DEVICE uint32_t ClippyNoise(uint32_t key, int64_t e) {
  const uint64_t element = static_cast<uint64_t>(e);
  return Mix32(Mix32(key ^ static_cast<uint32_t>(element)) + static_cast<uint32_t>(element >> 32));
}

// The accumulator value `x` of flat element e, stored.
template <bool kStochastic, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE A StoreAccum(C x, const ClippyStep<C>& s, int64_t e) {
  if constexpr (kStochastic) {
    return StoreStochastic<A>(static_cast<float>(x), ClippyNoise(s.noise_key, e));
  } else if constexpr (std::is_same_v<C, float>) {
    return StoreNearest<A>(x);
  } else {
    return Store<A>(x);
  }
}

// min() that keeps NaN: once a NaN ratio is seen the scale is NaN, as
// tf.reduce_min/tf.minimum give in TensorFlow Recommenders' ClippyAdagrad.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C NanMin(C a, C b) {
  if (a != a) return a;
  if (b != b) return b;
  return b < a ? b : a;
}

// The weight both passes read: with kDecay (= s.decays) the decayed one,
// which pass 2 stores updated. Pass 1 does not store it: the values are those
// of decaying the rows first and then running the op, with one write.
template <bool kDecay, typename T, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyWeight(const T* var, const ClippyStep<C>& s) {
  return UpdatedWeight<kDecay, T, C>(var, s.weight_decay, s.lr);
}

// Pass 1 for one element (flat index e), up to the ratio: sets max_delta and
// |delta|. With the standard accumulator update the accumulator is
// incremented here (before the step), so pass 2 must not add g^2 again. The
// flags are template parameters (= s.use_standard_accumulator_update,
// s.stochastic_rounding, s.decays) so the conditional store leaves the loop.
template <bool kStandardUpdate, bool kStochastic, bool kDecay, typename T, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyRatioTerms(const T* var, A* accum, C g, const ClippyStep<C>& s,
                                             int64_t e, C* max_delta, C* abs_delta) {
  C a = Load<C>(*accum);
  if (kStandardUpdate) {
    *accum = StoreAccum<kStochastic, A>(a + g * g, s, e);
    a = Load<C>(*accum);  // pass 2 reads the stored (rounded) value too
  }
  const C p = C(1) / Sqrt<C>(a + s.epsilon);
  *abs_delta = Abs<C>(s.lr * g * p);
  *max_delta = s.variable_relative_threshold * Abs<C>(ClippyWeight<kDecay, T, C>(var, s)) +
               s.accumulator_relative_threshold * p + s.absolute_threshold;
}

// max_delta / |delta|, or 1 when delta == 0 (NaN when delta is NaN).
template <typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatio(C max_delta, C abs_delta) {
  const C ratio = max_delta / abs_delta;
  return abs_delta == C(0) ? C(1) : ratio;
}

template <bool kStandardUpdate, bool kStochastic, bool kDecay, typename T, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioElement(const T* var, A* accum, C g, const ClippyStep<C>& s,
                                            int64_t e) {
  C max_delta, abs_delta;
  ClippyRatioTerms<kStandardUpdate, kStochastic, kDecay, T, A, C>(var, accum, g, s, e, &max_delta,
                                                                  &abs_delta);
  return ClippyRatio<C>(max_delta, abs_delta);
}

// The same with the flags read at run time (the GPU kernels' form).
template <typename T, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioElement(const T* var, A* accum, C g, const ClippyStep<C>& s,
                                            int64_t e) {
  C ratio;
  WithDecay(s, [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    if (s.stochastic_rounding) {
      ratio = s.use_standard_accumulator_update
                  ? ClippyRatioElement<true, true, kDecay, T, A, C>(var, accum, g, s, e)
                  : ClippyRatioElement<false, true, kDecay, T, A, C>(var, accum, g, s, e);
    } else {
      ratio = s.use_standard_accumulator_update
                  ? ClippyRatioElement<true, false, kDecay, T, A, C>(var, accum, g, s, e)
                  : ClippyRatioElement<false, false, kDecay, T, A, C>(var, accum, g, s, e);
    }
  });
  return ratio;
}

// Final scale from the reduced minimum ratio: min(1, ratio), NaN kept.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyScale(C min_ratio) {
  return NanMin<C>(C(1), min_ratio);
}

// Pass 2 for one element (flat index e), with the scale of the whole variable.
// kUpdatesAccumulator: !s.use_standard_accumulator_update (pass 1 updated it
// otherwise), a template parameter so that no row loop holds the branch.
template <bool kStochastic, bool kDecay, bool kUpdatesAccumulator, typename T, typename A,
          typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyApplyElementWith(T* var, A* accum, C g, C scale,
                                                   const ClippyStep<C>& s, int64_t e) {
  const C a = Load<C>(*accum);
  const C p = C(1) / Sqrt<C>(a + s.epsilon);
  const C delta = s.lr * g * p;
  if constexpr (kUpdatesAccumulator) {
    // g * 1 is g: a factor, not a select of g * scale or g, keeps the loop
    // branch-free.
    const C g_acc = g * (s.clip_accumulator_update ? scale : C(1));
    *accum = StoreAccum<kStochastic, A>(a + g_acc * g_acc, s, e);
  }
  *var = Store<T>(ClippyWeight<kDecay, T, C>(var, s) - delta * scale);
}

// Calls f(std::integral_constant<bool, updates>{}) for a step that updates
// the accumulator in pass 2 (!s.use_standard_accumulator_update), as WithDecay.
template <typename C, typename F>
TF_OPT_OPS_HOST_DEVICE void WithAccumulatorUpdate(const ClippyStep<C>& s, F&& f) {
  if (s.use_standard_accumulator_update) {
    f(std::false_type{});
  } else {
    f(std::true_type{});
  }
}

template <bool kStochastic, bool kDecay, typename T, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyApplyElement(T* var, A* accum, C g, C scale,
                                               const ClippyStep<C>& s, int64_t e) {
  WithAccumulatorUpdate(s, [&](auto updates) {
    ClippyApplyElementWith<kStochastic, kDecay, decltype(updates)::value, T, A, C>(var, accum, g,
                                                                                   scale, s, e);
  });
}

// The same with the rounding and the decay read at run time (the GPU kernels' form).
template <typename T, typename A, typename C>
TF_OPT_OPS_HOST_DEVICE void ClippyApplyElement(T* var, A* accum, C g, C scale,
                                               const ClippyStep<C>& s, int64_t e) {
  WithDecay(s, [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    if (s.stochastic_rounding) {
      ClippyApplyElement<true, kDecay, T, A, C>(var, accum, g, scale, s, e);
    } else {
      ClippyApplyElement<false, kDecay, T, A, C>(var, accum, g, scale, s, e);
    }
  });
}

// Pass 1 over `n` contiguous elements, the first of flat index `first`:
// NanMin(min_ratio, every ratio). Host compilers run it as kLanes
// independent minima in a GCC vector, whose compares and selects compile to
// one vector instruction each; the terms of each ratio are computed in a
// plain loop first, so the divide and the delta == 0 select are vector
// operations too. (GCC will not vectorize a floating-point min reduction
// without fast-math, and with the lanes as arrays it left the loop scalar, or
// with a masked store and reload, many times slower than pass 2.) The NaN
// flag is kept apart, as NaN must win. Device code (which has no use for this
// row loop) gets the plain loop alone.
template <bool kStandardUpdate, bool kStochastic, bool kDecay, typename T, typename A, typename G,
          typename C>
TF_OPT_OPS_ROW_LOOP C ClippyRatioRowImpl(const T* TF_OPT_OPS_RESTRICT var,
                                         A* TF_OPT_OPS_RESTRICT accum,
                                         const G* TF_OPT_OPS_RESTRICT g, int64_t n, int64_t first,
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
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
    // float16 rows staged as in LazyAdamRow, where this pass only reads them
    // (the standard update stores the accumulator and reads it back rounded).
    if constexpr (!kStandardUpdate && kAnyFloat16<T, A, G>) {
      static_assert(kLanes == kFloat16Lanes, "one staging per lane block");
      Float16Stage<const T> w8(var + j);
      Float16Stage<A> a8(accum + j);
      Float16Stage<const G> g8(g + j);
#pragma GCC unroll 1  // as in LazyAdamRow
      for (int l = 0; l < kLanes; ++l) {
        ClippyRatioTerms<false, kStochastic, kDecay, Float16StagedT<T>, Float16StagedT<A>, C>(
            w8.at(l), a8.at(l), Load<C>(*g8.at(l)), s, first + j + l, max_delta + l, abs_delta + l);
      }
    } else
#endif
    {
      for (int l = 0; l < kLanes; ++l) {
        ClippyRatioTerms<kStandardUpdate, kStochastic, kDecay, T, A, C>(
            var + j + l, accum + j + l, Load<C>(g[j + l]), s, first + j + l, max_delta + l,
            abs_delta + l);
      }
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
    const C r = ClippyRatioElement<kStandardUpdate, kStochastic, kDecay, T, A, C>(
        var + j, accum + j, Load<C>(g[j]), s, first + j);
    m = r < m ? r : m;
    nan = nan || r != r;
  }
  return nan ? C(NAN) : m;
}

template <bool kStochastic, typename T, typename A, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE C ClippyRatioRow(const T* TF_OPT_OPS_RESTRICT var,
                                        A* TF_OPT_OPS_RESTRICT accum,
                                        const G* TF_OPT_OPS_RESTRICT g, int64_t n, int64_t first,
                                        const ClippyStep<C>& s, C min_ratio) {
  C ratio;
  WithDecay(s, [&](auto decay) {
    constexpr bool kDecay = decltype(decay)::value;
    ratio = s.use_standard_accumulator_update
                ? ClippyRatioRowImpl<true, kStochastic, kDecay, T, A, G, C>(var, accum, g, n, first,
                                                                            s, min_ratio)
                : ClippyRatioRowImpl<false, kStochastic, kDecay, T, A, G, C>(var, accum, g, n,
                                                                             first, s, min_ratio);
  });
  return ratio;
}

// Pass 2 over `n` contiguous elements, the first of flat index `first`.
template <bool kStochastic, typename T, typename A, typename G, typename C>
TF_OPT_OPS_ROW_LOOP void ClippyApplyRow(T* TF_OPT_OPS_RESTRICT var, A* TF_OPT_OPS_RESTRICT accum,
                                        const G* TF_OPT_OPS_RESTRICT g, int64_t n, int64_t first,
                                        C scale, const ClippyStep<C>& step) {
  // A local copy, as in pass 1: the step's fields (the decay's, read after
  // the accumulator's store) may otherwise alias the stores, which keeps the
  // compiler from vectorizing the loop.
  const ClippyStep<C> s = step;
  WithDecay(s, [&](auto decay) {
    WithAccumulatorUpdate(s, [&](auto updates) {
      constexpr bool kDecay = decltype(decay)::value;
      constexpr bool kUpdates = decltype(updates)::value;
      int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
      if constexpr (kAnyFloat16<T, A, G>) {  // as in LazyAdamRow
        for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
          Float16Stage<T> w8(var + j);
          Float16Stage<A> a8(accum + j);
          Float16Stage<const G> g8(g + j);
#pragma GCC unroll 1  // as in LazyAdamRow
          for (int l = 0; l < kFloat16Lanes; ++l) {
            ClippyApplyElementWith<kStochastic, kDecay, kUpdates, Float16StagedT<T>,
                                   Float16StagedT<A>, C>(w8.at(l), a8.at(l), Load<C>(*g8.at(l)),
                                                         scale, s, first + j + l);
          }
          w8.Store();
          if constexpr (kUpdates) a8.Store();
        }
      }
#endif
      for (; j < n; ++j) {
        ClippyApplyElementWith<kStochastic, kDecay, kUpdates, T, A, C>(
            var + j, accum + j, Load<C>(g[j]), scale, s, first + j);
      }
    });
  });
}

// ---------------------------------------------------------- row-wise Adagrad
// FBGEMM's EXACT_ROWWISE_ADAGRAD (see the ResourceSparseApplyRowwiseAdagrad
// doc): one accumulator value per row, of the compute type C, and the
// weight decay modes of FBGEMM's WeightDecayMode, by its numbers.
enum class RowwiseWeightDecay : int { kNone = 0, kL2 = 1, kDecoupled = 2 };

template <typename C>
struct RowwiseAdagradStep {
  C lr;
  C epsilon;
  C weight_decay;
  RowwiseWeightDecay mode;
  // A 16-bit table's rows round stochastically when stored, with the noise
  // of RowwiseAdagradNoise keyed by seed (float32/float64 tables ignore it).
  bool stochastic_rounding = false;
  uint64_t seed = 0;
};

// The one conversion of RowwiseAdagradStep between compute types (as CastStep above).
template <typename To, typename From>
TF_OPT_OPS_HOST_DEVICE RowwiseAdagradStep<To> CastStep(const RowwiseAdagradStep<From>& s) {
  return RowwiseAdagradStep<To>{static_cast<To>(s.lr),           static_cast<To>(s.epsilon),
                                static_cast<To>(s.weight_decay), s.mode,
                                s.stochastic_rounding,           s.seed};
}

// The table's rounding noise, in SlotRowKey's scheme (slot 3) with the row's
// new accumulator in the step's place: the op has no step input (old graphs
// keep loading), and a row's accumulator grows at every step that row has a
// gradient, so the row draws fresh bits each step, and a rerun, the CPU and
// the GPU draw the same. Element j's noise also mixes in the bits of the
// unrounded value, so that a row whose accumulator stopped growing (an
// increment below its last bit) still draws new bits as its values move.
TF_OPT_OPS_HOST_DEVICE uint32_t RowwiseAdagradNoiseKey(uint64_t seed, float accum, int64_t row) {
  const uint64_t accum_key = Mix64(Mix64(seed + 3) ^ static_cast<uint64_t>(FloatBits(accum)));
  return static_cast<uint32_t>(Mix64(accum_key ^ static_cast<uint64_t>(row)) >> 32);
}
TF_OPT_OPS_HOST_DEVICE uint32_t RowwiseAdagradNoise(uint32_t key, int64_t j, float x) {
  return Mix32((key + static_cast<uint32_t>(j)) ^ FloatBits(x));
}

// The mean of h^2 over a row in RowMeanSquare's order, h_j = g_j, or with
// kL2 g_j + weight_decay * var_j (the decayed gradient enters the mean only).
template <bool kL2, typename T, typename G, typename C>
TF_OPT_OPS_HOST_DEVICE C RowwiseAdagradMeanSquare(const T* TF_OPT_OPS_RESTRICT var,
                                                  const G* TF_OPT_OPS_RESTRICT g, int64_t n,
                                                  C weight_decay) {
  if constexpr (!kL2) {
    return RowMeanSquare<G, C>(g, n);
  } else {
    C lanes[kMeanLanes];
    for (int l = 0; l < kMeanLanes; ++l) lanes[l] = C(0);
    int64_t j = 0;
    for (; j + kMeanLanes <= n; j += kMeanLanes) {
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
      if constexpr (kAnyFloat16<T, G>) {  // as in RowMeanSquare
        for (int b = 0; b < kMeanLanes; b += kFloat16Lanes) {
          Float16Stage<const G> g8(g + j + b);
          Float16Stage<const T> w8(var + j + b);
          for (int l = 0; l < kFloat16Lanes; ++l) {
            const C x = Load<C>(*g8.at(l)) + weight_decay * Load<C>(*w8.at(l));
            lanes[b + l] += x * x;
          }
        }
        continue;
      }
#endif
      for (int l = 0; l < kMeanLanes; ++l) {
        const C x = Load<C>(g[j + l]) + weight_decay * Load<C>(var[j + l]);
        lanes[l] += x * x;
      }
    }
    for (int l = 0; j + l < n; ++l) {
      const C x = Load<C>(g[j + l]) + weight_decay * Load<C>(var[j + l]);
      lanes[l] += x * x;
    }
    return ButterflyLaneSum<C>(lanes) / static_cast<C>(n);
  }
}

// The accumulator update of one touched row from its mean square:
// a_r = a_r + mean (stored); returns the step size lr / (sqrt(a_r) + epsilon),
// epsilon outside the root, with the new a_r.
template <typename C>
TF_OPT_OPS_HOST_DEVICE C RowwiseAdagradMultiplier(C* accum, C mean_square,
                                                  const RowwiseAdagradStep<C>& s) {
  const C a = *accum + mean_square;
  *accum = a;
  return s.lr / (Sqrt<C>(a) + s.epsilon);
}

// The factor on the old weight: 1 - multiplier * weight_decay (L2),
// 1 - lr * weight_decay (decoupled), 1 (none).
template <typename C>
TF_OPT_OPS_HOST_DEVICE C RowwiseAdagradCorrection(C multiplier, const RowwiseAdagradStep<C>& s) {
  switch (s.mode) {
    case RowwiseWeightDecay::kL2:
      return C(1) - multiplier * s.weight_decay;
    case RowwiseWeightDecay::kDecoupled:
      return C(1) - s.lr * s.weight_decay;
    default:
      return C(1);
  }
}

// One element (column j) of a touched row: w = correction * w - g *
// multiplier, with the summed gradient g (not the decayed one); stored
// stochastically with the row's noise key when kStochastic.
template <bool kStochastic, typename T, typename C>
TF_OPT_OPS_HOST_DEVICE void RowwiseAdagradElement(T* var, C g, C multiplier, C correction,
                                                  uint32_t key, int64_t j) {
  const C w = correction * Load<C>(*var) - g * multiplier;
  if constexpr (kStochastic) {
    *var = StoreStochastic<T>(static_cast<float>(w),
                              RowwiseAdagradNoise(key, j, static_cast<float>(w)));
  } else {
    *var = Store<T>(w);
  }
}

// One touched row `row` of `n` elements (`accum` points at the row's one
// value); kStochastic = s.stochastic_rounding for a 16-bit T, so the
// conditional store leaves the loop.
template <bool kStochastic, typename T, typename G, typename C>
TF_OPT_OPS_ROW_LOOP void RowwiseAdagradRow(T* TF_OPT_OPS_RESTRICT var, C* TF_OPT_OPS_RESTRICT accum,
                                           const G* TF_OPT_OPS_RESTRICT g, int64_t n,
                                           const RowwiseAdagradStep<C>& s, int64_t row) {
  const C mean_square = s.mode == RowwiseWeightDecay::kL2
                            ? RowwiseAdagradMeanSquare<true, T, G, C>(var, g, n, s.weight_decay)
                            : RowwiseAdagradMeanSquare<false, T, G, C>(var, g, n, s.weight_decay);
  const C multiplier = RowwiseAdagradMultiplier<C>(accum, mean_square, s);
  const C correction = RowwiseAdagradCorrection<C>(multiplier, s);
  const uint32_t key =
      kStochastic ? RowwiseAdagradNoiseKey(s.seed, static_cast<float>(*accum), row) : 0u;
  int64_t j = 0;
#if defined(TF_OPT_OPS_F16C_CONVERSIONS)
  if constexpr (kAnyFloat16<T, G>) {  // as in LazyAdamRow
    for (; j + kFloat16Lanes <= n; j += kFloat16Lanes) {
      Float16Stage<T> w8(var + j);
      Float16Stage<const G> g8(g + j);
#pragma GCC unroll 1  // as in LazyAdamRow
      for (int l = 0; l < kFloat16Lanes; ++l) {
        RowwiseAdagradElement<kStochastic, Float16StagedT<T>, C>(
            w8.at(l), Load<C>(*g8.at(l)), multiplier, correction, key, j + l);
      }
      w8.Store();
    }
  }
#endif
  for (; j < n; ++j) {
    RowwiseAdagradElement<kStochastic, T, C>(var + j, Load<C>(g[j]), multiplier, correction, key,
                                             j);
  }
}

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_OPTIMIZER_MATH_H_
