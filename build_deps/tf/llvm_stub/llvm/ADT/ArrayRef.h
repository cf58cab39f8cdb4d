// Declarations only, for TensorFlow headers that name LLVM's ArrayRef without
// the wheel shipping LLVM's headers (TensorFlow 2.19's tf2xla headers include
// xla/stream_executor/gpu/tma_metadata.h). The XLA library compiles those
// declarations but never makes or reads the objects behind them, so its own
// copy of the type is never mixed with LLVM's. See build_deps/tf/BUILD.
#ifndef TF_OPT_OPS_LLVM_STUB_ARRAYREF_H_
#define TF_OPT_OPS_LLVM_STUB_ARRAYREF_H_

#include <cstddef>

namespace llvm {

template <typename T>
class ArrayRef {
 public:
  ArrayRef() = default;
  template <typename Container>
  ArrayRef(const Container& c) : data_(c.data()), size_(c.size()) {}  // NOLINT: implicit, as LLVM's

  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace llvm

#endif  // TF_OPT_OPS_LLVM_STUB_ARRAYREF_H_
