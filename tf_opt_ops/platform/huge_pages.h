// Transparent huge pages for large tables updated at random rows.
//
// A sparse update touches rows scattered over tables far larger than the TLB
// covers with 4 KiB pages, so each touched row costs a page walk per table.
// TensorFlow's CPU allocator does not ask for huge pages (NumPy does, for its
// large arrays); with 2 MiB pages far fewer touched rows miss the TLB.
// Why: see docs/design.md, "Choices".
#ifndef TF_OPT_OPS_PLATFORM_HUGE_PAGES_H_
#define TF_OPT_OPS_PLATFORM_HUGE_PAGES_H_

#include <cstdint>

namespace tf_opt_ops {

// Tables smaller than this fit the TLB's reach well enough to leave alone.
constexpr int64_t kHugePageMinBytes = int64_t{32} << 20;

// Sparse updates in a row that must find a variable in the same buffer before
// that buffer is collapsed into huge pages; doubled each time a collapsed
// buffer is replaced. Collapsing copies the whole buffer, so it is only worth
// it for a buffer that stays: a variable whose buffer is replaced every few
// steps (a dense assign between sparse updates, such as a Keras constraint)
// stops paying for it after a few tries.
constexpr int kUpdatesBeforeCollapse = 4;

// Called on each CPU sparse update of `variable` (any pointer identifying it
// for its lifetime; its buffer may change) whose buffer is [data, data +
// bytes). Asks Linux to back that buffer with huge pages: MADV_HUGEPAGE at
// once (pages faulted later), MADV_COLLAPSE (the pages already there) once
// the buffer has stayed for kUpdatesBeforeCollapse updates. Advice only: the
// data and its address do not change, and where transparent huge pages are
// off or a call fails nothing happens. TF_OPT_OPS_HUGE_PAGES=0 in the
// environment turns it off.
void AdviseHugePages(const void* variable, const void* data, int64_t bytes);

}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_PLATFORM_HUGE_PAGES_H_
