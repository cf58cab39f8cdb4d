// The choice of cpu_isa.h, compiled at the floor (it runs before any level).
#include "tf_opt_ops/core/cpu_isa.h"

#include <cstdlib>
#include <cstring>

namespace tf_opt_ops {
namespace cpu {
namespace {

struct Choice {
  CpuIsa isa;
  std::string warning;
};

const Choice& ChoiceAtLoad() {
  static const Choice* const choice = [] {
    auto* c = new Choice;
    c->isa = ChooseCpuIsa(std::getenv(kCpuIsaVariable), BestCpuIsa(), &c->warning);
    return c;
  }();
  return *choice;
}

// Made at load, so that a forced level is reported before the first update.
[[maybe_unused]] const Choice& kChoiceAtLoad = ChoiceAtLoad();

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx:
      break;
  }
  return "avx";
}

CpuIsa BestCpuIsa() {
  // libgcc's CPUID reading, which also checks that the operating system saves
  // the AVX and AVX-512 registers (XGETBV).
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return CpuIsa::kAvx;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    return CpuIsa::kAvx512;
  }
  return CpuIsa::kAvx2;
}

CpuIsa ChooseCpuIsa(const char* requested, CpuIsa best, std::string* warning) {
  warning->clear();
  if (requested == nullptr || requested[0] == '\0') return best;
  for (CpuIsa isa : {CpuIsa::kAvx, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (std::strcmp(requested, CpuIsaName(isa)) != 0) continue;
    if (isa <= best) return isa;
    *warning = std::string(kCpuIsaVariable) + "=" + requested + " asks for " + CpuIsaName(isa) +
               ", which this CPU lacks; running " + CpuIsaName(best) + ", the best it has";
    return best;
  }
  *warning = std::string(kCpuIsaVariable) + "=" + requested +
             " is not a level (avx, avx2 or avx512); running " + CpuIsaName(best) +
             ", the best this CPU has";
  return best;
}

CpuIsa ActiveCpuIsa() { return ChoiceAtLoad().isa; }

const std::string& CpuIsaWarning() { return ChoiceAtLoad().warning; }

}  // namespace cpu
}  // namespace tf_opt_ops
