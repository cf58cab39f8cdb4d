// What clipnorm's divide costs the Scaled lazy Adam op's row pass, with no
// TensorFlow: each gradient row read scaled into a buffer (ScaleGradRow, as
// ScaledGradRows does), then the row's update (LazyAdamRow), 1,000,000 x 128
// float32 tables, B = 131,072 distinct rows a step (4 steps of rows in turn),
// 2 threads, the table rows prefetched 4 ahead. Rows read: as they are, times
// one factor (global_clipnorm), times a factor then divided (clipnorm), and
// divided by a checked reciprocal instead (CheckedQuotient below, tried in
// place of the divide: the same bits, checked here first, and slower).
// Interleaved rounds; medians.
//
// Built with the avx512 level's flags, as Bazel builds cpu_kernels.cc:
//   g++ -std=c++17 -O3 -pthread -mavx -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl
//     -ffp-contract=off -fno-math-errno -fno-trapping-math -I.
//     -o /tmp/clipnorm_divide benchmarks/clipnorm_divide.cc
//   /tmp/clipnorm_divide [update: 1, or 0 for the row reads alone] [rounds] [divisor]
//
// docs/benchmarks.md, "Keras optimizer features": clipnorm's divide.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "tf_opt_ops/core/optimizer_math.h"

namespace {

using tf_opt_ops::GradScale;

constexpr int64_t kRows = 1000000, kB = 131072, kSteps = 4, kAhead = 4;
int64_t dim = 128;  // not a constant: the ops' rows are as wide as the table

float* HugeArray(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * 4 + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  void* p = std::aligned_alloc(2 << 20, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return static_cast<float*>(p);
}

// a / b rounded to float from y = 1/b, and whether that is certainly the
// divide's result: q = a*y refined once by its residual; with
// h = ulp(q)/2 a normal power of two, q normal and not a power of two, and
// |b|*h normal and finite (so exact), |fma(-q, b, a)| < |b|*h proves
// |a/b - q| < h (rounding is monotone and leaves |b|*h as it is): a/b lies
// strictly nearer to q than to its neighbours q -+ 2h. Zeros: q = a*y.
float CheckedQuotient(float a, float b, float magnitude, float y, bool& sure) {
  const float q0 = a * y;
  const float q = std::fma(std::fma(-q0, b, a), y, q0);
  const uint32_t bits = tf_opt_ops::FloatBits(q);
  const uint32_t exponent = bits & 0x7F800000u;
  const float bound = magnitude * tf_opt_ops::BitsFloat(exponent - (24u << 23));
  const float residual = std::fma(-q, b, a);
  const bool zero = a == 0.0f;
  sure = zero | ((exponent >= (25u << 23)) & (exponent <= (254u << 23)) &
                 ((bits & 0x7FFFFFu) != 0) & (std::fabs(a) >= 0x1p-126f) & (bound > 0x1p-126f) &
                 (bound <= 0x1.fffffep127f) & (std::fabs(residual) < bound));
  return zero ? q0 : q;
}

__attribute__((noinline)) void ScaleOne(const float* g, int64_t n, const GradScale<float> s,
                                        float* out) {
  tf_opt_ops::ScaleGradRow<float, false>(g, n, s, out);
}

__attribute__((noinline)) void ScaleDividing(const float* g, int64_t n, const GradScale<float> s,
                                             float* out) {
  tf_opt_ops::ScaleGradRow<float, true>(g, n, s, out);
}

// The divide by checked quotients; a row with a value not sure divides. The
// divisor's reciprocal once per row here (once per op call in an op).
__attribute__((noinline)) void ScaleChecked(const float* __restrict__ g, int64_t n,
                                            const GradScale<float> s, float* __restrict__ out) {
  const float b = s.denominator, magnitude = std::fabs(b), y = 1.0f / b;
  int unsure = 0;
  if (magnitude >= 0x1p-126f && magnitude <= 0x1p126f) {
    for (int64_t j = 0; j < n; ++j) {
      bool sure;
      out[j] = CheckedQuotient(g[j] * s.numerator, b, magnitude, y, sure);
      unsure |= !sure;
    }
  } else {
    unsure = 1;
  }
  if (unsure) ScaleDividing(g, n, s, out);
}

enum Read { kPlain, kOneFactor, kDivide, kChecked, kReads };
const char* const kReadNames[] = {"as they are", "one factor", "factor, divide",
                                  "factor, checked quotients"};

struct Tables {
  float *var, *m, *v, *grad;
  std::vector<int64_t> rows[kSteps];
};

void Work(const Tables& t, int step, Read read, GradScale<float> scale, bool update, int64_t begin,
          int64_t end) {
  const tf_opt_ops::AdamStep<float> adam{1e-3f, 0.9f, 0.1f, 0.999f, 0.001f, 1e-7f, false, 0, 0};
  std::vector<float> buffer(dim);
  const int64_t* rows = t.rows[step].data();
  const float* grad = t.grad + step * kB * dim;
  for (int64_t u = begin; u < end; ++u) {
    if (update && u + kAhead < end) {
      const int64_t o = rows[u + kAhead] * dim;
      for (int64_t k = 0; k < dim; k += 16) {
        __builtin_prefetch(t.var + o + k, 1);
        __builtin_prefetch(t.m + o + k, 1);
        __builtin_prefetch(t.v + o + k, 1);
      }
    }
    const float* g = grad + u * dim;
    if (read == kOneFactor) ScaleOne(g, dim, scale, buffer.data());
    if (read == kDivide) ScaleDividing(g, dim, scale, buffer.data());
    if (read == kChecked) ScaleChecked(g, dim, scale, buffer.data());
    if (read != kPlain) g = buffer.data();
    if (update) {
      const int64_t o = rows[u] * dim;
      tf_opt_ops::LazyAdamRow<false, float, float>(t.var + o, t.m + o, t.v + o, g, dim, adam,
                                                   tf_opt_ops::RowNoise{0, 0});
    } else {
      asm volatile("" : : "r"(g) : "memory");
    }
  }
}

double StepMs(const Tables& t, int step, Read read, GradScale<float> scale, bool update) {
  const auto start = std::chrono::steady_clock::now();
  std::thread other(Work, std::cref(t), step, read, scale, update, kB / 2, kB);
  Work(t, step, read, scale, update, 0, kB / 2);
  other.join();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  const bool update = argc > 1 ? std::atoi(argv[1]) != 0 : true;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const float divisor = argc > 3 ? std::strtof(argv[3], nullptr) : 7.77f;
  Tables t;
  t.var = HugeArray(kRows * dim);
  t.m = HugeArray(kRows * dim);
  t.v = HugeArray(kRows * dim);
  t.grad = HugeArray(kSteps * kB * dim);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int64_t i = 0; i < kSteps * kB * dim; ++i) t.grad[i] = normal(rng);
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  for (auto& rows : t.rows) {
    std::shuffle(all.begin(), all.end(), rng);
    rows.assign(all.begin(), all.begin() + kB);
  }
  // The checked quotients are the divide's, value for value (one factor:
  // ScaleGradRow's, the read of global_clipnorm).
  const GradScale<float> one{1, 0.37f, 1.0f}, two{2, 1.0f, divisor};
  std::vector<float> divided(dim), checked(dim);
  int64_t differing = 0;
  for (int64_t u = 0; u < kSteps * kB; ++u) {
    ScaleDividing(t.grad + u * dim, dim, two, divided.data());
    ScaleChecked(t.grad + u * dim, dim, two, checked.data());
    differing += std::memcmp(divided.data(), checked.data(), dim * sizeof(float)) != 0;
  }
  std::printf("rows whose checked quotients differ from the divide's: %lld\n",
              static_cast<long long>(differing));
  std::vector<double> ms[kReads];
  for (int r = 0; r < rounds + 2; ++r) {
    for (int read = 0; read < kReads; ++read) {
      double sum = 0;
      for (int step = 0; step < kSteps; ++step)
        sum += StepMs(t, step, static_cast<Read>(read), read == kOneFactor ? one : two, update);
      if (r >= 2) ms[read].push_back(sum / kSteps);  // two warm-up rounds
    }
  }
  for (int read = 0; read < kReads; ++read) {
    std::sort(ms[read].begin(), ms[read].end());
    std::printf("%s%s: median %.2f ms a step\n", update ? "update, rows read " : "rows read ",
                kReadNames[read], ms[read][ms[read].size() / 2]);
  }
  return differing != 0;
}
