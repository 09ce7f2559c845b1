// QKeras float32 kernels for the avx2 kernel set (compiled with the avx2 flags only).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/fpenv.h"
#include "kernels/registry.h"
#include "kernels/simd/vec_avx2.h"

namespace polyquant::detail::avx2 {
#include "kernels/simd/qkeras_simd-inl.h"
}  // namespace polyquant::detail::avx2
