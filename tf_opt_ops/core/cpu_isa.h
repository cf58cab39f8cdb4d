// The instruction-set levels the CPU kernels are compiled for, and the one
// they run. cpu_kernels.cc is compiled once per level, with that level's -m
// flags, into a namespace of its own (tf_opt_ops/BUILD); cpu_dispatch.cc runs
// the level chosen here once, at load, from CPUID, or a lower one that
// TF_OPT_OPS_CPU_ISA names. Every level computes the same bits (no FMA
// contraction, the same half-precision rounding). Why: see docs/design.md,
// "Instruction sets".
#ifndef TF_OPT_OPS_CORE_CPU_ISA_H_
#define TF_OPT_OPS_CORE_CPU_ISA_H_

#include <string>

namespace tf_opt_ops {
namespace cpu {

// Ordered: each level runs wherever the next one does.
enum class CpuIsa {
  kAvx = 0,     // the floor TensorFlow's wheels require
  kAvx2 = 1,    // AVX2, FMA and F16C
  kAvx512 = 2,  // the above and AVX-512 F, BW and VL
};

// The variable that forces a level: "avx", "avx2" or "avx512".
constexpr char kCpuIsaVariable[] = "TF_OPT_OPS_CPU_ISA";

// "avx", "avx2" or "avx512".
const char* CpuIsaName(CpuIsa isa);

// The highest level this CPU and its operating system run.
CpuIsa BestCpuIsa();

// The level to run on a CPU whose best is `best`, given the variable's value
// `requested` (nullptr or empty: not set): the requested level when the CPU
// runs it, otherwise `best`, with `*warning` saying why the request was not
// followed (empty when it was, or when nothing was requested).
CpuIsa ChooseCpuIsa(const char* requested, CpuIsa best, std::string* warning);

// The level the CPU kernels run: chosen on first use (at library load), from
// BestCpuIsa() and the variable.
CpuIsa ActiveCpuIsa();

// Why the variable's request was not followed, or empty.
const std::string& CpuIsaWarning();

}  // namespace cpu
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_CORE_CPU_ISA_H_
