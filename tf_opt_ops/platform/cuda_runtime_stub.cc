// The CUDA runtime functions the library's kernels call, forwarded to the
// process's libcudart.so.12, which is looked up only when first needed.
//
// The library must load where TensorFlow loads: a CPU-only machine with
// tensorflow-cpu has no CUDA library at all, so the .so cannot need one
// (DT_NEEDED), and PyPI has no static CUDA 12 runtime to link in. Each
// function here (every one our objects reference: kernel launches, the
// copies Eigen's GpuDevice makes, the fat binary registrations clang emits)
// finds the runtime at its first call, in this order:
//   1. a libcudart.so.12 already loaded in the process (TensorFlow's);
//   2. libcudart.so.12 by soname (LD_LIBRARY_PATH, ld.so.cache);
//   3. the pip package next to TensorFlow's library:
//      <dir of libtensorflow_framework.so.2>/../nvidia/cuda_runtime/lib/.
// Without one, every function returns cudaErrorSharedObjectInitFailed (the
// op fails with that error); nothing aborts, and nothing is printed.
//
// The fat binaries register at load time, before any runtime may be loaded
// (TensorFlow loads its own only when it sets up a GPU): those calls are
// recorded and replayed into the runtime when it is found. Unregistration at
// exit is skipped: the runtime may already be gone by then, and the process
// is ending.
//
// The functions are hidden (the library exports no CUDA symbol, and binds to
// none of the ones the GPU tensorflow wheel exports) and weak (a program that
// links these kernels statically next to a real CUDA runtime gets the real
// one). Why: see docs/design.md, "GPU boundary".
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

// The dl* functions at the symbol versions TensorFlow's own library binds
// (before glibc 2.34 they live in libdl.so.2), as load_guard.cc.
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#endif

#define TFO_STUB extern "C" __attribute__((visibility("hidden"), weak))

// What clang's (and nvcc's) generated registration code calls; declared by
// nvcc's internal crt/host_runtime.h, which is not meant to be included.
TFO_STUB void** CUDARTAPI __cudaRegisterFatBinary(void* fat_cubin);
TFO_STUB void CUDARTAPI __cudaRegisterFatBinaryEnd(void** handle);
TFO_STUB void CUDARTAPI __cudaUnregisterFatBinary(void** handle);
TFO_STUB void CUDARTAPI __cudaRegisterFunction(void** handle, const char* host_fun,
                                               char* device_fun, const char* device_name,
                                               int thread_limit, uint3* tid, uint3* bid,
                                               dim3* block_dim, dim3* grid_dim, int* warp_size);
TFO_STUB void CUDARTAPI __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                                          const char* device_name, int ext, size_t size,
                                          int constant, int global);
TFO_STUB unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 grid_dim, dim3 block_dim,
                                                        size_t shared_mem, CUstream_st* stream);
TFO_STUB cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* grid_dim, dim3* block_dim,
                                                          size_t* shared_mem, void* stream);

namespace {

constexpr char kRuntime[] = "libcudart.so.12";
constexpr char kFramework[] = "/libtensorflow_framework.so.2";
constexpr char kFromFramework[] = "/../nvidia/cuda_runtime/lib/libcudart.so.12";

// ------------------------------------------------ registrations at load time

struct Function {
  const char* host_fun;
  char* device_fun;
  const char* device_name;
  int thread_limit;
  uint3* tid;
  uint3* bid;
  dim3* block_dim;
  dim3* grid_dim;
  int* warp_size;
};

struct Var {
  char* host_var;
  char* device_address;
  const char* device_name;
  int ext;
  size_t size;
  int constant;
  int global;
};

// One __cudaRegisterFatBinary call. Its address is the handle the generated
// code passes back to the other registration calls.
struct FatBinary {
  void* fat_cubin;
  void** real = nullptr;    // the runtime's handle, once replayed
  bool ended = false;       // __cudaRegisterFatBinaryEnd was called
  bool ended_real = false;  // ... and replayed
  std::vector<Function> functions;
  std::vector<Var> vars;
};

struct Registry {
  std::mutex mutex;
  bool replayed = false;  // the runtime was looked up (and had everything replayed into it)
  void* runtime = nullptr;
  std::vector<FatBinary*> binaries;
};

// Never destroyed: registrations and calls may come from other libraries'
// static constructors and destructors.
Registry& GetRegistry() {
  static Registry* const registry = new Registry;
  return *registry;
}

template <typename Fn>
Fn Symbol(void* runtime, const char* name) {
  return runtime == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(runtime, name));
}

// ------------------------------------------------ finding the runtime

