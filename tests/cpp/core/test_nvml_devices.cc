// Listing CUDA devices through NVML (core/nvml_devices.h) on a stand-in for the driver's NVML
// (fake_nvml_library.cc): NVML answers only where its list must equal CUDA's, the driver's CUDA
// version is checked against the library's runtime, and the CUDA backend then lists the devices
// without calling cudaGetDeviceCount (the stand-in CUDA library counts its device queries).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda_backend.h"
#include "core/nvml_devices.h"

namespace polyquant::detail {
namespace {

constexpr int kRuntime13 = 13000;
const std::string kH100 = "NVIDIA H100 80GB HBM3 (sm_90)";

// The stand-in NVML, opened as core/nvml_devices.cc opens it (the same file: the same handle).
class FakeNvml {
 public:
  FakeNvml() : handle_(::dlopen(POLYQUANT_FAKE_NVML_LIBRARY_FILE, RTLD_NOW | RTLD_LOCAL)) {}
  bool loaded() const { return handle_ != nullptr; }
  void reset(int count, int driver_cuda = 13000, int init_error = 0) const {
    call<void (*)(int, int, int)>("polyquant_fake_nvml_reset")(count, driver_cuda, init_error);
  }
  void set_gpu(int index, const char* name, int major, int minor, bool mig) const {
    call<void (*)(int, const char*, int, int, int)>("polyquant_fake_nvml_set_gpu")(index, name, major, minor, mig ? 1 : 0);
  }
  int open() const { return call<int (*)()>("polyquant_fake_nvml_open")(); }
  int inits() const { return call<int (*)()>("polyquant_fake_nvml_inits")(); }

 private:
  template <class F>
  F call(const char* symbol) const {
    return reinterpret_cast<F>(::dlsym(handle_, symbol));
  }
  void* handle_;
};

NvmlDeviceQuery query(const char* visible) {
  return query_devices_with_nvml(POLYQUANT_FAKE_NVML_LIBRARY_FILE, visible, kRuntime13);
}

class NvmlDevices : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(nvml_.loaded()) << ::dlerror(); }
  FakeNvml nvml_;
};

TEST_F(NvmlDevices, ListsIdenticalGpusAsCudaNamesThem) {
  nvml_.reset(2);
  const NvmlDeviceQuery q = query(nullptr);
  ASSERT_TRUE(q.answered) << q.why_not;
  EXPECT_EQ(q.devices, (std::vector<std::string>{kH100, kH100}));
  EXPECT_EQ(q.reason, "");
  EXPECT_EQ(nvml_.open(), 0) << "NVML is shut down after the query";
  nvml_.reset(0);
  const NvmlDeviceQuery none = query(nullptr);
  ASSERT_TRUE(none.answered);
  EXPECT_TRUE(none.devices.empty());
}

