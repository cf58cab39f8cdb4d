// The best random-row update loop this machine runs, with no TensorFlow: the
// ceiling for the sparse optimizer ops' row loops, next to the streaming
// limit the benchmark reports (in-place a += b, 3 streams). Same bytes per
// touched row as the ops (lazy Adam: read var, m, v and the gradient row,
// write var, m, v; row-wise Adagrad: read var and the gradient row, write
// var, read and write one float per row), trivial math, distinct rows
// (no grouping), tables in huge pages, 2 threads, rows prefetched ahead.
//
//   g++ -O3 -mavx2 -mfma -pthread -o /tmp/ceiling benchmarks/random_row_ceiling.cc
//   /tmp/ceiling [rows dim batch]...   (default: the bandwidth sections' cases)
//
// Prints GB/s per prefetch distance, the best one, and the streaming limit
// measured in the same run. Like the benchmark, it cycles 4 steps of rows: at
// 1M x 64, B = 16,384 their lines partly stay in a 32 MiB L3 between steps.
// Thread start-up is inside each timed step (tens of microseconds).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 2;
constexpr int kRounds = 15;

float* HugeArray(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * 4 + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  void* p = std::aligned_alloc(2 << 20, bytes);
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);  // fault the pages in now, as huge pages
  return static_cast<float*>(p);
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn(begin, end) over [0, n) on kThreads threads; returns seconds.
template <typename F>
double Parallel(int64_t n, F fn) {
  const double start = Seconds();
  std::vector<std::thread> threads;
  for (int t = 1; t < kThreads; ++t)
    threads.emplace_back(fn, n * t / kThreads, n * (t + 1) / kThreads);
  fn(int64_t{0}, n / kThreads);
  for (auto& t : threads) t.join();
  return Seconds() - start;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline void Prefetch(const float* p, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16) __builtin_prefetch(p + j, 1, 3);
}

// Lazy Adam's bytes: 3 tables of rows, each read and written, plus the gradient row.
template <int kAhead>
void AdamRows(float* var, float* m, float* v, const float* g, const int64_t* idx, int64_t dim,
              int64_t begin, int64_t end) {
  for (int64_t k = begin; k < end; ++k) {
    if (kAhead > 0 && k + kAhead < end) {
      const int64_t a = idx[k + kAhead] * dim;
      Prefetch(var + a, dim);
      Prefetch(m + a, dim);
      Prefetch(v + a, dim);
    }
    const int64_t o = idx[k] * dim;
    const float* gr = g + k * dim;
    for (int64_t j = 0; j < dim; ++j) {
      m[o + j] = 0.9f * m[o + j] + gr[j];
      v[o + j] = 0.9f * v[o + j] + gr[j] * gr[j];
      var[o + j] -= m[o + j] * v[o + j];
    }
  }
}

// Row-wise Adagrad's bytes: one table of rows read and written, the gradient
// row, one float per row read and written.
template <int kAhead>
void RowwiseRows(float* var, float* acc, const float* g, const int64_t* idx, int64_t dim,
                 int64_t begin, int64_t end) {
  for (int64_t k = begin; k < end; ++k) {
    if (kAhead > 0 && k + kAhead < end) {
      Prefetch(var + idx[k + kAhead] * dim, dim);
      __builtin_prefetch(acc + idx[k + kAhead], 1, 3);
    }
    const int64_t r = idx[k];
    const float* gr = g + k * dim;
    float sum = 0;
    for (int64_t j = 0; j < dim; ++j) sum += gr[j] * gr[j];
    const float a = acc[r] + sum;
    acc[r] = a;
    const float scale = 0.01f / (a + 1e-8f);
    float* w = var + r * dim;
    for (int64_t j = 0; j < dim; ++j) w[j] -= scale * gr[j];
  }
}

