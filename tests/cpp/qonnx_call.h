// Small wrappers that call the public QONNX API on std::vectors (scalars are 0-d tensors).
#pragma once

#include <vector>

#include "polyquant/polyquant.h"

namespace polyquant::test {

inline TensorView scalar_view(const float& v) { return TensorView(&v, DType::kFloat32, Dims{}); }
inline TensorView vec_view(const std::vector<float>& v) {
  return TensorView(v.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(v.size())});
}

inline std::vector<float> int_quant(const std::vector<float>& x, float s, float z, float b, bool is_signed, bool narrow,
                                    RoundingMode mode = RoundingMode::kHalfEven) {
  std::vector<float> out(x.size());
  const qonnx::IntQuantAttrs attrs{is_signed, narrow, mode};
  qonnx::int_quant(vec_view(x), scalar_view(s), scalar_view(z), scalar_view(b), attrs,
                   MutableTensorView(out.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(x.size())}));
  return out;
}

inline std::vector<float> bipolar_quant(const std::vector<float>& x, float s) {
  std::vector<float> out(x.size());
  qonnx::bipolar_quant(vec_view(x), scalar_view(s),
                       MutableTensorView(out.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(x.size())}));
  return out;
}

inline std::vector<float> trunc_v1(const std::vector<float>& x, float s, float z, float ib, float ob, RoundingMode mode) {
  std::vector<float> out(x.size());
  qonnx::trunc(vec_view(x), scalar_view(s), scalar_view(z), scalar_view(ib), scalar_view(ob), mode,
               MutableTensorView(out.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(x.size())}));
  return out;
}

inline std::vector<float> trunc_v2(const std::vector<float>& x, float s, float z, float ib, float os, float ob,
                                   bool is_signed, bool narrow, RoundingMode mode) {
  std::vector<float> out(x.size());
  const qonnx::TruncV2Attrs attrs{is_signed, narrow, mode};
  qonnx::trunc_v2(vec_view(x), scalar_view(s), scalar_view(z), scalar_view(ib), scalar_view(os), scalar_view(ob), attrs,
                  MutableTensorView(out.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(x.size())}));
  return out;
}

inline std::vector<float> float_quant(const std::vector<float>& x, float s, float e, float m, float bias, float max_val,
                                      qonnx::FloatQuantAttrs attrs) {
  std::vector<float> out(x.size());
  qonnx::float_quant(vec_view(x), scalar_view(s), scalar_view(e), scalar_view(m), scalar_view(bias), scalar_view(max_val),
                     attrs, MutableTensorView(out.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(x.size())}));
  return out;
}

}  // namespace polyquant::test
