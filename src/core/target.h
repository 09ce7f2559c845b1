// Kernel sets are compiled from the same headers with different instruction-set flags. Inline
// functions in those headers live in an inline namespace named after the set, so the linker can
// never substitute an AVX2-compiled copy into generic code (or the reverse).
#pragma once

#ifndef POLYQUANT_TARGET_NAMESPACE
#define POLYQUANT_TARGET_NAMESPACE generic
#endif

// Per-element formulas (the scalar spec of every op, with their rounding and saturation helpers)
// are host and device code: the CUDA kernels include the same headers and compile the same
// functions, so CPU and GPU share one spec instead of a copy. Mark such functions POLYQUANT_HD and
// keep them to what a device can run (no exceptions, no allocation, no C library calls without a
// device overload).
#if defined(__CUDACC__)
#define POLYQUANT_HD __host__ __device__
#else
#define POLYQUANT_HD
#endif
