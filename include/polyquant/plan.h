// A planned call: an op call validated and resolved once (output shape and dtype, parameter
// layout, the dtypes the kernel reads and writes, the kernel), then run. Each op's `*_spec`
// returns what its plan would; each op's `*_plan` returns the plan itself, for callers that
// allocate the output between the two steps (the Python bindings, the ONNX Runtime library), so a
// call is validated once instead of once for the spec and again for the run.
#pragma once

#include <functional>
#include <utility>

#include "polyquant/export.h"
#include "polyquant/tensor.h"

namespace polyquant {

class PlannedCall {
 public:
  using Run = std::function<void(const MutableTensorView&)>;
  PlannedCall(TensorSpec spec, Run run) : spec_(std::move(spec)), run_(std::move(run)) {}

  // The output the call writes: allocate exactly this.
  const TensorSpec& spec() const { return spec_; }
  // Writes the result into `out`, which must have exactly spec()'s shape and dtype. The plan holds
  // copies of the operands' views, not their data: the data must stay alive until it has run. It
  // may run more than once, and on another thread than the one that planned it.
  void run(const MutableTensorView& out) const { run_(out); }

 private:
  TensorSpec spec_;
  Run run_;
};

}  // namespace polyquant
