// Bindings of AIMET's encoding analyzers (polyquant/aimet_analyzers.h): thin classes over the C++
// ones. Arrays arrive as numpy arrays with their dtype named separately (bfloat16 as its uint16
// storage). Results and states go back as 1-D numpy arrays of float64 / float32 that own the C++
// vectors they were (no copy), which polyquant.aimet.analyzers reshapes. set_state takes the same
// arrays back: 1-D, C-contiguous, of exactly the getter's dtype (no implicit conversion: a float64
// histogram is a TypeError, not a silent cast); the core checks their sizes against the analyzer's
// shape and num_bins (ValueError naming the parameter and the expected count).
//
// Threads: every call that touches an analyzer runs with the GIL released (gil_release.h: a daemon
// thread still in a call parks at interpreter exit instead of aborting the process), and the C++
// analyzer takes its own lock inside. So an analyzer's lock is only ever waited for without the GIL,
// and released before the GIL is taken back: no lock-order cycle with the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gil_release.h"
#include "arrays.h"
#include "polyquant/aimet_analyzers.h"

namespace nb = nanobind;
namespace pq = polyquant;
namespace pa = polyquant::aimet;
using polyquant::python::without_gil;

namespace {

// Host arrays, and CUDA ones in a device call (the MinMax statistics have a device path; the
// others refuse them by name).
using InArray = nb::ndarray<nb::ro>;

pq::DType dtype_of(const std::string& name, const char* what = "x") {
  if (name == "float16") return pq::DType::kFloat16;
  if (name == "bfloat16") return pq::DType::kBFloat16;
  if (name == "float32") return pq::DType::kFloat32;
  if (name == "float64") return pq::DType::kFloat64;
  throw pq::Error(pq::ErrorKind::kType, std::string(what) + ": dtype " + name + " is not supported (float16, bfloat16, float32, float64)");
}

pq::TensorView view_of(const InArray& a, const std::string& dtype) {
  if (a.ndim() > static_cast<std::size_t>(pq::kMaxRank)) throw pq::Error(pq::ErrorKind::kValue, "x: at most 8 dimensions");
  std::vector<std::int64_t> shape(a.ndim()), strides(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) shape[i] = static_cast<std::int64_t>(a.shape(i));
  if (a.stride_ptr() != nullptr) {
    for (std::size_t i = 0; i < a.ndim(); ++i) strides[i] = a.stride(i);
  } else {  // DLPack without strides: C order
    for (std::size_t i = a.ndim(); i-- > 0;) strides[i] = i + 1 == a.ndim() ? 1 : strides[i + 1] * shape[i + 1];
  }
  const pq::DType t = dtype_of(dtype);
  if (static_cast<std::size_t>(a.dtype().bits) != 8 * pq::dtype_size(t))
    throw pq::Error(pq::ErrorKind::kType, "x: storage does not match dtype " + dtype);
  pq::TensorView v(a.data(), t, pq::Dims(std::span<const std::int64_t>(shape)), pq::Dims(std::span<const std::int64_t>(strides)));
  v.device = polyquant::python::device_of(a.device_type(), a.device_id(), "x");
  return v;
}

// `v` as a 1-D numpy array that takes over its storage (a capsule deletes it with the array).
template <class T>
nb::object to_array(std::vector<T> v) {
  auto* owned = new std::vector<T>(std::move(v));
  if (owned->empty()) owned->reserve(1);  // a non-null data pointer for an empty array
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner).cast();
}
// A state array as set_state takes it: 1-D, C-contiguous, of the getter's element type.
template <class T>
using StateArray = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
std::vector<T> to_vector(const StateArray<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}
// State arrays are taken as they are: a wrong dtype or layout is a TypeError, not a converted copy.
inline auto state_arg(const char* name) { return nb::arg(name).noconvert(); }

