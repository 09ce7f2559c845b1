// AIMET affine float32 kernels for the avx2 kernel set (compiled with its flags only).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/registry.h"
#include "kernels/simd/vec_avx2.h"

namespace polyquant::detail::avx2 {
#include "kernels/simd/affine_simd-inl.h"
}  // namespace polyquant::detail::avx2
