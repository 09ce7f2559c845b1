// polyquant._polyquant_ext: the compiled core's Python face. Each family's bindings live in
// python/src/<family>.cc and map numpy arrays to polyquant tensor views and back (arrays.h); no
// numerics here: each op asks the core for the output spec, allocates the result (or takes `out`),
// runs the kernel with the GIL released and returns it. This file holds the module itself: the
// error translation, interpreter-exit parking, runtime information, the benchmarks' memcpy and the
// output buffer cache's functions (buffer_cache.h).
#include <cstring>
#include <exception>
#include <string>

#include "arrays.h"
#include "buffer_cache.h"

namespace polyquant::python {
namespace {

nb::dict runtime_info() {
  const pq::RuntimeInfo info = pq::runtime_info();
  nb::list supported;
  for (const std::string& isa : info.supported) supported.append(nb::str(isa.c_str(), isa.size()));
  nb::dict d;
  d["version"] = nb::str(info.version.c_str(), info.version.size());
  d["isa"] = nb::str(info.isa.c_str(), info.isa.size());
  d["supported"] = supported;
  d["num_threads"] = info.num_threads;
  // {"cpu": {...}, "cuda": {...}}: available, library (path or None), devices, reason (None when
  // available).
  nb::dict backends;
  for (const pq::BackendInfo& b : info.backends) {
    nb::list devices;
    for (const std::string& name : b.devices) devices.append(nb::str(name.c_str(), name.size()));
    nb::dict entry;
    entry["available"] = b.available;
    entry["library"] = b.library.empty() ? nb::none() : nb::object(nb::str(b.library.c_str(), b.library.size()));
    entry["devices"] = devices;
    entry["reason"] = b.reason.empty() ? nb::none() : nb::object(nb::str(b.reason.c_str(), b.reason.size()));
    backends[nb::str(b.name.c_str(), b.name.size())] = entry;
  }
  d["backends"] = backends;
  return d;
}

// Plain memcpy between two C-contiguous buffers of equal byte size: the benchmark's in-process
// bandwidth baseline, so it runs with the GIL released like the ops do.
using ContigIn = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using ContigOut = nb::ndarray<nb::c_contig, nb::device::cpu>;

void copy(const ContigIn& src, const ContigOut& dst) {
  if (src.nbytes() != dst.nbytes()) {
    fail(pq::ErrorKind::kValue, "copy: dst has " + std::to_string(dst.nbytes()) + " bytes but src has " +
                                    std::to_string(src.nbytes()));
  }
  const void* from = src.data();
  void* to = dst.data();
  const std::size_t bytes = src.nbytes();
  // Without the GIL like the ops, and parking like them if the interpreter exits meanwhile
  // (nb::gil_scoped_release would take the GIL back during finalization).
  without_gil([&] {
    if (bytes != 0) std::memcpy(to, from, bytes);
  });
}

}  // namespace
}  // namespace polyquant::python

using namespace polyquant::python;

NB_MODULE(_polyquant_ext, m) {
  m.doc() = "polyquant's compiled core (private; use the polyquant.<family> packages)";
  nb::module_::import_("atexit").attr("register")(nb::cpp_function(&stop_reacquiring_at_exit));

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pq::Error& e) {
      PyErr_SetString(e.kind() == pq::ErrorKind::kType       ? PyExc_TypeError
                      : e.kind() == pq::ErrorKind::kOverflow ? PyExc_OverflowError
                      : e.kind() == pq::ErrorKind::kRuntime  ? PyExc_RuntimeError
                                                             : PyExc_ValueError,
                      e.what());
    }
  });
  // One submodule per family, each filled by its binding function (python/src/<family>.cc), so a
  // family's names need no prefix: _polyquant_ext.qkeras.quantized_bits, _polyquant_ext.aimet.quantize.
  // What is not a family's (versions, runtime information, test hooks, copy) stays at the top.
  nb::module_ qonnx = m.def_submodule("qonnx", "QONNX ops: IntQuant/Quant, BipolarQuant, Trunc, FloatQuant");
  bind_qonnx(qonnx);
  nb::module_ qkeras = m.def_submodule("qkeras", "QKeras quantizers: quantized_bits, quantized_relu, quantized_linear");
  bind_qkeras(qkeras);
  nb::module_ onnx = m.def_submodule("onnx", "ONNX QuantizeLinear / DequantizeLinear");
  bind_onnx(onnx);
  nb::module_ quark = m.def_submodule("quark", "Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear");
  bind_quark(quark);
  nb::module_ aimet = m.def_submodule("aimet", "AIMET: affine ops, quantizer parameters, encoding analyzers");
  bind_aimet(aimet);
  bind_aimet_quantizer(aimet);
  bind_aimet_analyzers(aimet);

  bind_device_calls(m);
  m.def("dtype_code", &dtype_code, nb::arg("name"), "polyquant's code of a dtype name (-1: unknown).");
  m.def("_set_kernel_set", [](const std::string& name) { pq::set_kernel_set(name); }, nb::arg("name"),
        "Tests and benchmarks only: switch the kernel set ('scalar', 'avx2', 'avx512') for later calls.");
  m.def("_set_num_threads", [](int n) { pq::set_num_threads(n); }, nb::arg("n"),
        "Tests and benchmarks only: cap the threads of later calls (1..256).");
  m.def("version", [] { return std::string(POLYQUANT_PY_VERSION); },
        "The polyquant version this module was built from.");
  m.def("runtime_info", &runtime_info,
        "Version, kernel set in use, kernel sets this CPU supports, worker threads.");
  m.def("copy", &copy, nb::arg("src").noconvert(), nb::arg("dst").noconvert(),
        "memcpy of C-contiguous src into dst (same byte size), GIL released.");
  bind_buffer_cache(m);
}
