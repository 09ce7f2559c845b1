// Validation and parameter helpers shared by the framework layers (QONNX now; QKeras, AIMET, Quark
// later): they turn public TensorViews into checked kernel calls.
#pragma once

#include <array>
#include <string>
#include <tuple>
#include <vector>

#include "core/elementwise.h"
#include "core/scalar_math.h"
#include "kernels/registry.h"
#include "polyquant/error.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

// Throws TypeError unless `v` holds a floating dtype (the data tensor of every op).
void require_floating(const TensorView& v, const char* name);

// Throws ValueError unless `v` has exactly one element; returns it as a double. `why` completes
// the message ("the reference compares it with 1").
double single_value(const TensorView& v, const char* name, const char* why);

// Throws ValueError unless every element of `v` is finite.
void require_finite(const TensorView& v, const char* name);

// Throws unless `out` has exactly the spec's shape and dtype.
void require_output(const MutableTensorView& out, const TensorSpec& spec, const char* op);

WorkType work_type_of(DType float_dtype);

// The float dtype numpy computes in when integers meet a true division or a Python float literal
// (`x / s`, `2.0 ** b`, `1.0 - bias`): itself if floating, float64 for integers and bool.
DType float_dtype_for(DType t);

// Rounds `v` to the nearest value of `t` (numpy astype) and returns it as a double.
double round_to(DType t, double v);

// Evaluates f.template operator()<T>() with T the C++ type that performs arithmetic of float
// dtype `t` exactly as numpy does (Half, float or double).
template <class F>
decltype(auto) with_float_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat16: return f.template operator()<Half>();
    case DType::kFloat32: return f.template operator()<float>();
    default: return f.template operator()<double>();
  }
}

// A small parameter tensor computed by an op layer (bounds, scales), held as float64 values that
// are already exact in their numpy dtype.
struct DerivedTensor {
  Dims shape;
  std::vector<double> values;
  TensorView view() const { return TensorView(values.data(), DType::kFloat64, shape); }
};

// Builds a DerivedTensor over the broadcast of `inputs`, calling f(values...) for each element
// with the inputs read as doubles.
template <std::size_t N, class F>
DerivedTensor derive(const std::array<const TensorView*, N>& inputs, const char* what, F&& f) {
  std::array<Dims, N> shapes;
  for (std::size_t i = 0; i < N; ++i) shapes[i] = inputs[i]->shape;
  DerivedTensor t;
  t.shape = broadcast_shapes(shapes, what);
  const std::int64_t n = t.shape.numel();
  t.values.resize(static_cast<std::size_t>(n));
  std::array<double, N> args{};
  for (std::int64_t flat = 0; flat < n; ++flat) {
    for (std::size_t i = 0; i < N; ++i) {
      // Map the flat index of the broadcast shape onto input i (right-aligned, size 1 repeats).
      const Dims& s = inputs[i]->shape;
      std::int64_t rem = flat, offset = 0;
      for (int d = t.shape.rank - 1; d >= 0; --d) {
        const std::int64_t idx = rem % t.shape[d];
        rem /= t.shape[d];
        const int sd = d - (t.shape.rank - s.rank);
        if (sd >= 0 && s[sd] != 1) offset += idx * inputs[i]->strides[sd];
      }
      TensorView scalar = *inputs[i];
      scalar.shape = Dims{};
      scalar.strides = Dims{};
      scalar.data = static_cast<const char*>(inputs[i]->data) +
                    offset * static_cast<std::int64_t>(dtype_size(inputs[i]->dtype));
      args[i] = read_as_double(scalar, 0);
    }
    t.values[static_cast<std::size_t>(flat)] = std::apply(f, args);
  }
  return t;
}

// The reference's integer range for `bits` bits (qonnx min_int/max_int), evaluated in the
// arithmetic of dtype `bits_dtype`: signed -> [-2^(b-1) + narrow, 2^(b-1) - 1], unsigned ->
// [0, 2^b - 1 - narrow].
double int_range_min(double bits, DType bits_dtype, bool is_signed, bool narrow);
double int_range_max(double bits, DType bits_dtype, bool is_signed, bool narrow);

}  // namespace polyquant::detail
