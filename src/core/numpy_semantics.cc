// Validation and parameter helpers shared by the framework layers.
#include "core/numpy_semantics.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/device_elementwise.h"
#include "core/parallel.h"

namespace polyquant::detail {

void require_floating(const TensorView& v, const char* name) {
  if (!is_floating(v.dtype)) {
    throw Error(ErrorKind::kType, std::string(name) + ": unsupported dtype " + dtype_name(v.dtype) +
                                      "; allowed: float16, float32, float64");
  }
}

double single_value(const TensorView& v, const char* name, const char* why) {
  if (v.numel() != 1) {
    throw Error(ErrorKind::kValue, std::string(name) + ": must have exactly one element (" + why + "), got shape " +
                                       v.shape.str());
  }
  return read_as_double(v, 0);
}

bool all_finite_fast(const TensorView& v) {
  if (!is_floating(v.dtype)) return true;
  if (!v.is_contiguous()) return false;
  const std::int64_t n = v.numel();
  std::atomic<bool> bad{false};
  auto scan = [&]<class U>(U exponent_mask) {
    const U* p = static_cast<const U*>(v.data);
    parallel_for(n, std::int64_t{1} << 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end && !bad.load(std::memory_order_relaxed); i += 4096) {
        const std::int64_t stop = std::min(end, i + 4096);
        unsigned any = 0;
        for (std::int64_t j = i; j < stop; ++j) any |= static_cast<unsigned>((p[j] & exponent_mask) == exponent_mask);
        if (any != 0) bad.store(true, std::memory_order_relaxed);
      }
    });
  };
  switch (dtype_size(v.dtype)) {
    case 2: scan(std::uint16_t{0x7c00}); break;
    case 4: scan(std::uint32_t{0x7f800000u}); break;
    default: scan(std::uint64_t{0x7ff0000000000000ull}); break;
  }
  return !bad.load();
}

void require_finite(const TensorView& v, const char* name) {
  if (all_finite_fast(v)) return;  // integers, and contiguous floats without inf or NaN
  // Finite elements are skipped by their exponent bits; f sees only infinities and NaNs.
  for_each_param(v, [&](const ParamValue& p) {
    throw Error(ErrorKind::kValue, std::string(name) + ": must be finite, got " + std::to_string(p.f));
  }, /*finite_floats=*/true);
}

void require_output(const MutableTensorView& out, const TensorSpec& spec, const char* op) {
  // out may have the spec's dtype or any other floating dtype; the result is then rounded once into
  // it, as numpy's astype does (the ONNX nodes of IntQuant and FloatQuant round to float32).
  if (!(out.shape == spec.shape) || !is_floating(out.dtype)) {
    throw Error(ErrorKind::kValue, std::string(op) + ": out must have shape " + spec.shape.str() + " and dtype " +
                                       dtype_name(spec.dtype) + " (or another float dtype to round into), got shape " +
                                       out.shape.str() + " and dtype " + dtype_name(out.dtype));
  }
  if (out.numel() > 0 && out.data == nullptr) throw Error(ErrorKind::kValue, std::string(op) + ": out has no data");
}

WorkType work_type_of(DType t) {
  switch (t) {
    case DType::kFloat16: return WorkType::kF16;
    case DType::kFloat32: return WorkType::kF32;
    case DType::kFloat64: return WorkType::kF64;
    default: throw Error(ErrorKind::kType, std::string("internal: no work type for ") + dtype_name(t));
  }
}

DType float_dtype_for(DType t) { return is_floating(t) ? t : DType::kFloat64; }

namespace {
int kind_of(DType t) {  // bool < integer < float
  if (t == DType::kBool) return 0;
  return is_floating(t) ? 2 : 1;
}
DType default_dtype_of_kind(int kind) {  // what a Python scalar of this kind becomes alone
  return kind == 2 ? DType::kFloat64 : kind == 1 ? DType::kInt64 : DType::kBool;
}
}  // namespace

Promoted promote(Promoted a, Promoted b) {
  if (!a.weak && !b.weak) return strong(promote_types(a.dtype, b.dtype));
  const int ka = kind_of(a.dtype), kb = kind_of(b.dtype);
  if (a.weak && b.weak) return {default_dtype_of_kind(std::max(ka, kb)), true};
  const Promoted& array = a.weak ? b : a;
  const int k_scalar = a.weak ? ka : kb, k_array = a.weak ? kb : ka;
  return strong(k_scalar <= k_array ? array.dtype : default_dtype_of_kind(k_scalar));
}

double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat16: return to_double(half_from_double(v));
    case DType::kFloat32: return static_cast<double>(static_cast<float>(v));
    default: return v;
  }
}

bool is_integer(DType t) { return !is_floating(t); }

std::uint64_t wrap_int(DType t, std::uint64_t bits) {
  if (t == DType::kBool) return bits != 0;
  const auto width = static_cast<int>(8 * dtype_size(t));
  if (width >= 64) return bits;
  const std::uint64_t mask = (std::uint64_t{1} << width) - 1;
  bits &= mask;
  if (is_signed_integer(t) && ((bits >> (width - 1)) & 1u)) bits |= ~mask;  // sign-extend
  return bits;
}

