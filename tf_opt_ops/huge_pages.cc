#include "tf_opt_ops/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack the name
#endif

namespace tf_opt_ops {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

bool Enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TF_OPT_OPS_HUGE_PAGES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

}  // namespace

void AdviseHugePages(const void* data, int64_t bytes) {
  if (bytes < kHugePageMinBytes || !Enabled()) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end <= begin) return;
  static std::mutex mu;
  static std::unordered_set<uintptr_t>* advised = new std::unordered_set<uintptr_t>();
  {
    std::lock_guard<std::mutex> lock(mu);
    // A freed table's address may come back for another tensor: forgetting
    // now and then costs one more (cheap, idempotent) call, never correctness.
    if (advised->size() > 4096) advised->clear();
    if (!advised->insert(begin).second) return;
  }
  void* start = reinterpret_cast<void*>(begin);
  madvise(start, end - begin, MADV_HUGEPAGE);
  madvise(start, end - begin, MADV_COLLAPSE);
}

}  // namespace tf_opt_ops