TEST_F(NvmlDevices, FollowsCudaVisibleDevicesWhenItIsAListOfIndices) {
  nvml_.reset(4);
  EXPECT_EQ(query("2").devices, (std::vector<std::string>{kH100}));
  EXPECT_EQ(query("3,0").devices, (std::vector<std::string>{kH100, kH100}));
  EXPECT_EQ(query("0,1,2,3").devices.size(), 4u);
  const NvmlDeviceQuery hidden = query("");  // every device hidden
  ASSERT_TRUE(hidden.answered);
  EXPECT_TRUE(hidden.devices.empty());
  // What CUDA reads in its own way goes to the CUDA runtime.
  for (const char* spec : {"4", "0,0", "-1", "0,", ",1", " 0", "GPU-8f6b3c2a", "MIG-1234", "0,GPU-1", "1x", "0000000000001"}) {
    const NvmlDeviceQuery q = query(spec);
    EXPECT_FALSE(q.answered) << spec;
    EXPECT_NE(q.why_not.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << spec << ": " << q.why_not;
  }
  EXPECT_EQ(nvml_.open(), 0);
}

TEST_F(NvmlDevices, AsksCudaWhereItsOrderOrItsInstancesCouldDiffer) {
  nvml_.reset(3);
  nvml_.set_gpu(2, "NVIDIA A100-SXM4-80GB", 8, 0, false);
  NvmlDeviceQuery q = query(nullptr);
  EXPECT_FALSE(q.answered);
  EXPECT_NE(q.why_not.find("different kinds"), std::string::npos) << q.why_not;
  EXPECT_FALSE(query("0").answered) << "index 0 of CUDA's order need not be NVML's";

  nvml_.reset(2);
  nvml_.set_gpu(1, "NVIDIA H100 80GB HBM3", 9, 0, true);
  q = query(nullptr);
  EXPECT_FALSE(q.answered);
  EXPECT_NE(q.why_not.find("MIG"), std::string::npos) << q.why_not;

  nvml_.reset(2);  // same name, other capability: different kinds
  nvml_.set_gpu(0, "NVIDIA H100 80GB HBM3", 9, 1, false);
  EXPECT_FALSE(query(nullptr).answered);

  nvml_.reset(1);  // a GPU without MIG support (Turing): NVML says "not supported", not an error
  nvml_.set_gpu(0, "Tesla T4", 7, 5, false);
  q = query(nullptr);
  ASSERT_TRUE(q.answered) << q.why_not;
  EXPECT_EQ(q.devices, (std::vector<std::string>{"Tesla T4 (sm_75)"}));
  EXPECT_EQ(nvml_.open(), 0);
}

TEST_F(NvmlDevices, ADriverOlderThanTheRuntimeMakesTheBackendUnavailable) {
  nvml_.reset(1, 12080);
  const NvmlDeviceQuery q = query(nullptr);
  ASSERT_TRUE(q.answered);
  EXPECT_TRUE(q.devices.empty());
  EXPECT_EQ(q.reason,
            "the NVIDIA driver supports CUDA 12.8, older than the CUDA 13.0 runtime libpolyquant_cuda.so links: update the driver");
  nvml_.reset(1, 13020);  // a newer minor of the same major runs the library (minor-version compatibility)
  EXPECT_EQ(query(nullptr).devices, (std::vector<std::string>{kH100}));
  EXPECT_EQ(query_devices_with_nvml(POLYQUANT_FAKE_NVML_LIBRARY_FILE, nullptr, 13050).reason, "");
}

TEST_F(NvmlDevices, FailuresLeaveTheAnswerToCuda) {
  nvml_.reset(1, 13000, 9);  // NVML_ERROR_DRIVER_NOT_LOADED
  NvmlDeviceQuery q = query(nullptr);
  EXPECT_FALSE(q.answered);
  EXPECT_EQ(q.why_not, "nvmlInit_v2: Driver Not Loaded (9)");
  EXPECT_EQ(nvml_.open(), 0);

  q = query_devices_with_nvml("/nonexistent/libnvidia-ml.so.1", nullptr, kRuntime13);
  EXPECT_FALSE(q.answered);
  EXPECT_NE(q.why_not.find("/nonexistent/libnvidia-ml.so.1 cannot be loaded"), std::string::npos) << q.why_not;

  q = query_devices_with_nvml("libc.so.6", nullptr, kRuntime13);  // loads, but is no NVML
  EXPECT_FALSE(q.answered);
  EXPECT_NE(q.why_not.find("lacks a function"), std::string::npos) << q.why_not;

  const int inits = nvml_.inits();
  q = query_devices_with_nvml("off", nullptr, kRuntime13);
  EXPECT_FALSE(q.answered);
  EXPECT_EQ(q.why_not, "POLYQUANT_NVML_LIBRARY=off");
  EXPECT_EQ(nvml_.inits(), inits) << "off: NVML is not touched";
}

// Sets an environment variable for a scope (nullptr: unset), restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(NvmlDevices, TheCudaBackendListsDevicesWithoutInitialisingCuda) {
  void* cuda = ::dlopen(POLYQUANT_FAKE_CUDA_LIBRARY_FILE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cuda, nullptr) << ::dlerror();
  const auto queries = reinterpret_cast<int (*)()>(::dlsym(cuda, "polyquant_fake_cuda_device_queries"));
  ASSERT_NE(queries, nullptr);
  const ScopedEnv visible("CUDA_VISIBLE_DEVICES", "1");
  {
    const ScopedEnv library("POLYQUANT_NVML_LIBRARY", POLYQUANT_FAKE_NVML_LIBRARY_FILE);
    nvml_.reset(2);
    const int before = queries();
    const CudaBackendStatus s = load_cuda_backend(POLYQUANT_FAKE_CUDA_LIBRARY_FILE);
    EXPECT_TRUE(s.available()) << s.reason;
    EXPECT_EQ(s.devices, (std::vector<std::string>{kH100}));
    EXPECT_EQ(s.device_query, "nvml");
    EXPECT_EQ(queries(), before) << "cudaGetDeviceCount was called";

    nvml_.reset(2, 12000);  // a driver too old for the library's runtime (the stand-in's: 13.0)
    const CudaBackendStatus old = load_cuda_backend(POLYQUANT_FAKE_CUDA_LIBRARY_FILE);
    EXPECT_FALSE(old.available());
    EXPECT_NE(old.reason.find("older than the CUDA 13.0 runtime"), std::string::npos) << old.reason;
  }
  {
    // NVML off (or missing, or unsure): the library's own query, which initialises CUDA.
    const ScopedEnv library("POLYQUANT_NVML_LIBRARY", "off");
    const int before = queries();
    const CudaBackendStatus s = load_cuda_backend(POLYQUANT_FAKE_CUDA_LIBRARY_FILE);
    EXPECT_TRUE(s.available()) << s.reason;
    EXPECT_EQ(s.devices.size(), 2u) << "the stand-in's two devices";
    EXPECT_EQ(s.device_query, "cuda runtime (NVML: POLYQUANT_NVML_LIBRARY=off)");
    EXPECT_EQ(queries(), before + 1);
  }
}

}  // namespace
}  // namespace polyquant::detail
