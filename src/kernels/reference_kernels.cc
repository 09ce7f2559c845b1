// The scalar reference kernels of every op of the op list: ref::<name>_<work> runs its family's
// scalar row, <name>_reference_row<W> (families/<family>/kernels.h, next to the op's formula), in
// the working type W = WorkT<work> (kernels/row.h). For the elementwise ops that row is a loop over
// the op's per-element row, <name>_row_element, which the CUDA backend runs too. Stamped from
// kernels/ops.inc, so an op's scalar kernel is its formula's row and nothing else.
#include "kernels/registry.h"

namespace polyquant::detail::ref {

#define POLYQUANT_DEFINE_REFERENCE_KERNEL(Enum, name, work, W) \
  void name##_##work(const void* params, const RowArgs& a) { name##_reference_row<WorkT<WorkType::W>>(params, a); }
#define POLYQUANT_OP(Enum, name, works, vector) POLYQUANT_WORKS_##works(POLYQUANT_DEFINE_REFERENCE_KERNEL, Enum, name)
#include "kernels/ops.inc"
#undef POLYQUANT_OP
#undef POLYQUANT_DEFINE_REFERENCE_KERNEL

}  // namespace polyquant::detail::ref
