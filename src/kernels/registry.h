// Declarations of every kernel of the op list (kernels/ops.inc), and the table built from it.
#pragma once

#include <span>

#include "families/aimet/kernels.h"
#include "families/onnx/kernels.h"
#include "families/qkeras/kernels.h"
#include "families/qonnx/kernels.h"
#include "kernels/convert/kernels.h"
#include "kernels/ops.h"
#include "kernels/reduce/kernels.h"

namespace polyquant::detail {

// Every kernel of ops.inc: the scalar reference of each working precision, and the float32 kernel
// of each vector kernel set for VECTOR ops.
#define POLYQUANT_DECLARE_KERNEL(Enum, name, work, W) void name##_##work(const void*, const RowArgs&);
namespace ref {
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_DECLARE_KERNEL, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
}  // namespace ref
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_IF_##vector(POLYQUANT_DECLARE_KERNEL(Enum, name, f32, kF32))
namespace avx2 {
#include "kernels/ops.inc"
}  // namespace avx2
namespace avx512 {
#include "kernels/ops.inc"
}  // namespace avx512
#undef POLYQUANT_OP
#undef POLYQUANT_DECLARE_KERNEL

struct KernelEntry {
  KernelOp op;
  Isa isa;
  WorkType work;
  RowKernel fn;
  const char* name;  // "int_quant_f32__avx2"
};

// Every kernel compiled into this build (whether or not the CPU can run it).
std::span<const KernelEntry> all_kernels();

// The scalar reference kernel of (op, work).
RowKernel reference_kernel(KernelOp op, WorkType work);

// The kernel dispatch chose for (op, work): the best kernel set the CPU supports (or the one
// forced with POLYQUANT_ISA), falling back to the scalar reference.
RowKernel best_kernel(KernelOp op, WorkType work);

// Kernel sets this CPU supports, best first; the one in use.
std::span<const Isa> supported_isas();
Isa active_isa();
// For tests and benchmarks: the kernel of a given set, or nullptr when absent.
RowKernel kernel_for(KernelOp op, WorkType work, Isa isa);

}  // namespace polyquant::detail
