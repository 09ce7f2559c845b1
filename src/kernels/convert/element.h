// numpy's astype for one element, host and device code: the spec of every dtype conversion the
// engine performs (an operand of another dtype than the kernel reads, an output of another dtype
// than the kernel writes). convert_values_scalar (core/elementwise.cc) loops over these on the
// host, with the target's switch hoisted out of its loops; the CUDA backend's conversion kernel
// calls convert_element for each element of a strided view. One spec, two compilations.
//
// The rules: float64 -> float32 -> float16 round to nearest even from the exact value; integers to
// float32 round once from the exact value (64-bit integers included); float16 and bfloat16 widen
// exactly; to an ONNX-only type (bfloat16, minifloats) through float32 as ml_dtypes does, to a
// sub-byte integer its low bits (the truncated integer part; NaN -> 0). NaN results are x86's
// (core/x86_nan.h): sign and payload's top bits kept, quieted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/half.h"
#include "core/minifloat.h"
#include "core/target.h"
#include "core/x86_nan.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {
inline namespace POLYQUANT_TARGET_NAMESPACE {

// Bytes per element of `t` (sub-byte types are stored one element per byte): dtype_size's table.
POLYQUANT_HD constexpr std::size_t element_size(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64: return 8;
    default: return 1;
  }
}

// Element i of `p` (dtype t) as T (float, double): exact for every type but 64-bit integers and
// float64 into float (rounded once, to nearest even).
template <class T>
POLYQUANT_HD inline T load_as(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kFloat16: return x86_cast<T>(half_bits_to_float(static_cast<const std::uint16_t*>(p)[i]));
    case DType::kFloat32: return x86_cast<T>(static_cast<const float*>(p)[i]);
    case DType::kFloat64: return x86_cast<T>(static_cast<const double*>(p)[i]);
    case DType::kInt8: return static_cast<T>(static_cast<const std::int8_t*>(p)[i]);
    case DType::kInt16: return static_cast<T>(static_cast<const std::int16_t*>(p)[i]);
    case DType::kInt32: return static_cast<T>(static_cast<const std::int32_t*>(p)[i]);
    case DType::kInt64: return static_cast<T>(static_cast<const std::int64_t*>(p)[i]);
    case DType::kUInt8: return static_cast<T>(static_cast<const std::uint8_t*>(p)[i]);
    case DType::kUInt16: return static_cast<T>(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kUInt32: return static_cast<T>(static_cast<const std::uint32_t*>(p)[i]);
    case DType::kUInt64: return static_cast<T>(static_cast<const std::uint64_t*>(p)[i]);
    case DType::kBool: return static_cast<T>(static_cast<const std::uint8_t*>(p)[i] != 0);
    case DType::kBFloat16: return x86_cast<T>(bfloat16_bits_to_float(static_cast<const std::uint16_t*>(p)[i]));
    case DType::kInt4: return static_cast<T>(static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<const std::uint8_t*>(p)[i] << 4)) >> 4);
    case DType::kUInt4: return static_cast<T>(static_cast<const std::uint8_t*>(p)[i] & 0x0F);
    case DType::kInt2: return static_cast<T>(static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<const std::uint8_t*>(p)[i] << 6)) >> 6);
    case DType::kUInt2: return static_cast<T>(static_cast<const std::uint8_t*>(p)[i] & 0x03);
    default: return x86_cast<T>(minifloat_to_float(minifloat_format(t), static_cast<const std::uint8_t*>(p)[i]));
  }
}

// Element i of `p` (dtype t) as a double, with 64-bit integers rounded once to double (the value
// every narrower target rounds from: a second rounding from double to float16 or a minifloat
// cannot differ from one from the integer, as |v| >= 2^53 saturates or overflows there).
POLYQUANT_HD inline double load_as_double(const void* p, DType t, std::int64_t i) { return load_as<double>(p, t, i); }

// Element i of `p` (dtype t) as float32, rounded once from the exact value: 64-bit integers
// directly (through double they would round twice), other integers and float64 through double
// (exact), floating types by widening (a signalling bfloat16 NaN stays as ml_dtypes keeps it).
POLYQUANT_HD inline float load_as_float32(const void* p, DType t, std::int64_t i) {
  if (t == DType::kInt64) return static_cast<float>(static_cast<const std::int64_t*>(p)[i]);
  if (t == DType::kUInt64) return static_cast<float>(static_cast<const std::uint64_t*>(p)[i]);
  const bool via_double = t == DType::kFloat64 || !(t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kBFloat16 ||
                                                    has_minifloat_format(t));
  return via_double ? x86_to_float(load_as<double>(p, t, i)) : load_as<float>(p, t, i);
}

// The bits ml_dtypes' astype gives for value v in an ONNX-only dtype t: minifloats round v to
// float32 first (ml_dtypes converts through float), sub-byte integers keep v's low bits (the
// integer part, as a C cast; NaN -> 0).
POLYQUANT_HD inline std::uint16_t onnx_only_bits(DType t, double v) {
  if (t == DType::kBFloat16) return float_to_bfloat16_bits(x86_to_float(v));
  if (has_minifloat_format(t)) return minifloat_from_float(minifloat_format(t), x86_to_float(v), false);
  const bool representable = v == v && v < 9.2e18 && v > -9.2e18;
  const std::int64_t i = representable ? static_cast<std::int64_t>(v) : 0;
  const unsigned mask = (t == DType::kInt4 || t == DType::kUInt4) ? 0x0Fu : 0x03u;
  return static_cast<std::uint16_t>(static_cast<std::uint64_t>(i) & mask);
}

// Whether the engine converts into `t`: the floating types and the ONNX-only types. Integer outputs
// are written by their op's kernels, never converted.
POLYQUANT_HD inline bool is_conversion_target(DType t) {
  return t == DType::kFloat16 || t == DType::kFloat32 || t == DType::kFloat64 || t >= DType::kBFloat16;
}

// Element si of `src` (dtype st) converted to dtype dt into element di of `dst`; false (nothing
// written) when dt is not a conversion target (an integer type) and differs from st.
POLYQUANT_HD inline bool convert_element(const void* src, DType st, std::int64_t si, void* dst, DType dt, std::int64_t di) {
  if (st == dt) {
    const std::size_t size = element_size(st);
    const auto* s = static_cast<const unsigned char*>(src) + si * static_cast<std::int64_t>(size);
    auto* d = static_cast<unsigned char*>(dst) + di * static_cast<std::int64_t>(size);
    for (std::size_t b = 0; b < size; ++b) d[b] = s[b];
    return true;
  }
  switch (dt) {
    case DType::kFloat64: static_cast<double*>(dst)[di] = load_as_double(src, st, si); return true;
    case DType::kFloat32: static_cast<float*>(dst)[di] = load_as_float32(src, st, si); return true;
    case DType::kFloat16: static_cast<std::uint16_t*>(dst)[di] = half_from_double(load_as_double(src, st, si)).bits; return true;
    case DType::kBFloat16: static_cast<std::uint16_t*>(dst)[di] = onnx_only_bits(dt, load_as_double(src, st, si)); return true;
    default:
      if (dt < DType::kBFloat16) return false;
      static_cast<std::uint8_t*>(dst)[di] = static_cast<std::uint8_t>(onnx_only_bits(dt, load_as_double(src, st, si)));
      return true;
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
