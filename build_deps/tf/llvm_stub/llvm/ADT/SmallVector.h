// Declarations only, as ArrayRef.h beside it (see there).
#ifndef TF_OPT_OPS_LLVM_STUB_SMALLVECTOR_H_
#define TF_OPT_OPS_LLVM_STUB_SMALLVECTOR_H_

#include <vector>

namespace llvm {

template <typename T, unsigned N = 0>
class SmallVector : public std::vector<T> {
 public:
  using std::vector<T>::vector;
};

}  // namespace llvm

#endif  // TF_OPT_OPS_LLVM_STUB_SMALLVECTOR_H_
