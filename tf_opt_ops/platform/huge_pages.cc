#include "tf_opt_ops/platform/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

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

// What the updates of one variable have seen of its buffer.
struct BufferSeen {
  uintptr_t begin = 0;  // the buffer's first huge-page boundary
  int updates = 0;      // updates in a row that found it there
  int needed = kUpdatesBeforeCollapse;
  bool collapsed = false;
};

}  // namespace

void AdviseHugePages(const void* variable, const void* data, int64_t bytes) {
  if (bytes < kHugePageMinBytes || !Enabled()) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end <= begin) return;
  bool advise = false, collapse = false;
  {
    static std::mutex mu;
    static auto* seen = new std::unordered_map<const void*, BufferSeen>();
    std::lock_guard<std::mutex> lock(mu);
    // Deleted variables leave entries behind; forgetting them all now and then
    // costs a few more calls, never correctness.
    if (seen->size() > 4096) seen->clear();
    BufferSeen& s = (*seen)[variable];
    // A variable's new buffer is allocated while the old one still holds its
    // data, so a replaced buffer always shows up at another address.
    if (s.begin != begin) {
      // It did not stay: ask the next buffer for a longer stay.
      if (s.collapsed) s.needed = std::min(2 * s.needed, 1 << 20);
      s.begin = begin;
      s.updates = 0;
      s.collapsed = false;
      advise = true;
    }
    if (!s.collapsed && ++s.updates >= s.needed) collapse = s.collapsed = true;
  }
  void* start = reinterpret_cast<void*>(begin);
  if (advise) madvise(start, end - begin, MADV_HUGEPAGE);
  if (collapse) madvise(start, end - begin, MADV_COLLAPSE);
}

}  // namespace tf_opt_ops