pa::AnalyzerShape make_shape(const std::vector<std::int64_t>& shape, const std::optional<std::vector<std::int64_t>>& block) {
  if (shape.size() > static_cast<std::size_t>(pq::kMaxRank)) throw pq::Error(pq::ErrorKind::kValue, "shape: at most 8 dimensions");
  pa::AnalyzerShape s;
  s.shape = pq::Dims(std::span<const std::int64_t>(shape));
  s.block_size = block;
  return s;
}

using RangeTuple = std::tuple<nb::object, nb::object, std::string>;
RangeTuple range_tuple(pa::EncodingRange r) {
  return {to_array(std::move(r.min)), to_array(std::move(r.max)), pq::dtype_name(r.dtype)};
}

using HistTuple = std::tuple<std::string, std::int64_t, nb::object, nb::object, nb::object, nb::object, nb::object, nb::object, bool>;
HistTuple hist_tuple(pa::HistogramState s) {
  return {pq::dtype_name(s.dtype), s.num_bins, to_array(std::move(s.counts)), to_array(std::move(s.edges)),
          to_array(std::move(s.min)), to_array(std::move(s.max)), to_array(std::move(s.limit_lo)), to_array(std::move(s.limit_hi)),
          s.fixed_range};
}
// The methods every analyzer has; each waits for the analyzer's lock without the GIL.
template <class A>
void bind_common_methods(nb::class_<A>& c) {
  c.def("update_stats", [](A& a, const InArray& x, const std::string& dtype) {
       const pq::TensorView v = view_of(x, dtype);
       without_gil([&] { a.update_stats(v); });
     })
      .def("reset_stats", [](A& a) { without_gil([&] { a.reset_stats(); }); })
      .def("has_stats", [](const A& a) { return without_gil([&] { return a.has_stats(); }); })
      .def("compute_encodings", [](const A& a, double n, bool sym) {
        return range_tuple(without_gil([&] { return a.compute_encodings(n, sym); }));
      })
      .def("compute_dynamic_encodings", [](const A& a, const InArray& x, const std::string& dtype, double n, bool sym) {
        const pq::TensorView v = view_of(x, dtype);
        return range_tuple(without_gil([&] { return a.compute_dynamic_encodings(v, n, sym); }));
      })
      .def("merge", [](A& a, const A& other) { without_gil([&] { a.merge(other); }); });
}

template <class A>
void bind_histogram_methods(nb::class_<A>& c) {
  bind_common_methods(c);
  c.def("get_state", [](const A& a) { return hist_tuple(without_gil([&] { return a.state(); })); })
      .def(
          "set_state",
          [](A& a, const std::string& dtype, std::int64_t num_bins, const StateArray<float>& histogram, const StateArray<float>& bin_edges,
             const StateArray<double>& min, const StateArray<double>& max, const StateArray<float>& range_limit_low,
             const StateArray<float>& range_limit_high, bool fixed_range) {
            pa::HistogramState s;
            s.dtype = dtype_of(dtype, "state");
            s.num_bins = num_bins;
            s.counts = to_vector(histogram);
            s.edges = to_vector(bin_edges);
            s.min = to_vector(min);
            s.max = to_vector(max);
            s.limit_lo = to_vector(range_limit_low);
            s.limit_hi = to_vector(range_limit_high);
            s.fixed_range = fixed_range;
            without_gil([&] { a.set_state(std::move(s)); });
          },
          nb::arg("dtype"), nb::arg("num_bins"), state_arg("histogram"), state_arg("bin_edges"), state_arg("min"), state_arg("max"),
          state_arg("range_limit_low"), state_arg("range_limit_high"), nb::arg("fixed_range") = false)
      .def(
          "start_with_range",
          [](A& a, const std::string& dtype, const StateArray<double>& min, const StateArray<double>& max) {
            const pq::DType t = dtype_of(dtype, "start_with_range");
            const std::vector<double> lo = to_vector(min), hi = to_vector(max);
            without_gil([&] { a.start_with_range(t, lo, hi); });
          },
          nb::arg("dtype"), state_arg("min"), state_arg("max"));
}

}  // namespace

