// The XLA custom call targets' view of XLA's FFI, written against its C API
// (xla/ffi/api/c_api.h), which every TensorFlow wheel since 2.17 ships (the
// C++ binding, ffi.h, only since 2.20): the buffers of a call, errors, and
// XLA's CPU thread pool as a CpuPool. What later versions of the API added
// (the thread pool, the metadata query) is used where the header has it: by
// its API version (0.0 in TensorFlow 2.17, 0.1 from 2.18), or by whether the
// API struct has the field. Why: see docs/design.md, "XLA".
#ifndef TF_OPT_OPS_XLA_XLA_FFI_H_
#define TF_OPT_OPS_XLA_XLA_FFI_H_

#ifndef EIGEN_USE_THREADS
#error "define EIGEN_USE_THREADS before including any header (TensorFlow kernel idiom)"
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "tf_opt_ops/core/cpu_pool.h"
#include "xla/ffi/api/c_api.h"

namespace xla {
namespace ffi {
// The process's XLA FFI, exported by libtensorflow_framework.so.2 (declared
// in xla/ffi/ffi_api.h, whose other declarations we do not need).
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla

// Thread pools and the metadata query came with API version 0.1.
#define TF_OPT_OPS_XLA_FFI_HAS_0_1 (XLA_FFI_API_MAJOR > 0 || XLA_FFI_API_MINOR >= 1)

namespace tf_opt_ops {
namespace xla_ffi {

// One buffer argument or result of a call, row-major (the XLA kernels give
// every operand a descending layout).
struct Buffer {
  XLA_FFI_DataType dtype;
  void* data;
  int64_t rank;
  const int64_t* dims;

  int64_t dim(int d) const { return dims[d]; }
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d = 0; d < rank; ++d) n *= dims[d];
    return n;
  }
};

// A call of a custom call target: its buffers and a way to fail it.
class Call {
 public:
  explicit Call(XLA_FFI_CallFrame* frame) : frame_(frame) {}

  const XLA_FFI_Api* api() const { return frame_->api; }
  XLA_FFI_ExecutionContext* context() const { return frame_->ctx; }
  // Execution is the only stage our targets do anything in (they register no
  // handlers for the others, but a runtime may still call with another).
  bool executing() const { return frame_->stage == XLA_FFI_ExecutionStage_EXECUTE; }

  int64_t num_args() const { return frame_->args.size; }
  int64_t num_rets() const { return frame_->rets.size; }
  Buffer arg(int i) const { return View(frame_->args.args[i]); }
  Buffer ret(int i) const { return View(frame_->rets.rets[i]); }

  // The error XLA fails the step with (nullptr for an OK status): the status's
  // code and message, e.g. InvalidArgument naming the bad index.
  XLA_FFI_Error* Fail(const absl::Status& status) const {
    if (status.ok()) return nullptr;
    const std::string message(status.message());
    XLA_FFI_Error_Create_Args args{};
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message.c_str();
    // absl's codes and XLA FFI's are the same numbers (both are Abseil's).
    args.errc = static_cast<XLA_FFI_Error_Code>(status.code());
    return frame_->api->XLA_FFI_Error_Create(&args);
  }

 private:
  static Buffer View(void* p) {
    const auto* b = static_cast<const XLA_FFI_Buffer*>(p);
    return Buffer{b->dtype, b->data, b->rank, b->dims};
  }

  XLA_FFI_CallFrame* frame_;
};

// XLA (TensorFlow 2.18 on) calls each handler once when it is registered,
// with a metadata extension instead of buffers, to learn the FFI version the
// handler was compiled against: answers that and returns true, or returns
// false for a real call.
inline bool AnswerMetadataQuery(XLA_FFI_CallFrame* frame) {
#if TF_OPT_OPS_XLA_FFI_HAS_0_1
  XLA_FFI_Extension_Base* extension = frame->extension_start;
  if (extension == nullptr || extension->type != XLA_FFI_Extension_Metadata) return false;
  XLA_FFI_Metadata* metadata = reinterpret_cast<XLA_FFI_Metadata_Extension*>(extension)->metadata;
  metadata->api_version = XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE, nullptr,
                                              XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
  metadata->traits = 0;  // not safe to capture into a command buffer: syncs with the host
  return true;
#else
  (void)frame;
  return false;
#endif
}

// The message of an error XLA returned (and the error destroyed), or "" for
// none.
inline std::string TakeError(const XLA_FFI_Api* api, XLA_FFI_Error* error) {
  if (error == nullptr) return "";
  XLA_FFI_Error_GetMessage_Args get{};
  get.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  get.error = error;
  api->XLA_FFI_Error_GetMessage(&get);
  std::string message = get.message != nullptr ? get.message : "unknown XLA FFI error";
  XLA_FFI_Error_Destroy_Args destroy{};
  destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->XLA_FFI_Error_Destroy(&destroy);
  return message;
}

// Registers `handler` as the execute stage of custom call target `name` on
// `platform` ("Host", "CUDA"). Returns "" or XLA's error.
inline std::string RegisterHandler(const XLA_FFI_Api* api, const char* name, const char* platform,
                                   XLA_FFI_Handler* handler) {
  XLA_FFI_Handler_Register_Args args{};
  args.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE;
  args.name = XLA_FFI_ByteSpan{name, std::strlen(name)};
  args.platform = XLA_FFI_ByteSpan{platform, std::strlen(platform)};
  args.bundle.execute = handler;
  return TakeError(api, api->XLA_FFI_Handler_Register(&args));
}

// XLA's CPU thread pool (the one it runs the call with: in TensorFlow, the
// intra-op pool) as a CpuPool. XLA may run the call itself on a thread of
// that pool, and says tasks may run on the calling thread or not in parallel,
// so ParallelFor must not block on tasks it scheduled: the calling thread
// works through the blocks too, and waits only for blocks another thread has
// already started. Helpers that start after the work is done find none left
// and return, whenever they run. With no pool in the call (or a header
// without one), everything runs on the calling thread.
class FfiCpuPool final : public CpuPool {
 public:
  explicit FfiCpuPool(const Call& call)
      : api_(call.api()), context_(call.context()), threads_(NumThreads(api_, context_)) {}

