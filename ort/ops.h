// The op sets of libpolyquant_ort, each adding its domains to the list that register.cc hands to
// ONNX Runtime (and releases when the library is unloaded).
#pragma once

#include <vector>

#include "ort_glue.h"

namespace polyquant::ort {

// Creates a domain named `name` and appends it to `domains` (which then owns it).
OrtCustomOpDomain* add_domain(std::vector<OrtCustomOpDomain*>& domains, const char* name);

// IntQuant, Quant, BipolarQuant, Trunc, FloatQuant in qonnx.custom_op.general,
// finn.custom_op.general and onnx.brevitas (qonnx_ops.cc).
void add_qonnx_domains(std::vector<OrtCustomOpDomain*>& domains);

// What the runtime the library was registered in can hold beyond the 1.17 headers' types.
struct RuntimeTypes {
  bool uint2 = false;
  bool int2 = false;
  bool float8e8m0 = false;
};

// ExtendedQuantizeLinear / ExtendedDequantizeLinear in com.amd.quark (and VitisQuantizeLinear /
// VitisDequantizeLinear in com.vai.quantize), QuantizeLinear / DequantizeLinear in polyquant.onnx
// (qdq_ops.cc).
void add_qdq_domains(std::vector<OrtCustomOpDomain*>& domains, const RuntimeTypes& runtime);

}  // namespace polyquant::ort
