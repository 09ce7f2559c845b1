// QONNX float32 kernels for the avx2 kernel set (compiled with the avx2 flags only).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/registry.h"
#include "kernels/simd/vec_avx2.h"

namespace polyquant::detail::avx2 {
#include "kernels/simd/qonnx_simd-inl.h"
}  // namespace polyquant::detail::avx2