  void ParallelFor(int64_t n, const Eigen::TensorOpCost& cost,
                   const std::function<void(int64_t, int64_t)>& fn) const override;

 private:
  // What the calling thread and the helpers share: the helpers may outlive
  // the call, so they hold it (and reach `fn` only through a claimed block,
  // which the calling thread waits for).
  struct Work {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t n;
    int64_t block;
    int64_t num_blocks;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::mutex mu;
    std::condition_variable all_done;

    // Runs blocks until none is left; true if it ran the last one to finish.
    void RunBlocks() {
      for (int64_t b = next.fetch_add(1); b < num_blocks; b = next.fetch_add(1)) {
        (*fn)(b * block, std::min(n, (b + 1) * block));
        if (done.fetch_add(1) + 1 == num_blocks) {
          std::lock_guard<std::mutex> lock(mu);
          all_done.notify_all();
        }
      }
    }
  };

  bool Schedule(std::shared_ptr<Work> work) const;

  // The pool's size, where the API says it (from TensorFlow 2.19; the field
  // is found by overload resolution, as older headers lack it), else the
  // machine's cores where tasks can be scheduled, else 1.
  template <typename Api>
  static auto NumThreadsOf(const Api* api, XLA_FFI_ExecutionContext* context, int)
      -> decltype(api->XLA_FFI_ThreadPool_NumThreads, int()) {
    using Args = std::remove_pointer_t<
        typename FirstParameter<decltype(api->XLA_FFI_ThreadPool_NumThreads)>::type>;
    Args args{};
    args.struct_size = sizeof(Args);
    args.ctx = context;
    int64_t threads = 0;
    args.num_threads = &threads;
    if (XLA_FFI_Error* error = api->XLA_FFI_ThreadPool_NumThreads(&args)) {
      TakeError(api, error);
      return 1;
    }
    return static_cast<int>(std::max<int64_t>(1, threads));
  }
  template <typename Api>
  static int NumThreadsOf(const Api*, XLA_FFI_ExecutionContext*, long) {
    return TF_OPT_OPS_XLA_FFI_HAS_0_1 ? static_cast<int>(std::thread::hardware_concurrency()) : 1;
  }
  static int NumThreads(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* context) {
    return NumThreadsOf(api, context, 0);
  }

  template <typename F>
  struct FirstParameter;
  template <typename R, typename A>
  struct FirstParameter<R (*)(A)> {
    using type = A;
  };

  const XLA_FFI_Api* api_;
  XLA_FFI_ExecutionContext* context_;
  int threads_;
};

inline bool FfiCpuPool::Schedule(std::shared_ptr<Work> work) const {
#if TF_OPT_OPS_XLA_FFI_HAS_0_1
  auto* task_data = new std::shared_ptr<Work>(std::move(work));
  XLA_FFI_ThreadPool_Schedule_Args args{};
  args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
  args.ctx = context_;
  args.task = [](void* data) {
    std::unique_ptr<std::shared_ptr<Work>> held(static_cast<std::shared_ptr<Work>*>(data));
    (*held)->RunBlocks();
  };
  args.data = task_data;
  if (XLA_FFI_Error* error = api_->XLA_FFI_ThreadPool_Schedule(&args)) {
    TakeError(api_, error);
    delete task_data;
    return false;
  }
  return true;
#else
  return false;
#endif
}

inline void FfiCpuPool::ParallelFor(int64_t n, const Eigen::TensorOpCost& cost,
                                    const std::function<void(int64_t, int64_t)>& fn) const {
  if (n <= 0) return;
  // As many threads as the work is worth (Eigen's cost model, as TensorFlow's
  // parallelFor uses), four blocks per thread to even out their speeds.
  const int threads =
      threads_ <= 1
          ? 1
          : std::min<int>(threads_, Eigen::TensorCostModel<Eigen::ThreadPoolDevice>::numThreads(
                                        static_cast<double>(n), cost, threads_));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  auto work = std::make_shared<Work>();
  work->fn = &fn;
  work->n = n;
  work->num_blocks = std::min<int64_t>(n, 4 * threads);
  work->block = (n + work->num_blocks - 1) / work->num_blocks;
  work->num_blocks = (n + work->block - 1) / work->block;
  for (int t = 1; t < threads; ++t) {
    if (!Schedule(work)) break;
  }
  work->RunBlocks();
  std::unique_lock<std::mutex> lock(work->mu);
  work->all_done.wait(lock, [&] { return work->done.load() == work->num_blocks; });
}

}  // namespace xla_ffi
}  // namespace tf_opt_ops

#endif  // TF_OPT_OPS_XLA_XLA_FFI_H_