int AppendFramework(dl_phdr_info* info, size_t, void* data) {
  const size_t n = info->dlpi_name == nullptr ? 0 : std::strlen(info->dlpi_name);
  const size_t suffix = sizeof(kFramework) - 1;
  if (n > suffix && std::strcmp(info->dlpi_name + n - suffix, kFramework) == 0) {
    *static_cast<std::string*>(data) = std::string(info->dlpi_name, n - suffix);
    return 1;
  }
  return 0;
}

void* OpenRuntime() {
  if (void* loaded = dlopen(kRuntime, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD)) return loaded;
  if (void* found = dlopen(kRuntime, RTLD_LAZY | RTLD_LOCAL)) return found;
  std::string framework_dir;
  dl_iterate_phdr(AppendFramework, &framework_dir);
  if (framework_dir.empty()) return nullptr;
  return dlopen((framework_dir + kFromFramework).c_str(), RTLD_LAZY | RTLD_LOCAL);
}

void ReplayInto(void* runtime, FatBinary* binary) {
  using Register = void** (*)(void*);
  using End = void (*)(void**);
  using RegisterFunction = decltype(&__cudaRegisterFunction);
  using RegisterVar = decltype(&__cudaRegisterVar);
  const auto reg = Symbol<Register>(runtime, "__cudaRegisterFatBinary");
  const auto end = Symbol<End>(runtime, "__cudaRegisterFatBinaryEnd");
  const auto function = Symbol<RegisterFunction>(runtime, "__cudaRegisterFunction");
  const auto var = Symbol<RegisterVar>(runtime, "__cudaRegisterVar");
  if (reg == nullptr || function == nullptr || var == nullptr) return;
  if (binary->real == nullptr) binary->real = reg(binary->fat_cubin);
  for (const Function& f : binary->functions) {
    function(binary->real, f.host_fun, f.device_fun, f.device_name, f.thread_limit, f.tid, f.bid,
             f.block_dim, f.grid_dim, f.warp_size);
  }
  binary->functions.clear();
  for (const Var& v : binary->vars) {
    var(binary->real, v.host_var, v.device_address, v.device_name, v.ext, v.size, v.constant,
        v.global);
  }
  binary->vars.clear();
  if (binary->ended && !binary->ended_real && end != nullptr) {
    end(binary->real);
    binary->ended_real = true;
  }
}

// The runtime (nullptr: none), looked up once, at the first call that needs
// it; every registration recorded until then is replayed into it first.
void* Runtime() {
  static void* const runtime = [] {
    Registry& registry = GetRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.runtime = OpenRuntime();
    for (FatBinary* binary : registry.binaries) {
      if (registry.runtime != nullptr) ReplayInto(registry.runtime, binary);
    }
    registry.replayed = true;
    return registry.runtime;
  }();
  return runtime;
}

FatBinary* Binary(void** handle) { return reinterpret_cast<FatBinary*>(handle); }

// For each forwarded function: the runtime's, or nullptr.
template <typename Fn>
Fn Forward(const char* name) {
  return Symbol<Fn>(Runtime(), name);
}

cudaError_t Missing() {
  return Runtime() == nullptr ? cudaErrorSharedObjectInitFailed
                              : cudaErrorSharedObjectSymbolNotFound;
}

}  // namespace

// ------------------------------------------------ registration (recorded)

TFO_STUB void** CUDARTAPI __cudaRegisterFatBinary(void* fat_cubin) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  FatBinary* binary = new FatBinary;
  binary->fat_cubin = fat_cubin;
  registry.binaries.push_back(binary);
  if (registry.replayed && registry.runtime != nullptr) ReplayInto(registry.runtime, binary);
  return reinterpret_cast<void**>(binary);
}

TFO_STUB void CUDARTAPI __cudaRegisterFunction(void** handle, const char* host_fun,
                                               char* device_fun, const char* device_name,
                                               int thread_limit, uint3* tid, uint3* bid,
                                               dim3* block_dim, dim3* grid_dim, int* warp_size) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  FatBinary* binary = Binary(handle);
  binary->functions.push_back(Function{host_fun, device_fun, device_name, thread_limit, tid, bid,
                                       block_dim, grid_dim, warp_size});
  if (registry.replayed && registry.runtime != nullptr) ReplayInto(registry.runtime, binary);
}

TFO_STUB void CUDARTAPI __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                                          const char* device_name, int ext, size_t size,
                                          int constant, int global) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  FatBinary* binary = Binary(handle);
  binary->vars.push_back(Var{host_var, device_address, device_name, ext, size, constant, global});
  if (registry.replayed && registry.runtime != nullptr) ReplayInto(registry.runtime, binary);
}

TFO_STUB void CUDARTAPI __cudaRegisterFatBinaryEnd(void** handle) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  FatBinary* binary = Binary(handle);
  binary->ended = true;
  if (registry.replayed && registry.runtime != nullptr) ReplayInto(registry.runtime, binary);
}

