// kernel_cases(op): the cases of every op of the op list, each defined by its family
// (tests/cpp/<family>/kernel_cases.cc).
#include "kernel_cases.h"

namespace polyquant::test {

KernelCases kernel_cases(KernelOp op) {
  switch (op) {
#define POLYQUANT_OP(Enum, name, works, vector) \
  case KernelOp::Enum:                          \
    return kernel_cases_##name();
#include "kernels/ops.inc"
#undef POLYQUANT_OP
  }
  return {};
}

}  // namespace polyquant::test
