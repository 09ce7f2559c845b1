// Kernel table built from the op list (kernels/ops.inc), CPU feature detection and the one-time dispatch choice.
#include "kernels/registry.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/cuda_backend.h"
#include "core/parallel.h"
#include "polyquant/error.h"
#include "polyquant/runtime.h"

namespace polyquant::detail {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

namespace {

// Every kernel of ops.inc, named <op>_<work>__<kernel set> ("int_quant_f32__avx2"). The vector
// kernel sets are listed only where this build compiles them (x86-64).
const std::vector<KernelEntry>& table() {
  static const std::vector<KernelEntry> entries = {
#define POLYQUANT_SCALAR_ENTRY(Enum, name, work, W) \
  {KernelOp::Enum, Isa::kScalar, WorkType::W, &ref::name##_##work, #name "_" #work "__scalar"},
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_SCALAR_ENTRY, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#undef POLYQUANT_SCALAR_ENTRY
#if defined(POLYQUANT_HAVE_X86_KERNELS)
#define POLYQUANT_OP(Enum, name, works, vector)                                                   \
  POLYQUANT_IF_##vector({KernelOp::Enum, Isa::kAvx2, WorkType::kF32, &avx2::name##_f32, #name "_f32__avx2"}, \
                        {KernelOp::Enum, Isa::kAvx512, WorkType::kF32, &avx512::name##_f32, #name "_f32__avx512"},)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#endif
  };
  return entries;
}

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
#if defined(POLYQUANT_HAVE_X86_KERNELS)
    case Isa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    case Isa::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && cpu_supports(Isa::kAvx2);
#endif
    default: return false;
  }
}

std::string supported_list(const std::vector<Isa>& supported) {
  std::string allowed;
  for (Isa isa : supported) allowed += std::string(allowed.empty() ? "" : ", ") + isa_name(isa);
  return allowed;
}

// The kernel of each (op, work) for every kernel set, computed once; `active` picks the table in
// use. Switching sets (set_kernel_set, for tests and benchmarks) is one atomic store.
struct Dispatch {
  std::vector<Isa> supported;
  std::atomic<Isa> active{Isa::kScalar};
  RowKernel best[kNumIsas][kNumKernelOps][kNumWorkTypes] = {};

  Isa find(std::string_view name, const char* what) const {
    for (Isa isa : supported) {
      if (name == isa_name(isa)) return isa;
    }
    throw Error(ErrorKind::kValue, std::string(what) + ": '" + std::string(name) +
                                       "' is not a kernel set this CPU supports; allowed: " + supported_list(supported));
  }
};

// Built in place (Dispatch holds an atomic, so it cannot be returned by value).
void build_dispatch(Dispatch& r) {
  r.supported.clear();
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kScalar}) {
    if (cpu_supports(isa)) r.supported.push_back(isa);
  }
  // For each set: scalar first, then better sets up to it overwrite where they have a kernel.
  for (Isa target : r.supported) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (static_cast<int>(isa) > static_cast<int>(target)) continue;
      for (const auto& e : table()) {
        if (e.isa == isa) r.best[static_cast<int>(target)][static_cast<int>(e.op)][static_cast<int>(e.work)] = e.fn;
      }
    }
  }
  Isa active = r.supported.front();
  if (const char* forced = std::getenv("POLYQUANT_ISA"); forced && *forced) active = r.find(forced, "POLYQUANT_ISA");
  r.active.store(active);
}

Dispatch& dispatch() {
  static Dispatch d;
  static const bool built = (build_dispatch(d), true);  // thread-safe once; throws again until it succeeds
  (void)built;
  return d;
}

}  // namespace

std::span<const KernelEntry> all_kernels() { return table(); }

RowKernel kernel_for(KernelOp op, WorkType work, Isa isa) {
  for (const auto& e : table()) {
    if (e.op == op && e.work == work && e.isa == isa) return e.fn;
  }
  return nullptr;
}

RowKernel reference_kernel(KernelOp op, WorkType work) { return kernel_for(op, work, Isa::kScalar); }

RowKernel best_kernel(KernelOp op, WorkType work) {
  const Dispatch& d = dispatch();
  return d.best[static_cast<int>(d.active.load(std::memory_order_relaxed))][static_cast<int>(op)][static_cast<int>(work)];
}

std::span<const Isa> supported_isas() { return dispatch().supported; }
Isa active_isa() { return dispatch().active.load(std::memory_order_relaxed); }

}  // namespace polyquant::detail

namespace polyquant {

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.version = POLYQUANT_VERSION_STRING;
  info.isa = detail::isa_name(detail::active_isa());
  for (auto isa : detail::supported_isas()) info.supported.emplace_back(detail::isa_name(isa));
  info.num_threads = detail::num_threads();
  BackendInfo cpu;
  cpu.name = "cpu";
  cpu.available = true;
  info.backends.push_back(cpu);
  const detail::CudaBackendStatus& cuda = detail::cuda_backend();
  BackendInfo gpu;
  gpu.name = "cuda";
  gpu.available = cuda.available();
  gpu.library = cuda.library;
  gpu.devices = cuda.devices;
  gpu.reason = cuda.reason;
  info.backends.push_back(gpu);
  return info;
}

void set_kernel_set(std::string_view name) {
  detail::Dispatch& d = detail::dispatch();
  d.active.store(d.find(name, "kernel set"), std::memory_order_relaxed);
}

void set_num_threads(int n) { detail::set_thread_limit(n); }

}  // namespace polyquant
