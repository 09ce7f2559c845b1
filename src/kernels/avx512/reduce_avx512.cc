// Grouped-reduction kernels for the avx512 kernel set (compiled with the avx512 flags only).
#include <cfloat>
#include <cstdint>

#include "kernels/registry.h"
#include "kernels/simd/vec_avx512.h"

namespace polyquant::detail::avx512 {
#include "kernels/simd/row_loop-inl.h"
#include "kernels/simd/reduce_simd-inl.h"
}  // namespace polyquant::detail::avx512
