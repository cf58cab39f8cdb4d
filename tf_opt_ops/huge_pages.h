// Transparent huge pages for large tables updated at random rows.
//
// A sparse update touches rows scattered over tables far larger than the TLB
// covers with 4 KiB pages, so each touched row costs a page walk per table.
// TensorFlow's CPU allocator does not ask for huge pages (NumPy does, for its
// large arrays); with 2 MiB pages far fewer touched rows miss the TLB.
// Why: see docs/design.md, "Production".
#ifndef TF_OPT_OPS_HUGE_PAGES_H_
#define TF_OPT_OPS_HUGE_PAGES_H_

#include <cstdint>

namespace tf_opt_ops {

// Tables smaller than this fit the TLB's reach well enough to leave alone.
constexpr int64_t kHugePageMinBytes = int64_t{32} << 20;

// Asks Linux, once per buffer, to back [data, data + bytes) with huge pages:
// MADV_HUGEPAGE for pages faulted later and MADV_COLLAPSE for those already
// there. Advice only: the data and its address do not change, and where
// transparent huge pages are off or the call fails nothing happens.
// TF_OPT_OPS_HUGE_PAGES=0 in the environment turns it off.
void AdviseHugePages(const void* data, int64_t bytes);

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_HUGE_PAGES_H_
