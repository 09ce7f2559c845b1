// Kernels with computed operands: an op hands the engine its raw inputs (x, scales, bit widths,
// ...) and says how some kernel operands derive from them (a truncation scale from two bit widths,
// integer bounds from a width). The fused row adapter computes each derived operand per block of a
// row, into per-thread scratch that stays in L1/L2, and calls the kernel row with it: per-element
// parameters then cost one streaming pass over their bytes, with no derived tensor written and
// read back. A derived operand whose sources are all broadcast in a row is computed once for the
// row and reaches the kernel as a broadcast value (per-tensor and per-channel rows keep their
// unblocked, streaming kernel calls).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "core/elementwise.h"
#include "core/half.h"

namespace polyquant::detail {

// One element of a parameter, exact whatever its dtype, as a derivation reads it.
struct ParamValue {
  double f = 0;            // the value as numpy's cast to float64 gives it (exact for floats)
  std::uint64_t bits = 0;  // integer dtypes (bool: 0/1): the value's two's-complement bits; floats: 0
};

inline bool is_signed_integer(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
}
// Exact value of integer `bits` of dtype t, rounded once to float64 (numpy's astype).
inline double int_to_double(DType t, std::uint64_t bits) {
  return is_signed_integer(t) ? static_cast<double>(static_cast<std::int64_t>(bits)) : static_cast<double>(bits);
}

// Reads element j of a contiguous run of dtype t.
inline ParamValue read_param(DType t, const void* p, std::int64_t j) {
  ParamValue v;
  switch (t) {
    case DType::kFloat16: v.f = half_bits_to_float(static_cast<const std::uint16_t*>(p)[j]); return v;
    case DType::kFloat32: v.f = static_cast<const float*>(p)[j]; return v;
    case DType::kFloat64: v.f = static_cast<const double*>(p)[j]; return v;
    case DType::kInt8: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int8_t*>(p)[j]}); break;
    case DType::kInt16: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int16_t*>(p)[j]}); break;
    case DType::kInt32: v.bits = static_cast<std::uint64_t>(std::int64_t{static_cast<const std::int32_t*>(p)[j]}); break;
    case DType::kInt64: v.bits = static_cast<std::uint64_t>(static_cast<const std::int64_t*>(p)[j]); break;
    case DType::kUInt8: v.bits = static_cast<const std::uint8_t*>(p)[j]; break;
    case DType::kUInt16: v.bits = static_cast<const std::uint16_t*>(p)[j]; break;
    case DType::kUInt32: v.bits = static_cast<const std::uint32_t*>(p)[j]; break;
    case DType::kUInt64: v.bits = static_cast<const std::uint64_t*>(p)[j]; break;
    case DType::kBool: v.bits = static_cast<const std::uint8_t*>(p)[j] != 0; break;
    default:  // ONNX-only dtypes never reach the QONNX / QKeras parameter paths (bindings refuse them)
      v.f = std::numeric_limits<double>::quiet_NaN();
      return v;
  }
  v.f = int_to_double(t, v.bits);
  return v;
}

inline constexpr int kMaxDerived = 4;         // derived operands per call
inline constexpr int kMaxDerivedSources = 4;  // sources per derived operand

// A source or kernel operand that is derived operand d (instead of engine operand i).
inline constexpr int derived_operand(int d) { return kMaxOperands + d; }

// Elements per block of derived values: a few blocks of every operand fit in L2 with the rows.
inline constexpr std::int64_t kDeriveBlock = 1024;

// A run of one source of a derivation: m contiguous values of `dtype`, or one value (broadcast).
// A derived source is a run of float64 (its values are exact in their own dtype, so reading them
// as float64 gives the ParamValue a tensor of that dtype would).
struct SourceRun {
  const void* data = nullptr;
  DType dtype = DType::kFloat64;
  bool broadcast = false;
  std::uint8_t size = 8;  // dtype_size(dtype)
};

// Computes m <= kDeriveBlock values of a derived operand, out[i] from element i of each source run;
// each result is exact in the derivation's float dtype. Returns true when the block is one value,
// then written to out[0] only (the block reaches the kernel, and later derivations, as one
// broadcast value, which takes the kernels' per-tensor paths). Must not throw: an op validates
// what can be invalid before the fused pass (the output is then untouched).
using DeriveBlockFn = bool (*)(const void* ctx, const SourceRun* sources, std::int64_t m, double* out);


// The first i in (from, end) whose element of a non-broadcast run differs in its bits from
// element `from` (equal bits: equal ParamValue), or end.
std::int64_t run_end(const SourceRun& run, std::int64_t from, std::int64_t end);

struct Derivation {
  std::array<int, kMaxDerivedSources> sources{};  // engine operand i, or derived_operand(d) for an earlier d
  int num_sources = 0;
  DType kernel_dtype = DType::kFloat32;  // float dtype the kernel reads the value in (rounded once)
  DeriveBlockFn fn = nullptr;
  const void* ctx = nullptr;
};

// Optional per-row parameters: flags of the kernel that depend on a broadcast derived value
// (FloatQuant's max_fits_float32). Writes a copy into `storage` (kRowParamsBytes, 16-aligned) and
// returns it, or returns `params` unchanged.
inline constexpr std::size_t kRowParamsBytes = 256;
using RowParamsFn = const void* (*)(const void* params, const RowArgs& kernel_args, void* storage);

struct FusedCall {
  std::span<const TensorView> inputs;    // engine operands, each broadcastable to out.shape
  std::span<const DType> input_dtypes;   // dtype each is read in: sources of derivations in their own dtype
  std::span<const Derivation> derived;   // in dependency order
  std::span<const int> kernel_operands;  // kernel operand k: engine operand i or derived_operand(d)
  MutableTensorView out;
  DType kernel_out_dtype = DType::kFloat32;
  RowKernel kernel = nullptr;
  const void* params = nullptr;
  RowParamsFn row_params = nullptr;
  // The kernel's op and working precision: the device backend's launcher (as ElementwiseCall's).
  std::optional<KernelOp> op;
  WorkType work = WorkType::kF32;
};

// One pass of the engine (broadcasting, strides, overlap buffering, threads, streaming stores)
// with the derived operands computed per block. Throws only before any output is written.
void run_fused(const FusedCall& call);

}  // namespace polyquant::detail
