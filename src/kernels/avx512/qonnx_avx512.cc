// QONNX float32 kernels for the avx512 kernel set (compiled with the avx512 flags only).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/registry.h"
#include "kernels/simd/vec_avx512.h"

namespace polyquant::detail::avx512 {
#include "kernels/simd/qonnx_simd-inl.h"
}  // namespace polyquant::detail::avx512
