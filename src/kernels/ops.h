// The kernel ops (generated from kernels/ops.inc), the working precisions and the kernel sets.
#pragma once

#include <cstdint>

namespace polyquant::detail {

enum class KernelOp : std::uint8_t {
#define POLYQUANT_OP(Enum, name, works, vector) Enum,
#include "kernels/ops.inc"
#undef POLYQUANT_OP
};
inline constexpr int kNumKernelOps = 0
#define POLYQUANT_OP(Enum, name, works, vector) +1
#include "kernels/ops.inc"
#undef POLYQUANT_OP
    ;

// The stem of an op's kernel names, as ops.inc spells it ("int_quant").
constexpr const char* op_name(KernelOp op) {
  switch (op) {
#define POLYQUANT_OP(Enum, name, works, vector) \
  case KernelOp::Enum: return #name;
#include "kernels/ops.inc"
#undef POLYQUANT_OP
  }
  return "?";
}

// Working precision of a kernel; operands arrive converted to it.
enum class WorkType : std::uint8_t { kF16, kF32, kF64 };
inline constexpr int kNumWorkTypes = 3;

enum class Isa : std::uint8_t { kScalar, kAvx2, kAvx512 };
inline constexpr int kNumIsas = 3;
const char* isa_name(Isa isa);

// Expansion helpers for the columns of ops.inc. POLYQUANT_WORKS_<works>(X, Enum, name) calls
// X(Enum, name, work, WorkType enumerator) once per scalar working precision;
// POLYQUANT_IF_<vector>(...) keeps its arguments for VECTOR ops and drops them for SCALAR_ONLY.
#define POLYQUANT_WORKS_F32(X, Enum, name) X(Enum, name, f32, kF32)
#define POLYQUANT_WORKS_F32_F64(X, Enum, name) X(Enum, name, f32, kF32) X(Enum, name, f64, kF64)
#define POLYQUANT_WORKS_F16_F32_F64(X, Enum, name) \
  X(Enum, name, f16, kF16) X(Enum, name, f32, kF32) X(Enum, name, f64, kF64)
#define POLYQUANT_IF_VECTOR(...) __VA_ARGS__
#define POLYQUANT_IF_SCALAR_ONLY(...)

}  // namespace polyquant::detail