// Called from an atexit handler: nothing to do (see the top of the file).
TFO_STUB void CUDARTAPI __cudaUnregisterFatBinary(void**) {}

// ------------------------------------------------ launches and the API

TFO_STUB unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 grid_dim, dim3 block_dim,
                                                        size_t shared_mem, CUstream_st* stream) {
  static const auto real =
      Forward<decltype(&__cudaPushCallConfiguration)>("__cudaPushCallConfiguration");
  // Non-zero skips the launch; the launcher's cudaGetLastError() reports why.
  return real == nullptr ? 1u : real(grid_dim, block_dim, shared_mem, stream);
}

TFO_STUB cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* grid_dim, dim3* block_dim,
                                                          size_t* shared_mem, void* stream) {
  static const auto real =
      Forward<decltype(&__cudaPopCallConfiguration)>("__cudaPopCallConfiguration");
  return real == nullptr ? Missing() : real(grid_dim, block_dim, shared_mem, stream);
}

TFO_STUB const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  static const auto real = Forward<decltype(&cudaGetErrorString)>("cudaGetErrorString");
  if (real != nullptr) return real(error);
  if (error == cudaErrorSharedObjectInitFailed && Runtime() == nullptr) {
    return "no CUDA runtime: libcudart.so.12 is neither loaded, nor found by the dynamic "
           "loader, nor installed next to TensorFlow (pip: nvidia-cuda-runtime-cu12)";
  }
  return "unknown CUDA error (the CUDA runtime has no cudaGetErrorString)";
}

// One forwarding definition per function returning cudaError_t. `name` may
// be a macro (cudaGetDeviceProperties is cudaGetDeviceProperties_v2 in the
// CUDA 12 headers): the runtime exports the expanded name.
#define TFO_NAME_(name) #name
#define TFO_NAME(name) TFO_NAME_(name)
#define TFO_FORWARD(name, params, args)                                \
  TFO_STUB cudaError_t CUDARTAPI name params {                         \
    static const auto real = Forward<decltype(&name)>(TFO_NAME(name)); \
    return real == nullptr ? Missing() : real args;                    \
  }

// Launches, and what the launchers, CUB and Eigen's GpuDevice call.
TFO_FORWARD(cudaLaunchKernel,
            (const void* func, dim3 grid_dim, dim3 block_dim, void** args, size_t shared_mem,
             cudaStream_t stream),
            (func, grid_dim, block_dim, args, shared_mem, stream))
TFO_FORWARD(cudaGetLastError, (), ())
TFO_FORWARD(cudaPeekAtLastError, (), ())
TFO_FORWARD(cudaGetDevice, (int* device), (device))
TFO_FORWARD(cudaSetDevice, (int device), (device))
TFO_FORWARD(cudaGetDeviceCount, (int* count), (count))
TFO_FORWARD(cudaDeviceGetAttribute, (int* value, cudaDeviceAttr attr, int device),
            (value, attr, device))
TFO_FORWARD(cudaFuncGetAttributes, (cudaFuncAttributes * attr, const void* func), (attr, func))
TFO_FORWARD(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
            (int* num_blocks, const void* func, int block_size, size_t dynamic_smem,
             unsigned int flags),
            (num_blocks, func, block_size, dynamic_smem, flags))
TFO_FORWARD(cudaMemcpyAsync,
            (void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream),
            (dst, src, count, kind, stream))
TFO_FORWARD(cudaMemsetAsync, (void* dst, int value, size_t count, cudaStream_t stream),
            (dst, value, count, stream))
TFO_FORWARD(cudaStreamSynchronize, (cudaStream_t stream), (stream))

// The GPU check's C API (gpu_check/capi.cu.cc).
TFO_FORWARD(cudaGetDeviceProperties, (cudaDeviceProp * prop, int device), (prop, device))
TFO_FORWARD(cudaMemGetInfo, (size_t * free, size_t* total), (free, total))
TFO_FORWARD(cudaMalloc, (void** ptr, size_t size), (ptr, size))
TFO_FORWARD(cudaFree, (void* ptr), (ptr))
TFO_FORWARD(cudaStreamCreateWithFlags, (cudaStream_t * stream, unsigned int flags), (stream, flags))
TFO_FORWARD(cudaEventCreate, (cudaEvent_t * event), (event))
TFO_FORWARD(cudaEventRecord, (cudaEvent_t event, cudaStream_t stream), (event, stream))
TFO_FORWARD(cudaEventSynchronize, (cudaEvent_t event), (event))
TFO_FORWARD(cudaEventElapsedTime, (float* ms, cudaEvent_t start, cudaEvent_t end), (ms, start, end))