double int_to_float(DType t, std::uint64_t bits, DType to) {
  const bool s = is_signed_integer(t);
  switch (to) {
    case DType::kFloat32:  // one rounding from the exact integer (not through float64)
      return s ? static_cast<double>(static_cast<float>(static_cast<std::int64_t>(bits)))
               : static_cast<double>(static_cast<float>(bits));
    case DType::kFloat16:
      // Integers above 2^53 are far beyond float16's range (inf either way), so rounding through
      // float64 first cannot change the result.
      return to_double(half_from_double(int_to_double(t, bits)));
    default: return int_to_double(t, bits);
  }
}

DType int_range_dtype(DType t) { return t == DType::kBool ? DType::kInt64 : t; }

std::uint64_t int_range_bound(DType t, std::uint64_t bits, bool is_signed, bool narrow, bool want_max,
                              const char* name) {
  const DType d = int_range_dtype(t);
  const bool signed_dtype = is_signed_integer(d);
  // 2 ** e in dtype d: numpy multiplies in d (wrapping), so 2^e mod 2^width; e >= 64 gives 0.
  auto pow2 = [&](std::uint64_t e) -> std::uint64_t {
    if (signed_dtype && static_cast<std::int64_t>(e) < 0) {
      throw Error(ErrorKind::kValue, std::string(name) + ": bit width " + std::to_string(static_cast<std::int64_t>(bits)) +
                                         " of dtype " + dtype_name(t) +
                                         " makes the reference raise (numpy: integers to negative integer powers "
                                         "are not allowed); allowed: >= 1 when signed, >= 0 when unsigned");
    }
    return wrap_int(d, e >= 64 ? 0 : std::uint64_t{1} << e);
  };
  const std::uint64_t b = wrap_int(d, bits);
  std::uint64_t r;  // unsigned arithmetic wraps like numpy's; wrap_int folds it into d
  if (want_max) {
    if (!is_signed && !narrow) r = pow2(b) - 1;
    else if (!is_signed && narrow) r = pow2(b) - 2;
    else r = pow2(wrap_int(d, b - 1)) - 1;
  } else {
    if (is_signed && narrow) r = (std::uint64_t{0} - pow2(wrap_int(d, b - 1))) + 1;
    else if (is_signed) r = std::uint64_t{0} - pow2(wrap_int(d, b - 1));
    else r = 0;  // 0 * bit_width
  }
  return wrap_int(d, r);
}

ParamValue read_param_at(const TensorView& view, std::int64_t index) {
  if (!view.device.is_cpu()) {  // a device value, copied to the host (waits for the stream)
    alignas(8) unsigned char value[8] = {};
    copy_device_element_to_host(view, index, value);
    return read_param(view.dtype, value, 0);
  }
  return read_param(view.dtype, view.data, element_offset(view, index));
}

int FusedOperands::input(const TensorView& v, DType read_as) {
  for (int i = 0; i < num_inputs_; ++i) {
    const TensorView& u = inputs_[static_cast<std::size_t>(i)];
    if (u.data == v.data && u.dtype == v.dtype && u.shape == v.shape && u.strides == v.strides &&
        u.weak == v.weak && dtypes_[static_cast<std::size_t>(i)] == read_as) {
      return i;
    }
  }
  if (num_inputs_ == kMaxOperands) throw Error(ErrorKind::kValue, "internal: too many engine operands");
  inputs_[static_cast<std::size_t>(num_inputs_)] = v;
  dtypes_[static_cast<std::size_t>(num_inputs_)] = read_as;
  return num_inputs_++;
}

int FusedOperands::add(const Derivation& d) {
  if (num_derived_ == kMaxDerived) throw Error(ErrorKind::kValue, "internal: too many derived operands");
  derived_[static_cast<std::size_t>(num_derived_)] = d;
  return derived_operand(num_derived_++);
}

FusedCall FusedOperands::call(std::span<const int> kernel_operands) const {
  FusedCall c;
  c.inputs = std::span<const TensorView>(inputs_.data(), static_cast<std::size_t>(num_inputs_));
  c.input_dtypes = std::span<const DType>(dtypes_.data(), static_cast<std::size_t>(num_inputs_));
  c.derived = std::span<const Derivation>(derived_.data(), static_cast<std::size_t>(num_derived_));
  c.kernel_operands = kernel_operands;
  return c;
}

double int_range_min(double bits, DType bits_dtype, bool is_signed, bool narrow) {
  return with_float_type(float_dtype_for(bits_dtype),
                         [&]<class T>() { return to_double(float_int_range<T>(from_double<T>(bits), is_signed, narrow, false)); });
}

double int_range_max(double bits, DType bits_dtype, bool is_signed, bool narrow) {
  return with_float_type(float_dtype_for(bits_dtype),
                         [&]<class T>() { return to_double(float_int_range<T>(from_double<T>(bits), is_signed, narrow, true)); });
}

}  // namespace polyquant::detail
