// memcal-measure counters shim: a counting CPU allocator (exact bytes, every thread, optional cap),
// CPU/CUDA autocast switches, the runtime torch version and, with MEMCAL_CUDA, the CUDA caching
// allocator's statistics. Compiled by build.rs with the `cc` crate against libtorch's headers.
//
// Every function is `extern "C"` and never lets a C++ exception cross into Rust: failures are
// reported through the return value and a message buffer.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <ATen/autocast_mode.h>
#include <ATen/Version.h>
#include <torch/headeronly/version.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#ifdef MEMCAL_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>

// Declared by ATen/cuda/CUDAContextLight.h, which also pulls in cuBLAS/cuSPARSE/cuSOLVER headers
// that the pip CUDA runtime package does not ship; the symbol is exported by libtorch_cuda.
namespace at::cuda {
cudaDeviceProp* getDeviceProperties(c10::DeviceIndex device);
}
#endif

namespace {

void write_message(const std::string& text, char* buf, size_t len) {
  if (buf == nullptr || len == 0) return;
  size_t n = text.size() < len - 1 ? text.size() : len - 1;
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
}

// Each allocation carries a header holding its requested size, so that the deleter (a plain
// function pointer, as `raw_deleter` requires) knows how many bytes to give back. 64 bytes keeps
// the payload at the default allocator's 64-byte alignment.
constexpr size_t kHeader = 64;

std::atomic<uint64_t> g_current{0};
std::atomic<uint64_t> g_peak{0};
std::atomic<uint64_t> g_cap{0};  // 0: no cap
std::atomic<uint64_t> g_refused{0};
c10::Allocator* g_inner = nullptr;

void counting_delete(void* ptr) {
  if (ptr == nullptr) return;
  char* base = static_cast<char*>(ptr) - kHeader;
  uint64_t n = 0;
  std::memcpy(&n, base, sizeof(n));
  g_current.fetch_sub(n, std::memory_order_relaxed);
  g_inner->raw_deallocate(base);
}

struct CountingCPUAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) {
      return {nullptr, nullptr, &counting_delete, c10::Device(c10::DeviceType::CPU)};
    }
    uint64_t cap = g_cap.load(std::memory_order_relaxed);
    uint64_t now = g_current.fetch_add(n, std::memory_order_relaxed) + n;
    if (cap != 0 && now > cap) {
      g_current.fetch_sub(n, std::memory_order_relaxed);
      g_refused.fetch_add(1, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false,
          "CPU out of memory: tried to allocate ", n, " bytes with ", now - n,
          " bytes allocated under an emulated capacity of ", cap,
          " bytes (memcal counting allocator)");
    }
    uint64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* base = nullptr;
    try {
      base = g_inner->raw_allocate(n + kHeader);
    } catch (...) {
      g_current.fetch_sub(n, std::memory_order_relaxed);
      throw;
    }
    uint64_t size = n;
    std::memcpy(base, &size, sizeof(size));
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &counting_delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &counting_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CountingCPUAllocator g_counting;

at::DeviceType device_type(int cuda) {
  return cuda ? at::kCUDA : at::kCPU;
}

}  // namespace

