// QKeras float32 kernels for the avx512 kernel set (compiled with the avx512 flags only).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/fpenv.h"
#include "kernels/registry.h"
#include "kernels/simd/vec_avx512.h"

namespace polyquant::detail::avx512 {
#include "kernels/simd/qkeras_simd-inl.h"
}  // namespace polyquant::detail::avx512