template <typename Loop>
double BestGbs(double bytes, Loop loop, int* best_ahead) {
  double best = 0;
  const int aheads[] = {0, 2, 4, 8, 16, 32};
  for (int i = 0; i < 6; ++i) {
    std::vector<double> gbs;
    for (int r = 0; r < kRounds; ++r) gbs.push_back(bytes / loop(i) / 1e9);
    const double med = Median(gbs);
    std::printf("  ahead %2d: %5.1f GB/s\n", aheads[i], med);
    if (med > best) best = med, *best_ahead = aheads[i];
  }
  return best;
}

template <typename F>
double Dispatch(int i, F f) {
  switch (i) {
    case 0:
      return f(std::integral_constant<int, 0>{});
    case 1:
      return f(std::integral_constant<int, 2>{});
    case 2:
      return f(std::integral_constant<int, 4>{});
    case 3:
      return f(std::integral_constant<int, 8>{});
    case 4:
      return f(std::integral_constant<int, 16>{});
    default:
      return f(std::integral_constant<int, 32>{});
  }
}

void Case(int64_t rows, int64_t dim, int64_t batch) {
  float* var = HugeArray(rows * dim);
  float* m = HugeArray(rows * dim);
  float* v = HugeArray(rows * dim);
  float* acc = HugeArray(rows);
  std::vector<float> g(batch * dim, 0.001f);
  std::mt19937_64 rng(0);
  // Distinct rows per step, a few steps in turn (as the benchmark's).
  std::vector<std::vector<int64_t>> steps(4);
  std::vector<int64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = i;
  for (auto& s : steps) {
    std::shuffle(all.begin(), all.end(), rng);
    s.assign(all.begin(), all.begin() + batch);
  }
  int step = 0;
  int ahead = 0;
  std::printf("%lld x %lld, B = %lld\n lazy Adam bytes (7 x 4 x dim + 8 per row):\n",
              (long long)rows, (long long)dim, (long long)batch);
  const double adam = BestGbs(
      batch * (7.0 * 4 * dim + 8),
      [&](int i) {
        const int64_t* idx = steps[step++ % 4].data();
        return Dispatch(i, [&](auto k) {
          return Parallel(batch, [&](int64_t b, int64_t e) {
            AdamRows<decltype(k)::value>(var, m, v, g.data(), idx, dim, b, e);
          });
        });
      },
      &ahead);
  std::printf(
      " lazy Adam best: %.1f GB/s (ahead %d)\n row-wise bytes (3 x 4 x dim + 16 per row):\n", adam,
      ahead);
  const double rowwise = BestGbs(
      batch * (3.0 * 4 * dim + 16),
      [&](int i) {
        const int64_t* idx = steps[step++ % 4].data();
        return Dispatch(i, [&](auto k) {
          return Parallel(batch, [&](int64_t b, int64_t e) {
            RowwiseRows<decltype(k)::value>(var, acc, g.data(), idx, dim, b, e);
          });
        });
      },
      &ahead);
  std::printf(" row-wise best: %.1f GB/s (ahead %d)\n", rowwise, ahead);
  std::free(var), std::free(m), std::free(v), std::free(acc);
}

void Streaming() {
  const int64_t n = int64_t{512} << 20 >> 2;  // 512 MiB arrays, as the benchmark's
  float* a = HugeArray(n);
  float* b = HugeArray(n);
  std::vector<double> gbs;
  for (int r = 0; r < kRounds; ++r) {
    gbs.push_back(3.0 * 4 * n /
                  Parallel(n,
                           [&](int64_t lo, int64_t hi) {
                             for (int64_t i = lo; i < hi; ++i) a[i] += b[i];
                           }) /
                  1e9);
  }
  std::printf("streaming a += b (3 streams, %d threads): %.1f GB/s\n", kThreads, Median(gbs));
  std::free(a), std::free(b);
}

}  // namespace

int main(int argc, char** argv) {
  Streaming();
  if (argc >= 4) {
    for (int i = 1; i + 2 < argc; i += 3)
      Case(std::atoll(argv[i]), std::atoll(argv[i + 1]), std::atoll(argv[i + 2]));
  } else {
    Case(1000000, 64, 16384);
    Case(1000000, 128, 131072);
  }
  Streaming();
  return 0;
}