extern "C" {

// Installs the counting allocator in front of the default CPU allocator. Returns 0 on success.
int memcal_cpu_install(char* err, size_t err_len) {
  try {
    if (g_inner == nullptr) {
      g_inner = c10::GetDefaultCPUAllocator();
      if (g_inner->raw_deleter() == nullptr) {
        write_message("the default CPU allocator has no raw deleter", err, err_len);
        g_inner = nullptr;
        return 1;
      }
      c10::SetCPUAllocator(&g_counting, /*priority=*/200);
    }
    if (c10::GetCPUAllocator() != &g_counting) {
      write_message("c10::SetCPUAllocator did not install the counting allocator", err, err_len);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

int memcal_cpu_installed() {
  return g_inner != nullptr && c10::GetCPUAllocator() == &g_counting;
}

void memcal_cpu_stats(uint64_t* current, uint64_t* peak) {
  *current = g_current.load(std::memory_order_relaxed);
  *peak = g_peak.load(std::memory_order_relaxed);
}

void memcal_cpu_reset_peak() {
  g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void memcal_cpu_set_cap(uint64_t bytes) {
  g_cap.store(bytes, std::memory_order_relaxed);
}

uint64_t memcal_cpu_refused() {
  return g_refused.load(std::memory_order_relaxed);
}

// Turns autocast on or off for the CPU (cuda = 0) or CUDA (cuda = 1) with bfloat16. Turning it off
// clears the autocast cache, as leaving torch.autocast's outermost context does.
int memcal_autocast(int cuda, int enabled, char* err, size_t err_len) {
  try {
    at::DeviceType dt = device_type(cuda);
    if (enabled) {
      at::autocast::set_autocast_dtype(dt, at::kBFloat16);
      at::autocast::set_autocast_enabled(dt, true);
      at::autocast::increment_nesting();
    } else {
      at::autocast::set_autocast_enabled(dt, false);
      if (at::autocast::decrement_nesting() <= 0) {
        at::autocast::clear_cache();
      }
    }
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

int memcal_autocast_enabled(int cuda) {
  return at::autocast::is_autocast_enabled(device_type(cuda)) ? 1 : 0;
}

// The torch version of the loaded library (from at::show_config's build settings), falling back
// to the headers' version when the settings do not carry it.
void memcal_torch_version(char* buf, size_t len) {
  std::string version = TORCH_VERSION;
  try {
    std::string config = at::show_config();
    const std::string key = "TORCH_VERSION=";
    size_t at = config.find(key);
    if (at != std::string::npos) {
      size_t start = at + key.size();
      size_t end = config.find_first_of(", \n", start);
      version = config.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
  } catch (...) {
  }
  write_message(version, buf, len);
}

// 1 when the shim was compiled with CUDA support.
int memcal_has_cuda_support() {
#ifdef MEMCAL_CUDA
  return 1;
#else
  return 0;
#endif
}

#ifdef MEMCAL_CUDA
// Number of visible CUDA devices (0 when CUDA is unusable); never throws.
int memcal_cuda_device_count() {
  try {
    return static_cast<int>(c10::cuda::device_count());
  } catch (...) {
    return 0;
  }
}

// Initialises CUDA in torch (the caching allocator's per-device state exists only after it) and
// makes `dev` the current device.
int memcal_cuda_init(int dev, char* err, size_t err_len) {
  try {
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(dev));
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

// stats: allocated current, allocated peak, reserved current, reserved peak (AGGREGATE).
int memcal_cuda_stats(int dev, uint64_t* out, char* err, size_t err_len) {
  try {
    using c10::CachingAllocator::StatType;
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(dev));
    size_t agg = static_cast<size_t>(StatType::AGGREGATE);
    out[0] = static_cast<uint64_t>(stats.allocated_bytes[agg].current);
    out[1] = static_cast<uint64_t>(stats.allocated_bytes[agg].peak);
    out[2] = static_cast<uint64_t>(stats.reserved_bytes[agg].current);
    out[3] = static_cast<uint64_t>(stats.reserved_bytes[agg].peak);
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

int memcal_cuda_reset_peak(int dev, char* err, size_t err_len) {
  try {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(dev));
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

int memcal_cuda_set_fraction(int dev, double fraction, char* err, size_t err_len) {
  try {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(dev));
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

int memcal_cuda_synchronize(int dev, char* err, size_t err_len) {
  try {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(dev));
    c10::cuda::device_synchronize();
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}

// Device name, total memory in bytes and the CUDA runtime version (e.g. 13000).
int memcal_cuda_properties(int dev, char* name, size_t name_len, uint64_t* total, long* cudart,
                           char* err, size_t err_len) {
  try {
    cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(dev));
    write_message(prop->name, name, name_len);
    *total = static_cast<uint64_t>(prop->totalGlobalMem);
    *cudart = at::detail::getCUDAHooks().versionCUDART();
    return 0;
  } catch (const std::exception& e) {
    write_message(e.what(), err, err_len);
    return 1;
  }
}
#endif

}  // extern "C"
