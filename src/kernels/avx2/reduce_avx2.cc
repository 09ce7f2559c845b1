// Grouped-reduction kernels for the avx2 kernel set (compiled with the avx2 flags only).
#include <cfloat>
#include <cstdint>

#include "kernels/registry.h"
#include "kernels/simd/vec_avx2.h"

namespace polyquant::detail::avx2 {
#include "kernels/simd/row_loop-inl.h"
#include "kernels/simd/reduce_simd-inl.h"
}  // namespace polyquant::detail::avx2
