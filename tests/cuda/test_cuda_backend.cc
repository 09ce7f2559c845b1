// The CUDA backend's loading and table, checked without a GPU (and without a driver): the built
// libpolyquant_cuda.so (path: cuda_library_under_test(): $POLYQUANT_CUDA_LIBRARY or the built one)
// exports its entry point and has a launcher for every per-element op of the op list in every
// working precision ops.inc lists, and nothing else; the core loads it, reports why it is
// unavailable on a machine without a GPU, and turns a bad POLYQUANT_CUDA_LIBRARY into a reason
// instead of a crash.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "core/cuda_backend.h"
#include "core/nvml_devices.h"
#include "kernels/registry.h"
#include "library_under_test.h"
#include "polyquant/runtime.h"

namespace polyquant::detail {
namespace {

// The working precisions ops.inc lists for each op, as a bit mask over WorkType.
unsigned listed_works(KernelOp op) {
  unsigned mask = 0;
#define POLYQUANT_WORK_BIT(Enum, name, work, W) \
  if (op == KernelOp::Enum) mask |= 1u << static_cast<int>(WorkType::W);
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_WORK_BIT, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#undef POLYQUANT_WORK_BIT
  return mask;
}

bool has_row_element(KernelOp op) {
  switch (op) {
#define POLYQUANT_OP(Enum, name, works, vector) \
  case KernelOp::Enum: return kHasRowElement<KernelOp::Enum>;
#include "kernels/ops.inc"
#undef POLYQUANT_OP
  }
  return false;
}

const PolyquantCudaBackend* built_library_table() {
  void* handle = ::dlopen(cuda_library_under_test(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    ADD_FAILURE() << "dlopen " << cuda_library_under_test() << ": " << ::dlerror();
    return nullptr;
  }
  const auto entry = reinterpret_cast<PolyquantCudaEntryPoint>(::dlsym(handle, POLYQUANT_CUDA_ENTRY_POINT));
  if (entry == nullptr) {
    ADD_FAILURE() << cuda_library_under_test() << " does not export " << POLYQUANT_CUDA_ENTRY_POINT;
    return nullptr;
  }
  return entry();
}

TEST(CudaBackendLibrary, ExportsTheEntryPointOfThisBuild) {
  const PolyquantCudaBackend* t = built_library_table();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->abi_version, POLYQUANT_CUDA_ABI_VERSION);
  EXPECT_EQ(t->num_kernel_ops, static_cast<std::uint32_t>(kNumKernelOps));
  EXPECT_EQ(t->num_work_types, static_cast<std::uint32_t>(kNumWorkTypes));
  EXPECT_EQ(t->row_args_size, sizeof(RowArgs));
  EXPECT_GE(t->runtime_version, 12000);  // CUDA 12 or later
  EXPECT_NE(t->device_count, nullptr);
  EXPECT_NE(t->device_description, nullptr);
  ASSERT_NE(t->error_string, nullptr);
  EXPECT_STRNE(t->error_string(0), "");
}

// A launcher for every (op, working precision) of ops.inc whose op has a per-element row, none
// elsewhere; the host-only ops are exactly the grouped reductions and convert.
TEST(CudaBackendLibrary, HasALauncherForEveryPerElementOpOfTheList) {
  const PolyquantCudaBackend* t = built_library_table();
  ASSERT_NE(t, nullptr);
  std::set<std::string> host_only;
  int launchers = 0;
  for (int k = 0; k < kNumKernelOps; ++k) {
    const auto op = static_cast<KernelOp>(k);
    if (!has_row_element(op)) host_only.insert(op_name(op));
    for (int w = 0; w < kNumWorkTypes; ++w) {
      const bool listed = (listed_works(op) >> w) & 1u;
      const bool expected = listed && has_row_element(op);
      EXPECT_EQ(t->launch[k][w] != nullptr, expected) << op_name(op) << " work " << w;
      launchers += t->launch[k][w] != nullptr;
    }
  }
  EXPECT_EQ(host_only, (std::set<std::string>{"group_max", "product_sums", "group_min_max", "exact_sums", "convert"}));
  EXPECT_GT(launchers, 0);
}

// Without a driver or a GPU the device query is an answer with a reason, not an abort.
TEST(CudaBackendLibrary, DeviceQueryAnswersWithoutADevice) {
  const PolyquantCudaBackend* t = built_library_table();
  ASSERT_NE(t, nullptr);
  char reason[512] = {};
  const int count = t->device_count(reason, sizeof reason);
  if (count > 0) {
    char name[512] = {};
    EXPECT_EQ(t->device_description(0, name, sizeof name), 0) << name;
    EXPECT_NE(std::string(name).find("(sm_"), std::string::npos) << name;
  } else {
    EXPECT_STRNE(reason, "") << "no device and no reason";
  }
}

// Where NVML answers (core/nvml_devices.h: a GPU machine with the driver's libnvidia-ml), its device
// list equals the CUDA runtime's, name for name; elsewhere the runtime answers alone (said, passed).
TEST(CudaBackendLibrary, NvmlListsTheDevicesTheCudaRuntimeLists) {
  const PolyquantCudaBackend* t = built_library_table();
  ASSERT_NE(t, nullptr);
  const NvmlDeviceQuery nvml = query_devices_with_nvml(nvml_library_setting(), std::getenv("CUDA_VISIBLE_DEVICES"), t->runtime_version);
  if (!nvml.answered) {
    std::printf("NVML does not answer here (%s): the CUDA runtime lists the devices\n", nvml.why_not.c_str());
    return;
  }
  char reason[512] = {};
  const int count = t->device_count(reason, sizeof reason);
  if (!nvml.reason.empty()) {
    EXPECT_LT(count, 0) << "NVML: " << nvml.reason << "; the runtime found " << count << " devices";
    return;
  }
  std::vector<std::string> runtime;
  for (int d = 0; d < count; ++d) {
    char name[512] = {};
    ASSERT_EQ(t->device_description(d, name, sizeof name), 0) << name;
    runtime.emplace_back(name);
  }
  EXPECT_EQ(nvml.devices, runtime) << reason;
  std::printf("NVML and the CUDA runtime list the same %zu device(s)\n", runtime.size());
}

TEST(CudaBackendLoading, TheBuiltLibraryLoadsAndReportsItsDevicesOrWhyNot) {
  const CudaBackendStatus s = load_cuda_backend(cuda_library_under_test());
  EXPECT_EQ(s.library, cuda_library_under_test());
  ASSERT_NE(s.table, nullptr) << s.reason;
  if (s.available()) {
    EXPECT_EQ(s.reason, "");
  } else {
    EXPECT_TRUE(s.devices.empty());
    EXPECT_NE(s.reason, "");
  }
}

TEST(CudaBackendLoading, AMissingLibraryIsAReasonNamingThePath) {
  const std::string missing = "/nonexistent/dir/libpolyquant_cuda.so";
  const CudaBackendStatus s = load_cuda_backend(missing);
  EXPECT_FALSE(s.available());
  EXPECT_EQ(s.table, nullptr);
  EXPECT_EQ(s.library, missing);
  EXPECT_NE(s.reason.find("POLYQUANT_CUDA_LIBRARY=" + missing + " cannot be loaded"), std::string::npos) << s.reason;
}

TEST(CudaBackendLoading, ALibraryWithoutTheEntryPointIsRefused) {
  // Any shared library that is not the backend: the C library itself.
  const CudaBackendStatus s = load_cuda_backend("libc.so.6");
  EXPECT_FALSE(s.available());
  EXPECT_EQ(s.table, nullptr);
  EXPECT_NE(s.reason.find(std::string("has no ") + POLYQUANT_CUDA_ENTRY_POINT), std::string::npos) << s.reason;
}

// runtime_info lists the CPU backend (always available) and the CUDA one, with a reason whenever
// it is unavailable.
TEST(CudaBackendLoading, RuntimeInfoListsTheBackends) {
  const RuntimeInfo info = runtime_info();
  ASSERT_EQ(info.backends.size(), 2u);
  EXPECT_EQ(info.backends[0].name, "cpu");
  EXPECT_TRUE(info.backends[0].available);
  const BackendInfo& cuda = info.backends[1];
  EXPECT_EQ(cuda.name, "cuda");
  if (cuda.available) {
    EXPECT_FALSE(cuda.devices.empty());
    EXPECT_EQ(cuda.reason, "");
  } else {
    EXPECT_TRUE(cuda.devices.empty());
    EXPECT_NE(cuda.reason, "");
  }
}

}  // namespace
}  // namespace polyquant::detail
