// The CPU kernels' instruction-set level (core/cpu_isa.h), exported for the
// Python package (tf_opt_ops.cpu_isa(), read through ctypes), and a warning
// on stderr at load when TF_OPT_OPS_CPU_ISA asked for a level that is not run.
// Part of the ops library only: the XLA library makes the same choice from
// the same CPU and variable, silently, so the warning comes once per process.
#include <cstdio>

#include "tf_opt_ops/core/cpu_isa.h"

extern "C" __attribute__((visibility("default"))) const char* TfOptOpsCpuIsa() {
  return tf_opt_ops::cpu::CpuIsaName(tf_opt_ops::cpu::ActiveCpuIsa());
}

namespace tf_opt_ops {
namespace {

[[maybe_unused]] const bool kWarnedAtLoad = [] {
  const std::string& warning = cpu::CpuIsaWarning();
  if (!warning.empty()) std::fprintf(stderr, "tf_opt_ops: %s\n", warning.c_str());
  return true;
}();

}  // namespace
}  // namespace tf_opt_ops
