// Bindings of the AIMET quantizer-module parameter arithmetic (polyquant/aimet_quantizer.h):
// float32 arrays in, caller-allocated float32 arrays out (polyquant.aimet.quantizers allocates them).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <vector>

#include "arrays.h"
#include "polyquant/aimet_quantizer.h"

namespace nb = nanobind;
namespace pa = polyquant::aimet;

namespace {

using In = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using Out = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

std::span<const float> in(const In& a) { return {a.data(), a.size()}; }
std::span<float> out(const Out& a) { return {a.data(), a.size()}; }
pa::Grid grid(std::int64_t qmin, std::int64_t qmax) { return pa::Grid{qmin, qmax}; }

}  // namespace

namespace polyquant::python {

void bind_aimet_quantizer(nb::module_& m) {
  m.def("minimum_scale", &pa::minimum_scale, nb::arg("num_steps"),
        "AIMET's minimum scale min(float32 eps, 0.01 / num_steps).");
  m.def(
      "quantizer_scale",
      [](const In& mn, const In& mx, std::int64_t qmin, std::int64_t qmax, const Out& scale) {
        pa::quantizer_scale(in(mn), in(mx), grid(qmin, qmax), out(scale));
      },
      nb::arg("min"), nb::arg("max"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("scale"),
      "get_scale(): |(max - min) / N| floored at the minimum scale, into `scale`.");
  m.def(
      "quantizer_offset",
      [](const In& mn, const In& scale, std::int64_t qmin, std::int64_t qmax, bool symmetric, const Out& offset) {
        pa::quantizer_offset(in(mn), in(scale), grid(qmin, qmax), symmetric, out(offset));
      },
      nb::arg("min"), nb::arg("scale"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("symmetric"), nb::arg("offset"),
      "get_offset(): the symmetric constant, or clamp(round(min / scale) - qmin, -qmax, -qmin), into `offset`.");
  m.def(
      "quantizer_range",
      [](const In& scale, const In& offset, std::int64_t qmin, std::int64_t qmax, const Out& mn, const Out& mx) {
        pa::quantizer_range(in(scale), in(offset), grid(qmin, qmax), out(mn), out(mx));
      },
      nb::arg("scale"), nb::arg("offset"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("min"), nb::arg("max"),
      "get_min() / get_max(): scale * (offset + qmin / qmax), into `min` / `max`.");
  m.def(
      "scale_offset_from_range",
      [](const In& mn, const In& mx, std::int64_t qmin, std::int64_t qmax, bool symmetric, const Out& scale,
         const Out& offset) {
        pa::scale_offset_from_range(in(mn), in(mx), grid(qmin, qmax), symmetric, out(scale), out(offset));
      },
      nb::arg("min"), nb::arg("max"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("symmetric"), nb::arg("scale"),
      nb::arg("offset"), "A calibration batch's encoding: (max - min) / N and round(min / scale) - qmin.");
  m.def(
      "range_for_scale_offset",
      [](const In& scale, const In& offset, std::int64_t qmin, std::int64_t qmax, bool symmetric, const Out& mn,
         const Out& mx) {
        pa::range_for_scale_offset(in(scale), in(offset), grid(qmin, qmax), symmetric, out(mn), out(mx));
      },
      nb::arg("scale"), nb::arg("offset"), nb::arg("qmin"), nb::arg("qmax"), nb::arg("symmetric"), nb::arg("min"),
      nb::arg("max"), "A min / max range that reproduces `scale` and `offset` exactly (for loading encodings).");
  m.def(
      "lpbq_channel_shape",
      [](const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& grouping) {
        return pa::lpbq_channel_shape(shape, grouping);
      },
      nb::arg("shape"), nb::arg("grouping"),
        "Shape of the LPBQ per-channel scale for a quantizer shape and block grouping.");
  m.def(
      "lpbq_scales",
      [](const In& raw, const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& grouping,
         std::int64_t bitwidth, std::int64_t decompressed_bw, const Out& per_channel, const Out& scale,
         const Out& ints) {
        pa::lpbq_scales(in(raw), shape, grouping, bitwidth, decompressed_bw, out(per_channel), out(scale), out(ints));
      },
      nb::arg("raw_scale"), nb::arg("shape"), nb::arg("grouping"), nb::arg("bitwidth"), nb::arg("decompressed_bw"),
      nb::arg("per_channel_scale"), nb::arg("scale"), nb::arg("per_block_int_scale"),
      "LPBQ: per-channel scale, effective block scale and per-block integer scale, into the three arrays.");
}

}  // namespace polyquant::python
