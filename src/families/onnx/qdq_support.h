// The parameter layouts of linear quantization — per-tensor, per-axis, blocked — as broadcasting
// over views, shared by the ONNX Q/DQ ops and Quark's Extended ops (AIMET's affine ops have their
// own layouts in families/aimet).
//
// A per-axis parameter of length C becomes a view of x's rank with C on `axis` and 1 elsewhere. A
// blocked parameter (x's shape except ceil(D / B) on `axis`) is applied to x viewed with `axis`
// split in two, (D / B, B), the parameter's block dimension repeating with stride 0; a last,
// shorter block (D % B elements) is a second view against the parameter's last slice. The engine
// then sees ordinary broadcasting: no layout has its own code path.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/elementwise.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

enum class ParamGranularity : std::uint8_t { kTensor, kAxis, kBlocked };

struct ParamLayout {
  ParamGranularity granularity = ParamGranularity::kTensor;
  int axis = 0;                // normalized (kAxis, kBlocked)
  std::int64_t block_size = 0; // kBlocked
};

// Names used in error messages.
struct QdqNames {
  const char* op;     // "QuantizeLinear"
  const char* scale;  // "y_scale"
  const char* zero_point;
};

// Validates scale (and the zero point, when given) against x for `axis` / `block_size` and returns
// the layout. `one_element_is_tensor`: a scale of one element is per-tensor whatever its rank
// (onnx); otherwise only 0-d and shape (1,) are (Quark / ORT's IsScalarOr1ElementVector).
ParamLayout check_param_layout(const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                               std::int64_t axis, std::int64_t block_size, const QdqNames& names,
                               bool one_element_is_tensor);

// Runs `call` (its kernel, params, kernel dtypes, out) over x and the parameters laid out by
// `layout`: call.inputs is ignored and replaced by {x, scale[, zero_point]} views.
void run_with_layout(const ElementwiseCall& call, const TensorView& x, const TensorView& scale,
                     const TensorView* zero_point, const ParamLayout& layout);

// Throws unless `out` has exactly the spec's shape and dtype.
void require_exact_output(const MutableTensorView& out, const TensorSpec& spec, const char* op);

}  // namespace polyquant::detail
