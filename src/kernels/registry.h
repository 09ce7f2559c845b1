// Declarations of every kernel listed in kernels.inc, and the table built from it.
#pragma once

#include <span>

#include "kernels/affine_kernels.h"
#include "kernels/qdq_kernels.h"
#include "kernels/qkeras_kernels.h"
#include "kernels/qonnx_kernels.h"
#include "kernels/reduce_kernels.h"

namespace polyquant::detail {

#define POLYQUANT_DECLARE_KERNEL_SET(ns)                       \
  namespace ns {                                               \
  void int_quant_f32(const void*, const RowArgs&);             \
  void bipolar_quant_f32(const void*, const RowArgs&);         \
  void trunc_v1_f32(const void*, const RowArgs&);              \
  void trunc_v2_f32(const void*, const RowArgs&);              \
  void float_quant_f32(const void*, const RowArgs&);           \
  void qk_bits_f32(const void*, const RowArgs&);               \
  void qk_bits_auto_f32(const void*, const RowArgs&);          \
  void qk_relu_f32(const void*, const RowArgs&);               \
  void qk_linear_f32(const void*, const RowArgs&);             \
  void group_max_f32(const void*, const RowArgs&);             \
  void product_sums_f32(const void*, const RowArgs&);          \
  void group_min_max_f32(const void*, const RowArgs&);         \
  void quantize_linear_f32(const void*, const RowArgs&);       \
  void dequantize_linear_f32(const void*, const RowArgs&);     \
  void affine_f32(const void*, const RowArgs&);                \
  void fake_quantize_f32(const void*, const RowArgs&);         \
  }
POLYQUANT_DECLARE_KERNEL_SET(ref)
POLYQUANT_DECLARE_KERNEL_SET(avx2)
POLYQUANT_DECLARE_KERNEL_SET(avx512)
#undef POLYQUANT_DECLARE_KERNEL_SET
namespace ref {
void int_quant_f16(const void*, const RowArgs&);
void bipolar_quant_f16(const void*, const RowArgs&);
void trunc_v1_f16(const void*, const RowArgs&);
void trunc_v2_f16(const void*, const RowArgs&);
void float_quant_f16(const void*, const RowArgs&);
void int_quant_f64(const void*, const RowArgs&);
void bipolar_quant_f64(const void*, const RowArgs&);
void trunc_v1_f64(const void*, const RowArgs&);
void trunc_v2_f64(const void*, const RowArgs&);
void float_quant_f64(const void*, const RowArgs&);
void quantize_linear_f64(const void*, const RowArgs&);
void dequantize_linear_f64(const void*, const RowArgs&);
void affine_f64(const void*, const RowArgs&);
void fake_quantize_f64(const void*, const RowArgs&);
void affine_grad_f32(const void*, const RowArgs&);
void affine_grad_f64(const void*, const RowArgs&);
}  // namespace ref

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