namespace polyquant::python {

void bind_aimet_analyzers(nb::module_& m) {
  // StatisticsNotFoundError is a RuntimeError, as AIMET's (registered after the module's Error
  // translator, so it is tried first).
  nb::exception<pa::StatisticsNotFoundError>(m, "StatisticsNotFoundError", PyExc_RuntimeError);

  auto minmax = nb::class_<pa::MinMaxEncodingAnalyzer>(m, "_MinMaxEncodingAnalyzer")
                    .def("__init__", [](pa::MinMaxEncodingAnalyzer* self, const std::vector<std::int64_t>& shape,
                                        const std::optional<std::vector<std::int64_t>>& block) { new (self) pa::MinMaxEncodingAnalyzer(make_shape(shape, block)); },
                         nb::arg("shape"), nb::arg("block_size").none());
  bind_common_methods(minmax);
  minmax
      .def("get_state", [](const pa::MinMaxEncodingAnalyzer& a) {
        pa::MinMaxEncodingAnalyzer::State s = without_gil([&] { return a.state(); });  // one consistent copy
        return std::make_tuple(std::string(pq::dtype_name(s.dtype)), to_array(std::move(s.min)), to_array(std::move(s.max)));
      })
      .def(
          "set_state",
          [](pa::MinMaxEncodingAnalyzer& a, const std::string& dtype, const StateArray<double>& min, const StateArray<double>& max) {
            pa::MinMaxEncodingAnalyzer::State s;
            s.dtype = dtype_of(dtype, "state");
            s.min = to_vector(min);
            s.max = to_vector(max);
            without_gil([&] { a.set_state(std::move(s)); });
          },
          nb::arg("dtype"), state_arg("min"), state_arg("max"));

  auto pct = nb::class_<pa::PercentileEncodingAnalyzer>(m, "_PercentileEncodingAnalyzer")
                 .def("__init__", [](pa::PercentileEncodingAnalyzer* self, const std::vector<std::int64_t>& shape,
                                     const std::optional<std::vector<std::int64_t>>& block, std::int64_t num_bins,
                                     double percentile) { new (self) pa::PercentileEncodingAnalyzer(make_shape(shape, block), num_bins, percentile); },
                      nb::arg("shape"), nb::arg("block_size").none(), nb::arg("num_bins"), nb::arg("percentile"))
                 .def("set_percentile", &pa::PercentileEncodingAnalyzer::set_percentile)
                 .def("percentile", &pa::PercentileEncodingAnalyzer::percentile);
  bind_histogram_methods(pct);

  auto sqnr = nb::class_<pa::SqnrEncodingAnalyzer>(m, "_SqnrEncodingAnalyzer")
                  .def("__init__",
                       [](pa::SqnrEncodingAnalyzer* self, const std::vector<std::int64_t>& shape,
                          const std::optional<std::vector<std::int64_t>>& block, std::int64_t num_bins, std::int64_t asym, std::int64_t sym,
                          std::int64_t offsets, std::int64_t parallelism, double gamma, double growth, int lanes) {
                         pa::SqnrOptions o;
                         o.num_bins = num_bins;
                         o.asymmetric_delta_candidates = asym;
                         o.symmetric_delta_candidates = sym;
                         o.offset_candidates = offsets;
                         o.max_parallelism = parallelism;
                         o.gamma = gamma;
                         o.histogram_growth_limit = growth;
                         o.torch_sum_lanes = lanes;
                         new (self) pa::SqnrEncodingAnalyzer(make_shape(shape, block), o);
                       },
                       nb::arg("shape"), nb::arg("block_size").none(), nb::arg("num_bins"), nb::arg("asymmetric_delta_candidates"),
                       nb::arg("symmetric_delta_candidates"), nb::arg("offset_candidates"), nb::arg("max_parallelism"), nb::arg("gamma"),
                       nb::arg("histogram_growth_limit"), nb::arg("torch_sum_lanes"));
  bind_histogram_methods(sqnr);
}

}  // namespace polyquant::python
